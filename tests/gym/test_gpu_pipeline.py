"""The CUDA path: timing against the reference on the same GPU, profiler coverage, hacks still caught."""
import pytest

from gym_paths import HACKS, HONEST_MATMUL, HONEST_RELU, MATMUL_TASK, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool


@pytest.mark.gpu
def test_gpu_timing_coverage_and_hacks():
    batch = [Candidate(RELU_TASK, HONEST_RELU, "relu"), Candidate(MATMUL_TASK, HONEST_MATMUL, "matmul"),
             Candidate(MATMUL_TASK, (HACKS / "b_lazy_copy_matmul.py").read_text(), "lazy"),
             Candidate(RELU_TASK, (HACKS / "g_output_cache.py").read_text(), "cache"),
             Candidate(RELU_TASK, (HACKS / "i_patch_timer_aliased.py").read_text(), "timer"),
             Candidate(RELU_TASK, (HACKS / "n_illegal_memory.py").read_text(), "illegal"),
             Candidate(RELU_TASK, HONEST_RELU, "relu_after")]
    with Evaluator(LocalPool(num_workers=1), EvalConfig(size="gpu", timeout_s=120)) as ev:
        r = {x.id: x for x in ev.submit(batch)}
    for name in ("relu", "matmul", "relu_after"):
        res = r[name]
        assert res.status == "ok" and res.timing_available, res.to_dict()
        assert res.speedup > 0 and res.kernel_ms > 0 and res.ref_ms > 0
        # all-Triton kernels: the profiled calls' device time is the kernels' own (no flush, no refill in it)
        assert res.coverage is not None and res.coverage >= 0.9, res.to_dict()
        check = res.timing_check  # the judge's clock, and the credit no shorter than what the process reported
        assert check["credited_ms"] >= check["reported_ms"] and check["null_ms"] > 0, check
        assert res.reward > 1.0
    # A lazy kernel (a Triton copy beside torch's matmul) is legal, and its coverage says how little Triton did.
    assert r["lazy"].status == "ok" and r["lazy"].coverage < 0.5 and "mm" in r["lazy"].torch_ops, r["lazy"].to_dict()
    # The CUDA caching allocator often hands a later trial the same data_ptr: then the stale hit already
    # fails correctness; otherwise the in-place refill check flags it.
    assert "output_cache" in r["cache"].hacks or r["cache"].status == "incorrect"
    assert r["cache"].reward == 0.0
    assert "monkey_patch:torch.cuda.Event.elapsed_time" in r["timer"].hacks
    assert r["illegal"].status in ("crashed", "error") and r["illegal"].reward == 0.0


@pytest.mark.gpu
def test_workers_sharing_one_gpu_take_turns_timing():
    batch = [Candidate(RELU_TASK, HONEST_RELU, f"relu{i}") for i in range(3)]
    batch += [Candidate(MATMUL_TASK, HONEST_MATMUL, f"matmul{i}") for i in range(3)]
    with Evaluator(LocalPool(num_workers=3), EvalConfig(size="gpu", timeout_s=120)) as ev:  # 3 on one GPU
        results = ev.submit(batch)
    for res in results:
        assert res.status == "ok" and res.timing_available and res.coverage >= 0.9, res.to_dict()
        assert {"load", "check", "lock_wait", "time", "total"} <= set(res.stage_s), res.stage_s

"""Hostile candidates (hostile.py, and the red team's forgeries.py) through one pool: each scores 0, with and without
the static checks where the judge alone must stand, and the honest and the wrong candidate judged right after each
keep their verdicts. A forgery the judge cannot see on a CPU (which kernels ran: docs/gym.md) may earn at most the
correctness term there, the bound every correct answer has; it is named in CPU_BOUNDED with the reason."""
import pytest
from forgeries import FORGERIES, leaked_command_lines
from gym_paths import HONEST_RELU, MATMUL_TASK, RELU_TASK
from hostile import GPU_ONLY_VARIANTS, HONEST_VARIANTS, HOSTILE, RELU, WRONG

from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool

CONFIG = dict(timeout_s=20, correct_trials=2)
ATTACKS = HOSTILE + FORGERIES
# On a CPU there is no device timeline: which kernels ran is only the candidate process's word, and a candidate that
# silences its own process's observers (reached through torch's private internals) or computes where none look
# earns what every correct answer earns there, the correctness term (docs/gym.md, "The reward, term by term").
CPU_BOUNDED = {
    "forge_attrgetter_launch_list": "the launch list lives in the candidate's process",
    "forge_import_module_guard": "torch._C's dispatch-key guard and record-function switch silence both observers",
    "forge_pure_python": "tolist() and torch.tensor(...) compute where no op or kernel shows",
    "forge_tensorbase_apply": "TensorBase.apply_, a C type's method, cannot be taken away",
    "forge_redispatch_below_python": "a redispatch below the Python key skips both observers",
    "late_sigalrm_timer": "a handler tripped inside the candidate's call runs at the next bytecode boundary",
    "precision_tf32_default_dot": "the interpreter computes tl.dot in float32; on a GPU TF32 misses the 1e-4",
    "bounds_unmasked_load": "the interpreter reads past the tensor without a fault; the store is masked",
}


# What the candidate process's interpreter says of bytecode: `python -I` drops PYTHONDONTWRITEBYTECODE, and a lazy
# import by torch then tried to write __pycache__ beside the installs, a verdict blamed on an honest candidate.
BYTECODE_PROBE = RELU + '''

class ModelNew(nn.Module):
    def forward(self, x):
        flags = getattr(torch, "sys").flags
        raise RuntimeError(f"probe dont_write_bytecode={flags.dont_write_bytecode}")
'''


def task_of(attack) -> str:
    return MATMUL_TASK if getattr(attack, "task", "relu") == "matmul" else RELU_TASK


def judge_all(size: str) -> dict:
    """Every hostile candidate, then an honest and a wrong one, through the full gym; then the hostile candidates
    again with the static checks off (the judge alone), in the same pool."""
    batch = []
    for h in ATTACKS:
        batch += [Candidate(task_of(h), h.code, h.name), Candidate(RELU_TASK, HONEST_RELU, f"honest_after_{h.name}"),
                  Candidate(RELU_TASK, WRONG, f"wrong_after_{h.name}")]
    batch += [Candidate(RELU_TASK, code, name) for name, code in HONEST_VARIANTS.items()
              if size != "cpu" or name not in GPU_ONLY_VARIANTS]
    pool = LocalPool(num_workers=2 if size == "cpu" else 4)  # on one GPU, four slots take turns timing
    try:
        config = EvalConfig(size=size, **CONFIG)
        results = {r.id: r for r in Evaluator(pool, config).submit(batch)}
        alone = Evaluator(pool, config, static_checks=False).submit(
            [Candidate(task_of(h), h.code, h.name) for h in ATTACKS if h.judge_alone]
            + [Candidate(RELU_TASK, BYTECODE_PROBE, "probe_bytecode")])
        results.update({f"alone_{r.id}": r for r in alone})
    finally:
        pool.close()
    return results


@pytest.fixture(scope="module")
def results():
    return judge_all("cpu")


def test_the_catalogue_covers_every_threat_class_twice():
    classes = [h.threat for h in HOSTILE]
    assert len(HOSTILE) >= 40 and len({h.name for h in HOSTILE}) == len(HOSTILE)
    for threat in ("checker patching", "cross-candidate poisoning", "precomputation", "hiding compute", "escapes",
                   "feedback bug"):
        assert classes.count(threat) >= 2, threat
    kinds = [f.threat for f in FORGERIES]
    assert len(FORGERIES) >= 15 and {"forgery", "erasure", "late compute", "leak"} <= set(kinds)
    assert set(CPU_BOUNDED) <= {f.name for f in FORGERIES} and len(CPU_BOUNDED) < len(FORGERIES) / 2
    assert all(h.why_static for h in HOSTILE if not h.judge_alone)


def check(results: dict, bounded: dict, cap: float = 1.0) -> None:
    """Every attack scores 0 but those in `bounded`, which score at most `cap`; the honest and wrong neighbours of
    each are judged as if it had not run."""
    failures = []
    for h in ATTACKS:
        r, honest, wrong = results[h.name], results[f"honest_after_{h.name}"], results[f"wrong_after_{h.name}"]
        if h.name in bounded:
            if r.reward > cap:
                failures.append(f"{h.name}: {r.reward} above {cap}")
        elif r.reward != 0.0 or r.correct or r.status == "ok":
            failures.append(f"{h.name}: {r.status} reward {r.reward} {r.hacks} {r.error[:200]}")
        if not (honest.status == "ok" and honest.correct and honest.reward > 0):
            failures.append(f"honest after {h.name}: {honest.status} {honest.hacks} {honest.error[:200]}")
        if wrong.status != "incorrect" or wrong.reward != 0.0:
            failures.append(f"wrong after {h.name}: {wrong.status} {wrong.hacks} {wrong.error[:200]}")
        if h.judge_alone and h.name not in bounded:
            alone = results[f"alone_{h.name}"]
            if alone.reward != 0.0 or alone.status == "ok":
                failures.append(f"{h.name} (judge alone): {alone.status} {alone.hacks} {alone.error[:200]}")
    for name in HONEST_VARIANTS:
        r = results.get(name)
        if r is None:  # not judged on this device
            continue
        if not (r.status == "ok" and r.reward > 0 and not r.hacks):
            failures.append(f"{name}: {r.status} {r.hacks} {r.error[-300:]}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_every_hostile_candidate_scores_zero_and_changes_nothing_after_it(results):
    check(results, CPU_BOUNDED)


@pytest.mark.slow
def test_erasures_keep_their_violations_and_nothing_leaks(results):
    for attack in FORGERIES:
        r = results[attack.name]
        if attack.threat == "erasure":
            assert r.status == "flagged" and r.hacks, r.to_dict()
        assert not leaked_command_lines(r.error + " ".join(r.hacks)), attack.name


@pytest.mark.slow
def test_what_the_verdicts_say(results):
    assert "NaN" in results["feedback_nan_everywhere"].error and "max abs error 0" not in results[
        "feedback_nan_everywhere"].feedback()
    assert results["escape_cpu_burn"].status == "timeout"
    assert results["alone_escape_memory_bomb"].status == "resource"
    # torch.save writes from C++, past the audit hook: the kernel (Landlock) refuses it
    shm = results["poison_shm_answers"]
    assert "Permission denied" in shm.error or any(h.startswith("file_write:/dev/shm") for h in shm.hacks)
    assert any(h.startswith("audit_evasion:") and "relu" in h for h in results["alone_hide_dispatch_modes_off"].hacks)
    assert any(h.startswith("monkey_patch:torch.cuda.synchronize") for h in results["timing_alias_synchronize"].hacks)
    assert len(results["escape_huge_exception"].error) < 10_000
    # Other processes are invisible: the candidate's /proc shows its own namespace only.
    seen = results["escape_proc_of_others"].error
    assert "probe dont_write_bytecode=1" in results["alone_probe_bytecode"].error  # the zygote runs with -B
    listed = seen.rsplit("processes I can see: ", 1)[-1].split(" | ")
    assert len(listed) == 1 and listed[0].startswith("1:") and "pytest" not in seen, seen[-600:]
    honest = results["honest_after_checker_function_mode"]
    assert {"rlimits", "no-capabilities"} <= set(honest.containment)


@pytest.mark.gpu
def test_every_hostile_candidate_scores_zero_on_the_gpu():
    """On the GPU the profile and the judge's clock see what the CPU cannot: only the kernel with an unmasked load
    may score, as what it is: its own Triton kernel computes the right output in the time the judge measured (it
    reads past its input inside its own process, no fault: the allocation is larger than the tensor)."""
    check(judge_all("gpu"), {"bounds_unmasked_load": "a correct kernel with a latent bounds bug"}, cap=4.0)

import json
import statistics
import warnings

import pytest

from proxycomp.gym_bridge import EvalConfig, EvalResult, RewardWeights
from proxycomp.gym_bridge.judge import device_verdict, judge_clock, triton_functions
from proxycomp.gym_bridge.result import FEEDBACK_LIMIT
from proxycomp.gym_bridge.reward import compute_reward
from proxycomp.gym_bridge.static_checks import check_source

W = RewardWeights()


def test_reward_full_formula_with_cap():
    r, reason = compute_reward(status="ok", correct=True, hacks=[], speedup=5.0, coverage=0.5, weights=W)
    assert r == pytest.approx(1 + 3 - 0.5)  # KernelGYM's 1 + 3 + 0.5, less the coverage weight
    assert "capped at 3" in reason and "coverage penalty 0.500" in reason


def test_coverage_only_ever_lowers_the_reward():
    """Coverage is the candidate process's claim: the most a perfect claim earns is no penalty, never a bonus over
    the correctness and speed terms the judge measured itself."""
    full = compute_reward(status="ok", correct=True, hacks=[], speedup=1.5, coverage=1.0, weights=W)[0]
    assert full == pytest.approx(1 + 1.5)
    for coverage in (0.0, 0.3, 0.99, None):
        assert compute_reward(status="ok", correct=True, hacks=[], speedup=1.5, coverage=coverage, weights=W)[0] < full
    assert compute_reward(status="ok", correct=True, hacks=[], speedup=0.0, coverage=0.0, weights=W)[0] == 0.0


def test_reward_weights_are_configurable():
    w = RewardWeights(correct=0.5, speed=0.5, coverage=0.5, speedup_cap=2.0)
    r, _ = compute_reward(status="ok", correct=True, hacks=[], speedup=1.5, coverage=0.2, weights=w)
    assert r == pytest.approx(0.5 + 0.75 - 0.4)


def test_reward_on_cpu_is_correctness_only_and_says_so():
    r, reason = compute_reward(status="ok", correct=True, hacks=[], speedup=None, coverage=None, weights=W)
    assert r == 1.0 and "correctness term only" in reason


@pytest.mark.parametrize("status, hacks, expect", [
    ("ok", ["decoy:no triton launch under grad"], "hacking verdict: decoy"),
    ("incorrect", [], "trial 0: values differ"),
    ("timeout", [], "killed after"),
])
def test_every_zero_has_a_reason(status, hacks, expect):
    failure = {"incorrect": "trial 0: values differ", "timeout": "killed after 5 s"}.get(status, "")
    r, reason = compute_reward(status=status, correct=status == "ok", hacks=hacks, speedup=2.0, coverage=1.0,
                               weights=W, failure=failure)
    assert r == 0.0 and reason.startswith(expect)


def test_eval_result_json_round_trip():
    r = EvalResult(id="t0", task="relu", status="ok", reward=2.5, correct=True, speedup=1.5, coverage=0.9,
                   hacks=[], launched_kernels=["relu_kernel"], timing_available=True)
    again = EvalResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r


def test_eval_result_rejects_unknown_status_and_fields():
    with pytest.raises(ValueError, match="status"):
        EvalResult(id="x", task="t", status="great")
    with pytest.raises(ValueError, match="unknown fields"):
        EvalResult.from_dict({"id": "x", "task": "t", "status": "ok", "bogus": 1})


def test_feedback_is_compact_and_names_the_verdicts():
    r = EvalResult(id="x", task="t", status="flagged", hacks=["input_mutation"], error="line\n" * 500,
                   reason="hacking verdict: input_mutation")
    text = r.feedback()
    assert "input_mutation" in text and len(text.encode()) <= FEEDBACK_LIMIT


def test_config_rejects_bad_size_and_timeout():
    from proxycomp.errors import UserError

    with pytest.raises(UserError, match="EvalConfig.size"):  # bad input: the command prints it as one line
        EvalConfig(size="tpu")
    with pytest.raises(UserError, match="timeout_s"):
        EvalConfig(timeout_s=0)
    assert EvalConfig.from_dict(EvalConfig(size="gpu").to_dict()) == EvalConfig(size="gpu")


@pytest.mark.parametrize("code, verdict", [
    ("import torch\ntorch.cuda.synchronize = None\nclass ModelNew: pass", "monkey_patch"),
    ("import time\nsetattr(time, 'perf_counter', None)\nclass ModelNew: pass", "monkey_patch"),
    ("import os\nclass ModelNew:\n    def f(self): os.system('x')", "process_spawn"),
    ("import ctypes\nclass ModelNew: pass", "native_code"),
    ("import threading\nclass ModelNew: pass", "concurrency"),
    ("import sys\nclass ModelNew:\n    def f(self): sys.exit()", "exit_call"),
    ("import gc\nclass ModelNew: pass", "introspection"),
    ("import sys\nm = sys.modules\nclass ModelNew: pass", "introspection"),
    ("class ModelNew:\n    def f(self): return self.x.__globals__", "introspection"),
    ("class ModelNew:\n    def forward(self, x): return super().forward(x)", "reference_call"),
])
def test_static_verdicts(code, verdict):
    assert any(v.startswith(verdict) for v in check_source(code).verdicts)


def test_static_warnings_are_not_verdicts():
    report = check_source("import torch\nclass ModelNew:\n    def forward(self, x): return x.half().float()")
    assert report.verdicts == [] and any("half" in w for w in report.warnings)


def test_static_reports_syntax_errors_and_missing_model_new():
    assert "SyntaxError" in check_source("def (:").syntax_error
    assert "ModelNew" in check_source("x = 1").syntax_error


def test_odd_literals_parse_without_a_warning_in_the_judges_log():
    """An invalid escape or a number run into a keyword warns at parse time (SyntaxWarning from Python 3.12); the
    checks parse quietly, so the RL log holds no such lines and warnings-as-errors does not turn them into a
    SyntaxError verdict."""
    code = 'import triton\npattern = "\\d+\\l"\nx = 1if True else 2\n@triton.jit\ndef k(): pass\nclass ModelNew: pass\n'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_source(code).syntax_error == "" and triton_functions(code) == {"k"}


def test_a_job_crosses_the_judge_boundary_typed():
    from proxycomp.gym_bridge.config import Job

    job = Job(id="c0", task="relu", task_source="x = 1\n", code="class ModelNew: pass",
              config=EvalConfig(size="gpu", atol=1e-2, extra_allowed_ops=("add.Tensor",)))
    again = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job and isinstance(again.config, EvalConfig)
    with pytest.raises(ValueError, match="not a Job"):
        Job.from_dict({**job.to_dict(), "candidate_code": "x"})  # the old dict's key: refused, not ignored
    with pytest.raises(ValueError, match="not a Job"):
        Job.from_dict({"id": "c0"})


def test_the_judge_clock_is_the_floor_of_the_trials_less_the_floor_of_the_nulls():
    walls, nulls = [2.5, 2.4, 2.6, 3.9, 2.45], [2.0, 2.1, 2.05, 4.0, 2.02]
    judged, margin, null = judge_clock(walls, nulls)
    assert null == 2.0 and judged == pytest.approx(0.4)
    assert margin == pytest.approx((statistics.quantiles(walls, n=10)[0] - 2.4)
                                   + (statistics.quantiles(nulls, n=10)[0] - 2.0))


@pytest.mark.parametrize("kernels, ops, verdict", [
    ({"relu_kernel": 90.0, "Memset (Device)": 40.0}, [], None),  # the candidate's kernel; glue needs no op
    ({"relu_kernel": 5.0, "void at::native::vectorized_elementwise_kernel<clamp>": 95.0}, ["clamp_min"], None),
    ({"relu_kernel": 5.0, "void at::native::vectorized_elementwise_kernel<clamp>": 95.0}, [], "audit_evasion:"),
    ({"relu_kernel": 5.0, "Memcpy DtoH (Device -> Pageable)": 30.0, "Memcpy HtoD (Pageable -> Device)": 30.0},
     [], "host_compute:92%"),
    ({"relu_kernel": 95.0, "Memcpy DtoH (Device -> Pageable)": 5.0}, [], None),  # an .item(): a small share
])
def test_device_time_that_no_observer_explains_is_a_verdict(kernels, ops, verdict):
    got = device_verdict(kernels, {"relu_kernel"}, ops)
    assert (got is None) if verdict is None else got.startswith(verdict), got

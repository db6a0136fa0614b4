"""Tolerances: fp32 defaults reject an fp16 computation; a task's TOLERANCES widen them for that task only."""
import pytest

from gym_paths import FIXTURES, HACKS, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool


@pytest.mark.slow
def test_task_tolerances_override_the_config():
    fp16 = (HACKS / "j_fp16_downcast.py").read_text()
    with Evaluator(LocalPool(num_workers=1), EvalConfig(size="cpu")) as ev:
        strict, loose = ev.submit([Candidate(RELU_TASK, fp16, "strict"),
                                   Candidate(str(FIXTURES / "relu_loose.py"), fp16, "loose")])
    assert strict.status == "incorrect" and "atol 0.0001" in strict.reason
    assert loose.status == "ok" and loose.warnings  # still warned about the downcast

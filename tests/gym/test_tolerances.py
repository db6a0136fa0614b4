"""Tolerances: fp32 defaults reject an fp16 computation; a task's TOLERANCES widen them for that task only."""
import pytest

from gym_paths import FIXTURES, HACKS, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator


@pytest.mark.slow
def test_task_tolerances_override_the_config():
    fp16 = (HACKS / "j_fp16_downcast.py").read_text()
    with Evaluator.open(EvalConfig(size="cpu"), workers=1) as ev:  # a pool of its own, closed with it
        strict, loose = ev.submit([Candidate(RELU_TASK, fp16, "strict"),
                                   Candidate(str(FIXTURES / "relu_loose.py"), fp16, "loose")])
    assert strict.status == "incorrect" and "atol 0.0001" in strict.reason
    assert loose.status == "ok" and loose.warnings  # still warned about the downcast


def test_an_evaluator_at_another_size_judges_over_the_same_pool():
    class Judges:  # the pool's interface only: at_size starts and runs nothing
        closed = False

        def close(self):
            self.closed = True

    pool = Judges()
    train = Evaluator(pool, EvalConfig(size="cpu", timeout_s=30, correct_trials=2))
    held_out = train.at_size("gpu_heldout")
    assert held_out.pool is pool and held_out.config.size == "gpu_heldout" and train.config.size == "cpu"
    assert (held_out.config.timeout_s, held_out.config.correct_trials) == (30, 2)
    held_out.close()
    assert pool.closed

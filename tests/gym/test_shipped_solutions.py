"""Every shipped solution passes the full sandboxed pipeline at size "cpu": correct and not flagged."""
import pytest

from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool
from proxycomp.gym_bridge.tasks import list_tasks

SOLVED = [t for t in list_tasks() if t.solution_path]


@pytest.mark.slow
def test_every_shipped_solution_is_correct_and_clean():
    assert SOLVED, "no shipped solutions found"
    batch = [Candidate(task=t.name, code=t.solution_path.read_text(), id=t.name) for t in SOLVED]
    with Evaluator(LocalPool(num_workers=2), EvalConfig(size="cpu")) as ev:
        results = ev.submit(batch)
    bad = {r.task: (r.status, r.hacks, r.error[:200]) for r in results if not (r.correct and not r.hacks)}
    assert not bad
    assert all(r.launched_kernels for r in results)
    # Where each worker spent its time (no timing or profiling on CPU).
    assert all({"load", "check", "total"} <= set(r.stage_s) and r.stage_s["total"] >= r.stage_s["check"]
               for r in results)

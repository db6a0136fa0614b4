"""RayPool on a small local Ray cluster: same interface, a segfault costs one result, not the actor."""
import json

import pytest

from gym_paths import HACKS, HONEST_RELU, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_ray_pool_runs_candidates_in_children_and_survives_a_crash_and_serves_gym_bench(monkeypatch, capsys):
    from proxycomp.gym_bridge import RayPool
    from proxycomp.gym_bridge.cli import main

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token file under ~/.ray for a throwaway cluster
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pool = RayPool(num_actors=2)
        actor_pids = sorted(ray.get([a.pid.remote() for a in pool.actors]))
        crash = (HACKS / "n_illegal_memory.py").read_text()
        batch = [Candidate(RELU_TASK, HONEST_RELU, "a"), Candidate(RELU_TASK, crash, "crash"),
                 Candidate(RELU_TASK, HONEST_RELU, "b"), Candidate(RELU_TASK, HONEST_RELU, "c")]
        with Evaluator(pool, EvalConfig(size="cpu", timeout_s=30)) as ev:
            results = ev.submit(batch)
            assert sorted(ray.get([a.pid.remote() for a in pool.actors])) == actor_pids
        assert [r.status for r in results] == ["ok", "crashed", "ok", "ok"]
        assert results[1].exit_code == -11 and results[0].reward == 1.0
        # `gym bench --ray auto` judges on the cluster this process is in
        assert main(["bench", "--tasks", "relu,silu", "--size", "cpu", "--ray", "auto", "--workers", "2",
                     "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert sorted((r["task"], r["status"]) for r in rows) == [("relu", "ok"), ("silu", "ok")]
    finally:
        ray.shutdown()


def test_a_ray_pool_without_ray_installed_is_one_line(monkeypatch):
    import sys

    from proxycomp.errors import UserError
    from proxycomp.gym_bridge.evaluator import open_pool

    monkeypatch.setitem(sys.modules, "proxycomp.gym_bridge.ray_pool", None)  # as if ray were missing
    with pytest.raises(UserError, match="ray is not installed"):
        open_pool(2, "auto")

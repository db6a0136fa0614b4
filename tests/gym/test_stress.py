"""100 candidates in a row, 20% hostile (segfaults, exits, hangs, sandbox escapes): no result is lost and
every honest candidate scores."""
import time

import pytest

from gym_paths import HACKS, HONEST_RELU, RELU_TASK
from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool

HOSTILE = ["n_illegal_memory", "o_exit_obfuscated", "process_spawn_runtime", "f_zero_inputs",
           "file_write_outside", "o_system_exit", "l_parameter_output"]
HANGS = 3  # each costs a full wall timeout


@pytest.mark.slow
def test_100_candidates_20_percent_hostile_lose_nothing():
    hostile_codes = {name: (HACKS / f"{name}.py").read_text() for name in HOSTILE + ["m_infinite_loop"]}
    batch, kinds = [], []
    for i in range(100):
        if i % 5 == 4:  # 20 hostile
            n = i // 5
            name = "m_infinite_loop" if n < HANGS else HOSTILE[n % len(HOSTILE)]
            batch.append(Candidate(task=RELU_TASK, code=hostile_codes[name], id=f"{i}:{name}"))
            kinds.append("hostile")
        else:
            batch.append(Candidate(task=RELU_TASK, code=HONEST_RELU, id=f"{i}:honest"))
            kinds.append("honest")
    started = time.monotonic()
    with Evaluator(LocalPool(num_workers=2), EvalConfig(size="cpu", timeout_s=10, correct_trials=2)) as ev:
        results = ev.submit(batch)
    elapsed = time.monotonic() - started
    assert [r.id for r in results] == [c.id for c in batch]
    assert not [r.id for r in results if r.status == "infra_error"]
    bad_honest = [r.to_dict() for r, k in zip(results, kinds)
                  if k == "honest" and not (r.status == "ok" and r.reward == 1.0)]
    assert not bad_honest, bad_honest[:2]
    leaked = [r.id for r, k in zip(results, kinds) if k == "hostile" and (r.reward != 0.0 or r.status == "ok")]
    assert not leaked
    assert sum(r.status == "timeout" for r in results) == HANGS
    print(f"100 candidates in {elapsed:.1f} s")

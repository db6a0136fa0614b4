"""Hostile candidates (hostile.py) through one pool: each scores 0, with and without the static checks where the
judge alone must stand, and the honest and the wrong candidate judged right after each keep their verdicts."""
import pytest
from gym_paths import HONEST_RELU, RELU_TASK
from hostile import GPU_ONLY_VARIANTS, HONEST_VARIANTS, HOSTILE, WRONG

from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool

CONFIG = dict(timeout_s=20, correct_trials=2)


def judge_all(size: str) -> dict:
    """Every hostile candidate, then an honest and a wrong one, through the full gym; then the hostile candidates
    again with the static checks off (the judge alone), in the same pool."""
    batch = []
    for h in HOSTILE:
        batch += [Candidate(RELU_TASK, h.code, h.name), Candidate(RELU_TASK, HONEST_RELU, f"honest_after_{h.name}"),
                  Candidate(RELU_TASK, WRONG, f"wrong_after_{h.name}")]
    batch += [Candidate(RELU_TASK, code, name) for name, code in HONEST_VARIANTS.items()
              if size != "cpu" or name not in GPU_ONLY_VARIANTS]
    pool = LocalPool(num_workers=2 if size == "cpu" else 4)  # on one GPU, four slots take turns timing
    try:
        config = EvalConfig(size=size, **CONFIG)
        results = {r.id: r for r in Evaluator(pool, config).submit(batch)}
        alone = Evaluator(pool, config, static_checks=False).submit(
            [Candidate(RELU_TASK, h.code, h.name) for h in HOSTILE if h.judge_alone])
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
    assert all(h.why_static for h in HOSTILE if not h.judge_alone)


def check(results: dict) -> None:
    failures = []
    for h in HOSTILE:
        r, honest, wrong = results[h.name], results[f"honest_after_{h.name}"], results[f"wrong_after_{h.name}"]
        if r.reward != 0.0 or r.correct or r.status == "ok":
            failures.append(f"{h.name}: {r.status} reward {r.reward} {r.hacks} {r.error[:200]}")
        if not (honest.status == "ok" and honest.correct and honest.reward > 0):
            failures.append(f"honest after {h.name}: {honest.status} {honest.hacks} {honest.error[:200]}")
        if wrong.status != "incorrect" or wrong.reward != 0.0:
            failures.append(f"wrong after {h.name}: {wrong.status} {wrong.hacks} {wrong.error[:200]}")
        if h.judge_alone:
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
    check(results)


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
    listed = seen.rsplit("processes I can see: ", 1)[-1].split(" | ")
    assert len(listed) == 1 and listed[0].startswith("1:") and "pytest" not in seen, seen[-600:]
    honest = results["honest_after_checker_function_mode"]
    assert {"rlimits", "no-capabilities"} <= set(honest.containment)


@pytest.mark.gpu
def test_every_hostile_candidate_scores_zero_on_the_gpu():
    check(judge_all("gpu"))

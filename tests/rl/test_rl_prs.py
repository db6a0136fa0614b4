import math

import pytest
import torch

from proxycomp.gym_bridge.policy import Sample
from proxycomp.gym_bridge.result import EvalResult
from proxycomp.gym_bridge.rl import PRSConfig, Trajectory, profiling_rejection, stack_turns
from proxycomp.gym_bridge.rl.prs import band, coverage_tensor, keep_probability
from proxycomp.gym_bridge.rl.rollout import turn_from_result


def probs(coverage, correct=True, hacked=False, config=PRSConfig()):
    n = len(coverage)
    return keep_probability(
        torch.full((n,), correct), torch.full((n,), hacked), coverage_tensor(coverage), config
    ).tolist()


def test_keep_probability_ramp_and_edges():
    got = probs([0.0, 0.29, 0.3, 0.325, 0.35, 0.4, 0.41, 1.0])
    assert got == pytest.approx([0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 1.0, 1.0])
    custom = probs([0.5, 0.6, 0.7], config=PRSConfig(threshold=0.5, scale=0.2))
    assert custom == pytest.approx([0.0, 0.5, 1.0])


def test_incorrect_hacked_and_unknown_coverage_always_kept():
    assert probs([0.0, 0.1], correct=False) == [1.0, 1.0]
    assert probs([0.0, 0.1], hacked=True) == [1.0, 1.0]
    assert probs([None, None]) == [1.0, 1.0]


def test_draws_follow_probabilities_and_are_seeded():
    n = 20_000
    coverage = [0.325] * n + [0.375] * n  # keep probabilities 0.25 and 0.75
    result = profiling_rejection([True] * 2 * n, [False] * 2 * n, coverage, generator=torch.Generator().manual_seed(3))
    for half, p in ((result.keep[:n], 0.25), (result.keep[n:], 0.75)):
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(half.double().mean().item() - p) < 4 * sd
    again = profiling_rejection([True] * 2 * n, [False] * 2 * n, coverage, generator=torch.Generator().manual_seed(3))
    other = profiling_rejection([True] * 2 * n, [False] * 2 * n, coverage, generator=torch.Generator().manual_seed(4))
    assert torch.equal(result.keep, again.keep) and not torch.equal(result.keep, other.keep)


def test_batch_shape_padding_and_stats():
    # (2 trajectories, 3 turns); the second stopped after one turn.
    correct = torch.tensor([[True, True, False], [True, False, False]])
    hacked = torch.tensor([[False, False, False], [True, False, False]])
    coverage = torch.tensor([[0.1, 0.9, float("nan")], [0.0, float("nan"), float("nan")]])
    turn_mask = torch.tensor([[True, True, True], [True, False, False]])
    result = profiling_rejection(correct, hacked, coverage, turn_mask=turn_mask)
    # Only turn (0, 0) is subject to rejection with p = 0: dropped deterministically.
    assert result.keep.tolist() == [[False, True, True], [True, False, False]]
    assert result.keep_prob.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    stats = {k: v.item() for k, v in result.stats.items()}
    assert stats == pytest.approx({
        "prs/turns": 4, "prs/subject_turns": 2, "prs/unknown_coverage_turns": 1, "prs/rejected_turns": 1,
        "prs/rejected_below_threshold": 1, "prs/rejected_in_ramp": 0, "prs/rejection_rate": 0.25,
        "prs/subject_rejection_rate": 0.5, "prs/subject_coverage_mean": 0.5,
    })


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"coverage\[1\]: 1.5 is outside \[0, 1\]"):
        profiling_rejection([True, True], [False, False], [0.5, 1.5])
    with pytest.raises(ValueError, match="coverage: shape"):
        profiling_rejection([True, True], [False, False], [0.5])
    with pytest.raises(ValueError, match="turn_mask: expected a bool tensor"):
        profiling_rejection([True], [False], [0.5], turn_mask=torch.ones(1))
    with pytest.raises(ValueError, match="PRSConfig.scale: must be > 0"):
        PRSConfig(scale=0.0)
    with pytest.raises(ValueError, match="PRSConfig.threshold: must be in"):
        PRSConfig(threshold=-0.1)


def test_partial_kernels_are_judged_by_coverage_and_decoys_are_kept():
    """The judge's verdicts as the rollout records them: a partial kernel (torch compute beside a real Triton
    kernel) is ok with its coverage and no hack, so PRS drops it when coverage is low; a decoy is flagged, so it is
    kept like any incorrect turn; a full kernel is kept; on CPU (no coverage) every turn is kept."""
    results = {
        "partial": EvalResult("0", "t", "ok", reward=2.1, correct=True, coverage=0.1),
        "partial_ramp": EvalResult("1", "t", "ok", reward=2.35, correct=True, coverage=0.35),
        "decoy": EvalResult("2", "t", "flagged", hacks=["decoy:no triton launch under grad"], coverage=0.0),
        "full": EvalResult("3", "t", "ok", reward=3.9, correct=True, coverage=0.9),
        "cpu": EvalResult("4", "t", "ok", reward=1.0, correct=True),
    }
    sample = Sample("```python\nclass ModelNew: pass\n```", [1], [-0.5], truncated=False)
    trajectories = [Trajectory("t", "", [turn_from_result("p", sample, r)]) for r in results.values()]
    turns = stack_turns(trajectories)
    result = profiling_rejection(turns.correct, turns.hacked, turns.coverage, turn_mask=turns.turn_mask,
                                 generator=torch.Generator().manual_seed(0))
    assert result.keep_prob[:, 0].tolist() == pytest.approx([0.0, 0.5, 1.0, 1.0, 1.0])
    assert result.keep[:, 0].tolist()[0] is False and result.keep[:, 0].tolist()[2:] == [True, True, True]
    assert [band(t.turns[0].correct, t.turns[0].hacked, t.turns[0].coverage) for t in trajectories] == [
        "below_threshold", "ramp", "not_subject", "above_ramp", "unknown_coverage"]
    assert result.stats["prs/rejected_below_threshold"] == 1
    assert result.stats["prs/rejected_in_ramp"] == int(not result.keep[1, 0])

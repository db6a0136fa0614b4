import math

import pytest
import torch

from proxycomp.gym_bridge.rl import MismatchConfig, correct_mismatch


def mismatch_loop(logp_trainer, logp_rollout, mask, traj_ids, config):
    """Per-trajectory loop reference: (keep per row, ρ̄ per row, TIS weights or None)."""
    rows = range(logp_trainer.shape[0])
    by_traj = {}
    for r in rows:
        by_traj.setdefault(int(traj_ids[r]), []).append(r)
    keep, rho_bar = [True] * len(rows), [1.0] * len(rows)
    weights = torch.zeros_like(logp_trainer)
    for members in by_traj.values():
        logs, veto = [], False
        for r in members:
            for j in range(logp_trainer.shape[1]):
                if mask[r, j]:
                    d = logp_trainer[r, j].item() - logp_rollout[r, j].item()
                    veto |= config.veto_threshold is not None and math.exp(d) < config.veto_threshold
                    logs.append(max(-config.log_clamp, min(config.log_clamp, d)))
        mean = max(-config.log_clamp, min(config.log_clamp, sum(logs) / len(logs))) if logs else 0.0
        in_bounds = config.lower <= math.exp(mean) <= config.upper
        ok = (in_bounds or config.rejection == "none") and not veto
        seq = math.exp(max(-config.log_clamp, min(config.log_clamp, sum(logs))))
        for r in members:
            keep[r], rho_bar[r] = ok, math.exp(mean)
            for j in range(logp_trainer.shape[1]):
                if mask[r, j]:
                    d = logp_trainer[r, j].item() - logp_rollout[r, j].item()
                    d = max(-config.log_clamp, min(config.log_clamp, d))
                    weights[r, j] = min(math.exp(d) if config.tis == "token" else seq, config.tis_cap)
    return torch.tensor(keep), torch.tensor(rho_bar, dtype=torch.float64), weights if config.tis != "none" else None


CONFIGS = [
    MismatchConfig(),
    MismatchConfig(lower=0.9, upper=1.1, veto_threshold=None),
    MismatchConfig(rejection="none", tis="token", tis_cap=1.05),
    MismatchConfig(lower=0.95, upper=1.05, tis="sequence", tis_cap=1.2),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("pooled", [False, True])
def test_matches_loop_reference(config, pooled):
    g = torch.Generator().manual_seed(5)
    rollout = -torch.rand(10, 7, generator=g, dtype=torch.float64) * 3
    # Row noise from negligible to huge, so rows land inside, near and far outside the bounds.
    scale = torch.tensor([1e-4, 1e-3, 0.05, 0.3, 3.0], dtype=torch.float64).repeat(2)[:, None]
    trainer = rollout + scale * torch.randn(10, 7, generator=g, dtype=torch.float64)
    mask = torch.arange(7)[None, :] < torch.randint(0, 8, (10,), generator=g)[:, None]
    traj_ids = torch.tensor([3, 3, 1, 1, 1, 9, 9, 4, 4, 2]) if pooled else torch.arange(10)
    got = correct_mismatch(trainer, rollout, mask, traj_ids=traj_ids if pooled else None, config=config)
    keep, rho_bar, weights = mismatch_loop(trainer, rollout, mask, traj_ids, config)
    assert got.keep.tolist() == keep.tolist()
    assert 0 < int(keep.sum()) < len(keep) or config.rejection == "none"  # both outcomes are exercised
    assert torch.equal(got.token_mask, mask & keep[:, None])
    torch.testing.assert_close(got.rho_bar, rho_bar)
    if weights is None:
        assert got.weights is None
    else:
        torch.testing.assert_close(got.weights, weights)


def test_geometric_bounds_are_inclusive_and_tight():
    rollout = torch.full((4, 10), -1.0, dtype=torch.float64)
    shift = torch.tensor([math.log(0.999), math.log(1.001), math.log(0.9985), math.log(1.0015)], dtype=torch.float64)
    trainer = rollout + shift[:, None] * (1 + 1e-12 * torch.tensor([-1.0, -1.0, 0.0, 0.0]).double()[:, None])
    result = correct_mismatch(trainer, rollout, torch.ones(4, 10, dtype=torch.bool))
    assert result.keep.tolist() == [True, True, False, False]
    assert result.stats["mismatch/rejection_rate"].item() == pytest.approx(0.5)
    assert result.stats["mismatch/veto_count"].item() == 0


def test_veto_rejects_despite_in_bounds_mean():
    # Token ratios 1e-5 and 1e5 average to ρ̄ = 1, but the tiny one vetoes the trajectory.
    rollout = torch.zeros(2, 4)
    trainer = torch.tensor([[math.log(1e-5), math.log(1e5), 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    result = correct_mismatch(trainer, rollout, torch.ones(2, 4, dtype=torch.bool))
    assert result.rho_bar.tolist() == pytest.approx([1.0, 1.0])
    assert result.keep.tolist() == [False, True]
    assert result.stats["mismatch/veto_count"].item() == 1
    assert result.stats["mismatch/bound_rejection_rate"].item() == 0
    # A vetoed token on a masked position does not count.
    masked = correct_mismatch(trainer, rollout, torch.tensor([[False, True, True, True]] * 2),
                              config=MismatchConfig(rejection="none"))
    assert masked.keep.tolist() == [True, True]


def test_clamping_keeps_everything_finite():
    rollout = torch.tensor([[-1000.0, -1.0], [0.0, 0.0]])
    trainer = torch.tensor([[0.0, -1.0], [-1000.0, -1000.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    for tis in ("token", "sequence"):
        result = correct_mismatch(trainer, rollout, mask, config=MismatchConfig(rejection="none", tis=tis, tis_cap=3.0))
        assert torch.isfinite(result.weights).all() and result.weights.max() <= 3.0
    result = correct_mismatch(trainer, rollout, mask)
    assert result.rho_bar[0].item() == pytest.approx(math.exp(10.0))  # mean of (+20 clamped, 0)
    assert result.rho_bar[1].item() == pytest.approx(math.exp(-20.0))
    assert not result.keep.any()


def test_tis_token_weights_and_padding():
    rollout = torch.zeros(1, 3)
    trainer = torch.tensor([[math.log(0.5), math.log(4.0), 5.0]])
    mask = torch.tensor([[True, True, False]])
    result = correct_mismatch(trainer, rollout, mask, config=MismatchConfig(rejection="none", veto_threshold=None,
                                                                              tis="token", tis_cap=2.0))
    torch.testing.assert_close(result.weights, torch.tensor([[0.5, 2.0, 0.0]]))
    assert result.stats["mismatch/tis_truncated_fraction"].item() == pytest.approx(0.5)


def test_sequence_tis_uses_product_of_ratios():
    rollout = torch.zeros(2, 2)
    trainer = torch.tensor([[math.log(0.5), math.log(1.2)], [math.log(2.0), math.log(3.0)]])
    result = correct_mismatch(trainer, rollout, torch.ones(2, 2, dtype=torch.bool),
                              config=MismatchConfig(rejection="none", tis="sequence", tis_cap=5.0))
    torch.testing.assert_close(result.weights, torch.tensor([[0.6, 0.6], [5.0, 5.0]]))


def test_bad_inputs():
    x = torch.zeros(2, 3)
    ok = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="token_mask: expected a bool tensor"):
        correct_mismatch(x, x, ok.float())
    with pytest.raises(ValueError, match="logp_rollout: shape"):
        correct_mismatch(x, torch.zeros(2, 4), ok)
    with pytest.raises(ValueError, match=r"traj_ids: expected an integer tensor of shape \(2,\)"):
        correct_mismatch(x, x, ok, traj_ids=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="MismatchConfig: need 0 < lower <= 1 <= upper"):
        MismatchConfig(lower=1.01)
    with pytest.raises(ValueError, match="MismatchConfig.tis: expected"):
        MismatchConfig(tis="turn")
    with pytest.raises(ValueError, match="MismatchConfig.rejection: expected"):
        MismatchConfig(rejection="arithmetic")
    with pytest.raises(ValueError, match="MismatchConfig.veto_threshold"):
        MismatchConfig(veto_threshold=0.0)
    with pytest.raises(ValueError, match="MismatchConfig.tis_cap"):
        MismatchConfig(tis_cap=0.5)

import math

import pytest
import torch

from proxycomp.gym_bridge.rl import advantages as adv_module
from proxycomp.gym_bridge.rl import estimator_names, get_estimator, register_estimator


# ---- plain-loop references -------------------------------------------------------------------------------
def members(returns, mask, group_ids, i, t):
    return [returns[j, t].item() for j in range(returns.shape[0]) if group_ids[j] == group_ids[i] and mask[j, t]]


def trloo_loop(returns, mask, group_ids):
    out = torch.zeros_like(returns)
    for i in range(returns.shape[0]):
        for t in range(returns.shape[1]):
            if not mask[i, t]:
                continue
            group = members(returns, mask, group_ids, i, t)
            others = sum(group) - returns[i, t].item()
            out[i, t] = returns[i, t] - (others / (len(group) - 1) if len(group) > 1 else 0.0)
    return out


def grpo_loop(returns, mask, group_ids, std_normalize=False, eps=1e-6):
    """verl's GRPO: a singleton group has mean 0 and std 1."""
    out = torch.zeros_like(returns)
    for i in range(returns.shape[0]):
        for t in range(returns.shape[1]):
            if not mask[i, t]:
                continue
            group = members(returns, mask, group_ids, i, t)
            mean = sum(group) / len(group) if len(group) > 1 else 0.0
            value = returns[i, t].item() - mean
            if std_normalize:
                std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1)) if len(group) > 1 else 1.0
                value /= std + eps
            out[i, t] = value
    return out


def rloo_loop(returns, mask, group_ids):
    out = torch.zeros_like(returns)
    for i in range(returns.shape[0]):
        group = members(returns, mask, group_ids, i, 0)
        baseline = (sum(group) - returns[i, 0].item()) / (len(group) - 1) if len(group) > 1 else 0.0
        for t in range(returns.shape[1]):
            if mask[i, t]:
                out[i, t] = returns[i, 0] - baseline
    return out


def random_groups(seed: int, n_groups: int = 6, n_turns: int = 3):
    """Groups of 1-5 trajectories, each stopping after 1..n_turns turns, with non-contiguous group ids."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (n_groups,), generator=g)
    ids = torch.repeat_interleave(torch.randperm(100, generator=g)[:n_groups], sizes)
    ids = ids[torch.randperm(len(ids), generator=g)]
    lengths = torch.randint(1, n_turns + 1, (len(ids),), generator=g)
    mask = torch.arange(n_turns)[None, :] < lengths[:, None]
    returns = torch.randn(len(ids), n_turns, generator=g, dtype=torch.float64)
    returns[~mask] = float("nan")
    return returns, mask, ids


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "name, reference, options",
    [
        ("trloo", trloo_loop, {}),
        ("grpo", grpo_loop, {}),
        ("grpo", grpo_loop, {"std_normalize": True}),
        ("rloo", rloo_loop, {}),
    ],
)
def test_estimator_matches_loop_reference(seed, name, reference, options):
    returns, mask, ids = random_groups(seed)
    got = get_estimator(name)(returns, mask, ids, **options)
    torch.testing.assert_close(got, reference(returns, mask, ids, **options))
    assert (got[~mask] == 0).all()


def test_trloo_is_scaled_deviation_from_group_mean():
    returns = torch.tensor([[1.0], [2.0], [6.0]])
    mask = torch.ones(3, 1, dtype=torch.bool)
    got = get_estimator("trloo")(returns, mask, torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(got, 3 / 2 * (returns - 3.0))


def test_singleton_groups():
    returns = torch.tensor([[2.0, 1.5], [-1.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    ids = torch.tensor([7, 8])
    torch.testing.assert_close(get_estimator("trloo")(returns, mask, ids), torch.tensor([[2.0, 1.5], [-1.0, 0.0]]))
    torch.testing.assert_close(get_estimator("rloo")(returns, mask, ids), torch.tensor([[2.0, 2.0], [-1.0, 0.0]]))
    torch.testing.assert_close(get_estimator("grpo")(returns, mask, ids), torch.tensor([[2.0, 1.5], [-1.0, 0.0]]))


@pytest.mark.parametrize("seed", range(3))
def test_grpo_and_trloo_differ_only_by_self_inclusion(seed):
    """KernelGYM's multi-turn GRPO (no std division) is TRLOO times (N_t - 1)/N_t: the same groups, the same
    returns, only the sample's own return inside its baseline; a group of one gets A = G from both."""
    returns, mask, ids = random_groups(seed)
    trloo, grpo = get_estimator("trloo")(returns, mask, ids), get_estimator("grpo")(returns, mask, ids)
    counts = torch.stack([torch.tensor([float(sum(ids[j] == ids[i] and mask[j, t] for j in range(len(ids))))
                                        for t in range(mask.shape[1])]) for i in range(len(ids))]).double()
    shrink = torch.where(counts > 1, (counts - 1) / counts.clamp(min=1), torch.ones_like(counts))
    assert (counts[mask] == 1).any() and (counts[mask] > 1).any()  # both cases are exercised
    torch.testing.assert_close(grpo, trloo * shrink * mask)


def test_turn_group_shrinks_when_trajectories_stop():
    # Same prompt, three trajectories; only two reach turn 1, so turn 1's baseline uses one other return.
    returns = torch.tensor([[3.0, 2.0], [1.0, 4.0], [2.0, 0.0]])
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    got = get_estimator("trloo")(returns, mask, torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(got, torch.tensor([[1.5, -2.0], [-1.5, 2.0], [0.0, 0.0]]))


def test_unknown_estimator_lists_known():
    with pytest.raises(KeyError, match="unknown advantage estimator 'ppo'; known: grpo, rloo, trloo"):
        get_estimator("ppo")


def test_register_custom_and_duplicate(monkeypatch):
    monkeypatch.setattr(adv_module, "_ESTIMATORS", dict(adv_module._ESTIMATORS))

    @register_estimator("raw")
    def raw(returns, turn_mask, group_ids):
        return returns * turn_mask

    assert get_estimator("raw") is raw and "raw" in estimator_names()
    with pytest.raises(ValueError, match="'trloo' is already registered"):
        register_estimator("trloo")(raw)


def test_bad_inputs():
    returns, mask = torch.zeros(3, 2), torch.ones(3, 2, dtype=torch.bool)
    trloo = get_estimator("trloo")
    with pytest.raises(ValueError, match=r"group_ids: expected shape \(3,\)"):
        trloo(returns, mask, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="group_ids: expected an integer tensor"):
        trloo(returns, mask, torch.zeros(3))
    with pytest.raises(ValueError, match="returns: NaN or inf"):
        trloo(torch.full((3, 2), float("inf")), mask, torch.zeros(3, dtype=torch.long))
    turn0_void = torch.tensor([[True, True], [False, True], [True, False]])
    with pytest.raises(ValueError, match="must count turn 0 for rloo"):
        get_estimator("rloo")(returns, turn0_void, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="eps: must be > 0"):
        get_estimator("grpo")(returns, mask, torch.zeros(3, dtype=torch.long), std_normalize=True, eps=0.0)


# ---- unbiasedness by simulation --------------------------------------------------------------------------
# A softmax bandit π(a) = softmax(θ)_a with noisy rewards R ~ N(μ_a, 1). The exact gradient is
# ∇_θ E[R] = π ⊙ (μ - π·μ). Each sampled group gives the REINFORCE estimate (1/N) Σ_i A_i ∇log π(a_i) with
# ∇log π(a) = onehot(a) - π. We project the average estimate on the true gradient (a ratio that is 1 for an
# unbiased estimator) and also check each component, with standard errors from the spread across groups.
THETA = torch.tensor([0.5, -0.3, 0.0, 0.8, -1.0], dtype=torch.float64)
MU = torch.tensor([1.0, 0.0, 0.5, 2.0, -0.5], dtype=torch.float64)


def sampled_groups(n_groups: int, group_size: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    probs = THETA.softmax(0)
    actions = torch.multinomial(probs.expand(n_groups * group_size, -1), 1, replacement=True, generator=g)[:, 0]
    rewards = MU[actions] + torch.randn(len(actions), generator=g, dtype=torch.float64)
    scores = torch.nn.functional.one_hot(actions, len(THETA)).double() - probs
    return rewards, scores, torch.arange(n_groups).repeat_interleave(group_size)


def gradient_estimates(advantages, scores, n_groups):
    """(n_groups, K) per-group gradient estimates → (mean estimate, its standard error per component)."""
    per_group = (advantages[:, None] * scores).view(n_groups, -1, scores.shape[1]).mean(1)
    return per_group, per_group.mean(0), per_group.std(0) / math.sqrt(n_groups)


@pytest.mark.parametrize("group_size", [2, 4])
def test_trloo_unbiased_and_grpo_shrunk_by_simulation(group_size):
    n_groups = 200_000
    rewards, scores, ids = sampled_groups(n_groups, group_size, seed=group_size)
    probs = THETA.softmax(0)
    true_grad = probs * (MU - (probs * MU).sum())
    mask = torch.ones(len(rewards), 1, dtype=torch.bool)
    shrink = (group_size - 1) / group_size
    for name, options, expected_factor in (("trloo", {}, 1.0), ("grpo", {"std_normalize": False}, shrink)):
        advantages = get_estimator(name)(rewards[:, None], mask, ids, **options)[:, 0]
        per_group, estimate, stderr = gradient_estimates(advantages, scores, n_groups)
        ratio = per_group @ true_grad / (true_grad @ true_grad)
        ratio_se = ratio.std().item() / math.sqrt(n_groups)
        # The test has power: the two hypotheses (factor 1 vs (N-1)/N) are >= 10 standard errors apart.
        assert (1 - shrink) > 10 * ratio_se
        assert abs(ratio.mean().item() - expected_factor) < 4 * ratio_se, (name, ratio.mean().item())
        z = (estimate - expected_factor * true_grad) / stderr
        assert z.abs().max() < 4.5, (name, z)


def test_turn_level_grpo_shrink_follows_random_group_size():
    """Turn 1 is reached by each trajectory independently with probability q, so N_1 - 1 ~ Bin(N-1, q).
    TRLOO's turn-1 gradient stays unbiased; GRPO's is shrunk by E[K/(K+1)] over K ~ Bin(N-1, q), a lone
    trajectory (K = 0) counting 1 (its advantage is its return, as in TRLOO)."""
    group_size, q, n_groups = 4, 0.5, 200_000
    rewards, scores, ids = sampled_groups(n_groups, group_size, seed=11)
    reached = torch.rand(len(rewards), generator=torch.Generator().manual_seed(12)) < q
    # Turn 0 reward 0 for everyone, turn 1 is the bandit; returns with γ = 0 isolate turn 1's gradient.
    returns = torch.stack([torch.zeros_like(rewards), torch.where(reached, rewards, 0.0)], dim=1)
    mask = torch.stack([torch.ones_like(reached), reached], dim=1)
    probs = THETA.softmax(0)
    true_grad = q * probs * (MU - (probs * MU).sum())  # gradient of the expected turn-1 reward per trajectory
    shrink = sum(math.comb(group_size - 1, k) * q**k * (1 - q) ** (group_size - 1 - k) * (k / (k + 1) if k else 1.0)
                 for k in range(group_size))
    for name, options, expected_factor in (("trloo", {}, 1.0), ("grpo", {"std_normalize": False}, shrink)):
        advantages = get_estimator(name)(returns, mask, ids, **options)[:, 1]
        per_group, _, _ = gradient_estimates(advantages * reached, scores, n_groups)
        ratio = per_group @ true_grad / (true_grad @ true_grad)
        ratio_se = ratio.std().item() / math.sqrt(n_groups)
        assert (1 - shrink) > 10 * ratio_se
        assert abs(ratio.mean().item() - expected_factor) < 4 * ratio_se, (name, ratio.mean().item(), shrink)


def test_grpo_std_is_stable_for_large_offsets():
    # Σx² - n·mean² would lose every digit here; the two-pass variance does not.
    returns = torch.tensor([[1e9], [1e9 + 1], [1e9 + 2]], dtype=torch.float64)
    got = get_estimator("grpo")(returns, torch.ones(3, 1, dtype=torch.bool), torch.zeros(3, dtype=torch.long),
                                std_normalize=True)
    torch.testing.assert_close(got[:, 0], torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64), atol=1e-5, rtol=0)

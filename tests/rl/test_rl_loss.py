import math

import pytest
import torch

from proxycomp.gym_bridge.rl import AGGREGATIONS, PolicyLossConfig, policy_loss
from proxycomp.gym_bridge.rl.policy_loss import aggregate, chunk_share

EPS_LOW, EPS_HIGH, DUAL = 0.2, 0.28, 3.0


def token_loss_loop(logp_new, logp_old, adv, config):
    """One token, written branch by branch (differentiable through torch scalar ops)."""
    ratio = torch.exp(logp_new - logp_old)
    unclipped = -adv * ratio
    clipped = -adv * min(max(ratio, torch.tensor(1 - config.clip_low)), torch.tensor(1 + config.clip_high))
    loss = unclipped if unclipped >= clipped else clipped
    if config.dual_clip is not None and adv < 0 and loss > -adv * config.dual_clip:
        loss = -adv * config.dual_clip + 0 * ratio  # constant, keeps the graph
    return loss


def policy_loss_loop(logp_new, logp_old, adv, mask, config, weights=None, logp_ref=None):
    rows = []
    for i in range(logp_new.shape[0]):
        tokens = []
        for j in range(logp_new.shape[1]):
            if mask[i, j]:
                value = token_loss_loop(logp_new[i, j], logp_old[i, j], adv[i], config)
                if weights is not None:
                    value = value * weights[i, j]
                if logp_ref is not None:
                    d = logp_ref[i, j] - logp_new[i, j]
                    value = value + config.kl_coef * (torch.exp(d) - d - 1)
                tokens.append(value)
        rows.append(tokens)
    if config.aggregation == "token-mean":
        flat = [v for row in rows for v in row]
        return sum(flat) / len(flat)
    per_row = [sum(row) if config.aggregation == "seq-mean-token-sum" else sum(row) / len(row) for row in rows if row]
    return sum(per_row) / len(per_row)


def branch_batch():
    """Rows exercise every branch: A>0 with r below/inside/above the clip range, A<0 likewise plus r > c."""
    ratios = torch.tensor([
        [0.5, 1.0, 1.1, 1.5, 0.9],  # A > 0: unclipped, unclipped, unclipped, clipped at 1.28, unclipped
        [0.5, 0.9, 1.2, 2.0, 5.0],  # A < 0: clipped at 0.8, unclipped, unclipped, unclipped, dual clip
        [0.85, 4.0, 1.0, 1.0, 1.0],  # A < 0: unclipped, dual clip, then padding
    ], dtype=torch.float64)
    logp_old = -torch.rand(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 0.1
    logp_new = (logp_old + ratios.log()).requires_grad_()
    adv = torch.tensor([1.5, -0.7, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    return logp_new, logp_old, adv, mask


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("extras", ["none", "weights", "kl"])
def test_matches_loop_reference_value_and_gradient(aggregation, extras):
    logp_new, logp_old, adv, mask = branch_batch()
    config = PolicyLossConfig(aggregation=aggregation, kl_coef=0.1 if extras == "kl" else 0.0)
    weights = torch.rand(3, 5, dtype=torch.float64) + 0.5 if extras == "weights" else None
    logp_ref = logp_old - 0.3 if extras == "kl" else None
    out = policy_loss(logp_new, logp_old, adv, mask, is_weights=weights, logp_ref=logp_ref, config=config)
    (grad,) = torch.autograd.grad(out.loss, logp_new)
    expected = policy_loss_loop(logp_new, logp_old, adv, mask, config, weights, logp_ref)
    (expected_grad,) = torch.autograd.grad(expected, logp_new)
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(grad, expected_grad)


def test_clip_statistics_and_gradient_signs():
    logp_new, logp_old, adv, mask = branch_batch()
    out = policy_loss(logp_new, logp_old, adv, mask, config=PolicyLossConfig(aggregation="token-mean"))
    (grad,) = torch.autograd.grad(out.loss, logp_new)
    # 12 valid tokens: clipped at (0,3) and (1,0); dual clip at (1,4) and (2,1).
    assert out.stats["loss/clip_fraction"].item() == pytest.approx(2 / 12)
    assert out.stats["loss/dual_clip_fraction"].item() == pytest.approx(2 / 12)
    # Gradient descent raises log-probs of positive-advantage tokens and lowers negative ones...
    assert (grad[0, [0, 1, 2, 4]] < 0).all() and (grad[1, [1, 2, 3]] > 0).all() and grad[2, 0] > 0
    # ...and clipped, dual-clipped and padded tokens get no gradient.
    assert (grad[0, 3] == 0) and (grad[1, 0] == 0) and (grad[1, 4] == 0) and (grad[2, 1:] == 0).all()


def test_default_is_seq_mean_token_sum_with_dual_clip():
    config = PolicyLossConfig()
    assert (config.clip_low, config.clip_high, config.dual_clip, config.aggregation) == (
        EPS_LOW, EPS_HIGH, DUAL, "seq-mean-token-sum")
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0, 2.0]), mask)
    assert out.loss.item() == pytest.approx(-(3 * 1.0 + 1 * 2.0) / 2)


def test_per_token_advantages_equal_broadcast_rows():
    logp_new, logp_old, adv, mask = branch_batch()
    a = policy_loss(logp_new, logp_old, adv, mask).loss
    b = policy_loss(logp_new, logp_old, adv[:, None].expand(3, 5), mask).loss
    torch.testing.assert_close(a, b)


def test_rejected_rows_do_not_dilute_and_padding_nan_is_harmless():
    logp_new, logp_old, adv, mask = branch_batch()
    base = policy_loss(logp_new, logp_old, adv, mask).loss
    # Add a fully masked (rejected) row whose log-probs are -inf / NaN.
    new = torch.cat([logp_new, torch.full((1, 5), float("-inf"), dtype=torch.float64)])
    old = torch.cat([logp_old, torch.full((1, 5), float("nan"), dtype=torch.float64)])
    out = policy_loss(new, old, torch.cat([adv, torch.tensor([float("nan")], dtype=torch.float64)]),
                      torch.cat([mask, torch.zeros(1, 5, dtype=torch.bool)]))
    torch.testing.assert_close(out.loss, base)
    (grad,) = torch.autograd.grad(out.loss, logp_new)
    assert torch.isfinite(grad).all()
    empty = policy_loss(logp_new, logp_old, adv, torch.zeros_like(mask))
    assert empty.loss.item() == 0.0 and empty.loss.requires_grad


def test_stats_kl_and_entropy_from_logits():
    logits = torch.randn(2, 3, 7)
    logp_all = logits.log_softmax(-1)
    tokens = torch.randint(0, 7, (2, 3))
    logp_new = logp_all.gather(-1, tokens[..., None])[..., 0].requires_grad_()
    logp_old = logp_new.detach() + 0.1
    mask = torch.ones(2, 3, dtype=torch.bool)
    out = policy_loss(logp_new, logp_old, torch.ones(2), mask, logits=logits)
    expected_entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    assert out.stats["loss/entropy"].item() == pytest.approx(expected_entropy.item(), rel=1e-5)
    r = math.exp(-0.1)
    assert out.stats["loss/approx_kl"].item() == pytest.approx(r - 1 + 0.1, rel=1e-4)
    given = policy_loss(logp_new, logp_old, torch.ones(2), mask, entropy=torch.full((2, 3), 0.5))
    assert given.stats["loss/entropy"].item() == pytest.approx(0.5)
    kl = policy_loss(logp_new, logp_old, torch.ones(2), mask, logp_ref=logp_new.detach(),
                     config=PolicyLossConfig(kl_coef=1.0))
    assert kl.stats["loss/kl_ref"].item() == 0.0


def test_bad_inputs():
    x = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="logp_ref: required when PolicyLossConfig.kl_coef > 0"):
        policy_loss(x, x, torch.zeros(2), mask, config=PolicyLossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="advantages: shape"):
        policy_loss(x, x, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="loss_mask: shape"):
        policy_loss(x, x, torch.zeros(2), mask[:, :2])
    with pytest.raises(ValueError, match="is_weights: shape"):
        policy_loss(x, x, torch.zeros(2), mask, is_weights=torch.ones(3))
    with pytest.raises(ValueError, match="PolicyLossConfig.aggregation: 'sum' is not one of"):
        PolicyLossConfig(aggregation="sum")
    with pytest.raises(ValueError, match="PolicyLossConfig.dual_clip: must be > 1"):
        PolicyLossConfig(dual_clip=0.5)
    with pytest.raises(ValueError, match="PolicyLossConfig.clip_low"):
        PolicyLossConfig(clip_low=1.0)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_chunks_weighted_by_their_share_aggregate_to_the_whole_batch(aggregation):
    """What the update's gradient accumulation relies on: micro-batches of any size, an empty row among them."""
    g = torch.Generator().manual_seed(7)
    values = torch.randn(7, 5, generator=g)
    mask = torch.rand(7, 5, generator=g) < 0.6
    mask[3] = False  # a row every token of which was rejected
    whole = aggregate(values, mask, aggregation)
    for size in (1, 3, 7):
        chunks = [slice(i, min(i + size, 7)) for i in range(0, 7, size)]
        assert sum(chunk_share(mask, s, aggregation) for s in chunks) == pytest.approx(1.0)
        summed = sum(chunk_share(mask, s, aggregation) * aggregate(values[s], mask[s], aggregation) for s in chunks)
        assert float(summed) == pytest.approx(float(whole), rel=1e-6)

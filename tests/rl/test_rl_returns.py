import pytest
import torch

from proxycomp.gym_bridge.rl import reward_to_go


def random_episodes(n: int, n_turns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rewards = torch.rand(n, n_turns, generator=g, dtype=torch.float64) * 3
    lengths = torch.randint(0, n_turns + 1, (n,), generator=g)
    mask = torch.arange(n_turns)[None, :] < lengths[:, None]
    rewards[~mask] = float("nan")  # unreached turns must not leak into any return
    return rewards, mask


def reward_to_go_loop(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    out = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        running = 0.0
        for t in reversed(range(rewards.shape[1])):
            if mask[i, t]:
                running = rewards[i, t].item() + gamma * running
                out[i, t] = running
    return out


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_loop_reference(gamma: float, seed: int) -> None:
    rewards, mask = random_episodes(12, 5, seed)
    got = reward_to_go(rewards, mask, gamma)
    torch.testing.assert_close(got, reward_to_go_loop(rewards, mask, gamma))


def test_gamma_one_sums_remaining_rewards_and_zero_keeps_turn_reward() -> None:
    rewards = torch.tensor([[1.0, 2.0, 4.0], [0.5, 0.0, 9.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    torch.testing.assert_close(reward_to_go(rewards, mask), torch.tensor([[7.0, 6.0, 4.0], [0.5, 0.0, 0.0]]))
    torch.testing.assert_close(reward_to_go(rewards, mask, 0.0), torch.tensor([[1.0, 2.0, 4.0], [0.5, 0.0, 0.0]]))


def test_rejects_gapped_mask() -> None:
    with pytest.raises(ValueError, match="turn_mask: each row must be True for a prefix"):
        reward_to_go(torch.zeros(1, 3), torch.tensor([[True, False, True]]))


def test_rejects_bad_gamma_dtype_shape_and_nan() -> None:
    ok = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="gamma: must be in"):
        reward_to_go(torch.zeros(2, 2), ok, 1.5)
    with pytest.raises(ValueError, match="turn_mask: expected a bool tensor"):
        reward_to_go(torch.zeros(2, 2), ok.float())
    with pytest.raises(ValueError, match="turn_mask: shape"):
        reward_to_go(torch.zeros(2, 3), ok)
    with pytest.raises(ValueError, match="rewards: expected a 2-D tensor"):
        reward_to_go(torch.zeros(4), ok)
    with pytest.raises(ValueError, match="rewards: NaN or inf at valid positions"):
        reward_to_go(torch.tensor([[0.0, float("nan")], [0.0, 0.0]]), ok)

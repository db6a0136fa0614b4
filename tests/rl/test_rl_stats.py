"""gym_bridge.rl.stats: Wilson intervals, the paired bootstrap over tasks, and the tasks a difference needs."""
from __future__ import annotations

import pytest

from proxycomp.gym_bridge.rl.stats import paired_bootstrap, task_difference_sd, tasks_needed, wilson


def test_wilson_interval_matches_known_values():
    low, high = wilson(8, 64)  # 0.125 of 64: the textbook Wilson interval
    assert (round(low, 4), round(high, 4)) == (0.0647, 0.2277)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0)


def test_paired_bootstrap_is_the_weighted_mean_with_a_seeded_interval():
    first, second = [0.5, 0.25, 1.0, 0.0], [0.25, 0.25, 0.5, 0.25]  # differences +0.25, 0, +0.5, -0.25
    diff, low, high = paired_bootstrap(first, second, weights=[1, 1, 2, 4])
    assert diff == pytest.approx((0.25 + 0 + 2 * 0.5 - 4 * 0.25) / 8)
    assert low < diff < high and (low, high) == paired_bootstrap(first, second, weights=[1, 1, 2, 4])[1:]
    assert paired_bootstrap([0.3] * 5, [0.1] * 5) == pytest.approx((0.2, 0.2, 0.2))  # no spread, no width


def test_paired_bootstrap_covers_a_known_effect_about_as_often_as_it_says():
    import numpy as np

    rng = np.random.default_rng(0)
    covered = 0
    for trial in range(100):
        effect = rng.normal(0.1, 0.2, size=40)  # per-task differences around a true +0.1
        base = rng.uniform(0.2, 0.6, size=40)
        _, low, high = paired_bootstrap(base + effect, base, resamples=2000, seed=trial)
        covered += low <= 0.1 <= high
    assert 88 <= covered <= 100  # 95% nominal; percentile intervals run a little narrow at 40 tasks


def test_paired_bootstrap_refuses_unpaired_input_and_empty_weights():
    with pytest.raises(ValueError, match="same tasks on both sides"):
        paired_bootstrap([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="one positive weight per task"):
        paired_bootstrap([0.1, 0.2], [0.1, 0.3], weights=[1, 0])


def test_tasks_needed_follows_the_normal_formula():
    sd = task_difference_sd(0.3, 8, 0.15)
    assert sd == pytest.approx((0.15 ** 2 + 2 * 0.3 * 0.7 / 8) ** 0.5)
    assert tasks_needed(0.10, sd) == 59  # ((1.960 + 0.842) * 0.274 / 0.10)^2 = 58.9
    assert tasks_needed(0.20, sd) == 15
    with pytest.raises(ValueError, match="must be positive"):
        tasks_needed(0.0, sd)

"""The credit-assignment toy: its exact advantages and gradient are right, and the rules are the library's."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl_lite.tasks.credit_toy import CreditToy, credit_study, gradient_estimate, rule_advantages


def test_the_exact_gradient_is_the_finite_difference_of_the_exact_return():
    toy = CreditToy(seed=1)
    theta = np.random.default_rng(0).normal(size=(toy.turns, toy.states, toy.actions))
    _, gradient, j = toy.exact(theta)
    numeric = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        bumped = theta.copy()
        bumped[idx] += 1e-6
        numeric[idx] = (toy.exact(bumped)[2] - j) / 1e-6
    np.testing.assert_allclose(gradient, numeric, atol=1e-6)
    states, actions = toy.sample(theta, 100_000, np.random.default_rng(1))
    sampled_return = toy.reward[np.arange(toy.turns), states, actions].sum(1).mean()
    assert sampled_return == pytest.approx(j, abs=0.005)  # sampling follows the same policy


def test_true_advantages_average_to_zero_under_the_policy():
    toy = CreditToy(seed=2)
    theta = np.random.default_rng(3).normal(size=(toy.turns, toy.states, toy.actions))
    advantage, _, _ = toy.exact(theta)
    np.testing.assert_allclose((toy.policy(theta) * advantage).sum(-1), 0.0, atol=1e-12)


def test_rules_come_from_the_library_and_discounting_with_gamma_one_is_broadcast():
    toy = CreditToy(seed=0)
    theta = np.zeros((toy.turns, toy.states, toy.actions))
    states, actions = toy.sample(theta, 16, np.random.default_rng(0))
    broadcast = rule_advantages("broadcast", toy, states, actions, 8, gamma=1.0)
    np.testing.assert_allclose(rule_advantages("discounted", toy, states, actions, 8, gamma=1.0), broadcast,
                               atol=1e-9)
    assert (broadcast == broadcast[:, :1]).all()  # every turn of an episode gets the episode's advantage
    assert not np.allclose(rule_advantages("discounted", toy, states, actions, 8, gamma=0.5), broadcast)
    # every episode of the toy has all its turns, so with only the end reward each G_it is γ^(T-1-t) R_i and the
    # per-turn baseline's mean and std scale with it: per turn is broadcast for any γ (up to the std's eps)
    np.testing.assert_allclose(rule_advantages("discounted_per_turn", toy, states, actions, 8, gamma=0.9), broadcast,
                               atol=1e-3)
    each = rule_advantages("discounted_per_turn", toy, states, actions, 8, gamma=0.5, reward_at="each_turn")
    assert not np.allclose(each, broadcast, atol=1e-3), "rewards with their turns must change the per-turn credit"
    with pytest.raises(ValueError, match="reward_at"):
        rule_advantages("broadcast", toy, states, actions, 8, gamma=1.0, reward_at="never")
    with pytest.raises(ValueError, match="unknown credit rule"):
        rule_advantages("oracle", toy, states, actions, 8, gamma=1.0)


def test_the_averaged_broadcast_gradient_points_along_the_true_gradient():
    toy = CreditToy(seed=4)
    theta = np.random.default_rng(5).normal(size=(toy.turns, toy.states, toy.actions))
    _, true_gradient, _ = toy.exact(theta)
    rng = np.random.default_rng(6)
    mean = np.mean([gradient_estimate(toy, theta, *(sa := toy.sample(theta, 64, rng)),
                                      rule_advantages("broadcast", toy, *sa, 8, gamma=0.9)) for _ in range(400)], 0)
    cosine = (mean * true_gradient).sum() / (np.linalg.norm(mean) * np.linalg.norm(true_gradient))
    assert cosine > 0.9


def test_the_study_reports_every_seed_and_paired_differences():
    out = credit_study([0, 1, 2], batches=5, train_steps=3)
    assert set(out["rules"]) == {"broadcast", "discounted", "discounted_per_turn", "step_group"}
    snr = out["rules"]["step_group"]["gradient_snr"]
    assert len(snr["per_seed"]) == 3 and snr["low"] <= snr["estimate"] <= snr["high"]
    assert len(out["rules"]["broadcast"]["mean_curve"]) == 4
    assert set(out["versus_broadcast"]) == {"discounted", "discounted_per_turn", "step_group"}

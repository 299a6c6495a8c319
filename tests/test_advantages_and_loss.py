"""Hand-worked checks of agentrl_lite.advantages and agentrl_lite.loss: advantages, KL estimators, entropy, clipping, aggregation.

Every expected number is worked out in the comments next to it. Tolerances: 1e-6 for float32 arithmetic
on O(1) numbers; the sampling test states its own (a multiple of the exact standard error).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl_lite.advantages import (
    discounted_returns,
    discounted_turn_advantages,
    frac_reward_zero_std,
    group_advantages,
    rloo_advantages,
    step_group_advantages,
    turn_token_advantages,
    zero_std_groups,
)
from agentrl_lite.logprobs import entropy_from_logits
from agentrl_lite.loss import LossConfig, kl_estimate, policy_loss

TOL = 1e-6


# ----------------------------------------------------------------------------------------- advantages
@pytest.mark.parametrize(
    "scale, expected",
    [
        # rewards [1, 0 | 3, 1]: group means 0.5 and 2, so r - mean = [0.5, -0.5, 1, -1].
        # group: unbiased std of [1, 0] = sqrt((0.25 + 0.25) / (2 - 1)) = sqrt(0.5) = 0.70711
        #        unbiased std of [3, 1] = sqrt((1 + 1) / 1) = sqrt(2) = 1.41421; eps 1e-4 is added to the std
        ("group", [0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4),
                   1 / (math.sqrt(2) + 1e-4), -1 / (math.sqrt(2) + 1e-4)]),  # ≈ [.70700, -.70700, .70706, -.70706]
        # batch: mean still per group; std of all four: mean 1.25, squared deviations
        #        0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75, / (4 - 1) = 1.58333, sqrt = 1.25831
        ("batch", [x / (math.sqrt(4.75 / 3) + 1e-4) for x in (0.5, -0.5, 1, -1)]),  # ≈ [.39733, ..., -.79466]
        # none (Dr. GRPO): centred only
        ("none", [0.5, -0.5, 1.0, -1.0]),
    ],
)
def test_group_advantages_two_groups_of_two(scale, expected):
    adv = group_advantages(torch.tensor([1.0, 0.0, 3.0, 1.0]), group_size=2, scale_rewards=scale)
    torch.testing.assert_close(adv, torch.tensor(expected), atol=TOL, rtol=0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_zero_spread_group_gets_exactly_zero_advantage(scale):
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])  # first group: both right -> nothing to prefer
    adv = group_advantages(rewards, group_size=2, scale_rewards=scale)
    assert adv[0].item() == 0.0 and adv[1].item() == 0.0  # (1 - 1) / (0 + 1e-4) is exactly 0, not ~0
    assert adv[2].item() < 0 < adv[3].item()
    assert frac_reward_zero_std(rewards, group_size=2) == 0.5  # 1 of 2 groups teaches nothing


def test_the_batch_as_one_group_is_ppos_advantage_normalisation_and_a_constant_baseline_cancels():
    # rewards [1, 0, 0, 1, 1]: mean 0.6; squared deviations 3 · 0.16 + 2 · 0.36 = 1.2, / (5 - 1) = 0.3
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    expected = (rewards - 0.6) / (math.sqrt(0.3) + 1e-4)  # ≈ [0.73, -1.10, -1.10, 0.73, 0.73]
    torch.testing.assert_close(group_advantages(rewards, group_size=5), expected, atol=TOL, rtol=0)
    # a baseline b subtracted before the batch is centred cancels: (r - b) - mean(r - b) = r - mean(r)
    torch.testing.assert_close(group_advantages(rewards - 0.37, group_size=5), expected, atol=TOL, rtol=0)


def test_unscorable_reward_is_left_out_and_gets_zero_advantage():
    # NaN = every reward function returned None. Group 1 keeps a single scorable value -> no spread -> 0.
    adv = group_advantages(torch.tensor([math.nan, 1.0, 0.0, 1.0]), group_size=2)
    assert adv[:2].tolist() == [0.0, 0.0]
    s = math.sqrt(0.5) + 1e-4
    torch.testing.assert_close(adv[2:], torch.tensor([-0.5 / s, 0.5 / s]), atol=TOL, rtol=0)


def test_group_advantages_rejects_ragged_groups():
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(torch.zeros(5), group_size=2)


def test_rloo_on_1_0_0_1():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    # G = 2: baseline = the sibling's reward: [1-0, 0-1, 0-1, 1-0]
    assert rloo_advantages(rewards, group_size=2).tolist() == [1.0, -1.0, -1.0, 1.0]
    # G = 4: baseline of r_0 = (0 + 0 + 1) / 3 = 1/3 -> 1 - 1/3 = 2/3; of r_1 = (1 + 0 + 1) / 3 -> 0 - 2/3
    torch.testing.assert_close(
        rloo_advantages(rewards, group_size=4), torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]), atol=TOL, rtol=0
    )


# ------------------------------------------------------------------------------------ turn-level credit
def test_discounted_returns_by_hand():
    # episode 0: 3 turns, terminal reward 1, γ = 0.4 (Kevin): G = [0.4², 0.4, 1] = [0.16, 0.4, 1]
    # episode 1: 2 turns (third is padding) with an intermediate reward 0.5 at turn 0 and 1 at the end:
    #            G_1 = 1, G_0 = 0.5 + 0.4 · 1 = 0.9; the padding's reward 7 is ignored and its return is 0
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.5, 1.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    expected = torch.tensor([[0.16, 0.4, 1.0], [0.9, 1.0, 0.0]])
    torch.testing.assert_close(discounted_returns(rewards, mask, gamma=0.4), expected, atol=TOL, rtol=0)


def test_discounted_turn_advantages_by_hand():
    # one group of 2: episode A takes 3 turns to reward 1, episode B answers in 1 turn with reward 0. γ = 0.5:
    # G_A = [0.25, 0.5, 1], G_B = [0]. Baseline: mean of G_0 = (0.25 + 0) / 2 = 0.125,
    # std of G_0 (unbiased) = sqrt(2 · 0.125² / 1) = 0.176777
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    centred = torch.tensor([[0.125, 0.375, 0.875], [-0.125, 0.0, 0.0]])  # G - 0.125, 0 on padding
    none = discounted_turn_advantages(rewards, mask, group_size=2, gamma=0.5, scale_rewards="none")
    torch.testing.assert_close(none, centred, atol=TOL, rtol=0)
    scaled = discounted_turn_advantages(rewards, mask, group_size=2, gamma=0.5)
    torch.testing.assert_close(scaled, centred / (0.125 * math.sqrt(2) + 1e-4), atol=TOL, rtol=0)
    # ≈ [[0.7067, 2.1201, 4.9469], [-0.7067, 0, 0]]: the early turn of the slow success is barely credited


def test_the_per_turn_baseline_compares_a_turn_with_the_same_turn_of_its_siblings():
    # one group of 3, γ = 0.5, terminal rewards: A takes 3 turns to reward 1, B 2 turns to reward 1, C 1 turn to 0
    # G_A = [0.25, 0.5, 1], G_B = [0.5, 1], G_C = [0]
    # turn 0: mean (0.25 + 0.5 + 0) / 3 = 0.25 -> [0, 0.25, -0.25]; turn 1: A and B, mean 0.75 -> [-0.25, 0.25]
    # turn 2: A alone reached it -> 0 (nothing to compare with)
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    centred = torch.tensor([[0.0, -0.25, 0.0], [0.25, 0.25, 0.0], [-0.25, 0.0, 0.0]])
    none = discounted_turn_advantages(rewards, mask, group_size=3, gamma=0.5, scale_rewards="none",
                                      baseline="per_turn")
    torch.testing.assert_close(none, centred, atol=TOL, rtol=0)
    scaled = discounted_turn_advantages(rewards, mask, group_size=3, gamma=0.5, baseline="per_turn")
    std0, std1 = 0.25, math.sqrt(2 * 0.25**2)  # unbiased std of [0.25, 0.5, 0] and of [0.5, 1]
    expected = centred / torch.tensor([std0 + 1e-4, std1 + 1e-4, 1.0])
    torch.testing.assert_close(scaled, expected, atol=TOL, rtol=0)
    # against the first-turn baseline (0.25) A's later turns are credited for being less discounted: 0.25 and 0.75
    first = discounted_turn_advantages(rewards, mask, group_size=3, gamma=0.5, scale_rewards="none")
    torch.testing.assert_close(first[0], torch.tensor([0.0, 0.25, 0.75]), atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="baseline"):
        discounted_turn_advantages(rewards, mask, group_size=3, gamma=0.5, baseline="last_turn")


def test_discounted_with_gamma_one_and_terminal_reward_is_broadcast():
    episode_rewards = torch.tensor([1.0, 0.0, 0.5, 3.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]])
    last = mask.sum(1) - 1
    rewards = torch.zeros(4, 3)
    rewards[torch.arange(4), last] = episode_rewards  # the reward arrives at each episode's last turn
    for scale in ("group", "batch", "none"):
        adv = discounted_turn_advantages(rewards, mask, group_size=2, gamma=1.0, scale_rewards=scale)
        broadcast = group_advantages(episode_rewards, group_size=2, scale_rewards=scale)
        assert torch.equal(adv, broadcast.unsqueeze(1) * mask), scale  # bit for bit, padding 0


def test_step_group_advantages_by_hand():
    # 4 siblings, γ = 0.5, terminal rewards [1, 0, 1, 1]; episodes 0-2 take 2 turns, episode 3 one turn:
    # returns G = [[0.5, 1], [0, 0], [0.5, 1], [1, -]]
    returns = torch.tensor([[0.5, 1.0], [0.0, 0.0], [0.5, 1.0], [1.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    # every first turn starts from the prompt (group 7); episodes 0 and 1 made the same call and got the same
    # result (group 3); episode 2 reached a state of its own (group 9); the padding's id must not matter
    groups = torch.tensor([[7, 3], [7, 3], [7, 9], [7, 3]])
    # group 7: returns [0.5, 0, 0.5, 1], mean 0.5, centred [0, -0.5, 0, 0.5]
    # group 3: returns [1, 0], mean 0.5, centred [0.5, -0.5]; group 9: alone -> 0
    centred = torch.tensor([[0.0, 0.5], [-0.5, -0.5], [0.0, 0.0], [0.5, 0.0]])
    torch.testing.assert_close(step_group_advantages(returns, mask, groups, scale=False), centred, atol=TOL, rtol=0)
    # scaled: std of group 7 = sqrt((0.25 + 0.25) / 3) = 0.408248; of group 3 = sqrt(0.5 / 1) = 0.707107
    s7, s3 = math.sqrt(0.5 / 3) + 1e-4, math.sqrt(0.5) + 1e-4
    expected = torch.tensor([[0.0, 0.5 / s3], [-0.5 / s7, -0.5 / s3], [0.0, 0.0], [0.5 / s7, 0.0]])
    torch.testing.assert_close(step_group_advantages(returns, mask, groups), expected, atol=TOL, rtol=0)
    # a step group without spread teaches nothing: exactly 0
    same = step_group_advantages(torch.ones(3, 1), torch.ones(3, 1), torch.zeros(3, 1, dtype=torch.long))
    assert same.tolist() == [[0.0], [0.0], [0.0]]


def test_turn_token_advantages_put_each_turns_advantage_on_its_tokens():
    # tokens: prompt prompt | turn 0 turn 0 | tool | turn 1 | padding
    turn_index = torch.tensor([[-1, -1, 0, 0, -1, 1, -1]])
    per_token = turn_token_advantages(torch.tensor([[2.0, -3.0]]), turn_index)
    assert per_token.tolist() == [[0.0, 0.0, 2.0, 2.0, 0.0, -3.0, 0.0]]


# ------------------------------------------------------------------------------------------- KL
def test_kl_estimators_on_concrete_numbers():
    logprobs = torch.tensor([math.log(0.5), math.log(0.25)])  # π_θ(token)
    ref_logprobs = torch.tensor([math.log(0.25), math.log(0.5)])  # π_ref(token)
    # log ρ = ref - logprobs = [ln 0.5, ln 2] = [-0.693147, 0.693147]
    k1 = [math.log(2), -math.log(2)]  # -log ρ: the second token gives a *negative* KL estimate
    k2 = [0.5 * math.log(2) ** 2] * 2  # 0.5 * 0.480453 = 0.240227 for both
    k3 = [0.5 + math.log(2) - 1, 2 - math.log(2) - 1]  # ρ - log ρ - 1 = [0.193147, 0.306853]
    for kind, expected in (("k1", k1), ("k2", k2), ("k3", k3)):
        torch.testing.assert_close(kl_estimate(logprobs, ref_logprobs, kind), torch.tensor(expected), atol=TOL, rtol=0)
    assert kl_estimate(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)).shape == (2, 3, 4)  # shape preserved


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(
    st.lists(st.floats(-30.0, 0.0), min_size=1, max_size=8),
    st.lists(st.floats(-30.0, 0.0), min_size=1, max_size=8),
)
def test_k3_is_never_negative(logprobs, ref_logprobs):
    n = min(len(logprobs), len(ref_logprobs))
    k3 = kl_estimate(torch.tensor(logprobs[:n], dtype=torch.float64), torch.tensor(ref_logprobs[:n], dtype=torch.float64))
    assert (k3 >= 0).all()  # e^x >= 1 + x for every x


def test_k1_and_k3_unbiased_k3_lower_variance_on_two_categoricals():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)  # π_θ, the sampling policy
    q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)  # π_ref
    kl = (p * (p / q).log()).sum().item()  # 0.5 ln 1.25 + 0.3 ln 0.75 = 0.111572 - 0.086305 = 0.025267
    lp, lq = p.log(), q.log()
    per_token = {kind: kl_estimate(lp, lq, kind) for kind in ("k1", "k2", "k3")}
    exact_mean = {k: (p * v).sum().item() for k, v in per_token.items()}
    exact_var = {k: (p * (v - exact_mean[k]) ** 2).sum().item() for k, v in per_token.items()}
    # exactly: E[k1] = E[k3] = KL; E[k2] = 0.5 E[ln² ρ] = 0.024863 != KL (k2 is biased)
    assert abs(exact_mean["k1"] - kl) < 1e-12 and abs(exact_mean["k3"] - kl) < 1e-12
    assert abs(exact_mean["k2"] - kl) > 1e-4
    # Var[k1] = 0.049087 vs Var[k3] = 0.000255: about 190x smaller
    assert exact_var["k3"] < exact_var["k1"] / 100

    n = 100_000
    tokens = torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(0))
    for kind in ("k1", "k3"):
        samples = per_token[kind][tokens]
        # tolerance: 5 standard errors of the mean, sqrt(Var / n) from the exact variance
        assert abs(samples.mean().item() - kl) < 5 * math.sqrt(exact_var[kind] / n), kind
    k1, k3 = per_token["k1"][tokens], per_token["k3"][tokens]
    assert k3.var().item() < k1.var().item() / 100
    assert k1.min().item() < 0 <= k3.min().item()  # k1 says "negative KL" on some tokens, k3 never


# -------------------------------------------------------------------------------------- entropy
def test_entropy_from_logits():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [5.0, -math.inf, -math.inf, -math.inf]])
    # uniform over 4: H = ln 4 = 1.386294; a single allowed token (top-k filtered rest): H = 0, not NaN
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([math.log(4), 0.0]), atol=TOL, rtol=0)
    assert entropy_from_logits(torch.zeros(2, 3, 7)).shape == (2, 3)


# ------------------------------------------------------------------------------------- clipping
def _one_token_loss(ratio: float, advantage: float, **config):
    """Loss and d loss / d logprob for a single policy token with the given ratio π_θ / π_old."""
    logprobs = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, metrics = policy_loss(
        logprobs, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), LossConfig(loss_type="bnpo", **config)
    )
    loss.backward()
    return loss.item(), logprobs.grad.item(), metrics


def test_clipping_stops_the_gradient_only_in_the_direction_the_advantage_pushes():
    # ratio 1.5 > 1 + 0.2. A = +1: -min(1.5, 1.2) = -1.2, the clipped constant -> zero gradient
    loss, grad, metrics = _one_token_loss(1.5, +1.0)
    assert loss == pytest.approx(-1.2, abs=TOL) and grad == 0.0
    assert metrics["clip_ratio/high_mean"] == 1.0 and metrics["clip_ratio/region_mean"] == 1.0
    # A = -1: -min(-1.5, -1.2) = 1.5, the unclipped term -> d/dlogprob (ρ) = ρ = 1.5: still pushed down
    loss, grad, metrics = _one_token_loss(1.5, -1.0)
    assert loss == pytest.approx(1.5, abs=TOL) and grad == pytest.approx(1.5, abs=TOL)
    assert metrics["clip_ratio/region_mean"] == 0.0
    # mirror image below 1 - 0.2: ratio 0.5 with A = -1 is clipped (loss 0.8, no gradient), A = +1 is not
    loss, grad, metrics = _one_token_loss(0.5, -1.0)
    assert loss == pytest.approx(0.8, abs=TOL) and grad == 0.0 and metrics["clip_ratio/low_mean"] == 1.0
    loss, grad, _ = _one_token_loss(0.5, +1.0)
    assert loss == pytest.approx(-0.5, abs=TOL) and grad == pytest.approx(-0.5, abs=TOL)


def test_epsilon_high_is_asymmetric():
    # ratio 1.25, A = +1: symmetric ε = 0.2 clips at 1.2; clip-higher ε_high = 0.28 lets it grow to 1.28
    loss, grad, metrics = _one_token_loss(1.25, +1.0)
    assert loss == pytest.approx(-1.2, abs=TOL) and grad == 0.0 and metrics["clip_ratio/high_mean"] == 1.0
    loss, grad, metrics = _one_token_loss(1.25, +1.0, epsilon_high=0.28)
    assert loss == pytest.approx(-1.25, abs=TOL) and grad == pytest.approx(-1.25, abs=TOL)
    assert metrics["clip_ratio/high_mean"] == 0.0
    # the lower bound stays 1 - ε = 0.8: ratio 0.75 with A = -1 is clipped either way
    for eps_high in (None, 0.28):
        loss, grad, _ = _one_token_loss(0.75, -1.0, epsilon_high=eps_high)
        assert loss == pytest.approx(0.8, abs=TOL) and grad == 0.0


def test_sequence_level_ratio_is_the_geometric_mean():
    # GSPO: log ratios [0.1, 0.3] -> one ratio exp(0.2) = 1.2214 > 1.2 for the whole completion; A = +1
    # -> clipped: loss = -1.2 on both tokens, averaged (grpo) = -1.2, no gradient on either token
    logprobs = torch.tensor([[0.1, 0.3]], requires_grad=True)
    config = LossConfig(loss_type="grpo", importance_sampling_level="sequence")
    loss, metrics = policy_loss(logprobs, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), config)
    loss.backward()
    assert loss.item() == pytest.approx(-1.2, abs=TOL) and logprobs.grad.abs().max().item() == 0.0
    assert metrics["clip_ratio/high_mean"] == 1.0


def test_kl_term_and_its_bias_correction():
    # ratio 1.1, A = 0 (no policy-gradient term); π_θ(token) = 0.5, π_ref(token) = 0.25 -> k3 = 0.193147
    logprobs = torch.tensor([[math.log(0.5)]])
    old, ref = logprobs - math.log(1.1), torch.tensor([[math.log(0.25)]])
    k3 = 0.5 + math.log(2) - 1
    for correct, expected_kl in ((False, k3), (True, 1.1 * k3)):  # TRL default: weight k3 by the ratio
        config = LossConfig(loss_type="bnpo", beta=0.1, use_bias_correction_kl=correct)
        loss, metrics = policy_loss(logprobs, old, torch.tensor([0.0]), torch.ones(1, 1), config, ref_logprobs=ref)
        assert loss.item() == pytest.approx(0.1 * expected_kl, abs=TOL)
        assert metrics["kl"] == pytest.approx(expected_kl, abs=TOL)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(logprobs, old, torch.tensor([0.0]), torch.ones(1, 1), LossConfig(beta=0.1))


# ------------------------------------------------------------------------------------------ masking
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_masked_tokens_never_matter(loss_type, level):
    gen = torch.Generator().manual_seed(0)
    base = -torch.rand(3, 5, generator=gen) * 3
    old = base + 0.3 * torch.randn(3, 5, generator=gen)
    ref = base + 0.3 * torch.randn(3, 5, generator=gen)
    advantages = torch.randn(3, generator=gen)
    mask = torch.tensor([[1, 1, 0, 0, 1], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    config = LossConfig(loss_type=loss_type, beta=0.04, importance_sampling_level=level, max_completion_length=5)
    junk = 5 * torch.randn(3, 5, generator=gen) * (1 - mask)  # change only masked positions

    results = []
    for shift in (torch.zeros(3, 5), junk):
        logprobs = (base + shift).requires_grad_()
        loss, _ = policy_loss(logprobs, old + shift, advantages, mask, config, ref_logprobs=ref - shift)
        loss.backward()
        results.append((loss.item(), logprobs.grad))
    assert results[0][0] == pytest.approx(results[1][0], abs=TOL)
    for _, grad in results:
        assert grad[mask == 0].abs().max().item() == 0.0
        assert grad[mask == 1].abs().max().item() > 0.0


# ------------------------------------------------------------------------------------- aggregation
def _short_right_long_wrong(loss_type: str, **kwargs):
    """Completion 0: 1 token, A = +1. Completion 1: 3 tokens, A = -1. Ratio 1, so token loss = -A."""
    logprobs = torch.full((2, 3), math.log(0.5), requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    config = LossConfig(loss_type=loss_type, max_completion_length=4)
    loss, _ = policy_loss(logprobs, logprobs.detach(), torch.tensor([1.0, -1.0]), mask, config, **kwargs)
    loss.backward()
    return loss.item(), logprobs.grad


@pytest.mark.parametrize(
    "loss_type, kwargs, expected_loss, weight_short, weight_long",
    [
        # token losses: [-1] and [1, 1, 1] (4 policy tokens, sum 2)
        # grpo: per-completion means (-1/1 + 3/3) / 2 = 0; token weights 1/(2·1) = 1/2 and 1/(2·3) = 1/6
        ("grpo", {}, 0.0, 1 / 2, 1 / 6),
        # bnpo, dapo (one micro-batch): 2 / 4 tokens = 0.5; every token weighs 1/4
        ("bnpo", {}, 0.5, 1 / 4, 1 / 4),
        ("dapo", {}, 0.5, 1 / 4, 1 / 4),
        # dapo inside an optimizer step of 8 policy tokens (another micro-batch holds 4): 2 / 8 = 0.25
        ("dapo", {"num_items_in_batch": 8}, 0.25, 1 / 8, 1 / 8),
        # dr_grpo: 2 / (B · L_max) = 2 / (2 · 4) = 0.25; every token weighs 1/8
        ("dr_grpo", {}, 0.25, 1 / 8, 1 / 8),
    ],
)
def test_aggregation_weighs_long_and_short_completions(loss_type, kwargs, expected_loss, weight_short, weight_long):
    loss, grad = _short_right_long_wrong(loss_type, **kwargs)
    assert loss == pytest.approx(expected_loss, abs=TOL)
    # d loss / d logprob = weight · (-A) · ρ with ρ = 1: the short right answer is pushed up by weight_short,
    # each token of the long wrong answer pushed down by weight_long (grpo: 1/6 per token, less than 1/2)
    expected = torch.tensor([[-weight_short, 0, 0], [weight_long] * 3])
    torch.testing.assert_close(grad, expected, atol=TOL, rtol=0)


def test_dr_grpo_needs_the_token_budget():
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), LossConfig(loss_type="dr_grpo"))


def test_truncated_importance_weights_are_the_capped_ratio_on_policy_tokens_only():
    from agentrl_lite.loss import truncated_importance_weights
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    sampled = torch.tensor([[-1.5, -1.0, -3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_importance_weights(old, sampled, mask, cap=2.0)
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.0), 2.0, 1.0]])  # exp(2.5) capped; off-mask 1
    assert torch.allclose(w, expected)
    with pytest.raises(ValueError, match="cap"):
        truncated_importance_weights(old, sampled, mask, cap=0.0)


def test_masked_importance_weights_drop_the_tokens_above_the_cap_and_keep_the_rest():
    from agentrl_lite.loss import importance_weights, masked_importance_weights

    old = torch.log(torch.tensor([[0.5, 0.9, 0.1, 0.3]]))
    sampled = torch.log(torch.tensor([[0.5, 0.3, 0.4, 0.05]]))  # ratios 1, 3, 1/4, 6
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last token is not a policy token: weight 1
    w = masked_importance_weights(old, sampled, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[1.0, 0.0, 0.25, 1.0]]), atol=1e-6), w
    assert torch.equal(importance_weights(old, sampled, mask, 2.0, "mask"), w)
    assert torch.allclose(importance_weights(old, sampled, mask, 2.0, "truncate"), torch.tensor([[1.0, 2.0, 0.25, 1.0]]))
    with pytest.raises(ValueError, match="mode must be one of"):
        importance_weights(old, sampled, mask, 2.0, "clip")
    with pytest.raises(ValueError, match="cap must be > 0"):
        masked_importance_weights(old, sampled, mask, cap=-1.0)


def test_importance_weights_make_a_mismatched_samplers_gradient_the_on_policy_one():
    """Tokens drawn from q ≠ π: the weighted surrogate's gradient estimates E_π[A ∇log π]; unweighted it does not."""
    from agentrl_lite.loss import LossConfig, policy_loss, truncated_importance_weights
    generator = torch.Generator().manual_seed(0)
    theta = torch.tensor([1.0, 0.0, -1.0, 0.5], requires_grad=True)
    value = torch.tensor([1.0, -1.0, 0.5, 0.0])  # the advantage of each token, a fixed function of it
    pi = torch.softmax(theta, 0)
    exact = torch.autograd.grad((pi * value).sum(), theta)[0]  # ∇ E_π[A] = E_π[A ∇log π]
    q = torch.softmax(theta.detach() + torch.tensor([0.4, -0.3, 0.2, 0.0]), 0)  # a slightly different sampler
    n = 200_000
    tokens = torch.multinomial(q, n, replacement=True, generator=generator)
    logprobs = torch.log_softmax(theta, 0)[tokens][None]  # (1, n), with gradient
    sampler = torch.log(q)[tokens][None]
    mask = torch.ones(1, n)
    config = LossConfig(loss_type="bnpo")  # the mean over tokens: an expectation estimate
    weights = truncated_importance_weights(logprobs.detach(), sampler, mask, cap=10.0)  # cap above max π/q
    corrected = policy_loss(logprobs, logprobs.detach(), value[tokens][None], mask, config, sampling_weights=weights)[0]
    plain = policy_loss(logprobs, logprobs.detach(), value[tokens][None], mask, config)[0]
    grad_corrected = -torch.autograd.grad(corrected, theta, retain_graph=True)[0]
    grad_plain = -torch.autograd.grad(plain, theta)[0]
    assert torch.allclose(grad_corrected, exact, atol=0.01), (grad_corrected, exact)
    assert (grad_plain - exact).abs().max() > 0.03  # the uncorrected gradient is biased


def test_a_group_of_equal_non_binary_rewards_has_no_spread_and_no_advantage():
    """Eight rewards of 0.7 have a float mean of 0.7 - 6e-8; divided by std + eps that was an advantage of 6e-4
    with a consistent sign — pure rounding noise that AdamW (which normalises the gradient's scale) turned into
    a full-size step. Equal rewards must give exactly zero, and count as a group without spread."""
    rewards = torch.tensor([0.7] * 8 + [0.85] * 8 + [0.2] * 7 + [0.5] + [0.5] * 8)
    assert zero_std_groups(rewards, 8).tolist() == [True, True, False, True]
    assert frac_reward_zero_std(rewards, 8) == 0.75
    for scale in ("group", "batch", "none"):
        advantages = group_advantages(rewards, 8, scale_rewards=scale).view(4, 8)
        assert (advantages[[0, 1, 3]] == 0).all(), scale
        assert (advantages[2] != 0).all()
    unscorable = torch.tensor([math.nan] * 7 + [1.0] + [math.nan] * 2 + [0.7] * 6)
    assert zero_std_groups(unscorable, 8).tolist() == [False, True]  # one scorable reward has no std (TRL)
    assert (group_advantages(unscorable, 8) == 0).all()

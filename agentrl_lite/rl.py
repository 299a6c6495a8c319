"""The learning signal: advantages, KL estimators, entropy and the clipped policy loss of GRPO.

Rollouts give us, for every prompt, a *group* of G completions o_1..o_G with scalar rewards r_1..r_G, and
for every completion token the log-probability it had when it was sampled (`old_logprobs`). This module
turns those into one scalar loss whose gradient improves the policy. It matches TRL 1.16's GRPOTrainer
(`tests/test_trl_equality.py` runs TRL's own loss code on the same tensors).

Advantages (group-relative: "was this completion better than its siblings?")

    A_i = (r_i - mean(r_1..r_G)) / (std + 1e-4)      std: unbiased (Bessel), of the group or of the batch
    Dr. GRPO drops the division (scale_rewards="none"); RLOO uses the mean of the *other* G-1 rewards.

A group whose rewards are all equal gets A_i = 0 exactly: it teaches nothing (TRL's `frac_reward_zero_std`).

Turn-level credit (multi-turn episodes). Episode i has model turns t = 0..T_i-1 with rewards r_it (by default
only the episode reward R_i, received at its last turn); every token of a turn gets that turn's advantage:

    broadcast:   A_it = A_i                                   the episode's advantage on every turn (default)
    discounted:  G_it = Σ_{k≥t} γ^(k-t) r_ik                  return from turn t; terminal only: γ^(T_i-1-t) R_i
                 A_it = (G_it - mean_j G_j0) / (std_j G_j0 + 1e-4)   baseline and scale from the group's G_0
    step_group:  A_it = A_i + ω (G_it - mean_S G) / (std_S G + 1e-4)   S: the turns of sibling episodes taken
                 from the same state (GiGPO's anchor-state step groups); 0 when S has one member or no spread

With γ = 1 and a terminal reward, discounted is broadcast exactly. γ < 1 (Kevin: 0.4 over refinement turns)
moves credit towards the turns close to the reward: an early turn is credited only for what followed soon.

Clipped surrogate (PPO), per policy token t of completion i, with the importance ratio

    ρ_it = π_θ(o_it | q, o_i<t) / π_old(o_it | q, o_i<t) = exp(logprobs - old_logprobs)
    ℓ_it = -min(ρ_it · A_i,  clip(ρ_it, 1 - ε_low, 1 + ε_high) · A_i)  +  β · KL_it

The min makes the objective pessimistic: once a token's probability has moved more than ε in the
direction the advantage asks for, its gradient is zero (the update is "trusted" only near π_old).
The GRPO objective (DeepSeekMath) maximises, over prompts q and groups o_1..o_G ~ π_old(· | q),

    J(θ) = E[ (1/G) Σ_i (1/|o_i|) Σ_t ( min(ρ_it A_i, clip(ρ_it, 1 - ε, 1 + ε) A_i) - β KL_it ) ]

i.e. the loss is -J: the "grpo" aggregation below. The other aggregations change only the weights.
DAPO's clip-higher sets ε_high = 0.28 > ε_low = 0.2 so unlikely tokens can grow more (keeps entropy up).
GSPO (importance_sampling_level="sequence") uses one ratio per completion, the geometric mean
exp(mean_t(logprobs - old_logprobs)), instead of one per token.

KL to the reference policy, k3 estimator (Schulman, "Approximating KL Divergence"), per sampled token:

    log_ρ = ref_logprobs - logprobs,   k3 = exp(log_ρ) - log_ρ - 1  ≥ 0,   E_{π_θ}[k3] = KL(π_θ ‖ π_ref)

TRL (use_bias_correction_kl=True, its default) multiplies k3 by the importance ratio ρ_it so that the KL
gradient is unbiased when the samples came from π_old; on-policy the value is unchanged.

Aggregation: how token losses ℓ_it (mask m_it = 1 on policy tokens) become one number. This decides how
much a long completion weighs against a short one, which is the whole point of Dr. GRPO and DAPO:

    grpo:     (1/B) Σ_i (1/|o_i|) Σ_t ℓ_it    every completion weighs the same, so each token of a long
              completion weighs less: a long wrong answer is punished less per token, a short right one
              rewarded more — a bias towards short right answers and long wrong ones.
    bnpo:     Σ_it ℓ_it / Σ_it m_it           every token of the (micro-)batch weighs the same.
    dapo:     Σ_it ℓ_it / num_items_in_batch  every token weighs the same across the whole optimizer step:
              num_items_in_batch counts the policy tokens of the full generation batch (all micro-batches
              of gradient accumulation, all processes), so the micro-batch losses add up to a token mean.
              With one micro-batch it equals bnpo.
    dr_grpo:  Σ_it ℓ_it / (B · L_max)          a constant normaliser (L_max = max_completion_length): every
              token weighs the same and the scale does not depend on how long this batch happened to be.

Gradient accumulation (what TRL does, and what a caller of `policy_loss` must do to match it): for grpo,
bnpo and dr_grpo TRL divides each micro-batch loss by the number of accumulation steps; for dapo it does
not, because num_items_in_batch already spans the whole optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")


# ----------------------------------------------------------------------------------------- advantages
def _nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """Unbiased standard deviation ignoring NaN (unscorable completions); NaN when fewer than 2 values."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) * count / (count - 1)
    std = torch.sqrt(torch.where(count > 1, var, torch.full_like(var, math.nan)))
    return std.squeeze(dim) if dim is not None else std.squeeze()


def _group_baseline_and_scale(
    rewards: Tensor, group_size: int, scale_rewards: str, eps: float
) -> tuple[Tensor, Tensor | None]:
    """(n,) baseline (the group's mean reward) and (n,) divisor (std + eps, or None for scale_rewards="none")."""
    if rewards.dim() != 1 or rewards.numel() % group_size:
        shape = tuple(rewards.shape)
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, got {shape}")
    groups = rewards.view(-1, group_size)
    baseline = torch.nanmean(groups, dim=1).repeat_interleave(group_size)  # what a typical sibling scored
    if scale_rewards == "group":
        std = _nanstd(groups, dim=1).repeat_interleave(group_size)
    elif scale_rewards == "batch":
        std = _nanstd(rewards).expand_as(rewards)
    elif scale_rewards == "none":
        return baseline, None
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return baseline, torch.nan_to_num(std, nan=0.0) + eps  # a single scorable value has no spread


def group_advantages(rewards: Tensor, group_size: int, scale_rewards: str = "group", eps: float = 1e-4) -> Tensor:
    """Group-relative advantages of GRPO, exactly as TRL 1.16 computes them.

    Args:
        rewards: (n,) float — one reward per completion; consecutive blocks of `group_size` share a prompt.
            NaN marks an unscorable completion (every reward function returned None): it is left out of its
            group's statistics and gets advantage 0.
        group_size: G, completions per prompt (TRL's num_generations).
        scale_rewards: "group" divides by the group's std (GRPO), "batch" by the std of all n rewards
            (mean still per group), "none" does not divide (Dr. GRPO: std scaling up-weights easy and
            hard prompts whose rewards barely vary).
        eps: added to the std (not under the square root), so a zero-spread group gives 0 / eps = 0.

    Returns:
        (n,) float — A_i = (r_i - mean_group) / (std + eps); std is unbiased (divides by G - 1).
    """
    baseline, scale = _group_baseline_and_scale(rewards, group_size, scale_rewards, eps)
    centred = rewards - baseline  # better (>0) or worse (<0) than its siblings
    return torch.nan_to_num(centred if scale is None else centred / scale, nan=0.0)


def frac_reward_zero_std(rewards: Tensor, group_size: int) -> float:
    """Share of groups whose rewards are all equal (TRL's `frac_reward_zero_std` under scale_rewards="group").

    Those groups have advantage 0 for every completion, so they contribute no policy gradient. When this is
    near 1 "nothing learns": the task is too hard (all 0) or too easy (all 1) for the current policy.
    A group with fewer than two scorable (non-NaN) rewards has no std and is not counted, as in TRL.
    """
    std = _nanstd(rewards.view(-1, group_size), dim=1)
    return torch.isclose(std, torch.zeros_like(std)).float().mean().item()


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """REINFORCE leave-one-out: the baseline of completion i is the mean reward of its G - 1 siblings.

    Args:
        rewards: (n,) float, consecutive groups of `group_size` (≥ 2).

    Returns:
        (n,) float — A_i = r_i - (Σ_j r_j - r_i) / (G - 1) = G / (G - 1) · (r_i - mean_group). The baseline
        does not depend on r_i itself, so the policy-gradient estimate stays unbiased.
    """
    if group_size < 2:
        raise ValueError("rloo_advantages needs group_size >= 2: the baseline is the mean of the other completions")
    groups = rewards.view(-1, group_size)
    others_mean = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others_mean).reshape(-1)


# ---------------------------------------------------------------------------------- turn-level credit
def discounted_returns(turn_rewards: Tensor, turn_mask: Tensor, gamma: float) -> Tensor:
    """Return from each model turn onwards: G_t = Σ_{k≥t} γ^(k-t) r_k, i.e. G_t = r_t + γ G_{t+1}.

    Args:
        turn_rewards: (n, T) float — r_it, the reward of model turn t of episode i (T = most turns in the batch)
        turn_mask: (n, T) 0/1 — 1 on the episode's real turns, which come first (padding at the end)
        gamma: discount per turn; 1 credits every turn with the whole rest of the episode

    Returns:
        (n, T) float — G_it, 0 on padding.
    """
    mask = turn_mask.to(turn_rewards.dtype)
    rewards = turn_rewards * mask
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running  # what turn t earned, now and (discounted) later
        returns[:, t] = running
    return returns * mask


def discounted_turn_advantages(
    turn_rewards: Tensor,
    turn_mask: Tensor,
    group_size: int,
    gamma: float,
    scale_rewards: str = "group",
    eps: float = 1e-4,
) -> Tensor:
    """Per-turn advantages from discounted returns, against the group's episode returns.

    A_it = (G_it - mean_j G_j0) / (std_j G_j0 + eps), with G from `discounted_returns` and j over the group of
    sibling episodes. The baseline is one number per prompt (what the siblings achieved from the shared
    start, G_0), so it does not depend on any action and leaves the policy gradient unbiased; with γ = 1 and
    only a terminal reward every G_it = R_i and this is `group_advantages(R)` on every turn. scale_rewards
    and eps act as in `group_advantages` ("batch": the std of all episodes' G_0; "none": no division).

    Args:
        turn_rewards, turn_mask: (n, T), as in `discounted_returns`; consecutive blocks of `group_size` rows
            share a prompt. An episode without model turns has G_0 = 0.

    Returns:
        (n, T) float — A_it, 0 on padding.
    """
    returns = discounted_returns(turn_rewards, turn_mask, gamma)
    if returns.shape[1] == 0:
        return returns
    baseline, scale = _group_baseline_and_scale(returns[:, 0], group_size, scale_rewards, eps)
    centred = returns - baseline.unsqueeze(1)  # did this turn lead to more than a sibling episode got?
    advantages = centred if scale is None else centred / scale.unsqueeze(1)
    return advantages * turn_mask.to(advantages.dtype)


def step_group_advantages(
    returns: Tensor, turn_mask: Tensor, step_groups: Tensor, scale: bool = True, eps: float = 1e-4
) -> Tensor:
    """GiGPO's step-level advantages: each turn against the other turns taken from the same state.

    Turns of sibling episodes that start from an identical state (the anchor state: same prompt, same
    earlier calls and tool results) form a step group S. There the only difference between the turns is
    the action, so comparing their returns credits the action itself:

        A^step_it = (G_it - mean_S G) / (std_S G + eps)     std unbiased; 0 when |S| = 1 or no spread

    Args:
        returns: (n, T) float — G_it, e.g. from `discounted_returns`
        turn_mask: (n, T) 0/1 — 1 on real turns
        step_groups: (n, T) int — the step group of each turn: equal ids mean the same anchor state (the
            caller makes ids of different prompts differ); ignored on padding
        scale: divide by the step group's std (GiGPO's default); False centres only

    Returns:
        (n, T) float — A^step_it, 0 on padding. GiGPO's advantage is A_i + ω · A^step_it.
    """
    valid = turn_mask.bool()
    turn_returns = returns[valid]  # (m,) the returns of all real turns
    _, member_of, sizes = torch.unique(step_groups[valid], return_inverse=True, return_counts=True)
    sizes = sizes.to(turn_returns.dtype)
    means = torch.zeros_like(sizes).index_add_(0, member_of, turn_returns) / sizes
    centred = turn_returns - means[member_of]  # better or worse than the other actions taken from this state
    squares = torch.zeros_like(sizes).index_add_(0, member_of, centred**2)
    std = torch.sqrt(squares / (sizes - 1).clamp(min=1.0))  # a turn alone in its state: centred 0, std 0
    step = centred / (std[member_of] + eps) if scale else centred
    out = torch.zeros_like(returns)
    out[valid] = step
    return out


def turn_token_advantages(turn_advantages: Tensor, turn_index: Tensor) -> Tensor:
    """Per-token advantages: every token of model turn t gets A_it (the (batch, seq) input of `policy_loss`).

    Args:
        turn_advantages: (batch, T) float — A_it per model turn
        turn_index: (batch, seq) int — the model turn of each token, -1 on prompt, tool and padding tokens
            (`Episode.model_turn_index`)

    Returns:
        (batch, seq) float — A_it on the tokens of turn t, 0 elsewhere.
    """
    per_token = turn_advantages.gather(1, turn_index.clamp(min=0))
    return torch.where(turn_index >= 0, per_token, torch.zeros_like(per_token))


# ------------------------------------------------------------------------------------- KL and entropy
def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from tokens sampled from π_θ (Schulman's k1, k2, k3).

    Args:
        logprobs: (...) float — log π_θ(token) of the sampled tokens
        ref_logprobs: (...) float — log π_ref(token) of the same tokens

    Returns:
        (...) float, with log_ρ = ref_logprobs - logprobs:
        k1 = -log_ρ                 unbiased, high variance, negative on some tokens;
        k2 = log_ρ² / 2             biased (low bias when π_θ ≈ π_ref), low variance, ≥ 0;
        k3 = exp(log_ρ) - log_ρ - 1 unbiased, lower variance than k1 when π_θ ≈ π_ref, ≥ 0 (TRL's choice).
    """
    log_rho = ref_logprobs - logprobs
    if kind == "k1":
        return -log_rho
    if kind == "k2":
        return 0.5 * log_rho**2
    if kind == "k3":
        return torch.exp(log_rho) - log_rho - 1
    raise ValueError(f"kind must be 'k1', 'k2' or 'k3', got {kind!r}")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy H(π(· | prefix)) in nats of each next-token distribution: (..., vocab) → (...).

    A collapsing entropy means the policy stopped exploring: GRPO then sees identical completions in a
    group and the advantages vanish. Logits of -inf (e.g. top-k filtered tokens) contribute 0.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p_logp = torch.where(torch.isneginf(logp), torch.zeros_like(logp), logp.exp() * logp)
    return -p_logp.sum(dim=-1)


# ------------------------------------------------------------------------------------------- the loss
@dataclass
class LossConfig:
    """How token log-probabilities and advantages become the policy loss (TRL GRPOConfig names)."""

    loss_type: str = "dapo"
    """aggregation of token losses: "grpo", "dr_grpo", "dapo" (TRL's default) or "bnpo" (module docstring)"""
    epsilon: float = 0.2
    """lower clip range: the ratio is clipped at 1 - epsilon (and at 1 + epsilon unless epsilon_high is set)"""
    epsilon_high: float | None = None
    """upper clip range (DAPO clip-higher uses 0.28); equals epsilon when None"""
    beta: float = 0.0
    """KL coefficient on the k3 estimate of KL(π_θ ‖ π_ref); 0 (TRL's default) needs no reference model"""
    importance_sampling_level: str = "token"
    """"token": one ratio per token (GRPO); "sequence": one geometric-mean ratio per completion (GSPO)"""
    max_completion_length: int | None = None
    """dr_grpo's constant normaliser L_max: the generation token budget (TRL's max_completion_length)"""
    use_bias_correction_kl: bool = True
    """multiply the k3 term by the importance ratio, as TRL 1.16 does by default (unbiased off-policy KL)"""


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: LossConfig,
    ref_logprobs: Tensor | None = None,
    num_items_in_batch: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The clipped GRPO surrogate loss of one micro-batch, aggregated as TRL 1.16 does.

    Args:
        logprobs: (batch, seq) float — log π_θ(token | prefix) under the current policy, with gradient
        old_logprobs: (batch, seq) float — log π_old(token | prefix) at sampling time (no gradient);
            pass `logprobs.detach()` for a purely on-policy step
        advantages: (batch,) float — one advantage per completion; (batch, seq) for per-token credit
        mask: (batch, seq) 0/1 — 1 on tokens the policy generated (model_mask; TRL: completion × tool mask).
            Masked positions never receive gradient, but must hold finite numbers.
        config: the LossConfig
        ref_logprobs: (batch, seq) float — log π_ref(token | prefix); required when config.beta > 0
        num_items_in_batch: dapo only — policy tokens in the whole optimizer step (all micro-batches and
            processes); defaults to this micro-batch's count, mask.sum()

    Returns:
        (loss, metrics): loss is a 0-dim tensor to call .backward() on. For grpo/bnpo/dr_grpo divide it by
        the number of gradient-accumulation micro-batches, as TRL does. metrics (TRL's names):
        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean" — share of policy tokens
        whose ratio is clipped (low: ratio < 1 - ε with A < 0; high: ratio > 1 + ε_high with A > 0);
        "clip_ratio/low_min", "clip_ratio/high_max" — extremes over completions of the per-completion share;
        "kl" — mean k3 estimate over policy tokens (when beta > 0).
    """
    if config.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {config.loss_type!r}")
    eps_low = config.epsilon
    eps_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (batch, 1): every token of a completion shares its advantage

    # importance ratio π_θ / π_old: how much more likely the token is now than when it was sampled
    log_ratio = logprobs - old_logprobs
    if config.importance_sampling_level == "token":
        log_weight = log_ratio  # (batch, seq)
    elif config.importance_sampling_level == "sequence":
        log_weight = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(1)  # (batch, 1)
    else:
        level = config.importance_sampling_level
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {level!r}")
    ratio = torch.exp(log_weight)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)

    # pessimistic surrogate: the smaller of the unclipped and clipped objectives, negated into a loss
    token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)

    if config.beta != 0.0:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs: score the completions with the reference policy")
        kl = kl_estimate(logprobs, ref_logprobs, "k3")  # (batch, seq): how far π_θ drifted from π_ref
        if config.use_bias_correction_kl:
            kl = kl * ratio
        token_loss = token_loss + config.beta * kl

    # aggregation: how much each token (and so each completion length) weighs, see the module docstring
    masked = token_loss * mask  # (batch, seq): padding, prompt and tool tokens contribute nothing
    if config.loss_type == "grpo":
        loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif config.loss_type == "bnpo":
        loss = masked.sum() / mask.sum().clamp(min=1.0)
    elif config.loss_type == "dapo":
        total = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch).to(mask)
        loss = masked.sum() / total.clamp(min=1.0)
    else:  # dr_grpo
        if config.max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs LossConfig.max_completion_length (the generation token budget)")
        loss = masked.sum() / (token_loss.size(0) * config.max_completion_length)

    with torch.no_grad():
        low = ((ratio < 1 - eps_low) & (advantages < 0)).float()  # wants to shrink, already shrank by > ε
        high = ((ratio > 1 + eps_high) & (advantages > 0)).float()  # wants to grow, already grew by > ε_high
        metrics = {
            "clip_ratio/low_mean": _masked_mean(low, mask),
            "clip_ratio/high_mean": _masked_mean(high, mask),
            "clip_ratio/region_mean": _masked_mean(torch.maximum(low, high), mask),
            "clip_ratio/low_min": _nan_extreme(_per_sequence_mean(low, mask), torch.min),
            "clip_ratio/high_max": _nan_extreme(_per_sequence_mean(high, mask), torch.max),
        }
        if config.beta != 0.0:
            metrics["kl"] = _masked_mean(kl, mask)
    return loss, metrics


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    """Mean over policy tokens; a (batch, 1) quantity (sequence-level ratio) is one value per completion."""
    if x.shape[1] == 1:
        return x.mean().item()
    return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()


def _per_sequence_mean(x: Tensor, mask: Tensor) -> Tensor:
    """(batch,) mean over each completion's policy tokens; NaN for a completion without any."""
    if x.shape[1] == 1:
        return x.squeeze(1)
    return (x * mask).sum(-1) / mask.sum(-1)


def _nan_extreme(x: Tensor, reduce: Callable[[Tensor], Tensor]) -> float:
    """min or max ignoring NaN (completions without policy tokens); NaN when nothing is left."""
    kept = x[~torch.isnan(x)]
    return reduce(kept).item() if kept.numel() else math.nan

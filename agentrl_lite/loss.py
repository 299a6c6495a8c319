"""The policy loss (pipeline stage: advantages + log-probabilities → one scalar to minimise): GRPO's
clipped surrogate, the KL estimators, and how token losses are aggregated. It matches TRL 1.16's
GRPOTrainer (`tests/test_trl_equality.py` runs TRL's own loss code on the same tensors).

Clipped surrogate (PPO), per policy token t of completion i, with the importance ratio::

    ρ_it = π_θ(o_it | q, o_i<t) / π_old(o_it | q, o_i<t) = exp(logprobs - old_logprobs)
    ℓ_it = -min(ρ_it · A_i,  clip(ρ_it, 1 - ε_low, 1 + ε_high) · A_i)  +  β · KL_it

The min makes the objective pessimistic: once a token's probability has moved more than ε in the
direction the advantage asks for, its gradient is zero (the update is "trusted" only near π_old).
The GRPO objective (DeepSeekMath) maximises, over prompts q and groups o_1..o_G ~ π_old(· | q)::

    J(θ) = E[ (1/G) Σ_i (1/|o_i|) Σ_t ( min(ρ_it A_i, clip(ρ_it, 1 - ε, 1 + ε) A_i) - β KL_it ) ]

i.e. the loss is -J: the "grpo" aggregation below. The other aggregations change only the weights.
DAPO's clip-higher sets ε_high = 0.28 > ε_low = 0.2 so unlikely tokens can grow more (keeps entropy up).
GSPO (importance_sampling_level="sequence") uses one ratio per completion, the geometric mean
exp(mean_t(logprobs - old_logprobs)), instead of one per token.

KL to the reference policy, k3 estimator (Schulman, "Approximating KL Divergence"), per sampled token::

    log_ρ = ref_logprobs - logprobs,   k3 = exp(log_ρ) - log_ρ - 1  ≥ 0,   E_{π_θ}[k3] = KL(π_θ ‖ π_ref)

TRL (use_bias_correction_kl=True, its default) multiplies k3 by the importance ratio ρ_it so that the KL
gradient is unbiased when the samples came from π_old; on-policy the value is unchanged.

Aggregation: how token losses ℓ_it (mask m_it = 1 on policy tokens) become one number. This decides how
much a long completion weighs against a short one, which is the whole point of Dr. GRPO and DAPO::

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

from agentrl_lite.choices import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, check_choice


# ------------------------------------------------------------------------------------------------- KL
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


def truncated_importance_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float
                                 ) -> Tensor:
    """Per-token weights min(π_old / π_sampler, cap) for tokens drawn by a sampler that is not exactly π_old.

    A bf16 copy of the policy samples faster but draws from a slightly different distribution than the fp32
    policy the loss differentiates. Weighing each token's policy-gradient term by π_old / π_sampler makes
    the gradient the on-policy one again; truncating the weight at `cap` bounds the variance a rare token
    the sampler under-rated could add (truncated importance sampling, Yao et al. 2025; TRL's
    vllm_importance_sampling_mode="token_truncate").

    Args:
        old_logprobs: (batch, seq) float — log π_old(token | prefix) computed by the trainer, no gradient
        sampler_logprobs: (batch, seq) float — log π_sampler(token | prefix) recorded while sampling
        mask: (batch, seq) 0/1 — policy tokens; elsewhere the weight is 1
        cap: the truncation C > 0 (TRL's default 3; Yao et al. use 2)

    Returns:
        (batch, seq) float weights in (0, cap], without gradient.
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    log_weight = (old_logprobs.detach() - sampler_logprobs) * mask
    return torch.exp(log_weight).clamp(max=cap)


def masked_importance_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Per-token weights π_old / π_sampler where that ratio is at most `cap`, and 0 where it is above.

    Masked importance sampling (MIS): instead of capping a token the sampler under-rated, drop it from the
    gradient. Truncation keeps the token's push at weight `cap` although the sampler, not the policy, chose it;
    masking removes the token a very different sampler would have had to invent (TRL's
    vllm_importance_sampling_mode="token_mask" with clip_max=`cap`). Arguments and shapes as
    `truncated_importance_weights`; returns weights in [0, cap], 1 outside `mask`."""
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    ratio = torch.exp((old_logprobs.detach() - sampler_logprobs) * mask)
    return ratio.masked_fill(ratio > cap, 0.0)


IS_MODES = ("truncate", "mask")
"""how `GRPOConfig.is_mode` corrects a sampler's mismatch: `truncated_importance_weights` or
`masked_importance_weights`"""


def importance_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float,
                       mode: str = "truncate") -> Tensor:
    """The per-token weights of one correction mode of `IS_MODES` (see each function)."""
    if mode == "truncate":
        return truncated_importance_weights(old_logprobs, sampler_logprobs, mask, cap)
    if mode == "mask":
        return masked_importance_weights(old_logprobs, sampler_logprobs, mask, cap)
    raise ValueError(f"mode must be one of {IS_MODES}, got {mode!r}")


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

    def __post_init__(self) -> None:
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("importance_sampling_level", self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: LossConfig,
    ref_logprobs: Tensor | None = None,
    num_items_in_batch: Tensor | float | None = None,
    sampling_weights: Tensor | None = None,
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
        sampling_weights: (batch, seq) float, no gradient — truncated importance weights
            min(π_old / π_sampler, C) when the tokens were sampled by another copy of the policy (a bf16
            sampler): they multiply each token's policy-gradient term, not the KL term (TRL's vLLM correction)

    Returns:
        (loss, metrics): loss is a 0-dim tensor to call .backward() on. For grpo/bnpo/dr_grpo divide it by
        the number of gradient-accumulation micro-batches, as TRL does. metrics (TRL's names):
        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean" — share of policy tokens
        whose ratio is clipped (low: ratio < 1 - ε with A < 0; high: ratio > 1 + ε_high with A > 0);
        "clip_ratio/low_min", "clip_ratio/high_max" — extremes over completions of the per-completion share;
        "kl" — mean k3 estimate over policy tokens (when beta > 0).
    """
    eps_low = config.epsilon
    eps_high = config.epsilon if config.epsilon_high is None else config.epsilon_high
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (batch, 1): every token of a completion shares its advantage

    # importance ratio π_θ / π_old: how much more likely the token is now than when it was sampled
    log_ratio = logprobs - old_logprobs
    if config.importance_sampling_level == "token":
        log_weight = log_ratio  # (batch, seq)
    else:  # sequence (GSPO): the geometric mean of the token ratios
        log_weight = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(1)  # (batch, 1)
    ratio = torch.exp(log_weight)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)

    # pessimistic surrogate: the smaller of the unclipped and clipped objectives, negated into a loss
    token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    if sampling_weights is not None:  # the sampler was not exactly π_old: reweigh its tokens (truncated IS)
        token_loss = token_loss * sampling_weights

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

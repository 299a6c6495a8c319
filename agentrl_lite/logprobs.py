"""Log-probabilities (pipeline stage: episode → log π_θ): log π_θ(token_t | tokens_<t) for the tokens a
loss needs, and the policy's entropy where it acted.

Both SFT and RL need per-token log-probabilities of given sequences, on a subset of positions (assistant or
policy tokens). The vocabulary projection is the most expensive part of a small model's forward pass
(49k × hidden for every position), so we project only the positions whose next token is scored.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities, computed only where needed.

    Args:
        input_ids: (batch, seq) int — whole sequences (prompt and completion)
        attention_mask: (batch, seq) int — 1 on real tokens, 0 on padding
        score_mask: (batch, seq) int — 1 on tokens to score (e.g. model_mask); position 0 is never scored
        temperature: logits are divided by it, as at sampling time

    Returns:
        (batch, seq) float — log π(input_ids[:, t] | input_ids[:, :t]) where score_mask is 1, else 0;
        with return_entropy, also (batch, seq) float — the entropy of π(· | input_ids[:, :t]) at those
        positions (how unsure the policy was where it acted), detached.
    """
    needed = score_mask[:, 1:].bool()  # token t is predicted by the logits at position t - 1
    keep = needed.any(dim=0).nonzero().squeeze(-1)  # positions some row needs: shared across the batch
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(out)
    if keep.numel() > 0:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
        all_logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)  # (batch, kept, vocab)
        targets = input_ids[:, keep + 1]  # (batch, kept)
        out[:, keep + 1] = all_logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * needed[:, keep]
        if return_entropy:
            with torch.no_grad():
                entropy[:, keep + 1] = entropy_from_logprobs(all_logprobs) * needed[:, keep]
    return (out, entropy) if return_entropy else out


def entropy_from_logprobs(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy H(π(· | prefix)) in nats of each next-token distribution, from its log-probabilities:
    (..., vocab) → (...). Tokens of probability 0 (log-probability -inf, e.g. top-k filtered) contribute 0.

    A collapsing entropy means the policy stopped exploring: GRPO then sees identical completions in a
    group and the advantages vanish.
    """
    p_logp = torch.where(torch.isneginf(logprobs), torch.zeros_like(logprobs), logprobs.exp() * logprobs)
    return -p_logp.sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """`entropy_from_logprobs` of raw logits (..., vocab) → (...), computed in float32."""
    return entropy_from_logprobs(torch.log_softmax(logits.float(), dim=-1))

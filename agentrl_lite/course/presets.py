"""The GRPO settings lessons 04–08 share, so a lesson states only what it changes (course tooling).

Each lesson keeps a `BUDGET` per profile (steps, prompts, group, lr: what the smoke, cpu and gpu profiles
can afford) and passes it here with its turn and token budgets; everything else is the course's common
choice, written once:

- DAPO's token-level loss (TRL's default) and no KL term, unless the lesson changes `loss`;
- bf16 autocast in the loss pass where the device runs bf16 natively (`models.bf16_is_fast`: 1.8× faster there),
  at most 8 episodes and 1024 tokens per micro-batch (a group's shared prompt counted once,
  `logprobs.pass_tokens`), and `GRPOConfig`'s gradient checkpointing (on by default): the pass keeps each
  decoder layer's input only, which helps keep a lesson's kernel under the course's 4 GB
  (`course.budgets.MEMORY_BUDGET_MB`);
- sampling with a bf16 copy of the policy on a CPU with bf16 instructions, or one with its linear weights packed in
  fp16 for fbgemm on an x86 CPU without (`models.fast_sampler_dtype`), corrected by truncated importance sampling
  (the trainer's `is_cap`);
- `skip_empty_updates`: a batch without reward spread does not step AdamW (lesson 06 shows why);
- `skip_zero_advantage`: groups without reward spread are left out of the loss pass (the same gradient, less work);
- sampling at temperature 1, 32 episodes per batch, no nested progress bar.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.rollout import RolloutConfig


def grpo_preset(budget: dict[str, Any], seed: int, *, max_turns: int, max_new_tokens: int,
                sampling_batch_size: int = 32, **overrides: Any) -> GRPOConfig:
    """The course's GRPO config for one lesson and profile.

    budget: the lesson's budget for the current profile; reads `steps`, `prompts` (prompts_per_step),
        `group` (group_size) and `lr`.
    max_turns, max_new_tokens: the episode's turn budget and each turn's token budget (sampling).
    sampling_batch_size: episodes sampled together (memory, not the objective).
    overrides: any other `GRPOConfig` field, e.g. `loss=LossConfig(beta=0.2)`, `credit="discounted"`, `steps=3`.
    """
    config = GRPOConfig(steps=budget["steps"], prompts_per_step=budget["prompts"], group_size=budget["group"],
                        lr=budget["lr"], bf16_loss="auto", micro_batch_size=8, micro_batch_tokens=1024, seed=seed,
                        skip_empty_updates=True,
                        skip_zero_advantage=True,
                        sampler_dtype="auto",
                        rollout=RolloutConfig(max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=1.0,
                                              batch_size=sampling_batch_size, progress=False))
    return replace(config, **overrides)

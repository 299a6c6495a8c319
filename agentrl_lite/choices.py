"""The string options of the pipeline, and the one check every config runs on them.

A typo in a string option (`loss_type="dr-grpo"`) must fail when the config is built, with the valid
choices in the message, not halfway through a run. Every config dataclass calls `check_choice` in its
`__post_init__` on the tuples below; functions that take one of these options directly (e.g.
`advantages.group_advantages`) call it too.
"""

from __future__ import annotations

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
"""how token losses are averaged into one number (see `agentrl_lite.loss`)"""
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
"""one importance ratio per token (GRPO) or per completion (GSPO)"""
SCALE_REWARDS = ("group", "batch", "none")
"""what centred rewards are divided by: the group's std, the batch's std, or nothing (Dr. GRPO)"""
CREDITS = ("broadcast", "discounted", "step_group")
"""how an episode's reward reaches its turns (see `agentrl_lite.advantages`)"""
TURN_BASELINES = ("first_turn", "per_turn")
"""what credit "discounted" compares a turn's return with: the siblings' returns from their first turn, or from
the same turn (see `agentrl_lite.advantages.discounted_turn_advantages`)"""
ENGINES = ("kv_cache", "generate")
"""how the rollout samples a turn (see `agentrl_lite.rollout.RolloutConfig.engine`)"""
REPORT_TO = (None, "tensorboard", "trackio")
"""where the GRPO trainer also sends its metrics"""


def check_choice(name: str, value: object, choices: tuple) -> None:
    """Raise a ValueError naming the option and its valid values when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name}={value!r}: use one of {', '.join(map(repr, choices))}.")

"""The Environment protocol (pipeline stage: task → prompt and tools; episode → score).

An environment is everything task-specific in an RL run, behind three methods. The rollout engine, the GRPO
trainer, `evaluate` and the TRL bridge use nothing else, so a new task family (search, kernels, memory)
is a new class with these methods and nothing in the RL core changes:

    prompt(task)          -> the chat messages the episode starts from (system + user)
    toolbox_for(task)     -> the tools offered in that episode, a fresh `Toolbox` per call, or None
    score(task, episode)  -> what the episode achieved, e.g. {"correct": 1.0, "tool_calls": 2.0}

A task is a plain dict (one line of a `data/*.jsonl` file): its fields reach the reward functions as
keyword columns (`answer=[...]`), exactly as a dataset's columns reach TRL's. `score` is for evaluation,
not training: it must return `"correct"` (1.0 or 0.0) and may add any other number (or label, such as
an error type) worth averaging or counting per task label. Rewards, which is what RL optimises, are
separate functions (`agentrl_lite.rewards`), so one environment can be trained with several rewards.

The task families live in `agentrl_lite.tasks`: `ArithmeticEnv` (arithmetic and word problems, with or
without a calculator), `FunctionCallEnv` (BFCL and synthetic function calling).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentrl_lite.episode import Episode
from agentrl_lite.tools import Toolbox

Task = dict[str, Any]
"""one task: a JSON object with the fields its environment and rewards read (e.g. question, answer)"""


@runtime_checkable
class Environment(Protocol):
    """What the RL core needs from a task family (see the module docstring)."""

    def prompt(self, task: Task) -> list[dict[str, str]]:
        """The chat messages the episode starts from; tool schemas are rendered by the chat template."""
        ...

    def toolbox_for(self, task: Task) -> Toolbox | None:
        """The tools offered in this task's episode: a new `Toolbox` per call (tools may keep state, such as a
        Python session), or None for a single-turn episode without tools."""
        ...

    def score(self, task: Task, episode: Episode) -> dict[str, Any]:
        """What the episode achieved: `"correct"` (1.0/0.0) and any other per-episode numbers or labels."""
        ...

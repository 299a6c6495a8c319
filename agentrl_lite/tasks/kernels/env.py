"""The kernel environment (an `Environment`): a task's operator and C signature in, a C kernel out, scored by
the whole verification pipeline (`verify`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.tasks.kernels.catalog import TASKS, task_by_name
from agentrl_lite.tasks.kernels.stages import verify

SYSTEM_PROMPT = (
    "You write fast, correct C kernels. Reply with one ```c code block that defines exactly the requested "
    "function. Arrays are float32, row-major and contiguous. Only <math.h> is available; no other headers, no "
    "global or static variables, one thread."
)


def kernel_tasks(split: str | None = None) -> list[dict[str, Any]]:
    """The tasks as environment rows ({"name", "split"}), all or one split."""
    return [{"name": t.name, "split": t.split} for t in TASKS if split is None or t.split == split]


def kernel_prompt_text(task: dict[str, Any], with_reference: bool = False, shape: str = "cpu") -> str:
    spec = task_by_name(task["name"])
    text = f"Task: {spec.description}.\nWrite: {spec.signature}"
    if with_reference:
        text += f"\nThe PyTorch reference:\n```python\n{spec.reference_source(shape)}```"
    return text


@dataclass
class KernelEnv:
    """Write a C kernel for an operator; the reward is the tiered verdict of `verify`.

    shape: the size set correctness and timing run at ("smoke" in tests, "cpu" for real timings).
    with_reference: also show the PyTorch reference in KernelBench's format (longer prompts).
    timing: time correct kernels against the reference (False: correctness only, a correct kernel earns the
        correct-but-slower reward).
    """

    shape: str = "cpu"
    with_reference: bool = False
    timing: bool = True

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": kernel_prompt_text(task, self.with_reference, self.shape)}]

    def toolbox_for(self, task: dict[str, Any] | None = None) -> None:
        return None  # single turn: the reply is the kernel

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, float]:
        """The verdict's metrics: reward, correct (fast_0), compiled, fast_1, fast_1.2, speedup, flagged."""
        text = episode.model_turns[-1].content if episode.model_turns else ""
        return verify(task_by_name(task["name"]), text, self.shape, self.timing).metrics()

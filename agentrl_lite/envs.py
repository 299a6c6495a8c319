"""Environments: a task family = a prompt builder + the tools offered + a scorer.

The rollout engine never looks inside a task; it asks the environment for the prompt messages and a
toolbox, runs the episode, and hands the episode back to the environment to be scored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.tools import Toolbox, calculator

ANSWER_FORMAT = "Give the final answer as a number inside <answer></answer> tags, e.g. <answer>42</answer>."
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def parse_number(text: str | None) -> float | None:
    """The number a string states, tolerating thousands separators (`1,234`) and surrounding words."""
    if text is None:
        return None
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def numbers_match(predicted: str | None, gold: str) -> bool:
    value = parse_number(predicted)
    return value is not None and abs(value - float(gold)) <= 1e-6 * max(1.0, abs(float(gold)))


@dataclass
class ArithmeticEnv:
    """Arithmetic questions, optionally with a calculator tool.

    Scoring is strict: correct means an `<answer>` tag holding the right number. `lenient_correct` also
    accepts the last number of the completion, to separate "cannot compute" from "ignores the format".
    """

    tools: list[Callable] = field(default_factory=lambda: [calculator])
    """tools offered to the policy; empty for the no-tool baseline"""
    instructions: str | None = None
    """the system prompt, replacing the default one (which asks for the `<answer>` format)"""

    @property
    def system_prompt(self) -> str:
        if self.instructions is not None:
            return self.instructions
        if self.tools:
            return f"You are a careful assistant. Use the tools to compute. {ANSWER_FORMAT}"
        return f"You are a careful assistant. {ANSWER_FORMAT}"

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task["question"]}]

    def make_toolbox(self) -> Toolbox | None:
        return Toolbox(self.tools) if self.tools else None

    def score(self, episode: Episode) -> dict[str, float]:
        gold = episode.metadata["answer"]
        last_text = episode.model_turns[-1].content if episode.model_turns else ""
        return {
            "correct": float(numbers_match(episode.answer, gold)),
            "lenient_correct": float(numbers_match(episode.answer or last_text, gold)),
            "formatted": float(episode.answer is not None),
            "tool_calls": float(episode.num_tool_calls),
        }

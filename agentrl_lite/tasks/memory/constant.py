"""A constant-size memory in the style of MEM1 (`ConstantMemoryEnv`): the agent's whole memory is one bounded
internal state that it rewrites every turn, graded by the same probe questions as a memory bank.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import completion_text
from agentrl_lite.tasks.memory.bank import MemoryBank, _searchable, _written
from agentrl_lite.tasks.memory.manager import FORMAT_WEIGHT
from agentrl_lite.tasks.memory.questions import gold_answer_in_bank, probes
from agentrl_lite.tasks.memory.templates import EXAMPLE_NAME
from agentrl_lite.tools import Toolbox


@dataclass
class ConstantMemory:
    """A constant-size memory (MEM1): the agent's whole memory is one text of at most `max_words` words that
    it rewrites each turn, so the context stays the same size however long the conversation runs."""

    max_words: int = 60
    """longest internal state; a longer rewrite is cut to its first max_words words"""
    state: str = ""
    """the current internal state"""

    def __post_init__(self) -> None:
        if self.max_words < 1:
            raise ValueError(f"max_words must be at least 1, got {self.max_words}")

    def rewrite(self, state: str) -> str:
        """Replace your internal state with a new one that keeps everything still worth remembering.

        Args:
            state: The whole new internal state (it replaces the old one), at most the word limit.
        """
        if not isinstance(state, str):
            return f"Error: state must be a string, got {type(state).__name__}; the state is unchanged."
        words = state.split()
        self.state = " ".join(words[: self.max_words])
        if len(words) > self.max_words:
            return f"State saved, cut to its first {self.max_words} of {len(words)} words."
        return f"State saved ({len(words)} words)."

    def tools(self) -> list[Callable[..., str]]:
        return [self.rewrite]

    def to_text(self) -> str:
        return self.state or "(empty)"


STATE_WORDS = 60
"""the constant memory's bound in the lesson: about six facts, fewer than most dialogues state"""
STATE_PROMPT = (
    "You keep one short internal state about the user's friends and their employers; it is all you will remember. "
    "Read the new message, then call rewrite once with the whole new state: keep every fact still true, write a "
    "changed fact's old value as \"(earlier: ...)\", drop a retracted fact, ignore small talk. One short sentence per "
    f"fact, e.g. \"{EXAMPLE_NAME}'s home city is Dorim.\""
)
"""the constant memory's system prompt"""


def state_of(bank: MemoryBank, max_words: int = STATE_WORDS) -> str:
    """The ideal internal state: the oracle bank's memories in order, cut to the first max_words words (a fact
    that does not fit is lost, as in any bounded memory)."""
    return " ".join(" ".join(bank.entries.values()).split()[:max_words])


def state_bank(state: str) -> MemoryBank:
    """An internal state read as a bank of its sentences, so `gold_answer_in_bank` can grade it."""
    sentences = [s for s in re.split(r"(?<=\.)\s+", state.strip()) if s and _searchable(s)]
    return MemoryBank(max(len(sentences), 1), dict(enumerate(sentences, 1)))


def constant_memory_tasks(dialogues: list[dict[str, Any]], max_words: int = STATE_WORDS) -> list[dict[str, Any]]:
    """One task per turn, teacher-forced: the ideal state before the turn (`state_of` the oracle bank), the turn,
    its probes and the ideal state after it (the rewrite a demonstration makes)."""
    tasks = []
    for dialogue in dialogues:
        bank = MemoryBank()
        for t, turn in enumerate(dialogue["turns"]):
            before = state_of(bank, max_words)
            bank.apply(turn["op"])
            tasks.append({"id": f"{dialogue['id']}-s{t:02d}", "dialogue_id": dialogue["id"], "split": dialogue["split"],
                          "turn_index": t, "session": turn["session"], "text": turn["text"], "event": turn["event"],
                          "state": before, "ideal_state": state_of(bank, max_words), "max_words": max_words,
                          "probes": probes(dialogue["turns"][: t + 1])})
    return tasks


class ConstantMemoryEnv:
    """MEM1's constant memory (an `Environment`): the internal state and the new turn in, one rewrite out."""

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": STATE_PROMPT},
                {"role": "user", "content": f"Internal state: {task['state'] or '(empty)'}\n\n"
                                            f"New message (session {task['session']}): {task['text']}"}]

    def toolbox_for(self, task: dict[str, Any]) -> Toolbox:
        return Toolbox(ConstantMemory(task["max_words"], task["state"]).tools())

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, Any]:
        """correct: the careful reader answers every probe from the rewritten state; probes: the share it
        answers; formatted: exactly one accepted rewrite; words: the new state's length."""
        state, formatted = rewritten_state(task, _written(episode))
        passed = [gold_answer_in_bank(state_bank(state), q) for q in task["probes"]]
        return {"correct": float(all(passed)), "probes": sum(passed) / len(passed) if passed else 1.0,
                "formatted": formatted, "words": float(len(state.split()))}

    @staticmethod
    def demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": format_tool_call(ToolCall("rewrite", {"state": task["ideal_state"]}))}]


def rewritten_state(task: dict[str, Any], text: str) -> tuple[str, float]:
    """The state after running the reply on the task's state as the tool would, and whether the reply was
    exactly one accepted rewrite (1.0) or not (0.0; then the old state stays, or the last accepted rewrite)."""
    memory = ConstantMemory(task["max_words"], task["state"])
    _, observations = Toolbox(memory.tools()).run(text)
    return memory.state, float(len(observations) == 1 and not observations[0].startswith("Error:"))


def constant_memory_reward(prompts: list[Any], completions: list[Any], state: list[str] | None = None,
                           probes: list[list[dict]] | None = None, max_words: list[int] | None = None,
                           **kwargs: Any) -> list[float]:
    """A TRL-style reward for the constant memory: 1.0 when the careful reader answers every probe from the
    rewritten state, plus FORMAT_WEIGHT for exactly one accepted rewrite (the bound is the tool's, so no size term)."""
    if state is None or probes is None or max_words is None or len(state) != len(completions):
        raise ValueError("constant_memory_reward needs the per-sample columns state, probes and max_words")
    rewards = []
    for s, p, n, c in zip(state, probes, max_words, completions, strict=True):
        new, formatted = rewritten_state({"state": s, "max_words": n}, completion_text(c))
        rewards.append(float(all(gold_answer_in_bank(state_bank(new), q) for q in p)) + FORMAT_WEIGHT * formatted)
    return rewards

"""The record of one agent episode: tokens in, tokens out.

An episode is a single token sequence `prompt | model turn | tool turn | model turn | ...`. Every list
below is aligned with `token_ids` (one entry per token), so the RL loss can use them directly:

    token_ids:  (seq,) int   — every token of the conversation, exactly as sampled or inserted
    logprobs:   (seq,) float — log π_old(token | prefix) at sampling time; 0.0 where model_mask is 0
    model_mask: (seq,) int   — 1 exactly on tokens the policy generated, 0 on prompt/tool/environment

Never re-tokenise `text` to recover what the model sampled: decoding and re-encoding is not the identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

StopReason = Literal["answer", "no_answer", "max_turns", "max_tokens"]


@dataclass
class Turn:
    """One segment of an episode.

    role: "model" for a policy turn, "tool" for the environment's reply (tool responses + the next
        assistant header), "prompt" for the initial prompt.
    start, end: the half-open token span [start, end) of this turn inside `Episode.token_ids`.
    """

    role: Literal["prompt", "model", "tool"]
    start: int
    end: int
    text: str
    """the turn's tokens decoded as they are (special tokens included)"""
    content: str = ""
    """for a model turn: the message content, i.e. `text` without the end-of-turn token"""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    finished: bool = True
    """for a model turn: it ended with end-of-turn; False when cut by the token budget"""


@dataclass
class Episode:
    """One rollout of the policy in an environment (see the module docstring for the aligned lists)."""

    prompt: list[dict[str, Any]]
    """the chat messages the episode started from"""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    model_mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    stop_reason: StopReason | None = None
    answer: str | None = None
    """the final answer extracted from the last model turn (None when absent)"""
    metadata: dict[str, Any] = field(default_factory=dict)
    """task fields carried along (e.g. the gold answer), for reward functions"""

    @property
    def prompt_length(self) -> int:
        return self.turns[0].end if self.turns else 0

    @property
    def model_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == "model"]

    @property
    def num_tool_calls(self) -> int:
        return sum(len(t.tool_calls) for t in self.model_turns)

    @property
    def num_model_tokens(self) -> int:
        return sum(self.model_mask)

    @property
    def completion_text(self) -> str:
        """Everything after the prompt, as text (for reading and for text-based rewards only)."""
        return "".join(t.text for t in self.turns[1:])

    def messages(self) -> list[dict[str, Any]]:
        """The episode as chat messages (prompt + assistant/tool turns), e.g. for SFT or TRL."""
        out = list(self.prompt)
        for turn in self.turns[1:]:
            if turn.role == "model":
                out.append({"role": "assistant", "content": turn.content})
            else:
                out.extend({"role": "tool", "content": r} for r in turn.tool_results)
        return out

"""The episode (what the rollout stage produces and every later stage reads): the record of one agent
episode, tokens in, tokens out.

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

from agentrl_lite.chat import extract_answer, has_complete_tool_call

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


def is_void_turn(turn: Turn) -> bool:
    """Whether a model turn is void (SimpleTIR): it yields neither a complete tool call nor a final answer.

    Void means both:

    - no complete tool call: no closed `<tool_call> ... </tool_call>` block (`chat.has_complete_tool_call`),
      i.e. no call at all or only a `<tool_call>` that was never closed;
    - no final answer: no `<answer>...</answer>` (`chat.extract_answer` returns None).

    How the edge cases count:

    - a closed block whose JSON is malformed is *not* void: the environment answers it with a parse error
      the policy can learn from, as SimpleTIR's interpreter answers a complete code block that fails;
    - a turn cut by the token budget (`finished` False) is judged by its text like any other: void unless
      it closed a tool call or an answer before the cut (usually the cut lands inside one, so it is void).
      Being cut is a separate matter, handled by DAPO's overlong filtering (`mask_truncated_completions`);
    - without tools (single-turn tasks) a final reply without `<answer>` tags is void: it is an episode
      with stop_reason "no_answer". Only the text counts, so a closed tool-call block there is not void.

    Prompt and tool turns are never void.
    """
    if turn.role != "model":
        return False
    return not has_complete_tool_call(turn.content) and extract_answer(turn.content) is None


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
    def has_void_turn(self) -> bool:
        """Whether any model turn is void (`is_void_turn`); SimpleTIR leaves such episodes out of the update."""
        return any(is_void_turn(t) for t in self.model_turns)

    @property
    def model_turn_index(self) -> list[int]:
        """(seq,) int — for every token, the index of the model turn it belongs to (0, 1, ...); -1 elsewhere."""
        index = [-1] * len(self.token_ids)
        for t, turn in enumerate(self.model_turns):
            index[turn.start:turn.end] = [t] * (turn.end - turn.start)
        return index

    @property
    def completion_text(self) -> str:
        """Everything after the prompt as text, tool responses and special tokens included: for reading. Rewards
        must not read it (a tool result would count as the policy's answer); they get the episode through
        `rewards.reward_kwargs`, whose completions `rewards.completion_text` reads as the policy's text only."""
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

"""Held-out evaluation: run the policy on tasks it was not trained on and summarise what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl_lite.episode import Episode
from agentrl_lite.rollout import RolloutConfig, rollout


@dataclass
class EvalResult:
    """Means over held-out episodes (each metric in [0, 1] except tool_calls_per_episode)."""

    accuracy: float
    """right number inside <answer> tags"""
    lenient_accuracy: float
    """right number anywhere at the end, format ignored"""
    format_rate: float
    """share of episodes that gave an <answer>"""
    tool_call_rate: float
    """share of episodes with at least one tool call"""
    tool_calls_per_episode: float
    n: int
    episodes: list[Episode] = field(repr=False, default_factory=list)

    def metrics(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "episodes"}


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env: Any,
    tasks: list[dict],
    config: RolloutConfig | None = None,
) -> EvalResult:
    """Roll out one episode per task with `env`'s prompt and tools, score each with `env.score`."""
    episodes = rollout(model, tokenizer, [env.prompt(t) for t in tasks], env.make_toolbox, config, metadata=tasks)
    scores = [env.score(ep) for ep in episodes]
    for ep, s in zip(episodes, scores, strict=True):
        ep.metadata["score"] = s

    def mean(key: str) -> float:
        return sum(s[key] for s in scores) / max(1, len(scores))

    return EvalResult(
        accuracy=mean("correct"),
        lenient_accuracy=mean("lenient_correct"),
        format_rate=mean("formatted"),
        tool_call_rate=sum(ep.num_tool_calls > 0 for ep in episodes) / max(1, len(episodes)),
        tool_calls_per_episode=mean("tool_calls"),
        n=len(episodes),
        episodes=episodes,
    )

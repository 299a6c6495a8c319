"""Evaluation (pipeline stage: policy → held-out numbers): run the policy once per task through its
environment and summarise what it did, overall and per task label.

One function for every task family: `evaluate(model, tokenizer, env, tasks, config)` rolls out one episode
per task (`rollout.rollout_env`), scores each with `env.score(task, episode)` and returns an `EvalReport`.
The report keeps every per-task score, so paired comparisons (same tasks, two policies) read its
`correct` vector. A label groups the tasks a lesson reports separately: a word problem's `template`, a
BFCL entry's `category`; tasks without one share the label "all".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode
from agentrl_lite.models import release_memory, sampling_copy
from agentrl_lite.phases import timed
from agentrl_lite.rewards import tool_productivity
from agentrl_lite.rollout import RolloutConfig, rollout_env

LABEL_KEYS = ("category", "template")
"""task fields that name a task's label, in order of preference"""
GREEDY = RolloutConfig(max_turns=3, max_new_tokens=64, temperature=0.0, progress=False)
"""the default evaluation rollout: greedy, so a held-out number does not depend on a sampling seed"""


def task_label(task: dict[str, Any], label_key: str | None = None) -> str:
    """The label a task is reported under: `task[label_key]`, else the first of `LABEL_KEYS` it has, else "all"."""
    keys = (label_key,) if label_key else LABEL_KEYS
    return next((str(task[k]) for k in keys if k in task), "all")


def task_id(task: dict[str, Any], index: int) -> str:
    """A task's id for per-item records: its `id`, else its `name` (a kernel operator), else its position."""
    return str(task.get("id", task.get("name", f"#{index}")))


@dataclass
class EvalReport:
    """One evaluation: per task, its label, its episode and its score (`env.score`), with summaries."""

    labels: list[str]
    """(n,) the label of each task"""
    scores: list[dict[str, Any]]
    """(n,) `env.score(task, episode)` of each task; every one holds "correct"""
    episodes: list[Episode] = field(repr=False, default_factory=list)
    ids: list[str] = field(default_factory=list)
    """(n,) each task's id (its `id`, else its `name`), so a results file names the items it scored"""

    def __repr__(self) -> str:
        by_label = {k: round(v, 3) for k, v in self.by_label().items()}
        return (f"EvalReport(n={self.n}, accuracy={self.accuracy:.3f}, by_label={by_label}, "
                f"calls_per_episode={self.calls_per_episode:.2f}, stop_reasons={self.stop_reasons})")

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def correct(self) -> list[float]:
        """(n,) 1.0 where the task was solved: the vector paired comparisons between policies use"""
        return [float(s["correct"]) for s in self.scores]

    @property
    def tool_calls(self) -> list[int]:
        """(n,) well-formed tool calls per episode"""
        return [ep.num_tool_calls for ep in self.episodes]

    @property
    def accuracy(self) -> float:
        """share of tasks solved"""
        return self.mean("correct")

    @property
    def calls_per_episode(self) -> float:
        return sum(self.tool_calls) / max(1, self.n)

    @property
    def tool_call_rate(self) -> float:
        """share of episodes with at least one tool call"""
        return sum(c > 0 for c in self.tool_calls) / max(1, self.n)

    @property
    def tool_productivity(self) -> float:
        """OTC's correct answers per tool call (`rewards.tool_productivity`)"""
        return tool_productivity(self.correct, self.tool_calls)

    @property
    def counts(self) -> dict[str, int]:
        """label → tasks evaluated, in order of first appearance"""
        return dict(Counter(self.labels))

    @property
    def overall(self) -> float:
        """Unweighted mean of the per-label accuracies (BFCL's "overall" averages categories, not entries)."""
        by_label = self.by_label()
        return sum(by_label.values()) / max(1, len(by_label))

    @property
    def stop_reasons(self) -> dict[str, int]:
        """why the episodes ended: answer, no_answer, max_turns, max_tokens → count"""
        reasons = Counter(ep.stop_reason for ep in self.episodes)
        return {r: reasons[r] for r in ("answer", "no_answer", "max_turns", "max_tokens") if r in reasons}

    def mean(self, key: str) -> float:
        """The mean of a numeric score over all tasks (e.g. "lenient_correct", "formatted")."""
        return sum(float(s[key]) for s in self.scores) / max(1, self.n)

    def by_label(self, key: str = "correct") -> dict[str, float]:
        """label → the mean of a numeric score ("correct": accuracy per label), in order of first appearance."""
        totals: dict[str, float] = {}
        for label, score in zip(self.labels, self.scores, strict=True):
            totals[label] = totals.get(label, 0.0) + float(score[key])
        counts = self.counts
        return {label: total / counts[label] for label, total in totals.items()}

    def calls_by_label(self) -> dict[str, float]:
        """label → tool calls per episode"""
        counts, totals = self.counts, dict.fromkeys(self.counts, 0)
        for label, calls in zip(self.labels, self.tool_calls, strict=True):
            totals[label] += calls
        return {label: totals[label] / counts[label] for label in counts}

    def errors(self, key: str = "error_type") -> dict[str, dict[str, int]]:
        """label → {value of `key`: count} over the failed tasks (e.g. BFCL's rule broken)."""
        out: dict[str, dict[str, int]] = {}
        for label, score in zip(self.labels, self.scores, strict=True):
            if not score["correct"]:
                bucket = out.setdefault(label, {})
                bucket[str(score.get(key, ""))] = bucket.get(str(score.get(key, "")), 0) + 1
        return out

    def row(self, name: str, calls_by_label: bool = False) -> dict[str, Any]:
        """One table row for `viz.show_table`: accuracy overall and per label, calls, productivity, stops."""
        row: dict[str, Any] = {"policy": name, "accuracy": self.accuracy}
        if len(self.counts) > 1:
            row.update(self.by_label())
        row["calls/episode"] = self.calls_per_episode
        if calls_by_label:
            row.update({f"calls ({label})": calls for label, calls in self.calls_by_label().items()})
        row.update({"TP": self.tool_productivity, "stop reasons": str(self.stop_reasons)})
        return row

    def metrics(self) -> dict[str, Any]:
        """The report as JSON-ready numbers, for a results file; `correct` is the per-task vector that paired
        comparisons across policies and seeds need (`stats`, `course.reproduce`)."""
        numeric = {k for s in self.scores for k, v in s.items() if isinstance(v, int | float)}
        return {"n": self.n, "accuracy": self.accuracy, "correct": self.correct, "ids": self.ids,
                "tool_calls": self.tool_calls,
                **{f"mean_{k}": self.mean(k) for k in sorted(numeric - {"correct"})},
                "by_label": self.by_label(), "counts": self.counts, "overall": self.overall,
                "calls_per_episode": self.calls_per_episode, "tool_call_rate": self.tool_call_rate,
                "calls_by_label": self.calls_by_label(), "tool_productivity": self.tool_productivity,
                "stop_reasons": self.stop_reasons}


@timed("evaluation")
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env: Environment,
    tasks: Sequence[dict[str, Any]],
    config: RolloutConfig | None = None,
    label_key: str | None = None,
    dtype: str | None = None,
) -> EvalReport:
    """Roll out one episode per task in `env` and score each with `env.score(task, episode)`.

    config: how episodes are sampled; default `GREEDY` (temperature 0: one deterministic answer per task).
    label_key: the task field to report per label (default: the first of `LABEL_KEYS` a task has).

    dtype: None evaluates the model as it is. "auto" or "bfloat16": a copy cast to that dtype answers
        (`models.sampling_copy`), as an inference server would serve the policy; on a CPU with bf16 instructions
        it runs about twice as fast. Greedy answers can then differ from the fp32 policy's where two tokens are
        nearly tied, so compare policies evaluated with the same dtype. A GPU with bf16 gets the bf16 copy too
        (the policy itself stays fp32 everywhere: `models.resolve_dtype`).

    Each episode also keeps its score as `episode.metadata["score"]`, which the trajectory viewer shows.
    """
    tasks = list(tasks)
    episodes = rollout_env(sampling_copy(model, dtype) or model, tokenizer, env, tasks, config or GREEDY)
    scores = [env.score(task, ep) for task, ep in zip(tasks, episodes, strict=True)]
    for ep, score in zip(episodes, scores, strict=True):
        ep.metadata["score"] = score
    release_memory()  # the KV caches of the rollout are gone: hand their pages back
    return EvalReport(labels=[task_label(t, label_key) for t in tasks], scores=scores, episodes=episodes,
                      ids=[task_id(t, i) for i, t in enumerate(tasks)])

"""Evaluation: the one definition of a correct answer, the environment's score, `evaluate` and its report."""

from __future__ import annotations

import pytest

from agentrl_lite.episode import Episode, Turn
from agentrl_lite.evaluate import EvalReport, evaluate, task_label
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import answers_match
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tasks.word_problems import word_problem_tasks


@pytest.mark.parametrize("predicted, gold", [
    ("391", "391"), ("391.0", "391"), ("1,234", "1234"), ("-12", "-12"), (" 391 ", "391"), ("$391", "391"),
    ("391 dollars", "391"), ("The answer is 391", "391"), ("0.5", "1/2"), ("\\frac{3}{4}", "0.75"), ("8/1", "8"),
])
def test_a_number_in_any_usual_form_is_right(predicted, gold):
    assert answers_match(predicted, gold)


@pytest.mark.parametrize("predicted, gold", [
    ("392", "391"), ("", "391"), (None, "391"), ("   ", "391"), ("no idea", "391"),
    # an expression is not an answer, even when it evaluates (or ends) to the gold number: copying the
    # question into the answer tag must not pay (lesson 02's hack), in training or in evaluation
    ("17 * 23", "391"), ("1 * 886", "886"), ("0 + 536", "536"), ("12 - 6", "6"),
])
def test_a_wrong_missing_or_unevaluated_answer_is_not_right(predicted, gold):
    assert not answers_match(predicted, gold)


def model_turn_episode(*contents: str) -> Episode:
    """An episode whose model turns wrote `contents` (tokens are irrelevant to scoring)."""
    turns = [Turn("prompt", 0, 1, "")] + [Turn("model", 1 + i, 2 + i, c, content=c) for i, c in enumerate(contents)]
    last = contents[-1] if contents else ""
    from agentrl_lite.chat import extract_answer

    return Episode(prompt=[], turns=turns, answer=extract_answer(last))


@pytest.mark.parametrize("contents, correct, lenient, formatted", [
    (("<answer>391</answer>",), 1.0, 1.0, 1.0),
    (("<answer>17 * 23</answer>",), 0.0, 0.0, 1.0),
    (("It is 391.",), 0.0, 1.0, 0.0),  # right number, wrong format: lenient only
    (("<answer></answer> 391",), 0.0, 1.0, 1.0),  # an empty answer tag falls back to the last number
    (("<answer>390</answer>",), 0.0, 0.0, 1.0),
])
def test_arithmetic_env_score(contents, correct, lenient, formatted):
    score = ArithmeticEnv().score({"answer": "391"}, model_turn_episode(*contents))
    assert (score["correct"], score["lenient_correct"], score["formatted"]) == (correct, lenient, formatted)


def test_labels_come_from_the_task():
    assert task_label({"category": "parallel", "template": "x"}) == "parallel"
    assert task_label({"template": "change"}) == "change"
    assert task_label({"question": "q"}) == "all"
    assert task_label({"category": "parallel", "kind": "two-hop"}, label_key="kind") == "two-hop"


def test_report_summaries():
    episodes = [Episode(prompt=[], stop_reason=r) for r in ("answer", "answer", "max_tokens", "answer")]
    for ep, calls in zip(episodes, [2, 1, 0, 3], strict=True):
        ep.turns = [Turn("model", 0, 1, "", tool_calls=[{"name": "calculator", "arguments": {}}] * calls)]
    scores = [{"correct": c, "formatted": f} for c, f in [(1.0, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0)]]
    report = EvalReport(labels=["crates", "change", "change", "crates"], scores=scores, episodes=episodes)
    assert report.accuracy == 0.5 and report.correct == [1.0, 0.0, 0.0, 1.0] and report.n == 4
    assert list(report.by_label().items()) == [("crates", 1.0), ("change", 0.0)]  # order of first appearance
    assert report.by_label("formatted") == {"crates": 1.0, "change": 0.5} and report.mean("formatted") == 0.75
    assert report.calls_per_episode == 1.5 and report.tool_call_rate == 0.75
    assert report.calls_by_label() == {"crates": 2.5, "change": 0.5}
    assert report.tool_productivity == 2 / 6
    assert report.stop_reasons == {"answer": 3, "max_tokens": 1}
    assert report.overall == 0.5 and report.counts == {"crates": 2, "change": 2}
    metrics = report.metrics()
    assert metrics["mean_formatted"] == 0.75 and metrics["by_label"] == report.by_label()
    assert metrics["correct"] == [1.0, 0.0, 0.0, 1.0], "the per-task vector paired comparisons need"
    row = report.row("after SFT", calls_by_label=True)
    assert row["policy"] == "after SFT" and row["crates"] == 1.0 and row["calls (change)"] == 0.5


@pytest.mark.slow
def test_evaluate_rolls_out_and_scores_every_task_through_the_environment():
    model, tokenizer = tiny_policy()
    tasks = word_problem_tasks(3, seed=0)
    report = evaluate(model, tokenizer, ArithmeticEnv(), tasks,
                      RolloutConfig(max_turns=2, max_new_tokens=4, temperature=0.0, progress=False))
    assert [ep.metadata["answer"] for ep in report.episodes] == [t["answer"] for t in tasks]
    assert report.labels == [t["template"] for t in tasks]
    assert report.correct == [0.0, 0.0, 0.0]  # a random model does not solve word problems
    assert all(ep.metadata["score"] == s for ep, s in zip(report.episodes, report.scores, strict=True))
    assert sum(report.stop_reasons.values()) == 3
    # greedy by default: the same numbers twice
    again = evaluate(model, tokenizer, ArithmeticEnv(), tasks)
    assert [ep.token_ids for ep in again.episodes] == [ep.token_ids for ep in evaluate(
        model, tokenizer, ArithmeticEnv(), tasks).episodes]


def test_evaluate_in_bf16_answers_with_a_cast_copy_and_leaves_the_policy_alone():
    import copy

    import torch

    model, tokenizer = tiny_policy(seed=1, init_std=0.5)
    tasks = word_problem_tasks(2, seed=0)
    config = RolloutConfig(max_turns=1, max_new_tokens=6, temperature=0.0, progress=False)
    report = evaluate(model, tokenizer, ArithmeticEnv(), tasks, config, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.float32  # the policy itself is not cast
    cast = copy.deepcopy(model).to(torch.bfloat16)
    by_hand = evaluate(cast, tokenizer, ArithmeticEnv(), tasks, config)
    assert [ep.token_ids for ep in report.episodes] == [ep.token_ids for ep in by_hand.episodes]
    assert [ep.logprobs for ep in report.episodes] == [ep.logprobs for ep in by_hand.episodes]
    fp32 = evaluate(model, tokenizer, ArithmeticEnv(), tasks, config)
    assert [ep.logprobs for ep in fp32.episodes] != [ep.logprobs for ep in report.episodes]  # it really was bf16

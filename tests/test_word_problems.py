"""Multi-step word problems: answers right, demonstrations that replay through the real calculator and
environment, SFT coverage limited to some templates, splits disjoint."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from agentrl_lite.chat import extract_answer, parse_tool_calls
from agentrl_lite.rewards import answers_match
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.word_problems import SFT_TEMPLATES, TEMPLATES, demonstration, word_problem_tasks
from agentrl_lite.tools import calculator


@pytest.fixture(scope="module")
def splits():
    return {name: read_jsonl(DATA_DIR / f"word_problems_{name}.jsonl") for name in ("train", "heldout", "sft")}


def test_answers_are_the_stories_arithmetic():
    # recompute from the story's own numbers, independently of the step plan
    for task in word_problem_tasks(200, seed=5):
        numbers = [int(n) for n in re.findall(r"\d+", task["question"])]
        a, b, c, d = (numbers + [0])[:4]  # d: the fourth number where the story has one
        expected = {
            "change": c - a * b, "two_packs": a * b + c * d, "savings": a * b - c,
            "trip": a * b + c * d, "garden": a * b - c * d, "stickers": a - b * c,
            "seats": (a * b - c) * d, "crates": a * b + c,
        }[task["template"]]
        assert task["answer"] == str(expected), task
        assert expected > 0, task


def test_a_demonstration_replays_through_the_calculator(splits):
    for task in splits["sft"]:
        messages = task["messages"]
        assert messages == demonstration(task)
        assistant = [m["content"] for m in messages if m["role"] == "assistant"]
        tool = [m["content"] for m in messages if m["role"] == "tool"]
        assert len(assistant) == len(task["steps"]) + 1 >= 3
        for turn, result in zip(assistant, tool, strict=False):
            parsed = parse_tool_calls(turn)
            assert not parsed.errors and len(parsed.calls) == 1
            assert calculator(**parsed.calls[0].arguments) == result  # what the real tool would answer
        assert answers_match(extract_answer(assistant[-1]), task["answer"])


def test_sft_covers_only_some_templates_and_splits_are_disjoint(splits):
    all_keys = {t.key for t in TEMPLATES}
    assert {t["template"] for t in splits["sft"]} == set(SFT_TEMPLATES) < all_keys
    assert {t["template"] for t in splits["train"]} == all_keys
    held = Counter(t["template"] for t in splits["heldout"])
    assert set(held) == all_keys and len(set(held.values())) == 1, held  # balanced held-out
    questions = [{t["question"] for t in splits[name]} for name in ("train", "heldout", "sft")]
    assert not (questions[0] & questions[1]) and not (questions[0] & questions[2]) and not (questions[1] & questions[2])
    assert any(len(t["steps"]) == 3 for t in splits["train"]) and any(len(t["steps"]) == 2 for t in splits["train"])


def test_unknown_template_is_a_clear_error():
    with pytest.raises(ValueError, match="no template"):
        word_problem_tasks(3, seed=0, templates=("nope",))


def _episode_with_calls(task, contents):
    from agentrl_lite.chat import parse_tool_calls
    from agentrl_lite.episode import Episode, Turn

    turns = [Turn("prompt", 0, 1, "")]
    for content in contents:
        calls = [c.to_dict() for c in parse_tool_calls(content).calls]
        turns.append(Turn("model", 0, 1, content, content=content, tool_calls=calls))
        turns.append(Turn("tool", 0, 1, ""))
    return Episode(prompt=[], turns=turns[:-1], metadata=task)


def test_plan_step_rewards_credit_each_turn_that_computes_its_plan_step():
    import random

    from agentrl_lite.tasks.word_problems import TEMPLATES, make_task, plan_step_reward, plan_step_rewards

    task = make_task(next(t for t in TEMPLATES if t.key == "change"), random.Random(0))
    first, second = task["steps"]
    a, b = first.split(" * ")
    def call(e):
        return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{e}"}}}}\n</tool_call>'
    right = _episode_with_calls(task, [call(f"{b}*{a}"), call(second), f"<answer>{task['answer']}</answer>"])
    assert plan_step_rewards(right) == [0.25, 0.25, 0.0]  # operands swapped still computes step 0's value
    wrong_first = _episode_with_calls(task, [call(f"{a} + {b}"), call(second), "<answer>1</answer>"])
    assert plan_step_rewards(wrong_first, weight=1.0) == [0.0, 1.0, 0.0]
    broken = _episode_with_calls(task, ["no call here", call("1 / 0"), '<tool_call>\n{"name": "calculator"}\n</tool_call>'])
    assert plan_step_rewards(broken) == [0.0, 0.0, 0.0]  # prose, an error value, a call without arguments
    assert plan_step_reward([None] * 2, [None] * 2, episodes=[right, wrong_first]) == [0.5, 0.25]


def test_cold_start_split_moves_demonstrations_out_of_the_rl_set():
    from collections import Counter

    from agentrl_lite.tasks.word_problems import HELDOUT_SIZE, cold_start_split

    train, heldout, demos = cold_start_split()
    assert Counter(d["template"] for d in demos) == {"change": 12, "savings": 12, "crates": 8, "stickers": 4}
    assert {t["template"] for t in train} == {t["template"] for t in heldout} == {"change", "savings", "stickers", "crates"}
    questions = [{t["question"] for t in rows} for rows in (train, heldout, demos)]
    assert not (questions[0] & questions[1]) and not (questions[0] & questions[2]) and not (questions[1] & questions[2])
    assert len(train) == 200 - 8 - 4 and len(heldout) == HELDOUT_SIZE // 2  # the two-step half of the held-out set
    crates = next(d for d in demos if d["template"] == "crates")
    assert crates["messages"][-1]["content"] == f"<answer>{crates['answer']}</answer>"
    assert len(cold_start_split({})[0]) == 200 and len(cold_start_split({})[2]) == 24
    with pytest.raises(ValueError, match="requested"):
        cold_start_split({"crates": 10_000})
    # tuning runs score validation problems: the same templates, none of the held-out or training problems, and the
    # same RL set and demonstrations
    v_train, validation, v_demos = cold_start_split(split="validation")
    assert v_train == train and v_demos == demos and len(validation) == 32
    assert {t["template"] for t in validation} == {t["template"] for t in heldout}
    assert not ({t["question"] for t in validation} & (questions[0] | questions[1] | questions[2]))
    with pytest.raises(ValueError, match="validation"):
        cold_start_split(split="test")

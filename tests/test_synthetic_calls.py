"""Synthetic function-calling tasks: well-formed, scored right by the BFCL checker, disjoint from BFCL."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from agentrl_lite import rewards
from agentrl_lite.chat import parse_tool_calls
from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
from agentrl_lite.tasks.function_calls import (
    CATALOGUE,
    CATEGORY_WEIGHTS,
    demonstration,
    function_calling_tasks,
)


@pytest.fixture(scope="module")
def splits():
    return {name: read_jsonl(DATA_DIR / f"toolcall_{name}.jsonl") for name in ("train", "heldout", "sft")}


def test_every_category_is_present_and_gold_calls_match_possible_answers(splits):
    counts = Counter(t["category"] for t in splits["train"])
    assert set(counts) == {"simple", "multiple", "parallel", "parallel_multiple", "irrelevance"}
    assert min(counts.values()) >= 40
    for task in splits["train"] + splits["heldout"]:
        assert bfcl.check(task, bfcl.reference_calls(task)).valid, task["id"]
        assert [{c["name"]: c["arguments"]} for c in task["gold_calls"]] == bfcl.reference_calls(task)
        offered = {f["name"] for f in task["functions"]}
        assert {c["name"] for c in task["gold_calls"]} <= offered
        expected = {"simple": 1, "multiple": 1, "parallel": 2, "parallel_multiple": 2, "irrelevance": 0}
        assert len(task["gold_calls"]) == expected[task["category"]]
        if task["category"] == "parallel":
            assert task["gold_calls"][0]["name"] == task["gold_calls"][1]["name"]
            assert task["gold_calls"][0] != task["gold_calls"][1]
        if task["category"] == "multiple":
            assert len(offered) >= 2


def _template_regex(template: str) -> re.Pattern:
    parts = re.split(r"\{[a-z_]+\}", template)
    return re.compile(".+".join(map(re.escape, parts)) + ".*", re.DOTALL)


def test_irrelevant_requests_offer_no_fitting_function(splits):
    domain = {f.name: f.domain for f in CATALOGUE}
    n = 0
    for task in (t for t in splits["train"] if t["category"] == "irrelevance"):
        offered = [f for f in CATALOGUE if f.name in {g["name"] for g in task["functions"]}]
        assert len({domain[f.name] for f in offered}) == 1
        for f in offered:  # no offered function's request template produces this request
            assert not any(_template_regex(r).fullmatch(task["question"]) for r in f.requests), task
        n += 1
    assert n >= 40


def test_splits_are_disjoint_and_sft_demonstrates_every_category(splits):
    questions = {name: {t["question"] for t in rows} for name, rows in splits.items()}
    assert not questions["train"] & questions["heldout"]
    assert not questions["sft"] & (questions["train"] | questions["heldout"])
    sft_categories = Counter(t["category"] for t in splits["sft"])
    assert set(sft_categories) == set(CATEGORY_WEIGHTS)
    # a cold start, not the whole skill: abstaining is shown only a few times, so RL has it left to learn
    assert sft_categories["irrelevance"] <= len(splits["sft"]) // 10
    assert all(len(t["gold_calls"]) >= 2 for t in splits["sft"] if t["category"].startswith("parallel"))


def test_demonstrations_earn_full_reward(splits):
    for task in splits["sft"][:20] + [t for t in splits["train"] if t["category"] != "simple"][:40]:
        reply = demonstration(task)[-1]["content"]
        assert rewards.tool_format_reward([None], [reply]) == [1.0]
        assert rewards.tool_call_reward([None], [reply], gold_calls=[task["gold_calls"]]) == [3.0]
        assert rewards.exact_match_tool_reward([None], [reply], gold_calls=[task["gold_calls"]]) == [1.0]
        assert bfcl.check_text(task, reply).valid
        assert len(parse_tool_calls(reply).calls) == len(task["gold_calls"])


def test_disjoint_from_bfcl():
    bfcl_tasks = bfcl.load_bfcl()
    bfcl_names = {f["name"] for t in bfcl_tasks for f in t["functions"]}
    bfcl_questions = {t["question"] for t in bfcl_tasks}
    ours = function_calling_tasks(300, seed=5)
    assert not {f.name for f in CATALOGUE} & bfcl_names
    assert not {t["question"] for t in ours} & bfcl_questions


def test_generation_is_deterministic_and_distinct():
    a, b = function_calling_tasks(50, seed=9), function_calling_tasks(50, seed=9)
    assert a == b
    assert len({t["question"] for t in a}) == 50
    assert a != function_calling_tasks(50, seed=10)

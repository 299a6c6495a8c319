"""Reward functions: hand-worked values (the arithmetic is in the comments), edge cases, TRL's signature."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl_lite import rewards
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.rewards import (
    as_trl_reward,
    best_matching,
    completion_text,
    correctness_reward,
    count_tool_calls,
    exact_match_tool_reward,
    final_number_reward,
    format_reward,
    last_number,
    length_penalty,
    otc_reward,
    otc_tool_score,
    overlong_penalty,
    overlong_reward,
    predicted_calls,
    reward_kwargs,
    tool_call_match,
    tool_call_reward,
    tool_productivity,
    weighted_sum,
)

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*23"}}\n</tool_call>'
BROKEN_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": 17*23}}\n</tool_call>'


def calc(expression: str) -> dict:
    return {"name": "calculator", "arguments": {"expression": expression}}


def conversation(*turns: tuple[str, str]) -> list[dict]:
    return [{"role": role, "content": content} for role, content in turns]


# --- reading completions ------------------------------------------------------------------------------------


def test_completion_text_reads_only_what_the_policy_wrote():
    messages = conversation(("assistant", CALL), ("tool", "391"), ("assistant", "<answer>391</answer>"))
    assert completion_text(messages) == CALL + "\n<answer>391</answer>"
    assert "391\n" not in completion_text(messages)  # the tool's "391" is not the policy's text
    assert completion_text("plain <answer>1</answer>") == "plain <answer>1</answer>"
    blocks = [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert completion_text(blocks) == "ab"


def test_predicted_calls_from_text_and_from_trl_structured_calls():
    assert predicted_calls(CALL + " and " + BROKEN_CALL) == [calc("17*23")]  # the malformed block is no call
    structured = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}},
            {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}},
            {"type": "function", "function": {"name": "calculator", "arguments": "not json"}},
        ]},
        {"role": "tool", "content": "2"},
    ]
    assert predicted_calls(structured) == [calc("1+1"), calc("2+2")]
    # attempts include malformed ones: 2 text blocks (1 broken); 3 structured calls (1 broken)
    assert count_tool_calls(CALL + BROKEN_CALL) == 2
    assert count_tool_calls(structured) == 3
    # a message whose call is both structured and left in the text counts once
    both = [{"role": "assistant", "content": CALL,
             "tool_calls": [{"type": "function", "function": calc("17*23")}]}]
    assert predicted_calls(both) == [calc("17*23")] and count_tool_calls(both) == 1


# --- format ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>391</answer>", 1.0),
        (CALL + "\n<answer>391</answer>  \n", 1.0),  # a call before the answer, trailing whitespace
        ("<answer>0</answer>", 1.0),  # format says nothing about being right
        ("391", 0.0),  # no answer tag
        ("<answer></answer>", 0.0),  # blank content
        ("<answer> </answer>", 0.0),
        ("<answer>1</answer><answer>2</answer>", 0.0),  # several answers
        ("<answer>391</answer> I hope that helps", 0.0),  # text after the answer
        ("<answer>391</answer>" + CALL, 0.0),  # a call after the answer
        (BROKEN_CALL + "<answer>391</answer>", 0.0),  # a malformed call
        ("</answer>391<answer>", 0.0),  # tags in the wrong order
        ("<answer>391", 0.0),  # never closed
    ],
)
def test_format_reward(completion, expected):
    assert format_reward(["p"], [completion]) == [expected]


def test_format_reward_counts_answers_across_all_assistant_turns():
    twice = conversation(("assistant", "<answer>1</answer>"), ("tool", "x"), ("assistant", "<answer>1</answer>"))
    once = conversation(("assistant", CALL), ("tool", "<answer>391</answer>"), ("assistant", "<answer>391</answer>"))
    assert format_reward(["p", "p"], [twice, once]) == [0.0, 1.0]  # the tool's tag is not the policy's


# --- correctness ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("<answer>391</answer>", "391", 1.0),
        ("<answer>390</answer>", "391", 0.0),
        ("<answer>1,234</answer>", "1234", 1.0),  # thousands separator
        ("<answer>12,345,678</answer>", "12345678", 1.0),
        ("<answer>1234</answer>", "1,234", 1.0),  # ... on the gold side too
        ("<answer>-1,234</answer>", "-1234", 1.0),  # negative
        ("<answer>1234</answer>", "-1234", 0.0),  # the sign matters
        ("<answer>0.5</answer>", "1/2", 1.0),  # decimal vs fraction
        ("<answer>\\frac{1}{2}</answer>", "0.5", 1.0),  # LaTeX
        ("<answer>$\\frac{3}{4}$</answer>", "0.75", 1.0),
        ("<answer>391.0</answer>", "391", 1.0),
        ("<answer>The answer is 391</answer>", "391", 1.0),  # words around the number
        ("The answer is 391", "391", 0.0),  # right number, no tag: not an answer
        ("<answer></answer>", "391", 0.0),
        ("<answer>1</answer> then <answer>391</answer>", "391", 1.0),  # the last answer counts
        ("<answer>391</answer> then <answer>1</answer>", "391", 0.0),
        ("<answer>3/4</answer>", "0.75", 1.0),  # a fraction is a number written out
        ("<answer>-1/2</answer>", "-0.5", 1.0),
        ("<answer>17 * 23</answer>", "391", 0.0),  # an expression is not an answer (final_form)
        ("<answer>8</answer>", "2^3", 1.0),  # a symbolic gold answer: plain math-verify
    ],
)
def test_correctness_reward(completion, gold, expected):
    assert correctness_reward(["p"], [completion], answer=[gold]) == [expected]


def test_final_form_closes_the_copy_the_question_hack():
    # math-verify evaluates what it parses: 17 * 23 = 391, so copying the question would be "correct"
    copied = ["<answer>17 * 23</answer>", "<answer>17*23</answer>", "<answer>$17 \\times 23$</answer>"]
    assert correctness_reward(["p"] * 3, copied, answer=["391"] * 3, final_form=False) == [1.0, 1.0, 1.0]
    assert correctness_reward(["p"] * 3, copied, answer=["391"] * 3) == [0.0, 0.0, 0.0]


def test_correctness_reward_reads_only_the_policy_answer_and_none_when_no_gold():
    echo = conversation(("assistant", CALL), ("tool", "<answer>391</answer>"), ("assistant", "391"))
    assert correctness_reward(["p", "p"], [echo, "<answer>4</answer>"], answer=["391", None]) == [0.0, None]
    assert correctness_reward([], [], answer=[]) == []
    with pytest.raises(ValueError, match="answer"):
        correctness_reward(["p"], ["<answer>1</answer>"])


# --- ToolRL fine-grained and coarse tool-call rewards ---------------------------------------------------------


def test_tool_call_reward_hand_worked():
    gold = [calc("17*23")]  # S_max = 1 + |G| + Σ|keys| = 1 + 1 + 1 = 3
    cases = {
        # exact: r_name 1 + r_param 1 + r_value 1 = 3 → 6·3/3 − 3 = 3
        CALL: 3.0,
        # near miss (spaces): 1 + 1 + 0 = 2 → 6·2/3 − 3 = 1
        '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>': 1.0,
        # wrong key: names 1, keys {expression} vs {expr} Jaccard 0, value 0 → 1 → 6·1/3 − 3 = −1
        '<tool_call>{"name": "calculator", "arguments": {"expr": "17*23"}}</tool_call>': -1.0,
        # extra key: keys Jaccard 1/2, value 1 → 1 + 0.5 + 1 = 2.5 → 6·2.5/3 − 3 = 2
        '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23", "x": 1}}</tool_call>': 2.0,
        # the call twice: names {c} vs {c, c} → 1/2; one pair matched 1 + 1 → 2.5 → 2
        CALL + CALL: 2.0,
        # no call, or only a malformed one: 0 → −3
        "<answer>391</answer>": -3.0,
        BROKEN_CALL: -3.0,
        # a right call next to a malformed one: ToolRL's lowest score (BFCL rejects the whole output too)
        CALL + BROKEN_CALL: -3.0,
        # another tool: names Jaccard 0, nothing matched → −3
        '<tool_call>{"name": "search", "arguments": {"expression": "17*23"}}</tool_call>': -3.0,
    }
    got = tool_call_reward(["p"] * len(cases), list(cases), gold_calls=[gold] * len(cases))
    assert got == pytest.approx(list(cases.values()))


def test_tool_call_reward_two_gold_calls_uses_the_best_matching():
    gold = [calc("1+1"), calc("2+2")]  # S_max = 1 + 2 + 2 = 5
    swapped = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>' \
              '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    one_wrong = '<tool_call>{"name": "calculator", "arguments": {"expression": "9"}}</tool_call>' \
                '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    # order does not matter: 1 + (1 + 1) + (1 + 1) = 5 → 3
    # one wrong value: the "1+1" call must pair with gold "1+1" (a greedy first-come pairing would pair
    # it with nothing useful): 1 + 2 keys + 1 value = 4 → 6·4/5 − 3 = 1.8
    got = tool_call_reward(["p", "p"], [swapped, one_wrong], gold_calls=[gold, gold])
    assert got == pytest.approx([3.0, 1.8])
    assert tool_call_match(predicted_calls(one_wrong), gold) == pytest.approx(
        {"r_name": 1.0, "r_param": 2.0, "r_value": 1.0, "score": 4.0, "s_max": 5.0, "reward": 1.8}
    )


def test_tool_call_reward_abstention_none_and_value_types():
    # no call expected: no call is perfect (names: two empty multisets, 1; S_max = 1 → 3); any call → −3
    assert tool_call_reward(["p"] * 3, ["<answer>hi</answer>", CALL, "x"], gold_calls=[[], [], None]) == [
        3.0, -3.0, None]
    gold = [{"name": "f", "arguments": {"n": 2, "flag": True}}]  # S_max = 1 + 1 + 2 = 4
    as_float = '<tool_call>{"name": "f", "arguments": {"n": 2.0, "flag": true}}</tool_call>'
    as_strings = '<tool_call>{"name": "f", "arguments": {"n": "2", "flag": 1}}</tool_call>'
    # 2.0 equals 2 (one JSON number), "2" does not, and 1 is not true:
    # as_float 1 + 1 + 2 = 4 → 3; as_strings 1 + 1 + 0 = 2 → 6·2/4 − 3 = 0
    assert tool_call_reward(["p", "p"], [as_float, as_strings], gold_calls=[gold, gold]) == [3.0, 0.0]


def test_exact_match_is_all_or_nothing():
    gold = [calc("1+1"), calc("2+2")]
    swapped = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": calc("2+2")}, {"type": "function", "function": calc("1+1")}]}]
    near = '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1"}}</tool_call>' \
           '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    got = exact_match_tool_reward(["p"] * 4, [swapped, near, "", ""], gold_calls=[gold, gold, [], None])
    assert got == [1.0, 0.0, 1.0, None]
    # the right call plus a malformed attempt is not an exact match (BFCL: "decoder failed")
    assert exact_match_tool_reward(["p", "p"], [CALL, CALL + BROKEN_CALL], gold_calls=[[calc("17*23")]] * 2) == [1.0, 0.0]
    # the near miss gets partial credit from the fine reward: 1 + 2 + 1 = 4 of 5 → 1.8
    assert tool_call_reward(["p"], [near], gold_calls=[gold]) == pytest.approx([1.8])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=4, max_size=4), max_size=4),
       st.integers(0, 4))
def test_best_matching_is_optimal_and_one_to_one(rows, n_cols):
    weights = [row[:n_cols] for row in rows]
    pairs = best_matching(weights)
    assert len({i for i, _ in pairs}) == len(pairs) == len({j for _, j in pairs}) == min(len(weights), n_cols)
    best = max((sum(weights[i][j] for i, j in zip(rows_, cols, strict=False))
                for rows_ in itertools.permutations(range(len(weights)))
                for cols in itertools.permutations(range(n_cols))), default=0.0)
    assert sum(weights[i][j] for i, j in pairs) == pytest.approx(best)


# --- OTC --------------------------------------------------------------------------------------------------------


def test_otc_tool_score_hand_worked():
    assert otc_tool_score(0, 0) == 1.0  # n = 0: cos(0) = 1
    assert otc_tool_score(1, 0, c=1.0) == pytest.approx(0.5)  # cos(π/3) = 0.5
    assert otc_tool_score(1, 0, c=2.0) == pytest.approx(math.cos(math.pi / 4))  # cos(π/4) ≈ 0.7071
    assert otc_tool_score(2, 2) == pytest.approx(1.0)  # f = 2·2·2/4 = 2 → sin(π/2) = 1
    assert otc_tool_score(2, 1) == pytest.approx(math.sqrt(3) / 2)  # f = 2·1·2/3 = 4/3 → sin(4/3 · π/2) = sin(2π/3)
    assert otc_tool_score(3, 1) == pytest.approx(math.sqrt(2) / 2)  # f = 2·1·3/4 = 1.5 → sin(1.5 · π/2) = sin(3π/4)
    assert otc_tool_score(0, 1) == 0.0  # f = 0 → sin(0)
    assert otc_tool_score(1000, 1) < 0.01  # many more calls than needed: → 0
    with pytest.raises(ValueError):
        otc_tool_score(-1, 0)


def test_otc_reward_groups_optimum_and_no_correct_group():
    # group 1: calls [1, 2, 3, 0], correct [1, 1, 0, 0] → n = min(1, 2) = 1
    #   1 call: sin(π/2) = 1; 2 calls: sin(2π/3) = √3/2; wrong answers: 0
    # group 2: calls [0, 1, 2, 3], correct [1, 1, 0, 1] → n = 0: cos(0) = 1, cos(π/3) = 0.5, 0, cos(3π/7)
    # group 3: nothing correct → all 0
    correct = [1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0]
    calls = [1, 2, 3, 0, 0, 1, 2, 3, 1, 1, 2, 0]
    got = otc_reward(["p"] * 12, [""] * 12, group_size=4, correct=correct, tool_calls=calls)
    assert got == pytest.approx([1.0, math.sqrt(3) / 2, 0, 0, 1.0, 0.5, 0, math.cos(3 * math.pi / 7),
                                 0, 0, 0, 0])
    # α scales, None passes through
    assert otc_reward(["p"] * 2, ["", ""], group_size=2, correct=[1, None], tool_calls=[1, 1], alpha=2.0) == [2.0, None]
    assert otc_reward([], [], group_size=4, correct=[], tool_calls=[]) == []
    with pytest.raises(ValueError, match="groups of 4"):
        otc_reward(["p"] * 3, [""] * 3, group_size=4, correct=[1, 1, 1], tool_calls=[0, 0, 0])


def test_otc_reward_min_calls_floors_the_groups_optimum():
    # a right answer with no call sets n = 0 unfloored (1 call then earns cos(π/3) = 0.5); with min_calls=1,
    # n = 1: the 0-call answer earns sin(0) = 0 and the 1-call answer 1, the 2-call one sin(2π/3)
    correct, calls = [1, 1, 1, 0], [0, 1, 2, 1]
    assert otc_reward(["p"] * 4, [""] * 4, group_size=4, correct=correct, tool_calls=calls) == pytest.approx(
        [1.0, 0.5, math.cos(2 * math.pi / 5), 0.0])
    assert otc_reward(["p"] * 4, [""] * 4, group_size=4, correct=correct, tool_calls=calls, min_calls=1) == \
        pytest.approx([0.0, 1.0, math.sqrt(3) / 2, 0.0])
    # a floor below the group's optimum changes nothing
    assert otc_reward(["p"] * 2, ["", ""], group_size=2, correct=[1, 1], tool_calls=[2, 3], min_calls=1) == \
        otc_reward(["p"] * 2, ["", ""], group_size=2, correct=[1, 1], tool_calls=[2, 3])


def test_otc_reward_defaults_read_correctness_and_calls_from_the_completions():
    right_one_call = conversation(("assistant", CALL), ("tool", "391"), ("assistant", "<answer>391</answer>"))
    right_two_calls = conversation(("assistant", CALL + CALL), ("tool", "391"), ("assistant", "<answer>391</answer>"))
    wrong = "<answer>381</answer>"
    # n = 1 → [1, sin(2π/3), 0]
    got = otc_reward(["p"] * 3, [right_one_call, right_two_calls, wrong], group_size=3, answer=["391"] * 3)
    assert got == pytest.approx([1.0, math.sqrt(3) / 2, 0.0])


def test_tool_productivity():
    assert tool_productivity([1, 1, 0, 1], [1, 2, 3, 2]) == pytest.approx(3 / 8)  # Σ correct / Σ calls
    assert tool_productivity([1, 1], [0, 0]) == 2.0  # no call at all: denominator max(1, 0) = 1
    assert tool_productivity([], []) == 0.0
    assert tool_productivity([1, None], [2, 5]) == 0.5  # None samples are skipped: 1 / 2


# --- lengths ------------------------------------------------------------------------------------------------------


def test_overlong_penalty_hand_worked():
    # max 100, cache 20: free up to 80; linear (80 − L)/20 on (80, 100]; −1 beyond
    assert [overlong_penalty(n, 100, 20) for n in (0, 80, 81, 90, 100, 101, 10_000)] == pytest.approx(
        [0.0, 0.0, -0.05, -0.5, -1.0, -1.0, -1.0])
    with pytest.raises(ValueError):
        overlong_penalty(10, 100, 0)
    with pytest.raises(ValueError):
        overlong_penalty(10, 100, 101)


def test_overlong_and_length_rewards_read_lengths_or_trl_completion_ids():
    assert overlong_reward(["p"] * 2, ["a", "b"], max_length=100, cache_length=20,
                           completion_lengths=[90, 50]) == pytest.approx([-0.5, 0.0])
    ids = [[7] * 95, [7] * 10]  # TRL passes completion_ids: lengths 95 → (80 − 95)/20 = −0.75; 10 → 0
    assert overlong_reward(["p"] * 2, ["a", "b"], max_length=100, cache_length=20,
                           completion_ids=ids) == pytest.approx([-0.75, 0.0])
    # −min(L, 100)/100
    assert length_penalty(["p"] * 3, ["a"] * 3, max_length=100, completion_lengths=[0, 25, 300]) == [0.0, -0.25, -1.0]
    with pytest.raises(ValueError, match="completion_lengths"):
        length_penalty(["p"], ["a"], max_length=100)


# --- composition --------------------------------------------------------------------------------------------------


def test_weighted_sum_none_only_when_all_none_and_as_trl_reward_names():
    def always(value):
        return lambda prompts, completions, **kw: [value] * len(completions)

    def some_none(prompts, completions, **kw):
        return [None, 2.0, None]

    combined = weighted_sum([always(None), some_none], [1.0, 0.5])
    assert combined(["p"] * 3, ["a", "b", "c"]) == [None, 1.0, None]  # 0.5·2 = 1
    combined = weighted_sum([format_reward, correctness_reward], [0.2, 1.0], name="format_and_correct")
    # right & formatted 0.2 + 1 = 1.2; formatted & wrong 0.2; right number without tags 0
    got = combined(["p"] * 3, ["<answer>391</answer>", "<answer>1</answer>", "391"], answer=["391"] * 3)
    assert got == pytest.approx([1.2, 0.2, 0.0]) and combined.__name__ == "format_and_correct"
    with pytest.raises(ValueError):
        weighted_sum([format_reward], [1.0, 2.0])

    otc = as_trl_reward(otc_reward, "otc", group_size=2)
    assert otc.__name__ == "otc"
    # TRL's call: prompts, completions, completion_ids, trainer_state, dataset columns as keywords
    assert otc(prompts=["p", "p"], completions=["<answer>4</answer>", "<answer>5</answer>"], answer=["4", "4"],
               completion_ids=[[1], [2]], trainer_state=None) == [1.0, 0.0]  # n = 0 calls: cos(0) = 1


def test_reward_kwargs_from_episodes():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 17 * 23?"}]
    episode = Episode(
        prompt=prompt,
        token_ids=list(range(30)),
        turns=[Turn("prompt", 0, 10, ""), Turn("model", 10, 20, "", content=CALL),
               Turn("tool", 20, 25, "", tool_results=["391"]),
               Turn("model", 25, 30, "", content="<answer>391</answer>")],
        metadata={"answer": "391", "id": "a"},
    )
    other = Episode(prompt=prompt, token_ids=list(range(12)),
                    turns=[Turn("prompt", 0, 10, ""), Turn("model", 10, 12, "", content="381")],
                    metadata={"answer": "391"})
    kw = reward_kwargs([episode, other])
    assert kw["completions"][0] == conversation(("assistant", CALL), ("tool", "391"),
                                                ("assistant", "<answer>391</answer>"))
    assert kw["completion_lengths"] == [20, 2] and kw["answer"] == ["391", "391"] and "id" not in kw
    assert correctness_reward(**kw) == [1.0, 0.0]
    assert tool_call_reward(**kw, gold_calls=[[calc("17 * 23")]] * 2) == pytest.approx([1.0, -3.0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 5 = 6.", "6"),
        ("The answer is 1,234.", "1,234"),  # thousands separator kept whole
        ("11 - 14 = -3", "-3"),
        ("It costs 3.5 dollars.", "3.5"),
        ("version v2 of x9", None),  # digits inside words are not numbers
        ("no number here", None),
        ("7 * 6 = 42<|im_end|>", "42"),
        ("", None),
    ],
)
def test_last_number(text, expected):
    assert last_number(text) == expected


def test_final_number_reward_hand_worked():
    completions = [
        "7 * 6 = 42",  # right
        "42, no wait, 41",  # only the last number counts → wrong
        "To solve this we first look at 7 and",  # cut off on an operand → wrong
        [{"role": "assistant", "content": "It is 42"}, {"role": "tool", "content": "43"}],  # tool text ignored
        "The answer is 42.0",  # math-verify: 42.0 == 42
        "no number",
        "anything",
    ]
    gold = ["42", "42", "42", "42", "42", "42", None]
    assert final_number_reward(["p"] * 7, completions, answer=gold) == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, None]


def test_final_number_reward_needs_the_answer_column():
    with pytest.raises(ValueError, match="answer"):
        final_number_reward(["p"], ["42"])


# --- function-calling format (lesson 05) --------------------------------------------------------------------


def test_tool_format_reward_wants_clean_calls_or_plain_text():
    call = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    cases = {
        call: 1.0,
        call + "\n" + call: 1.0,  # parallel calls, whitespace between
        call + "<|im_end|>": 1.0,  # an episode's text ends with the end-of-turn token
        "Sure! " + call + "<|im_end|>": 0.0,
        "No function fits this request.": 1.0,  # abstaining in plain text
        "Sure! " + call: 0.0,  # prose around calls
        call + " done": 0.0,
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}': 0.0,  # cut off
        "<tool_call>{not json}</tool_call>": 0.0,
        "   ": 0.0,  # says nothing
    }
    got = rewards.tool_format_reward([None] * len(cases), list(cases))
    assert got == list(cases.values())

"""Parsing model turns: tool calls (Hermes/Qwen2.5 format) and final answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from agentrl_lite.chat import (
    HINT,
    ParseResult,
    ToolCall,
    extract_answer,
    format_tool_call,
    has_tool_call,
    parse_tool_calls,
)
from agentrl_lite.models import tool_chat_template

CALC = '{"name": "calculator", "arguments": {"expression": "17*23"}}'


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


# --- hand-written cases -----------------------------------------------------------------------------------


def test_single_call():
    result = parse_tool_calls(block(CALC))
    assert result == ParseResult([ToolCall("calculator", {"expression": "17*23"})], [])


def test_multiple_calls_with_surrounding_text_keep_their_order():
    text = (
        "Let me compute both.\n"
        + block(CALC)
        + "\nand then\n"
        + block('{"name": "python", "arguments": {"code": "print(1)"}}')
        + "\nDone."
    )
    result = parse_tool_calls(text)
    assert [c.name for c in result.calls] == ["calculator", "python"]
    assert result.calls[1].arguments == {"code": "print(1)"}
    assert result.errors == []


def test_whitespace_is_tolerated_everywhere():
    text = (
        '<tool_call>   \n\n {"name" :\n "calculator",\t"arguments": {"expression": "1+1"}}  \r\n </tool_call>'
    )
    assert parse_tool_calls(text).calls == [ToolCall("calculator", {"expression": "1+1"})]


def test_no_newlines_at_all():
    assert parse_tool_calls(f"<tool_call>{CALC}</tool_call>").calls == [
        ToolCall("calculator", {"expression": "17*23"})
    ]


def test_malformed_json_reports_the_decoder_message_and_how_to_fix_it():
    result = parse_tool_calls(block('{"name": "calculator" "arguments": {}}'))
    assert result.calls == []
    assert result.errors == [
        f"Error: the tool call is not valid JSON (Expecting ',' delimiter at char 22). {HINT}"
    ]


def test_missing_name():
    result = parse_tool_calls(block('{"arguments": {"expression": "1"}}'))
    assert result.errors == [f'Error: the tool call has no "name" field. {HINT}']


def test_name_must_be_a_string():
    result = parse_tool_calls(block('{"name": 3, "arguments": {}}'))
    assert result.errors == [f'Error: "name" must be a string, got a number. {HINT}']


def test_arguments_as_json_string_are_decoded():
    inner = json.dumps({"expression": "2+2"})
    result = parse_tool_calls(block(json.dumps({"name": "calculator", "arguments": inner})))
    assert result == ParseResult([ToolCall("calculator", {"expression": "2+2"})], [])


def test_arguments_that_are_not_an_object():
    result = parse_tool_calls(block('{"name": "calculator", "arguments": [1, 2]}'))
    assert result.errors == [
        f"Error: \"arguments\" of 'calculator' must be a JSON object, got an array. {HINT}"
    ]
    result = parse_tool_calls(block('{"name": "calculator", "arguments": "17*23"}'))
    assert result.errors == [
        f"Error: \"arguments\" of 'calculator' must be a JSON object, got a string. {HINT}"
    ]


def test_missing_arguments_means_no_arguments():
    assert parse_tool_calls(block('{"name": "now"}')).calls == [ToolCall("now", {})]


def test_parameters_alias_is_reported_not_accepted():
    result = parse_tool_calls(block('{"name": "calculator", "parameters": {"expression": "1"}}'))
    assert result.calls == []
    assert result.errors == [
        f'Error: the call to \'calculator\' uses "parameters"; the field is called "arguments". {HINT}'
    ]


def test_json_that_is_not_an_object():
    result = parse_tool_calls(block("[1, 2]"))
    assert result.errors == [f"Error: the tool call must be a JSON object, got an array. {HINT}"]


def test_empty_block():
    assert parse_tool_calls("<tool_call>\n</tool_call>").errors == [f"Error: the tool call is empty. {HINT}"]


def test_text_between_object_and_closing_tag():
    result = parse_tool_calls(f"<tool_call>{CALC} oops</tool_call>")
    assert result.errors == [f"Error: unexpected text between the JSON value and </tool_call>. {HINT}"]


def test_unclosed_tag_at_the_end_means_the_turn_was_cut_off():
    result = parse_tool_calls(block(CALC) + '\n<tool_call>\n{"name": "calculator", "argu')
    assert result.calls == [ToolCall("calculator", {"expression": "17*23"})]
    assert len(result.errors) == 1
    assert result.errors[0].startswith("Error: <tool_call> was not closed with </tool_call> (the turn was")
    # a complete object is not enough: the closing tag is part of the format
    assert len(parse_tool_calls("<tool_call>" + CALC).errors) == 1


def test_unclosed_tag_before_another_call():
    result = parse_tool_calls("<tool_call>" + CALC + block(CALC))
    assert result.calls == [ToolCall("calculator", {"expression": "17*23"})]
    assert result.errors == [
        f"Error: <tool_call> was not closed with </tool_call> before the next <tool_call>. {HINT}"
    ]
    assert isinstance(result.blocks[0], str) and isinstance(result.blocks[1], ToolCall)


def test_stray_closing_tag():
    result = parse_tool_calls("I am done </tool_call> " + block(CALC))
    assert result.errors == [f"Error: found </tool_call> without a matching <tool_call>. {HINT}"]
    assert len(result.calls) == 1
    assert result.blocks[0] == result.errors[0]  # order of appearance


def test_braces_and_tags_inside_json_strings():
    arguments = {"code": 'd = {"a": {"b": 1}}\nprint("</tool_call>", "<tool_call>", d)'}
    text = block(json.dumps({"name": "python", "arguments": arguments}))
    assert parse_tool_calls(text) == ParseResult([ToolCall("python", arguments)], [])


def test_raw_newlines_inside_a_json_string_are_tolerated():
    text = '<tool_call>{"name": "python", "arguments": {"code": "x = 1\nprint(x)"}}</tool_call>'
    assert parse_tool_calls(text).calls == [ToolCall("python", {"code": "x = 1\nprint(x)"})]


def test_unicode():
    call = ToolCall("traduire", {"texte": "héllo wörld ✓ 你好 🙂", "ключ": "значение"})
    text = "Voilà : " + format_tool_call(call)
    assert "你好" in text  # written as the characters, like the chat template does, not as \\u escapes
    assert parse_tool_calls(text).calls == [call]


def test_deeply_nested_json_does_not_raise():
    result = parse_tool_calls("<tool_call>" + "[" * 100_000 + "</tool_call>")
    assert result.calls == [] and len(result.errors) == 1


def test_errors_are_model_facing():
    texts = [block("{"), block('{"name": 1}'), "</tool_call>", "<tool_call>{", block('{"arguments": {}}')]
    for text in texts:
        for error in parse_tool_calls(text).errors:
            assert error.startswith("Error: ") and error.endswith(HINT)


def test_has_tool_call():
    assert has_tool_call("text <tool_call> broken")
    assert not has_tool_call("no call here </tool_call>")


def test_extract_answer():
    assert extract_answer("The result is <answer> 391 </answer>.") == "391"
    assert extract_answer("<answer>1</answer> no wait <answer>2</answer>") == "2"
    assert extract_answer("<answer>1</answer> then <answer>2") == "1"  # the last *complete* one
    assert extract_answer("<answer>\n</answer>") == ""
    assert extract_answer("391") is None
    assert extract_answer("</answer><answer>") is None


def test_format_tool_call_is_the_exact_text_form():
    call = ToolCall("calculator", {"expression": "17*23"})
    assert format_tool_call(call) == block(CALC)
    assert call.to_dict() == {"name": "calculator", "arguments": {"expression": "17*23"}}


def test_format_tool_call_matches_the_chat_template():
    """Demonstrations written with format_tool_call are byte-identical to what the Qwen2.5 template renders."""
    call = ToolCall("calculator", {"expression": "17*23", "note": "é ✓", "n": [1, 2.5, None, True]})
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": call.to_dict()}],
        },
    ]
    rendered, _ = render_jinja_template([messages], chat_template=tool_chat_template())
    assert "<|im_start|>assistant\n" + format_tool_call(call) + "<|im_end|>" in rendered[0]


# --- properties -------------------------------------------------------------------------------------------

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    '"name"',
    '"arguments"',
    ":",
    ",",
    '"',
    "\\",
    "\n",
    " ",
    "[",
    "]",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
fragment = st.sampled_from(FRAGMENTS) | st.text(max_size=5) | json_values.map(json.dumps)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
calls = st.builds(ToolCall, names, st.dictionaries(st.text(max_size=10), json_values, max_size=5))
filler = st.text(max_size=30).filter(lambda s: "<tool_call>" not in s and "</tool_call>" not in s)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text):
    result = parse_tool_calls(text)
    assert all(e.startswith("Error: ") for e in result.errors)


@settings(max_examples=200, deadline=None)
@given(st.lists(fragment, max_size=30).map("".join))
def test_never_raises_on_adversarial_text(text):
    result = parse_tool_calls(text)
    assert len(result.blocks) == len(result.calls) + len(result.errors)
    # every block opens or closes with a tag, so there are never more blocks than tags
    assert len(result.blocks) <= text.count("<tool_call>") + text.count("</tool_call>")


@settings(max_examples=200, deadline=None)
@given(calls)
def test_round_trip(call):
    assert parse_tool_calls(format_tool_call(call)) == ParseResult([call], [])


@settings(max_examples=200, deadline=None)
@given(st.lists(calls, min_size=1, max_size=4), st.lists(filler, min_size=5, max_size=5))
def test_round_trip_several_calls_with_filler(tool_calls, fillers):
    text = fillers[0] + "".join(format_tool_call(c) + fillers[1 + i % 4] for i, c in enumerate(tool_calls))
    assert parse_tool_calls(text) == ParseResult(tool_calls, [])


answer_text = st.text(max_size=20).filter(lambda s: "<answer>" not in s and "</answer>" not in s)


@settings(max_examples=200, deadline=None)
@given(st.lists(answer_text, min_size=1, max_size=4), st.lists(answer_text, min_size=5, max_size=5))
def test_extract_answer_returns_the_last_answer(answers, fillers):
    text = "".join(fillers[i] + f"<answer>{a}</answer>" for i, a in enumerate(answers)) + fillers[4]
    assert extract_answer(text) == answers[-1].strip()


@pytest.mark.parametrize("text", ["", "plain text", "<answer>", "</answer>"])
def test_extract_answer_none_without_a_complete_answer(text):
    assert extract_answer(text) is None

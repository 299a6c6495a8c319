"""Tools: the AST calculator, schemas from docstrings, and a Toolbox that turns every failure into text."""

from __future__ import annotations

import builtins
import math
import sys
import time
from types import SimpleNamespace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.tools import MAX_EXPRESSION_CHARS, Toolbox, calculator, python

# --- calculator -------------------------------------------------------------------------------------------

# (expression, value computed by Python in this file): precedence, associativity, unary minus, all operators
INT_CASES = [
    ("17*23", 17 * 23),
    ("1 + 2 * 3", 1 + 2 * 3),
    ("(1 + 2) * 3", (1 + 2) * 3),
    ("2 ** 3 ** 2", 2**3**2),  # right-associative
    ("-2 ** 2", -(2**2)),  # ** binds tighter than unary minus
    ("(-2) ** 2", (-2) ** 2),
    ("--5", 5),
    ("-+-3", 3),
    ("100 - 10 - 1", 100 - 10 - 1),  # left-associative
    ("7 // 2", 7 // 2),
    ("-7 // 2", -7 // 2),  # floors, like Python
    ("7 % 3", 7 % 3),
    ("-7 % 3", -7 % 3),
    ("123456789 * 987654321", 123456789 * 987654321),
    ("2 ** 200", 2**200),
    ("3 * (4 + 5) - 6 // (1 + 1)", 3 * (4 + 5) - 6 // (1 + 1)),
    ("abs(-42)", 42),
    ("max(3, 9, 4)", 9),
    ("min(3, -9, 4)", -9),
    ("round(7.6)", 8),
    ("6 / 3", 2),  # a whole float is written without ".0"
    ("2.5 * 4", 10),
    ("1+" * 99 + "1", 100),  # a long flat chain stays within the depth limit
]
FLOAT_CASES = [
    ("10 / 4", 10 / 4),
    ("1 / 3", 1 / 3),
    ("0.1 + 0.2", 0.1 + 0.2),
    ("2 ** -2", 2**-2),
    ("3.5 % 2", 3.5 % 2),
    ("7.5 // 2", 7.5 // 2),
    ("-1.5e3 / 7", -1.5e3 / 7),
    ("sqrt(2)", math.sqrt(2)),
    ("round(2.567, 2)", round(2.567, 2)),
    ("1e-12 * 3", 1e-12 * 3),
]


@pytest.mark.parametrize(("expression", "expected"), INT_CASES)
def test_calculator_integers_exact(expression, expected):
    assert calculator(expression) == str(expected)


@pytest.mark.parametrize(("expression", "expected"), FLOAT_CASES)
def test_calculator_floats(expression, expected):
    # results are rounded to 10 decimals (10 significant digits below 1e-4)
    assert float(calculator(expression)) == pytest.approx(expected, rel=1e-9, abs=1e-10)


def test_calculator_float_formatting():
    assert calculator("0.1 + 0.2") == "0.3"  # no floating-point noise
    assert calculator("1 / 3") == "0.3333333333"
    assert calculator("1 / 8") == "0.125"
    assert calculator("1e-12") == "1e-12"  # tiny values keep their significant digits
    assert calculator("-0.0") == "0"


@st.composite
def int_expressions(draw, depth=3):
    """(expression text, value) pairs built side by side, so the expected value never comes from eval."""
    if depth == 0 or draw(st.booleans()):
        n = draw(st.integers(-999, 999))
        return (f"({n})" if n < 0 else str(n)), n
    left_text, left = draw(int_expressions(depth - 1))
    right_text, right = draw(int_expressions(depth - 1))
    op = draw(st.sampled_from("+-*"))
    value = {"+": left + right, "-": left - right, "*": left * right}[op]
    return f"({left_text} {op} {right_text})", value


@settings(max_examples=200, deadline=None)
@given(int_expressions())
def test_calculator_agrees_with_python_arithmetic(pair):
    text, value = pair
    assert calculator(text) == str(value)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1 / 0", "Error: division by zero."),
        ("5 // 0", "Error: division by zero."),
        ("5 % 0.0", "Error: division by zero."),
        ("0 ** -1", "Error: division by zero."),
        ("", "Error: the expression is empty."),
        ("sqrt(-1)", "Error: sqrt of a negative number."),
        ("abs(1, 2)", "Error: abs() takes 1 argument, got 2."),
        ("max(1)", "Error: max() takes at least 2 arguments, got 1."),
        (
            "(-8) ** 0.5",
            "Error: the result is not a real number (e.g. a fractional power of a negative number).",
        ),
        ("1e308 * 10", "Error: the result is too large (floating-point overflow)."),
        ("-" * 150 + "1", "Error: the expression is nested too deeply (more than 100 levels)."),
    ],
)
def test_calculator_error_texts(expression, error):
    assert calculator(expression) == error


@pytest.mark.parametrize(
    "expression", ["9 ** 9 ** 9", "10 ** 10 ** 10", "2 ** 100000", "(10**999) * (10**999)"]
)
def test_huge_results_are_rejected_quickly(expression):
    start = time.perf_counter()
    result = calculator(expression)
    assert time.perf_counter() - start < 0.1
    assert result.startswith("Error: ") and ("exponent" in result or "digits" in result)


def test_long_expression_is_rejected():
    expression = "1+" * 150 + "1"
    assert len(expression) > MAX_EXPRESSION_CHARS
    assert (
        calculator(expression)
        == f"Error: the expression is too long (301 characters; the limit is {MAX_EXPRESSION_CHARS})."
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x + 1", "unknown name 'x'"),
        ("pi", "unknown name 'pi'"),
        ("(1).real", "unsupported syntax (Attribute)"),
        ("math.sqrt(4)", "unknown function 'math.sqrt'"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("(lambda: 1)()", "cannot be called"),
        ("lambda: 1", "unsupported syntax (Lambda)"),
        ("[i for i in range(3)]", "unsupported syntax (ListComp)"),
        ("1 < 2", "unsupported syntax (Compare)"),
        ("'a' * 3", "only numbers are allowed, got 'a'"),
        ("True + 1", "only numbers are allowed, got True"),
        ("1j", "only numbers are allowed, got 1j"),
        ("1 << 3", "unsupported syntax (BinOp)"),
        ("round(5, x=1)", "plain positional arguments only"),
        ("17*", "is not a valid arithmetic expression"),
        ("import os", "is not a valid arithmetic expression"),
    ],
)
def test_calculator_rejects_everything_but_arithmetic(expression, message):
    result = calculator(expression)
    assert result.startswith("Error: ") and message in result


def test_calculator_never_uses_eval(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    attack = f"__import__('os').system('touch {marker}')"
    assert len(attack) <= MAX_EXPRESSION_CHARS  # rejected for what it is, not for its length
    result = calculator(attack)
    assert result.startswith("Error: unknown function")
    assert not marker.exists()

    def forbidden(*args, **kwargs):
        raise AssertionError("eval/exec must never be called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert calculator("(2 + 3) * 4 ** 2") == "80"


# --- schemas ----------------------------------------------------------------------------------------------


def test_calculator_schema_comes_from_its_docstring():
    (schema,) = Toolbox([calculator]).schemas
    function = schema["function"]
    assert schema["type"] == "function"
    assert function["name"] == "calculator"
    assert function["description"] == "Evaluate an arithmetic expression and return the result."
    assert function["parameters"]["required"] == ["expression"]
    parameter = function["parameters"]["properties"]["expression"]
    assert parameter["type"] == "string"
    assert parameter["description"].startswith("The arithmetic expression")


def test_python_schema():
    (schema,) = Toolbox([python]).schemas
    assert schema["function"]["name"] == "python"
    assert schema["function"]["parameters"]["properties"]["code"]["type"] == "string"


def test_toolbox_rejects_tools_it_cannot_describe():
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="Google-style docstring"):
        Toolbox([undocumented])
    with pytest.raises(ValueError, match="unique"):
        Toolbox([calculator, calculator])


# --- Toolbox ----------------------------------------------------------------------------------------------


def scale(values: list[float], factor: int, label: str | None = None, exact: bool = False) -> dict:
    """Multiply every value by a factor.

    Args:
        values: The numbers to scale.
        factor: The whole-number factor.
        label: An optional label echoed back.
        exact: Whether to keep integers.
    """
    return {"label": label, "scaled": [v * factor for v in values]}


def fails(reason: str) -> str:
    """Always fails.

    Args:
        reason: The error message.
    """
    raise ValueError(reason)


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox([calculator, scale, fails])


def test_toolbox_names_and_schemas(toolbox):
    assert toolbox.names == ["calculator", "scale", "fails"]
    assert [s["function"]["name"] for s in toolbox.schemas] == toolbox.names


def test_execute_ok(toolbox):
    assert toolbox.execute(ToolCall("calculator", {"expression": "17*23"})) == "391"
    # non-string results are dumped as JSON; ints are valid numbers; a nullable argument may be null
    observation = toolbox.execute(ToolCall("scale", {"values": [1, 2.5], "factor": 2, "label": None}))
    assert observation == '{"label": null, "scaled": [2, 5.0]}'


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ToolCall("foo", {}), "Error: unknown tool 'foo'. Available tools: calculator, scale, fails."),
        (
            ToolCall("calculator", {}),
            "Error: calculator is missing the required argument 'expression' (string). "
            "Its arguments: expression (string, required).",
        ),
        (
            ToolCall("calculator", {"expression": "1", "precision": 3}),
            "Error: calculator got an unexpected argument 'precision'. Its arguments: expression (string, required).",
        ),
        (
            ToolCall("calculator", {"expression": 17}),
            "Error: calculator: argument 'expression' must be a string, got an integer (17).",
        ),
        (
            ToolCall("scale", {"values": [1], "factor": 2.5}),
            "Error: scale: argument 'factor' must be an integer, got a number (2.5).",
        ),
        (
            ToolCall("scale", {"values": [1], "factor": True}),
            "Error: scale: argument 'factor' must be an integer, got a boolean (true).",
        ),
        (
            ToolCall("scale", {"values": [1, "2"], "factor": 2}),
            "Error: scale: argument 'values[1]' must be a number, got a string (\"2\").",
        ),
        (
            ToolCall("scale", {"values": 3, "factor": 2}),
            "Error: scale: argument 'values' must be an array, got an integer (3).",
        ),
        (
            ToolCall("scale", {"values": [], "factor": 2, "exact": "yes"}),
            "Error: scale: argument 'exact' must be a boolean, got a string (\"yes\").",
        ),
        (ToolCall("fails", {"reason": "bad input"}), "Error: fails raised ValueError: bad input"),
        (ToolCall("calculator", {"expression": "1/0"}), "Error: division by zero."),
    ],
)
def test_execute_turns_every_failure_into_an_error_observation(toolbox, call, expected):
    assert toolbox.execute(call) == expected


def configure(mode: Literal["fast", "exact"], weights: dict[str, int] | None = None) -> str:
    """Choose a mode.

    Args:
        mode: How to run.
        weights: Optional weight per name.
    """
    return mode


def test_validation_follows_enums_and_nested_types():
    box = Toolbox([configure])
    assert box.execute(ToolCall("configure", {"mode": "exact", "weights": None})) == "exact"
    assert box.execute(ToolCall("configure", {"mode": "slow"})) == (
        'Error: configure: argument \'mode\' must be one of "fast", "exact", got a string ("slow").'
    )
    assert box.execute(ToolCall("configure", {"mode": "fast", "weights": {"a": 1, "b": 0.5}})) == (
        "Error: configure: argument 'weights[\"b\"]' must be an integer, got a number (0.5)."
    )


def test_run_answers_every_block_in_order(toolbox):
    text = (
        "First the product, then the sum.\n"
        + format_tool_call(ToolCall("calculator", {"expression": "17*23"}))
        + '\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+"\n</tool_call>\n'
        + format_tool_call(ToolCall("calculator", {"expression": "391 + 9"}))
        + format_tool_call(ToolCall("nope", {}))
    )
    calls, observations = toolbox.run(text)
    assert [c.arguments.get("expression") for c in calls] == ["17*23", "391 + 9", None]
    assert len(observations) == 4
    assert observations[0] == "391"
    assert observations[1].startswith("Error: the tool call is not valid JSON")
    assert observations[2] == "400"
    assert observations[3].startswith("Error: unknown tool 'nope'")


def test_run_without_calls(toolbox):
    assert toolbox.run("<answer>391</answer>") == ([], [])


def test_python_tool_delegates_to_the_sandbox(monkeypatch):
    seen = []

    def fake_run_python(code: str, timeout_s: float) -> str:
        seen.append((code, timeout_s))
        return "42\n"

    monkeypatch.setitem(sys.modules, "agentrl_lite.sandbox", SimpleNamespace(run_python=fake_run_python))
    assert Toolbox([python]).execute(ToolCall("python", {"code": "print(6 * 7)"})) == "42\n"
    assert seen == [("print(6 * 7)", 5.0)]


def test_python_tool_runs_in_the_sandbox():
    pytest.importorskip("agentrl_lite.sandbox", reason="agentrl_lite/sandbox.py is not there yet")
    from agentrl_lite.tools import run_python

    observation = Toolbox([python]).execute(ToolCall("python", {"code": "print(6 * 7)"}))
    assert "42" in observation
    assert "42" in run_python("print(6 * 7)", timeout_s=5.0)

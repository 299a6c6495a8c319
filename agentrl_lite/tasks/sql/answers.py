"""Answers to questions over the shop database: the gold answer read off a query's rows, and execution match.

A gold answer is a short string made from the rows the gold SQL returns: one value, or several separated by
commas, or `NO_RECORD` when nothing matches. Numbers are rounded to 2 decimal places (half away from zero) and
written without trailing zeros: 23.456 → "23.46", 12.50 → "12.5", 7.0 → "7".

An agent's answer is right when it holds the same values (`same_answer`): both sides are split on commas, each
value normalised (a number as above, after an optional "$"; text as `rewards.normalize_answer` does: case,
punctuation and articles ignored), and the sets compared, so the order of a list and repeated values do not
matter. The questions never ask for an order or a repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from agentrl_lite.rewards import normalize_answer

NO_RECORD = "none"
"""the answer when no record matches the question"""
_CENTS = Decimal("0.01")


def format_number(value: int | float | Decimal) -> str:
    """A number as answers write it: rounded to 2 decimal places, half away from zero, no trailing zeros."""
    rounded = Decimal(repr(value) if isinstance(value, float) else value).quantize(_CENTS, ROUND_HALF_UP)
    return format(rounded.normalize() + 0, "f")  # + 0 turns -0 into 0


def is_rounding_tie(value: float) -> bool:
    """Whether `value` lies halfway between two cents (10.015): SQL's ROUND and ours could then disagree."""
    return Decimal(repr(value)).scaleb(2) % 1 in (Decimal("0.5"), Decimal("-0.5"))


def answer_text(rows: Sequence[Sequence[object]]) -> str:
    """The answer a query's rows give: the first column's values, numbers formatted by `format_number`, joined
    with ", "; `NO_RECORD` when there is no value (no row, or only NULLs)."""
    values = [row[0] for row in rows if row[0] is not None]
    if not values:
        return NO_RECORD
    return ", ".join(format_number(v) if isinstance(v, int | float) else str(v) for v in values)


def _number(text: str) -> str | None:
    """`text` as `format_number` writes it; None when it is not a number, or one too large to round to cents."""
    try:
        number = Decimal(text.removeprefix("$"))
        return format_number(number) if number.is_finite() else None
    except InvalidOperation:
        return None


def _normalize_value(text: str) -> str:
    value = text.strip().strip("'\"`").strip()
    return _number(value) or normalize_answer(value)


def normalize_sql_answer(text: str | None) -> frozenset[str]:
    """The set of normalised values an answer holds (empty for None or a blank answer)."""
    if text is None:
        return frozenset()
    return frozenset(v for v in map(_normalize_value, text.split(",")) if v)


def same_answer(predicted: str | None, gold: str) -> bool:
    """Execution match: `predicted` holds the same values as `gold` (see the module docstring)."""
    values = normalize_sql_answer(predicted)
    return bool(values) and values == normalize_sql_answer(gold)

"""BFCL (part of the function-calling task family): the Berkeley Function Calling Leaderboard's single-turn
AST categories, loaded and checked offline. `FunctionCallEnv` (`tasks.function_calls`) serves them to the
policy; `agentrl_lite.evaluate` scores a policy on them per category.

The questions and their possible answers ship inside the `bfcl-eval` wheel (BFCL v4), so nothing is
downloaded. Only the data files are read; `bfcl_eval` itself is never imported (its model handlers pull
in a dozen API clients). Install it without dependencies: `pip install --no-deps bfcl-eval==2026.3.23`
(`make setup` does).

An entry is a user request, the functions on offer (BFCL's own schema dialect: "dict", "float", "tuple",
"any") and, except for irrelevance, the possible answers: for each expected call, for each parameter, the
list of acceptable values, where "" means "may be left out". The checker below applies BFCL's AST rules
(re-implemented from their description; the unit tests hold it to BFCL's ground truth and to mutations):

- the output must hold exactly as many calls as expected (one for simple/multiple);
- the function name must be the expected one;
- every required parameter present, no parameter the function or the answer does not know;
- each value of the declared type (an int is accepted for a float; tuples compare as lists; a value of
  the answer's own type is accepted when the answer is a "variable" of another type);
- strings match after lower-casing and dropping spaces and ",./-_*^"; lists element-wise the same way;
  dicts key by key; other values must be one of the possible answers (so 5 == 5.0);
- an optional parameter left out is fine only when "" is among its possible answers;
- parallel categories: calls may come in any order; each expected call takes the first unused output
  call that passes (BFCL's greedy matching);
- irrelevance: correct when the model makes no call (a malformed call counts as none, as in BFCL).
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl_lite.chat import parse_tool_calls

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
"""the single-turn Python categories this module scores (BFCL's "non-live AST" set plus irrelevance)"""
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
                   "live_relevance")
"""BFCL's "live" categories: user-contributed requests and functions, scored by the same rules; in
live_irrelevance no function fits (no call is right), in live_relevance one does (any well-formed call is right:
BFCL scores only that the model called)"""
NO_CALL = ("irrelevance", "live_irrelevance")
"""categories whose right answer is to call nothing"""
VERSION = "v4"
INSTALL_HINT = "pip install --no-deps bfcl-eval==2026.3.23   (or: make setup)"

# BFCL's parameter types → Python types (the checker) and → JSON-schema types (the prompt).
PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                                 "array": list, "tuple": list, "dict": dict, "any": str}
JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}

SYSTEM_PROMPT = (
    "You are an expert in composing function calls. Given a request and the functions below, call the "
    "function(s) that fulfil it, one <tool_call> block per call, with every argument the request gives. "
    "If no function fits the request, say so in plain text and do not call any."
)


# --- loading ---------------------------------------------------------------------------------------------


def data_dir() -> Path:
    """Where the installed `bfcl-eval` wheel keeps its data (found without importing the package)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"BFCL's data comes from the bfcl-eval wheel, which is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"bfcl-eval is installed but has no data folder at {path}: {INSTALL_HINT}")
    return path


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_category(category: str, n: int | None = None, seed: int = 0,
                  exclude: Collection[str] = ()) -> list[dict[str, Any]]:
    """The entries of one BFCL category, each with its possible answer (None for irrelevance).

    n: keep a seeded random subset of n entries (in BFCL's order), for quick evaluations; None keeps all.
    exclude: entry ids left out before the subset is drawn, e.g. every entry an earlier run scored, so that a
    claim is measured on entries no tuning or probe has seen.
    Each entry: {"id", "category", "messages" (the user turn), "question" (its text), "functions",
    "possible_answer"}.
    """
    if category not in CATEGORIES + LIVE_CATEGORIES:
        raise ValueError(f"Unknown BFCL category {category!r}; this module scores "
                         f"{', '.join(CATEGORIES + LIVE_CATEGORIES)}.")
    root = data_dir()
    entries = [e for e in _read_json_lines(root / f"BFCL_{VERSION}_{category}.json") if e["id"] not in exclude]
    answers_path = root / "possible_answer" / f"BFCL_{VERSION}_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _read_json_lines(answers_path)} if answers_path.exists() else {}
    if n is not None and n < len(entries):
        keep = sorted(random.Random(f"{seed}-{category}").sample(range(len(entries)), n))
        entries = [entries[i] for i in keep]
    tasks = []
    for e in entries:
        messages = e["question"][0]  # single-turn categories: one turn of user messages
        tasks.append({"id": e["id"], "category": category, "messages": messages,
                      "question": messages[-1]["content"], "functions": e["function"],
                      "possible_answer": answers.get(e["id"])})
    if category not in NO_CALL + ("live_relevance",) and any(t["possible_answer"] is None for t in tasks):
        raise ValueError(f"BFCL {category}: some entries have no possible answer in {answers_path}.")
    return tasks


def load_bfcl(categories: Sequence[str] = CATEGORIES, n_per_category: int | None = None,
              seed: int = 0, exclude: Collection[str] = ()) -> list[dict[str, Any]]:
    """Entries of several categories (n_per_category each, or all), without the ids in `exclude`."""
    return [t for c in categories for t in load_category(c, n_per_category, seed, frozenset(exclude))]


# --- prompting -------------------------------------------------------------------------------------------


def _json_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """One BFCL parameter spec in JSON-schema words (recursively through items and properties)."""
    out = {k: v for k, v in spec.items() if k not in ("type", "items", "properties")}
    if "type" in spec:
        out["type"] = JSON_TYPES.get(spec["type"], spec["type"])
    if "items" in spec:
        out["items"] = _json_schema(spec["items"])
    if "properties" in spec:
        out["properties"] = {k: _json_schema(v) for k, v in spec["properties"].items()}
    return out


def tool_schema(function: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function description as the tool schema a chat template renders ({"type": "function", ...})."""
    return {"type": "function", "function": {"name": function["name"],
                                             "description": function.get("description", ""),
                                             "parameters": _json_schema(function["parameters"])}}


# --- decoding --------------------------------------------------------------------------------------------


def decode_calls(text: str) -> list[dict[str, dict[str, Any]]] | None:
    """The calls a model turn makes in BFCL's shape, `[{name: {param: value}}, ...]`; None when any
    `<tool_call>` block is malformed (BFCL's "decoder failed": the whole output is then unusable)."""
    parsed = parse_tool_calls(text)
    if parsed.errors:
        return None
    return [{c.name: dict(c.arguments)} for c in parsed.calls]


# --- the checker -----------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    valid: bool
    error_type: str = ""
    """BFCL-style label of the first rule broken, e.g. "simple:wrong_func_name"; "" when valid"""
    error: str = ""
    details: list[str] = field(default_factory=list)


def _fail(error_type: str, error: str) -> CheckResult:
    return CheckResult(False, error_type, error)


def standardize(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ,./-_*^ , lower-case, single quotes → double."""
    return re.sub(r"[ ,./\-_*^]", "", text).lower().replace("'", '"')


def _answer_type(possible: list[Any]) -> type | None:
    """The type of the first non-optional possible answer (None when every answer is "")."""
    for answer in possible:
        if answer != "":
            return type(answer)
    return None


def _type_ok(value: Any, possible: list[Any], expected: type, nested: type | None) -> tuple[bool, bool]:
    """(type is acceptable, value is a "variable"): BFCL's type rule, nested one level for arrays."""
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for candidate in possible:  # arrays: every element must have the item type of some candidate
            if isinstance(candidate, list) and all(
                type(item) is nested or type(item) is _answer_type(candidate) for item in value
            ):
                return True, is_variable
            if not isinstance(candidate, list):
                return True, is_variable
        return False, is_variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, is_variable


def _std(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _dict_ok(value: dict, possible: list[Any]) -> bool:
    for candidate in possible:
        if candidate == "":
            continue
        if all(k in candidate and _std(v) in [_std(a) for a in candidate[k]] for k, v in value.items()) and all(
            k in value or "" in options for k, options in candidate.items()
        ):
            return True
    return False


def _list_of_dicts_ok(value: list, possible: list[Any]) -> bool:
    """A list of dicts against its possible answers; "" (the parameter is optional) is a list of length zero,
    so an empty list passes where "" is allowed, as in BFCL's own checker."""
    return any(
        isinstance(candidate, list) and len(candidate) == len(value)
        and all(isinstance(v, dict) and _dict_ok(v, [c]) for v, c in zip(value, candidate, strict=True))
        for candidate in ([] if c == "" else c for c in possible)
    )


def check_call(function: dict[str, Any], output: dict[str, dict[str, Any]], answer: dict[str, dict]) -> CheckResult:
    """One output call `{name: args}` against one expected call `{name: {param: [possible values]}}`."""
    name, possible = next(iter(answer.items()))
    if name not in output:
        return _fail("simple:wrong_func_name", f"function {name!r} not called (got {', '.join(output)})")
    args = output[name]
    spec = function["parameters"]
    properties, required = spec.get("properties", {}), spec.get("required", [])
    for param in required:
        if param not in args:
            return _fail("simple:missing_required", f"missing required parameter {param!r}")
    for param, value in args.items():
        if param not in properties or param not in possible:
            return _fail("simple:unexpected_param", f"unexpected parameter {param!r}")
        declared = properties[param].get("type", "any")
        expected = PYTHON_TYPES.get(declared)
        if expected is None:
            return _fail("simple:unknown_type", f"parameter {param!r} has a type BFCL does not define: {declared}")
        nested = None
        if declared in ("array", "tuple"):
            nested = PYTHON_TYPES.get(properties[param].get("items", {}).get("type", "any"), str)
        if isinstance(value, tuple):
            value = list(value)
        if declared == "float" and type(value) is int:
            value = float(value)
        type_ok, is_variable = _type_ok(value, possible[param], expected, nested)
        if not type_ok:
            return _fail("type_error", f"parameter {param!r}: expected {declared}, got {type(value).__name__} "
                                       f"({value!r})")
        options = possible[param]
        if not is_variable and expected is dict:
            ok = isinstance(value, dict) and _dict_ok(value, options)
        elif not is_variable and expected is list and nested is dict:
            ok = _list_of_dicts_ok(value, options)
        elif not is_variable and expected is str:
            ok = standardize(value) in [standardize(o) for o in options if isinstance(o, str)]
        elif not is_variable and expected is list:
            # "" (optional) compares as an empty list, as in BFCL
            ok = [_std(v) for v in value] in [[_std(x) for x in o] if isinstance(o, list) else []
                                              for o in options if isinstance(o, list) or o == ""]
        else:
            ok = value in options
        if not ok:
            return _fail("value_error", f"parameter {param!r}: {value!r} is not one of {options!r}")
    for param, options in possible.items():
        if param not in args and "" not in options:
            return _fail("simple:missing_optional", f"parameter {param!r} left out but it is not optional")
    return CheckResult(True)


def _find_function(functions: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    for f in functions:
        if f["name"] == name:
            return f
    raise ValueError(f"possible answer names {name!r}, which is not among the entry's functions")


def check(task: dict[str, Any], calls: list[dict[str, dict[str, Any]]] | None) -> CheckResult:
    """Score decoded calls (`decode_calls`; None = undecodable) against a task's possible answer."""
    category = task.get("category", "")
    if category == "live_relevance":  # some function fits: any well-formed call passes
        if calls is None:
            return _fail("decode_failed", "a <tool_call> block is malformed, so the output has no decodable calls")
        return CheckResult(True) if calls else _fail("relevance:no_call", "no call although a function fits")
    if category in NO_CALL or task.get("possible_answer") in (None, []):
        if calls:
            return _fail("irrelevance:called", f"called {', '.join(n for c in calls for n in c)} "
                                               f"although no function fits")
        return CheckResult(True)
    if calls is None:
        return _fail("decode_failed", "a <tool_call> block is malformed, so the output has no decodable calls")
    expected = task["possible_answer"]
    if len(calls) != len(expected):
        return _fail("wrong_count", f"{len(calls)} call(s) for {len(expected)} expected")
    if len(expected) == 1:
        name = next(iter(expected[0]))
        return check_call(_find_function(task["functions"], name), calls[0], expected[0])
    used: set[int] = set()
    for i, answer in enumerate(expected):  # any order; greedy first match, as BFCL does
        function = _find_function(task["functions"], next(iter(answer)))
        reasons = []
        for j, call in enumerate(calls):
            if j in used:
                continue
            result = check_call(function, call, answer)
            if result.valid:
                used.add(j)
                break
            reasons.append(f"call {j}: {result.error}")
        else:
            return CheckResult(False, "parallel:no_match", f"no output call matches expected call {i}", reasons)
    return CheckResult(True)


def check_text(task: dict[str, Any], text: str) -> CheckResult:
    """Decode a model turn and check it."""
    return check(task, decode_calls(text))


def _first_value(options: list[Any]) -> Any:
    """The first acceptable value among possible answers; dicts (and lists of dicts) hold possible answers
    per key themselves, so they are resolved recursively."""
    value = next((o for o in options if o != ""), "")  # only "" (live data has such required parameters)
    if isinstance(value, dict):
        value = {k: v if isinstance(v, list) else [v] for k, v in value.items()}  # live data: a bare value
        return {k: _first_value(v) for k, v in value.items() if any(o != "" for o in v)}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_first_value([v]) for v in value]
    return value


def reference_calls(task: dict[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """One correct output for a task, built from its possible answer: the first acceptable value of each
    parameter; optional ones ("" acceptable) left out unless the function requires them. Empty for
    irrelevance."""
    calls = []
    for answer in task.get("possible_answer") or []:
        name, possible = next(iter(answer.items()))
        required = set(_find_function(task["functions"], name)["parameters"].get("required", []))
        calls.append({name: {p: _first_value(options) for p, options in possible.items()
                             if "" not in options or p in required}})
    return calls


def as_gold_calls(task: dict[str, Any]) -> list[dict[str, Any]]:
    """`reference_calls` in the `{"name", "arguments"}` shape the reward functions take."""
    return [{"name": n, "arguments": a} for call in reference_calls(task) for n, a in call.items()]

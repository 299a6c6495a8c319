"""The BFCL checker against BFCL's own ground truth, mutated answers, and BFCL's own checker code."""

from __future__ import annotations

import copy
import importlib
import json
import sys
import types

import pytest

from agentrl_lite.episode import Episode, Turn
from agentrl_lite.evaluate import EvalReport, task_label
from agentrl_lite.tasks import bfcl
from agentrl_lite.tasks.function_calls import FunctionCallEnv
from agentrl_lite.tools import Toolbox

SIZES = {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240}


@pytest.fixture(scope="module")
def entries() -> dict[str, list[dict]]:
    return {c: bfcl.load_category(c) for c in bfcl.CATEGORIES}


def as_text(calls: list[dict]) -> str:
    return "\n".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>'
                     for call in calls for n, a in call.items())


def test_categories_load_with_bfcls_sizes(entries):
    assert {c: len(v) for c, v in entries.items()} == SIZES
    for category, tasks in entries.items():
        assert all(t["category"] == category and t["functions"] and t["question"] for t in tasks)
        assert all((t["possible_answer"] is None) == (category == "irrelevance") for t in tasks)


def test_subset_is_seeded_and_in_bfcl_order():
    a, b = bfcl.load_category("parallel", n=10, seed=3), bfcl.load_category("parallel", n=10, seed=3)
    assert [t["id"] for t in a] == [t["id"] for t in b]
    assert [t["id"] for t in a] != [t["id"] for t in bfcl.load_category("parallel", n=10, seed=4)]
    numbers = [int(t["id"].rsplit("_", 1)[1]) for t in a]
    assert numbers == sorted(numbers)


def test_a_subset_can_leave_out_every_entry_an_earlier_subset_scored():
    scored = {t["id"] for t in bfcl.load_bfcl(n_per_category=6, seed=0)}
    fresh = bfcl.load_bfcl(n_per_category=6, seed=1, exclude=scored)
    assert len(fresh) == 6 * len(bfcl.CATEGORIES) and not scored & {t["id"] for t in fresh}
    assert [t["id"] for t in fresh] == [t["id"] for t in bfcl.load_bfcl(n_per_category=6, seed=1, exclude=scored)]
    # without the exclusion, seed 1's draw shares entries with seed 0's in some category (so the test can fail)
    assert scored & {t["id"] for t in bfcl.load_bfcl(n_per_category=6, seed=1)}


def test_unknown_category_is_a_clear_error():
    with pytest.raises(ValueError, match="live_nonexistent"):
        bfcl.load_category("live_nonexistent")


def test_every_ground_truth_answer_scores_correct(entries):
    for tasks in entries.values():
        for task in tasks:
            result = bfcl.check(task, bfcl.reference_calls(task))
            assert result.valid, (task["id"], result.error)
            # and through the text path: rendered as <tool_call> blocks, decoded back
            assert bfcl.check_text(task, as_text(bfcl.reference_calls(task))).valid, task["id"]


# --- mutations: each must score wrong ---------------------------------------------------------------------


def _other_value(value, options):
    """A value of the same type that no option accepts."""
    if isinstance(value, bool):
        candidate = not value
    elif isinstance(value, int):
        candidate = value + 7919
    elif isinstance(value, float):
        candidate = value + 7919.5
    elif isinstance(value, str):
        candidate = value + " qzx"
    elif isinstance(value, list):
        candidate = [*value, value[0] if value else 7919] if value else [7919]
    else:
        return None
    return None if candidate in options else candidate


def _wrong_type(value, declared):
    if declared in ("integer", "float") and not isinstance(value, bool):
        return str(value)
    if declared == "string":
        return 12345
    if declared == "boolean":
        return "yes"
    if declared in ("array", "tuple"):
        return "not a list"
    return None


def mutations(task):
    """(kind, calls) pairs, each a deliberately wrong answer derived from the reference."""
    reference = bfcl.reference_calls(task)
    out = []
    for i, call in enumerate(reference):
        (name, args), = call.items()
        function = next(f for f in task["functions"] if f["name"] == name)
        props, required = function["parameters"]["properties"], function["parameters"].get("required", [])
        options = next(iter(task["possible_answer"][i].values()))

        def replaced(new_call, i=i):
            calls = copy.deepcopy(reference)
            calls[i] = new_call
            return calls

        out.append(("wrong_name", replaced({name + "_v2": args})))
        if required:
            out.append(("missing_required", replaced({name: {k: v for k, v in args.items() if k != required[0]}})))
        for param, value in args.items():
            if (other := _other_value(value, options[param])) is not None and not isinstance(value, dict):
                out.append(("wrong_value", replaced({name: {**args, param: other}})))
                break
        for param, value in args.items():
            if (bad := _wrong_type(value, props[param]["type"])) is not None:
                # a string option list may legitimately contain the string form; skip those
                if bad in options[param] or str(bad) in map(str, options[param]):
                    continue
                out.append(("wrong_type", replaced({name: {**args, param: bad}})))
                break
        out.append(("unknown_param", replaced({name: {**args, "zz_not_a_param": 1}})))
    out.append(("extra_call", [*reference, reference[0]]))
    if len(reference) > 1:
        out.append(("missing_call", reference[:-1]))
    out.append(("no_call", []))
    out.append(("undecodable", None))
    return out


def test_mutated_answers_score_wrong(entries):
    kinds: dict[str, int] = {}
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        for task in entries[category]:
            for kind, calls in mutations(task):
                result = bfcl.check(task, calls)
                assert not result.valid, (task["id"], kind, calls)
                assert result.error_type, (task["id"], kind)
                kinds[kind] = kinds.get(kind, 0) + 1
    # every kind of mutation was exercised on many entries
    assert min(kinds[k] for k in ("wrong_name", "missing_required", "wrong_value", "wrong_type",
                                  "unknown_param", "extra_call", "no_call", "undecodable")) > 300, kinds


def test_error_types_name_the_broken_rule(entries):
    task = entries["simple_python"][0]  # calculate_triangle_area(base=10, height=5, unit optional)
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": 10, "height": 5}}]).valid
    assert bfcl.check(task, [{"triangle_area": {"base": 10, "height": 5}}]).error_type == "simple:wrong_func_name"
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": 10}}]).error_type == "simple:missing_required"
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": 11, "height": 5}}]).error_type == "value_error"
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": "10", "height": 5}}]).error_type == "type_error"
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": 10, "height": 5, "units": "cm"}}]).error_type \
        == "simple:unexpected_param"
    assert bfcl.check(task, []).error_type == "wrong_count"
    assert bfcl.check(task, None).error_type == "decode_failed"
    # lenient where BFCL is lenient: optional value among the answers, strings normalised
    assert bfcl.check(task, [{"calculate_triangle_area": {"base": 10, "height": 5, "unit": "Units"}}]).valid


def test_int_accepted_for_float_and_parallel_order_free():
    task = {"category": "parallel", "functions": [{"name": "f", "parameters": {
        "type": "dict", "properties": {"x": {"type": "float"}, "s": {"type": "string"}}, "required": ["x"]}}],
        "possible_answer": [{"f": {"x": [2.0], "s": ["New York", ""]}}, {"f": {"x": [3.5], "s": [""]}}]}
    assert bfcl.check(task, [{"f": {"x": 3.5}}, {"f": {"x": 2, "s": "new-york"}}]).valid
    assert not bfcl.check(task, [{"f": {"x": 3.5}}, {"f": {"x": 2.0, "s": "Boston"}}]).valid
    assert not bfcl.check(task, [{"f": {"x": True}}, {"f": {"x": 3.5}}]).valid  # a boolean is not a number


def test_irrelevance_wants_no_call(entries):
    task = entries["irrelevance"][0]
    name = task["functions"][0]["name"]
    assert bfcl.check_text(task, "I cannot help with that using these functions.").valid
    assert not bfcl.check_text(task, as_text([{name: {}}])).valid
    assert bfcl.check_text(task, "<tool_call>\n{not json}\n</tool_call>").valid  # undecodable = no call


def test_decode_calls_reads_blocks_and_rejects_malformed():
    assert bfcl.decode_calls('<tool_call>\n{"name": "a.b", "arguments": {"x": 1}}\n</tool_call>') == [{"a.b": {"x": 1}}]
    assert bfcl.decode_calls("no call here") == []
    assert bfcl.decode_calls('<tool_call>\n{"name": "a"}\n</tool_call><tool_call>{"x"</tool_call>') is None


def test_tool_schema_speaks_json_schema():
    function = {"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "a": {"type": "float"}, "b": {"type": "tuple", "items": {"type": "float"}},
        "c": {"type": "dict", "properties": {"d": {"type": "any"}}}}, "required": ["a"]}}
    schema = bfcl.tool_schema(function)["function"]["parameters"]
    assert schema["type"] == "object" and schema["required"] == ["a"]
    assert schema["properties"]["a"]["type"] == "number"
    assert schema["properties"]["b"] == {"type": "array", "items": {"type": "number"}}
    assert schema["properties"]["c"]["properties"]["d"]["type"] == "string"


def reply_episode(text: str) -> Episode:
    """A single-turn episode whose one model turn wrote `text`."""
    turns = [Turn("prompt", 0, 1, ""), Turn("model", 1, 2, text + "<|im_end|>", content=text)]
    return Episode(prompt=[], token_ids=[0, 1], logprobs=[0.0, 0.0], model_mask=[0, 1], turns=turns)


def test_the_environment_scores_with_the_checker_and_the_report_tallies_per_category(entries):
    tasks = entries["simple_python"][:4] + entries["irrelevance"][:2]
    outputs = [as_text(bfcl.reference_calls(tasks[0])), "nothing", as_text(bfcl.reference_calls(tasks[2])),
               "<tool_call>", "no call", as_text([{tasks[5]["functions"][0]["name"]: {}}])]
    env = FunctionCallEnv()
    episodes = [reply_episode(text) for text in outputs]
    scores = [env.score(task, ep) for task, ep in zip(tasks, episodes, strict=True)]
    assert [s["correct"] for s in scores] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    report = EvalReport(labels=[task_label(t) for t in tasks], scores=scores, episodes=episodes)
    assert report.by_label() == {"simple_python": 0.5, "irrelevance": 0.5}
    assert report.counts == {"simple_python": 4, "irrelevance": 2}
    assert report.overall == 0.5
    assert report.errors() == {"simple_python": {"wrong_count": 1, "decode_failed": 1},
                               "irrelevance": {"irrelevance:called": 1}}


def test_the_environment_offers_the_tasks_functions_as_a_toolbox_that_never_runs_them(entries):
    task = entries["multiple"][0]
    toolbox = FunctionCallEnv().toolbox_for(task)
    assert isinstance(toolbox, Toolbox) and toolbox.names == [f["name"] for f in task["functions"]]
    calls, observations = toolbox.run(as_text(bfcl.reference_calls(task)) + "\n<tool_call>\nnot json\n</tool_call>")
    assert len(calls) == 1 and observations[0] == "(not executed)" and observations[1].startswith("Error:")


def test_missing_wheel_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="--no-deps bfcl-eval"):
        bfcl.data_dir()


# --- BFCL's own checker as the oracle -------------------------------------------------------------------


@pytest.fixture(scope="module")
def bfcl_ast_checker():
    """BFCL's ast_checker module from the installed wheel. Its model-config module imports every API client
    BFCL supports; the checker needs only `underscore_to_dot`, so that one module is stubbed."""
    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = {"agentrl/lite": types.SimpleNamespace(underscore_to_dot=False)}
    saved = {k: sys.modules.get(k) for k in ("bfcl_eval.constants.model_config",
                                             "bfcl_eval.eval_checker.ast_eval.ast_checker")}
    sys.modules["bfcl_eval.constants.model_config"] = stub
    sys.modules.pop("bfcl_eval.eval_checker.ast_eval.ast_checker", None)
    try:
        module = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        from bfcl_eval.constants.enums import Language
        yield lambda task, calls: module.ast_checker(task["functions"], calls, task["possible_answer"],
                                                     Language.PYTHON, task["category"], "agentrl_lite")["valid"]
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def lenient_variants(task):
    """Right answers written differently: ints for floats, other string case/spacing, other order."""
    reference = bfcl.reference_calls(task)
    out = [reference[::-1]] if len(reference) > 1 else []
    for i, call in enumerate(reference):
        (name, args), = call.items()
        variant = {}
        for k, v in args.items():
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            elif isinstance(v, str):
                v = v.upper().replace(" ", "  ")
            variant[k] = v
        calls = copy.deepcopy(reference)
        calls[i] = {name: variant}
        out.append(calls)
    return out


def test_agrees_with_bfcls_own_checker(entries, bfcl_ast_checker):
    compared = disagreements = 0
    failures = []
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        for task in entries[category]:
            candidates = [bfcl.reference_calls(task), *lenient_variants(task),
                          *(calls for _, calls in mutations(task) if calls is not None)]
            for calls in candidates:
                ours, theirs = bfcl.check(task, calls).valid, bfcl_ast_checker(task, copy.deepcopy(calls))
                compared += 1
                if ours != theirs:
                    disagreements += 1
                    failures.append((task["id"], calls, ours, theirs))
    assert compared > 5000
    assert not failures, failures[:3]


def test_an_empty_list_of_dicts_passes_where_the_parameter_is_optional(entries):
    """BFCL's checker reads "" among a list-of-dicts parameter's possible answers as a list of length zero, so an
    explicit `[]` passes where the parameter may be left out (found by an outside check against BFCL's own)."""
    task = next(t for t in entries["simple_python"] if t["id"] == "simple_python_335")
    assert task["possible_answer"][0]["find_card_in_deck"]["deck"] == [""]
    assert bfcl.check(task, [{"find_card_in_deck": {"rank": "Queen", "suit": "Hearts", "deck": []}}]).valid
    assert bfcl.check(task, [{"find_card_in_deck": {"rank": "Queen", "suit": "Hearts"}}]).valid
    wrong = bfcl.check(task, [{"find_card_in_deck": {"rank": "Queen", "suit": "Hearts", "deck": [{"rank": "2"}]}}])
    assert not wrong.valid and wrong.error_type == "value_error"


def _answer_fits_schema(task):
    for answer in task["possible_answer"]:
        (name, params), = answer.items()
        function = next((f for f in task["functions"] if f["name"] == name), None)
        if function is None or not set(params) <= set(function["parameters"].get("properties", {})):
            return False
    return True


@pytest.fixture(scope="module")
def live_entries():
    return {c: bfcl.load_category(c) for c in bfcl.LIVE_CATEGORIES}


def test_live_categories_load_and_agree_with_bfcls_own_checker(live_entries, bfcl_ast_checker):
    """BFCL's "live" categories (user-contributed functions, with their quirks) through the same checker: the
    reference answers, lenient variants and mutations get BFCL's own verdict."""
    assert {c: len(t) for c, t in live_entries.items()} == {
        "live_simple": 258, "live_multiple": 1053, "live_parallel": 16, "live_parallel_multiple": 24,
        "live_irrelevance": 884, "live_relevance": 16}
    compared, failures, quirky = 0, [], []
    for category in ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"):
        for task in live_entries[category]:
            if not _answer_fits_schema(task):
                quirky.append(task["id"])  # the possible answer names a parameter the function lacks
                continue
            for calls in [bfcl.reference_calls(task), *lenient_variants(task),
                          *(calls for _, calls in mutations(task) if calls is not None)]:
                ours, theirs = bfcl.check(task, calls).valid, bfcl_ast_checker(task, copy.deepcopy(calls))
                compared += 1
                if ours != theirs:
                    failures.append((task["id"], calls, ours, theirs))
    print(f"live: {compared} candidates compared, {len(failures)} disagreements, {len(quirky)} entries skipped")
    assert compared > 3000 and len(quirky) < 20, quirky
    assert not failures, (len(failures), compared, failures[:3])
    relevance, irrelevance = live_entries["live_relevance"][0], live_entries["live_irrelevance"][0]
    call = [{relevance["functions"][0]["name"]: {}}]
    assert bfcl.check(relevance, call).valid and not bfcl.check(relevance, []).valid
    assert bfcl.check(irrelevance, []).valid and not bfcl.check(irrelevance, call).valid

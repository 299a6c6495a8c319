"""Lesson 04's LoRA study at toy size: every configuration trains what it should and the summary judges it."""

from __future__ import annotations

import pytest

from agentrl_lite.course.lora_study import LORA_LR_FACTOR, configurations, lora_study, run_one
from agentrl_lite.course.reproduce import LORA, comparison_rows, primary_claim, summarise


@pytest.fixture(scope="module")
def study():
    return lora_study([0, 1], profile="smoke", model_name="tiny", isolate=False)


def test_each_configuration_trains_its_own_parameters_at_its_own_rate(study):
    runs = study["records"][0]["metrics"]["runs"]
    assert list(runs) == list(configurations()) == ["full", "LoRA r=1", "LoRA r=8", "LoRA r=32"]
    sizes = [runs[name]["trainable_parameters"] for name in ("LoRA r=1", "LoRA r=8", "LoRA r=32", "full")]
    assert sizes == sorted(sizes) and sizes[1] == 8 * sizes[0], "a LoRA adapter's size is linear in its rank"
    assert runs["LoRA r=8"]["lr"] == pytest.approx(LORA_LR_FACTOR * runs["full"]["lr"])
    assert runs["full"]["optimizer_state_mb"] == pytest.approx(8 * sizes[3] / 2**20)
    assert all(r["step_time"] > 0 and r["peak_rss_mb"] > 0 for r in runs.values())


def test_the_study_is_summarised_with_every_claim_secondary(study):
    summary = summarise(LORA, study["records"])
    assert primary_claim(summary) is None and LORA.primary is None
    rows = comparison_rows(summary)
    assert {row["claim"] for row in rows} == {f"{a} vs {b}" for a, b in LORA.comparisons}
    assert {row["role"] for row in rows} == {"secondary"}
    assert summary["records"]["ids"][:2] == study["records"][0]["metrics"]["heldout"]["start"]["ids"][:2]


def test_a_start_run_trains_nothing():
    start = run_one(0, "start", "smoke", "tiny")
    assert "seconds" not in start and start["heldout"]["ids"] and len(start["heldout"]["correct"]) == 4


def test_the_study_runs_lesson_04s_budget():
    """`lora_study.BUDGET` repeats the BUDGET cell of lesson 04 (the notebook keeps its own, for the reader):
    if one changes without the other, the study no longer measures the lesson's run."""
    import ast

    import nbformat

    from agentrl_lite.course.lora_study import BUDGET
    from agentrl_lite.paths import course_root

    source = nbformat.read(course_root() / "notebooks" / "04_grpo_on_an_llm.ipynb", as_version=4).cells[2].source
    start = source.index("BUDGET = {")
    tree = ast.parse(source[start:source.index("}[PROFILE]", start) + 1])
    lesson = {key.value: {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
              for key, call in zip(tree.body[0].value.keys, tree.body[0].value.values, strict=True)}
    assert lesson == BUDGET

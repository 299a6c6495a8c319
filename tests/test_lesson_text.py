"""The lessons' text: markdown explains, code renders the numbers (the house style: no markdown cell over 400 words,
no measured number typed by hand, every lesson ends with "What you should see", a short summary and "Reading").

Pure Python over the stored notebooks, no kernel:
- every markdown cell of every notebook under notebooks/, solutions/ and exercises/ has at most 400 words;
- no measured number is typed into a lesson's markdown (notebooks/): a decimal (`0.75`, `+0.208`), a percentage
  (`90 %`) or a number in scientific notation (`2e-5`) must be a hyperparameter or a constant on that lesson's
  allow-list below, or stand in the lesson's "Reading" cell, which quotes papers. Measured numbers are rendered by
  code cells that read the committed results files;
- every lesson ends with "What you should see", "Summary" and "Reading", in that order, the Reading cell last.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
LESSONS = sorted((REPO / "notebooks").glob("*.ipynb"))
ALL_NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (REPO / d).glob("*.ipynb"))
MAX_WORDS = 400

NUMBER = re.compile(
    r"(?<![\w.])[+\-−±]?"  # not inside a word, a name or a longer number: Qwen2.5, v0.3, 2026.3.23
    r"(\d+(?:\.\d+)*)"  # digits, with the decimal point(s)
    r"([eE][+\-−]?\d+)?"  # scientific notation: 2e-5
    r"(\s?%)?"  # a percentage
    r"(?!\w)"  # not a size or a name: 1.5B, 135M
)
NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|https?://\S+", re.S)  # code blocks, code spans, links
ARXIV_ID = re.compile(r"\d{4}\.\d{4,5}")
READING = re.compile(r"#{1,6}\s*Reading\b")

ALLOWED: dict[str, dict[str, str]] = {
    # lesson → {number as typed, without its sign: why it may be typed}. Everything else is rendered from results.
    "00_the_policy": {
        "1e-4": "the tolerance the scratch log-probabilities are checked to",
    },
    "01_tool_calling": {},
    "02_reward_design": {
        "0.5": "the shaped reward's weight on the last-number term; cos(π/3), OTC's score of one call when n = 0",
        "0.2": "the fixed reward's weight on the format term",
        "1.0": "the full format reward, by definition",
    },
    "03_policy_gradients": {
        "0.02": "the Adam learning rate of every method",
        "0.125": "the mean reward of a uniform policy, 1/8",
        "0.25": "the required GRPO gain of the learning check",
        "0.1": "the KL coefficient β of the first GRPO + KL run",
        "0.3": "the KL coefficient β of the second GRPO + KL run",
    },
    "04_grpo_on_an_llm": {},
    "05_rl_for_tool_calls": {
        "95%": "the confidence level of the seed interval",
        "5e-6": "the cpu profile's learning rate",
        "1e-5": "a learning rate of the validation sweep (a hyperparameter)",
        "2e-5": "a learning rate of the validation sweep (a hyperparameter)",
    },
    "06_multi_turn_agentic_grpo": {},
    "07_tool_efficiency": {
        "0.5": "OTC's score of one call when n = 0, cos(π/3)",
    },
    "08_credit_assignment": {
        "0.4": "Kevin's discount γ, a paper's setting",
        "0.25": "the process reward of one right calculator call, by definition",
        "0.5": "the process reward of two right calls (2 × 0.25), by definition",
        "0.9": "the toy's discount γ",
        "95%": "the confidence level of the intervals",
        "0.05": "the significance level of the course's verdict rule (stats.ALPHA)",
        "2e-5": "a learning rate of the validation sweep (a hyperparameter)",
    },
    "09_agentic_search": {
        "0.5": "the smoothing constant of BM25's IDF, in its formula",
        "0.7": "the sampling temperature of GRPO",
        "0.2": "the format term's weight in the reward, by definition",
    },
    "10_kernel_generation_rl": {},
    "11_memory_agents": {},
}


def words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def is_reading_cell(text: str) -> bool:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return bool(READING.match(first))


def typed_numbers(text: str) -> list[str]:
    """The decimals, percentages and numbers in scientific notation typed into prose, normalised (no sign, no space,
    ASCII minus); integers, version numbers, arXiv ids, code spans and links are not numbers of a result."""
    found = []
    for match in NUMBER.finditer(NOT_PROSE.sub(" ", text)):
        digits, exponent, percent = match.groups()
        if digits.count(".") > 1 or ARXIV_ID.fullmatch(digits):
            continue
        if percent or exponent or "." in digits:
            found.append(match.group(0).lstrip("+-−±").replace(" ", "").replace("−", "-"))
    return found


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = nbformat.read(path, as_version=4).cells
    return [(i, c.source) for i, c in enumerate(cells) if c.cell_type == "markdown"]


def heading(text: str) -> str | None:
    match = re.match(r"##\s+(.+)", text.lstrip())
    return match.group(1).strip() if match else None


def test_the_number_finder_catches_results_and_nothing_else():
    assert typed_numbers("accuracy 0.75, a gain of +0.208, BFCL 19.4 → 46.2") == ["0.75", "0.208", "19.4", "46.2"]
    assert typed_numbers("expect 0–5 % here, 90–100 % there, lr 2e-5, −0.5 for a failed compile") == [
        "5%", "100%", "2e-5", "0.5"]
    assert typed_numbers(
        "Qwen2.5-1.5B-Instruct, SmolLM2-135M, arXiv 2505.10978, bfcl-eval 2026.3.23, v0.3, section 1. Steps 8 × 4; "
        "`lr=3e-5` in code, https://arxiv.org/abs/2504.13958v1"
    ) == []


def test_the_reading_cell_is_found_by_its_heading():
    assert is_reading_cell("## Reading\n\n- paper")
    assert not is_reading_cell("## What you should see\n\nReading the table ...")


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_markdown_cells_have_at_most_400_words(path: Path):
    long = {i: words(text) for i, text in markdown_cells(path) if words(text) > MAX_WORDS}
    assert not long, f"{path.relative_to(REPO)}: markdown cells over {MAX_WORDS} words (cell: words): {long}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_measured_number_is_typed_into_a_lesson(path: Path):
    allowed = ALLOWED.get(path.stem, {})
    typed = {i: found for i, text in markdown_cells(path) if not is_reading_cell(text)
             if (found := [n for n in typed_numbers(text) if n not in allowed])}
    assert not typed, (f"notebooks/{path.name}: numbers typed into markdown (cell: numbers): {typed}. Render a measured "
                       "number from its results file; add a hyperparameter or a constant to ALLOWED with the reason.")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_a_lesson_ends_with_what_you_should_see_summary_and_reading(path: Path):
    cells = markdown_cells(path)
    headings = [h for _, text in cells if (h := heading(text))]
    assert headings[-3:] == ["What you should see", "Summary", "Reading"], (
        f"notebooks/{path.name}: its last level-2 headings are {headings[-3:]}")
    last = nbformat.read(path, as_version=4).cells[-1]
    assert last.cell_type == "markdown" and is_reading_cell(last.source), f"notebooks/{path.name}: the last cell is not Reading"

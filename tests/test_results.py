"""Committed results files carry their provenance: every number quoted in a notebook, the
README or a note must be traceable to a run whose profile, model, device, seed and command are recorded."""

import datetime as dt
import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"
KINDS = ("lessons", "bench", "gpu")
COMMITTED = sorted(p for kind in KINDS for p in (RESULTS / kind).glob("*.json"))  # results/smoke/ is git-ignored


def test_there_are_committed_results():
    lessons = {p.stem for p in (RESULTS / "lessons").glob("*.json")}
    notebooks = {p.stem for p in (RESULTS.parent / "notebooks").glob("*.ipynb")}
    assert len(lessons) >= len(notebooks), f"expected at least one results file per lesson in {RESULTS / 'lessons'}"


def test_results_holds_only_results_files_by_kind():
    """results/ holds the data lessons, the docs and tests read, by kind: no scripts, logs, notes or probe dumps."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "results"], cwd=RESULTS.parent, capture_output=True, text=True,
                             check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    stray = [p for p in tracked if Path(p).parent.name not in KINDS or not p.endswith(".json") or "probe" in p]
    assert not stray, f"files that are not results of a kind {KINDS}: {stray}"


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_results_file_records_its_run(path):
    record = json.loads(path.read_text())
    missing = {"profile", "model", "device", "seed", "command", "date", "metrics"} - set(record)
    assert not missing, f"{path.name} lacks {sorted(missing)}"
    assert record["profile"] in ("cpu", "gpu"), f"{path.name}: only cpu/gpu runs are committed, not {record['profile']!r}"
    assert isinstance(record["seed"], int), f"{path.name}: seed must be an int"
    for key in ("model", "device", "command"):
        assert isinstance(record[key], str) and record[key].strip(), f"{path.name}: empty {key}"
    # a command that cannot be re-run (e.g. the ipykernel launcher's argv) is not a provenance record
    assert "ipykernel" not in record["command"], f"{path.name}: command is a kernel's argv: {record['command']!r}"
    dt.datetime.fromisoformat(record["date"])
    assert isinstance(record["metrics"], dict) and record["metrics"], f"{path.name}: no metrics"
    if "note" in record:
        assert isinstance(record["note"], str) and len(record["note"]) > 20, f"{path.name}: the note says nothing"


def test_a_kernel_run_does_not_record_the_kernels_argv(monkeypatch):
    from agentrl_lite.course.results import current_command

    monkeypatch.delenv("AGENTRL_COMMAND", raising=False)
    monkeypatch.setattr("sys.argv", ["/env/lib/python3.11/site-packages/ipykernel_launcher.py", "-f", "/tmp/k.json"])
    assert "ipykernel" not in current_command() and "interactive" in current_command()
    monkeypatch.setattr("sys.argv", ["benchmarks/grpo_step.py", "--steps", "4"])
    assert current_command() == "benchmarks/grpo_step.py --steps 4"
    monkeypatch.setenv("AGENTRL_COMMAND", "make course PROFILE=cpu")
    assert current_command() == "make course PROFILE=cpu"


def test_committed_rows_name_the_seeds_the_numbers_come_from(tmp_path, monkeypatch):
    from agentrl_lite.course.results import committed_rows, seeds_of

    assert seeds_of({"seed": 0, "metrics": {}}) == "seed 0"
    assert seeds_of({"seed": 3, "metrics": {"seeds": [3]}}) == "seed 3"
    assert seeds_of({"seed": 0, "metrics": {"seeds": [0, 1, 2]}}) == "seeds 0–2"
    assert seeds_of({"seed": 0, "metrics": {"seeds": [0, 3, 7]}}) == "seeds 0, 3, 7"
    # a study run in two settings over the same seeds (lesson 08's toy); settings that disagree name no seeds
    assert seeds_of({"seed": 0, "metrics": {"end": {"seeds": [0, 1, 2]}, "each": {"seeds": [0, 1, 2]}}}) == "seeds 0–2"
    assert seeds_of({"seed": 0, "metrics": {"end": {"seeds": [0, 1]}, "each": {"seeds": [5, 6]}}}) == "seed 0"
    (tmp_path / "results" / "lessons").mkdir(parents=True)
    record = {"profile": "cpu", "model": "m", "device": "d", "seed": 0, "command": "c", "date": "2026-12-05T00:00:00",
              "metrics": {"seeds": list(range(10)), "gain": {"mean": 0.51234}}}
    (tmp_path / "results" / "lessons" / "x_lesson.json").write_text(json.dumps(record))
    monkeypatch.setattr("agentrl_lite.course.results.course_root", lambda: tmp_path)
    rows = committed_rows("x_lesson", {"gain": "gain.mean"}, this_run={"gain": {"mean": 0.25}})
    assert rows == [{"": "gain", "committed cpu run (2026-12-05, seeds 0–9)": 0.512, "this run": 0.25}]


def test_the_generated_tables_are_rendered_from_the_results_files():
    from agentrl_lite.course.docs import update_docs

    assert not update_docs(check=True), "README.md or docs/results.md is stale: run `agentrl-lite docs` and commit"


def test_a_changed_number_in_a_results_file_makes_the_docs_stale(tmp_path):
    import shutil

    from agentrl_lite.course.docs import render_blocks

    shutil.copytree(RESULTS, tmp_path / "results", ignore=shutil.ignore_patterns("smoke"))
    shutil.copytree(RESULTS.parent / "notebooks", tmp_path / "notebooks")
    shutil.copytree(RESULTS.parent / "docs", tmp_path / "docs")
    docs = (RESULTS.parent / "docs" / "results.md").read_text()
    assert render_blocks(docs, tmp_path / "results") == docs
    path = tmp_path / "results" / "bench" / "bench_grpo_step.json"
    record = json.loads(path.read_text())
    record["metrics"]["single_turn"]["speedup"] += 1.0
    path.write_text(json.dumps(record))
    assert render_blocks(docs, tmp_path / "results") != docs


def test_every_script_a_results_file_names_is_in_the_repository():
    """A committed number can be traced to the code that produced it: scripts named in `command` or in a
    `script` field exist as files. A design page names the commit of scripts that were deleted."""
    import re

    root = Path(__file__).resolve().parents[1]
    missing = []
    for path in COMMITTED:
        record = json.loads(path.read_text())
        named = [record[k] for k in record if k.startswith("script") or k.endswith("_script")]
        command = record.get("command") or ""
        named += re.findall(r"(?:^|[\s;])((?:benchmarks/)?[\w/]+\.py)\b", command)
        missing += [f"{path.name}: {script}" for script in named if not (root / script).is_file()]
    assert not missing, missing


def test_a_run_that_writes_elsewhere_still_reads_the_committed_files(tmp_path, monkeypatch):
    """`reproduce` moves each seed's writes into its run folder; a lesson that quotes another lesson's committed
    numbers (lesson 08 quotes 06) must still find them there."""
    from agentrl_lite.course.results import read_results, write_results

    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path))
    assert read_results("course_cpu") is not None and read_results("course_cpu", committed=False) is None
    write_results("99_x", {"a": 1}, profile="cpu", model="m", seed=0, command="c")
    assert read_results("99_x", committed=False)["metrics"] == {"a": 1} and read_results("99_x") is None


def test_gpu_and_smoke_runs_never_overwrite_the_cpu_results_the_lessons_quote(tmp_path, monkeypatch):
    from agentrl_lite.course.results import read_results, write_results

    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path))
    paths = {p: write_results("99_x", {"p": p}, profile=p, model="m", seed=0, command="c") for p in ("cpu", "gpu", "smoke")}
    assert paths == {"cpu": tmp_path / "lessons" / "99_x.json", "gpu": tmp_path / "gpu" / "99_x.json",
                     "smoke": tmp_path / "smoke" / "99_x.json"}
    assert write_results("bench_x", {}, profile="cpu", model="m", seed=0, command="c") == tmp_path / "bench" / "bench_x.json"
    assert {p: read_results("99_x", p, committed=False)["metrics"]["p"] for p in paths} == {p: p for p in paths}


def test_the_suite_time_is_read_from_a_make_test_log_and_rendered_by_part():
    """benchmarks/suite_time.py reads pytest's durations and the notebook runtimes; the README sentence sums them by
    part and names the slowest lesson."""
    import importlib.util

    from agentrl_lite.course.docs import render_bench_test_suite

    spec = importlib.util.spec_from_file_location("suite_time", RESULTS.parent / "benchmarks" / "suite_time.py")
    suite_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite_time)
    log = "\n".join([
        "120.00s call     tests/test_notebooks.py::test_notebook_runs_in_the_smoke_profile[notebooks/01_a.ipynb]",
        "60.00s call     tests/test_notebooks.py::test_notebook_runs_in_the_smoke_profile[solutions/01_a.ipynb]",
        "30.00s call     tests/test_grpo.py::test_x", "6.00s setup    tests/test_engine.py::test_y",
        "notebooks/01_a.ipynb: 119.5s  ok; peak 2900 MB (heaviest cell 4)",
        "notebooks/02_b.ipynb: 240.0s  ok", "solutions/01_a.ipynb: 59.0s  ok", "exercises/01_a.ipynb: 20.0s  stubs",
        "1 failed, 10 passed, 2 skipped in 600.50s (0:10:00)"])
    m = suite_time.parse(log)
    assert (m["seconds"], m["failed"], m["passed"], m["skipped"]) == (600.5, 1, 10, 2)
    assert (m["lessons_seconds"], m["solutions_seconds"], m["exercises_seconds"]) == (359.5, 59.0, 20.0)
    assert m["other_tests_seconds"] == 162.0, "everything but the notebooks' own runtimes"
    with pytest.raises(SystemExit):
        suite_time.parse(log.rsplit("\n", 1)[0])  # a run cut off before its summary
    two = suite_time.parse(".venv/bin/python -m pytest -q --durations=30 -n 2 --dist loadfile tests notebooks\n" + log)
    assert two["workers"] == 2 and two["other_tests_seconds"] == 2 * 600.5 - 438.5, "worker time, not wall time"
    assert "on 2 workers, whose time adds up to" in render_bench_test_suite(
        {"device": "AMD EPYC (2 cores)", "date": "2026-12-05T03:00:00", "metrics": {**two, "note": "quiet"}})
    text = render_bench_test_suite({"device": "Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)", "date": "2026-11-29T03:00:00",
                                    "metrics": {**m, "note": "nothing else ran"}})
    assert "10 min of tests (10 passed, **1 failed**)" in text and "the slowest, 02_b, 240 s" in text


def test_the_readme_is_short_enough_to_finish():
    text = (RESULTS.parent / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150): long tables go to docs/"
    assert len(text.split()) <= 1500, f"README.md has {len(text.split())} words (at most 1,500)"
    long = [i for i, line in enumerate(lines, 1) if len(line) > 300]
    assert not long, f"README.md lines over 300 characters: {long}"


def test_every_command_the_docs_name_to_regenerate_a_table_exists():
    """Each `Regenerate:` command of docs/results.md, and each `make` target the README names, runs as pasted: its
    make target is in the Makefile, its script is in the repository and answers --help (tests/test_benchmarks.py)."""
    import re

    root = RESULTS.parent
    targets = set(re.findall(r"^([a-z]+):", (root / "Makefile").read_text(), flags=re.MULTILINE))
    results_md = (root / "docs" / "results.md").read_text()
    commands = re.findall(r"Regenerate: `([^`]+)`", results_md)
    assert len(commands) >= 6, "every table of docs/results.md names its command"
    commands += re.findall(r"`(make [^`]+)`", (root / "README.md").read_text())
    for command in commands:
        for part in re.split(r"&&|;|\|", command):
            words = part.split()
            if words[:1] == ["make"]:
                named = [w for w in words[1:] if "=" not in w][:1]
                assert not named or named[0] in targets, f"{command!r}: no make target {named[0]!r}"
            scripts = [w for w in words if w.endswith(".py")]
            assert all((root / s).is_file() for s in scripts), f"{command!r}: a script is missing"


def test_a_lessons_runtime_line_quotes_its_rows_and_says_when_one_is_missing():
    from agentrl_lite.course.results import read_results, runtime_line

    row = read_results("course_cpu")["metrics"]["notebooks"]["00_the_policy.ipynb"]
    smoke = read_results("bench_test_suite")["metrics"]["notebook_seconds"]["notebooks/00_the_policy.ipynb"]
    line = runtime_line("00_the_policy.ipynb")
    assert f"cpu: {row['seconds'] / 60:.1f} min" in line and f"smoke: {smoke:.0f} s" in line, line
    assert runtime_line("no_such_lesson.ipynb").count("not measured yet") == 2

"""Phase timing: nested phases count only their own time, and the totals never exceed the wall time."""

from __future__ import annotations

import threading
import time

import pytest

from agentrl_lite import phases


def test_nested_phases_count_each_second_once():
    phases.reset()
    start = time.perf_counter()
    with phases.phase("evaluation"):
        time.sleep(0.05)
        with phases.phase("environment"):
            time.sleep(0.1)
        time.sleep(0.05)
    wall = time.perf_counter() - start
    got = phases.totals()
    assert got["environment"] == pytest.approx(0.1, abs=0.03)
    assert got["evaluation"] == pytest.approx(0.1, abs=0.03), "the inner phase's time is not the outer's"
    assert sum(got.values()) <= wall + 1e-3


def test_decorated_functions_are_phases_and_errors_close_them():
    phases.reset()

    @phases.timed("sft")
    def fails():
        time.sleep(0.02)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert phases.totals()["sft"] >= 0.02
    with phases.phase("rl update"):  # the failed phase was closed: this one is the only one open
        assert list(phases.totals()) == ["sft", "rl update"]
    with pytest.raises(ValueError, match="unknown phase"):
        with phases.phase("lunch"):
            pass


def test_worker_threads_are_not_counted():
    phases.reset()

    def work():
        with phases.phase("environment"):
            time.sleep(0.02)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert "environment" not in phases.totals()


def test_a_lessons_results_carry_its_phases_to_the_runtime_table_and_docs(tmp_path, monkeypatch):
    import json

    from agentrl_lite.course.course_runs import lesson_phase_seconds, record_course_run
    from agentrl_lite.course.docs import render_lesson_phases
    from agentrl_lite.course.results import write_results

    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "seed_0"))
    phases.reset()
    with phases.phase("sft"):
        time.sleep(0.01)
    lesson = json.loads(write_results("07_x", {"notebook_seconds": 60.0}, profile="cpu", model="m", seed=0).read_text())
    toy = json.loads(write_results("07_toy", {"a": 1}, profile="cpu", model="m", seed=0).read_text())
    assert lesson["metrics"]["phase_seconds"]["sft"] >= 0.01 and "phase_seconds" not in toy["metrics"]
    import resource

    held = bytearray(64 << 20)  # 64 MB touched: the process's peak is at least its current size
    held[::4096] = b"x" * len(held[::4096])
    peak = json.loads(write_results("07_peak", {"notebook_seconds": 1.0}, profile="cpu", model="m",
                                    seed=0).read_text())["metrics"]["peak_rss_mb"]
    assert peak >= 64 and peak == pytest.approx(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, abs=1)
    assert "peak_rss_mb" not in toy["metrics"], "a lesson's results only"
    del held
    assert lesson_phase_seconds(tmp_path / "seed_0", "07_x.ipynb") == lesson["metrics"]["phase_seconds"]
    assert lesson_phase_seconds(tmp_path / "seed_0", "08_y.ipynb") is None

    (tmp_path / "seed_0" / "runs.json").write_text(json.dumps({
        "profile": "cpu", "command": "make reproduce LESSON=07  # seed 0", "device": "M (2 cores)", "bf16": True,
        "notebooks": [{"notebook": "07_x.ipynb", "status": "ok", "seconds": 60.0}]}))
    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))
    record = json.loads(record_course_run(tmp_path / "seed_0").read_text())
    row = record["metrics"]["notebooks"]["07_x.ipynb"]
    assert row["phase_seconds"] == lesson["metrics"]["phase_seconds"]
    table = render_lesson_phases(record)
    assert "| 07_x | 1.0 min | 0.0 (0 %) |" in table and "| 1.0 (100 %) |" in table, table

"""The maintained benchmarks run from the repository root: each compiles, imports, answers `--help`, and ruff
passes on them with the library and the tests."""

from __future__ import annotations

import importlib
import py_compile
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py"))
ALL_PY = sorted((ROOT / "benchmarks").rglob("*.py"))


@pytest.mark.parametrize("path", ALL_PY, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_benchmark_file_compiles(path: Path) -> None:
    py_compile.compile(str(path), doraise=True)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_imports_and_answers_help(path: Path, monkeypatch, capsys) -> None:
    """`python benchmarks/<name>.py --help`, in this process: the script's folder first on sys.path as Python puts it."""
    monkeypatch.syspath_prepend(str(path.parent))
    module = importlib.import_module(path.stem)
    if not hasattr(module, "main"):  # a helper the scripts import (engine_revisions)
        assert module.__doc__ and len(module.__doc__) > 40
        return
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])

    def too_long(*_: object) -> None:
        raise TimeoutError(f"{path.name} --help ran its benchmark instead of printing usage (no argparse?)")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(20)
    try:
        with pytest.raises(SystemExit) as stop:
            module.main()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert stop.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_ruff_passes_on_the_library_tests_and_benchmarks() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([ruff, "check", "agentrl_lite", "tests", "benchmarks", "conftest.py"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]


TIMED_CODE = ("agentrl_lite/grpo.py", "agentrl_lite/engine.py", "agentrl_lite/rollout.py", "agentrl_lite/logprobs.py",
              "agentrl_lite/loss.py")
"""the trainer, the engine and its rollout loop, the loss pass: what `benchmarks/grpo_step.py` times"""


def test_the_grpo_step_benchmark_is_newer_than_the_code_it_times() -> None:
    """docs/results.md renders our GRPO step against TRL's from results/bench/bench_grpo_step.json: a change to the
    code it times makes that table stale until the benchmark runs again (its speed once regressed unnoticed)."""
    import json
    from datetime import datetime

    repo = Path(__file__).resolve().parent.parent
    git = shutil.which("git")
    if git is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout: no history to compare with")
    shallow = subprocess.run([git, "rev-parse", "--is-shallow-repository"], cwd=repo, capture_output=True, text=True)
    if shallow.stdout.strip() != "false":
        pytest.skip("a shallow clone: the last change to the timed code is not known")
    log = subprocess.run([git, "log", "-1", "--format=%cI %h", "--", *TIMED_CODE], cwd=repo, capture_output=True,
                         text=True, check=True)
    changed, commit = log.stdout.split()
    measured = json.loads((repo / "results" / "bench" / "bench_grpo_step.json").read_text())["date"]
    assert datetime.fromisoformat(measured) > datetime.fromisoformat(changed), (
        f"results/bench/bench_grpo_step.json was measured {measured}, before commit {commit} ({changed}) changed the "
        "code it times: run `python benchmarks/grpo_step.py --steps 2` on a quiet machine, then `make docs`")

"""What the engine benchmarks share: this checkout's engine against the engine file of a git revision, each run in a
fresh process (so that its peak memory is its own), alternating over rounds.

    from engine_revisions import compare_engines, load_engine
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_engine(engine_file: str) -> ModuleType:
    """Import an `agentrl_lite/engine.py` from any path, as module `engine_under_test`."""
    spec = importlib.util.spec_from_file_location("engine_under_test", engine_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def compare_engines(script: str, old_rev: str, names: tuple[str, str], arguments: list[str], repeats: int
                    ) -> dict[str, list[dict]]:
    """Run `script --one ENGINE_FILE *arguments` for the engine at `old_rev` and this checkout's, `repeats` rounds,
    each in a fresh process; the last line each prints is its JSON result. Returns {name: [result per round]}."""
    old = Path(tempfile.mkdtemp(prefix="engine-old-")) / "engine.py"
    old.write_text(subprocess.run(["git", "show", f"{old_rev}:agentrl_lite/engine.py"], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout)
    variants = dict(zip(names, (str(old), str(ROOT / "agentrl_lite" / "engine.py")), strict=True))
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    try:
        for _ in range(repeats):
            for name, path in variants.items():
                out = subprocess.run([sys.executable, script, *arguments, "--one", path], check=True,
                                     capture_output=True, text=True).stdout
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
                print(name, runs[name][-1], flush=True)
    finally:
        old.unlink()
        old.parent.rmdir()
    return runs

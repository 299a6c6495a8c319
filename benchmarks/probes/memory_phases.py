"""Where a lesson's memory goes: run one notebook with its kernel's memory sampled and tagged by phase.

    python benchmarks/probes/memory_phases.py notebooks/10_kernel_generation_rl.ipynb --profile cpu

The course runner measures a notebook's peak and its heaviest cells from outside the kernel. Inside one cell a
lesson loads, trains, samples and evaluates, so the cell does not say which of them holds the memory. This probe
runs a copy of the notebook with one cell prepended that
- samples, every 0.1 s from a thread inside the kernel, the kernel's resident memory (anonymous and file-backed
  pages apart) and the proportional set size of the processes it started (a forkserver and its children);
- wraps the library's phases (load_policy, sft, evaluate, and the GRPO trainer's sampling, scoring and update)
  so that each sample carries the phase then running.
It writes a JSON timeline and prints the peak of each phase, with the phase's first and last reading (what a
phase leaves behind is the next phase's floor). Measuring needs no quiet machine; timings taken from it do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat

PROBE_CELL = r'''
import functools, json, os, threading, time
_PHASES, _LOG = ["(notebook)"], open(os.environ["MEMORY_PHASES_LOG"], "w")

def _kb(path, keys):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                name = line.split(":")[0]
                if name in keys:
                    out[name] = int(line.split()[1]) // 1024
    except OSError:
        pass
    return out

def _children_pss():
    import psutil
    total = 0
    for child in psutil.Process().children(recursive=True):
        total += _kb(f"/proc/{child.pid}/smaps_rollup", ("Pss",)).get("Pss", 0)
    return total

def _sample():
    while True:
        mem = _kb("/proc/self/status", ("VmRSS", "RssAnon", "RssFile"))
        mem["children_pss"] = _children_pss()
        _LOG.write(json.dumps({"t": time.time(), "phase": " > ".join(_PHASES), **mem}) + "\n")
        _LOG.flush()
        time.sleep(0.1)

threading.Thread(target=_sample, daemon=True).start()

def _tagged(name, fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        _PHASES.append(name)
        try:
            return fn(*args, **kwargs)
        finally:
            _PHASES.pop()
    return run

import agentrl_lite.evaluate, agentrl_lite.models, agentrl_lite.sft, agentrl_lite.grpo
for _module, _name in ((agentrl_lite.models, "load_policy"), (agentrl_lite.sft, "sft"),
                       (agentrl_lite.evaluate, "evaluate")):
    setattr(_module, _name, _tagged(_name, getattr(_module, _name)))
for _name in ("__init__", "sample_groups", "score", "update", "save_checkpoint"):
    setattr(agentrl_lite.grpo.GRPOTrainer, _name,
            _tagged(f"grpo.{_name}", getattr(agentrl_lite.grpo.GRPOTrainer, _name)))
import importlib
for _spec in json.loads(os.environ.get("MEMORY_PHASES_TAGS", "[]")):  # --tag module:function
    _module, _name = _spec.split(":")
    _module = importlib.import_module(_module)
    setattr(_module, _name, _tagged(_name, getattr(_module, _name)))
'''


def summarise(log: Path, nb: nbformat.NotebookNode) -> list[dict]:
    """Per phase: samples, peak of kernel RSS + children PSS, and the reading at its start and end."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    cells = [(i, c.metadata.get("papermill", {})) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    spans = []
    for i, meta in cells:
        if meta.get("start_time") and meta.get("end_time"):
            spans.append((i - 1, datetime.fromisoformat(meta["start_time"]).timestamp(),
                          datetime.fromisoformat(meta["end_time"]).timestamp()))  # i - 1: the probe cell
    out: dict[str, dict] = {}
    for r in rows:
        total = r.get("VmRSS", 0) + r.get("children_pss", 0)
        cell = next((i for i, a, b in spans if a <= r["t"] <= b), None)
        key = f"cell {cell}: {r['phase']}"
        e = out.setdefault(key, {"phase": key, "samples": 0, "first_mb": total, "peak_mb": 0})
        e["samples"] += 1
        e["last_mb"] = total
        if total > e["peak_mb"]:
            e.update(peak_mb=total, peak_anon_mb=r.get("RssAnon", 0), peak_file_mb=r.get("RssFile", 0),
                     peak_children_mb=r.get("children_pss", 0))
    return list(out.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--out", default=None, help="JSON file for the timeline and summary")
    parser.add_argument("--tag", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="another function to tag, e.g. agentrl_lite.tasks.memory:replay_policy (repeatable)")
    args = parser.parse_args()
    import papermill

    nb = nbformat.read(args.notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE_CELL))
    work = Path(tempfile.mkdtemp(prefix="memory-phases-"))
    source, executed, log = work / "probe.ipynb", work / "executed.ipynb", work / "memory.jsonl"
    nbformat.write(nb, source)
    os.environ.update(AGENTRL_PROFILE=args.profile, MEMORY_PHASES_LOG=str(log), MEMORY_PHASES_TAGS=json.dumps(args.tag),
                      TMPDIR=str(work),
                      AGENTRL_RESULTS=str(work / "results"))  # the lesson's results file is not the committed one  # the kernel's temporary files (a forkserver's socket folder) stay in here
    start = time.time()
    try:
        papermill.execute_notebook(str(source), str(executed), cwd=str(Path(args.notebook).parent),
                                   kernel_name="python3", progress_bar=False)
    finally:
        ran = nbformat.read(executed, as_version=4) if executed.exists() else nb
        summary = summarise(log, ran)
        for row in summary:
            print(f"{row['peak_mb']:6d} MB peak (from {row['first_mb']:5d} to {row['last_mb']:5d}; anon "
                  f"{row.get('peak_anon_mb', 0)}, file {row.get('peak_file_mb', 0)}, children "
                  f"{row.get('peak_children_mb', 0)})  {row['phase']}")
        out = Path(args.out or f"memory_phases_{Path(args.notebook).stem}_{args.profile}.json")
        out.write_text(json.dumps({"notebook": args.notebook, "profile": args.profile, "command": " ".join(sys.argv),
                                   "seconds": time.time() - start, "phases": summary}, indent=1) + "\n")
        print("wrote", out, "; timeline in", log)


if __name__ == "__main__":
    main()

"""Where a notebook's GPU memory goes, cell by cell (a diagnostic for a lent GPU machine; see README.md).

    python benchmarks/gpu/cellmem.py notebooks/11_memory_agents.ipynb [--fraction 0.15]

Runs the notebook's code cells in this process (profile from AGENTRL_PROFILE, as the notebooks read it) and
prints, after each cell, its seconds, the peak of allocated and reserved CUDA memory during it and what stays
allocated after it. With `--fraction`, the process may use only that share of the GPU: an allocation past it
raises out-of-memory, and before the error unwinds the largest live allocations are printed, summed by the
line of library or notebook code that made them (CUDA's allocator history keeps each block's Python stack).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import defaultdict

import torch

GIB = 2**30


def allocation_sites(top: int = 12) -> list[tuple[float, int, str]]:
    """The live CUDA allocations summed by the innermost frame in agentrl_lite, a notebook cell or transformers."""
    sites: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for segment in torch.cuda.memory._snapshot()["segments"]:
        for block in segment["blocks"]:
            if block["state"] != "active_allocated":
                continue
            frames = block.get("frames") or []
            ours = [f for f in frames if "agentrl_lite" in f["filename"] or f["filename"].startswith("<cell")]
            theirs = [f for f in frames if "transformers" in f["filename"] or "torch/nn" in f["filename"]]
            key = " <- ".join(f"{f['filename'].split('site-packages/')[-1]}:{f['line']} {f['name']}"
                              for f in (theirs[:1] + ours[:2])) or "(no python frame)"
            sites[key][0] += block["size"] / GIB
            sites[key][1] += 1
    return sorted(((gib, n, key) for key, (gib, n) in sites.items()), reverse=True)[:top]


def report_oom(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    print(f"\n*** out of memory: asked {alloc / GIB:.2f} GiB with {device_allocated / GIB:.2f} GiB allocated", flush=True)
    for gib, n, key in allocation_sites():
        print(f"    {gib:8.2f} GiB in {n:5d} blocks  {key}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook")
    parser.add_argument("--fraction", type=float, default=None)
    args = parser.parse_args()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    torch._C._cuda_attach_out_of_memory_observer(report_oom)
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    os.environ.setdefault("MPLBACKEND", "Agg")
    cells = [c for c in json.load(open(args.notebook))["cells"] if c["cell_type"] == "code"]
    scope: dict = {"__name__": "__main__", "display": print}
    for i, cell in enumerate(cells):
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            exec(compile("".join(cell["source"]), f"<cell {i}>", "exec"), scope)
        except Exception:
            traceback.print_exc(limit=-4)
            print(f"cell {i}: stopped", flush=True)
            break
        finally:
            print(f"cell {i:2d}: {time.perf_counter() - start:6.1f} s  peak allocated "
                  f"{torch.cuda.max_memory_allocated() / GIB:7.2f} GiB  reserved {torch.cuda.max_memory_reserved() / GIB:7.2f}"
                  f" GiB  after {torch.cuda.memory_allocated() / GIB:6.2f} GiB", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

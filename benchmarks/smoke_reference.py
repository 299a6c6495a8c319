"""The reference speed the smoke profile's time budget is stated on (`course.budgets.machine_slowdown`).

A smoke notebook must finish within 60 s (× 1.5 slack) on the machine the budget was set on. CI machines run up
to twice slower on some days (session 29's CI: every lesson from 04 on over the limit, the suite past 90 minutes),
so the notebook test stretches the budget by how much slower this machine runs `budgets.reference_workload` than
the reference does. Run this on an idle machine whose smoke runtimes are the ones the budget was set from:

    python benchmarks/smoke_reference.py [--repeats 7]     # writes results/bench/bench_smoke_reference.json
"""

from __future__ import annotations

import argparse
import os

import torch

from agentrl_lite.course import write_results
from agentrl_lite.course.budgets import reference_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    times = [reference_workload() for _ in range(args.repeats)]
    print(f"reference workload: best {min(times):.3f} s of {[round(t, 3) for t in times]}")
    write_results("bench_smoke_reference", {
        "reference_workload_s": min(times), "repeats_s": times, "threads": torch.get_num_threads(),
        "cpus": os.cpu_count()}, profile="cpu", model="none (SmolLM2-135M's shapes, random weights)", seed=0)


if __name__ == "__main__":
    main()

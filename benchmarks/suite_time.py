"""How long `make test` took: reads the log of a `make test` run (its notebook runtimes sections, the lessons'
under nbval included, and its closing summary; everything else counts as the other tests), and optionally that of a
`make unit` run, and writes results/bench/bench_test_suite.json (docs/results.md renders it). Usage, from the
repository root on a quiet machine:

    make test 2>&1 | tee test.log; make unit 2>&1 | tee unit.log
    .venv/bin/python benchmarks/suite_time.py test.log --unit-log unit.log [--note "what else ran"]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentrl_lite.course import write_results


def parse(log: str) -> dict:
    summary = re.findall(r"=* ?(?:(\d+) failed, )?(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s", log)
    if not summary:
        raise SystemExit("no pytest summary line in the log: did the run finish?")
    failed, passed, skipped, seconds = summary[-1]
    notebooks = {m[0]: float(m[1]) for m in re.findall(r"^((?:notebooks|solutions|exercises)/\S+\.ipynb): ([\d.]+)s  ", log, re.M)}
    parts = {part: sum(s for n, s in notebooks.items() if n.startswith(f"{folder}/"))
             for part, folder in (("lessons", "notebooks"), ("solutions", "solutions"), ("exercises", "exercises"))}
    # pytest-xdist's worker count from the command make echoed: the parts are then worker time, not wall time
    workers = int(m.group(1)) if (m := re.search(r"pytest .*?-n (\d+)", log)) else 1
    return {"seconds": float(seconds), "failed": int(failed or 0), "passed": int(passed), "skipped": int(skipped or 0),
            "workers": workers, "notebook_seconds": notebooks,
            **{f"{part}_seconds": round(s, 2) for part, s in parts.items()},
            "other_tests_seconds": round(workers * float(seconds) - sum(parts.values()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--unit-log", type=Path, help="the log of a `make unit` run on the same machine")
    parser.add_argument("--note", default="nothing else ran")
    args = parser.parse_args()
    from agentrl_lite.models import bf16_is_fast

    metrics = {**parse(args.log.read_text()), "notebooks_profile": "smoke", "lessons_runner": "nbval",
               "fast_bf16": bf16_is_fast(), "note": args.note}
    if args.unit_log:
        metrics["unit_seconds"] = parse(args.unit_log.read_text())["seconds"]
    print({k: v for k, v in metrics.items() if k != "notebook_seconds"})
    write_results("bench_test_suite", metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=0)


if __name__ == "__main__":
    main()

"""The credit-assignment toy study of lesson 08 over many seeds, written to results/08_credit_toy.json.

    python benchmarks/probes/credit_toy_study.py --seeds 20

(Lesson 08's cpu run writes the same file with the same numbers: the study is deterministic.)
"""

from __future__ import annotations

import argparse
import sys
import time

from agentrl_lite import write_results
from agentrl_lite.tasks.credit_toy import CreditToy, credit_study


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    start = time.perf_counter()
    metrics = credit_study(range(args.seeds))
    metrics["seconds"] = time.perf_counter() - start
    task = CreditToy()
    metrics["task"] = {"turns": task.turns, "states": task.states, "actions": task.actions}
    path = write_results("08_credit_toy", metrics, profile="cpu", model="tabular softmax policy (no LLM)", seed=0,
                         command="python " + " ".join(sys.argv))
    print("wrote", path)


if __name__ == "__main__":
    main()

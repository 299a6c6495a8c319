"""What gradient checkpointing costs and saves: SFT steps of lesson 05's cold start with and without it.

`SFTConfig(gradient_checkpointing=...)` (on by default, as in TRL) recomputes each decoder layer in the backward
pass instead of keeping its activations. This measures both sides of the trade on this machine: seconds per
SFT step (lesson 05's demonstrations, batch 8, bf16 autocast, 1024-token passes) and the peak resident memory of
the process, each setting in a fresh process (a process's peak never comes down), the settings interleaved over
`--repeats` rounds so that both see the same machine state. Usage:

    python benchmarks/checkpointing.py [--steps 3] [--repeats 3]     # writes results/bench/bench_checkpointing.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time

import numpy as np

BATCH = 8


def one(checkpoint: bool, steps: int) -> dict[str, float]:
    """One process's measurement: a warm-up step, then `steps` timed SFT steps; peak RSS of the whole process."""
    import resource

    import torch

    from agentrl_lite.models import load_policy
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
    from agentrl_lite.tasks.function_calls import FunctionCallEnv

    torch.manual_seed(0)
    model, tokenizer = load_policy(None)
    env = FunctionCallEnv()
    demos = read_jsonl(DATA_DIR / "toolcall_sft.jsonl")
    conversations = [env.prompt(d)[:1] + d["demonstration"] for d in demos]
    tools = [[bfcl.tool_schema(f) for f in d["functions"]] for d in demos]
    config = dict(batch_size=BATCH, lr=1e-4, bf16=True, seed=0, progress=False, gradient_checkpointing=checkpoint)
    sft(model, tokenizer, conversations, tools, SFTConfig(steps=1, **config))  # warm-up: allocator, kernels
    start = time.perf_counter()
    sft(model, tokenizer, conversations, tools, SFTConfig(steps=steps, **config))
    seconds = (time.perf_counter() - start) / steps
    return {"seconds_per_step": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one == "on", args.steps)))
        return
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for setting in runs:
            out = subprocess.run([sys.executable, __file__, "--one", setting, "--steps", str(args.steps)],
                                 check=True, capture_output=True, text=True).stdout
            runs[setting].append(json.loads(out.strip().splitlines()[-1]))
            print(setting, runs[setting][-1], flush=True)
    summary = {setting: {"seconds_per_step": [r["seconds_per_step"] for r in rs],
                         "peak_rss_mb": [r["peak_rss_mb"] for r in rs],
                         "median_seconds_per_step": float(np.median([r["seconds_per_step"] for r in rs])),
                         "median_peak_rss_mb": float(np.median([r["peak_rss_mb"] for r in rs]))}
               for setting, rs in runs.items()}
    summary["time_ratio_on_over_off"] = summary["on"]["median_seconds_per_step"] / summary["off"]["median_seconds_per_step"]
    summary["memory_saved_mb"] = summary["off"]["median_peak_rss_mb"] - summary["on"]["median_peak_rss_mb"]
    summary["what"] = (f"SFT steps of lesson 05's cold start (batch {BATCH}, bf16 autocast, micro_batch_tokens 1024), "
                       f"{args.steps} timed steps after a warm-up per process, {args.repeats} processes per setting, "
                       "interleaved; peak RSS of each process")
    from agentrl_lite import write_results

    command = "python benchmarks/checkpointing.py " + shlex.join(sys.argv[1:])
    print("wrote", write_results("bench_checkpointing", summary, profile="cpu", model="SmolLM2-135M-Instruct (embedded)",
                                 seed=0, command=command.strip()))


if __name__ == "__main__":
    main()

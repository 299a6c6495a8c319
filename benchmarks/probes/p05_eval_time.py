"""Lesson 05 probe: where an evaluation's time goes, prefill or decoding, split by split.

Lesson 05 evaluates four policies (raw, SFT, two GRPO runs), each on BFCL entries and on the synthetic held-out
tasks. On a CPU without bf16 instructions each evaluation took five to eight minutes in the cpu profile, more than
the lesson's training. This probe evaluates the raw policy as the lesson does, greedy, with the lesson's cpu
budgets, once with a one-token budget (the prompt's prefill and one step) and once with the whole budget, and
records per split the seconds, the prompt tokens, the tokens written and the stop reasons. The difference of the
two runs is the decoding; the first is mostly the prefill.

    python benchmarks/probes/p05_eval_time.py --out results/notes/05_probes/eval_time.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from agentrl_lite import seed_everything
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import fast_sampler_dtype, load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
from agentrl_lite.tasks.function_calls import FunctionCallEnv

CPU = dict(n_bfcl=6, n_synthetic=60, eval_tokens=128, bfcl_tokens=256)  # lesson 05's cpu budget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32])
    parser.add_argument("--profile-tasks", type=int, default=0,
                        help="then profile a greedy run of this many BFCL entries (torch.profiler; top operators)")
    parser.add_argument("--out", default="results/notes/05_probes/eval_time.json")
    args = parser.parse_args()
    began = time.perf_counter()
    seed_everything(0)
    model, tokenizer = load_policy()
    env = FunctionCallEnv()
    splits = {"bfcl": (bfcl.load_bfcl(n_per_category=CPU["n_bfcl"], seed=0), CPU["bfcl_tokens"]),
              "synthetic": (read_jsonl(DATA_DIR / "toolcall_heldout.jsonl")[:CPU["n_synthetic"]], CPU["eval_tokens"])}
    runs = []
    for split, (tasks, budget) in splits.items():
        for batch_size in args.batch_sizes:
            for tokens in (1, budget):
                config = RolloutConfig(max_turns=1, max_new_tokens=tokens, temperature=0.0, batch_size=batch_size,
                                       progress=False)
                start = time.perf_counter()
                report = evaluate(model, tokenizer, env, tasks, config, dtype="auto")
                seconds = time.perf_counter() - start
                written = [ep.num_model_tokens for ep in report.episodes]
                prompts = [ep.prompt_length for ep in report.episodes]
                runs.append({"split": split, "tasks": len(tasks), "batch_size": batch_size, "max_new_tokens": tokens,
                             "seconds": seconds, "prompt_tokens": sum(prompts), "longest_prompt": max(prompts),
                             "tokens_written": sum(written), "longest_reply": max(written),
                             "stop_reasons": dict(Counter(ep.stop_reason for ep in report.episodes)),
                             "accuracy": report.accuracy})
                print(json.dumps(runs[-1]), flush=True)
    operators = []
    if args.profile_tasks:
        tasks, budget = splits["bfcl"]
        config = RolloutConfig(max_turns=1, max_new_tokens=budget, temperature=0.0, progress=False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            evaluate(model, tokenizer, env, tasks[:args.profile_tasks], config, dtype="auto")
        averages = prof.key_averages()  # aggregating the trace is slow: once
        events = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:25]
        operators = [{"name": e.key, "calls": e.count, "self_seconds": e.self_cpu_time_total / 1e6} for e in events]
        print(averages.table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": current_command(), "device": device_name(), "seeds": [0], "profile": "cpu (lesson 05's budgets)",
        "eval_dtype": str(fast_sampler_dtype(model.device) or model.dtype), "runs": runs,
        "profiled_bfcl_entries": args.profile_tasks, "top_operators": operators,
        "runtime_seconds": time.perf_counter() - began}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""The engine's prefill of long prompts after a shared prefix: this checkout's engine against a git revision's, on
lesson 05's greedy evaluation (BFCL entries, whose function documents make prompts of about 500 tokens after the
shared system prompt, then the synthetic held-out tasks), the same entries and token budget for both.

Each engine runs in a fresh process (SmolLM2-135M, fp32), alternating, `--repeats` rounds; wall time covers the
evaluations only; the greedy completions of both engines must be the same.
Usage:

    python benchmarks/engine_prefill.py --old-rev c39e291   # writes results/bench/bench_engine_prefill.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

from engine_revisions import compare_engines, load_engine


def one(engine_file: str, per_category: int, synthetic: int, tokens: int) -> dict[str, float | str]:
    import resource

    import agentrl_lite.rollout as rollout_module
    from agentrl_lite.evaluate import evaluate
    from agentrl_lite.models import load_policy
    from agentrl_lite.rollout import RolloutConfig
    from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
    from agentrl_lite.tasks.function_calls import FunctionCallEnv

    rollout_module.Engine = load_engine(engine_file).Engine
    model, tokenizer = load_policy(None)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    env = FunctionCallEnv()
    entries = bfcl.load_bfcl(n_per_category=per_category, seed=0)
    held_out = read_jsonl(DATA_DIR / "toolcall_heldout.jsonl")[:synthetic]
    config = RolloutConfig(max_turns=1, max_new_tokens=tokens, temperature=0.0, batch_size=32, progress=False)
    seconds, texts = {}, []
    for name, tasks in (("bfcl", entries), ("synthetic", held_out)):
        start = time.perf_counter()
        report = evaluate(model, tokenizer, env, tasks, config, dtype=None)
        seconds[name] = time.perf_counter() - start
        texts += [",".join(map(str, episode.token_ids)) for episode in report.episodes]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"bfcl_seconds": seconds["bfcl"], "synthetic_seconds": seconds["synthetic"],
            "seconds": sum(seconds.values()), "above_loaded_mb": peak - loaded,
            "completions_sha256": hashlib.sha256("\x00".join(texts).encode()).hexdigest()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old-rev", required=True, help="git revision whose agentrl_lite/engine.py is the baseline")
    p.add_argument("--per-category", type=int, default=2, help="BFCL entries per category")
    p.add_argument("--synthetic", type=int, default=10, help="synthetic held-out tasks")
    p.add_argument("--tokens", type=int, default=32, help="new tokens per answer")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--one", nargs=1, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.per_category, args.synthetic, args.tokens)))
        return
    names = (f"engine at {args.old_rev} (split softmax for every chunk)",
             "this checkout's engine (SDPA for chunks of several tokens)")
    runs = compare_engines(__file__, args.old_rev, names,
                           ["--old-rev", args.old_rev, "--per-category", str(args.per_category), "--synthetic",
                            str(args.synthetic), "--tokens", str(args.tokens)], args.repeats)
    from agentrl_lite import write_results

    best = {name: {key: min(r[key] for r in rs) for key in ("bfcl_seconds", "synthetic_seconds", "seconds",
                                                              "above_loaded_mb")} for name, rs in runs.items()}
    old_name, new_name = names
    write_results("bench_engine_prefill", {
        "bfcl_per_category": args.per_category, "synthetic_tasks": args.synthetic, "new_tokens": args.tokens,
        "runs": runs, "best": best,
        "same_completions": len({r["completions_sha256"] for rs in runs.values() for r in rs}) == 1,
        "time_ratio": best[new_name]["seconds"] / best[old_name]["seconds"],
        "bfcl_time_ratio": best[new_name]["bfcl_seconds"] / best[old_name]["bfcl_seconds"],
        "memory_ratio": best[new_name]["above_loaded_mb"] / best[old_name]["above_loaded_mb"],
    }, profile="cpu", model="SmolLM2-135M-Instruct (embedded), fp32", seed=0,
        command=f"python benchmarks/{Path(__file__).name} " + " ".join(shlex.quote(a) for a in sys.argv[1:]))


if __name__ == "__main__":
    main()

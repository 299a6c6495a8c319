"""The engine with the shared prompt prefix stored once, against the engine of a git revision that copied it to
every row: peak memory and wall time of the same rollout.

The workload is lesson 11's manager shape: `--rows` episodes whose prompts share a long system prompt
(`--system-words` words, about 620 tokens at the default, as the manager's instructions and tool schemas), each
with its own short user message; `--turns` turns of `--tokens` sampled tokens (temperature 1, every row writes
the whole budget and ends its turn on the last token), then a 100-token tool reply before the next turn. Each engine
runs in a fresh process (SmolLM2-135M, fp32), alternating, `--repeats` rounds; wall time covers sampling only.
Usage:

    python benchmarks/engine_shared_prefix.py --old-rev 35f0b56   # writes results/bench/bench_engine_shared_prefix.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from engine_revisions import compare_engines, load_engine


def one(engine_file: str, rows: int, turns: int, tokens: int, words: int) -> dict[str, float]:
    import resource

    import torch

    from agentrl_lite.models import load_policy

    engine_module = load_engine(engine_file)
    torch.manual_seed(0)
    model, tokenizer = load_policy(None)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    real_sample = engine_module.sample_tokens
    step = {"n": 0}

    def full_turns(logits, temperature, top_p=1.0):  # a real draw, but the last token of the budget ends the turn
        step["n"] += 1
        token, logprob = real_sample(logits, temperature, top_p)
        token = torch.where(token == end, torch.full_like(token, 1000), token)
        return (torch.full_like(token, end) if step["n"] == tokens else token), logprob

    engine_module.sample_tokens = full_turns
    engine = engine_module.Engine(model, tokenizer.pad_token_id, end)
    system = " ".join(f"rule{i % 50}" for i in range(words))
    prompts = [tokenizer.apply_chat_template([{"role": "system", "content": system},
                                              {"role": "user", "content": f"Dialogue turn {i}: I moved to Oslo."}],
                                             add_generation_prompt=True, tokenize=True)["input_ids"] for i in range(rows)]
    sequences = [list(p) for p in prompts]
    start = time.perf_counter()
    for turn in range(turns):
        step["n"] = 0
        samples = engine.sample_turn(list(range(rows)), sequences, tokens, temperature=1.0,
                                     keep_caches=turn < turns - 1)
        assert all(s.finished for s in samples)
        sequences = [seq + s.token_ids + [200 + i % 50] * 100
                     for i, (seq, s) in enumerate(zip(sequences, samples, strict=True))]
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"loaded_mb": loaded, "peak_mb": peak, "above_loaded_mb": peak - loaded, "seconds": seconds,
            "prompt_tokens": float(len(prompts[0])), "final_tokens": float(max(len(s) for s in sequences))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old-rev", required=True, help="git revision whose agentrl_lite/engine.py is the baseline")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--system-words", type=int, default=210)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--name", default="bench_engine_shared_prefix", help="the results file (results/NAME.json)")
    p.add_argument("--old-label", default="prefix copied per row", help="what the baseline engine does")
    p.add_argument("--one", nargs=1, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.rows, args.turns, args.tokens, args.system_words)))
        return
    names = (f"engine at {args.old_rev} ({args.old_label})", "this checkout's engine (prefix stored once)")
    runs = compare_engines(__file__, args.old_rev, names, ["--old-rev", args.old_rev, "--rows", str(args.rows),
                                                           "--turns", str(args.turns), "--tokens", str(args.tokens),
                                                           "--system-words", str(args.system_words)], args.repeats)
    from agentrl_lite import write_results

    best = {name: {"above_loaded_mb": min(r["above_loaded_mb"] for r in rs), "seconds": min(r["seconds"] for r in rs)}
            for name, rs in runs.items()}
    old_name, new_name = names
    write_results(args.name, {
        "rows": args.rows, "turns": args.turns, "tokens_per_turn": args.tokens, "tool_reply_tokens": 100,
        "prompt_tokens": runs[new_name][0]["prompt_tokens"], "runs": runs, "best": best,
        "memory_ratio": best[new_name]["above_loaded_mb"] / best[old_name]["above_loaded_mb"],
        "time_ratio": best[new_name]["seconds"] / best[old_name]["seconds"],
    }, profile="cpu", model="SmolLM2-135M-Instruct (embedded), fp32", seed=0,
        command=f"python benchmarks/{Path(__file__).name} " + " ".join(shlex.quote(a) for a in sys.argv[1:]))


if __name__ == "__main__":
    main()

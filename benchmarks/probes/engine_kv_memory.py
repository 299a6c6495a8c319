"""Peak memory of a multi-turn rollout's KV caches: this checkout's engine against the engine of a git revision.

Lesson 09's evaluation samples 48 episodes of up to four turns at once. Between turns the engine keeps each
episode's cache; during a turn it also holds the batch it rebuilt from them. This times nothing: it measures the
peak resident memory of a fresh process that loads SmolLM2-135M (fp32), then runs `--turns` turns of `--rows`
episodes, each turn `--tokens` tokens (the sampler replaced so that every row ends its turn on the last one:
the worst case a budget allows) followed by a 150-token tool reply. Each engine runs in its own process,
alternating over `--repeats` rounds. Usage:

    python benchmarks/probes/engine_kv_memory.py --old-rev 70c8883   # writes results/probe_engine_kv_memory.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for its shared helper
from engine_revisions import compare_engines, load_engine  # noqa: E402


def one(engine_file: str, rows: int, turns: int, tokens: int) -> dict[str, float]:
    import resource

    import torch

    from agentrl_lite.models import load_policy

    engine_module = load_engine(engine_file)
    torch.manual_seed(0)
    model, tokenizer = load_policy(None)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    step = {"n": 0}

    def full_turns(logits, temperature, top_p=1.0):  # every row writes `tokens` tokens, the last one ends its turn
        step["n"] += 1
        token = end if step["n"] == tokens else 1000
        return torch.full((logits.shape[0],), token), torch.zeros(logits.shape[0])

    engine_module.sample_tokens = full_turns
    engine = engine_module.Engine(model, tokenizer.pad_token_id, end)
    prompt = tokenizer(tokenizer.apply_chat_template([{"role": "system", "content": "You search. " * 60},
                                                      {"role": "user", "content": "Who founded Osk Press?"}],
                                                     add_generation_prompt=True, tokenize=False))["input_ids"]
    sequences = [list(prompt) + [100 + i] for i in range(rows)]
    for turn in range(turns):
        step["n"] = 0
        samples = engine.sample_turn(list(range(rows)), sequences, tokens, temperature=0.0,
                                     keep_caches=turn < turns - 1)
        assert all(s.finished for s in samples)
        sequences = [seq + s.token_ids + [200 + i] * 150
                     for i, (seq, s) in enumerate(zip(sequences, samples, strict=True))]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"loaded_mb": loaded, "peak_mb": peak, "above_loaded_mb": peak - loaded,
            "final_tokens": float(max(len(s) for s in sequences))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old-rev", required=True, help="git revision whose agentrl_lite/engine.py is the baseline")
    p.add_argument("--rows", type=int, default=48)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--tokens", type=int, default=72)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one", nargs=1, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.rows, args.turns, args.tokens)))
        return
    runs = compare_engines(__file__, args.old_rev, (f"engine at {args.old_rev}", "this checkout's engine"),
                           ["--old-rev", args.old_rev, "--rows", str(args.rows), "--turns", str(args.turns),
                            "--tokens", str(args.tokens)], args.repeats)
    from agentrl_lite import write_results

    write_results("probe_engine_kv_memory", {
        "rows": args.rows, "turns": args.turns, "tokens_per_turn": args.tokens, "tool_reply_tokens": 150,
        "runs": runs,
        "above_loaded_mb": {name: min(r["above_loaded_mb"] for r in rs) for name, rs in runs.items()},
    }, profile="cpu", model="SmolLM2-135M-Instruct (embedded), fp32", seed=0,
        command="python " + " ".join(shlex.quote(a) for a in sys.argv))


if __name__ == "__main__":
    main()

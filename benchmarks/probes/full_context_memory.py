"""Peak memory of lesson 11's full-context evaluation: one batch of up to 64 whole dialogues against batches held to
a token budget (`RolloutConfig.batch_tokens`).

Lesson 11's answer agent reads, as its "full context" baseline, each held-out dialogue whole (about a thousand
tokens or more) before every question. Its cpu run peaked in that cell (`make course PROFILE=cpu LESSON=11`,
2026-11-27: 5004 MB). This loads the untrained SmolLM2-135M (fp32; it writes the whole 64-token budget, the worst
case), builds the cpu profile's full-context tasks (the last ten held-out dialogues) and evaluates them greedily, each
setting in a fresh process. Usage:

    python benchmarks/probes/full_context_memory.py   # writes results/probe_full_context_memory.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time

SETTINGS = {"batch_size 64 (before)": None, "batch_size 64, batch_tokens 24576": 24576}


def one(batch_tokens: int | None) -> dict[str, float]:
    import resource

    from agentrl_lite.evaluate import evaluate
    from agentrl_lite.models import load_policy
    from agentrl_lite.rollout import RolloutConfig
    from agentrl_lite.tasks import DATA_DIR, read_jsonl
    from agentrl_lite.tasks.memory import AnswerEnv, answer_tasks

    model, tokenizer = load_policy(None)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    env = AnswerEnv()
    heldout = read_jsonl(DATA_DIR / "memory_heldout.jsonl")[-10:]
    tasks = [t for d in heldout for t in answer_tasks(d, None, "full context", 3)]
    lengths = [len(tokenizer.apply_chat_template(env.prompt(t), add_generation_prompt=True, tokenize=True)["input_ids"])
               for t in tasks]
    config = RolloutConfig(max_turns=1, max_new_tokens=64, temperature=0.0, batch_size=64, batch_tokens=batch_tokens,
                           progress=False)
    start = time.perf_counter()
    result = evaluate(model, tokenizer, env, tasks, config, label_key="kind")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"questions": float(len(tasks)), "prompt_tokens_max": float(max(lengths)),
            "prompt_tokens_mean": sum(lengths) / len(lengths), "loaded_mb": loaded, "peak_mb": peak,
            "above_loaded_mb": peak - loaded, "seconds": seconds, "accuracy": result.accuracy}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(one(None if args.one == "none" else int(args.one))))
        return
    runs = {}
    for name, budget in SETTINGS.items():
        out = subprocess.run([sys.executable, __file__, "--one", "none" if budget is None else str(budget)],
                             check=True, capture_output=True, text=True).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
        print(name, runs[name], flush=True)
    from agentrl_lite import write_results

    write_results("probe_full_context_memory", {"runs": runs}, profile="cpu",
                  model="SmolLM2-135M-Instruct (embedded), fp32, untrained", seed=0,
                  command="python " + " ".join(shlex.quote(a) for a in sys.argv))


if __name__ == "__main__":
    main()

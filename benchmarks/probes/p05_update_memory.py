"""Lesson 05 probe: the resident-memory peak of GRPO updates on one batch, with the rows' pass as its own autograd
graph (`logprobs._RowsPass`, the default) or, with `--one-graph`, in the prefix pass's graph as before 2026-11-28.

Runs the lesson's cpu SFT (4 steps of 8 demonstrations), samples one group of 8 episodes for one training task,
and runs `--updates` updates of them (4 rows per loss pass, the lesson's setting; advantages spread evenly over
[-1, 1] so every row is trained). A thread reads the process's resident memory every millisecond. The first
update also creates AdamW's state; the later ones are what every step of a run repeats.

    python benchmarks/probes/p05_update_memory.py --out results/notes/05_probes/update_memory_rows_pass.json
    python benchmarks/probes/p05_update_memory.py --one-graph --out results/notes/05_probes/update_memory_one_graph.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import torch
from p09_step_time import rss_mb  # resident memory, as the other probes read it

import agentrl_lite.logprobs as logprobs
from agentrl_lite import seed_everything
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import bf16_is_fast, large_tensors_mapped, load_policy, release_memory
from agentrl_lite.rewards import exact_match_tool_reward, tool_call_reward, tool_format_reward
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
from agentrl_lite.tasks.function_calls import FunctionCallEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--one-graph", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/notes/05_probes/update_memory.json")
    args = parser.parse_args()
    if args.one_graph:  # the rows' pass straight on the prefix's tensors: one graph
        logprobs._RowsPass.apply = staticmethod(lambda run, *cached: run(list(cached)))
    began = time.perf_counter()
    peak = [0.0]

    def watch() -> None:
        while True:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.001)

    threading.Thread(target=watch, daemon=True).start()
    seed_everything(args.seed)
    model, tokenizer = load_policy()
    env = FunctionCallEnv()
    demos = read_jsonl(DATA_DIR / "toolcall_sft.jsonl")
    sft(model, tokenizer, [env.prompt(d)[:1] + d["demonstration"] for d in demos],
        [[bfcl.tool_schema(f) for f in d["functions"]] for d in demos],
        SFTConfig(steps=4, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed, progress=False))
    config = grpo_preset(dict(steps=1, prompts=1, group=8, lr=5e-6), args.seed, max_turns=1, max_new_tokens=128,
                         micro_batch_size=4)
    trainer = GRPOTrainer(model, tokenizer, env, read_jsonl(DATA_DIR / "toolcall_train.jsonl"),
                          [tool_format_reward, exact_match_tool_reward, tool_call_reward], config, [1.0, 0.0, 1.0])
    episodes = trainer.sample_groups(trainer.next_tasks(1))
    advantages = torch.linspace(-1, 1, len(episodes))
    updates = []
    for _ in range(args.updates):
        release_memory()  # as `GRPOTrainer.step` does before its update
        start_mb, start = rss_mb(), time.perf_counter()
        peak[0] = start_mb
        with large_tensors_mapped():
            trainer.update(episodes, advantages)
        updates.append({"start_mb": round(start_mb), "peak_mb": round(peak[0]),
                        "seconds": round(time.perf_counter() - start, 1)})
        print(updates[-1], flush=True)
    out = {"command": current_command(), "device": device_name(), "bf16_is_fast": bf16_is_fast("cpu"),
           "seed": args.seed, "profile": "cpu", "one_graph": args.one_graph,
           "episode_tokens": [len(e.token_ids) for e in episodes], "model_tokens": [e.num_model_tokens for e in episodes],
           "updates": updates, "seconds": round(time.perf_counter() - began, 1), "contended": False}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

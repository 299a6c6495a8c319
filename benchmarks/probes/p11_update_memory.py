"""Lesson 11 probe: the memory of one GRPO update of the manager, micro-batch plan by micro-batch plan.

The lesson's cpu run peaks in its GRPO cell, 17 MB over the 4 GB budget (results/course_cpu.json, measured before
the trainer ordered a batch's episodes by length). This probe cold-starts the manager as the lesson does (fewer
SFT steps), takes one whole GRPO step so that AdamW's moments exist, as they do from the lesson's second step on,
then samples one more batch and runs the trainer's update on it under each micro-batch plan: episodes in the order
they were sampled (the plan before 2026-11-27), by length (the trainer's `micro_batch_plan`), and variants of the
token budget per pass. The weights are restored before each variant. For each it records the micro-batches, the
tokens of their passes, the positions whose logits a pass keeps (a union over the pass's rows: vocabulary-sized
float32 rows), the seconds, and the process's resident memory before and at the peak of the update.

    python benchmarks/probes/p11_update_memory.py --sft-steps 8 --out results/notes/11_probes/update_memory.json
    python benchmarks/probes/p11_update_memory.py --sft-steps 8 --only-rows \
        --out results/notes/11_probes/update_memory_rows.json   # rows per pass: 8 (the preset), 4, 2
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from pathlib import Path

from p09_step_time import (  # the update as lesson 09's probe watches it
    arrival_order_plan,
    layout,
    rss_mb,
    run_variants,
    sample_batch,
)

from agentrl_lite import seed_everything
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import load_policy, stash_weights
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import MemoryManagerEnv, demonstration, manager_reward, manager_tasks

CPU_BUDGET = dict(steps=2, prompts=4, group=8, lr=1e-5)  # lesson 11's cpu profile (its GRPO takes 6 steps)
MANAGER_TOKENS, MIN_SHARE, CHOICE = 64, 0.2, ("change", "correct", "retract", "repeat")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only-rows", action="store_true", help="only the lesson's plan and fewer rows per pass")
    parser.add_argument("--out", default="results/notes/11_probes/update_memory.json")
    args = parser.parse_args()
    began = time.perf_counter()
    seed_everything(args.seed)
    train_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
    model, tokenizer = load_policy()
    env = MemoryManagerEnv()
    by_op = defaultdict(list)  # the lesson's cold start: every operation at least a fifth of the demonstrations
    for t in train_tasks:
        by_op[t["ideal"]["op"]].append(t)
    rng = random.Random(args.seed)
    shown = list(train_tasks) + [t for ts in by_op.values()
                                 for t in rng.choices(ts, k=max(0, int(MIN_SHARE * len(train_tasks)) - len(ts)))]
    conversations = [env.prompt(t) + demonstration(t)[1:] for t in shown]
    rng.shuffle(conversations)
    start = time.perf_counter()
    sft(model, tokenizer, conversations, env.toolbox_for(train_tasks[0]).schemas,
        SFTConfig(steps=args.sft_steps, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed, micro_batch_tokens=2048))
    sft_seconds = time.perf_counter() - start
    practice = [t for t in train_tasks if t["event"] in CHOICE]
    practice += random.Random(args.seed).sample([t for t in train_tasks if t["event"] not in CHOICE], len(practice))
    seed_everything(args.seed)
    config = grpo_preset(CPU_BUDGET, args.seed, max_turns=1, max_new_tokens=MANAGER_TOKENS, micro_batch_tokens=2048,
                         scale_rewards="none")
    trainer = GRPOTrainer(model, tokenizer, env, practice, [manager_reward], config)
    first = trainer.step()  # AdamW's moments exist from here on, as in the lesson's steps 2-6
    after_first = rss_mb()
    episodes, advantages, batch = sample_batch(trainer)
    weights = stash_weights(model)
    variants = {  # name: (config changes, micro-batch plan: None is the trainer's own)
        "arrival order, 2048 tokens (the plan before 2026-11-27)": ({}, arrival_order_plan(trainer)),
        "by length, 2048 tokens (the lesson's setting)": ({}, None),
        "by length, 1024 tokens": ({"micro_batch_tokens": 1024}, None),
        "arrival order, 1024 tokens": ({"micro_batch_tokens": 1024}, arrival_order_plan(trainer)),
        "by length, 2048 tokens, 4 rows per pass": ({"micro_batch_size": 4}, None),
        "by length, 2048 tokens, 2 rows per pass": ({"micro_batch_size": 2}, None),
    }
    if args.only_rows:  # the second probe of 2026-11-27: rows per pass only
        variants = {k: v for k, v in variants.items() if "rows per pass" in k or "lesson's setting" in k}
    rows = run_variants(trainer, weights, episodes, advantages, variants, layout, every=0.02)
    record = {"command": current_command(), "device": device_name(), "seed": args.seed, "profile": "cpu",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sft_steps": args.sft_steps,
              "sft_seconds": round(sft_seconds, 1),
              "first_step": {k: first.get(k) for k in ("reward", "step_time", "time/sampling", "time/update")},
              "rss_after_first_step_mb": round(after_first), "batch": batch, "updates": rows,
              "runtime_seconds": round(time.perf_counter() - began, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()

"""Lesson 09 probe: where one GRPO step of the cpu profile spends its time, and what the loss pass's settings cost.

The lesson's cpu run spent 146-305 s per GRPO step (results/09_agentic_search.json). This probe cold-starts the
policy as the lesson does (fewer SFT steps: enough for search calls), samples one batch of the lesson's GRPO
(4 prompts × 8, up to 4 turns of 40 tokens) and times sampling and scoring once. Then it runs the trainer's
update on that same batch under each variant of the loss pass: micro-batch token budget and gradient
checkpointing, and the order of the episodes in the micro-batches (as sampled, or by length, the trainer's
`micro_batch_plan`). The weights are restored before each variant. For each variant it records the seconds, the
micro-batches and the tokens they run, and the peak RSS during the update above the RSS before it.

    python benchmarks/probes/p09_step_time.py --sft-steps 4 --out results/notes/09_probes/step_time.json
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from agentrl_lite import seed_everything
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.logprobs import micro_batches, pass_tokens, shared_with_previous
from agentrl_lite.models import (
    large_tensors_mapped,
    load_policy,
    release_memory,
    stash_weights,
    train_top_layers,
)
from agentrl_lite.rewards import exact_match_reward, format_reward
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import SearchEnv
from agentrl_lite.tools import SearchIndex

CPU_BUDGET = dict(steps=1, prompts=4, group=8, lr=2e-5)  # lesson 09's cpu profile
RL_KINDS = ("two_hop", "comparison", "unanswerable")
TURNS, TOKENS, FORMAT_WEIGHT = 4, 40, 0.2


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def timed_update(trainer: GRPOTrainer, episodes, advantages, every: float = 0.05) -> dict:
    """The trainer's update as `step` runs it (memory trimmed first, large tensors mapped), timed and watched
    (the resident memory read every `every` seconds). Also used by `p11_update_memory.py`."""
    release_memory()
    floor, peak, done = rss_mb(), [0.0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(every)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    with large_tensors_mapped():
        trainer.update(episodes, advantages)
    seconds = time.perf_counter() - start
    done.set()
    watcher.join()
    return {"seconds": round(seconds, 1), "rss_before_mb": round(floor), "peak_mb": round(peak[0]),
            "peak_above_mb": round(peak[0] - floor)}


def arrival_order_plan(trainer: GRPOTrainer):
    """The trainer's micro-batch plan before 2026-11-27: episodes in the order they were sampled (not by length)."""
    def plan(episodes, advantages, masks=None):
        c = trainer.config
        masks = trainer.loss_mask(episodes) if masks is None else masks
        order = [i for i in range(len(episodes)) if bool((advantages[i] != 0).any())] \
            if c.skip_zero_advantage and c.loss.beta == 0 else list(range(len(episodes)))
        shared = shared_with_previous([episodes[i].token_ids for i in order], [masks[i] for i in order]) \
            if c.micro_batch_tokens else None
        return order, [[order[j] for j in chunk] for chunk in micro_batches(
            [len(episodes[i].token_ids) for i in order], c.micro_batch_size, c.micro_batch_tokens, shared)]
    return plan


def layout(trainer: GRPOTrainer, episodes, advantages) -> dict:
    """The micro-batches the update will run: per pass its rows, width, tokens (a shared prefix counted once) and
    the positions whose logits it keeps (a union over its rows: vocabulary-sized float32 rows); in all, the
    passes' tokens and the largest pass's logits."""
    masks = trainer.loss_mask(episodes)
    order, chunks = trainer.micro_batch_plan(episodes, advantages, masks)
    passes = []
    for chunk in chunks:
        rows = [episodes[i].token_ids for i in chunk]
        shared = shared_with_previous(rows, [masks[i] for i in chunk]) if trainer.config.micro_batch_tokens else None
        scored = {t for i in chunk for t, m in enumerate(masks[i]) if m}  # positions whose token some row scores
        passes.append({"rows": len(chunk), "width": max(map(len, rows)),
                       "pass_tokens": int(pass_tokens([len(r) for r in rows], shared)),
                       "kept_positions": len(scored), "logit_rows": len(chunk) * len(scored)})
    vocab = trainer.model.get_output_embeddings().weight.shape[0]
    return {"episodes_trained": len(order), "micro_batches": len(chunks),
            "pass_tokens": sum(p["pass_tokens"] for p in passes),
            "episode_tokens": int(sum(len(episodes[i].token_ids) for i in order)),
            "largest_logits_mb": round(max((p["logit_rows"] for p in passes), default=0) * vocab * 4 / 2**20),
            "passes": passes}


def sample_batch(trainer: GRPOTrainer) -> tuple[list, object, dict]:
    """One batch of the trainer's GRPO, sampled and scored: (episodes, advantages, a summary with its seconds)."""
    start = time.perf_counter()
    episodes = trainer.sample_groups(trainer.next_tasks(trainer.config.prompts_per_step))
    sampling_seconds = time.perf_counter() - start
    rewards, _ = trainer.score(episodes)
    advantages, _ = trainer.advantages(episodes, rewards)
    lengths = [len(ep.token_ids) for ep in episodes]
    batch = {"sampling_seconds": round(sampling_seconds, 1), "episodes": len(episodes),
             "episode_tokens_mean": float(np.mean(lengths)), "episode_tokens_min": min(lengths),
             "episode_tokens_max": max(lengths),
             "model_tokens_mean": float(np.mean([ep.num_model_tokens for ep in episodes])),
             "tool_calls_mean": float(np.mean([ep.num_tool_calls for ep in episodes])),
             "reward_mean": float(rewards.mean()), "nonzero_advantage": int((advantages != 0).sum())}
    print(json.dumps(batch))
    return episodes, advantages, batch


def run_variants(trainer: GRPOTrainer, weights, episodes, advantages, variants: dict, describe, every: float = 0.05
                 ) -> dict:
    """The update on one batch under each variant, `{name: (config changes, micro-batch plan or None for the
    trainer's own)}`, from the same weights (`weights`, a stash) each time: `describe(trainer, episodes,
    advantages)` (the passes it will run) and `timed_update`, per name."""
    config, own_plan, rows = trainer.config, trainer.micro_batch_plan, {}
    for name, (change, plan) in variants.items():
        weights.restore(trainer.model)
        trainer.config = replace(config, **change)
        trainer.micro_batch_plan = plan or own_plan
        rows[name] = {**describe(trainer, episodes, advantages), **timed_update(trainer, episodes, advantages, every)}
        print(name, json.dumps({k: v for k, v in rows[name].items() if k != "passes"}))
    trainer.config, trainer.micro_batch_plan = config, own_plan
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-checkpointing", action="store_true", help="also time the update without checkpointing")
    parser.add_argument("--train-top", type=int, default=0, help="also time the preset training only the top N "
                        "decoder layers (models.train_top_layers: embeddings and lower layers frozen)")
    parser.add_argument("--only-preset", action="store_true", help="of the plans, time only the preset's")
    parser.add_argument("--out", default="results/notes/09_probes/step_time.json")
    args = parser.parse_args()
    began = time.perf_counter()
    seed_everything(args.seed)
    index = SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl"))
    env = SearchEnv(index)
    model, tokenizer = load_policy()
    demos = read_jsonl(DATA_DIR / "search_sft.jsonl")
    conversations = [env.prompt(d)[:1] + d["messages"] for d in demos]
    start = time.perf_counter()
    sft(model, tokenizer, conversations, env.toolbox_for().schemas,
        SFTConfig(steps=args.sft_steps, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed))
    sft_seconds = time.perf_counter() - start
    train = read_jsonl(DATA_DIR / "search_train.jsonl")
    rl_tasks = [q for kind in RL_KINDS for q in [q for q in train if q["kind"] == kind][:144]]
    config = grpo_preset(CPU_BUDGET, args.seed, max_turns=TURNS, max_new_tokens=TOKENS)
    trainer = GRPOTrainer(model, tokenizer, env, rl_tasks, [exact_match_reward, format_reward], config,
                          reward_weights=[1.0, FORMAT_WEIGHT])
    episodes, advantages, batch = sample_batch(trainer)
    weights = stash_weights(model)
    variants = {  # name: (config changes, micro-batch plan: None is the trainer's own)
        "arrival order, 1024 tokens (the plan before 2026-11-27)": ({}, arrival_order_plan(trainer)),
        "by length, 1024 tokens (the preset)": ({}, None),
        "by length, 2048 tokens": ({"micro_batch_tokens": 2048}, None),
    }
    if args.no_checkpointing:
        variants["by length, 1024 tokens, no checkpointing"] = ({"gradient_checkpointing": False}, None)
    if args.only_preset:
        variants = {k: v for k, v in variants.items() if "(the preset)" in k}
    rows = run_variants(trainer, weights, episodes, advantages, variants, layout)
    if args.train_top:  # twice each, alternating, against this machine's run-to-run spread
        for attempt in ("", " (again)"):
            counts = train_top_layers(model, args.train_top)
            name = f"by length, 1024 tokens, top {args.train_top} layers trained{attempt}"
            rows |= run_variants(trainer, weights, episodes, advantages, {name: ({}, None)}, layout)
            rows[name]["parameters"] = counts
            model.requires_grad_(True)
            if not attempt:
                rows |= run_variants(trainer, weights, episodes, advantages,
                                     {"by length, 1024 tokens (the preset, again)": ({}, None)}, layout)
    record = {"command": current_command(), "device": device_name(), "seed": args.seed, "profile": "cpu",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sft_steps": args.sft_steps,
              "sft_seconds": round(sft_seconds, 1), "batch": batch, "updates": rows,
              "runtime_seconds": round(time.perf_counter() - began, 1),
              "threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()

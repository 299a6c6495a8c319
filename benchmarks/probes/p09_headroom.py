"""Lesson 09 diagnosis probe: where can GRPO find signal after the cold start?

Trains (or loads) the balanced cold start, then samples groups at temperature 1 on TRAINING questions of each
kind and reports, per kind, the mean reward (pass@1 when sampling), pass@group (any episode right), the share
of groups with reward spread, searches per episode, and the most frequent answers on unanswerable questions.
A kind whose greedy accuracy is low but whose pass@group is high is where RL can move held-out accuracy.

    python benchmarks/probes/p09_headroom.py --sft-steps 12 --per-kind 16 --group 8 --save /tmp/p09/sft12_s0.pt
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from agentrl_lite import seed_everything, write_results
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import exact_match_reward
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import KINDS, SearchEnv
from agentrl_lite.tools import SearchIndex


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sft-steps", type=int, default=12)
    p.add_argument("--per-kind", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default=None, help="where to save / load the cold-start weights")
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args()
    seed_everything(args.seed)
    index = SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl"))
    env = SearchEnv(index)
    model, tokenizer = load_policy(None)
    if args.save and Path(args.save).exists():
        model.load_state_dict(torch.load(args.save))
    else:
        demos = read_jsonl(DATA_DIR / "search_sft.jsonl")
        conversations = [env.prompt(d)[:1] + d["messages"] for d in demos]
        sft(model, tokenizer, conversations, env.toolbox_for().schemas,
            SFTConfig(steps=args.sft_steps, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed))
        if args.save:
            torch.save(model.state_dict(), args.save)
    train = read_jsonl(DATA_DIR / "search_train.jsonl")
    rng = random.Random(1)
    tasks = [q for k in KINDS for q in rng.sample([q for q in train if q["kind"] == k], args.per_kind)]
    config = grpo_preset(dict(steps=1, prompts=len(tasks), group=args.group, lr=1e-5), args.seed,
                         max_turns=4, max_new_tokens=40)
    config.rollout.temperature = args.temperature
    trainer = GRPOTrainer(model, tokenizer, env, tasks, [exact_match_reward], config)
    t = time.perf_counter()
    episodes = trainer.sample_groups(tasks)
    rewards, _ = trainer.score(episodes)
    seconds = time.perf_counter() - t
    r = rewards.view(len(tasks), args.group).numpy()
    out = {"seconds": seconds, "temperature": args.temperature}
    for i, k in enumerate(KINDS):
        block = r[i * args.per_kind:(i + 1) * args.per_kind]
        eps = episodes[i * args.per_kind * args.group:(i + 1) * args.per_kind * args.group]
        answers = collections.Counter(e.answer for e in eps)
        out[k] = {"pass@1": float(block.mean()), "pass@group": float((block.max(1) > 0).mean()),
                  "groups_with_spread": float((block.std(1) > 0).mean()),
                  "searches": float(np.mean([e.num_tool_calls for e in eps])),
                  "top_answers": answers.most_common(5) if k == "unanswerable" else None}
    print(json.dumps(out, indent=1, default=str))
    write_results("09_probe_headroom", {"split": "train (16 questions per kind, random.Random(1))",
                                        "sft_steps": args.sft_steps, "group": args.group, **out},
                  profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=args.seed)


if __name__ == "__main__":
    main()

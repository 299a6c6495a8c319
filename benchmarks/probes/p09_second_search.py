"""Lesson 09 design probe, on the VALIDATION split only: can GRPO teach the second search, as lesson 06's GRPO
taught the second calculator call?

The cold start's demonstrations cover only the kinds named by --demos (by default no two-hop question: every
demonstration searches the names its question holds, one or two of them, then answers). On a two-hop question
the second query is a name read off the first search's reply, which no demonstration shows. The probe measures,
in order:
1. the cold start, greedy on validation: EM and searches per kind;
2. its headroom at temperature 1 on training questions of the RL kinds: per kind, the share of episodes that
   search at least twice, pass@1, pass@group and the share of groups with reward spread;
3. optionally GRPO on the RL kinds, then validation again (and every --eval-every steps).

    python benchmarks/probes/p09_second_search.py --demos single_hop=64,two_hop=96,comparison=64,unanswerable=32 \
        --state-missing-year --sft-steps 5 --headroom 0 --rl-kinds two_hop --turns 3 --temperature 0.7 \
        --dynamic-sampling --grpo-steps 6 --eval-every 3 --train-top 15 --no-checkpointing

(item 32 of results/notes/09_agentic_search.md). Appends one entry to results/09_probe_second_search.json (field
metrics.runs).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

from agentrl_lite import seed_everything, write_results
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import read_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import load_policy, train_top_layers
from agentrl_lite.rewards import episode_completion, exact_match_reward, format_reward, otc_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import KINDS, SearchEnv, demonstration, encyclopedia, failure_kind
from agentrl_lite.tools import SearchIndex


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def template(q: dict) -> str:
    return q["question"].replace(q["anchor"], "X").split(",")[0]


def first_line(episode) -> str:
    turns = episode_completion(episode)
    return turns[0]["content"].split("\n")[0] if turns else ""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--demos", default="single_hop=96,comparison=32,unanswerable=32",
                   help="kind=count,...: demonstrations per kind, drawn from the training questions")
    p.add_argument("--sft-steps", type=int, default=6)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--sft-cache", default=None, help="load the cold-start weights from this file if it exists, "
                   "else train them and save them there")
    p.add_argument("--headroom", type=int, default=16, help="training questions per RL kind sampled at T=1")
    p.add_argument("--headroom-temperature", type=float, default=1.0)
    p.add_argument("--skip-eval", action="store_true", help="no validation evaluation after the cold start")
    p.add_argument("--grpo-steps", type=int, default=0)
    p.add_argument("--rl-kinds", default="single_hop,two_hop")
    p.add_argument("--per-rl-kind", type=int, default=144, help="RL questions per kind (equal shares)")
    p.add_argument("--rl-include-demos", action="store_true", help="the RL pool may hold demonstrated questions")
    p.add_argument("--turns", type=int, default=4, help="model turns per episode (searches + the answer)")
    p.add_argument("--temperature", type=float, default=1.0, help="GRPO's sampling temperature")
    p.add_argument("--dynamic-sampling", action="store_true", help="DAPO: refill groups without reward spread")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--format-weight", type=float, default=0.2)
    p.add_argument("--otc", action="store_true", help="OTC: exact match scaled by tool efficiency within the group "
                   "(rewards.otc_reward, the group's optimum at least one search) instead of plain exact match")
    p.add_argument("--train-top", type=int, default=0, help="GRPO trains only the top N decoder layers")
    p.add_argument("--no-checkpointing", action="store_true", help="GRPO without gradient checkpointing")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--per-kind", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--state-missing-year", action="store_true", help="the corpus of encyclopedia(state_missing_year="
                   "True): a person without a recorded year has a document that says so (the questions are the same)")
    p.add_argument("--plan", action="store_true", help="the agent writes a one-line plan before its first search "
                   "(SearchEnv(plan=True), demonstration(..., plan=True)): the number of searches is decided on the "
                   "question's words")
    p.add_argument("--stratified", action="store_true", help="every GRPO step draws its prompts from the RL kinds "
                   "in turn (GRPOConfig(stratify_by=\"kind\")), so that each update holds every kind")
    args = p.parse_args()
    seed_everything(args.seed)
    index = SearchIndex(encyclopedia(seed=0, state_missing_year=True).documents if args.state_missing_year
                        else read_jsonl(DATA_DIR / "search_corpus.jsonl"))
    env = SearchEnv(index, plan=args.plan)
    train = read_jsonl(DATA_DIR / "search_train.jsonl")
    validation = read_jsonl(DATA_DIR / "search_validation.jsonl")
    rng = random.Random(0)
    pools = {k: [q for q in validation if q["kind"] == k] for k in KINDS}
    tasks = [q for k in KINDS for q in rng.sample(pools[k], min(args.per_kind, len(pools[k])))]
    demo_rng = random.Random(3)
    counts = {k: int(n) for k, n in (item.split("=") for item in args.demos.split(",") if item)}
    demos = [q for k, n in counts.items() for q in demo_rng.sample([q for q in train if q["kind"] == k], n)]
    demo_rng.shuffle(demos)
    demo_ids = {q["id"] for q in demos}
    rl_kinds = args.rl_kinds.split(",")
    pick_rl = random.Random(2)
    rl_pools = {k: [q for q in train if q["kind"] == k and (args.rl_include_demos or q["id"] not in demo_ids)]
                for k in rl_kinds}
    rl_tasks = [q for k in rl_kinds for q in pick_rl.sample(rl_pools[k], min(args.per_rl_kind, len(rl_pools[k])))]
    model, tokenizer = load_policy(None)
    evalcfg = RolloutConfig(max_turns=args.turns, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=64,
                            progress=False)
    row: dict = {"args": vars(args), "command": "python " + " ".join(sys.argv),
                 "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                 "demonstrations_by_kind": dict(collections.Counter(q["kind"] for q in demos)),
                 "rl_tasks_by_kind": dict(collections.Counter(q["kind"] for q in rl_tasks))}

    def ev(name: str) -> dict:
        t = time.perf_counter()
        r = evaluate(model, tokenizer, env, tasks, evalcfg, label_key="kind")
        out = {"EM": r.accuracy, "by_kind": r.by_label(), "searches_by_kind": r.calls_by_label(),
               "correct": r.correct, "answers": [ep.answer for ep in r.episodes],
               "failures": {k: dict(collections.Counter(failure_kind(q, ep, index)
                                                         for q, ep in zip(tasks, r.episodes, strict=True)
                                                         if q["kind"] == k)) for k in KINDS},
               "seconds": time.perf_counter() - t, "peak_rss_mb": peak_mb()}
        if args.plan:  # the plan each episode opened with, per kind: is the number of searches read off the question?
            out["plans"] = {k: dict(collections.Counter(first_line(ep) for q, ep in zip(tasks, r.episodes, strict=True)
                                                        if q["kind"] == k)) for k in KINDS}
        print(name, json.dumps({k: v for k, v in out.items() if k not in ("correct", "answers")}), flush=True)
        return out

    t = time.perf_counter()
    if args.sft_cache and Path(args.sft_cache).exists():
        model.load_state_dict(torch.load(args.sft_cache))
        row["sft"] = {"loaded": args.sft_cache}
    else:
        conversations = [env.prompt(q)[:1] + demonstration(q, index, plan=args.plan) for q in demos]
        losses = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                     SFTConfig(steps=args.sft_steps, batch_size=args.sft_batch, lr=args.sft_lr, bf16="auto",
                               seed=args.seed))
        row["sft"] = {"seconds": time.perf_counter() - t, "losses": losses, "peak_rss_mb": peak_mb()}
        print("sft", json.dumps(row["sft"]), flush=True)
        if args.sft_cache:
            torch.save(model.state_dict(), args.sft_cache)
    row["validation_after_sft"] = None if args.skip_eval else ev("sft")

    def headroom(name: str) -> dict:
        if not args.headroom:
            return {}
        pick = random.Random(1)
        sample = [q for k in rl_kinds for q in pick.sample([q for q in rl_tasks if q["kind"] == k], args.headroom)]
        config = grpo_preset(dict(steps=1, prompts=len(sample), group=args.group, lr=1e-5), args.seed,
                             max_turns=args.turns, max_new_tokens=args.max_new_tokens)
        config.rollout.temperature = args.headroom_temperature
        trainer = GRPOTrainer(model, tokenizer, env, sample, [exact_match_reward], config)
        t = time.perf_counter()
        episodes = trainer.sample_groups(sample)
        rewards, _ = trainer.score(episodes)
        r = rewards.view(len(sample), args.group).numpy()
        out: dict = {"seconds": time.perf_counter() - t}
        g = args.group
        for k in rl_kinds:
            rows = [i for i, q in enumerate(sample) if q["kind"] == k]
            eps = [episodes[i * g + j] for i in rows for j in range(g)]
            searches = np.array([e.num_tool_calls for e in eps])
            right = r[rows].reshape(-1)
            out[k] = {"pass@1": float(r[rows].mean()), "pass@group": float((r[rows].max(1) > 0).mean()),
                      "groups_with_spread": float((r[rows].std(1) > 0).mean()),
                      "searches": float(searches.mean()), "two_or_more_searches": float((searches >= 2).mean()),
                      "pass@1 | two or more searches": float(right[searches >= 2].mean()) if (searches >= 2).any()
                      else None,
                      "pass@1 | one search": float(right[searches == 1].mean()) if (searches == 1).any() else None,
                      "by_template": {tp: float(r[[i for i in rows if template(sample[i]) == tp]].mean())
                                      for tp in sorted({template(sample[i]) for i in rows})},
                      "no_answer": float(np.mean([e.answer is None for e in eps]))}
            if args.plan:  # the sampled plans, and how often each was followed and right
                hops = {first_line(e): None for e in eps}
                for line in hops:
                    with_it = [i for i, e in enumerate(eps) if first_line(e) == line]
                    hops[line] = {"share": len(with_it) / len(eps), "pass@1": float(right[with_it].mean()),
                                  "searches": float(searches[with_it].mean())}
                out[k]["plans"] = hops
        print(name, json.dumps(out), flush=True)
        del trainer
        return out

    row["headroom_after_sft"] = headroom("headroom")
    if args.grpo_steps:
        if args.train_top:
            row["parameters"] = train_top_layers(model, args.train_top)
        config = grpo_preset(dict(steps=args.grpo_steps, prompts=args.prompts, group=args.group, lr=args.lr),
                             args.seed, max_turns=args.turns, max_new_tokens=args.max_new_tokens,
                             gradient_checkpointing=not args.no_checkpointing, dynamic_sampling=args.dynamic_sampling,
                             stratify_by="kind" if args.stratified else None)
        config.rollout.temperature = args.temperature
        def otc_exact_match(prompts, completions, answer=None, tool_calls=None, **kwargs):
            return otc_reward(prompts, completions, group_size=args.group, tool_calls=tool_calls, min_calls=1,
                              correct=exact_match_reward(prompts, completions, answer=answer))

        correctness = otc_exact_match if args.otc else exact_match_reward
        trainer = GRPOTrainer(model, tokenizer, env, rl_tasks, [correctness, format_reward], config,
                              reward_weights=[1.0, args.format_weight])
        t = time.perf_counter()
        row["validation_during_grpo"] = {}
        for k in range(args.eval_every, args.grpo_steps, args.eval_every or args.grpo_steps):
            trainer.train(k)
            row["validation_during_grpo"][k] = ev(f"grpo step {k}")
        history = trainer.train()
        keep = ("reward", "frac_reward_zero_std", "tools/call_frequency", "completions/clipped_ratio", "step_time",
                "time/sampling", "time/update", "entropy", "grad_norm", "completions/mean_length", "update_skipped",
                "sampling/refills")
        row["grpo"] = {"seconds": time.perf_counter() - t, "peak_rss_mb": peak_mb(),
                       "history": [{k: h.get(k) for k in keep} for h in history]}
        print("grpo", json.dumps(row["grpo"]), flush=True)
        row["validation_after_grpo"] = ev("grpo")
        row["headroom_after_grpo"] = headroom("headroom after grpo")
    old = read_results("09_probe_second_search")
    runs = (old["metrics"]["runs"] if old else []) + [row]
    write_results("09_probe_second_search", {"split": "validation", "runs": runs}, profile="cpu",
                  model="SmolLM2-135M-Instruct (embedded)", seed=args.seed)


if __name__ == "__main__":
    main()

"""Lesson 09 tuning probe, on the VALIDATION split only: how far a short cold start gets, and what GRPO adds.

    python benchmarks/probes/p09_validation.py --sft-steps 12 --grpo-steps 8 --lr 2e-5 --seed 0

Writes results/09_probe_validation.json (one entry per invocation, appended under "runs").
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import resource
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from agentrl_lite import seed_everything, write_results
from agentrl_lite.advantages import group_advantages
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import read_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.logprobs import token_logprobs
from agentrl_lite.loss import LossConfig
from agentrl_lite.models import load_policy, train_top_layers
from agentrl_lite.rewards import exact_match_reward, format_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft, tokenize_conversation
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import (
    KINDS,
    SearchEnv,
    demonstration,
    failure_kind,
    grounding_reward,
    verified_exact_match_reward,
)
from agentrl_lite.tools import SearchIndex


def peak_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class StratifiedTrainer(GRPOTrainer):
    """GRPO whose prompts come from the question kinds in turn (round robin), each kind in its own seeded random
    order, epoch after epoch: a step of n prompts holds every kind when n is at least the number of kinds."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.by_kind = {k: tasks for k in KINDS if (tasks := [t for t in self.tasks if t["kind"] == k])}
        self.kinds = list(self.by_kind)
        self.queues: dict[str, list[dict]] = {k: [] for k in self.kinds}
        self.turn = 0

    def next_tasks(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            kind = self.kinds[self.turn % len(self.kinds)]
            self.turn += 1
            if not self.queues[kind]:
                self.queues[kind] = self.task_rng.sample(self.by_kind[kind], len(self.by_kind[kind]))
            out.append(self.queues[kind].pop())
        return out


def template(q: dict) -> str:
    """A question's template: its entity replaced by X (a comparison's up to its comma)."""
    return q["question"].replace(q["anchor"], "X").split(",")[0]


def first(questions: list[dict], n: int) -> list[dict]:
    return questions[:n]


def across_templates(questions: list[dict], n: int) -> list[dict]:
    """Up to n questions, the templates taken in turn (each template's questions in file order) until n are taken
    or every template is spent."""
    queues: dict[str, list[dict]] = {}
    for q in questions:
        queues.setdefault(template(q), []).append(q)
    taken: list[dict] = []
    while len(taken) < min(n, len(questions)):
        for name in sorted(queues):
            if queues[name] and len(taken) < n:
                taken.append(queues[name].pop(0))
    return taken


class TemplateStratifiedTrainer(StratifiedTrainer):
    """StratifiedTrainer whose kinds also take their templates in turn ("Who founded X?", "In which town was X
    born?", ...), each template's questions in their own seeded random order: eight single-hop prompts then cover
    the seven single-hop templates, where drawing from the kind left three of them undrawn in eight steps
    (results/notes/09_agentic_search.md, item 20)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.by_template = {k: {} for k in self.kinds}
        for k, tasks in self.by_kind.items():
            for t in tasks:
                self.by_template[k].setdefault(template(t), []).append(t)
        self.template_turn = dict.fromkeys(self.kinds, 0)
        self.template_queues: dict[tuple[str, str], list[dict]] = {}

    def next_tasks(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            kind = self.kinds[self.turn % len(self.kinds)]
            self.turn += 1
            names = sorted(self.by_template[kind])
            name = names[self.template_turn[kind] % len(names)]
            self.template_turn[kind] += 1
            queue = self.template_queues.setdefault((kind, name), [])
            if not queue:
                pool = self.by_template[kind][name]
                queue.extend(self.task_rng.sample(pool, len(pool)))
            out.append(queue.pop())
        return out


class AnchoredTrainer(StratifiedTrainer):
    """StratifiedTrainer whose every update also follows the demonstrations: before the gradient is clipped, it adds
    `anchor` × the mean negative log-likelihood of `anchor_batch` cold-start demonstrations (drawn from the RL kinds
    in turn) to the policy loss's gradient, as InstructGPT mixed its pretraining loss into PPO ("PPO-ptx"). The
    demonstrations that abstain then stay in every update, whether or not a group of unanswerable questions has
    reward spread. A probe: the library's trainer has no such term."""

    def __init__(self, *args, demonstrations: list[tuple[list[int], list[int]]], kinds: list[str], anchor: float,
                 anchor_batch: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.anchor, self.anchor_batch = anchor, anchor_batch
        self.demo_kinds = sorted(set(kinds))
        self.demos = {k: [d for d, kind in zip(demonstrations, kinds, strict=True) if kind == k] for k in self.demo_kinds}
        self.demo_rng, self.demo_turn, self.anchor_losses = random.Random(0), 0, []

    def _anchor_backward(self) -> None:
        batch = []
        for _ in range(self.anchor_batch):
            kind = self.demo_kinds[self.demo_turn % len(self.demo_kinds)]
            self.demo_turn += 1
            batch.append(self.demo_rng.choice(self.demos[kind]))
        width, pad = max(len(ids) for ids, _ in batch), self.tokenizer.pad_token_id
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
        attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
        labels = torch.tensor([m + [0] * (width - len(m)) for _, m in batch])
        logprobs = token_logprobs(self.model, ids, attention, labels, checkpoint=True, rows_backward_first=True)
        nll = -logprobs.sum() / max(1, int(labels[:, 1:].sum()))
        (self.anchor * nll).backward()
        self.anchor_losses.append(nll.item())

    def update(self, episodes, advantages):
        clip = torch.nn.utils.clip_grad_norm_

        def anchored_clip(params, *a, **kw):
            self._anchor_backward()
            return clip(params, *a, **kw)

        torch.nn.utils.clip_grad_norm_ = anchored_clip
        try:
            return super().update(episodes, advantages)
        finally:
            torch.nn.utils.clip_grad_norm_ = clip


class BatchBaseline:
    """Mixin for a trainer: advantages against the whole batch instead of each group's own mean, A_i = (r_i −
    mean of the batch) / (std of the batch + ε), REINFORCE++'s global normalisation. A group whose samples all
    agree then still pushes: eight `unknown` answers to an unanswerable question, each rewarded above the batch's
    mean, raise `unknown` there (GRPO gives such a group zero advantage). NaN rewards (unscorable) get 0. A probe:
    the library's trainer centres each group on its own mean."""

    def advantages(self, episodes, rewards):
        return group_advantages(rewards, len(rewards)), {}  # the whole batch as one group


class KindLog:
    """Mixin for a trainer: each step's mean reward, share of groups without reward spread and mean advantage per
    question kind (`by_kind_log`, one dict per step), to see which kinds carry an update's signal, and the ids of the
    questions the step drew."""

    def advantages(self, episodes, rewards):
        advantages, metrics = super().advantages(episodes, rewards)
        per_episode = advantages if advantages.dim() == 1 else advantages.sum(1)
        g, row = self.config.group_size, {}
        for kind in KINDS:
            groups = [i for i in range(0, len(episodes), g) if episodes[i].metadata.get("kind") == kind]
            if groups:
                r = torch.stack([rewards[i:i + g] for i in groups])
                row[kind] = {"reward": float(r.nanmean()), "groups": len(groups),
                             "zero_std": float(sum(bool((x.nan_to_num() == x.nan_to_num()[0]).all()) for x in r)) / len(groups),
                             "advantage": float(torch.cat([per_episode[i:i + g] for i in groups]).mean())}
        row["ids"] = sorted({ep.metadata["id"] for ep in episodes})
        self.by_kind_log.append(row)
        return advantages, metrics


def decision_contexts(tokenizer, episodes) -> list[list[int] | None]:
    """Each episode's tokens up to and including the `<answer>` of its last model turn (None without one): the point
    where the policy chooses between an answer and `unknown`."""
    contexts = []
    for ep in episodes:
        turn = ep.model_turns[-1]
        ids = ep.token_ids[turn.start:turn.end]
        cut = next((i for i in range(1, len(ids) + 1) if tokenizer.decode(ids[:i]).endswith("<answer>")), None)
        contexts.append(None if cut is None else ep.token_ids[:turn.start + cut])
    return contexts


@torch.no_grad()
def decisions(model, tokenizer, contexts: list[list[int] | None]) -> list[dict | None]:
    """At each fixed context: log π(`unknown` | context) over the whole word's tokens, the probability of its first
    token, and the most likely first token with its probability (the greedy choice's margin over abstaining)."""
    unknown = tokenizer.encode("unknown", add_special_tokens=False)
    was_training = model.training
    model.eval()
    out = []
    for ctx in contexts:
        if ctx is None:
            out.append(None)
            continue
        logits = model(input_ids=torch.tensor([ctx + unknown])).logits[0, len(ctx) - 1:-1].float()
        logp = torch.log_softmax(logits, -1)
        top = int(logp[0].argmax())
        out.append({"logp_unknown": float(sum(logp[i, t] for i, t in enumerate(unknown))),
                    "p_unknown_first": float(logp[0, unknown[0]].exp()), "top_first": tokenizer.decode([top]),
                    "p_top_first": float(logp[0, top].exp())})
    model.train(was_training)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sft-steps", type=int, default=12)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--grpo-steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--per-kind", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--balanced", action="store_true", help="RL on at most 144 training questions of each kind")
    p.add_argument("--pool", choices=("first", "templates"), default="first", help="with --balanced: the first 144 "
                   "of each kind, or 144 drawn from the kind's templates in turn (every template in the pool; item 21 "
                   "found the first 144 single-hop questions hold three of seven templates)")
    p.add_argument("--only-templates", default=None, help="'|'-separated words: GRPO practises only the single-hop "
                   "questions whose template contains one of them (e.g. founded|headquartered), the templates the "
                   "cold start mis-cites on validation (items 25-26); other kinds are kept whole")
    p.add_argument("--sft-cache", default=None, help="load the cold-start weights from this file if it exists, "
                   "else train and save them there (the same SFT for several GRPO probes)")
    p.add_argument("--format-weight", type=float, default=0.0, help="weight of rewards.format_reward beside EM")
    p.add_argument("--eval-every", type=int, default=0, help="also evaluate on validation every this many steps")
    p.add_argument("--dynamic-sampling", action="store_true")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--beta", type=float, default=0.0, help="KL term to the cold start (k3 estimator), as in lesson 07")
    p.add_argument("--rl-kinds", default=None, help="comma-separated question kinds GRPO trains on (default: all)")
    p.add_argument("--temperature", type=float, default=1.0, help="GRPO's sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=40, help="tokens per model turn (sampling and evaluation)")
    p.add_argument("--stratified", action="store_true", help="each GRPO step draws its prompts from the RL kinds in "
                   "turn (one per kind, round robin), not from the pooled questions: every update sees every kind")
    p.add_argument("--by-template", action="store_true", help="with --stratified: each kind also takes its question "
                   "templates in turn (TemplateStratifiedTrainer)")
    p.add_argument("--train-top", type=int, default=0, help="train only the top N decoder layers, embeddings "
                   "frozen (models.train_top_layers); 0 trains everything")
    p.add_argument("--train-top-in", choices=("both", "grpo"), default="both", help="the phases --train-top applies "
                   "to: SFT and GRPO, or GRPO only (the cold start trains every layer)")
    p.add_argument("--anchor", type=float, default=0.0, help="with --stratified: weight of the demonstrations' "
                   "NLL added to every GRPO update (AnchoredTrainer, PPO-ptx style); 0 for none")
    p.add_argument("--anchor-batch", type=int, default=4, help="demonstrations per update for --anchor")
    p.add_argument("--baseline", choices=("group", "batch"), default="group", help="advantages against each "
                   "group's mean (GRPO) or the whole batch's (REINFORCE++; see BatchBaseline)")
    p.add_argument("--decision-every", type=int, default=0, help="every this many GRPO steps (and after the cold "
                   "start and the last step), P(unknown) at the cold start's greedy <answer> on each validation question")
    p.add_argument("--grounding-weight", type=float, default=0.0, help="weight of search.grounding_reward (the "
                   "answer read off the sentence the agent cited) beside EM and the format term; 0 for none")
    p.add_argument("--abstain-check", type=int, default=0, help="also evaluate greedily on this many unanswerable "
                   "TRAINING questions that are not SFT demonstrations (the validation split has only ten); the "
                   "ones GRPO drew are listed in grpo.by_kind[*].ids")
    p.add_argument("--verify", action="store_true", help="cite or abstain (SearchEnv(verify=True)): an answer "
                   "not grounded in the agent's citations is recorded as unknown, in the evaluations and in the "
                   "exact-match reward")
    p.add_argument("--cite", action="store_true", help="demonstrations and system prompt that copy the evidence "
                   "sentence before the answer (search.evidence, SearchEnv(cite=True)); give --max-new-tokens 72")
    args = p.parse_args()
    seed_everything(args.seed)
    index = SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl"))
    validation = read_jsonl(DATA_DIR / "search_validation.jsonl")
    rng = random.Random(0)
    tasks = [q for k in KINDS for q in (lambda pool: rng.sample(pool, min(args.per_kind, len(pool))))([q for q in validation if q["kind"] == k])]
    train = train_all = read_jsonl(DATA_DIR / "search_train.jsonl")
    if args.balanced:
        train = [q for k in KINDS for q in (across_templates if args.pool == "templates" else first)(
            [q for q in train if q["kind"] == k], 144)]
    if args.rl_kinds:
        rl_kinds = set(args.rl_kinds.split(","))
        if rl_kinds - set(KINDS):
            raise SystemExit(f"unknown kinds {sorted(rl_kinds - set(KINDS))}: choose from {KINDS}")
        train = [q for q in train if q["kind"] in rl_kinds]
    if args.only_templates:
        words = args.only_templates.split("|")
        train = [q for q in train if q["kind"] != "single_hop" or any(w in template(q) for w in words)]
        if not any(q["kind"] == "single_hop" for q in train):
            raise SystemExit(f"no single-hop training question has a template with any of {words}")
    demos = read_jsonl(DATA_DIR / "search_sft.jsonl")
    demo_ids = {d["id"] for d in demos}
    abstain_tasks = [q for q in train_all if q["kind"] == "unanswerable" and q["id"] not in demo_ids][:args.abstain_check]
    if args.cite:  # the same questions, each final reply citing its evidence first
        demos = [{**d, "messages": demonstration(d, index, cite=True)} for d in demos]
    model, tokenizer = load_policy(None)
    trainable = train_top_layers(model, args.train_top) if args.train_top and args.train_top_in == "both" else None
    env = SearchEnv(index, cite=args.cite, verify=args.verify)
    evalcfg = RolloutConfig(max_turns=4, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=64, progress=False)

    def ev(name):
        t = time.perf_counter()
        r = evaluate(model, tokenizer, env, tasks, evalcfg, label_key="kind")
        out = {"EM": r.accuracy, "by_kind": r.by_label(), "searches": r.calls_per_episode, "correct": r.correct,
               "F1": float(np.mean([s["f1"] for s in r.scores])), "stop_reasons": r.stop_reasons,
               "failures": {k: dict(collections.Counter(failure_kind(q, ep, index)
                                                         for q, ep in zip(tasks, r.episodes, strict=True) if q["kind"] == k))
                            for k in KINDS},
               "seconds": time.perf_counter() - t}
        out["grounded"] = {k: float(np.mean([s["grounded"] for q, s in zip(tasks, r.scores, strict=True)
                                             if q["kind"] == k])) for k in KINDS}
        out["answers"] = [ep.answer for ep in r.episodes]
        out["grounded_each"] = [s["grounded"] for s in r.scores]
        if args.verify:
            out["answered_correct"] = [s["answered_correct"] for s in r.scores]
        last_episodes[:] = r.episodes
        if abstain_tasks:
            a = evaluate(model, tokenizer, env, abstain_tasks, evalcfg)
            out["abstain_check"] = {"ids": [q["id"] for q in abstain_tasks], "correct": a.correct,
                                    "answers": [ep.answer for ep in a.episodes],
                                    "grounded": [s["grounded"] for s in a.scores]}
        out["peak_rss_mb"] = peak_mb()
        print(name, json.dumps(out), flush=True)
        return out

    last_episodes: list = []

    import datetime
    import sys

    row: dict = {"args": vars(args), "command": "python " + " ".join(sys.argv),
                 "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                 "demonstrations_by_kind": dict(collections.Counter(d["kind"] for d in demos)),
                 "demonstrations_cite_evidence": all("\n<answer>" in d["messages"][-1]["content"] for d in demos),
                 "rl_tasks_by_kind": dict(collections.Counter(q["kind"] for q in train)),
                 "rl_tasks_by_template": dict(collections.Counter(f"{q['kind']}: {template(q)}" for q in train)),
                 "parameters": trainable}
    t = time.perf_counter()
    if args.sft_cache and Path(args.sft_cache).exists():
        model.load_state_dict(torch.load(args.sft_cache))
        row["sft"] = {"loaded": args.sft_cache}
    else:
        conversations = [env.prompt(d)[:1] + d["messages"] for d in demos]
        losses = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                     SFTConfig(steps=args.sft_steps, batch_size=args.sft_batch, lr=1e-4, bf16="auto", seed=args.seed))
        row["sft"] = {"seconds": time.perf_counter() - t, "losses": losses, "peak_rss_mb": peak_mb()}
        print("sft", row["sft"]["seconds"], losses[-1], flush=True)
        if args.sft_cache:
            torch.save(model.state_dict(), args.sft_cache)
    row["validation_after_sft"] = ev("sft")
    contexts = decision_contexts(tokenizer, last_episodes) if args.decision_every else []
    if args.decision_every:
        row["decision_contexts"] = [{"kind": q["kind"], "gold": q["answer"],
                                     "cold_start_answer": ep.answer, "has_context": c is not None}
                                    for q, ep, c in zip(tasks, last_episodes, contexts, strict=True)]
        row["decisions"] = {0: decisions(model, tokenizer, contexts)}
    if args.grpo_steps:
        if args.train_top and args.train_top_in == "grpo":
            row["parameters"] = train_top_layers(model, args.train_top)
        config = grpo_preset(dict(steps=args.grpo_steps, prompts=args.prompts, group=args.group, lr=args.lr), args.seed,
                             max_turns=4, max_new_tokens=args.max_new_tokens, dynamic_sampling=args.dynamic_sampling,
                             loss=LossConfig(beta=args.beta))
        config = replace(config, rollout=replace(config.rollout, temperature=args.temperature))
        trainer_class = StratifiedTrainer if args.stratified else GRPOTrainer
        if args.by_template:
            if not args.stratified or args.anchor:
                raise SystemExit("--by-template needs --stratified and no --anchor")
            trainer_class = TemplateStratifiedTrainer
        extra = {}
        if args.anchor:
            if not args.stratified:
                raise SystemExit("--anchor needs --stratified")
            trainer_class = AnchoredTrainer
            anchored = [d for d in demos if d["kind"] in {q["kind"] for q in train}]
            schemas = env.toolbox_for().schemas
            extra = dict(demonstrations=[tokenize_conversation(tokenizer, env.prompt(d)[:1] + d["messages"], schemas)
                                         for d in anchored], kinds=[d["kind"] for d in anchored],
                         anchor=args.anchor, anchor_batch=args.anchor_batch)
        if args.baseline == "batch":
            trainer_class = type("BatchBaseline" + trainer_class.__name__, (BatchBaseline, trainer_class), {})
        trainer_class = type("KindLog" + trainer_class.__name__, (KindLog, trainer_class), {"by_kind_log": []})
        rewards = [verified_exact_match_reward if args.verify else exact_match_reward, format_reward]
        weights = [1.0, args.format_weight]
        if args.grounding_weight:
            rewards, weights = rewards + [grounding_reward], weights + [args.grounding_weight]
        trainer = trainer_class(model, tokenizer, env, train, rewards, config, reward_weights=weights, **extra)
        t = time.perf_counter()
        row["validation_during_grpo"] = {}
        stops = {k for every in (args.eval_every, args.decision_every) if every
                 for k in range(every, args.grpo_steps, every)}
        for k in sorted(stops):
            trainer.train(k)
            if args.eval_every and k % args.eval_every == 0:
                row["validation_during_grpo"][k] = ev(f"grpo step {k}")
            if args.decision_every and k % args.decision_every == 0:
                row["decisions"][k] = decisions(model, tokenizer, contexts)
                print("decisions", k, json.dumps(row["decisions"][k]), flush=True)
        history = trainer.train()
        if args.decision_every:
            row["decisions"][args.grpo_steps] = decisions(model, tokenizer, contexts)
        row["grpo"] = {"seconds": time.perf_counter() - t, "peak_rss_mb": peak_mb(),
                       "history": [{k: h.get(k) for k in ("reward", "frac_reward_zero_std", "tools/call_frequency",
                                                          "completions/clipped_ratio", "step_time", "time/sampling", "time/update", "entropy", "grad_norm",
                                                          "completions/mean_length", "sampling/refills")} for h in history]}
        row["grpo"]["by_kind"] = trainer.by_kind_log
        if args.anchor:
            row["grpo"]["anchor_nll"] = trainer.anchor_losses
        print("grpo", row["grpo"], flush=True)
        row["validation_after_grpo"] = ev("grpo")
    old = read_results("09_probe_validation")
    runs = (old["metrics"]["runs"] if old else []) + [row]
    write_results("09_probe_validation", {"split": "validation", "runs": runs}, profile="cpu",
                  model="SmolLM2-135M-Instruct (embedded)", seed=args.seed)


if __name__ == "__main__":
    main()

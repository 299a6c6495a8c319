"""How many SFT steps a lesson's cold start needs, chosen on validation (course tooling): the word problems of
lessons 06 and 08, and (`--task sql`) lesson 12's questions over the shop database.

Both lessons cold-start SmolLM2-135M on the same demonstrations (`word_problems.cold_start_split`: change, savings
and crates worked with two calculator calls) before GRPO. With five steps the result was a knife edge: over five
seeds of lesson 08's study, three cold starts made one call per problem and scored 0.0, two made the two-call plan
and scored about 0.6, so a seed decided the verdict more than the method did. This study measures the cold start
alone, on the validation problems (never the held-out ones), for each seed and each number of steps in `STEPS`:
one SFT run per seed at the lessons' settings (batch 8, rate 1e-4, constant), evaluated greedily after each
checkpoint's step (the first k steps of a longer run at a constant rate are the k-step run).

At each checkpoint it also samples `PASS_K` episodes per problem at temperature 1 (GRPO's sampling): the share of
problems greedy decoding fails but some sample solves is the headroom GRPO can learn from (reported, not part of
the rule: added after the first run showed a start at the demonstrations' ceiling, docs/design/08).

The rule, fixed before the study ran: take the fewest steps at which **every seed** makes the two-call plan (at
least `PLAN_CALLS` calls per problem on average) and the **worst seed's** accuracy is within `TOLERANCE` of the
best worst-seed accuracy over all checkpoints. A cold start is robust when its worst seed is good, not its mean.
If no checkpoint meets the plan condition, the study says so and chooses nothing.

`python -m agentrl_lite.course.cold_start_study --profile cpu --seeds 0 1 2 3 4` writes
`results/lessons/06_cold_start_study.json`; with `--steps 10 15` only those checkpoints are evaluated (sampling
`PASS_K` episodes per problem costs about eight greedy evaluations) and the file is
`06_cold_start_study_steps-10-15.json`, beside the full study; `--demos stickers=2` adds two demonstrations of a
template (moved from the RL problems) and names the file after them. What it found, and how lessons 06 and 08
came to their start (`word_problems.COLD_START_STEPS`, `COLD_START_DEMOS`), is on docs/design/08_credit_assignment.md.

`--task sql` applies the same measurements and rules to lesson 12 (`TASKS["sql"]`: its episode shape, one sql
call as the plan, the first 8 validation questions of each kind) and writes `results/lessons/12_cold_start_study.json`.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl_lite.course.profiles import resolve_profile, seed_everything
from agentrl_lite.course.results import write_results

STEPS = (5, 10, 15, 20)
"""the checkpoints evaluated: the old five steps (40 conversations, 1.25 epochs of the 32 demonstrations), then up
to four times as many (5 epochs)"""
PLAN_CALLS = 1.8
"""mean calculator calls per validation problem at which a cold start counts as having the two-call plan"""
TOLERANCE = 0.05
"""how far below the best worst-seed accuracy the chosen checkpoint's worst seed may be"""
BASE_DEMOS = {"crates": 8}
"""the demonstrations moved from the RL problems in every run of the study (the lessons' first design, before
`stickers` was demonstrated): `--demos` adds to these, so the committed files' commands mean what they meant"""
SFT = dict(batch_size=8, lr=1e-4)
"""the lessons' SFT settings besides the number of steps"""
TURNS, TOKENS = 3, 40
"""the lessons' episode shape: two calls, then the answer"""
PASS_K = 8
"""samples per validation problem at temperature 1 (GRPO's sampling) for the headroom measure: a problem greedy
decoding fails but one of `PASS_K` samples solves is one GRPO can learn from; one no sample solves is not"""


@dataclass(frozen=True)
class Task:
    """A task the study can measure: its data, environment and the lesson's episode shape."""

    results: str
    """the results file's name before any suffix"""
    turns: int
    tokens: int
    plan_calls: float
    """mean tool calls per validation item at which a cold start counts as having the task's plan"""
    label: str
    """the task field reported per label (`sampled.by_template` is keyed by it)"""
    steps: tuple[int, ...]
    """the checkpoints evaluated by default"""
    per_label: int | None
    """validation items scored per label, the first in file order (None: every validation item)"""
    batch_size: int
    """episodes evaluated together (memory: lesson 12's prompts are long)"""


TASKS = {
    "word_problems": Task("06_cold_start_study", TURNS, TOKENS, PLAN_CALLS, "template", STEPS, None, 32),
    # lesson 12: one sql call, then the answer, 120 tokens a turn (its notebook's TURNS and TOKENS); 16 steps are two
    # epochs of its 64 demonstrations; 8 questions per kind keep 5 seeds x 3 checkpoints x 8 samples near an hour
    "sql": Task("12_cold_start_study", 3, 120, 0.9, "kind", (8, 16, 24), 8, 16),
}
"""the tasks by name: lessons 06 and 08's two-step word problems, lesson 12's questions over the shop database"""


def _task_data(task: str, extra_demos: dict[str, int] | None) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """(environment, validation items, demonstrations) of a task; `extra_demos` only for the word problems."""
    if task == "word_problems":
        from agentrl_lite.tasks.arithmetic import ArithmeticEnv
        from agentrl_lite.tasks.word_problems import cold_start_split

        _, validation, demos = cold_start_split(BASE_DEMOS if extra_demos is None else extra_demos, split="validation")
        return ArithmeticEnv(), validation, demos
    if task == "sql":
        from agentrl_lite.tasks import DATA_DIR, read_jsonl
        from agentrl_lite.tasks.sql import SqlEnv

        if extra_demos:
            raise ValueError("extra demonstrations are a word-problem option: lesson 12 has no RL problems to move")
        return SqlEnv(), read_jsonl(DATA_DIR / "sql_validation.jsonl"), read_jsonl(DATA_DIR / "sql_sft.jsonl")
    raise KeyError(f"unknown task {task!r}: choose one of {sorted(TASKS)}")


def _first_per_label(items: list[dict[str, Any]], key: str, n: int | None) -> list[dict[str, Any]]:
    """The first `n` items of each label, in file order (all of them when n is None)."""
    if n is None:
        return items
    seen: dict[str, int] = {}
    kept = []
    for item in items:
        if seen.get(item[key], 0) < n:
            seen[item[key]] = seen.get(item[key], 0) + 1
            kept.append(item)
    return kept


def run_seed(seed: int, profile: str, steps: tuple[int, ...] = STEPS, model_name: str | None = None,
             n_items: int | None = None, k: int = PASS_K, extra_demos: dict[str, int] | None = None,
             task: str = "word_problems") -> dict[int, dict[str, Any]]:
    """One SFT run of `max(steps)` steps from the base model; the validation evaluation after each step in
    `steps`: {steps: {accuracy, calls_per_episode, ids, correct, tool_calls, by_label, loss, sampled}}, where
    `sampled` holds, per problem, how many of `k` samples at temperature 1 were right, and per template the
    greedy accuracy, pass@1 and pass@k at temperature 1. model_name "tiny": the 2-layer random model of the tests.
    extra_demos: `word_problems.cold_start_split`'s (None: `BASE_DEMOS`). task: a key of `TASKS`."""
    from agentrl_lite.evaluate import evaluate
    from agentrl_lite.models import load_policy, tiny_policy
    from agentrl_lite.rollout import RolloutConfig
    from agentrl_lite.sft import SFTConfig, sft

    seed_everything(seed)
    spec = TASKS[task]
    env, validation, demos = _task_data(task, extra_demos)
    validation = _first_per_label(validation, spec.label, spec.per_label)[:n_items]
    model, tokenizer = tiny_policy(seed=0) if model_name == "tiny" else load_policy(model_name)
    conversations = [env.prompt(d)[:1] + d["messages"] for d in demos]
    shape = dict(max_turns=spec.turns, max_new_tokens=spec.tokens, batch_size=spec.batch_size, progress=False)
    config = RolloutConfig(temperature=0.0, **shape)
    sampling = RolloutConfig(temperature=1.0, **shape)
    out: dict[int, dict[str, Any]] = {}

    def checkpoint(done: int) -> None:
        if done in steps:
            report = evaluate(model, tokenizer, env, validation, config, label_key=spec.label)
            samples = evaluate(model, tokenizer, env, [t for t in validation for _ in range(k)], sampling,
                               label_key=spec.label)
            right = [int(sum(samples.correct[i * k:(i + 1) * k])) for i in range(len(validation))]
            templates = sorted({t[spec.label] for t in validation})
            by_template = {}
            for template in templates:
                idx = [i for i, t in enumerate(validation) if t[spec.label] == template]
                by_template[template] = {"greedy": float(np.mean([report.correct[i] for i in idx])),
                                         "pass@1": float(np.mean([right[i] / k for i in idx])),
                                         f"pass@{k}": float(np.mean([right[i] > 0 for i in idx]))}
            out[done] = {"accuracy": report.accuracy, "calls_per_episode": report.calls_per_episode,
                         "ids": report.ids, "correct": report.correct, "tool_calls": report.tool_calls,
                         "by_label": report.metrics().get("by_label", {}),
                         "sampled": {"k": k, "right_of_k": right, "by_template": by_template,
                                     # greedy wrong, some sample right: what GRPO can learn from
                                     "headroom": float(np.mean([c == 0 and r > 0 for c, r in
                                                                zip(report.correct, right, strict=True)]))}}

    losses = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                 SFTConfig(steps=max(steps), bf16="auto", seed=seed, progress=False, **SFT), on_step=checkpoint)
    for done, row in out.items():
        row["loss"] = losses[done - 1]
    return out


def _plan_in_every_seed(rows: list[dict[str, Any]], plan_calls: float = PLAN_CALLS) -> bool:
    """Every seed's cold start makes the task's plan (at least `plan_calls` calls per problem: two calls for the
    word problems, one sql call for lesson 12)."""
    return min(r["calls_per_episode"] for r in rows) >= plan_calls


def choose(table: dict[int, list[dict[str, Any]]], plan_calls: float = PLAN_CALLS) -> dict[str, Any]:
    """The module's rule over {steps: [per-seed rows]}: the chosen steps (None when no checkpoint has the plan in
    every seed) and why."""
    worst = {k: min(r["accuracy"] for r in rows) for k, rows in table.items()}
    plan = {k: _plan_in_every_seed(rows, plan_calls) for k, rows in table.items()}
    best = max(worst.values())
    eligible = [k for k in sorted(table) if plan[k] and worst[k] >= best - TOLERANCE]
    return {"chosen": eligible[0] if eligible else None, "worst_seed_accuracy": worst, "plan_in_every_seed": plan,
            "best_worst_seed_accuracy": best, "rule": f"fewest steps with every seed at >= {plan_calls} calls per "
            f"problem and the worst seed within {TOLERANCE} of the best worst seed"}


def headroom_choice(table: dict[Any, list[dict[str, Any]]], plan_calls: float = PLAN_CALLS) -> Any:
    """The second rule (fixed before its run, docs/design/08): among the candidates of {candidate: [per-seed rows]}
    (numbers of steps, or numbers of extra demonstrations) at which every seed makes the two-call plan, the one
    with the largest mean headroom over seeds; on a tie the first in sorted order (fewer steps or demonstrations).
    None when no candidate has the plan in every seed."""
    eligible = [c for c in sorted(table) if _plan_in_every_seed(table[c], plan_calls)]
    if not eligible:
        return None
    mean = {c: float(np.mean([r["sampled"]["headroom"] for r in table[c]])) for c in eligible}
    return max(eligible, key=lambda c: (mean[c], -eligible.index(c)))


def cold_start_study(seeds: list[int], profile: str = "auto", steps: tuple[int, ...] | None = None,
                     model_name: str | None = None, n_items: int | None = None, k: int = PASS_K,
                     extra_demos: dict[str, int] | None = None, task: str = "word_problems") -> dict[str, Any]:
    """Every seed's run; returns {"table": {steps: [row per seed]}, "choice": choose(table), "seeds": seeds}.
    steps: the checkpoints (None: the task's)."""
    from tqdm.auto import tqdm

    profile, spec = resolve_profile(profile), TASKS[task]
    steps = spec.steps if steps is None else steps
    runs = [run_seed(seed, profile, steps, model_name, n_items, k, extra_demos, task)
            for seed in tqdm(seeds, desc="cold starts")]
    table = {k: [run[k] for run in runs] for k in steps}
    return {"table": table, "choice": choose(table, spec.plan_calls), "seeds": list(seeds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="word_problems", choices=sorted(TASKS),
                        help="word_problems: lessons 06 and 08 (the default); sql: lesson 12")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--profile", default="auto", choices=["auto", "smoke", "cpu", "gpu"])
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="the checkpoints evaluated (default: every one of the task's, TASKS)")
    parser.add_argument("--demos", nargs="+", default=[], metavar="TEMPLATE=N",
                        help="word problems: more demonstrations, moved from the RL problems, on top of BASE_DEMOS")
    args = parser.parse_args(argv)
    profile, spec = resolve_profile(args.profile), TASKS[args.task]
    steps = spec.steps if args.steps is None else tuple(sorted(args.steps))
    extra = {template: int(n) for template, n in (d.split("=") for d in args.demos)}
    name = spec.results + ("" if steps == spec.steps else f"_steps-{'-'.join(map(str, steps))}") + "".join(
        f"_{template}-{n}" for template, n in extra.items())
    extra_demos = {**BASE_DEMOS, **extra} if args.task == "word_problems" else None
    clock = time.perf_counter()
    study = cold_start_study(args.seeds, profile, steps, n_items=4 if profile == "smoke" else None,
                             extra_demos=extra_demos, task=args.task)
    settings = {"task": args.task, "steps": list(steps), "plan_calls": spec.plan_calls, "tolerance": TOLERANCE,
                "pass_k": PASS_K, "sft": SFT, "turns": spec.turns, "tokens": spec.tokens, "split": "validation",
                "per_label": spec.per_label}
    if extra_demos is not None:
        settings["extra_demos"] = extra_demos
    summary = {**study, "headroom_choice": headroom_choice(study["table"], spec.plan_calls), "settings": settings,
               "notebook_seconds": time.perf_counter() - clock}
    command = os.environ.get("AGENTRL_COMMAND") or (
        "python -m agentrl_lite.course.cold_start_study"
        + ("" if args.task == "word_problems" else f" --task {args.task}")
        + f" --profile {profile} --seeds {' '.join(map(str, args.seeds))}"
        + ("" if steps == spec.steps else f" --steps {' '.join(map(str, steps))}")
        + (f" --demos {' '.join(args.demos)}" if args.demos else ""))
    path = write_results(name, summary, profile=profile, model="SmolLM2-135M-Instruct (embedded)",
                         seed=args.seeds[0], command=command)
    for k, rows in study["table"].items():
        print(f"{k:>3} steps: accuracy " + " ".join(f"{r['accuracy']:.3f}" for r in rows)
              + "; calls " + " ".join(f"{r['calls_per_episode']:.2f}" for r in rows)
              + "; headroom " + " ".join(f"{r['sampled']['headroom']:.3f}" for r in rows))
    print("accuracy rule:", study["choice"]["chosen"], "—", study["choice"]["rule"])
    print("headroom rule:", summary["headroom_choice"], "— among those with the plan in every seed, the largest mean "
          "headroom (greedy wrong, one of the samples right); on a tie, fewer")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

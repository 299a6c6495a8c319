"""How many SFT steps the word-problem cold start of lessons 06 and 08 needs, chosen on validation (course tooling).

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
"""

from __future__ import annotations

import argparse
import os
import time
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


def run_seed(seed: int, profile: str, steps: tuple[int, ...] = STEPS, model_name: str | None = None,
             n_items: int | None = None, k: int = PASS_K, extra_demos: dict[str, int] | None = None
             ) -> dict[int, dict[str, Any]]:
    """One SFT run of `max(steps)` steps from the base model; the validation evaluation after each step in
    `steps`: {steps: {accuracy, calls_per_episode, ids, correct, tool_calls, by_label, loss, sampled}}, where
    `sampled` holds, per problem, how many of `k` samples at temperature 1 were right, and per template the
    greedy accuracy, pass@1 and pass@k at temperature 1. model_name "tiny": the 2-layer random model of the tests.
    extra_demos: `word_problems.cold_start_split`'s (None: `BASE_DEMOS`)."""
    from agentrl_lite.evaluate import evaluate
    from agentrl_lite.models import load_policy, tiny_policy
    from agentrl_lite.rollout import RolloutConfig
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv
    from agentrl_lite.tasks.word_problems import cold_start_split

    seed_everything(seed)
    _, validation, demos = cold_start_split(BASE_DEMOS if extra_demos is None else extra_demos, split="validation")
    validation = validation[:n_items]
    model, tokenizer = tiny_policy(seed=0) if model_name == "tiny" else load_policy(model_name)
    env = ArithmeticEnv()
    conversations = [env.prompt(d)[:1] + d["messages"] for d in demos]
    config = RolloutConfig(max_turns=TURNS, max_new_tokens=TOKENS, temperature=0.0, batch_size=32, progress=False)
    sampling = RolloutConfig(max_turns=TURNS, max_new_tokens=TOKENS, temperature=1.0, batch_size=32, progress=False)
    out: dict[int, dict[str, Any]] = {}

    def checkpoint(done: int) -> None:
        if done in steps:
            report = evaluate(model, tokenizer, env, validation, config)
            samples = evaluate(model, tokenizer, env, [t for t in validation for _ in range(k)], sampling)
            right = [int(sum(samples.correct[i * k:(i + 1) * k])) for i in range(len(validation))]
            templates = sorted({t["template"] for t in validation})
            by_template = {}
            for template in templates:
                idx = [i for i, t in enumerate(validation) if t["template"] == template]
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


def _plan_in_every_seed(rows: list[dict[str, Any]]) -> bool:
    """Every seed's cold start makes the two-call plan (at least `PLAN_CALLS` calls per problem)."""
    return min(r["calls_per_episode"] for r in rows) >= PLAN_CALLS


def choose(table: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """The module's rule over {steps: [per-seed rows]}: the chosen steps (None when no checkpoint has the plan in
    every seed) and why."""
    worst = {k: min(r["accuracy"] for r in rows) for k, rows in table.items()}
    plan = {k: _plan_in_every_seed(rows) for k, rows in table.items()}
    best = max(worst.values())
    eligible = [k for k in sorted(table) if plan[k] and worst[k] >= best - TOLERANCE]
    return {"chosen": eligible[0] if eligible else None, "worst_seed_accuracy": worst, "plan_in_every_seed": plan,
            "best_worst_seed_accuracy": best, "rule": f"fewest steps with every seed at >= {PLAN_CALLS} calls per "
            f"problem and the worst seed within {TOLERANCE} of the best worst seed"}


def headroom_choice(table: dict[Any, list[dict[str, Any]]]) -> Any:
    """The second rule (fixed before its run, docs/design/08): among the candidates of {candidate: [per-seed rows]}
    (numbers of steps, or numbers of extra demonstrations) at which every seed makes the two-call plan, the one
    with the largest mean headroom over seeds; on a tie the first in sorted order (fewer steps or demonstrations).
    None when no candidate has the plan in every seed."""
    eligible = [c for c in sorted(table) if _plan_in_every_seed(table[c])]
    if not eligible:
        return None
    mean = {c: float(np.mean([r["sampled"]["headroom"] for r in table[c]])) for c in eligible}
    return max(eligible, key=lambda c: (mean[c], -eligible.index(c)))


def cold_start_study(seeds: list[int], profile: str = "auto", steps: tuple[int, ...] = STEPS,
                     model_name: str | None = None, n_items: int | None = None, k: int = PASS_K,
                     extra_demos: dict[str, int] | None = None) -> dict[str, Any]:
    """Every seed's run; returns {"table": {steps: [row per seed]}, "choice": choose(table), "seeds": seeds}."""
    from tqdm.auto import tqdm

    profile = resolve_profile(profile)
    runs = [run_seed(seed, profile, steps, model_name, n_items, k, extra_demos) for seed in tqdm(seeds, desc="cold starts")]
    table = {k: [run[k] for run in runs] for k in steps}
    return {"table": table, "choice": choose(table), "seeds": list(seeds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--profile", default="auto", choices=["auto", "smoke", "cpu", "gpu"])
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS),
                        help="the checkpoints evaluated (default: every one of STEPS)")
    parser.add_argument("--demos", nargs="+", default=[], metavar="TEMPLATE=N",
                        help="more demonstrations, moved from the RL problems, on top of BASE_DEMOS (crates=8)")
    args = parser.parse_args(argv)
    profile = resolve_profile(args.profile)
    steps = tuple(sorted(args.steps))
    extra = {template: int(n) for template, n in (d.split("=") for d in args.demos)}
    name = "06_cold_start_study" + ("" if steps == STEPS else f"_steps-{'-'.join(map(str, steps))}") + "".join(
        f"_{template}-{n}" for template, n in extra.items())
    extra_demos = {**BASE_DEMOS, **extra}
    clock = time.perf_counter()
    study = cold_start_study(args.seeds, profile, steps, n_items=4 if profile == "smoke" else None,
                             extra_demos=extra_demos)
    summary = {**study, "settings": {"steps": list(steps), "extra_demos": extra_demos,
                                     "plan_calls": PLAN_CALLS, "tolerance": TOLERANCE,
                                     "pass_k": PASS_K,
                                     "sft": SFT, "turns": TURNS, "tokens": TOKENS, "split": "validation"},
               "notebook_seconds": time.perf_counter() - clock}
    command = os.environ.get("AGENTRL_COMMAND") or (
        f"python -m agentrl_lite.course.cold_start_study --profile {profile} --seeds {' '.join(map(str, args.seeds))}"
        + ("" if steps == STEPS else f" --steps {' '.join(map(str, steps))}")
        + (f" --demos {' '.join(args.demos)}" if args.demos else ""))
    path = write_results(name, summary, profile=profile, model="SmolLM2-135M-Instruct (embedded)",
                         seed=args.seeds[0], command=command)
    for k, rows in study["table"].items():
        print(f"{k:>3} steps: accuracy " + " ".join(f"{r['accuracy']:.3f}" for r in rows)
              + "; calls " + " ".join(f"{r['calls_per_episode']:.2f}" for r in rows)
              + "; headroom " + " ".join(f"{r['sampled']['headroom']:.3f}" for r in rows))
    print("chosen:", study["choice"]["chosen"], "—", study["choice"]["rule"])
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

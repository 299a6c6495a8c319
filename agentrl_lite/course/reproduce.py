"""Reproduce a lesson's measured pipeline over several seeds (course tooling).

One run of a lesson is one SFT start and one RL seed; its held-out numbers move from seed to seed by more than
most of the gains a small model makes. `agentrl-lite reproduce 09 --seeds 0 1 2 3 4` executes the lesson's
notebook once per seed (papermill sets `SEED`, which seeds the cold start, the RL run and the sampling), each into
its own folder under runs/, then writes `results/lessons/<lesson results>_seeds.json`:

- per stage (raw, SFT, SFT + GRPO, ...): every seed's held-out accuracy and per-label accuracy, and the mean
  over seeds with a Student-t interval (`stats.mean_ci`);
- `records`: the held-out item ids and, per stage, every seed's per-item outcomes, so anyone can recompute every
  number and verdict from the file alone (`tests/test_seed_studies.py` does);
- per claim: the lesson's one **primary** claim, declared here before the run that tests it (`Reproducible.
  primary`), and its **secondary** claims (`comparisons`): each seed's paired difference and exact McNemar test,
  the t interval over seeds, the two-level bootstrap over seeds and items, the p-value, Holm-adjusted within
  the lesson for the secondary claims, and the verdict (`stats.claim_verdict`; the rule and its reasons are in
  `stats`' docstring).

A lesson can be reproduced when its results file stores, for every evaluated stage, the per-item `correct`
vector (and `ids`) of the same held-out items in every seed (the held-out subset must not depend on the seed).
Studies written before the rule (no `records`) keep their old verdicts, marked "old rule" in every table.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agentrl_lite.course.budgets import CELL_TIMEOUT_S
from agentrl_lite.course.profiles import resolve_profile
from agentrl_lite.course.results import metric, result_path, results_root, write_results
from agentrl_lite.paths import course_root
from agentrl_lite.stats import claim_test, claim_verdict, holm, mcnemar, mean_ci

NOTEBOOK_SEED = 0
"""the SEED a lesson's notebook runs with: that seed's results also become the lesson's committed results file"""
RULE = 2
"""the version of the claim rule a summary was written under: 2 is `stats.claim_test` with a primary claim and
Holm; a summary without `rule` was written under the old rule (both intervals, no multiplicity control)"""


@dataclass(frozen=True)
class Claim:
    """One claim of a lesson: stage `after` against stage `before` on the same held-out items, on the per-item
    vector `measure` of each stage's evaluation ("correct": accuracy; "tool_calls": calls per episode)."""

    after: str
    before: str
    measure: str = "correct"
    expected: str = "gain"
    """the verdict the lesson predicts, declared with the claim (the test itself is two-sided)"""

    @property
    def name(self) -> str:
        return f"{self.after} vs {self.before}" + ("" if self.measure == "correct" else f" ({self.measure})")


@dataclass(frozen=True)
class Reproducible:
    """What `reproduce` needs to know of a lesson."""

    notebook: str
    """the notebook under notebooks/"""
    results: str
    """the name of the results file the notebook writes (results/lessons/<name>.json)"""
    items: str
    """dotted path, inside the results' metrics, of the stage → evaluation mapping; each evaluation holds
    `correct` (per held-out item), `accuracy` and `by_label`"""
    primary: Claim | None
    """the effect the lesson exists to show, declared before the study that tests it: tested alone at α = 0.05
    over at least `stats.MIN_SEEDS_PRIMARY` seeds (None for a side study whose claims are all secondary)"""
    comparisons: tuple[tuple[str, str], ...]
    """(after, before) stage pairs on accuracy: the lesson's secondary claims, Holm-adjusted together with its
    `also` measures' claims (a pair equal to the primary claim is not tested twice)"""
    scalars: tuple[str, ...] = ()
    """other metrics (dotted paths) reported per seed with a mean and interval, e.g. "notebook_seconds\""""
    also: tuple[str, ...] = ()
    """other stage → evaluation mappings summarised the same way as `items` (e.g. lesson 10's fast_1 beside its
    fast_0), each under `summary["also"][path]`"""


LESSONS: dict[str, Reproducible] = {
    "04": Reproducible(
        notebook="04_grpo_on_an_llm.ipynb", results="04_grpo_on_an_llm", items="heldout",
        primary=Claim("GRPO (dapo)", "start"),
        comparisons=(("GRPO (dapo)", "start"), ("TRL GRPO (dapo)", "start"), ("GRPO (dapo)", "TRL GRPO (dapo)"),
                     ("GRPO (grpo)", "GRPO (dapo)"), ("GRPO (dr_grpo)", "GRPO (dapo)"),
                     # section 7: an int8 sampler, uncorrected against the policy sampling, and each correction
                     ("GRPO (int8, uncorrected)", "GRPO (dapo)"), ("GRPO (int8, TIS)", "GRPO (int8, uncorrected)"),
                     ("GRPO (int8, MIS)", "GRPO (int8, uncorrected)")),
        scalars=("notebook_seconds", "heldout.start.truncated", "heldout.GRPO (dapo).truncated",
                 "heldout.start.accuracy_when_finished", "heldout.GRPO (dapo).accuracy_when_finished",
                 "heldout.start.mean_length", "heldout.GRPO (dapo).mean_length"),
    ),
    "10": Reproducible(
        notebook="10_kernel_generation_rl.ipynb", results="10_kernel_generation_rl", items="heldout",
        primary=Claim("SFT + GRPO", "SFT"),
        comparisons=(("SFT + GRPO", "SFT"), ("SFT", "raw model"), ("SFT + GRPO", "raw model")),
        scalars=("notebook_seconds", "sft.seconds", "grpo.seconds", "heldout.SFT.reward", "heldout.SFT + GRPO.reward",
                 "validation.SFT.fast_0", "validation.SFT + GRPO.fast_0"),
        also=("heldout_fast_1", "practised"),
    ),
    "11": Reproducible(
        notebook="11_memory_agents.ipynb", results="11_memory_agents", items="heldout",
        primary=Claim("SFT + GRPO", "SFT"),
        comparisons=(("SFT + GRPO", "SFT"), ("SFT + GRPO", "append-only"), ("SFT", "append-only"),
                     ("SFT + GRPO", "last-write-wins"), ("oracle", "append-only")),
        scalars=("notebook_seconds", "answer_agent.seconds", "sft.seconds", "grpo.seconds",
                 *(f"heldout.{bank}.memories" for bank in ("append-only", "oracle", "SFT", "SFT + GRPO")),
                 *(f"confusion.{manager}.{op}.{op}" for op in ("ADD", "UPDATE", "DELETE", "NOOP")
                   for manager in ("SFT", "SFT + GRPO"))),
        also=("heldout_temporal", "heldout_reader"),
    ),
    "05": Reproducible(
        notebook="05_rl_for_tool_calls.ipynb", results="05_rl_for_tool_calls", items="synthetic_heldout",
        primary=Claim("SFT + GRPO fine", "SFT"),
        comparisons=(("SFT + GRPO fine", "SFT"), ("SFT + GRPO coarse", "SFT"), ("SFT + GRPO fine", "SFT + GRPO coarse"),
                     ("SFT", "raw")),
        scalars=("notebook_seconds", "bfcl.SFT.overall", "bfcl.SFT + GRPO coarse.overall",
                 "bfcl.SFT + GRPO fine.overall"),
        also=("bfcl",),
    ),
    "06": Reproducible(
        notebook="06_multi_turn_agentic_grpo.ipynb", results="06_agentic_grpo", items="heldout",
        primary=Claim("after SFT + GRPO", "after SFT"),
        comparisons=(("after SFT + GRPO", "after SFT"), ("after SFT", "base, with tools")),
        scalars=("notebook_seconds", "heldout.after SFT.calls_per_episode",
                 "heldout.after SFT + GRPO.calls_per_episode"),
    ),
    "07": Reproducible(
        notebook="07_tool_efficiency.ipynb", results="07_tool_efficiency", items="heldout",
        primary=Claim("GRPO, OTC reward", "GRPO, correct reward", measure="tool_calls", expected="lower"),
        comparisons=(("GRPO, correct reward", "after SFT"), ("GRPO, OTC reward", "after SFT"),
                     ("GRPO, OTC reward", "GRPO, correct reward")),
        scalars=("notebook_seconds", *(f"heldout.{stage}.{measure}"
                                       for measure in ("calls_per_episode", "calls_by_label.easy", "calls_by_label.hard")
                                       for stage in ("after SFT", "GRPO, correct reward", "GRPO, OTC reward"))),
    ),
    "08": Reproducible(
        notebook="08_credit_assignment.ipynb", results="08_credit_assignment", items="heldout",
        primary=Claim("GRPO, step-grouped", "after SFT"),
        comparisons=(("GRPO, broadcast", "after SFT"), ("GRPO, discounted", "after SFT"),
                     ("GRPO, step-grouped", "after SFT"), ("GRPO, step-grouped", "GRPO, broadcast"),
                     ("GRPO, discounted", "GRPO, broadcast")),
        scalars=("notebook_seconds", *(f"heldout.{stage}.calls_per_episode" for stage in
                                       ("after SFT", "GRPO, broadcast", "GRPO, discounted", "GRPO, step-grouped"))),
    ),
    "12": Reproducible(
        notebook="12_sql_agent.ipynb", results="12_sql_agent", items="heldout",
        primary=Claim("SFT + GRPO", "SFT"),  # registered in docs/design/12_sql_agent.md before the first run
        comparisons=(("SFT + GRPO", "SFT"), ("SFT", "raw model"), ("SFT + GRPO", "raw model")),
        scalars=("notebook_seconds", "sft.seconds", "grpo.seconds",
                 *(f"heldout.{stage}.sql_errors" for stage in ("SFT", "SFT + GRPO"))),
    ),
    "09": Reproducible(
        notebook="09_agentic_search.ipynb", results="09_agentic_search", items="heldout",
        primary=Claim("SFT + GRPO", "SFT agent"),
        comparisons=(("SFT + GRPO", "SFT agent"), ("SFT + GRPO", "closed-book, cold-started"),
                     ("SFT + GRPO", "one-shot RAG, cold-started"), ("SFT agent", "closed-book, cold-started"),
                     ("SFT agent", "one-shot RAG, cold-started")),
        scalars=("notebook_seconds", "sft.seconds", "runs.retrieved tokens masked.seconds", "runs.trained on.seconds",
                 "ablation.retrieved_token_share", "ablation.first_step_grad_norm.retrieved tokens masked",
                 "ablation.first_step_grad_norm.trained on",
                 *(f"heldout.{stage}.{measure}"
                   for measure in ("calls_per_episode", "by_label.single_hop", "by_label.two_hop", "by_label.comparison",
                                   "by_label.unanswerable")
                   for stage in ("SFT agent", "SFT + GRPO"))),
    ),
}


LORA = Reproducible(
    notebook="04_grpo_on_an_llm.ipynb", results="04_lora", items="heldout", primary=None,
    comparisons=(*((f"LoRA r={r}", "full") for r in (1, 8, 32)), ("full", "start"),
                 *((f"LoRA r={r}", "start") for r in (1, 8, 32))),
)
"""lesson 04's side study, full fine-tuning against LoRA (`course.lora_study`, not a `make reproduce` run): an
estimate of LoRA's regret, so every claim is secondary"""


def study_spec(results: str) -> Reproducible:
    """The spec of a seeds file's study by its results name (`<name>_seeds.json`): a lesson's or `LORA`."""
    specs = {spec.results: spec for spec in (*LESSONS.values(), LORA)}
    if results not in specs:
        raise KeyError(f"no study writes {results}_seeds.json; known: {sorted(specs)}")
    return specs[results]


def _item_ids(evaluations: dict[int, dict[str, Any]], seeds: list[int], stages: list[str]) -> list[str]:
    """The held-out item ids every stage of every seed scored (the same in each), or their positions ("#0", ...)
    when the results file predates ids."""
    seen = {tuple(evaluations[s][stage]["ids"]) for s in seeds for stage in stages if evaluations[s][stage].get("ids")}
    if len(seen) > 1:
        raise ValueError(f"the seeds' stages scored different held-out items ({len(seen)} different id lists)")
    if seen:
        return [str(i) for i in seen.pop()]
    return [f"#{i}" for i in range(len(evaluations[seeds[0]][stages[0]]["correct"]))]


def aggregate(spec: Reproducible, records: dict[int, dict[str, Any]],
              claims: list[Claim] | None = None) -> dict[str, Any]:
    """The multi-seed summary of one lesson's `spec.items` from its per-seed results records (seed → record): the
    stages, the per-item records, the scalars, and each claim's test (`stats.claim_test`; default: the
    `comparisons`, on accuracy). Roles, Holm's adjustment and verdicts are `summarise`'s."""
    seeds = sorted(records)
    evaluations = {s: metric(records[s], spec.items) for s in seeds}
    stages = list(evaluations[seeds[0]])
    for s in seeds:
        if list(evaluations[s]) != stages:
            raise ValueError(f"seed {s} evaluated stages {list(evaluations[s])}, seed {seeds[0]} {stages}")
        sizes = {len(evaluations[s][stage]["correct"]) for stage in stages}
        if sizes != {len(evaluations[seeds[0]][stages[0]]["correct"])}:
            raise ValueError(f"seed {s}: stages scored different numbers of items {sizes}")
    claims = [Claim(a, b) for a, b in spec.comparisons] if claims is None else claims
    claims = [c for c in claims if c.after in stages and c.before in stages]  # a stage the lesson did not evaluate

    def per_item(stage: str, measure: str) -> np.ndarray:  # (seeds, items)
        missing = [s for s in seeds if measure not in evaluations[s][stage]]
        if missing:
            raise ValueError(f"stage {stage!r} has no per-item {measure!r} in seeds {missing}")
        return np.array([evaluations[s][stage][measure] for s in seeds], dtype=float)

    measures = {stage: ["correct", *dict.fromkeys(c.measure for c in claims if stage in (c.after, c.before)
                                                  and c.measure != "correct")] for stage in stages}
    out: dict[str, Any] = {"seeds": seeds, "n_items": int(per_item(stages[0], "correct").shape[1]), "stages": {},
                           "records": {"ids": _item_ids(evaluations, seeds, stages),
                                       "per_item": {stage: {m: per_item(stage, m).tolist() for m in measures[stage]}
                                                    for stage in stages}},
                           "comparisons": {}}
    for stage in stages:
        accuracy = [float(evaluations[s][stage]["accuracy"]) for s in seeds]
        labels = list(evaluations[seeds[0]][stage].get("by_label", {}))
        out["stages"][stage] = {
            "accuracy": {"per_seed": accuracy, **mean_ci(accuracy).to_dict()},
            "by_label": {label: {"per_seed": (v := [float(evaluations[s][stage]["by_label"][label]) for s in seeds]),
                                 **mean_ci(v).to_dict()} for label in labels},
        }
    for claim in claims:
        a, b = per_item(claim.after, claim.measure), per_item(claim.before, claim.measure)
        out["comparisons"][claim.name] = {
            "after": claim.after, "before": claim.before, "measure": claim.measure, **claim_test(a, b),
            "mcnemar_per_seed": [mcnemar(a[i], b[i]) for i in range(len(seeds))] if claim.measure == "correct" else [],
        }
    out["scalars"] = {}
    for path in spec.scalars:
        values = [float(metric(records[s], path)) for s in seeds]
        out["scalars"][path] = {"per_seed": values, **mean_ci(values).to_dict()}
    return out


def _judge(comparison: dict[str, Any], p_value: float, seeds: int, role: str) -> None:
    """Write a claim's role, its p-value for the verdict (Holm-adjusted for a secondary claim) and its verdict,
    in the measure's words ("gain"/"loss" on accuracy, "higher"/"lower" on another measure)."""
    found = claim_verdict(comparison["mean_over_seeds"]["estimate"], p_value, seeds, primary=role == "primary")
    if comparison["measure"] != "correct":
        found = {"gain": "higher", "loss": "lower"}.get(found, found)
    comparison.update(role=role, p_for_verdict=p_value, verdict=found)


def summarise(spec: Reproducible, records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """`aggregate` of the lesson's items with its primary and secondary claims, and of each of its `also`
    measures (under `["also"][path]`, every comparison a secondary claim); the primary claim is judged alone, the secondary
    claims of all of them together, Holm-adjusted (`stats` docstring)."""
    secondary = [c for c in (Claim(a, b) for a, b in spec.comparisons) if c != spec.primary]
    summary = aggregate(spec, records, [*([spec.primary] if spec.primary else []), *secondary])
    summary["rule"] = RULE
    if spec.also:
        # another measure of the same stages: every pair is a claim of its own there, the primary pair included
        summary["also"] = {path: aggregate(replace(spec, items=path, scalars=(), also=()), records)
                           for path in spec.also}
    n_seeds = len(summary["seeds"])
    family = [c for part in (summary, *summary.get("also", {}).values())
              for name, c in part["comparisons"].items()
              if part is not summary or spec.primary is None or name != spec.primary.name]
    for comparison, adjusted in zip(family, holm([c["p_value"] for c in family]), strict=True):
        _judge(comparison, adjusted, n_seeds, "secondary")
    if spec.primary is not None and spec.primary.name in summary["comparisons"]:
        primary = summary["comparisons"][spec.primary.name]
        _judge(primary, primary["p_value"], n_seeds, "primary")
        primary["expected"] = spec.primary.expected
    return summary


def recompute(spec: Reproducible, summary: dict[str, Any]) -> dict[str, Any]:
    """Summarise a multi-seed study again from its own per-item records alone (`records`, and each `also`
    measure's), with the lesson's claims: what a reader does to check a seeds file. Returns the new summary;
    its claims must equal the file's (`tests/test_seed_studies.py`)."""
    if "records" not in summary:
        raise ValueError("this study predates per-item records (old rule): it cannot be recomputed from its file")
    parts = {spec.items: summary, **summary.get("also", {})}
    seeds = summary["seeds"]
    records: dict[int, dict[str, Any]] = {seed: {"metrics": {}} for seed in seeds}
    for path, part in parts.items():
        ids = part["records"]["ids"]
        for index, seed in enumerate(seeds):
            node = records[seed]["metrics"]
            for key in path.split(".")[:-1]:
                node = node.setdefault(key, {})
            node[path.split(".")[-1]] = {
                stage: {"ids": ids, "accuracy": float(np.mean(measures["correct"][index])),
                        **{measure: values[index] for measure, values in measures.items()}}
                for stage, measures in part["records"]["per_item"].items()}
    return summarise(replace(spec, scalars=()), records)


def reproduces_seed(record: dict[str, Any], summary: dict[str, Any], items: str) -> bool:
    """Whether a single run's results (`record`, e.g. the committed `<lesson>.json`) give item for item what a
    seeds file's per-item records hold for the same seed: the same item ids, and at every stage the study recorded,
    the same outcome on every item. False for a seed the study did not run or a study without records (old rule).
    items: the results path the study's items come from (`Reproducible.items`, e.g. "heldout")."""
    seed = record.get("seed")
    if "records" not in summary or seed not in summary["seeds"]:
        return False
    index, ids = summary["seeds"].index(seed), summary["records"]["ids"]
    stages = metric(record, items)
    for stage, measures in summary["records"]["per_item"].items():
        if stage not in stages:
            return False
        run_ids = [str(i) for i in stages[stage].get("ids") or [f"#{i}" for i in range(len(stages[stage]["correct"]))]]
        if run_ids != [str(i) for i in ids]:
            return False
        if [float(x) for x in stages[stage]["correct"]] != [float(x) for x in measures["correct"][index]]:
            return False
    return True


def claims_of(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every claim of a summary by name ("<measure>: " before an `also` measure's), for comparing two summaries."""
    return {**summary["comparisons"], **{f"{measure}: {name}": c for measure, part in summary.get("also", {}).items()
                                         for name, c in part["comparisons"].items()}}


def variant_name(results: str, parameters: dict[str, Any] | None) -> str:
    """The results name of a multi-seed run: `<results>_seeds` for the lesson as committed, and
    `<results>_tune_<name>-<value>_...` for a variant (parameters set on the command line, e.g. a tuning probe
    with SPLIT="validation"). A variant's name does not end in `_seeds`, so the README's claims never read it."""
    if not parameters:
        return f"{results}_seeds"
    tag = "_".join(f"{key.lower()}-{value}" for key, value in sorted(parameters.items()))
    if not all(c.isalnum() or c in "._-" for c in tag):
        raise ValueError(f"parameter values must be plain words or numbers to name a results file: {parameters}")
    return f"{results}_tune_{tag}"


def parse_parameter(text: str) -> tuple[str, Any]:
    """NAME=VALUE from the command line → (NAME, value): a number, true/false/none, or else the text itself."""
    name, sep, raw = text.partition("=")
    if not sep or not name.isidentifier() or not name.isupper():
        raise ValueError(f"expected NAME=VALUE with an upper-case notebook parameter name, got {text!r}")
    try:
        value: Any = json.loads(raw.lower() if raw.lower() in ("true", "false") else raw)
    except json.JSONDecodeError:
        value = None if raw.lower() == "none" else raw
    return name, value


def _settings(parameters: dict[str, Any] | None) -> str:
    """The command line's ` --set NAME=VALUE` options for `parameters` (a command that reruns the variant)."""
    return "".join(f" --set {key}={value}" for key, value in sorted((parameters or {}).items()))


def reproduce(lesson: str, seeds: list[int], profile: str = "auto", out_root: str | Path = "runs",
              notebooks_dir: str | Path | None = None,
              parameters: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Run a lesson's notebook once per seed and write its multi-seed results file; returns (run folder,
    results file). A seed whose notebook fails stops the command: a summary over the seeds that happened to
    work would hide the failure.

    parameters: other values for the notebook's "parameters" cell (e.g. {"SPLIT": "validation", "BETA": 0.5}):
    a variant, written to `variant_name(...)`; it never replaces the lesson's committed results file."""
    # imported here, not at the top: the lessons import this module for its tables, and the notebook runner
    # brings nbformat's schema validator (1.3 s of grammar building) into every lesson's kernel
    from agentrl_lite.course.course_runs import _new_run_dir, write_runs_summary
    from agentrl_lite.course.runner import _environ, execute_notebook

    if lesson not in LESSONS:
        raise KeyError(f"lesson {lesson!r} cannot be reproduced yet; choose one of {sorted(LESSONS)}")
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ValueError(f"seeds must be distinct and at least one: {seeds}")
    if parameters and "SEED" in parameters:
        raise ValueError("SEED is set by --seeds, not as a parameter")
    spec = LESSONS[lesson]
    profile = resolve_profile(profile)
    command = os.environ.get("AGENTRL_COMMAND") or (
        f"agentrl-lite reproduce {lesson} --profile {profile} --seeds {' '.join(map(str, seeds))}{_settings(parameters)}")
    run_dir = _new_run_dir(Path(out_root))
    records: dict[int, dict[str, Any]] = {}
    for seed in seeds:
        seed_dir = (run_dir / f"seed_{seed}").resolve()
        with _environ({"AGENTRL_RESULTS": str(seed_dir), "AGENTRL_COMMAND": f"{command}  # seed {seed}"}):
            run = execute_notebook(Path(notebooks_dir or course_root() / "notebooks") / spec.notebook, seed_dir / spec.notebook, profile,
                                   timeout_per_cell=CELL_TIMEOUT_S[profile],
                                   parameters={**(parameters or {}), "SEED": seed})
        if run.status != "ok":
            raise RuntimeError(f"seed {seed}: {spec.notebook} failed ({run.error}); executed copy in {seed_dir}")
        records[seed] = json.loads(result_path(seed_dir, profile, spec.results).read_text())
        # the same summary a course run writes, so `course_runs.record_course_run(seed_dir)` can take its runtime
        write_runs_summary(seed_dir, profile, f"{command}  # seed {seed}", [run])
        if seed == NOTEBOOK_SEED and profile != "smoke" and not parameters:  # the notebook's own committed run too
            write_results(spec.results, records[seed]["metrics"], profile=profile, model=records[seed]["model"],
                          seed=seed, command=records[seed]["command"])
            if profile == "cpu":  # and its outputs become the lesson's site page
                from agentrl_lite.course.executed import keep_executed

                keep_executed(seed_dir / spec.notebook, spec.results)
    return run_dir, _write_summary(spec, records, run_dir, profile, command, parameters)


def _write_summary(spec: Reproducible, records: dict[int, dict[str, Any]], run_dir: Path, profile: str,
                   command: str, parameters: dict[str, Any] | None = None) -> Path:
    summary = summarise(spec, records)
    summary["run_dir"] = run_dir.name
    summary["parameters"] = dict(parameters or {})  # the notebook parameters set besides SEED ({}: as committed)
    summary["notebook"] = spec.notebook
    summary["seed_commands"] = {str(seed): record["command"] for seed, record in records.items()}
    seeds = sorted(records)
    # the lesson's runtime against its budget: its slowest seed (every seed's is under scalars when the spec asks)
    summary["notebook_seconds"] = max(float(records[seed]["metrics"].get("notebook_seconds", 0.0)) for seed in seeds)
    # and its memory: the largest of the seeds' kernels' own peaks (None before they recorded one), never the peak of
    # this process, which only summarises (`write_results` would record that)
    peaks = [records[seed]["metrics"]["peak_rss_mb"] for seed in seeds if records[seed]["metrics"].get("peak_rss_mb")]
    summary["peak_rss_mb"] = max(peaks) if peaks else None
    # the machine the seeds ran on, not the one summarising them (a gpu run is summarised back on the cpu machine)
    devices = list(dict.fromkeys(str(records[seed].get("device")) for seed in seeds if records[seed].get("device")))
    return write_results(variant_name(spec.results, parameters), summary, profile=profile, model=records[seeds[0]]["model"],
                         seed=seeds[0], command=command, device=" / ".join(devices) or None)


def resummarise(lesson: str, run_dir: str | Path, parameters: dict[str, Any] | None = None) -> Path:
    """Summarise the seed runs of an earlier `reproduce` again with the lesson's current claims and measures
    (`LESSONS`), without running a notebook: a claim added after the runs needs no new runs. Reads
    run_dir/seed_<n>/<results>.json; returns the multi-seed results file. parameters: those the runs were made
    with, for a tuning variant (its results name, `variant_name`)."""
    spec, run_dir = LESSONS[lesson], Path(run_dir)
    records = {}
    for folder in sorted(run_dir.glob("seed_*")):  # a cpu seed writes into its folder, a gpu seed into folder/gpu
        found = [path for path in (result_path(folder, p, spec.results) for p in ("cpu", "gpu"))
                 if path.is_file()]
        if found:
            records[int(folder.name.removeprefix("seed_"))] = json.loads(found[0].read_text())
    if not records:
        raise FileNotFoundError(f"no seed_<n>/{spec.results}.json under {run_dir}: is it a `reproduce {lesson}` run?")
    profile = {record["profile"] for record in records.values()}
    if len(profile) != 1:
        raise ValueError(f"the seeds of {run_dir} ran in different profiles: {sorted(profile)}")
    command = os.environ.get("AGENTRL_COMMAND") or f"agentrl-lite reproduce {lesson} --from-run {run_dir}{_settings(parameters)}"
    return _write_summary(spec, records, run_dir, profile.pop(), command, parameters)


def verdict(comparison: dict[str, Any]) -> str:
    """A claim's verdict: the one its summary stores (`summarise`, the current rule), or, for a study written
    before it, the old rule's (both intervals, over seeds and over items, exclude zero on the same side; no
    multiplicity control), marked "old rule". A zero-width interval over seeds (every seed the same difference) is
    no evidence of a spread it never measured: "not shown (zero-width interval; old rule)"."""
    if "verdict" in comparison:
        return comparison["verdict"]
    seeds, items = comparison["mean_over_seeds"], comparison["paired_bootstrap_over_items"]
    if seeds["high"] - seeds["low"] <= 1e-12:
        return "not shown (zero-width interval; old rule)"
    if seeds["low"] > 0 and items["low"] > 0:
        return "gain (old rule)"
    if seeds["high"] < 0 and items["high"] < 0:
        return "loss (old rule)"
    if items["low"] > 0 or items["high"] < 0:
        return "not shown (items only; old rule)"
    return "not shown (old rule)"


def comparison_in_words(name: str, comparison: dict[str, Any]) -> str:
    """One comparison of a multi-seed summary in a sentence, for a lesson's "What you should see": on how many
    seeds the difference was above and below zero, the mean with its t interval over seeds, the bootstrap interval
    (over seeds and items; over items for a study written before the rule), whether each excludes zero, the
    verdict and, under the rule, the claim's role."""
    per_seed = comparison["difference_per_seed"]
    seeds = comparison["mean_over_seeds"]
    items = comparison.get("bootstrap_over_seeds_and_items") or comparison["paired_bootstrap_over_items"]

    def interval(i: dict[str, float]) -> str:
        return f"[{i['low']:+.3f}, {i['high']:+.3f}] ({'excludes' if i['low'] > 0 or i['high'] < 0 else 'includes'} 0)"

    return (f"{name}: higher on {sum(d > 0 for d in per_seed)} of {len(per_seed)} seeds, lower on "
            f"{sum(d < 0 for d in per_seed)}; mean {seeds['estimate']:+.3f}, 95% t interval over seeds "
            f"{interval(seeds)}, bootstrap {interval(items)} -> {verdict(comparison)}"
            + (f" ({comparison['role']} claim)" if "role" in comparison else ""))


def primary_claim(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The primary claim of a multi-seed summary (None for a study written before the rule)."""
    return next((c for c in summary.get("comparisons", {}).values() if c.get("role") == "primary"), None)


def seed_study_tables(summary: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every table of a multi-seed summary, titled, for a lesson's "What you should see": the stages, the
    comparisons, each `also` measure's comparisons, and the scalars (per seed, mean, t interval)."""
    tables = [("held-out accuracy per stage", stage_rows(summary)), ("claims", comparison_rows(summary))]
    tables += [(f"{measure}: claims", comparison_rows(also)) for measure, also in summary.get("also", {}).items()]
    if summary.get("scalars"):
        tables.append(("other measures", [
            {"measure": k, "per seed": ", ".join(f"{x:.3g}" for x in v["per_seed"]), "mean": round(v["estimate"], 3),
             "95% t interval": f"[{v['low']:.3g}, {v['high']:.3g}]"} for k, v in summary["scalars"].items()]))
    return tables


def _interval(d: dict[str, float], digits: int = 3) -> str:
    return f"{d['estimate']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def stage_rows(summary: dict[str, Any], labels: bool = True) -> list[dict[str, Any]]:
    """Table rows of a multi-seed summary's stages: each seed's held-out accuracy, the mean and its interval,
    and the mean per label."""
    rows = []
    for stage, s in summary["stages"].items():
        acc = s["accuracy"]
        row = {"stage": stage, **{f"seed {k}": round(v, 3) for k, v in zip(summary["seeds"], acc["per_seed"],
                                                                         strict=True)},
               "mean": round(acc["estimate"], 3), "95% interval (t, seeds)": f"[{acc['low']:.3f}, {acc['high']:.3f}]"}
        if labels:
            row.update({f"mean {label}": round(v["estimate"], 3) for label, v in s["by_label"].items()})
        rows.append(row)
    return rows


def label_change_rows(summary: dict[str, Any], before: str, after: str, header: str = "label",
                      names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """What changed from stage `before` to stage `after`, label by label (a task's kinds or templates), seed by
    seed: both stages' per-seed accuracy on the label, in how many seeds it rose, stayed level or fell, and the
    change of the mean. Descriptive: a label's change is not a tested claim unless the lesson registers it.
    header: the first column's title ("kind", "template"); names: a label's name in the table, if not the label."""
    was, now = summary["stages"][before]["by_label"], summary["stages"][after]["by_label"]
    rows = []
    for label in was:
        a, b = was[label]["per_seed"], now[label]["per_seed"]
        rows.append({header: (names or {}).get(label, label),
                     f"{before}, per seed": ", ".join(f"{x:.2f}" for x in a),
                     f"{after}, per seed": ", ".join(f"{x:.2f}" for x in b),
                     "seeds up / level / down": "{} / {} / {}".format(
                         *(sum(np.sign(y - x) == s for x, y in zip(a, b, strict=True)) for s in (1, 0, -1))),
                     "mean change": f"{now[label]['estimate'] - was[label]['estimate']:+.3f}"})
    return rows


def comparison_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows of a multi-seed summary's claims: the role (primary, or secondary with Holm's adjustment),
    per-seed differences, the t interval over seeds, the bootstrap interval (over seeds and items; over items
    for a study under the old rule), the p-value the verdict used, the items fixed and broken and McNemar's p per
    seed, and the verdict."""
    rows = []
    for name, c in summary["comparisons"].items():
        current = "role" in c
        bootstrap = c["bootstrap_over_seeds_and_items"] if current else c["paired_bootstrap_over_items"]
        p = c.get("p_for_verdict")
        rows.append({
            "claim": name, "role": c["role"] if current else "old rule",
            "difference per seed": ", ".join(f"{d:+.3f}" for d in c["difference_per_seed"]),
            "mean over seeds [95% t]": _interval(c["mean_over_seeds"]),
            "bootstrap [95%]": _interval(bootstrap) + ("" if current else " (items)"),
            "p (Holm if secondary)": "—" if p is None else f"{p:.2g}",
            "fixed/broken per seed": ", ".join(f"{m['fixed']}/{m['broken']}" for m in c["mcnemar_per_seed"]
                                               if "fixed" in m) or "—",
            "McNemar p per seed": ", ".join(f"{m['p_value']:.2g}" for m in c["mcnemar_per_seed"]) or "—",
            "verdict": verdict(c)})
    return rows


def tuning_rows(results: str, measures: dict[str, tuple[str, ...]],
                results_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per tuning variant of a lesson (`results/lessons/<results>_tune_*.json`, `make reproduce SET=...`): its
    parameters, seeds, date and each measure's value per seed, for a lesson's "how we got here" table.

    measures: label → key path into the summary, e.g. {"OTC accuracy": ("stages", "GRPO, OTC reward", "accuracy",
    "per_seed")} (a path of keys, since the summary's keys may hold dots)."""
    rows = []
    folder = result_path(Path(results_dir) if results_dir else results_root(True), "cpu", results).parent
    for path in sorted(folder.glob(f"{results}_tune_*.json")):
        record = json.loads(path.read_text())
        summary = record["metrics"]
        row: dict[str, Any] = {"settings": ", ".join(f"{k}={v}" for k, v in summary.get("parameters", {}).items())
                               or path.stem.removeprefix(f"{results}_tune_"),
                               "seeds": ", ".join(map(str, summary["seeds"])), "date": record["date"][:10]}
        for label, keys in measures.items():
            value: Any = summary
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            row[label] = ", ".join(f"{v:.2f}" for v in value) if isinstance(value, list) \
                else round(value, 2) if isinstance(value, float) else value
        rows.append(row)
    return rows

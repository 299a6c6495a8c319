"""Generated documentation (course tooling): the tables of README.md and docs/results.md, rendered from results
files, never typed by hand.

    agentrl-lite docs          # rewrite every generated block of README.md and docs/results.md
    agentrl-lite docs --check  # change nothing; exit 1 when a file differs from its rendering

A block sits between `<!-- NAME:start -->` and `<!-- NAME:end -->`; NAME is the results file it is rendered
from, or a table built from several (`lesson_table`, `lesson_headlines`, `seed_studies`). tests/test_results.py
runs the check, so the documents cannot drift from the files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agentrl_lite.course.results import metric, result_path
from agentrl_lite.paths import course_root

DOCUMENTS = ("README.md", "docs/results.md")
"""the files, relative to the checkout, whose generated blocks `update_docs` renders"""
REGENERATE = "agentrl-lite docs"
"""the one command that rewrites every generated table"""


def render_bench_grpo_step(results: dict) -> str:
    """The GRPO-step and rollout-throughput tables of benchmarks/grpo_step.py."""
    m = results["metrics"]
    single, multi = m["single_turn"], m["multi_turn_tools"]

    def step_row(name: str, r: dict, target: float) -> str:
        return (f"| {name} | {r['trl_seconds_per_step']:.1f} s (sampling {r['trl_sampling_seconds']:.1f}, update "
                f"{r['trl_update_seconds']:.1f}) | {r['ours_seconds_per_step']:.1f} s (sampling "
                f"{r['ours_sampling_seconds']:.1f}, update {r['ours_update_seconds']:.1f}) | "
                f"**{r['speedup']:.2f}×** ({target:.1f}) |")

    lines = [
        f"Command: `{results['command']}`, {results['device']}, {results['date'][:10]}, "
        f"{single['timed_steps']} timed steps after one warm-up. Ours samples with a "
        f"{single['ours_sampler_dtype'] or 'fp32'} copy of the policy (mean importance weight "
        f"{single['ours_is_ratio_mean']:.4f}).",
        "",
        "| GRPO step (1 prompt × 8, ≤48 tokens per turn) | TRL 1.16 | ours | speedup (target) |",
        "|---|---:|---:|---:|",
        step_row("single-turn", single, 2.0),
        step_row("multi-turn, calculator (≤3 turns)", multi, 3.0),
        "",
        f"| rollout throughput, tok/s (matmul bound {m['matmul_bound_tokens_per_s']:.0f} fp32, "
        f"{m['matmul_bound_bf16_tokens_per_s']:.0f} bf16) | `generate` | engine, fp32 | engine, bf16 copy | "
        "bf16 copy / generate | bf16 copy / fp32 bound |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    t = m["rollout_throughput"]
    for batch in (8, 32, 64):
        for turns in (1, 3):
            key = f"batch{batch}_turns{turns}"
            old, fp32, bf16 = t[f"{key}_generate"], t[f"{key}_kv_cache"], t[f"{key}_kv_cache_bf16"]
            lines.append(f"| batch {batch}, {turns} turn{'s' if turns > 1 else ''} | {old['tokens_per_s']:.0f} | "
                         f"{fp32['tokens_per_s']:.0f} | {bf16['tokens_per_s']:.0f} | "
                         f"{bf16['speedup_over_generate']:.2f}× | {bf16['share_of_matmul_bound']:.0%} |")
    rss = m["peak_rss_batch64"]
    lines += [
        "",
        "Peak RSS of a batch-64 rollout above the loaded model (fresh processes, VmHWM): "
        + ", ".join(f"`{name}` {rss[name]['rollout_extra_mb']:.0f} MB" for name in rss) + ".",
    ]
    return "\n".join(lines)


def render_bench_engine_shared_prefix(results: dict) -> str:
    """One sentence from benchmarks/engine_shared_prefix.py: the engine's shared prefix stored once."""
    m = results["metrics"]
    old, new = (m["best"][name] for name in m["runs"])
    return (f"Measured by `{results['command']}` ({results['device']}, {results['date'][:10]}; {m['rows']} episodes "
            f"with a {m['prompt_tokens']:.0f}-token shared prompt, {m['turns']} turns of {m['tokens_per_turn']} "
            f"tokens, the best of {len(next(iter(m['runs'].values())))} fresh processes each): peak memory above the "
            f"loaded model {old['above_loaded_mb']:.0f} MB with the prefix copied to every row, "
            f"{new['above_loaded_mb']:.0f} MB with it stored once; sampling took {new['seconds']:.0f} s against "
            f"{old['seconds']:.0f} s ({m['time_ratio']:.2f}×).")


def render_course_cpu(results: dict) -> str:
    """Every lesson's wall time in the last cpu course run(s), against the 20-minute budget."""
    m = results["metrics"]
    devices = list(dict.fromkeys(n.get("device", results["device"]) for n in m["notebooks"].values()))
    lines = [f"Last updated {results['date'][:10]}; each row is the lesson's latest cpu run (`runs/<folder>`, not "
             "committed), its command in `results/bench/course_cpu.json`.", "",
             "| lesson | cpu runtime | within the budget | peak memory | machine | run |", "|---|---:|:---:|---:|---|---|"]
    for name, latest in m["notebooks"].items():
        for n in [latest, *([latest["other_machine"]] if "other_machine" in latest else [])]:
            ok = "yes" if n["status"] == "ok" and n["seconds"] <= m["budget_seconds_per_notebook"] else "**no**"
            memory = f"{n['peak_rss_mb'] / 1024:.1f} GB" if n.get("peak_rss_mb") else "not measured"
            machine = _short_device(n.get("device", results["device"])) + {True: ", bf16", False: ", fp32"}.get(n.get("bf16"), "")
            mark = " (contended)" if n.get("contended") else ""
            lines.append(f"| {name.removesuffix('.ipynb')} | {n['seconds'] / 60:.1f} min{mark} | {ok} | {memory} | "
                         f"{machine} | `runs/{n['run_dir']}` |")
    slower = m.get("total_seconds_slower_machine", m["total_seconds"])
    both = (f" (each lesson on its slower machine: {slower / 60:.0f} min)"
            if round(slower / 60) != round(m["total_seconds"] / 60) else "")
    lines.append(f"| **all lessons** | **{m['total_seconds'] / 60:.0f} min**{both} | | | | |")
    contended = {name.removesuffix(".ipynb"): n["contended"] for name, n in m["notebooks"].items() if n.get("contended")}
    if contended:
        lines += ["", "Contended runs (their runtime is too long): "
                  + "; ".join(f"{name}: {why}" for name, why in contended.items()) + "."]
    if len(devices) > 1:
        lines += ["", "The rows were measured on different machines (" + "; ".join(devices) + "), and runtimes of "
                  "different machines do not compare. A machine with bf16 instructions trains under bf16 autocast and "
                  "samples with a bf16 copy; one without runs every lesson in fp32 (`results/bench/bench_bf16.json`), "
                  "slower and with other memory peaks."]
    if any("other_machine" in n for n in m["notebooks"].values()):
        lines += ["", "A lesson with two rows was measured on a machine of each kind; the newer run is first."]
    peaks = {name: max((r for r in (n, n.get("other_machine") or {}) if r.get("peak_rss_mb")),
                       key=lambda r: r["peak_rss_mb"], default=n) for name, n in m["notebooks"].items()}
    return "\n".join(lines + ["", memory_statement(peaks)])


def _short_device(device: str) -> str:
    """"Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)" → "Intel Xeon (2 cores)"; "AMD EPYC (2 cores)" as it is."""
    words = device.replace("(R)", "").replace("(TM)", "").split()
    cores = device[device.rfind("("):] if device.endswith("cores)") else ""
    return " ".join(words[:2] + ([cores] if cores and cores not in " ".join(words[:2]) else []))


RAM_SIZES_GB = (8, 12, 16, 24, 32, 64)
"""the machine sizes the README's advice rounds up to"""
SYSTEM_GB = 2
"""what the operating system, the Jupyter server and a browser hold beside a lesson's kernel"""


def memory_statement(notebooks: dict[str, dict]) -> str:
    """What RAM the lessons need, from the measured peaks of their kernels against the course's budget."""
    from agentrl_lite.course.budgets import MEMORY_BUDGET_MB

    budget = MEMORY_BUDGET_MB["cpu"]
    measured = {name.removesuffix(".ipynb"): n["peak_rss_mb"] for name, n in notebooks.items() if n.get("peak_rss_mb")}
    unmeasured = [name.removesuffix(".ipynb") for name, n in notebooks.items() if not n.get("peak_rss_mb")]
    text = (f"**Memory.** A lesson's kernel has a budget of {budget / 1024:.0f} GB (`make test` and a smoke run fail a "
            "notebook above it, a cpu run flags it in its report). The measure is the kernel's resident memory plus what "
            "the processes it starts hold, a page they share counted once (PSS where Linux reports it).")
    if measured:
        heaviest = max(measured, key=measured.get)
        over = [name for name, mb in measured.items() if mb > budget]
        text += (f" Measured in the cpu profile: the heaviest is {heaviest} at {measured[heaviest] / 1024:.1f} GB; "
                 + (f"over the budget: {', '.join(over)}." if over else "none is over the budget."))
        need = max(measured[heaviest], budget) / 1024 + SYSTEM_GB  # the kernel beside the system, Jupyter and a browser
        ram = next((size for size in RAM_SIZES_GB if size >= need), RAM_SIZES_GB[-1])
        text += (f" So the smoke profile runs on a machine with {RAM_SIZES_GB[0]} GB of RAM; every lesson in the cpu "
                 f"profile needs {ram} GB (the heaviest peak plus about {SYSTEM_GB} GB for everything else).")
    if unmeasured:
        text += f" Not measured yet: {', '.join(unmeasured)}."
    return text


HEADLINES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "01_tool_calling": ("held-out arithmetic accuracy", [
        ("raw, calculator offered", "accuracy_raw_with_tool"), ("after cold-start SFT", "accuracy_after_sft")]),
    "04_grpo_on_an_llm": ("held-out small-arithmetic accuracy", [
        ("before", "heldout_before.accuracy"), ("ours, dapo", "ours.dapo.heldout_after.accuracy"),
        ("ours, grpo", "ours.grpo.heldout_after.accuracy"), ("ours, dr_grpo", "ours.dr_grpo.heldout_after.accuracy"),
        ("TRL, dapo", "trl_dapo.heldout_after.accuracy")]),
    "05_rl_for_tool_calls": ("synthetic held-out function calls, accuracy", [
        ("raw", "synthetic_heldout.raw.accuracy"), ("SFT", "synthetic_heldout.SFT.accuracy"),
        ("SFT + GRPO coarse", "synthetic_heldout.SFT + GRPO coarse.accuracy"),
        ("SFT + GRPO fine", "synthetic_heldout.SFT + GRPO fine.accuracy"),
        ("BFCL overall, SFT", "bfcl.SFT.overall"), ("BFCL overall, SFT + GRPO fine", "bfcl.SFT + GRPO fine.overall")]),
    "06_agentic_grpo": ("held-out two-step word problems, accuracy", [
        ("base with tools", "heldout.base, with tools.accuracy"), ("SFT", "heldout.after SFT.accuracy"),
        ("SFT + GRPO", "heldout.after SFT + GRPO.accuracy")]),
    "07_tool_efficiency": ("held-out accuracy / calculator calls per question", [
        ("SFT", "heldout.after SFT.accuracy"), ("SFT calls", "heldout.after SFT.calls_per_episode"),
        ("GRPO correctness reward", "heldout.GRPO, correct reward.accuracy"),
        ("calls", "heldout.GRPO, correct reward.calls_per_episode"),
        ("GRPO OTC reward", "heldout.GRPO, OTC reward.accuracy"), ("calls", "heldout.GRPO, OTC reward.calls_per_episode")]),
    "08_credit_assignment": ("held-out accuracy per credit rule", [
        ("SFT", "heldout.after SFT.accuracy"), ("broadcast", "heldout.GRPO, broadcast.accuracy"),
        ("discounted", "heldout.GRPO, discounted.accuracy"), ("step-grouped", "heldout.GRPO, step-grouped.accuracy")]),
    "10_kernel_generation_rl": ("held-out operators: fast_0 (correct) / fast_1 (correct and faster than PyTorch)", [
        ("raw", "heldout.raw model.fast_0"), ("SFT", "heldout.SFT.fast_0"), ("SFT + GRPO", "heldout.SFT + GRPO.fast_0"),
        ("fast_1 SFT", "heldout.SFT.fast_1"), ("fast_1 SFT + GRPO", "heldout.SFT + GRPO.fast_1")]),
    "11_memory_agents": ("held-out exact match of the frozen answer agent, by the bank it reads / on temporal questions", [
        ("append-only", "heldout.append-only.accuracy"), ("last-write-wins", "heldout.last-write-wins.accuracy"),
        ("oracle", "heldout.oracle.accuracy"), ("SFT manager", "heldout.SFT.accuracy"),
        ("SFT + GRPO manager", "heldout.SFT + GRPO.accuracy"),
        ("temporal append-only", "heldout_temporal.append-only.accuracy"),
        ("temporal SFT + GRPO", "heldout_temporal.SFT + GRPO.accuracy")]),
}
"""results file → (what is measured, [(label, dotted metric path)]) for the README's headline table"""


NO_LEARNING_CLAIM = ("00", "02")
"""lessons that train nothing they make a claim about"""


def lesson_status(lesson: str, results_dir: Path) -> str:
    """The README's status mark, by one rule: ✅ when the lesson claims no learning, its own results file holds
    ≥ 3 seeds (lessons 01 and 03: seconds per seed), or its primary claim holds (a multi-seed study whose
    primary claim's verdict is the one the lesson predicted, `reproduce.summarise`); 🟡 when it runs with a
    committed result but its primary claim is not shown, or its study predates the rule (no primary claim);
    ◻ when nothing is committed yet."""
    from agentrl_lite.course.reproduce import LESSONS, primary_claim

    folder = results_dir / "lessons"
    seeds_files = sorted(folder.glob(f"{lesson}_*_seeds.json"))
    # the lesson's own results file: named after its notebook or its study (side studies, e.g. a cold-start
    # study with its own seeds, are not the lesson's claim)
    names = {p.stem for p in (results_dir.parent / "notebooks").glob(f"{lesson}_*.ipynb")}
    names |= {spec.results for key, spec in LESSONS.items() if key == lesson}
    own = [folder / f"{name}.json" for name in sorted(names) if (folder / f"{name}.json").is_file()]
    if not own and not seeds_files:
        return "◻"
    if lesson in NO_LEARNING_CLAIM or any(len(json.loads(p.read_text())["metrics"].get("seeds", [])) >= 3 for p in own):
        return "✅"
    for path in seeds_files:
        primary = primary_claim(json.loads(path.read_text())["metrics"])
        if primary and primary["verdict"] == primary.get("expected", "gain"):
            return "✅"
    return "🟡"


def _title(notebook: Path) -> str:
    """A lesson's title: its first heading without the number ("# 04 · GRPO on an LLM" → "GRPO on an LLM")."""
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            first = "".join(cell["source"]).splitlines()[0]
            return first.lstrip("# ").split("·", 1)[-1].strip()
    return notebook.stem[3:].replace("_", " ")


def render_lesson_table(results_dir: Path) -> str:
    """One short line per lesson: its status mark (`lesson_status`), the runtime of its last cpu run against the
    20-minute budget, and links to the notebook and its design page."""
    course = json.loads(result_path(results_dir, "cpu", "course_cpu").read_text())["metrics"]
    root = results_dir.parent
    lines = ["| # | lesson | status | last cpu run | design notes |", "|---|---|:---:|---|---|"]
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        run = course["notebooks"].get(notebook.name)
        if run is None:
            cpu = "not run yet"
        else:
            ok = run["status"] == "ok" and run["seconds"] <= course["budget_seconds_per_notebook"]
            cpu = f"{run['seconds'] / 60:.0f} min" + ("" if ok else " (over budget)")
        title = _title(notebook)
        design = root / "docs" / "design" / f"{notebook.stem}.md"
        notes = f"[design](docs/design/{design.name})" if design.exists() else ""
        lesson = notebook.stem[:2]
        lines.append(f"| {lesson} | [{title}](notebooks/{notebook.name}) | {lesson_status(lesson, results_dir)} | "
                     f"{cpu} | {notes} |")
    return "\n".join(lines)


def render_lesson_headlines(results_dir: Path) -> str:
    """One row per lesson with an RL or SFT result: the committed cpu run's headline numbers and provenance."""
    lines = ["| lesson | measured | values | run |", "|---|---|---|---|"]
    for name, (what, fields) in HEADLINES.items():
        record = json.loads(result_path(results_dir, "cpu", name).read_text())
        values = "; ".join(f"{label} {metric(record, path):.2f}" for label, path in fields)
        lines.append(f"| {name[:2]} | {what} | {values} | seed {record['seed']}, {record['date'][:10]}, "
                     f"`results/lessons/{name}.json` |")
    return "\n".join(lines)


def render_seed_studies(results_dir: Path) -> str:
    """Every committed multi-seed study (`make reproduce`): each claim's role (primary, or secondary with Holm's
    adjustment within the lesson), difference per seed, interval over seeds, bootstrap interval, p-value and
    verdict (`reproduce.comparison_rows`); a study written before the rule says "old rule"."""
    from agentrl_lite.course.reproduce import comparison_rows

    paths = [p for p in sorted((results_dir / "lessons").glob("*_seeds.json"))
             if "comparisons" in json.loads(p.read_text())["metrics"]]
    if not paths:
        return "No multi-seed study is committed yet."
    lines = ["| lesson | claim | role | difference per seed | mean over seeds [95% t] | bootstrap [95%] | "
             "p (Holm if secondary) | verdict | run |", "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        record = json.loads(path.read_text())
        seeds = ", ".join(map(str, record["metrics"]["seeds"]))
        rows = [*comparison_rows(record["metrics"]),  # and a lesson's second measure, named (lesson 10's fast_1)
                *({**row, "claim": f"{measure}: {row['claim']}"}
                  for measure, summary in record["metrics"].get("also", {}).items() for row in comparison_rows(summary))]
        for row in rows:
            lines.append(f"| {path.name[:2]} | {row['claim']} | {row['role']} | {row['difference per seed']} | "
                         f"{row['mean over seeds [95% t]']} | {row['bootstrap [95%]']} | "
                         f"{row['p (Holm if secondary)']} | {row['verdict']} | "
                         f"seeds {seeds}, {record['date'][:10]}, `results/lessons/{path.name}` |")
    return "\n".join(lines)


def render_bench_test_suite(results: dict) -> str:
    """The test suite's wall time, by part, from benchmarks/suite_time.py's reading of a `make test` log (and of a
    `make unit` log when one was given)."""
    from agentrl_lite.course.budgets import BUDGET_S, SMOKE_WITHOUT_FAST_BF16

    m = results["metrics"]
    lessons = {n: t for n, t in m["notebook_seconds"].items() if n.startswith("notebooks/")}
    slowest = max(lessons, key=lessons.get)
    over = sorted(n.removeprefix("notebooks/").removesuffix(".ipynb")[:2] for n, t in lessons.items() if t > 60)
    outcome = f"{m['passed']} passed" + (f", **{m['failed']} failed**" if m["failed"] else "")
    bf16 = {True: ", fast bf16", False: ", no fast bf16"}.get(m.get("fast_bf16"), "")
    runner = " under nbval" if m.get("lessons_runner") == "nbval" else ""
    unit = (f" `make unit` took {m['unit_seconds'] / 60:.1f} min of tests on the same machine."
            if "unit_seconds" in m else "")
    workers = m.get("workers", 1)
    split = f" on {workers} workers, whose time adds up to" if workers > 1 else ":"
    return (f"Measured `make test` ({_short_device(results['device'])}{bf16}, {results['date'][:10]}; {m['note']}): "
            f"{m['seconds'] / 60:.0f} min of tests ({outcome}){split} the lessons{runner} "
            f"{m['lessons_seconds'] / 60:.1f} min (the slowest, "
            f"{slowest.removeprefix('notebooks/').removesuffix('.ipynb')}, {lessons[slowest]:.0f} s; over 60 s: "
            f"{', '.join(over) or 'none'}), the solutions {m['solutions_seconds'] / 60:.1f} min, the exercises "
            f"{m['exercises_seconds'] / 60:.1f} min and everything else {m['other_tests_seconds'] / 60:.1f} min."
            f"{unit} A smoke notebook fails over {BUDGET_S['smoke']} s × 1.5 "
            f"({BUDGET_S['smoke'] * SMOKE_WITHOUT_FAST_BF16:.0f} s × 1.5 on a CPU without fast bf16), stretched by the slowdown the machine "
            f"measures at that moment (`budgets.machine_slowdown`, at most 3×).")


BLOCKS: dict[str, Callable[[dict], str]] = {
    "bench_test_suite": render_bench_test_suite,
    "bench_grpo_step": render_bench_grpo_step,
    "bench_engine_shared_prefix": render_bench_engine_shared_prefix,
    "course_cpu": render_course_cpu,
}
"""block name = results file name → its renderer"""
PHASE_BLOCK = "lesson_phases"
"""block of the per-lesson phase table: rendered from results/bench/course_cpu.json like `course_cpu`"""


def render_lesson_phases(results: dict) -> str:
    """Where each lesson's cpu minutes go, by phase (`agentrl_lite.phases`), from the runtime table's rows that
    recorded them; "rest" is the notebook's own work (loading, plotting, the toy studies) and anything unmarked."""
    from agentrl_lite.phases import PHASES

    rows = {name: n for name, n in results["metrics"]["notebooks"].items() if n.get("phase_seconds")}
    if not rows:
        return "No cpu run has recorded its phases yet (runs since phase timing was added do)."
    lines = ["| lesson | total | " + " | ".join(PHASES) + " | rest | machine |",
             "|---|---:|" + "---:|" * (len(PHASES) + 1) + "---|"]
    for name, n in rows.items():
        spent = n["phase_seconds"]
        cells = [f"{spent.get(p, 0.0) / 60:.1f} ({100 * spent.get(p, 0.0) / n['seconds']:.0f} %)" for p in PHASES]
        rest = n["seconds"] - sum(spent.values())
        lines.append(f"| {name.removesuffix('.ipynb')} | {n['seconds'] / 60:.1f} min | " + " | ".join(cells)
                     + f" | {rest / 60:.1f} ({100 * rest / n['seconds']:.0f} %) | {_short_device(n['device'])} |")
    return "\n".join(lines) + "\n\nMinutes (share of the lesson's wall time)."


TABLES: dict[str, Callable[[Path], str]] = {
    "lesson_table": render_lesson_table,
    "lesson_headlines": render_lesson_headlines,
    "seed_studies": render_seed_studies,
}
"""block name → its renderer over the whole results folder"""


def _replace(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if end not in text:
        raise ValueError(f"{start} without {end}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def render_blocks(text: str, results_dir: Path | None = None) -> str:
    """`text` with every generated block present in it rendered from the results files under `results_dir`."""
    results_dir = results_dir or course_root() / "results"
    for name, render in BLOCKS.items():
        if f"<!-- {name}:start -->" in text:
            text = _replace(text, name, render(json.loads(result_path(results_dir, "cpu", name).read_text())))
    if f"<!-- {PHASE_BLOCK}:start -->" in text:
        text = _replace(text, PHASE_BLOCK, render_lesson_phases(json.loads(
            result_path(results_dir, "cpu", "course_cpu").read_text())))
    for name, render_dir in TABLES.items():
        if f"<!-- {name}:start -->" in text:
            text = _replace(text, name, render_dir(results_dir))
    return text


def update_docs(check: bool = False, root: Path | None = None) -> list[str]:
    """Render the blocks of every file in DOCUMENTS (with check, only compare). Returns the files that were stale."""
    root = root or course_root()
    stale = []
    for name in DOCUMENTS:
        path = root / name
        text = path.read_text()
        rendered = render_blocks(text, root / "results")
        if rendered != text:
            stale.append(name)
            if not check:
                path.write_text(rendered)
    return stale

"""The multi-seed summary: per-seed numbers, means with intervals, and paired comparisons on the same items."""

from __future__ import annotations

import pytest

from agentrl_lite.course.reproduce import LESSONS, Claim, Reproducible, aggregate
from agentrl_lite.stats import mean_ci

SPEC = Reproducible(notebook="x.ipynb", results="x", items="heldout", primary=Claim("rl", "sft"),
                    comparisons=(("rl", "sft"), ("rl", "absent")), scalars=("notebook_seconds",))


def evaluation(correct, labels):
    by_label = {lab: sum(c for c, l2 in zip(correct, labels, strict=True) if l2 == lab) / labels.count(lab)
                for lab in dict.fromkeys(labels)}
    return {"correct": correct, "accuracy": sum(correct) / len(correct), "by_label": by_label}


def record(sft, rl, seconds):
    labels = ["a", "a", "b", "b"]
    return {"model": "m", "metrics": {"heldout": {"sft": evaluation(sft, labels), "rl": evaluation(rl, labels)},
                                      "notebook_seconds": seconds}}


def test_aggregate_reports_each_seed_the_mean_and_the_paired_difference():
    records = {0: record([0, 0, 1, 0], [1, 0, 1, 1], 100.0), 1: record([1, 0, 0, 0], [1, 1, 0, 0], 110.0),
               2: record([0, 0, 0, 0], [0, 1, 1, 0], 90.0)}
    out = aggregate(SPEC, records)
    assert out["seeds"] == [0, 1, 2] and out["n_items"] == 4
    assert out["stages"]["rl"]["accuracy"]["per_seed"] == [0.75, 0.5, 0.5]
    assert out["stages"]["rl"]["accuracy"]["estimate"] == pytest.approx(mean_ci([0.75, 0.5, 0.5]).estimate)
    assert out["stages"]["sft"]["by_label"]["a"]["per_seed"] == [0.0, 0.5, 0.0]
    comparison = out["comparisons"]["rl vs sft"]
    assert comparison["difference_per_seed"] == [0.5, 0.25, 0.5]
    assert [m["fixed"] for m in comparison["mcnemar_per_seed"]] == [2, 1, 2]
    assert comparison["bootstrap_over_seeds_and_items"]["estimate"] == pytest.approx(5 / 12)
    assert out["records"]["ids"] == ["#0", "#1", "#2", "#3"]  # no ids in these records: positions
    assert out["records"]["per_item"]["rl"]["correct"][1] == [1, 1, 0, 0]
    assert "rl vs absent" not in out["comparisons"]  # a stage the lesson did not evaluate is skipped
    assert out["scalars"]["notebook_seconds"]["per_seed"] == [100.0, 110.0, 90.0]


def test_aggregate_refuses_seeds_that_scored_different_items():
    records = {0: record([0, 0, 1, 0], [1, 0, 1, 1], 1.0), 1: record([0, 0, 1, 0], [1, 0, 1, 1], 1.0)}
    records[1]["metrics"]["heldout"]["rl"]["correct"] = [1, 0, 1]
    with pytest.raises(ValueError, match="different numbers of items"):
        aggregate(SPEC, records)


def test_every_reproducible_lesson_names_a_notebook_with_a_seed_parameter():
    import json

    from agentrl_lite.paths import course_root

    for lesson, spec in LESSONS.items():
        nb = json.loads((course_root() / "notebooks" / spec.notebook).read_text())
        tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert tagged and "SEED =" in "".join(tagged[0]["source"]), f"lesson {lesson}: no SEED in a parameters cell"


def test_a_study_from_before_the_rule_keeps_its_old_verdict_marked():
    from agentrl_lite.course.reproduce import verdict

    def comparison(seeds, items):
        return {"mean_over_seeds": dict(zip(("estimate", "low", "high"), seeds, strict=True)),
                "paired_bootstrap_over_items": dict(zip(("estimate", "low", "high"), items, strict=True))}

    assert verdict(comparison((0.2, 0.05, 0.35), (0.2, 0.1, 0.3))) == "gain (old rule)"
    assert verdict(comparison((0.2, -0.1, 0.5), (0.2, 0.1, 0.3))) == "not shown (items only; old rule)"
    assert verdict(comparison((0.05, -0.1, 0.2), (0.05, -0.02, 0.12))) == "not shown (old rule)"
    assert verdict(comparison((-0.2, -0.3, -0.1), (-0.2, -0.3, -0.1))) == "loss (old rule)"
    # every seed the same difference: a zero-width interval over seeds measured no spread, so it is no evidence
    assert verdict(comparison((0.067, 0.067, 0.067), (0.067, 0.011, 0.128))) == "not shown (zero-width interval; old rule)"


def test_a_comparison_in_words_counts_the_seeds_and_says_which_interval_excludes_zero():
    from agentrl_lite.course.reproduce import comparison_in_words

    comparison = {"difference_per_seed": [0.1, 0.2, -0.05, 0.0, 0.15], "role": "primary", "verdict": "not shown",
                  "mean_over_seeds": {"estimate": 0.08, "low": -0.02, "high": 0.18},
                  "bootstrap_over_seeds_and_items": {"estimate": 0.08, "low": 0.01, "high": 0.15}}
    assert comparison_in_words("rl vs sft", comparison) == (
        "rl vs sft: higher on 3 of 5 seeds, lower on 1; mean +0.080, 95% t interval over seeds [-0.020, +0.180] "
        "(includes 0), bootstrap [+0.010, +0.150] (excludes 0) -> not shown (primary claim)")
    old = {"difference_per_seed": [-0.1, -0.2], "mean_over_seeds": {"estimate": -0.15, "low": -0.3, "high": -0.01},
           "paired_bootstrap_over_items": {"estimate": -0.15, "low": -0.25, "high": -0.05}}
    assert comparison_in_words("x", old).endswith("(excludes 0) -> loss (old rule)"), "a study from before the rule"

def _study(seeds: int, items: int, gain: float, seed: int = 0) -> dict[int, dict]:
    """Per-seed records of three stages on `items` held-out items with ids: "rl" solves `gain` more of them
    than "sft", "other" is "sft" with its answers flipped on a few items; tool calls per item too."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for s in range(seeds):
        sft = (rng.random(items) < 0.4).astype(int)
        rl = np.where(rng.random(items) < gain, 1, sft)
        other = np.where(rng.random(items) < 0.05, 1 - sft, sft)
        stages = {name: {"correct": v.tolist(), "accuracy": float(v.mean()), "ids": [f"q{i}" for i in range(items)],
                         "tool_calls": (v + 1).tolist()} for name, v in (("sft", sft), ("rl", rl), ("other", other))}
        out[s] = {"model": "m", "metrics": {"heldout": stages, "notebook_seconds": 1.0}}
    return out


def test_the_primary_claim_is_judged_alone_and_the_secondary_ones_with_holm():
    from agentrl_lite.course.reproduce import comparison_rows, primary_claim, recompute, summarise
    from agentrl_lite.stats import holm

    spec = Reproducible(notebook="x.ipynb", results="x", items="heldout", primary=Claim("rl", "sft"),
                        comparisons=(("rl", "sft"), ("other", "sft"), ("rl", "other")))
    out = summarise(spec, _study(5, 120, 0.3))
    primary = primary_claim(out)
    assert primary["role"] == "primary" and primary["verdict"] == "gain" and primary["expected"] == "gain"
    assert primary["p_for_verdict"] == primary["p_value"] == max(primary["t_p_value"], primary["bootstrap_p_value"])
    secondary = [c for c in out["comparisons"].values() if c["role"] == "secondary"]
    assert len(secondary) == 2, "the primary pair is not tested again as a secondary claim"
    assert [c["p_for_verdict"] for c in secondary] == holm([c["p_value"] for c in secondary])
    rows = comparison_rows(out)
    assert [row["role"] for row in rows] == ["primary", "secondary", "secondary"]
    fixed_broken = [f"{m['fixed']}/{m['broken']}" for m in primary["mcnemar_per_seed"]]
    assert rows[0]["fixed/broken per seed"] == ", ".join(fixed_broken) and len(fixed_broken) == 5
    # too few seeds for the primary claim: no verdict, however large the gain
    assert primary_claim(summarise(spec, _study(4, 120, 0.3)))["verdict"].startswith("not tested (4 seeds")
    # the file alone gives back every claim
    assert recompute(spec, out)["comparisons"] == out["comparisons"]


def test_a_claim_on_tool_calls_is_judged_in_its_own_words():
    from agentrl_lite.course.reproduce import primary_claim, summarise

    spec = Reproducible(notebook="x.ipynb", results="x", items="heldout",
                        primary=Claim("sft", "rl", measure="tool_calls", expected="lower"), comparisons=())
    out = summarise(spec, _study(5, 120, 0.4))
    primary = primary_claim(out)
    assert primary["measure"] == "tool_calls" and primary["verdict"] == "lower" and primary["mcnemar_per_seed"] == []
    assert out["records"]["per_item"]["rl"]["tool_calls"][0][:3] == [x + 1 for x in out["records"]["per_item"]["rl"]["correct"][0][:3]]


def test_seeds_that_scored_different_item_ids_are_refused():
    records = _study(2, 10, 0.2)
    records[1]["metrics"]["heldout"]["rl"]["ids"] = [f"z{i}" for i in range(10)]
    with pytest.raises(ValueError, match="different held-out items"):
        aggregate(SPEC, records)


def test_every_lesson_declares_one_primary_claim_on_stages_it_evaluates():
    for lesson, spec in LESSONS.items():
        assert isinstance(spec.primary, Claim), lesson
        assert spec.primary.expected in ("gain", "lower", "higher"), lesson


def test_a_second_measure_is_summarised_like_the_first():
    from agentrl_lite.course.reproduce import summarise

    spec = Reproducible(notebook="x.ipynb", results="x", items="heldout", primary=Claim("rl", "sft"),
                        comparisons=(("rl", "sft"),), scalars=("notebook_seconds",), also=("faster",))
    records = {s: record([0, 0, 1, 0], [1, 0, 1, 1], 1.0) for s in (0, 1)}
    for s in records:
        records[s]["metrics"]["faster"] = {"sft": evaluation([0, 0, 0, 0], list("aabb")),
                                           "rl": evaluation([0, 0, 0, 1], list("aabb"))}
    out = summarise(spec, records)
    assert out["comparisons"]["rl vs sft"]["difference_per_seed"] == [0.5, 0.5]
    assert out["also"]["faster"]["comparisons"]["rl vs sft"]["difference_per_seed"] == [0.25, 0.25]
    assert out["also"]["faster"]["scalars"] == {}
    assert LESSONS["10"].also == ("heldout_fast_1", "practised")


def test_every_reproducible_lesson_compares_stages_its_committed_results_file_has():
    """A misspelt stage would be skipped silently by `aggregate` (it skips stages a lesson did not evaluate)."""
    from agentrl_lite.course.results import metric, read_results

    for lesson, spec in LESSONS.items():
        record = read_results(spec.results)
        if record is None:  # no committed run yet
            continue
        for path in (spec.items, *spec.also):
            stages = metric(record, path)
            for after, before in spec.comparisons if path == spec.items else ():
                assert after in stages and before in stages, f"lesson {lesson}: {after!r} / {before!r} not in {list(stages)}"
        for path in spec.scalars:
            assert isinstance(metric(record, path), int | float), f"lesson {lesson}: scalar {path} is not a number"


def test_label_change_rows_count_seeds_up_level_and_down_per_label():
    from agentrl_lite.course.reproduce import label_change_rows

    # labels a, b; per seed: a rises in seeds 0 and 2 and stays level in 1; b falls in seed 1, level elsewhere
    records = {0: record([0, 0, 1, 0], [1, 0, 1, 0], 100.0), 1: record([1, 0, 1, 1], [1, 0, 1, 0], 100.0),
               2: record([0, 0, 0, 1], [1, 1, 0, 1], 100.0)}
    rows = label_change_rows(aggregate(SPEC, records), "sft", "rl", header="kind", names={"b": "kind b"})
    assert [row["kind"] for row in rows] == ["a", "kind b"]
    assert rows[0]["sft, per seed"] == "0.00, 0.50, 0.00" and rows[0]["rl, per seed"] == "0.50, 0.50, 1.00"
    assert rows[0]["seeds up / level / down"] == "2 / 1 / 0" and rows[0]["mean change"] == "+0.500"
    assert rows[1]["seeds up / level / down"] == "0 / 2 / 1" and rows[1]["mean change"] == "-0.167"


def test_a_single_run_reproduces_a_study_seed_only_when_every_item_agrees():
    from agentrl_lite.course.reproduce import reproduces_seed

    records = {s: record([0, 0, 1, 0], [1, 0, 1, s % 2], 100.0) for s in (0, 1, 2)}
    summary = aggregate(SPEC, records)
    again = {**record([0, 0, 1, 0], [1, 0, 1, 1], 90.0), "seed": 1}  # seed 1's outcomes, another runtime
    assert reproduces_seed(again, summary, "heldout")
    assert not reproduces_seed({**again, "seed": 0}, summary, "heldout")  # seed 0 ended [1, 0, 1, 0]
    assert not reproduces_seed({**again, "seed": 7}, summary, "heldout")  # a seed the study did not run
    one_item_off = {**record([0, 0, 1, 1], [1, 0, 1, 1], 90.0), "seed": 1}
    assert not reproduces_seed(one_item_off, summary, "heldout")


def test_seed_study_tables_hold_every_part_of_the_summary():
    from agentrl_lite.course.reproduce import seed_study_tables, summarise

    spec = Reproducible(notebook="x.ipynb", results="x", items="heldout", primary=Claim("rl", "sft"),
                        comparisons=(("rl", "sft"),), scalars=("notebook_seconds",), also=("faster",))
    records = {s: record([0, 0, 1, 0], [1, 0, 1, s % 2], 100.0 + s) for s in (0, 1, 2)}
    for s in records:
        records[s]["metrics"]["faster"] = {"sft": evaluation([0, 0, 0, 0], list("aabb")),
                                           "rl": evaluation([0, 0, 0, 1], list("aabb"))}
    tables = dict(seed_study_tables(summarise(spec, records)))
    assert list(tables) == ["held-out accuracy per stage", "claims", "faster: claims", "other measures"]
    assert [row["stage"] for row in tables["held-out accuracy per stage"]] == ["sft", "rl"]
    assert tables["claims"][0]["difference per seed"] == "+0.250, +0.500, +0.250"
    assert tables["claims"][0]["role"] == "primary" and tables["faster: claims"][0]["role"] == "secondary"
    assert tables["other measures"][0]["per seed"] == "100, 101, 102"


def test_an_earlier_run_is_summarised_again_with_the_current_claims(tmp_path, monkeypatch):
    import json

    from agentrl_lite.course import reproduce as module

    run_dir = tmp_path / "runs" / "20261125T000000Z"
    for seed, rl in ((0, [1, 0, 1, 1]), (1, [1, 1, 0, 0])):
        (run_dir / f"seed_{seed}" / "lessons").mkdir(parents=True)
        rec = {**record([0, 0, 1, 0], rl, 100.0 + seed), "profile": "cpu", "command": f"make reproduce  # seed {seed}"}
        rec["metrics"]["peak_rss_mb"] = 3000.0 + seed
        (run_dir / f"seed_{seed}" / "lessons" / "x.json").write_text(json.dumps(rec))
    monkeypatch.setitem(module.LESSONS, "99", SPEC)
    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("AGENTRL_COMMAND", raising=False)
    out = json.loads(module.resummarise("99", run_dir).read_text())
    assert out["profile"] == "cpu" and out["command"] == f"agentrl-lite reproduce 99 --from-run {run_dir}"
    assert out["metrics"]["seeds"] == [0, 1] and out["metrics"]["run_dir"] == "20261125T000000Z"
    assert out["metrics"]["comparisons"]["rl vs sft"]["difference_per_seed"] == [0.5, 0.25]
    assert out["metrics"]["seed_commands"] == {"0": "make reproduce  # seed 0", "1": "make reproduce  # seed 1"}
    assert out["metrics"]["notebook_seconds"] == 101.0, "the lesson's runtime is its slowest seed's"
    assert out["metrics"]["peak_rss_mb"] == 3001.0, "the lesson's memory is its heaviest seed's, not the summariser's"
    with pytest.raises(FileNotFoundError):
        module.resummarise("99", tmp_path / "empty")


def test_a_tuning_variant_is_named_by_its_parameters_and_never_read_as_the_lessons_claim():
    from agentrl_lite.course.reproduce import parse_parameter, variant_name

    assert variant_name("07_x", None) == variant_name("07_x", {}) == "07_x_seeds"
    name = variant_name("07_x", {"SPLIT": "validation", "BETA": 0.5})
    assert name == "07_x_tune_beta-0.5_split-validation" and not name.endswith("_seeds")
    with pytest.raises(ValueError):
        variant_name("07_x", {"SPLIT": "../heldout"})
    assert parse_parameter("BETA=0.5") == ("BETA", 0.5)
    assert parse_parameter("SPLIT=validation") == ("SPLIT", "validation")
    assert parse_parameter("SKIP=True") == ("SKIP", True) and parse_parameter("MODEL=none") == ("MODEL", None)
    for bad in ("BETA", "beta=0.5", "=3"):
        with pytest.raises(ValueError):
            parse_parameter(bad)


def test_a_gpu_run_is_summarised_from_its_seeds_gpu_folders(tmp_path, monkeypatch):
    import json

    from agentrl_lite.course import reproduce as module

    run_dir = tmp_path / "runs" / "20261126T000000Z"
    for seed in (0, 1):
        (run_dir / f"seed_{seed}" / "gpu").mkdir(parents=True)
        rec = {**record([0, 0, 1, 0], [1, 0, 1, 1], 10.0), "profile": "gpu", "command": "c", "device": "NVIDIA Z"}
        (run_dir / f"seed_{seed}" / "gpu" / "x.json").write_text(json.dumps(rec))
    monkeypatch.setitem(module.LESSONS, "99", SPEC)
    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))
    path = module.resummarise("99", run_dir)
    assert path == tmp_path / "results" / "gpu" / "x_seeds.json"
    summary = json.loads(path.read_text())
    assert summary["metrics"]["seeds"] == [0, 1]
    assert summary["device"] == "NVIDIA Z", "the summary names the machine the seeds ran on, not this one"


def test_tuning_variants_are_summarised_with_their_parameters_and_listed_for_the_lesson(tmp_path, monkeypatch):
    import json

    from agentrl_lite.course import reproduce as module

    run_dir = tmp_path / "runs" / "20261126T000000Z"
    (run_dir / "seed_0" / "lessons").mkdir(parents=True)
    rec = {**record([0, 0, 1, 0], [1, 0, 1, 1], 10.0), "profile": "cpu", "command": "c"}
    (run_dir / "seed_0" / "lessons" / "x.json").write_text(json.dumps(rec))
    monkeypatch.setitem(module.LESSONS, "99", SPEC)
    monkeypatch.setenv("AGENTRL_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("AGENTRL_COMMAND", raising=False)
    path = module.resummarise("99", run_dir, {"BETA": 0.5, "SPLIT": "validation"})
    assert path.name == "x_tune_beta-0.5_split-validation.json"
    out = json.loads(path.read_text())
    assert out["metrics"]["parameters"] == {"BETA": 0.5, "SPLIT": "validation"}
    assert out["command"].endswith("--from-run " + str(run_dir) + " --set BETA=0.5 --set SPLIT=validation")
    rows = module.tuning_rows("x", {"rl accuracy": ("stages", "rl", "accuracy", "per_seed"), "absent": ("nope",)},
                              tmp_path / "results")
    assert rows == [{"settings": "BETA=0.5, SPLIT=validation", "seeds": "0", "date": out["date"][:10],
                     "rl accuracy": "0.75", "absent": None}]
    assert module.tuning_rows("y", {}, tmp_path / "results") == []

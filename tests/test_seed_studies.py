"""Every committed seed study is recomputed from its own per-item records, and a changed record is caught."""

from __future__ import annotations

import copy
import json

import pytest

from agentrl_lite.course.reproduce import LESSONS, claims_of, recompute, study_spec, summarise, verdict
from agentrl_lite.paths import course_root

STUDIES = sorted((course_root() / "results" / "lessons").glob("*_seeds.json"))
@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_every_verdict_is_recomputed_from_the_files_per_item_records(path):
    summary = json.loads(path.read_text())["metrics"]
    if "records" not in summary:  # a study from before the rule: every table must say so
        assert "rule" not in summary
        assert all(verdict(c).endswith("old rule)") for c in claims_of(summary).values()), path.name
        pytest.skip(f"{path.name} predates per-item records (old rule): rerun it with `make reproduce`")
    again = claims_of(recompute(study_spec(path.name.removesuffix("_seeds.json")), summary))
    stored = claims_of(summary)
    assert set(again) == set(stored), f"{path.name}: the lesson's claims changed since the study ran"
    for name, claim in stored.items():
        for key in ("difference_per_seed", "p_value", "p_for_verdict", "verdict", "role"):
            assert again[name][key] == claim[key], f"{path.name}, {name}: {key} {claim[key]} ≠ recomputed {again[name][key]}"


def test_a_changed_record_changes_what_is_recomputed():
    from test_reproduce import _study

    spec = LESSONS["06"]
    records = _study(5, 100, 0.3)
    stages = {"after SFT": "sft", "after SFT + GRPO": "rl", "base, with tools": "other"}
    for record in records.values():
        record["metrics"]["heldout"] = {new: record["metrics"]["heldout"][old] for new, old in stages.items()}
    summary = summarise(spec.__class__(**{**spec.__dict__, "scalars": ()}), records)
    assert claims_of(recompute(spec, summary)) == claims_of(summary)
    tampered = copy.deepcopy(summary)
    row = tampered["records"]["per_item"]["after SFT + GRPO"]["correct"][2]
    row[:10] = [1 - x for x in row[:10]]
    primary = "after SFT + GRPO vs after SFT"
    assert claims_of(recompute(spec, tampered))[primary]["difference_per_seed"] \
        != claims_of(summary)[primary]["difference_per_seed"]

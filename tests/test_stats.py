"""Confidence intervals and the paired test: known answers, and the cases that must refuse."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl_lite.stats import (
    claim_test,
    claim_verdict,
    hierarchical_bootstrap,
    holm,
    mcnemar,
    mean_ci,
    paired_bootstrap,
    seed_claims,
    t_test,
)


def test_mean_ci_is_the_student_t_interval():
    ci = mean_ci([1.0, 2.0, 3.0])
    assert ci.estimate == 2.0
    assert ci.high - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)  # t(0.975, 2) · s / √n, s = 1
    assert not ci.excludes_zero  # 2 ± 2.48: three seeds this far apart do not show a positive mean
    assert mean_ci([2.0, 3.0, 4.0]).excludes_zero
    one = mean_ci([0.4])
    assert one.estimate == 0.4 and math.isinf(one.low) and not one.excludes_zero  # one seed proves nothing


def test_exact_mcnemar_counts_only_the_disagreements():
    after = [1] * 10 + [1, 0] * 20
    before = [0] * 10 + [1, 0] * 20  # 10 fixed, nothing broken, 40 items both agree on
    result = mcnemar(after, before)
    assert (result["fixed"], result["broken"]) == (10, 0)
    assert result["p_value"] == pytest.approx(2 * 0.5 ** 10)
    assert mcnemar([1, 0, 1, 0], [0, 1, 1, 0])["p_value"] == 1.0  # one fixed, one broken
    with pytest.raises(ValueError):
        mcnemar([0.5, 1], [1, 1])


def test_paired_bootstrap_matches_the_normal_interval_and_pairs_items():
    rng = np.random.default_rng(1)
    before = rng.integers(0, 2, 400).astype(float)
    after = np.where(rng.random(400) < 0.15, 1.0, before)  # some items fixed, none broken
    ci = paired_bootstrap(after, before, resamples=20_000)
    diff = after - before
    half = 1.96 * diff.std() / math.sqrt(diff.size)
    assert ci.estimate == pytest.approx(diff.mean())
    assert ci.low == pytest.approx(diff.mean() - half, abs=0.01) and ci.high == pytest.approx(diff.mean() + half, abs=0.01)
    assert ci.excludes_zero
    same = paired_bootstrap(before, before)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)  # identical answers: no difference at all


def test_paired_bootstrap_averages_seeds_per_item_and_refuses_unpaired_vectors():
    after = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 1]], dtype=float)  # (seeds, items)
    before = np.zeros_like(after)
    assert paired_bootstrap(after, before).estimate == pytest.approx(after.mean())
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap([1, 0, 1], [1, 0])


def test_a_zero_width_interval_gives_no_verdict():
    # lesson 05's old "fine vs SFT": +0.067 in each of three seeds, from 4/0, 6/2 and 8/4 items fixed/broken
    n = 60
    before = np.zeros((3, n))
    after = np.zeros((3, n))
    for seed, (fixed, broken) in enumerate([(4, 0), (6, 2), (8, 4)]):
        after[seed, :fixed] = 1.0
        before[seed, fixed:fixed + broken] = 1.0
        after[seed, fixed + broken:] = before[seed, fixed + broken:] = (np.arange(n - fixed - broken) % 2)
    claim = claim_test(after, before, resamples=2_000)
    assert claim["difference_per_seed"] == pytest.approx([4 / 60] * 3)
    assert claim["t_p_value"] is None and claim["p_value"] is None
    assert claim_verdict(claim["mean_over_seeds"]["estimate"], claim["p_value"], 3, primary=False) \
        == "not shown (zero-width interval)"
    assert math.isnan(t_test([0.5])) and t_test([0.1, 0.12, 0.14]) < 0.05


def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 → running max 0.02, 0.03, 0.06, 0.06
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []
    with_nan = holm([0.01, float("nan")])
    assert with_nan[0] == pytest.approx(0.02) and with_nan[1] is None
    assert holm([None, 0.01]) == [None, pytest.approx(0.02)]


def test_verdicts_need_enough_seeds_for_their_role():
    assert claim_verdict(0.2, 0.001, 4, primary=True).startswith("not tested (4 seeds")
    assert claim_verdict(0.2, 0.001, 5, primary=True) == "gain"
    assert claim_verdict(-0.2, 0.001, 3, primary=False) == "loss"
    assert claim_verdict(0.2, 0.06, 5, primary=True) == "not shown"


def test_seed_claims_pair_by_seed_test_the_primary_alone_and_holm_adjust_the_rest():
    # after − before per seed: [0.1, 0.2, 0.3] → mean 0.2, s = 0.1, t interval 0.2 ± 4.302653 · 0.1 / √3
    found = seed_claims({"a vs b": ([0.5, 0.7, 0.9], [0.4, 0.5, 0.6]),
                         "c vs b": ([0.4, 0.5, 0.6], [0.4, 0.5, 0.6]),   # every seed the same: zero-width
                         "b vs a": ([0.4, 0.5, 0.6], [0.5, 0.7, 0.9])}, primary="b vs a")
    a_b = found["a vs b"]
    assert a_b["difference_per_seed"] == pytest.approx([0.1, 0.2, 0.3])
    assert a_b["mean_over_seeds"]["high"] - 0.2 == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    p = t_test([0.1, 0.2, 0.3])  # t = 0.2 / (0.1 / √3) = 3.46 on 2 degrees of freedom: p ≈ 0.074
    assert a_b["t_p_value"] == pytest.approx(p) and 0.05 < p < 0.1
    # two secondary claims, one undefined: Holm ranks the undefined one last, so a vs b is multiplied by 2
    assert a_b["role"] == "secondary" and a_b["p_for_verdict"] == pytest.approx(min(1.0, 2 * p))
    assert a_b["verdict"] == "not shown"
    assert found["c vs b"]["t_p_value"] is None and found["c vs b"]["verdict"] == "not shown (zero-width interval)"
    # the primary claim is tested alone (p unadjusted) and needs five seeds
    primary = found["b vs a"]
    assert primary["role"] == "primary" and primary["p_for_verdict"] == pytest.approx(p)
    assert primary["verdict"].startswith("not tested (3 seeds")
    rng = np.random.default_rng(0)
    before = rng.normal(0.5, 0.1, 10)
    clear = seed_claims({"up": (before + 0.2 + rng.normal(0, 0.02, 10), before),
                         "down": (before - 0.2 + rng.normal(0, 0.02, 10), before)}, primary="up")
    assert clear["up"]["verdict"] == "higher" and clear["down"]["verdict"] == "lower"
    with pytest.raises(ValueError, match="paired by seed"):
        seed_claims({"x": ([0.1, 0.2], [0.1])})
    with pytest.raises(ValueError, match="primary claim"):
        seed_claims({"x": ([0.1, 0.2], [0.1, 0.3])}, primary="y")


def test_hierarchical_bootstrap_with_one_seed_is_the_item_bootstrap():
    rng = np.random.default_rng(3)
    before = rng.integers(0, 2, (1, 300)).astype(float)
    after = np.where(rng.random((1, 300)) < 0.2, 1.0, before)
    two_level, p = hierarchical_bootstrap(after, before, resamples=20_000)
    items = paired_bootstrap(after[0], before[0], resamples=20_000)
    assert two_level.low == pytest.approx(items.low, abs=0.01) and two_level.high == pytest.approx(items.high, abs=0.01)
    assert p < 0.001
    with pytest.raises(ValueError, match="seeds, items"):
        hierarchical_bootstrap(after[0], before[0])


def _simulated_study(rng: np.random.Generator, effect: float, seeds: int = 5, items: int = 100):
    """A synthetic seed study whose truth is known: item difficulties, a random effect per run (the seed moves
    a whole policy up or down, as a fragile cold start does), Bernoulli answers; `effect` shifts the after
    policy's logit."""
    difficulty = rng.normal(0.0, 1.5, items)
    logit_before = difficulty + rng.normal(0.0, 0.6, (seeds, 1))
    logit_after = difficulty + rng.normal(0.0, 0.6, (seeds, 1)) + effect
    answer = lambda logit: (rng.random(logit.shape) < 1 / (1 + np.exp(-logit))).astype(float)  # noqa: E731
    return answer(logit_after), answer(logit_before)


def test_the_rule_holds_its_level_under_no_effect_and_finds_a_real_one():
    rng = np.random.default_rng(0)
    studies = 200

    def rejections(effect: float) -> tuple[float, float]:
        rule = items_only = 0
        for _ in range(studies):
            after, before = _simulated_study(rng, effect)
            claim = claim_test(after, before, resamples=1_000)
            rule += claim_verdict(claim["mean_over_seeds"]["estimate"], claim["p_value"], 5, primary=True) != "not shown"
            items_only += paired_bootstrap(after, before, resamples=1_000).excludes_zero
        return rule / studies, items_only / studies

    false_positives, items_only_false_positives = rejections(0.0)
    assert false_positives <= 0.06  # the 5% level, with room for 200 simulated studies' noise
    # the old rule's item interval alone, blind to the seeds' spread, calls far more chance differences real
    assert items_only_false_positives > 3 * max(false_positives, 0.02)
    power, _ = rejections(1.6)  # about +0.25 accuracy, with the seeds' spread about ±0.1
    assert power >= 0.8

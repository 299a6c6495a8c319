"""Confidence intervals and the paired test: known answers, and the cases that must refuse."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl_lite.stats import mcnemar, mean_ci, paired_bootstrap


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

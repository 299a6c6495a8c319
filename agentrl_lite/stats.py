"""How sure is a held-out number? (evaluation stage: numbers → claims)

A lesson's RL claim compares two policies on the same held-out items: the SFT start and the same model after
GRPO. Three tools answer "did RL do anything?", each for a different question:

- `paired_bootstrap`: a confidence interval for the difference of two policies' accuracies on the *same* items.
  Pairing removes the items' difficulty from the noise: an item both policies solve, or both miss, says
  nothing about the difference; only the items they disagree on do.
- `mcnemar`: the exact test on those disagreements. Under "no difference" an item fixed and an item broken are
  equally likely, so the number fixed among the disagreements is Binomial(disagreements, 1/2).
- `mean_ci`: a mean over seeds with a Student-t interval: run-to-run variation (the SFT seed, the RL seed),
  which a per-item interval from one run cannot see.
- `seed_claims`: claims whose measure is one number per seed with no items to resample (a toy's reward at the
  end of a run): the t interval over seeds and the course's rule below, without the bootstrap over items.

With several seeds, the per-item vectors of each policy are averaged over seeds before the bootstrap (each
item's share of seeds that solved it), so the interval covers item sampling; `mean_ci` over the seeds' own
differences covers seed variation.

**The course's rule for a claim** (`claim_test`, `holm`, used by `course.reproduce`): a multi-seed study has a
(seeds, items) array of per-item differences, with two sources of noise: which seed (the SFT start and the RL
run) and which items the held-out set happened to draw. Two tests, each blind to one source:

- a one-sample t-test on the seeds' mean differences (`t_test`): exact for normal seed effects at any number of
  seeds, but it takes the items as fixed;
- a two-level bootstrap (`hierarchical_bootstrap`): resample seeds, then items (the same items for every seed
  drawn: the pairing stays), so the interval covers a new held-out draw as well as new seeds. With five seeds
  its seed level alone is too narrow (a bootstrap of five values underestimates their spread by (n-1)/n and
  takes only a few distinct values), which is why it does not stand alone.

A claim's p-value is the larger of the two (an intersection-union test: it rejects only when both do, and its
level is at most α). A zero-width or undefined t interval (every seed the same difference, or one seed) gives
no verdict: the t statistic is then undefined, and identical seed differences are a coincidence of small
integer counts, not evidence of no seed variation. Each lesson declares one primary claim, tested at α = 0.05
over at least `MIN_SEEDS_PRIMARY` seeds; its other claims are secondary, Holm-adjusted within the lesson over at
least `MIN_SEEDS_SECONDARY` seeds. `tests/test_stats.py` simulates studies where the truth is known and checks
the rule's false-positive rate and power.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as _scipy_stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
"""a claim's significance level: the family-wise error rate of a lesson's secondary claims after `holm`"""
MIN_SEEDS_PRIMARY = 5
"""seeds (each a different SFT start and RL run) a lesson's primary claim needs before it gets a verdict"""
MIN_SEEDS_SECONDARY = 3
"""seeds a secondary claim needs"""


@dataclass(frozen=True)
class Interval:
    """An estimate with a two-sided confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def _paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-item vectors as arrays; a (seeds, items) array is averaged over its seeds."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired vectors differ in shape: {a.shape} vs {b.shape}; both must score the same items")
    if a.ndim == 2:
        a, b = a.mean(0), b.mean(0)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("expected per-item scores: a non-empty (items,) or (seeds, items) array")
    return a, b


def paired_bootstrap(after: Sequence[float] | np.ndarray, before: Sequence[float] | np.ndarray,
                     resamples: int = 10_000, confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Mean of (after − before) over items, with a percentile bootstrap interval that resamples items.

    after, before: (items,) per-item scores (1.0 right, 0.0 wrong, or any number), or (seeds, items).
    """
    a, b = _paired(after, before)
    diff = a - b
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, diff.size, size=(resamples, diff.size))].mean(1)
    tail = (1 - confidence) / 2
    return Interval(float(diff.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)),
                    confidence)


def mcnemar(after: Sequence[float], before: Sequence[float]) -> dict[str, float]:
    """Exact McNemar test on two 0/1 per-item vectors: items fixed (0 → 1), broken (1 → 0), two-sided p."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("mcnemar: two per-item 0/1 vectors of the same length")
    if not np.isin(np.concatenate([a, b]), (0.0, 1.0)).all():
        raise ValueError("mcnemar: the vectors must hold only 0 and 1")
    fixed, broken = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    p = 1.0 if fixed + broken == 0 else float(_scipy_stats.binomtest(fixed, fixed + broken, 0.5).pvalue)
    return {"fixed": fixed, "broken": broken, "p_value": p}


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean over runs (seeds) with a Student-t interval; a single run has an unbounded interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("mean_ci: no values")
    mean = float(x.mean())
    if x.size == 1:
        return Interval(mean, -np.inf, np.inf, confidence)
    half = float(_scipy_stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, confidence)


def t_test(values: Sequence[float]) -> float:
    """Two-sided p-value of a one-sample t-test of mean 0 over seeds; nan when it is undefined (fewer than two
    values, or every value the same: a zero-width interval)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(_scipy_stats.ttest_1samp(x, 0.0).pvalue)


def hierarchical_bootstrap(after: np.ndarray, before: np.ndarray, resamples: int = 10_000,
                           confidence: float = CONFIDENCE, seed: int = 0) -> tuple[Interval, float]:
    """Mean of (after − before) over seeds and items, with a percentile interval from a two-level bootstrap
    (seeds with replacement, then items with replacement, the same items for every seed drawn), and the
    two-sided bootstrap p-value: twice the smaller share of resampled means on either side of zero.

    after, before: (seeds, items) per-item scores of the same items in the same seeds.
    """
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    if a.shape != b.shape or a.ndim != 2 or a.size == 0:
        raise ValueError(f"hierarchical_bootstrap: two (seeds, items) arrays of one shape, got {a.shape} and {b.shape}")
    diff = a - b
    n_seeds, n_items = diff.shape
    rng = np.random.default_rng(seed)
    # a resample's mean is w_seeds · diff · w_items / (n_seeds · n_items), w the multiplicities of each draw
    w_seeds = rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=resamples).astype(float)
    w_items = rng.multinomial(n_items, np.full(n_items, 1 / n_items), size=resamples).astype(float)
    means = np.einsum("rs,si,ri->r", w_seeds, diff, w_items) / (n_seeds * n_items)
    tail = (1 - confidence) / 2
    interval = Interval(float(diff.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)),
                        confidence)
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    return interval, p


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment: adjusted p-values, in the input's order, that control the family-wise error
    rate (reject where adjusted p < α). An undefined p-value (None or nan) stays None and is ranked as 1."""
    p = np.array([np.nan if v is None else v for v in p_values], dtype=float)
    if p.size == 0:
        return []
    ranked = np.where(np.isnan(p), 1.0, p)
    order = np.argsort(ranked, kind="stable")
    adjusted = np.maximum.accumulate((p.size - np.arange(p.size)) * ranked[order]).clip(max=1.0)
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return [None if np.isnan(v) else float(w) for v, w in zip(p, out, strict=True)]


def claim_test(after: np.ndarray, before: np.ndarray, resamples: int = 10_000) -> dict[str, object]:
    """One claim of a multi-seed study, tested by the course's rule (module docstring): the seeds' differences with
    their t interval and p-value, the two-level bootstrap's interval and p-value, and `p_value`, the larger of the
    two (None when the t-test is undefined: no verdict then).

    after, before: (seeds, items) per-item scores of the same items."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    interval, p_boot = hierarchical_bootstrap(a, b, resamples=resamples)
    per_seed = (a - b).mean(1)
    p_t = t_test(per_seed)
    defined = not np.isnan(p_t)  # None, not nan, where undefined: the results files are plain JSON
    return {"difference_per_seed": [float(d) for d in per_seed], "mean_over_seeds": mean_ci(per_seed).to_dict(),
            "t_p_value": p_t if defined else None, "bootstrap_over_seeds_and_items": interval.to_dict(),
            "bootstrap_p_value": p_boot, "p_value": max(p_t, p_boot) if defined else None}


def claim_verdict(estimate: float, p_value: float | None, seeds: int, primary: bool, alpha: float = ALPHA) -> str:
    """"gain", "loss" or why not: too few seeds for the claim's role, an undefined test (a zero-width interval),
    or a p-value (Holm-adjusted for a secondary claim) not under α."""
    needed = MIN_SEEDS_PRIMARY if primary else MIN_SEEDS_SECONDARY
    if seeds < needed:
        return f"not tested ({seeds} seeds, {'primary' if primary else 'secondary'} claims need {needed})"
    if p_value is None or np.isnan(p_value):
        return "not shown (zero-width interval)"
    if p_value < alpha:
        return "gain" if estimate > 0 else "loss"
    return "not shown"


def seed_claims(claims: dict[str, tuple[Sequence[float], Sequence[float]]], primary: str | None = None,
                alpha: float = ALPHA) -> dict[str, dict[str, Any]]:
    """Claims measured once per seed, with no items to resample, judged by the course's rule at the seed level.

    claims: name → (after, before), one value per seed each, paired by seed (the same seed, the same start).
    primary: the name of the primary claim, tested alone; every other claim is secondary, Holm-adjusted among
    the secondary ones.

    Returns name → {"role", "difference_per_seed" (after − before), "mean_over_seeds" (the mean with its t
    interval), "t_p_value" (None where undefined), "p_for_verdict" (Holm-adjusted for a secondary claim),
    "verdict"}: "higher" or "lower" (after against before), or why not (`claim_verdict`).
    """
    if primary is not None and primary not in claims:
        raise ValueError(f"the primary claim {primary!r} is not among the claims {sorted(claims)}")
    out: dict[str, dict[str, Any]] = {}
    for name, (after, before) in claims.items():
        a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
        if a.shape != b.shape or a.ndim != 1 or a.size == 0:
            raise ValueError(f"{name}: one value per seed for each side, paired by seed; got shapes {a.shape} and "
                             f"{b.shape}")
        p = t_test(a - b)
        out[name] = {"role": "primary" if name == primary else "secondary",
                     "difference_per_seed": [float(d) for d in a - b], "mean_over_seeds": mean_ci(a - b).to_dict(),
                     "t_p_value": None if np.isnan(p) else p}
    secondary = [name for name in out if name != primary]
    adjusted = dict(zip(secondary, holm([out[name]["t_p_value"] for name in secondary]), strict=True))
    if primary is not None:
        adjusted[primary] = out[primary]["t_p_value"]
    words = {"gain": "higher", "loss": "lower"}
    for name, claim in out.items():
        found = claim_verdict(claim["mean_over_seeds"]["estimate"], adjusted[name], len(claim["difference_per_seed"]),
                              primary=claim["role"] == "primary", alpha=alpha)
        claim.update(p_for_verdict=adjusted[name], verdict=words.get(found, found))
    return out

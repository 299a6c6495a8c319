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

With several seeds, the per-item vectors of each policy are averaged over seeds before the bootstrap (each
item's share of seeds that solved it), so the interval covers item sampling; `mean_ci` over the seeds' own
differences covers seed variation. A lesson calls a change a gain only when its interval excludes zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as _scipy_stats

CONFIDENCE = 0.95


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

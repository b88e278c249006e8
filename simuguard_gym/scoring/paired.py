"""Paired comparison of two arms (two policies, or a run and its repaired rerun) over shared seeds.

The exact two-sided sign test on discordant pairs (McNemar's exact test) and a seed-cluster
bootstrap interval of the difference in success rate. Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any, Hashable, Mapping

import numpy as np


def sign_test(wins_a: int, wins_b: int) -> float:
    """Exact two-sided p-value of ``wins_a`` against ``wins_b`` discordant pairs (p = 1/2 each).

    >>> round(sign_test(8, 2), 3)
    0.109
    """
    if wins_a < 0 or wins_b < 0:
        raise ValueError("counts must be non-negative")
    n = wins_a + wins_b
    if n == 0:
        return 1.0
    k = min(wins_a, wins_b)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2 ** n
    return float(min(1.0, 2 * tail))


@dataclass(frozen=True)
class PairedComparison:
    """Arm A against arm B on the episodes (task, seed) both ran."""

    pairs: int
    a_only: int  # A succeeded, B failed
    b_only: int  # B succeeded, A failed
    rate_a: float
    rate_b: float
    p_value: float
    difference_low: float  # bootstrap 95% interval of rate_a - rate_b, resampling seeds
    difference_high: float

    @property
    def difference(self) -> float:
        return self.rate_a - self.rate_b

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "a_only": self.a_only, "b_only": self.b_only, "rate_a": self.rate_a,
                "rate_b": self.rate_b, "difference": self.difference, "p_value": self.p_value,
                "difference_low": self.difference_low, "difference_high": self.difference_high}


def compare(a: Mapping[tuple[Hashable, Hashable], bool], b: Mapping[tuple[Hashable, Hashable], bool], *,
            resamples: int = 10000, seed: int = 0) -> PairedComparison:
    """Compare outcomes keyed by (task, seed); only keys present in both arms count.

    The bootstrap resamples seeds (clusters: every task of a seed together), as evaluations draw
    one seed per scene layout.

    >>> a = {("t", s): s < 9 for s in range(10)}
    >>> b = {("t", s): s < 5 for s in range(10)}
    >>> c = compare(a, b)
    >>> c.a_only, c.b_only, round(c.difference, 2)
    (4, 0, 0.4)
    """
    keys = sorted(set(a) & set(b), key=repr)
    if not keys:
        raise ValueError("the two arms share no (task, seed) episode")
    ya = np.array([bool(a[k]) for k in keys])
    yb = np.array([bool(b[k]) for k in keys])
    a_only, b_only = int((ya & ~yb).sum()), int((~ya & yb).sum())
    seeds = sorted({k[1] for k in keys}, key=repr)
    cluster = np.array([seeds.index(k[1]) for k in keys])
    diff_by_seed = np.bincount(cluster, weights=ya.astype(float) - yb.astype(float), minlength=len(seeds))
    count_by_seed = np.bincount(cluster, minlength=len(seeds)).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
    boot = diff_by_seed[draws].sum(axis=1) / count_by_seed[draws].sum(axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return PairedComparison(len(keys), a_only, b_only, float(ya.mean()), float(yb.mean()), sign_test(a_only, b_only),
                            float(low), float(high))

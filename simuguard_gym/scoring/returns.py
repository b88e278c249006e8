"""Returns of episodes whose env reports no success (Gymnasium's locomotion and reaching tasks, RL
benchmarks): the mean return with its 95% interval, over all episodes and over those without a
contact artifact, and the share of episodes with one. Numpy only.

>>> from simuguard_gym.scoring.returns import ReturnEpisode, score_returns
>>> scores = score_returns([ReturnEpisode(10.0), ReturnEpisode(12.0), ReturnEpisode(-40.0, artifact=True)])
>>> scores.n, scores.flagged, round(scores.mean, 2), round(scores.mean_excluded, 2)
(3, 1, -6.0, 11.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

Z95 = 1.959963984540054


@dataclass(frozen=True)
class ReturnEpisode:
    """One episode scored by its return."""

    value: float
    artifact: bool = False
    task: str = ""
    seed: int | None = None


def t_quantile(dof: int, z: float = Z95) -> float:
    """Student's t quantile for ``dof`` degrees of freedom at the normal quantile ``z`` (two-sided
    95% by default), by the Cornish-Fisher expansion: within 0.11% of the exact value from 5
    degrees of freedom on; exact below that.

    >>> round(t_quantile(10), 3), round(t_quantile(1000), 3)
    (2.228, 1.962)
    """
    if dof < 1:
        return float("nan")
    exact = {1: 12.706204736174698, 2: 4.302652729749464, 3: 3.182446305284263, 4: 2.776445105197793}
    if dof in exact and z == Z95:
        return exact[dof]
    v = float(dof)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3))


def mean_interval(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% t interval (NaN where fewer than 2 values)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(np.mean(values))
    if n < 2:
        return mean, float("nan"), float("nan")
    half = t_quantile(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class ReturnScores:
    """Mean returns over all episodes and over those without a contact artifact, with 95% intervals."""

    n: int
    flagged: int
    mean: float
    low: float
    high: float
    n_excluded: int
    mean_excluded: float
    low_excluded: float
    high_excluded: float

    @property
    def artifact_rate(self) -> float:
        return self.flagged / self.n if self.n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "flagged": self.flagged, "artifact_rate": self.artifact_rate, "mean_return": self.mean,
                "return_low": self.low, "return_high": self.high, "n_excluded": self.n_excluded,
                "mean_return_excluded": self.mean_excluded, "return_excluded_low": self.low_excluded,
                "return_excluded_high": self.high_excluded}


def score_returns(episodes: Iterable[ReturnEpisode]) -> ReturnScores:
    found = list(episodes)
    values = np.array([e.value for e in found], dtype=float)
    clean = np.array([e.value for e in found if not e.artifact], dtype=float)
    return ReturnScores(len(found), sum(e.artifact for e in found), *mean_interval(values), len(clean),
                        *mean_interval(clean))

"""Timing shared by the benchmarks: one episode of given actions, after a reset outside the clock."""

from __future__ import annotations

import time
from typing import Callable

import gymnasium as gym
import numpy as np


def timed_run(env: gym.Env, actions: np.ndarray, seed: int, end: Callable[[], None] | None = None) -> float:
    """Seconds ``env`` takes to step through ``actions`` after ``reset(seed=seed)``, and then to run
    ``end`` (a wrapper's work left over from those steps: the last chunk a recorder decodes, the
    substeps a monitor deferred), which the next reset would otherwise do outside the clock."""
    env.reset(seed=seed)
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    if end is not None:
        end()
    return time.perf_counter() - start


def paired_cost(off: list[float], on: list[float]) -> tuple[float, float, float]:
    """(plain seconds, added seconds, added fraction) of runs made in pairs, the plain run and the
    wrapped one back to back: medians over the pairs of the plain time, of the difference and of
    the ratio. A slow spell of a shared machine hits both runs of a pair, so it cancels in the
    pair; the difference of two separate minima does not pair them and swings by the noise."""
    off_a, on_a = np.asarray(off), np.asarray(on)
    return (float(np.median(off_a)), float(np.median(on_a - off_a)), float(np.median(on_a / off_a - 1.0)))

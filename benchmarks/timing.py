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

"""Timing shared by the benchmarks: one episode of given actions, after a reset outside the clock."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


def timed_run(env: gym.Env, actions: np.ndarray, seed: int) -> float:
    """Seconds ``env`` takes to step through ``actions`` after ``reset(seed=seed)``."""
    env.reset(seed=seed)
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    return time.perf_counter() - start

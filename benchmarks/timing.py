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


def interleaved_runs(plain: gym.Env, wrapped: gym.Env, actions: np.ndarray, seed: int,
                     end: Callable[[], None] | None = None) -> tuple[float, float]:
    """Seconds the plain env and the wrapped one take for the same episode, run step by step side
    by side (both reset with ``seed``; at every step both step, in turn first): a pair of runs
    that shares every slow spell of a shared machine down to single steps, where two episodes
    run one after the other share only the spells longer than an episode. ``end`` is timed with
    the wrapped env, as in :func:`timed_run`."""
    plain.reset(seed=seed)
    wrapped.reset(seed=seed)
    clock = time.perf_counter
    spent = [0.0, 0.0]
    envs = (plain, wrapped)
    for k, action in enumerate(actions):
        for which in ((0, 1) if k % 2 == 0 else (1, 0)):
            start = clock()
            envs[which].step(action)
            spent[which] += clock() - start
    if end is not None:
        start = clock()
        end()
        spent[1] += clock() - start
    return spent[0], spent[1]


def paired_cost(off: list[float], on: list[float]) -> tuple[float, float, float]:
    """(plain seconds, added seconds, added fraction) of runs made in pairs, the plain run and the
    wrapped one side by side (:func:`interleaved_runs`) or back to back: medians over the pairs
    of the plain time, of the difference and of the ratio. A slow spell of a shared machine hits
    both runs of a pair, so it cancels in the pair; the difference of two separate minima does not
    pair them and swings by the noise."""
    off_a, on_a = np.asarray(off), np.asarray(on)
    return (float(np.median(off_a)), float(np.median(on_a - off_a)), float(np.median(on_a / off_a - 1.0)))


def copies_in_use() -> str:
    """Which per-substep copies the wrappers run (say it with every figure: they differ ~2x on Lift)."""
    from simuguard_gym.capture import native

    if native.new_substep_copy() is not None:
        return "per-substep copies in C (the extension)"
    return "per-substep copies in Python (the C extension not importable, or SIMUGUARD_NATIVE=0)"

"""Inertia tensors: six entries, principal axes, the parallel-axis theorem, physical validity."""

from __future__ import annotations

import numpy as np

#: order of the six unique entries, as in MuJoCo's ``fullinertia``
ENTRIES = ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")


def from_entries(e: np.ndarray) -> np.ndarray:
    ixx, iyy, izz, ixy, ixz, iyz = np.asarray(e, float)
    return np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


def to_entries(i: np.ndarray) -> np.ndarray:
    i = np.asarray(i, float)
    return np.array([i[0, 0], i[1, 1], i[2, 2], i[0, 1], i[0, 2], i[1, 2]])


def shift(inertia: np.ndarray, mass: float, offset: np.ndarray) -> np.ndarray:
    """Inertia about a point ``offset`` away from the centre of mass (parallel-axis theorem)."""
    d = np.asarray(offset, float)
    return np.asarray(inertia, float) + mass * (d @ d * np.eye(3) - np.outer(d, d))


def principal(inertia: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Principal moments (ascending) and a proper rotation whose columns are the axes."""
    values, axes = np.linalg.eigh(0.5 * (inertia + inertia.T))
    if np.linalg.det(axes) < 0:
        axes[:, 0] = -axes[:, 0]
    return values, axes


def is_physical(inertia: np.ndarray, rtol: float = 1e-9) -> bool:
    """Positive definite and the triangle inequality on the principal moments."""
    v, _ = principal(inertia)
    return bool(v[0] > 0 and v[0] + v[1] >= v[2] * (1 - rtol))


def make_physical(inertia: np.ndarray, floor: float = 1e-12) -> np.ndarray:
    """The nearest tensor (same axes) with positive moments that satisfy the triangle inequality.

    A candidate outside this set makes the simulator unstable, so every candidate the optimiser
    proposes passes through here before it reaches a model.
    """
    v, axes = principal(inertia)
    v = np.maximum(v, floor)
    # largest moment above the sum of the other two: meet the bound half-way
    excess = v[2] - v[0] - v[1]
    if excess > 0:
        v = v + np.array([excess / 4, excess / 4, -excess / 2])
    return axes @ np.diag(v) @ axes.T

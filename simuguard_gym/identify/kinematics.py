"""Velocities and accelerations of a sampled pose series (Savitzky-Golay local polynomials).

Used by the Newton-Euler baseline, by the identifiability check and to seed each shooting
window's start velocity; the simulation-based fit itself never differentiates measured poses.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import factorial

import numpy as np

from simuguard_gym.identify import pose


def savgol(y: np.ndarray, dt: float, window: int, order: int = 3, deriv: int = 0) -> np.ndarray:
    """Local least-squares polynomial of ``order`` over ``window`` samples (odd), its ``deriv``-th
    derivative at every sample of ``y`` (N, ...); the ends use the first and last full window."""
    y = np.asarray(y, float)
    n = y.shape[0]
    window = min(window | 1, n if n % 2 else n - 1)
    order = min(order, window - 1)
    half = window // 2
    x = np.arange(-half, half + 1)
    fit = np.linalg.pinv(np.vander(x, order + 1, increasing=True))   # (order+1, window)
    scale = factorial(deriv) / dt ** deriv
    flat = y.reshape(n, -1)
    out = np.empty_like(flat)
    weights = fit[deriv] * scale
    windows = np.lib.stride_tricks.sliding_window_view(flat, window, axis=0)   # (n-window+1, k, window)
    out[half:n - half] = windows @ weights
    # the ends: evaluate the end windows' polynomials at the off-centre samples
    powers = np.array([[(factorial(p) / factorial(p - deriv)) * float(xx) ** (p - deriv) if p >= deriv else 0.0
                        for p in range(order + 1)] for xx in x]) / dt ** deriv
    head = powers[:half] @ (fit @ flat[:window])
    tail = powers[half + 1:] @ (fit @ flat[n - window:])
    out[:half], out[n - half:] = head, tail
    return out.reshape(y.shape)


@dataclass(frozen=True)
class Kinematics:
    """World-frame position derivatives of the body origin; body-frame angular velocity and acceleration."""

    position: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    quaternion: np.ndarray
    omega: np.ndarray
    alpha: np.ndarray


#: the most a body may turn across one smoothing window: a cubic in the quaternion's components
#: follows a turn of a radian or two; over several (a box spinning at 110 rad/s turns 6.6 rad in
#: 60 ms) it is no longer the motion, and velocities seeded from it send a fit astray. Much
#: shorter windows average less pose noise: at 1 rad one noisy seed at 60 rad/s stalled.
WINDOW_ROTATION = 2.0


def of_poses(position: np.ndarray, quaternion: np.ndarray, dt: float, window: int = 15) -> Kinematics:
    """Smoothed pose derivatives over ``window`` samples, fewer where the body turns fast (at
    most :data:`WINDOW_ROTATION` across a window, at least 5 samples)."""
    q = pose.continuous(quaternion)
    window = min(window, rotation_window(q, dt))
    qs = savgol(q, dt, window, 3, 0)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    qd = savgol(q, dt, window, 3, 1)
    qdd = savgol(q, dt, window, 3, 2)
    conj = pose.conjugate(qs)
    return Kinematics(savgol(position, dt, window, 3, 0), savgol(position, dt, window, 3, 1),
                      savgol(position, dt, window, 3, 2), qs,
                      2.0 * pose.multiply(conj, qd)[:, 1:], 2.0 * pose.multiply(conj, qdd)[:, 1:])


def rotation_window(quaternion: np.ndarray, dt: float) -> int:
    """The longest odd window (samples, at least 5) across which the body turns at most
    :data:`WINDOW_ROTATION` at its fast end (:func:`turn_per_sample`)."""
    turn = turn_per_sample(quaternion)
    if turn <= 0:
        return 1 << 30
    n = int(min(WINDOW_ROTATION / turn, 1 << 30))
    return max(5, n if n % 2 else n - 1)


def turn_per_sample(quaternion: np.ndarray) -> float:
    """How far the body turns in one sample at its fast end (the 99th percentile), in radians,
    read over 4 samples so that pose noise (a few mrad a sample) does not count as motion."""
    span = 4
    if len(quaternion) <= span:
        return 0.0
    quaternion = pose.continuous(quaternion)
    step = pose.rotation_vector(pose.multiply(pose.conjugate(quaternion[:-span]), quaternion[span:]))
    return float(np.percentile(np.linalg.norm(step, axis=1), 99)) / span


def joint_coordinate(position: np.ndarray, quaternion: np.ndarray, kind: str, axis: np.ndarray) -> np.ndarray:
    """Displacement along a prismatic axis, or angle about a revolute axis, relative to sample 0."""
    if kind == "prismatic":
        return (position - position[0]) @ axis
    rel = pose.multiply(pose.continuous(quaternion), pose.conjugate(quaternion[0]))
    angle = 2.0 * np.arctan2(rel[:, 1:] @ axis, rel[:, 0])
    return np.unwrap(angle)

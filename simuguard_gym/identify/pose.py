"""Quaternion algebra on arrays of poses (w, x, y, z), vectorised over leading axes."""

from __future__ import annotations

import numpy as np


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of quaternion arrays (..., 4)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, float), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, float), -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def conjugate(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, float) * np.array([1.0, -1.0, -1.0, -1.0])


def to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4)."""
    w, x, y, z = np.moveaxis(np.asarray(q, float), -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def from_matrix(r: np.ndarray) -> np.ndarray:
    """Unit quaternion (w >= 0) of one rotation matrix."""
    r = np.asarray(r, float)
    t = np.trace(r)
    if t > 0:
        s = 2.0 * np.sqrt(t + 1.0)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k])
        q = np.zeros(4)
        q[0] = (r[k, j] - r[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (r[j, i] + r[i, j]) / s
        q[1 + k] = (r[k, i] + r[i, k]) / s
    q = np.asarray(q, float)
    return q * (1.0 if q[0] >= 0 else -1.0) / np.linalg.norm(q)


def rotation_vector(q: np.ndarray) -> np.ndarray:
    """Axis times angle (..., 3) of quaternions, taking the short way round (|angle| <= pi)."""
    q = np.asarray(q, float)
    q = np.where(q[..., :1] < 0, -q, q)
    v = q[..., 1:]
    s = np.linalg.norm(v, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    # angle / s -> 2 as s -> 0; the series keeps small rotations exact to rounding
    scale = np.where(s > 1e-12, angle / np.maximum(s, 1e-300), 2.0)
    return v * scale


def from_rotation_vector(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, float)
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = 0.5 * angle
    scale = np.where(angle > 1e-12, np.sin(half) / np.maximum(angle, 1e-300), 0.5)
    return np.concatenate([np.cos(half), v * scale], axis=-1)


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """v rotated by q (body to world when q is a body's orientation)."""
    return np.einsum("...ij,...j->...i", to_matrix(q), v)


def continuous(q: np.ndarray) -> np.ndarray:
    """The same rotations with signs chosen so consecutive quaternions (axis 0) agree."""
    q = np.array(q, float)
    flips = np.einsum("ij,ij->i", q[1:], q[:-1]) < 0
    sign = np.concatenate([[1.0], np.where(np.cumsum(flips) % 2 == 1, -1.0, 1.0)])
    return q * sign[:, None]

"""The batched vector maths round exactly as the plain numpy forms they replaced.

Velocities and contact speeds in recordings are recomputed and compared bit for bit on replay, so
recordings written before the batched forms must still replay exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from simuguard_gym.physics.vector_math import cross, quat_to_mat


def plain_quat_to_mat(q: np.ndarray) -> np.ndarray:
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_quat_to_mat_is_bitwise_the_plain_formula(n):
    rng = np.random.default_rng(n)
    q = rng.normal(size=(n, 4)) * rng.uniform(1e-3, 1e3, size=(n, 1))  # unnormalised, as states drift
    assert np.array_equal(quat_to_mat(q).view(np.uint64), plain_quat_to_mat(q).view(np.uint64))
    rot = quat_to_mat(q)
    np.testing.assert_allclose(rot @ rot.transpose(0, 2, 1), np.broadcast_to(np.eye(3), rot.shape), atol=1e-12)


@pytest.mark.parametrize("shape_a, shape_b", [((5, 3), (5, 3)), ((4, 2, 3), (4, 2, 3)), ((3,), (6, 3))])
def test_cross_is_bitwise_numpy_cross(shape_a, shape_b):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=shape_a) * 1e3, rng.normal(size=shape_b) * 1e-2
    assert np.array_equal(cross(a, b).view(np.uint64), np.cross(a, b).view(np.uint64))

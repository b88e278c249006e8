"""Contacts as the recorder, the tap and the detector hand them around (numpy only):
:class:`ContactPairs` (merged per body pair and substep), :class:`ContactPoints` (touches and
depths only) and :func:`merge_contact_points`, which every engine's decoder ends with.

Every engine hands its contacts over as flat arrays, one row per contact point or per pair of
collision pieces; :func:`merge_contact_points` turns them into :class:`ContactPairs` with one
stable sort, no Python loop per contact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class ContactPairs:
    """Contacts of one or more substeps, merged per body pair (``body_a < body_b``).

    ``force`` is the net contact force that ``body_a`` exerts on ``body_b`` (world frame, N);
    ``abs_force`` the sum of the point force magnitudes; ``depth`` the deepest penetration (m,
    positive when the pieces overlap); ``pieces`` the engine's geoms/shapes of the deepest point
    and ``normal`` its contact normal, pointing from ``pieces[0]`` to ``pieces[1]``.
    ``speed`` holds the speed (m/s) after the substep of the material point of ``body_a`` and of
    ``body_b`` at the deepest contact point (0 for static bodies, NaN in pairs without a tracked
    body): the detector's carrier stage needs how fast a robot link strikes an object, and robot
    links are not recorded bodies.
    ``counts[k]`` is the number of pairs of the k-th substep.
    """

    counts: np.ndarray  # (substeps,) uint32
    bodies: np.ndarray  # (m, 2) int32
    depth: np.ndarray  # (m,) float32
    force: np.ndarray  # (m, 3) float32
    abs_force: np.ndarray  # (m,) float32
    points: np.ndarray  # (m,) uint16
    pieces: np.ndarray  # (m, 2) int32
    normal: np.ndarray  # (m, 3) float32
    speed: np.ndarray  # (m, 2) float32

    COLUMNS = ("bodies", "depth", "force", "abs_force", "points", "pieces", "normal", "speed")

    @classmethod
    def empty(cls, substeps: int) -> "ContactPairs":
        return cls(counts=np.zeros(substeps, np.uint32), bodies=np.zeros((0, 2), np.int32),
                   depth=np.zeros(0, np.float32), force=np.zeros((0, 3), np.float32),
                   abs_force=np.zeros(0, np.float32), points=np.zeros(0, np.uint16),
                   pieces=np.zeros((0, 2), np.int32), normal=np.zeros((0, 3), np.float32),
                   speed=np.zeros((0, 2), np.float32))


@dataclass
class ContactPoints:
    """Which bodies touch and how deep, per contact point: all a detector needs of substeps whose
    contacts no later event examines (see :meth:`ArtifactDetector.feed_quiet`). Cheaper to decode
    than :class:`ContactPairs`: no forces, frames, merging or point speeds.

    ``bodies`` (m, 2) int32 hold the two bodies of each point, lower id first; ``depth`` (m,)
    float32 its penetration (as :class:`ContactPairs`, whose ``depth`` of a pair is the deepest of
    its points); ``counts[k]`` the number of points of the k-th substep. Points where two robot
    links touch are left out, as they are from :class:`ContactPairs`.
    """

    counts: np.ndarray  # (substeps,) int64
    bodies: np.ndarray  # (m, 2) int32
    depth: np.ndarray  # (m,) float32


def staged_counts(stage: Any, states: np.ndarray) -> np.ndarray | None:
    """Contact counts of a stage's substeps, checked against the states given for them; None
    (after clearing the stage) when no contact was staged at all."""
    counts = np.asarray(stage.counts, dtype=np.int64)
    if len(states) != len(counts):
        stage.clear()
        raise ValueError(f"{len(counts)} substeps staged but {len(states)} states given")
    if not counts.any():
        stage.clear()
        return None
    return counts


def merge_contact_points(substep: np.ndarray, nsub: int, bodies: np.ndarray, pieces: np.ndarray, depth: np.ndarray,
                         normal: np.ndarray, force: np.ndarray, magnitude: np.ndarray, points: np.ndarray
                         ) -> tuple[ContactPairs, np.ndarray]:
    """Merge rows per (substep, body pair); the deepest row (returned too) names pieces and normal.

    ``force`` is the world-frame force of ``bodies[:, 0]`` on ``bodies[:, 1]``; ``magnitude`` the
    sum of point force magnitudes of the row, ``points`` its number of contact points. Rows must
    arrive ordered by substep. Pieces and normal keep the engine's order (normal from
    ``pieces[0]`` to ``pieces[1]``); the merged force is turned to act from the lower body id on
    the higher.

    >>> import numpy as np
    >>> pairs, deepest = merge_contact_points(
    ...     np.array([0, 0]), 1, np.array([[2, 1], [1, 2]]), np.array([[5, 4], [4, 5]]),
    ...     np.array([0.001, 0.003]), np.array([[0, 0, 1.0]] * 2), np.array([[0, 0, 1.0], [0, 0, -2.0]]),
    ...     np.array([1.0, 2.0]), np.array([1, 1]))
    >>> pairs.bodies.tolist(), pairs.force.tolist(), pairs.abs_force.tolist(), deepest.tolist()
    ([[1, 2]], [[0.0, 0.0, -3.0]], [3.0], [1])
    """
    n = len(substep)
    if n == 0:
        return ContactPairs.empty(nsub), np.zeros(0, np.int64)
    a, b = bodies[:, 0].astype(np.int64), bodies[:, 1].astype(np.int64)
    swap = a > b
    lo, hi = np.where(swap, b, a), np.where(swap, a, b)
    world = np.where(swap[:, None], -force, force)  # force of body lo on body hi
    # One integer key per (substep, pair); rows arrive ordered by substep, which the stable sort
    # exploits (a lexsort with depth as second key costs ten times more).
    width = int(hi.max()) + 1
    key = (substep.astype(np.int64) * width + lo) * width + hi
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    start = np.ones(n, dtype=bool)
    start[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.flatnonzero(start)
    sizes = np.empty_like(first)
    sizes[:-1] = first[1:] - first[:-1]
    sizes[-1] = n - first[-1]
    # The deepest row of each group: the first row that reaches the group's maximum depth.
    ranked = depth[order]
    if not np.isfinite(ranked).all():  # rare; nan_to_num alone costs more than the rest of the ranking
        ranked = np.nan_to_num(ranked, nan=-np.inf)
    is_deepest = ranked == np.repeat(np.maximum.reduceat(ranked, first), sizes)
    candidates = np.flatnonzero(is_deepest)
    group = np.repeat(np.arange(len(first)), sizes)[candidates]
    keep = np.ones(len(candidates), dtype=bool)
    keep[1:] = group[1:] != group[:-1]
    deepest = order[candidates[keep]]
    point_counts = np.add.reduceat(np.asarray(points, np.int64)[order], first)
    pair = np.empty((len(deepest), 2), np.int32)
    pair[:, 0], pair[:, 1] = lo[deepest], hi[deepest]
    return ContactPairs(
        counts=np.bincount(substep[deepest], minlength=nsub).astype(np.uint32),
        bodies=pair,
        depth=depth[deepest].astype(np.float32),
        force=np.add.reduceat(world[order], first, axis=0).astype(np.float32),
        abs_force=np.add.reduceat(np.asarray(magnitude)[order], first).astype(np.float32),
        points=np.minimum(point_counts, np.iinfo(np.uint16).max).astype(np.uint16),
        pieces=pieces[deepest].astype(np.int32),
        normal=np.asarray(normal)[deepest].astype(np.float32),
        speed=np.zeros((len(deepest), 2), np.float32),
    ), deepest

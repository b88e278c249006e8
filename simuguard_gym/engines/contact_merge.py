"""Merging contact points (or piece pairs) into one row per body pair and substep (numpy only).

Every engine hands its contacts over as flat arrays, one row per contact point or per pair of
collision pieces; :func:`merge_contact_points` turns them into :class:`ContactPairs` with one
stable sort, no Python loop per contact.
"""

from __future__ import annotations

import numpy as np

from simuguard_gym.engines.base import ContactPairs


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

"""An onset contact of a recording, taken out of its scene: the two pieces, the poses their
bodies had over the substeps before it, and their true distance (numpy only; the poses of bodies
a recording does not track come from a replay, :mod:`simuguard_gym.trace.replayed`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simuguard_gym.detection.false_contact import CollisionPieces, posed, separating_axis, sphere_directions
from simuguard_gym.identify.pose import conjugate, multiply, rotate
from simuguard_gym.physics.piece_shapes import PieceShapes
from simuguard_gym.recording.reader import Recording

#: Points on a unit sphere standing in for a round primitive's surface in the true-gap search
#: (3,000 points: a centimetre sphere's support is found to about 1 um).
_ROUND = sphere_directions(3000)


class NotTraceable(ValueError):
    """The recording lacks what rebuilding this contact needs; the message says what."""


@dataclass(frozen=True)
class OnsetPair:
    """One reported contact and what it takes to rebuild it.

    ``bodies`` and ``pieces`` are the recording's ids, in the order the engine listed them; ``poses``
    (2, n + 1, 7) holds both bodies' poses at the start of the substeps ``substep - n`` to
    ``substep`` (the last: the substep of the report); ``separation`` is the reported one (m,
    negative: overlapping), ``normal`` the reported normal from the first piece to the second.

    >>> import numpy as np
    >>> cube = np.array([[x, y, z] for x in (-.01, .01) for y in (-.01, .01) for z in (-.01, .01)])
    >>> poses = np.array([[[0, 0, 0, 1, 0, 0, 0.]], [[0, 0, 0.025, 1, 0, 0, 0]]])  # 5 mm apart
    >>> pair = OnsetPair(0, (0, 1), ("lower", "upper"), (0, 1), ("convex", "convex"), (cube, cube), ({}, {}),
    ...                  poses, -0.018, np.array([0.0, 0.0, 1.0]))
    >>> round(pair.true_gap()[0], 4)
    0.005
    """

    substep: int
    bodies: tuple[int, int]
    names: tuple[str, str]
    pieces: tuple[int, int]
    kinds: tuple[str, str]
    points: tuple[np.ndarray, np.ndarray]  # each piece's points in its body frame (for the true gap)
    descriptions: tuple[dict[str, Any], dict[str, Any]]  # each piece as a rebuild needs it
    poses: np.ndarray
    separation: float
    normal: np.ndarray

    def true_gap(self) -> tuple[float, np.ndarray]:
        """The pieces' distance at the report's poses and the direction it is measured along
        (from the first piece to the second): negative, minus the depth, when they overlap."""
        a, b = (posed(p, self.poses[i, -1]) for i, p in enumerate(self.points))
        if self.kinds[0] == "plane" or self.kinds[1] == "plane":
            return _plane_gap(self, a, b)
        return separating_axis(a, b, hint=self.normal)


#: Poses of bodies the recording does not track (robot links), at the start of substeps
#: ``first + 1 .. last``: ``(bodies, first, last) -> (last - first, len(bodies), 7)``.
PoseSource = Callable[[list[int], int, int], np.ndarray]
#: What a convex piece's hull was cooked from in its scene (``piece -> (source, why not)``: the
#: map :func:`~simuguard_gym.physx_repair.hull_sources.hull_sources` gives a piece, or None and
#: the reason), so that the rebuild cooks the very hull rather than re-cooking its vertices.
HullSource = Callable[[int], tuple[dict[str, Any] | None, str]]


def onset_pair(rec: Recording, contact: dict[str, Any], history: int | None = None,
               untracked: PoseSource | None = None, hulls: HullSource | None = None) -> OnsetPair:
    """The pair of a reported contact (``contact``: ``substep``, ``pieces``, ``depth``, ``normal``,
    as an event or a flag of :func:`~simuguard_gym.detect` carries it) with the poses of the
    ``history`` substeps before it (all since the episode began by default). Bodies whose poses
    the recording does not hold come from ``untracked`` (a replay), else the pair is not
    traceable; a convex piece's description carries its hull's source where ``hulls`` has it
    (``source``, ``scale``, ``local_pose``, ``cooked``), else ``why_not_source``."""
    raw = rec.header.get("collision_pieces")
    if not raw:
        raise NotTraceable("the recording carries no collision pieces (SAPIEN/PhysX recordings do)")
    pieces = CollisionPieces.from_dict(raw)
    shapes = PieceShapes.from_dict(rec.header["piece_shapes"]) if rec.header.get("piece_shapes") else None
    substep = int(contact["substep"])
    if not 0 <= substep < rec.substeps:
        raise NotTraceable(f"substep {substep} is outside the recording's {rec.substeps} substeps")
    ids = [int(p) for p in contact["pieces"]]  # in the engine's order, the normal from the first to the second
    if any(not 0 <= p < len(pieces.body) for p in ids):
        raise NotTraceable(f"pieces {ids} are not among the recording's {len(pieces.body)} collision pieces")
    bodies = tuple(int(pieces.body[p]) for p in ids)
    if bodies[0] == bodies[1]:
        raise NotTraceable(f"pieces {ids} belong to the same body")
    n = substep + 1 if history is None else max(1, min(int(history), substep + 1))
    written = _body_writes(rec, substep - n + 1, substep)
    if len(written) and written[-1] == substep:
        raise NotTraceable(f"the env set the bodies' state just before substep {substep} (a teleport): the poses "
                           "the report was computed from are not recorded")
    if len(written):  # a teleport clears PhysX's contact caches: the pair's history starts after it
        n = substep - int(written[-1])
    poses = np.stack([_poses(rec, pieces, body, substep - n, substep, untracked) for body in bodies])
    described = [_piece(pieces, shapes, p, hulls) for p in ids]
    return OnsetPair(substep, bodies, tuple(rec.bodies.names[b] for b in bodies), tuple(ids),
                     tuple(d[0] for d in described), tuple(d[1] for d in described), tuple(d[2] for d in described),
                     poses, -float(contact["depth"]), np.asarray(contact.get("normal", (0.0, 0.0, 1.0)), float))


def _body_writes(rec: Recording, first: int, last: int) -> np.ndarray:
    """The substeps ``first..last`` before which the env wrote the dynamic bodies' state (SAPIEN's
    ``rigid`` component: ``set_pose``, ``set_velocity``)."""
    bit = next((i for i, c in enumerate(rec.state_layout) if c.name == "rigid"), None)
    if bit is None or "start_mask" not in rec.columns:
        return np.zeros(0, np.int64)
    masks = rec.columns["start_mask"][max(first, 0):last + 1].astype(np.int64)
    return max(first, 0) + np.flatnonzero(masks >> bit & 1)


def _poses(rec: Recording, pieces: CollisionPieces, body: int, first: int, last: int,
           untracked: PoseSource | None) -> np.ndarray:
    """A body's poses at the start of substeps ``first + 1 .. last`` (after ``first .. last - 1``)."""
    static = pieces.static_poses[body]
    if np.isfinite(static).all():
        return np.repeat(static[None], last - first, axis=0)
    tracked = np.flatnonzero(rec.tracked == body)
    if not len(tracked):
        if untracked is None:
            raise NotTraceable(f"body {rec.bodies.names[body]!r} moves but its poses are not recorded (a robot "
                               "link: name it an object in the TaskSpec to record it)")
        return untracked([body], first, last)[:, 0]
    col = int(tracked[0])
    after = rec.columns["body_pose"][max(first, 0):last, col]
    if first < 0:  # the episode's first substep began at the initial pose
        after = np.vstack([rec.initial_body_pose.reshape(-1, 7)[col][None], after])
    return np.asarray(after, float)


def _piece(pieces: CollisionPieces, shapes: PieceShapes | None, piece: int, hulls: HullSource | None
           ) -> tuple[str, np.ndarray, dict[str, Any]]:
    local = pieces.vertices[pieces.offsets[piece]:pieces.offsets[piece + 1]]
    if shapes is None:  # recorded before piece shapes were: convex pieces with SAPIEN's default offsets
        if not len(local):
            raise NotTraceable(f"piece {piece} is a primitive and the recording does not describe it")
        described = {"kind": "convex", "vertices": local.tolist(), "contact_offset": 0.01, "rest_offset": 0.0}
        return "convex", local, _with_hull(described, piece, hulls)
    kind, size, pose = shapes.kind[piece], shapes.size[piece], shapes.local_pose[piece]
    described = {"kind": kind, "size": size.tolist(), "local_pose": pose.tolist(),
                 "contact_offset": float(shapes.contact_offset[piece]), "rest_offset": float(shapes.rest_offset[piece])}
    if kind == "convex":
        described["vertices"] = local.tolist()
        return kind, local, _with_hull(described, piece, hulls)
    if kind == "box":
        points = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * size
    elif kind == "sphere":
        points = _ROUND * size[0]
    elif kind == "capsule":
        points = np.vstack([_ROUND * size[0] + [size[1], 0, 0], _ROUND * size[0] - [size[1], 0, 0]])
    elif kind == "cylinder":
        ring = _ROUND[np.abs(_ROUND[:, 0]) < 0.05] * [0, 1, 1]
        ring = ring / np.linalg.norm(ring, axis=1, keepdims=True) * size[0]
        points = np.vstack([ring + [size[1], 0, 0], ring - [size[1], 0, 0]])
    elif kind == "plane":
        points = np.zeros((1, 3))  # the plane's origin; its normal is the shape's x axis
    else:
        raise NotTraceable(f"piece {piece} is a {kind} shape, which the rebuild does not know")
    return kind, rotate(pose[3:], points) + pose[:3], described


def _with_hull(described: dict[str, Any], piece: int, hulls: HullSource | None) -> dict[str, Any]:
    source, why_not = hulls(piece) if hulls is not None else (None, "no rebuild of the scene was asked for")
    if source is None:
        return {**described, "why_not_source": why_not}
    return {**described, **{k: source[k] for k in ("source", "scale", "local_pose", "cooked")}}


def _plane_gap(pair: OnsetPair, a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    plane = 0 if pair.kinds[0] == "plane" else 1
    body, local = pair.poses[plane, -1], pair.descriptions[plane]["local_pose"]
    q = multiply(body[3:] / np.linalg.norm(body[3:]), np.asarray(local[3:], float))
    normal = rotate(q, np.array([1.0, 0.0, 0.0]))
    origin, other = (a, b) if plane == 0 else (b, a)
    gap = float(((other - origin[0]) @ normal).min())
    return gap, normal if plane == 0 else -normal


def relative_poses(pair: OnsetPair, moving: int) -> tuple[np.ndarray, np.ndarray]:
    """For a rebuild that moves body ``moving`` (0 or 1) and holds the other still: the pose
    the other keeps (its pose at the report) and the moving body's poses relative to it, the
    recorded poses themselves where the held body did not move."""
    fixed = 1 - moving
    if np.all(pair.poses[fixed] == pair.poses[fixed, -1]):
        return pair.poses[fixed, -1], pair.poses[moving]
    anchor = pair.poses[fixed, -1]
    inv = conjugate(pair.poses[fixed, :, 3:] / np.linalg.norm(pair.poses[fixed, :, 3:], axis=1, keepdims=True))
    rel_p = rotate(inv, pair.poses[moving, :, :3] - pair.poses[fixed, :, :3])
    rel_q = multiply(inv, pair.poses[moving, :, 3:])
    out = np.empty_like(pair.poses[moving])
    out[:, :3] = anchor[:3] + rotate(anchor[3:] / np.linalg.norm(anchor[3:]), rel_p)
    out[:, 3:] = multiply(anchor[3:], rel_q)
    return anchor, out

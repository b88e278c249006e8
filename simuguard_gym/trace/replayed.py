"""What a rebuild of a recording's env gives a trace: the poses of bodies the recording does not
track (robot links), read from its bit-exact replay, and the sources of its convex hulls."""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from simuguard_gym.detection.false_contact import CollisionPieces
from simuguard_gym.recording.reader import Recording
from simuguard_gym.trace.onset import HullSource, NotTraceable


class _PoseReader:
    """A substep listener that keeps the bodies' poses at the start of the substeps wanted (after
    the env's writes, as PhysX saw them)."""

    def __init__(self, bodies: list[int], first: int, last: int) -> None:
        self.bodies, self.first, self.last = bodies, first, last
        self.substep = 0
        self.poses: list[np.ndarray] = []
        self.adapter: Any = None

    def attach(self, adapter: Any) -> None:
        self.adapter = adapter

    def before_substep(self, phase: str) -> None:
        if phase == "start" and self.first < self.substep <= self.last:
            self.poses.append(self.adapter.body_poses()[self.bodies])

    def after_substep(self) -> None:
        self.substep += 1

    def hook_failed(self, where: str, error: BaseException) -> None:
        pass


def replayed_poses(rec: Recording, env_fn: Callable[[], Any] | None = None) -> Any:
    """A :data:`~simuguard_gym.trace.onset.PoseSource` that replays ``rec`` (its env rebuilt by
    ``env_fn()``, else from the header) and reads the bodies' poses at each substep's start."""
    from simuguard_gym.replay.replay import replay

    def poses(bodies: list[int], first: int, last: int) -> np.ndarray:
        reader = _PoseReader(bodies, max(first, -1), last)
        try:
            result = replay(rec, env_fn, verify="states", listeners=[reader])
        except Exception as error:  # noqa: BLE001 - the env cannot be rebuilt here, or its replay failed
            raise NotTraceable(f"the poses of {', '.join(rec.bodies.names[b] for b in bodies)} are not recorded, "
                               f"and the replay that would read them failed: {error}") from None
        if result.divergence is not None and result.divergence.substep <= last:
            raise NotTraceable(f"the poses of {', '.join(rec.bodies.names[b] for b in bodies)} are not recorded, and "
                               f"the replay diverged at substep {result.divergence.substep}, before the report")
        found = np.asarray(reader.poses, float).reshape(-1, len(bodies), 7)
        if len(found) != last - max(first, -1):
            raise NotTraceable(f"the replay ran {reader.substep} substeps, not the {last + 1} the report needs")
        return found

    return poses


def rebuilt_hulls(rec: Recording, env_fn: Callable[[], Any] | None = None) -> HullSource:
    """A :data:`~simuguard_gym.trace.onset.HullSource` for ``rec``: its env rebuilt once (by
    ``env_fn()``, else from the header), on the first piece asked for, with SAPIEN's convex-mesh
    constructors watched
    (:func:`~simuguard_gym.physx_repair.hull_sources.hull_sources`); a piece's source is given
    only where the rebuilt piece is, in its body's frame, bit for bit the recorded one."""
    @functools.cache
    def rebuilt() -> tuple[list[dict[str, Any] | None], CollisionPieces] | str:
        try:
            from simuguard_gym.physx_repair.hull_sources import hull_sources

            return hull_sources(rec, env_fn), CollisionPieces.from_dict(rec.header["collision_pieces"])
        except Exception as error:  # noqa: BLE001 - no SAPIEN here, or the env cannot be rebuilt
            return f"the env could not be rebuilt to see what its hulls were cooked from ({error})"

    def hull(piece: int) -> tuple[dict[str, Any] | None, str]:
        found = rebuilt()
        if isinstance(found, str):
            return None, found
        sources, pieces = found
        source = sources[piece] if piece < len(sources) else None
        if source is None:
            return None, "the rebuilt env made this piece by a call that was not seen"
        recorded = pieces.vertices[pieces.offsets[piece]:pieces.offsets[piece + 1]]
        if not np.array_equal(np.asarray(source["body_frame"]), recorded):
            return None, "the rebuilt env's piece differs from the recorded one"
        return source, ""

    return hull

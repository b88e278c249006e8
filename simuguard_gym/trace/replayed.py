"""The poses of bodies a recording does not track (robot links), read from its bit-exact replay."""

from __future__ import annotations

from typing import Any

import numpy as np

from simuguard_gym.recording.reader import Recording
from simuguard_gym.trace.onset import NotTraceable


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


def replayed_poses(rec: Recording) -> Any:
    """A :data:`~simuguard_gym.trace.onset.PoseSource` that replays ``rec`` (its env rebuilt from
    the header) and reads the bodies' poses at each substep's start."""
    from simuguard_gym.replay.replay import replay

    def poses(bodies: list[int], first: int, last: int) -> np.ndarray:
        reader = _PoseReader(bodies, max(first, -1), last)
        try:
            result = replay(rec, verify="states", listeners=[reader])
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

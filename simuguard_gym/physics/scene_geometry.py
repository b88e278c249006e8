"""What a scene looks like to a viewer: each body's collision geometry in its own frame, and the
contact points of the current state (``simuguard view`` logs both to rerun).

Kinds and what ``size`` holds (metres): ``box`` half extents (3); ``sphere`` radius (1);
``ellipsoid`` half axes (3); ``capsule`` and ``cylinder`` radius and half length (2) along the part's own z axis; ``plane``
half extents in x and y (2, the plane's normal is the part's z axis); ``mesh`` nothing (its
``vertices`` and ``faces`` say it all). Each part's ``pose`` (position, quaternion w x y z) is in
its body's frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("box", "sphere", "ellipsoid", "capsule", "cylinder", "plane", "mesh")


@dataclass(frozen=True)
class GeometryPart:
    """One collision shape of body ``body`` (an index into the scene's body table)."""

    body: int
    kind: str
    pose: np.ndarray
    size: np.ndarray
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"geometry kind must be one of {', '.join(KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class ContactPointsNow:
    """Every contact point the engine reports for the current state: world positions (n, 3),
    normals (n, 3, pointing from the first body to the second), penetration depths (n, m,
    > 0 overlapping) and the body pair of each point (n, 2)."""

    positions: np.ndarray
    normals: np.ndarray
    depths: np.ndarray
    bodies: np.ndarray

    @classmethod
    def empty(cls) -> "ContactPointsNow":
        return cls(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0), np.zeros((0, 2), np.int64))

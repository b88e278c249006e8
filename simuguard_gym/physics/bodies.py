"""BodyTable: every body of a scene, what kind it is and what part it plays (numpy only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class BodyTable:
    """Every body of a scene, indexed by the engine's body id.

    Kinds: ``static`` bodies never move, ``kinematic`` ones are moved by code (mocap, kinematic
    actors), ``dynamic`` ones by the solver. Roles: ``robot``, ``object``, ``container``, ``scene``
    (see :class:`simuguard_gym.TaskSpec`).

    ``tracked`` are the bodies whose state is recorded each substep: every body that can move
    and is not part of the robot (objects, containers, free-standing scene bodies).
    """

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    roles: tuple[str, ...]
    masses: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.names)
        if not (len(self.kinds) == len(self.roles) == len(self.masses) == n):
            raise ValueError("BodyTable columns must have one entry per body")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def tracked(self) -> np.ndarray:
        """Ids of the bodies recorded every substep (moving, not robot), ascending."""
        return np.array(
            [i for i, (k, r) in enumerate(zip(self.kinds, self.roles)) if k != "static" and r != "robot"],
            dtype=np.int32,
        )

    def with_roles(self, roles: Sequence[str]) -> "BodyTable":
        return BodyTable(self.names, self.kinds, tuple(roles), self.masses)

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "kinds": list(self.kinds),
            "roles": list(self.roles),
            "masses": [float(m) for m in self.masses],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BodyTable":
        return cls(tuple(d["names"]), tuple(d["kinds"]), tuple(d["roles"]), np.asarray(d["masses"], float))

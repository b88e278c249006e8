"""BodyTable: every body of a scene, what kind it is and what part it plays (numpy only)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Sequence

import numpy as np

#: Roles of the robot: its links (``robot``) and its floating base (``base``: a legged or free
#: robot's root body on joints no actuator drives, which a solver can launch like an object).
ROBOT_ROLES = ("robot", "base")
#: Roles the contact-artifact detector watches: objects and floating bases.
WATCHED_ROLES = ("object", "base")


@dataclass(frozen=True)
class BodyTable:
    """Every body of a scene, indexed by the engine's body id.

    Kinds: ``static`` bodies never move, ``kinematic`` ones are moved by code (mocap, kinematic
    actors), ``dynamic`` ones by the solver. Roles: ``robot``, ``base`` (a robot's floating base),
    ``object``, ``container``, ``scene`` (see :class:`simuguard_gym.TaskSpec`).

    ``tracked`` are the bodies whose state is recorded each substep: every body that can move
    and is not a robot link (objects, containers, free-standing scene bodies, floating bases);
    ``watched`` are those the detector watches (objects and floating bases).

    >>> import numpy as np
    >>> from simuguard_gym.physics import BodyTable
    >>> table = BodyTable(("world", "torso", "leg", "ball"), ("static", "dynamic", "dynamic", "dynamic"),
    ...                   ("scene", "base", "robot", "object"), np.array([0, 5.0, 1.0, 0.1]))
    >>> table.tracked.tolist(), table.watched.tolist(), table.robot_mask.tolist()
    ([1, 3], [1, 3], [False, True, True, False])
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

    # The table never changes: what is derived from it is computed once (read-only arrays, as
    # every episode of every wrapper reads them).
    @cached_property
    def tracked(self) -> np.ndarray:
        """Ids of the bodies recorded every substep (moving, not robot), ascending."""
        return _frozen(np.array(
            [i for i, (k, r) in enumerate(zip(self.kinds, self.roles)) if k != "static" and r != "robot"],
            dtype=np.int32,
        ))

    @cached_property
    def watched(self) -> np.ndarray:
        """Ids of the tracked bodies the detector watches (objects and floating bases), ascending."""
        return _frozen(np.array([i for i in self.tracked.tolist() if self.roles[i] in WATCHED_ROLES], dtype=np.int32))

    @cached_property
    def robot_mask(self) -> np.ndarray:
        """Per body: whether it belongs to the robot (a link or its floating base)."""
        return _frozen(np.array([r in ROBOT_ROLES for r in self.roles], dtype=bool))

    @cached_property
    def role_array(self) -> np.ndarray:
        """``roles`` as a numpy array (for comparisons over all bodies)."""
        return _frozen(np.array(self.roles))

    @cached_property
    def kind_array(self) -> np.ndarray:
        """``kinds`` as a numpy array."""
        return _frozen(np.array(self.kinds))

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


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array

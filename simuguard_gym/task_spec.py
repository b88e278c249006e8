"""TaskSpec: which bodies are the robot, the manipulated objects, the containers and the scene."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from simuguard_gym.physics.bodies import BodyTable


@dataclass(frozen=True)
class TaskSpec:
    """Roles of bodies by name, overriding the adapter's defaults.

    Defaults (when a role is not named here): robot = bodies in the kinematic subtree of actuated
    joints (and their base), objects = free dynamic bodies, scene = everything else. Name
    containers and targets yourself; the detector treats them specially.

    >>> from simuguard_gym import TaskSpec
    >>> spec = TaskSpec(objects=("can",), containers=("basket",))
    >>> spec.to_dict()["containers"]
    ['basket']
    """

    robot: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()
    scene: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for role in ("robot", "objects", "containers", "scene"):
            value = getattr(self, role)
            if isinstance(value, str):
                object.__setattr__(self, role, (value,))
            else:
                object.__setattr__(self, role, tuple(value))
        seen: dict[str, str] = {}
        for role, names in self._assignments():
            for name in names:
                if name in seen and seen[name] != role:
                    raise ValueError(f"body {name!r} is given two roles: {seen[name]} and {role}")
                seen[name] = role

    def _assignments(self) -> Iterable[tuple[str, tuple[str, ...]]]:
        return (("robot", self.robot), ("object", self.objects), ("container", self.containers),
                ("scene", self.scene))

    def apply(self, table: BodyTable) -> BodyTable:
        """Return ``table`` with these roles; unknown body names raise a ValueError listing the bodies."""
        roles = list(table.roles)
        index = {name: i for i, name in enumerate(table.names)}
        missing = [n for _, names in self._assignments() for n in names if n not in index]
        if missing:
            raise ValueError(f"TaskSpec names bodies that are not in the scene: {', '.join(missing)}; "
                             f"available bodies: {', '.join(table.names)}")
        for role, names in self._assignments():
            for name in names:
                roles[index[name]] = role
        return table.with_roles(roles)

    def to_dict(self) -> dict[str, Any]:
        return {"robot": list(self.robot), "objects": list(self.objects), "containers": list(self.containers),
                "scene": list(self.scene)}


def task_bodies(spec: "TaskSpec | dict[str, Any] | None") -> tuple[str, ...]:
    """The objects and containers a TaskSpec (or its ``to_dict()``) names: bodies of the task
    itself, never off stage (see ``DetectorConfig.off_stage``)."""
    if spec is None:
        return ()
    if isinstance(spec, TaskSpec):
        return spec.objects + spec.containers
    return tuple(spec.get("objects") or ()) + tuple(spec.get("containers") or ())

"""What every engine adapter shares (its body table, roles from a TaskSpec on top) and
:func:`adapter_for`, which finds the adapter of an env."""

from __future__ import annotations

from typing import Any

import numpy as np

from simuguard_gym.physics.adapter import PhysicsAdapter
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.task_spec import TaskSpec


class BodyTableMixin:
    """The body table an adapter keeps: the engine's default roles (``_describe_bodies()``), a
    TaskSpec on top, and masks of the tracked and the robot bodies for the hot paths."""

    #: The roles by name applied on top of the engine's defaults whenever the table is rebuilt.
    task_spec: TaskSpec | None = None
    _task_spec_is_default = False  # the env's own (simuguard_task_spec): a wrapper's may replace it
    _table: BodyTable | None = None

    def use_task_spec(self, spec: TaskSpec, *, default: bool = False) -> None:
        """Give the adapter the roles of ``spec`` now and whenever it rebuilds its body table.

        Every simuguard wrapper of one env shares one adapter, so they share one TaskSpec; a
        second, different spec is an error rather than a silent override, except over the env's
        own default (``default=True``, from its ``simuguard_task_spec``). Misnamed bodies fail
        here, at wrapper construction, not at the first reset."""
        if self.task_spec is not None and self.task_spec != spec and not self._task_spec_is_default:
            raise ValueError(f"this env already uses {self.task_spec!r}; its simuguard wrappers must share one "
                             f"TaskSpec (got {spec!r})")
        table = spec.apply(self._describe_bodies())
        self.task_spec, self._task_spec_is_default = spec, default
        self.set_body_table(table)

    def _describe_bodies(self) -> BodyTable:
        raise NotImplementedError

    def _body_count(self) -> int:
        raise NotImplementedError

    def body_table(self) -> BodyTable:
        if self._table is None:
            table = self._describe_bodies()
            if self.task_spec is not None:
                table = self.task_spec.apply(table)
            self.set_body_table(table)
        return self._table

    def set_body_table(self, table: BodyTable) -> None:
        if len(table) != self._body_count():
            raise ValueError(f"body table has {len(table)} bodies, the scene {self._body_count()}")
        self._table = table
        self._tracked_mask = np.zeros(len(table), dtype=bool)
        self._tracked_mask[table.tracked] = True
        self._robot_mask = table.robot_mask


_ADAPTER_ATTR = "_simuguard_adapter"


def adapter_for(env: Any, adapter: PhysicsAdapter | None = None) -> PhysicsAdapter:
    """Return the adapter of ``env``'s simulator, creating it on first use.

    Gymnasium 1.x wrappers forward no attributes, so detection looks at ``env.unwrapped``: a
    SAPIEN scene on the PhysX CPU backend at ``scene`` (SAPIEN, ManiSkill3), else the one
    ``mujoco.MjData`` it keeps, wherever it is (``data``, robosuite's ``sim.data._data``, or found
    among its attributes: see :func:`simuguard_gym.engines.mujoco_hooking.locate`). The adapter is
    cached on the unwrapped env, so stacked wrappers share one set of hooks. An env may name its
    roles in a ``simuguard_task_spec`` attribute (a :class:`~simuguard_gym.TaskSpec`), used unless
    a wrapper is given another.

    >>> import gymnasium as gym
    >>> from simuguard_gym.engines import adapter_for
    >>> adapter_for(gym.make("Pusher-v5")).engine
    'mujoco'
    """
    base = getattr(env, "unwrapped", env)
    if adapter is not None:
        setattr(base, _ADAPTER_ATTR, adapter)
        return adapter
    cached = base.__dict__.get(_ADAPTER_ATTR) if hasattr(base, "__dict__") else None
    if cached is not None:
        return cached
    if _looks_like_sapien(base):
        from simuguard_gym.engines.sapien import SapienAdapter

        found: PhysicsAdapter = SapienAdapter.from_env(base)
    else:
        from simuguard_gym.engines.mujoco import MujocoAdapter

        try:
            found = MujocoAdapter.from_env(base)
        except TypeError as error:
            raise TypeError(f"cannot attach simuguard to {type(base).__name__}: no SAPIEN scene on the PhysX CPU "
                            f"backend at env.unwrapped.scene, and {error}") from None
    default_spec = getattr(base, "simuguard_task_spec", None)
    if default_spec is not None:  # the env names its own containers; a user's TaskSpec still wins
        found.use_task_spec(default_spec, default=True)
    setattr(base, _ADAPTER_ATTR, found)
    return found


def _looks_like_sapien(base: Any) -> bool:
    scene = getattr(base, "scene", None)
    system = getattr(scene, "physx_system", None) or getattr(scene, "px", None)  # SAPIEN / ManiSkill3
    return type(system).__name__ == "PhysxCpuSystem"

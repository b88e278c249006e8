"""Two-piece SAPIEN scenes as a gymnasium env (one physics substep per step), for tracing
recorded contacts: the pinned false-contact sweep of ``physx_repair/gjk_probe.py`` (a wedge of
the can swept past a wall block, reported 18 mm deep while 6 mm apart) and real overlaps (two
pieces created intersecting, as convex meshes or as primitives)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym import TaskSpec
from simuguard_gym.physx_repair import gjk_probe

OVERLAP = 0.008  # m: deeper than the detector's 5 mm flag
BLOCK = np.array([[x, y, z] for x in (-0.01, 0.01) for y in (-0.01, 0.01) for z in (-0.01, 0.01)], np.float32)


class TwoPieceEnv(gym.Env):
    """``layout``: ``sweep`` (the pinned sweep), ``overlap`` (two convex blocks, the upper created
    :data:`OVERLAP` into the lower one and pressed down on it) or ``overlap_primitives`` (the same
    with a box primitive on a sphere)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (7,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, layout: str = "sweep") -> None:
        self.layout = layout
        # the kinematic mover too is recorded each substep (a kinematic body is a robot by default)
        self.simuguard_task_spec = TaskSpec(objects=("wedge", "wall") if layout == "sweep" else ("upper", "lower"))
        self._build()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._build()  # a fresh scene: PhysX's contact caches start empty
        return self._obs(), {}

    def _build(self) -> None:
        self.scene = gjk_probe._scene()
        self.k = 0
        if self.layout == "sweep":
            gjk_probe._body(self.scene, "wall", gjk_probe.WALL_PIECE, np.array([0, 0, 0, 1, 0, 0, 0], np.float32),
                            "locked")
            self.mover = gjk_probe._body(self.scene, "wedge", gjk_probe.CAN_PIECE, gjk_probe.SWEEP[0], "kinematic")
        elif self.layout == "overlap":
            gjk_probe._body(self.scene, "lower", BLOCK, np.array([0, 0, 0, 1, 0, 0, 0], np.float32), "locked")
            self.mover = gjk_probe._body(self.scene, "upper", BLOCK,
                                         np.array([0, 0, 0.02 - OVERLAP, 1, 0, 0, 0], np.float32), "kinematic")
        else:
            material = physx.PhysxMaterial(0.5, 0.5, 0.0)
            _primitive(self.scene, "lower", physx.PhysxCollisionShapeSphere(0.01, material), (0, 0, 0), False)
            self.mover = _primitive(self.scene, "upper", physx.PhysxCollisionShapeBox(np.full(3, 0.01, np.float32),
                                                                                       material),
                                    (0, 0, 0.02 - OVERLAP), True)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.layout == "sweep":
            target = gjk_probe.SWEEP[min(self.k + 1, len(gjk_probe.SWEEP) - 1)]
        else:  # pressed 0.1 mm further in each step
            target = np.array([0, 0, 0.02 - OVERLAP - 1e-4 * (self.k + 1), 1, 0, 0, 0], np.float32)
        self.mover.set_kinematic_target(sapien.Pose(target[:3], target[3:]))
        self.scene.step()
        self.k += 1
        done = self.layout == "sweep" and self.k >= len(gjk_probe.SWEEP)
        return self._obs(), 0.0, False, bool(done or self.k >= 40), {}

    def _obs(self) -> np.ndarray:
        pose = self.mover.entity_pose
        return np.concatenate([pose.p, pose.q]).astype(np.float64)


def _primitive(scene: Any, name: str, shape: Any, position: Any, kinematic: bool) -> Any:
    component = physx.PhysxRigidDynamicComponent()
    shape.set_contact_offset(gjk_probe.CONTACT_OFFSET)
    shape.set_rest_offset(gjk_probe.REST_OFFSET)
    component.attach(shape)
    component.disable_gravity = True
    if kinematic:
        component.kinematic = True
    else:
        component.set_locked_motion_axes([True] * 6)
    entity = sapien.Entity()
    entity.set_name(name)
    entity.add_component(component)
    entity.set_pose(sapien.Pose(np.asarray(position, np.float32)))
    scene.add_entity(entity)
    return component

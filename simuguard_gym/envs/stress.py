"""The stress test of SimuGuard D.2: how each engine removes a real overlap of can and basket.

N random resting poses of the can overlapping the basket (uniformly random orientation,
position within 3 cm horizontally of a reference resting point against the wall, from 3 cm below
to 1 cm above it), each run for 0.5 s from rest in PhysX and in MuJoCo, with identical pieces,
masses and 4 ms step, under each setting. A pose's initial overlap is the deepest penetration
MuJoCo's exact convex collision finds before the first step; poses outside the requested depth
range are redrawn. Thrown: peak speed >= 1 m/s and >= 4 cm from the start at the end.

The settings are the paper's rows (D.2, table "Stress test"), each with the paper's figures on
RoboTwin's assets beside it: PhysX as the task sets it (10 g can, 10/1 solver iterations), a
100 g can, 32/8 iterations, the depenetration velocity limited to 1 and 0.1 m/s, and MuJoCo's
soft contact at its default and at an 8 ms time constant. ``geometry`` picks the pieces: the
scene's boxes, or the CoACD pieces of a can and a basket at RoboTwin's piece counts
(:mod:`~simuguard_gym.envs.decomposed_geometry`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import mujoco
import numpy as np

from simuguard_gym.envs.can_basket_geometry import CAN_HEIGHT, CAN_MASS, FLOOR_PIECE
from simuguard_gym.envs.place_can_basket_mujoco import scene_xml

REFERENCE = np.array([0.018, 0.0, FLOOR_PIECE[2] + CAN_HEIGHT / 2])
SECONDS = 0.5
DT = 0.004


@dataclass(frozen=True)
class Setting:
    """One engine and one parameter, e.g. PhysX with depenetration limited to 1 m/s."""

    name: str
    engine: str  # "physx" or "mujoco"
    depenetration: float | None = None  # PhysX max depenetration velocity (m/s)
    timeconst: float | None = None  # MuJoCo contact time constant (s)
    can_mass: float = CAN_MASS  # kg (both engines; MuJoCo scales the can's inertia with it)
    solver_iterations: tuple[int, int] | None = None  # PhysX (position, velocity); the task's 10/1 where None
    #: The paper's row (D.2) on RoboTwin's assets: thrown %, exit speed m/s, distance cm, removal ms.
    paper: tuple[float, float, float, float] | None = None

    def __post_init__(self) -> None:
        if self.engine not in ("physx", "mujoco"):
            raise ValueError(f"engine must be 'physx' or 'mujoco', got {self.engine!r}")
        foreign = ({"timeconst": self.timeconst} if self.engine == "physx"
                   else {"depenetration": self.depenetration, "solver_iterations": self.solver_iterations})
        given = [name for name, value in foreign.items() if value is not None]
        if given:
            raise ValueError(f"{self.name}: {', '.join(given)} has no meaning for {self.engine}")
        if not self.can_mass > 0:
            raise ValueError(f"{self.name}: can_mass must be positive, got {self.can_mass!r}")


SETTINGS = (
    Setting("PhysX, default", "physx", paper=(91, 8.77, 155, 2.6)),
    Setting("PhysX, can mass 100 g (10 g)", "physx", can_mass=0.100, paper=(90, 6.86, 73, 3.3)),
    Setting("PhysX, solver iterations 32/8 (10/1)", "physx", solver_iterations=(32, 8), paper=(90, 16.78, 200, 1.4)),
    Setting("PhysX, depenetration <= 1 m/s", "physx", depenetration=1.0, paper=(65, 1.36, 10, 16.5)),
    Setting("PhysX, depenetration <= 0.1 m/s", "physx", depenetration=0.1, paper=(0, 0.14, 3.7, 169)),
    Setting("MuJoCo, default (time constant 20 ms)", "mujoco", paper=(5, 0.56, 2.8, 38.6)),
    Setting("MuJoCo, time constant 8 ms", "mujoco", timeconst=0.008, paper=(42, 1.99, 3.8, 10.6)),
)


@dataclass
class SettingResult:
    setting: Setting
    overlap: list[float] = field(default_factory=list)  # m
    peak: list[float] = field(default_factory=list)  # m/s
    distance: list[float] = field(default_factory=list)  # m

    @property
    def thrown(self) -> np.ndarray:
        return (np.asarray(self.peak) >= 1.0) & (np.asarray(self.distance) >= 0.04)

    def row(self) -> dict[str, Any]:
        peak, overlap = np.asarray(self.peak), np.asarray(self.overlap)
        paper = self.setting.paper
        return {"setting": self.setting.name, "poses": len(peak), "thrown_pct": 100 * float(self.thrown.mean()),
                "exit_speed": float(np.mean(peak)), "distance_cm": 100 * float(np.mean(self.distance)),
                "removal_ms": 1000 * float(np.median(overlap / np.maximum(peak, 1e-6))),
                "paper": None if paper is None else dict(zip(("thrown_pct", "exit_speed", "distance_cm", "removal_ms"),
                                                             paper))}


def physx_available() -> bool:
    return importlib.util.find_spec("sapien") is not None


def draw_poses(n: int, depth: tuple[float, float], seed: int = 0, geometry: str = "boxes"
               ) -> Iterator[tuple[np.ndarray, np.ndarray, float]]:
    """Can poses (position, quaternion w x y z, initial overlap) with overlap within ``depth``."""
    model = mujoco.MjModel.from_xml_string(scene_xml(gripper=False, geometry=geometry))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(200 * n):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        p = REFERENCE + np.array([*rng.uniform(-0.03, 0.03, 2), rng.uniform(-0.03, 0.01)])
        data.qpos[:7] = [*p, *q]
        mujoco.mj_forward(model, data)
        overlap = float(-data.contact.dist[:data.ncon].min()) if data.ncon else 0.0
        if depth[0] <= overlap <= depth[1]:
            found += 1
            yield p, q, overlap
            if found == n:
                return
    raise RuntimeError(f"found only {found} poses with an overlap in {depth} m")


def run_pose(setting: Setting, position: np.ndarray, quaternion: np.ndarray, geometry: str = "boxes"
             ) -> tuple[float, float]:
    """Peak speed (m/s) and final distance from the start (m) of the can over SECONDS."""
    steps = int(round(SECONDS / DT))
    if setting.engine == "physx":
        from simuguard_gym.envs.place_can_basket import can_basket_scene

        position_iterations, velocity_iterations = setting.solver_iterations or (None, None)
        scene, can = can_basket_scene(position, quaternion, max_depenetration_velocity=setting.depenetration,
                                      solver_iterations=position_iterations, velocity_iterations=velocity_iterations,
                                      can_mass=setting.can_mass, geometry=geometry)
        peak = 0.0
        for _ in range(steps):
            scene.step()
            peak = max(peak, float(np.linalg.norm(can.linear_velocity)))
        return peak, float(np.linalg.norm(np.asarray(can.entity_pose.p) - position))
    model = mujoco.MjModel.from_xml_string(scene_xml(gripper=False, geometry=geometry))
    if setting.timeconst is not None:
        model.geom_solref[:, 0] = setting.timeconst
    if setting.can_mass != CAN_MASS:  # the same shape, denser: its inertia scales with its mass
        can = model.body("can").id
        model.body_inertia[can] *= setting.can_mass / model.body_mass[can]
        model.body_mass[can] = setting.can_mass
    data = mujoco.MjData(model)
    data.qpos[:7] = [*position, *quaternion]
    peak = 0.0
    for _ in range(steps):
        mujoco.mj_step(model, data)
        peak = max(peak, float(np.linalg.norm(data.qvel[:3])))
    return peak, float(np.linalg.norm(data.qpos[:3] - position))


def stress(n: int = 100, depth: tuple[float, float] = (0.005, 0.03), settings: tuple[Setting, ...] = SETTINGS,
           seed: int = 0, progress: Callable[[int, int], None] | None = None,
           geometry: str = "boxes") -> list[SettingResult]:
    """Run every setting on the same ``n`` poses (PhysX settings are skipped without SAPIEN)."""
    usable = [s for s in settings if s.engine == "mujoco" or physx_available()]
    results = [SettingResult(s) for s in usable]
    for i, (position, quaternion, overlap) in enumerate(draw_poses(n, depth, seed, geometry)):
        for result in results:
            peak, distance = run_pose(result.setting, position, quaternion, geometry)
            result.overlap.append(overlap)
            result.peak.append(peak)
            result.distance.append(distance)
        if progress is not None:
            progress(i + 1, n)
    return results

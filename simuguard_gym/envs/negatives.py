"""Scenes whose fast motions are real physics, not artifacts: the detector's negatives (MuJoCo).

- ``DropInBin-v0``: an object is released 15-40 cm above a bin and bounces in it; its speed at
  impact is what gravity gives (the gravity stage must explain it).
- ``ShoveBasket-v0``: an actuated pusher shoves a basket with an object inside across the floor
  (the carrier stage must explain the object's motion by the basket's).

Seeds vary the drop height and pose, the pusher's speed and where the object sits.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from simuguard_gym.envs.rendering import RENDER_MODES, RgbArrayRendering, fps_of
from simuguard_gym.task_spec import TaskSpec

DT = 0.002
SUBSTEPS = 10


def _bin(name: str, size: float, height: float, free: bool, mass: float = 0.5, wall: float = 0.01) -> str:
    joint = f'<freejoint name="{name}"/>' if free else ""
    walls = "".join(f'<geom type="box" size="{sx} {sy} {height}" pos="{px} {py} {height}" mass="{mass / 8}"/>'
                    for sx, sy, px, py in ((wall, size, size, 0), (wall, size, -size, 0),
                                           (size, wall, 0, size), (size, wall, 0, -size)))
    return (f'<body name="{name}">{joint}<geom type="box" size="{size} {size} {wall}" pos="0 0 {wall}" '
            f'mass="{mass / 2}"/>{walls}</body>')


class _MujocoTask(RgbArrayRendering, gym.Env):
    """A MuJoCo model stepped ``SUBSTEPS`` per env step; the action sets the controls."""

    metadata = {"render_modes": RENDER_MODES}

    def __init__(self, xml: str, render_mode: str | None = None) -> None:
        self.model = mujoco.MjModel.from_xml_string(xml)
        self._use_render_mode(render_mode, fps_of(self.model, SUBSTEPS))
        self.data = mujoco.MjData(self.model)
        nu = self.model.nu
        self.action_space = spaces.Box(-np.ones(max(nu, 1), np.float32) * 3, np.ones(max(nu, 1), np.float32) * 3)
        size = self.model.nq + self.model.nv
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), dtype=np.float64)
        self._step_count = 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.data.qpos, self.data.qvel])

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, np.float64), self.action_space.low, self.action_space.high)
        self._step_mujoco_simulation(action[:self.model.nu], SUBSTEPS)
        self._step_count += 1
        return self._obs(), 0.0, False, False, {"success": self._check_success()}

    def _step_mujoco_simulation(self, ctrl: np.ndarray, n_frames: int) -> None:
        self.data.ctrl[:] = ctrl
        mujoco.mj_step(self.model, self.data, nstep=n_frames)
        mujoco.mj_rnePostConstraint(self.model, self.data)

    def _check_success(self) -> bool:
        return False


class DropInBinEnv(_MujocoTask):
    """A ball released 15-40 cm above a bin (springy contact: it bounces at its impact speed).

    The action is unused (no actuators); :meth:`expert_action` returns the no-op.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> env = gym.make("simuguard_gym/DropInBin-v0")
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape
        (13,)
    """

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(f"""<mujoco><option timestep="{DT}"/><worldbody>
          <geom name="floor" type="plane" size="2 2 0.1"/>{_bin("bin", 0.12, 0.08, free=False)}
          <body name="ball" pos="0 0 0.3"><freejoint name="ball"/>
            <geom type="sphere" size="0.03" mass="0.1" solref="-20000 -2"/></body>
        </worldbody></mujoco>""", render_mode)
        self.simuguard_task_spec = TaskSpec(containers=("bin",))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        rng = self.np_random
        self.data.qpos[:3] = [*rng.uniform(-0.06, 0.06, 2), 0.05 + rng.uniform(0.15, 0.40)]
        self.data.qvel[:3] = [*rng.normal(0, 0.1, 2), 0.0]
        mujoco.mj_forward(self.model, self.data)
        self._step_count = 0
        return self._obs(), {}

    def expert_action(self) -> np.ndarray:
        return np.zeros(self.action_space.shape, np.float32)

    def _check_success(self) -> bool:
        return bool(np.all(np.abs(self.data.qpos[:2]) < 0.11) and self.data.qpos[2] < 0.16)


class ShoveBasketEnv(_MujocoTask):
    """An actuated pusher shoves a free basket holding a box across the floor.

    The action is the pusher's target velocity (m/s); :meth:`expert_action` pushes at a
    seed-dependent 0.8-2 m/s for 0.4 s, then stops.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> env = gym.make("simuguard_gym/ShoveBasket-v0")
        >>> obs, info = env.reset(seed=0)
        >>> obs, *_ = env.step(env.unwrapped.expert_action())
    """

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(f"""<mujoco><option timestep="{DT}"/><worldbody>
          <geom name="floor" type="plane" size="2 2 0.1"/>
          <body name="pusher" pos="-0.3 0 0.05"><joint name="slide" type="slide" axis="1 0 0" damping="5"/>
            <geom type="box" size="0.02 0.1 0.03" mass="2"/></body>
          {_bin("basket", 0.08, 0.04, free=True, mass=0.3)}
          <body name="bread" pos="0 0 0.05"><freejoint name="bread"/>
            <geom type="box" size="0.03 0.03 0.025" mass="0.05"/></body>
        </worldbody><actuator><velocity joint="slide" kv="200" ctrlrange="-3 3" ctrllimited="true"/></actuator>
        </mujoco>""", render_mode)
        self.simuguard_task_spec = TaskSpec(containers=("basket",))
        self._bread = self.model.jnt_qposadr[self.model.joint("bread").id]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        rng = self.np_random
        self.speed = float(rng.uniform(0.8, 2.0))
        self.data.qpos[self._bread:self._bread + 2] = rng.uniform(-0.035, 0.035, 2)
        mujoco.mj_forward(self.model, self.data)
        self._step_count = 0
        return self._obs(), {}

    def expert_action(self) -> np.ndarray:
        return np.array([self.speed if 5 <= self._step_count < 25 else 0.0], np.float32)

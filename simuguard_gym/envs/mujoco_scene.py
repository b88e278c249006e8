"""MujocoScene-v0: any MuJoCo scene given as XML, as a Gymnasium env (actions = actuator controls)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from simuguard_gym.envs.rendering import RENDER_MODES, RgbArrayRendering, fps_of


class MujocoSceneEnv(RgbArrayRendering, gym.Env):
    """A raw MuJoCo scene as an env: the action sets ``data.ctrl``, then ``frame_skip`` substeps run.

    The observation is ``qpos`` and ``qvel``; the reward is 0 and the episode never terminates
    (use ``max_episode_steps``). Reset restores ``qpos0`` and adds ``reset_noise`` (uniform,
    seeded) to it, which is what a scripted evaluation of a raw scene needs, and no more.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> xml = '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>'
        >>> env = gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=2)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape
        (13,)
    """

    metadata = {"render_modes": RENDER_MODES}

    def __init__(self, xml: str, frame_skip: int = 5, reset_noise: float = 0.0,
                 render_mode: str | None = None) -> None:
        if frame_skip < 1:
            raise ValueError("frame_skip must be at least 1")
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.frame_skip = int(frame_skip)
        self._use_render_mode(render_mode, fps_of(self.model, self.frame_skip))
        self.reset_noise = float(reset_noise)
        low, high = self.model.actuator_ctrlrange.T.astype(np.float32).copy()
        limited = self.model.actuator_ctrllimited.astype(bool)
        low[~limited], high[~limited] = -np.inf, np.inf
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        size = self.model.nq + self.model.nv
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), dtype=np.float64)

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.data.qpos, self.data.qvel])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        if self.reset_noise:
            self.data.qpos[:] += self.np_random.uniform(-self.reset_noise, self.reset_noise, self.model.nq)
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._step_mujoco_simulation(np.asarray(action, dtype=np.float64), self.frame_skip)
        return self._obs(), 0.0, False, False, {}

    def _step_mujoco_simulation(self, ctrl: np.ndarray, n_frames: int) -> None:
        # As gymnasium's MujocoEnv steps: simuguard's hooks see each of the n_frames substeps.
        self.data.ctrl[:] = ctrl
        mujoco.mj_step(self.model, self.data, nstep=n_frames)
        mujoco.mj_rnePostConstraint(self.model, self.data)


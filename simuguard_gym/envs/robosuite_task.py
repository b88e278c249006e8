"""Robosuite-v0: a robosuite task behind a registered Gymnasium id, so recordings can rebuild it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

_HEADLESS = {"has_renderer": False, "has_offscreen_renderer": False, "use_camera_obs": False}


class RobosuiteEnv(gym.Env):
    """``robosuite.make(env_name, robots=robots, **kwargs)`` as a Gymnasium env, via robosuite's
    own ``GymWrapper`` (observations, rewards and seeding are robosuite's).

    Rendering is off unless asked for. ``sim`` is the task's current ``MjSim`` (robosuite builds a
    new one on every hard reset), ``info["success"]`` is robosuite's ``_check_success()``, and
    ``reset(seed=s)`` reproduces the scene (robosuite's own GymWrapper does not: see ``reset``).
    Registered as ``simuguard_gym/Robosuite-v0``:

    >>> import gymnasium as gym, simuguard_gym.envs                               # doctest: +SKIP
    >>> env = gym.make("simuguard_gym/Robosuite-v0", env_name="Lift", lite_physics=True)  # doctest: +SKIP
    """

    metadata = {"render_modes": []}

    def __init__(self, env_name: str, robots: str | list[str] = "Panda", keys: list[str] | None = None,
                 **kwargs: Any) -> None:
        try:
            import robosuite
            from robosuite.wrappers import GymWrapper
        except ImportError as error:
            raise ImportError("simuguard_gym/Robosuite-v0 needs the robosuite extra: "
                              "pip install 'simuguard-gym[robosuite]'") from error
        self.task = robosuite.make(env_name, robots=robots, **{**_HEADLESS, **kwargs})
        self._gym = GymWrapper(self.task, keys=keys)
        self.observation_space = self._gym.observation_space
        self.action_space = self._gym.action_space

    @property
    def sim(self) -> Any:
        return self.task.sim

    def _check_success(self) -> bool:
        return bool(self.task._check_success())

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            # robosuite 1.5 draws object sizes and placements from `task.rng`, built once from the
            # constructor's seed and shared by reference with its placement samplers;
            # GymWrapper.reset(seed) only seeds numpy's global generator. Re-seeding the shared
            # generator in place makes reset(seed) reproduce the scene.
            import numpy as np

            self.task.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        return self._gym.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._gym.step(action)
        return obs, reward, terminated, truncated, {**info, "success": self._check_success()}

    def close(self) -> None:
        self._gym.close()

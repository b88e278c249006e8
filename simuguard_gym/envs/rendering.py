"""``render_mode="rgb_array"`` for the built-in MuJoCo envs, on the CPU where there is no GPU.

Frames come from the scene's front camera where it has one, else from MuJoCo's free camera
(see :class:`simuguard_gym.engines.mujoco_render.MujocoCamera`). Rendering reads the state only,
so an env renders or not without a change to its trajectory.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from simuguard_gym.engines.mujoco_render import MujocoCamera, default_camera

RENDER_MODES = ["rgb_array"]


class RgbArrayRendering:
    """Mixed into a built-in env that keeps ``model`` and ``data`` (or a robosuite ``sim``).

    >>> import gymnasium as gym, simuguard_gym.envs
    >>> env = gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0", render_mode="rgb_array")
    >>> _ = env.reset(seed=0)
    >>> env.render().shape                                      # doctest: +SKIP
    (480, 480, 3)
    """

    render_mode: str | None = None
    _camera: MujocoCamera | None = None

    def _use_render_mode(self, render_mode: str | None, fps: float, size: tuple[int, int] = (480, 480)) -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"{type(self).__name__} renders {RENDER_MODES}, not {render_mode!r}")
        self.render_mode = render_mode
        self.metadata = {"render_modes": RENDER_MODES, "render_fps": float(fps)}
        self._render_size = size

    def _render_target(self) -> tuple[mujoco.MjModel, mujoco.MjData]:
        sim = getattr(self, "sim", None)
        if sim is not None:  # robosuite's MjSim: its model and data wrap MuJoCo's
            return sim.model._model, sim.data._data
        return self.model, self.data  # type: ignore[attr-defined]

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        model, data = self._render_target()
        if self._camera is None or self._camera.model is not model or self._camera.data is not data:
            if self._camera is not None:  # robosuite builds a new model on a hard reset
                self._camera.close()
            height, width = self._render_size
            self._camera = MujocoCamera(model, data, default_camera(model), height=height, width=width)
        return self._camera.render()

    def close(self) -> None:
        if self._camera is not None:
            self._camera.close()
            self._camera = None
        super().close()  # type: ignore[misc]


def fps_of(model: Any, substeps: int) -> float:
    return 1.0 / (float(model.opt.timestep) * int(substeps))

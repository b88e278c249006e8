"""Camera frames of a MuJoCo model's state, on the CPU where there is no GPU.

MuJoCo renders through OpenGL; without a display, ``MUJOCO_GL=egl`` with Mesa's software driver
renders on the CPU (:mod:`simuguard_gym.headless` chooses it). A frame is a function of
the simulation state alone: it is rendered from a private copy of the state with its kinematics
computed there, so neither what the env computed after its last substep (robosuite runs
``mj_forward`` there, a replay does not) nor the rendering itself touches the env's MjData.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import mujoco
import numpy as np

from simuguard_gym.headless import headless_rendering_problem


class MujocoCamera:
    """Renders one camera of ``model`` from the state in ``data`` (RGB, uint8, height x width x 3).

    ``camera`` is a camera's name or index, or None for a free camera: looking at body ``follow``
    from 0.6 m and following it where one is named, else MuJoCo's default view. The size is
    capped by the model's offscreen buffer (``<visual><global offwidth offheight>``), which is
    never changed: it is part of the model the recording checks. A camera stays on the model and
    data it was made with: robosuite builds new ones at every hard reset, so make it after the
    reset (an adapter's ``camera()`` uses the MjData the env steps now).

    >>> import mujoco
    >>> model = mujoco.MjModel.from_xml_string(
    ...     "<mujoco><worldbody><light pos='0 0 2'/><geom type='plane' size='1 1 .1'/>"
    ...     "<body pos='0 0 .2'><freejoint/><geom type='box' size='.05 .05 .05' rgba='1 0 0 1'/></body>"
    ...     "<camera name='top' pos='0 0 1'/></worldbody></mujoco>")
    >>> data = mujoco.MjData(model); mujoco.mj_forward(model, data)
    >>> camera = MujocoCamera(model, data, "top", height=64, width=64)   # doctest: +SKIP
    >>> camera.render().shape                                             # doctest: +SKIP
    (64, 64, 3)
    """

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, camera: str | int | None = None, *,
                 height: int = 256, width: int = 256, follow: str | None = None) -> None:
        context = getattr(mujoco, "GLContext", None)  # absent where MUJOCO_GL disables rendering
        problem = ("MuJoCo was imported with rendering disabled (MUJOCO_GL)" if context is None
                   else headless_rendering_problem(context.__module__))
        if problem:  # GLFW without a display aborts the process: refuse before
            raise RuntimeError(problem)
        self.model, self.data = model, data
        self._scratch = mujoco.MjData(model)
        # The integration state: the physics state and what code sets (mocap bodies' poses among it).
        self._state = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION))
        if isinstance(camera, str) and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
            raise ValueError(f"the model has no camera {camera!r}; its cameras: {', '.join(map(str, names)) or 'none'}")
        self.camera: Any = -1 if camera is None else camera
        body = -1 if follow is None else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, follow)
        if camera is None and body >= 0:
            self.camera = mujoco.MjvCamera()
            self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self.camera.trackbodyid, self.camera.distance = body, 0.6
            self.camera.elevation, self.camera.azimuth = -25.0, 135.0
        self.height = min(int(height), int(model.vis.global_.offheight))
        self.width = min(int(width), int(model.vis.global_.offwidth))
        # The GL context is made at the first frame: one made earlier, while the env was still
        # being set up (a replay's rebuild and reset), rendered garbage under EGL.
        self._renderer: mujoco.Renderer | None = None

    def render(self) -> np.ndarray:
        full = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_getState(self.model, self.data, self._state, full)
        mujoco.mj_setState(self.model, self._scratch, self._state, full)
        mujoco.mj_forward(self.model, self._scratch)
        with _current_context_kept():
            if self._renderer is None:
                self._renderer = mujoco.Renderer(self.model, self.height, self.width)
            self._renderer.update_scene(self._scratch, camera=self.camera)
            return self._renderer.render().copy()

    def body_position(self, name: str) -> np.ndarray | None:
        """Where body ``name`` is in the state last rendered (None: no such body)."""
        body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        return None if body < 0 else self._scratch.xpos[body].copy()

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixel coordinates (column, row) of world ``points`` (n, 3) in the image last rendered;
        NaN behind the camera."""
        if self._renderer is None:
            raise RuntimeError("project() needs a frame rendered first")
        scene = self._renderer.scene
        cam = mujoco.mjv_averageCamera(scene.camera[0], scene.camera[1])  # the two eyes: a mono frame is between them
        forward = np.asarray(cam.forward, dtype=np.float64)
        up = np.asarray(cam.up, dtype=np.float64)
        right = np.cross(forward, up)
        eye = np.asarray(cam.pos, dtype=np.float64)
        rel = np.asarray(points, dtype=np.float64).reshape(-1, 3) - eye
        depth = rel @ forward
        x, y = rel @ right, rel @ up
        # The frustum at unit depth: MuJoCo sets its left and right from the image's aspect.
        near = cam.frustum_near
        half_h = (cam.frustum_top - cam.frustum_bottom) / 2 / near
        mid_h = (cam.frustum_top + cam.frustum_bottom) / 2 / near
        half_w, mid_w = half_h * self.width / self.height, cam.frustum_center / near
        with np.errstate(divide="ignore", invalid="ignore"):
            col = ((x / depth - mid_w) / half_w + 1) / 2 * self.width
            row = (1 - (y / depth - mid_h) / half_h) / 2 * self.height
        out = np.stack([col, row], axis=1)
        out[depth <= 0] = np.nan
        return out

    def close(self) -> None:
        if self._renderer is not None:
            with _current_context_kept():
                self._renderer.close()
            self._renderer = None


@contextlib.contextmanager
def _current_context_kept() -> Iterator[None]:
    """Leave the thread's current OpenGL context as it was. robosuite's renderer never makes its
    own context current before drawing (it relies on it staying current since it was made), so
    a frame of ours that left our context current would change the env's camera observations."""
    backend = getattr(getattr(mujoco, "GLContext", None), "__module__", "")
    if backend.endswith("egl"):
        from OpenGL import EGL

        display, context = EGL.eglGetCurrentDisplay(), EGL.eglGetCurrentContext()
        draw, read = EGL.eglGetCurrentSurface(EGL.EGL_DRAW), EGL.eglGetCurrentSurface(EGL.EGL_READ)
        try:
            yield
        finally:
            if context and display:
                try:
                    EGL.eglMakeCurrent(display, draw, read, context)
                except Exception:  # noqa: BLE001 - that context is gone (ours, just closed): nothing to keep
                    pass
    elif backend.endswith("glfw"):
        import glfw

        window = glfw.get_current_context()
        try:
            yield
        finally:
            if window:
                try:
                    glfw.make_context_current(window)
                except Exception:  # noqa: BLE001 - that window is gone
                    pass
    else:
        yield


def camera_names(model: mujoco.MjModel) -> list[str]:
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i) for i in range(model.ncam)]


def default_camera(model: mujoco.MjModel) -> Any:
    """The camera a video uses when none is named: a front view if the model has one (robosuite's
    and LIBERO's ``agentview``, Meta-World's ``corner``), else MuJoCo's free camera."""
    names = camera_names(model)
    for wanted in ("agentview", "frontview", "corner", "corner2", "front", "track"):
        if wanted in names:
            return wanted
    return None

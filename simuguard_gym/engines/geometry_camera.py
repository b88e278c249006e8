"""Frames of any engine's scene drawn from its collision geometry by MuJoCo's renderer, on the CPU.

SAPIEN renders through Vulkan and finds no device on a machine without a GPU, yet the paper's
headline artifact lives on PhysX. What a viewer of an artifact needs is where each collision
shape is: :class:`GeometryCamera` builds a MuJoCo model with one mocap body per scene body,
carrying that body's collision shapes (:class:`~simuguard_gym.physics.scene_geometry.GeometryPart`,
the shapes ``simuguard view`` shows), and at every frame moves those bodies to the poses the
engine reports and renders them with MuJoCo (``MUJOCO_GL=egl`` on Mesa's software driver where
there is no display). The scene's own engine is only read: its poses, never its state.
"""

from __future__ import annotations

from typing import Sequence

import mujoco
import numpy as np

from simuguard_gym.engines.mujoco_render import MujocoCamera
from simuguard_gym.physics.adapter import ShowsScene
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.scene_geometry import GeometryPart

#: Colours by body role (RGBA): the robot, an object, a container, and everything else (scenery).
ROLE_RGBA = {"robot": "0.55 0.6 0.7 1", "base": "0.55 0.6 0.7 1", "object": "0.95 0.45 0.1 1",
             "container": "0.55 0.75 0.45 1"}
SCENERY_RGBA = "0.82 0.8 0.76 1"
PLANE_RGBA = "0.35 0.38 0.42 1"


class GeometryCamera:
    """A camera on ``adapter``'s scene as its collision shapes (a :class:`~simuguard_gym.physics.camera.Camera`).

    The view follows body ``follow`` where one is named (MuJoCo's tracking camera, as
    :class:`~simuguard_gym.engines.mujoco_render.MujocoCamera` does), else it takes in every
    body of the scene as it is when the camera is made.

    >>> import numpy as np
    >>> from simuguard_gym.engines.geometry_camera import GeometryCamera
    >>> from simuguard_gym.physics.bodies import BodyTable
    >>> from simuguard_gym.physics.scene_geometry import GeometryPart
    >>> class Scene:                      # any ShowsScene: here one box resting on a plane
    ...     def body_table(self):
    ...         return BodyTable(("ground", "box"), ("static", "dynamic"), ("scene", "object"), np.array([0, .1]))
    ...     def scene_geometry(self):
    ...         return [GeometryPart(0, "plane", np.array([0, 0, 0, 1, 0, 0, 0.]), np.array([1, 1.])),
    ...                 GeometryPart(1, "box", np.array([0, 0, 0, 1, 0, 0, 0.]), np.array([.05, .05, .05]))]
    ...     def body_poses(self):
    ...         return np.array([[0, 0, 0, 1, 0, 0, 0], [0, 0, .05, 1, 0, 0, 0.]])
    >>> camera = GeometryCamera(Scene(), height=64, width=64)
    >>> camera.render().shape                                     # doctest: +SKIP
    (64, 64, 3)
    >>> camera.close()
    """

    def __init__(self, adapter: ShowsScene, *, height: int = 256, width: int = 256, follow: str | None = None) -> None:
        self.adapter = adapter
        table: BodyTable = adapter.body_table()  # type: ignore[attr-defined]
        self._names = list(table.names)
        poses = np.asarray(adapter.body_poses(), np.float64)
        self.model = mujoco.MjModel.from_xml_string(scene_xml(adapter.scene_geometry(), table, poses,
                                                              max(int(height), int(width))))
        self.data = mujoco.MjData(self.model)
        # Mocap index of each body of the scene (every body has one: a body without shapes draws nothing).
        self._mocap = self.model.body_mocapid[1:len(self._names) + 1].astype(np.int64)
        self._place(poses)
        body = _body_name(self._names.index(follow)) if follow in self._names else None
        view = None if body is not None else _view_of(self.model, self.data)
        self._camera = MujocoCamera(self.model, self.data, view, height=height, width=width, follow=body)
        self.height, self.width = self._camera.height, self._camera.width

    def render(self) -> np.ndarray:
        """The scene's shapes at the poses its engine reports now."""
        self._place(np.asarray(self.adapter.body_poses(), np.float64))
        return self._camera.render()

    def body_position(self, name: str) -> np.ndarray | None:
        """Where the scene's body ``name`` is in the frame last rendered (None: no such body)."""
        if name not in self._names:
            return None
        return self._camera.body_position(_body_name(self._names.index(name)))

    def project(self, points: np.ndarray) -> np.ndarray:
        return self._camera.project(points)

    def close(self) -> None:
        self._camera.close()

    def _place(self, poses: np.ndarray) -> None:
        n = min(len(poses), len(self._mocap))
        finite = np.isfinite(poses[:n]).all(axis=1)  # a body thrown to inf is drawn where it last was
        ids = self._mocap[:n][finite]
        self.data.mocap_pos[ids] = poses[:n][finite, :3]
        self.data.mocap_quat[ids] = poses[:n][finite, 3:7]


def scene_xml(parts: Sequence[GeometryPart], table: BodyTable, poses: np.ndarray, image_size: int = 256) -> str:
    """MJCF of one mocap body per body of ``table`` (named ``body<i>``, placed at ``poses``) with
    ``parts`` as its geoms, colliding with nothing: a model to draw, never to simulate."""
    by_body: dict[int, list[GeometryPart]] = {}
    for part in parts:
        by_body.setdefault(int(part.body), []).append(part)
    assets, bodies = [], []
    for i in range(len(table.names)):
        role = table.roles[i] if i < len(table.roles) else "static"
        geoms = []
        for k, part in enumerate(by_body.get(i, [])):
            rgba = PLANE_RGBA if part.kind == "plane" else ROLE_RGBA.get(role, SCENERY_RGBA)
            frame = f'pos="{_numbers(part.pose[:3])}" quat="{_numbers(part.pose[3:7])}"'
            if part.kind == "mesh":
                if part.vertices is None or len(part.vertices) < 4:
                    continue
                mesh = f"mesh{i}_{k}"
                faces = (f' face="{_numbers(np.asarray(part.faces, np.int64).reshape(-1))}"'
                         if part.faces is not None and len(part.faces) else "")
                assets.append(f'<mesh name="{mesh}" vertex="{_numbers(np.asarray(part.vertices).reshape(-1))}"{faces}/>')
                shape = f'type="mesh" mesh="{mesh}"'
            elif part.kind == "plane":
                shape = f'type="plane" size="{_numbers(part.size[:2])} 0.05"'
            else:
                shape = f'type="{part.kind}" size="{_numbers(part.size)}"'
            geoms.append(f'<geom {shape} {frame} rgba="{rgba}" contype="0" conaffinity="0" group="0"/>')
        pose = poses[i] if i < len(poses) and np.isfinite(poses[i]).all() else np.array([0, 0, 0, 1, 0, 0, 0.])
        bodies.append(f'<body name="{_body_name(i)}" mocap="true" pos="{_numbers(pose[:3])}" '
                      f'quat="{_numbers(pose[3:7])}">{"".join(geoms)}</body>')
    size = max(64, int(image_size))
    return ('<mujoco model="scene"><compiler inertiafromgeom="false"/>'
            f'<visual><global offwidth="{size}" offheight="{size}"/><quality shadowsize="1024"/></visual>'
            f'<asset>{"".join(assets)}</asset>'
            '<worldbody><light directional="true" pos="0 0 4" dir="0 0 -1" castshadow="false"/>'
            f'{"".join(bodies)}</worldbody></mujoco>')


def _view_of(model: mujoco.MjModel, data: mujoco.MjData) -> mujoco.MjvCamera:
    """A free camera on every shape but the planes (an infinite floor would push it far away),
    from the front and above."""
    mujoco.mj_kinematics(model, data)
    shapes = model.geom_type != int(mujoco.mjtGeom.mjGEOM_PLANE)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.elevation, camera.azimuth = -30.0, 150.0
    if not shapes.any():
        camera.lookat[:], camera.distance = 0.0, 2.0
        return camera
    reach = model.geom_rbound[shapes][:, None]
    lo = (data.geom_xpos[shapes] - reach).min(axis=0)
    hi = (data.geom_xpos[shapes] + reach).max(axis=0)
    camera.lookat[:] = (lo + hi) / 2
    camera.distance = max(float(np.linalg.norm(hi - lo)), 0.1) * 1.3
    return camera


def _body_name(index: int) -> str:
    return f"body{index}"


def _numbers(values: np.ndarray) -> str:
    return " ".join(repr(float(v)) if not float(v).is_integer() or abs(v) > 2**53 else str(int(v))
                    for v in np.asarray(values).reshape(-1))

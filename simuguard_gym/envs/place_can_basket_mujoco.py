"""PlaceCanBasket-MuJoCo-v0: the same placement as PlaceCanBasket-v0, in MuJoCo.

Same collision pieces (mesh geoms from the same vertices; MuJoCo collides their convex hulls),
masses, 4 ms step, gripper layout, action and scripted placement: a seed means the same
placement in both engines, so the two can be compared episode by episode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from simuguard_gym.envs.can_basket_geometry import CAN_MASS, CAN_RADIUS
from simuguard_gym.envs.decomposed_geometry import pieces_of
from simuguard_gym.envs.can_basket_task import PlacementPlan, can_at_rest_inside
from simuguard_gym.envs.rendering import RENDER_MODES, RgbArrayRendering, fps_of

DT = 0.004
SUBSTEPS = 10
GRIPPER_HOME = np.array([-0.18, 0.0, 0.16])
FINGER = np.array([0.008, 0.006, 0.030])
PALM_OFFSET = 0.055  # palm box centre above the fingers (CAN_HEIGHT / 2 + 0.03)


def _mesh(name: str, vertices: np.ndarray) -> str:
    return f'<mesh name="{name}" vertex="{" ".join(f"{v:.9g}" for v in vertices.reshape(-1))}"/>'


def scene_xml(gripper: bool = True, pad_kp: float = 200.0, pad_timeconst: float = 2 * DT,
              geometry: str = "boxes") -> str:
    """The MJCF of the scene: floor, basket, can and (optionally) the gripper with its actuators."""
    can, basket = pieces_of(geometry)
    assets = [_mesh(f"can{i}", p.vertices) for i, p in enumerate(can)]
    assets += [_mesh(f"basket{i}", p.vertices) for i, p in enumerate(basket)]
    piece_mass = CAN_MASS / len(can)
    can_geoms = "".join(f'<geom type="mesh" mesh="can{i}" mass="{piece_mass:.9g}" rgba="0.8 0.15 0.1 1"/>'
                        for i in range(len(can)))
    basket_geoms = "".join(f'<geom type="mesh" mesh="basket{i}" rgba="0.6 0.45 0.25 1"/>' for i in range(len(basket)))
    fx, fy, fz = FINGER
    if not gripper:
        return f"""<mujoco model="can_basket"><option timestep="{DT}"/>
  <default><geom friction="0.6 0.005 0.0001"/></default><asset>{''.join(assets)}</asset>
  <worldbody><geom name="ground" type="plane" size="1 1 0.1"/><body name="basket">{basket_geoms}</body>
    <body name="can"><freejoint name="can"/>{can_geoms}</body></worldbody></mujoco>"""
    return f"""<mujoco model="place_can_basket">
  <option timestep="{DT}"/>
  <default><geom friction="0.6 0.005 0.0001"/></default>
  <asset>{''.join(assets)}</asset>
  <worldbody>
    <light name="sun" pos="0 0 1.5" dir="0 0 -1" directional="true" diffuse="0.7 0.7 0.7"/>
    <camera name="front" pos="0.13 -0.32 0.28" xyaxes="0.91 0.42 0 -0.25 0.55 0.8"/>
    <geom name="ground" type="plane" size="1 1 0.1" rgba="0.75 0.75 0.72 1"/>
    <body name="basket">{basket_geoms}</body>
    <body name="can" pos="{GRIPPER_HOME[0]} {GRIPPER_HOME[1]} {GRIPPER_HOME[2]}"><freejoint name="can"/>{can_geoms}</body>
    <body name="gripper_x" gravcomp="1"><joint name="slide_x" type="slide" axis="1 0 0" damping="300"/>
      <inertial pos="0 0 0" mass="0.5" diaginertia="1e-3 1e-3 1e-3"/>
      <body name="gripper_y" gravcomp="1"><joint name="slide_y" type="slide" axis="0 1 0" damping="300"/>
        <inertial pos="0 0 0" mass="0.5" diaginertia="1e-3 1e-3 1e-3"/>
        <body name="gripper_z" gravcomp="1"><joint name="slide_z" type="slide" axis="0 0 1" damping="300"/>
          <inertial pos="0 0 0" mass="0.5" diaginertia="1e-3 1e-3 1e-3"/>
          <body name="gripper_wrist" gravcomp="1"><joint name="yaw" type="hinge" axis="0 0 1" damping="5"/>
            <geom type="box" pos="0 0 {PALM_OFFSET}" size="0.02 0.03 0.01" mass="0.2"/>
            <body name="finger_left" gravcomp="1"><joint name="finger_left" type="slide" axis="0 1 0" damping="40"/>
              <geom type="box" size="{fx} {fy} {fz}" mass="0.05" friction="1.5 0.005 0.0001" solref="{pad_timeconst} 1"/></body>
            <body name="finger_right" gravcomp="1"><joint name="finger_right" type="slide" axis="0 -1 0" damping="40"/>
              <geom type="box" size="{fx} {fy} {fz}" mass="0.05" friction="1.5 0.005 0.0001" solref="{pad_timeconst} 1"/></body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="slide_x" kp="3000"/><position joint="slide_y" kp="3000"/><position joint="slide_z" kp="3000"/>
    <position joint="yaw" kp="50"/>
    <position joint="finger_left" kp="{pad_kp}" forcerange="-20 20" forcelimited="true"/>
    <position joint="finger_right" kp="{pad_kp}" forcerange="-20 20" forcelimited="true"/>
  </actuator>
</mujoco>"""


class PlaceCanBasketMujocoEnv(RgbArrayRendering, gym.Env):
    """The can-into-basket placement in MuJoCo, the twin of PlaceCanBasket-v0.

    The finger pads squeeze lightly and contact stiffly by default (``pad_kp`` 200 N/m,
    ``pad_timeconst`` 2 dt): soft contact needs less squeeze than PhysX's hard contact to hold a
    10 g can. With PhysX's squeeze (``pad_kp=800``) and MuJoCo's default 20 ms contact the pads
    sink millimetres into the can and, when one opens first, the other releases that overlap as
    a push: MuJoCo's own contact artifact, which the detector flags.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> env = gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
        >>> obs.shape
        (18,)
    """

    metadata = {"render_modes": RENDER_MODES}

    def __init__(self, render_mode: str | None = None, contact_timeconst: float | None = None,
                 pad_kp: float = 200.0, pad_timeconst: float = 2 * DT, geometry: str = "boxes") -> None:
        self.model = mujoco.MjModel.from_xml_string(scene_xml(pad_kp=pad_kp, pad_timeconst=pad_timeconst,
                                                              geometry=geometry))
        self._use_render_mode(render_mode, fps_of(self.model, SUBSTEPS))
        if contact_timeconst is not None:
            self.model.geom_solref[:, 0] = contact_timeconst
        self.data = mujoco.MjData(self.model)
        self.action_space = spaces.Box(np.array([-0.3, -0.2, 0.0, -np.pi, 0.0, 0.0], np.float32),
                                       np.array([0.2, 0.2, 0.3, np.pi, 0.05, 0.05], np.float32), dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, (18,), dtype=np.float64)
        self.plan: PlacementPlan | None = None
        self._can = self.model.body("can").id
        self._can_qpos = self.model.jnt_qposadr[self.model.joint("can").id]
        self._can_qvel = self.model.jnt_dofadr[self.model.joint("can").id]
        self._gripper_qpos = np.array([self.model.jnt_qposadr[self.model.joint(n).id] for n in
                                       ("slide_x", "slide_y", "slide_z", "yaw", "finger_left", "finger_right")])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.plan = PlacementPlan.draw(self.np_random, GRIPPER_HOME)
        mujoco.mj_resetData(self.model, self.data)
        closed = CAN_RADIUS + FINGER[1] - 0.002
        start = np.array([*GRIPPER_HOME, 0.0, closed, closed])
        self.data.qpos[self._gripper_qpos] = start
        self.data.ctrl[:] = start
        mujoco.mj_forward(self.model, self.data)
        self._step_count = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.plan is None:
            raise RuntimeError("call reset() first")
        action = np.clip(np.asarray(action, np.float64), self.action_space.low, self.action_space.high)
        ctrl = np.array([*action[:4], action[4] + FINGER[1], action[5] + FINGER[1]])
        self._step_mujoco_simulation(ctrl, SUBSTEPS)
        self._step_count += 1
        success = self._check_success()
        return self._obs(), float(success), False, False, {"success": success}

    def _step_mujoco_simulation(self, ctrl: np.ndarray, n_frames: int) -> None:
        self.data.ctrl[:] = ctrl
        mujoco.mj_step(self.model, self.data, nstep=n_frames)
        mujoco.mj_rnePostConstraint(self.model, self.data)

    def expert_action(self) -> np.ndarray:
        """The scripted placement's action for the current step (the same as PlaceCanBasket-v0's)."""
        if self.plan is None:
            raise RuntimeError("call reset() first")
        return self.plan.action(self._step_count, closed=CAN_RADIUS - 0.002, dt=DT * SUBSTEPS).astype(np.float32)

    def _check_success(self) -> bool:
        return can_at_rest_inside(self.data.xpos[self._can], self.data.qvel[self._can_qvel:self._can_qvel + 3])

    def _obs(self) -> np.ndarray:
        q = self.data.qpos[self._can_qpos:self._can_qpos + 7]
        v = self.data.qvel[self._can_qvel:self._can_qvel + 6]
        return np.concatenate([q[:3], q[3:], v, self.data.qpos[self._gripper_qpos[:5]]]).astype(np.float64)

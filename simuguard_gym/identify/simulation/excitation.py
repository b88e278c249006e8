"""Synthetic identification data with a known truth: a body driven by a tracking controller.

The truth runs at a fine time step (0.5 ms) on a model of its own (explicit mass, centre of
mass, full inertia, joint friction, support friction), not on the identification model, so a
wrong parameterisation there shows up as error. A controller at the sample rate (2 ms, as a robot
at 500 Hz) tracks a smooth random reference by applying a wrench at the grasp point; what a
sensor would report (the wrench quantised to its resolution plus noise, the pose with noise) is
returned next to the clean series.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from simuguard_gym.identify import pose
from simuguard_gym.identify.inertia import principal
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.series import WrenchPoseSeries
from simuguard_gym.identify.simulation.candidate import INTEGRATORS, add_shape


@dataclass(frozen=True)
class TrueBody:
    """The truth: inertial parameters in the body frame (inertia about the centre of mass)."""

    mass: float
    com: tuple[float, float, float] = (0.0, 0.0, 0.0)
    inertia: np.ndarray | None = None          # (3, 3); None: the shapes' at uniform density
    mu: float = 0.5                            # against the support
    joint_friction: float = 0.0                # N (prismatic) or N m (revolute)
    joint_damping: float = 0.0                 # N s/m (prismatic) or N m s/rad (revolute)


@dataclass(frozen=True)
class SensorNoise:
    """Axia80-class wrench resolution and a tracker's pose noise (RigPI 5.2)."""

    force_resolution: float = 1 / 80
    torque_resolution: float = 1 / 2000
    position: float = 1e-3
    rotation: float = np.radians(0.5)


def _truth_model(problem: Problem, truth: TrueBody, timestep: float) -> mujoco.MjModel:
    spec = mujoco.MjSpec()
    spec.option.timestep = timestep
    spec.option.gravity = list(problem.gravity)
    world = spec.worldbody
    world.add_site(name="world_axes")
    body = world.add_body(name="body")
    body.explicitinertial = True
    body.mass = truth.mass
    body.ipos = list(truth.com)
    values, axes = principal(np.asarray(truth.inertia, float))
    body.inertia = list(values)
    body.iquat = list(pose.from_matrix(axes))
    if hasattr(body, "simple"):
        body.simple = False
    contact = problem.support is not None
    if problem.joint is None:
        body.add_freejoint()
    else:
        kind = mujoco.mjtJoint.mjJNT_HINGE if problem.joint.kind == "revolute" else mujoco.mjtJoint.mjJNT_SLIDE
        j = body.add_joint(name="joint", type=kind, axis=list(problem.joint.axis), pos=list(problem.joint.anchor))
        j.frictionloss = truth.joint_friction
        j.solref_friction = [2 * timestep, 1.0]
    for k, shape in enumerate(problem.shapes):
        add_shape(spec, body, shape, f"shape{k}", contact).friction = [truth.mu, 0.005, 0.0001]
    body.add_site(name="wrench_point", pos=list(problem.point))
    for i in range(6):
        act = spec.add_actuator(trntype=mujoco.mjtTrn.mjTRN_SITE, target="wrench_point", refsite="world_axes")
        act.gear = [1.0 if j == i else 0.0 for j in range(6)]
    if contact:
        plane = world.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1], pos=[0, 0, problem.support.height])
        plane.friction = [0.0, 0.005, 0.0001]
    model = spec.compile()
    if problem.joint is not None:
        model.dof_damping[0] = truth.joint_damping   # after compiling: MjSpec's damping is a 3-vector on MuJoCo 4
    return model


def _smooth_random(rng: np.random.Generator, t: np.ndarray, dims: int, amplitude: np.ndarray,
                   freqs: tuple[float, ...]) -> np.ndarray:
    """A sum of sinusoids per dimension that starts at 0 with zero velocity (a ramp in)."""
    out = np.zeros((len(t), dims))
    for f in freqs:
        phase = rng.uniform(0, 2 * np.pi, dims)
        out += np.sin(2 * np.pi * f * t[:, None] + phase) - np.sin(phase)
    ramp = np.clip(t / 0.3, 0, 1)[:, None]
    return ramp * out * (np.asarray(amplitude) / len(freqs))


def synthesise(problem: Problem, truth: TrueBody, *, duration: float = 3.0, seed: int = 0,
               amplitude: float = 1.0, start: np.ndarray | None = None, dt_truth: float = 0.0005,
               dt_sample: float = 0.002, noise: SensorNoise | None = SensorNoise()
               ) -> tuple[WrenchPoseSeries, WrenchPoseSeries]:
    """(measured, clean) series of one excitation; ``amplitude`` scales the reference motion.
    The clean series carries the exact velocities; the measured one has none.

    Free body: the pose tracks a random 6-D reference (gravity compensated, about 5 cm and 0.5 rad
    at amplitude 1). On a support: a horizontal push at the wrench point tracks a random planar
    path (about 5 cm, sliding). On a joint: the joint coordinate tracks a random reference about
    its start (0.08 m or 0.5 rad), pushed at the wrench point along the motion.
    """
    rng = np.random.default_rng(seed)
    sub = int(round(dt_sample / dt_truth))
    model = _truth_model(problem, truth, dt_truth)
    data = mujoco.MjData(model)
    if start is not None:
        data.qpos[:len(start)] = start
    elif problem.joint is None:
        data.qpos[:3] = [0, 0, (problem.support.height if problem.support else 0.0)
                         + (problem.shapes[0].sizes[-1] / 2 if problem.support else 0.3)]
    mujoco.mj_forward(model, data)
    n = int(round(duration / dt_sample))
    t = np.arange(n) * dt_sample
    b = model.body("body").id
    site = model.site("wrench_point").id
    g = np.asarray(problem.gravity, float)
    m = truth.mass
    i_max = float(np.max(np.linalg.eigvalsh(truth.inertia)))
    wn = 2 * np.pi * 4.0                       # controller bandwidth, Hz -> rad/s
    freqs = (0.4, 0.9, 1.7)
    poses, wrench, velocity = np.zeros((n, 7)), np.zeros((n, 6)), np.zeros((n, 6))
    if problem.joint is None and problem.support is None:
        ref_p = data.qpos[:3] + _smooth_random(rng, t, 3, np.full(3, 0.05 * amplitude), freqs)
        ref_r = _smooth_random(rng, t, 3, np.full(3, 0.5 * amplitude), freqs)
        q0 = data.qpos[3:7].copy()
    elif problem.joint is None:
        ref_p = data.qpos[:3] + _smooth_random(rng, t, 3, np.array([0.05, 0.05, 0.0]) * amplitude, (0.5, 1.1))
    else:
        span = 0.08 if problem.joint.kind == "prismatic" else 0.5
        ref_q = _smooth_random(rng, t, 1, np.array([span * amplitude]), freqs)[:, 0]
        q_start = float(data.qpos[0])
        ref_q += q_start
    for k in range(n):
        poses[k], velocity[k] = _observe(model, data, b)
        w = np.zeros(6)
        if problem.joint is None and problem.support is None:
            vel = data.qvel[:3]
            omega_world = pose.rotate(data.xquat[b], data.qvel[3:6])
            w[:3] = -m * g + m * (wn ** 2 * (ref_p[k] - data.xpos[b]) - 2 * wn * 0.7 * vel)
            q_ref = pose.multiply(pose.from_rotation_vector(ref_r[k]), q0)
            err = pose.rotation_vector(pose.multiply(q_ref, pose.conjugate(data.xquat[b])))
            tau_c = i_max * (wn ** 2 * err - 2 * wn * 0.7 * omega_world)
            # the torque about the grasp point that gives tau_c about the centre of mass
            w[3:] = tau_c - np.cross(data.xipos[b] - data.site_xpos[site], w[:3])
        elif problem.joint is None:
            vel = data.qvel[:3]
            w[:2] = m * (wn ** 2 * (ref_p[k, :2] - data.xpos[b, :2]) - 2 * wn * 0.7 * vel[:2])
        else:
            qd = data.qvel[0]
            axis = np.asarray(problem.joint.axis)
            if problem.joint.kind == "prismatic":
                u = m * (wn ** 2 * (ref_q[k] - data.qpos[0]) - 2 * wn * 0.7 * qd)
                w[:3] = u * axis
            else:
                hinge = float(axis @ np.asarray(truth.inertia) @ axis)
                lever = data.site_xpos[site] - np.asarray(problem.joint.anchor)
                lever -= axis * (lever @ axis)
                r = max(np.linalg.norm(lever), 1e-3)
                i_h = hinge + m * float(np.linalg.norm(np.cross(axis, data.xipos[b] - problem.joint.anchor)) ** 2)
                tau = i_h * (wn ** 2 * (ref_q[k] - data.qpos[0]) - 2 * wn * 0.7 * qd)
                w[:3] = tau / r * np.cross(axis, lever / r)
        wrench[k] = w
        data.ctrl[:] = w
        mujoco.mj_step(model, data, nstep=sub)
    clean = WrenchPoseSeries(t, wrench[:, :3], wrench[:, 3:], poses[:, :3], poses[:, 3:], velocity)
    return _measured(clean, noise, rng), clean


def spin(problem: Problem, truth: TrueBody, w0: np.ndarray, *, duration: float = 1.0, seed: int = 0,
         dt_truth: float = 0.0005, dt_sample: float = 0.002, noise: SensorNoise | None = None,
         integrator: str = "RK4") -> tuple[WrenchPoseSeries, WrenchPoseSeries]:
    """(measured, clean) series of a free body spinning from ``w0`` (rad/s, body frame), held
    up against gravity by a force at the wrench point, under a random wrench (0.3 N, 3 mN m);
    the truth integrated at ``dt_truth`` with ``integrator`` (MJCF's name for it: one of ``Problem``'s integrators).
    Noise-free unless ``noise`` is given."""
    if problem.joint is not None or problem.support is not None:
        raise ValueError("spin() drives a free body")
    rng = np.random.default_rng(seed)
    model = _truth_model(problem, truth, dt_truth)
    model.opt.integrator = INTEGRATORS[integrator]
    data = mujoco.MjData(model)
    data.qpos[:3] = [0, 0, 0.3]
    data.qvel[3:] = w0
    b, sub = model.body("body").id, int(round(dt_sample / dt_truth))
    n = int(round(duration / dt_sample))
    poses, wrench, velocity = np.zeros((n, 7)), np.zeros((n, 6)), np.zeros((n, 6))
    for k in range(n):
        poses[k], velocity[k] = _observe(model, data, b)
        wrench[k, :3] = -truth.mass * np.asarray(problem.gravity, float) + rng.normal(0, 0.3, 3)
        wrench[k, 3:] = rng.normal(0, 0.003, 3)
        data.ctrl[:] = wrench[k]
        mujoco.mj_step(model, data, nstep=sub)
    t = np.arange(n) * dt_sample
    clean = WrenchPoseSeries(t, wrench[:, :3], wrench[:, 3:], poses[:, :3], poses[:, 3:], velocity)
    return _measured(clean, noise, rng), clean


def _observe(model: mujoco.MjModel, data: mujoco.MjData, body: int) -> tuple[np.ndarray, np.ndarray]:
    """The body's pose and its free-joint velocity (the frame origin's world velocity, the
    body-frame angular velocity) in the current state."""
    mujoco.mj_forward(model, data)       # after mj_step, xpos and friends describe the state before it
    spatial = np.zeros(6)
    mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_XBODY, body, spatial, 0)
    velocity = np.concatenate([spatial[3:], data.xmat[body].reshape(3, 3).T @ spatial[:3]])
    return np.concatenate([data.xpos[body], data.xquat[body]]), velocity


def _measured(clean: WrenchPoseSeries, noise: SensorNoise | None, rng: np.random.Generator) -> WrenchPoseSeries:
    """What a sensor reports of a clean series: the wrench quantised plus a quantum of noise, the
    pose with tracker noise; no velocities."""
    if noise is None:
        return clean
    t, wrench, n = clean.t, clean.wrench, len(clean)
    poses = clean.poses
    res = np.array([noise.force_resolution] * 3 + [noise.torque_resolution] * 3)
    measured_w = np.round(wrench / res) * res + rng.normal(0, 1, wrench.shape) * res
    pos = poses[:, :3] + rng.normal(0, noise.position, (n, 3))
    quat = pose.multiply(poses[:, 3:], pose.from_rotation_vector(rng.normal(0, noise.rotation, (n, 3))))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    return WrenchPoseSeries(t, measured_w[:, :3], measured_w[:, 3:], pos, quat)

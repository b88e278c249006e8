"""The candidate body of identification through MuJoCo (RigPI stage 2): a theta becomes an MjModel
of the body (free, or one link on a joint) and, for a body on a support, the static geometry it
touched; the measured wrench drives it through actuators (see ``shooting``)."""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from simuguard_gym.identify import pose
from simuguard_gym.identify.inertia import from_entries, make_physical, principal
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.shapes import Shape, mass_properties


_GEOM_TYPES = {"box": mujoco.mjtGeom.mjGEOM_BOX, "sphere": mujoco.mjtGeom.mjGEOM_SPHERE,
               "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER, "ellipsoid": mujoco.mjtGeom.mjGEOM_ELLIPSOID,
               "mesh": mujoco.mjtGeom.mjGEOM_MESH}
INTEGRATORS = {"Euler": mujoco.mjtIntegrator.mjINT_EULER, "RK4": mujoco.mjtIntegrator.mjINT_RK4,
               "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
               "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}


#: The most a free body may turn in one RK4 step of the candidate, in radians, or None where
#: RK4 holds at any sample step. Before MuJoCo 4 the free joint's RK4 loses accuracy as the body
#: turns: noise-free spins at 136 rad/s (0.27 rad per 2 ms step) came out 5 % off in inertia
#: with MuJoCo 3.9, 0.9 % at 1 ms steps, exact at 0.5 ms; MuJoCo 4's RK4 recovers them at 2 ms.
RK4_TURN_PER_STEP = None if int(mujoco.__version__.split(".")[0]) >= 4 else 0.05


def add_shape(spec: mujoco.MjSpec, body: mujoco.MjsBody, shape: Shape, name: str, contact: bool) -> mujoco.MjsGeom:
    """One massless geom of ``shape`` on ``body`` (its mesh added to ``spec`` as ``name``): the
    body's inertia is set explicitly, the geom is for contacts."""
    if shape.kind == "mesh":
        mesh = spec.add_mesh(name=name)
        mesh.uservert = np.asarray(shape.vertices, float).ravel().tolist()
        mesh.userface = np.asarray(shape.faces, int).ravel().tolist()
    g = body.add_geom(type=_GEOM_TYPES[shape.kind], size=_geom_size(shape), pos=list(shape.pos),
                      quat=list(shape.quat), contype=int(contact), conaffinity=int(contact), condim=3,
                      mass=0, density=0)
    if shape.kind == "mesh":
        g.meshname = name
    return g


def _geom_size(shape: Shape) -> list[float]:
    s = list(shape.sizes)
    if shape.kind == "box":
        return [x / 2 for x in s]
    if shape.kind == "cylinder":
        return [s[0], s[1] / 2, 0.0]
    if shape.kind == "sphere":
        return [s[0], 0.0, 0.0]
    return s if shape.kind == "ellipsoid" else [0.0, 0.0, 0.0]


@dataclass
class StaticGeom:
    """A geom of the static scene around the body, in the world frame (for ParamIdentify)."""

    type: int
    size: np.ndarray
    pos: np.ndarray
    quat: np.ndarray
    mesh_vertices: np.ndarray | None = None
    mesh_faces: np.ndarray | None = None


def build_model(problem: Problem, first_pose: np.ndarray, timestep: float) -> mujoco.MjModel:
    """The identification model; theta is written into copies of it by :meth:`Shooting.models`."""
    spec = mujoco.MjSpec()
    spec.option.timestep = timestep
    spec.option.gravity = list(problem.gravity)
    world = spec.worldbody
    world.add_site(name="world_axes")
    contact = problem.support is not None or bool(problem.static_geoms)
    if problem.integrator is not None:
        spec.option.integrator = INTEGRATORS[problem.integrator]
    elif not contact and problem.joint is None:
        # A free body's rotation is smooth, and its gyroscopic term grows with the spin squared:
        # the default semi-implicit Euler at the data's 2 ms step biases the inertia by 20 % on a
        # body spinning at 60 rad/s, RK4 recovers it to the digits (tests/test_identify.py).
        spec.option.integrator = mujoco.mjtIntegrator.mjINT_RK4
    body = world.add_body(name="body")
    body.explicitinertial = True
    if hasattr(body, "simple"):
        body.simple = False          # theta moves the centre of mass off the frame (MuJoCo 4)
    # a generic starting inertial frame: compiled as not "sameframe", so later edits stay valid
    body.mass = 1.0
    body.ipos = [1e-3, 2e-3, 3e-3]
    body.iquat = list(pose.from_rotation_vector(np.array([0.1, 0.2, 0.3])))
    body.inertia = [1e-3, 1.1e-3, 1.2e-3]
    if problem.joint is None:
        body.add_freejoint()
        body.add_site(name="wrench_point", pos=list(problem.point))
        for i in range(6):
            act = spec.add_actuator(trntype=mujoco.mjtTrn.mjTRN_SITE, target="wrench_point", refsite="world_axes")
            act.gear = [1.0 if j == i else 0.0 for j in range(6)]
    else:
        r0 = pose.to_matrix(first_pose[3:])
        body.pos = list(first_pose[:3])
        body.quat = list(first_pose[3:])
        kind = mujoco.mjtJoint.mjJNT_HINGE if problem.joint.kind == "revolute" else mujoco.mjtJoint.mjJNT_SLIDE
        j = body.add_joint(name="joint", type=kind, axis=list(r0.T @ np.asarray(problem.joint.axis)),
                           pos=list(r0.T @ (np.asarray(problem.joint.anchor) - first_pose[:3])))
        j.frictionloss = 0.0
        # dry friction as the data's MuJoCo model made it, else as close to Coulomb as the step
        # allows (MuJoCo's floor is 2 steps)
        j.solref_friction = list(problem.joint.friction_solref or (2 * timestep, 1.0))
        act = spec.add_actuator(trntype=mujoco.mjtTrn.mjTRN_JOINT, target="joint")
        act.gear = [1.0, 0, 0, 0, 0, 0]
    for k, shape in enumerate(problem.shapes):
        add_shape(spec, body, shape, f"shape{k}", contact)
    if problem.support is not None:
        plane = world.add_geom(name="support", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1],
                               pos=[0, 0, problem.support.height], condim=3)
        plane.friction = [0.0, 0.005, 0.0001]
        if problem.support.solref is not None:
            plane.solref = list(problem.support.solref)
    for k, sg in enumerate(problem.static_geoms):
        g = world.add_geom(type=mujoco.mjtGeom(int(sg.type)), size=list(sg.size), pos=list(sg.pos),
                           quat=list(sg.quat), condim=3)
        g.friction = [0.0, 0.005, 0.0001]
        if sg.mesh_vertices is not None:
            mesh = spec.add_mesh(name=f"static{k}")
            mesh.uservert = np.asarray(sg.mesh_vertices, float).ravel().tolist()
            mesh.userface = np.asarray(sg.mesh_faces, int).ravel().tolist()
            g.meshname = f"static{k}"
    return spec.compile()


def _state_index(model: mujoco.MjModel) -> int:
    return mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_TIME)


def apply_theta(m: mujoco.MjModel, scratch: mujoco.MjData, problem: Problem, names: tuple[str, ...],
                theta: np.ndarray) -> None:
    """Write theta into an identification model built by :func:`build_model`."""
    b = m.body("body").id
    p = dict(zip(names, theta))
    if problem.joint is None:
        m.body_mass[b] = max(p["mass"], 1e-9)
        m.body_ipos[b] = [p["com_x"], p["com_y"], p["com_z"]]
        inertia = make_physical(from_entries([p[k] for k in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")]))
        values, axes = principal(inertia)
        m.body_inertia[b] = values
        m.body_iquat[b] = pose.from_matrix(axes)
        if "mu" in p:
            m.geom_friction[m.geom_bodyid == b, 0] = max(p["mu"], 0.0)
    elif problem.joint.kind == "prismatic":
        m.body_mass[b] = max(p["mass"], 1e-9)
        m.body_ipos[b] = 0.0
        m.body_inertia[b] = 1e-4
        m.dof_frictionloss[0] = max(p["friction"], 0.0)
        m.dof_damping[0] = max(p["damping"], 0.0)
    else:
        hinge = max(p["hinge_inertia"], 1e-12)
        anchor, axis = m.jnt_pos[0].copy(), m.jnt_axis[0].copy()
        gm = p.get("gravity_moment", 0.0)
        if gm > 0:
            # a mass gm / r at a distance r off the axis; the rest of the hinge inertia is the
            # body's own (r kept small so that part stays positive)
            r = min(0.5 * hinge / gm, 1.0)
            mass = gm / r
            m.body_ipos[b] = anchor + r * _perpendicular(axis, anchor, problem)
            m.body_mass[b] = mass
            own = max(hinge - mass * r * r, 1e-12)
        else:
            # on a vertical axis only the inertia about the axis moves the link
            m.body_ipos[b] = anchor
            m.body_mass[b] = 1.0
            own = hinge
        m.body_inertia[b] = own
        m.body_iquat[b] = [1, 0, 0, 0]
        m.dof_frictionloss[0] = max(p["friction"], 0.0)
        m.dof_damping[0] = max(p["damping"], 0.0)
    mujoco.mj_setConst(m, scratch)
    # MuJoCo 4 snaps a centre of mass near the frame origin onto it ("sameframe"), which would
    # flatten finite differences of the centre of mass
    m.body_sameframe[b] = 0


def _perpendicular(axis: np.ndarray, anchor: np.ndarray, problem: Problem) -> np.ndarray:
    c = mass_properties(problem.shapes).centroid - anchor
    u = c - axis * (c @ axis)
    if np.linalg.norm(u) < 1e-9:
        u = np.cross(axis, [1.0, 0, 0] if abs(axis[0]) < 0.9 else [0, 1.0, 0])
    return u / np.linalg.norm(u)

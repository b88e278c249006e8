"""ParamIdentify's samplers: substep listeners that read one body's pose and the wrench acting on
it from a MuJoCo env's own physics (a free body, or a link on a 1-DoF joint)."""

from __future__ import annotations


import mujoco
import numpy as np

from simuguard_gym.identify import pose
from simuguard_gym.identify.inertia import to_entries
from simuguard_gym.identify.problem import INTEGRATORS, Joint, Problem
from simuguard_gym.identify.series import WrenchPoseSeries
from simuguard_gym.identify.shapes import Shape
from simuguard_gym.identify.simulation.candidate import _GEOM_TYPES, StaticGeom


class BodyWrenchProbe:
    """A substep listener that samples one body of a MuJoCo env for identification.

    Per substep: the body's pose before the substep, and the wrench about its frame origin that
    acts on it during the substep from everything the identification model does not simulate:
    contacts with moving bodies (robot links, other objects) and ``xfrc_applied``. Contacts with
    the static scene (bodies welded to the world) are left to the model, which contains that scene.
    """

    def __init__(self, adapter, body: str) -> None:
        self.adapter = adapter
        self.body = _body_id(adapter.model, body)
        if adapter.model.body_jntnum[self.body] != 1 or adapter.model.jnt_type[
                adapter.model.body_jntadr[self.body]] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"body {body!r} must have one free joint to be identified as a free body")
        self._dof = int(adapter.model.jnt_dofadr[adapter.model.body_jntadr[self.body]])
        self.active = True
        self.errors: list[tuple[str, BaseException]] = []
        self.notes: list[str] = []
        self.start_episode()

    def start_episode(self) -> None:
        self._vel: list[np.ndarray] = []
        self._pose: list[np.ndarray] = []
        self._wrench: list[np.ndarray] = []
        self.touched_static: set[int] = set()

    def before_substep(self, phase: str) -> None:
        # "split" is the middle of a substep that robosuite runs in two halves: not a new sample
        if self.active and phase != "split":
            self._vel.append(self.adapter.data.qvel[self._dof:self._dof + 6].copy())

    def after_substep(self) -> None:
        if not self.active:
            return
        m, d, b = self.adapter.model, self.adapter.data, self.body
        # after mj_step, xpos and the contact forces both describe the state the step started from
        origin = d.xpos[b].copy()
        self._pose.append(np.concatenate([origin, d.xquat[b]]))
        wrench = np.zeros(6)
        f = d.xfrc_applied[b]
        wrench[:3] += f[:3]
        wrench[3:] += f[3:] + np.cross(d.xipos[b] - origin, f[:3])
        ncon = d.ncon
        if ncon:
            geom = d.contact.geom[:ncon]
            bodies = m.geom_bodyid[geom]
            mine = (bodies == b).any(axis=1)
            if mine.any():
                idx = np.flatnonzero(mine)
                other = np.where(bodies[idx, 0] == b, bodies[idx, 1], bodies[idx, 0])
                static = m.body_weldid[other] == 0
                self.touched_static.update(geom[idx[static]].ravel().tolist())
                idx = idx[~static]
                if idx.size:
                    local = np.zeros((idx.size, 6))
                    for row, i in enumerate(idx.tolist()):  # the contact-frame force, as MuJoCo decodes it
                        mujoco.mj_contactForce(m, d, i, local[row])
                    local = local[:, :3]
                    frame = d.contact.frame[idx].reshape(-1, 3, 3)
                    world = np.einsum("nji,nj->ni", frame, local)        # frame rows are the axes
                    # the force acts on geom2 along the normal from geom1; flip where we are geom1
                    sign = np.where(bodies[idx, 1] == b, 1.0, -1.0)[:, None]
                    world *= sign
                    wrench[:3] += world.sum(0)
                    wrench[3:] += np.cross(d.contact.pos[idx] - origin, world).sum(0)
        self._wrench.append(wrench)

    @property
    def samples(self) -> int:
        """Substeps sampled this episode."""
        return len(self._pose)

    def hook_failed(self, where: str, error: BaseException) -> None:
        self.errors.append((where, error))

    def series(self) -> WrenchPoseSeries:
        n = min(len(self._pose), len(self._vel))
        pose_a, wrench, vel = np.array(self._pose[:n]), np.array(self._wrench[:n]), np.array(self._vel[:n])
        t = np.arange(n) * self.adapter.substep_dt
        return WrenchPoseSeries(t, wrench[:, :3], wrench[:, 3:], pose_a[:, :3], pose_a[:, 3:], vel)

    def problem(self) -> Problem:
        """The body's geoms as shapes and the static geoms it touched, from the env's model."""
        m, d, b = self.adapter.model, self.adapter.data, self.body
        shapes = _shapes(m, d, b, [b])
        static = []
        for g in sorted(self.touched_static):
            if m.geom_bodyid[g] == b:
                continue
            v = f = None
            if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH:
                v, f = _mesh_arrays(m, m.geom_dataid[g])
            quat = np.zeros(4)
            mujoco.mju_mat2Quat(quat, d.geom_xmat[g])
            static.append(StaticGeom(int(m.geom_type[g]), m.geom_size[g].copy(), d.geom_xpos[g].copy(), quat, v, f))
        return Problem(shapes=shapes, gravity=tuple(m.opt.gravity), static_geoms=tuple(static),
                       integrator=INTEGRATORS[int(m.opt.integrator)])

    def truth(self) -> dict[str, float]:
        """The model's own values of theta (inertia about the centre of mass, body frame)."""
        m, b = self.adapter.model, self.body
        r = pose.to_matrix(m.body_iquat[b])
        inertia = r @ np.diag(m.body_inertia[b]) @ r.T
        out = dict(zip(("mass", "com_x", "com_y", "com_z", "ixx", "iyy", "izz", "ixy", "ixz", "iyz"),
                       [float(m.body_mass[b]), *m.body_ipos[b], *to_entries(inertia)]))
        mine = m.geom_friction[m.geom_bodyid == b, 0]
        others = [m.geom_friction[g, 0] for g in self.touched_static if m.geom_bodyid[g] != b]
        if others:
            out["mu"] = float(max(mine.max(), max(others)))   # MuJoCo's default combination
        return out


class LinkProbe:
    """A substep listener that samples a link on a hinge or slide joint of a MuJoCo env.

    The link is the joint's body with everything mounted below it (a door with its handle), on a
    parent welded to the world (a cabinet, a frame). Per substep: the link's pose and joint
    velocity before the substep, and the generalised force on the joint from everything the
    identification model does not contain: contacts (the robot's gripper on the handle), the
    joint's limits, springs, actuators and applied forces. The model contains the link's inertia,
    gravity, and the joint's dry friction and damping, which are what is identified. The series
    carries that force as a wrench along the axis (a torque on a hinge, a force on a slide).
    """

    def __init__(self, adapter, body: str, joint: str | None = None) -> None:
        m = adapter.model
        self.adapter = adapter
        self.body = _body_id(m, body)
        own = [int(m.body_jntadr[self.body]) + k for k in range(int(m.body_jntnum[self.body]))]
        kinds = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
        if len(own) != 1 or int(m.jnt_type[own[0]]) not in kinds:
            raise ValueError(f"body {body!r} must move on one hinge or slide joint to be identified as a link, or "
                             f"on one free joint as a free body; its joints: {[m.joint(j).name for j in own]}")
        self.joint = own[0]
        if joint is not None and joint != m.joint(self.joint).name:
            raise ValueError(f"joint {joint!r} does not move body {body!r}; its joint is {m.joint(self.joint).name!r}")
        kind = int(m.jnt_type[self.joint])
        if m.body_weldid[m.body_parentid[self.body]] != 0:
            raise ValueError(f"body {body!r} hangs from a moving body: a link is identified on a parent welded "
                             "to the world")
        self.kind = "revolute" if kind == mujoco.mjtJoint.mjJNT_HINGE else "prismatic"
        self.dof = int(m.jnt_dofadr[self.joint])
        self.subtree = [b for b in range(m.nbody) if _descends(m, b, self.body)]
        self.notes: list[str] = []
        inner = [m.joint(j).name for j in range(m.njnt) if m.jnt_bodyid[j] in self.subtree and j != self.joint]
        if inner:
            self.notes.append(f"the link carries other joints ({', '.join(inner)}): it is identified as if "
                              "they were locked")
        self.active = True
        self.errors: list[tuple[str, BaseException]] = []
        self._scratch = np.zeros(m.nv)
        self.start_episode()

    def start_episode(self) -> None:
        self._qvel: list[float] = []
        self._pose: list[np.ndarray] = []
        self._force: list[float] = []

    def before_substep(self, phase: str) -> None:
        if self.active and phase != "split":      # see BodyWrenchProbe
            self._qvel.append(float(self.adapter.data.qvel[self.dof]))

    def after_substep(self) -> None:
        if not self.active:
            return
        m, d, dof = self.adapter.model, self.adapter.data, self.dof
        # after mj_step the kinematics and forces describe the state the step started from
        self._pose.append(np.concatenate([d.xpos[self.body], d.xquat[self.body]]))
        qvel = self._qvel[-1] if self._qvel else float(d.qvel[dof])
        # the passive force less the joint's own damper (MuJoCo computes it at the start velocity)
        force = d.qfrc_constraint[dof] + d.qfrc_actuator[dof] + d.qfrc_applied[dof] + d.qfrc_passive[dof] \
            + m.dof_damping[dof] * qvel
        nefc = d.nefc
        if nefc:   # the joint's own dry friction is the model's, not a measured force
            own = (d.efc_type[:nefc] == mujoco.mjtConstraint.mjCNSTR_FRICTION_DOF) & (d.efc_id[:nefc] == dof)
            force -= float(d.efc_force[:nefc][own].sum())
        pushed = [b for b in self.subtree if d.xfrc_applied[b].any()]
        if pushed:
            self._scratch[:] = 0.0
            for b in pushed:
                mujoco.mj_applyFT(m, d, d.xfrc_applied[b, :3], d.xfrc_applied[b, 3:], d.xipos[b], b, self._scratch)
            force += self._scratch[dof]
        self._force.append(float(force))

    @property
    def samples(self) -> int:
        """Substeps sampled this episode."""
        return len(self._pose)

    def hook_failed(self, where: str, error: BaseException) -> None:
        self.errors.append((where, error))

    def _axis_anchor(self) -> tuple[np.ndarray, np.ndarray]:
        d = self.adapter.data
        return d.xaxis[self.joint].copy(), d.xanchor[self.joint].copy()

    def series(self) -> WrenchPoseSeries:
        n = min(len(self._pose), len(self._qvel))
        poses, qd, force = np.array(self._pose[:n]), np.array(self._qvel[:n]), np.array(self._force[:n])
        axis, anchor = self._axis_anchor()
        wrench, velocity = np.zeros((n, 6)), np.zeros((n, 6))
        if self.kind == "prismatic":
            wrench[:, :3] = force[:, None] * axis
            velocity[:, :3] = qd[:, None] * axis
        else:
            wrench[:, 3:] = force[:, None] * axis
            omega = qd[:, None] * axis
            velocity[:, :3] = np.cross(omega, poses[:, :3] - anchor)
            velocity[:, 3:] = pose.rotate(pose.conjugate(poses[:, 3:]), omega)     # body frame
        t = np.arange(n) * self.adapter.substep_dt
        return WrenchPoseSeries(t, wrench[:, :3], wrench[:, 3:], poses[:, :3], poses[:, 3:], velocity)

    def problem(self) -> Problem:
        """The link's geoms as shapes (for the prior) and its joint, from the env's model."""
        m, d = self.adapter.model, self.adapter.data
        axis, anchor = self._axis_anchor()
        joint = Joint(self.kind, tuple(axis), tuple(anchor), friction_solref=tuple(m.dof_solref[self.dof]))
        return Problem(shapes=_shapes(m, d, self.body, self.subtree), joint=joint, gravity=tuple(m.opt.gravity),
                       integrator=INTEGRATORS[int(m.opt.integrator)])

    def truth(self) -> dict[str, float]:
        """The model's own values: the joint's diagonal of the mass matrix (the link's mass or
        its inertia about the axis, the joint's armature included), its gravity moment, friction
        and damping."""
        m, d, dof = self.adapter.model, self.adapter.data, self.dof
        full = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, full, d.qM)
        out = {"mass" if self.kind == "prismatic" else "hinge_inertia": float(full[dof, dof])}
        problem = self.problem()
        if "gravity_moment" in problem.names:
            axis, anchor = self._axis_anchor()
            mass = float(m.body_subtreemass[self.body])
            arm = d.subtree_com[self.body] - anchor
            out["gravity_moment"] = mass * float(np.linalg.norm(arm - axis * (arm @ axis)))
        out["friction"] = float(m.dof_frictionloss[dof])
        out["damping"] = float(m.dof_damping[dof])
        return out


def _body_id(m: mujoco.MjModel, body: str) -> int:
    try:
        return int(m.body(body).id)
    except KeyError:
        names = [m.body(i).name for i in range(m.nbody)]
        raise ValueError(f"no body named {body!r}; bodies: {names}") from None


def _descends(m: mujoco.MjModel, b: int, root: int) -> bool:
    while b > 0:
        if b == root:
            return True
        b = int(m.body_parentid[b])
    return root == 0


def _shapes(m: mujoco.MjModel, d: mujoco.MjData, frame_body: int, bodies: list[int]) -> tuple[Shape, ...]:
    """The bodies' box/sphere/cylinder/ellipsoid/mesh geoms as shapes in ``frame_body``'s frame
    (collidable ones; all of them where none collides)."""
    kinds = {v: k for k, v in _GEOM_TYPES.items()}
    geoms = [g for g in np.flatnonzero(np.isin(m.geom_bodyid, bodies)) if int(m.geom_type[g]) in kinds]
    solid = [g for g in geoms if m.geom_contype[g] or m.geom_conaffinity[g]]
    inverse = pose.conjugate(d.xquat[frame_body])
    shapes = []
    for g in solid or geoms:
        kind, size = kinds[int(m.geom_type[g])], m.geom_size[g]
        if m.geom_bodyid[g] == frame_body:
            pos, quat = tuple(m.geom_pos[g]), tuple(m.geom_quat[g])
        else:   # a geom of a body below the frame's: its pose now, in the frame
            world_quat = np.zeros(4)
            mujoco.mju_mat2Quat(world_quat, d.geom_xmat[g])
            pos = tuple(pose.rotate(inverse, d.geom_xpos[g] - d.xpos[frame_body]))
            quat = tuple(pose.multiply(inverse, world_quat))
        if kind == "mesh":
            v, f = _mesh_arrays(m, m.geom_dataid[g])
            shapes.append(Shape("mesh", (), pos, quat, v, f))
            continue
        sizes = {"box": tuple(2 * size), "sphere": (size[0],), "cylinder": (size[0], 2 * size[1]),
                 "ellipsoid": tuple(size)}[kind]
        shapes.append(Shape(kind, sizes, pos, quat))
    if not shapes:
        raise ValueError(f"body {m.body(frame_body).name!r} has no box/sphere/cylinder/ellipsoid/mesh geom")
    return tuple(shapes)


def _mesh_arrays(m: mujoco.MjModel, mesh: int) -> tuple[np.ndarray, np.ndarray]:
    va, vn = m.mesh_vertadr[mesh], m.mesh_vertnum[mesh]
    fa, fn = m.mesh_faceadr[mesh], m.mesh_facenum[mesh]
    return m.mesh_vert[va:va + vn].copy(), m.mesh_face[fa:fa + fn].copy()


def probe_for(adapter, body: str, joint: str | None = None) -> BodyWrenchProbe | LinkProbe:
    """The sampler for ``body``: a free body's, or a link's on its hinge or slide joint."""
    m = adapter.model
    b = _body_id(m, body)
    free = int(m.body_jntnum[b]) == 1 and m.jnt_type[m.body_jntadr[b]] == mujoco.mjtJoint.mjJNT_FREE
    if free and joint is None:
        return BodyWrenchProbe(adapter, body)
    return LinkProbe(adapter, body, joint)

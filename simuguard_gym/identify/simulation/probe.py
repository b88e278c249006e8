"""ParamIdentify's sampler: a substep listener that reads one body's pose and the wrench acting
on it from a MuJoCo env's own physics."""

from __future__ import annotations


import mujoco
import numpy as np

from simuguard_gym.identify import pose
from simuguard_gym.identify.inertia import to_entries
from simuguard_gym.identify.problem import Problem
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
        try:
            self.body = adapter.model.body(body).id
        except KeyError:
            names = [adapter.model.body(i).name for i in range(adapter.model.nbody)]
            raise ValueError(f"no body named {body!r}; bodies: {names}") from None
        if adapter.model.body_jntnum[self.body] != 1 or adapter.model.jnt_type[
                adapter.model.body_jntadr[self.body]] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"body {body!r} must have one free joint to be identified as a free body")
        self._dof = int(adapter.model.jnt_dofadr[adapter.model.body_jntadr[self.body]])
        self.active = True
        self.errors: list[tuple[str, BaseException]] = []
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
        shapes = []
        kinds = {v: k for k, v in _GEOM_TYPES.items()}
        for g in np.flatnonzero(m.geom_bodyid == b):
            kind = kinds.get(int(m.geom_type[g]))
            if kind is None or (m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0):
                continue
            size = m.geom_size[g]
            if kind == "mesh":
                v, f = _mesh_arrays(m, m.geom_dataid[g])
                shapes.append(Shape("mesh", (), tuple(m.geom_pos[g]), tuple(m.geom_quat[g]), v, f))
                continue
            sizes = {"box": tuple(2 * size), "sphere": (size[0],), "cylinder": (size[0], 2 * size[1]),
                     "ellipsoid": tuple(size)}[kind]
            shapes.append(Shape(kind, sizes, tuple(m.geom_pos[g]), tuple(m.geom_quat[g])))
        if not shapes:
            raise ValueError(f"body {m.body(b).name!r} has no collidable box/sphere/cylinder/ellipsoid/mesh geom")
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
        return Problem(shapes=tuple(shapes), gravity=tuple(m.opt.gravity), static_geoms=tuple(static))

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


def _mesh_arrays(m: mujoco.MjModel, mesh: int) -> tuple[np.ndarray, np.ndarray]:
    va, vn = m.mesh_vertadr[mesh], m.mesh_vertnum[mesh]
    fa, fn = m.mesh_faceadr[mesh], m.mesh_facenum[mesh]
    return m.mesh_vert[va:va + vn].copy(), m.mesh_face[fa:fa + fn].copy()

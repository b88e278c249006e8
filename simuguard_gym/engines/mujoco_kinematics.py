"""The MuJoCo adapter's bodies in motion: poses and centre-of-mass velocities decoded from
recorded states (free bodies in numpy, bodies on joints by MuJoCo's kinematics on a scratch
MjData), a cheap bound of their speeds, and the stage box around the robot and the scene."""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

import mujoco
import numpy as np

from simuguard_gym.engines.libmujoco import symbol_addresses
from simuguard_gym.physics.state import SpeedBound, StateRows
from simuguard_gym.physics.vector_math import cross, quat_to_mat

_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)
logger = logging.getLogger(__name__)


def _load_native() -> tuple[Any, tuple[int, ...]] | None:
    """The C loop of :meth:`MujocoKinematics._kinematics` (setup.py builds it where it can), with
    the functions it calls; None where either is missing or ``SIMUGUARD_NATIVE=0``."""
    if os.environ.get("SIMUGUARD_NATIVE", "1") == "0":
        return None
    try:
        import _simuguard_mujoco_kinematics as extension
    except ImportError:
        return None
    functions = symbol_addresses("mj_stateSize", "mj_setState", "mj_kinematics", "mj_comPos", "mj_comVel")
    if functions is None:
        logger.info("simuguard: libmujoco's functions not found; kinematics decoded in Python")
        return None
    return extension.kinematics, functions


_NATIVE = _load_native()


def free_body_motion(q: np.ndarray, v: np.ndarray, ipos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free bodies' angular velocity, centre-of-mass offset from the frame origin and centre-of-mass
    velocity (world frame, each (n, b, 3)) from their qpos (n, b, 7), qvel (n, b, 6) and centres
    of mass in their frames ``ipos`` (b, 3). The one function every decoder of free bodies uses:
    recorded velocities are compared bit for bit on replay, and einsum's sums (hence the last
    bits) follow the operands' layout, which is why the layout is fixed here."""
    n, b = q.shape[:2]
    rot = quat_to_mat(q[..., 3:7].reshape(-1, 4)).reshape(n, b, 3, 3)
    omega = np.einsum("nbij,nbj->nbi", rot, v[..., 3:6])  # free-joint angular velocity is local
    offset = np.einsum("nbij,bj->nbi", rot, ipos)
    return omega, offset, v[..., :3] + cross(omega, offset)


class BodyColumns(NamedTuple):
    """Where a set of bodies' states are: the columns of the free ones and of the others, and
    the free ones' qpos (k, 7) and qvel (k, 6) elements in an integration state."""

    free: np.ndarray
    other: np.ndarray
    qpos: np.ndarray
    qvel: np.ndarray


class MujocoKinematics:
    """Body states from recorded states, mixed into :class:`~simuguard_gym.engines.mujoco.MujocoAdapter`."""

    model: mujoco.MjModel
    data: mujoco.MjData
    _free_qpos: np.ndarray
    _free_qvel: np.ndarray
    _body_columns: dict[bytes, BodyColumns]
    #: Static geometry larger than this (m, across) does not bound the stage (see stage_box).
    STAGE_GEOM_SIZE = 4.0

    def body_states(self, states: np.ndarray, ids: np.ndarray, *,
                    kinematics: dict[str, tuple[np.ndarray, ...]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Poses (n, len(ids), 7: position, quaternion wxyz of the body frame) and centre-of-mass
        velocities (n, len(ids), 6: linear, angular, world frame) from integration states (n, S).

        Free bodies are decoded from qpos/qvel with numpy; other bodies (on hinges or slides) run
        MuJoCo's kinematics on a scratch MjData, never on the env's own data (kept in
        ``kinematics["all"]`` when a dict is given, for another decode of the same states).
        """
        n = len(states)
        pose = np.zeros((n, len(ids), 7))
        vel = np.zeros((n, len(ids), 6))
        if n == 0 or len(ids) == 0:
            return pose, vel
        columns = self._columns_of(ids)
        cols = columns.free
        if cols.size:
            self._free_body_states(states[:, columns.qpos], states[:, columns.qvel], ids[cols], pose, vel, cols)
        slow = columns.other
        if slow.size:
            computed = self._kinematics(states)
            if kinematics is not None:
                kinematics["all"] = computed
            _fill_from_kinematics(self.model, computed, ids[slow], pose, vel, slow)
        return pose, vel

    def _columns_of(self, ids: np.ndarray) -> BodyColumns:
        """The :class:`BodyColumns` of ``ids`` (made once per set of bodies and model: an episode's
        start decodes one state, where indexing would cost as much as the maths)."""
        key = np.asarray(ids, np.int64).tobytes()
        found = self._body_columns.get(key)
        if found is None:
            is_free = self._free_qpos[ids] >= 0
            free = np.flatnonzero(is_free)
            found = self._body_columns[key] = BodyColumns(
                free=free, other=np.flatnonzero(~is_free), qpos=self._free_qpos[ids[free]][:, None] + np.arange(7),
                qvel=self._free_qvel[ids[free]][:, None] + np.arange(6))
        return found

    def body_states_of_rows(self, rows: "StateRows", buffer: np.ndarray, ids: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`body_states` of the states held in ``buffer``'s rows (``rows``' form), bit for bit;
        where every body of ``ids`` is free only their qpos and qvel are gathered from the rows,
        without building whole state vectors."""
        free_qpos = self._free_qpos[ids]
        if not len(ids) or (free_qpos < 0).any():
            return self.body_states(rows.states(buffer), ids)
        n, k = len(buffer), len(ids)
        qpos, qvel = free_qpos[:, None] + np.arange(7), self._free_qvel[ids][:, None] + np.arange(6)
        words = buffer.view(np.float64)
        # Indexed exactly as body_states indexes its states: the results' memory layout is the
        # same, and einsum's sums (hence the last bits) follow the layout.
        q, v = words[:, rows.words(qpos)], words[:, rows.words(qvel)]
        pose, vel = np.zeros((n, k, 7)), np.zeros((n, k, 6))
        self._free_body_states(q, v, ids, pose, vel, np.arange(k))
        return pose, vel

    def _free_body_states(self, q: np.ndarray, v: np.ndarray, ids: np.ndarray, pose: np.ndarray, vel: np.ndarray,
                          cols: np.ndarray) -> None:
        """Fill ``pose``/``vel`` columns ``cols`` with free bodies ``ids`` from their qpos (n, b, 7)
        and qvel (n, b, 6)."""
        omega, _, com_velocity = free_body_motion(q, v, self.model.body_ipos[ids])
        pose[:, cols] = q
        vel[:, cols, :3] = com_velocity
        vel[:, cols, 3:] = omega

    def speed_bound(self, ids: np.ndarray) -> SpeedBound:
        """sqrt(2 (|v|^2 + |w|^2 |c|^2)) >= |v| + |w| |c| bounds a free body's centre-of-mass speed
        (origin velocity v, angular velocity w, centre-of-mass offset c) from its six qvel
        elements. A body on other joints is bounded through its chain of joints to the world:
        its speed is at most sum_k r_k |qvel_k| <= sqrt(N sum_k r_k^2 qvel_k^2) over the N dofs
        of the chain, r_k = 1 for a translation and, for a rotation, the longest the lever from
        the joint's anchor to the centre of mass can be (the lengths of the body frames between
        them, added up). A chain through a mocap body is moved by code: unbounded."""
        m = self.model
        rows: list[tuple[list[int], list[float]]] = []
        unbounded = np.zeros(len(ids), bool)
        for i, body in enumerate(np.asarray(ids).tolist()):
            if self._free_qvel[body] >= 0:
                at = int(self._free_qvel[body])
                arm2 = float(np.sum(m.body_ipos[body] ** 2))
                rows.append((list(range(at, at + 6)), [2.0] * 3 + [2.0 * arm2] * 3))
                continue
            chain = self._chain_levers(body)
            if chain is None:
                unbounded[i] = True
                rows.append(([], []))
                continue
            elements, levers = chain
            rows.append((elements, [len(elements) * r * r for r in levers]))
        per = max([len(e) for e, _ in rows] + [6])
        elements = np.zeros((len(rows), per), np.int64)  # padding: any element, weight 0
        weights = np.zeros((len(rows), per))
        for i, (e, w) in enumerate(rows):
            elements[i, :len(e)], weights[i, :len(w)] = e, w
        return SpeedBound(elements.reshape(-1), weights, unbounded if unbounded.any() else None)

    def _chain_levers(self, body: int) -> tuple[list[int], list[float]] | None:
        """The qvel elements (state indices) of every dof between ``body`` and the world, and the
        lever of each (see :meth:`speed_bound`); None through a mocap body."""
        m = self.model
        qvel_offset = next(c.offset for c in self._layout if c.name == "qvel")
        reach = float(np.linalg.norm(m.body_ipos[body]))  # from the frame of b to the centre of mass
        elements: list[int] = []
        levers: list[float] = []
        b = body
        while b != 0:
            if m.body_mocapid[b] >= 0:
                return None
            for j in range(int(m.body_jntadr[b]), int(m.body_jntadr[b] + m.body_jntnum[b])):
                kind, dof = int(m.jnt_type[j]), qvel_offset + int(m.jnt_dofadr[j])
                anchor = reach + float(np.linalg.norm(m.jnt_pos[j]))
                if kind == int(mujoco.mjtJoint.mjJNT_SLIDE):
                    elements.append(dof), levers.append(1.0)
                elif kind == int(mujoco.mjtJoint.mjJNT_HINGE):
                    elements.append(dof), levers.append(anchor)
                elif kind == int(mujoco.mjtJoint.mjJNT_BALL):
                    elements += range(dof, dof + 3)
                    levers += [anchor] * 3
                else:  # free: the frame origin's velocity, then the local angular velocity
                    elements += range(dof, dof + 6)
                    levers += [1.0] * 3 + [reach] * 3
            reach += float(np.linalg.norm(m.body_pos[b]))
            b = int(m.body_parentid[b])
        return elements, levers

    def _kinematics(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every body's xpos, xquat, cvel, xipos and its subtree's centre of mass, per state."""
        m = self.model
        scratch = self._scratch_data()
        n = len(states)
        # The substep loop holds only C calls and whole-array copies; gathers run vectorised after.
        xpos, xquat = np.empty((n, m.nbody, 3)), np.empty((n, m.nbody, 4))
        cvel, xipos, com = np.empty((n, m.nbody, 6)), np.empty((n, m.nbody, 3)), np.empty((n, m.nbody, 3))
        if _NATIVE is not None and n and states.ndim == 2 and states.shape[1] == mujoco.mj_stateSize(m, _INTEGRATION):
            loop, functions = _NATIVE
            arrays = (scratch.xpos, scratch.xquat, scratch.cvel, scratch.xipos, scratch.subtree_com)
            loop(functions, m._address, scratch._address, _INTEGRATION, np.ascontiguousarray(states, np.float64),
                 tuple((a.ctypes.data, a.size) for a in arrays), (xpos, xquat, cvel, xipos, com))
            return xpos, xquat, cvel, xipos, com
        for k in range(n):
            mujoco.mj_setState(m, scratch, states[k], _INTEGRATION)
            mujoco.mj_kinematics(m, scratch)
            mujoco.mj_comPos(m, scratch)
            mujoco.mj_comVel(m, scratch)
            xpos[k], xquat[k], cvel[k] = scratch.xpos, scratch.xquat, scratch.cvel
            xipos[k], com[k] = scratch.xipos, scratch.subtree_com
        return xpos, xquat, cvel, xipos, com

    def _scratch_data(self) -> mujoco.MjData:
        if getattr(self, "_scratch", None) is None or self._scratch_model is not self.model:
            self._scratch, self._scratch_model = mujoco.MjData(self.model), self.model
        return self._scratch

    def stage_box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The world box (lower, upper corner) around the robot's bodies and the static collision
        geometry of at most ``STAGE_GEOM_SIZE`` across (planes, floors and walls left out), in the
        current state: where the task happens. None for a scene with neither."""
        state = np.empty(self.state_size)
        self.read_state(state)
        return self.stage_box_of(state)

    def stage_box_of(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`stage_box` in ``state`` (one from ``read_state``), of the model as it is now."""
        m = self.model
        robot = self.body_table().robot_mask
        scratch = self._scratch_data()
        mujoco.mj_setState(m, scratch, state, _INTEGRATION)
        mujoco.mj_kinematics(m, scratch)
        points = scratch.xpos[robot]
        geoms = np.flatnonzero((m.body_weldid[m.geom_bodyid] == 0) & (m.geom_type != int(mujoco.mjtGeom.mjGEOM_PLANE))
                               & ((m.geom_contype | m.geom_conaffinity) != 0))
        if geoms.size:  # most locomotion scenes have none but the floor plane
            rot = scratch.geom_xmat[geoms].reshape(-1, 3, 3)
            center = scratch.geom_xpos[geoms] + np.einsum("nij,nj->ni", rot, m.geom_aabb[geoms, :3])
            half = np.einsum("nij,nj->ni", np.abs(rot), m.geom_aabb[geoms, 3:])
            small = (2 * half <= self.STAGE_GEOM_SIZE).all(axis=1)
            lo, hi = np.concatenate([points, (center - half)[small]]), np.concatenate([points, (center + half)[small]])
        else:
            lo = hi = points
        if not len(lo):
            return None
        return lo.min(axis=0), hi.max(axis=0)


def _fill_from_kinematics(m: mujoco.MjModel, kinematics: tuple[np.ndarray, ...], ids: np.ndarray, pose: np.ndarray,
                          vel: np.ndarray, cols: np.ndarray) -> None:
    """Columns ``cols`` of poses and centre-of-mass velocities, for bodies ``ids``, from
    :meth:`MujocoAdapter._kinematics`."""
    xpos, xquat, cvel, xipos, com = kinematics
    omega = cvel[:, ids, :3]
    pose[:, cols, :3] = xpos[:, ids]
    pose[:, cols, 3:] = xquat[:, ids]
    vel[:, cols, :3] = cvel[:, ids, 3:] + cross(omega, xipos[:, ids] - com[:, m.body_rootid[ids]])
    vel[:, cols, 3:] = omega

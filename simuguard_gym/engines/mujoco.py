"""MuJoCo adapter: any env that steps a ``mujoco.MjData`` (Gymnasium ``MujocoEnv``, robosuite,
Gymnasium-Robotics, Meta-World, dm_control, a raw model and data).

Its substeps reach the hooks through MuJoCo's own step functions, interposed while an adapter is
attached (:mod:`~simuguard_gym.engines.mujoco_hooking`): whole substeps (``mj_step``, also with
``nstep``) and split ones (``mj_step1``, the env's writes, ``mj_step2``: robosuite's
``lite_physics``). :meth:`MujocoAdapter.refresh` follows an env that builds a new MjData on reset
(robosuite's hard reset).

What is recorded for substep k: body states are those *after* the substep (decoded from the
integration state, which is read anyway for the fingerprint), contacts and contact forces are
those the substep *applied* (``data.contact`` and ``efc_force`` after ``mj_step`` belong to the
collision detection at the substep's start). So a velocity jump at record k comes from the
contact forces of record k.
"""

from __future__ import annotations

import ctypes
import functools
import zlib
from typing import Any, Callable

import mujoco
import numpy as np

from simuguard_gym.engines.base import BodyTableMixin
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints, staged_counts
from simuguard_gym.physics.hooks import SubstepHooks
from simuguard_gym.physics.state import SpeedBound, StateComponent, StateRows
from simuguard_gym.physics.contacts import merge_contact_points
from simuguard_gym.engines import mujoco_hooking, mujoco_model
from simuguard_gym.engines.mujoco_hooking import MujocoLocation
from simuguard_gym.engines.mujoco_struct import live_fields
from simuguard_gym.physics.vector_math import cross, quat_to_mat

#: mjtState bits of the full integration state, in MuJoCo's own order.
_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)
_STATE_NAMES = {
    int(getattr(mujoco.mjtState, name)): name[len("mjSTATE_"):].lower()
    for name in dir(mujoco.mjtState)
    if name.startswith("mjSTATE_")
}

#: The fields of mjContact that contact decoding needs (friction: the two tangential coefficients).
_CONTACT_FIELDS = np.dtype([("dist", "<f8"), ("pos", "<f8", 3), ("frame", "<f8", 9), ("friction", "<f8", 2), ("geom", "<i4", 2),
                            ("efc_address", "<i4"), ("dim", "<i4")])

_STEP_TIMER = int(mujoco.mjtTimer.mjTIMER_STEP)


@functools.lru_cache(maxsize=None)
def _contact_record() -> tuple[np.dtype, int]:
    """Where the fields of ``_CONTACT_FIELDS`` sit in MuJoCo's mjContact records, and the
    records' size, read once from a scratch scene with a contact."""
    model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom type="plane" size="1 1 .1"/>'
                                           '<body pos="0 0 .05"><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    con = data.contact
    base = con.dist.__array_interface__["data"][0]
    offsets = [getattr(con, f).__array_interface__["data"][0] - base for f in _CONTACT_FIELDS.names]
    formats = [_CONTACT_FIELDS.fields[f][0] for f in _CONTACT_FIELDS.names]
    stride = int(con.dist.strides[0])
    return np.dtype({"names": list(_CONTACT_FIELDS.names), "formats": formats, "offsets": offsets,
                     "itemsize": stride}), stride




class MujocoAdapter(BodyTableMixin):
    """The MuJoCo implementation of :class:`~simuguard_gym.physics.adapter.PhysicsAdapter`.

    >>> import mujoco
    >>> from simuguard_gym.engines.mujoco import MujocoAdapter
    >>> model = mujoco.MjModel.from_xml_string(
    ...     '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
    >>> adapter = MujocoAdapter(model, mujoco.MjData(model))
    >>> adapter.step(10)   # ten substeps, listeners called around each
    >>> adapter.body_table().kinds
    ('static', 'dynamic')
    """

    engine = "mujoco"
    engine_version = mujoco.__version__
    #: Decoding (contacts, body states) reads only the staged copies, the model's constant arrays
    #: and a scratch MjData of its own, so a process forked from this one decodes the same (the
    #: model and the stage are inherited; a stage given shared memory hands its fill over): a
    #: recorder may encode there.
    decodes_in_fork = True
    #: State components that only the second half of a split substep (mj_step2) reads and that the
    #: first half (mj_step1) neither reads nor writes: a write to them may be replayed between the
    #: halves whenever it happened. Every other component is replayed before mj_step1.
    SPLIT_LATE_COMPONENTS = frozenset({"ctrl", "qfrc_applied", "xfrc_applied", "warmstart"})
    #: What body_states, decode_chunk and speed_bound read of a state: MuJoCo's kinematics reads
    #: positions, velocities and mocap poses, never actuation, applied forces or the warm start.
    DECODE_COMPONENTS = frozenset({"time", "qpos", "qvel", "mocap_pos", "mocap_quat"})
    #: Static geometry larger than this (m, across) does not bound the stage (see stage_box).
    STAGE_GEOM_SIZE = 4.0

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, *, owner: Any = None,
                 location: MujocoLocation | None = None) -> None:
        if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
            raise TypeError("MujocoAdapter needs a mujoco.MjModel and a mujoco.MjData")
        self.hooks = SubstepHooks()
        self.task_spec: Any = None
        #: The env the adapter was found on (None: a raw model and data), and where in it the
        #: MjData is: refresh() follows that path after a reset (robosuite builds a new MjData).
        self._owner = owner
        self._location = location
        self._bind(model, data)
        # The model as built: what an env changes in it later goes into each recording.
        self._model_arrays = mujoco_model.ModelArrays(model)
        mujoco_hooking.attach(self)

    # ------------------------------------------------------------------ binding and hooks
    @classmethod
    def from_env(cls, base: Any) -> "MujocoAdapter":
        """The adapter of the MjData that ``base`` (an env's ``unwrapped``) keeps, wherever it is
        (see :func:`~simuguard_gym.engines.mujoco_hooking.locate`)."""
        location = mujoco_hooking.locate(base)
        return cls(location.model, location.data, owner=base, location=location)

    def _bind(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        self.model, self.data = model, data
        self._step_timer = data.timer[_STEP_TIMER]  # a view on data: MuJoCo's own substep count
        self.substep_dt = float(model.opt.timestep)
        layout, offset, bit = [], 0, 1
        while bit <= _INTEGRATION:
            if _INTEGRATION & bit:
                size = int(mujoco.mj_stateSize(model, bit))
                layout.append(StateComponent(_STATE_NAMES.get(bit, f"bit{bit}"), offset, size))
                offset += size
            bit <<= 1
        self._layout = layout
        self.state_size = offset
        self._geom_body = model.geom_bodyid.astype(np.int64)
        # Where each free body's qpos and qvel sit in the integration state (-1: not a free body).
        self._free_qpos = np.full(model.nbody, -1, np.int64)
        self._free_qvel = np.full(model.nbody, -1, np.int64)
        if model.njnt:  # else a scene of fixed and mocap bodies only
            joint = np.maximum(model.body_jntadr, 0)
            free = (model.body_jntnum == 1) & (model.jnt_type[joint] == int(mujoco.mjtJoint.mjJNT_FREE))
            qpos_offset = next(c.offset for c in layout if c.name == "qpos")
            qvel_offset = next(c.offset for c in layout if c.name == "qvel")
            self._free_qpos[free] = qpos_offset + model.jnt_qposadr[joint[free]]
            self._free_qvel[free] = qvel_offset + model.jnt_dofadr[joint[free]]
        self._tracked_mask = np.zeros(model.nbody, dtype=bool)
        self._robot_mask = np.zeros(model.nbody, dtype=bool)
        self._table: BodyTable | None = None
        self._arena: memoryview | None = None  # a view on `data`'s arena, located on the first contact
        # Known before the scene's first contact, so that any stage decodes (also in a process
        # forked before it): the record layout belongs to the MuJoCo build, not to the scene.
        self._contact_dtype, self._contact_stride = _contact_record()
        self._counters: memoryview | None = None  # ncon, ..., nefc of `data` (mujoco_struct), once located
        self._pyramidal = int(model.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
        max_dim = int(model.geom_condim.max()) if model.ngeom else 3
        # Constraint rows of the widest contact: 2 (condim - 1) pyramid edges, or condim for elliptic cones.
        self._efc_width = max(2 * (max_dim - 1), 1) if self._pyramidal else max_dim

    def refresh(self) -> None:
        """Follow the env to the MjData it steps now (robosuite builds a new one on hard reset)."""
        if self._location is None:
            return
        location = self._location.follow(self._owner)
        self._location = location
        if location.data is not self.data or location.model is not self.model:
            mujoco_hooking.release(self, self.data)
            self._bind(location.model, location.data)
        mujoco_hooking.attach(self)

    def detach(self) -> None:
        """Stop hooking this scene's substeps (once no adapter is attached, the ``mujoco``
        module's own step functions are back)."""
        mujoco_hooking.release(self, self.data)

    def engine_substeps(self) -> int:
        """Substeps MuJoCo itself counted on this MjData since its last reset (``mj_step`` and
        ``mj_step1`` calls), whoever made them: a check that every substep reached the hooks."""
        return int(self._step_timer.number)

    def step(self, nstep: int = 1) -> None:
        """Advance a raw scene by ``nstep`` substeps with the listeners called around each (the
        same as ``mujoco.mj_step(model, data, nstep)`` while the adapter is attached)."""
        for _ in range(nstep):
            self.run_substep(False, None)

    def run_substep(self, split: bool, apply_mid: Callable[[], None] | None) -> None:
        """Run one substep as the env did (whole, or split with writes between the halves)."""
        model, data, hooks = self.model, self.data, self.hooks
        if split:
            mujoco_hooking.mj_step1(model, data)
            if apply_mid is not None:
                apply_mid()
            hooks.before("split")
            mujoco_hooking.mj_step2(model, data)
        else:
            hooks.before("start")
            mujoco_hooking.mj_step(model, data)
        hooks.after()

    def split_late_components(self) -> frozenset[str]:
        return self.SPLIT_LATE_COMPONENTS

    # ------------------------------------------------------------------ scene description
    @property
    def gravity(self) -> np.ndarray:
        return np.array(self.model.opt.gravity, dtype=float)

    def _body_count(self) -> int:
        return int(self.model.nbody)

    def _describe_bodies(self) -> BodyTable:
        m = self.model
        names = tuple(m.body(i).name or f"body{i}" for i in range(m.nbody))
        kinds = []
        for i in range(m.nbody):
            if m.body_mocapid[i] >= 0:
                kinds.append("kinematic")
            elif m.body_weldid[i] == 0:
                kinds.append("static")
            else:
                kinds.append("dynamic")
        robot = self._robot_bodies()
        free = set(int(b) for b in m.jnt_bodyid[m.jnt_type == int(mujoco.mjtJoint.mjJNT_FREE)])
        roles = []
        for i in range(m.nbody):
            if i in robot:
                roles.append("robot")
            elif i in free:
                roles.append("object")
            else:
                roles.append("scene")
        return BodyTable(names, tuple(kinds), tuple(roles), m.body_mass.copy())

    def _robot_bodies(self) -> set[int]:
        """Bodies in the kinematic subtree of an actuated joint or a mocap body, and their ancestors
        below the world (the robot's base and mount)."""
        m = self.model
        seeds: set[int] = set()
        for a in range(m.nu):
            trn = int(m.actuator_trntype[a])
            target = int(m.actuator_trnid[a, 0])
            if trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)):
                seeds.add(int(m.jnt_bodyid[target]))
            elif trn == int(mujoco.mjtTrn.mjTRN_SITE):
                seeds.add(int(m.site_bodyid[target]))
            elif trn == int(mujoco.mjtTrn.mjTRN_BODY):
                seeds.add(target)
            elif trn == int(mujoco.mjtTrn.mjTRN_TENDON):
                adr, num = m.tendon_adr[target], m.tendon_num[target]
                for w in range(adr, adr + num):
                    if int(m.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_JOINT):
                        seeds.add(int(m.jnt_bodyid[m.wrap_objid[w]]))
        seeds.update(int(b) for b in np.flatnonzero(m.body_mocapid >= 0))
        seeds.discard(0)
        robot = set()
        parent = m.body_parentid
        for i in range(1, m.nbody):
            b = i
            while b != 0:
                if b in seeds:
                    robot.add(i)
                    break
                b = int(parent[b])
        for s in seeds:  # ancestors: base links and mounts of the actuated chain
            b = int(parent[s])
            while b != 0:
                robot.add(b)
                b = int(parent[b])
        return robot

    def model_fingerprint(self) -> str:
        """Hash of every physics-relevant model array (drawing-only arrays left out)."""
        return mujoco_model.fingerprint(self.model)

    def model_changes(self) -> dict[str, dict[str, np.ndarray]]:
        """The physics-relevant model arrays that differ from the model the adapter was built on
        (or differed in an earlier episode), by name: what the env changed, e.g. at reset
        (see :meth:`~simuguard_gym.engines.mujoco_model.ModelArrays.changes`)."""
        return self._model_arrays.changes(self.model)

    def model_digests(self) -> dict[str, int]:
        """CRC-32 of each physics-relevant model array, by name."""
        return mujoco_model.ModelArrays.digests(self.model)

    def restore_model(self, changes: dict[str, dict[str, np.ndarray]], digests: dict[str, int] | None
                      ) -> tuple[list[str], list[str]]:
        """Make the model that of a recorded episode (its :meth:`model_changes` and
        :meth:`model_digests`): returns the arrays written and those that still differ.
        ``digests=None`` (files that stored only the bodies' placement, ``model_body_pose``):
        write ``changes`` and recompute the model's position-dependent constants."""
        if digests is not None:
            return self._model_arrays.restore(self.model, changes, digests)
        for name, change in changes.items():
            getattr(self.model, name)[...] = change["values"]
        mujoco.mj_setConst(self.model, self.data)
        return list(changes), []

    def model_bytes(self) -> bytes:
        """The compiled model as MJB (can be large: meshes and textures)."""
        buf = np.empty(mujoco.mj_sizeModel(self.model), dtype=np.uint8)
        mujoco.mj_saveModel(self.model, None, buf)
        return buf.tobytes()

    # ------------------------------------------------------------------ state
    def state_layout(self) -> list[StateComponent]:
        return list(self._layout)

    def read_state(self, out: np.ndarray) -> None:
        mujoco.mj_getState(self.model, self.data, out, _INTEGRATION)

    def state_rows(self, *, decoding_only: bool = False) -> StateRows:
        """MuJoCo's own memory (two memcpys per substep) where its layout checks out, else rows
        filled by ``mj_getState``. ``decoding_only``: rows of the components that decoding reads
        (``DECODE_COMPONENTS``; the others read as 0), a sixth of Lift's 2 KB. Timed in place the
        copy costs the same; side by side, rows of Lift's first 256 bytes ran ~1.4 us per substep
        cheaper (robosuite's own step slowed less by what the copies read and write)."""
        rows = MujocoStateRows.of(self.model, self.data, self._layout,
                                  self.DECODE_COMPONENTS if decoding_only else None)
        return rows if rows is not None else StateRows(self.read_state, self.state_size)

    def write_state(self, state: np.ndarray) -> None:
        mujoco.mj_setState(self.model, self.data, state, _INTEGRATION)

    @staticmethod
    def state_fingerprint(state: np.ndarray | bytes) -> int:
        """CRC-32 of a state vector's exact bytes. A diverged replay stays diverged, so a miss
        (2^-32 per substep) is corrected at the next substep; full snapshots back it up."""
        return zlib.crc32(state)

    def success(self) -> bool | None:
        check = getattr(self._owner, "_check_success", None)
        if check is None:
            return None
        return bool(check())

    def stage_box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The world box (lower, upper corner) around the robot's bodies and the static collision
        geometry of at most ``STAGE_GEOM_SIZE`` across (planes, floors and walls left out), in the
        current state: where the task happens. None for a scene with neither."""
        m = self.model
        state = np.empty(self.state_size)
        self.read_state(state)
        robot = np.array([r == "robot" for r in self.body_table().roles])
        scratch = self._scratch_data()
        mujoco.mj_setState(m, scratch, state, _INTEGRATION)
        mujoco.mj_kinematics(m, scratch)
        points = scratch.xpos[robot]
        geoms = np.flatnonzero((m.body_weldid[m.geom_bodyid] == 0) & (m.geom_type != int(mujoco.mjtGeom.mjGEOM_PLANE))
                               & ((m.geom_contype | m.geom_conaffinity) != 0))
        rot = scratch.geom_xmat[geoms].reshape(-1, 3, 3)
        center = scratch.geom_xpos[geoms] + np.einsum("nij,nj->ni", rot, m.geom_aabb[geoms, :3])
        half = np.einsum("nij,nj->ni", np.abs(rot), m.geom_aabb[geoms, 3:])
        small = (2 * half <= self.STAGE_GEOM_SIZE).all(axis=1)
        lo = np.concatenate([points, (center - half)[small]])
        hi = np.concatenate([points, (center + half)[small]])
        if not len(lo):
            return None
        return lo.min(axis=0), hi.max(axis=0)

    def current_contacts(self) -> tuple[np.ndarray, np.ndarray]:
        """Body id pairs (n, 2) and penetration depths (n,) in metres of the contacts of the
        current data (positive = overlapping), as the last forward pass found them."""
        d, m = self.data, self.model
        n = int(d.ncon)
        if n == 0:
            return np.zeros((0, 2), np.int64), np.zeros(0)
        geoms = np.asarray(d.contact.geom[:n])
        return m.geom_bodyid[geoms].astype(np.int64), -np.asarray(d.contact.dist[:n], dtype=float)

    # ------------------------------------------------------------------ interventions
    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Change one physics parameter of ``bodies`` (ids) from now on; returns a note or None."""
        m = self.model
        geoms = np.flatnonzero(np.isin(m.geom_bodyid, bodies))
        note = None
        if name == "timeconst":
            floor = 2 * m.opt.timestep
            refsafe = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE))
            if refsafe and value < floor:
                note = f"MuJoCo floors contact time constants at 2 dt: {value:g} s acts as {floor:g} s"
            m.geom_solref[geoms, 0] = value
        elif name == "mass":
            for b in bodies:
                old = m.body_mass[b]
                m.body_mass[b] = value
                if old > 0:
                    m.body_inertia[b] *= value / old
            mujoco.mj_setConst(m, self.data)  # derived constants (e.g. body_invweight) follow the mass
        elif name == "iterations":
            m.opt.iterations = int(value)
        elif name == "margin":
            m.geom_margin[geoms] = value
        else:
            raise ValueError(f"{name} is not a MuJoCo parameter (MuJoCo takes timeconst, mass, iterations, margin)")
        return note

    def clamp_speeds(self, bodies: np.ndarray, limit: float) -> None:
        """Scale down the linear velocity of free ``bodies`` faster than ``limit`` (m/s)."""
        m = self.model
        for b in bodies:
            if m.body_jntnum[b] == 1 and m.jnt_type[m.body_jntadr[b]] == int(mujoco.mjtJoint.mjJNT_FREE):
                adr = m.jnt_dofadr[m.body_jntadr[b]]
                speed = float(np.linalg.norm(self.data.qvel[adr:adr + 3]))
                if speed > limit:
                    self.data.qvel[adr:adr + 3] *= limit / speed

    # ------------------------------------------------------------------ bodies
    def decode_chunk(self, stage: "MujocoContactStage", states: np.ndarray, ids: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, ContactPairs]:
        """:meth:`body_states` of ``ids`` and :meth:`decode_contacts` for the same states, sharing
        one pass of MuJoCo's kinematics between them when both need it (a tracked body on a joint
        and a robot link in contact: Pusher)."""
        kinematics: dict[str, tuple[np.ndarray, ...]] = {}
        pose, vel = self.body_states(states, ids, kinematics=kinematics)
        return pose, vel, self.decode_contacts(stage, states, kinematics=kinematics)

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
        m = self.model
        is_free = self._free_qpos[ids] >= 0
        cols = np.flatnonzero(is_free)
        if cols.size:
            qpos = self._free_qpos[ids[cols]][:, None] + np.arange(7)
            qvel = self._free_qvel[ids[cols]][:, None] + np.arange(6)
            self._free_body_states(states[:, qpos], states[:, qvel], ids[cols], pose, vel, cols)
        slow = np.flatnonzero(~is_free)
        if slow.size:
            computed = self._kinematics(states)
            if kinematics is not None:
                kinematics["all"] = computed
            _fill_from_kinematics(m, computed, ids[slow], pose, vel, slow)
        return pose, vel

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
        n = len(q)
        rot = quat_to_mat(q[..., 3:7].reshape(-1, 4)).reshape(n, len(ids), 3, 3)
        omega = np.einsum("nbij,nbj->nbi", rot, v[..., 3:6])  # free-joint angular velocity is local
        offset = np.einsum("nbij,bj->nbi", rot, self.model.body_ipos[ids])
        pose[:, cols] = q
        vel[:, cols, :3] = v[..., :3] + cross(omega, offset)
        vel[:, cols, 3:] = omega

    def speed_bound(self, ids: np.ndarray) -> SpeedBound:
        """sqrt(2 (|v|^2 + |w|^2 |c|^2)) >= |v| + |w| |c| bounds a free body's centre-of-mass speed
        (origin velocity v, angular velocity w, centre-of-mass offset c) from its six qvel
        elements; bodies on other joints need the kinematics (unbounded)."""
        qvel = self._free_qvel[ids]
        free = qvel >= 0
        elements = np.where(free[:, None], qvel[:, None] + np.arange(6), 0).reshape(-1)  # 0: any element
        arm2 = np.sum(self.model.body_ipos[ids] ** 2, axis=1)
        weights = np.repeat(2.0 * np.stack([np.ones(len(ids)), arm2], axis=1), 3, axis=1)  # v: 2, w: 2 |c|^2
        return SpeedBound(elements, weights, None if free.all() else ~free)

    def _kinematics(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every body's xpos, xquat, cvel, xipos and its subtree's centre of mass, per state."""
        m = self.model
        scratch = self._scratch_data()
        n = len(states)
        # The substep loop holds only C calls and whole-array copies; gathers run vectorised after.
        xpos, xquat = np.empty((n, m.nbody, 3)), np.empty((n, m.nbody, 4))
        cvel, xipos, com = np.empty((n, m.nbody, 6)), np.empty((n, m.nbody, 3)), np.empty((n, m.nbody, 3))
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

    def _component(self, name: str) -> StateComponent:
        return next(c for c in self._layout if c.name == name)

    # ------------------------------------------------------------------ contacts
    def new_contact_stage(self, reuse: Any = None, *, memory: Any = None) -> "MujocoContactStage":
        if memory is not None:
            return MujocoContactStage(memory)
        if isinstance(reuse, MujocoContactStage):
            reuse.clear()
            return reuse
        return MujocoContactStage()

    def capture_contacts(self, stage: "MujocoContactStage") -> None:
        """Stage this substep's contacts and constraint forces as raw bytes (two memcpys)."""
        if self._counters is not None:
            # The counters and the force pointer read from mjData itself (see mujoco_struct): no
            # binding call per substep.
            counters = self._counters
            n = counters[0]
            if not stage.counts:
                self._check_contact_location()  # once per batch, so decoding never reads the engine
            if n:
                arena, at = self._arena, self._efc_pointer[0] - self._arena_base
                stage.add(arena[:n * self._contact_stride], arena[at:at + 8 * counters[self._nefc_at]], n)
            else:
                stage.add_empty()
            return
        data = self.data
        n = data.ncon
        if not stage.counts and self._arena is not None:
            self._check_contact_location()
        if n:
            if self._arena is None:
                self._locate_contacts()
            stage.add(self._arena[:n * self._contact_stride], memoryview(data.efc_force).cast("B"), n)
        else:
            stage.add_empty()

    def _locate_contacts(self) -> None:
        """Map MuJoCo's contact array (at the start of the arena) as raw bytes.

        Reading the array through one view replaces a dozen per-field copies per substep; the
        location is checked against the field views once per batch. Where MuJoCo's struct layout
        checks out, the contact counters and the force pointer are read through views as well.
        """
        con = self.data.contact
        base = con.dist.__array_interface__["data"][0]
        stride = con.dist.strides[0]
        if stride != self._contact_stride:
            raise RuntimeError(f"mjContact records are {stride} bytes apart here, {self._contact_stride} in a "
                               "scratch scene of the same MuJoCo")
        self._arena_base = base
        fields = live_fields(self.data)
        if fields is not None and fields.arena_address != base:
            fields = None
        # With the layout checked and the contacts starting the arena, the view covers all of it
        # (the constraint forces live there too); otherwise only whole contact records.
        size = int(self.data.narena) if fields is not None else max(int(self.model.narena) // stride, 1) * stride
        self._arena = memoryview((ctypes.c_char * size).from_address(base)).cast("B")
        self._counters, self._nefc_at, self._efc_pointer = fields.views() if fields is not None else (None, 0, None)

    def bind_substep_copy(self, copy: Any, state_rows: StateRows, rows: np.ndarray, row: int,
                          stage: "MujocoContactStage", on_full: Callable[[bool], Any], max_staged: int, *,
                          before: tuple[int, int, int, int] | None = None) -> bool:
        """Point a native ``SubstepCopy`` at this scene: each call then copies the substep's state
        into ``rows[row]`` as ``state_rows.copy`` would, and stages its contacts on ``stage`` as
        :meth:`capture_contacts` would, the same bytes (``before``: addresses for ``copy.before``,
        see ``SubstepCopy.bind``). False (nothing bound) where the rows are not MuJoCo's memory
        or the contact counters are not located (no contact seen yet): the caller copies in
        Python meanwhile."""
        if not isinstance(state_rows, MujocoStateRows) or not rows.flags.c_contiguous \
                or rows.shape[1:] != (state_rows.row_bytes,):
            return False
        sources = state_rows.sources
        if self._arena is None and self.data.ncon:
            self._locate_contacts()
        elif self._arena is not None:
            self._check_contact_location()
        if self._counters is None:
            return False
        counters = np.frombuffer(self._counters, np.int32)
        pointer = np.frombuffer(self._efc_pointer, np.uint64)
        records = stage.native_target(len(rows), row)
        copy.bind(sources, rows.ctypes.data, state_rows.row_bytes, len(rows), on_full,
                  (rows, stage, self._counters, self._efc_pointer, self._arena, self.data), row,
                  (counters.ctypes.data, self._arena_base, self._contact_stride,
                   counters.ctypes.data + 4 * self._nefc_at, pointer.ctypes.data, *records, max_staged), before)
        return True

    def _check_contact_location(self) -> None:
        """Follow MuJoCo's contact array if it moved (a reallocated arena); nothing is staged yet."""
        if self.data.ncon and self.data.contact.dist.__array_interface__["data"][0] != self._arena_base:
            self._locate_contacts()

    def decode_contacts(self, stage: "MujocoContactStage", states: np.ndarray, *,
                        kinematics: dict[str, tuple[np.ndarray, ...]] | None = None) -> ContactPairs:
        """Merge the staged contacts per body pair within each substep (vectorised), add the two
        bodies' speeds after the substep (decoded from ``states``), then clear the stage."""
        counts = staged_counts(stage, states)
        if counts is None:
            return ContactPairs.empty(len(states))
        # One pass packs the fields out of the wide mjContact records; the rest works on ~100 bytes/row.
        con = np.frombuffer(stage.raw, dtype=self._contact_dtype).astype(_CONTACT_FIELDS)
        efc_start = np.repeat(np.concatenate([[0], np.cumsum(stage.efc_counts)[:-1]]), counts)
        forces = stage.efc.copy()  # the stage's buffers are reused from the next substep on
        stage.clear()
        geom = con["geom"]
        bodies = self._geom_body[geom]
        substep = np.repeat(np.arange(len(counts)), counts)
        keep = self._audited(bodies)
        if not keep.all():  # the robot touching itself: not audited
            con, bodies, substep, efc_start = con[keep], bodies[keep], substep[keep], efc_start[keep]
        local = _local_contact_force(con, forces, efc_start, self._pyramidal, self._efc_width)
        frame = con["frame"].reshape(-1, 3, 3)
        force = np.einsum("ni,nij->nj", local, frame)  # force of geom1 on geom2, world frame
        pairs, deepest = merge_contact_points(
            substep, len(counts), bodies, con["geom"], -con["dist"], frame[:, 0], force,
            np.sqrt(np.einsum("ij,ij->i", force, force)), np.ones(len(force), np.int64))
        pairs.speed = self._pair_speeds(pairs, states, con["pos"][deepest], kinematics)
        return pairs

    def _audited(self, bodies: np.ndarray) -> np.ndarray:
        """Which contacts (rows of their two bodies) are audited: all but a robot touching itself."""
        self.body_table()  # roles (robot mask) of the current model
        return ~self._robot_mask[bodies].all(axis=1)

    def decode_contact_points(self, stage: "MujocoContactStage", substeps: int) -> ContactPoints:
        """The bodies and depth of each contact point of the first ``substeps`` staged substeps,
        which leave the stage (later ones stay staged): a few gathers from the records, where
        :meth:`decode_contacts` runs some hundred numpy calls."""
        counts = np.asarray(stage.counts[:substeps], dtype=np.int64)
        if len(counts) != substeps:
            raise ValueError(f"{substeps} substeps asked for but {len(stage.counts)} staged")
        record_bytes = int(counts.sum()) * self._contact_stride if counts.any() else 0
        if not record_bytes:
            stage.drop_first(substeps, 0)
            return ContactPoints(counts, np.zeros((0, 2), np.int32), np.zeros(0, np.float32))
        if len(stage.raw) < record_bytes:
            raise ValueError(f"the stage holds {len(stage.raw)} bytes of contacts, its counts say {record_bytes}")
        con = np.frombuffer(stage.raw[:record_bytes], dtype=self._contact_dtype)
        bodies = self._geom_body[con["geom"]]
        depth = (-con["dist"]).astype(np.float32)  # ContactPairs' depth: float32 of -dist
        stage.drop_first(substeps, record_bytes)
        keep = self._audited(bodies)
        if not keep.all():
            counts = np.bincount(np.repeat(np.arange(substeps), counts)[keep], minlength=substeps)
            bodies, depth = bodies[keep], depth[keep]
        bodies.sort(axis=1)
        return ContactPoints(counts, bodies.astype(np.int32), depth)

    def _pair_speeds(self, pairs: ContactPairs, states: np.ndarray, point: np.ndarray,
                     kinematics: dict[str, tuple[np.ndarray, ...]] | None = None) -> np.ndarray:
        """Speed of each body's material point at the pair's deepest contact point, after the
        substep (0 when static, NaN for pairs without a tracked body). A rotating finger strikes
        with its tip, not its centre of mass.

        Free bodies are read straight from the state rows (one gather per quantity); bodies on
        joints (robot links, doors) need MuJoCo's kinematics, which runs only for the substeps
        where such a body is in contact."""
        speed = np.zeros(pairs.bodies.shape, np.float32)
        if not len(pairs.bodies):
            return speed
        m = self.model
        substep = np.repeat(np.arange(len(pairs.counts)), pairs.counts)
        bodies = pairs.bodies.astype(np.int64)
        # Only contacts of a recorded body matter to the detector; a robot standing on the floor
        # would otherwise cost MuJoCo's kinematics at every substep.
        needed = self._tracked_mask[bodies].any(axis=1)
        speed[~needed] = np.nan
        moving = (m.body_weldid[bodies] != 0) & needed[:, None]
        qpos_at = self._free_qpos[bodies]
        row, col = np.nonzero(moving & (qpos_at >= 0))
        if len(row):
            # The same arithmetic as body_states and the joint-body branch below, in the same
            # order (recorded speeds are compared bit for bit on replay), on gathered rows.
            at = substep[row][:, None]
            body = bodies[row, col]
            q = states[at, qpos_at[row, col][:, None] + np.arange(7)]
            v = states[at, self._free_qvel[body][:, None] + np.arange(6)]
            rot = quat_to_mat(q[:, 3:7])
            omega = np.einsum("nij,nj->ni", rot, v[:, 3:6])  # free-joint angular velocity is local
            offset = np.einsum("nij,nj->ni", rot, m.body_ipos[body])
            com_velocity = v[:, :3] + cross(omega, offset)
            arm = point[row] - (q[:, :3] + offset)
            speed[row, col] = np.linalg.norm(com_velocity + cross(omega, arm), axis=1)
        group = moving & (qpos_at < 0)
        if group.any():
            ids, body_col = np.unique(bodies[group], return_inverse=True)
            at = np.broadcast_to(substep[:, None], bodies.shape)[group]
            rows, state_row = np.unique(at, return_inverse=True)
            computed = kinematics.get("all") if kinematics is not None else None
            computed = (tuple(x[rows] for x in computed) if computed is not None
                        else self._kinematics(states[rows]))
            pose, vel = np.zeros((len(rows), len(ids), 7)), np.zeros((len(rows), len(ids), 6))
            _fill_from_kinematics(m, computed, ids, pose, vel, np.arange(len(ids)))
            pose, vel = pose[state_row, body_col], vel[state_row, body_col]
            rot = quat_to_mat(pose[:, 3:7])
            com = pose[:, :3] + np.einsum("nij,nj->ni", rot, m.body_ipos[bodies[group]])
            arm = np.broadcast_to(point[:, None], (len(point), 2, 3))[group] - com
            speed[group] = np.linalg.norm(vel[:, :3] + cross(vel[:, 3:], arm), axis=1)
        return speed


class MujocoStateRows(StateRows):
    """The integration state as MuJoCo keeps it: the 8 bytes of ``data.time`` and the span of
    ``data``'s buffer that holds every other state component (qpos up to mocap_quat, with
    MuJoCo's alignment padding between the arrays), copied as bytes per substep; :meth:`states`
    gathers ``mj_getState``'s vector out of a batch of rows (eq_active: bytes to floats).

    Rows of some components only (``of(..., components=...)``) copy one span per group of them
    that lie side by side (qpos and qvel; the mocap poses) and leave the others out: their
    elements read as 0 in :meth:`states` and :meth:`gather`.

    Built only when every component is located and one row gathers to exactly ``mj_getState``'s
    vector; :meth:`of` returns None otherwise.
    """

    #: MjData attribute of each state component whose name differs from it.
    _ATTRIBUTES = {"warmstart": "qacc_warmstart", "plugin": "plugin_state"}
    #: Word of an element (in ``_words``) stored as a byte (eq_active), and of one not copied.
    _BYTE, _ABSENT = -1, -2

    def __init__(self, time_bytes: memoryview, spans: list[memoryview], floats: np.ndarray,
                 byte_columns: np.ndarray, bytes_at: np.ndarray) -> None:
        self.size = len(floats)
        self._span_bytes = tuple(len(span) for span in spans)
        self._span_at = np.cumsum([8] + [-(-b // 8) * 8 for b in self._span_bytes]).tolist()
        self.row_bytes = self._span_at[-1]
        #: (address, bytes, offset in a row) of what a row copies: for a native SubstepCopy.
        self.sources = tuple((np.frombuffer(m, np.uint8).ctypes.data, len(m), at)
                             for m, at in zip([time_bytes, *spans], [0, *self._span_at[:-1]]) if len(m))
        self._byte_columns, self._bytes_at = byte_columns, bytes_at
        self._words = floats
        self._absent = np.flatnonzero(floats == self._ABSENT)
        # Runs of state elements that sit side by side in a row too: (first element, its row word, length).
        self._runs: list[tuple[int, int, int]] = []
        for element, word in enumerate(floats.tolist()):
            if word < 0:  # a byte element (eq_active), gathered apart, or one not copied
                continue
            at, source, length = self._runs[-1] if self._runs else (-2, -2, 0)
            if element == at + length and word == source + length:
                self._runs[-1] = (at, source, length + 1)
            else:
                self._runs.append((element, word, 1))

        # One closure per span count (of() makes at most two): this runs every substep.
        if len(spans) == 1:
            def copy(target: tuple[memoryview, ...], time: memoryview = time_bytes,
                     span: memoryview = spans[0]) -> None:
                to_time, to_span = target
                to_time[:] = time
                to_span[:] = span
        else:
            def copy(target: tuple[memoryview, ...], time: memoryview = time_bytes, first: memoryview = spans[0],
                     second: memoryview = spans[1]) -> None:
                to_time, to_first, to_second = target
                to_time[:] = time
                to_first[:] = first
                to_second[:] = second

        self.copy = copy

    @classmethod
    def of(cls, model: mujoco.MjModel, data: mujoco.MjData, layout: list[StateComponent],
           components: frozenset[str] | None = None) -> "MujocoStateRows | None":
        fields = live_fields(data)
        if fields is None:
            return None
        located = []  # (component, address, dtype) of the components in the buffer
        for c in layout:
            if c.size == 0 or c.name == "time" or (components is not None and c.name not in components):
                continue
            array = getattr(data, cls._ATTRIBUTES.get(c.name, c.name), None)
            if not isinstance(array, np.ndarray) or array.size != c.size or not array.flags.c_contiguous \
                    or array.dtype not in (np.float64, np.uint8, np.bool_):
                return None
            located.append((c, array.__array_interface__["data"][0], array.dtype))
        located.sort(key=lambda x: x[1])
        size = sum(c.size for c in layout)
        if components is None:  # every component: one span, MuJoCo's padding and all
            groups = [located] if located else []
            start = min((at for _, at, _ in located), default=0)
            end = max((at + c.size * dtype.itemsize for c, at, dtype in located), default=0)
            if end - start > 4 * 8 * size + 4096:  # scattered: the span would copy mostly other arrays
                return None
        else:  # some: a span per group of arrays apart by no more than alignment padding
            groups = []
            for item in located:
                c, at, dtype = item
                if groups:
                    last_c, last_at, last_dtype = groups[-1][-1]
                    if at - (last_at + last_c.size * last_dtype.itemsize) <= 256:
                        groups[-1].append(item)
                        continue
                groups.append([item])
            if len(groups) > 2:  # not the decoding components' layout: plain rows serve
                return None
        # The float64 word of each state element in a row (time: word 0).
        floats = np.full(size, cls._ABSENT if components is not None else cls._BYTE, np.int64)
        for c in layout:
            if c.name == "time":
                floats[c.offset:c.offset + c.size] = 0
        byte_columns, bytes_at, spans = [], [], []
        row_at = 8
        for group in groups:
            start = min(at for _, at, _ in group)
            end = max(at + c.size * dtype.itemsize for c, at, dtype in group)
            for c, at, dtype in group:
                offset = row_at + at - start
                if dtype == np.float64:
                    if offset % 8:
                        return None
                    floats[c.offset:c.offset + c.size] = offset // 8 + np.arange(c.size)
                else:
                    floats[c.offset:c.offset + c.size] = cls._BYTE
                    byte_columns.extend(range(c.offset, c.offset + c.size))
                    bytes_at.extend(range(offset, offset + c.size))
            spans.append(memoryview((ctypes.c_char * (end - start)).from_address(start)).cast("B"))
            row_at += -(-(end - start) // 8) * 8
        if not spans:
            spans = [memoryview(b"")]
        rows = cls(fields.time_bytes, spans, floats, np.array(byte_columns, np.int64), np.array(bytes_at, np.int64))
        # One row must gather to exactly what mj_getState reads (0 where not copied), or the rows are not used.
        buffer = rows.allocate(1)
        rows.copy(rows.targets(buffer)[0])
        expected = np.empty(rows.size)
        mujoco.mj_getState(model, data, expected, _INTEGRATION)
        expected[rows._absent] = 0.0
        if rows.states(buffer).tobytes() != expected.tobytes():
            return None
        return rows

    def targets(self, rows: np.ndarray) -> list[tuple[memoryview, ...]]:
        at, size = self._span_at, self._span_bytes
        return [(m[:8], *(m[at[i]:at[i] + size[i]] for i in range(len(size)))) for m in map(memoryview, rows)]

    @property
    def targets_key(self) -> tuple[Any, ...]:
        return (type(self).__name__, self.row_bytes, self._span_bytes)

    def words(self, elements: np.ndarray) -> np.ndarray:
        words = self._words[np.asarray(elements, np.int64)]
        if (words < 0).any():
            raise ValueError("words() locates copied float state elements only (eq_active is stored as bytes)")
        return words

    def word_ranges(self, components: list[StateComponent]) -> np.ndarray:
        if len(self._absent):
            raise ValueError("word_ranges() needs rows of every component")
        # The word of each element: its float's, or the word that holds its byte.
        word = self._words.copy()
        word[self._byte_columns] = self._bytes_at // 8
        return np.array([[word[c.offset:c.offset + c.size].min(), word[c.offset:c.offset + c.size].max() + 1]
                         if c.size else [0, 0] for c in components], np.int64).reshape(-1, 2)

    def gather(self, rows: np.ndarray, elements: np.ndarray) -> np.ndarray:
        elements = np.asarray(elements, np.int64)
        words = self._words[elements]
        out = np.take(rows.view(np.float64), np.maximum(words, 0), axis=1)
        if (words < 0).any():
            is_byte = words == self._BYTE
            if is_byte.any():  # eq_active: bytes to floats, as in states()
                out[:, is_byte] = rows[:, self._bytes_at[np.searchsorted(self._byte_columns, elements[is_byte])]]
            out[:, words == self._ABSENT] = 0.0
        return out

    def states(self, rows: np.ndarray) -> np.ndarray:
        words = rows.view(np.float64)
        out = np.empty((len(rows), self.size)) if not len(self._absent) else np.zeros((len(rows), self.size))
        for at, source, length in self._runs:  # a few whole-column copies, not a gather per element
            out[:, at:at + length] = words[:, source:source + length]
        if len(self._byte_columns):
            out[:, self._byte_columns] = rows[:, self._bytes_at]
        return out


class MujocoContactStage:
    """Raw contact records and constraint forces of consecutive substeps, awaiting a decode.

    They are copied into buffers that grow by doubling and are kept across decodes and episodes:
    a substep costs two memcpys and no allocation (a bytes object per substep, joined at decode,
    costs several times as much on scenes with a few dozen contacts)."""

    def __init__(self, memory: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        # memory: (uint8 buffer for the records, float64 buffer for the forces) to stage into,
        # e.g. memory shared with a helper process; a stage that outgrows it continues in its own.
        raw, efc = memory if memory is not None else (np.empty(1 << 16, np.uint8), np.empty(1 << 12))
        self._given = (raw, efc) if memory is not None else None
        self._native_counts: tuple[np.ndarray, np.ndarray] | None = None  # see native_target
        self._use(raw, efc)
        self.clear()

    def _use(self, raw: np.ndarray, efc: np.ndarray) -> None:
        self._raw, self._efc = raw, efc
        self._raw_view = memoryview(raw)
        self._efc_bytes = memoryview(efc).cast("B")

    def clear(self) -> None:
        self._raw_used = 0
        self._efc_used = 0  # bytes
        self.counts: list[int] = []
        self.efc_counts: list[int] = []

    def add(self, records: memoryview, efc: memoryview, n: int) -> None:
        """Stage one substep: the raw records of its ``n`` contacts and its constraint forces (the
        bytes of ``efc_force``)."""
        lo, hi = self._raw_used, self._raw_used + len(records)
        if hi > len(self._raw):
            self._use(_grown(self._raw[:lo], hi), self._efc)
        self._raw_view[lo:hi] = records
        self._raw_used = hi
        lo, hi = self._efc_used, self._efc_used + len(efc)
        if hi > len(self._efc_bytes):
            self._use(self._raw, _grown(self._efc[:lo // 8], hi // 8))
        self._efc_bytes[lo:hi] = efc
        self._efc_used = hi
        self.counts.append(n)
        self.efc_counts.append(len(efc) >> 3)

    def native_target(self, capacity: int, row: int) -> tuple[int, ...]:
        """The buffers a native copy stages into, from substep ``row`` (the staged count) on:
        (records address, bytes, used, forces address, bytes, used, counts address, force
        counts address); :meth:`settle` takes its fill back."""
        if row != len(self.counts):
            raise ValueError(f"{len(self.counts)} substeps staged, the copy would start at {row}")
        if self._native_counts is None or len(self._native_counts[0]) < capacity:
            self._native_counts = (np.zeros(capacity, np.int64), np.zeros(capacity, np.int64))
        counts, efc_counts = self._native_counts
        counts[:row], efc_counts[:row] = self.counts, self.efc_counts
        return (self._raw.ctypes.data, len(self._raw), self._raw_used, self._efc.ctypes.data, 8 * len(self._efc),
                self._efc_used, counts.ctypes.data, efc_counts.ctypes.data)

    def settle(self, row: int, raw_used: int, efc_used: int) -> None:
        """Take the fill of a native copy bound by :meth:`native_target`: ``row`` substeps staged
        in all, the buffers used up to the given bytes."""
        counts, efc_counts = self._native_counts
        self.counts, self.efc_counts = counts[:row].tolist(), efc_counts[:row].tolist()
        self._raw_used, self._efc_used = raw_used, efc_used

    def drop_first(self, substeps: int, record_bytes: int) -> None:
        """Forget the first ``substeps`` staged substeps (their records take ``record_bytes``);
        the later ones move to the front."""
        efc_bytes = 8 * sum(self.efc_counts[:substeps])
        raw_left, efc_left = self._raw_used - record_bytes, self._efc_used - efc_bytes
        self._raw[:raw_left] = self._raw[record_bytes:self._raw_used]  # numpy copies overlaps safely
        self._efc[:efc_left >> 3] = self._efc[efc_bytes >> 3:self._efc_used >> 3]
        self._raw_used, self._efc_used = raw_left, efc_left
        del self.counts[:substeps], self.efc_counts[:substeps]

    def add_empty(self) -> None:
        """Stage a substep without contacts."""
        self.counts.append(0)
        self.efc_counts.append(0)

    @property
    def raw(self) -> np.ndarray:
        return self._raw[:self._raw_used]

    @property
    def efc(self) -> np.ndarray:
        return self._efc[:self._efc_used >> 3]

    @property
    def nbytes(self) -> int:
        return self._raw_used + self._efc_used

    def handoff(self) -> dict[str, Any]:
        """What a process sharing this stage's memory needs to :meth:`resume` it there: the fill,
        and the staged bytes themselves where the stage outgrew the memory it was given."""
        out: dict[str, Any] = {"raw_used": self._raw_used, "efc_used": self._efc_used,
                               "counts": self.counts, "efc_counts": self.efc_counts}
        given = self._given if self._given is not None else (None, None)
        if self._raw is not given[0]:
            out["raw"] = self.raw.tobytes()
        if self._efc is not given[1]:
            out["efc"] = self.efc.tobytes()
        return out

    def resume(self, handoff: dict[str, Any]) -> None:
        """Take the fill of the stage that :meth:`handoff` described (this stage's copy in another
        process, made before the fill, over the same shared memory)."""
        if self._given is not None:
            self._use(*self._given)
        if "raw" in handoff:
            self._use(np.frombuffer(handoff["raw"], np.uint8), self._efc)
        if "efc" in handoff:
            self._use(self._raw, np.frombuffer(handoff["efc"], np.float64))
        self._raw_used, self._efc_used = int(handoff["raw_used"]), int(handoff["efc_used"])
        self.counts, self.efc_counts = list(handoff["counts"]), list(handoff["efc_counts"])


def _grown(buffer: np.ndarray, needed: int) -> np.ndarray:
    """A buffer of at least ``needed`` rows (twice as many as before), its rows copied over."""
    bigger = np.empty((max(needed, 2 * len(buffer)),) + buffer.shape[1:], buffer.dtype)
    bigger[:len(buffer)] = buffer
    return bigger


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


def _local_contact_force(con: np.ndarray, efc: np.ndarray, efc_start: np.ndarray, pyramidal: bool,
                         rows: int) -> np.ndarray:
    """Contact-frame force (normal, tangent1, tangent2) of each contact, as mj_contactForce."""
    dim = con["dim"].astype(np.int64)
    adr = con["efc_address"].astype(np.int64)
    span = np.arange(rows)
    nrows = np.maximum(2 * (dim - 1), 1) if pyramidal else dim
    index = (efc_start + adr)[:, None] + span
    if efc.size and (nrows == rows).all() and (adr >= 0).all():
        f = efc[index]  # every contact of the batch as wide as the widest: no masking (the common case)
    else:
        used = (span < nrows[:, None]) & (adr[:, None] >= 0)
        f = np.where(used, efc[np.where(used, index, 0)] if efc.size else 0.0, 0.0)
    local = np.zeros((len(dim), 3))
    if pyramidal:
        # mju_decodePyramid: normal = sum of edge forces, tangent_i = (f_2i - f_2i+1) * mu_i
        local[:, 0] = f.sum(axis=1)
        if rows >= 4:
            mu = con["friction"][:, :2]
            local[:, 1] = (f[:, 0] - f[:, 1]) * mu[:, 0]
            local[:, 2] = (f[:, 2] - f[:, 3]) * mu[:, 1]
            local[dim == 1, 1:] = 0.0
    else:
        width = min(3, rows)
        local[:, :width] = f[:, :width]
    return local

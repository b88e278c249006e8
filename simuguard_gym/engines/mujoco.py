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

import sys
import zlib
from typing import Any, Callable

import mujoco
import numpy as np

from simuguard_gym.engines import mujoco_geometry, mujoco_hooking, mujoco_model, mujoco_screen
from simuguard_gym.engines.base import BodyTableMixin
from simuguard_gym.capture.stage import RecordStage
from simuguard_gym.engines.mujoco_contacts import MujocoContacts, _contact_record
from simuguard_gym.engines.mujoco_hooking import MujocoLocation
from simuguard_gym.physics.scene_geometry import ContactPointsNow, GeometryPart
from simuguard_gym.engines.mujoco_interventions import MujocoInterventions
from simuguard_gym.engines.mujoco_kinematics import BodyColumns, MujocoKinematics
from simuguard_gym.engines.mujoco_memory import state_rows_of
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs
from simuguard_gym.physics.hooks import SubstepHooks
from simuguard_gym.physics.state import StateComponent, StateRows

#: mjtState bits of the full integration state, in MuJoCo's own order.
_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)
_STATE_NAMES = {
    int(getattr(mujoco.mjtState, name)): name[len("mjSTATE_"):].lower()
    for name in dir(mujoco.mjtState)
    if name.startswith("mjSTATE_")
}

_STEP_TIMER = int(mujoco.mjtTimer.mjTIMER_STEP)


class MujocoAdapter(MujocoContacts, MujocoKinematics, MujocoInterventions, BodyTableMixin):
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

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, *, owner: Any = None,
                 location: MujocoLocation | None = None) -> None:
        if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
            raise TypeError("MujocoAdapter needs a mujoco.MjModel and a mujoco.MjData")
        self.hooks = SubstepHooks(on_listening=self._listening)
        self.task_spec: Any = None
        #: The env the adapter was found on (None: a raw model and data), and where in it the
        #: MjData is: refresh() follows that path after a reset (robosuite builds a new MjData).
        self._owner = owner
        self._pose_data: tuple[mujoco.MjModel, mujoco.MjData] | None = None
        self._location = location
        #: How the env has stepped this scene under the hooks so far: "whole" (mj_step) and/or
        #: "split" (mj_step1 and mj_step2).
        self.stepping: set[str] = set()
        self.forward_calls = 0  # mj_step1 calls that began no substep (see mujoco_hooking)
        self._bind(model, data)
        # The model as built: what an env changes in it later goes into each recording.
        self._model_arrays = mujoco_model.ModelArrays(model)
        self._stored_as: tuple[mujoco.MjModel, str] | None = None  # a model object and its stored fingerprint

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
        # The rows of this MjData's state, by decoding_only: its buffer never moves while it lives.
        self._state_rows: dict[bool, StateRows] = {}
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
        self._body_columns: dict[bytes, BodyColumns] = {}  # by the ids' bytes: see MujocoKinematics
        self._tracked_mask = np.zeros(model.nbody, dtype=bool)
        self._robot_mask = np.zeros(model.nbody, dtype=bool)
        self._table: BodyTable | None = None
        self._arena: memoryview | None = None  # a view on `data`'s arena, located on the first contact
        # Known before the scene's first contact, so that any stage decodes (also in a process
        # forked before it): the record layout belongs to the MuJoCo build, not to the scene.
        self._contact_dtype, self._contact_stride = _contact_record()
        self._counters: memoryview | None = None  # ncon, ..., nefc of `data` (mujoco_memory), once located
        self._pyramidal = int(model.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
        max_dim = int(model.geom_condim.max()) if model.ngeom else 3
        # Constraint rows of the widest contact: 2 (condim - 1) pyramid edges, or condim for elliptic cones.
        self._efc_width = max(2 * (max_dim - 1), 1) if self._pyramidal else max_dim

    def refresh(self) -> None:
        """Follow the env to the MjData it steps now (robosuite builds a new one on hard reset)."""
        if self._location is not None:
            location = self._location.follow(self._owner)
            self._location = location
            if location.data is not self.data or location.model is not self.model:
                mujoco_hooking.release(self, self.data)
                self._bind(location.model, location.data)
        if self.hooks.listeners:
            mujoco_hooking.attach(self)

    def detach(self) -> None:
        """Stop hooking this scene's substeps (once no adapter is attached, the ``mujoco``
        module's own step functions are back); the hooks detach by themselves when their last
        listener goes."""
        mujoco_hooking.release(self, self.data)

    def _listening(self, listening: bool) -> None:
        if listening:
            mujoco_hooking.attach(self)
        else:
            self.detach()

    def engine_substeps(self) -> int:
        """Substeps MuJoCo itself counted on this MjData (``mj_step`` and ``mj_step1`` calls,
        whoever made them), less the hooked ``mj_step1`` calls that began none: a check that every
        substep reached the hooks. Differences within an episode are what count."""
        return self.step_counter() - self.forward_calls

    def step_counter(self) -> int:
        """MuJoCo's own step counter on this MjData since its last reset."""
        return int(self._step_timer.number)

    def step(self, nstep: int = 1) -> None:
        """Advance a raw scene by ``nstep`` substeps with the listeners called around each (every
        one a "start": listeners look for writes before each)."""
        for _ in range(nstep):
            self.run_substep(False, None)

    def run_substep(self, split: bool, apply_mid: Callable[[], None] | None) -> None:
        """Run one substep as the env did (whole, or split with writes between the halves)."""
        if not split:
            self.hooks.around("start", mujoco_hooking.step_of(self.data), self.model, self.data)
            return
        mujoco_hooking.mj_step1(self.model, self.data)
        if apply_mid is not None:
            apply_mid()
        self.hooks.around("split", mujoco_hooking.mj_step2, self.model, self.data)

    def steps_whole(self) -> bool:
        """Whether the env is known to step this scene with whole ``mj_step`` calls before it has
        stepped: a Gymnasium ``MujocoEnv`` (Gymnasium's v5 envs, Meta-World) whose stepping is
        Gymnasium's own (``do_simulation``, ``_step_mujoco_simulation``: one ``mj_step(nstep)``)."""
        base = _gymnasium_mujoco_env()
        owner = type(self._owner)
        return base is not None and issubclass(owner, base) and owner.do_simulation is base.do_simulation \
            and owner._step_mujoco_simulation is base._step_mujoco_simulation

    def substeps_per_step(self) -> int:
        """The substeps the env runs per step where it says so (a Gymnasium ``MujocoEnv``'s
        ``frame_skip``), else 0."""
        base = _gymnasium_mujoco_env()
        return int(self._owner.frame_skip) if base is not None and isinstance(self._owner, base) else 0

    def makes_contacts(self) -> bool:
        """Whether any two geoms may collide: MuJoCo collides two where the contype of either
        shares a bit with the conaffinity of the other, and where an explicit pair names them.
        Flexes collide by their own bits: a model with one is taken to make contacts.

        >>> import gymnasium as gym
        >>> from simuguard_gym.engines.base import adapter_for
        >>> [adapter_for(gym.make(i)).makes_contacts() for i in ("InvertedPendulum-v5", "Ant-v5")]
        [False, True]
        """
        m = self.model
        if m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT):
            return False
        if m.npair or m.nflex:
            return True
        return bool(np.bitwise_or.reduce(m.geom_contype) & np.bitwise_or.reduce(m.geom_conaffinity))

    def substep_screen(self) -> tuple[Any, str | None]:
        """A :class:`~simuguard_gym.engines.mujoco_screen.MujocoScreen` of this scene (one per
        adapter), or None and why the scene cannot be screened now."""
        why = mujoco_screen.MujocoScreen.unavailable(self)
        if why is not None:
            return None, why
        if getattr(self, "_screen", None) is None:
            self._screen = mujoco_screen.MujocoScreen(self)
        return self._screen, None

    @property
    def contact_record_dtype(self) -> np.dtype:
        """The numpy dtype of one of MuJoCo's ``mjContact`` records (this build's layout)."""
        return self._contact_dtype

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
        loose = self._loose_bodies()
        roles = []
        for i in range(m.nbody):
            if i in robot:
                # The robot's floating base: the outermost loose body of a robot (legged, free).
                base = i in loose and not any(int(b) in loose for b in self._ancestors(i))
                roles.append("base" if base else "robot")
            elif i in loose:
                roles.append("object")
            else:
                roles.append("scene")
        return BodyTable(names, tuple(kinds), tuple(roles), m.body_mass.copy())

    def _held_by_mocap(self) -> set[int]:
        """Bodies that an equality constraint (weld or connect) ties to a mocap body: the hand a
        mocap-driven arm follows (Gymnasium-Robotics' Fetch, Meta-World's Sawyer)."""
        m = self.model
        held: set[int] = set()
        kinds = (int(mujoco.mjtEq.mjEQ_WELD), int(mujoco.mjtEq.mjEQ_CONNECT))
        for k in range(m.neq):
            if int(m.eq_type[k]) not in kinds:
                continue
            ends = [int(m.eq_obj1id[k]), int(m.eq_obj2id[k])]
            if hasattr(m, "eq_objtype") and int(m.eq_objtype[k]) == int(mujoco.mjtObj.mjOBJ_SITE):
                ends = [int(m.site_bodyid[e]) for e in ends]
            mocap = [e for e in ends if m.body_mocapid[e] >= 0]
            held.update(e for e in ends if mocap and e not in mocap)
        return held

    def _ancestors(self, body: int) -> list[int]:
        parent, out = self.model.body_parentid, []
        b = int(parent[body])
        while b != 0:
            out.append(b)
            b = int(parent[b])
        return out

    def _loose_bodies(self) -> set[int]:
        """Bodies a contact can throw: those that collide and move on a free joint or a slide
        joint of their own that no actuator drives. A body that only turns about a hinge (a door,
        a pendulum's pole) is left out: the detector's stages measure a body's flight, and a
        hinged body cannot fly."""
        m = self.model
        actuated = self._actuated_joints()
        colliding = np.zeros(m.nbody, bool)
        # A body collides through the bodies welded to it too (one rigid body: MyoLeg's root and
        # its pelvis).
        colliding[m.body_weldid[m.geom_bodyid[(m.geom_contype | m.geom_conaffinity) != 0]]] = True
        translating = (m.jnt_type == int(mujoco.mjtJoint.mjJNT_FREE)) | (m.jnt_type == int(mujoco.mjtJoint.mjJNT_SLIDE))
        loose = set()
        for j in np.flatnonzero(translating).tolist():
            body = int(m.jnt_bodyid[j])
            own = range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])
            if colliding[body] and m.body_mocapid[body] < 0 and not actuated.intersection(own):
                loose.add(body)
        return loose

    def _actuated_joints(self) -> set[int]:
        """Joints an actuator drives, directly or through a tendon."""
        m = self.model
        joints: set[int] = set()
        for a in range(m.nu):
            trn, target = int(m.actuator_trntype[a]), int(m.actuator_trnid[a, 0])
            if trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)):
                joints.add(target)
            elif trn == int(mujoco.mjtTrn.mjTRN_TENDON):
                adr, num = m.tendon_adr[target], m.tendon_num[target]
                joints.update(int(m.wrap_objid[w]) for w in range(adr, adr + num)
                              if int(m.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_JOINT))
                joints.update(self._spanned_joints(self._tendon_site_bodies(target)))
        return joints

    def _tendon_site_bodies(self, tendon: int) -> set[int]:
        """The bodies a spatial tendon's sites sit on (a muscle's origin, via points, insertion)."""
        m = self.model
        adr, num = int(m.tendon_adr[tendon]), int(m.tendon_num[tendon])
        return {int(m.site_bodyid[m.wrap_objid[w]]) for w in range(adr, adr + num)
                if int(m.wrap_type[w]) == int(mujoco.mjtWrap.mjWRAP_SITE)}

    def _spanned_joints(self, bodies: set[int]) -> set[int]:
        """The joints between ``bodies`` (those of each body and its ancestors below their lowest
        common ancestor): what a spatial tendon pulling on them drives."""
        if len(bodies) < 2:
            return set()
        m, parent = self.model, self.model.body_parentid
        chains = []
        for b in bodies:
            chain = [b]
            while chain[-1] != 0:
                chain.append(int(parent[chain[-1]]))
            chains.append(chain)
        common = set(chains[0]).intersection(*chains[1:])
        spanned = {b for chain in chains for b in chain if b not in common}
        return {j for j in range(m.njnt) if int(m.jnt_bodyid[j]) in spanned}

    def _robot_bodies(self) -> set[int]:
        """Bodies in the kinematic subtree of an actuated joint, a mocap body or a body a mocap body
        holds by an equality constraint, and their ancestors below the world (the robot's base and
        mount)."""
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
                seeds.update(self._tendon_site_bodies(target))  # a muscle pulls the bones it is attached to
        seeds.update(int(b) for b in np.flatnonzero(m.body_mocapid >= 0))
        seeds.update(self._held_by_mocap())
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
        # Bodies welded to a robot body are that rigid body (MyoLeg's torso on its root).
        robot.update(i for i in range(1, m.nbody) if int(m.body_weldid[i]) in robot)
        return robot

    def model_fingerprint(self) -> str:
        """Hash of every physics-relevant model array's checksum (drawing-only arrays left out)."""
        return self._model_arrays.fingerprint(self.model)

    def model_record(self) -> tuple[str, dict[str, dict[str, np.ndarray]], dict[str, int]]:
        """:meth:`model_fingerprint`, :meth:`model_changes` and :meth:`model_digests` at once."""
        return self._model_arrays.record(self.model)

    def model_changes(self) -> dict[str, dict[str, np.ndarray]]:
        """The physics-relevant model arrays that differ from the model the adapter was built on
        (or differed in an earlier episode), by name: what the env changed, e.g. at reset
        (see :meth:`~simuguard_gym.engines.mujoco_model.ModelArrays.changes`)."""
        return self._model_arrays.changes(self.model)

    def model_digests(self) -> dict[str, int]:
        """CRC-32 of each physics-relevant model array, by name."""
        return self._model_arrays.digests(self.model)

    def restore_model(self, changes: dict[str, dict[str, np.ndarray]], digests: dict[str, int] | None
                      ) -> tuple[list[str], list[str]]:
        """Make the model that of a recorded episode (its :meth:`model_changes` and
        :meth:`model_digests`): returns the arrays written and those that still differ.
        ``digests=None`` (files that stored only the bodies' placement, ``model_body_pose``):
        write ``changes`` and recompute the model's position-dependent constants."""
        if digests is not None:
            return self._model_arrays.restore(self.model, changes, digests)
        checked = {name: mujoco_model.checked_value(name, getattr(self.model, name), change["values"])
                   for name, change in changes.items()}
        for name, value in checked.items():
            getattr(self.model, name)[...] = value
        mujoco.mj_setConst(self.model, self.data)
        return list(changes), []

    def model_to_store(self, held: Callable[[str], bool]) -> tuple[str, bytes | None]:
        """The model a recording of this episode references in a model store, by fingerprint, and
        its MJB where ``held(fingerprint)`` is False: the model as the adapter first saw it (what
        the recording's ``model_changes`` are relative to), or, where the env's model can no longer
        be made that one, the episode's own model."""
        # An env changes its model's values in place (Meta-World's goal) or builds a new one of
        # the same structure (robosuite's hard reset): either is the first model with other
        # values, which the recording's model_changes give. The stored model is that first one,
        # found without reading any array; a model of another structure is stored as it is.
        if self._stored_as is not None and self._stored_as[0] is self.model and held(self._stored_as[1]):
            return self._stored_as[1], None
        arrays = self._model_arrays
        same = arrays.same_structure(self.model)
        key = arrays.base_fingerprint if same else arrays.fingerprint(self.model)
        self._stored_as = (self.model, key)
        if held(key):
            return key, None
        return key, _mjb(arrays.base_model(self.model) if same else self.model)

    # ------------------------------------------------------------------ state
    def state_layout(self) -> list[StateComponent]:
        return list(self._layout)

    def read_state(self, out: np.ndarray) -> None:
        mujoco.mj_getState(self.model, self.data, out, _INTEGRATION)

    def state_rows(self, *, decoding_only: bool = False) -> StateRows:
        """MuJoCo's own memory (two memcpys per substep) where its layout checks out, else rows
        filled by ``mj_getState``. ``decoding_only``: rows of the components that decoding reads
        (``DECODE_COMPONENTS``; the others read as 0), a sixth of Lift's 2 KB: robosuite's own step
        slows less by what smaller copies read and write."""
        rows = self._state_rows.get(decoding_only)
        if rows is None:
            found = state_rows_of(self.model, self.data, self._layout, self.DECODE_COMPONENTS if decoding_only else None)
            rows = self._state_rows[decoding_only] = found if found is not None else StateRows(self.read_state,
                                                                                              self.state_size)
        return rows

    def write_state(self, state: np.ndarray) -> None:
        mujoco.mj_setState(self.model, self.data, state, _INTEGRATION)

    @staticmethod
    def state_fingerprint(state: np.ndarray | bytes) -> int:
        """CRC-32 of a state vector's exact bytes. A diverged replay stays diverged, so a miss
        (2^-32 per substep) is corrected at the next substep; full snapshots back it up."""
        return zlib.crc32(state)

    def scene_geometry(self) -> list[GeometryPart]:
        """The colliding geoms in their bodies' frames (see :class:`~simuguard_gym.physics.adapter.ShowsScene`)."""
        return mujoco_geometry.scene_geometry(self.model)

    def decoding_scene(self) -> tuple[object, ...]:
        """What decoding reads besides the staged copies: the model, the MjData it belongs to and
        the body table (see :class:`~simuguard_gym.physics.adapter.DecodesInFork`)."""
        return (self.model, self.data, self.body_table())

    def body_poses(self) -> np.ndarray:
        """Every body's frame pose now (n, 7: position, quaternion w x y z), by MuJoCo body id.

        After ``mj_step`` the data's ``xpos`` still holds the poses the step started from, so the
        kinematics of the current ``qpos`` run on a data of their own: the env's is not touched."""
        if self._pose_data is None or self._pose_data[0] is not self.model:
            self._pose_data = (self.model, mujoco.MjData(self.model))
        scratch = self._pose_data[1]
        scratch.qpos[:], scratch.mocap_pos[:], scratch.mocap_quat[:] = self.data.qpos, self.data.mocap_pos, self.data.mocap_quat
        mujoco.mj_kinematics(self.model, scratch)
        return np.hstack([scratch.xpos, scratch.xquat]).astype(np.float64)

    def contact_points_now(self) -> ContactPointsNow:
        return mujoco_geometry.contact_points_now(self.model, self.data)

    def camera(self, name: str | None = None, *, height: int = 256, width: int = 256,
               follow: str | None = None) -> Any:
        """A camera on this adapter's MjData (see :class:`~simuguard_gym.physics.adapter.Renders`)."""
        from simuguard_gym.engines.mujoco_render import MujocoCamera, default_camera

        return MujocoCamera(self.model, self.data, default_camera(self.model) if name is None else name,
                            height=height, width=width, follow=follow)

    def success(self) -> bool | None:
        check = getattr(self._owner, "_check_success", None)
        if check is None:
            return None
        return bool(check())

    def decode_chunk(self, stage: RecordStage, states: np.ndarray, ids: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, ContactPairs]:
        """:meth:`body_states` of ``ids`` and :meth:`decode_contacts` for the same states, sharing
        one pass of MuJoCo's kinematics between them when both need it (a tracked body on a joint
        and a robot link in contact: Pusher)."""
        kinematics: dict[str, tuple[np.ndarray, ...]] = {}
        pose, vel = self.body_states(states, ids, kinematics=kinematics)
        return pose, vel, self.decode_contacts(stage, states, kinematics=kinematics)

    def _component(self, name: str) -> StateComponent:
        return next(c for c in self._layout if c.name == name)


def _gymnasium_mujoco_env() -> Any:
    """Gymnasium's ``MujocoEnv`` where an env can be one (its module loaded), else None. Never
    imported here: an env of it has loaded it already, and the import fails where Gymnasium's
    MuJoCo extra is missing (it needs ``packaging``; dm_control-based envs such as gym-aloha)."""
    module = sys.modules.get("gymnasium.envs.mujoco.mujoco_env")
    return module.MujocoEnv if module is not None else None


def _mjb(model: mujoco.MjModel) -> bytes:
    buffer = np.empty(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    return buffer.tobytes()

"""MuJoCo adapter: raw MjModel/MjData, Gymnasium ``MujocoEnv``, robosuite ``MjSim``.

Where a substep is:

* Gymnasium ``MujocoEnv``: ``_step_mujoco_simulation(ctrl, n_frames)`` runs all frames in one C
  call. The adapter overrides it *on the instance* with a loop of single ``mj_step`` calls, which is
  bit-identical (checked by the tests) and keeps RK4 envs (Ant) whole.
* robosuite: ``sim.step()`` (full physics) or ``sim.step1()`` + ``sim.step2()`` (``lite_physics``,
  the controller writes ``ctrl`` in between). The instance methods of the current ``sim`` are
  patched; robosuite's hard reset builds a new ``sim``, so :meth:`MujocoAdapter.refresh` re-patches.
* raw: the user calls :meth:`MujocoAdapter.step`.

What a capture reads, and when: after ``mj_step`` MuJoCo's derived quantities (``xpos``,
``cvel``, contacts, ``efc_force``) describe the state the substep *started* from and the forces
it applied, while ``qpos``/``qvel`` hold the integrated result. Bodies and contacts are captured
from the derived quantities, so a substep's body states and contacts are mutually consistent; the
integrated result is covered by the per-substep fingerprint of the full integration state.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Callable

import mujoco
import numpy as np

from simuguard_gym.engines.base import (
    BodyTable,
    ContactPairs,
    ContactStage,
    StateComponent,
    SubstepHooks,
)

#: mjtState bits of the full integration state, in MuJoCo's own order.
_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)
_STATE_NAMES = {
    int(getattr(mujoco.mjtState, name)): name[len("mjSTATE_"):].lower()
    for name in dir(mujoco.mjtState)
    if name.startswith("mjSTATE_")
}

# Raw contact row layout written by capture_contacts (float64 columns).
_C_BODY_A, _C_BODY_B, _C_GEOM_1, _C_GEOM_2, _C_DIST = 0, 1, 2, 3, 4
_C_FRAME = slice(5, 14)  # normal, tangent1, tangent2 (rows of the contact frame)
_C_LOCAL = slice(14, 17)  # normal force, tangential forces in the contact frame
_CONTACT_WIDTH = 17

# Model arrays that do not influence physics (drawing only); left out of the model fingerprint
# because e.g. robosuite regenerates textures per reset.
_VISUAL_PREFIXES = ("tex_", "mat_", "light_", "cam_", "vis", "skin_", "name_", "flex_texcoord", "mesh_texcoord",
                    "mesh_normal", "mesh_facenormal", "mesh_facetexcoord", "hfield_", "paths")


class MujocoAdapter:
    """The MuJoCo implementation of :class:`~simuguard_gym.engines.base.PhysicsAdapter`.

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

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, *, owner: Any = None,
                 flavour: str = "raw") -> None:
        if not isinstance(model, mujoco.MjModel) or not isinstance(data, mujoco.MjData):
            raise TypeError("MujocoAdapter needs a mujoco.MjModel and a mujoco.MjData")
        self.hooks = SubstepHooks()
        self.flavour = flavour
        self._owner = owner
        self._patched_sim: Any = None
        self._split = False
        self._bind(model, data)
        if flavour == "gymnasium":
            self._patch_gymnasium()
        elif flavour == "robosuite":
            self._patch_robosuite(owner.sim)

    # ------------------------------------------------------------------ binding and hooks
    @classmethod
    def from_env(cls, base: Any) -> "MujocoAdapter":
        sim = getattr(base, "sim", None)
        if sim is not None and hasattr(sim, "model") and hasattr(sim.model, "_model"):
            return cls(sim.model._model, sim.data._data, owner=base, flavour="robosuite")
        return cls(base.model, base.data, owner=base, flavour="gymnasium")

    def _bind(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        self.model, self.data = model, data
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
        self._tracked_mask = np.zeros(model.nbody, dtype=bool)
        self._table: BodyTable | None = None
        # Views on MjData memory stay valid for the lifetime of `data`.
        self._xpos, self._xquat, self._cvel = data.xpos, data.xquat, data.cvel
        self._xipos, self._subtree_com = data.xipos, data.subtree_com
        self._root = model.body_rootid.astype(np.int64)
        self._pyramidal = int(model.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
        max_dim = int(model.geom_condim.max()) if model.ngeom else 3
        self._efc_rows = np.arange(max(2 * (max_dim - 1), 1) if self._pyramidal else max_dim)

    def refresh(self) -> None:
        """Follow the env to its current simulator (robosuite rebuilds it on hard reset)."""
        if self.flavour == "robosuite":
            sim = self._owner.sim
            if sim is not self._patched_sim:
                self._bind(sim.model._model, sim.data._data)
                self._patch_robosuite(sim)
        elif self.flavour == "gymnasium":
            if self._owner.model is not self.model or self._owner.data is not self.data:
                self._bind(self._owner.model, self._owner.data)
            self._patch_gymnasium()

    def detach(self) -> None:
        if self.flavour == "gymnasium":
            self._owner.__dict__.pop("_step_mujoco_simulation", None)
        elif self.flavour == "robosuite" and self._patched_sim is not None:
            for name in ("step", "step1", "step2"):
                self._patched_sim.__dict__.pop(name, None)
            self._patched_sim = None

    def _patch_gymnasium(self) -> None:
        owner = self._owner
        method = type(owner)._step_mujoco_simulation
        if not getattr(method, "_simuguard_plain_substeps", False):
            from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

            if method is not MujocoEnv._step_mujoco_simulation:
                raise TypeError(
                    f"{type(owner).__name__} overrides _step_mujoco_simulation, so its substeps cannot be hooked "
                    "without changing its physics; wrap a MujocoAdapter around its model/data yourself"
                )
        owner._step_mujoco_simulation = self._gym_substeps

    def _gym_substeps(self, ctrl: np.ndarray, n_frames: int) -> None:
        # Same effect as MujocoEnv._step_mujoco_simulation, one mj_step per frame.
        model, data, hooks = self.model, self.data, self.hooks
        data.ctrl[:] = ctrl
        for _ in range(n_frames):
            hooks.before("start")
            mujoco.mj_step(model, data)
            self._split = False
            hooks.after()
        mujoco.mj_rnePostConstraint(model, data)

    def _patch_robosuite(self, sim: Any) -> None:
        model, data, hooks = self.model, self.data, self.hooks

        def step(with_udd: bool = True) -> None:
            hooks.before("start")
            mujoco.mj_step(model, data)
            self._split = False
            hooks.after()

        def step1() -> None:
            hooks.before("start")
            mujoco.mj_step1(model, data)

        def step2() -> None:
            hooks.before("mid")
            mujoco.mj_step2(model, data)
            self._split = True
            hooks.after()

        sim.step, sim.step1, sim.step2 = step, step1, step2
        self._patched_sim = sim

    def step(self, nstep: int = 1) -> None:
        """Advance a raw scene by ``nstep`` substeps with the listeners called around each."""
        for _ in range(nstep):
            self.run_substep(False, None)

    def run_substep(self, split: bool, apply_mid: Callable[[], None] | None) -> None:
        """Run one substep as the env did (whole, or split with writes between the halves)."""
        model, data, hooks = self.model, self.data, self.hooks
        hooks.before("start")
        if split:
            mujoco.mj_step1(model, data)
            if apply_mid is not None:
                apply_mid()
            hooks.before("mid")
            mujoco.mj_step2(model, data)
        else:
            mujoco.mj_step(model, data)
        self._split = split
        hooks.after()

    def last_substep_split(self) -> bool:
        return self._split

    # ------------------------------------------------------------------ scene description
    def body_table(self) -> BodyTable:
        if self._table is None:
            self._table = self._describe_bodies()
        return self._table

    def set_body_table(self, table: BodyTable) -> None:
        self._table = table
        self._tracked_mask[:] = False
        self._tracked_mask[table.tracked] = True

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
        table = BodyTable(names, tuple(kinds), tuple(roles), m.body_mass.copy())
        self._tracked_mask[:] = False
        self._tracked_mask[table.tracked] = True
        return table

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
        h = hashlib.blake2b(digest_size=16)
        m = self.model
        for name in sorted(dir(m)):
            if name.startswith("_") or name.startswith(_VISUAL_PREFIXES):
                continue
            value = getattr(m, name, None)
            if isinstance(value, np.ndarray):
                h.update(name.encode())
                h.update(np.ascontiguousarray(value).tobytes())
        for name in sorted(dir(m.opt)):
            value = getattr(m.opt, name)
            if not name.startswith("_") and isinstance(value, (int, float, np.ndarray)):
                h.update(name.encode())
                h.update(np.asarray(value).tobytes())
        return h.hexdigest()

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

    def write_state(self, state: np.ndarray) -> None:
        mujoco.mj_setState(self.model, self.data, state, _INTEGRATION)

    @staticmethod
    def state_fingerprint(state: np.ndarray) -> int:
        """64-bit fingerprint of a state vector's exact bytes (CRC-32 and Adler-32)."""
        return (zlib.crc32(state) << 32) | zlib.adler32(state)

    def success(self) -> bool | None:
        check = getattr(self._owner, "_check_success", None)
        if check is None:
            return None
        return bool(check())

    # ------------------------------------------------------------------ bodies
    BODY_CAPTURE_WIDTH = 19  # xpos 3, xquat 4, cvel 6, xipos 3, subtree com of root 3

    def body_capture_width(self) -> int:
        return self.BODY_CAPTURE_WIDTH

    def capture_bodies(self, ids: np.ndarray, out: np.ndarray) -> None:
        """Copy the raw body quantities of ``ids`` into ``out`` (len(ids), 19)."""
        out[:, 0:3] = self._xpos[ids]
        out[:, 3:7] = self._xquat[ids]
        out[:, 7:13] = self._cvel[ids]
        out[:, 13:16] = self._xipos[ids]
        out[:, 16:19] = self._subtree_com[self._root[ids]]

    @staticmethod
    def decode_bodies(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw captures (..., 19) to poses (..., 7: position, quaternion wxyz) and centre-of-mass
        velocities (..., 6: linear, angular; world frame)."""
        omega = raw[..., 7:10]
        linear = raw[..., 10:13] + np.cross(omega, raw[..., 13:16] - raw[..., 16:19])
        return raw[..., 0:7].copy(), np.concatenate([linear, omega], axis=-1)

    # ------------------------------------------------------------------ contacts
    CONTACT_CAPTURE_WIDTH = _CONTACT_WIDTH

    def contact_capture_width(self) -> int:
        return _CONTACT_WIDTH

    def capture_contacts(self, stage: ContactStage) -> int:
        """Append this substep's contacts that involve a tracked body; return how many."""
        data = self.data
        n = data.ncon
        if n == 0:
            return 0
        con = data.contact
        geom = con.geom
        bodies = self._geom_body[geom]
        keep = self._tracked_mask[bodies].any(axis=1)
        sel = np.flatnonzero(keep)
        k = sel.size
        if k == 0:
            return 0
        rows = stage.reserve(k)
        rows[:, 0:2] = bodies[sel]
        rows[:, 2:4] = geom[sel]
        rows[:, _C_DIST] = con.dist[sel]
        rows[:, _C_FRAME] = con.frame[sel]
        adr = con.efc_address[sel]
        dim = con.dim[sel]
        efc = data.efc_force
        index = adr[:, None] + self._efc_rows
        if self._pyramidal:
            used = self._efc_rows < np.maximum(2 * (dim[:, None] - 1), 1)
        else:
            used = self._efc_rows < dim[:, None]
        used &= adr[:, None] >= 0
        f = np.where(used, efc[np.where(used, index, 0)] if efc.size else 0.0, 0.0)
        local = rows[:, _C_LOCAL]
        if self._pyramidal:
            # mju_decodePyramid: normal = sum of edge forces, tangent_i = (f_2i - f_2i+1) * mu_i
            mu = con.friction[sel, :2]
            local[:, 0] = f.sum(axis=1)
            if f.shape[1] >= 4:
                local[:, 1] = (f[:, 0] - f[:, 1]) * mu[:, 0]
                local[:, 2] = (f[:, 2] - f[:, 3]) * mu[:, 1]
            else:
                local[:, 1:3] = 0.0
            local[dim == 1, 1:3] = 0.0
        else:
            local[:, :] = 0.0
            width = min(3, f.shape[1])
            local[:, :width] = f[:, :width]
        return k

    @staticmethod
    def decode_contacts(raw: np.ndarray, counts: np.ndarray) -> ContactPairs:
        """Merge raw contact rows per body pair within each substep (vectorised)."""
        n = raw.shape[0]
        if n == 0:
            return _empty_pairs(counts)
        substep = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        a = raw[:, _C_BODY_A].astype(np.int64)
        b = raw[:, _C_BODY_B].astype(np.int64)
        swap = a > b
        lo, hi = np.where(swap, b, a), np.where(swap, a, b)
        frame = raw[:, _C_FRAME].reshape(n, 3, 3)
        local = raw[:, _C_LOCAL]
        world = np.einsum("ni,nij->nj", local, frame)  # force of geom1 on geom2
        world = np.where(swap[:, None], -world, world)  # force of body lo on body hi
        depth = -raw[:, _C_DIST]
        # Group by (substep, lo, hi); within a group the deepest point comes first.
        order = np.lexsort((-depth, hi, lo, substep))
        key_s, key_lo, key_hi = substep[order], lo[order], hi[order]
        start = np.ones(n, dtype=bool)
        start[1:] = (key_s[1:] != key_s[:-1]) | (key_lo[1:] != key_lo[:-1]) | (key_hi[1:] != key_hi[:-1])
        first = np.flatnonzero(start)
        deepest = order[first]
        magnitude = np.linalg.norm(world, axis=1)
        net = np.add.reduceat(world[order], first, axis=0)
        total = np.add.reduceat(magnitude[order], first)
        npoints = np.diff(np.append(first, n))
        pair_counts = np.bincount(key_s[first], minlength=len(counts)).astype(np.uint32)
        return ContactPairs(
            counts=pair_counts,
            bodies=np.stack([key_lo[first], key_hi[first]], axis=1).astype(np.int32),
            depth=depth[deepest].astype(np.float32),
            force=net.astype(np.float32),
            abs_force=total.astype(np.float32),
            points=np.minimum(npoints, np.iinfo(np.uint16).max).astype(np.uint16),
            pieces=raw[deepest][:, _C_GEOM_1:_C_GEOM_2 + 1].astype(np.int32),
            normal=frame[deepest, 0].astype(np.float32),
        )


def _empty_pairs(counts: np.ndarray) -> ContactPairs:
    return ContactPairs(
        counts=np.zeros(len(counts), np.uint32),
        bodies=np.zeros((0, 2), np.int32),
        depth=np.zeros(0, np.float32),
        force=np.zeros((0, 3), np.float32),
        abs_force=np.zeros(0, np.float32),
        points=np.zeros(0, np.uint16),
        pieces=np.zeros((0, 2), np.int32),
        normal=np.zeros((0, 3), np.float32),
    )

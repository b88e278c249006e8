"""The MuJoCo adapter's contacts: staged per substep as raw ``mjContact`` records and constraint
forces (two copies, or one C call), decoded per batch into merged pairs or bare points.

What is recorded for substep k: contacts and contact forces are those the substep *applied*
(``data.contact`` and ``efc_force`` after ``mj_step`` belong to the collision detection at the
substep's start), so a velocity jump at record k comes from the contact forces of record k.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable

import mujoco
import numpy as np

from simuguard_gym.engines.mujoco_kinematics import _fill_from_kinematics, free_body_motion
from simuguard_gym.engines.mujoco_memory import MujocoStateRows, live_fields
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints, merge_contact_points, staged_counts
from simuguard_gym.physics.state import StateRows
from simuguard_gym.physics.vector_math import cross, quat_to_mat

#: The fields of mjContact that contact decoding needs (friction: the two tangential coefficients).
_CONTACT_FIELDS = np.dtype([("dist", "<f8"), ("pos", "<f8", 3), ("frame", "<f8", 9), ("friction", "<f8", 2), ("geom", "<i4", 2),
                            ("efc_address", "<i4"), ("dim", "<i4")])


class MujocoContacts:
    """Contact staging and decoding, mixed into :class:`~simuguard_gym.engines.mujoco.MujocoAdapter`
    (which binds ``model``, ``data`` and the masks and offsets read here)."""

    model: mujoco.MjModel
    data: mujoco.MjData

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
            # The counters and the force pointer read from mjData itself (see mujoco_memory): no
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
            # The free bodies' motion as body_states decodes it (free_body_motion), on gathered rows.
            at = substep[row][:, None]
            body = bodies[row, col]
            q = states[at, qpos_at[row, col][:, None] + np.arange(7)]
            v = states[at, self._free_qvel[body][:, None] + np.arange(6)]
            omega, offset, com_velocity = (x[0] for x in free_body_motion(q[None], v[None], m.body_ipos[body]))
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

    def current_contacts(self) -> tuple[np.ndarray, np.ndarray]:
        """Body id pairs (n, 2) and penetration depths (n,) in metres of the contacts of the
        current data (positive = overlapping), as the last forward pass found them."""
        d, m = self.data, self.model
        n = int(d.ncon)
        if n == 0:
            return np.zeros((0, 2), np.int64), np.zeros(0)
        geoms = np.asarray(d.contact.geom[:n])
        return m.geom_bodyid[geoms].astype(np.int64), -np.asarray(d.contact.dist[:n], dtype=float)


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

"""The per-substep recorder: turns adapter callbacks into chunks of recording columns.

It is a substep listener (see :class:`simuguard_gym.physics.hooks.SubstepHooks`). Before a substep it
copies the between-substep state (what the env wrote since the last substep ended: actuation, and
any write to positions, velocities or the warm start); after it, the state again and the raw
contacts. The hot path only copies into preallocated rows; everything else runs vectorised once
per chunk (a chunk ends early when its contacts fill the stage): which components were written
(the state before a substep against the state after the previous one), the fingerprints, the
snapshots, the tracked bodies' poses and velocities and the merged contacts. With
``helper_process=True`` chunks from an episode's first or second full chunk on are encoded in a
forked helper process (:mod:`~simuguard_gym.capture.helper_process`) that reads them from shared
memory, and that encodes the later episodes of the same scene too (a fork per episode costs a
long-running env more than the helper saves it); else (another OS, one CPU, SAPIEN) in the env's
thread, at the substep that fills the chunk.

The same recorder serves recording and replay: replay records what it reproduces and compares it
chunk by chunk with the file.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simuguard_gym.physics.adapter import DecodesInFork, PhysicsAdapter, RestorableModel
from simuguard_gym.physics.contacts import ContactPairs
from simuguard_gym.physics.hooks import HookError, report_failure
from simuguard_gym.physics.state import RowTargets, StateRows
from simuguard_gym.capture.helper_process import ChunkProcess, Job, SharedArena, helper_processes_available
from simuguard_gym.recording.format import encode_array
from simuguard_gym.capture.native import NativeFill, NativeFillMixin
from simuguard_gym.capture.write_encoder import SPLIT, WHOLE, WriteEncoder

logger = logging.getLogger(__name__)

ChunkSink = Callable[[dict[str, np.ndarray], int, int], None]


@dataclass(frozen=True)
class PackedChunkSink:
    """Where chunks encoded by a helper process go: ``pack(columns, index=, first=, n=)`` makes
    chunk ``index``'s bytes in the helper; ``write(record, index=, first=, n=)`` stores them in
    the env's process, chunk after chunk."""

    pack: Callable[..., bytes]
    write: Callable[..., None]


class SubstepRecorder(NativeFillMixin):
    """Records substeps of ``adapter`` into chunks handed to ``sink(columns, first, n)``.

    >>> import mujoco
    >>> from simuguard_gym.engines.mujoco import MujocoAdapter
    >>> from simuguard_gym.capture.recorder import SubstepRecorder
    >>> model = mujoco.MjModel.from_xml_string(
    ...     '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
    >>> adapter = MujocoAdapter(model, mujoco.MjData(model))
    >>> chunks = []
    >>> recorder = SubstepRecorder(adapter, lambda cols, first, n: chunks.append(cols), chunk_substeps=8)
    >>> adapter.hooks.add(recorder); recorder.start_episode()
    >>> adapter.step(20); recorder.finish()
    >>> [len(c["fingerprint"]) for c in chunks]
    [8, 8, 4]
    """

    def __init__(self, adapter: PhysicsAdapter, sink: ChunkSink, *, snapshot_every: int = 250,
                 chunk_substeps: int = 1024, on_error: Callable[[HookError], None] | None = None,
                 contacts: bool = True, packed_sink: PackedChunkSink | None = None, helper_process: bool = False) -> None:
        if snapshot_every < 1 or chunk_substeps < 1:
            raise ValueError("snapshot_every and chunk_substeps must be positive")
        self.adapter = adapter
        self.sink = sink
        self.snapshot_every = int(snapshot_every)
        self.chunk_substeps = int(chunk_substeps)
        self.on_error = on_error
        #: False: no contacts (their capture is most of the cost on contact-rich scenes); a replay
        #: that verifies states through their fingerprints runs faster without them.
        self.contacts = contacts
        #: Encode chunks in a forked helper process (:mod:`~simuguard_gym.capture.helper_process`)
        #: where the platform allows it and the adapter ``decodes_in_fork``; chunks then reach
        #: ``packed_sink`` (required) as file records. An episode forks at its first full chunk
        #: where the last episode's length says a fork pays, else at its second (``_fork_pays``):
        #: the chunks before it are encoded here. The helper stays for the next episode where
        #: ``start_episode`` is told its scene and it is the one the helper was forked in.
        self.helper_process = bool(helper_process and packed_sink is not None)
        # Protocol checks once, not per episode (each walks the protocol's members).
        self._forkable: DecodesInFork | None = (adapter if isinstance(adapter, DecodesInFork) and adapter.decodes_in_fork
                                                 else None)
        self.packed_sink = packed_sink
        self._helper: ChunkProcess | None = None
        self._helper_scene: _Scene | None = None  # what the helper was forked in
        self._scene: _Scene | None = None  # this episode's, where start_episode was told it
        # Measured, for _fork_pays: a fork, one chunk's encoding here, the last episode's chunks.
        self._fork_seconds: float | None = None
        self._chunk_seconds: float | None = None
        self._previous_chunks: int | None = None
        self._arena: SharedArena | None = None
        self._slots: list[_Slot] | None = None  # this episode's
        # Kept across episodes with what they were made for (see _shared_slots, _private_rows).
        self._kept_slots: tuple[Any, list[_Slot]] | None = None
        self._kept_rows: tuple[Any, np.ndarray, np.ndarray, tuple[RowTargets, RowTargets]] | None = None
        self._active = False
        self._chunk_first = self._row = 0
        self.errors: list[HookError] = []
        # The write encoder of the last episode, kept while its rows and layout are the same.
        self._writes: WriteEncoder | None = None
        self._writes_for: tuple[list[Any], frozenset[str]] | None = None
        self._stage: Any = None  # kept across episodes: its buffers stay allocated
        # The per-substep copies in C where the extension is built (capture/native.py) and the
        # engine says where its memory is: the hooks then call the C object's copies directly.
        self._fill = NativeFill(self._native_full, self._native_before, sources=adapter if contacts else None)
        if self._fill.copy is not None:
            self.after_substep = self._fill.copy  # type: ignore[method-assign]
            self.before_substep = self._fill.copy.before  # type: ignore[method-assign]

    # ------------------------------------------------------------------ episode lifecycle
    def start_episode(self, *, scene: str | None = None) -> None:
        """Bind to the adapter's current scene and start counting substeps from 0.

        ``scene``: what identifies the model's arrays now (its fingerprint), where known: a
        helper process forked in an earlier episode of the same scene (model arrays, engine
        objects, tracked bodies and buffers) encodes this episode's chunks too. Without it
        every episode forks its own."""
        if self.active:  # an episode left without finish(): its chunks still at the helper go with it
            self._stop_helper()
        a = self.adapter
        layout = a.state_layout()
        self.state_size = sum(c.size for c in layout)
        self._rows = a.state_rows()
        late = a.split_late_components()
        if self._writes is None or self._writes.rows is not self._rows or self._writes_for != (layout, late):
            self._writes = WriteEncoder(layout, late, self._rows)
            self._writes_for = (layout, late)
        self.tracked = a.body_table().tracked
        cap = self.chunk_substeps
        first = self._rows.allocate(1)
        self._rows.copy(self._rows.targets(first)[0])
        self._last = first[0]  # the row of the state the chunk's previous substep ended with
        self.initial_state = self._rows.states(first)[0].copy()  # one read: the same state, as a vector
        self._slots = self._shared_slots(cap) if self._may_use_helper() else None
        self._scene = None
        if scene is not None and self._slots is not None and self._forkable is not None:
            self._scene = _Scene(key=(scene, self.tracked.tobytes(), self._rows.targets_key, cap),
                                 objects=(*self._forkable.decoding_scene(), self._rows, self._writes, self._slots))
        if self._helper is not None and (self._scene is None or not self._scene.same(self._helper_scene)):
            self._stop_helper()  # forked in another scene
        if self._slots is not None:
            self._use_slot(0)
            self._stage.clear()  # an episode left without finish() may have staged substeps
        else:
            self._stage = a.new_contact_stage(reuse=self._stage)
            self._use_rows(*self._private_rows(cap))
        self._phase = bytearray(cap)
        self._read, self._capture = self._rows.copy, a.capture_contacts
        self._row = 0
        self._chunk_first = 0
        self._chunk_index = 0
        self._spans: dict[int, tuple[int, int]] = {}  # (first, n) of chunks at the helper
        self.errors = []
        self._active = True
        self._rebind()

    @property
    def substep(self) -> int:
        """Substeps recorded this episode."""
        return self._chunk_first + self._fill.row(self._row)

    def finish(self) -> None:
        """Flush the last, partial chunk, wait until every chunk reached the sink, and stop."""
        try:
            self._settle()
            if self.active and self._row:
                self._flush(final=True)
        finally:
            if self._scene is None or not self.active:
                self._stop_helper()
            else:
                self._drain_helper()  # kept for the next episode of this scene
            if self.active and self._chunk_index:  # an episode reset before its first substep tells nothing
                self._previous_chunks = self._chunk_index
            self.active = False

    def close(self) -> None:
        """:meth:`finish` the episode and stop the helper process, if any."""
        try:
            self.finish()
        finally:
            self._stop_helper()

    # ------------------------------------------------------------------ listener interface
    guards_itself = True  # the hooks call these two directly: they catch their own errors

    def before_substep(self, phase: str) -> None:
        if not self._active or phase == "continue":  # "continue": nothing written since the last substep
            return
        try:
            row = self._row
            self._read(self._before_rows[row])
            self._phase[row] = SPLIT if phase == "split" else WHOLE
        except Exception as error:  # noqa: BLE001 - never raise into the evaluation
            report_failure(self, f"before_substep({phase})", error)

    def after_substep(self) -> None:
        if not self._active:
            return
        try:
            row = self._row
            self._read(self._after_rows[row])
            if self.contacts:
                self._capture(self._stage)
            else:
                self._stage.add_empty()
            self._row = row = row + 1
            if row == self.chunk_substeps or (row & 63 == 0 and self._stage.nbytes > _STAGE_BYTES):
                self._flush()
        except Exception as error:  # noqa: BLE001
            report_failure(self, "after_substep", error)

    def hook_failed(self, where: str, error: BaseException) -> None:
        """A hook failed: this substep (or its writes) is lost, and a recording with a hole
        would not replay. The recording ends here: the substeps before it reach the sink."""
        self._record_error(HookError.capture(self.substep, where, error))
        if self.active:
            try:
                self.finish()
            except Exception as failure:  # noqa: BLE001 - never raise into the evaluation
                self._record_error(HookError.capture(self.substep, "finish", failure))

    def _settle(self) -> None:
        """Take what the native copy filled into the rows and the stage (see NativeFill)."""
        if self._stage is not None:
            self._row = self._fill.settle(self._stage, self._row)

    def _rebind(self) -> None:
        """Point the native copy at the rows, before-rows, phases and stage as they now are."""
        if self._active:
            self._fill.bind(self._rows, self._states, self._row, self._stage, _STAGE_BYTES,
                            before=(self._before, self._phase, WHOLE, SPLIT))
        else:
            self._fill.stop()

    def _batch_full(self) -> None:
        self._flush()

    def _native_before(self, phase: str) -> None:
        SubstepRecorder.before_substep(self, phase)  # guards itself

    def _record_error(self, record: HookError) -> None:
        self.errors.append(record)
        if self.on_error is not None:
            self.on_error(record)

    # ------------------------------------------------------------------ internals
    def _use_rows(self, after: np.ndarray, before: np.ndarray, targets: tuple[RowTargets, RowTargets] | None = None
                  ) -> None:
        self._states, self._before = after, before
        # What the per-substep copy in Python takes for each row, made where it first copies one.
        self._after_rows, self._before_rows = targets or (self._rows.targets(after), self._rows.targets(before))

    def _flush(self, final: bool = False) -> None:
        """End the chunk: hand its buffers to the encoder (or encode it here) and start anew."""
        try:
            self._end_chunk(final)
        finally:
            if not final:  # after the last chunk the episode ends: finish stops the copy
                self._rebind()  # the rows and the stage may be others now

    def _end_chunk(self, final: bool) -> None:
        n = self._row
        if self._slots is not None and not final and (self._helper is not None or self._fork_pays()):
            self._flush_to_helper(n)
            return
        if self._helper is not None:
            # An episode's last chunk is encoded here, after the helper's: the env's thread waits
            # for it either way, and a round trip to the helper takes longer than the work.
            self._drain_helper()
            if not self.active:
                return
        self._chunk_index += 1
        chunk = _Chunk(first=self._chunk_first, n=n, states=self._states, before=self._before,
                       phase=np.frombuffer(self._phase, np.uint8, n).copy(), prev=self._last,
                       stage=self._stage, writes=self._writes, rows=self._rows)
        self._last = self._states[n - 1].copy()
        self._phase[:] = bytes(len(self._phase))  # a row whose read failed must not replay as a write
        self._chunk_first += n
        self._row = 0
        started = time.perf_counter()
        self._encode_or_stop(chunk)
        if not final:  # a full chunk (the last one of an episode may hold a few substeps)
            self._chunk_seconds = time.perf_counter() - started

    def _encode_or_stop(self, chunk: "_Chunk") -> None:
        try:
            self._encode(chunk)
        except Exception as error:  # noqa: BLE001 - recorded, never raised into the evaluation
            self._record_error(HookError.capture(chunk.first, "encode_chunk", error))
            # The chunk is lost, and a recording with a hole would not replay: stop here; what
            # was written stays readable and the footer counts the error.
            self.active = False

    def _encode(self, chunk: "_Chunk") -> None:
        self.sink(self._columns(chunk), chunk.first, chunk.n)

    def _columns(self, chunk: "_Chunk") -> dict[str, np.ndarray]:
        a, n = self.adapter, chunk.n
        states = chunk.rows.states(chunk.states[:n])
        split, start_mask, mid_mask, start_values, mid_values = chunk.writes.columns(
            chunk.before[:n], chunk.states[:n], chunk.prev, chunk.phase)
        snap = np.flatnonzero((chunk.first + np.arange(1, n + 1)) % self.snapshot_every == 0)
        pose, vel, contacts = a.decode_chunk(chunk.stage, states, self.tracked)
        columns = {
            "split": split,
            "start_mask": start_mask,
            "mid_mask": mid_mask,
            "fingerprint": np.fromiter(map(a.state_fingerprint, states), np.uint32, n),
            "body_pose": pose,
            "body_vel": vel,
            "contact_count": contacts.counts,
            "start_values": start_values,
            "mid_values": mid_values,
            **{f"contact_{field}": getattr(contacts, field) for field in ContactPairs.COLUMNS},
            "snapshot_substep": (chunk.first + snap).astype(np.int64),
            "snapshot_state": states[snap],
        }
        return columns

    # ------------------------------------------------------------------ helper process
    def _may_use_helper(self) -> bool:
        return self.helper_process and self.contacts and self._forkable is not None and helper_processes_available()

    def _shared_slots(self, cap: int) -> list["_Slot"]:
        """Two sets of chunk buffers in shared memory: the hot path fills one while the helper
        encodes the other. Kept across episodes while their rows fit (shared memory and a
        contact stage per slot cost more to make than a short episode)."""
        key = (cap, self._rows.targets_key)
        if self._kept_slots is not None and self._kept_slots[0] == key:
            for slot in self._kept_slots[1]:
                slot.stage = self.adapter.new_contact_stage(memory=slot.memory)
            return self._kept_slots[1]
        rows_bytes = 2 * cap * self._rows.row_bytes + 2 * SharedArena.ALIGN
        stage_bytes = _SLOT_RAW_BYTES + 8 * _SLOT_EFC_FLOATS + 2 * SharedArena.ALIGN
        if self._arena is None or self._arena.nbytes < 2 * (rows_bytes + stage_bytes):
            self._arena = SharedArena(2 * (rows_bytes + stage_bytes))
        arena = self._arena
        arena.reset()
        slots = []
        for _ in range(2):
            after, before = (arena.array((cap, self._rows.row_bytes), np.uint8) for _ in range(2))
            memory = (arena.array((_SLOT_RAW_BYTES,), np.uint8), arena.array((_SLOT_EFC_FLOATS,), np.float64))
            slots.append(_Slot(after, before, memory, self.adapter.new_contact_stage(memory=memory)))
        self._kept_slots = (key, slots)
        return slots

    def _private_rows(self, cap: int) -> tuple[np.ndarray, np.ndarray, tuple[RowTargets, RowTargets]]:
        """This episode's row buffers and their copy targets: the last episode's while they fit
        (no chunk is in flight between episodes: ``finish`` waits for them)."""
        key = (cap, self._rows.targets_key)
        if self._kept_rows is None or self._kept_rows[0] != key:
            after, before = self._rows.allocate(cap), self._rows.allocate(cap)
            self._kept_rows = (key, after, before, (self._rows.targets(after), self._rows.targets(before)))
        return self._kept_rows[1:]

    def _use_slot(self, index: int) -> None:
        slot = self._slots[index]  # type: ignore[index]
        if slot.targets is None:  # made on first use: the second slot serves only a helper
            slot.targets = (self._rows.targets(slot.states), self._rows.targets(slot.before))
        self._slot = index
        self._stage = slot.stage
        self._use_rows(slot.states, slot.before, slot.targets)

    def _fork_pays(self) -> bool:
        """Fork the helper now (and encode this chunk there)? A fork costs robosuite's Lift
        more than one chunk's encoding (page tables of the env's memory, then its pages copied as
        either process writes them). Once a fork, a chunk's encoding and an
        episode's length are measured: while the chunks the previous episode had left from here
        would take longer to encode than twice a fork (a process of many GB, e.g. with a
        policy's weights, forks slowly), from the episode's first full chunk on. Before that,
        not before its second full chunk: the episode must show it runs long first."""
        if self._fork_seconds is not None and self._chunk_seconds is not None and self._previous_chunks is not None:
            left = self._previous_chunks - self._chunk_index
            if left * self._chunk_seconds < 2 * self._fork_seconds:
                return False
        elif self._chunk_index < 1:
            return False
        started = time.perf_counter()
        try:
            self._helper = ChunkProcess(self._encode_job)
            self._helper_scene = self._scene
        except OSError as error:
            logger.warning("simuguard: no helper process for recording (%s); chunks are encoded in-process", error)
            self.helper_process = False
            return False
        self._fork_seconds = time.perf_counter() - started
        return True

    def _flush_to_helper(self, n: int) -> None:
        helper, slot = self._helper, self._slot
        assert helper is not None and self._slots is not None
        # The row the chunk's previous substep ended with comes with the job: a helper kept
        # from an earlier episode does not know it.
        job = {"slot": slot, "index": self._chunk_index, "first": self._chunk_first, "n": n,
               "phase": bytes(self._phase[:n]), "stage": self._stage.handoff(), "prev": self._last.tobytes()}
        self._last = self._states[n - 1].copy()
        self._phase[:] = bytes(len(self._phase))  # a row whose read failed must not replay as a write
        self._spans[self._chunk_index] = (self._chunk_first, n)
        self._chunk_first += n
        self._chunk_index += 1
        self._row = 0
        try:
            # The other slot is free once the chunk that last filled it (one before this) is back.
            # Taken before this job is sent: a job that carries a large stage would otherwise fill
            # the pipe while the helper waits for us to read its reply.
            self._take_replies(helper.replies(wait_for=job["index"] - 1))
            helper.submit(job)
        except (OSError, ChildProcessError) as error:
            self._helper_failed(error)
        self._use_slot(1 - slot)
        self._stage.clear()

    def _encode_job(self, job: Job) -> dict[str, Any]:
        """Encode one chunk (runs in the helper, on its copy of this recorder)."""
        slot = self._slots[job["slot"]]  # type: ignore[index]
        slot.stage.resume(job["stage"])
        writes = self._writes
        assert writes is not None  # made by start_episode, before any chunk
        n = job["n"]
        chunk = _Chunk(first=job["first"], n=n, states=slot.states, before=slot.before,
                       phase=np.frombuffer(job["phase"], np.uint8), prev=np.frombuffer(job["prev"], np.uint8).copy(),
                       stage=slot.stage, writes=writes, rows=self._rows)
        columns = self._columns(chunk)
        return {"record": self.packed_sink.pack(columns, index=job["index"], first=job["first"], n=n)}  # type: ignore[union-attr]

    def _take_replies(self, replies: list[tuple[str, int, Any]]) -> None:
        for kind, index, payload in replies:
            first, n = self._spans.pop(index)
            if kind == "chunk" and self.active:
                try:
                    self.packed_sink.write(payload["record"], index=index, first=first, n=n)  # type: ignore[union-attr]
                except Exception as error:  # noqa: BLE001
                    self._record_error(HookError.capture(first, "write_chunk", error))
                    self.active = False
            elif kind == "error":
                self._record_error(HookError(**payload))
                # As in-process: a recording with a hole would not replay; what was written stays.
                self.active = False

    def _helper_failed(self, error: BaseException) -> None:
        self._record_error(HookError.capture(self._first_unwritten(), "encode_chunk", error))
        self.active = False
        if self._helper is not None:
            self._helper.kill()
            self._helper = None
            self._helper_scene = None

    def _drain_helper(self) -> None:
        """Every chunk at the helper written; the helper stays (stopped where it failed)."""
        helper = self._helper
        if helper is None:
            return
        try:
            self._take_replies(helper.replies_due())
        except (OSError, ChildProcessError) as error:
            self._helper_failed(error)
        if not self.active:  # an error reply: the helper encodes nothing more
            self._stop_helper()

    def _stop_helper(self) -> None:
        helper, self._helper = self._helper, None
        self._helper_scene = None
        if helper is None:
            return
        try:
            self._take_replies(helper.close())
        except (OSError, ChildProcessError) as error:
            self._record_error(HookError.capture(self._first_unwritten(), "encode_chunk", error))
            self.active = False

    def _first_unwritten(self) -> int:
        """The first substep of the chunks still at the helper (the recording's end where none)."""
        return min((first for first, _ in self._spans.values()), default=self.substep)


@dataclass
class _Chunk:
    """What a chunk's columns are made of, owned by whoever encodes it."""

    first: int
    n: int
    states: np.ndarray  # rows (see StateRows): the state after each substep
    before: np.ndarray  # rows: the state before each substep (where its phase is not 0)
    phase: np.ndarray  # per substep: 0 nothing written before it, WHOLE, SPLIT
    prev: np.ndarray  # the row of the state the substep before the chunk ended with
    stage: Any
    writes: WriteEncoder
    rows: StateRows  # what the rows hold


@dataclass(frozen=True)
class _Scene:
    """What a helper process decodes with: values (compared by equality) and objects (by identity)."""

    key: tuple[Any, ...]
    objects: tuple[object, ...]

    def same(self, other: "_Scene | None") -> bool:
        return (other is not None and self.key == other.key and len(self.objects) == len(other.objects)
                and all(a is b for a, b in zip(self.objects, other.objects)))


@dataclass
class _Slot:
    """One set of a chunk's buffers in shared memory (see ``_shared_slots``)."""

    states: np.ndarray
    before: np.ndarray
    memory: tuple[np.ndarray, np.ndarray]  # the contact stage's (records, forces) buffers
    stage: Any
    targets: tuple[RowTargets, RowTargets] | None = None  # the per-substep copies' targets in states and before


# A chunk ends early once this many bytes of raw contacts are staged, which bounds memory on
# scenes with hundreds of contacts per substep whatever the chunk length.
_STAGE_BYTES = 8 * 1024 * 1024
# A shared slot's contact stage: room for a chunk that ends early (checked every 64 substeps); a
# stage that outgrows it continues in memory of its own and hands its bytes over with the job.
_SLOT_RAW_BYTES = 2 * _STAGE_BYTES
_SLOT_EFC_FLOATS = _STAGE_BYTES // 16


def header_for(adapter: PhysicsAdapter, recorder: SubstepRecorder, *,
               model_record: tuple[str, dict[str, Any], dict[str, int]] | None = None, **extra: Any) -> dict[str, Any]:
    """The engine part of a recording header (the wrapper adds env, seed and episode fields);
    ``model_record``: the adapter's ``model_record()`` where the caller has it already."""
    table = adapter.body_table()
    pose, vel = adapter.body_states(recorder.initial_state[None], recorder.tracked)
    stage = adapter.stage_box()
    # What the env changed in its model since it was built (Meta-World's goal and bodies at
    # reset), and a checksum of every model array: a replay writes back what differs.
    if model_record is None and isinstance(adapter, RestorableModel):
        model_record = adapter.model_record()
    if model_record is not None:
        fingerprint, changes, digests = model_record
        model = {"model_fingerprint": fingerprint, "model_digests": digests,
                 "model_changes": {name: {key: encode_array(part) for key, part in change.items()}
                                   for name, change in changes.items()}}
    else:
        model = {"model_fingerprint": adapter.model_fingerprint()}
    return {
        "engine": adapter.engine,
        "engine_version": adapter.engine_version,
        "substep_dt": adapter.substep_dt,
        "bodies": table.to_dict(),
        "tracked": [int(i) for i in recorder.tracked],
        "state_layout": [[c.name, c.offset, c.size] for c in adapter.state_layout()],
        "initial_state": recorder.initial_state.astype("<f8").tobytes(),
        # The tracked bodies before the first substep, so that a reader without the engine (the
        # offline detector) sees the first substep's velocity change.
        "initial_body_pose": pose[0].astype("<f8").tobytes(),
        "initial_body_vel": vel[0].astype("<f8").tobytes(),
        "gravity": [float(g) for g in adapter.gravity],
        # Where the task happens (the robot and the static scene): the detector's off-stage rule.
        "stage": None if stage is None else [[float(x) for x in corner] for corner in stage],
        **model,
        "snapshot_every": recorder.snapshot_every,
        "chunk_substeps": recorder.chunk_substeps,
        **extra,
    }

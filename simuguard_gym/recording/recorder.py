"""The per-substep recorder: turns adapter callbacks into chunks of recording columns.

It is a substep listener (see :class:`simuguard_gym.engines.base.SubstepHooks`). Before a substep it
stores which components of the between-substep state changed since the last substep ended (the
actuation the env wrote, and any write to positions, velocities or the warm start); after it, the
state itself (from which the tracked bodies are decoded later), its fingerprint and the raw
contacts. The hot path only copies into preallocated buffers; decoding (body poses and velocities,
contact merging) runs vectorised once per chunk (a chunk ends early when its contacts fill the
stage). With ``background=True`` a chunk with many contacts is decoded and handed to the sink on
a worker thread while the env runs on (MuJoCo releases the GIL in ``mj_step``): the buffers it
needs are handed over and the hot path continues in fresh ones.

The same recorder serves recording and replay: replay records what it reproduces and compares it
chunk by chunk with the file.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simuguard_gym.engines.base import ContactPairs, HookError, PhysicsAdapter

ChunkSink = Callable[[dict[str, np.ndarray], int, int], None]

#: Errors after which the recorder stops recording the episode.
MAX_ERRORS = 100


class SubstepRecorder:
    """Records substeps of ``adapter`` into chunks handed to ``sink(columns, first, n)``.

    >>> import mujoco
    >>> from simuguard_gym.engines.mujoco import MujocoAdapter
    >>> from simuguard_gym.recording.recorder import SubstepRecorder
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
                 contacts: bool = True, background: bool = False) -> None:
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
        #: Decode chunks and call the sink on a worker thread (for adapters whose decoding reads
        #: no live engine object: ``decodes_off_thread``); ``finish()`` waits for it.
        self.background = background
        self._encoder: _ChunkEncoder | None = None
        self.active = False
        self.substep = 0  # substeps recorded this episode
        self.errors: list[HookError] = []
        self._stage: Any = None  # kept across episodes: its buffers stay allocated

    # ------------------------------------------------------------------ episode lifecycle
    def start_episode(self) -> None:
        """Bind to the adapter's current scene and start counting substeps from 0."""
        a = self.adapter
        layout = a.state_layout()
        self.state_size = sum(c.size for c in layout)
        late = a.split_late_components()
        self._segments = [(1 << i, 8 * c.offset, 8 * (c.offset + c.size), c.name in late)
                          for i, c in enumerate(layout) if c.size > 0]
        self._plan: _WritePlan | None = None
        self.tracked = a.body_table().tracked
        cap = self.chunk_substeps
        self._states = np.empty((cap, self.state_size))  # state after each substep of the chunk
        self._start = np.empty(self.state_size)  # state before the current substep
        self.initial_state = np.empty(self.state_size)
        a.read_state(self.initial_state)
        self._prev = self.initial_state  # state the previous substep ended with
        self._split = np.zeros(cap, np.uint8)
        self._start_mask = np.zeros(cap, np.uint16)
        self._mid_mask = np.zeros(cap, np.uint16)
        self._fingerprint = np.zeros(cap, np.uint32)
        self._stage = a.new_contact_stage(reuse=self._stage)
        if not (self.background and getattr(a, "decodes_off_thread", False)):
            self._encoder = None
        elif self._encoder is None:
            self._encoder = _ChunkEncoder()
        self._spare_states: list[np.ndarray] = []  # handed back by the encoder
        self._spare_stages: list[Any] = []
        self._start_values: list[bytes] = []
        self._mid_values: list[bytes] = []
        self._snap_at: list[int] = []
        self._snap_state: list[np.ndarray] = []
        self.substep = 0
        self._row = 0
        self._chunk_first = 0
        self.errors = []
        self.active = True

    def finish(self) -> None:
        """Flush the last, partial chunk, wait until every chunk reached the sink, and stop."""
        if self.active and self._row:
            self._flush()
        if self._encoder is not None:
            self._encoder.drain()
        self.active = False

    # ------------------------------------------------------------------ listener interface
    def before_substep(self, phase: str) -> None:
        if not self.active or phase == "continue":  # "continue": nothing written since the last substep
            return
        now = self._start
        self.adapter.read_state(now)
        now_b, prev_b = now.tobytes(), self._prev.tobytes()
        if now_b == prev_b:
            return
        split = phase == "split"
        plan = self._plan
        # Envs write the same components substep after substep (a controller's ctrl): if nothing
        # outside the last written region changed, store that region again. Unchanged components
        # inside it are stored too, which replays as a no-op.
        if plan is None or plan.split != split or now_b[:plan.lo] != prev_b[:plan.lo] \
                or now_b[plan.hi:] != prev_b[plan.hi:]:
            plan = self._plan = _WritePlan.of(self._segments, now_b, prev_b, split)
        for lo, hi, late in plan.spans:
            (self._mid_values if late else self._start_values).append(now_b[lo:hi])
        self._start_mask[self._row] = plan.start_bits
        self._mid_mask[self._row] = plan.mid_bits

    def after_substep(self) -> None:
        if not self.active:
            return
        a, row = self.adapter, self._row
        state = self._states[row]
        a.read_state(state)
        # A view, turned into bytes only when a write check needs it (not between the frames of
        # one env step): the row stays intact until the substep after it has been read.
        self._prev = state
        self._fingerprint[row] = a.state_fingerprint(state)
        self._split[row] = a.last_substep_split()
        if self.contacts:
            a.capture_contacts(self._stage)
        else:
            self._stage.counts.append(0)
        if (self.substep + 1) % self.snapshot_every == 0:
            self._snap_at.append(self.substep)
            self._snap_state.append(state.copy())
        self.substep += 1
        self._row += 1
        if self._row == self.chunk_substeps or (self._row % 64 == 0 and self._stage.nbytes > _STAGE_BYTES):
            self._flush()

    def hook_failed(self, where: str, error: BaseException) -> None:
        record = HookError.capture(self.substep, where, error)
        self.errors.append(record)
        if self.on_error is not None:
            self.on_error(record)
        if len(self.errors) >= MAX_ERRORS:
            # A hook that keeps failing would add an error per substep for the rest of the episode:
            # stop recording it; what was recorded is kept and the footer counts the errors.
            self.active = False

    # ------------------------------------------------------------------ internals
    def _flush(self) -> None:
        """End the chunk: hand its buffers to the encoder (or encode it here) and start anew."""
        n = self._row
        chunk = _Chunk(
            first=self._chunk_first, n=n, states=self._states, stage=self._stage,
            split=self._split[:n].copy(), start_mask=self._start_mask[:n].copy(),
            mid_mask=self._mid_mask[:n].copy(), fingerprint=self._fingerprint[:n].copy(),
            start_values=np.frombuffer(b"".join(self._start_values), dtype=np.float64),
            mid_values=np.frombuffer(b"".join(self._mid_values), dtype=np.float64),
            snapshot_substep=np.asarray(self._snap_at, dtype=np.int64),
            snapshot_state=np.stack(self._snap_state) if self._snap_state else np.zeros((0, self.state_size)))
        self._chunk_first += n
        self._row = 0
        self._start_mask[:] = 0
        self._mid_mask[:] = 0
        self._start_values, self._mid_values = [], []
        self._snap_at, self._snap_state = [], []
        if self._encoder is None or sum(chunk.stage.counts) < OFF_THREAD_MIN_CONTACTS:
            if self._encoder is not None:
                self._encoder.drain()  # chunks reach the sink in order: a heavy one may be in flight
            self._encode_or_stop(chunk)
            return
        # The encoder owns the chunk's state rows and contact stage until it hands them back.
        self._states = self._spare_states.pop() if self._spare_states else np.empty_like(self._states)
        self._stage = self.adapter.new_contact_stage(reuse=self._spare_stages.pop() if self._spare_stages else None)
        self._encoder.submit(self._encode_off_thread, chunk)

    def _encode_or_stop(self, chunk: "_Chunk") -> None:
        try:
            self._encode(chunk)
        except Exception as error:  # noqa: BLE001 - recorded, never raised into the evaluation
            self.hook_failed("encode_chunk", error)
            # The chunk is lost, and a recording with a hole would not replay: stop here; what
            # was written stays readable and the footer counts the error.
            self.active = False

    def _encode(self, chunk: "_Chunk") -> None:
        a, n = self.adapter, chunk.n
        states = chunk.states[:n]
        pose, vel, contacts = a.decode_chunk(chunk.stage, states, self.tracked)
        columns = {
            "split": chunk.split,
            "start_mask": chunk.start_mask,
            "mid_mask": chunk.mid_mask,
            "fingerprint": chunk.fingerprint,
            "body_pose": pose,
            "body_vel": vel,
            "contact_count": contacts.counts,
            "start_values": chunk.start_values,
            "mid_values": chunk.mid_values,
            **{f"contact_{field}": getattr(contacts, field) for field in ContactPairs.COLUMNS},
            "snapshot_substep": chunk.snapshot_substep,
            "snapshot_state": chunk.snapshot_state,
        }
        self.sink(columns, chunk.first, n)

    def _encode_off_thread(self, chunk: "_Chunk") -> None:
        try:
            if self.active:  # a chunk after a failed one would leave a hole
                self._encode_or_stop(chunk)
        finally:
            self._spare_states.append(chunk.states)  # list.append is atomic under the GIL
            self._spare_stages.append(chunk.stage)


@dataclass
class _Chunk:
    """What a chunk's columns are made of, owned by whoever encodes it."""

    first: int
    n: int
    states: np.ndarray
    stage: Any
    split: np.ndarray
    start_mask: np.ndarray
    mid_mask: np.ndarray
    fingerprint: np.ndarray
    start_values: np.ndarray
    mid_values: np.ndarray
    snapshot_substep: np.ndarray
    snapshot_state: np.ndarray


class _ChunkEncoder:
    """One daemon thread that runs submitted jobs in order; one runs and one waits at most, which
    bounds the chunks in flight (the hot path waits when the thread falls behind)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        _ENCODERS.add(self)

    def submit(self, job: Callable[[Any], None], arg: Any) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="simuguard-chunk-encoder", daemon=True)
            self._thread.start()
        self._jobs.put((job, arg))

    def drain(self) -> None:
        """Wait until every submitted job has run."""
        self._jobs.join()

    def _run(self) -> None:
        while True:
            job, arg = self._jobs.get()
            try:
                job(arg)
            finally:
                self._jobs.task_done()


_ENCODERS: "weakref.WeakSet[_ChunkEncoder]" = weakref.WeakSet()


@atexit.register
def _drain_encoders() -> None:
    # A job still decoding when the interpreter tears down its objects would crash the process
    # (an env left open at exit): let every job finish first.
    for encoder in list(_ENCODERS):
        encoder.drain()


class _WritePlan:
    """Which bytes of the state to store for a write: the components from the first to the last
    changed one, as spans of consecutive components replayed at the same point."""

    __slots__ = ("split", "lo", "hi", "start_bits", "mid_bits", "spans")

    @classmethod
    def of(cls, segments: list[tuple[int, int, int, bool]], now: bytes, before: bytes, split: bool) -> "_WritePlan":
        changed = [i for i, (_, lo, hi, _) in enumerate(segments) if now[lo:hi] != before[lo:hi]]
        region = segments[changed[0]:changed[-1] + 1]
        plan = cls()
        plan.split, plan.lo, plan.hi = split, region[0][1], region[-1][2]
        plan.start_bits = plan.mid_bits = 0
        plan.spans = []
        for bit, lo, hi, late in region:
            late = late and split
            if late:
                plan.mid_bits |= bit
            else:
                plan.start_bits |= bit
            if plan.spans and plan.spans[-1][2] == late:
                plan.spans[-1] = (plan.spans[-1][0], hi, late)
            else:
                plan.spans.append((lo, hi, late))
        return plan


#: A chunk goes to the worker thread only with at least this many raw contacts (8 per substep of
#: a full chunk). The thread pays where the decoding is numpy loops over large arrays (which run
#: without the GIL); a light chunk's decoding is mostly Python, which holds the GIL and stalls an
#: env whose step is Python too (robosuite: Lift took 15% longer with every chunk off-thread,
#: against 8% here). Measured in docs/performance.md.
OFF_THREAD_MIN_CONTACTS = 8192

# A chunk ends early once this many bytes of raw contacts are staged, which bounds memory on
# scenes with hundreds of contacts per substep whatever the chunk length.
_STAGE_BYTES = 8 * 1024 * 1024


def header_for(adapter: PhysicsAdapter, recorder: SubstepRecorder, **extra: Any) -> dict[str, Any]:
    """The engine part of a recording header (the wrapper adds env, seed and episode fields)."""
    table = adapter.body_table()
    pose, vel = adapter.body_states(recorder.initial_state[None], recorder.tracked)
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
        "model_fingerprint": adapter.model_fingerprint(),
        **({"model_body_pose": adapter.model_body_pose().astype("<f8").tobytes()}
           if hasattr(adapter, "model_body_pose") else {}),
        "snapshot_every": recorder.snapshot_every,
        "chunk_substeps": recorder.chunk_substeps,
        **extra,
    }

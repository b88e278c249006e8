"""The per-substep recorder: turns adapter callbacks into chunks of recording columns.

It is a substep listener (see :class:`simuguard_gym.engines.base.SubstepHooks`). Before a substep it
stores which components of the between-substep state changed since the last substep ended (the
actuation the env wrote, and any write to positions, velocities or the warm start); after it, the
state fingerprint, the tracked bodies and the contacts. Engine work in the hot path is limited to
copying into preallocated buffers; decoding (velocities, contact merging) runs once per chunk.

The same recorder serves recording and replay: replay records what it reproduces and compares it
chunk by chunk with the file.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from simuguard_gym.engines.base import ContactStage, HookError, PhysicsAdapter

ChunkSink = Callable[[dict[str, np.ndarray], int, int], None]


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
                 chunk_substeps: int = 1024, on_error: Callable[[HookError], None] | None = None) -> None:
        if snapshot_every < 1 or chunk_substeps < 1:
            raise ValueError("snapshot_every and chunk_substeps must be positive")
        self.adapter = adapter
        self.sink = sink
        self.snapshot_every = int(snapshot_every)
        self.chunk_substeps = int(chunk_substeps)
        self.on_error = on_error
        self.active = False
        self.substep = 0  # substeps recorded this episode
        self.errors: list[HookError] = []

    # ------------------------------------------------------------------ episode lifecycle
    def start_episode(self) -> None:
        """Bind to the adapter's current scene and start counting substeps from 0."""
        a = self.adapter
        layout = a.state_layout()
        self.state_size = sum(c.size for c in layout)
        nonempty = [i for i, c in enumerate(layout) if c.size > 0]
        self._starts = np.array([layout[i].offset for i in nonempty], dtype=np.intp)
        self._sizes = np.array([layout[i].size for i in nonempty], dtype=np.intp)
        self._bits = np.array([1 << i for i in nonempty], dtype=np.int64)
        self.tracked = a.body_table().tracked
        nt, cap = len(self.tracked), self.chunk_substeps
        self._prev = np.empty(self.state_size)  # state after the previous substep
        self._start = np.empty(self.state_size)  # state at the start of the current substep
        self._scratch = np.empty(self.state_size)
        a.read_state(self._prev)
        self.initial_state = self._prev.copy()
        self._split = np.zeros(cap, np.uint8)
        self._start_mask = np.zeros(cap, np.uint16)
        self._mid_mask = np.zeros(cap, np.uint16)
        self._fingerprint = np.zeros(cap, np.uint64)
        self._bodies = np.zeros((cap, nt, a.body_capture_width()))
        self._contact_count = np.zeros(cap, np.uint32)
        self._contacts = ContactStage(a.contact_capture_width())
        self._start_values: list[np.ndarray] = []
        self._mid_values: list[np.ndarray] = []
        self._snap_at: list[int] = []
        self._snap_state: list[np.ndarray] = []
        self.substep = 0
        self._row = 0
        self._chunk_first = 0
        self.errors = []
        self.active = True

    def finish(self) -> None:
        """Flush the last, partial chunk and stop recording."""
        if self.active and self._row:
            self._flush()
        self.active = False

    # ------------------------------------------------------------------ listener interface
    def before_substep(self, phase: str) -> None:
        if not self.active:
            return
        if phase == "start":
            self.adapter.read_state(self._start)
            self._start_mask[self._row] = self._changes(self._start, self._prev, self._start_values)
        else:
            self.adapter.read_state(self._scratch)
            self._mid_mask[self._row] = self._changes(self._scratch, self._start, self._mid_values)

    def after_substep(self) -> None:
        if not self.active:
            return
        a, row = self.adapter, self._row
        a.read_state(self._prev)
        self._fingerprint[row] = a.state_fingerprint(self._prev)
        self._split[row] = a.last_substep_split()
        a.capture_bodies(self.tracked, self._bodies[row])
        self._contact_count[row] = a.capture_contacts(self._contacts)
        if (self.substep + 1) % self.snapshot_every == 0:
            self._snap_at.append(self.substep)
            self._snap_state.append(self._prev.copy())
        self.substep += 1
        self._row += 1
        if self._row == self.chunk_substeps:
            self._flush()

    def hook_failed(self, where: str, error: BaseException) -> None:
        record = HookError.capture(self.substep, where, error)
        self.errors.append(record)
        if self.on_error is not None:
            self.on_error(record)

    # ------------------------------------------------------------------ internals
    def _changes(self, now: np.ndarray, before: np.ndarray, values: list[np.ndarray]) -> int:
        if now.tobytes() == before.tobytes():
            return 0
        changed = np.logical_or.reduceat(now != before, self._starts)
        values.append(now[np.repeat(changed, self._sizes)])
        return int(self._bits[changed].sum())

    def _flush(self) -> None:
        n = self._row
        a = self.adapter
        pose, vel = a.decode_bodies(self._bodies[:n])
        contacts = a.decode_contacts(self._contacts.used(), self._contact_count[:n])
        columns = {
            "split": self._split[:n].copy(),
            "start_mask": self._start_mask[:n].copy(),
            "mid_mask": self._mid_mask[:n].copy(),
            "fingerprint": self._fingerprint[:n].copy(),
            "body_pose": pose,
            "body_vel": vel,
            "contact_count": contacts.counts,
            "start_values": _concat(self._start_values),
            "mid_values": _concat(self._mid_values),
            "contact_bodies": contacts.bodies,
            "contact_depth": contacts.depth,
            "contact_force": contacts.force,
            "contact_abs_force": contacts.abs_force,
            "contact_points": contacts.points,
            "contact_pieces": contacts.pieces,
            "contact_normal": contacts.normal,
            "snapshot_substep": np.asarray(self._snap_at, dtype=np.int64),
            "snapshot_state": (np.stack(self._snap_state) if self._snap_state
                               else np.zeros((0, self.state_size))),
        }
        first = self._chunk_first
        self._chunk_first += n
        self._row = 0
        self._start_mask[:] = 0
        self._mid_mask[:] = 0
        self._contacts.clear()
        self._start_values, self._mid_values = [], []
        self._snap_at, self._snap_state = [], []
        self.sink(columns, first, n)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def header_for(adapter: PhysicsAdapter, recorder: SubstepRecorder, **extra: Any) -> dict[str, Any]:
    """The engine part of a recording header (the wrapper adds env, seed and episode fields)."""
    table = adapter.body_table()
    return {
        "engine": adapter.engine,
        "engine_version": adapter.engine_version,
        "substep_dt": adapter.substep_dt,
        "bodies": table.to_dict(),
        "tracked": [int(i) for i in recorder.tracked],
        "state_layout": [[c.name, c.offset, c.size] for c in adapter.state_layout()],
        "initial_state": recorder.initial_state.astype("<f8").tobytes(),
        "model_fingerprint": adapter.model_fingerprint(),
        "snapshot_every": recorder.snapshot_every,
        "chunk_substeps": recorder.chunk_substeps,
        **extra,
    }

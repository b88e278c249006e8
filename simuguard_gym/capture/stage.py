"""The contact stage: an engine's raw contact records of consecutive substeps, copied per
substep into buffers kept across batches and episodes, until the adapter decodes them."""

from __future__ import annotations

from typing import Any

import numpy as np


class RecordStage:
    """Raw contact records of consecutive substeps and a float64 array with each (MuJoCo: its
    ``mjContact`` records and constraint forces), awaiting a decode by the engine's adapter.

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

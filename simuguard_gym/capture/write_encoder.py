"""What the env wrote between substeps, as the recording stores it: the write columns of a chunk
from the state rows read before each substep (numpy only)."""

from __future__ import annotations

import numpy as np

from simuguard_gym.physics.state import StateComponent, StateRows

#: Phase codes of a substep whose state was read before it (0: nothing read, nothing written).
WHOLE, SPLIT = 1, 2


class WriteEncoder:
    """Turns the state rows read before substeps into the write columns, one chunk at a time.

    A substep's write is the run of components from the first to the last one that differ from
    the state the previous substep ended with (unchanged components inside it replay as no-ops).
    Rows are compared word by word as they were copied (no state vectors are built: a component
    changed if any of its words did) and the stored values are gathered from the rows. Each
    substep's run is its own: a wide write (a harness setting qpos and qvel once) is stored
    once, not again with every later controller write, and a chunk encodes without the ones
    before it.
    """

    def __init__(self, layout: list[StateComponent], late: frozenset[str], rows: StateRows) -> None:
        parts = [(i, c) for i, c in enumerate(layout) if c.size > 0]
        size = sum(c.size for c in layout)
        self.starts = np.array([c.offset for _, c in parts], dtype=np.int64)
        self.ends = np.array([c.offset + c.size for _, c in parts], dtype=np.int64)
        self.rows = rows
        # Rows are cut into segments of words: each component's own, and the words between two
        # components (padding, or arrays of MuJoCo's that are not state, such as qacc, which
        # mj_forward rewrites between substeps), whose changes are no write.
        ranges = rows.word_ranges([c for _, c in parts])
        ordered = ranges[np.argsort(ranges[:, 0], kind="stable")]
        if (ordered[1:, 0] < ordered[:-1, 1]).any():
            raise ValueError("state components share words of a row")
        bounds = np.unique(ranges)
        self.word_starts = bounds[bounds < rows.row_bytes // 8]
        self.segment = np.searchsorted(self.word_starts, ranges[:, 0])  # each component's segment
        bit = np.array([1 << i for i, _ in parts], dtype=np.int64)
        is_late = np.array([c.name in late for _, c in parts], dtype=bool)
        # Sums over a run of components [f, l] of their bits, and of the bits of late ones.
        self.bits = np.concatenate([[0], np.cumsum(bit)])
        self.late_bits = np.concatenate([[0], np.cumsum(bit * is_late)])
        self.late_element = np.zeros(size, dtype=bool)
        for (_, c), flag in zip(parts, is_late):
            self.late_element[c.offset:c.offset + c.size] = flag
        self._columns: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}

    def columns(self, before: np.ndarray, after: np.ndarray, prev: np.ndarray, phase: np.ndarray
                ) -> tuple[np.ndarray, ...]:
        """``split``, ``start_mask``, ``mid_mask``, ``start_values``, ``mid_values`` of a chunk from
        its rows before and after each substep and the row the previous substep ended with."""
        split = (phase == SPLIT).astype(np.uint8)
        b, a = before.view(np.uint64), after.view(np.uint64)  # bitwise: NaN == NaN, -0.0 != 0.0
        differs = np.empty(b.shape, dtype=bool)
        np.not_equal(b[1:], a[:-1], out=differs[1:])
        np.not_equal(b[0], prev.view(np.uint64), out=differs[0])
        differs[phase == 0] = False  # nothing was read before these substeps
        if len(self.word_starts):
            changed = np.logical_or.reduceat(differs, self.word_starts, axis=1)[:, self.segment]
        else:
            changed = differs[:, :0]
        n = len(changed)
        rows = np.flatnonzero(changed.any(axis=1))
        first = np.full(n, 0, np.int64)
        last = np.full(n, -1, np.int64)  # an empty run for rows without a write
        late = split.astype(bool)  # a split substep's late components are written between its halves
        if len(rows):
            c = changed[rows]
            first[rows], last[rows] = c.argmax(axis=1), c.shape[1] - 1 - c[:, ::-1].argmax(axis=1)
        start_mask = (self.bits[last + 1] - self.bits[first]).astype(np.uint16)
        late_mask = np.where(late, self.late_bits[last + 1] - self.late_bits[first], 0).astype(np.uint16)
        start_mask -= late_mask
        return (split, start_mask, late_mask) + self._values(before, rows, first, last, late)

    def _values(self, before: np.ndarray, rows: np.ndarray, first: np.ndarray, last: np.ndarray,
                late: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored elements of the written rows, row after row, split into start and mid
        values; gathered per distinct run (one in the common case), not per element mask."""
        values = []
        # One key per run: runs change rarely, so there are few distinct keys (one in the common case).
        key = (first[rows] * len(self.bits) + last[rows]) * 2 + late[rows]
        if len(key) and (key == key[0]).all():  # the common case, without np.unique's sort
            distinct, which = key[:1], np.zeros(len(key), np.intp)
        else:
            distinct, which = np.unique(key, return_inverse=True)
        written = before if len(rows) == len(before) else before[rows]
        for part in (0, 1):  # 0: start values, 1: mid values
            columns = [self._run_columns(int(k) // 2 // len(self.bits), int(k) // 2 % len(self.bits), int(k) % 2)[part]
                       for k in distinct]
            if len(distinct) == 1:
                values.append(self.rows.gather(written, columns[0]).reshape(-1))
                continue
            lengths = np.array([len(c) for c in columns], np.int64)[which] if len(rows) else np.zeros(0, np.int64)
            out = np.empty(int(lengths.sum()))
            at = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            for g, cols in enumerate(columns):
                members = np.flatnonzero(which == g)
                out[(at[members][:, None] + np.arange(len(cols))).reshape(-1)] = \
                    self.rows.gather(written[members], cols).reshape(-1)
            values.append(out)
        return values[0], values[1]

    def _run_columns(self, first: int, last: int, late: int) -> tuple[np.ndarray, np.ndarray]:
        """State elements stored for a run: (before the substep, between its halves)."""
        key = (first, last, late)
        cached = self._columns.get(key)
        if cached is None:
            elements = np.arange(self.starts[first], self.ends[last])
            mid = self.late_element[elements] & bool(late)
            cached = self._columns[key] = (elements[~mid], elements[mid])
        return cached

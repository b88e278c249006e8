"""Rows: how a listener copies the between-substep state per substep (:class:`SpanRows`: the
engine's own memory, copied as bytes; the plain form is ``physics.state.StateRows``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from simuguard_gym.physics.state import RowTargets, StateComponent, StateRows


class SpanRows(StateRows):
    """The state as an engine keeps it in memory: the 8 bytes of its time and one or two spans of
    its buffer that hold the other components (with the engine's alignment padding between its
    arrays), copied as bytes per substep; :meth:`states` gathers the state vector out of a batch
    of rows (byte elements, such as MuJoCo's ``eq_active``, to floats).

    The engine says where its memory is (MuJoCo: ``engines.mujoco_memory.state_rows_of``, which
    uses these rows only where one of them gathers to exactly ``mj_getState``'s vector): ``floats``
    holds, per element of the state vector, the float64 word of a row that holds it, or
    :attr:`BYTE` (the element is the byte at ``bytes_at`` of a row, for the ``byte_columns``
    elements), or :attr:`ABSENT` (not copied: it reads as 0 in :meth:`states` and :meth:`gather`;
    rows of the components decoding needs only).
    """
    #: Word of an element (in ``_words``) stored as a byte (eq_active), and of one not copied.
    BYTE, ABSENT = -1, -2

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
        self._absent = np.flatnonzero(floats == self.ABSENT)
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

        # One closure per span count (at most two): this runs every substep.
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


    def targets(self, rows: np.ndarray) -> RowTargets:
        at, size = self._span_at, self._span_bytes

        def target(row: int) -> tuple[memoryview, ...]:
            m = memoryview(rows[row])
            return (m[:8], *(m[at[i]:at[i] + size[i]] for i in range(len(size))))

        return RowTargets(target)

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
            is_byte = words == self.BYTE
            if is_byte.any():  # eq_active: bytes to floats, as in states()
                out[:, is_byte] = rows[:, self._bytes_at[np.searchsorted(self._byte_columns, elements[is_byte])]]
            out[:, words == self.ABSENT] = 0.0
        return out

    def states(self, rows: np.ndarray) -> np.ndarray:
        words = rows.view(np.float64)
        out = np.empty((len(rows), self.size)) if not len(self._absent) else np.zeros((len(rows), self.size))
        for at, source, length in self._runs:  # a few whole-column copies, not a gather per element
            out[:, at:at + length] = words[:, source:source + length]
        if len(self._byte_columns):
            out[:, self._byte_columns] = rows[:, self._bytes_at]
        return out

    def word_runs(self, words: np.ndarray, *, fill: np.ndarray | None = None,
                  max_gap: int = 0) -> list[tuple[int, int, int]]:
        """Where the row words ``words`` (a mask over a row's words) come from: (source address,
        bytes, byte offset in a row) per run of them, one run never crossing a span, clipped to
        the span's own bytes. Gaps of at most ``max_gap`` words of ``fill`` (padding nothing
        else needs) are copied along: one copy where MuJoCo's alignment splits a few."""
        words = np.asarray(words, bool)
        fill = np.zeros(len(words), bool) if fill is None else np.asarray(fill, bool)
        runs: list[tuple[int, int, int]] = []
        for address, nbytes, at in self.sources:
            first, end = at // 8, (at + nbytes + 7) // 8
            wanted = np.flatnonzero(words[first:end]) + first
            if not len(wanted):
                continue
            start = previous = int(wanted[0])
            for word in [*wanted[1:].tolist(), None]:
                if word is not None and (word == previous + 1 or (
                        word - previous - 1 <= max_gap and fill[previous + 1:word].all())):
                    previous = word
                    continue
                lo, hi = start * 8, min((previous + 1) * 8, at + nbytes)
                runs.append((address + lo - at, hi - lo, lo))
                if word is not None:
                    start = previous = word
        return runs

"""The optional C copy (``_substep_copy.c``, built as the top-level module
``_simuguard_substep_copy``) and :class:`NativeFill`, a listener's rows and contact stage filled
by it.

Built with the package where a C compiler and Python's headers are present; elsewhere, or with
``SIMUGUARD_NATIVE=0`` in the environment, listeners copy in Python: the same bytes, slower
(inside robosuite's step every Python-level operation costs a fraction of a microsecond).

Between two calls into Python the C object copies each substep's state into the listener's next
row and stages its contacts, the same bytes the listener's Python hook would write. The listener
keeps its own counts; before it reads or changes its rows or its stage it takes the copy's fill
back (:meth:`NativeFill.settle`), and once done it points the copy at them again
(:meth:`NativeFill.bind`).
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any, Callable

import numpy as np

from simuguard_gym.capture.rows import SpanRows
from simuguard_gym.physics.adapter import DeclaresCopySources
from simuguard_gym.physics.hooks import report_failure
from simuguard_gym.physics.state import StateRows

logger = logging.getLogger(__name__)

MAX_SPANS = 8
BINDING_VERSION = 1


class CopyBinding(ctypes.Structure):
    """Where the C copy reads and writes: one named structure, mirrored field by field by
    ``struct copy_binding`` in ``_substep_copy.c`` (every field 8 bytes wide: no padding to
    differ). At import its layout is compared with the extension's own (``binding_layout()``);
    where they differ the extension is not used. Addresses are 0 where unused."""

    _fields_ = [
        ("version", ctypes.c_uint64), ("nspans", ctypes.c_uint64),
        ("span_src", ctypes.c_uint64 * MAX_SPANS), ("span_bytes", ctypes.c_int64 * MAX_SPANS),
        ("span_offset", ctypes.c_int64 * MAX_SPANS),
        ("rows", ctypes.c_uint64), ("row_bytes", ctypes.c_int64), ("capacity", ctypes.c_int64), ("row", ctypes.c_int64),
        ("has_records", ctypes.c_uint64), ("count_src", ctypes.c_uint64), ("records_src", ctypes.c_uint64),
        ("stride", ctypes.c_int64), ("extra_count_src", ctypes.c_uint64), ("extra_ptr_src", ctypes.c_uint64),
        ("records", ctypes.c_uint64), ("records_cap", ctypes.c_int64), ("records_used", ctypes.c_int64),
        ("extra", ctypes.c_uint64), ("extra_cap", ctypes.c_int64), ("extra_used", ctypes.c_int64),
        ("counts", ctypes.c_uint64), ("extra_counts", ctypes.c_uint64), ("max_staged", ctypes.c_int64),
        ("before_rows", ctypes.c_uint64), ("phases", ctypes.c_uint64), ("whole", ctypes.c_uint64),
        ("split", ctypes.c_uint64),
    ]


def layout_of(structure: type[ctypes.Structure]) -> tuple[int, tuple[tuple[str, int, int], ...]]:
    """(size, ((field, offset, size), ...)) of a ctypes structure: what binding_layout() reports."""
    return ctypes.sizeof(structure), tuple((name, getattr(structure, name).offset, getattr(structure, name).size)
                                           for name, _ in structure._fields_)


def _load() -> Any:
    try:  # a top-level module (see setup.py), compiled from capture/_substep_copy.c
        import _simuguard_substep_copy as extension
    except ImportError:  # not compiled: Python copies
        return None
    version, size, fields = extension.binding_layout()
    if version != BINDING_VERSION or (size, fields) != layout_of(CopyBinding):
        logger.warning("simuguard: the compiled substep copy lays out its binding otherwise than "
                       "capture/native.py (rebuild it: pip install .); copying in Python")
        return None
    return extension.SubstepCopy


SubstepCopy = _load()


def new_substep_copy() -> Any:
    """A fresh, unbound ``SubstepCopy``, or None where the extension is missing or switched off."""
    if SubstepCopy is None or os.environ.get("SIMUGUARD_NATIVE", "1") == "0":
        return None
    return SubstepCopy()


class NativeFill:
    """The native copy of one listener, or nothing where the extension is missing or off.

    ``on_full(copied)`` is called from inside a substep hook: ``copied`` True when the substep
    was copied and filled the batch (or the stage holds too many bytes), False when the listener
    must copy this substep itself (its stage must grow, or nothing is bound). ``on_before(phase)``
    likewise for ``copy.before(phase)`` while no before-rows are bound. Neither may raise.
    ``enabled=False``: no native copy (``copy`` is None).

    The monitor's tap, whose hooks then call the C object directly:

    >>> import mujoco
    >>> from simuguard_gym.engines.mujoco import MujocoAdapter
    >>> from simuguard_gym.capture.tap import SubstepTap
    >>> model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom type="plane" size="1 1 .1"/>'
    ...     '<body pos="0 0 .09"><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
    >>> data = mujoco.MjData(model); mujoco.mj_forward(model, data)  # a contact to locate
    >>> adapter = MujocoAdapter(model, data)
    >>> tap = SubstepTap(adapter, lambda pose, vel, contacts: None)
    >>> adapter.hooks.add(tap); tap.start_episode()
    >>> adapter.step(10)
    >>> tap.waiting, tap._fill.bound is (tap._fill.copy is not None)  # bound where the extension is built
    (10, True)
    """

    def __init__(self, on_full: Callable[[bool], None], on_before: Callable[[str], None] | None = None, *,
                 sources: Any = None) -> None:
        # The adapter whose memory the copies read (checked once here, not at every binding);
        # None, or one that does not declare its memory: no C copy.
        self._sources: DeclaresCopySources | None = sources if isinstance(sources, DeclaresCopySources) else None
        self.copy: Any = new_substep_copy() if self._sources is not None else None
        self.bound = False
        self._on_full, self._on_before = on_full, on_before
        if self.copy is not None:
            self.copy.forward(on_full, on_before)
            self.copy.active = False

    def row(self, python_row: int) -> int:
        """The listener's next row: the copy's while bound, else the listener's own."""
        return self.copy.row if self.bound else python_row

    def settle(self, stage: Any, python_row: int) -> int:
        """Take the copy's fill into ``stage`` and return the row count. The rows and the stage
        are the listener's again: substeps come to ``on_full(False)`` until the next :meth:`bind`."""
        if not self.bound:
            return python_row
        copy = self.copy
        row = copy.row
        stage.settle(row, copy.records_used, copy.extra_used)
        self._forward()
        return row

    def bind(self, state_rows: StateRows, rows: np.ndarray, row: int, stage: Any,
             max_staged: int, before: tuple[np.ndarray, bytearray, int, int] | None = None) -> None:
        """Copy the next substeps into ``rows[row:]`` and onto ``stage``, and with ``before``
        (before-rows like ``rows``, a phase byte per row, the bytes of a whole and of a split
        substep) the state before each substep too; where the adapter cannot bind them, every
        substep is handed to ``on_full(False)`` (and ``on_before``)."""
        copy, adapter = self.copy, self._sources
        if copy is None or adapter is None:
            return
        self._forward()  # first: nothing is lost if binding fails
        if not isinstance(state_rows, SpanRows) or not rows.flags.c_contiguous or rows.shape[1:] != (state_rows.row_bytes,):
            return
        sources = adapter.copy_sources()
        if sources is None:  # not located yet (no contact seen): Python copies meanwhile
            return
        b = CopyBinding(version=BINDING_VERSION, nspans=len(state_rows.sources), rows=rows.ctypes.data,
                        row_bytes=state_rows.row_bytes, capacity=len(rows), row=row, has_records=1,
                        count_src=sources.count, records_src=sources.records, stride=sources.stride,
                        extra_count_src=sources.extra_count, extra_ptr_src=sources.extra_pointer,
                        max_staged=max_staged)
        for i, (address, nbytes, offset) in enumerate(state_rows.sources):
            b.span_src[i], b.span_bytes[i], b.span_offset[i] = address, nbytes, offset
        (b.records, b.records_cap, b.records_used, b.extra, b.extra_cap, b.extra_used, b.counts,
         b.extra_counts) = stage.native_target(len(rows), row)
        owners: tuple[Any, ...] = ()
        if before is not None:
            before_rows, phases, whole, split = before
            if before_rows.shape != rows.shape or not before_rows.flags.c_contiguous or len(phases) < len(rows):
                return
            phase_bytes = np.frombuffer(phases, np.uint8)
            owners = (before_rows, phases, phase_bytes)
            b.before_rows, b.phases, b.whole, b.split = before_rows.ctypes.data, phase_bytes.ctypes.data, whole, split
        copy.bind(bytes(b), self._on_full, (rows, stage, sources.owners, owners))  # C keeps the owners alive
        self.bound = True

    def _forward(self) -> None:
        """Hand every substep to ``on_full(False)`` (and ``on_before``) until the next :meth:`bind`."""
        self.bound = False
        self.copy.forward(self._on_full, self._on_before)

    def stop(self) -> None:
        """Copy nothing and call nothing until the next :meth:`bind`."""
        self.bound = False
        if self.copy is not None:
            self.copy.active = False


class NativeFillMixin:
    """The call into Python of a listener (the tap, the recorder) whose ``_fill`` copies its
    substeps: the listener defines ``_settle()``, ``_rebind()``, ``_batch_full()`` (drain or
    flush) and its Python ``after_substep``, and keeps its next row in ``_row`` and whether it
    captures in ``_active`` (set True by its ``start_episode``)."""

    _fill: NativeFill
    _row: int
    _active: bool

    @property
    def active(self) -> bool:
        """Whether substeps are captured (from ``start_episode`` until set False: the episode's
        end, a failure)."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        if value and not self._active:
            raise ValueError(f"start_episode() activates the {type(self).__name__}")
        if not value:
            self._settle()
            self._active = False
            self._fill.stop()

    def _native_full(self, copied: bool) -> None:
        """A batch to end (the substep was ``copied``), or a substep to copy in Python (the
        stage must grow, or nothing is bound); never raises."""
        try:
            was_bound = self._fill.bound
            self._settle()  # the rows and the stage are Python's until rebound
            if copied:
                self._batch_full()
            else:
                type(self).after_substep(self)  # the class's Python hook, not the C object
                # Rebind at once after a growth; else (nothing to bind, e.g. no contact located
                # yet) try again every 64 substeps: a failing bind costs a few microseconds.
                if not self._fill.bound and (was_bound or self._row & 63 == 0):
                    self._rebind()
        except Exception as error:  # noqa: BLE001 - never raise into the evaluation
            report_failure(self, "after_substep", error)

    def _settle(self) -> None:
        raise NotImplementedError

    def _rebind(self) -> None:
        raise NotImplementedError

    def _batch_full(self) -> None:
        raise NotImplementedError

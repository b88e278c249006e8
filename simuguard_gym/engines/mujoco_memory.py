"""Where MuJoCo keeps what is copied per substep: mjData's time, contact counters and constraint-force
pointer (read without a call), and the state components as spans of its buffer (:func:`state_rows_of`).

Each read through MuJoCo's bindings (``data.ncon``, ``data.efc_force``, ``mj_getState``) is a
pybind11 call that checks its arguments and builds objects; inside a Python-heavy env step
(robosuite runs its controller between every two substeps) each costs a few microseconds, more
than the copy it serves. The recorder reads these per substep, so the adapter reads them straight
from the ``mjData`` struct through memoryviews made once.

The byte offsets come from MuJoCo's own description of its headers (``mujoco.introspect``, shipped
with the bindings of the same build) laid out with the C rules, and are checked against a live
``MjData`` before use: :func:`live_fields` returns None (the caller keeps the bindings) whenever
the description is missing, names a type it does not know, or any checked value disagrees.

>>> import mujoco
>>> from simuguard_gym.engines.mujoco_memory import live_fields
>>> model = mujoco.MjModel.from_xml_string(
...     '<mujoco><worldbody><geom type="plane" size="1 1 .1"/>'
...     '<body pos="0 0 .09"><freejoint/><geom size=".1"/></body></worldbody></mujoco>')
>>> data = mujoco.MjData(model); mujoco.mj_step(model, data)
>>> fields = live_fields(data)
>>> (fields.ncon, fields.nefc) == (data.ncon, data.nefc)
True
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import mujoco
import numpy as np

from simuguard_gym.capture.rows import SpanRows
from simuguard_gym.physics.state import StateComponent

# Size and alignment of the scalar types mjData and its member structs are made of (x86-64 and
# arm64 Linux, macOS and Windows agree on all of them).
_SCALARS = {"int": 4, "unsigned int": 4, "float": 4, "mjtNum": 8, "double": 8, "mjtSize": 8, "size_t": 8,
            "uintptr_t": 8, "uint64_t": 8, "int64_t": 8, "mjtBool": 1, "mjtByte": 1, "char": 1,
            "unsigned char": 1}
_POINTER = 8


class _Unknown(Exception):
    """A type the layout rules here do not cover."""


@functools.lru_cache(maxsize=None)
def _layout(struct: str) -> tuple[dict[str, int], int, int]:
    """Field offsets, size and alignment of a struct described by ``mujoco.introspect``."""
    from mujoco.introspect import ast_nodes, structs

    decl = structs.STRUCTS.get(struct)
    if decl is None:
        raise _Unknown(struct)
    offsets: dict[str, int] = {}
    offset, align = 0, 1
    for field in decl.fields:
        if not isinstance(field, ast_nodes.StructFieldDecl):
            raise _Unknown(f"{struct}: {type(field).__name__}")  # unions, anonymous members
        size, field_align = _size_align(field.type, ast_nodes)
        offset = -(-offset // field_align) * field_align
        offsets[field.name] = offset
        offset += size
        align = max(align, field_align)
    return offsets, -(-offset // align) * align, align


def _size_align(kind: Any, ast_nodes: Any) -> tuple[int, int]:
    if isinstance(kind, ast_nodes.PointerType):
        return _POINTER, _POINTER
    if isinstance(kind, ast_nodes.ArrayType):
        size, align = _size_align(kind.inner_type, ast_nodes)
        for extent in kind.extents:
            if not isinstance(extent, int):
                raise _Unknown(f"array extent {extent!r}")
            size *= extent
        return size, align
    if isinstance(kind, ast_nodes.ValueType):
        if kind.name in _SCALARS:
            return _SCALARS[kind.name], _SCALARS[kind.name]
        _, size, align = _layout(kind.name)
        return size, align
    raise _Unknown(type(kind).__name__)


def _offsets() -> dict[str, int] | None:
    try:
        offsets, _, _ = _layout("mjData")
    except (_Unknown, ImportError, AttributeError):
        return None
    needed = ("time", "ncon", "nefc", "arena", "qpos", "qvel", "efc_force")
    return offsets if all(name in offsets for name in needed) else None


class LiveFields:
    """Memoryviews on one ``MjData``'s ``time``, ``ncon``, ``nefc`` and ``efc_force`` pointer (valid
    while the MjData lives: hold the MjData as long as this)."""

    __slots__ = ("_ints", "_nefc_at", "_efc_pointer", "_arena_pointer", "time_bytes")

    def __init__(self, address: int, offsets: dict[str, int]) -> None:
        ncon, nefc = offsets["ncon"], offsets["nefc"]
        self._ints = _view(address + ncon, nefc + 4 - ncon).cast("i")
        self._nefc_at = (nefc - ncon) // 4
        self._efc_pointer = _view(address + offsets["efc_force"], _POINTER).cast("Q")
        self._arena_pointer = _view(address + offsets["arena"], _POINTER).cast("Q")
        #: The 8 bytes of ``data.time``.
        self.time_bytes = _view(address + offsets["time"], 8)

    @property
    def ncon(self) -> int:
        return self._ints[0]

    @property
    def nefc(self) -> int:
        return self._ints[self._nefc_at]

    @property
    def arena_address(self) -> int:
        """Where the arena starts (MuJoCo puts the contacts there, the constraint arrays after)."""
        return self._arena_pointer[0]

    @property
    def efc_force_address(self) -> int:
        return self._efc_pointer[0]

    def views(self) -> tuple[memoryview, int, memoryview]:
        """(counters, index of nefc in them, efc_force pointer): for hot loops that index them directly."""
        return self._ints, self._nefc_at, self._efc_pointer


def _view(address: int, nbytes: int) -> memoryview:
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")


def _address(array: Any) -> int:
    return int(array.__array_interface__["data"][0])


def live_fields(data: mujoco.MjData) -> LiveFields | None:
    """Views on ``data``'s contact counters and force pointer, or None when they cannot be trusted."""
    offsets = _offsets()
    address = getattr(data, "_address", None)
    if offsets is None or not isinstance(address, int) or offsets["ncon"] % 4 or offsets["nefc"] % 4 \
            or offsets["nefc"] < offsets["ncon"] or offsets["efc_force"] % _POINTER:
        return None
    # Two pointers that the bindings also report confirm the layout before any value is trusted.
    for name in ("qpos", "qvel"):
        if _view(address + offsets[name], _POINTER).cast("Q")[0] != _address(getattr(data, name)):
            return None
    fields = LiveFields(address, offsets)
    if fields.ncon != data.ncon or fields.nefc != data.nefc or fields.time_bytes.cast("d")[0] != data.time:
        return None
    if data.nefc and fields.efc_force_address != _address(data.efc_force):
        return None
    return fields


_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)


#: MjData attribute of each state component whose name differs from it.
_ATTRIBUTES = {"warmstart": "qacc_warmstart", "plugin": "plugin_state"}


def state_rows_of(model: mujoco.MjModel, data: mujoco.MjData, layout: list[StateComponent],
                  components: frozenset[str] | None = None) -> SpanRows | None:
    """Rows of MuJoCo's own memory for the integration state (``components``: only those, the
    rest read as 0): the 8 bytes of ``data.time`` and the span of ``data``'s buffer from qpos up
    to mocap_quat (one span per group of side-by-side components where some only). None where a
    component is not where the bindings say, or one row does not gather to exactly
    ``mj_getState``'s vector."""
    fields = live_fields(data)
    if fields is None:
        return None
    located = []  # (component, address, dtype) of the components in the buffer
    for c in layout:
        if c.size == 0 or c.name == "time" or (components is not None and c.name not in components):
            continue
        array = getattr(data, _ATTRIBUTES.get(c.name, c.name), None)
        if not isinstance(array, np.ndarray) or array.size != c.size or not array.flags.c_contiguous \
                or array.dtype not in (np.float64, np.uint8, np.bool_):
            return None
        located.append((c, array.__array_interface__["data"][0], array.dtype))
    located.sort(key=lambda x: x[1])
    size = sum(c.size for c in layout)
    if components is None:  # every component: one span, MuJoCo's padding and all
        groups = [located] if located else []
        start = min((at for _, at, _ in located), default=0)
        end = max((at + c.size * dtype.itemsize for c, at, dtype in located), default=0)
        if end - start > 4 * 8 * size + 4096:  # scattered: the span would copy mostly other arrays
            return None
    else:  # some: a span per group of arrays apart by no more than alignment padding
        groups = []
        for item in located:
            c, at, dtype = item
            if groups:
                last_c, last_at, last_dtype = groups[-1][-1]
                if at - (last_at + last_c.size * last_dtype.itemsize) <= 256:
                    groups[-1].append(item)
                    continue
            groups.append([item])
        if len(groups) > 2:  # not the decoding components' layout: plain rows serve
            return None
    # The float64 word of each state element in a row (time: word 0).
    floats = np.full(size, SpanRows.ABSENT if components is not None else SpanRows.BYTE, np.int64)
    for c in layout:
        if c.name == "time":
            floats[c.offset:c.offset + c.size] = 0
    byte_columns, bytes_at, spans = [], [], []
    row_at = 8
    for group in groups:
        start = min(at for _, at, _ in group)
        end = max(at + c.size * dtype.itemsize for c, at, dtype in group)
        for c, at, dtype in group:
            offset = row_at + at - start
            if dtype == np.float64:
                if offset % 8:
                    return None
                floats[c.offset:c.offset + c.size] = offset // 8 + np.arange(c.size)
            else:
                floats[c.offset:c.offset + c.size] = SpanRows.BYTE
                byte_columns.extend(range(c.offset, c.offset + c.size))
                bytes_at.extend(range(offset, offset + c.size))
        spans.append(memoryview((ctypes.c_char * (end - start)).from_address(start)).cast("B"))
        row_at += -(-(end - start) // 8) * 8
    if not spans:
        spans = [memoryview(b"")]
    rows = SpanRows(fields.time_bytes, spans, floats, np.array(byte_columns, np.int64), np.array(bytes_at, np.int64))
    # One row must gather to exactly what mj_getState reads (0 where not copied), or the rows are not used.
    buffer = rows.allocate(1)
    rows.copy(rows.targets(buffer)[0])
    expected = np.empty(rows.size)
    mujoco.mj_getState(model, data, expected, _INTEGRATION)
    expected[rows._absent] = 0.0
    if rows.states(buffer).tobytes() != expected.tobytes():
        return None
    return rows


_STEP_TIMER = int(mujoco.mjtTimer.mjTIMER_STEP)


def time_address(data: mujoco.MjData) -> int:
    """The address of ``data.time`` (0 where its place cannot be confirmed)."""
    offsets = _offsets()
    return data._address + offsets["time"] if offsets is not None and live_fields(data) is not None else 0


def ncon_address(data: mujoco.MjData) -> int:
    """The address of ``data.ncon`` (0 where its place cannot be confirmed)."""
    offsets = _offsets()
    return data._address + offsets["ncon"] if offsets is not None and live_fields(data) is not None else 0


def step_counter_address(data: mujoco.MjData) -> int | None:
    """The address of MuJoCo's own substep counter in ``data`` (``timer[mjTIMER_STEP].number``,
    an int), or None where its place cannot be confirmed against the bindings."""
    try:
        offsets, _, _ = _layout("mjData")
        timer, size, _ = _layout("mjTimerStat")
    except (_Unknown, ImportError, AttributeError):
        return None
    address = getattr(data, "_address", None)
    if "timer" not in offsets or "number" not in timer or not isinstance(address, int) or live_fields(data) is None:
        return None
    at = address + offsets["timer"] + size * _STEP_TIMER
    stat = data.timer[_STEP_TIMER]
    if ctypes.c_int.from_address(at + timer["number"]).value != stat.number \
            or ctypes.c_double.from_address(at + timer["duration"]).value != stat.duration:
        return None
    return at + timer["number"]

"""The binding of MuJoCo's screen callback: ``screen_binding`` of ``_mujoco_screen.c`` as a ctypes
structure, and the compiled extension, loaded where its layout is this one."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from simuguard_gym.capture.native import layout_of

logger = logging.getLogger(__name__)

MAX_SEGMENTS = 24
BINDING_VERSION = 2


class ScreenBinding(ctypes.Structure):
    """What the callback reads and writes for one scene: mirrors ``screen_binding`` in
    ``_mujoco_screen.c`` field by field (every field 8 bytes); compared with the extension's
    ``binding_layout()`` before it is used.

    >>> import ctypes
    >>> from simuguard_gym.engines.mujoco_screen_binding import ScreenBinding
    >>> ctypes.sizeof(ScreenBinding) == 8 * sum(getattr(t, "_length_", 1) for _, t in ScreenBinding._fields_)
    True
    """

    _fields_ = [
        ("version", ctypes.c_uint64), ("data", ctypes.c_uint64), ("step_count", ctypes.c_uint64),
        ("base", ctypes.c_int64), ("time_src", ctypes.c_uint64), ("current", ctypes.c_int64),
        ("current_time", ctypes.c_double), ("nsegments", ctypes.c_uint64),
        ("seg_src", ctypes.c_uint64 * MAX_SEGMENTS), ("seg_bytes", ctypes.c_int64 * MAX_SEGMENTS),
        ("seg_offset", ctypes.c_int64 * MAX_SEGMENTS), ("nstate", ctypes.c_int64),
        ("rows", ctypes.c_uint64), ("row_bytes", ctypes.c_int64), ("capacity", ctypes.c_int64),
        ("inputs", ctypes.c_uint64), ("input_bytes", ctypes.c_int64), ("input_of", ctypes.c_uint64),
        ("ninputs", ctypes.c_int64), ("input_from", ctypes.c_int64),
        ("seen", ctypes.c_int64), ("moved", ctypes.c_int64), ("ntracked", ctypes.c_int64),
        ("tracked", ctypes.c_uint64), ("kind", ctypes.c_uint64), ("rootid", ctypes.c_uint64),
        ("cvel", ctypes.c_uint64), ("xipos", ctypes.c_uint64), ("subtree_com", ctypes.c_uint64),
        ("vel", ctypes.c_uint64), ("running", ctypes.c_uint64), ("speed0", ctypes.c_uint64),
        ("fastest", ctypes.c_uint64), ("last_touch", ctypes.c_uint64), ("touching", ctypes.c_uint64),
        ("ncon", ctypes.c_uint64),
        ("contacts", ctypes.c_uint64), ("stride", ctypes.c_int64), ("dist_offset", ctypes.c_int64),
        ("geom_offset", ctypes.c_int64), ("ngeom", ctypes.c_int64), ("nbody", ctypes.c_int64),
        ("geom_body", ctypes.c_uint64), ("body_col", ctypes.c_uint64), ("body_class", ctypes.c_uint64),
        ("min_speed", ctypes.c_double), ("dv_min", ctypes.c_double), ("ratio", ctypes.c_double),
        ("max_speed", ctypes.c_double), ("max_penetration", ctypes.c_double), ("w_contact", ctypes.c_int64),
        ("w_carrier", ctypes.c_int64), ("flagged", ctypes.c_int64), ("unreadable", ctypes.c_int64),
        ("pairs", ctypes.c_uint64), ("pair_depth", ctypes.c_uint64), ("npairs", ctypes.c_int64),
        ("pair_cap", ctypes.c_int64), ("pair_overflow", ctypes.c_int64), ("pending", ctypes.c_uint64),
        ("npending", ctypes.c_int64), ("pending_cap", ctypes.c_int64), ("npairs_told", ctypes.c_int64),
        ("refresh_at", ctypes.c_int64), ("polled_at", ctypes.c_int64), ("max_gap", ctypes.c_int64),
    ]


def load_extension() -> Any:
    """The compiled callback (``_simuguard_mujoco_screen``), or None where it is not built or lays
    out its binding otherwise than :class:`ScreenBinding`."""
    try:  # a top-level module (see setup.py), compiled from engines/_mujoco_screen.c
        import _simuguard_mujoco_screen as extension
    except ImportError:
        return None
    version, size, fields = extension.binding_layout()
    if version != BINDING_VERSION or (size, tuple(fields)) != layout_of(ScreenBinding):
        logger.warning("simuguard: the compiled MuJoCo screen lays out its binding otherwise than "
                       "engines/mujoco_screen_binding.py (rebuild it: pip install .); the monitor keeps its hooks")
        return None
    return extension

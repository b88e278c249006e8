"""The recording file format: framing, columns, limits and errors (see docs/recording-format.md).

A recording is a stream of msgpack objects, each a *record* ``[kind, payload, crc32]`` where
``payload`` is the msgpack encoding of a map and ``crc32`` its CRC-32. The first record is the
``header``, then ``chunk`` and ``error`` records in the order they were produced, and last the
``footer``, which also carries the SHA-256 of every byte before it. Arrays travel as
``{"dtype", "shape", "data"}`` with raw little-endian bytes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

FORMAT_NAME = "simuguard-recording"
SCHEMA_VERSION = 2
#: Oldest schema this reader accepts. Schema 1 (pre-release builds) lacked contact speeds and
#: the initial body states that detection needs.
MIN_SCHEMA_VERSION = 2
FILE_SUFFIX = ".msgpack"
PARTIAL_SUFFIX = ".partial"

#: No record may be larger than this; a file declaring more is refused before allocation.
MAX_RECORD_BYTES = 256 * 1024 * 1024
#: No encoded array may have more dimensions than this (numpy allows 64; the schema's have 3 at most).
MAX_DIMENSIONS = 32

RECORD_KINDS = ("header", "chunk", "error", "footer")

#: Per-substep columns (first axis = substeps of the chunk) and their dtypes.
SUBSTEP_COLUMNS = {
    "split": "<u1",  # 1: the substep ran as two calls (mj_step1/mj_step2) with writes between
    "start_mask": "<u2",  # state components written before the substep (bit i = layout[i])
    "mid_mask": "<u2",  # components replayed between the halves of a split substep (adapter-defined)
    "fingerprint": "<u4",  # CRC-32 of the full integration state after the substep
    "body_pose": "<f8",  # (substeps, tracked, 7): position, quaternion (w, x, y, z)
    "body_vel": "<f8",  # (substeps, tracked, 6): centre-of-mass linear, angular velocity (world)
    "contact_count": "<u4",  # body pairs in contact per substep
}
#: Variable-length columns: values are found through the per-substep columns above.
VARIABLE_COLUMNS = {
    "start_values": "<f8",  # concatenated values of the components named by start_mask
    "mid_values": "<f8",
    "contact_bodies": "<i4",  # (pairs, 2) body ids, lower first
    "contact_depth": "<f4",  # deepest penetration of the pair (m, > 0 overlapping)
    "contact_force": "<f4",  # (pairs, 3) net force of the first body on the second (N, world)
    "contact_abs_force": "<f4",  # sum of point force magnitudes (N)
    "contact_points": "<u2",  # contact points merged into the pair
    "contact_pieces": "<i4",  # (pairs, 2) geoms/shapes of the deepest point
    "contact_normal": "<f4",  # (pairs, 3) normal of the deepest point
    "contact_speed": "<f4",  # (pairs, 2) speed of each body's point at the deepest contact (m/s; NaN: no tracked body)
    "snapshot_substep": "<i8",  # substeps after which a full state snapshot was taken
    "snapshot_state": "<f8",  # (snapshots, state size)
}
ALL_COLUMNS = {**SUBSTEP_COLUMNS, **VARIABLE_COLUMNS}
#: The merged-contact columns, one per field of ``physics.contacts.ContactPairs`` (``contact_<field>``).
CONTACT_COLUMNS = tuple(name for name in VARIABLE_COLUMNS if name.startswith("contact_"))


class RecordingError(ValueError):
    """A file that cannot be read as a recording; the message says where and why."""


class NotARecordingError(RecordingError):
    pass


class CorruptRecordingError(RecordingError):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class UnsupportedSchemaError(RecordingError):
    pass


class TruncatedRecordingError(RecordingError):
    """The file ends before its footer. ``recovered`` holds every complete chunk."""

    def __init__(self, message: str, offset: int, substeps_recovered: int, recovered: Any) -> None:
        super().__init__(message)
        self.offset = offset
        self.substeps_recovered = substeps_recovered
        self.recovered = recovered


def encode_array(array: np.ndarray) -> dict[str, Any]:
    # ascontiguousarray would make a 0-d array (a scalar option) 1-d
    array = np.ascontiguousarray(array) if np.ndim(array) else np.array(array)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    return {"dtype": dtype.str, "shape": list(array.shape), "data": array.astype(dtype, copy=False).tobytes()}


ALLOWED_DTYPES = {"<f8", "<f4", "<u8", "<u4", "<u2", "|u1", "<i8", "<i4", "<i2", "|i1", "|b1"}


def decode_array(obj: Any, what: str, offset: int) -> np.ndarray:
    """Decode an encoded array, checking its declaration before touching memory."""
    if not isinstance(obj, dict) or not {"dtype", "shape", "data"} <= obj.keys():
        raise CorruptRecordingError(f"{what}: not an encoded array (record at byte {offset})", offset)
    dtype, shape, data = obj["dtype"], obj["shape"], obj["data"]
    # A str first: a list or map as dtype would make the set look-up raise TypeError.
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES or not isinstance(data, bytes):
        raise CorruptRecordingError(f"{what}: unsupported dtype {dtype!r} (record at byte {offset})", offset)
    # Dimensions bounded in number (numpy's reshape refuses more than 64) and each a plain int.
    if (not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS
            or not all(type(s) is int and s >= 0 for s in shape)):
        raise CorruptRecordingError(f"{what}: invalid shape {shape!r} (record at byte {offset})", offset)
    itemsize = np.dtype(dtype).itemsize
    # A zero-size array passes the byte count whatever its other dimensions, yet numpy's reshape
    # refuses those that multiply past its address space ([0, 2**64 - 1]): they too must fit in
    # a record. Python integers, so the product is exact (msgpack integers are below 2**64).
    extent = itemsize * math.prod(s for s in shape if s)
    if extent > MAX_RECORD_BYTES:
        raise CorruptRecordingError(f"{what}: declares shape {shape}, more than a record holds "
                                    f"(record at byte {offset})", offset)
    declared = extent if all(shape) else 0
    if declared != len(data):
        raise CorruptRecordingError(
            f"{what}: declares shape {shape} ({declared} bytes) but holds {len(data)} bytes "
            f"(record at byte {offset})", offset)
    try:
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    except (ValueError, OverflowError) as error:  # not expected after the checks above; never a bare numpy error
        raise CorruptRecordingError(f"{what}: invalid shape {shape!r}: {error} (record at byte {offset})",
                                    offset) from None

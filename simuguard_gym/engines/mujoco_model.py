"""The physics of an MjModel as arrays: its fingerprint, what an env changed in it, writing it back.

Benchmarks change the model between episodes (Meta-World moves the goal site and, on some tasks,
bodies at every reset; LIBERO places fixtures with an unseeded generator), so a recording can
only replay if it says how its episode's model differed from the one the env was built with.
:class:`ModelArrays` keeps the model's physics-relevant arrays as they were when the adapter
first saw it (drawing-only arrays left out), and gives, per episode, the values of every array
that has changed since (:meth:`ModelArrays.changes`) and a CRC-32 of each array
(:meth:`ModelArrays.digests`), so that a replay writes back exactly what differs and names
whatever it cannot restore.

>>> import mujoco
>>> from simuguard_gym.engines.mujoco_model import ModelArrays
>>> model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><site name="goal"/></worldbody></mujoco>')
>>> arrays = ModelArrays(model)
>>> model.site_pos[0] = [0.1, 0.2, 0.3]                  # an env's reset moves the goal
>>> arrays.changes(model)
{'site_pos': {'values': array([[0.1, 0.2, 0.3]])}}
"""

from __future__ import annotations

import copy
import ctypes
import hashlib
import sys
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

import mujoco
import numpy as np

from simuguard_gym.recording.format import RecordingError

# Model arrays that do not influence physics (drawing only); left out of the fingerprint because
# e.g. robosuite regenerates textures per reset.
VISUAL_PREFIXES = ("tex_", "mat_", "light_", "cam_", "vis", "skin_", "name_", "flex_texcoord", "mesh_texcoord",
                   "mesh_normal", "mesh_facenormal", "mesh_facetexcoord", "hfield_", "paths")


def physics_arrays(model: mujoco.MjModel) -> Iterator[tuple[str, np.ndarray]]:
    """Every physics-relevant array of ``model`` by name (``opt.<field>`` for the options), as
    views where MuJoCo gives arrays and as 0-d copies for scalar options, in a fixed order."""
    for name in sorted(dir(model)):
        if name.startswith("_") or name.startswith(VISUAL_PREFIXES):
            continue
        value = getattr(model, name, None)
        if isinstance(value, np.ndarray):
            yield name, value
    for name in sorted(dir(model.opt)):
        value = getattr(model.opt, name)
        if not name.startswith("_") and isinstance(value, (int, float, np.ndarray)):
            yield f"opt.{name}", np.asarray(value)


def digests_of(model: mujoco.MjModel) -> dict[str, int]:
    """CRC-32 of each physics-relevant array's bytes, by name."""
    return {name: zlib.crc32(np.ascontiguousarray(value)) for name, value in physics_arrays(model)}


def digest_fingerprint(digests: dict[str, int]) -> str:
    """BLAKE2b of the arrays' names and checksums: two models with the same one run the same physics."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(digests):
        h.update(f"{name}:{digests[name]:08x};".encode())
    return h.hexdigest()


def fingerprint(model: mujoco.MjModel) -> str:
    """The model's fingerprint: :func:`digest_fingerprint` of its arrays' checksums."""
    return digest_fingerprint(digests_of(model))


#: Arrays up to this size go into a recording whole when they changed; larger ones (robosuite
#: randomises one cube's size, which changes 3 of Lift's 2 million mesh-BVH bounds) as the
#: elements that differ from the model as built.
WHOLE_BYTES = 64 * 1024


class ModelArrays:
    """A model's physics-relevant arrays as first seen, and what has changed in them since.

    Every question (changes, checksums, fingerprint) starts from which arrays differ from the
    model as first seen, byte for byte: the arrays are listed once per model (MuJoCo gives them
    as views on its memory) and the checksums of the model as built are computed once, so an
    episode costs a comparison per array and a checksum of each array its env changed, not a
    hash of the whole model (Meta-World moves its goal at every reset of a 13 MB model).
    """

    def __init__(self, model: mujoco.MjModel) -> None:
        self.reference = {name: np.array(value) for name, value in physics_arrays(model)}
        self._reference_bytes = {name: value.tobytes() for name, value in self.reference.items()}
        self._digests = {name: zlib.crc32(data) for name, data in self._reference_bytes.items()}
        self._base_fingerprint = digest_fingerprint(self._digests)
        #: Arrays seen changed in some episode: they go into every later recording too (they are
        #: what the env changes; a replay must not take them from its own build).
        self.changing: set[str] = set()
        #: The model the arrays were listed for: its spans, the arrays outside any span, its options.
        self._listed: tuple[mujoco.MjModel, list[_Span], list[tuple[int, str, np.ndarray]], list[str]] | None = None

    def differing(self, model: mujoco.MjModel) -> list[str]:
        """The arrays of ``model`` whose bytes differ from the reference's (or that it lacks)."""
        if self._listed is None or self._listed[0] is not model:
            found = list(physics_arrays(model))
            arrays = [(name, value) for name, value in found if not name.startswith("opt.")]
            # Scalar options come as copies: read anew each time (a few), in physics_arrays' order.
            self._listed = (model, *_spans(arrays, self._reference_bytes),
                            [name for name, _ in found if name.startswith("opt.")])
        _, spans, loose, options = self._listed
        reference = self._reference_bytes
        out = [(order, name) for order, name, value in loose if value.tobytes() != reference.get(name)]
        for span in spans:
            if not _same(span.address, span.reference):  # else every array in it is the reference's
                out += [(order, name) for order, name, value in span.members
                        if not _same(value.ctypes.data, reference[name])]
        names = [name for _, name in sorted(out)]
        opt = model.opt  # a new wrapper at every access
        for name in options:
            if np.asarray(getattr(opt, name[4:])).tobytes() != reference.get(name):
                names.append(name)
        return names

    def record(self, model: mujoco.MjModel) -> tuple[str, dict[str, dict[str, np.ndarray]], dict[str, int]]:
        """``(fingerprint, changes, digests)`` of ``model`` (see each) from one comparison pass."""
        differing = self.differing(model)
        if not differing:  # the model as built (most envs, every episode): its fingerprint is known
            return self._base_fingerprint, self._changes(model, differing), dict(self._digests)
        digests = self._digests_after(model, differing)
        return digest_fingerprint(digests), self._changes(model, differing), digests

    @property
    def base_fingerprint(self) -> str:
        """The fingerprint of the model as first seen (the reference)."""
        return self._base_fingerprint

    def same_structure(self, model: mujoco.MjModel) -> bool:
        """Whether ``model``'s physics arrays have the reference's names, shapes and dtypes: its
        values can be made the reference's (:meth:`base_model`). Reads no array's contents."""
        reference = self.reference
        count = 0
        for name, value in physics_arrays(model):
            found = reference.get(name)
            if found is None or found.shape != value.shape or found.dtype != value.dtype:
                return False
            count += 1
        return count == len(reference)

    def base_model(self, model: mujoco.MjModel) -> mujoco.MjModel:
        """The model as first seen, from ``model`` of the same structure (:meth:`same_structure`):
        ``model`` itself where the env changed nothing in it since, else a copy with the
        reference's values written back.

        >>> import mujoco
        >>> model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><site name="goal"/></worldbody></mujoco>')
        >>> arrays = ModelArrays(model)
        >>> model.site_pos[0] = [0.1, 0.2, 0.3]
        >>> arrays.base_model(model).site_pos, model.site_pos
        (array([[0., 0., 0.]]), array([[0.1, 0.2, 0.3]]))
        """
        differing = self.differing(model)
        if not differing:
            return model
        base = copy.copy(model)  # MuJoCo's own deep copy (mj_copyModel)
        for name in differing:
            _write(base, name, self.reference[name])
        return base

    def fingerprint(self, model: mujoco.MjModel) -> str:
        """:func:`fingerprint` of ``model``."""
        return digest_fingerprint(self.digests(model))

    def changes(self, model: mujoco.MjModel) -> dict[str, dict[str, np.ndarray]]:
        """The arrays that differ from the reference, or ever did: ``{"values": array}``, or for
        large arrays of the reference's shape ``{"index": flat indices, "values": those elements}``."""
        return self._changes(model, self.differing(model))

    def _changes(self, model: mujoco.MjModel, differing: list[str]) -> dict[str, dict[str, np.ndarray]]:
        names = set(differing) | self.changing
        if not names:
            return {}
        out = {}
        # In physics_arrays' order, as before; each array read by its name (listing them all is slow).
        order = {name: i for i, name in enumerate(self.reference)}
        for name in sorted(names, key=lambda n: (order.get(n, len(order)), n)):
            try:
                value = _array(model, name)
            except AttributeError:
                continue  # an array this model lacks
            reference = self.reference.get(name)
            same_shape = reference is not None and reference.shape == value.shape and reference.dtype == value.dtype
            self.changing.add(name)
            if same_shape and value.nbytes > WHOLE_BYTES:
                flat, ref = np.ascontiguousarray(value).reshape(-1), reference.reshape(-1)
                index = np.flatnonzero(_bits(flat) != _bits(ref))
                out[name] = {"index": index, "values": flat[index].copy()}
            else:
                out[name] = {"values": np.array(value)}
        return out

    def digests(self, model: mujoco.MjModel) -> dict[str, int]:
        """CRC-32 of each physics-relevant array's bytes, by name (:func:`digests_of`)."""
        return self._digests_after(model, self.differing(model))

    def _digests_after(self, model: mujoco.MjModel, differing: list[str]) -> dict[str, int]:
        """The reference's checksums, those of the ``differing`` arrays taken anew (every other
        array is byte for byte the reference's)."""
        out = dict(self._digests)
        for name in differing:
            out[name] = zlib.crc32(np.ascontiguousarray(_array(model, name)))
        return out

    def restore(self, model: mujoco.MjModel, changes: dict[str, dict[str, np.ndarray]], digests: dict[str, int]
                ) -> tuple[list[str], list[str]]:
        """Make ``model``'s arrays those of a recorded episode: where an array's CRC differs from
        ``digests``, write the recorded value from ``changes`` (on this model's reference, for
        changed elements) or else this model's reference value, where that has the recorded CRC.
        Returns (arrays written, arrays that still differ).

        A recorded value is data from a file: only floating-point parameter arrays take one, of
        their own dtype and shape, finite (:func:`checked_value`); anything else is a
        :class:`~simuguard_gym.recording.format.RecordingError`, raised before anything is written."""
        plan: list[tuple[str, np.ndarray]] = []
        differing = []
        for name, value in physics_arrays(model):
            want = digests.get(name)
            if want is None or zlib.crc32(np.ascontiguousarray(value).tobytes()) == want:
                continue
            change = changes.get(name)
            target = self.reference.get(name) if change is None else self._recorded(name, value, change)
            if target is None or target.shape != value.shape or zlib.crc32(target.tobytes()) != want:
                differing.append(name)
                continue
            plan.append((name, target))
        for name, target in plan:
            _write(model, name, target)
        return [name for name, _ in plan], differing

    def _recorded(self, name: str, value: np.ndarray, change: dict[str, np.ndarray]) -> np.ndarray | None:
        """The value a recording gives array ``name`` (whole, or its changed elements on this
        model's reference), checked; None where it cannot be placed on the reference."""
        if "index" not in change:
            return checked_value(name, value, change.get("values"))
        reference = self.reference.get(name)
        if reference is None or reference.shape != value.shape:
            return None
        index, values = change["index"], change.get("values")
        if not (isinstance(index, np.ndarray) and index.dtype.kind in "iu" and index.ndim == 1
                and isinstance(values, np.ndarray) and values.shape == index.shape):
            raise RecordingError(f"model_changes {name}: its indices and values do not pair up")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= reference.size):
            raise RecordingError(f"model_changes {name}: an index outside the array's {reference.size} elements")
        flat = index.astype(np.int64)
        target = reference.copy()
        target.reshape(-1)[flat] = checked_value(name, reference.reshape(-1)[flat], values)
        return target


def checked_value(name: str, current: np.ndarray, value: object) -> np.ndarray:
    """``value``, read from a recording, as model array ``name`` (whose present value is
    ``current``) may take it: a floating-point parameter array of the same dtype and shape, finite
    wherever the model's own value is. Index, address, count and flag arrays (integers) are never
    written from a file; anything else is a :class:`RecordingError`.

    >>> import numpy as np
    >>> checked_value("body_mass", np.ones(2), np.array([1.0, 2.0]))
    array([1., 2.])
    >>> checked_value("geom_bodyid", np.zeros(2, np.int32), np.array([0, 10**6], np.int32))
    Traceback (most recent call last):
    ...
    simuguard_gym.recording.format.RecordingError: model_changes geom_bodyid: an int32 array (an index, address, count or flag) is never written from a recording
    """
    if current.dtype.kind != "f":
        raise RecordingError(f"model_changes {name}: an {current.dtype} array (an index, address, count or flag) "
                             "is never written from a recording")
    if isinstance(value, np.ndarray) and current.ndim == 0 and value.shape == (1,):
        value = value.reshape(())  # a scalar option, as earlier files hold it (one element)
    if not isinstance(value, np.ndarray) or value.dtype != current.dtype or value.shape != current.shape:
        found = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
        raise RecordingError(f"model_changes {name}: {found} given for the model's {current.dtype} {current.shape}")
    finite = np.isfinite(value)
    if not finite.all() and (_bits(value)[~finite] != _bits(np.ascontiguousarray(current))[~finite]).any():
        raise RecordingError(f"model_changes {name}: values that are not finite")
    return value


def _array(model: mujoco.MjModel, name: str) -> np.ndarray:
    """Array ``name`` of :func:`physics_arrays` (``opt.<field>`` for an option)."""
    if name.startswith("opt."):
        return np.asarray(getattr(model.opt, name[4:]))
    return np.asarray(getattr(model, name))


def _bits(a: np.ndarray) -> np.ndarray:
    """Elements as unsigned integers of their size: compared bit for bit (NaN equals NaN)."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) else a


@dataclass(frozen=True)
class _Span:
    """Arrays that lie side by side in a model's memory from ``address``, and the bytes the span
    holds while each is the reference's (``reference``)."""

    address: int
    reference: bytes
    members: list[tuple[int, str, np.ndarray]]  # (order in physics_arrays, name, view)


#: Arrays at most this far apart in a model's memory are compared as one span (MuJoCo aligns
#: each array; what lies between two physics arrays is padding or a small drawing-only array).
_SPAN_GAP = 64
#: A span ends before it grows past this: an array an env changes at every reset (Meta-World's
#: goal) sends only its own span to the array-by-array comparison, not megabytes of meshes.
_SPAN_BYTES = 64 * 1024


def _memcmp() -> Callable[[int, bytes, int], int] | None:
    """The C library's ``memcmp`` (model memory against reference bytes, no copy), where found."""
    try:
        library = ctypes.CDLL(None) if sys.platform != "win32" else ctypes.cdll.msvcrt
        found = library.memcmp
    except (OSError, AttributeError):
        return None
    found.argtypes, found.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int
    return found


_MEMCMP = _memcmp()


def _same(address: int, reference: bytes) -> bool:
    """Whether the model memory at ``address`` holds ``reference``'s bytes."""
    if _MEMCMP is not None:
        return _MEMCMP(address, reference, len(reference)) == 0
    return ctypes.string_at(address, len(reference)) == reference


def _spans(arrays: list[tuple[str, np.ndarray]], reference: dict[str, bytes]
           ) -> tuple[list[_Span], list[tuple[int, str, np.ndarray]]]:
    """``arrays`` (views on the model's memory) grouped into spans of side-by-side arrays: one
    comparison of a few spans per episode instead of one per array. A span's reference bytes are
    the reference arrays' bytes and, between them, what the memory holds now: where that changes,
    or an array differs, the span's arrays are compared one by one. Also returns the arrays no span
    can hold (not contiguous, or missing from the reference), as (order, name, view)."""
    placed, loose = [], []
    for order, (name, value) in enumerate(arrays):
        if value.nbytes == 0 and reference.get(name) == b"":
            continue  # empty in the reference and now: it cannot differ
        if value.flags.c_contiguous and value.nbytes and len(reference.get(name, b"")) == value.nbytes:
            placed.append((value.ctypes.data, order, name, value))
        else:
            loose.append((order, name, value))
    placed.sort(key=lambda item: item[0])
    spans: list[_Span] = []
    run: list[tuple[int, int, str, np.ndarray]] = []

    def close_run() -> None:
        start, end = run[0][0], run[-1][0] + run[-1][3].nbytes
        memory = bytearray(ctypes.string_at(start, end - start))
        for address, _, name, _ in run:
            memory[address - start:address - start + len(reference[name])] = reference[name]
        spans.append(_Span(start, bytes(memory), [(order, name, value) for _, order, name, value in run]))

    for item in placed:
        end = item[0] + item[3].nbytes
        if run and not (0 <= item[0] - (run[-1][0] + run[-1][3].nbytes) <= _SPAN_GAP
                        and end - run[0][0] <= _SPAN_BYTES):
            close_run()
            run = []
        run.append(item)
    if run:
        close_run()
    return spans, loose


def _write(model: mujoco.MjModel, name: str, value: np.ndarray) -> None:
    if name.startswith("opt."):
        field = name[len("opt."):]
        current = getattr(model.opt, field)
        if isinstance(current, np.ndarray):
            current[...] = value
        else:
            setattr(model.opt, field, value.item())
    else:
        getattr(model, name)[...] = value

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
>>> list(arrays.changes(model))
['site_pos']
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Iterator

import mujoco
import numpy as np

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


def fingerprint(model: mujoco.MjModel) -> str:
    """BLAKE2b of every physics-relevant array: two models with the same one run the same physics."""
    h = hashlib.blake2b(digest_size=16)
    for name, value in physics_arrays(model):
        h.update(name.split(".", 1)[-1].encode())
        h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


class ModelArrays:
    """A model's physics-relevant arrays as first seen, and what has changed in them since."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.reference = {name: np.array(value) for name, value in physics_arrays(model)}
        #: Arrays seen changed in some episode: their values go into every later recording too
        #: (they are what the env changes; a replay must not take them from its own build).
        self.changing: set[str] = set()

    def changes(self, model: mujoco.MjModel) -> dict[str, np.ndarray]:
        """The current values of the arrays that differ from the reference, or ever did."""
        out = {}
        for name, value in physics_arrays(model):
            reference = self.reference.get(name)
            if name in self.changing or reference is None or reference.shape != value.shape \
                    or reference.tobytes() != np.ascontiguousarray(value).tobytes():
                self.changing.add(name)
                out[name] = np.array(value)
        return out

    @staticmethod
    def digests(model: mujoco.MjModel) -> dict[str, int]:
        """CRC-32 of each physics-relevant array's bytes, by name."""
        return {name: zlib.crc32(np.ascontiguousarray(value).tobytes()) for name, value in physics_arrays(model)}

    def restore(self, model: mujoco.MjModel, changes: dict[str, np.ndarray], digests: dict[str, int]
                ) -> tuple[list[str], list[str]]:
        """Make ``model``'s arrays those of a recorded episode: where an array's CRC differs from
        ``digests``, write the recorded value from ``changes``, else this model's reference value
        when that is the recorded one. Returns (arrays written, arrays that still differ)."""
        written, differing = [], []
        for name, value in physics_arrays(model):
            want = digests.get(name)
            if want is None or zlib.crc32(np.ascontiguousarray(value).tobytes()) == want:
                continue
            source = changes.get(name)
            if source is None:
                reference = self.reference.get(name)
                if reference is not None and zlib.crc32(reference.tobytes()) == want:
                    source = reference
            if source is None or source.shape != value.shape:
                differing.append(name)
                continue
            _write(model, name, source)
            written.append(name)
        return written, differing


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

"""What PhysX cooked each convex piece of a scene from, so that a rebuilt pair holds the very hulls.

PhysX cooks a convex mesh from the points it is given (quickhull, then faces within a plane
tolerance merged), and the cooked hull is what a recording holds. Cooking those vertices again
does not give the same hull back: the tolerance drops vertices the first cook kept, and the rest
come out in another order, which decides GJK's ties (its support point among equals). A contact
rebuilt from re-cooked vertices can then miss the report it is meant to reproduce. The hull the
scene had comes back only from what the scene cooked it from: the points an env gave, or the mesh
file (and part) it loaded.

:func:`hull_sources` rebuilds a recording's env with SAPIEN's convex-mesh constructors watched
and returns, per collision piece, its source, scale and pose in its body; :func:`convex_shape`
makes a shape from such a source in another scene. Both are SAPIEN's own calls, so a hull is
cooked from the same input by the same code: bit for bit the scene's.

>>> from simuguard_gym.physx_repair.hull_sources import convex_shape
>>> import numpy as np
>>> cube = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], np.float32) * 0.01
>>> shape = convex_shape({"vertices": cube.tolist()}, [1.0, 1.0, 1.0])
>>> len(shape.vertices)
8
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym.recording.reader import Recording

_NAME = "PhysxCollisionShapeConvexMesh"
#: Where SAPIEN's code and an env's code look the constructor up: SAPIEN's own builders call
#: ``sapien.pysapien.physx``'s, envs ``sapien.physx``'s.
_MODULES = (sapien.pysapien.physx, physx)


@contextmanager
def watching_convex_meshes() -> Iterator[dict[int, tuple[Any, dict[str, Any]]]]:
    """While inside, each convex-mesh shape SAPIEN's constructors make (from points, from a file,
    or as a part of a file through ``load_multiple``) is kept with its source, by ``id``.

    An env module that bound the class to a name of its own before this began is not seen; its
    pieces have no source and are rebuilt from their recorded vertices."""
    seen: dict[int, tuple[Any, dict[str, Any]]] = {}
    base = getattr(sapien.pysapien.physx, _NAME)

    class Watched(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # SAPIEN accepted the call: its first argument is points or a file
            given = kwargs.get("filename", kwargs.get("vertices", args[0] if args else None))
            if isinstance(given, (str, os.PathLike)):
                seen[id(self)] = (self, {"file": os.fspath(given)})
            else:
                seen[id(self)] = (self, {"vertices": np.asarray(given, np.float32).tolist()})

        @staticmethod
        def load_multiple(*args: Any, **kwargs: Any) -> list[Any]:
            shapes = base.load_multiple(*args, **kwargs)
            filename = os.fspath(kwargs.get("filename", args[0] if args else ""))
            for part, shape in enumerate(shapes):
                seen[id(shape)] = (shape, {"file": filename, "part": part})
            return shapes

    previous = [getattr(module, _NAME) for module in _MODULES]
    for module in _MODULES:
        setattr(module, _NAME, Watched)
    try:
        yield seen
    finally:
        for module, original in zip(_MODULES, previous):
            setattr(module, _NAME, original)


def convex_shape(source: dict[str, Any], scale: Any, material: Any = None) -> Any:
    """A convex-mesh shape cooked from ``source`` (``vertices``, or ``file`` and perhaps ``part``)
    at ``scale``, as SAPIEN cooks it in any scene."""
    material = material if material is not None else physx.PhysxMaterial(0.5, 0.5, 0.0)
    scale = np.asarray(scale, np.float32)
    base = getattr(sapien.pysapien.physx, _NAME)
    if "vertices" in source:
        return base(np.asarray(source["vertices"], np.float32), scale, material)
    if "part" in source:
        return base.load_multiple(source["file"], scale, material)[int(source["part"])]
    return base(source["file"], scale, material)


def hull_sources(rec: Recording, env_fn: Callable[[], Any] | None = None) -> list[dict[str, Any] | None]:
    """Per collision piece of a recording, the source of a convex piece's hull:
    ``source`` (for :func:`convex_shape`), ``scale``, ``local_pose``, ``cooked`` (the hull's
    vertices as the rebuilt scene has them) and ``body_frame`` (its vertices in the body frame,
    as the recording computes them); None for primitives and for pieces whose source was not
    seen. The env is rebuilt as a replay rebuilds it (``env_fn()``, else from the header) and
    reset as recorded; errors of that are raised."""
    from simuguard_gym.engines import adapter_for
    from simuguard_gym.replay.rebuild import build_env

    env = None
    try:
        with watching_convex_meshes() as seen:  # the reset too: ManiSkill builds its scene there
            env = build_env(rec, env_fn)
            env.reset(seed=rec.header.get("seed"), options=rec.header.get("options"))
        adapter = adapter_for(env)
        adapter.refresh()
        out: list[dict[str, Any] | None] = []
        for shape, piece in zip(adapter.collision_shapes(), adapter.collision_pieces()):
            known = seen.get(id(shape))  # seen holds every watched shape, so an id is never reused
            if known is None or piece is None:
                out.append(None)
                continue
            pose = shape.local_pose
            out.append({"source": known[1], "scale": np.asarray(shape.scale, np.float64).tolist(),
                        "local_pose": np.concatenate([pose.p, pose.q]).astype(np.float64).tolist(),
                        "cooked": np.asarray(shape.vertices, np.float32).tolist(), "body_frame": piece[1]})
        return out
    finally:
        if env is not None:
            env.close()

"""Body geometry for identification: primitive shapes and closed meshes, their volume,
centroid and inertia at unit density, placed in the body frame."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simuguard_gym.identify import pose
from simuguard_gym.identify.inertia import shift

#: shape kinds and the sizes each takes, in metres, as written on the command line
SIZES = {
    "box": "full edge lengths x,y,z",
    "sphere": "radius",
    "cylinder": "radius,full height (axis z)",
    "ellipsoid": "semi-axes x,y,z",
}


@dataclass(frozen=True)
class Shape:
    """One solid at ``pos``/``quat`` in the body frame.

    ``kind`` is one of :data:`SIZES` or ``"mesh"`` (``vertices`` (n, 3) and ``faces`` (k, 3) of a
    closed, outward-oriented triangle mesh).

    Example:
        >>> cube = Shape("box", (0.02, 0.02, 0.02))
        >>> round(cube.volume * 1e6, 3)
        8.0
    """

    kind: str
    sizes: tuple[float, ...] = ()
    pos: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quat: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)
    vertices: np.ndarray | None = field(default=None, compare=False)
    faces: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        wanted = {"box": 3, "sphere": 1, "cylinder": 2, "ellipsoid": 3, "mesh": 0}
        if self.kind not in wanted:
            raise ValueError(f"unknown shape {self.kind!r}; one of {sorted(wanted)}")
        if self.kind == "mesh":
            if self.vertices is None or self.faces is None:
                raise ValueError("a mesh shape needs vertices and faces")
        elif len(self.sizes) != wanted[self.kind] or not all(np.isfinite(self.sizes)) or min(self.sizes) <= 0:
            raise ValueError(f"{self.kind} takes {wanted[self.kind]} positive sizes ({SIZES[self.kind]}), "
                             f"got {self.sizes}")

    @property
    def volume(self) -> float:
        return self._local()[0]

    def local_properties(self) -> tuple[float, np.ndarray, np.ndarray]:
        """Volume, centroid and unit-density inertia about the centroid, in the shape's own frame."""
        return self._local()

    def _local(self) -> tuple[float, np.ndarray, np.ndarray]:
        s = np.asarray(self.sizes, float)
        if self.kind == "box":
            v = float(np.prod(s))
            a, b, c = s ** 2
            return v, np.zeros(3), v / 12.0 * np.diag([b + c, a + c, a + b])
        if self.kind == "sphere":
            v = 4.0 / 3.0 * np.pi * s[0] ** 3
            return v, np.zeros(3), 0.4 * v * s[0] ** 2 * np.eye(3)
        if self.kind == "cylinder":
            r, h = s
            v = np.pi * r * r * h
            side = v * (3 * r * r + h * h) / 12.0
            return v, np.zeros(3), np.diag([side, side, v * r * r / 2.0])
        if self.kind == "ellipsoid":
            v = 4.0 / 3.0 * np.pi * float(np.prod(s))
            a, b, c = s ** 2
            return v, np.zeros(3), v / 5.0 * np.diag([b + c, a + c, a + b])
        return _mesh_properties(np.asarray(self.vertices, float), np.asarray(self.faces, int))

    def half_extent(self) -> np.ndarray:
        """Half the axis-aligned size in the shape frame (a bound on where its centre of mass can be)."""
        s = np.asarray(self.sizes, float)
        if self.kind == "box":
            return s / 2
        if self.kind == "sphere":
            return np.full(3, s[0])
        if self.kind == "cylinder":
            return np.array([s[0], s[0], s[1] / 2])
        if self.kind == "ellipsoid":
            return s
        v = np.asarray(self.vertices, float)
        return (v.max(0) - v.min(0)) / 2


def _mesh_properties(v: np.ndarray, f: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    # signed tetrahedra from the origin to each face; their moments sum to the solid's
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    dv = np.einsum("ij,ij->i", a, np.cross(b, c)) / 6.0
    volume = dv.sum()
    if volume <= 0:
        raise ValueError("the mesh encloses no volume (not closed, or faces point inward)")
    centroid = (dv[:, None] * (a + b + c)).sum(0) / 4.0 / volume
    # second moments: integral of x x^T over each tetrahedron (origin, a, b, c)
    s = a + b + c
    second = (dv[:, None, None] * (np.einsum("ni,nj->nij", a, a) + np.einsum("ni,nj->nij", b, b)
                                   + np.einsum("ni,nj->nij", c, c) + np.einsum("ni,nj->nij", s, s))).sum(0) / 20.0
    about_origin = np.trace(second) * np.eye(3) - second
    return float(volume), centroid, shift(about_origin, -volume, centroid)


def parse_shape(text: str) -> Shape:
    """``"box:0.02,0.02,0.02"`` -> Shape (sizes in metres, see :data:`SIZES`)."""
    kind, _, sizes = text.partition(":")
    try:
        values = tuple(float(x) for x in sizes.split(",")) if sizes else ()
    except ValueError:
        raise ValueError(f"shape {text!r}: sizes must be numbers, e.g. box:0.02,0.02,0.02") from None
    return Shape(kind.strip().lower(), values)


@dataclass(frozen=True)
class MassProperties:
    volume: float
    centroid: np.ndarray
    inertia_per_density: np.ndarray  # about the centroid, body frame
    half_extent: np.ndarray          # of the whole body about its frame origin


def mass_properties(shapes: list[Shape] | tuple[Shape, ...]) -> MassProperties:
    """Volume, centroid and unit-density inertia of solids placed in one body frame (uniform density)."""
    if not shapes:
        raise ValueError("a body needs at least one shape")
    vols, cents, inertias, lo, hi = [], [], [], [], []
    for shape in shapes:
        v, c, i = shape.local_properties()
        r = pose.to_matrix(np.asarray(shape.quat, float) / np.linalg.norm(shape.quat))
        centre = np.asarray(shape.pos, float) + r @ c
        vols.append(v)
        cents.append(centre)
        inertias.append(r @ i @ r.T)
        reach = np.abs(r) @ shape.half_extent()
        lo.append(np.asarray(shape.pos) - reach)
        hi.append(np.asarray(shape.pos) + reach)
    vols_a = np.array(vols)
    volume = float(vols_a.sum())
    centroid = (vols_a[:, None] * np.array(cents)).sum(0) / volume
    inertia = sum(shift(i, v, c - centroid) for i, v, c in zip(inertias, vols, cents))
    half = np.maximum(np.abs(np.min(lo, 0)), np.abs(np.max(hi, 0)))
    return MassProperties(volume, centroid, inertia, half)

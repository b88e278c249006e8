"""The can and the basket as meshes, cut into convex pieces by CoACD, as RoboTwin's assets are.

RoboTwin's collision pieces come from a convex decomposition of each object's mesh: irregular
hulls of a dozen to a few dozen vertices, a centimetre or two across (SimuGuard's basket piece has
46 vertices, its can piece 11). This module builds such meshes, a soda can (recessed lid inside a
rolled rim, domed bottom on a foot ring) and a basket with windowed walls, and cuts them with
CoACD (Wei et al., 2022) at the paper's piece counts: 22 for the can, 54 for the basket. The
pieces are computed once by :func:`generate` (needs ``pip install coacd``) and shipped in
``envs/data/``; :func:`can_pieces` and :func:`basket_pieces` read them, so nothing is decomposed
when an env is built.

>>> from simuguard_gym.envs.decomposed_geometry import basket_pieces, can_pieces
>>> len(can_pieces()), len(basket_pieces())
(22, 54)
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from simuguard_gym.envs.can_basket_geometry import BASKET_INNER, CAN_HEIGHT, CAN_RADIUS, FLOOR_PIECE, WALL_PIECE, Piece

DATA = Path(__file__).resolve().parent / "data" / "can_basket_decomposed.npz"
CAN_PIECES, BASKET_PIECES = 22, 54
SEGMENTS = 32  # around the can
VOXEL = 0.002  # m: the basket's mesh grid

#: The can's profile (radius, height from its bottom), from the bottom's centre up the outside
#: and back in over the rim to the lid's centre; revolved about z.
CAN_PROFILE = np.array([
    (0.0, 0.0045), (0.0150, 0.0030), (0.0195, 0.0), (0.0215, 0.0), (CAN_RADIUS, 0.0040),
    (CAN_RADIUS, CAN_HEIGHT - 0.0040), (0.0240, CAN_HEIGHT), (0.0215, CAN_HEIGHT), (0.0205, CAN_HEIGHT - 0.0035),
    (0.0, CAN_HEIGHT - 0.0035)])


def can_mesh() -> tuple[np.ndarray, np.ndarray]:
    """The can as a closed triangle mesh centred on its origin (vertices m, faces)."""
    angles = np.linspace(0.0, 2 * np.pi, SEGMENTS, endpoint=False)
    ring = CAN_PROFILE[1:-1]
    vertices = [[0.0, 0.0, CAN_PROFILE[0, 1]]]
    for r, z in ring:
        vertices += [[r * np.cos(a), r * np.sin(a), z] for a in angles]
    vertices.append([0.0, 0.0, CAN_PROFILE[-1, 1]])
    vertices = np.array(vertices) - [0.0, 0.0, CAN_HEIGHT / 2]
    faces = []
    top = len(vertices) - 1
    n = SEGMENTS
    for j in range(n):
        k = (j + 1) % n
        faces.append((0, 1 + k, 1 + j))  # bottom cap, facing down
        for i in range(len(ring) - 1):
            a, b = 1 + i * n + j, 1 + i * n + k
            c, d = a + n, b + n
            faces += [(a, b, d), (a, d, c)]
        last = 1 + (len(ring) - 1) * n
        faces.append((top, last + j, last + k))
    return vertices, np.array(faces, np.int64)


def basket_occupancy() -> np.ndarray:
    """The basket on a :data:`VOXEL` grid: a floor slab and four walls with two rows of windows."""
    thick, tall = WALL_PIECE[1], 3 * WALL_PIECE[2]
    outer = BASKET_INNER + 2 * thick
    nx = int(round(outer / VOXEL))
    nz = int(round((FLOOR_PIECE[2] + tall) / VOXEL))
    w, floor = int(round(thick / VOXEL)), int(round(FLOOR_PIECE[2] / VOXEL))
    grid = np.zeros((nx, nx, nz), bool)
    grid[:, :, :floor] = True
    grid[:w], grid[-w:], grid[:, :w], grid[:, -w:] = True, True, True, True
    # windows: 4 per row along each wall, two rows; posts and rails 1-2 cm wide stay
    along = [(14 + 22 * i, 14 + 22 * i + 9) for i in range(4)]  # voxel spans along the inner wall
    rows = [(floor + 4, floor + 10), (floor + 14, floor + 19)]
    for lo, hi in along:
        for z0, z1 in rows:
            grid[w + lo - 6:w + hi - 6, :w, z0:z1] = False
            grid[w + lo - 6:w + hi - 6, -w:, z0:z1] = False
            grid[:w, w + lo - 6:w + hi - 6, z0:z1] = False
            grid[-w:, w + lo - 6:w + hi - 6, z0:z1] = False
    return grid


def voxel_mesh(grid: np.ndarray, size: float, origin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The boundary of an occupancy grid as a closed triangle mesh (shared corner vertices)."""
    padded = np.pad(grid, 1)
    index: dict[tuple[int, int, int], int] = {}
    faces = []

    def vertex(p: tuple[int, int, int]) -> int:
        return index.setdefault(p, len(index))

    for axis in range(3):
        for sign in (-1, 1):
            neighbour = np.roll(padded, -sign, axis=axis)
            exposed = padded & ~neighbour
            for cell in np.argwhere(exposed[1:-1, 1:-1, 1:-1]):
                c = cell.copy()
                if sign > 0:
                    c[axis] += 1
                u, v = [a for a in range(3) if a != axis]
                corners = []
                for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1)):
                    q = c.copy()
                    q[u] += du
                    q[v] += dv
                    corners.append(vertex(tuple(int(x) for x in q)))
                if (sign > 0) != ((v - u) % 3 == 1):
                    corners.reverse()
                faces += [(corners[0], corners[1], corners[2]), (corners[0], corners[2], corners[3])]
    vertices = np.array(sorted(index, key=index.get), float) * size + origin
    return vertices, np.array(faces, np.int64)


def basket_mesh() -> tuple[np.ndarray, np.ndarray]:
    """The basket as a closed triangle mesh, its floor on z = 0, centred on the origin in x, y."""
    grid = basket_occupancy()
    outer = grid.shape[0] * VOXEL
    return voxel_mesh(grid, VOXEL, np.array([-outer / 2, -outer / 2, 0.0]))


def decompose(vertices: np.ndarray, faces: np.ndarray, pieces: int, threshold: float = 0.02,
              seed: int = 0) -> list[np.ndarray]:
    """CoACD's convex pieces of a mesh, merged down to ``pieces`` (each its hull's vertices)."""
    import coacd

    mesh = coacd.Mesh(np.asarray(vertices, float), np.asarray(faces, np.int64))
    parts = coacd.run_coacd(mesh, threshold=threshold, max_convex_hull=pieces, seed=seed, preprocess_mode="off")
    return [np.asarray(v, float) for v, _ in parts]


def generate(path: str | Path = DATA) -> Path:
    """Decompose both meshes and write the pieces to ``path`` (``.npz``)."""
    can = decompose(*can_mesh(), CAN_PIECES)
    basket = decompose(*basket_mesh(), BASKET_PIECES)
    arrays = {}
    for name, found in (("can", can), ("basket", basket)):
        arrays[f"{name}_vertices"] = np.vstack(found)
        arrays[f"{name}_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in found])])
    np.savez_compressed(path, **arrays)
    return Path(path)


@lru_cache(maxsize=None)
def _load() -> dict[str, np.ndarray]:
    with np.load(DATA) as data:
        return {k: data[k] for k in data.files}


def _pieces(name: str) -> list[Piece]:
    data = _load()
    vertices, offsets = data[f"{name}_vertices"], data[f"{name}_offsets"]
    return [Piece(vertices[a:b].copy()) for a, b in zip(offsets[:-1], offsets[1:])]


def can_pieces() -> list[Piece]:
    """The can's 22 convex pieces (body frame, centred on the can's origin)."""
    return _pieces("can")


def basket_pieces() -> list[Piece]:
    """The basket's 54 convex pieces (its floor on z = 0)."""
    return _pieces("basket")


#: The collision geometries of PlaceCanBasket: generated boxes and wedges, or the decomposed meshes.
GEOMETRIES = ("boxes", "decomposed")


def pieces_of(geometry: str) -> tuple[list[Piece], list[Piece]]:
    """The can's and the basket's pieces of a geometry named in :data:`GEOMETRIES`."""
    if geometry == "boxes":
        from simuguard_gym.envs import can_basket_geometry

        return can_basket_geometry.can_pieces(), can_basket_geometry.basket_pieces()
    if geometry == "decomposed":
        return can_pieces(), basket_pieces()
    raise ValueError(f"geometry must be one of {', '.join(GEOMETRIES)}, got {geometry!r}")

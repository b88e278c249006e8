"""The collision pieces of the can and the basket, generated (no asset files, no downloads).

Both are built from convex pieces given by their vertices, as RoboTwin's assets are after convex
decomposition: pieces one to two centimetres across are where PhysX 5.3.1's distance algorithm
fails (SimuGuard 4.2). The same pieces go into SAPIEN (convex meshes) and MuJoCo (mesh geoms,
whose collision MuJoCo takes as the convex hull of the vertices), so the two engines see one scene.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAN_RADIUS = 0.025
CAN_HEIGHT = 0.050
CAN_MASS = 0.010
CAN_WEDGES = 11  # around; two layers: 22 pieces
BASKET_INNER = 0.100  # inner side of the square basket (m)
WALL_PIECE = (0.020, 0.012, 0.015)  # length along the wall, thickness, height
WALL_LAYERS = 3
FLOOR_PIECE = (0.020, 0.020, 0.012)


@dataclass(frozen=True)
class Piece:
    """One convex collision piece: its vertices in the body frame (m)."""

    vertices: np.ndarray

    @property
    def centroid(self) -> np.ndarray:
        return self.vertices.mean(axis=0)


def box_vertices(center: np.ndarray, half: np.ndarray) -> np.ndarray:
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=float)
    return np.asarray(center, float) + corners * np.asarray(half, float)


def can_pieces(radius: float = CAN_RADIUS, height: float = CAN_HEIGHT, wedges: int = CAN_WEDGES) -> list[Piece]:
    """A closed cylinder (axis z, centred on the origin) cut into ``wedges`` x 2 convex wedges."""
    pieces = []
    edges = np.linspace(0.0, 2 * np.pi, wedges + 1)
    for z0, z1 in ((-height / 2, 0.0), (0.0, height / 2)):
        for a0, a1 in zip(edges[:-1], edges[1:]):
            arc = np.linspace(a0, a1, 3)
            rim = np.stack([radius * np.cos(arc), radius * np.sin(arc)], axis=1)
            ring = np.vstack([[0.0, 0.0], rim])
            vertices = np.vstack([np.column_stack([ring, np.full(len(ring), z)]) for z in (z0, z1)])
            pieces.append(Piece(vertices))
    return pieces


def basket_pieces(inner: float = BASKET_INNER) -> list[Piece]:
    """A square basket open at the top, its floor on z = 0: floor tiles and walls of blocks."""
    length, thick, tall = WALL_PIECE
    fx, fy, fz = FLOOR_PIECE
    pieces = []
    n_floor = int(round(inner / fx))
    for i in range(n_floor):
        for j in range(n_floor):
            center = np.array([(i + 0.5) * fx - inner / 2, (j + 0.5) * fy - inner / 2, fz / 2])
            pieces.append(Piece(box_vertices(center, np.array([fx, fy, fz]) / 2)))
    per_side = int(round(inner / length))
    offset = inner / 2 + thick / 2
    for layer in range(WALL_LAYERS):
        z = fz + (layer + 0.5) * tall
        for k in range(per_side):
            along = (k + 0.5) * length - inner / 2
            for center, half in (
                    ((along, -offset, z), (length / 2, thick / 2, tall / 2)),
                    ((along, offset, z), (length / 2, thick / 2, tall / 2)),
                    ((-offset, along, z), (thick / 2, length / 2, tall / 2)),
                    ((offset, along, z), (thick / 2, length / 2, tall / 2))):
                pieces.append(Piece(box_vertices(np.array(center), np.array(half))))
    return pieces


def basket_top(inner: float = BASKET_INNER) -> float:
    return FLOOR_PIECE[2] + WALL_LAYERS * WALL_PIECE[2]


def inside_basket(position: np.ndarray, basket_position: np.ndarray, inner: float = BASKET_INNER) -> bool:
    """Whether a can centre at ``position`` rests within the basket's walls, below their top."""
    local = np.asarray(position, float) - np.asarray(basket_position, float)
    return bool(np.all(np.abs(local[:2]) < inner / 2) and local[2] < basket_top(inner))

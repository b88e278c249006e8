"""The decomposed can and basket (CoACD pieces shipped in envs/data): counts, shapes, and the
MuJoCo twin on the same pieces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor
from simuguard_gym.envs.can_basket_geometry import CAN_HEIGHT, CAN_RADIUS, inside_basket
from simuguard_gym.envs.decomposed_geometry import (basket_mesh, basket_pieces, can_mesh, can_pieces, pieces_of,
                                                    voxel_mesh)


def _hull_volume(pieces):
    """The summed volumes of the pieces' convex hulls, as MuJoCo computes them (a mesh given by
    vertices only is its convex hull; density 1 makes the mass the volume)."""
    import mujoco

    assets = "".join(f'<mesh name="p{i}" vertex="{" ".join(map(repr, p.vertices.reshape(-1).tolist()))}"/>'
                     for i, p in enumerate(pieces))
    geoms = "".join(f'<geom type="mesh" mesh="p{i}" density="1"/>' for i in range(len(pieces)))
    model = mujoco.MjModel.from_xml_string(f"<mujoco><asset>{assets}</asset><worldbody><body><freejoint/>{geoms}"
                                           "</body></worldbody></mujoco>")
    return float(model.body_mass[1])


def _mesh_volume(vertices, faces):
    a, b, c = (vertices[faces[:, i]] for i in range(3))
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6)


def test_the_paper_piece_counts_and_irregular_hulls():
    can, basket = can_pieces(), basket_pieces()
    assert (len(can), len(basket)) == (22, 54)
    counts = [len(p.vertices) for p in can + basket]
    assert min(counts) >= 8 and np.median(counts) > 8  # irregular hulls, not the 8-vertex boxes
    for piece in can:  # inside the can's cylinder
        assert np.linalg.norm(piece.vertices[:, :2], axis=1).max() <= CAN_RADIUS + 1e-4
        assert np.abs(piece.vertices[:, 2]).max() <= CAN_HEIGHT / 2 + 1e-4
    walls = [p for p in basket if p.vertices[:, 2].min() > 0.005]  # pieces above the floor slab
    extents = np.array([np.ptp(p.vertices, axis=0) for p in walls])
    assert len(walls) > 30 and np.median(extents.min(axis=1)) < 0.02  # centimetre-scale wall pieces


def test_the_pieces_cover_their_meshes():
    for mesh, pieces in ((can_mesh(), can_pieces()), (basket_mesh(), basket_pieces())):
        volume = _mesh_volume(*mesh)
        assert volume > 0  # closed and outward
        assert 0.95 * volume < _hull_volume(pieces) < 1.3 * volume


def test_a_voxel_block_is_a_closed_mesh():
    grid = np.zeros((3, 3, 3), bool)
    grid[1, 1, 1] = grid[1, 1, 2] = True
    vertices, faces = voxel_mesh(grid, 0.5, np.zeros(3))
    assert len(faces) == 2 * 10 and _mesh_volume(vertices, faces) == pytest.approx(2 * 0.125)
    edges = np.sort(np.vstack([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert (counts == 2).all()  # every edge shared by two triangles: watertight


def test_unknown_geometry_is_refused():
    with pytest.raises(ValueError, match="geometry must be one of"):
        pieces_of("spheres")


def test_the_mujoco_twin_places_the_can_on_the_same_pieces():
    env = ArtifactMonitor(gym.make("simuguard_gym/PlaceCanBasketDecomposed-MuJoCo-v0"))
    model = env.unwrapped.model
    assert sum(model.geom_bodyid == model.body("can").id) == 22
    assert sum(model.geom_bodyid == model.body("basket").id) == 54
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(90):
            *_, info = env.step(env.unwrapped.expert_action())
        assert info["simuguard"]["errors"] == []
        assert inside_basket(env.unwrapped.data.xpos[model.body("can").id], np.zeros(3)) or not info["success"]
    env.close()

"""A SAPIEN scene's collision shapes and its current contacts, as ``simuguard view`` shows them."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import sapien.physx as physx

from simuguard_gym.identify.pose import multiply
from simuguard_gym.physics.piece_shapes import PieceShapes
from simuguard_gym.physics.scene_geometry import ContactPointsNow, GeometryPart

#: PhysX puts capsules and cylinders along x and a plane's normal along x; the viewer's parts
#: put them along z: a quarter turn about y (w x y z) takes z to x.
_Z_TO_X = np.array([np.sqrt(0.5), 0.0, np.sqrt(0.5), 0.0])
#: The half extents shown for PhysX's infinite plane.
PLANE_HALF_EXTENT = 2.0


def scene_geometry(shapes: Sequence[Any], shape_body: Sequence[int]) -> list[GeometryPart]:
    """Each collision shape in its body's frame; shapes of kinds PhysX adds later are left out."""
    parts = []
    for shape, body in zip(shapes, shape_body):
        pose = shape.local_pose
        p, q = np.asarray(pose.p, np.float64), np.asarray(pose.q, np.float64)
        vertices = faces = None
        if isinstance(shape, physx.PhysxCollisionShapeBox):
            kind, size = "box", np.asarray(shape.half_size, np.float64)
        elif isinstance(shape, physx.PhysxCollisionShapeSphere):
            kind, size = "sphere", np.array([shape.radius], np.float64)
        elif isinstance(shape, (physx.PhysxCollisionShapeCapsule, physx.PhysxCollisionShapeCylinder)):
            kind = "capsule" if isinstance(shape, physx.PhysxCollisionShapeCapsule) else "cylinder"
            size, q = np.array([shape.radius, shape.half_length], np.float64), multiply(q, _Z_TO_X)
        elif isinstance(shape, physx.PhysxCollisionShapePlane):
            kind, size, q = "plane", np.full(2, PLANE_HALF_EXTENT), multiply(q, _Z_TO_X)
        elif isinstance(shape, (physx.PhysxCollisionShapeConvexMesh, physx.PhysxCollisionShapeTriangleMesh)):
            kind, size = "mesh", np.zeros(0)
            vertices = np.asarray(shape.vertices, np.float64) * np.asarray(shape.scale, np.float64)
            faces = np.asarray(shape.triangles, np.int64)
        else:
            continue
        parts.append(GeometryPart(int(body), kind, np.concatenate([p, q]), size, vertices, faces))
    return parts


def contact_points_now(scene: Any, index: dict[Any, int]) -> ContactPointsNow:
    """Every point of ``scene.get_contacts()`` between bodies of the table (``index``: component
    to body); SAPIEN's normal points from the second body to the first, so it is turned round."""
    positions, normals, depths, bodies = [], [], [], []
    for contact in scene.get_contacts():
        a, b = (index.get(c) for c in contact.bodies)
        if a is None or b is None:
            continue
        for point in contact.points:
            positions.append(point.position)
            normals.append(-np.asarray(point.normal))
            depths.append(-point.separation)
            bodies.append((a, b))
    if not positions:
        return ContactPointsNow.empty()
    return ContactPointsNow(np.asarray(positions, np.float64), np.asarray(normals, np.float64),
                            np.asarray(depths, np.float64), np.asarray(bodies, np.int64))


def piece_shapes(shapes: Sequence[Any]) -> PieceShapes:
    """Kind, size, local pose and offsets of each collision shape, in PhysX's own conventions."""
    kinds, sizes, poses, contact, rest = [], np.zeros((len(shapes), 3)), np.zeros((len(shapes), 7)), [], []
    for i, shape in enumerate(shapes):
        pose = shape.local_pose
        poses[i] = np.concatenate([pose.p, pose.q])
        contact.append(float(shape.contact_offset))
        rest.append(float(shape.rest_offset))
        if isinstance(shape, physx.PhysxCollisionShapeConvexMesh):
            kinds.append("convex")
        elif isinstance(shape, physx.PhysxCollisionShapeBox):
            kinds.append("box")
            sizes[i] = shape.half_size
        elif isinstance(shape, physx.PhysxCollisionShapeSphere):
            kinds.append("sphere")
            sizes[i, 0] = shape.radius
        elif isinstance(shape, (physx.PhysxCollisionShapeCapsule, physx.PhysxCollisionShapeCylinder)):
            kinds.append("capsule" if isinstance(shape, physx.PhysxCollisionShapeCapsule) else "cylinder")
            sizes[i, :2] = shape.radius, shape.half_length
        elif isinstance(shape, physx.PhysxCollisionShapePlane):
            kinds.append("plane")
        else:
            kinds.append("other")
    return PieceShapes(tuple(kinds), sizes, poses, np.array(contact), np.array(rest))

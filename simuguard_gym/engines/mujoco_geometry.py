"""A MuJoCo model's collision geoms and its current contacts, as ``simuguard view`` shows them."""

from __future__ import annotations

import mujoco
import numpy as np

from simuguard_gym.physics.scene_geometry import ContactPointsNow, GeometryPart

#: The half extents shown for an infinite plane (MuJoCo's size 0).
PLANE_HALF_EXTENT = 2.0
_KINDS = {mujoco.mjtGeom.mjGEOM_PLANE: "plane", mujoco.mjtGeom.mjGEOM_SPHERE: "sphere",
          mujoco.mjtGeom.mjGEOM_CAPSULE: "capsule", mujoco.mjtGeom.mjGEOM_ELLIPSOID: "ellipsoid",
          mujoco.mjtGeom.mjGEOM_CYLINDER: "cylinder", mujoco.mjtGeom.mjGEOM_BOX: "box",
          mujoco.mjtGeom.mjGEOM_MESH: "mesh"}


def scene_geometry(model: mujoco.MjModel) -> list[GeometryPart]:
    """The geoms that collide (contype or conaffinity set), in their bodies' frames; height fields
    and SDFs are left out."""
    parts = []
    for g in range(model.ngeom):
        kind = _KINDS.get(int(model.geom_type[g]))
        if kind is None or not (model.geom_contype[g] or model.geom_conaffinity[g]):
            continue
        size = np.array(model.geom_size[g], np.float64)
        vertices = faces = None
        if kind == "plane":
            size = np.where(size[:2] > 0, size[:2], PLANE_HALF_EXTENT)
        elif kind == "sphere":
            size = size[:1]
        elif kind in ("capsule", "cylinder"):
            size = size[:2]
        elif kind == "mesh":
            mesh = int(model.geom_dataid[g])
            start, count = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
            face, nface = int(model.mesh_faceadr[mesh]), int(model.mesh_facenum[mesh])
            vertices = np.array(model.mesh_vert[start:start + count], np.float64)
            faces = np.array(model.mesh_face[face:face + nface], np.int64)
            size = np.zeros(0)
        pose = np.concatenate([model.geom_pos[g], model.geom_quat[g]]).astype(np.float64)
        parts.append(GeometryPart(int(model.geom_bodyid[g]), kind, pose, size, vertices, faces))
    return parts


def contact_points_now(model: mujoco.MjModel, data: mujoco.MjData) -> ContactPointsNow:
    """The contacts of the last substep (MuJoCo finds them at the substep's start)."""
    n = int(data.ncon)
    if n == 0:
        return ContactPointsNow.empty()
    contact = data.contact
    geoms = np.stack([contact.geom1[:n], contact.geom2[:n]], axis=1)
    return ContactPointsNow(np.array(contact.pos[:n], np.float64), np.array(contact.frame[:n, :3], np.float64),
                            -np.array(contact.dist[:n], np.float64), model.geom_bodyid[geoms].astype(np.int64))


def geom_distance(model: mujoco.MjModel, geoms: tuple[int, int], body_poses: dict[int, np.ndarray],
                  distmax: float = 1.0) -> tuple[float, np.ndarray]:
    """MuJoCo's own distance (``mj_geomDistance``) between two geoms whose bodies are at the given
    poses (position, quaternion w x y z, by MuJoCo body id; bodies welded to the world may be
    left out: their pose is the model's); negative when they overlap. Returns the distance and
    the segment (from, to) between the nearest points."""
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)  # the poses of bodies welded to the world
    for g in geoms:
        body = int(model.geom_bodyid[g])
        if body in body_poses:
            pose = np.asarray(body_poses[body], np.float64)
            position, quaternion = pose[:3], pose[3:] / np.linalg.norm(pose[3:])
        else:
            position, quaternion = data.xpos[body].copy(), data.xquat[body].copy()
        offset, turn = np.zeros(3), np.zeros(4)
        mujoco.mju_rotVecQuat(offset, model.geom_pos[g], quaternion)
        mujoco.mju_mulQuat(turn, quaternion, model.geom_quat[g])
        data.geom_xpos[g] = position + offset
        matrix = np.zeros(9)
        mujoco.mju_quat2Mat(matrix, turn)
        data.geom_xmat[g] = matrix
    fromto = np.zeros(6)
    distance = mujoco.mj_geomDistance(model, data, int(geoms[0]), int(geoms[1]), distmax, fromto)
    return float(distance), fromto.reshape(2, 3)


def model_from_bytes(mjb: bytes) -> mujoco.MjModel:
    """A model from MJB bytes (a recording's stored model), loaded from memory."""
    return mujoco.MjModel.from_binary_path("model.mjb", {"model.mjb": mjb})

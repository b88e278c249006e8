"""One onset pair rebuilt alone and moved through its recorded poses, in the SAPIEN this process
imported (``simuguard trace`` runs it once per engine, stock and repaired, in subprocesses).

The pair is two actors carrying one collision piece each, as the recording describes them
(convex pieces by their vertices in the body frame; boxes, spheres, capsules and cylinders by
kind and size), with the scene's contact and rest offsets and contact settings. One body stays
where it was at the report (dynamic, every axis locked: PhysX makes no contacts between a
kinematic and a static body); the other is kinematic and follows its pose relative to the first,
one recorded substep per step, through kinematic targets: a target moves it by velocity and
keeps PhysX's persistent contact cache, which a teleport would clear. Step k reports the
contacts of the poses it began at, as the recorded substep did.

``python -m simuguard_gym.physx_repair.onset_pair`` reads a job (JSON, see :func:`run`) on
stdin and prints the result as one line of JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym.physx_repair.hull_sources import convex_shape
from simuguard_gym.physx_repair.repair import RECORD


def scene_with(dt: float, settings: dict[str, Any]) -> sapien.Scene:
    """A PhysX CPU scene of SAPIEN's default config with ``settings`` (PhysxSceneConfig fields),
    whatever another library set process-wide; the process-wide config is put back at once."""
    previous = physx.get_scene_config()
    config = physx.PhysxSceneConfig()  # SAPIEN's defaults, then the recorded settings
    for name, value in settings.items():
        if hasattr(config, name) and name != "gravity":
            setattr(config, name, value)
    physx.set_scene_config(config)
    try:
        scene = sapien.Scene([physx.PhysxCpuSystem()])
    finally:
        physx.set_scene_config(previous)
    scene.set_timestep(dt)
    return scene


def _convex(piece: dict[str, Any], material: Any) -> tuple[Any, bool]:
    """A convex piece, and whether it is the scene's hull exactly: cooked from what the scene
    cooked it from where the job has that (``source``, ``scale``, ``local_pose``: see
    :mod:`~simuguard_gym.physx_repair.hull_sources`), else from its recorded vertices in the body
    frame. Cooking a cooked hull's vertices again drops some and reorders the rest, and the order
    decides GJK's ties, so a report may not come back from such a hull."""
    if "source" in piece:
        shape = convex_shape(piece["source"], piece["scale"], material)
        pose = np.asarray(piece["local_pose"], np.float32)
        shape.set_local_pose(sapien.Pose(pose[:3], pose[3:]))
        expected = np.asarray(piece["cooked"], np.float32)
    else:
        expected = np.asarray(piece["vertices"], np.float32)
        shape = physx.PhysxCollisionShapeConvexMesh(expected, np.ones(3, np.float32), material)
    cooked = np.asarray(shape.vertices, np.float32)
    return shape, bool(cooked.shape == expected.shape and np.array_equal(cooked, expected))


def _shape(piece: dict[str, Any]) -> tuple[Any, bool]:
    """The piece as a PhysX shape, and whether it is the recorded hull exactly (primitives are)."""
    material = physx.PhysxMaterial(0.5, 0.5, 0.0)
    kind, size = piece["kind"], piece.get("size") or [0.0, 0.0, 0.0]
    exact = True
    if kind == "convex":
        shape, exact = _convex(piece, material)
    elif kind == "box":
        shape = physx.PhysxCollisionShapeBox(np.asarray(size, np.float32), material)
    elif kind == "sphere":
        shape = physx.PhysxCollisionShapeSphere(float(size[0]), material)
    elif kind == "capsule":
        shape = physx.PhysxCollisionShapeCapsule(float(size[0]), float(size[1]), material)
    elif kind == "cylinder":
        shape = physx.PhysxCollisionShapeCylinder(float(size[0]), float(size[1]), material)
    else:
        raise ValueError(f"a {kind} piece cannot be rebuilt on a moving body")
    if kind != "convex":  # a convex piece is posed in its body already (its source's pose, or its vertices)
        pose = np.asarray(piece["local_pose"], np.float32)
        shape.set_local_pose(sapien.Pose(pose[:3], pose[3:]))
    shape.set_contact_offset(float(piece["contact_offset"]))
    shape.set_rest_offset(float(piece["rest_offset"]))
    return shape, exact


def _pose(p: Any) -> sapien.Pose:
    p = np.asarray(p, np.float32)
    return sapien.Pose(p[:3], p[3:])


def sweep(job: dict[str, Any], arrangement: dict[str, Any], history: int
          ) -> tuple[list[tuple[float, list[float]] | None], bool | None]:
    """Run the last ``history`` poses of an arrangement (which piece moves, the pose the other
    keeps, the mover's poses); per step the deepest reported point between the two pieces
    (separation, normal from piece 0 to piece 1; None without a contact), and whether PhysX
    listed piece 0 first as the recording did (None: no contact)."""
    scene = scene_with(float(job["dt"]), job.get("settings") or {})
    moving = int(arrangement["moving"])
    poses = arrangement["poses"][-history:]
    components = []
    for i, piece in enumerate(job["pieces"]):
        component = physx.PhysxRigidDynamicComponent()
        component.attach(_shape(piece)[0])
        component.disable_gravity = True
        if i == moving:
            component.kinematic = True
        else:
            component.set_locked_motion_axes([True] * 6)
            component.set_sleep_threshold(0.0)  # a sleeping pair generates no contacts
        entity = sapien.Entity()
        entity.set_name(f"piece{i}")
        entity.add_component(component)
        entity.set_pose(_pose(poses[0] if i == moving else arrangement["fixed_pose"]))
        scene.add_entity(entity)
        components.append(component)
    mover = components[moving]
    out: list[tuple[float, list[float]] | None] = []
    in_order = None
    for k in range(len(poses)):
        mover.set_kinematic_target(_pose(poses[min(k + 1, len(poses) - 1)]))
        scene.step()
        best = None
        for contact in scene.get_contacts():
            first = contact.bodies[0].entity.name == "piece0"
            in_order = first if in_order is None else in_order
            # PhysX's normal points from the contact's second body to its first
            sign = -1.0 if first else 1.0
            for point in contact.points:
                if best is None or point.separation < best[0]:
                    best = (float(point.separation), [sign * float(x) for x in point.normal])
        out.append(best)
    return out, in_order


def run(job: dict[str, Any]) -> dict[str, Any]:
    """The job's full history, and with ``bisect`` the shortest history that still reproduces the
    recorded separation (``recorded_separation`` within ``tolerance``), by bisection.

    A job: ``dt``, ``settings`` (PhysX scene flags), ``pieces`` (two maps: ``kind``, ``vertices``
    or ``size`` and ``local_pose``, ``contact_offset``, ``rest_offset``; in the order the
    recording lists them, which is PhysX's), ``arrangements`` (each: ``moving`` 0 or 1, the
    ``fixed_pose`` of the body that stays, the mover's ``poses``, one per substep, the last the
    report's substep start), ``recorded_separation``, ``tolerance``, ``bisect``. The
    arrangements differ in the frame the pair moves in (the recorded world poses, or the poses
    relative to the other body) and in the order PhysX lists the pieces (by body type, not by
    anything a recording holds), and PhysX's convex distance depends on both: the first
    arrangement that reproduces the report is kept, else the first that lists the pieces as the
    recording does."""
    started = time.perf_counter()
    target, tolerance = float(job["recorded_separation"]), float(job["tolerance"])

    def reproduced(report: tuple[float, list[float]] | None) -> bool:
        return report is not None and abs(report[0] - target) <= tolerance

    tried = []
    for arrangement in job["arrangements"]:
        tried.append((arrangement, *sweep(job, arrangement, len(arrangement["poses"]))))
        if reproduced(tried[-1][1][-1]):
            break
    arrangement, full, in_order = next((t for t in tried if reproduced(t[1][-1])), None) or next(
        (t for t in tried if t[2] is not False), tried[0])
    shortest = None
    if job.get("bisect") and reproduced(full[-1]):
        lo, hi = 1, len(arrangement["poses"])  # hi reproduces; find the smallest that does
        while lo < hi:
            mid = (lo + hi) // 2
            if reproduced(sweep(job, arrangement, mid)[0][-1]):
                hi = mid
            else:
                lo = mid + 1
        shortest = hi
    repaired = (Path(sapien.__file__).resolve().parent.parent / RECORD).exists()
    last = full[-1]
    return {"sapien": sapien.__file__, "physx": physx.version(), "repaired": repaired,
            "hulls_as_recorded": [_shape(piece)[1] for piece in job["pieces"]],
            "moving": int(arrangement["moving"]), "pair_order_as_recorded": in_order,
            "separations": [None if r is None else r[0] for r in full],
            "separation": None if last is None else last[0], "normal": None if last is None else last[1],
            "reproduced": reproduced(last), "shortest_history": shortest,
            "seconds": time.perf_counter() - started}


def main() -> None:
    json.dump(run(json.load(sys.stdin)), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

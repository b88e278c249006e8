"""A pinned two-piece scene in which PhysX 5.3.1 reports a false contact, and one real overlap.

A wedge of the can (a convex piece about 2.5 cm across) sweeps past a block of the basket wall
(2 x 1.2 x 1.5 cm). The wedge is kinematic and follows :data:`SWEEP`, 40 poses 4 ms apart; the
block is dynamic with every axis locked (PhysX makes no contacts between kinematic and static
bodies), so nothing but collision detection runs. At the last pose the pieces are 5.99 mm apart;
stock PhysX 5.3.1 reports them 18 mm inside each other, with the normal turned away from the
true separating direction, and PhysX 5.4's GJK threshold (``simuguard repair-physx``) reports the
true gap. The report needs the pair's history: placed at the last pose directly, or swept over
fewer than 39 of these steps, both engines give the true gap (PhysX's contact manifold starts its
distance search from the previous step's result). The poses and vertices are the exact float32
values found by a random search over sweeps of these two pieces (docs/repaired-physx.md).

:func:`probe` runs it and the real overlap (two 2 cm blocks created 5 mm into each other), in
the SAPIEN this process imported; ``python -m simuguard_gym.physx_repair.gjk_probe`` prints
its result as JSON, so a repaired copy can be checked in a subprocess with ``PYTHONPATH``::

    >>> from simuguard_gym.physx_repair.gjk_probe import probe
    >>> result = probe()                                  # doctest: +SKIP
    >>> result["sweep"]["false_contact"], round(result["sweep"]["true_gap"], 4)   # doctest: +SKIP
    (True, 0.006)
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym.detection.false_contact import GAP_TOLERANCE, posed, separating_axis, signed_gap
from simuguard_gym.physx_repair.onset_pair import scene_with

DT = 0.004
CONTACT_OFFSET, REST_OFFSET = 0.01, 0.0  # SAPIEN's defaults, pinned against process-wide configs

#: The basket wall block, centred on its body's origin (m, float32).
WALL_PIECE = np.array([
    (-0.01, -0.0060000047, -0.0075000003),
    (-0.01, -0.0060000047, 0.0075000003),
    (-0.01, 0.0059999935, -0.0075000003),
    (-0.01, 0.0059999935, 0.0075000003),
    (0.01, -0.0060000047, -0.0075000003),
    (0.01, -0.0060000047, 0.0075000003),
    (0.01, 0.0059999935, -0.0075000003),
    (0.01, 0.0059999935, 0.0075000003),
], np.float32)

#: The can wedge (one of the 22 pieces of envs/can_basket_geometry.py) in its body frame (m).
CAN_PIECE = np.array([
    (0.0, 0.0, -0.025),
    (0.021031339, -0.01351602, -0.025),
    (0.023987325, -0.0070433137, -0.025),
    (0.025, -6.123234e-18, -0.025),
    (0.0, 0.0, 0.0),
    (0.021031339, -0.01351602, 0.0),
    (0.023987325, -0.0070433137, 0.0),
    (0.025, -6.123234e-18, 0.0),
], np.float32)

#: The wedge's poses (x y z, quaternion w x y z), one per substep; the wall block sits at the origin.
SWEEP = np.array([
    (0.01667881, -0.00048918725, 0.023445606, 0.64622676, 0.7385208, -0.18532051, -0.05132545),
    (0.016504288, -0.0001692295, 0.023005605, 0.64470863, 0.74050504, -0.18479428, -0.04305933),
    (0.016329765, 0.00015072823, 0.022565722, 0.6431423, 0.7424339, -0.18425423, -0.034789983),
    (0.016155243, 0.00047068595, 0.02212584, 0.6415277, 0.74430716, -0.18370038, -0.026518032),
    (0.01598072, 0.0007906437, 0.021685839, 0.63986516, 0.7461247, -0.18313278, -0.018244097),
    (0.015806198, 0.0011106015, 0.021245956, 0.63815475, 0.7478864, -0.18255149, -0.009968796),
    (0.015631676, 0.0014307976, 0.020806074, 0.6363965, 0.7495922, -0.18195651, -0.0016927486),
    (0.015457153, 0.0017507554, 0.020366073, 0.6345907, 0.7512418, -0.18134792, 0.006583425),
    (0.015282631, 0.002070713, 0.01992619, 0.63273734, 0.7528352, -0.18072577, 0.014859106),
    (0.0151081085, 0.0023906708, 0.019486308, 0.63083667, 0.75437224, -0.18009008, 0.023133675),
    (0.014933586, 0.0027106286, 0.019046307, 0.6288888, 0.7558528, -0.17944092, 0.031406514),
    (0.014759064, 0.0030305863, 0.018606424, 0.62689376, 0.75727683, -0.17877832, 0.039676998),
    (0.014585495, 0.003350544, 0.018166542, 0.6248519, 0.75864416, -0.17810234, 0.047944516),
    (0.014410973, 0.0036705018, 0.01772666, 0.6227632, 0.75995475, -0.17741303, 0.056208443),
    (0.01423645, 0.0039904593, 0.017286658, 0.62062794, 0.7612084, -0.17671044, 0.06446817),
    (0.014061928, 0.004310417, 0.016846776, 0.6184462, 0.7624051, -0.17599463, 0.07272306),
    (0.013887405, 0.004630613, 0.016406894, 0.61621815, 0.76354474, -0.17526565, 0.080972515),
    (0.013712883, 0.004950571, 0.015966892, 0.613944, 0.7646272, -0.17452355, 0.089215904),
    (0.013538361, 0.0052705286, 0.01552701, 0.61162394, 0.7656525, -0.17376837, 0.09745262),
    (0.013363838, 0.0055904863, 0.015087128, 0.60925806, 0.7666204, -0.1730002, 0.105682045),
    (0.013189316, 0.005910444, 0.014647126, 0.6068466, 0.767531, -0.17221908, 0.11390355),
    (0.013014793, 0.006230402, 0.014207244, 0.60438967, 0.7683841, -0.17142507, 0.122116536),
    (0.012840271, 0.0065503595, 0.013767362, 0.6018875, 0.7691797, -0.17061822, 0.13032039),
    (0.012665749, 0.0068703173, 0.01332736, 0.5993403, 0.7699177, -0.16979861, 0.13851447),
    (0.012491226, 0.007190275, 0.012887478, 0.5967483, 0.7705982, -0.1689663, 0.14669819),
    (0.012316704, 0.0075102327, 0.012447596, 0.59411156, 0.77122086, -0.16812132, 0.15487094),
    (0.012142181, 0.0078301905, 0.012007713, 0.59143037, 0.7717859, -0.16726378, 0.16303208),
    (0.011967659, 0.008150387, 0.011567712, 0.58870494, 0.77229315, -0.1663937, 0.17118104),
    (0.011793137, 0.008470344, 0.01112783, 0.5859354, 0.77274257, -0.16551118, 0.17931718),
    (0.011618614, 0.008790302, 0.010687947, 0.5831221, 0.7731342, -0.16461626, 0.18743989),
    (0.0114450455, 0.00911026, 0.010247946, 0.58026505, 0.7734679, -0.16370903, 0.19554858),
    (0.011270523, 0.009430218, 0.0098080635, 0.5773646, 0.77374375, -0.16278954, 0.20364262),
    (0.011096001, 0.009750175, 0.009368181, 0.5744209, 0.77396166, -0.16185786, 0.21172144),
    (0.010921478, 0.010070133, 0.00892818, 0.5714343, 0.77412164, -0.16091408, 0.2197844),
    (0.010746956, 0.010390091, 0.008488297, 0.56840485, 0.7742237, -0.15995824, 0.2278309),
    (0.0105724335, 0.0107100485, 0.008048415, 0.5653329, 0.7742678, -0.15899044, 0.23586036),
    (0.010397911, 0.011030006, 0.0076084137, 0.5622186, 0.77425396, -0.15801074, 0.24387217),
    (0.010223389, 0.011350202, 0.0071685314, 0.55906224, 0.77418214, -0.1570192, 0.2518657),
    (0.010048866, 0.01167016, 0.006728649, 0.55586404, 0.77405244, -0.15601592, 0.2598404),
    (0.009874344, 0.011990118, 0.006288767, 0.5526242, 0.77386475, -0.15500095, 0.26779565),
], np.float32)

OVERLAP = 0.005  # how deep the real-overlap blocks are created into each other (m)


def _scene() -> sapien.Scene:
    return scene_with(DT, {"enable_enhanced_determinism": True})


def _body(scene: sapien.Scene, name: str, vertices: np.ndarray, pose: np.ndarray, kind: str) -> Any:
    component = physx.PhysxRigidStaticComponent() if kind == "static" else physx.PhysxRigidDynamicComponent()
    shape = physx.PhysxCollisionShapeConvexMesh(vertices, np.ones(3, np.float32), physx.PhysxMaterial(0.6, 0.5, 0.0))
    shape.set_contact_offset(CONTACT_OFFSET)
    shape.set_rest_offset(REST_OFFSET)
    component.attach(shape)
    if kind != "static":
        component.disable_gravity = True
    if kind == "kinematic":
        component.kinematic = True
    elif kind == "locked":
        component.set_locked_motion_axes([True] * 6)
    entity = sapien.Entity()
    entity.set_name(name)
    entity.add_component(component)
    entity.set_pose(sapien.Pose(pose[:3], pose[3:]))
    scene.add_entity(entity)
    return component


def _deepest(scene: sapien.Scene, first: str) -> tuple[float, np.ndarray] | None:
    """The deepest reported point between the two bodies: (separation, normal pointing from the
    body named ``first`` to the other), or None without a contact."""
    best = None
    for contact in scene.get_contacts():
        # PhysX points the normal from the second body of a pair to the first
        sign = -1.0 if contact.bodies[0].entity.name == first else 1.0
        for point in contact.points:
            if best is None or point.separation < best[0]:
                best = (float(point.separation), sign * np.asarray(point.normal, float))
    return best


def sweep() -> dict[str, Any]:
    """Run the pinned sweep; the contact the engine reports at its last pose against the truth.

    ``reported`` holds the deepest separation reported at each pose (None: no contact);
    ``normal_alignment`` is the cosine between the reported normal and the true separating
    direction (both from the wall block to the wedge): -1 is a flipped normal."""
    scene = _scene()
    _body(scene, "wall", WALL_PIECE, np.array([0, 0, 0, 1, 0, 0, 0], np.float32), "locked")
    wedge = _body(scene, "wedge", CAN_PIECE, SWEEP[0], "kinematic")
    reported = []
    for k in range(len(SWEEP)):
        target = SWEEP[min(k + 1, len(SWEEP) - 1)]
        wedge.set_kinematic_target(sapien.Pose(target[:3], target[3:]))
        scene.step()  # contacts of the pose the step began at: SWEEP[k]
        reported.append(_deepest(scene, "wall"))
    wall = posed(WALL_PIECE, np.array([0, 0, 0, 1, 0, 0, 0], np.float32))
    gap, direction = separating_axis(wall, posed(CAN_PIECE, SWEEP[-1]))
    last = reported[-1]
    depth = None if last is None else -last[0]
    return {
        "reported": [None if r is None else r[0] for r in reported],
        "reported_depth": depth,
        "true_gap": gap,
        "normal": None if last is None else last[1].tolist(),
        "normal_alignment": None if last is None else float(last[1] @ direction),
        "false_contact": bool(depth is not None and depth > 0 and gap > GAP_TOLERANCE),
    }


def overlap() -> dict[str, Any]:
    """Two 2 cm blocks created :data:`OVERLAP` into each other: the depth the engine reports."""
    scene = _scene()
    block = np.array([[x, y, z] for x in (-0.01, 0.01) for y in (-0.01, 0.01) for z in (-0.01, 0.01)], np.float32)
    _body(scene, "lower", block, np.array([0, 0, 0, 1, 0, 0, 0], np.float32), "static")
    _body(scene, "upper", block, np.array([0, 0, 0.02 - OVERLAP, 1, 0, 0, 0], np.float32), "dynamic")
    scene.step()
    deepest = _deepest(scene, "lower")
    return {"true_depth": OVERLAP, "reported_depth": None if deepest is None else -deepest[0]}


def survey(sweeps: int = 1000, seed: int = 0, steps: int = 100) -> dict[str, Any]:
    """Random sweeps of the task's pieces past each other: the false contacts reported, as
    ``false_reports`` rows ``[sweep, step, reported depth, true gap]`` (m).

    Each sweep takes a random piece of the can and one of the basket (envs/can_basket_geometry.py),
    both turned at random, and moves the can piece on a straight line with a constant spin
    (0.05-0.3 m/s, up to 6 rad/s, as a placed can moves) past the basket piece, its origin passing
    12-32 mm from the basket piece's centre, for ``steps`` substeps of 4 ms. Every sweep runs in
    the same scene, each in its own cell. Every reported contact at least 0.1 mm deep is checked
    against the pieces' true distance (:func:`~simuguard_gym.detection.false_contact.signed_gap`);
    the pinned :data:`SWEEP` was found by sweeps of this kind (one wedge past one wall block)."""
    from simuguard_gym.envs.can_basket_geometry import basket_pieces, can_pieces

    rng = np.random.default_rng(seed)
    cans = [p.vertices.astype(np.float32) for p in can_pieces()]
    walls = [(p.vertices - p.centroid).astype(np.float32) for p in basket_pieces()]
    scene = _scene()
    cells, movers, paths = [], [], []
    times = (np.arange(steps) - steps / 2) * DT
    for i in range(sweeps):
        origin = np.array([i % 40, i // 40, 1.0]) * (0.3, 0.3, 1.0)
        wall = walls[rng.integers(len(walls))]
        can = cans[rng.integers(len(cans))]
        turn = _unit(rng.normal(size=4))
        _body(scene, f"wall{i}", _rotate(turn, wall), np.concatenate([origin, [1, 0, 0, 0]]).astype(np.float32),
              "locked")
        spin = rng.normal(size=3) * rng.uniform(0, 6) / np.sqrt(3)
        side = _unit(rng.normal(size=3))
        velocity = rng.normal(size=3)
        velocity -= velocity @ side * side
        velocity *= rng.uniform(0.05, 0.3) / np.linalg.norm(velocity)
        closest = origin + side * (0.012 + rng.uniform(0.0, 0.02))
        q0 = _unit(rng.normal(size=4))
        path = np.array([np.concatenate([closest + velocity * t, _unit(_qmul(_qexp(spin * t), q0))]) for t in times],
                        np.float32)
        movers.append(_body(scene, f"can{i}", can, path[0], "kinematic"))
        cells.append((origin, _rotate(turn, wall).astype(float), can.astype(float)))
        paths.append(path)
    found: dict[int, list[tuple[int, float, float]]] = {}  # sweep -> (step, reported depth, true gap)
    for k in range(steps):
        for mover, path in zip(movers, paths):
            target = path[min(k + 1, steps - 1)]
            mover.set_kinematic_target(sapien.Pose(target[:3], target[3:]))
        scene.step()
        for contact in scene.get_contacts():
            depth = -min((p.separation for p in contact.points), default=0.0)
            if depth < 1e-4:
                continue
            i = int(next(b.entity.name[3:] for b in contact.bodies if b.entity.name.startswith("can")))
            origin, wall, can = cells[i]
            gap = signed_gap(wall + origin, posed(can, paths[i][k]))
            if gap > GAP_TOLERANCE:
                found.setdefault(i, []).append((k, depth, gap))
    return {"sapien": sapien.__file__, "sweeps": sweeps, "seed": seed, "steps": steps,
            "false_reports": [[i, k, depth, gap] for i, rows in sorted(found.items()) for k, depth, gap in rows]}


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _qexp(rotation: np.ndarray) -> np.ndarray:
    angle = np.linalg.norm(rotation)
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * rotation / angle])


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return posed(v, np.concatenate([[0, 0, 0], q]))


def probe() -> dict[str, Any]:
    """The sweep and the overlap in the SAPIEN this process imported."""
    return {"sapien": sapien.__file__, "physx": physx.version(), "sweep": sweep(), "overlap": overlap()}


def main(argv: list[str] | None = None) -> None:
    """Print :func:`probe` (or, with ``survey SWEEPS SEED``, :func:`survey`) as one line of JSON;
    run in a subprocess per engine."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["survey"]:
        result = survey(int(argv[1]), int(argv[2]))
    else:
        result = probe()
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

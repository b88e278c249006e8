"""simuguard stress (SimuGuard D.2): PhysX throws overlapping cans, its limits and MuJoCo do not."""

from __future__ import annotations

import numpy as np
import pytest

from simuguard_gym.cli import main
from simuguard_gym.envs.stress import SETTINGS, Setting, draw_poses, physx_available, run_pose, stress


def test_poses_overlap_by_the_requested_depth():
    overlaps = [o for _, _, o in draw_poses(8, (0.01, 0.02), seed=3)]
    assert len(overlaps) == 8 and all(0.01 <= o <= 0.02 for o in overlaps)


def setting(name: str) -> Setting:
    return next(s for s in SETTINGS if s.name.startswith(name))


def test_mujoco_default_contact_throws_almost_nothing():
    (result,) = stress(10, (0.005, 0.03), settings=(setting("MuJoCo, default"),), seed=1)
    assert result.thrown.mean() <= 0.1 and max(result.peak) < 2.0


def test_the_papers_rows_with_its_figures():
    """D.2's seven rows, each with the paper's figures (thrown %, exit speed, distance, removal)."""
    assert [s.name for s in SETTINGS] == [
        "PhysX, default", "PhysX, can mass 100 g (10 g)", "PhysX, solver iterations 32/8 (10/1)",
        "PhysX, depenetration <= 1 m/s", "PhysX, depenetration <= 0.1 m/s", "MuJoCo, default (time constant 20 ms)",
        "MuJoCo, time constant 8 ms"]
    assert [s.paper[0] for s in SETTINGS] == [91, 90, 90, 65, 0, 5, 42]
    assert setting("PhysX, can mass").can_mass == 0.1 and setting("PhysX, solver").solver_iterations == (32, 8)


@pytest.mark.parametrize("geometry", ["boxes", "decomposed"])
def test_poses_overlap_in_either_geometry(geometry):
    (result,) = stress(3, (0.005, 0.03), settings=(setting("MuJoCo, time constant"),), seed=2, geometry=geometry)
    assert len(result.peak) == 3 and all(0.005 <= o <= 0.03 for o in result.overlap)
    assert result.row()["paper"] == {"thrown_pct": 42, "exit_speed": 1.99, "distance_cm": 3.8, "removal_ms": 10.6}


@pytest.mark.skipif(not physx_available(), reason="sapien extra not installed")
def test_the_papers_ordering_of_settings():
    rows = {r.setting.name: r for r in stress(20, (0.005, 0.03), seed=0)}
    thrown = {name: float(r.thrown.mean()) for name, r in rows.items()}
    default, limit1, limit01 = (thrown[setting(name).name] for name in
                                ("PhysX, default", "PhysX, depenetration <= 1", "PhysX, depenetration <= 0.1"))
    assert default >= 0.3 and default > limit1 >= limit01 and limit01 <= 0.05
    assert thrown[setting("MuJoCo, default").name] <= 0.05
    assert np.mean(rows["PhysX, default"].peak) > 3 * np.mean(rows[setting("PhysX, depenetration <= 1").name].peak)
    # more solver iterations throw at least as many cans, and faster (D.2: 90%, 16.78 m/s)
    iterations = rows[setting("PhysX, solver").name]
    assert thrown[iterations.setting.name] >= 0.3 and np.mean(iterations.peak) > np.mean(rows["PhysX, default"].peak)


@pytest.mark.skipif(not physx_available(), reason="sapien extra not installed")
def test_the_settings_reach_physx():
    from simuguard_gym.envs.place_can_basket import can_basket_scene

    _, can = can_basket_scene(np.array([0.0, 0.0, 0.2]), can_mass=0.1, solver_iterations=32, velocity_iterations=8,
                              geometry="decomposed")
    assert can.mass == pytest.approx(0.1) and can.solver_position_iterations == 32
    assert can.solver_velocity_iterations == 8 and len(can.collision_shapes) == 22


def test_cli(capsys):
    assert main(["stress", "--poses", "3", "--json"]) == 0
    assert '"setting": "MuJoCo, default (time constant 20 ms)"' in capsys.readouterr().out
    assert main(["stress", "--poses", "2", "--geometry", "decomposed"]) == 0
    out = capsys.readouterr().out
    assert "(decomposed pieces)" in out and "(42)" in out and "(1.99)" in out  # the paper's figures beside
    assert main(["stress", "--poses", "0"]) == 2


def test_a_setting_of_the_other_engine_is_refused_and_mujoco_takes_the_can_mass():
    with pytest.raises(ValueError, match="depenetration has no meaning for mujoco"):
        Setting("MuJoCo, limited", "mujoco", depenetration=1.0)
    with pytest.raises(ValueError, match="timeconst has no meaning for physx"):
        Setting("PhysX, soft", "physx", timeconst=0.01)
    with pytest.raises(ValueError, match="can_mass must be positive"):
        Setting("PhysX, massless", "physx", can_mass=0.0)
    # A heavier can in MuJoCo: the same pose runs otherwise than with the task's 10 g.
    (position, quaternion, _), = draw_poses(1, (0.005, 0.03), seed=3)
    light = run_pose(Setting("MuJoCo", "mujoco"), position, quaternion)
    heavy = run_pose(Setting("MuJoCo, 100 g", "mujoco", can_mass=0.100), position, quaternion)
    assert light != heavy and all(np.isfinite(light + heavy))

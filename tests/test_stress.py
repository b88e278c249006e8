"""simuguard stress (SimuGuard D.2): PhysX throws overlapping cans, its limits and MuJoCo do not."""

from __future__ import annotations

import numpy as np
import pytest

from simuguard_gym.cli import main
from simuguard_gym.envs.stress import SETTINGS, draw_poses, physx_available, stress


def test_poses_overlap_by_the_requested_depth():
    overlaps = [o for _, _, o in draw_poses(8, (0.01, 0.02), seed=3)]
    assert len(overlaps) == 8 and all(0.01 <= o <= 0.02 for o in overlaps)


def test_mujoco_default_contact_throws_almost_nothing():
    (result,) = stress(10, (0.005, 0.03), settings=(SETTINGS[3],), seed=1)
    assert result.thrown.mean() <= 0.1 and max(result.peak) < 2.0


@pytest.mark.skipif(not physx_available(), reason="sapien extra not installed")
def test_the_papers_ordering_of_settings():
    rows = {r.setting.name: r for r in stress(20, (0.005, 0.03), seed=0)}
    thrown = {name: float(r.thrown.mean()) for name, r in rows.items()}
    default, limit1, limit01 = (thrown[s.name] for s in SETTINGS[:3])
    assert default >= 0.3 and default > limit1 >= limit01 and limit01 <= 0.05
    assert thrown[SETTINGS[3].name] <= 0.05
    assert np.mean(rows[SETTINGS[0].name].peak) > 3 * np.mean(rows[SETTINGS[1].name].peak)


def test_cli(capsys):
    assert main(["stress", "--poses", "3", "--json"]) == 0
    assert '"setting": "MuJoCo, default (time constant 20 ms)"' in capsys.readouterr().out
    assert main(["stress", "--poses", "0"]) == 2

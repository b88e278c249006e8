"""Gymnasium-Robotics: Fetch (mj_step with nstep), a Shadow hand manipulation env, FrankaKitchen
(a robot env inside the task env, equality constraints and no mocap bodies)."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium_robotics")

from families import family, run  # noqa: E402
from matrix import assert_conformant  # noqa: E402


@pytest.mark.parametrize("case", family("Gymnasium-Robotics").cases(), ids=lambda c: c.name)
def test_gymnasium_robotics(case, tmp_path):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

"""Gymnasium's MuJoCo v5 envs, every one, built with gym.make and nothing else."""

from __future__ import annotations

import pytest
from families import family, run
from matrix import assert_conformant


@pytest.mark.parametrize("case", family("Gymnasium MuJoCo").cases(), ids=lambda c: c.name)
def test_gymnasium_mujoco_v5(case, tmp_path):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

"""LeRobot's simulated benchmarks as its users make them: ALOHA (gym-aloha: Insertion, TransferCube;
camera images as observations) and the SO-101 arm (lerobot-env-so101), replayed in a fresh process
with no --env-fn (the registering package is one a recording may name)."""

from __future__ import annotations

import pytest

pytest.importorskip("gym_aloha")

from families import family, run  # noqa: E402
from matrix import assert_conformant  # noqa: E402


@pytest.mark.parametrize("case", family("LeRobot sim").cases(), ids=lambda c: c.name)
def test_lerobot_sim(case, tmp_path, rendering):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

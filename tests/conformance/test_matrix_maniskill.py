"""ManiSkill3 on physx_cpu without a rendering device (headless()), alone and stacked with
ManiSkill's own RecordEpisode in both orders."""

from __future__ import annotations

import pytest

pytest.importorskip("mani_skill")

from families import family, run  # noqa: E402
from matrix import assert_conformant  # noqa: E402


@pytest.mark.parametrize("case", family("ManiSkill3").cases(), ids=lambda c: c.name)
def test_maniskill(case, tmp_path):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

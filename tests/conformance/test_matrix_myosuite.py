"""MyoSuite's tasks with objects or a body on the floor (muscles driving bones), made with
gym.make and replayed in a fresh process."""

from __future__ import annotations

import pytest

pytest.importorskip("myosuite")

from families import family, run  # noqa: E402
from matrix import assert_conformant  # noqa: E402


@pytest.mark.parametrize("case", family("MyoSuite").cases(), ids=lambda c: c.name)
def test_myosuite(case, tmp_path):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

"""dm_control as its users load it (``suite.load``, through attach's BenchmarkEnv) and through
Shimmy's Gymnasium envs (``gym.make("dm_control/...")``), replayed in a fresh process."""

from __future__ import annotations

import pytest

pytest.importorskip("dm_control")

from families import family, run  # noqa: E402
from matrix import assert_conformant, factories_importable  # noqa: E402


@pytest.mark.parametrize("case", family("dm_control (suite.load)").cases(), ids=lambda c: c.name)
def test_dm_control_suite_load(case, tmp_path, monkeypatch):
    factories_importable(monkeypatch)
    assert_conformant(run(case, tmp_path), case.substeps_per_step())


@pytest.mark.parametrize("case", family("dm_control via Shimmy").cases() if family("dm_control via Shimmy").available()
                         else [], ids=lambda c: c.name)
def test_dm_control_through_shimmy(case, tmp_path):
    assert_conformant(run(case, tmp_path), case.substeps_per_step())

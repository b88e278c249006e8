"""What every test of the conformance matrix asserts: simuguard's wrappers on third-party
benchmark envs, built as their users build them (see simuguard_gym.conformance.check_env)."""

from __future__ import annotations

import pytest

from families import HERE


def factories_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make factories in this directory importable by a replay in a fresh process (``--env-fn``)."""
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


def assert_conformant(report, expected_substeps_per_step: int | None = None) -> None:
    """No failed check, and (where the env's substeps per step are known) every recording holds
    steps x substeps-per-step substeps."""
    failures = report.failures()
    assert not failures, f"{report.name}:\n  " + "\n  ".join(failures)
    assert len(report.episodes) == 3 and all(e.steps > 0 for e in report.episodes)
    if expected_substeps_per_step is not None:
        assert [e.recorded_substeps for e in report.episodes] == \
            [e.steps * expected_substeps_per_step for e in report.episodes]

"""robosuite 1.5 as its users build it: GymWrapper(suite.make(task, robots=...)), no registered
id (replays rebuild it through --env-fn)."""

from __future__ import annotations

import pytest
from matrix import assert_conformant, factories_importable

pytest.importorskip("robosuite")

import robosuite_factories  # noqa: E402

from simuguard_gym import detect, load_recording  # noqa: E402
from simuguard_gym.conformance import check_env  # noqa: E402


@pytest.mark.parametrize("task", list(robosuite_factories.TASKS))
def test_robosuite_gym_wrapper(task, tmp_path, monkeypatch):
    factories_importable(monkeypatch)
    report = check_env(robosuite_factories.TASKS_FACTORY[task], tmp_path, episodes=3, steps=40,
                       env_fn=f"robosuite_factories:{task}")
    task_env = robosuite_factories.make(task).env
    assert_conformant(report, int(round(task_env.control_timestep / task_env.model_timestep)))
    if task == "PickPlaceCan":
        # robosuite's clear_objects parks the three unused objects at one point, (10, 10, 10),
        # where they overlap and are thrown apart: real physics, 10 m from the task. The detector
        # confirms those ejections and calls them off stage, never artifacts.
        events = detect(load_recording(report.episodes[0].recording)).events
        parked = {e["body"] for e in events if e["off_stage"] is not None}
        assert {"Milk_main", "Bread_main", "Cereal_main"} <= parked
        assert all(e["off_stage"]["distance"] > 5.0 and not e["artifact"] for e in events if e["body"] in parked)

"""Gymnasium-Robotics: Fetch (mj_step with nstep), a Shadow hand manipulation env, FrankaKitchen
(a robot env inside the task env, equality constraints and no mocap bodies)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from matrix import assert_conformant

gymnasium_robotics = pytest.importorskip("gymnasium_robotics")
gym.register_envs(gymnasium_robotics)

from simuguard_gym.conformance import check_env  # noqa: E402

ENVS = ["FetchPickAndPlace-v4", "FetchPush-v4", "FetchSlide-v4", "HandManipulateBlock-v1", "FrankaKitchen-v1"]


def substeps_per_step(env_id: str) -> int:
    env = gym.make(env_id).unwrapped
    return env.robot_env.frame_skip if hasattr(env, "robot_env") else env.n_substeps


@pytest.mark.parametrize("env_id", ENVS)
def test_gymnasium_robotics(env_id, tmp_path):
    report = check_env(lambda: gym.make(env_id), tmp_path, episodes=3, steps=50)
    assert_conformant(report, substeps_per_step(env_id))

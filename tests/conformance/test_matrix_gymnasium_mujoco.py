"""Gymnasium's MuJoCo v5 envs, every one, built with gym.make and nothing else."""

from __future__ import annotations

import gymnasium as gym
import pytest
from matrix import assert_conformant

from simuguard_gym.conformance import check_env

ENVS = ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5", "InvertedPendulum-v5",
        "InvertedDoublePendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5", "Walker2d-v5"]


@pytest.mark.parametrize("env_id", ENVS)
def test_gymnasium_mujoco_v5(env_id, tmp_path):
    report = check_env(lambda: gym.make(env_id), tmp_path, episodes=3, steps=50)
    assert_conformant(report, gym.make(env_id).unwrapped.frame_skip)

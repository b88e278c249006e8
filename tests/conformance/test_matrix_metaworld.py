"""Meta-World v3 with its own scripted experts: one env instance, 3 episodes in a row, a new task
(goal and, on some tasks, bodies moved in the model) at every reset, as its evaluation runs."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from matrix import assert_conformant

pytest.importorskip("metaworld")

import metaworld  # noqa: E402,F401 - registers Meta-World/MT1
from metaworld.policies import ENV_POLICY_MAP  # noqa: E402

from simuguard_gym.conformance import check_env  # noqa: E402

TASKS = ["pick-place-v3", "basketball-v3", "assembly-v3", "peg-insert-side-v3", "drawer-open-v3", "door-open-v3",
         "bin-picking-v3", "button-press-v3", "hammer-v3", "door-lock-v3", "push-v3", "shelf-place-v3"]
STEPS = 200  # each expert succeeds within this many steps on at least one of the three seeds


@pytest.mark.parametrize("task", TASKS)
def test_metaworld_expert(task, tmp_path):
    warnings.filterwarnings("ignore", module="metaworld")  # its experts warn about clipped actions
    report = check_env(lambda: gym.make("Meta-World/MT1", env_name=task, seed=0, max_episode_steps=STEPS),
                       tmp_path, episodes=3, steps=STEPS, policy=lambda env: ENV_POLICY_MAP[task]().get_action)
    assert_conformant(report, gym.make("Meta-World/MT1", env_name=task, seed=0).unwrapped.frame_skip)
    assert any(e.succeeded for e in report.episodes), f"the {task} expert never succeeded"
    # The model changes at every reset (a new goal, on some tasks moved bodies); the recordings
    # of the later episodes replay only because those changes are recorded and written back.
    assert all(e.replay_exact for e in report.episodes)

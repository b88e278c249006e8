"""ManiSkill3 on physx_cpu without a rendering device (headless()), alone and stacked with
ManiSkill's own RecordEpisode in both orders."""

from __future__ import annotations

import pytest
from matrix import assert_conformant

pytest.importorskip("mani_skill")

from simuguard_gym.engines.sapien import headless  # noqa: E402

headless()

import gymnasium as gym  # noqa: E402
import mani_skill.envs  # noqa: E402,F401 - registers ManiSkill's ids
from mani_skill.utils.wrappers import RecordEpisode  # noqa: E402

from simuguard_gym import ArtifactMonitor, RecordPhysics  # noqa: E402
from simuguard_gym.conformance import check_env  # noqa: E402

TASKS = ["PickCube-v1", "PushCube-v1", "StackCube-v1", "PegInsertionSide-v1", "PlugCharger-v1"]


def orders(trajectories):
    return {
        "alone": lambda env, out: ArtifactMonitor(RecordPhysics(env, out)),
        "inside RecordEpisode": lambda env, out: RecordEpisode(ArtifactMonitor(RecordPhysics(env, out)),
                                                               str(trajectories), save_video=False),
        "around RecordEpisode": lambda env, out: ArtifactMonitor(RecordPhysics(
            RecordEpisode(env, str(trajectories), save_video=False), out)),
    }


@pytest.mark.parametrize("order", ["alone", "inside RecordEpisode", "around RecordEpisode"])
@pytest.mark.parametrize("task", TASKS)
def test_maniskill(task, order, tmp_path):
    make = lambda: gym.make(task, sim_backend="physx_cpu", obs_mode="state")  # noqa: E731
    report = check_env(make, tmp_path / "recordings", episodes=3, steps=30,
                       wrap=orders(tmp_path / "trajectories")[order])
    env = make().unwrapped
    assert_conformant(report, env.sim_freq // env.control_freq)
    if order != "alone":  # ManiSkill's own recorder kept every episode too
        assert list((tmp_path / "trajectories").glob("*.h5"))

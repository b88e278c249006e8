"""A rerun of a Meta-World episode, whose success is only in the info of its step."""

from __future__ import annotations

import warnings

import gymnasium as gym
import mujoco
import pytest

pytest.importorskip("metaworld")

from simuguard_gym import DepenetrationRerun  # noqa: E402


class PuckInsideTheTable(gym.Wrapper):
    """Meta-World pick-place with its puck placed 6 cm into the table at reset, as LIBERO's stored
    initial states place objects: MuJoCo throws it out, a contact artifact."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        base = self.env.unwrapped
        free = next(j for j in range(base.model.njnt) if base.model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE)
        base.data.qpos[base.model.jnt_qposadr[free] + 2] -= 0.06
        mujoco.mj_forward(base.model, base.data)
        return base._get_obs(), info


def make():
    import metaworld  # noqa: F401 - registers Meta-World/MT1

    return PuckInsideTheTable(gym.make("Meta-World/MT1", env_name="pick-place-v3", seed=0, max_episode_steps=200))


def test_the_rerun_of_a_metaworld_episode_is_scored_by_its_info(tmp_path):
    from metaworld.policies import ENV_POLICY_MAP

    warnings.filterwarnings("ignore", module="metaworld")  # its expert warns about clipped actions
    env = DepenetrationRerun(make(), env_fn=make, directory=tmp_path)
    policy = ENV_POLICY_MAP["pick-place-v3"]()
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        obs, _, terminated, truncated, info = env.step(policy.get_action(obs))
        if terminated or truncated:
            break
    env.close()
    ours = info["simuguard"]
    assert ours["errors"] == [] and ours["artifact"]
    found = ours["rerun"]
    assert (found["mode"], found["success_source"], found["prefix_exact"]) == ("actions", "info:success", True)
    assert found["unscored"] is None and isinstance(found["success"], bool)
    assert ours["corrected_success"] is found["success"]
    assert found["changes"] and all(c["before"] != c["after"] for c in found["changes"])

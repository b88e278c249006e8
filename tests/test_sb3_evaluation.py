"""SB3's evaluation with contact artifacts accounted for: evaluate_policy and ArtifactEvalCallback
on a real MuJoCo scene whose box starts inside the floor every episode (an artifact each time)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import artifact_scenes as scenes

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402

from simuguard_gym import ArtifactMonitor, DepenetrationRerun  # noqa: E402
from simuguard_gym.integrations.sb3 import ArtifactEvalCallback, evaluate_policy  # noqa: E402

ACTUATED = '<body name="pusher" pos="0.5 0 0.05"><joint name="slide" type="slide" axis="1 0 0"/>' \
           '<geom type="box" size=".02 .02 .02"/></body>'


class _SuccessIfResting(gym.Wrapper):
    """The env's own success signal: the box ends near where it started (it is thrown, so never)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "success": bool(abs(obs[2]) < 0.05)}


def _env(rerun: bool = False, tmp_path=None):
    xml, _ = scenes.created_inside_floor()
    xml = xml.replace("</worldbody>", ACTUATED + "</worldbody>").replace(
        "<actuator></actuator>", '<actuator><motor joint="slide" gear="1" ctrlrange="-1 1" ctrllimited="true"/></actuator>')
    env = _SuccessIfResting(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP,
                                     max_episode_steps=30))
    return DepenetrationRerun(env, directory=tmp_path) if rerun else ArtifactMonitor(env)


def test_evaluate_policy_scores_flagged_episodes(tmp_path):
    env = _env(rerun=True, tmp_path=tmp_path)
    result = evaluate_policy(PPO("MlpPolicy", env, device="cpu", seed=0), env, n_eval_episodes=3)
    assert result.episodes == 3 and result.artifact_rate == 1.0
    s = result.scores
    assert s.n == 3 and s.flagged == 3 and s.excluded.n == 0
    assert s.lower.value == 0.0 and s.upper.value == 1.0  # every flagged episode fails / passes
    # Every flagged episode was rerun; the rerun's env is rebuilt from the recorded id, which
    # reports no success of the recorded kind (this test's wrapper adds it): unscored, kept as run.
    assert s.reruns_unscored == 3 and s.replay_corrected is None


def test_artifact_eval_callback_logs_the_estimates(tmp_path):
    from stable_baselines3.common.logger import configure

    callback = ArtifactEvalCallback(_env(), n_eval_episodes=2, eval_freq=32, verbose=0)
    model = PPO("MlpPolicy", _env(), n_steps=32, batch_size=32, n_epochs=1, device="cpu", seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(64, callback=callback)
    assert callback.last_evaluation is not None and callback.last_evaluation.artifact_rate == 1.0
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/artifact_rate", "eval/success_rate", "eval/success_rate_excluded", "eval/success_rate_lower",
            "eval/success_rate_upper"} <= set(header)

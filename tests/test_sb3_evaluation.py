"""SB3's evaluation with contact artifacts accounted for: evaluate_policy, evaluate and
ArtifactEvalCallback, drop-ins for SB3's own, on a real MuJoCo scene whose box starts inside the
floor every episode (an artifact each time)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402

from simuguard_gym import ArtifactMonitor, DepenetrationRerun  # noqa: E402
from simuguard_gym.integrations.sb3 import ArtifactEvalCallback, evaluate, evaluate_policy  # noqa: E402

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


def test_evaluate_policy_returns_sb3s_values_and_the_artifact_rate():
    from stable_baselines3.common import evaluation

    env = _env()
    model = PPO("MlpPolicy", env, device="cpu", seed=0)
    theirs = evaluation.evaluate_policy(model, env, n_eval_episodes=3)
    mean_reward, std_reward, artifact_rate = evaluate_policy(model, env, n_eval_episodes=3)
    assert (mean_reward, std_reward) == pytest.approx(theirs) and artifact_rate == 1.0
    rewards, lengths, artifacts = evaluate_policy(model, env, n_eval_episodes=3, return_episode_rewards=True)
    assert len(rewards) == len(lengths) == 3 and artifacts == [True, True, True]


def test_evaluate_scores_flagged_episodes(tmp_path):
    env = _env(rerun=True, tmp_path=tmp_path)
    result = evaluate(PPO("MlpPolicy", env, device="cpu", seed=0), env, n_eval_episodes=3)
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


def _vec(n: int = 1):
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    return VecNormalize(DummyVecEnv([_env for _ in range(n)]), norm_reward=False)


@pytest.mark.parametrize("normalized", [False, True])
def test_artifact_eval_callback_is_sb3s_eval_callback(tmp_path, normalized):
    """Side by side with SB3's own: the same evaluations.npz (plus the artifacts), the same eval
    line, early stopping through callback_on_new_best, VecNormalize synced."""
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    runs = {}
    for kind in (EvalCallback, ArtifactEvalCallback):
        log = tmp_path / kind.__name__
        stop = StopTrainingOnRewardThreshold(reward_threshold=-1e9)  # any evaluation is a new best: stop
        train, evaluate_on = (_vec(), _vec()) if normalized else (_env(), _env())
        callback = kind(evaluate_on, n_eval_episodes=2, eval_freq=32, log_path=str(log),
                        callback_on_new_best=stop, verbose=0)
        model = PPO("MlpPolicy", train, n_steps=32, batch_size=32, n_epochs=1, device="cpu", seed=0)
        model.learn(640, callback=callback)
        runs[kind] = (model.num_timesteps, dict(np.load(log / "evaluations.npz")), callback)
    (steps, theirs, _), (our_steps, ours, callback) = runs[EvalCallback], runs[ArtifactEvalCallback]
    assert our_steps == steps < 640  # the new best stopped both at their first evaluation
    assert set(ours) == set(theirs) | {"artifacts"}
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key])
    assert ours["artifacts"].tolist() == [[True, True]]
    assert callback.last_evaluation.artifact_rate == 1.0 and callback.last_evaluation.episodes == 2


def test_an_audit_of_an_env_without_success_scores_returns(tmp_path, capsys):
    """Pusher reports no success: the audit of an SB3 model trained under VecNormalize scores the
    episodes' returns, with their interval and the artifact rate."""
    import json

    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from simuguard_gym.cli import main

    train = VecNormalize(make_vec_env("Pusher-v5", n_envs=1, seed=0))
    model = PPO("MlpPolicy", train, n_steps=64, batch_size=64, n_epochs=1, device="cpu", seed=0)
    model.learn(64)
    model.save(tmp_path / "model.zip")
    train.save(str(tmp_path / "stats.pkl"))
    out = tmp_path / "run"
    assert main(["audit", "--env", "Pusher-v5", "--episodes", "3", "--sb3", str(tmp_path / "model.zip"),
                 "--vecnormalize", str(tmp_path / "stats.pkl"), "--out", str(out), "--no-videos"]) == 0
    printed = capsys.readouterr().out
    assert "mean return per episode" in printed and "Pusher-v5" in printed, printed
    saved = json.loads((out / "report.json").read_text())
    assert saved["tasks"] == [] and len(saved["returns"]) == 1
    row = saved["returns"][0]
    assert row["task"] == "Pusher-v5" and row["n"] == 3 and row["return_low"] < row["mean_return"] < row["return_high"]
    assert row["artifact_rate"] == 0.0 and (out / "returns.csv").exists()
    assert main(["audit", "--env", "Pusher-v5", "--episodes", "3", "--policy", "x:y", "--vecnormalize",
                 str(tmp_path / "stats.pkl"), "--out", str(tmp_path / "bad")]) == 2
    assert "--vecnormalize goes with --sb3" in capsys.readouterr().err

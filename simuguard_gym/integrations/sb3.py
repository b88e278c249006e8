"""Stable-Baselines3: contact artifacts in the SB3 logger (TensorBoard, CSV, stdout), and an
artifact-aware ``evaluate_policy`` and ``EvalCallback``: the success rate as run and with the
flagged episodes accounted for (SimuGuard Table 1's estimates), beside SB3's mean reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from stable_baselines3.common import evaluation
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback

from simuguard_gym.outcome import success_from_info
from simuguard_gym.scoring.estimates import Episode, Scores, score
from simuguard_gym.wrappers.info_key import INFO_KEY


class ArtifactCallback(BaseCallback):
    """Record, over the episodes finished since the last log, ``simuguard/artifact_rate`` (the
    share of episodes with a contact artifact), ``simuguard/events_per_episode`` and, when
    DepenetrationRerun is on, ``simuguard/corrected_success_rate``. Reads the infos of any
    VecEnv (``DummyVecEnv``, ``SubprocVecEnv``) whose envs are wrapped in ArtifactMonitor.

    Example:
        >>> import gymnasium as gym
        >>> from stable_baselines3 import PPO
        >>> from simuguard_gym import ArtifactMonitor
        >>> from simuguard_gym.integrations.sb3 import ArtifactCallback
        >>> model = PPO("MlpPolicy", ArtifactMonitor(gym.make("Pusher-v5", max_episode_steps=50)), n_steps=64,
        ...             batch_size=64, n_epochs=1, device="cpu")
        >>> _ = model.learn(128, callback=ArtifactCallback())
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._episodes = self._flagged = self._events = 0
        self._corrected: list[bool] = []

    def _on_step(self) -> bool:
        infos: list[dict[str, Any]] = self.locals.get("infos") or []
        dones = self.locals.get("dones")
        for i, info in enumerate(infos):
            ours = info.get(INFO_KEY)
            if ours is None or dones is None or not dones[i]:
                continue
            self._episodes += 1
            self._flagged += bool(ours.get("artifact"))
            self._events += len(ours.get("events") or [])
            if ours.get("corrected_success") is not None:
                self._corrected.append(bool(ours["corrected_success"]))
        return True

    def _on_rollout_end(self) -> None:
        if not self._episodes:
            return
        self.logger.record("simuguard/artifact_rate", self._flagged / self._episodes)
        self.logger.record("simuguard/events_per_episode", self._events / self._episodes)
        if self._corrected:
            self.logger.record("simuguard/corrected_success_rate", sum(self._corrected) / len(self._corrected))
        self._episodes = self._flagged = self._events = 0
        self._corrected = []


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate_policy` measured: SB3's reward statistics, the episodes' outcomes
    scored with their contact artifacts (``scores``: as run, replay-corrected where
    DepenetrationRerun ran, excluding flagged episodes, bounds; None where the env reports no
    success), and the share of episodes with a contact artifact."""

    episodes: int
    mean_reward: float
    std_reward: float
    artifact_rate: float
    scores: Scores | None

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "mean_reward": self.mean_reward, "std_reward": self.std_reward,
                "artifact_rate": self.artifact_rate, "scores": self.scores.to_dict() if self.scores else None}


def evaluate_policy(model: Any, env: Any, n_eval_episodes: int = 10, deterministic: bool = True,
                    **kwargs: Any) -> Evaluation:
    """SB3's ``evaluate_policy`` over an env (or VecEnv) whose envs are wrapped in ArtifactMonitor
    (and DepenetrationRerun for corrected outcomes), with the outcomes scored per episode.

    >>> import gymnasium as gym, simuguard_gym.envs
    >>> from stable_baselines3 import PPO
    >>> from simuguard_gym import ArtifactMonitor
    >>> env = ArtifactMonitor(gym.make("simuguard_gym/DropInBin-v0"))
    >>> result = evaluate_policy(PPO("MlpPolicy", env, device="cpu"), env, n_eval_episodes=2)
    >>> result.episodes, result.artifact_rate, result.scores.n
    (2, 0.0, 2)
    """
    finished: list[dict[str, Any]] = []
    user_callback = kwargs.pop("callback", None)

    def collect(local: dict[str, Any], global_: dict[str, Any]) -> None:
        if local.get("done"):
            finished.append(local.get("info") or {})
        if user_callback is not None:
            user_callback(local, global_)

    rewards, _ = evaluation.evaluate_policy(model, env, n_eval_episodes=n_eval_episodes, deterministic=deterministic,
                                            return_episode_rewards=True, callback=collect, **kwargs)
    episodes = [_episode(info) for info in finished]
    flagged = sum(bool((info.get(INFO_KEY) or {}).get("artifact")) for info in finished)
    scored = [e for e in episodes if e is not None]
    return Evaluation(len(rewards), float(np.mean(rewards)), float(np.std(rewards)),
                      flagged / len(finished) if finished else float("nan"), score(scored) if scored else None)


def _episode(info: dict[str, Any]) -> Episode | None:
    success = success_from_info(info)
    if success is None:
        return None
    ours = info.get(INFO_KEY) or {}
    rerun = ours.get("rerun") or {}
    return Episode(success, bool(ours.get("artifact")), rerun.get("success"), bool(rerun.get("prefix_exact")),
                   rerun_unscored=bool(rerun.get("unscored")))


class ArtifactEvalCallback(EvalCallback):
    """SB3's ``EvalCallback`` that also scores its evaluations with their contact artifacts: logs
    ``eval/success_rate`` as run, ``eval/artifact_rate``, ``eval/success_rate_excluded`` (the
    episodes without an artifact), ``eval/success_rate_corrected`` (where reruns ran) and the
    bounds; ``last_evaluation`` keeps the :class:`Evaluation`. The eval env's envs must be wrapped
    in ArtifactMonitor.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> from stable_baselines3 import PPO
        >>> from simuguard_gym import ArtifactMonitor
        >>> make = lambda: ArtifactMonitor(gym.make("simuguard_gym/DropInBin-v0"))
        >>> callback = ArtifactEvalCallback(make(), n_eval_episodes=2, eval_freq=64, verbose=0)
        >>> _ = PPO("MlpPolicy", make(), n_steps=64, batch_size=64, n_epochs=1, device="cpu").learn(64, callback=callback)
        >>> callback.last_evaluation.episodes
        2
    """

    last_evaluation: Evaluation | None = None

    def _on_step(self) -> bool:
        if not (self.eval_freq > 0 and self.n_calls % self.eval_freq == 0):
            return True
        if self.model.get_vec_normalize_env() is not None:
            return super()._on_step()  # SB3 syncs normalisation first; its own evaluation only
        result = evaluate_policy(self.model, self.eval_env, self.n_eval_episodes, self.deterministic,
                                 render=self.render, warn=self.warn)
        self.last_evaluation = result
        self.logger.record("eval/mean_reward", result.mean_reward)
        self.logger.record("eval/artifact_rate", result.artifact_rate)
        if result.scores is not None:
            s = result.scores
            self.logger.record("eval/success_rate", s.as_run.value)
            self.logger.record("eval/success_rate_excluded", s.excluded.value)
            self.logger.record("eval/success_rate_lower", s.lower.value)
            self.logger.record("eval/success_rate_upper", s.upper.value)
            if s.replay_corrected is not None:
                self.logger.record("eval/success_rate_corrected", s.replay_corrected.value)
        self.last_mean_reward = result.mean_reward
        if result.mean_reward > self.best_mean_reward:
            self.best_mean_reward = result.mean_reward
            if self.best_model_save_path is not None:
                self.model.save(f"{self.best_model_save_path}/best_model")
        self.logger.dump(self.num_timesteps)
        return True

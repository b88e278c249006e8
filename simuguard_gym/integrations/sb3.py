"""Stable-Baselines3: contact artifacts in the SB3 logger (TensorBoard, CSV, stdout), and drop-ins
for SB3's ``evaluate_policy`` and ``EvalCallback`` that add the artifact rate and, where the env
reports success, the success rate as run and with the flagged episodes accounted for (SimuGuard
Table 1's estimates), beside SB3's mean reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
    """What an evaluation measured: SB3's reward statistics, the episodes' outcomes scored with
    their contact artifacts (``scores``: as run, replay-corrected where DepenetrationRerun ran,
    excluding flagged episodes, bounds; None where the env reports no success), and the share of
    episodes with a contact artifact."""

    episodes: int
    mean_reward: float
    std_reward: float
    artifact_rate: float
    scores: Scores | None

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "mean_reward": self.mean_reward, "std_reward": self.std_reward,
                "artifact_rate": self.artifact_rate, "scores": self.scores.to_dict() if self.scores else None}


class _Finished:
    """The infos of the episodes an evaluation finished, and what they say of contact artifacts."""

    def __init__(self) -> None:
        self.infos: list[dict[str, Any]] = []

    def add(self, info: dict[str, Any]) -> None:
        self.infos.append(info)

    @property
    def artifacts(self) -> list[bool]:
        return [bool((info.get(INFO_KEY) or {}).get("artifact")) for info in self.infos]

    @property
    def artifact_rate(self) -> float:
        flags = self.artifacts
        return sum(flags) / len(flags) if flags else float("nan")

    @property
    def scores(self) -> Scores | None:
        """The outcomes scored with their artifacts; None where no episode reports success."""
        scored = [e for e in map(_episode, self.infos) if e is not None]
        return score(scored) if scored else None

    def evaluation(self, mean_reward: float, std_reward: float) -> Evaluation:
        return Evaluation(len(self.infos), mean_reward, std_reward, self.artifact_rate, self.scores)


def evaluate_policy(model: Any, env: Any, n_eval_episodes: int = 10, deterministic: bool = True,
                    render: bool = False, callback: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
                    reward_threshold: float | None = None, return_episode_rewards: bool = False,
                    warn: bool = True) -> tuple[Any, Any, Any]:
    """SB3's ``evaluate_policy``, same arguments and values, with the contact artifacts as one more:
    ``(mean_reward, std_reward, artifact_rate)``, or with ``return_episode_rewards``
    ``(episode_rewards, episode_lengths, episode_artifacts)`` (a bool per episode). The env's
    envs must be wrapped in ArtifactMonitor (its ``info["simuguard"]``); the outcomes scored with
    their artifacts (Table 1's estimates) are :func:`evaluate`'s.

    >>> import gymnasium as gym, simuguard_gym.envs
    >>> from stable_baselines3 import PPO
    >>> from simuguard_gym import ArtifactMonitor
    >>> env = ArtifactMonitor(gym.make("simuguard_gym/DropInBin-v0"))
    >>> mean_reward, std_reward, artifact_rate = evaluate_policy(PPO("MlpPolicy", env, device="cpu"), env,
    ...                                                          n_eval_episodes=2)
    >>> artifact_rate
    0.0
    """
    finished = _Finished()
    rewards, lengths = _evaluate(model, env, n_eval_episodes, deterministic, render, callback, warn, finished)
    if reward_threshold is not None:
        assert float(np.mean(rewards)) > reward_threshold, (
            f"Mean reward below threshold: {float(np.mean(rewards)):.2f} < {reward_threshold:.2f}")
    if return_episode_rewards:
        return rewards, lengths, finished.artifacts
    return float(np.mean(rewards)), float(np.std(rewards)), finished.artifact_rate


def evaluate(model: Any, env: Any, n_eval_episodes: int = 10, deterministic: bool = True,
             **kwargs: Any) -> Evaluation:
    """An :class:`Evaluation`: SB3's reward statistics and the episodes' outcomes scored with their
    contact artifacts (the envs wrapped in ArtifactMonitor, and DepenetrationRerun for corrected
    outcomes).

    >>> import gymnasium as gym, simuguard_gym.envs
    >>> from stable_baselines3 import PPO
    >>> from simuguard_gym import ArtifactMonitor
    >>> env = ArtifactMonitor(gym.make("simuguard_gym/DropInBin-v0"))
    >>> result = evaluate(PPO("MlpPolicy", env, device="cpu"), env, n_eval_episodes=2)
    >>> result.episodes, result.artifact_rate, result.scores.n
    (2, 0.0, 2)
    """
    finished = _Finished()
    rewards, _ = _evaluate(model, env, n_eval_episodes, deterministic, kwargs.pop("render", False),
                           kwargs.pop("callback", None), kwargs.pop("warn", True), finished)
    if kwargs:
        raise TypeError(f"evaluate() got unexpected arguments {sorted(kwargs)}")
    return finished.evaluation(float(np.mean(rewards)), float(np.std(rewards)))


def _evaluate(model: Any, env: Any, n_eval_episodes: int, deterministic: bool, render: bool,
              callback: Callable[[dict[str, Any], dict[str, Any]], None] | None, warn: bool,
              finished: _Finished) -> tuple[list[float], list[int]]:
    def collect(local: dict[str, Any], global_: dict[str, Any]) -> None:
        if local.get("done"):
            finished.add(local.get("info") or {})
        if callback is not None:
            callback(local, global_)

    rewards, lengths = evaluation.evaluate_policy(model, env, n_eval_episodes=n_eval_episodes,
                                                  deterministic=deterministic, render=render,
                                                  return_episode_rewards=True, callback=collect, warn=warn)
    return list(rewards), list(lengths)  # type: ignore[arg-type]


def _episode(info: dict[str, Any]) -> Episode | None:
    success = success_from_info(info)
    if success is None:
        return None
    ours = info.get(INFO_KEY) or {}
    rerun = ours.get("rerun") or {}
    return Episode(success, bool(ours.get("artifact")), rerun.get("success"), bool(rerun.get("prefix_exact")),
                   rerun_unscored=bool(rerun.get("unscored")))


class ArtifactEvalCallback(EvalCallback):
    """SB3's ``EvalCallback`` (same arguments, same evaluations: ``callback_on_new_best``,
    ``callback_after_eval``, ``best_model_save_path``, VecNormalize synced, the eval line), its
    evaluations scored with their contact artifacts too. Besides SB3's ``eval/`` keys it logs
    ``eval/artifact_rate`` and, where the env reports success, ``eval/success_rate`` as run,
    ``eval/success_rate_excluded`` (the episodes without an artifact), ``eval/success_rate_corrected``
    (where reruns ran) and the bounds; ``evaluations.npz`` gains ``artifacts`` (per evaluation, a
    bool per episode); ``last_evaluation`` keeps the :class:`Evaluation`. The eval env's envs
    must be wrapped in ArtifactMonitor.

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> from stable_baselines3 import PPO
        >>> from simuguard_gym import ArtifactMonitor
        >>> make = lambda: ArtifactMonitor(gym.make("simuguard_gym/DropInBin-v0"))
        >>> callback = ArtifactEvalCallback(make(), n_eval_episodes=2, eval_freq=64, verbose=0)
        >>> _ = PPO("MlpPolicy", make(), n_steps=64, batch_size=64, n_epochs=1, device="cpu").learn(64, callback=callback)
        >>> callback.last_evaluation.episodes, callback.last_evaluation.artifact_rate
        (2, 0.0)
    """

    last_evaluation: Evaluation | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evaluations_artifacts: list[list[bool]] = []
        self._finished = _Finished()

    def _log_success_callback(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
        super()._log_success_callback(locals_, globals_)
        if not locals_["done"]:
            return
        self._finished.add(locals_["info"])
        # Recorded as each episode ends: SB3 writes its log out inside the evaluation's step, so
        # the last values are the evaluation's when the line is dumped.
        self.logger.record("eval/artifact_rate", self._finished.artifact_rate)
        s = self._finished.scores
        if s is not None:
            self.logger.record("eval/success_rate", s.as_run.value)
            self.logger.record("eval/success_rate_excluded", s.excluded.value)
            self.logger.record("eval/success_rate_lower", s.lower.value)
            self.logger.record("eval/success_rate_upper", s.upper.value)
            if s.replay_corrected is not None:
                self.logger.record("eval/success_rate_corrected", s.replay_corrected.value)

    def _on_step(self) -> bool:
        evaluating = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
        if evaluating:
            self._finished = _Finished()
        continue_training = super()._on_step()
        if not evaluating:
            return continue_training
        # SB3 keeps an evaluation's rewards only where it writes them (log_path)
        std = float(np.std(self.evaluations_results[-1])) if self.log_path is not None else float("nan")
        self.last_evaluation = self._finished.evaluation(self.last_mean_reward, std)
        if self.verbose >= 1:
            print(f"Contact artifacts in {100 * self._finished.artifact_rate:.1f}% of the episodes")
        if self.log_path is not None:  # SB3's file as SB3 writes it, with the artifacts added
            self.evaluations_artifacts.append(self._finished.artifacts)
            successes = {"successes": self.evaluations_successes} if self._is_success_buffer else {}
            np.savez(self.log_path, timesteps=self.evaluations_timesteps, results=self.evaluations_results,
                     ep_lengths=self.evaluations_length, **successes, artifacts=self.evaluations_artifacts)
        return continue_training

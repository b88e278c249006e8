"""Stable-Baselines3: log contact artifacts to the SB3 logger (TensorBoard, CSV, stdout)."""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

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

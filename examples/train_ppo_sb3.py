"""Train PPO on Ant-v5 with ArtifactMonitor: the monitor watches Ant's floating base (its torso),
an episode ends at a contact artifact (on_artifact="truncate"), and the artifact rate is logged
to TensorBoard/CSV through ArtifactCallback.

To show the truncation acting, one env of the two has a simulator glitch injected: every
``--glitch-every`` episodes its torso is put 13 cm into the floor mid-episode, and MuJoCo's
contact solver throws it out at several m/s (what a solver does to an overlap it is handed).

    python examples/train_ppo_sb3.py --timesteps 20000
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from simuguard_gym import ArtifactMonitor
from simuguard_gym.integrations.sb3 import ArtifactCallback

GLITCH_STEP = 30  # the step of an episode at which the glitch is injected


class TorsoIntoFloor(gym.Wrapper):
    """Every ``every`` episodes, put Ant's torso 13 cm into the floor at step GLITCH_STEP (at rest).
    The monitor confirms the artifact two steps later and truncates the episode there (Ant's own
    health check ends it at that step too: the torso is thrown above its healthy height)."""

    def __init__(self, env: gym.Env, every: int) -> None:
        super().__init__(env)
        self.every, self.episode, self.t = every, -1, 0

    def reset(self, **kwargs: Any) -> Any:
        self.episode, self.t = self.episode + 1, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        self.t += 1
        if self.every and self.episode % self.every == 0 and self.t == GLITCH_STEP:
            data = self.env.unwrapped.data
            data.qpos[2], data.qvel[:] = 0.12, 0.0
        return self.env.step(action)


class Truncations(ArtifactCallback):
    """ArtifactCallback, plus the episodes that ended at the step that confirmed an artifact."""

    ended_at_artifact = 0

    def _on_step(self) -> bool:
        for info, done in zip(self.locals["infos"], self.locals["dones"]):
            if done and (info.get("simuguard") or {}).get("artifact"):
                self.ended_at_artifact += 1
        return super()._on_step()


def make(glitch_every: int) -> gym.Env:
    return ArtifactMonitor(TorsoIntoFloor(gym.make("Ant-v5", max_episode_steps=200), glitch_every),
                           on_artifact="truncate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=20000)
    parser.add_argument("--glitch-every", type=int, default=3, help="inject a glitch every N episodes (0: never)")
    parser.add_argument("--log", default=None, help="log directory (default: a temporary one)")
    args = parser.parse_args()
    log = args.log or tempfile.mkdtemp(prefix="simuguard-ppo-")
    envs = DummyVecEnv([lambda: make(args.glitch_every), lambda: make(0)])
    print("watching:", envs.envs[0].reset(seed=0)[1]["simuguard"]["watching"])  # ['torso']
    model = PPO("MlpPolicy", envs, n_steps=512, batch_size=256, seed=0, device="cpu")
    model.set_logger(configure(log, ["csv", "stdout"]))
    callback = Truncations()
    model.learn(total_timesteps=args.timesteps, callback=callback)
    print(f"episodes ended at a contact artifact: {callback.ended_at_artifact}")
    print(f"training log (simuguard/artifact_rate, simuguard/events_per_episode) in {log}/progress.csv")


if __name__ == "__main__":
    main()

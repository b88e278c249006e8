"""Train PPO with ArtifactMonitor: episodes end at a contact artifact (on_artifact="truncate"), and
the artifact rate is logged to TensorBoard/CSV through ArtifactCallback.

    python examples/train_ppo_sb3.py --timesteps 20000
"""

from __future__ import annotations

import argparse
import tempfile

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from simuguard_gym import ArtifactMonitor
from simuguard_gym.integrations.sb3 import ArtifactCallback


def make() -> gym.Env:
    return ArtifactMonitor(gym.make("Pusher-v5", max_episode_steps=100), on_artifact="truncate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=20000)
    parser.add_argument("--log", default=None, help="log directory (default: a temporary one)")
    args = parser.parse_args()
    log = args.log or tempfile.mkdtemp(prefix="simuguard-ppo-")
    model = PPO("MlpPolicy", DummyVecEnv([make, make]), n_steps=512, batch_size=256, seed=0, device="cpu")
    model.set_logger(configure(log, ["csv", "stdout"]))
    model.learn(total_timesteps=args.timesteps, callback=ArtifactCallback())
    print(f"training log (simuguard/artifact_rate, simuguard/events_per_episode) in {log}/progress.csv")


if __name__ == "__main__":
    main()

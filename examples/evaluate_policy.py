"""Evaluate a policy on a built-in task with recording, artifact detection and reruns, then score it.

    python examples/evaluate_policy.py                 # the scripted placement, 20 seeds
    python examples/evaluate_policy.py --episodes 5 --out /tmp/eval
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile

import gymnasium as gym

import simuguard_gym.envs  # noqa: F401 - registers the built-in tasks
from simuguard_gym import DepenetrationRerun
from simuguard_gym.scoring.report import format_table, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    physx = importlib.util.find_spec("sapien") is not None
    env_id = "simuguard_gym/PlaceCanBasket-v0" if physx else "simuguard_gym/PlaceCanBasket-MuJoCo-v0"
    out = args.out or tempfile.mkdtemp(prefix="simuguard-eval-")

    # The policy: any callable from observation to action. Here, the task's own scripted gripper.
    env = DepenetrationRerun(gym.make(env_id), directory=out)  # the engine's default intervention
    policy = lambda obs: env.unwrapped.expert_action()  # noqa: E731

    for seed in range(100, 100 + args.episodes):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        ours = info["simuguard"]
        print(f"seed {seed}: success {info['success']}, contact artifact {ours['artifact']}, "
              f"corrected success {ours['corrected_success']}")
    env.close()
    rows, _ = report(out)
    print(format_table(rows))
    print(f"recordings in {out}")


if __name__ == "__main__":
    main()

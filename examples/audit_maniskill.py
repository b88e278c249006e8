"""Record and monitor ManiSkill3's PickCube-v1 on the CPU backend without a rendering device,
then replay an episode bit for bit.

    pip install torch==2.13.0 "simuguard-gym[maniskill]"
    python examples/audit_maniskill.py --episodes 3
"""

from __future__ import annotations

import argparse
import tempfile

import gymnasium as gym

from simuguard_gym.engines.sapien import headless

headless()  # no rendering device: inert render materials, and ManiSkill's render_backend "none" by default

import mani_skill.envs  # noqa: E402,F401 - registers ManiSkill's ids

from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording, replay  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="simuguard-maniskill-")
    env = ArtifactMonitor(RecordPhysics(gym.make("PickCube-v1", sim_backend="physx_cpu", obs_mode="state"), out))
    for seed in range(args.episodes):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        for _ in range(args.steps):
            *_, info = env.step(env.action_space.sample())
        print(f"seed {seed}: contact artifact {info['simuguard']['artifact']}")
    env.close()
    result = replay(load_recording(env.env.paths[0]))
    print(f"replay of the first episode: {result.message}")


if __name__ == "__main__":
    main()

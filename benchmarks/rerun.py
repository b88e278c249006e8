"""How fast a replay (and a rerun) runs, against the recorded run's own time.

The unwrapped env runs an episode of scripted actions (timed: physics plus the env's own step
code, no policy inference); the same episode recorded is then replayed with verification (all
recorded columns, or the states only: fingerprints, bodies and writes), and rerun with one
parameter changed. Replays include the env's reset (SAPIEN rebuilds its scene there), not its
construction. Target (issue "DepenetrationRerun"): a replay without policy
inference runs at least as fast as the recorded physics (ratio <= 1).

    python benchmarks/rerun.py
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording, replay
from simuguard_gym.replay import rerun

CASES = {
    "PlaceCanBasket-MuJoCo-v0": ("simuguard_gym/PlaceCanBasket-MuJoCo-v0", "timeconst=0.02", 116),
    "PlaceCanBasket-v0 (SAPIEN)": ("simuguard_gym/PlaceCanBasket-v0", "depenetration=1.0", 116),
}


def episode(env: gym.Env, seed: int) -> float:
    env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(env.spec.max_episode_steps):
        env.step(env.unwrapped.expert_action())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| episode | recorded run (s) | replay, all columns (s) | / run | replay, states (s) | / run "
          "| rerun, switched at start (s) | / run |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (env_id, change, seed) in CASES.items():
        try:
            plain = gym.make(env_id)
        except Exception as error:  # noqa: BLE001 - an engine extra that is not installed
            print(f"| {name} | skipped: {error} | | | | |")
            continue
        run = min(episode(plain, seed) for _ in range(args.repeats))
        directory = tempfile.mkdtemp(prefix="simuguard-bench-")
        recorded = ArtifactMonitor(RecordPhysics(gym.make(env_id), directory))
        episode(recorded, seed)
        recorded.close()
        rec = load_recording(recorded.env.paths[-1])
        replays, light, reruns = [], [], []
        for _ in range(args.repeats):
            # Each replay gets an env built beforehand: building (compiling the model) is not replay.
            for times, call in ((replays, lambda env: replay(rec, env_fn=lambda: env)),
                                (light, lambda env: replay(rec, env_fn=lambda: env, verify="states")),
                                (reruns, lambda env: rerun(rec, change, switch="start", env_fn=lambda: env))):
                env = gym.make(env_id)
                start = time.perf_counter()
                call(env)
                times.append(time.perf_counter() - start)
        print(f"| {name} | {run:.3f} | {min(replays):.3f} | {min(replays) / run:.2f} | {min(light):.3f} "
              f"| {min(light) / run:.2f} | {min(reruns):.3f} | {min(reruns) / run:.2f} |", flush=True)


if __name__ == "__main__":
    main()

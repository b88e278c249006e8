"""What detection costs: the online monitor per substep and monitored object, and the offline pass.

Online: the same seeded actions through the plain env and through ArtifactMonitor in the same
process, in ``--repeats`` pairs of episodes run side by side, step by step
(``timing.interleaved_runs``), medians over the pairs (``timing.paired_cost``); the added time
per substep is divided by the number of monitored objects. Offline: ``detect()`` over a recorded
episode (file already loaded), in object-substeps per second. Targets (issue "ArtifactMonitor"):
<= 10 us per substep per monitored object online, >= 1,000,000 object-substeps per second offline
on one core.

    python benchmarks/detector.py
    python benchmarks/detector.py --steps 100 --repeats 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Callable

import gymnasium as gym
import numpy as np

import simuguard_gym.envs  # noqa: F401
from scenes import pile_scene
from timing import copies_in_use, interleaved_runs, paired_cost, timed_run
from simuguard_gym import ArtifactMonitor, RecordPhysics, detect, load_recording


def candidates() -> dict[str, Callable[[], gym.Env]]:
    def scene(n: int) -> Callable[[], gym.Env]:
        return lambda: gym.make("simuguard_gym/MujocoScene-v0", xml=pile_scene(n), max_episode_steps=10**6)

    envs = {f"raw, {n} objects": scene(n) for n in (1, 6, 40)}
    try:
        import robosuite  # noqa: F401

        envs["robosuite Lift (lite)"] = lambda: gym.make("simuguard_gym/Robosuite-v0", env_name="Lift",
                                                         lite_physics=True, horizon=10**6)
    except Exception:  # noqa: BLE001 - robosuite extra absent (mujoco >= 3.10)
        pass
    return envs


def online(make: Callable[[], gym.Env], steps: int, repeats: int) -> dict[str, float]:
    plain, monitored = make(), ArtifactMonitor(make())
    plain.action_space.seed(0)
    actions = np.array([plain.action_space.sample() for _ in range(steps)])
    timed_run(plain, actions[:20], 0)  # warm caches (and robosuite's numba)
    timed_run(monitored, actions[:20], 0)
    off, on = [], []
    for r in range(repeats):
        plain_s, monitored_s = interleaved_runs(plain, monitored, actions, r, end=monitored.tap.drain)
        off.append(plain_s)
        on.append(monitored_s)
    substeps = monitored.detector.substeps
    objects = int(monitored.detector.monitored.sum())
    plain.close()
    monitored.close()
    plain_s, added_s, fraction = paired_cost(off, on)
    added = added_s / substeps
    return {"objects": objects, "step_us": plain_s / substeps * 1e6, "added_us": added * 1e6,
            "per_object_us": added * 1e6 / max(objects, 1), "added_pct": 100 * fraction}


def offline(n_objects: int, steps: int, repeats: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="simuguard-bench-")
    env = RecordPhysics(gym.make("simuguard_gym/MujocoScene-v0", xml=pile_scene(n_objects),
                                 max_episode_steps=10**6), directory)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(steps):
        env.step(env.action_space.sample())
    env.close()
    rec = load_recording(env.paths[-1])
    best = min(_timed_detect(rec) for _ in range(repeats))
    objects = int((np.array(rec.bodies.roles)[rec.tracked] == "object").sum())
    return {"objects": objects, "substeps": rec.substeps, "seconds": best,
            "rate": objects * rec.substeps / best}


def _timed_detect(rec) -> float:
    start = time.perf_counter()
    detect(rec)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="env steps per timed online run")
    parser.add_argument("--repeats", type=int, default=9, help="pairs of timed online runs; offline: best of")
    parser.add_argument("--offline-steps", type=int, default=4000, help="env steps of the offline episode")
    parser.add_argument("--only", help="substring of the env names to run online (skips the offline pass)")
    args = parser.parse_args()
    import mujoco

    print(f"mujoco {mujoco.__version__}, {args.steps} env steps, online: medians over {args.repeats} pairs, "
          f"offline: best of as many; {copies_in_use()}\n")
    print("online (ArtifactMonitor vs the unwrapped env)\n")
    print("| env | monitored objects | unwrapped us / substep | added us / substep | added % "
          "| added us / substep / object |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in candidates().items():
        if args.only and args.only not in name:
            continue
        r = online(make, args.steps, args.repeats)
        print(f"| {name} | {r['objects']} | {r['step_us']:.1f} | {r['added_us']:.1f} | {r['added_pct']:.1f} "
              f"| {r['per_object_us']:.2f} |", flush=True)
    if args.only:
        return
    print("\noffline (detect() on a loaded recording, one core)\n")
    print("| scene | objects | substeps | seconds | object-substeps / s |")
    print("|---|---:|---:|---:|---:|")
    for n in (6, 40):
        r = offline(n, args.offline_steps, args.repeats)
        print(f"| raw, {n} objects | {r['objects']} | {r['substeps']} | {r['seconds']:.3f} | {r['rate']:,.0f} |",
              flush=True)


if __name__ == "__main__":
    main()

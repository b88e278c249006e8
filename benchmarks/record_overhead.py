"""What RecordPhysics costs: added time per substep and bytes per substep, against the unwrapped env.

Each row runs the same seeded actions through the plain env and through RecordPhysics in the same
process, in ``--repeats`` pairs of episodes run side by side, step by step
(``timing.interleaved_runs``), and reports medians over the pairs (``timing.paired_cost``): a slow
spell of a shared machine hits both runs of a pair, down to single steps. A timed run is one
episode of about ``--substeps`` substeps (10,000 by default: LIBERO's episodes run
7,500-15,000; scripted envs run their own length) and includes the work left at its end
(decoding and writing the last chunk), not the file's footer and rename.
Targets (issue "Foundation"): <= 20 us added per substep with up to 20 contacts, <= 10% added
wall time on robosuite Lift ``env.step``, <= 300 bytes per substep on Lift. PhysX's own figures
(against ManiSkill's RecordEpisode, the monitor on top, the floor of SAPIEN's contact API) are
``benchmarks/physx_capture.py``'s.

    python benchmarks/record_overhead.py            # every env available in this environment
    python benchmarks/record_overhead.py --substeps 2000 --repeats 2
    python benchmarks/record_overhead.py --only Lift --no-helper-process   # all encoding in-process
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Callable

import gymnasium as gym
import numpy as np

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import RecordPhysics, load_recording
from scenes import pile_scene
from timing import copies_in_use, interleaved_runs, paired_cost, timed_run


def candidates() -> dict[str, Callable[[], gym.Env]]:
    envs: dict[str, Callable[[], gym.Env]] = {
        "Pusher-v5": lambda: gym.make("Pusher-v5", max_episode_steps=10**6),
        "Ant-v5": lambda: gym.make("Ant-v5", terminate_when_unhealthy=False, max_episode_steps=10**6),
        "raw, 6 objects (~18 contact points)": lambda: gym.make("simuguard_gym/MujocoScene-v0", xml=pile_scene(6),
                                                          max_episode_steps=10**6),
        "raw, 40 objects (>=50 contact points)": lambda: gym.make("simuguard_gym/MujocoScene-v0", xml=pile_scene(40),
                                                            max_episode_steps=10**6),
    }
    try:
        import robosuite  # noqa: F401

        envs["robosuite Lift (lite)"] = lambda: gym.make("simuguard_gym/Robosuite-v0", env_name="Lift",
                                                         lite_physics=True, horizon=10**6)
        envs["robosuite Lift (full)"] = lambda: gym.make("simuguard_gym/Robosuite-v0", env_name="Lift",
                                                         lite_physics=False, horizon=10**6)
    except Exception:  # noqa: BLE001 - robosuite extra absent (mujoco >= 3.10)
        pass
    try:
        import sapien  # noqa: F401

        envs["SAPIEN PlaceCanBasket-v0 (one can, scripted)"] = lambda: gym.make("simuguard_gym/PlaceCanBasket-v0")
    except Exception:  # noqa: BLE001 - sapien extra absent
        pass
    envs["MuJoCo PlaceCanBasket-MuJoCo-v0 (scripted)"] = lambda: gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0")
    return envs


def scripted_actions(env: gym.Env, steps: int) -> np.ndarray | None:
    """The env's own scripted actions (seed 0) when it has them, else None."""
    if not hasattr(env.unwrapped, "expert_action"):
        return None
    env.reset(seed=0)
    actions = []
    for _ in range(steps):
        actions.append(env.unwrapped.expert_action())
        env.step(actions[-1])
    return np.array(actions)


def measure(make: Callable[[], gym.Env], substeps: int, repeats: int, helper_process: bool = True) -> dict[str, float]:
    plain = make()
    directory = tempfile.mkdtemp(prefix="simuguard-bench-")
    recorded = RecordPhysics(make(), directory, helper_process=helper_process)
    recorded.reset(seed=0)
    recorded.step(recorded.action_space.sample())
    steps = -(-substeps // recorded.recorder.substep)  # env steps for about `substeps` substeps
    plain.action_space.seed(0)
    scripted = scripted_actions(plain, min(steps, getattr(plain.spec, "max_episode_steps", None) or steps))
    actions = scripted if scripted is not None else np.array([plain.action_space.sample() for _ in range(steps)])
    timed_run(plain, actions[: min(20, steps)], 0)  # warm caches and JIT (robosuite's numba)
    timed_run(recorded, actions[: min(20, steps)], 0)
    off, on = [], []
    for r in range(repeats):
        seed = 0 if scripted is not None else r  # a scripted run replays its own seed
        plain_s, recorded_s = interleaved_runs(plain, recorded, actions, seed, end=recorded.recorder.finish)
        off.append(plain_s)
        on.append(recorded_s)
    recorded.reset(seed=99)  # closes the last measured episode
    recorded.close()
    plain.close()
    for path in recorded.paths:  # a figure is only worth something if every recording is whole
        whole = load_recording(path)
        if whole.errors or whole.footer.get("errors"):
            raise RuntimeError(f"{path} recorded errors: {whole.errors[:1]}")
    rec = load_recording(recorded.paths[-1])
    substeps = rec.substeps
    points = float(rec.columns["contact_points"].astype(float).sum()) if "contact_points" in rec.columns else 0.0
    plain_s, added_s, fraction = paired_cost(off, on)
    size = os.path.getsize(recorded.paths[-1])
    return {"substeps": substeps, "step_us": plain_s / substeps * 1e6, "added_us": added_s / substeps * 1e6,
            "added_pct": 100 * fraction, "bytes": size / substeps, "contacts": points / substeps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--substeps", type=int, default=10_000, help="physics substeps per timed run (an episode)")
    parser.add_argument("--repeats", type=int, default=9, help="pairs of timed runs")
    parser.add_argument("--only", help="substring of the env names to run")
    parser.add_argument("--no-helper-process", action="store_true",
                        help="encode every chunk in the env's process (RecordPhysics(helper_process=False))")
    args = parser.parse_args()
    import mujoco

    print(f"mujoco {mujoco.__version__}, episodes of ~{args.substeps} substeps, medians over {args.repeats} pairs"
          f"{', no helper process' if args.no_helper_process else ''}; {copies_in_use()}\n")
    print("| env | contact points / substep | unwrapped us / substep | added us / substep | added % "
          "| bytes / substep |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in candidates().items():
        if args.only and args.only not in name:
            continue
        r = measure(make, args.substeps, args.repeats, helper_process=not args.no_helper_process)
        print(f"| {name} | {r['contacts']:.1f} | {r['step_us']:.1f} | {r['added_us']:.1f} | {r['added_pct']:.1f} "
              f"| {r['bytes']:.0f} |", flush=True)


if __name__ == "__main__":
    main()

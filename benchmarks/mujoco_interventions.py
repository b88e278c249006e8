"""Which single MuJoCo change a rerun should make by default: measured on artifacts and negatives.

A rerun's intervention must remove MuJoCo's contact artifacts (objects pushed out of a
penetration) without rescuing genuine failures or changing what real physics did. For each
candidate this script reruns, in MuJoCo:

- squeeze: ``PlaceCanBasket-MuJoCo-v0`` with PhysX's finger squeeze (``pad_kp=800,
  pad_timeconst=0.02``), the expert policy; every flagged episode is rerun from 0.1 s before its
  first artifact: flagged failures that become successes, and the can's peak speed after the
  switch (median over flagged episodes; recorded in brackets);
- genuine failures: the same env (MuJoCo's own contact) with the expert's placement shifted 15 cm
  off the basket (every episode a failure, none flagged), rerun from the first substep: how many
  the change turns into successes (it must be none);
- negatives: ``DropInBin-v0`` and ``ShoveBasket-v0`` (real impacts and pushes, not artifacts),
  rerun from the first substep: episodes whose outcome changes (it must be none) and the largest
  change of the object's peak speed;
- successes: the same env with MuJoCo's own contact and the expert (successes, none flagged),
  rerun from the first substep: how many stay successes (all must);
- Meta-World (where it is installed): its scripted experts' successful episodes of four
  grasping and pushing tasks, rerun from the first substep through the env's step: how many
  stay successes (all must: a change that softens grasps loses them);
- LIBERO (where the libero extra is installed): ``libero_object`` initial states whose objects
  start inside the floor, the 15 settle steps of LIBERO's evaluation, rerun from the first
  substep: the fastest ejected object's peak speed (the detector's candidate speed is 0.5 m/s).

    python benchmarks/mujoco_interventions.py            # every family that is installed
    python benchmarks/mujoco_interventions.py --seeds 10 --only squeeze negatives
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile

import gymnasium as gym
import numpy as np

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording
from simuguard_gym.replay import rerun

CANDIDATES = ("timeconst=0.05", "timeconst=0.1", "timeconst=0.2", "dampratio=2", "dampratio=4", "dampratio=8", "damping=5")
SQUEEZE = {"pad_kp": 800.0, "pad_timeconst": 0.02}


def record(env_id: str, kwargs: dict, seeds: range, act, steps: int | None = None) -> list:
    """Record one episode per seed (monitor on), each in a fresh env; the recordings."""
    directory = tempfile.mkdtemp(prefix="simuguard-study-")
    out = []
    for seed in seeds:
        env = ArtifactMonitor(RecordPhysics(gym.make(env_id, **kwargs), directory))
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        for _ in range(steps or env.spec.max_episode_steps):
            obs, _, terminated, truncated, info = env.step(act(env, obs))
            if terminated or truncated:
                break
        env.close()  # finishes a recording cut by `steps`
        out.append(load_recording(env.env.paths[-1]))
    return out


def expert(env: gym.Env, obs: np.ndarray) -> np.ndarray:
    return env.unwrapped.expert_action()


def flagged(rec) -> bool:
    return any(e.get("artifact") for e in rec.footer["detector"]["events"])


def squeeze(seeds: range) -> dict[str, str]:
    recs = [r for r in record("simuguard_gym/PlaceCanBasket-MuJoCo-v0", SQUEEZE, seeds,
                              expert) if flagged(r)]
    failures = [r for r in recs if r.footer["success"] is False]
    out = {}
    for change in CANDIDATES:
        results = [attempt(r, change) for r in recs]
        if None in results:
            out[change] = "refused (nothing to change)"
            continue
        rescued = sum(bool(x.prefix_exact and x.success) for x, r in zip(results, recs) if r.footer["success"] is False)
        peaks = [x.peak_speed for x in results if x.peak_speed is not None]
        recorded = [x.recorded_peak_speed for x in results if x.recorded_peak_speed is not None]
        out[change] = (f"{rescued} of {len(failures)} failures succeed; peak {np.median(peaks):.2f} "
                       f"({np.median(recorded):.2f}) m/s; {sum(x.prefix_exact for x in results)}/{len(results)} exact")
    return out


def missed_placement(env: gym.Env, obs: np.ndarray) -> np.ndarray:
    """The expert's placement shifted 15 cm off the basket over its first 40 steps: a miss."""
    action = env.unwrapped.expert_action().copy()
    action[0] += 0.15 * min(env.unwrapped._step_count / 40, 1.0)
    return action


def genuine(seeds: range) -> dict[str, str]:
    recs = [r for r in record("simuguard_gym/PlaceCanBasket-MuJoCo-v0", {}, seeds, missed_placement)
            if r.footer["success"] is False and not flagged(r)]
    out = {}
    for change in CANDIDATES:
        results = [x for x in (attempt(r, change, switch="start") for r in recs) if x is not None]
        out[change] = (f"{sum(bool(x.success) for x in results)} of {len(results)} rescued"
                       + (f" ({len(recs) - len(results)} refused)" if len(results) < len(recs) else ""))
    return out


def attempt(rec, change: str, **kwargs):
    """The rerun, or None where the change is refused (it would write nothing on this scene)."""
    try:
        return rerun(rec, change, **kwargs)
    except ValueError:
        return None


def kept(recs: list, change: str) -> str:
    """How many recorded successes a rerun from the first substep keeps."""
    results = [x for x in (attempt(r, change, switch="start") for r in recs) if x is not None]
    refused = len(recs) - len(results)
    return f"{sum(bool(x.success) for x in results)} of {len(results)} kept" + (f" ({refused} refused)" if refused else "")


def successes(seeds: range) -> dict[str, str]:
    recs = [r for r in record("simuguard_gym/PlaceCanBasket-MuJoCo-v0", {}, seeds, expert)
            if r.footer["success"] is True and not flagged(r)]
    return {change: kept(recs, change) for change in CANDIDATES}


def metaworld(seeds: range) -> dict[str, str]:
    import metaworld  # noqa: F401 - registers Meta-World/MT1
    from metaworld.policies import ENV_POLICY_MAP

    recs = []
    for task in ("pick-place-v3", "push-v3", "bin-picking-v3", "assembly-v3"):
        policy = ENV_POLICY_MAP[task]()
        recs += [r for r in record("Meta-World/MT1", {"env_name": task, "seed": 0, "max_episode_steps": 200}, seeds,
                                   lambda env, obs: policy.get_action(obs)) if r.footer["success"] is True]
    return {change: kept(recs, change) for change in CANDIDATES}


def negatives(seeds: range) -> dict[str, str]:
    recs = []
    for env_id in ("simuguard_gym/DropInBin-v0", "simuguard_gym/ShoveBasket-v0"):
        recs += record(env_id, {}, seeds, expert)
    out = {}
    for change in CANDIDATES:
        changed, worst, refused = 0, 0.0, 0
        for r in recs:
            result = attempt(r, change, switch="start")
            if result is None:  # e.g. a body whose geoms use MuJoCo's direct solref: nothing to change
                refused += 1
                continue
            changed += result.success != r.footer["success"]
            worst = max(worst, *(abs(p["rerun"] - p["recorded"]) for p in result.peaks.values()))
        out[change] = (f"{changed} of {len(recs) - refused} outcomes change; peak speeds move by up to {worst:.2f} m/s"
                       + (f"; refused on {refused}" if refused else ""))
    return out


def libero(states: int) -> dict[str, str]:
    from simuguard_gym.envs.libero_task import NOOP

    recs = []
    for task in range(10):
        for k in range(states):
            recs += record("simuguard_gym/Libero-v0", {"suite": "libero_object", "task_id": task, "init_state": k},
                           range(k, k + 1), lambda env, obs: NOOP, steps=15)
    recs = [r for r in recs if flagged(r)]
    out = {}
    for change in CANDIDATES:
        results = [attempt(r, change, switch="start") for r in recs]
        if None in results:
            out[change] = "refused (nothing to change)"
            continue
        ejected = [(x, {e["body"] for e in r.footer["detector"]["events"] if e["artifact"]}) for x, r in zip(results, recs)]
        recorded = max(x.peaks[b]["recorded"] for x, bodies in ejected for b in bodies)
        peak = max(x.peaks[b]["rerun"] for x, bodies in ejected for b in bodies)
        out[change] = (f"fastest ejected object {peak:.2f} ({recorded:.2f}) m/s over {len(results)} states; "
                       f"{sum(x.prefix_exact for x in results)}/{len(results)} exact")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--libero-states", type=int, default=1, help="initial states per libero_object task")
    parser.add_argument("--only", nargs="*", choices=("squeeze", "genuine", "successes", "negatives", "libero",
                                                      "metaworld"))
    args = parser.parse_args()
    families = {"squeeze": lambda: squeeze(range(args.seeds)), "genuine": lambda: genuine(range(args.seeds)),
                "successes": lambda: successes(range(args.seeds)),
                "negatives": lambda: negatives(range(args.seeds // 2)),
                "libero": lambda: libero(args.libero_states), "metaworld": lambda: metaworld(range(args.seeds // 4))}
    for family, package in (("libero", "libero"), ("metaworld", "metaworld")):
        if importlib.util.find_spec(package) is None:
            families.pop(family)
    chosen = [f for f in families if not args.only or f in args.only]
    columns = {family: families[family]() for family in chosen}
    print("| intervention | " + " | ".join(chosen) + " |")
    print("|---|" + "---|" * len(chosen))
    for change in CANDIDATES:
        print(f"| `{change}` | " + " | ".join(columns[f][change] for f in chosen) + " |")


if __name__ == "__main__":
    main()

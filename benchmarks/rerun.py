"""How fast a replay (and a rerun) runs: against the recorded physics' own duration (simulated
time: a ratio below 1 replays faster than the physics it recorded), and against the wall time of
the recorded run.

The unwrapped env runs an episode of scripted actions (timed: physics plus the env's own step
code, no policy inference); the same episode recorded is then replayed with verification (all
recorded columns, or the states only: fingerprints, bodies and writes), and rerun with one
parameter changed (the engine's default intervention, from the first substep), driven substep by
substep (the paper's rerun) and through the env's own step. Replays include the env's reset
(SAPIEN rebuilds its scene there), not its construction. Target (issue "DepenetrationRerun"): a replay without policy inference runs at
least as fast as the recorded physics (replay time / simulated time <= 1).

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
from simuguard_gym.replay.interventions import DEFAULTS

# Each engine's default intervention (what an audit reruns with).
CASES = {
    "PlaceCanBasket-MuJoCo-v0": ("simuguard_gym/PlaceCanBasket-MuJoCo-v0", DEFAULTS["mujoco"], 116),
    "PlaceCanBasket-v0 (SAPIEN)": ("simuguard_gym/PlaceCanBasket-v0", DEFAULTS["sapien-physx"], 116),
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
    print("| episode | simulated (s) | recorded run, wall (s) | replay, all columns (s) | / simulated | / run "
          "| replay, states (s) | / simulated | / run | rerun by substeps (s) | / simulated | / run "
          "| rerun by actions (s) | / simulated | / run |")
    print("|---|" + "---:|" * 15)
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
        replays, light, by_substeps, by_actions = [], [], [], []
        for _ in range(args.repeats):
            # Each replay gets an env built beforehand: building (compiling the model) is not replay.
            for times, call in ((replays, lambda env: replay(rec, env_fn=lambda: env)),
                                (light, lambda env: replay(rec, env_fn=lambda: env, verify="states")),
                                (by_substeps, lambda env: rerun(rec, change, switch="start", env_fn=lambda: env,
                                                                mode="substeps")),
                                (by_actions, lambda env: rerun(rec, change, switch="start", env_fn=lambda: env,
                                                               mode="actions"))):
                env = gym.make(env_id)
                start = time.perf_counter()
                call(env)
                times.append(time.perf_counter() - start)
        simulated = rec.substeps * rec.substep_dt
        cells = [f"{simulated:.2f}", f"{run:.3f}"]
        for times in (replays, light, by_substeps, by_actions):
            best = min(times)
            cells += [f"{best:.3f}", f"{best / simulated:.3f}", f"{best / run:.2f}"]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

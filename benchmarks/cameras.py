"""LIBERO with cameras rendered on the CPU: what rendering costs against the physics, and what
recording and monitoring add on top, as ratios measured in one run.

One LIBERO task (LIBERO's own OffScreenRenderEnv, as its evaluation builds it) steps the same
actions in three set-ups, in interleaved rounds (medians over rounds): no camera observations
(physics and robosuite's step code), two 128 px cameras (agentview and the wrist, rendered by
MuJoCo through EGL, on Mesa's software driver where there is no GPU), and the same with
RecordPhysics and ArtifactMonitor attached (simuguard_gym.attach). No policy inference is timed.
Target (issue "Policy evaluation as LIBERO, robosuite and RoboTwin harnesses run it"): recording
and monitoring add at most 5% to a step with cameras on.

    python benchmarks/cameras.py            # needs the libero extra
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import tempfile
import time

import numpy as np

from simuguard_gym import ArtifactMonitor, RecordPhysics, attach
from simuguard_gym.envs.libero_task import NOOP, SETTLE_STEPS, import_libero, offscreen_env


def seconds_per_step(env, init_state, actions) -> float:
    env.seed(0)
    env.reset()
    env.set_init_state(init_state)
    for _ in range(SETTLE_STEPS):
        env.step(NOOP)
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    return (time.perf_counter() - start) / len(actions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="libero_object")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round (after the settle steps)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=128, help="camera height and width")
    args = parser.parse_args()
    import_libero()
    from libero.libero import benchmark

    init_state = benchmark.get_benchmark_dict()[args.suite]().get_task_init_states(args.task)[0]
    make = functools.partial(offscreen_env, suite=args.suite, task_id=args.task, camera_heights=args.size,
                             camera_widths=args.size)
    out = tempfile.mkdtemp()
    envs = {
        "no cameras": make(use_camera_obs=False),
        "2 cameras": make(),
        "2 cameras, recorded and monitored": attach(make(), lambda e: RecordPhysics(e, out), ArtifactMonitor,
                                                    env_fn=make),
    }
    actions = np.clip(np.random.default_rng(0).normal(0, 0.3, (args.steps, 7)), -1, 1)
    times: dict[str, list[float]] = {name: [] for name in envs}
    # robosuite draws into whatever EGL context is current and a collected old render context
    # releases it (docs/compatibility.md): no collection while timing, so all three draw the same.
    gc.collect()
    gc.disable()
    try:
        for _ in range(args.rounds):
            for name, env in envs.items():
                times[name].append(seconds_per_step(env, init_state, actions))
    finally:
        gc.enable()
        for env in envs.values():
            env.close()
    median = {name: statistics.median(t) for name, t in times.items()}
    base, cams, wrapped = median["no cameras"], median["2 cameras"], median["2 cameras, recorded and monitored"]
    print(f"LIBERO {args.suite} task {args.task}, {args.steps} steps x {args.rounds} rounds, "
          f"{args.size} px cameras (medians)")
    print("| set-up | ms per step | / no cameras | / 2 cameras |")
    print("|---|---|---|---|")
    for name, value in median.items():
        print(f"| {name} | {1000 * value:.1f} | {value / base:.2f} | {value / cams:.3f} |")
    print(f"rendering two cameras: +{100 * (cams / base - 1):.0f}% on the physics step; recording and monitoring "
          f"with cameras on: {100 * (wrapped / cams - 1):+.1f}% (target: at most +5%)")


if __name__ == "__main__":
    main()

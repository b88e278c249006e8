"""What recording and monitoring cost on PhysX (SAPIEN 3.0.3, CPU), against the plain env and, on
ManiSkill, against ManiSkill's own ``RecordEpisode``, all in one run.

Every variant of an env gets the same actions and steps in turn, step by step, in ``--rounds``
episodes (the order rotating every step), so a slow spell of a shared machine hits them all; the
table gives medians over the rounds of each variant's time per substep and of its ratio to the
plain env's. Variants: the plain env; ``RecordPhysics`` (every substep, with contacts);
``ArtifactMonitor(RecordPhysics(...))``; on ManiSkill ``RecordEpisode`` (env state per control
step, no contacts, no video). A timed episode includes the work left at its end (the last chunk
a recorder decodes, the batches a monitor deferred).

It also prints the floor of any capture through SAPIEN's Python API, timed alone over the same
episode: ``scene.get_contacts()`` and one attribute read per contact point; and which contact
reader the adapter used (the C reader, or SAPIEN's Python API). Targets (issue "Recording and
monitoring on PhysX at a cost users leave on"): PlaceCanBasket-v0 RecordPhysics <= 2.0x, the
monitor on top <= +20%; PickCube-v1 RecordPhysics <= RecordEpisode's ratio, monitor <= 1.5x.

    python benchmarks/physx_capture.py                 # needs the sapien and maniskill extras
    python benchmarks/physx_capture.py --rounds 3 --only PickCube
    python benchmarks/physx_capture.py --profile PlaceCan   # cProfile of the monitored env instead
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from typing import Any, Callable

import gymnasium as gym
import numpy as np

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording
from simuguard_gym.engines.base import adapter_for
from simuguard_gym.engines.sapien import headless
from timing import copies_in_use


def envs() -> dict[str, tuple[Callable[[], gym.Env], bool]]:
    """name -> (make, is ManiSkill)."""
    found: dict[str, tuple[Callable[[], gym.Env], bool]] = {
        "PlaceCanBasket-v0 (SAPIEN, one can, scripted)": (lambda: gym.make("simuguard_gym/PlaceCanBasket-v0"), False)}
    try:
        import mani_skill.envs  # noqa: F401
    except ImportError:
        return found
    found["ManiSkill PickCube-v1 (physx_cpu, random actions)"] = (
        lambda: gym.make("PickCube-v1", sim_backend="physx_cpu", obs_mode="state", max_episode_steps=10**6), True)
    return found


def actions_for(env: gym.Env, steps: int) -> np.ndarray:
    """The env's scripted actions (seed 0) where it has them, else seeded random ones."""
    if hasattr(env.unwrapped, "expert_action"):
        env.reset(seed=0)
        out = []
        for _ in range(env.spec.max_episode_steps):
            out.append(env.unwrapped.expert_action())
            env.step(out[-1])
        return np.array(out)
    env.action_space.seed(0)
    return np.array([env.action_space.sample() for _ in range(steps)])


def variants(make: Callable[[], gym.Env], maniskill: bool, directory: str) -> dict[str, tuple[gym.Env, Callable]]:
    """name -> (env, the work left at an episode's end)."""
    out: dict[str, tuple[gym.Env, Callable]] = {"plain": (make(), lambda: None)}
    recorded = RecordPhysics(make(), directory + "/recorded")
    out["RecordPhysics"] = (recorded, recorded.recorder.finish)
    monitored = ArtifactMonitor(RecordPhysics(make(), directory + "/monitored"))

    def monitored_end() -> None:
        monitored.tap.drain()
        monitored.env.recorder.finish()

    out["ArtifactMonitor(RecordPhysics)"] = (monitored, monitored_end)
    if maniskill:
        from mani_skill.utils.wrappers import RecordEpisode

        episode = RecordEpisode(make(), directory + "/record_episode", save_video=False, save_on_reset=True)
        out["RecordEpisode (ManiSkill)"] = (episode, lambda: None)
    return out


def run_round(envs_: dict[str, tuple[gym.Env, Callable]], actions: np.ndarray, seed: int) -> dict[str, float]:
    names = list(envs_)
    for name in names:
        envs_[name][0].reset(seed=seed)
    spent = dict.fromkeys(names, 0.0)
    clock = time.perf_counter
    for k, action in enumerate(actions):
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            envs_[name][0].step(action)
            spent[name] += clock() - start
    for name in names:
        start = clock()
        envs_[name][1]()
        spent[name] += clock() - start
    return spent


class ContactReadFloor:
    """A substep listener timing the least a capture through SAPIEN's Python API costs:
    ``scene.get_contacts()`` and one attribute read per contact point."""

    needs_before = False

    def __init__(self, system: Any) -> None:
        self.system = system
        self.seconds, self.substeps, self.points = 0.0, 0, 0

    def before_substep(self, phase: str) -> None:
        pass

    def after_substep(self) -> None:
        start = time.perf_counter()
        for contact in self.system.get_contacts():
            for point in contact.points:
                point.separation
                self.points += 1
        self.seconds += time.perf_counter() - start
        self.substeps += 1

    def hook_failed(self, where: str, error: BaseException) -> None:
        raise error


def floor(make: Callable[[], gym.Env], actions: np.ndarray) -> tuple[float, float]:
    """(us per substep, points per substep) of :class:`ContactReadFloor` over the episode."""
    env = make()
    env.reset(seed=0)
    adapter = adapter_for(env)
    listener = ContactReadFloor(adapter._system)
    adapter.hooks.add(listener)
    for action in actions:
        env.step(action)
    adapter.hooks.remove(listener)
    env.close()
    return listener.seconds / listener.substeps * 1e6, listener.points / listener.substeps


def measure(name: str, make: Callable[[], gym.Env], maniskill: bool, rounds: int, steps: int) -> None:
    probe = make()
    actions = actions_for(probe, steps)
    probe.close()
    directory = tempfile.mkdtemp(prefix="simuguard-physx-bench-")
    built = variants(make, maniskill, directory)
    run_round(built, actions[:10], 0)  # warm up
    times = [run_round(built, actions, 0) for _ in range(rounds)]
    recorded = built["RecordPhysics"][0]
    reader = adapter_for(recorded).contact_reader
    for env, _ in built.values():
        env.reset(seed=99)  # ends the last timed episode
        env.close()
    rec = load_recording(recorded.paths[-1])
    if rec.errors or rec.footer.get("errors"):
        raise RuntimeError(f"{rec.path} recorded errors: {rec.errors[:1]}")
    substeps = rec.substeps
    points = float(rec.columns["contact_points"].astype(float).sum()) / substeps if "contact_points" in rec.columns else 0
    plain = np.array([t["plain"] for t in times])
    print(f"\n{name}: {len(actions)} steps, {substeps} substeps, {points:.1f} contact points of tracked bodies "
          f"per substep, contact reader: {reader}, medians over {rounds} rounds\n")
    print("| variant | us / substep | ratio to plain |")
    print("|---|---:|---:|")
    for variant in built:
        spent = np.array([t[variant] for t in times])
        print(f"| {variant} | {np.median(spent) / substeps * 1e6:.1f} | {np.median(spent / plain):.2f} |")
    floor_us, floor_points = floor(make, actions)
    plain_us = np.median(plain) / substeps * 1e6
    print(f"\nfloor: scene.get_contacts() and one attribute read per contact point, alone: {floor_us:.0f} us per "
          f"substep ({floor_points:.0f} points, speculative ones included; {floor_us / plain_us:.2f}x the plain substep)")


def profile(make: Callable[[], gym.Env], steps: int) -> None:
    env = ArtifactMonitor(RecordPhysics(make(), tempfile.mkdtemp(prefix="simuguard-physx-profile-")))
    actions = actions_for(make(), steps)
    env.reset(seed=0)
    profiler = cProfile.Profile()
    for seed in range(3):
        env.reset(seed=seed)
        profiler.enable()
        for action in actions:
            env.step(action)
        profiler.disable()
    env.close()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="timed episodes per env (all variants side by side)")
    parser.add_argument("--steps", type=int, default=200, help="env steps of an env without scripted actions")
    parser.add_argument("--only", help="substring of the env names to run")
    parser.add_argument("--profile", metavar="NAME", help="profile the monitored env matching NAME instead")
    args = parser.parse_args()
    headless()
    import sapien

    print(f"sapien {sapien.__version__}; {copies_in_use()}")
    for name, (make, maniskill) in envs().items():
        if args.profile:
            if args.profile in name:
                profile(make, args.steps)
        elif not args.only or args.only in name:
            measure(name, make, maniskill, args.rounds, args.steps)


if __name__ == "__main__":
    main()

"""What the monitor reports on runs that hold no contact artifact: random actions on every
Gymnasium MuJoCo v5 env (and, where installed, Meta-World's scripted experts, MyoSuite's object
and locomotion tasks and LeRobot's ALOHA tasks under random actions).

Each env runs ``--episodes`` episodes of random actions (seeds from ``--seed-base``; actions from
the action space seeded alike) under ``ArtifactMonitor``. Printed per env: what it watches, the
ejection events (artifacts, and events that the later stages explained), and the flags by kind.
A clean run should report no artifact; any printed is a false alarm to look at.

    python benchmarks/clean_runs.py --episodes 20 --seed-base 1000
    python benchmarks/clean_runs.py --only Ant Hopper --episodes 50
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from simuguard_gym import ArtifactMonitor

GYMNASIUM_V5 = ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
                "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5",
                "Walker2d-v5")
METAWORLD = ("pick-place-v3", "drawer-open-v3", "door-open-v3", "push-v3", "window-open-v3", "button-press-v3")
#: MyoSuite's tasks with a free object or a body on the floor (the others are a hand or an arm alone).
MYOSUITE = ("myoHandObjHoldRandom-v0", "myoHandReorient8-v0", "myoChallengeDieReorientP1-v0",
            "myoChallengeRelocateP1-v0", "myoChallengeBaodingP1-v1", "myoLegWalk-v0")
#: LeRobot's simulated ALOHA benchmark (gym-aloha).
ALOHA = ("gym_aloha/AlohaInsertion-v0", "gym_aloha/AlohaTransferCube-v0")


def cases(only: list[str] | None) -> dict[str, tuple[Callable[[], gym.Env], Callable[[gym.Env], Any] | None]]:
    found: dict[str, tuple[Callable[[], gym.Env], Callable[[gym.Env], Any] | None]] = {
        name: (lambda name=name: gym.make(name, **_whole_episodes(name)), None) for name in GYMNASIUM_V5}
    if importlib.util.find_spec("metaworld") is not None:
        import metaworld  # noqa: F401 - registers Meta-World/MT1
        from metaworld.policies import ENV_POLICY_MAP

        warnings.filterwarnings("ignore", module="metaworld")
        for task in METAWORLD:
            found[f"Meta-World {task} (expert)"] = (
                lambda task=task: gym.make("Meta-World/MT1", env_name=task),
                lambda env, task=task: ENV_POLICY_MAP[task]().get_action)
    if importlib.util.find_spec("myosuite") is not None:
        import myosuite  # noqa: F401 - registers the myo* envs

        warnings.filterwarnings("ignore", module="myosuite")
        for name in MYOSUITE:
            found[f"MyoSuite {name}"] = (lambda name=name: gym.make(name), None)
    if importlib.util.find_spec("gym_aloha") is not None:
        import gym_aloha  # noqa: F401 - registers gym_aloha/*

        for name in ALOHA:
            found[f"ALOHA {name.split('/')[1]}"] = (lambda name=name: gym.make(name), None)
    if only:
        found = {k: v for k, v in found.items() if any(o in k for o in only)}
    return found


def _whole_episodes(name: str) -> dict[str, Any]:
    """Locomotion envs run on after a fall (their ``terminate_when_unhealthy=False``): a fallen
    robot flailing on the floor is the hardest clean run for a monitor that watches its base."""
    spec = gym.spec(name)
    return {"terminate_when_unhealthy": False} if "Standup" not in name and name.split("-")[0] in (
        "Ant", "Hopper", "Humanoid", "Walker2d") and spec is not None else {}


def survey(make: Callable[[], gym.Env], expert: Callable[[gym.Env], Any] | None, episodes: int,
           seed_base: int) -> dict[str, Any]:
    env = ArtifactMonitor(make())
    act = expert(env) if expert is not None else None
    counts: dict[str, Any] = {"steps": 0, "artifacts": [], "explained": collections.Counter(), "flags": collections.Counter(),
                              "errors": 0, "watching": None}
    env.action_space.seed(seed_base)
    for episode in range(episodes):
        obs, info = env.reset(seed=seed_base + episode)
        counts["watching"] = info["simuguard"]["watching"]
        terminated = truncated = False
        while not (terminated or truncated):  # the env's own time limit ends every episode
            action = act(obs) if act is not None else env.action_space.sample()
            obs, _, terminated, truncated, info = env.step(action)
            counts["steps"] += 1
        detector = env.detector  # finished at the episode's end: every event decided
        assert detector is not None and detector.finished
        for event in detector.events:
            if event["artifact"]:
                counts["artifacts"].append((seed_base + episode, event["body"], round(event["peak_speed"], 2)))
            else:  # by each stage that explains it (an event may be explained by several)
                counts["explained"].update(stage for stage in ("gravity", "carrier", "gain") if not event[stage]["kept"])
                counts["explained"]["events"] += 1
        counts["flags"].update(f["kind"] for f in detector.flags)
        counts["errors"] += len(info["simuguard"]["errors"])
    env.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed-base", type=int, default=1000)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    for name, (make, expert) in cases(args.only).items():
        c = survey(make, expert, args.episodes, args.seed_base)
        flags = ", ".join(f"{kind} {n}" for kind, n in sorted(c["flags"].items())) or "none"
        print(f"{name:<34} watching {','.join(c['watching']) or '-':<10} {c['steps']:>7} steps  "
              f"artifacts {len(c['artifacts'])}  explained events {c['explained']['events']} (gravity {c['explained']['gravity']}, "
              f"carrier {c['explained']['carrier']}, gain {c['explained']['gain']})  flags (all episodes): {flags}"
              f"  errors {c['errors']}", flush=True)
        for seed, body, speed in c["artifacts"]:
            print(f"    artifact: seed {seed}, {body} at {speed} m/s")


if __name__ == "__main__":
    main()

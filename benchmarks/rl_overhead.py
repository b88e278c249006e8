"""What simuguard costs an RL training loop, beside the tools such loops already run.

Every env runs in each configuration at once: plain, Gymnasium's ``RecordEpisodeStatistics``,
SB3's ``Monitor`` (where stable-baselines3 is installed), ``ArtifactMonitor``, ``RecordPhysics``
and both. At every step each configuration steps its own copy of the env with the same seeded
random action, in a random order drawn anew at every step (none stepping twice in a row: see
step_orders), so that a slow spell of a shared machine hits all of them (the trajectories are
identical: the wrappers change nothing). Reported:

- per env.step in steady state: the median over rounds of each configuration's mean step time over
  the plain env's (the resets, the step after each and the steps that end an episode left out: the
  step after a reset runs on caches the reset's work displaced, and is timed with it below);
- per episode, the fixed cost: the added time of an episode of one step (a reset and a step),
  median over 200 (what a recorder's file and a monitor's episode start cost);
- the whole loop: every step and reset of the rounds, over the plain env's (the env's own episode
  lengths: what the two figures above leave out, such as the end of a long episode);
- with ``--ppo``: SB3 PPO's training fps on Ant-v5 with ArtifactMonitor over plain, 1 and 4 envs.

Targets (issue "RL training loops"): ArtifactMonitor <= 1.05x per step, both wrappers <= 1.3x; per
episode <= 0.5 ms (monitor) and <= 2 ms (recorder); PPO fps with the monitor >= 0.95x plain.

    python benchmarks/rl_overhead.py                        # the 11 Gymnasium MuJoCo v5 envs (+ Meta-World,
                                                            # PointMaze where installed)
    python benchmarks/rl_overhead.py --only HalfCheetah-v5 --steps 3000 --rounds 7
    python benchmarks/rl_overhead.py --ppo                  # SB3 PPO fps (stable-baselines3 extra)
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from typing import Callable

import gymnasium as gym
import numpy as np

from simuguard_gym import ArtifactMonitor, RecordPhysics

GYMNASIUM_V5 = ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5",
                "InvertedDoublePendulum-v5", "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5",
                "Walker2d-v5")
TARGETS = {"ArtifactMonitor": (1.05, 0.5), "RecordPhysics": (None, 2.0), "both": (1.3, None)}


def env_factories(only: list[str] | None) -> dict[str, Callable[[], gym.Env]]:
    envs: dict[str, Callable[[], gym.Env]] = {name: (lambda name=name: gym.make(name)) for name in GYMNASIUM_V5}
    if importlib.util.find_spec("metaworld") is not None:
        import metaworld  # noqa: F401 - registers Meta-World/MT1

        envs["Meta-World pick-place-v3"] = lambda: gym.make("Meta-World/MT1", env_name="pick-place-v3")
    if importlib.util.find_spec("gymnasium_robotics") is not None:
        import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)
        envs["PointMaze_UMaze-v3"] = lambda: gym.make("PointMaze_UMaze-v3")
    if only:
        envs = {k: v for k, v in envs.items() if any(o in k for o in only)}
    return envs


def wrappers(directory: str) -> dict[str, Callable[[gym.Env], gym.Env]]:
    found: dict[str, Callable[[gym.Env], gym.Env]] = {
        "plain": lambda env: env,
        # a key of its own: Meta-World's MT1 envs already record their statistics under "episode"
        "RecordEpisodeStatistics": lambda env: gym.wrappers.RecordEpisodeStatistics(env, stats_key="statistics"),
    }
    if importlib.util.find_spec("stable_baselines3") is not None:
        from stable_baselines3.common.monitor import Monitor

        found["SB3 Monitor"] = Monitor
    found["ArtifactMonitor"] = ArtifactMonitor
    found["RecordPhysics"] = lambda env: RecordPhysics(env, tempfile.mkdtemp(dir=directory))
    found["both"] = lambda env: ArtifactMonitor(RecordPhysics(env, tempfile.mkdtemp(dir=directory)))
    return found


def step_orders(n: int, count: int, seed: int) -> list[list[int]]:
    """The order in which ``n`` configurations step, for each of ``count`` steps: a random
    permutation, never starting with the configuration the one before ended with. An env stepped
    right after itself finds its memory in cache, and one stepped after the others finds it
    displaced; drawn so, every configuration steps after the same mix of the others. (An order
    that alternates forward and back gives the first and the last an immediate repeat every other
    step: the plain env, the ratios' denominator, and the last configuration.)"""
    rng = np.random.default_rng(seed)
    orders: list[list[int]] = []
    last = -1
    for _ in range(count):
        order = rng.permutation(n)
        if order[0] == last:
            order = np.roll(order, -1)
        orders.append(order.tolist())
        last = orders[-1][-1]
    return orders


def measure(make: Callable[[], gym.Env], configs: dict[str, Callable[[gym.Env], gym.Env]], steps: int,
            rounds: int, seed: int = 0, episodes: int = 200) -> dict[str, dict[str, float]]:
    """Per configuration: ``step``, the median over rounds of its mean step time over the plain
    env's in steady state (the resets, the first step after each and the steps that end an
    episode left out: a wrapper's reset displaces the caches the next step's physics reads, a
    cost of the episode, timed in ``episode_ms``),
    ``episode_ms``, the median added time of an episode of one step (a reset and a step;
    RecordPhysics writes the file of each at the next reset): the fixed cost of an episode, and
    ``loop``, the median over rounds of the whole loop's time (every step and reset) over the
    plain env's: what a training loop pays, episode ends of the env's own length included (a
    recorder encodes an episode's last chunk as it ends)."""
    names = list(configs)
    envs = [configs[name](make()) for name in names]
    space = envs[0].action_space
    space.seed(seed)
    actions = [space.sample() for _ in range(steps)]
    clock = time.perf_counter_ns
    for env in envs:
        env.reset(seed=seed)
    ratios: dict[str, list[float]] = {name: [] for name in names}
    loop_ratios: dict[str, list[float]] = {name: [] for name in names}
    plain_step: list[float] = []
    fresh = [True] * len(envs)  # the next step is the first of an episode
    orders = step_orders(len(envs), len(actions) * (rounds + 1) + episodes + 10, seed)
    for round_ in range(rounds + 1):  # the first round warms up (imports, first episodes, allocations)
        spent, counted, loop = np.zeros(len(envs)), np.zeros(len(envs)), np.zeros(len(envs))
        for k, action in enumerate(actions):
            for i in orders[round_ * len(actions) + k]:
                start = clock()
                _, _, terminated, truncated, _ = envs[i].step(action)
                took = clock() - start
                loop[i] += took
                if terminated or truncated:
                    start = clock()
                    envs[i].reset()
                    loop[i] += clock() - start
                    fresh[i] = True
                elif fresh[i]:
                    fresh[i] = False
                else:
                    spent[i] += took
                    counted[i] += 1
        if round_:
            per_step = spent / counted
            plain_step.append(per_step[0])
            for name, value, whole in zip(names, per_step, loop):
                ratios[name].append(value / per_step[0])
                loop_ratios[name].append(whole / loop[0])
    added: dict[str, list[float]] = {name: [] for name in names}
    plain_episode: list[float] = []
    for k in range(episodes + 10):  # one-step episodes, the first ten to warm up
        times = np.zeros(len(envs))
        for i in orders[-episodes - 10 + k]:
            start = clock()
            envs[i].reset(seed=seed + k)
            envs[i].step(actions[k % len(actions)])
            times[i] = clock() - start
        if k >= 10:
            plain_episode.append(times[0])
            for name, value in zip(names, times):
                added[name].append((value - times[0]) / 1e6)
    for env in envs:
        env.close()
    return {name: {"step": float(np.median(ratios[name])), "episode_ms": float(np.median(added[name])),
                   "loop": float(np.median(loop_ratios[name])),
                   "plain_step_us": float(np.median(plain_step)) / 1e3,
                   "plain_episode_ms": float(np.median(plain_episode)) / 1e6} for name in names}


def ppo_fps(n_envs: int, timesteps: int, rounds: int) -> float:
    """Median over rounds of SB3 PPO's fps on Ant-v5 with ArtifactMonitor, over plain. The two
    models train in turn, one rollout (and its update) each, so that a slow spell of a shared
    machine hits both: each round sums each model's time over ``timesteps`` steps."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # torch's threads compete with the envs for a small machine's cores: noise
    n_steps = 256

    def model(monitor: bool) -> PPO:
        env = make_vec_env("Ant-v5", n_envs=n_envs, seed=0, wrapper_class=ArtifactMonitor if monitor else None)
        return PPO("MlpPolicy", env, n_steps=n_steps, batch_size=256, n_epochs=1, device="cpu", seed=0)

    ratios = []
    for _ in range(rounds):
        models = {False: model(False), True: model(True)}
        took = {False: 0.0, True: 0.0}
        rollout = n_steps * n_envs
        for k in range(max(1, timesteps // rollout)):
            for monitor in ((False, True) if k % 2 == 0 else (True, False)):
                start = time.perf_counter()
                models[monitor].learn(rollout, reset_num_timesteps=False)
                took[monitor] += time.perf_counter() - start
        for trained in models.values():
            trained.get_env().close()
        ratios.append(took[False] / took[True])  # fps monitored / fps plain: the same steps each
    return float(np.median(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="envs whose name contains this (repeatable)")
    parser.add_argument("--steps", type=int, default=2000, help="steps per round and configuration (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after one warm-up round (default 5)")
    parser.add_argument("--ppo", action="store_true", help="SB3 PPO fps on Ant-v5 with the monitor, 1 and 4 envs")
    parser.add_argument("--ppo-steps", type=int, default=4096, help="PPO timesteps per run (default 4096)")
    args = parser.parse_args()
    if args.ppo:
        for n in (1, 4):
            print(f"SB3 PPO Ant-v5, {n} env{'s' if n > 1 else ''}: fps with ArtifactMonitor / plain = "
                  f"{ppo_fps(n, args.ppo_steps, args.rounds):.3f} (target >= 0.95)", flush=True)
        return
    misses = []
    with tempfile.TemporaryDirectory() as directory:
        configs = wrappers(directory)
        columns = [name for name in configs if name != "plain"]
        print(f"{'env':<26} {'plain us':>8} " + " ".join(f"{name[:17]:>17}" for name in columns))
        print(f"{'':<26} {'(ep ms)':>8} " + " ".join(f"{'x step / +ms ep':>17}" for _ in columns))
        loops = []
        for env_name, make in env_factories(args.only).items():
            found = measure(make, configs, args.steps, args.rounds)
            loops.append(f"{env_name:<26} " + " ".join(f"{found[name]['loop']:>16.3f}x" for name in columns))
            plain = found["plain"]
            cells = []
            for name in columns:
                step, episode = found[name]["step"], found[name]["episode_ms"]
                cells.append(f"{step:>7.3f}x {episode:>+7.2f}")
                step_target, episode_target = TARGETS.get(name, (None, None))
                if step_target is not None and step > step_target:
                    misses.append(f"{env_name}: {name} {step:.3f}x per step (target {step_target}x)")
                if episode_target is not None and episode > episode_target:
                    misses.append(f"{env_name}: {name} +{episode:.2f} ms per episode (target {episode_target} ms)")
            print(f"{env_name:<26} {plain['plain_step_us']:>8.1f} " + " ".join(f"{c:>17}" for c in cells), flush=True)
            print(f"{'':<26} {plain['plain_episode_ms']:>8.2f}", flush=True)
    print("\nthe whole loop, every step and reset, over the plain env's (its own episode lengths):")
    print(f"{'env':<26} " + " ".join(f"{name[:17]:>17}" for name in columns))
    print("\n".join(loops))
    print("targets: ArtifactMonitor <= 1.05x per step and <= +0.5 ms per episode; RecordPhysics <= +2 ms per "
          "episode; both <= 1.3x per step")
    print("all targets met" if not misses else "missed:\n  " + "\n  ".join(misses))


if __name__ == "__main__":
    main()

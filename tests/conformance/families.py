"""The conformance matrix, family by family: which envs, built how, checked how. Shared by the
tests (test_matrix_*.py) and by benchmarks/compatibility.py, which writes docs/compatibility.md."""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    """One env of the matrix: how its users build it, and how check_env runs it."""

    name: str
    make: Callable[[], Any]
    steps: int
    substeps_per_step: Callable[[], int]
    policy: Callable[[Any], Callable[[Any], Any]] | None = None
    wrap: Callable[[Any, Path], Any] | None = None
    env_fn: str | None = None  # MODULE:CALLABLE for replays in a fresh process (no registered id)
    needs: str = ""  # what the docs say to pass or call for this family, beyond the wrappers
    expert: bool = False  # actions from the benchmark's own scripted expert


@dataclass(frozen=True)
class Family:
    name: str
    packages: tuple[str, ...]  # distributions whose versions the docs list
    modules: tuple[str, ...]  # importable when the family can run here
    cases: Callable[[], list[Case]] = field(repr=False)

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)


def _gymnasium() -> list[Case]:
    import gymnasium as gym

    ids = ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5", "InvertedPendulum-v5",
           "InvertedDoublePendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5", "Walker2d-v5"]
    return [Case(i, lambda i=i: gym.make(i), 50, lambda i=i: gym.make(i).unwrapped.frame_skip) for i in ids]


METAWORLD_TASKS = ["pick-place-v3", "basketball-v3", "assembly-v3", "peg-insert-side-v3", "drawer-open-v3",
                   "door-open-v3", "bin-picking-v3", "button-press-v3", "hammer-v3", "door-lock-v3", "push-v3",
                   "shelf-place-v3"]


def _metaworld() -> list[Case]:
    import gymnasium as gym
    import metaworld  # noqa: F401 - registers Meta-World/MT1
    from metaworld.policies import ENV_POLICY_MAP

    warnings.filterwarnings("ignore", module="metaworld")  # its experts warn about clipped actions
    steps = 200  # each expert succeeds within this many steps on at least one of the three seeds

    def make(task: str) -> Any:
        return gym.make("Meta-World/MT1", env_name=task, seed=0, max_episode_steps=steps)

    return [Case(t, lambda t=t: make(t), steps, lambda t=t: make(t).unwrapped.frame_skip,
                 policy=lambda env, t=t: ENV_POLICY_MAP[t]().get_action, expert=True) for t in METAWORLD_TASKS]


def _gymnasium_robotics() -> list[Case]:
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)

    def per_step(i: str) -> int:
        env = gym.make(i).unwrapped
        for inner in ("robot_env", "ant_env", "point_env"):  # Franka Kitchen's robot, the mazes' agents
            if hasattr(env, inner):
                return int(getattr(env, inner).frame_skip)
        return int(env.frame_skip if hasattr(env, "frame_skip") else env.n_substeps)  # Adroit: MujocoEnv

    ids = ["FetchPickAndPlace-v4", "FetchPush-v4", "FetchSlide-v4", "HandManipulateBlock-v1", "FrankaKitchen-v1",
           "AdroitHandDoor-v1", "AdroitHandHammer-v1", "AdroitHandPen-v1", "AdroitHandRelocate-v1",
           "PointMaze_UMaze-v3", "AntMaze_UMaze-v5"]
    return [Case(i, lambda i=i: gym.make(i), 50, lambda i=i: per_step(i)) for i in ids]


def _robosuite() -> list[Case]:
    import robosuite_factories as factories

    def per_step(task: str) -> int:
        env = factories.make(task).env
        return int(round(env.control_timestep / env.model_timestep))

    return [Case(t, factories.TASKS_FACTORY[t], 40, lambda t=t: per_step(t), env_fn=f"robosuite_factories:{t}",
                 needs="env_fn= for replay (no registered id); seed= in suite.make for run-to-run identity")
            for t in factories.TASKS]


def _maniskill() -> list[Case]:
    from simuguard_gym.engines.sapien import headless

    headless()
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401 - registers ManiSkill's ids
    from mani_skill.utils.wrappers import RecordEpisode

    from simuguard_gym import ArtifactMonitor, RecordPhysics

    def trajectories() -> str:
        return tempfile.mkdtemp(prefix="simuguard-maniskill-trajectories-")

    orders: dict[str, Callable[[Any, Path], Any] | None] = {
        "": None,
        " inside RecordEpisode": lambda env, out: RecordEpisode(ArtifactMonitor(RecordPhysics(env, out)),
                                                                trajectories(), save_video=False),
        " around RecordEpisode": lambda env, out: ArtifactMonitor(RecordPhysics(
            RecordEpisode(env, trajectories(), save_video=False), out)),
    }

    def make(task: str) -> Any:
        return gym.make(task, sim_backend="physx_cpu", obs_mode="state")

    def per_step(task: str) -> int:
        env = make(task).unwrapped
        return env.sim_freq // env.control_freq

    tasks = ["PickCube-v1", "PushCube-v1", "StackCube-v1", "PegInsertionSide-v1", "PlugCharger-v1"]
    return [Case(t + suffix, lambda t=t: make(t), 30, lambda t=t: per_step(t), wrap=wrap,
                 needs="simuguard_gym.engines.sapien.headless() before gym.make (no rendering device)")
            for t in tasks for suffix, wrap in orders.items()]


def _dm_control() -> list[Case]:
    import dm_control_factories as factories

    def per_step(name: str) -> int:
        native = factories.FACTORIES[name]().native
        return int(round(native.control_timestep() / native.physics.model.opt.timestep))

    return [Case(name, make, 50, lambda name=name: per_step(name),
                 needs="attach(env, ...) (dm_env's TimeStep kept); env_fn= for replay (no registered id)")
            for name, make in factories.FACTORIES.items()]


def _shimmy() -> list[Case]:
    import gymnasium as gym
    import shimmy

    gym.register_envs(shimmy)
    ids = ["dm_control/cartpole-swingup-v0", "dm_control/manipulator-bring_ball-v0", "dm_control/quadruped-walk-v0",
           "dm_control/walker-walk-v0"]

    def per_step(i: str) -> int:
        native = gym.make(i).unwrapped._env
        return int(round(native.control_timestep() / native.physics.model.opt.timestep))

    return [Case(i, lambda i=i: gym.make(i), 50, lambda i=i: per_step(i)) for i in ids]


def _lerobot() -> list[Case]:
    """LeRobot's simulated benchmarks: ALOHA (gym-aloha, on dm_control's physics, camera images as
    observations) and the SO-101 arm (lerobot-env-so101), each where installed."""
    import gymnasium as gym

    cases = []
    if importlib.util.find_spec("gym_aloha") is not None:
        import gym_aloha  # noqa: F401 - registers gym_aloha/...

        def aloha_per_step(i: str) -> int:
            native = gym.make(i).unwrapped._env
            return int(round(native.control_timestep() / native.physics.model.opt.timestep))

        cases += [Case(i, lambda i=i: gym.make(i), 30, lambda i=i: aloha_per_step(i))
                  for i in ("gym_aloha/AlohaInsertion-v0", "gym_aloha/AlohaTransferCube-v0")]
    if importlib.util.find_spec("lerobot_env_so101") is not None:
        import lerobot_env_so101  # noqa: F401 - registers lerobot_env_so101/...

        cases += [Case(i, lambda i=i: gym.make(i), 30, lambda i=i: int(gym.make(i).unwrapped._n_substeps))
                  for i in ("lerobot_env_so101/SO101PickCube-v0", "lerobot_env_so101/SO101PickPlace-v0")]
    return cases


#: MyoSuite's tasks with a free object or a body on the floor (the others are a hand or an arm alone).
MYOSUITE_TASKS = ["myoHandObjHoldRandom-v0", "myoHandReorient8-v0", "myoChallengeDieReorientP1-v0",
                  "myoChallengeRelocateP1-v0", "myoChallengeBaodingP1-v1", "myoLegWalk-v0"]


def _myosuite() -> list[Case]:
    import gymnasium as gym
    import myosuite  # noqa: F401 - registers its ids

    return [Case(i, lambda i=i: gym.make(i), 30, lambda i=i: int(gym.make(i).unwrapped.frame_skip))
            for i in MYOSUITE_TASKS]


FAMILIES = [
    Family("Gymnasium MuJoCo v5", ("gymnasium", "mujoco"), ("gymnasium",), _gymnasium),
    Family("Meta-World v3 (scripted experts)", ("metaworld", "mujoco"), ("metaworld",), _metaworld),
    Family("Gymnasium-Robotics", ("gymnasium-robotics", "mujoco"), ("gymnasium_robotics",), _gymnasium_robotics),
    Family("robosuite (GymWrapper)", ("robosuite", "mujoco"), ("robosuite",), _robosuite),
    Family("ManiSkill3 (physx_cpu)", ("mani-skill", "sapien"), ("mani_skill",), _maniskill),
    Family("dm_control (suite.load)", ("dm-control", "mujoco"), ("dm_control",), _dm_control),
    Family("dm_control via Shimmy", ("shimmy", "dm-control", "mujoco"), ("shimmy", "dm_control"), _shimmy),
    Family("LeRobot sim (ALOHA, SO-101)", ("gym-aloha", "lerobot-env-so101", "dm-control", "mujoco"), ("gym_aloha",),
           _lerobot),
    Family("MyoSuite", ("myosuite", "mujoco"), ("myosuite",), _myosuite),
]


def family(name: str) -> Family:
    return next(f for f in FAMILIES if f.name.startswith(name))


def run(case: Case, directory: Path, *, episodes: int = 3) -> Any:
    """check_env on one case, as the tests and the docs script run it."""
    from simuguard_gym.conformance import check_env

    return check_env(case.make, directory, episodes=episodes, steps=case.steps, policy=case.policy, wrap=case.wrap,
                     env_fn=case.env_fn, name=case.name)

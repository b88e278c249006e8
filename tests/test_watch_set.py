"""What the monitor watches on every Gymnasium MuJoCo v5 env, why it watches nothing where it
does, that a launch a solver makes of a watched body is an artifact, and that clean runs (a robot
flailing on the floor included) report none."""

from __future__ import annotations

import logging

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from simuguard_gym import ArtifactMonitor, TaskSpec
from simuguard_gym.wrappers import artifact_monitor

#: Each v5 env: the bodies watched, or (empty) the start of the reason given.
WATCH_SETS = {
    "Ant-v5": ["torso"], "HalfCheetah-v5": ["torso"], "Hopper-v5": ["torso"], "Humanoid-v5": ["torso"],
    "HumanoidStandup-v5": ["torso"], "Walker2d-v5": ["torso"], "Pusher-v5": ["object"],
    "InvertedPendulum-v5": "no two of its shapes can collide", "InvertedDoublePendulum-v5": "no two of its shapes",
    "Swimmer-v5": "no two of its shapes can collide", "Reacher-v5": "no two of its shapes can collide",
}


@pytest.mark.parametrize("env_id", sorted(WATCH_SETS))
def test_the_watch_set_of_each_v5_env(env_id, caplog, monkeypatch):
    monkeypatch.setattr(artifact_monitor, "_WARNED", set())
    expected = WATCH_SETS[env_id]
    env = ArtifactMonitor(gym.make(env_id))
    with caplog.at_level(logging.WARNING):
        watching = env.reset(seed=0)[1]["simuguard"]["watching"]
        env.reset(seed=1)
    env.close()
    if isinstance(expected, list):
        assert watching == expected and env.unwatched_reason is None
        assert "watches no body" not in caplog.text
    else:
        assert watching == [] and env.unwatched_reason.startswith(expected)
        assert caplog.text.count(f"ArtifactMonitor watches no body of {env_id}") == 1  # once, with its reason
        assert expected in caplog.text


def test_a_task_spec_chooses_what_is_watched():
    env = ArtifactMonitor(gym.make("Ant-v5"), task_spec=TaskSpec(robot=("torso",)))
    assert env.reset(seed=0)[1]["simuguard"]["watching"] == []
    env.close()
    env = ArtifactMonitor(gym.make("Pusher-v5"), task_spec=TaskSpec(objects=("goal",)))
    assert env.reset(seed=0)[1]["simuguard"]["watching"] == ["object", "goal"]
    env.close()
    # Reacher's target is named, but no geom of Reacher can collide: no contact can throw it.
    env = ArtifactMonitor(gym.make("Reacher-v5"), task_spec=TaskSpec(objects=("target",)))
    assert env.reset(seed=0)[1]["simuguard"]["watching"] == [] and env.idle
    env.close()


def _torso_into_floor(env: gym.Env, depth: float) -> None:
    """Teleport Ant's torso (a sphere of radius 0.25 m) ``depth`` into the floor, at rest."""
    data = env.unwrapped.data
    data.qpos[2] = 0.25 - depth
    data.qvel[:] = 0


@pytest.mark.parametrize("on_artifact", ["ignore", "truncate"])
def test_a_launch_of_ants_torso_by_the_solver_is_an_artifact(on_artifact):
    """Ant's torso put 13 cm into the floor mid-episode is thrown out at several m/s: an artifact of
    its base, flagged deep; under on_artifact="truncate" the episode ends at the confirming step."""
    env = ArtifactMonitor(gym.make("Ant-v5"), on_artifact=on_artifact)
    env.reset(seed=0)
    zero = np.zeros(env.action_space.shape)
    for _ in range(40):
        env.step(zero)
    _torso_into_floor(env, 0.13)
    truncated_at = None
    for step in range(40):
        _, _, _, truncated, info = env.step(zero)
        if truncated:
            truncated_at = step
            break
    env.close()
    (event,) = info["simuguard"]["events"]
    assert event["body"] == "torso" and event["artifact"] and event["partner"] == "world"
    assert event["peak_speed"] > 3.0 and event["carrier"]["carriers"] == ["torso"]
    assert event["carrier"]["ratio"] >= 1.5 and event["off_stage"] is None
    assert any(f["kind"] == "deep_penetration" and "torso" in f["bodies"] for f in info["simuguard"]["flags"])
    assert (truncated_at is not None) is (on_artifact == "truncate")


def test_a_base_launched_by_its_own_legs_is_explained():
    """A shallow dip of the torso (2 mm) is ordinary contact: whatever follows, no artifact."""
    env = ArtifactMonitor(gym.make("Ant-v5"))
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(40):
        env.step(env.action_space.sample())
    _torso_into_floor(env, 0.002)
    for _ in range(100):
        _, _, _, _, info = env.step(env.action_space.sample())
    env.close()
    assert info["simuguard"]["events"] == []


@pytest.mark.parametrize("env_id", ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Humanoid-v5"])
def test_a_robot_flailing_on_the_floor_is_no_artifact(env_id):
    """Random actions, the robot left to fall and flail (terminate_when_unhealthy=False where the
    env has it): its torso is struck and kicked off the floor, and each launch is explained."""
    kwargs = {} if env_id == "HalfCheetah-v5" else {"terminate_when_unhealthy": False}
    env = ArtifactMonitor(gym.make(env_id, max_episode_steps=300, **kwargs))
    env.action_space.seed(123)
    explained = 0
    for seed in (123, 124):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            done = terminated or truncated
        assert info["simuguard"]["events"] == [] and info["simuguard"]["errors"] == []
        explained += len(env.detector.events)
        # the robot's feet pressed into the floor are its own soft contacts: never flagged
        robot = {n for n, r in zip(env.detector.bodies.names, env.detector.bodies.roles) if r == "robot"}
        assert not [f for f in info["simuguard"]["flags"] if set(f["bodies"]) <= robot | {"world", "floor"}]
    env.close()


SLIDING_BLOCK = """<mujoco><option timestep="0.002"/>
  <worldbody><geom name="floor" type="plane" size="2 2 .1"/>
    <body name="block" pos="0 0 0.0">
      <joint name="x" type="slide" axis="1 0 0"/><joint name="z" type="slide" axis="0 0 1"/>
      <geom type="box" size=".03 .03 .03" mass="0.05" solref="0.004 1"/>
    </body>
  </worldbody></mujoco>"""


def test_an_object_on_undriven_slide_joints_is_watched_and_its_launch_flagged():
    """A block on slide joints (like Pusher's object and Meta-World's drawers and windows) is an
    object; created 3 cm inside the floor, it is thrown up: an artifact."""
    import simuguard_gym.envs  # noqa: F401 - registers MujocoScene-v0

    env = ArtifactMonitor(gym.make("simuguard_gym/MujocoScene-v0", xml=SLIDING_BLOCK, frame_skip=10))
    assert env.reset(seed=0)[1]["simuguard"]["watching"] == ["block"]
    for _ in range(60):
        _, _, _, _, info = env.step(np.zeros(0))
    env.close()
    assert [e["body"] for e in info["simuguard"]["events"]] == ["block"]


#: A muscle-driven finger (MyoSuite's way: a muscle on a spatial tendon between sites on two
#: bones, no actuator on a joint) beside a ball; a free root without geoms of its own, carrying a
#: welded pelvis that touches the floor and a leg on a knee that the muscle spans (MyoLeg's way).
MUSCLES = """<mujoco><option timestep="0.002"/>
  <worldbody><geom name="floor" type="plane" size="2 2 .1"/>
    <body name="ball" pos="0.3 0 0.1"><freejoint/><geom type="sphere" size=".03"/></body>
    <body name="root" pos="0 0 0.5"><freejoint/>
      <body name="pelvis"><geom type="box" size=".1 .1 .05"/><site name="origin" pos="0 0 -.05"/>
        <body name="shank" pos="0 0 -.1"><joint name="knee" type="hinge" axis="0 1 0"/>
          <joint name="knee_slide" type="slide" axis="0 0 1" range="-.01 .01"/>
          <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/><site name="insertion" pos=".03 0 -.1"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon><spatial name="muscle_path"><site site="origin"/><site site="insertion"/></spatial></tendon>
  <actuator><muscle name="muscle" tendon="muscle_path"/></actuator></mujoco>"""


def test_muscles_drive_the_bones_they_pull_and_a_welded_body_is_its_rigid_body():
    """The bones a muscle's tendon is attached to are the robot (a ball they flick is explained by
    them), the joints it spans are driven (the knee's slide is no loose object), and a free root
    that collides only through the body welded to it is the robot's floating base."""
    import mujoco

    from simuguard_gym.engines.mujoco import MujocoAdapter

    model = mujoco.MjModel.from_xml_string(MUSCLES)
    table = MujocoAdapter(model, mujoco.MjData(model)).body_table()
    roles = dict(zip(table.names, table.roles))
    assert roles == {"world": "scene", "ball": "object", "root": "base", "pelvis": "robot", "shank": "robot"}


def test_a_scene_in_which_nothing_can_collide_runs_nothing_per_substep(record_dir):
    """InvertedPendulum's geoms all have contype 0: no contact, hence no event and no flag, can
    occur, so the monitor hooks no substep and feeds no detector; the env's outputs are the plain
    env's, and a recording's footer says the monitor found nothing. Where the model lets its geoms
    collide again, the next episode is watched as any other."""
    from simuguard_gym import RecordPhysics, load_recording

    plain, env = gym.make("InvertedPendulum-v5"), ArtifactMonitor(RecordPhysics(gym.make("InvertedPendulum-v5"),
                                                                                record_dir))
    for e in (plain, env):
        e.action_space.seed(5)
    for seed in (5, 6):
        a, b = plain.reset(seed=seed), env.reset(seed=seed)
        assert env.idle and env.screened is None and env.detector is None
        assert env.tap not in env.adapter.hooks.listeners and b[1]["simuguard"]["watching"] == []
        assert np.array_equal(a[0], b[0])
        for _ in range(20):
            x, y = plain.step(plain.action_space.sample()), env.step(env.action_space.sample())
            assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4]
            assert {k: v for k, v in y[4].items() if k != "simuguard"} == x[4]
            assert y[4]["simuguard"]["events"] == [] and y[4]["simuguard"]["errors"] == []
            if x[2] or x[3]:
                break
    model = env.unwrapped.model
    model.geom_contype[:] = 1  # the cart, its rail and the pole now collide
    env.reset(seed=7)
    assert not env.idle and env.watching == () and env.detector is not None
    assert env.unwatched_reason.startswith("nothing moves but the robot")
    for _ in range(5):
        env.step(env.action_space.sample())
    env.close()
    plain.close()
    footers = [load_recording(p).footer for p in sorted(record_dir.glob("*.msgpack"))]
    assert len(footers) == 3 and footers[0]["detector"] == {"events": [], "flags": []}


@pytest.mark.parametrize("contact, expected", [("", False), ('<pair geom1="a" geom2="b"/>', True)])
def test_an_explicit_pair_collides_whatever_the_geoms_bits(contact, expected):
    from simuguard_gym.engines.base import adapter_for

    xml = f"""<mujoco><worldbody>
      <geom name="a" type="plane" size="1 1 .1" contype="0" conaffinity="0"/>
      <body pos="0 0 .1"><freejoint/><geom name="b" type="sphere" size=".05" contype="0" conaffinity="0"/></body>
    </worldbody><contact>{contact}</contact></mujoco>"""
    env = gym.make("simuguard_gym/MujocoScene-v0", xml=xml)
    adapter = adapter_for(env)
    assert adapter.makes_contacts() is expected
    model = env.unwrapped.model
    model.geom_contype[1], model.geom_conaffinity[0] = 2, 6  # the sphere's bit 2 meets the plane's
    assert adapter.makes_contacts()
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    assert not adapter.makes_contacts()
    env.close()

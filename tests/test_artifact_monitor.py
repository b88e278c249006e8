"""ArtifactMonitor in use: non-intrusion, truncation, failures, vector envs, SB3, bad input."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes
from conftest import SubstepProbe, assert_same_states, make_contact_scene
from simuguard_gym import ArtifactMonitor, DetectorConfig, RecordPhysics, TaskSpec, detect, load_recording
from simuguard_gym.wrappers.info_key import INFO_KEY
from test_non_intrusion import assert_same_episode, assert_wrapper_changes_nothing


def make_scene(scene, **kwargs):
    xml, _ = scene()
    return gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP, **kwargs)


def run_script(env, scene, seed=0):
    _, actions = scene()
    out = [env.reset(seed=seed)]
    for action in actions:
        out.append(env.step(action))
    return out


FACTORIES = {
    "contact-scene": lambda: make_contact_scene(max_episode_steps=80),
    "Pusher-v5": lambda: gym.make("Pusher-v5", max_episode_steps=80),
    "Ant-v5": lambda: gym.make("Ant-v5", max_episode_steps=80),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_monitor_on_and_off_identical(name, record_dir):
    assert_wrapper_changes_nothing(FACTORIES[name], lambda e: ArtifactMonitor(RecordPhysics(e, record_dir)), seed=11)


@pytest.mark.parametrize("scene", [scenes.created_inside_floor, scenes.finger_flick])
def test_monitor_with_artifacts_changes_nothing(scene):
    """Non-intrusion also while the detector is busy with events (on_artifact="ignore")."""
    plain, env = make_scene(scene), ArtifactMonitor(make_scene(scene), DetectorConfig.paper())
    with SubstepProbe() as probe_off:
        off = run_script(plain, scene)
    with SubstepProbe() as probe_on:
        on = run_script(env, scene)
    assert env.detector.artifacts  # there was something to detect
    env.close()
    assert_same_episode(off, on)
    assert_same_states(probe_off.states, probe_on.states)


def test_truncate_ends_the_episode_at_the_artifact():
    env = ArtifactMonitor(make_scene(scenes.created_inside_floor), on_artifact="truncate")
    steps = run_script(env, scenes.created_inside_floor)[1:]
    flagged = [i for i, s in enumerate(steps) if s[4][INFO_KEY]["artifact"]]
    truncated = [i for i, s in enumerate(steps) if s[3]]
    assert flagged and truncated == [flagged[0]]  # once, at the step that confirmed it
    event = steps[flagged[0]][4][INFO_KEY]["events"][0]
    assert event["decided_substep"] < (flagged[0] + 1) * scenes.FRAME_SKIP
    ignore = ArtifactMonitor(make_scene(scenes.created_inside_floor))
    assert not any(s[3] for s in run_script(ignore, scenes.created_inside_floor)[1:])


@pytest.mark.faults
def test_exception_in_the_monitor_is_recorded_not_raised(monkeypatch):
    scene = scenes.created_inside_floor
    off = run_script(make_scene(scene), scene)
    env = ArtifactMonitor(make_scene(scene))
    env.reset(seed=0)

    def boom(*args):
        raise RuntimeError("injected detector failure")

    monkeypatch.setattr(env.detector, "feed", boom)
    on = [off[0]] + [env.step(a) for a in scene()[1]]
    assert_same_episode(off, on)
    errors = on[-1][4][INFO_KEY]["errors"]
    assert len(errors) == 1 and errors[0]["message"] == "injected detector failure"  # reported once
    assert on[-1][4][INFO_KEY]["artifact"] is False
    env.reset(seed=0)  # the next episode detects again
    monkeypatch.undo()
    for action in scene()[1]:
        info = env.step(action)[4]
    assert info[INFO_KEY]["artifact"] and info[INFO_KEY]["errors"] == []


@pytest.mark.faults
def test_errors_of_stacked_wrappers_are_merged(record_dir, monkeypatch):
    env = RecordPhysics(ArtifactMonitor(make_scene(scenes.created_inside_floor)), record_dir)
    env.reset(seed=0)
    monkeypatch.setattr(env.env.detector, "feed", lambda *a: 1 / 0)
    monkeypatch.setattr(env.recorder, "after_substep", lambda: 1 / 0)
    info = env.step(np.zeros(0))[4]
    env.close()
    assert {e["where"] for e in info[INFO_KEY]["errors"]} >= {"monitor.step", "after_substep"}


@pytest.mark.parametrize("vector", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs_carry_the_monitor_info(vector):
    inside, resting = partial(scenes.created_inside_floor, 0.03), partial(scenes.created_inside_floor, 0.0)
    fns = [lambda: ArtifactMonitor(make_scene(inside)), lambda: ArtifactMonitor(make_scene(resting))]
    envs = vector(fns)
    envs.reset(seed=0)
    flagged = np.zeros(2, bool)
    for _ in range(40):
        _, _, _, _, infos = envs.step(np.zeros((2, 0)))
        assert infos[INFO_KEY]["_artifact"].all()
        flagged |= infos[INFO_KEY]["artifact"]
        events = infos[INFO_KEY]["events"]
    envs.close()
    assert flagged.tolist() == [True, False]
    assert len(events[0]) == 1 and events[0][0]["body"] == "can" and len(events[1]) == 0


def test_stable_baselines3_callback_sees_the_infos():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    seen = []

    class Collect(BaseCallback):
        def _on_step(self) -> bool:
            seen.extend(info[INFO_KEY] for info in self.locals["infos"])
            return True

    make = lambda: ArtifactMonitor(make_scene(scenes.finger_flick, max_episode_steps=30), DetectorConfig.paper(),
                                   on_artifact="truncate")
    model = sb3.PPO("MlpPolicy", DummyVecEnv([make, make]), n_steps=32, batch_size=32, n_epochs=1, seed=0,
                    device="cpu")
    model.learn(total_timesteps=64, callback=Collect())
    assert len(seen) == 64 and all("artifact" in s and "events" in s for s in seen)


# ---------------------------------------------------------------------- bad input
def test_task_spec_naming_a_missing_body():
    with pytest.raises(ValueError, match="not in the scene: bucket; available bodies: world, bin, ball"):
        ArtifactMonitor(make_scene(scenes.dropped_into_bin), task_spec=TaskSpec(containers=("bucket",)))


def test_two_different_task_specs_on_one_env(record_dir):
    env = RecordPhysics(make_scene(scenes.basket_shoved), record_dir, task_spec=TaskSpec(containers=("basket",)))
    with pytest.raises(ValueError, match="must share one TaskSpec"):
        ArtifactMonitor(env, task_spec=TaskSpec(objects=("basket",)))


def test_bad_config_and_mode():
    with pytest.raises(ValueError, match="carrier_window is a window and must be positive"):
        DetectorConfig(carrier_window=-0.04)
    with pytest.raises(ValueError, match="on_artifact must be one of"):
        ArtifactMonitor(make_scene(scenes.placed_gently), on_artifact="stop")
    with pytest.raises(TypeError, match="config must be a DetectorConfig"):
        ArtifactMonitor(make_scene(scenes.placed_gently), {"min_speed": 1})


def test_recording_without_contact_data(record_dir):
    env = RecordPhysics(make_scene(scenes.placed_gently), record_dir)
    run_script(env, scenes.placed_gently)
    env.close()
    rec = load_recording(env.paths[0])
    for name in [n for n in rec.columns if n.startswith("contact_")]:
        del rec.columns[name]
    with pytest.raises(ValueError, match="has no contact data to detect from"):
        detect(rec)


def test_ppo_logs_the_artifact_rate(tmp_path):
    """PPO trains a few thousand steps with ArtifactMonitor (truncating at artifacts) and the
    callback; the SB3 logger's CSV output has the simuguard keys."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    from simuguard_gym.integrations.sb3 import ArtifactCallback

    make = lambda: ArtifactMonitor(make_scene(scenes.finger_flick, max_episode_steps=30), DetectorConfig.paper(),  # noqa: E731
                                   on_artifact="truncate")
    model = sb3.PPO("MlpPolicy", DummyVecEnv([make, make]), n_steps=256, batch_size=128, n_epochs=2, seed=0,
                    device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(total_timesteps=2048, callback=ArtifactCallback())
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"simuguard/artifact_rate", "simuguard/events_per_episode"} <= set(header)


def test_bodies_parked_far_from_the_stage_are_no_artifacts(record_dir):
    """robosuite's clear_objects parks unused objects at one point 10 m away, where they are thrown
    apart: ejections, but off stage. A body the TaskSpec names is never off stage: its ejection
    next to the parked ones is still an artifact."""
    scene = scenes.parked_off_stage
    env = ArtifactMonitor(RecordPhysics(make_scene(scene), record_dir))
    run_script(env, scene)
    env.close()
    events = detect(load_recording(env.env.paths[0])).events
    thrown = {e["body"]: e for e in events}
    assert set(thrown) == {"parked_a", "parked_b", "can"}  # every one of them ejected...
    assert all(e["off_stage"] is not None and e["off_stage"]["distance"] > 9 and not e["artifact"]
               for e in thrown.values())  # ... and off stage
    assert env.detector.artifacts == []

    named = ArtifactMonitor(RecordPhysics(make_scene(scene), record_dir), task_spec=TaskSpec(objects=("can",)))
    steps = run_script(named, scene)
    named.close()
    assert [e["body"] for e in steps[-1][-1][INFO_KEY]["events"]] == ["can"]
    offline = detect(load_recording(named.env.paths[0]))
    assert [e["body"] for e in offline.artifacts] == ["can"]
    assert DetectorConfig.paper().off_stage is False
    assert {e["body"] for e in detect(load_recording(named.env.paths[0]), DetectorConfig.paper()).artifacts} >= {"can"}


def test_the_monitor_says_what_it_watches_and_warns_when_nothing(caplog, monkeypatch):
    """A scene's objects are watched and named at reset; a scene without any (Reacher: no geom of it
    can collide) is named as watching nothing, with one warning for all the envs of a vector env, and a TaskSpec
    can name bodies to watch (tests/test_watch_set.py: every v5 env)."""
    from simuguard_gym import TaskSpec
    from simuguard_gym.wrappers import artifact_monitor

    monkeypatch.setattr(artifact_monitor, "_WARNED", set())
    envs = [ArtifactMonitor(gym.make("Reacher-v5")) for _ in range(2)]  # a vector env's: one warning
    assert [env.reset(seed=0)[1]["simuguard"]["watching"] for env in envs] == [[], []]
    envs[0].reset(seed=1)
    for env in envs:
        env.close()
    assert caplog.text.count("ArtifactMonitor watches no body of Reacher-v5") == 1
    env = ArtifactMonitor(gym.make("Pusher-v5"), task_spec=TaskSpec(objects=("goal",)))
    assert env.reset(seed=0)[1]["simuguard"]["watching"] == ["object", "goal"]
    env.close()


def test_stage_box_is_the_episodes_first_state_computed_when_asked():
    """The stage box is computed only when an event needs it, from the state the episode began
    in, not the state it is asked in (the robot has moved since)."""
    env = ArtifactMonitor(gym.make("Pusher-v5"))
    env.action_space.seed(0)
    for seed in (0, 1):  # the hooks' episode, then the screen's
        env.reset(seed=seed)
        lo0, hi0 = env.adapter.stage_box()
        for _ in range(20):
            env.step(env.action_space.sample())
        assert not np.array_equal(env.adapter.stage_box()[1], hi0)  # the arm moved
        lo, hi = env.detector.stage
        assert np.array_equal(lo, lo0) and np.array_equal(hi, hi0)
    assert env.screened is not None
    env.close()

"""A benchmark's own env object under the wrappers (simuguard_gym.attach), as harnesses build it:
robosuite from ``suite.make`` with cameras on, and a RoboTwin-style task class owning a SAPIEN
scene. The LIBERO case is in test_libero.py (its own CI suite)."""

from __future__ import annotations

import functools
import gc
import importlib.util

import gymnasium as gym
import numpy as np
import pytest

import native_envs
from step_frames import StepFrames
from simuguard_gym import ArtifactMonitor, RecordPhysics, attach, load_recording, replay
from simuguard_gym.attach import BenchmarkEnv, factory_of
from simuguard_gym.engines.base import adapter_for

needs_robosuite = pytest.mark.skipif(importlib.util.find_spec("robosuite") is None, reason="robosuite extra")
needs_sapien = pytest.mark.skipif(importlib.util.find_spec("sapien") is None, reason="sapien extra")
needs_av = pytest.mark.skipif(importlib.util.find_spec("av") is None, reason="video extra")


class _Counter:
    def step(self, action):
        return None, 0.0, False, {}


def test_a_gymnasium_env_or_an_object_without_the_calls_is_refused():
    with pytest.raises(TypeError, match="gymnasium.Env already"):
        BenchmarkEnv(gym.make("Pusher-v5"))
    with pytest.raises(TypeError, match="no method reset"):
        BenchmarkEnv(_Counter())
    with pytest.raises(TypeError, match="no method setup_demo"):
        BenchmarkEnv(_Counter(), reset="setup_demo")


def test_only_factories_a_fresh_process_can_import_are_named():
    assert factory_of(lambda: None) is None
    assert factory_of(functools.partial(native_envs.robosuite_lift, size=64)) == {
        "callable": "native_envs:robosuite_lift", "kwargs": {"size": 64}}
    assert factory_of(functools.partial(native_envs.robosuite_lift, object())) is None  # positional: not stored


def _frames_at_step_ends(adapter, frames):
    camera = adapter.camera("agentview", height=64, width=64)
    frames.append(camera.render())
    camera.close()


@needs_robosuite
@pytest.mark.slow
def test_suite_make_lift_with_cameras_records_monitors_and_replays_bit_exact(tmp_path, rendering):
    make = functools.partial(native_envs.robosuite_lift, horizon=15)
    env = attach(make(), lambda e: RecordPhysics(e, tmp_path), ArtifactMonitor, env_fn=make)
    rng = np.random.default_rng(0)
    run_frames: list[list[np.ndarray]] = []
    for episode in range(2):  # the harness's loop, unchanged: reset, step until done
        obs = env.reset()
        assert obs["agentview_image"].shape == (128, 128, 3)
        frames: list[np.ndarray] = []
        images = []
        done = False
        while not done:
            obs, reward, done, info = env.step(rng.uniform(-1, 1, 7))
            assert info["simuguard"]["errors"] == []
            images.append(obs["agentview_image"])
            _frames_at_step_ends(adapter_for(env.gym), frames)
        assert np.std(images, axis=0).mean() > 1  # the camera sees the arm move: not a constant image
        run_frames.append(frames)
    env.close()
    paths = sorted(tmp_path.glob("*.msgpack"))
    assert len(paths) == 2
    for path, frames in zip(paths, run_frames):
        rec = load_recording(path)
        assert rec.header["env"]["factory"]["callable"] == "native_envs:robosuite_lift"
        assert rec.footer["steps"] == 15 and rec.footer["truncated"] and rec.footer["success"] is False
        listener = StepFrames(rec.footer["step_substeps"])
        result = replay(rec, listeners=[listener])  # the env rebuilt from the recording's factory
        assert result.exact, result.message
        assert listener.errors == [] and len(listener.frames) == len(frames) == 15
        assert all(np.array_equal(a, b) for a, b in zip(frames, listener.frames))
        assert not np.array_equal(frames[0], frames[-1])


@needs_robosuite
@pytest.mark.slow
def test_attaching_changes_nothing_the_harness_sees_with_cameras_on(tmp_path, rendering):
    """Observations with camera images, rewards, dones and infos, plain and attached. With Python's
    cyclic garbage collector off: robosuite's renderer draws into whatever EGL context is current,
    and collecting one of its old render contexts (the sim a hard reset replaced) releases the
    thread's current context, so its images turn to garbage whenever a collection happens to run,
    with or without simuguard (docs/compatibility.md)."""
    actions = np.random.default_rng(1).uniform(-1, 1, (12, 7))

    def run(env):
        out = [env.reset()]
        for action in actions:
            obs, reward, done, info = env.step(action)
            info = {k: v for k, v in info.items() if k != "simuguard"}
            out.append((obs, reward, done, info))
        env.close()
        return out

    gc.collect()
    gc.disable()
    try:
        plain = run(native_envs.robosuite_lift(horizon=12))
        wrapped = run(attach(native_envs.robosuite_lift(horizon=12), lambda e: RecordPhysics(e, tmp_path),
                             ArtifactMonitor))
    finally:
        gc.enable()
    assert len(plain) == len(wrapped)
    for a, b in zip(plain, wrapped):
        obs_a, obs_b = (a, b) if isinstance(a, dict) else (a[0], b[0])
        assert obs_a.keys() == obs_b.keys()
        assert all(np.array_equal(obs_a[k], obs_b[k]) for k in obs_a), "an observation (images included) changed"
        if not isinstance(a, dict):
            assert a[1:] == b[1:]


@needs_robosuite
@needs_av
@pytest.mark.slow
def test_video_of_a_recording_has_one_frame_per_env_step(tmp_path, rendering):
    from simuguard_gym.video import count_frames, write_video

    make = functools.partial(native_envs.robosuite_lift, cameras=False, horizon=10)
    env = attach(make(), lambda e: RecordPhysics(e, tmp_path), env_fn=make)
    env.reset()
    for _ in range(10):
        env.step(np.zeros(7))
    env.close()
    path = next(tmp_path.glob("*.msgpack"))
    video = write_video(path, size=96)
    assert video.exact and video.path.exists() and count_frames(video.path) == video.frames == 10


@needs_sapien
@pytest.mark.slow
@pytest.mark.parametrize("lazy", [False, True], ids=["scene-at-construction", "scene-at-first-setup_demo"])
def test_a_robotwin_style_task_class_records_monitors_and_replays(tmp_path, lazy):
    task = native_envs.PlaceCanTask(lazy=lazy)
    env = attach(task, lambda e: RecordPhysics(e, tmp_path), ArtifactMonitor,
                 env_fn=functools.partial(native_envs.PlaceCanTask, lazy=lazy), reset="setup_demo", step="take_action")
    assert (env.gym is None) == lazy  # a task without a scene yet gets its wrappers at its first episode
    trajectories = []
    for seed in (3, 4, 5):  # RoboTwin's loop: setup_demo, take_action until the step limit, check_success
        env.setup_demo(seed=seed)
        poses = [env.get_obs()["can_pose"]]
        while env.take_action_cnt < env.step_lim:
            assert env.take_action(env.expert_action()) is None  # the harness's own return value
            assert env.last_info["simuguard"]["errors"] == []
            poses.append(env.get_obs()["can_pose"])
        env.check_success()
        trajectories.append(np.array(poses))
    env.close()
    paths = sorted(tmp_path.glob("*.msgpack"))
    assert len(paths) == 3
    for path in paths:
        rec = load_recording(path)
        assert rec.header["options"] == {"benchmark_call": {"args": [], "kwargs": {"seed": 3 + paths.index(path)}}}
        assert rec.footer["steps"] == native_envs.PlaceCanTask.step_lim and rec.footer["ended"] in ("reset", "close")
        assert rec.footer["success"] is not None  # the task's check, read at its last action
        result = replay(rec)
        assert result.exact, result.message
        assert not result.initial_state_restored  # setup_demo(seed=...) was called again with the recorded seed

    # the same loop unattached: the same trajectories
    plain = native_envs.PlaceCanTask()
    for seed, wrapped_poses in zip((3, 4, 5), trajectories):
        plain.setup_demo(seed=seed)
        poses = [plain.get_obs()["can_pose"]]
        while plain.take_action_cnt < plain.step_lim:
            plain.take_action(plain.expert_action())
            poses.append(plain.get_obs()["can_pose"])
        assert np.array_equal(np.array(poses), wrapped_poses)


@needs_robosuite
def test_depenetration_rerun_on_a_benchmark_env_rebuilds_it_with_its_env_fn(tmp_path):
    from simuguard_gym import DepenetrationRerun

    make = functools.partial(native_envs.robosuite_lift, cameras=False, horizon=5)
    env = attach(make(), lambda e: DepenetrationRerun(e, directory=tmp_path), env_fn=make)  # no spec: the env_fn
    env.reset()
    done = False
    while not done:
        obs, reward, done, info = env.step(np.zeros(7))
    env.close()
    assert info["simuguard"]["errors"] == [] and info["simuguard"]["corrected_success"] is False
    assert len(list(tmp_path.glob("*.msgpack"))) == 1

"""RecordPhysics changes nothing the env measures, and its own failures never reach the caller."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from conftest import SubstepProbe, assert_same_states, make_contact_scene, run_random
from simuguard_gym import RecordPhysics, load_recording, replay
from simuguard_gym.capture import native
from simuguard_gym.engines.mujoco import MujocoAdapter
from simuguard_gym.wrappers.info_key import INFO_KEY

FACTORIES = {
    "contact-scene": lambda: make_contact_scene(max_episode_steps=80),
    "Pusher-v5": lambda: gym.make("Pusher-v5", max_episode_steps=80),
    "Ant-v5": lambda: gym.make("Ant-v5", max_episode_steps=80),
}


def assert_same_episode(off, on):
    assert len(off) == len(on)
    for a, b in zip(off, on):
        assert len(a) == len(b)
        np.testing.assert_array_equal(a[0], b[0])  # observation, bit for bit
        if len(a) == 5:
            assert a[1] == b[1] and a[2] == b[2] and a[3] == b[3]
        info_off, info_on = a[-1], b[-1]
        assert INFO_KEY not in info_off
        assert {k: v for k, v in info_on.items() if k != INFO_KEY}.keys() == info_off.keys()
        for key, value in info_off.items():
            np.testing.assert_array_equal(np.asarray(value), np.asarray(info_on[key]))


def assert_wrapper_changes_nothing(make, wrap, seed):
    """The same seeded random run, plain and wrapped: identical outputs, and qpos/qvel at every
    substep as MuJoCo's own control callback observes them. Returns the (closed) wrapped env."""
    plain, env = make(), wrap(make())  # models compile outside the probe
    with SubstepProbe() as probe_off:
        off = run_random(plain, 150, seed=seed)
    with SubstepProbe() as probe_on:
        on = run_random(env, 150, seed=seed)
    env.close()
    assert_same_episode(off, on)
    assert len(probe_off.states) == len(probe_on.states) > 150 * 5
    assert_same_states(probe_off.states, probe_on.states)
    return env


@pytest.mark.parametrize("name", list(FACTORIES))
def test_recording_on_and_off_identical(name, record_dir):
    env = assert_wrapper_changes_nothing(FACTORIES[name], lambda e: RecordPhysics(e, record_dir), seed=7)
    assert len(env.paths) >= 2  # episodes were cut by the time limit and recorded


class Boom(RuntimeError):
    pass


@pytest.mark.faults
def test_exception_in_hook_is_recorded_not_raised(record_dir, monkeypatch):
    """Python copies (the native copy, where built, never calls capture_contacts)."""
    monkeypatch.setattr(native, "SubstepCopy", None)
    make = FACTORIES["contact-scene"]
    off = run_random(make(), 40, seed=3)

    env = RecordPhysics(make(), record_dir)
    original = env.adapter.capture_contacts
    calls = {"n": 0}

    def failing(stage):
        calls["n"] += 1
        if calls["n"] == 57:
            raise Boom("injected failure")
        return original(stage)

    monkeypatch.setattr(env.adapter, "capture_contacts", failing)
    on = run_random(env, 40, seed=3)
    env.close()
    assert_same_episode(off, on)
    errors = on[-1][-1][INFO_KEY]["errors"]
    # The failed hook lost substep 56, and a recording with a hole would not replay: the recording
    # ends there, with the 56 substeps before it, and says so.
    assert [(e["type"], e["substep"]) for e in errors] == [("Boom", 56)]
    assert all(o[-1][INFO_KEY]["errors"] == [] for o in on[:12])  # substeps 0-54: steps 1-11
    rec = load_recording(env.paths[0])
    assert [e["message"] for e in rec.errors] == ["injected failure"] and rec.footer["errors"] == 1
    assert rec.lost == {"reason": "after_substep: Boom: injected failure", "last_good_substep": 55}
    assert rec.footer["env_substeps"] == 200 and rec.substeps == 56
    result = replay(rec)
    assert not result.exact and result.substeps == 56 and result.divergence is None
    assert "incomplete" in result.message and "56 intact substeps" in result.message


def test_wrappers_detach_cleanly(tmp_path):
    """In a fresh process (others tests' envs may still hold adapters here): MuJoCo's own step
    functions are interposed while a wrapper is attached, and back once the last one is closed."""
    script = f"""
import gymnasium as gym, mujoco
from simuguard_gym import ArtifactMonitor, RecordPhysics
original, original2 = mujoco.mj_step, mujoco.mj_step2
env = ArtifactMonitor(RecordPhysics(gym.make("Pusher-v5"), {str(tmp_path)!r}))
assert mujoco.mj_step is not original and mujoco.mj_step2 is not original2
env.reset(seed=0); env.step(env.action_space.sample()); env.close()
assert mujoco.mj_step is original and mujoco.mj_step2 is original2
print("restored")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "restored", done.stderr


def test_recording_ends_with_outcome(record_dir):
    env = RecordPhysics(make_contact_scene(max_episode_steps=10), record_dir)
    env.reset(seed=1)
    for _ in range(10):
        *_, terminated, truncated, info = env.step(env.action_space.sample())
    assert truncated and INFO_KEY in info and info[INFO_KEY]["recording"].endswith(".msgpack")
    rec = load_recording(info[INFO_KEY]["recording"])
    assert rec.footer["truncated"] is True and rec.footer["steps"] == 10 and rec.substeps == 50
    assert rec.header["env"]["id"] == "simuguard_gym/MujocoScene-v0"
    assert replay(rec).exact
    env.close()


@pytest.mark.skipif(native.SubstepCopy is None, reason="the C extension is not built")
@pytest.mark.faults
def test_exception_in_a_native_hooks_call_into_python_is_recorded_not_raised(record_dir, monkeypatch):
    """The native copy calls into Python at a full chunk, from inside robosuite's or
    Gymnasium's substep: a failure there (the chunk's write) stays out of the env."""
    make = FACTORIES["contact-scene"]
    off = run_random(make(), 40, seed=3)
    env = RecordPhysics(make(), record_dir, chunk_substeps=64)
    assert env.recorder.after_substep is env.recorder._fill.copy  # the hooks call C directly

    def failing(*args):
        raise Boom("injected write failure")

    monkeypatch.setattr(env.recorder, "sink", failing)
    on = run_random(env, 40, seed=3)
    env.close()
    assert_same_episode(off, on)
    errors = on[-1][-1][INFO_KEY]["errors"]
    assert [(e["type"], e["substep"]) for e in errors] == [("Boom", 0)]  # the chunk of substeps 0-63 is lost
    rec = load_recording(env.paths[0])
    assert [e["message"] for e in rec.errors] == ["injected write failure"] and rec.footer["errors"] == 1
    assert rec.substeps == 0 and rec.lost["last_good_substep"] == -1


@pytest.mark.faults
def test_a_hook_that_keeps_failing_stops_recording(record_dir, monkeypatch):
    monkeypatch.setattr(native, "SubstepCopy", None)  # Python copies: the hook calls capture_contacts
    off = run_random(FACTORIES["contact-scene"](), 40, seed=3)
    env = RecordPhysics(FACTORIES["contact-scene"](), record_dir)
    monkeypatch.setattr(env.adapter, "capture_contacts", lambda stage: 1 / 0)
    on = run_random(env, 40, seed=3)
    env.close()
    assert_same_episode(off, on)  # the env runs on unchanged
    errors = on[-1][-1][INFO_KEY]["errors"]
    assert [e["type"] for e in errors] == ["ZeroDivisionError"]  # the first failure ends the recording
    rec = load_recording(env.paths[0])
    assert rec.substeps == 0 and rec.lost["last_good_substep"] == -1


@pytest.mark.faults
def test_a_failing_chunk_encoding_is_recorded_and_ends_the_recording(record_dir, monkeypatch):
    """A failure while a chunk is decoded in the env's process reaches neither the env nor the
    caller; it is in the file, which keeps the chunks before it."""
    off = run_random(FACTORIES["contact-scene"](), 40, seed=3)
    env = RecordPhysics(FACTORIES["contact-scene"](), record_dir, chunk_substeps=64, helper_process=False)
    original = env.adapter.decode_contacts
    calls = {"n": 0}

    def failing(stage, states, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Boom("injected encoding failure")
        return original(stage, states, **kwargs)

    monkeypatch.setattr(env.adapter, "decode_contacts", failing)
    on = run_random(env, 40, seed=3)
    env.close()
    assert_same_episode(off, on)
    rec = load_recording(env.paths[0])
    assert [(e["where"], e["message"]) for e in rec.errors] == [("encode_chunk", "injected encoding failure")]
    assert rec.substeps == 64 and rec.footer["errors"] == 1  # the first chunk, then the recording stopped
    assert rec.lost == {"reason": "encode_chunk: Boom: injected encoding failure", "last_good_substep": 63}
    assert [o[-1][INFO_KEY]["errors"] for o in on if o[-1][INFO_KEY]["errors"]][0][0]["where"] == "encode_chunk"
    result = replay(rec)
    assert not result.exact and result.substeps == 64 and "incomplete" in result.message


def test_a_listener_that_raises_is_told_and_the_physics_runs_on():
    """Listeners that do not guard themselves are called through the guarded loops, alone or not."""
    class Raising:
        def __init__(self):
            self.failures = []

        def before_substep(self, phase):
            raise Boom("before")

        def after_substep(self):
            raise Boom("after")

        def hook_failed(self, where, error):
            self.failures.append((where, str(error)))

    xml = '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>'
    model = mujoco.MjModel.from_xml_string(xml)
    plain, hooked = mujoco.MjData(model), mujoco.MjData(model)
    adapter = MujocoAdapter(model, hooked)
    first, second = Raising(), Raising()
    adapter.hooks.add(first)
    adapter.step(3)
    adapter.hooks.add(second)
    adapter.step(2)
    mujoco.mj_step(model, plain, 5)
    assert np.array_equal(plain.qpos, hooked.qpos)
    assert first.failures == [("before_substep(start)", "before"), ("after_substep", "after")] * 5
    assert second.failures == [("before_substep(start)", "before"), ("after_substep", "after")] * 2


@pytest.mark.faults
@pytest.mark.parametrize("path", ["in-process", "helper process"])
def test_a_failing_encode_at_chunk_k_leaves_a_recording_marked_incomplete(path, record_dir, monkeypatch):
    """The acceptance check of "nothing lost": chunk 2 (substeps 128-191) fails to encode, by
    whichever path chunks are encoded; the env runs on unchanged, the error is in info, and the
    recording keeps chunks 0 and 1, says it is incomplete from substep 128 on, and its replay says so."""
    from simuguard_gym.capture import helper_process as chunk_process, recorder

    if path == "helper process" and not chunk_process.helper_processes_available():
        pytest.skip("helper processes need Linux and two usable CPUs")
    original = recorder.SubstepRecorder._columns

    def failing(self, chunk):
        if chunk.first == 128:
            raise Boom("injected encode failure at chunk 2")
        return original(self, chunk)

    monkeypatch.setattr(recorder.SubstepRecorder, "_columns", failing)
    off = run_random(FACTORIES["contact-scene"](), 60, seed=3)
    env = RecordPhysics(FACTORIES["contact-scene"](), record_dir, chunk_substeps=64,
                        helper_process=path == "helper process")
    on = run_random(env, 60, seed=3)
    env.close()
    assert_same_episode(off, on)
    errors = [e for step in on for e in step[-1][INFO_KEY]["errors"]]
    assert errors and {(e["where"], e["substep"], e["message"]) for e in errors} == \
        {("encode_chunk", 128, "injected encode failure at chunk 2")}
    rec = load_recording(env.paths[0])
    assert rec.substeps == 128 and rec.footer["env_substeps"] == 300  # 60 steps of 5 substeps
    assert rec.lost == {"reason": "encode_chunk: Boom: injected encode failure at chunk 2", "last_good_substep": 127}
    monkeypatch.setattr(recorder.SubstepRecorder, "_columns", original)
    result = replay(rec)
    assert not result.exact and result.substeps == 128 and result.divergence is None
    assert result.message.startswith("not exact: the recording is incomplete (encode_chunk: Boom")

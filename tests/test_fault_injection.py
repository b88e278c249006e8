"""Nothing of simuguard's ever raises into the user's loop: a failure injected at each of its
points, in the first episode or a later one, leaves the env's outputs those of the unwrapped env,
is named in info["simuguard"]["errors"] (or, at close, in the log), and the next episode records
cleanly again."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes
from simuguard_gym.envs.pusher_box import PUSHER_BOX_XML, push_policy
from simuguard_gym import ArtifactMonitor, DepenetrationRerun, ParamIdentify, RecordPhysics, load_recording
from simuguard_gym.detection import detector
from simuguard_gym.engines import mujoco as mujoco_engine
from simuguard_gym.capture import native
from simuguard_gym.identify.simulation import probe as identify_probe
from simuguard_gym.capture import recorder, tap
from simuguard_gym.recording import writer
from simuguard_gym.wrappers import depenetration_rerun, record_physics
from simuguard_gym.wrappers.info_key import INFO_KEY

EPISODES = 3


class Injected(Exception):
    pass


class Trap:
    """Raises ``Injected`` from the patched callable, in one episode only."""

    def __init__(self, point: str, episode: int) -> None:
        self.point, self.episode, self.current, self.fired = point, episode, -1, 0

    def wrap(self, original):
        trap = self

        def failing(*args, **kwargs):
            if trap.current == trap.episode:
                trap.fired += 1
                raise Injected(f"injected at {trap.point}")
            return original(*args, **kwargs)

        return failing


class FailingFile:
    """A recording's file whose ``operation`` fails (while the trap is armed)."""

    def __init__(self, file, operation: str, trap: Trap) -> None:
        self._file, self._operation, self._trap = file, operation, trap

    def __getattr__(self, name):
        found = getattr(self._file, name)
        return self._trap.wrap(found) if name == self._operation else found


def _file_point(operation):
    def patch(monkeypatch, trap):
        original = writer.RecordingWriter.__init__

        def opened(self, path, header):
            original(self, path, header)
            self._file = FailingFile(self._file, operation, trap)

        monkeypatch.setattr(writer.RecordingWriter, "__init__", opened)
    return patch


def _method(owner, name):
    def patch(monkeypatch, trap):
        monkeypatch.setattr(owner, name, trap.wrap(getattr(owner, name)))
    return patch


POINTS = {
    "adapter.refresh": _method(mujoco_engine.MujocoAdapter, "refresh"),
    "adapter.describe": _method(mujoco_engine.MujocoAdapter, "_describe_bodies"),
    "adapter.state_rows": _method(mujoco_engine.MujocoAdapter, "state_rows"),
    "adapter.body_states": _method(mujoco_engine.MujocoAdapter, "body_states"),
    "adapter.stage_box": _method(mujoco_engine.MujocoAdapter, "stage_box"),
    "adapter.engine_substeps": _method(mujoco_engine.MujocoAdapter, "engine_substeps"),
    "adapter.model_record": _method(mujoco_engine.MujocoAdapter, "model_record"),
    "adapter.capture_contacts": _method(mujoco_engine.MujocoAdapter, "capture_contacts"),
    "adapter.detach": _method(mujoco_engine.MujocoAdapter, "detach"),
    "tap.start": _method(tap.SubstepTap, "start_episode"),
    "tap.drain": _method(tap.SubstepTap, "drain"),
    "recorder.begin": _method(recorder.SubstepRecorder, "start_episode"),
    "recorder.before_substep": _method(recorder.SubstepRecorder, "before_substep"),
    "recorder.encode": _method(recorder.SubstepRecorder, "_columns"),
    "recorder.write": _method(record_physics.RecordPhysics, "_write_chunk"),
    "recorder.close": _method(recorder.SubstepRecorder, "finish"),
    "recorder.header": _method(record_physics, "header_for"),
    "writer.open": _method(writer.RecordingWriter, "__init__"),
    "writer.write": _file_point("write"),
    "writer.flush": _file_point("flush"),
    "writer.close": _file_point("close"),
    "writer.rename": _method(writer.os, "replace"),
    "detector.feed": _method(detector.ArtifactDetector, "feed"),
    "detector.finish": _method(detector.ArtifactDetector, "finish"),
    "rerun": _method(depenetration_rerun, "rerun"),
    "identify.probe": _method(identify_probe.BodyWrenchProbe, "after_substep"),
    "identify.fit": _method(identify_probe.BodyWrenchProbe, "series"),
}


def artifact_scene():
    """A contact artifact in every episode: the rerun runs."""
    xml, _ = scenes.created_inside_floor()
    return gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP, max_episode_steps=30)


def pusher_box():
    """A box pushed by a finger: what ParamIdentify identifies."""
    return gym.make("simuguard_gym/MujocoScene-v0", xml=PUSHER_BOX_XML, frame_skip=10, max_episode_steps=30)


STACKS = {
    "rerun": (artifact_scene, lambda env, out: DepenetrationRerun(ArtifactMonitor(RecordPhysics(env, out)),
                                                                  "timeconst=0.1"), lambda k: np.zeros(0)),
    "identify": (pusher_box, lambda env, out: ParamIdentify(ArtifactMonitor(RecordPhysics(env, out)), body="box"),
                 lambda k: push_policy(k * 0.02)),
}


def run(env, act, trap=None):
    out = []
    for episode in range(EPISODES):
        if trap is not None:
            trap.current = episode
        out.append([env.reset(seed=episode)])
        for k in range(30):
            out[-1].append(env.step(act(k)))
    if trap is not None:
        trap.current = "close"
    env.close()
    return out


def same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0], y[0])
        if len(x) == 5:
            assert x[1:4] == y[1:4]
        assert {k: v for k, v in x[-1].items() if k != INFO_KEY} == {k: v for k, v in y[-1].items() if k != INFO_KEY}


@pytest.fixture(scope="module")
def plain():
    return {name: run(make(), act) for name, (make, _, act) in STACKS.items()}


#: Where a point is reached only at some times: the body table is built once per scene, the
#: adapter detaches at close. Every other point fails once in the first episode, once in a later one.
ONLY = {"adapter.describe": [0], "adapter.detach": ["close"]}
CASES = [(point, when) for point in POINTS for when in ONLY.get(point, [0, 1])]


@pytest.mark.faults
@pytest.mark.parametrize("point, episode", CASES,
                         ids=[f"{p}-{ {0: 'first episode', 1: 'later episode'}.get(w, w)}" for p, w in CASES])
def test_a_failure_at_each_point_never_reaches_the_user(point, episode, plain, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(native, "SubstepCopy", None)  # the hooks' Python copies: each point is a Python call
    stack = "identify" if point.startswith("identify") else "rerun"
    make, wrap, act = STACKS[stack]
    trap = Trap(point, episode)
    POINTS[point](monkeypatch, trap)
    caplog.set_level(logging.WARNING)
    out = run(wrap(make(), tmp_path), act, trap)  # never raises
    assert trap.fired, f"{point} was never reached"
    for a, b in zip(plain[stack], out):
        for x, y in zip(a, b):
            same([x], [y])
    logged = f"injected at {point}" in caplog.text
    if episode == "close":  # nothing returns an info at close: the log has it, the episodes are clean
        assert logged and all(e == [] for run_ in out for step in run_
                              for e in [step[-1].get(INFO_KEY, {}).get("errors", [])])
        return
    named = [e for step in out[episode] for e in step[-1].get(INFO_KEY, {}).get("errors", [])
             if f"injected at {point}" in e["message"]]
    assert named or logged, f"{point}: the failure is neither in info nor in the log"
    if episode == 0:  # the episodes after the failure are recorded cleanly again
        clean = [e for step in out[-1] for e in step[-1].get(INFO_KEY, {}).get("errors", [])]
        assert clean == [], clean
        assert load_recording(sorted(tmp_path.glob("*.msgpack"))[-1]).lost is None

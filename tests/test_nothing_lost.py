"""Nothing lost under real faults: a process killed mid-episode, a full disk, an audit killed
between a recording and its rerun."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes
from conftest import make_contact_scene, run_random
from simuguard_gym.envs.mujoco_scene import MujocoSceneEnv
from simuguard_gym import RecordPhysics, load_recording
from simuguard_gym.cli import main
from simuguard_gym.recording.format import PARTIAL_SUFFIX
from simuguard_gym.wrappers.info_key import INFO_KEY

KILL_AT_SUBSTEP_100 = """
import os, signal, sys
import gymnasium as gym
from simuguard_gym import RecordPhysics
env = RecordPhysics(gym.make("Pusher-v5"), sys.argv[1])
env.reset(seed=1234)
env.action_space.seed(0)
for step in range(60):
    env.step(env.action_space.sample())
    if env.recorder.substep == 100:   # 20 steps of 5 substeps: the first chunk is far from full
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_process_killed_at_substep_100_leaves_its_header(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILL_AT_SUBSTEP_100, str(tmp_path)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL
    [partial] = tmp_path.glob(f"*{PARTIAL_SUFFIX}")
    rec = load_recording(partial, allow_partial=True)
    assert rec.header["seed"] == 1234 and rec.header["env"]["id"] == "Pusher-v5"
    assert rec.initial_state.size == sum(c.size for c in rec.state_layout) and rec.substeps == 0
    assert rec.lost["reason"].startswith("the file ends without its footer")
    assert main(["inspect", str(partial), "--allow-partial"]) == 0


class FullDisk:
    """A file whose writes fail with ENOSPC once ``room`` bytes are written and ever after (a
    tmpfs that stays full), buffering nothing itself."""

    def __init__(self, file, room: int) -> None:
        self._file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self._file.write(data)

    def __getattr__(self, name: str):
        return getattr(self._file, name)


@pytest.mark.faults
def test_a_full_disk_never_reaches_the_env_and_leaves_what_fitted(record_dir, monkeypatch):
    from simuguard_gym.recording import writer

    original = writer.RecordingWriter.__init__

    def on_a_full_disk(self, path, header):
        original(self, path, header)
        self._file = FullDisk(self._file, room=300_000)  # the header and a few chunks fit

    monkeypatch.setattr(writer.RecordingWriter, "__init__", on_a_full_disk)
    off = run_random(make_contact_scene(max_episode_steps=200), 400, seed=5)
    env = RecordPhysics(make_contact_scene(max_episode_steps=200), record_dir, chunk_substeps=128)
    on = run_random(env, 400, seed=5)  # two episodes: both files hit the full disk
    env.close()
    for a, b in zip(off, on):
        np.testing.assert_array_equal(a[0], b[0])
    ends = [step[-1][INFO_KEY] for step in on if "errors" in step[-1].get(INFO_KEY, {}) and len(step) == 5
            and (step[2] or step[3])]
    assert len(ends) == 2 and all(any("No space left on device" in e["message"] for e in end["errors"])
                                  for end in ends)
    # Not even the footer fits: each episode's .partial keeps the header and the chunks written
    # before the disk filled, and says it lost the rest.
    partials = sorted(record_dir.glob(f"*{PARTIAL_SUFFIX}"))
    assert len(partials) == 2 and not list(record_dir.glob("*.msgpack"))
    for path in partials:
        rec = load_recording(path, allow_partial=True)
        assert 0 < rec.substeps < 1000 and rec.substeps % 128 == 0  # whole chunks, up to the one that did not fit
        assert rec.lost is not None and rec.header["env"]["id"] == "simuguard_gym/MujocoScene-v0"


@pytest.mark.faults
def test_a_disk_that_fills_at_an_episode_the_user_resets_is_named_in_the_reset_info(record_dir, monkeypatch):
    """Episodes an evaluation harness ends by its own reset (no termination, no time limit): what
    fails in finishing their file is in the info of that reset, not only in the log."""
    from simuguard_gym.recording import writer

    original = writer.RecordingWriter.__init__

    def on_a_full_disk(self, path, header):
        original(self, path, header)
        self._file = FullDisk(self._file, room=0)  # the header is on disk already; nothing more fits

    monkeypatch.setattr(writer.RecordingWriter, "__init__", on_a_full_disk)
    env = RecordPhysics(make_contact_scene(), record_dir)
    env.reset(seed=0)
    steps = [env.step(env.action_space.sample()) for _ in range(30)]  # less than a chunk: no write yet
    _, info = env.reset(seed=1)
    env.close()
    assert all(step[-1][INFO_KEY]["errors"] == [] for step in steps)
    assert any("No space left on device" in e["message"] for e in info[INFO_KEY]["errors"])
    rec = load_recording(next(record_dir.glob(f"*{PARTIAL_SUFFIX}")), allow_partial=True)
    assert rec.substeps == 0 and rec.header["seed"] == 0


class EjectedCan(MujocoSceneEnv):
    """A can created inside the floor and thrown out in every episode (a contact artifact on every
    MuJoCo version), with a success signal and a scripted policy, for audits."""

    def __init__(self) -> None:
        super().__init__(scenes.created_inside_floor()[0], frame_skip=scenes.FRAME_SKIP, reset_noise=0.002)

    def expert_action(self) -> np.ndarray:
        return np.zeros(0, np.float32)

    def _check_success(self) -> bool:  # what a rerun reads (the recorded run reads info)
        return bool(self.data.qpos[2] < 0.1)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"success": self._check_success()}


gym.register("simuguard_test/EjectedCan-v0", entry_point=EjectedCan, max_episode_steps=40)

KILL_IN_THE_RERUN = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import test_nothing_lost  # registers simuguard_test/EjectedCan-v0
import simuguard_gym.wrappers.depenetration_rerun as wrapper
from simuguard_gym.cli import main
wrapper.rerun = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)   # killed in the first rerun
main(sys.argv[1:])
"""

AUDIT = ["audit", "--env", "simuguard_test/EjectedCan-v0", "--episodes", "4", "--intervention", "timeconst=0.1",
         "--quiet"]


def test_an_audit_killed_in_a_rerun_redoes_it_on_resume(tmp_path):
    assert main([*AUDIT, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())["tasks"]
    assert whole[0]["reruns_verified"] >= 1  # there is a rerun to lose
    script = KILL_IN_THE_RERUN.format(tests=str(Path(__file__).resolve().parent))
    killed = subprocess.run([sys.executable, "-c", script, *AUDIT, "--out", str(tmp_path / "killed")],
                            capture_output=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL
    finals = sorted(p.name for p in (tmp_path / "killed").glob("seed_*.msgpack"))
    assert finals and not list((tmp_path / "killed").glob("*.rerun.json"))  # final recording, no rerun result
    assert main([*AUDIT, "--out", str(tmp_path / "killed")]) == 0
    resumed = json.loads((tmp_path / "killed" / "report.json").read_text())["tasks"]
    assert resumed == whole  # the replay-corrected score, reruns and all, as if never interrupted

"""Recordings that carry their model: each distinct compiled MuJoCo model stored once per output
directory, within a size budget, and a replay from it alone when the env cannot be rebuilt here, is
rebuilt with another model, or the user asks (``--from-file``)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from recording_files import craft, records_of
from simuguard_gym import RecordPhysics, load_recording, replay
from simuguard_gym.attach import BenchmarkEnv
from simuguard_gym.cli import main
from simuguard_gym.recording.format import RecordingError
from simuguard_gym.recording.model_store import ModelStore, model_file_entry, read_model_file

FINGERPRINT = "0123456789abcdef0123456789abcdef"


def record_episodes(env: gym.Env, directory: Path, episodes: int, steps: int = 40, **kwargs) -> list[Path]:
    recorder = RecordPhysics(env, directory, **kwargs)
    recorder.action_space.seed(0)
    for episode in range(episodes):
        recorder.reset(seed=episode)
        for _ in range(steps):
            *_, terminated, truncated, _ = recorder.step(recorder.action_space.sample())
            if terminated or truncated:  # the Ant falls
                break
    recorder.close()
    return list(recorder.paths)


@pytest.mark.parametrize("env_id", ["Pusher-v5", "Ant-v5"])
def test_n_episodes_store_one_model_and_each_replays_from_it_exactly(tmp_path, env_id):
    paths = record_episodes(gym.make(env_id), tmp_path, 3)
    stored = list((tmp_path / "models").iterdir())
    assert len(paths) == 3 and len(stored) == 1
    entries = [load_recording(p).header["model_file"] for p in paths]
    assert all(entry == entries[0] for entry in entries) and stored[0].name == entries[0]["name"]
    assert stored[0].stat().st_size < entries[0]["size"]  # compressed
    for path in paths:
        result = replay(path, from_file=True)
        assert result.exact, result.message
        assert result.success is None  # the env's success check is the env's code, not in the file


def test_a_model_over_the_budget_is_not_stored_and_the_header_says_why(tmp_path):
    paths = record_episodes(gym.make("Pusher-v5"), tmp_path, 1, max_model_bytes=1000)
    header = load_recording(paths[0]).header
    assert "model_file" not in header and "per model" in header["model_file_skipped"]
    assert not (tmp_path / "models").exists()
    with pytest.raises(RecordingError, match="carries no model to replay from .*per model"):
        replay(paths[0], from_file=True)
    assert replay(paths[0]).exact  # the env rebuilt from its id, as always


def test_the_directory_budget_holds(tmp_path):
    store = ModelStore(tmp_path, max_total_bytes=1000)
    first, why = store.add(FINGERPRINT, os.urandom(3000))  # a third of it (compression's usual) fits
    assert first is not None and why is None
    second, why = store.add("f" * 32, os.urandom(3000))
    assert second is None and "budget is 1000" in why
    store.close()
    assert [p.name for p in (tmp_path / "models").iterdir()] == [first["name"]]
    # a new store in the same directory counts what is there
    assert ModelStore(tmp_path, max_total_bytes=1000).add("e" * 32, os.urandom(3000))[0] is None


def test_a_mujoco_version_mismatch_is_named(tmp_path):
    path = record_episodes(gym.make("Pusher-v5"), tmp_path, 1)[0]
    records = records_of(path)
    records[0] = ("header", {**records[0][1], "engine_version": "3.1.0"})
    crafted = craft(records, tmp_path / "other_version.msgpack")
    with pytest.raises(RecordingError, match=rf"compiled by MuJoCo 3\.1\.0.*this is MuJoCo {mujoco.__version__}"):
        replay(crafted, from_file=True)


def test_an_env_that_cannot_be_built_here_replays_on_the_stored_model(tmp_path, capsys):
    path = record_episodes(gym.make("Pusher-v5"), tmp_path, 1)[0]
    records = records_of(path)
    records[0] = ("header", {**records[0][1], "env": {**records[0][1]["env"], "id": "NotInstalled-v0"}})
    crafted = craft(records, tmp_path / "elsewhere.msgpack")  # a benchmark this machine lacks
    result = replay(crafted)
    assert result.exact, result.message
    assert "the env could not be built here" in result.notes[0] and "NotInstalled-v0" in result.notes[0]
    assert main(["replay", str(crafted)]) == 0
    assert "replayed on the model stored with the recording" in capsys.readouterr().out


class DrawnAtConstruction:
    """A harness's scene whose box size is drawn when it is built, from an unseeded generator
    (robosuite's ``suite.make`` without ``seed=``): every build is another model."""

    action_dim = 1

    def __init__(self) -> None:
        size = np.random.default_rng().uniform(0.02, 0.05)
        self.model = mujoco.MjModel.from_xml_string(
            f'<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body name="box" pos="0 0 .2"><freejoint/>'
            f'<geom type="box" size="{size} {size} {size}"/></body></worldbody></mujoco>')
        self.data = mujoco.MjData(self.model)

    def reset(self) -> np.ndarray:
        mujoco.mj_resetData(self.model, self.data)
        return self.data.qpos.copy()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict]:
        self.data.xfrc_applied[1, 2] = 5.0 * float(action[0])
        mujoco.mj_step(self.model, self.data, 5)
        return self.data.qpos.copy(), 0.0, False, {}


def drawn_at_construction() -> BenchmarkEnv:
    """A module-level factory: recordings name it, replays rebuild it (another draw)."""
    return BenchmarkEnv(DrawnAtConstruction(), env_fn=drawn_at_construction)


def test_a_rebuilt_env_with_another_model_replays_on_the_stored_one(tmp_path):
    path = record_episodes(drawn_at_construction(), tmp_path, 1, steps=60)[0]
    own = replay(path, env_fn=drawn_at_construction)  # the user's env, as asked: another model
    assert not own.exact and own.divergence.quantity == "model"
    result = replay(path)  # the factory the file names builds another model; the stored one is the episode's
    assert result.exact, result.message
    assert "the rebuilt env's model differs" in result.notes[0]


def test_replay_from_file_in_a_process_without_the_env(tmp_path):
    """The replaying process cannot import Gymnasium's MuJoCo envs: nothing but the file is used."""
    paths = record_episodes(gym.make("Pusher-v5"), tmp_path, 2)
    code = ("import sys; sys.modules['gymnasium.envs.mujoco'] = None\n"
            "from simuguard_gym.cli import main\n"
            f"sys.exit(main(['replay', {str(tmp_path)!r}, '--from-file', '--json']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count('"exact": true') == len(paths)


def test_a_stored_model_is_read_as_data(tmp_path):
    store = ModelStore(tmp_path)
    entry, _ = store.add(FINGERPRINT, b"x" * 5000)
    store.close()
    recording = tmp_path / "episode_000000.msgpack"
    assert read_model_file(recording, entry) == b"x" * 5000
    stored = tmp_path / "models" / entry["name"]
    with pytest.raises(RecordingError, match="not the 4999 bytes"):  # inflates past the size named
        read_model_file(recording, {**entry, "size": 4999})
    stored.write_bytes(gzip.compress(b"x"))  # gzip's framing, not the store's zlib stream
    with pytest.raises(RecordingError, match="not a stored model"):
        read_model_file(recording, entry)
    stored.unlink()
    target = tmp_path / "elsewhere.mjb.gz"
    target.write_bytes(zlib.compress(b"x" * 5000))
    stored.symlink_to(target)
    with pytest.raises(RecordingError, match="not a regular file"):
        read_model_file(recording, entry)
    for bad in ({**entry, "name": "../../etc/passwd"}, {**entry, "size": -1}, {**entry, "fingerprint": "f" * 32},
                "models/x.mjb.gz"):
        with pytest.raises(RecordingError, match="model_file must name"):
            model_file_entry({"model_file": bad})


def test_models_never_go_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "models").symlink_to(elsewhere, target_is_directory=True)
    paths = record_episodes(gym.make("Pusher-v5"), out, 2, steps=5)
    assert len(paths) == 2 and list(elsewhere.iterdir()) == []
    for path in paths:  # recorded all the same, the reason in the header
        header = load_recording(path).header
        assert "model_file" not in header and "not a directory" in header["model_file_skipped"]


def test_rerun_from_the_file(tmp_path, capsys):
    path = record_episodes(gym.make("Pusher-v5"), tmp_path, 1)[0]
    assert main(["rerun", str(path), "--intervention", "timeconst=0.1", "--switch", "start", "--from-file",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prefix_exact"] and result["mode"] == "substeps" and result["substeps"] == 200

"""The ``simuguard`` command line, run as a user runs it (a subprocess) and in-process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import make_contact_scene, run_random
from simuguard_gym import RecordPhysics, load_recording
from simuguard_gym.cli import main
from simuguard_gym.recording.writer import RecordingWriter


@pytest.fixture
def episode(record_dir):
    env = RecordPhysics(make_contact_scene(max_episode_steps=40), record_dir)
    run_random(env, 40, seed=1)
    env.close()
    return env.paths[0]


def test_inspect(episode, capsys):
    assert main(["inspect", str(episode)]) == 0
    out = capsys.readouterr().out
    assert "substeps   200" in out and "simuguard_gym/MujocoScene-v0" in out
    for name in ("box_a", "box_b", "box_c", "ball", "can"):
        assert name in out
    assert "deepest" in out and "peak" in out


def test_replay_exit_codes(episode, tmp_path, capsys):
    assert main(["replay", str(episode)]) == 0
    assert "exact: 200 of 200" in capsys.readouterr().out
    rec = load_recording(episode)
    rec.columns["start_values"][5] += 1.0
    altered = tmp_path / "altered.msgpack"
    writer = RecordingWriter(altered, rec.header)
    writer.write_chunk(rec.columns, first=0, n=rec.substeps)
    writer.close({k: v for k, v in rec.footer.items() if k not in ("chunks", "substeps", "sha256")})
    assert main(["replay", str(altered)]) == 1
    assert "first divergence at substep" in capsys.readouterr().out


def test_bad_file_is_a_one_line_error(tmp_path, capsys):
    bogus = tmp_path / "bogus.msgpack"
    bogus.write_bytes(b"hello")
    assert main(["inspect", str(bogus)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simuguard inspect: error:") and "not a simuguard recording" in err
    assert len(err.splitlines()) == 1
    assert main(["inspect", str(tmp_path / "missing.msgpack")]) == 2


def test_console_script_demo_and_version():
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "demo"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "simuguard-gym" in done.stdout


def test_detect_file_and_directory(record_dir, capsys):
    import artifact_scenes as scenes
    import gymnasium as gym

    xml, actions = scenes.finger_flick()
    env = RecordPhysics(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP), record_dir)
    for _ in range(2):
        env.reset(seed=0)
        for action in actions:
            env.step(action)
    env.close()
    assert main(["detect", str(env.paths[0])]) == 0
    out = capsys.readouterr().out
    assert "no artifact" in out and "marble at substep" in out and "removed by carrier" in out
    assert main(["detect", "--paper", str(record_dir)]) == 0
    out = capsys.readouterr().out
    assert out.count("CONTACT ARTIFACT") == 2 and "2 recordings read, 2 with a contact artifact" in out
    assert main(["detect", "--json", str(env.paths[1])]) == 0
    assert '"artifact": false' in capsys.readouterr().out
    (record_dir / "junk.msgpack").write_bytes(b"not a recording")
    assert main(["detect", str(record_dir)]) == 2
    assert "not a simuguard recording" in capsys.readouterr().err


def test_inspect_shows_the_online_detector(record_dir, capsys):
    import artifact_scenes as scenes

    path = scenes.record_scene(scenes.created_inside_floor, record_dir)
    assert main(["inspect", str(path)]) == 0
    assert "detector   1 contact artifacts online (1 ejection events, 1 flags)" in capsys.readouterr().out


def test_view_exports_an_rrd(episode, tmp_path):
    pytest.importorskip("rerun")
    out = tmp_path / "episode.rrd"
    assert main(["view", str(episode), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and out.read_bytes()[:3] == b"RRF"  # rerun's file magic
    assert main(["view", str(episode), "--out", str(out), "--stride", "0"]) == 2

"""The ``simuguard`` command line, run as a user runs it (a subprocess) and in-process."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
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
    assert "detector   1 contact artifact online (1 ejection event, 1 flag)" in capsys.readouterr().out


def test_time_steps_read_as_meant(episode, capsys):
    """A float32 time step read as float64 (SAPIEN's 4 ms) prints as it was set."""
    from simuguard_gym.cli import _seconds

    assert _seconds(float(np.float32(0.004))) == "0.004 s"
    assert main(["inspect", str(episode)]) == 0
    assert f"substep {load_recording(episode).header['substep_dt']:.6g} s" in capsys.readouterr().out


def test_a_reader_that_leaves_the_pipe_early_stops_the_command_quietly(episode, tmp_path):
    """`simuguard inspect FILE | head`, the reader gone before the first line: no BrokenPipeError
    traceback, exit 0."""
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    reader.wait()  # the pipe has no reader left: the first write fails
    command = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "inspect", str(episode)],
                             stdout=reader.stdin, stderr=subprocess.PIPE, text=True)
    reader.stdin.close()
    assert "Traceback" not in command.stderr and "BrokenPipe" not in command.stderr, command.stderr
    assert command.returncode == 0


def _rewrite(recording, path, **env):
    """A copy of ``recording`` at ``path`` whose header's env entry has ``env`` changed."""
    rec = load_recording(recording)
    writer = RecordingWriter(path, {**rec.header, "env": {**rec.header["env"], **env}})
    writer.write_chunk(rec.columns, first=0, n=rec.substeps)
    writer.close({k: v for k, v in rec.footer.items() if k not in ("chunks", "substeps", "sha256")})
    return path


@pytest.fixture
def mixed(episode, tmp_path):
    """Two good recordings around one that is not a recording and one whose env id is unknown
    (gym.make raises gymnasium's NameNotFound, no error the command line knows by type)."""
    directory = tmp_path / "mixed"
    directory.mkdir()
    (directory / "a_good.msgpack").write_bytes(episode.read_bytes())
    (directory / "b_junk.msgpack").write_bytes(b"not a recording")
    _rewrite(episode, directory / "c_unknown_env.msgpack", id="NoSuchEnv-v0")
    (directory / "d_good.msgpack").write_bytes(episode.read_bytes())
    return directory


def test_replay_reports_a_bad_file_and_goes_on(mixed, capsys):
    assert main(["replay", str(mixed)]) == 1  # some could not be replayed
    out, err = capsys.readouterr()
    assert out.count("exact: 200 of 200 substeps bit-identical") == 2
    assert f"{mixed / 'd_good.msgpack'}:" in out  # the file after the bad ones was replayed
    assert "4 recordings: 2 bit-exact, 0 diverged, 2 could not be replayed" in out
    lines = err.strip().splitlines()  # one line each, naming the file and the error; no traceback
    assert len(lines) == 2, err
    assert lines[0].startswith(f"simuguard replay: error: {mixed / 'b_junk.msgpack'}: not a simuguard recording")
    assert lines[1].startswith(f"simuguard replay: error: {mixed / 'c_unknown_env.msgpack'}: unknown env id 'NoSuchEnv-v0'")


def test_replay_json_gives_every_file_a_line_of_the_same_shape(mixed, capsys):
    import json

    assert main(["replay", "--json", str(mixed)]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["path"] for line in lines] == [str(mixed / n) for n in ("a_good.msgpack", "b_junk.msgpack",
                                                                      "c_unknown_env.msgpack", "d_good.msgpack")]
    assert [line["exact"] for line in lines] == [True, False, False, True]
    assert all(line.keys() == lines[0].keys() for line in lines)
    assert lines[0]["error"] is None and lines[0]["substeps"] == 200
    assert "not a simuguard recording" in lines[1]["error"] and lines[1]["message"].startswith("not replayed: ")
    assert "unknown env id 'NoSuchEnv-v0'" in lines[2]["message"] and lines[2]["substeps"] is None


def test_replay_without_recordings_is_a_usage_error(episode, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["replay", str(empty)]) == 2  # as `simuguard detect` for no input, not "diverged"
    assert f"no recordings in {empty}" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing.msgpack"), str(episode)]) == 2  # the other one is replayed
    out, err = capsys.readouterr()
    assert "exact: 200 of 200" in out and f"No such file or directory: {tmp_path / 'missing.msgpack'}" in err


class _SpoilRecordings(gym.Wrapper):
    """Around the wrapped env of check_env: once episode 1 (seed 1) has started, something else
    takes the name its recording was to have, so RecordPhysics cannot write it; once episode 2
    has ended (the reset of seed 3), its recording's last byte is flipped."""

    def __init__(self, env, directory):
        super().__init__(env)
        self.directory = directory

    def reset(self, *, seed=None, options=None):
        out = self.env.reset(seed=seed, options=options)
        if seed == 1:
            (self.directory / "episode_000001.msgpack").mkdir()
        elif seed == 3:
            path = self.directory / "episode_000002.msgpack"
            data = bytearray(path.read_bytes())
            data[-1] ^= 0xFF
            path.write_bytes(bytes(data))
        return out


@pytest.mark.faults  # RecordPhysics reports the recording it could not write in info, as it should
def test_conformance_matches_recordings_to_episodes_by_seed(tmp_path):
    from simuguard_gym import ArtifactMonitor
    from simuguard_gym.conformance import check_env

    report = check_env(lambda: gym.make("InvertedPendulum-v5"), tmp_path, episodes=4, steps=10,
                       wrap=lambda env, out: _SpoilRecordings(ArtifactMonitor(RecordPhysics(env, out)), out))
    first, missing, spoilt, last = report.episodes
    assert [e.seed for e in report.episodes] == [0, 1, 2, 3]
    assert first.recording == str(tmp_path / "episode_000000.msgpack") and first.replay_exact
    assert last.recording == str(tmp_path / "episode_000003.msgpack") and last.replay_exact, last.replay
    assert load_recording(last.recording).header["seed"] == 3 and last.recorded_substeps > 0
    assert missing.recording is None and not missing.replay_exact
    assert spoilt.recording == str(tmp_path / "episode_000002.msgpack") and "checksum" in spoilt.read_error
    failures = report.failures()
    assert "episode seed 1: no recording" in failures
    assert any(f.startswith("episode seed 2: its recording cannot be read") for f in failures)
    assert not any(f.startswith(("episode seed 0", "episode seed 3")) for f in failures), failures
    assert any("UnsafeOutputError" in f for f in failures)  # RecordPhysics' own error when it could not write


def test_recordings_are_matched_by_their_header_and_replayed_one_by_one(tmp_path):
    from simuguard_gym.conformance import _replays, match_recordings

    env = RecordPhysics(gym.make("InvertedPendulum-v5"), tmp_path)
    env.action_space.seed(0)
    for seed in (5, 6, 7):
        env.reset(seed=seed)
        for _ in range(5):
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:  # the pendulum falls
                break
    env.close()
    five, six, seven = map(str, env.paths)
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"")
    matched, stray = match_recordings([seven, str(junk), five, six], [4, 5, 7])
    assert matched == [None, five, seven]
    assert len(stray) == 2 and "junk.msgpack: its header cannot be read" in stray[0]
    assert stray[1] == f"recording {six}: holds seed 6, which no episode was reset with"
    second = f"recording {five}: a second recording of seed 5 (the first is {five})"
    assert match_recordings([five, five], [5]) == ([five], [second])
    for fresh in (False, True):
        results = _replays([five, str(junk), seven], None, fresh)
        assert [r["exact"] for r in results] == [True, False, True], results
        assert "empty file" in results[1]["message"], results


def test_audit_errors_are_one_line(tmp_path, capsys):
    """An --env-kwargs key the env does not take is a usage error (exit 2); a policy that raises
    ends the audit with one line that says where (exit 1): no traceback either way."""
    env_id = "simuguard_gym/PlaceCanBasket-MuJoCo-v0"
    assert main(["audit", "--env", env_id, "--env-kwargs", '{"nope": 1}', "--episodes", "1",
                 "--out", str(tmp_path / "a"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"simuguard audit: error: --env-kwargs: {env_id} takes no 'nope'"
    policy = tmp_path / "broken_policy.py"
    policy.write_text("def act(observation):\n    raise RuntimeError('policy bug')\n")
    assert main(["audit", "--env", env_id, "--policy", f"{policy}:act", "--episodes", "1",
                 "--out", str(tmp_path / "b"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the policy raised at seed 0, step 0: RuntimeError: policy bug" in err


def test_every_option_of_every_subcommand_has_help():
    import argparse

    from simuguard_gym.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {action.dest}" for name, p in sub.choices.items() for action in p._actions
               if action.help is None and not isinstance(action, argparse._HelpAction)]
    assert missing == []


def test_one_vocabulary_for_out_and_json():
    """Every ``--out`` is a directory and every ``--json`` a flag (JSON on stdout), whatever the subcommand."""
    import argparse

    from simuguard_gym.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    outs = {name: a for name, p in sub.choices.items() for a in p._actions if "--out" in a.option_strings}
    jsons = {name: a for name, p in sub.choices.items() for a in p._actions if "--json" in a.option_strings}
    assert {"view", "video", "identify", "audit", "audit-init", "demo", "report"} <= set(outs)
    assert [name for name, a in outs.items() if "directory" not in a.help] == []
    assert {"detect", "replay", "rerun", "audit-init"} <= set(jsons)
    assert [name for name, a in jsons.items() if a.nargs != 0] == []  # store_true: takes no path


def test_an_out_that_names_a_file_is_refused(episode, tmp_path, capsys):
    for argv in (["video", str(episode), "--out", str(tmp_path / "a.mp4")],
                 ["identify", str(tmp_path / "x.csv"), "--shape", "sphere:0.1", "--out", str(tmp_path / "r.json")]):
        if argv[0] == "identify":
            (tmp_path / "x.csv").write_text("t,fx,fy,fz,tx,ty,tz,x,y,z,qw,qx,qy,qz\n" + "\n".join(
                f"{i * 0.01},0,0,1,0,0,0,0,0,0,1,0,0,0" for i in range(20)))
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--out is a directory" in err


def test_demo_counts_episodes_as_audit_does(tmp_path):
    """`demo --episodes N`, as `audit --episodes N` (`--seeds N`, the older name, still works)."""
    from simuguard_gym.cli import build_parser

    assert build_parser().parse_args(["demo", "--episodes", "3"]).episodes == 3
    assert build_parser().parse_args(["demo", "--seeds", "4"]).episodes == 4


@pytest.mark.extras
def test_a_mujoco_audit_loads_no_extra_it_does_not_use(tmp_path):
    """No SAPIEN (and its libvulkan warning), ManiSkill or robosuite in a MuJoCo-only audit, even
    where they are installed: the manifest reads their versions from the package metadata."""
    code = ("import sys; from simuguard_gym.cli import main; "
            f"rc = main(['audit', '--env', 'simuguard_gym/PlaceCanBasket-MuJoCo-v0', '--episodes', '1', "
            f"'--out', {str(tmp_path / 'run')!r}, '--quiet', '--no-videos']); "
            "print(rc, sorted(m for m in ('sapien', 'mani_skill', 'robosuite') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert "libvulkan" not in done.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_an_audit_estimates_its_run_time_from_the_rate_after_its_first_episode(tmp_path, capsys, workers):
    """The first episode pays the env's build, in every worker: the estimate comes from the rate of
    the episodes after it, and says how many are left."""
    assert main(["audit", "--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--episodes", "6", "--workers",
                 str(workers), "--out", str(tmp_path / "run"), "--no-videos"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "first episode in " in text and "then one every " in text
    assert f"more for the other {6 - 1 - workers} episode" in text

"""Recordings anyone can open safely: a file is data (docs/security.md).

A crafted recording names code to rebuild its env with: an env factory (``subprocess:run``), a
module to import (one that writes a file when imported), an id ``module:Id``, the methods a
harness's env is driven by. No command that opens it runs any of that; those that would rebuild
the env say in one line what they refused and how to allow it; the same file works with the
user's own ``--env-fn``; the user's own recordings, factories included, replay with no flag.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import msgpack
import mujoco
import numpy as np
import pytest

from artifact_scenes import FRAME_SKIP, created_inside_floor, record_scene
from recording_files import craft, records_of
from simuguard_gym import RecordPhysics, load_recording, replay
from simuguard_gym.attach import BenchmarkEnv
from simuguard_gym.cli import main
from simuguard_gym.recording.trust import SIGNATURE, UntrustedRecordingError, sign, signed_body, signed_by_user

KINDS = ("factory", "module", "module_id")
#: What each kind of file asks for, as the refusal names it.
ASKED = {"factory": "'subprocess:run'", "module": "'pwned_module'", "module_id": "'pwned_module'",
         "calls": "'wipe'"}


class NativeScene:
    """A harness's own env object (not Gymnasium): ``reset()``, ``step`` returning 4 values, and a
    method a crafted file would like it driven by."""

    action_dim = 1

    def __init__(self, sentinel: str = "") -> None:
        self.model = mujoco.MjModel.from_xml_string(created_inside_floor(0.03)[0])
        self.data = mujoco.MjData(self.model)
        self.sentinel = sentinel

    def reset(self) -> np.ndarray:
        mujoco.mj_resetData(self.model, self.data)
        return self.data.qpos.copy()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        self.data.ctrl[:] = action
        mujoco.mj_step(self.model, self.data, FRAME_SKIP)
        return self.data.qpos.copy(), 0.0, False, {}

    def wipe(self) -> None:
        Path(self.sentinel or "PWNED").write_text("the file chose this method")


def native_scene() -> NativeScene:
    """A module-level factory: recordings of :class:`NativeScene` name it."""
    return NativeScene()


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """A recording of the user's own, with a contact artifact (so every command has work to do)."""
    return record_scene(created_inside_floor, tmp_path_factory.mktemp("scene"), depth=0.03)


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> Path:
    """A recording of the user's own harness env, rebuilt by its factory."""
    env = RecordPhysics(BenchmarkEnv(native_scene(), env_fn=native_scene), tmp_path_factory.mktemp("native"))
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.zeros(1))
    env.close()
    return env.paths[0]


@pytest.fixture
def sentinel(tmp_path, monkeypatch) -> Path:
    """The file the hostile code would create, and a module on sys.path that creates it on import."""
    target = tmp_path / "PWNED"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "pwned_module.py").write_text(f"open({str(target)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(modules))
    yield target
    assert not target.exists(), "code named by a recording ran"
    assert "pwned_module" not in sys.modules


def hostile(source: Path, kind: str, path: Path, sentinel: Path) -> Path:
    """``source`` with a header that asks for code of ``kind``, written as another author would
    (its signature gone with the edit)."""
    records = records_of(source)
    header = dict(records[0][1])
    env = dict(header["env"])
    if kind == "factory":
        env = {"id": None, "class": env["class"], "module": None,
               "factory": {"callable": "subprocess:run", "kwargs": {"args": f"touch {sentinel}", "shell": True}}}
    elif kind == "module":
        env.update(id="Pwned-v0", module="pwned_module")
    elif kind == "module_id":
        env.update(id="pwned_module:Pwned-v0", module=None)
    elif kind == "calls":
        env["calls"] = {"reset": "wipe", "step": "step"}
    header["env"] = env
    footer = {**records[-1][1]}
    if footer.get("success") is None:  # an outcome to score: the report has a table to make
        footer["success"] = False
    path.parent.mkdir(parents=True, exist_ok=True)
    return craft([("header", header), *records[1:-1], ("footer", footer)], path)


def said(capsys, caplog) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err + caplog.text


def test_own_recordings_are_signed_and_an_edit_is_not(scene, tmp_path):
    assert signed_by_user(load_recording(scene).header)
    edited = hostile(scene, "module", tmp_path / "edited.msgpack", tmp_path / "unused")
    assert not signed_by_user(load_recording(edited).header)
    # the same bytes, re-signed by nobody: the header's signature covers every field
    copied = craft(records_of(scene), tmp_path / "copy.msgpack")
    assert signed_by_user(load_recording(copied).header)


@pytest.mark.parametrize("fields", [0, 1, 14, 15, 16, 200, 65535, 65536])
def test_a_header_signed_as_it_is_packed_is_the_signed_header_packed(fields):
    # The writer packs a header once and appends the signature to those bytes: a map's length
    # changes its first bytes (fixmap up to 15 fields, then map16, map32).
    header = {f"field{i}": i for i in range(fields)}
    expected = msgpack.packb(sign(header), use_bin_type=True)
    assert signed_body(header) == expected
    assert signed_body({SIGNATURE: "hmac-sha256:forged", **header}) == expected
    assert signed_by_user(msgpack.unpackb(signed_body(header)))


def test_own_recordings_replay_with_no_flag_factories_included(scene, native):
    assert replay(scene).exact
    result = replay(native)  # the env rebuilt by the factory the file names: the user's own file
    assert result.exact, result.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["replay", "rerun", "trace", "video", "view", "report", "report-no-trace"])
def test_commands_that_rebuild_the_env_refuse_the_code_a_file_names(scene, tmp_path, sentinel, capsys, caplog, kind,
                                                                   command):
    if command == "video":
        pytest.importorskip("av")
    if command == "view":
        pytest.importorskip("rerun")
    if command.startswith("report"):
        pytest.importorskip("matplotlib")
    path = hostile(scene, kind, tmp_path / "in" / "episode.msgpack", sentinel)
    argv = {"replay": ["replay", str(path)],
            "rerun": ["rerun", str(path), "--intervention", "timeconst=0.1"],
            "trace": ["trace", str(path)],
            "video": ["video", str(path)],
            "view": ["view", str(path)],
            "report": ["report", str(path.parent)],
            "report-no-trace": ["report", str(path.parent), "--no-trace"]}[command]
    code = main(argv)
    text = said(capsys, caplog)
    assert f"asks to {'call the env factory' if kind == 'factory' else 'import module'} {ASKED[kind]}" in text, text
    assert "not signed by you" in text and "--env-fn" in text and "--trust" in text
    if command in ("replay", "rerun", "trace"):
        assert code == (1 if command == "replay" else 2)  # replay: 1 for a file it could not replay
        assert text.count("\n") == 1, text  # one line
    elif command == "report" or command == "report-no-trace":
        assert code == 0  # the report is made; only the replays it would add are refused


@pytest.mark.extras
@pytest.mark.parametrize("kind", KINDS)
def test_commands_that_only_read_never_run_the_code(scene, tmp_path, sentinel, capsys, kind):
    path = hostile(scene, kind, tmp_path / "in" / "episode.msgpack", sentinel)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "signed     no" in out and ASKED[kind] in out  # what it asks for, and that it is not the user's
    assert main(["detect", str(path)]) == 0
    if importlib.util.find_spec("h5py") is not None:  # the maniskill extra
        assert main(["export", str(path), "--to", "maniskill", "--out", str(tmp_path / "exported")]) == 0


def test_methods_a_file_names_are_not_called_on_the_users_env(native, tmp_path, sentinel, capsys, monkeypatch):
    path = hostile(native, "calls", tmp_path / "calls.msgpack", sentinel)
    monkeypatch.setattr(NativeScene.__init__, "__defaults__", (str(sentinel),))
    with pytest.raises(UntrustedRecordingError, match="to drive the env by its methods"):
        replay(path, native_scene)
    assert main(["replay", str(path), "--env-fn", f"{__name__}:native_scene"]) == 1
    assert "refused" in capsys.readouterr().err


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_file_replays_with_the_users_env_fn(scene, tmp_path, sentinel, capsys, kind):
    path = hostile(scene, kind, tmp_path / "episode.msgpack", sentinel)
    assert main(["replay", str(path), "--env-fn", "artifact_scenes:created_inside_floor_env"]) == 0
    assert "exact: " in capsys.readouterr().out


def test_trust_runs_the_code_a_trusted_author_named(native, tmp_path, capsys):
    records = records_of(native)
    records[0] = ("header", {k: v for k, v in records[0][1].items() if k != "signature"})  # a colleague's file
    path = craft(records, tmp_path / "colleague.msgpack")
    assert main(["replay", str(path)]) == 1
    assert f"call the env factory '{__name__}:native_scene'" in capsys.readouterr().err
    assert main(["replay", str(path), "--trust"]) == 0
    assert replay(path, trust=True).exact


def test_an_audit_never_resumes_on_files_it_did_not_make(tmp_path, sentinel, capsys):
    out = tmp_path / "run"
    args = ["audit", "--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--episodes", "2", "--quiet", "--no-videos",
            "--out", str(out)]
    assert main(args) == 0
    planted = out / "seed_000001.msgpack"
    records = records_of(planted)
    footer = dict(records[-1][1])
    body = records[0][1]["tracked"][0]
    event = {"body": records[0][1]["bodies"]["names"][body], "body_id": body, "onset_substep": 10, "onset_time": 0.02,
             "speed_before": 0.0, "peak_speed": 3.0, "peak_substep": 20, "partner": None, "contact": None,
             "artifact": True}
    footer["detector"] = {**(footer.get("detector") or {}), "events": [event]}  # a rerun to redo, a video to make
    hostile_file = hostile(planted, "factory", tmp_path / "planted.msgpack", sentinel)
    craft([records_of(hostile_file)[0], *records[1:-1], ("footer", footer)], planted)
    (out / "seed_000001.msgpack.rerun.json").unlink(missing_ok=True)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "seed_000001.msgpack was not recorded by you" in err and err.count("\n") == 1
    assert main([*args, "--force"]) == 0  # redone as the run's own
    assert signed_by_user(load_recording(planted).header)


def test_python_m_never_imports_a_module_beside_the_recording(scene, tmp_path):
    directory = tmp_path / "downloaded"
    target = directory / "PWNED"
    path = hostile(scene, "module", directory / "episode.msgpack", target)
    (directory / "pwned_module.py").write_text(f"open({str(target)!r}, 'w').write('imported')\n")
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "replay", path.name], cwd=directory,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and not target.exists(), done.stderr
    assert "asks to import module 'pwned_module'" in done.stderr


@pytest.fixture(scope="module")
def physx(tmp_path_factory) -> Path:
    """A PhysX recording of the built-in placement, with its contact artifact (seed 116)."""
    pytest.importorskip("sapien")
    import simuguard_gym.envs  # noqa: F401
    from simuguard_gym import ArtifactMonitor

    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-v0"), tmp_path_factory.mktemp("physx")))
    env.reset(seed=116)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.unwrapped.expert_action())
        done = terminated or truncated
    env.close()
    return env.env.paths[0]


@pytest.mark.parametrize("command", ["replay", "rerun", "trace", "video", "view", "report", "export", "inspect",
                                     "detect"])
def test_a_sapien_recording_is_data_too(physx, tmp_path, sentinel, capsys, caplog, command):
    path = hostile(physx, "factory", tmp_path / "in" / "episode.msgpack", sentinel)
    argv = {"replay": ["replay", str(path)], "rerun": ["rerun", str(path)], "trace": ["trace", str(path)],
            "video": ["video", str(path)], "view": ["view", str(path)], "report": ["report", str(path.parent)],
            "export": ["export", str(path), "--to", "maniskill", "--out", str(tmp_path / "exported")],
            "inspect": ["inspect", str(path)], "detect": ["detect", str(path)]}[command]
    main(argv)  # whatever it exits with, the file's code never runs (the sentinel fixture checks)
    text = said(capsys, caplog)
    if command in ("replay", "rerun", "trace", "view", "report"):  # each rebuilds the env, or would
        assert "asks to call the env factory 'subprocess:run'" in text and "--trust" in text, text


@pytest.mark.parametrize("command", ["replay", "rerun", "trace"])
def test_an_unknown_env_or_a_factory_that_builds_no_env_is_one_line(scene, tmp_path, capsys, command):
    records = records_of(scene)
    header = {**records[0][1], "env": {**records[0][1]["env"], "id": "Nope-v0", "module": None}}
    path = craft([("header", header), *records[1:]], tmp_path / "unknown.msgpack")
    extra = ["--intervention", "timeconst=0.1"] if command == "rerun" else []
    assert main([command, str(path), *extra]) in (1, 2)
    err = capsys.readouterr().err
    assert "unknown env id 'Nope-v0': it is not registered here" in err and err.count("\n") == 1, err
    assert main([command, str(scene), *extra, "--env-fn", "builtins:dict"]) in (1, 2)
    err = capsys.readouterr().err
    assert "the env factory returned dict, which is not an env" in err and err.count("\n") == 1, err


def test_without_a_key_recordings_are_written_unsigned_with_one_warning(tmp_path, monkeypatch, caplog):
    """A config directory that cannot be made (here: under a file): the recorder goes on, unsigned,
    and says so once; a registered id still replays (in a child process), a named factory would not."""
    from simuguard_gym.recording import trust

    blocked = tmp_path / "not_a_directory"
    blocked.write_text("")
    monkeypatch.setenv("SIMUGUARD_CONFIG_DIR", str(blocked / "simuguard"))
    monkeypatch.setattr(trust, "_keys", {})
    monkeypatch.setattr(trust, "_unmakeable", set())
    paths = [record_scene(created_inside_floor, tmp_path / "recordings", seed=s, depth=0.03) for s in (0, 1)]
    assert caplog.text.count("cannot create the recording key") == 1
    assert not any(signed_by_user(load_recording(p).header) for p in paths)
    assert replay(paths[0]).exact

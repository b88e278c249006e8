"""No output follows a symbolic link (docs/security.md): a directory of recordings from elsewhere
(a downloaded tarball keeps its links) may hold ``report.csv -> ~/.bashrc``. Every file report,
trace, video, view and export write is refused where its name is a link, with one line that says
so, and the file the link points to is left as it was."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from artifact_scenes import created_inside_floor, record_scene
from recording_files import craft, records_of
from simuguard_gym import RecordPhysics, load_recording
from simuguard_gym.cli import main

from conftest import make_contact_scene, run_random

VICTIM = "the user's file, which no simuguard output may touch\n"


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    """A recording with a contact artifact and an outcome (a report has a table and figures)."""
    path = record_scene(created_inside_floor, tmp_path_factory.mktemp("scene"), depth=0.03)
    records = records_of(path)
    records[-1] = ("footer", {**records[-1][1], "success": False})
    return craft(records, path.with_name("scored.msgpack"))


def downloaded(scored: Path, tmp_path: Path, link: str) -> tuple[Path, Path, Path]:
    """A directory holding the recording and a link named ``link`` to a file outside it."""
    directory = tmp_path / "downloaded"
    directory.mkdir()
    recording = directory / "episode.msgpack"
    recording.write_bytes(scored.read_bytes())
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM)
    (directory / link).symlink_to(victim)
    return directory, recording, victim


def refused(capsys, victim: Path, link: Path) -> None:
    err = capsys.readouterr().err
    assert f"refusing to write {link}: it is a symbolic link" in err, err
    assert victim.read_text() == VICTIM and link.is_symlink()


@pytest.mark.parametrize("link", ["report.csv", "report.json", "report.html", "scores.png", "scores.svg",
                                  "artifact_000.png", "artifact_000.svg", "peak_speeds.png"])
def test_report(scored, tmp_path, capsys, link):
    if link not in ("report.csv", "report.json"):
        pytest.importorskip("matplotlib")
    directory, _, victim = downloaded(scored, tmp_path, link)
    assert main(["report", str(directory), "--no-trace"]) == 1
    refused(capsys, victim, directory / link)


def test_report_paired(scored, tmp_path, capsys):
    directory, _, victim = downloaded(scored, tmp_path, "paired.csv")
    assert main(["report", str(directory), "--vs", str(directory), "--no-trace"]) == 1
    refused(capsys, victim, directory / "paired.csv")


def test_trace(scored, tmp_path, capsys):
    directory, recording, victim = downloaded(scored, tmp_path, "episode.msgpack.trace.json")
    assert main(["trace", str(recording)]) == 1
    refused(capsys, victim, directory / "episode.msgpack.trace.json")


def test_video(scored, tmp_path, capsys):
    pytest.importorskip("av")
    directory, recording, victim = downloaded(scored, tmp_path, "episode.mp4")
    assert main(["video", str(recording)]) == 1
    refused(capsys, victim, directory / "episode.mp4")


def test_view(scored, tmp_path, capsys):
    pytest.importorskip("rerun")
    directory, recording, victim = downloaded(scored, tmp_path, "episode.rrd")
    assert main(["view", str(recording)]) == 1
    refused(capsys, victim, directory / "episode.rrd")


@pytest.mark.skipif(importlib.util.find_spec("h5py") is None, reason="h5py (the maniskill extra) not installed")
@pytest.mark.parametrize("suffix", [".h5", ".json"])
def test_export(scored, tmp_path, capsys, suffix):
    directory, recording, victim = downloaded(scored, tmp_path, "simuguard_gym_MujocoScene-v0" + suffix)
    assert main(["export", str(recording), "--to", "maniskill", "--out", str(directory)]) == 1
    refused(capsys, victim, directory / ("simuguard_gym_MujocoScene-v0" + suffix))


def test_a_recording_is_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM)
    directory = tmp_path / "recordings"
    directory.mkdir()
    (directory / "episode_000000.msgpack").symlink_to(victim)
    (directory / "episode_000001.msgpack.partial").symlink_to(victim)
    env = RecordPhysics(make_contact_scene(max_episode_steps=10), directory)
    run_random(env, 10, seed=1)
    env.close()
    assert victim.read_text() == VICTIM
    assert [p.name for p in env.paths] == ["episode_000002.msgpack"]  # the next name free of links
    assert load_recording(env.paths[0]).substeps == 50

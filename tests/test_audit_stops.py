"""Audits survive any stop: Ctrl-C or SIGTERM at any point of a 1- or 2-worker run stops every
process of it and leaves the interrupted episode to be redone, so that the resumed run scores
what an uninterrupted one does; a second audit on the same directory is refused while the first
runs; on a full disk every episode that could not be recorded is named, never scored."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simuguard_gym import load_recording
from simuguard_gym.audit import stopping_on_signals
from simuguard_gym.cli import main

ENV = ["--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--env-kwargs", '{"pad_kp": 800, "pad_timeconst": 0.02}',
       "--episodes", "6", "--intervention", "timeconst=0.1", "--no-videos", "--quiet"]


def outcomes(directory: Path) -> dict[str, tuple]:
    found = {}
    for path in sorted(directory.glob("seed_*.msgpack")):
        footer = load_recording(path).footer
        found[path.name] = (footer["success"], footer["ended"], [e["onset_substep"] for e in footer["detector"]["events"]])
    return found


def scores(directory: Path) -> list[dict]:
    return json.loads((directory / "report.json").read_text())["tasks"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main(["audit", *ENV, "--out", str(out)]) == 0
    return out


def start(out: Path, workers: int) -> subprocess.Popen:
    """The audit as a user starts it from a shell: a process group of its own (a terminal's Ctrl-C
    reaches every process in it)."""
    return subprocess.Popen([sys.executable, "-m", "simuguard_gym.cli", "audit", *ENV, "--out", str(out),
                             "--workers", str(workers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (zombies, which are dead, left out)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def wait_for_episodes(out: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until the run has begun writing episodes (its handlers set, its workers started)."""
    deadline = time.monotonic() + timeout
    while not list(out.glob("seed_*.msgpack*")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the audit wrote no episode"
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
@pytest.mark.parametrize("point", [0, 1])
def test_a_stopped_audit_resumes_to_the_scores_of_an_uninterrupted_one(uninterrupted, tmp_path, workers, how, point):
    out = tmp_path / "run"
    process = start(out, workers)
    wait_for_episodes(out, process)
    time.sleep(random.Random(f"{workers}{how}{point}").uniform(0.0, 1.5))  # somewhere inside the run
    processes = descendants(process.pid) | {process.pid}
    if how == "ctrl-c":
        os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the group
    else:
        os.kill(process.pid, signal.SIGTERM)  # a job scheduler's stop: the main process only
    _, err = process.communicate(timeout=120)
    # 130: stopped; 0: the run had ended when the signal came; killed by it: it came as the run was
    # leaving its episodes (writing its report), where the default action is what a user expects
    assert process.returncode in (0, 130, -signal.SIGINT if how == "ctrl-c" else -signal.SIGTERM), err
    if process.returncode == 130:  # what stopped it, in one line (with how to resume, if episodes were left)
        assert err.strip().splitlines()[-1].startswith("simuguard audit: "), err
    deadline = time.monotonic() + 10
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(processes), "a process of the stopped run is still running"
    for path in out.glob("seed_*.msgpack"):  # whatever is final is an episode the env ended
        assert load_recording(path).footer["ended"] in ("terminated", "truncated")
    assert main(["audit", *ENV, "--out", str(out)]) == 0  # resumed
    assert outcomes(out) == outcomes(uninterrupted)
    assert scores(out) == scores(uninterrupted)
    assert not list(out.glob("*.partial"))


def test_an_error_a_stop_caused_inside_c_code_is_the_stop():
    """C code that calls back into Python (matplotlib's Agg) turns the KeyboardInterrupt raised in
    it into an error of its own: after a stop signal, the run ends as stopped, not as that error."""
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGINT"), stopping_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            raise ValueError("Invalid bounding box") from None
    with pytest.raises(ValueError, match="bad input"), stopping_on_signals():
        raise ValueError("bad input")  # no stop came: an error stays the error


def test_a_second_audit_on_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    process = start(out, 1)
    try:
        wait_for_episodes(out, process)
        assert main(["audit", *ENV, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another audit (pid {process.pid})" in err and err.count("\n") == 1
    finally:
        process.terminate()
        process.communicate(timeout=120)
    assert main(["audit", *ENV, "--out", str(out)]) == 0  # the first is gone: resumed


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "run.txt"
    out.write_text("not a directory")
    assert main(["audit", *ENV, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a file; an audit's --out is a directory" in err and err.count("\n") == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (about four recordings of the scene), where this machine lets tests mount one."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.faults  # RecordPhysics reports the recordings it could not write in info, as it should
def test_a_full_disk_names_every_episode_it_lost(small_disk, capsys):
    out = small_disk / "run"
    args = ["audit", *ENV[:ENV.index("--episodes")], "--episodes", "10", *ENV[ENV.index("--episodes") + 2:],
            "--out", str(out)]
    code = main(args)
    captured = capsys.readouterr()
    recorded = sorted(p.name for p in out.glob("seed_*.msgpack"))
    lost = [line for line in captured.err.splitlines() if ": not recorded: " in line]
    assert 0 < len(recorded) < 10 and len(recorded) + len(lost) == 10, captured.err
    for line in lost:
        assert "No space left on device" in line
    named = {line.split(": not recorded: ")[0].rsplit("/", 1)[1] for line in lost}
    assert named.isdisjoint(recorded)
    assert f"{len(lost)} episodes not recorded" in captured.err
    assert code == 1  # a run that lost episodes never ends as a success
    table = [line.split() for line in captured.out.splitlines() if line.startswith("all ")]
    if table:  # printed before the report files, which may not fit either
        assert int(table[0][1]) == len(recorded)  # N: what was recorded, nothing else
    assert not (out / "report.csv").exists() or (out / "report.csv").read_text().startswith("task,")

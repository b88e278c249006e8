"""One convention for every command: files and directories wherever recordings are read, one exit
code per kind of outcome, errors in words (no errno codes, no tracebacks), help without markup."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import gymnasium as gym
import pytest

from simuguard_gym import RecordPhysics
from simuguard_gym.cli import EXIT_CODES, build_parser, main

#: The commands that read recordings, and the options each needs besides its paths.
READERS = {"inspect": [], "replay": [], "detect": [], "trace": [], "rerun": [], "video": [], "view": [],
           "export": ["--to", "maniskill", "--out", "{tmp}/exported"]}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    directory = tmp_path_factory.mktemp("recordings")
    env = RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0"), directory)
    for seed in (0, 1):
        env.reset(seed=seed)
        for _ in range(3):
            env.step(env.unwrapped.expert_action())
    env.close()
    return directory


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_reader_takes_files_and_directories():
    for name in READERS:
        (paths,) = [a for a in _subcommands()[name]._actions if not a.option_strings]
        assert paths.nargs == "+" and paths.metavar == "FILE|DIR", name


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_missing_input_is_exit_2_in_words(command, tmp_path, capsys):
    missing = tmp_path / "no_such.msgpack"
    argv = [command, str(missing), *(a.format(tmp=tmp_path) for a in READERS[command])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"No such file or directory: {missing}" in err and "[Errno" not in err and "Traceback" not in err


def test_inspect_rerun_and_trace_read_a_directory_with_json_lines(recordings, capsys):
    assert main(["inspect", str(recordings), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["seed"] for line in lines] == [0, 1] and all(line["engine"] == "mujoco" for line in lines)
    assert main(["rerun", str(recordings), "--intervention", "timeconst=0.01", "--json"]) == 0
    reruns = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(reruns) == 2 and all(r["prefix_exact"] and r["switch"] == "start" for r in reruns)
    assert main(["trace", str(recordings)]) == 0
    assert capsys.readouterr().out.count("no event or deep-penetration flag to trace") == 2


def test_one_unreadable_recording_among_several_is_exit_1_and_named(recordings, tmp_path, capsys):
    broken = tmp_path / "broken.msgpack"
    broken.write_bytes(b"not a recording")
    assert main(["inspect", str(recordings), str(broken)]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("recording  ") == 2 and f"{broken}: error:" in captured.err


def test_help_says_the_exit_codes_and_carries_no_markup():
    text = build_parser().format_help()
    assert EXIT_CODES in text and "130" in text
    for name, parser in _subcommands().items():
        helps = [parser.description or ""] + [a.help or "" for a in parser._actions]
        for help_text in helps:
            assert "``" not in help_text and not re.search(r":(func|class|mod):", help_text), (name, help_text)
            assert not re.search(r"SimuGuard [A-Z]?\d|RigPI", help_text), (name, help_text)
    parent = build_parser()
    sub = next(a for a in parent._actions if isinstance(a, argparse._SubParsersAction))
    for choice in sub._choices_actions:  # the one-line help of each command in `simuguard --help`
        assert "``" not in (choice.help or "") and not re.search(r"SimuGuard [A-Z]?\d", choice.help or "")


def test_ctrl_c_is_one_line():
    """SIGINT during a long command: one line on stderr, exit 130, no traceback."""
    code = ("import signal, threading, os; from simuguard_gym.cli import main; "
            "threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start(); "
            "raise SystemExit(main(['stress', '--poses', '100000']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-1500:]
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith("simuguard stress:")


def test_the_commands_that_report_results_print_json_lines(recordings, tmp_path, capsys):
    """`--json` on every command that reads recordings or scores them: one JSON value per line."""
    for name in (*READERS, "report"):
        assert any("--json" in a.option_strings for a in _subcommands()[name]._actions), name
    assert main(["report", str(recordings), "--json", "--out", str(tmp_path / "report")]) == 0
    (found,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert found["tasks"][-1]["n"] == 2 and any(p.endswith("report.json") for p in found["written"])
    pytest.importorskip("h5py")
    assert main(["export", str(recordings), "--to", "maniskill", "--out", str(tmp_path / "out"), "--json"]) == 0
    (found,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert found["episodes"] == 2 and found["steps"] == 6 and found["h5"].endswith(".h5")


def test_video_prints_a_json_line_per_video(recordings, tmp_path, capsys, rendering):
    pytest.importorskip("av")
    assert main(["video", str(recordings), "--out", str(tmp_path), "--size", "64", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["frames"] for line in lines] == [3, 3] and all(line["exact"] for line in lines)

"""Every command that the README, the docs or a generated report offers works as written.

Each documented `simuguard ...` line parses with the CLI as written; the README's shell block runs
on the recordings its own Python examples write; every command a report offers on its rows runs
on the files it names. A command whose extra this install lacks must say which extra to install.
"""

from __future__ import annotations

import html
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from simuguard_gym.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
HAS_SAPIEN = importlib.util.find_spec("sapien") is not None


def shell_lines(text: str) -> list[str]:
    """The lines of the markdown's shell blocks, continuation lines joined."""
    lines = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return lines


def commands_in(line: str) -> list[list[str]]:
    """The `simuguard` commands of one shell line (after `&&`, `time`), as argv, comments left out;
    ``[--option value]`` (optional, in the docs' notation) counts as written out."""
    words = shlex.split(line.replace("[", "").replace("]", ""), comments=True)
    out, current = [], []
    for word in words + ["&&"]:
        if word in ("&&", "||", ";", "|"):
            if current:
                out.append(current)
            current = []
        else:
            current.append(word)
    found = []
    for command in out:
        if command and command[0] == "time":
            command = command[1:]
        if command and command[0] == "simuguard":
            found.append(command[1:])
    return found


def documented() -> list[tuple[str, list[str]]]:
    return [(path.name, argv) for path in DOCS for line in shell_lines(path.read_text()) for argv in commands_in(line)]


def test_the_docs_offer_commands():
    assert len(documented()) > 30 and {argv[0] for _, argv in documented()} >= {
        "demo", "inspect", "replay", "detect", "audit", "video", "rerun", "report", "stress", "trace", "view",
        "export", "identify", "repair-physx", "audit-init"}


@pytest.mark.parametrize("where, argv", documented(), ids=lambda x: x if isinstance(x, str) else " ".join(x)[:60])
def test_every_documented_command_parses_as_written(where, argv):
    try:
        build_parser().parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"{where}: `simuguard {' '.join(argv)}` does not parse (exit {stop.code})")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _lacks_an_extra(text: str) -> bool:
    return re.search(r"pip install ['\"]simuguard-gym\[\w+\]['\"]", text) is not None


@pytest.mark.extras
def test_the_readme_shell_block_runs_as_written(tmp_path, monkeypatch, capsys, rendering):
    """In a fresh directory: the README's Pusher examples (which write recordings/), then every
    command of its shell block, in order. Without the sapien extra the PhysX commands must name it."""
    readme = (ROOT / "README.md").read_text()
    examples = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "Pusher-v5" in b]
    done = subprocess.run([sys.executable, "-c", "\n".join(examples)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S) if "simuguard inspect" in b)
    ran = []
    for line in block.splitlines():
        for argv in commands_in(line):
            if argv[0] == "video" and not list(Path().glob("runs/place/*.msgpack")):
                assert not HAS_SAPIEN  # the audit before it made runs/place where it could run
                continue
            code, text = _run(argv, capsys)
            if code != 0 and not HAS_SAPIEN and _lacks_an_extra(text):
                continue  # the PhysX audit without SAPIEN: the extra is named
            assert code == 0, f"`simuguard {' '.join(argv)}` exited {code}: {text[-1500:]}"
            ran.append(argv[0])
    assert {"inspect", "replay", "detect", "rerun", "report", "stress"} <= set(ran)
    assert HAS_SAPIEN <= ({"audit", "video"} <= set(ran))


@pytest.mark.extras
def test_every_command_a_report_offers_runs_on_its_row(tmp_path, capsys, rendering):
    """An audit's report offers replay, rerun, view and video on every row: each runs, on a flagged
    row and an unflagged one (PhysX where SAPIEN is installed, else its MuJoCo twin)."""
    pytest.importorskip("matplotlib")  # the HTML report is the report extra's
    env_id = "simuguard_gym/PlaceCanBasket-v0" if HAS_SAPIEN else "simuguard_gym/PlaceCanBasket-MuJoCo-v0"
    out = tmp_path / "run"
    code, text = _run(["audit", "--env", env_id, "--policy", "scripted", "--episodes", "2", "--seed-base", "115",
                       "--out", str(out), "--no-videos", "--quiet"], capsys)
    assert code == 0, text[-1500:]
    page = (out / "report.html").read_text()
    offered = [shlex.split(html.unescape(c)) for c in re.findall(r"<code>(simuguard [^<]+)</code>", page)]
    assert len(offered) == 8 and {c[1] for c in offered} == {"replay", "rerun", "view", "video"}
    for command in offered:
        code, text = _run(command[1:], capsys)
        if command[1] == "view" and importlib.util.find_spec("rerun") is None:
            assert code != 0 and _lacks_an_extra(text), text
            continue
        if command[1] == "video" and importlib.util.find_spec("av") is None:
            assert code != 0 and _lacks_an_extra(text), text
            continue
        assert code == 0, f"`{' '.join(command)}` exited {code}: {text[-1500:]}"

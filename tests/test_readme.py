"""The README's Python examples that need only the core install run as written, and print what
their comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_pusher_examples_run_clean(tmp_path):
    pusher = [b for b in blocks() if "Pusher-v5" in b]
    assert len(pusher) == 2  # recording, then monitoring
    done = subprocess.run([sys.executable, "-c", "\n".join(pusher)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:3] == ["500 []", "500 None (500, 2, 6)", "exact: 500 of 500 substeps bit-identical"]


def test_every_extra_an_install_command_names_is_declared_as_spelled():
    """pip 23.2 matches an extra by its name as written: `.[dm_control]` against a declared
    `dm-control` installs nothing but a warning, and every test of that extra skips."""
    import configparser

    root = README.parent
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg")
    declared = set(config["options.extras_require"])
    named: set[str] = set()
    for doc in [README, *sorted((root / "docs").glob("*.md"))]:
        for group in re.findall(r"\.\[([\w,-]+)\]", doc.read_text()):
            named.update(group.split(","))
    suites = re.findall(r'(?:^|\s)suite [\w-]+ "([\w,-]+)"', (root / ".ci" / "run").read_text())
    assert len(suites) >= 8
    for group in suites:
        named.update(group.split(","))
    assert "dm-control" in named and named <= declared, sorted(named - declared)

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

"""`simuguard demo`, the README's main job, with fewer seeds."""

from __future__ import annotations

import json
import subprocess
import sys

import mujoco

from simuguard_gym.cli import main


def test_demo_runs_end_to_end(tmp_path, capsys):
    assert main(["demo", "--engine", "mujoco", "--episodes", "5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    if int(mujoco.__version__.split(".")[0]) >= 4:  # seed 4's squeeze artifact is pinned on MuJoCo 4
        assert "CONTACT ARTIFACT" in out and "rerun: success" in out
    assert "Rep." in out and "Replay" in out and "bounds" in out
    rows = json.loads((tmp_path / "report.json").read_text())["tasks"]
    assert rows[-1]["n"] == 5 and sorted(p.name for p in tmp_path.glob("*.msgpack")) == [f"seed_{s:06d}.msgpack" for s in range(5)]
    assert main(["demo", "--engine", "mujoco", "--episodes", "1", "--out", str(tmp_path)]) == 2  # never overwrites


def test_demo_as_a_user_runs_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "demo", "--engine", "mujoco", "--episodes", "1",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "recordings and report in" in done.stdout


def test_html_report_with_plots(tmp_path):
    """The report's HTML and PNGs exist, are non-empty, and the HTML carries the plots."""
    import pytest

    pytest.importorskip("matplotlib")
    assert main(["demo", "--engine", "mujoco", "--episodes", "5", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "<table>" in page and "scores.png" in page and page.count("data:image/png;base64,") >= 1
    assert (tmp_path / "scores.png").stat().st_size > 1000
    assert (tmp_path / "scores.svg").read_text().lstrip().startswith("<?xml") and 'href="scores.svg"' in page
    assert "Rep. 95% CI (Wilson)" in page
    # one line per recording, each with the commands that replay, rerun, view and film it in its details
    episodes = page[page.index('<table class="episodes">'):]
    episodes = episodes[:episodes.index("</table>")]
    assert episodes.count('<tr class="episode ') == 5 and episodes.count('<tr class="detail" hidden>') == 5
    assert episodes.count("simuguard replay ") == 5
    header = (tmp_path / "report.csv").read_text().splitlines()[0].split(",")
    assert {"as_run_wilson_low", "as_run_wilson_high"} <= set(header)
    if int(mujoco.__version__.split(".")[0]) >= 4:  # seed 4's artifact
        assert (tmp_path / "artifact_000.png").stat().st_size > 1000 and "artifact_000.png" in page
        assert 'href="#artifact_000"' in episodes and 'id="artifact_000"' in page
        assert (tmp_path / "peak_speeds.png").exists()


def test_the_demo_prints_the_audit_that_reproduces_its_table(tmp_path, capsys, monkeypatch):
    """The demo is an audit with the scripted expert: the command it prints gives its table, row for row,
    and its directory holds that audit's manifest."""
    import shlex

    assert main(["demo", "--engine", "mujoco", "--episodes", "5", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    command = out.split("the same table from an audit (another --out): ", 1)[1].splitlines()[0]
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    assert manifest["config"]["env_kwargs"] == {"pad_kp": 800.0, "pad_timeconst": 0.02}
    assert manifest["config"]["intervention"] == "timeconst=0.1" and manifest["seeds"] == list(range(5))
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)
    assert argv[:2] == ["simuguard", "audit"] and main(argv[1:]) == 0
    audited = capsys.readouterr().out

    def table(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("task "))
        return lines[start:start + 3]

    assert table(audited) == table(out)
    demo_rows = json.loads((tmp_path / "demo" / "report.json").read_text())["tasks"]
    assert json.loads((tmp_path / "runs" / "demo" / "report.json").read_text())["tasks"] == demo_rows
    if int(mujoco.__version__.split(".")[0]) >= 4:
        assert demo_rows[-1]["flagged"] >= 1  # seed 4's squeeze: the rerun-corrected columns are compared too

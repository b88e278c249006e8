"""`simuguard audit`: same results with 1 or 2 workers, resumable, clear errors."""

from __future__ import annotations

import json

import pytest

from simuguard_gym import load_recording
from simuguard_gym.cli import main

ENV = ["--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--env-kwargs", '{"pad_kp": 800, "pad_timeconst": 0.02}',
       "--episodes", "6", "--intervention", "timeconst=0.1", "--quiet"]


def outcomes(directory):
    found = {}
    for path in sorted(directory.glob("seed_*.msgpack")):
        footer = load_recording(path).footer
        found[path.name] = (footer["success"], [e["onset_substep"] for e in footer["detector"]["events"]])
    return found


def test_workers_give_the_same_episodes(tmp_path):
    assert main(["audit", *ENV, "--out", str(tmp_path / "one")]) == 0
    assert main(["audit", *ENV, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    one, two = outcomes(tmp_path / "one"), outcomes(tmp_path / "two")
    assert len(one) == 6 and one == two
    rows = [json.loads((tmp_path / d / "report.json").read_text())["tasks"] for d in ("one", "two")]
    assert rows[0] == rows[1]
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["seeds"] == list(range(6)) and manifest["config"]["intervention"] == "timeconst=0.1"


def test_ray_gives_the_same_episodes(tmp_path):
    ray = pytest.importorskip("ray")
    assert main(["audit", *ENV, "--out", str(tmp_path / "one")]) == 0
    try:
        assert main(["audit", *ENV, "--out", str(tmp_path / "ray"), "--ray", "auto"]) == 0
    finally:
        ray.shutdown()
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "one") and len(outcomes(tmp_path / "one")) == 6


def test_an_interrupted_run_resumes(tmp_path):
    out = tmp_path / "run"
    assert main(["audit", *ENV, "--out", str(out)]) == 0
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("seed_*.msgpack") if p.name != "seed_000003.msgpack"}
    (out / "seed_000003.msgpack").rename(out / "seed_000003.msgpack.partial")  # killed while writing seed 3
    assert main(["audit", *ENV, "--out", str(out)]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("seed_*.msgpack") if p.name in kept} == kept
    assert load_recording(out / "seed_000003.msgpack").complete and not (out / "seed_000003.msgpack.partial").exists()


@pytest.mark.parametrize("args, message", [
    (["--env", "Nope-v0"], "unknown env id 'Nope-v0'"),
    (["--env", "simuguard_gym/DropInBin-v0", "--policy", "no_such_module:act"], "cannot import the policy"),
    (["--env", "simuguard_gym/DropInBin-v0", "--intervention", "gravity=1"], "unknown intervention 'gravity'"),
    (["--env", "simuguard_gym/DropInBin-v0", "--env-kwargs", "{oops"], "--env-kwargs is not JSON"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["audit", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_another_run_is_not_overwritten(tmp_path, capsys):
    assert main(["audit", *ENV[:-1], "--episodes", "1", "--out", str(tmp_path), "--quiet"]) == 0
    assert main(["audit", "--env", "simuguard_gym/DropInBin-v0", "--episodes", "1", "--out", str(tmp_path)]) == 2
    assert "holds another run" in capsys.readouterr().err
    assert main(["audit", "--env", "simuguard_gym/DropInBin-v0", "--episodes", "1", "--out", str(tmp_path),
                 "--force", "--quiet"]) == 0


def test_an_unreadable_recording_is_named_not_dropped(tmp_path, capsys):
    import importlib.util

    out = tmp_path / "run"
    args = ["audit", *ENV[:ENV.index("--episodes")], "--episodes", "2", *ENV[ENV.index("--episodes") + 2:],
            "--out", str(out)]
    assert main(args) == 0
    assert "skipped" not in capsys.readouterr().err
    whole = (out / "seed_000001.msgpack").read_bytes()
    (out / "copy_of_seed_1.msgpack").write_bytes(whole[:len(whole) // 2])  # cut off: not scored
    assert main(args) == 0  # resumed: nothing left to run, the report again
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("simuguard audit: skipped ")]
    assert len(skipped) == 1 and "copy_of_seed_1.msgpack: " in skipped[0] and "truncated" in skipped[0]
    assert [line.split()[1] for line in captured.out.splitlines() if line.startswith("all ")] == ["2"]  # N
    saved = json.loads((out / "report.json").read_text())
    assert len(saved["skipped"]) == 1 and "copy_of_seed_1.msgpack" in saved["skipped"][0]
    if importlib.util.find_spec("matplotlib") is not None:  # the report extra
        assert "copy_of_seed_1.msgpack" in (out / "report.html").read_text()


def test_the_html_report_carries_the_runs_manifest(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    assert main(["audit", *ENV[:-1], "--episodes", "1", "--out", str(out), "--quiet"]) == 0
    page = (out / "report.html").read_text()
    manifest = page[page.index('<h2 id="manifest">'):]
    assert "simuguard-gym" in manifest and "gymnasium" in manifest and "config: env_id" in manifest
    assert "<tr><td>command</td><td>" in manifest  # the command line that made the run

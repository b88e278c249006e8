"""The repaired PhysX (GJK threshold of 5.4) in a copy of SAPIEN: the false contact is gone, real
penetrations stay. Both engines run in subprocesses (one SAPIEN per process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("sapien")
if shutil.which("objdump") is None or shutil.which("nm") is None:
    pytest.skip("binutils (nm, objdump) not installed", allow_module_level=True)

from simuguard_gym.cli import main  # noqa: E402

PLACEMENT = textwrap.dedent("""
    import json, sys, gymnasium as gym, sapien
    import simuguard_gym.envs
    from simuguard_gym import ArtifactMonitor
    env = ArtifactMonitor(gym.make("simuguard_gym/PlaceCanBasket-v0"))
    env.reset(seed=116)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    print(json.dumps({"sapien": sapien.__file__, "artifact": info["simuguard"]["artifact"], "success": info["success"]}))
""")

PROBE = "from simuguard_gym.physx_repair.gjk_probe import main; main()"

def run(code, path=None):
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = f"{path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    out = tmp_path_factory.mktemp("physx") / "repaired"
    assert main(["repair-physx", "--out", str(out)]) == 0
    return out


def test_the_four_sites_and_idempotence(repaired, capsys):
    record = json.loads((repaired / "simuguard-physx-repair.json").read_text())
    assert len(record["sites"]) == 4 and record["constant"] == "00008028"  # 2^-46
    names = sorted(s["function"].split("(")[0] for s in record["sites"])
    assert names == ["physx::Gu::GJKCPairDoSimplex"] * 2 + ["physx::Gu::closestPtPointTetrahedron"] * 2
    assert main(["repair-physx", "--out", str(repaired)]) == 0  # the same repair again: nothing changes
    assert json.loads((repaired / "simuguard-physx-repair.json").read_text()) == record


def test_an_already_repaired_library_is_refused(repaired, tmp_path):
    code = ("import sys; from simuguard_gym.cli import main; "
            f"sys.exit(main(['repair-physx', '--out', {str(tmp_path / 'again')!r}]))")
    env = dict(os.environ, PYTHONPATH=f"{repaired}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 2 and "already repaired" in done.stderr


def test_the_false_contact_is_gone_and_real_penetration_stays(repaired):
    stock, fixed = run(PLACEMENT), run(PLACEMENT, repaired)
    assert str(repaired) in fixed["sapien"] and str(repaired) not in stock["sapien"]
    assert stock["artifact"] and not stock["success"]  # PhysX 5.3.1 throws the can (seed 116)
    assert not fixed["artifact"] and fixed["success"]


def test_the_pinned_two_piece_scene(repaired):
    """The pinned sweep: stock PhysX 5.3.1 reports pieces 6 mm apart as 18 mm deep with a flipped
    normal; the repaired copy reports their true gap; a real 5 mm overlap keeps its depth in both."""
    stock, fixed = run(PROBE), run(PROBE, repaired)
    assert str(repaired) in fixed["sapien"] and str(repaired) not in stock["sapien"]
    gap = stock["sweep"]["true_gap"]
    assert gap > 0.005 and fixed["sweep"]["true_gap"] == gap
    assert stock["sweep"]["false_contact"] and stock["sweep"]["reported_depth"] > 0.015
    assert stock["sweep"]["normal_alignment"] < -0.9  # the normal points into the wall, not away from it
    assert not fixed["sweep"]["false_contact"]
    assert -fixed["sweep"]["reported_depth"] == pytest.approx(gap, abs=1e-4)
    assert fixed["sweep"]["normal_alignment"] > 0.99
    for result in (stock, fixed):
        assert result["overlap"]["reported_depth"] == pytest.approx(0.005, abs=1e-4)
    # the repair command checked the same and wrote it down
    check = json.loads((repaired / "simuguard-physx-repair.json").read_text())["verified"]
    assert check["stock_shows_false_contact"] and not check["repaired"]["false_contact"]


def test_audit_on_the_repaired_engine(repaired, tmp_path):
    assert main(["audit", "--env", "simuguard_gym/PlaceCanBasket-v0", "--episodes", "1", "--seed-base", "116",
                 "--out", str(tmp_path / "fixed"), "--repaired-physx", str(repaired), "--quiet"]) == 0
    rows = json.loads((tmp_path / "fixed" / "report.json").read_text())["tasks"]
    assert (rows[-1]["as_run"], rows[-1]["flagged"]) == (100.0, 0)
    from simuguard_gym import load_recording

    header = load_recording(tmp_path / "fixed" / "seed_000116.msgpack").header
    assert "repaired" in header["engine_version"]

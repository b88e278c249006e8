"""The examples run as a user runs them, with reduced sizes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script, *args):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_evaluate_policy(tmp_path):
    out = run("evaluate_policy.py", "--episodes", "2", "--out", str(tmp_path))
    assert "seed 100:" in out and "Rep." in out


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="sb3 extra not installed")
def test_train_ppo_sb3(tmp_path):
    out = run("train_ppo_sb3.py", "--timesteps", "1024", "--log", str(tmp_path))
    assert "simuguard/artifact_rate" in (tmp_path / "progress.csv").read_text().splitlines()[0]
    assert "watching: ['torso']" in out  # Ant's floating base
    ended = int(out.split("episodes ended at a contact artifact: ")[1].split()[0])
    assert ended >= 1  # the injected glitch of the first episode, at least


@pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="maniskill extra not installed")
def test_audit_maniskill():
    assert "replay of the first episode: exact" in run("audit_maniskill.py", "--episodes", "1", "--steps", "20")


def test_identify_object(tmp_path):
    out = run("identify_object.py", "--out", str(tmp_path))
    assert (tmp_path / "apple.csv").exists()
    mass_line = next(line for line in out.splitlines() if line.startswith("mass "))
    assert float(mass_line.split()[-1].rstrip("%")) < 3.0          # the apple's mass error
    assert "pushed box" in out and "mu" in out

"""Benchmark episodes replayed bit for bit from the file alone, in a process where the benchmark
cannot be imported: the recordings carry their compiled model (one per task and directory).

Runs where each benchmark is installed (robosuite: CI's robosuite suite; Meta-World: its own);
LIBERO's is in test_libero.py.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from simuguard_gym import RecordPhysics, attach, load_recording


def unseeded_lift() -> Any:
    """robosuite's Lift as many harnesses build it: ``suite.make`` without ``seed=`` (the cube's
    size is drawn at construction, so no rebuild has this model)."""
    import robosuite

    return robosuite.make("Lift", robots="Panda", has_renderer=False, has_offscreen_renderer=False,
                          use_camera_obs=False, horizon=15)


def replayed_without(packages: list[str], directory: Path) -> list[dict[str, Any]]:
    """``simuguard replay DIR --json`` in a fresh process where ``packages`` cannot be imported."""
    code = (f"import sys\nfor name in {packages!r}: sys.modules[name] = None\n"
            "from simuguard_gym.cli import main\n"
            f"sys.exit(main(['replay', {str(directory)!r}, '--json']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return lines


def check_from_file(directory: Path, paths: list[Path], packages: list[str]) -> None:
    assert len(paths) >= 2 and len(list((directory / "models").iterdir())) == 1  # one model for the task
    results = replayed_without(packages, directory)
    assert len(results) == len(paths)
    for result in results:
        assert result["exact"], result
        assert any("replayed on the model stored with the recording" in note for note in result["notes"]), result


@pytest.mark.skipif(importlib.util.find_spec("robosuite") is None, reason="robosuite not installed")
@pytest.mark.slow
def test_unseeded_suite_make_lift_replays_from_the_file_without_robosuite(tmp_path):
    env = attach(unseeded_lift(), lambda e: RecordPhysics(e, tmp_path))
    rng = np.random.default_rng(0)
    for _ in range(2):  # the harness's loop: reset (robosuite's hard reset), step until done
        env.reset()
        done = False
        while not done:
            _, _, done, _ = env.step(rng.uniform(-1, 1, 7))
    env.close()
    paths = sorted(tmp_path.glob("*.msgpack"))
    assert [load_recording(p).substeps for p in paths] == [15 * 25] * 2
    check_from_file(tmp_path, paths, ["robosuite"])


@pytest.mark.skipif(importlib.util.find_spec("metaworld") is None, reason="Meta-World not installed")
@pytest.mark.slow
def test_a_metaworld_episode_replays_from_the_file_without_metaworld(tmp_path):
    import metaworld  # noqa: F401 - registers Meta-World/MT1

    env = RecordPhysics(gym.make("Meta-World/MT1", env_name="pick-place-v3", seed=0, max_episode_steps=30), tmp_path)
    env.action_space.seed(0)
    for episode in range(2):  # Meta-World moves its goal and objects in the model at each reset
        env.reset(seed=episode)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    check_from_file(tmp_path, list(env.paths), ["metaworld"])

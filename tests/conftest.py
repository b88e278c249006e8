"""Shared scenes and helpers. Every test runs a real MuJoCo scene."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable

import simuguard_gym  # noqa: F401 - first: it picks MuJoCo's headless renderer before mujoco is imported

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import simuguard_gym.envs  # noqa: F401 - registers the built-in ids

# A table, five free objects resting on it and on each other, and an actuated two-axis pusher
# (critically damped) that shoves them around: at least 3 free objects in contact with each other
# and the table.
CONTACT_SCENE_XML = """
<mujoco model="contact-scene">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="table" pos="0 0 0.4">
      <geom name="table_top" type="box" size="0.5 0.5 0.02"/>
    </body>
    <body name="box_a" pos="0 0 0.45"><freejoint/><geom type="box" size="0.03 0.03 0.03" mass="0.1"/></body>
    <body name="box_b" pos="0.061 0 0.45"><freejoint/><geom type="box" size="0.03 0.03 0.03" mass="0.1"/></body>
    <body name="box_c" pos="0.0 0 0.511"><freejoint/><geom type="box" size="0.03 0.03 0.03" mass="0.1"/></body>
    <body name="ball" pos="-0.07 0.0 0.45"><freejoint/><geom type="sphere" size="0.03" mass="0.05"/></body>
    <body name="can" pos="0.03 0.07 0.47"><freejoint/><geom type="cylinder" size="0.025 0.05" mass="0.01"/></body>
    <body name="pusher_base" pos="-0.25 0 0.46">
      <joint name="px" type="slide" axis="1 0 0" range="-0.2 0.5" damping="20"/>
      <joint name="py" type="slide" axis="0 1 0" range="-0.3 0.3" damping="20"/>
      <geom name="pusher" type="capsule" size="0.02" fromto="0 0 -0.02 0 0 0.05" mass="0.5"/>
    </body>
  </worldbody>
  <actuator>
    <position joint="px" kp="200" ctrlrange="-0.2 0.5" ctrllimited="true"/>
    <position joint="py" kp="200" ctrlrange="-0.3 0.3" ctrllimited="true"/>
  </actuator>
</mujoco>
"""


def make_contact_scene(**kwargs: Any) -> gym.Env:
    return gym.make("simuguard_gym/MujocoScene-v0", xml=CONTACT_SCENE_XML, frame_skip=5, **kwargs)


def run_random(env: gym.Env, steps: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """Seeded random actions; returns (obs, reward, terminated, truncated, info) per step."""
    env.action_space.seed(seed)
    out = [env.reset(seed=seed)]
    for _ in range(steps):
        result = env.step(env.action_space.sample())
        out.append(result)
        if result[2] or result[3]:
            out.append(env.reset())
    return out


def robosuite_available() -> bool:
    try:
        import robosuite  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means: not usable here
        return False
    return True


requires_robosuite = pytest.mark.skipif(not robosuite_available(), reason="robosuite extra not installed")


class SubstepProbe:
    """Reads qpos/qvel at every substep through MuJoCo's control callback, which the engine calls
    inside each mj_step/mj_step1/mj_forward: an observer independent of simuguard's hooks.
    Model compilation fails while it is set: build (and hard-reset) envs outside it."""

    def __init__(self) -> None:
        self.states: list[np.ndarray] = []

    def __enter__(self) -> "SubstepProbe":
        def callback(model: mujoco.MjModel, data: mujoco.MjData) -> None:
            self.states.append(np.concatenate([data.qpos, data.qvel]))

        mujoco.set_mjcb_control(callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        mujoco.set_mjcb_control(None)


@pytest.fixture(autouse=True)
def no_errors_in_info(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test that runs a simuguard wrapper asserts that no entry reached
    ``info["simuguard"]["errors"]``, unless it injects faults (``@pytest.mark.faults``)."""
    import sys

    from simuguard_gym.wrappers import info_key

    original, seen = info_key.with_simuguard, []

    def watching(info: dict[str, Any], **fields: Any) -> dict[str, Any]:
        seen.extend(fields.get("errors") or ())
        return original(info, **fields)

    for module in list(sys.modules.values()):  # the wrappers import it by name
        if getattr(module, "with_simuguard", None) is original:
            monkeypatch.setattr(module, "with_simuguard", watching)
    yield
    if request.node.get_closest_marker("faults") is None:
        assert seen == [], f"errors in info['simuguard']['errors'] of a clean run: {seen[:3]}"


@pytest.fixture
def record_dir(tmp_path: Path) -> Path:
    return tmp_path / "recordings"


EnvFactory = Callable[[], gym.Env]


def assert_same_states(a: list, b: list) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.tobytes() == y.tobytes(), f"qpos/qvel differ at probe call {i}"


@functools.lru_cache(maxsize=None)
def _rendering_problem() -> str | None:
    from simuguard_gym.headless import headless_rendering_problem

    context = getattr(mujoco, "GLContext", None)
    if context is None:
        return "MuJoCo rendering is disabled (MUJOCO_GL)"
    problem = headless_rendering_problem(context.__module__)
    if problem:
        return problem
    try:
        context(16, 16).free()
    except Exception as error:  # noqa: BLE001 - e.g. EGL without Mesa's drivers
        return (f"MuJoCo cannot create an OpenGL context ({type(error).__name__}: {error}); on Debian: "
                "apt install libegl1 libegl-mesa0 libgl1-mesa-dri")
    return None


@pytest.fixture
def rendering() -> None:
    """For tests that render cameras: skipped where MuJoCo cannot render, failed instead under
    SIMUGUARD_REQUIRE_RENDERING=1 (CI installs what rendering needs)."""
    problem = _rendering_problem()
    if problem is None:
        return
    if os.environ.get("SIMUGUARD_REQUIRE_RENDERING") == "1":
        pytest.fail(problem)
    pytest.skip(problem)

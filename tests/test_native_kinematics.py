"""The C loop of MuJoCo's kinematics (the optional ``_simuguard_mujoco_kinematics``) decodes the
bits the Python loop decodes: it calls the same functions of the same libmujoco in the same order."""

from __future__ import annotations

import os

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from simuguard_gym.engines import mujoco_kinematics
from simuguard_gym.engines.mujoco import MujocoAdapter

needs_native = pytest.mark.skipif(mujoco_kinematics._NATIVE is None, reason="the C extension is not built")
INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)


def episode_states(name: str, steps: int = 40) -> tuple[gym.Env, np.ndarray]:
    env = gym.make(name)
    env.reset(seed=3)
    env.action_space.seed(3)
    model, data = env.unwrapped.model, env.unwrapped.data
    states = np.empty((steps, mujoco.mj_stateSize(model, INTEGRATION)))
    for k in range(steps):
        env.step(env.action_space.sample())
        mujoco.mj_getState(model, data, states[k], INTEGRATION)
    return env, states


@needs_native
@pytest.mark.parametrize("name", ["HalfCheetah-v5", "Hopper-v5", "Pusher-v5", "Humanoid-v5"])
def test_the_c_loop_gives_the_python_loops_bits(name, monkeypatch):
    env, states = episode_states(name)
    adapter = MujocoAdapter(env.unwrapped.model, env.unwrapped.data)
    fast = adapter._kinematics(states)
    monkeypatch.setattr(mujoco_kinematics, "_NATIVE", None)
    slow = adapter._kinematics(states)
    assert len(fast) == len(slow) == 5
    for one, other in zip(fast, slow):
        assert one.shape == other.shape and one.tobytes() == other.tobytes()
    assert np.ptp(fast[0][:, 1:], axis=0).max() > 0  # the bodies moved: states that differ were decoded
    env.close()


@needs_native
def test_states_of_another_size_go_the_python_way(monkeypatch):
    """The C loop reads whole states: one of the wrong size never reaches it (the bindings' own
    error instead)."""
    env, states = episode_states("Hopper-v5", 3)
    adapter = MujocoAdapter(env.unwrapped.model, env.unwrapped.data)
    calls = []
    loop, functions = mujoco_kinematics._NATIVE
    monkeypatch.setattr(mujoco_kinematics, "_NATIVE", (lambda *a: calls.append(a) or loop(*a), functions))
    adapter._kinematics(states)
    assert len(calls) == 1
    with pytest.raises(Exception, match="size"):
        adapter._kinematics(states[:, :-1])
    assert len(calls) == 1
    env.close()


@needs_native
def test_the_c_loop_checks_what_it_is_given():
    import _simuguard_mujoco_kinematics as extension

    env, states = episode_states("Hopper-v5", 2)
    model, scratch = env.unwrapped.model, mujoco.MjData(env.unwrapped.model)
    _, functions = mujoco_kinematics._NATIVE
    arrays = (scratch.xpos, scratch.xquat, scratch.cvel, scratch.xipos, scratch.subtree_com)
    sources = tuple((a.ctypes.data, a.size) for a in arrays)
    outputs = tuple(np.empty((2, a.size)) for a in arrays)
    extension.kinematics(functions, model._address, scratch._address, INTEGRATION, states, sources, outputs)
    assert np.array_equal(outputs[0][1], scratch.xpos.ravel())  # the last state's, copied out
    with pytest.raises(ValueError, match="count"):
        extension.kinematics(functions, model._address, scratch._address, INTEGRATION, states[:1].copy(),
                             sources, outputs)
    with pytest.raises(ValueError, match="0"):
        extension.kinematics((0, *functions[1:]), model._address, scratch._address, INTEGRATION, states, sources,
                             outputs)
    with pytest.raises(ValueError):
        extension.kinematics(functions, model._address, scratch._address, INTEGRATION, states, sources,
                             (*outputs[:4], np.empty((2, 1))))
    env.close()


def test_the_extension_is_built_where_ci_requires_it():
    """CI sets SIMUGUARD_REQUIRE_NATIVE=1: the README's install must have compiled it there, and it
    must find libmujoco's functions."""
    if os.environ.get("SIMUGUARD_REQUIRE_NATIVE") != "1":
        pytest.skip("SIMUGUARD_REQUIRE_NATIVE is not set")
    assert mujoco_kinematics._NATIVE is not None

"""Attaching to any MuJoCo env: found wherever it keeps its MjData, stepped however it steps, and
never a silent empty recording (an error that names what was found, or lost substeps in info)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording, replay
from simuguard_gym.conformance import check_env
from simuguard_gym.engines.mujoco import MujocoAdapter
from simuguard_gym.engines.mujoco_hooking import mj_step as original_mj_step
from simuguard_gym.wrappers.info_key import INFO_KEY

XML = """<mujoco><option timestep="0.002"/><worldbody><geom type="plane" size="1 1 .1"/>
  <body name="arm" pos="0 0 .3"><joint name="hinge" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 .2 0 0" size=".02"/></body>
  <body name="box" pos=".3 0 .05"><freejoint/><geom type="box" size=".03 .03 .03"/></body>
</worldbody><actuator><motor joint="hinge" gear="1"/></actuator></mujoco>"""


class _Physics:
    """dm_control's layout: a physics object whose ``data.ptr`` is the MjData."""

    class _Wrapped:
        def __init__(self, ptr: Any) -> None:
            self.ptr = ptr

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model, self.data = self._Wrapped(model), self._Wrapped(mujoco.MjData(model))


class LegacyStepEnv(gym.Env):
    """Steps as dm_control's legacy Physics.step does: mj_step2 (finishing the substep whose
    mj_step1 ended the previous step), n - 1 whole substeps, then mj_step1 for the next one; the
    action is written between mj_step1 and mj_step2."""

    def __init__(self, substeps: int = 5) -> None:
        self.physics = _Physics(mujoco.MjModel.from_xml_string(XML))
        self.substeps = substeps
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (13,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)

    def _obs(self) -> np.ndarray:
        d = self.physics.data.ptr
        return np.concatenate([d.qpos, d.qvel])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        m, d = self.physics.model.ptr, self.physics.data.ptr
        mujoco.mj_resetData(m, d)
        d.qpos[1] += self.np_random.uniform(-0.05, 0.05)
        mujoco.mj_forward(m, d)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        m, d = self.physics.model.ptr, self.physics.data.ptr
        d.ctrl[:] = action
        mujoco.mj_step2(m, d)
        if self.substeps > 1:
            mujoco.mj_step(m, d, self.substeps - 1)
        mujoco.mj_step1(m, d)
        return self._obs(), 0.0, False, False, {}


gym.register("simuguard_test/LegacyStep-v0", entry_point=LegacyStepEnv, max_episode_steps=30)


def test_a_dm_control_style_physics_object_with_the_legacy_step_order(tmp_path):
    report = check_env(lambda: gym.make("simuguard_test/LegacyStep-v0"), tmp_path, episodes=3, steps=30,
                       fresh_process=False)
    assert report.failures() == []
    assert [e.recorded_substeps for e in report.episodes] == [150, 150, 150]
    rec = load_recording(report.episodes[0].recording)
    assert rec.columns["split"][::5].all() and not rec.columns["split"][1::5].any()  # mj_step2 opens each step


def test_an_env_without_mujoco_gets_an_error_naming_what_was_searched():
    with pytest.raises(TypeError, match=r"found no mujoco.MjData on CartPoleEnv .*pass adapter=MujocoAdapter"):
        RecordPhysics(gym.make("CartPole-v1"), "unused")


class TwoScenes(gym.Env):
    """Keeps two MjData under names of its own (the scene and a planning copy, say): simuguard
    cannot tell which one is stepped."""

    observation_space = gym.spaces.Box(-1, 1, (1,))
    action_space = gym.spaces.Box(-1, 1, (1,))

    def __init__(self) -> None:
        self.world = mujoco.MjModel.from_xml_string(XML)
        self.state, self.planner = mujoco.MjData(self.world), mujoco.MjData(self.world)


def test_an_env_with_two_mjdata_gets_an_error_naming_both(tmp_path):
    with pytest.raises(TypeError, match=r"holds several MjData \(env.unwrapped.state, env.unwrapped.planner\)"):
        RecordPhysics(TwoScenes(), tmp_path)
    env = TwoScenes()  # the documented way out: name the MjData it steps
    wrapped = RecordPhysics(env, tmp_path, adapter=MujocoAdapter(env.world, env.state))
    assert wrapped.adapter.data is env.state


class CapturedStep(gym.Env):
    """Steps through a reference to MuJoCo's mj_step taken before simuguard attached (as a module
    that did ``from mujoco import mj_step`` at import would): the hooks never see its substeps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (13,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)
    step_function = staticmethod(original_mj_step)

    def __init__(self) -> None:
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        return np.concatenate([self.data.qpos, self.data.qvel]), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.data.ctrl[:] = action
        self.step_function(self.model, self.data, 4)
        return np.concatenate([self.data.qpos, self.data.qvel]), 0.0, False, False, {}


@pytest.mark.faults
def test_substeps_that_bypass_the_hooks_are_reported_never_a_silent_empty_recording(tmp_path):
    env = ArtifactMonitor(RecordPhysics(CapturedStep(), tmp_path))
    env.reset(seed=0)
    steps = [env.step(np.zeros(1)) for _ in range(3)]
    env.close()
    errors = steps[0][-1][INFO_KEY]["errors"]
    assert {e["where"] for e in errors} == {"substeps", "monitor.substeps"}
    assert all("4 of the 4 substeps the env ran this episode did not reach the hooks" in e["message"]
               for e in errors)
    rec = load_recording(env.env.paths[0])
    assert rec.substeps == 0 and rec.footer["env_substeps"] == 12
    assert rec.lost["last_good_substep"] == -1 and "did not reach the hooks" in rec.lost["reason"]
    assert not replay(rec, env_fn=CapturedStep).exact


class LooksUpStep(CapturedStep):
    """Looks mujoco.mj_step up when it steps, as Gymnasium, robosuite and Meta-World do."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.data.ctrl[:] = action
        mujoco.mj_step(self.model, self.data, 4)
        return np.concatenate([self.data.qpos, self.data.qvel]), 0.0, False, False, {}


def test_a_raw_model_and_data_record_the_users_own_mj_step_calls(tmp_path):
    env = LooksUpStep()
    wrapped = RecordPhysics(env, tmp_path, adapter=MujocoAdapter(env.model, env.data))
    wrapped.reset(seed=0)
    for _ in range(5):
        *_, info = wrapped.step(np.zeros(1))
    assert info[INFO_KEY] == {"substeps": 20, "errors": []}
    wrapped.close()
    assert load_recording(wrapped.paths[0]).substeps == 20


class FlakyStep(LooksUpStep):
    """Bypasses the hooks in its third step only."""

    steps = 0

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        return (CapturedStep.step if self.steps == 3 else LooksUpStep.step)(self, action)


@pytest.mark.faults
def test_a_hole_in_mid_episode_keeps_the_substeps_before_it(tmp_path):
    env = RecordPhysics(FlakyStep(), tmp_path)
    env.reset(seed=0)
    steps = [env.step(np.zeros(1)) for _ in range(5)]
    env.close()
    assert [len(s[-1][INFO_KEY]["errors"]) for s in steps] == [0, 0, 1, 1, 1]
    rec = load_recording(env.paths[0])
    assert rec.substeps == 8 and rec.lost["last_good_substep"] == 7 and rec.footer["env_substeps"] == 20
    result = replay(rec, env_fn=LooksUpStep)
    assert not result.exact and result.substeps == 8 and result.divergence is None


class ResetsItself(LooksUpStep):
    """Resets its MjData in its third step (as MuJoCo itself does to an unstable simulation):
    MuJoCo's substep count starts again from 0."""

    steps = 0

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps == 3:
            mujoco.mj_resetData(self.model, self.data)
        return LooksUpStep.step(self, action)


def test_an_engine_count_reset_mid_episode_is_no_loss(tmp_path):
    env = RecordPhysics(ResetsItself(), tmp_path)
    env.reset(seed=0)
    steps = [env.step(np.zeros(1)) for _ in range(5)]
    env.close()
    assert all(s[-1][INFO_KEY]["errors"] == [] for s in steps)
    rec = load_recording(env.paths[0])
    assert rec.substeps == 20 and rec.footer["env_substeps"] is None and rec.lost is None  # unknown, not lost


class BlowsUpEarly(LooksUpStep):
    """An unstable simulation in its second step: MuJoCo itself resets the data inside mj_step
    (its substep count starts again from 0), early enough that the count after the reset exceeds
    the one before it."""

    steps = 0

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps == 2:
            self.data.qvel[:] = 1e12  # beyond mjMAXVAL: mj_checkVel resets the data
        return LooksUpStep.step(self, action)


def test_mujocos_own_reset_of_an_unstable_simulation_is_no_loss(tmp_path):
    env = RecordPhysics(BlowsUpEarly(), tmp_path)
    env.reset(seed=0)
    steps = [env.step(np.zeros(1)) for _ in range(4)]
    env.close()
    assert env.unwrapped.data.warning[mujoco.mjtWarning.mjWARN_BADQVEL].number == 1  # MuJoCo did reset
    assert all(s[-1][INFO_KEY]["errors"] == [] for s in steps)
    rec = load_recording(env.paths[0])
    assert rec.substeps == 16 and rec.footer["env_substeps"] is None and rec.lost is None  # unknown, not lost


@pytest.mark.faults
def test_substeps_that_bypass_the_hooks_between_env_steps_are_reported(tmp_path):
    env = RecordPhysics(LooksUpStep(), tmp_path)
    env.reset(seed=0)
    first = env.step(np.zeros(1))
    original_mj_step(env.unwrapped.model, env.unwrapped.data)  # a captured reference, between steps
    second = env.step(np.zeros(1))
    env.close()
    assert first[-1][INFO_KEY]["errors"] == []
    assert [e["message"].split(":")[0] for e in second[-1][INFO_KEY]["errors"]] == [
        "1 of the 9 substeps the env ran this episode did not reach the hooks"]
    rec = load_recording(env.paths[0])
    assert rec.lost is not None and rec.footer["env_substeps"] == 9


def test_hooked_substeps_between_env_steps_are_recorded_and_counted(tmp_path):
    env = RecordPhysics(LooksUpStep(), tmp_path)
    env.reset(seed=0)
    env.step(np.zeros(1))
    mujoco.mj_step(env.unwrapped.model, env.unwrapped.data, 2)  # a user's own substeps, hooked
    *_, info = env.step(np.zeros(1))
    env.close()
    assert info[INFO_KEY] == {"substeps": 10, "errors": []}
    rec = load_recording(env.paths[0])
    assert rec.substeps == 10 and rec.footer["env_substeps"] == 10 and rec.lost is None


class RK4Steps(LooksUpStep):
    """An RK4 model stepped as dm_control steps one: whole mj_step calls, then an mj_step1 alone
    (position- and velocity-dependent fields brought up to date; no substep, though MuJoCo's step
    counter counts it). ``split``: as a split step instead (mj_step1, ctrl, mj_step2: MuJoCo
    integrates it with Euler), each a substep. ``bypass``: one substep through a captured mj_step."""

    def __init__(self, split: bool = False, bypass: bool = False) -> None:
        super().__init__()
        self.model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
        self.split, self.bypass = split, bypass

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.split:
            for _ in range(4):
                mujoco.mj_step1(self.model, self.data)
                self.data.ctrl[:] = action
                mujoco.mj_step2(self.model, self.data)
        else:
            self.data.ctrl[:] = action
            mujoco.mj_step(self.model, self.data, 4)
            mujoco.mj_step1(self.model, self.data)
        if self.bypass:
            original_mj_step(self.model, self.data)
        return np.concatenate([self.data.qpos, self.data.qvel]), 0.0, False, False, {}


@pytest.mark.parametrize("split", [False, True], ids=["whole_then_step1", "split"])
def test_an_rk4_mj_step1_is_no_substep_and_nothing_is_lost(tmp_path, split):
    env = RecordPhysics(RK4Steps(split=split), tmp_path)
    env.reset(seed=0)
    for _ in range(5):
        *_, info = env.step(np.ones(1))
    assert info[INFO_KEY] == {"substeps": 20, "errors": []}
    env.close()
    rec = load_recording(env.paths[0])
    assert rec.substeps == 20 and rec.lost is None
    assert replay(rec, env_fn=lambda: RK4Steps(split=split)).exact


@pytest.mark.faults
def test_an_rk4_env_that_bypasses_the_hooks_is_still_caught(tmp_path):
    env = RecordPhysics(RK4Steps(bypass=True), tmp_path)
    env.reset(seed=0)
    *_, info = env.step(np.ones(1))
    env.close()
    [error] = info[INFO_KEY]["errors"]
    assert error["type"] == "LostSubsteps"
    assert "1 of the 5 substeps the env ran this episode did not reach the hooks" in error["message"]

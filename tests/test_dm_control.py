"""dm_control's own envs (``suite.load``) under the wrappers through ``attach``: the harness's
TimeSteps unchanged, every substep recorded however dm_control steps (RK4's whole steps with a
trailing ``mj_step1``, Euler's split legacy step), replays exact in a fresh process.

Runs where dm_control is installed (CI's core suite); skipped elsewhere."""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("dm_control")

import native_envs  # noqa: E402
from simuguard_gym import ArtifactMonitor, RecordPhysics, attach, load_recording  # noqa: E402

# (domain, task): cartpole integrates with RK4, one substep per step; manipulator with Euler,
# ten split substeps per step; quadruped four.
TASKS = [("cartpole", "swingup"), ("manipulator", "bring_ball"), ("quadruped", "walk")]


def harness_run(env, episodes: int, seed: int = 0) -> list[list[tuple]]:
    """dm_control's loop: reset, step until the TimeStep is the last; every TimeStep kept."""
    spec = env.action_spec()
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(episodes):
        steps = [env.reset()]
        while not steps[-1].last():
            steps.append(env.step(rng.uniform(spec.minimum, spec.maximum)))
        runs.append([(int(t.step_type), t.reward, t.discount, {k: np.copy(v) for k, v in t.observation.items()})
                     for t in steps])
    return runs


def same_runs(a: list[list[tuple]], b: list[list[tuple]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(s[:3] == t[:3] and all(np.array_equal(s[3][k], t[3][k]) for k in s[3]) for s, t in
                                 zip(x, y)) for x, y in zip(a, b))


@pytest.mark.parametrize("domain,task", TASKS, ids=lambda v: v)
def test_suite_load_records_every_substep_and_replays_exact_in_a_fresh_process(tmp_path, domain, task):
    make = functools.partial(native_envs.dm_control_suite, domain, task, 0.5)
    plain = harness_run(make(), 2)
    env = attach(make(), lambda e: RecordPhysics(e, tmp_path), ArtifactMonitor, env_fn=make)
    attached = harness_run(env, 2)
    assert env.last_info["simuguard"]["errors"] == []
    env.close()
    assert same_runs(plain, attached)  # the TimeSteps a harness sees, bit for bit
    physics = make().physics
    per_step = int(round(make().control_timestep() / physics.model.opt.timestep))
    paths = sorted(tmp_path.glob("*.msgpack"))
    assert len(paths) == 2
    for path, run in zip(paths, attached):
        rec = load_recording(path)
        assert rec.errors == [] and rec.lost is None
        assert rec.footer["steps"] == len(run) - 1 and rec.substeps == (len(run) - 1) * per_step
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "replay", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "2 recordings: 2 bit-exact" in done.stdout, done.stdout + done.stderr


@pytest.mark.faults
def test_a_step_after_the_episode_ended_is_said(tmp_path):
    """A harness that steps on after its episode ended (without a reset): the steps are in no
    recording, and the wrappers say so."""
    make = functools.partial(native_envs.dm_control_suite, "cartpole", "swingup", 0.05)
    env = attach(make(), lambda e: RecordPhysics(e, tmp_path), env_fn=make)
    step = env.reset()
    while not step.last():
        step = env.step(np.zeros(1))
    assert env.last_info["simuguard"]["errors"] == []
    env.step(np.zeros(1))  # dm_control starts a new episode itself here; the wrappers saw no reset
    errors = env.last_info["simuguard"]["errors"]
    assert [e["type"] for e in errors] == ["StepsAfterEnd"] and "in no recording" in errors[0]["message"]
    env.close()

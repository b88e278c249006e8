"""The substep loop in C (SubstepHooks.around without a Python frame per substep) makes the calls
the Python loop makes, in the same order, and hands what listeners raise to the same place."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from simuguard_gym.engines.mujoco import MujocoAdapter
from simuguard_gym.physics import hooks as hooks_module
from simuguard_gym.physics.hooks import SubstepHooks

needs_loop = pytest.mark.skipif(hooks_module._RUN_SUBSTEPS is None, reason="the C extension is not built")


class Listener:
    def __init__(self, log, fail_at=None, error=RuntimeError):
        self.log, self.fail_at, self.error, self.failures = log, fail_at, error, []

    def before_substep(self, phase):
        self.log.append(("before", phase))
        if self.fail_at == ("before", phase):
            raise self.error("before")

    def after_substep(self):
        self.log.append(("after",))
        if self.fail_at == ("after", sum(x[0] == "after" for x in self.log)):
            raise self.error("after")

    def hook_failed(self, where, error):
        self.failures.append((where, type(error).__name__, str(error)))


def run(loop, monkeypatch, *, n=3, fail_at=None, error=RuntimeError, advance=None):
    monkeypatch.setattr(hooks_module, "_RUN_SUBSTEPS", loop)
    log = []
    hooks = SubstepHooks()
    listeners = [Listener(log, fail_at, error), Listener(log)]
    for listener in listeners:
        hooks.add(listener)
    hooks.around("start", advance or (lambda *args: log.append(("advance",) + args)), 1, 2, n=n)
    return log, [x.failures for x in listeners]


@needs_loop
@pytest.mark.parametrize("fail_at", [None, ("before", "start"), ("before", "continue"), ("after", 3)])
def test_the_c_loop_calls_and_reports_as_the_python_loop(monkeypatch, fail_at):
    native = run(hooks_module._RUN_SUBSTEPS, monkeypatch, fail_at=fail_at)
    python = run(None, monkeypatch, fail_at=fail_at)
    assert native == python
    assert native[0].count(("advance", 1, 2)) == 3  # the substeps run whatever the listeners do
    if fail_at is not None:  # every listener is told (they are called through the guarded loops)
        assert native[1][0] and native[1][0][0][1] == "RuntimeError"


@needs_loop
def test_an_interrupt_in_a_listener_and_an_error_of_the_engine_reach_the_caller(monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        run(hooks_module._RUN_SUBSTEPS, monkeypatch, fail_at=("before", "continue"), error=KeyboardInterrupt)

    def engine_error(*args):
        raise ValueError("the engine's own error")

    with pytest.raises(ValueError, match="the engine's own"):
        run(hooks_module._RUN_SUBSTEPS, monkeypatch, advance=engine_error)


@needs_loop
def test_mujoco_steps_through_the_c_loop_are_bit_identical(monkeypatch):
    xml = ('<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body pos="0 0 .2"><freejoint/>'
           '<geom size=".05"/></body></worldbody></mujoco>')
    states = []
    for loop in (hooks_module._RUN_SUBSTEPS, None):
        monkeypatch.setattr(hooks_module, "_RUN_SUBSTEPS", loop)
        model = mujoco.MjModel.from_xml_string(xml)
        data = mujoco.MjData(model)
        adapter = MujocoAdapter(model, data)
        log = []
        adapter.hooks.add(Listener(log))
        mujoco.mj_step(model, data, nstep=40)  # the env's own call, hooked
        adapter.hooks.remove(adapter.hooks.listeners[0])
        states.append((data.qpos.copy(), data.qvel.copy(), len(log)))
    np.testing.assert_array_equal(states[0][0], states[1][0])
    np.testing.assert_array_equal(states[0][1], states[1][1])
    assert states[0][2] == states[1][2] == 80

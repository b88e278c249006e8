"""dm_control suite tasks as their users load them (``suite.load``), seen as Gymnasium envs by
simuguard's ``BenchmarkEnv`` (what ``attach`` builds), one factory per task, importable by name for
a replay in a fresh process."""

from __future__ import annotations

from typing import Any

#: (domain, task): cartpole integrates with RK4 (one substep a step), the others with Euler in
#: dm_control's split legacy step.
TASKS = [("cartpole", "swingup"), ("manipulator", "bring_ball"), ("quadruped", "walk"), ("walker", "walk")]


def load(domain: str, task: str) -> Any:
    from dm_control import suite

    return suite.load(domain, task, task_kwargs={"random": 0})


def _factory(domain: str, task: str) -> Any:
    def build() -> Any:
        from simuguard_gym.attach import BenchmarkEnv

        return BenchmarkEnv(load(domain, task), env_fn=native)

    def native() -> Any:
        return load(domain, task)

    build.__name__ = f"{domain}_{task}"
    native.__name__ = native.__qualname__ = f"{domain}_{task}_native"
    return build, native


FACTORIES = {}
for _domain, _task in TASKS:
    _build, _native = _factory(_domain, _task)
    FACTORIES[f"{_domain}-{_task}"] = _build
    globals()[_native.__name__] = _native

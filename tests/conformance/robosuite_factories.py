"""robosuite tasks as their users build them (``GymWrapper(suite.make(...))``), one factory per
task, importable by name for ``simuguard replay --env-fn`` in a fresh process."""

from __future__ import annotations

from typing import Any

TASKS = {
    "Lift": "Panda",
    "Stack": "Panda",
    "PickPlaceCan": "Panda",
    "NutAssemblySquare": "Panda",
    "Door": "Panda",
    "TwoArmLift": ["Panda", "Panda"],
    # Their hard reset draws a new object (a hammer, a trash cube): the models of later episodes
    # differ from the model the env was built with, which the recording's model_changes give.
    "TwoArmHandover": ["Panda", "Panda"],
    "TwoArmTransport": ["Panda", "Panda"],
}


def make(task: str) -> Any:
    import robosuite as suite
    from robosuite.wrappers import GymWrapper

    # seed=0: robosuite draws placements from a generator seeded at construction (None: from the
    # OS), so only seeded instances can be compared run against run, with the wrappers and without.
    return GymWrapper(suite.make(task, robots=TASKS[task], has_renderer=False, use_camera_obs=False, seed=0))


def _factory(task: str) -> Any:
    def build() -> Any:
        return make(task)

    build.__name__ = task
    return build


TASKS_FACTORY = {task: _factory(task) for task in TASKS}
globals().update(TASKS_FACTORY)

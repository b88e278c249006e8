"""Interventions: one physics parameter changed, from a given substep on, for reruns.

Each names one parameter and its value, optionally the bodies it applies to (default: every
moving body that is not the robot). The string form is what ``simuguard rerun`` takes:

    depenetration=1.0        PhysX max depenetration velocity (m/s)
    timeconst=0.1            MuJoCo contact time constant (s, solref[0]; MuJoCo floors it at 2 dt)
    dampratio=2              MuJoCo contact damping ratio (solref[1]; 1 is critical damping)
    damping=5                MuJoCo contact damping times 5 at the same stiffness (solref[0] / 5,
                             solref[1] * 5, the time constant no lower than 2 dt; the bodies'
                             solref then sets their contacts': geom_solmix)
    mass=can:0.1             a body's mass (kg; inertia scaled with it)
    iterations=32            solver iterations (PhysX position iterations / MuJoCo opt.iterations)
    offset=0.001             PhysX contact offset (m)
    margin=0.001             MuJoCo contact margin (m)
    speed_clamp=1.0          not a simulation parameter: bodies' speeds are clipped after each substep

Bodies: ``name=value@body1,body2`` (``mass`` takes ``body:value``). Values are finite and
positive; iteration counts are whole numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: name -> (engines it exists in, unit, whether it is a simulation parameter)
KINDS = {
    "depenetration": (("sapien-physx",), "m/s", True),
    "timeconst": (("mujoco",), "s", True),
    "dampratio": (("mujoco",), "", True),
    "damping": (("mujoco",), "", True),
    "mass": (("mujoco", "sapien-physx"), "kg", True),
    "iterations": (("mujoco", "sapien-physx"), "", True),
    "offset": (("sapien-physx",), "m", True),
    "margin": (("mujoco",), "m", True),
    "speed_clamp": (("mujoco", "sapien-physx"), "m/s", False),
}

#: The rerun's change where none is named, per engine (docs/reruns.md has the measurements).
DEFAULTS = {"sapien-physx": "depenetration=1.0", "mujoco": "dampratio=4"}


def default_intervention(engine: str) -> str:
    """The rerun's change where the run names none.

    >>> default_intervention("sapien-physx")
    'depenetration=1.0'
    """
    if engine not in DEFAULTS:
        raise ValueError(f"no default intervention for engine {engine!r}; name one (e.g. mass=BODY:KG)")
    return DEFAULTS[engine]


@dataclass(frozen=True)
class Intervention:
    """One parameter, its value and the bodies (names; empty: every moving non-robot body).

    >>> Intervention.parse("mass=can:0.1")
    Intervention(name='mass', value=0.1, bodies=('can',))
    >>> str(Intervention.parse("depenetration=1@can,cup"))
    'depenetration=1.0@can,cup'
    """

    name: str
    value: float
    bodies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in KINDS:
            raise ValueError(f"unknown intervention {self.name!r}; known: {', '.join(KINDS)}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"intervention {self.name} needs a finite positive value, got {self.value!r}")
        if self.name == "iterations" and self.value != int(self.value):
            raise ValueError(f"iterations counts solver iterations: a whole number, got {self.value!r}")
        if self.name == "mass" and len(self.bodies) != 1:
            raise ValueError("mass needs exactly one body: mass=BODY:KG")

    @property
    def simulation_parameter(self) -> bool:
        """False for the speed clamp, which edits velocities instead of the physics."""
        return KINDS[self.name][2]

    def supported_by(self, engine: str) -> bool:
        return engine in KINDS[self.name][0]

    @classmethod
    def parse(cls, text: str) -> "Intervention":
        name, sep, rest = text.strip().partition("=")
        if not sep or not rest:
            raise ValueError(f"expected NAME=VALUE (e.g. depenetration=1.0, mass=can:0.1), got {text!r}")
        bodies: tuple[str, ...] = ()
        if name == "mass":
            body, colon, rest = rest.partition(":")
            if not colon:
                raise ValueError(f"mass needs a body: mass=BODY:KG, got {text!r}")
            bodies = (body,)
        elif "@" in rest:
            rest, names = rest.split("@", 1)
            bodies = tuple(n for n in names.split(",") if n)
        try:
            value = float(rest)
        except ValueError:
            raise ValueError(f"{name}: {rest!r} is not a number") from None
        return cls(name, value, bodies)

    def __str__(self) -> str:
        if self.name == "mass":
            return f"mass={self.bodies[0]}:{self.value}"
        return f"{self.name}={self.value}" + (f"@{','.join(self.bodies)}" if self.bodies else "")

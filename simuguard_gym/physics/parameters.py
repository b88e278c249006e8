"""The physics parameters a rerun changes, as values on named elements of a scene (numpy only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParameterValue:
    """One physics parameter's value on one element of a scene.

    >>> ParameterValue("geom_solref[0]", "geom can", 0.02)
    ParameterValue(parameter='geom_solref[0]', element='geom can', value=0.02)
    """

    parameter: str  # the engine's own name for it, e.g. "geom_solref[0]", "max_depenetration_velocity"
    element: str  # what it belongs to, e.g. "geom can", "body can", "model"
    value: float


@dataclass(frozen=True)
class ParameterChange:
    """One parameter of one element, before and after an intervention switched on."""

    parameter: str
    element: str
    before: float
    after: float

    def to_dict(self) -> dict[str, Any]:
        return {"parameter": self.parameter, "element": self.element, "before": self.before, "after": self.after}


def changes_between(before: list[ParameterValue], after: list[ParameterValue]) -> list[ParameterChange]:
    """The values of the same parameters read before and after a change, paired by element.

    >>> changes_between([ParameterValue("mass", "body can", 0.01)], [ParameterValue("mass", "body can", 0.1)])
    [ParameterChange(parameter='mass', element='body can', before=0.01, after=0.1)]
    """
    old = {(v.parameter, v.element): v.value for v in before}
    return [ParameterChange(v.parameter, v.element, old.get((v.parameter, v.element), float("nan")), v.value)
            for v in after]

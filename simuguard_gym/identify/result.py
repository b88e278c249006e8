"""What an identification returns: theta with standard errors, warnings, history, baseline."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simuguard_gym.identify.problem import UNITS


@dataclass
class IdentificationResult:
    """theta by name, its standard errors (NaN where not identified), and how it was obtained.

    ``identified[name]`` is False where the data can't determine the parameter (its value is
    then the prior's, and a warning says why); ``baseline`` is the Newton-Euler least-squares
    estimate; ``loss_history`` is L_pose + lambda P per iteration of the fit that won;
    ``seconds`` is the whole identification's wall time (``extra["fits"]`` lists each start and
    refit it ran, with its iterations and seconds).
    """

    names: tuple[str, ...]
    theta: np.ndarray
    se: np.ndarray
    identified: np.ndarray
    warnings: list[str]
    loss_history: list[float]
    iterations: int
    seconds: float
    seconds_per_iteration: float
    pose_loss: float
    method: str
    prior: dict[str, Any]
    baseline: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return float(self.theta[self.names.index(name)])

    def as_dict(self) -> dict[str, Any]:
        def clean(a):
            return [None if not np.isfinite(x) else float(x) for x in np.asarray(a, float)]
        return {
            "parameters": {n: {"value": float(v), "se": None if not np.isfinite(s) else float(s),
                               "identified": bool(ok), "unit": UNITS.get(n, ""), "baseline": b}
                           for n, v, s, ok, b in zip(self.names, self.theta, self.se, self.identified,
                                                     clean(self.baseline))},
            "warnings": list(self.warnings), "loss_history": [float(x) for x in self.loss_history],
            "iterations": self.iterations, "seconds": self.seconds,
            "seconds_per_iteration": self.seconds_per_iteration, "pose_loss": self.pose_loss,
            "method": self.method, "prior": self.prior, **self.extra,
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.as_dict(), **kwargs)

    def table(self, truth: dict[str, float] | None = None) -> str:
        """A text table: value, standard error, identified, and (given a truth) relative error
        (absolute where the truth is 0)."""
        head = f"{'parameter':<15}{'value':>13}{'std err':>12}  {'':<3}"
        head += f"{'truth':>13}{'error':>9}" if truth else ""
        lines = [head]
        for n, v, s, ok in zip(self.names, self.theta, self.se, self.identified):
            se = f"{s:12.3g}" if np.isfinite(s) else f"{'-':>12}"
            line = f"{n:<15}{v:13.5g}{se}  {'' if ok else 'n/i':<3}"
            if truth and n in truth:
                tv = truth[n]
                if abs(tv) > 0:
                    line += f"{tv:13.5g}{100 * abs(v - tv) / abs(tv):8.2f}%"
                else:  # no relative error of a zero (a centred CoM, a product of inertia): the absolute one
                    line += f"{tv:13.5g}{abs(v - tv):9.2g} (absolute)"
            lines.append(line)
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

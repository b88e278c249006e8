"""What is identified: a free body, or one link on a revolute or prismatic joint, and the names
of its parameters (theta)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simuguard_gym.identify.inertia import ENTRIES
from simuguard_gym.identify.shapes import Shape

FREE_PARAMETERS = ("mass", "com_x", "com_y", "com_z") + ENTRIES
UNITS = {"mass": "kg", "com_x": "m", "com_y": "m", "com_z": "m", **{e: "kg m^2" for e in ENTRIES},
         "mu": "", "hinge_inertia": "kg m^2", "gravity_moment": "kg m", "friction": "N or N m",
         "damping": "N s/m or N m s/rad"}

#: MuJoCo's integrators as MJCF names them
INTEGRATORS = ("Euler", "RK4", "implicit", "implicitfast")


@dataclass(frozen=True)
class Joint:
    """The 1-DoF joint a link moves on, in the world frame.

    ``axis`` is the joint axis; ``anchor`` a point on it (revolute only). ``friction_solref`` is
    MuJoCo's softness of the joint's dry friction where the data come from a MuJoCo model (the
    identification model then uses the same); without it the friction is as close to Coulomb's
    as the step allows.
    """

    kind: str
    axis: tuple[float, float, float] = (0.0, 0.0, 1.0)
    anchor: tuple[float, float, float] = (0.0, 0.0, 0.0)
    friction_solref: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("revolute", "prismatic"):
            raise ValueError(f"joint kind must be 'revolute' or 'prismatic', not {self.kind!r}")
        a = np.asarray(self.axis, float)
        if a.shape != (3,) or not np.isfinite(a).all() or np.linalg.norm(a) < 1e-9:
            raise ValueError(f"joint axis must be a non-zero 3-vector, got {self.axis}")
        object.__setattr__(self, "axis", tuple(a / np.linalg.norm(a)))
        object.__setattr__(self, "anchor", tuple(np.asarray(self.anchor, float)))


@dataclass(frozen=True)
class Support:
    """A static plane the body rests or slides on; its friction coefficient ``mu`` is identified."""

    height: float = 0.0                                  # the plane z = height, normal +z
    solref: tuple[float, float] | None = None            # MuJoCo contact softness, if known


@dataclass(frozen=True)
class Problem:
    """One identification problem.

    ``shapes`` are the body's solids in its frame (the frame the poses are given in); ``point`` is
    where the wrench acts, in that frame; ``gravity`` is in the world frame.
    """

    shapes: tuple[Shape, ...]
    joint: Joint | None = None
    support: Support | None = None
    point: tuple[float, float, float] = (0.0, 0.0, 0.0)
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    static_geoms: tuple = field(default=(), compare=False)   # engine descriptions of the scene around
    #: the MuJoCo integrator ("Euler", "RK4", "implicit", "implicitfast") that made the data, where
    #: a MuJoCo env made them: the identification model integrates as that env did
    integrator: str | None = None

    def __post_init__(self) -> None:
        if self.integrator is not None and self.integrator not in INTEGRATORS:
            raise ValueError(f"integrator must be one of {INTEGRATORS} (MJCF's names), not {self.integrator!r}")

    @property
    def kind(self) -> str:
        return "free" if self.joint is None else self.joint.kind

    def gravity_acts_on_joint(self) -> bool:
        g = np.asarray(self.gravity, float)
        if self.joint is None or np.linalg.norm(g) == 0:
            return False
        a = np.asarray(self.joint.axis)
        return float(np.linalg.norm(np.cross(a, g / np.linalg.norm(g)))) > 1e-3

    @property
    def names(self) -> tuple[str, ...]:
        if self.joint is None:
            return FREE_PARAMETERS + (("mu",) if self.support is not None or self.static_geoms else ())
        # a link's losses: dry friction (a constant force against the motion) and viscous damping
        if self.joint.kind == "prismatic":
            return ("mass", "friction", "damping")
        return ("hinge_inertia",) + (("gravity_moment",) if self.gravity_acts_on_joint() else ()) + ("friction",
                                                                                                   "damping")

"""One physics parameter of a SAPIEN/PhysX scene changed from a substep on (a rerun's intervention)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sapien.physx as physx

from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.parameters import ParameterValue


class SapienInterventions:
    """Mixed into :class:`~simuguard_gym.engines.sapien.SapienAdapter`."""

    _components: list[Any]  # every body's PhysX component, in the body table's order
    _cmass: np.ndarray | None
    body_table: Callable[[], BodyTable]

    def parameter_values(self, name: str, bodies: np.ndarray, value: float | None = None) -> list[ParameterValue]:
        """The values intervention ``name`` on ``bodies`` (ids) writes: as they are now, or with
        ``value`` the values it would set (in PhysX's float32)."""
        names = self.body_table().names
        labelled = [(f"body {names[int(b)]}", self._components[int(b)]) for b in bodies]
        moving = [(label, c) for label, c in labelled if not isinstance(c, physx.PhysxRigidStaticComponent)]

        def given(now: float) -> float:
            return float(now) if value is None else float(np.float32(value))

        if name == "depenetration":
            return [ParameterValue("max_depenetration_velocity", label, given(c.max_depenetration_velocity))
                    for label, c in moving]
        if name == "mass":
            return [ParameterValue("mass", label, given(c.mass)) for label, c in moving]
        if name == "iterations":
            return [ParameterValue("solver_position_iterations", label, given(c.solver_position_iterations))
                    for label, c in moving if isinstance(c, physx.PhysxRigidDynamicComponent)]
        if name == "offset":
            return [ParameterValue("contact_offset", f"{label} shape {i}", given(shape.contact_offset))
                    for label, c in labelled for i, shape in enumerate(c.collision_shapes)]
        raise ValueError(f"{name} is not a PhysX parameter (PhysX takes depenetration, mass, iterations, offset)")

    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Change one physics parameter of ``bodies`` (ids) from now on; returns a note or None."""
        self.parameter_values(name, bodies)  # refuses a name PhysX does not have
        components = [self._components[int(b)] for b in bodies]
        moving = [c for c in components if not isinstance(c, physx.PhysxRigidStaticComponent)]
        if name == "depenetration":
            for c in moving:
                c.set_max_depenetration_velocity(float(value))
        elif name == "mass":
            for c in moving:
                ratio = float(value) / float(c.mass) if c.mass > 0 else 1.0
                c.set_mass(float(value))
                c.set_inertia(np.asarray(c.inertia, np.float32) * np.float32(ratio))
            self._cmass = None
        elif name == "iterations":
            for c in moving:
                if isinstance(c, physx.PhysxRigidDynamicComponent):
                    c.set_solver_position_iterations(int(value))
        elif name == "offset":
            for c in components:
                for shape in c.collision_shapes:
                    shape.set_contact_offset(float(value))
        return None

    def clamp_speeds(self, bodies: np.ndarray, limit: float) -> None:
        """Scale down the linear velocity of dynamic ``bodies`` faster than ``limit`` (m/s)."""
        for b in bodies:
            c = self._components[int(b)]
            if isinstance(c, physx.PhysxRigidDynamicComponent) and not c.kinematic:
                v = np.asarray(c.linear_velocity, np.float64)
                speed = float(np.linalg.norm(v))
                if speed > limit:
                    c.set_linear_velocity((v * limit / speed).astype(np.float32))

"""One physics parameter of a MuJoCo scene changed from a substep on (a rerun's intervention)."""

from __future__ import annotations

import mujoco
import numpy as np

from simuguard_gym.physics.parameters import ParameterValue


class MujocoInterventions:
    """Mixed into :class:`~simuguard_gym.engines.mujoco.MujocoAdapter`."""

    model: mujoco.MjModel
    data: mujoco.MjData

    def parameter_values(self, name: str, bodies: np.ndarray) -> list[ParameterValue]:
        """The values intervention ``name`` on ``bodies`` (ids) writes, as they are now."""
        m = self.model
        if name in ("timeconst", "dampratio", "margin"):
            array, column, parameter = {"timeconst": (m.geom_solref, 0, "geom_solref[0]"),
                                        "dampratio": (m.geom_solref, 1, "geom_solref[1]"),
                                        "margin": (m.geom_margin, None, "geom_margin")}[name]
            geoms = np.flatnonzero(np.isin(m.geom_bodyid, bodies))
            return [ParameterValue(parameter, f"geom {_name(m, mujoco.mjtObj.mjOBJ_GEOM, g)}",
                                   float(array[g] if column is None else array[g, column])) for g in geoms]
        if name == "mass":
            return [ParameterValue("body_mass", f"body {_name(m, mujoco.mjtObj.mjOBJ_BODY, b)}", float(m.body_mass[b]))
                    for b in bodies]
        if name == "iterations":
            return [ParameterValue("opt.iterations", "model", float(m.opt.iterations))]
        raise ValueError(f"{name} is not a MuJoCo parameter (MuJoCo takes timeconst, dampratio, mass, iterations, "
                         "margin)")

    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Change one physics parameter of ``bodies`` (ids) from now on; returns a note or None."""
        self.parameter_values(name, bodies)  # refuses a name MuJoCo does not have
        m = self.model
        geoms = np.flatnonzero(np.isin(m.geom_bodyid, bodies))
        note = None
        if name == "timeconst":
            floor = 2 * m.opt.timestep
            refsafe = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE))
            if refsafe and value < floor:
                note = f"MuJoCo floors contact time constants at 2 dt: {value:g} s acts as {floor:g} s"
            m.geom_solref[geoms, 0] = value
        elif name == "dampratio":
            m.geom_solref[geoms, 1] = value
        elif name == "mass":
            for b in bodies:
                old = m.body_mass[b]
                m.body_mass[b] = value
                if old > 0:
                    m.body_inertia[b] *= value / old
            # The derived constants (body_invweight, ...) follow the mass. mj_setConst computes them
            # at qpos0 and leaves its data there: a scratch MjData keeps the env's state untouched.
            mujoco.mj_setConst(m, mujoco.MjData(m))
        elif name == "iterations":
            m.opt.iterations = int(value)
        elif name == "margin":
            m.geom_margin[geoms] = value
        return note

    def clamp_speeds(self, bodies: np.ndarray, limit: float) -> None:
        """Scale down the linear velocity of free ``bodies`` faster than ``limit`` (m/s)."""
        m = self.model
        for b in bodies:
            if m.body_jntnum[b] == 1 and m.jnt_type[m.body_jntadr[b]] == int(mujoco.mjtJoint.mjJNT_FREE):
                adr = m.jnt_dofadr[m.body_jntadr[b]]
                speed = float(np.linalg.norm(self.data.qvel[adr:adr + 3]))
                if speed > limit:
                    self.data.qvel[adr:adr + 3] *= limit / speed


def _name(m: mujoco.MjModel, kind: mujoco.mjtObj, index: int) -> str:
    return mujoco.mj_id2name(m, kind, int(index)) or f"#{int(index)}"

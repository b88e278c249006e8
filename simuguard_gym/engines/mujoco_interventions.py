"""One physics parameter of a MuJoCo scene changed from a substep on (a rerun's intervention)."""

from __future__ import annotations

import mujoco
import numpy as np


class MujocoInterventions:
    """Mixed into :class:`~simuguard_gym.engines.mujoco.MujocoAdapter`."""

    model: mujoco.MjModel
    data: mujoco.MjData

    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Change one physics parameter of ``bodies`` (ids) from now on; returns a note or None."""
        m = self.model
        geoms = np.flatnonzero(np.isin(m.geom_bodyid, bodies))
        note = None
        if name == "timeconst":
            floor = 2 * m.opt.timestep
            refsafe = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE))
            if refsafe and value < floor:
                note = f"MuJoCo floors contact time constants at 2 dt: {value:g} s acts as {floor:g} s"
            m.geom_solref[geoms, 0] = value
        elif name == "mass":
            for b in bodies:
                old = m.body_mass[b]
                m.body_mass[b] = value
                if old > 0:
                    m.body_inertia[b] *= value / old
            mujoco.mj_setConst(m, self.data)  # derived constants (e.g. body_invweight) follow the mass
        elif name == "iterations":
            m.opt.iterations = int(value)
        elif name == "margin":
            m.geom_margin[geoms] = value
        else:
            raise ValueError(f"{name} is not a MuJoCo parameter (MuJoCo takes timeconst, mass, iterations, margin)")
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

"""One physics parameter of a MuJoCo scene changed from a substep on (a rerun's intervention)."""

from __future__ import annotations

import mujoco
import numpy as np

from simuguard_gym.physics.parameters import ParameterValue

#: geom_solmix given to the bodies' geoms by ``damping``: their solref then makes their contacts'
#: (MuJoCo mixes the two geoms' solref by solmix; 1 is its default).
DOMINANT_SOLMIX = 1000.0


class MujocoInterventions:
    """Mixed into :class:`~simuguard_gym.engines.mujoco.MujocoAdapter`."""

    model: mujoco.MjModel
    data: mujoco.MjData

    def parameter_values(self, name: str, bodies: np.ndarray, value: float | None = None) -> list[ParameterValue]:
        """The values intervention ``name`` on ``bodies`` (ids) writes: as they are now, or with
        ``value`` the values it would set."""
        m = self.model
        geoms = _geoms(m, bodies, name)
        labels = [f"geom {_name(m, mujoco.mjtObj.mjOBJ_GEOM, g)}" for g in geoms]
        if name in ("timeconst", "dampratio", "margin"):
            array, column, parameter = {"timeconst": (m.geom_solref, 0, "geom_solref[0]"),
                                        "dampratio": (m.geom_solref, 1, "geom_solref[1]"),
                                        "margin": (m.geom_margin, None, "geom_margin")}[name]
            now = array[geoms] if column is None else array[geoms, column]
            new = now if value is None else np.full(len(geoms), float(value))
            return [ParameterValue(parameter, label, float(v)) for label, v in zip(labels, new)]
        if name == "damping":
            solref, solmix = m.geom_solref[geoms], m.geom_solmix[geoms]
            if value is not None:
                solref, solmix = _damped(solref, solmix, float(value), self._timeconst_floor())
            return [ParameterValue(p, label, float(v)) for label, ref, mix in zip(labels, solref, solmix)
                    for p, v in (("geom_solref[0]", ref[0]), ("geom_solref[1]", ref[1]), ("geom_solmix", mix))]
        if name == "mass":
            return [ParameterValue("body_mass", f"body {_name(m, mujoco.mjtObj.mjOBJ_BODY, b)}",
                                   float(m.body_mass[b] if value is None else value)) for b in bodies]
        if name == "iterations":
            return [ParameterValue("opt.iterations", "model", float(m.opt.iterations if value is None else int(value)))]
        raise ValueError(f"{name} is not a MuJoCo parameter (MuJoCo takes timeconst, dampratio, damping, mass, "
                         "iterations, margin)")

    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Change one physics parameter of ``bodies`` (ids) from now on; returns a note or None."""
        self.parameter_values(name, bodies)  # refuses a name MuJoCo does not have
        m = self.model
        geoms = _geoms(m, bodies, name)
        notes = []
        direct = len(np.flatnonzero(np.isin(m.geom_bodyid, bodies))) - len(geoms)
        if direct and name in ("timeconst", "dampratio", "damping"):
            notes.append(f"{direct} geom(s) of the bodies use MuJoCo's direct solref (-stiffness, -damping), "
                         f"where {name} does not apply: left as they are")
        floor = self._timeconst_floor()
        if name == "timeconst":
            if value < floor:
                notes.append(f"MuJoCo floors contact time constants at 2 dt: {value:g} s acts as {floor:g} s")
            m.geom_solref[geoms, 0] = value
        elif name == "dampratio":
            m.geom_solref[geoms, 1] = value
        elif name == "damping":
            before = m.geom_solref[geoms].copy()
            m.geom_solref[geoms], m.geom_solmix[geoms] = _damped(before, m.geom_solmix[geoms], value, floor)
            reached = np.maximum(before[:, 0], floor) / m.geom_solref[geoms, 0]
            short = reached < value * (1 - 1e-9)
            if short.any():
                notes.append(f"the damping of {int(short.sum())} geom(s) is at most {reached[short].max():.3g} times, "
                             f"not {value:g}: their time constant reached MuJoCo's floor of 2 dt")
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
        return "; ".join(notes) or None

    def _timeconst_floor(self) -> float:
        """The smallest time constant MuJoCo uses (2 dt, unless its refsafe flag is off)."""
        m = self.model
        refsafe = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE))
        return 2 * float(m.opt.timestep) if refsafe else 0.0

    def clamp_speeds(self, bodies: np.ndarray, limit: float) -> None:
        """Scale down the linear velocity of free ``bodies`` faster than ``limit`` (m/s)."""
        m = self.model
        for b in bodies:
            if m.body_jntnum[b] == 1 and m.jnt_type[m.body_jntadr[b]] == int(mujoco.mjtJoint.mjJNT_FREE):
                adr = m.jnt_dofadr[m.body_jntadr[b]]
                speed = float(np.linalg.norm(self.data.qvel[adr:adr + 3]))
                if speed > limit:
                    self.data.qvel[adr:adr + 3] *= limit / speed


def _damped(solref: np.ndarray, solmix: np.ndarray, factor: float, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Standard-format solref rows (time constant, damping ratio) with ``factor`` times the damping
    and the same stiffness, and the solmix that makes them their contacts': MuJoCo's damping is
    2 / (dmax T) and its stiffness 1 / (dmax T dampratio)^2, so T / factor and dampratio * factor.
    MuJoCo uses T no lower than ``floor``: that effective T is divided, the result no lower than
    the floor either (the factor then smaller; a row at the floor stays as it is)."""
    out, mix = solref.astype(np.float64, copy=True), solmix.astype(np.float64, copy=True)
    effective = np.maximum(solref[:, 0], floor)
    out[:, 0] = np.maximum(effective / factor, floor)
    out[:, 1] = solref[:, 1] * effective / out[:, 0]
    unchanged = out[:, 0] == effective
    out[unchanged] = solref[unchanged]
    mix[~unchanged] = DOMINANT_SOLMIX
    return out, mix


def _geoms(m: mujoco.MjModel, bodies: np.ndarray, name: str) -> np.ndarray:
    """The geoms of ``bodies`` that intervention ``name`` writes: for the time constant, the
    damping ratio and the damping, those in MuJoCo's standard solref format (mixing the formats
    in one geom makes MuJoCo replace it with its default)."""
    geoms = np.flatnonzero(np.isin(m.geom_bodyid, bodies))
    if name in ("timeconst", "dampratio", "damping"):
        geoms = geoms[m.geom_solref[geoms, 0] > 0]
    return geoms


def _name(m: mujoco.MjModel, kind: mujoco.mjtObj, index: int) -> str:
    return mujoco.mj_id2name(m, kind, int(index)) or f"#{int(index)}"

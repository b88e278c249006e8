"""The classical baseline (Atkeson et al. 1986): Newton-Euler equations linear in the inertial
parameters, solved by least squares; and, from the same regressor, how well the wrench sensor's
resolution lets each parameter be known at all (the identifiability check).

Free body, about its frame origin O, body frame (a = acceleration of O minus gravity):
    f = m a + (alpha x + omega x omega x)(m c)
    tau_O = (m c) x a + I_O alpha + omega x (I_O omega)
linear in pi = (m, m c, I_O). A body on a support adds an unknown contact wrench, so there only
mass and friction are fitted (along and across the sliding direction, while it slides).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simuguard_gym.identify import kinematics, pose
from simuguard_gym.identify.inertia import from_entries, shift, to_entries
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.series import WrenchPoseSeries
from simuguard_gym.identify.shapes import mass_properties

#: a parameter whose wrench-limited standard error exceeds this fraction of its scale is not identifiable
RELATIVE_SE_LIMIT = 0.1


@dataclass
class LinearFit:
    """Least-squares estimate of theta, and per parameter the standard error that the wrench
    resolution alone allows (``se_resolution``; inf where the data carry no information)."""

    names: tuple[str, ...]
    value: np.ndarray
    se_resolution: np.ndarray
    moving_fraction: float = 1.0
    notes: list[str] = field(default_factory=list)


def _skew(v: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N, 3, 3) with skew(v) @ x = v x x."""
    z = np.zeros(len(v))
    return np.stack([np.stack([z, -v[:, 2], v[:, 1]], -1), np.stack([v[:, 2], z, -v[:, 0]], -1),
                     np.stack([-v[:, 1], v[:, 0], z], -1)], -2)


def _inertia_map(w: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N, 3, 6) with map @ entries(I) = I w."""
    z = np.zeros(len(w))
    x, y, zz = w[:, 0], w[:, 1], w[:, 2]
    return np.stack([np.stack([x, z, z, y, zz, z], -1), np.stack([z, y, z, x, z, zz], -1),
                     np.stack([z, z, zz, z, x, y], -1)], -2)


def free_regressor(series: WrenchPoseSeries, point: np.ndarray, gravity: np.ndarray, window: int = 41
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Y (N, 6, 10) and the measured wrench w (N, 6) in the body frame about its origin."""
    k = kinematics.of_poses(series.position, series.quaternion, series.dt, window)
    r = pose.to_matrix(k.quaternion)
    rt = np.swapaxes(r, 1, 2)
    a = np.einsum("nij,nj->ni", rt, k.acceleration - gravity)
    s_om, s_al = _skew(k.omega), _skew(k.alpha)
    y = np.zeros((len(a), 6, 10))
    y[:, :3, 0] = a
    y[:, :3, 1:4] = s_al + s_om @ s_om
    y[:, 3:, 1:4] = -_skew(a)
    y[:, 3:, 4:] = _inertia_map(k.alpha) + s_om @ _inertia_map(k.omega)
    f_b = np.einsum("nij,nj->ni", rt, series.force)
    tau_b = np.einsum("nij,nj->ni", rt, series.torque) + np.cross(np.asarray(point, float), f_b)
    return y, np.concatenate([f_b, tau_b], axis=1)


def _pi_to_theta(pi: np.ndarray) -> np.ndarray:
    m = pi[0]
    c = pi[1:4] / m
    i_c = shift(from_entries(pi[4:]), -m, c)
    return np.concatenate([[m], c, to_entries(i_c)])


def _propagate(pi: np.ndarray, cov: np.ndarray, fn) -> np.ndarray:
    """Standard errors of fn(pi) by the delta method (numerical Jacobian)."""
    base = fn(pi)
    jac = np.empty((base.size, pi.size))
    for j in range(pi.size):
        h = 1e-6 * max(abs(pi[j]), 1e-9)
        p = pi.copy()
        p[j] += h
        jac[:, j] = (fn(p) - base) / h
    return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", jac, cov, jac), 0.0))


def _solve(y: np.ndarray, w: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted LS; returns the estimate and its covariance under the given noise sigma (per row)."""
    yw, ww = y / sigma[:, None], w / sigma
    info = yw.T @ yw
    est = np.linalg.lstsq(yw, ww, rcond=None)[0]
    cov = np.linalg.pinv(info, rcond=1e-15, hermitian=True)
    singular = np.linalg.eigvalsh(info).min() <= 1e-12 * max(np.trace(info), 1e-300)
    return est, cov if not singular else cov + np.diag(np.where(np.diag(info) <= 0, np.inf, 0.0))


def fit(problem: Problem, series: WrenchPoseSeries, resolution: tuple[float, float],
        prior_value: np.ndarray | None = None, window: int = 41) -> LinearFit:
    """Newton-Euler least squares for the problem's parameters (``prior_value`` fills what the
    equations can't give, e.g. a supported body's inertia)."""
    sigma_f, sigma_t = (max(float(s), 1e-12) * np.sqrt(1 + 1 / 12) for s in resolution)
    g = np.asarray(problem.gravity, float)
    names = problem.names
    if problem.joint is not None:
        return _joint_fit(problem, series, sigma_f, sigma_t, prior_value, window)
    y, w = free_regressor(series, np.asarray(problem.point), g, window)
    sig = np.tile([sigma_f] * 3 + [sigma_t] * 3, len(w))
    if problem.support is None and not problem.static_geoms:
        pi, cov = _solve(y.reshape(-1, 10), w.reshape(-1), sig)
        value = _pi_to_theta(pi)
        se = _propagate(pi, cov, _pi_to_theta)
        return LinearFit(names, value, se)
    # On a support the contact wrench is unknown: the torque rows can tell only the inertia,
    # and only while the body turns; mass and friction come from the sliding motion.
    prior_value = np.asarray(prior_value, float)
    value, se = prior_value.copy(), np.full(len(names), np.inf)
    notes = ["centre of mass and inertia of a body on a support: not identified (the support's contact "
             "wrench is unknown and swamps them); kept from the prior"]
    k = kinematics.of_poses(series.position, series.quaternion, series.dt, window)
    speed = np.linalg.norm(k.velocity[:, :2], axis=1)
    moving = speed > max(1e-3, 0.05 * np.percentile(speed, 95))
    fraction = float(moving.mean())
    if moving.sum() >= 5:
        vhat = k.velocity[moving, :2] / speed[moving, None]
        nhat = np.stack([-vhat[:, 1], vhat[:, 0]], 1)
        f, a = series.force[moving], k.acceleration[moving]
        along_f, along_a = np.einsum("ij,ij->i", f[:, :2], vhat), np.einsum("ij,ij->i", a[:, :2], vhat)
        across_f, across_a = np.einsum("ij,ij->i", f[:, :2], nhat), np.einsum("ij,ij->i", a[:, :2], nhat)
        # pushing: f.v = m a.v + mu N with N = m|g| - fz; across: f.n = m a.n.
        # Linear in (m, mu m) once mu fz is moved left; two passes settle mu there.
        ys = np.concatenate([np.column_stack([along_a, np.full_like(along_a, abs(g[2]))]),
                             np.column_stack([across_a, np.zeros_like(across_a)])])
        mu = 0.0
        for _ in range(3):
            ws = np.concatenate([along_f + mu * f[:, 2], across_f])
            est, cov = _solve(ys, ws, np.full(len(ws), sigma_f))
            mu = max(float(est[1] / est[0]), 0.0) if est[0] > 0 else 0.0
        value[0], value[-1] = est[0], mu
        se[0] = np.sqrt(cov[0, 0])
        se[-1] = np.sqrt(cov[1, 1]) / max(abs(est[0]), 1e-12)
    else:
        notes.append("the body never slides: friction is not observable")
    return LinearFit(names, value, se, fraction, notes)


def _joint_fit(problem: Problem, series: WrenchPoseSeries, sigma_f: float, sigma_t: float,
               prior_value: np.ndarray | None, window: int) -> LinearFit:
    joint = problem.joint
    axis = np.asarray(joint.axis)
    g = np.asarray(problem.gravity, float)
    q = kinematics.joint_coordinate(series.position, series.quaternion, joint.kind, axis)
    qd = kinematics.savgol(q, series.dt, window, 3, 1)
    qdd = kinematics.savgol(q, series.dt, window, 3, 2)
    p_world = series.position + pose.rotate(series.quaternion, np.asarray(problem.point, float))
    if joint.kind == "prismatic":
        gen = series.force @ axis
        sigma = sigma_f
        columns = [qdd - g @ axis]
    else:
        gen = (series.torque + np.cross(p_world - np.asarray(joint.anchor), series.force)) @ axis
        # the lever arm of a force at the point adds its noise: sigma_t is the floor
        sigma = float(np.hypot(sigma_t, sigma_f * np.median(np.linalg.norm(
            np.cross(p_world - np.asarray(joint.anchor), axis), axis=1))))
        columns = [qdd]
        if "gravity_moment" in problem.names:
            u0 = _com_direction(problem, series)
            u = pose.rotate(series.quaternion, np.broadcast_to(u0, (len(q), 3)))
            columns.append(-np.cross(u, g) @ axis)
    speed = np.abs(qd)
    moving = speed > max(1e-3, 0.05 * np.percentile(speed, 95))
    columns.append(np.where(moving, np.sign(qd), 0.0))
    columns.append(qd)                      # viscous damping
    y = np.column_stack(columns)
    use = moving | (speed < 1e-9)
    est, cov = _solve(y[use], gen[use], np.full(int(use.sum()), sigma))
    notes = [("a prismatic link shows only its mass along the axis and the joint friction and damping"
              if joint.kind == "prismatic" else
              "a revolute link shows only its inertia about the hinge (and, on an axis not along gravity, "
              "its gravity moment) and the joint friction and damping") + "; its other inertial parameters are not "
              "identifiable"]
    if moving.sum() < 5:
        notes.append("the joint never moves: its friction and damping are not observable")
    return LinearFit(problem.names, est, np.sqrt(np.abs(np.diag(cov))), float(moving.mean()), notes)


def _com_direction(problem: Problem, series: WrenchPoseSeries) -> np.ndarray:
    """Unit vector, body frame, from the hinge axis to the geometric centroid (perpendicular)."""
    r0 = pose.to_matrix(series.quaternion[0])
    axis = r0.T @ np.asarray(problem.joint.axis)
    arm = mass_properties(problem.shapes).centroid - r0.T @ (np.asarray(problem.joint.anchor) - series.position[0])
    arm -= axis * (arm @ axis)
    n = np.linalg.norm(arm)
    return arm / n if n > 1e-9 else np.cross(axis, [1.0, 0, 0] if abs(axis[0]) < 0.9 else [0, 1.0, 0])


def identifiable(fit_: LinearFit, scale: np.ndarray) -> np.ndarray:
    """True where the wrench resolution leaves the parameter known to RELATIVE_SE_LIMIT of its scale."""
    return np.asarray(fit_.se_resolution) <= RELATIVE_SE_LIMIT * np.asarray(scale)


__all__ = ["LinearFit", "fit", "identifiable", "free_regressor", "RELATIVE_SE_LIMIT"]

"""Identification through MuJoCo simulation (RigPI stage 2) by multiple shooting.

A candidate theta becomes an MjModel of the body (free, or one link on a joint) and, for a body
on a support, the plane under it. The measured wrench drives it: for a free body six actuators at
the wrench point whose gears are world axes (site transmission with a world ``refsite``), for a
link one joint actuator fed the generalised force. The trajectory is cut into windows of ~0.25 s;
each window starts from its own state (decision variables next to theta), so a poor theta can't
make one long rollout diverge. All windows of all perturbed candidates run in one batched,
multithreaded ``mujoco.rollout`` call; the Jacobian is finite differences in which a window
variable is perturbed in every window at once (windows don't interact), so it costs
``len(theta) + window variables`` rollouts of the whole trajectory.
"""

from __future__ import annotations

import copy
import inspect
import os
import time
from dataclasses import dataclass
from typing import Callable

import mujoco
import numpy as np
from mujoco import minimize, rollout

from simuguard_gym.identify import kinematics, pose
from simuguard_gym.identify.inertia import from_entries, make_physical, to_entries
from simuguard_gym.identify.prior import Prior
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.series import WrenchPoseSeries
from simuguard_gym.identify.simulation.candidate import _state_index, apply_theta, build_model

#: RigPI's weight of the bound penalty P(theta, C)
PENALTY_WEIGHT = 0.1
#: Weight of a free body's distance from a physical inertia tensor. The model gets the projected
#: tensor, so outside the physical set the pose loss is flat along the violation; a weak pull
#: (RigPI's 0.1) let the fit creep along the triangle-inequality boundary for tens of iterations
#: far from the truth, a strong one sends it back inside at once.
PHYSICAL_WEIGHT = 1e3


@dataclass
class FitOutcome:
    theta: np.ndarray
    se: np.ndarray
    loss_history: list[float]
    iterations: int
    seconds: float
    seconds_per_iteration: float
    pose_loss: float


class Shooting:
    """Multiple-shooting residuals and Jacobians of one problem over one measured series.

    ``free`` marks the entries of theta that are fitted; the others stay at the prior's value.
    """

    def __init__(self, problem: Problem, prior: Prior, series: WrenchPoseSeries, *,
                 free: np.ndarray | None = None, window_s: float = 0.25,
                 pose_noise: tuple[float, float] = (1e-3, np.radians(0.5)),
                 substeps: int = 1, fit_starts: bool = True, nthread: int | None = None) -> None:
        self.problem, self.prior, self.series = problem, prior, series
        self.names = prior.names
        self.free = np.ones(len(self.names), bool) if free is None else np.asarray(free, bool)
        self.scale = prior.scale
        self.dt = series.dt
        self.first_pose = series.poses[0]
        if substeps < 1:
            raise ValueError("substeps must be at least 1")
        # the model may step finer than the samples (the wrench held over a sample's substeps):
        # dry friction and contacts at 2 ms differ measurably from the same physics at 0.5 ms
        self.substeps = int(substeps)
        self.fit_starts = bool(fit_starts)
        #: finite-difference step in normalised units (parameter scale = 1)
        self.fd_step = 1e-5
        self.base = build_model(problem, self.first_pose, self.dt / self.substeps)
        self._scratch = mujoco.MjData(self.base)
        self.nthread = nthread or max(1, min(os.cpu_count() or 1, 8))
        self._datas = [mujoco.MjData(self.base) for _ in range(self.nthread)]
        self._runner = rollout.Rollout(nthread=self.nthread)
        self.sigma_p, self.sigma_r = pose_noise
        self.body = self.base.body("body").id
        self.qpos0 = _state_index(self.base)
        self.nstate = mujoco.mj_stateSize(self.base, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        self.joint = problem.joint
        n = len(series)
        length = max(4, int(round(window_s / self.dt)))
        self.window_s = length * self.dt
        starts = list(range(0, n - 1, length))
        if len(starts) > 1 and n - 1 - starts[-1] < length // 2:
            starts.pop()                       # fold a short tail into the previous window
        self.starts = np.array(starts)
        self.stops = np.append(self.starts[1:], n - 1)     # window j: samples starts[j]..stops[j]
        self.nstep = int((self.stops - self.starts).max())
        self._prepare_targets()

    # ----------------------------------------------------------------- data
    @property
    def _seed_window(self) -> int:
        # start velocities come from a local cubic over ~60 ms: long enough to average pose
        # noise, short enough to follow a robot's motion
        return max(5, int(round(0.06 / self.dt)) | 1)

    def _prepare_targets(self) -> None:
        s, n_w = self.series, len(self.starts)
        steps = self.nstep + 1
        self.mask = np.zeros((n_w, steps), bool)
        for j, (a, b) in enumerate(zip(self.starts, self.stops)):
            self.mask[j, : b - a + 1] = True
        idx = np.minimum(self.starts[:, None] + np.arange(steps)[None, :], len(s) - 1)
        wrench = s.wrench
        if self.joint is None:
            self.control = wrench[idx[:, :-1]]                              # (W, nstep, 6)
            self.target_pos = s.position[idx]
            self.target_quat = pose.continuous(s.quaternion)[idx]
            if s.velocity is not None:
                self.seed_vel = s.velocity[self.starts]
            else:
                k = kinematics.of_poses(s.position, s.quaternion, self.dt, self._seed_window)
                self.seed_vel = np.concatenate([k.velocity, k.omega], axis=1)[self.starts]
            self.nwin = 12
            self.win_scale = np.array([0.01] * 3 + [0.05] * 3 + [0.1] * 3 + [1.0] * 3)
        else:
            axis = np.asarray(self.joint.axis)
            q = kinematics.joint_coordinate(s.position, s.quaternion, self.joint.kind, axis)
            p_world = s.position + pose.rotate(s.quaternion, np.asarray(self.problem.point, float))
            if self.joint.kind == "prismatic":
                gen = wrench[:, :3] @ axis
                self.sigma_q = self.sigma_p
            else:
                gen = (wrench[:, 3:] + np.cross(p_world - np.asarray(self.joint.anchor), wrench[:, :3])) @ axis
                self.sigma_q = self.sigma_r
            self.control = gen[idx[:, :-1]][..., None]
            self.target_q = q[idx]
            if s.velocity is not None and self.joint.kind == "prismatic":
                qd = s.velocity[:, :3] @ axis
            elif s.velocity is not None:
                qd = pose.rotate(s.quaternion, s.velocity[:, 3:]) @ axis
            else:
                qd = kinematics.savgol(q, self.dt, self._seed_window, 3, 1)
            self.seed_vel = qd[self.starts][:, None]
            self.nwin = 2
            self.win_scale = np.array([self.sigma_q * 10, 0.1])

    # -------------------------------------------------------------- theta -> model
    def theta(self, z_theta: np.ndarray) -> np.ndarray:
        """Full theta from the fitted, normalised entries."""
        th = self.prior.value.copy()
        th[self.free] = z_theta * self.scale[self.free]
        return th

    def model_for(self, theta: np.ndarray) -> mujoco.MjModel:
        m = copy.copy(self.base)
        apply_theta(m, self._scratch, self.problem, self.names, theta)
        return m

    # -------------------------------------------------------------- rollouts
    def _initial_states(self, z_win: np.ndarray) -> np.ndarray:
        """(W, nstate) from the normalised window variables (W, nwin)."""
        d = z_win * self.win_scale
        init = np.zeros((len(self.starts), self.nstate))
        q0 = self.qpos0
        if self.joint is None:
            init[:, q0:q0 + 3] = self.target_pos[:, 0] + d[:, 0:3]
            init[:, q0 + 3:q0 + 7] = pose.multiply(self.target_quat[:, 0], pose.from_rotation_vector(d[:, 3:6]))
            # qvel of a free joint: world linear velocity, body-frame angular velocity
            init[:, q0 + 7:q0 + 10] = self.seed_vel[:, :3] + d[:, 6:9]
            init[:, q0 + 10:q0 + 13] = self.seed_vel[:, 3:] + d[:, 9:12]
        else:
            init[:, q0] = self.target_q[:, 0] + d[:, 0]
            init[:, q0 + 1] = self.seed_vel[:, 0] + d[:, 1]
        return init

    def simulate(self, models: list[mujoco.MjModel], init: np.ndarray, control: np.ndarray) -> np.ndarray:
        """qpos trajectories (rows, nstep + 1, nq) at the samples, the start included."""
        k = self.substeps
        if k > 1:
            control = np.repeat(control, k, axis=1)
        state, _ = self._runner.rollout(models, self._datas, init, control, nstep=self.nstep * k)
        state = state[:, k - 1::k]
        q0, nq = self.qpos0, self.base.nq
        return np.concatenate([init[:, None, q0:q0 + nq], state[:, :, q0:q0 + nq]], axis=1)

    def pose_residual(self, qpos: np.ndarray) -> np.ndarray:
        """Weighted residuals (rows, W, steps * k) of trajectories stacked as (rows, W, steps, nq)."""
        if self.joint is None:
            dp = (qpos[..., :3] - self.target_pos) / self.sigma_p
            dq = pose.rotation_vector(pose.multiply(pose.conjugate(self.target_quat), qpos[..., 3:7])) / self.sigma_r
            r = np.concatenate([dp, dq], axis=-1)
        else:
            r = ((qpos[..., 0] - self.target_q) / self.sigma_q)[..., None]
        r = np.where(self.mask[..., None], r, 0.0)
        return r.reshape(*r.shape[:2], -1)

    def _run(self, thetas: list[np.ndarray], z_wins: list[np.ndarray]) -> np.ndarray:
        """One batched rollout: every (theta, window-variables) pair over all windows."""
        n_w = len(self.starts)
        models, inits = [], []
        cache: dict[bytes, mujoco.MjModel] = {}
        for th, zw in zip(thetas, z_wins):
            key = th.tobytes()
            if key not in cache:
                cache[key] = self.model_for(th)
            models.extend([cache[key]] * n_w)
            inits.append(self._initial_states(zw))
        init = np.concatenate(inits)
        control = np.tile(self.control, (len(thetas), 1, 1))
        qpos = self.simulate(models, init, control)
        return self.pose_residual(qpos.reshape(len(thetas), n_w, *qpos.shape[1:]))

    # -------------------------------------------------------------- objective
    @property
    def _window_vars(self) -> int:
        return self.nwin if self.fit_starts else 0

    @property
    def n_theta(self) -> int:
        return int(self.free.sum())

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(x, float).ravel()
        if not self.fit_starts:
            return x[: self.n_theta], np.zeros((len(self.starts), self.nwin))
        return x[: self.n_theta], x[self.n_theta:].reshape(len(self.starts), self.nwin)

    def penalty(self, theta: np.ndarray) -> np.ndarray:
        """RigPI's P(theta, C) as residuals: sqrt(lambda) times the normalised bound violation,
        and, for a free body, how far its inertia candidate is from a physical one (the model
        gets the projected tensor; without this term the optimiser would see a flat region)."""
        over = np.maximum(theta - self.prior.upper, 0) + np.maximum(self.prior.lower - theta, 0)
        out = np.sqrt(PENALTY_WEIGHT) * (over / self.scale)[self.free]
        if self.joint is None:
            entries = theta[4:10]
            tensor = from_entries(entries)
            gap = np.abs(to_entries(make_physical(tensor)) - entries) / self.scale[4:10]
            out = np.concatenate([out, np.sqrt(PHYSICAL_WEIGHT) * gap])
        return out

    @property
    def n_pose_rows(self) -> int:
        """Residual rows of the pose term (masked samples included as zeros)."""
        return len(self.starts) * self.mask.shape[1] * (6 if self.joint is None else 1)

    @property
    def n_pose_samples(self) -> int:
        """Weighted pose errors in the loss (6 per sample for a free body, 1 on a joint)."""
        return int(self.mask.sum()) * (6 if self.joint is None else 1)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """Stacked residuals, normalised so that their squared sum is L_pose + lambda P
        (L_pose as the mean squared weighted pose error: 1 at the noise floor)."""
        x = np.asarray(x, float)
        cols = x.reshape(x.shape[0], -1) if x.ndim == 2 else x.reshape(-1, 1)
        thetas, wins = [], []
        for c in cols.T:
            zt, zw = self.split(c)
            thetas.append(self.theta(zt))
            wins.append(zw)
        r = self._run(thetas, wins).reshape(len(thetas), -1) / np.sqrt(self.n_pose_samples)
        pen = np.stack([self.penalty(th) for th in thetas])
        return np.concatenate([r, pen], axis=1).T

    def jacobian(self, x: np.ndarray, r: np.ndarray, step: float | None = None) -> np.ndarray:
        """Forward differences; a window variable is perturbed in all windows in the same rollout."""
        step = self.fd_step if step is None else step
        x = np.asarray(x, float).ravel()
        zt, zw = self.split(x)
        n_w = len(self.starts)
        base = self._run([self.theta(zt)], [zw])[0]                    # (W, steps*k)
        thetas, wins = [], []
        for i in range(self.n_theta):
            z = zt.copy()
            z[i] += step
            thetas.append(self.theta(z))
            wins.append(zw)
        for v in range(self._window_vars):
            w = zw.copy()
            w[:, v] += step
            thetas.append(self.theta(zt))
            wins.append(w)
        pert = self._run(thetas, wins)                                  # (n_theta+nwin, W, steps*k)
        diff = (pert - base[None]) / step / np.sqrt(self.n_pose_samples)
        n_res_pose = base.size
        th = self.theta(zt)
        pen0 = self.penalty(th)
        jac = np.zeros((n_res_pose + pen0.size, x.size))
        jac[:n_res_pose, : self.n_theta] = diff[: self.n_theta].reshape(self.n_theta, -1).T
        # window j's residual rows depend only on window j's start variables: a block diagonal
        per_window = jac[:n_res_pose].reshape(n_w, base.shape[1], x.size)
        windows = np.arange(n_w)
        for v in range(self._window_vars):
            per_window[windows, :, self.n_theta + windows * self.nwin + v] = diff[self.n_theta + v]
        for i in range(self.n_theta):
            z = zt.copy()
            z[i] += step
            jac[n_res_pose:, i] = (self.penalty(self.theta(z)) - pen0) / step
        return jac

    def x0(self) -> np.ndarray:
        z = self.prior.value[self.free] / self.scale[self.free]
        return np.concatenate([z, np.zeros(len(self.starts) * self._window_vars)])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo = self.prior.lower[self.free] / self.scale[self.free]
        hi = self.prior.upper[self.free] / self.scale[self.free]
        big = np.full(len(self.starts) * self._window_vars, 1e3)
        return np.concatenate([lo, -big]), np.concatenate([hi, big])

    def pose_loss(self, x: np.ndarray) -> float:
        """RigPI's L_pose in raw units: mean over samples of |x - x_hat|^2 + |q - q_hat|^2."""
        zt, zw = self.split(x)
        n_w = len(self.starts)
        init = self._initial_states(zw)
        qpos = self.simulate([self.model_for(self.theta(zt))] * n_w, init, self.control)
        return pose_loss(self, qpos)

    def predict(self, theta: np.ndarray) -> tuple[float, float]:
        """Open-loop prediction of every window from its measured start (RigPI Table 4):
        L_pose and the mean end-point distance in metres (for a joint: the wrench point's)."""
        n_w = len(self.starts)
        z = np.zeros((n_w, self.nwin))
        qpos = self.simulate([self.model_for(np.asarray(theta, float))] * n_w, self._initial_states(z), self.control)
        last = self.stops - self.starts
        rows = np.arange(n_w)
        if self.joint is None:
            end = np.linalg.norm(qpos[rows, last, :3] - self.target_pos[rows, last], axis=1)
        else:
            dq = np.abs(qpos[rows, last, 0] - self.target_q[rows, last])
            if self.joint.kind == "revolute":
                p_body = np.asarray(self.problem.point, float) - self.base.jnt_pos[0]
                a = self.base.jnt_axis[0]
                dq = dq * max(float(np.linalg.norm(p_body - a * (p_body @ a))), 1e-9)
            end = dq
        return pose_loss(self, qpos), float(end.mean())

    def close(self) -> None:
        self._runner.close()


def pose_loss(shoot: Shooting, qpos: np.ndarray) -> float:
    m = shoot.mask
    if shoot.joint is None:
        q = qpos[..., 3:7]
        qt = shoot.target_quat
        sign = np.where(np.sum(q * qt, axis=-1, keepdims=True) < 0, -1.0, 1.0)
        err = np.sum((qpos[..., :3] - shoot.target_pos) ** 2, -1) + np.sum((sign * q - qt) ** 2, -1)
    else:
        err = (qpos[..., 0] - shoot.target_q) ** 2
    return float(err[m].mean())


# The step tolerance of mujoco.minimize.least_squares: ``xtol`` from MuJoCo 3.4 on, ``tol``
# before (3.3, which Meta-World and LIBERO pin).
_STEP_TOLERANCE = ({"xtol": 1e-9} if "xtol" in inspect.signature(minimize.least_squares).parameters
                   else {"tol": 1e-9})


#: A fit has converged once two iterations in a row lower chi-square by less than this.
CONVERGED_CHI2 = 0.1


class _Converged(Exception):
    """Ends ``mujoco.minimize.least_squares`` early (it has no tolerance on the loss)."""

    def __init__(self, x: np.ndarray) -> None:
        super().__init__()
        self.x = x


def refine(shoot: Shooting, method: str = "lm", max_iter: int = 60,
           progress: Callable[[int, float], None] | None = None) -> FitOutcome:
    """Minimise L_pose + lambda P over theta and the window start states.

    ``method="lm"``: bounded Levenberg-Marquardt (``mujoco.minimize.least_squares``).
    ``method="gd"``: RigPI's gradient descent, each step about 1/100 of every parameter's scale.
    """
    t0 = time.perf_counter()
    x0 = shoot.x0()
    if shoot.n_theta <= GRID_MAX_PARAMETERS:
        x0[: shoot.n_theta] = coarse_search(shoot, x0)
    history: list[float] = []
    if method == "lm":
        def callback(trace):
            history.append(float(2 * trace[-1].objective))
            if progress:
                progress(len(history), history[-1])
            # the loss times the number of weighted pose errors is chi-square: once two steps in
            # a row gain less than CONVERGED_CHI2 of it, theta moves by a negligible part of its
            # standard error, however far the step tolerance still is
            gains = [2 * t.reduction * shoot.n_pose_samples for t in trace[-2:]]
            if len(gains) == 2 and max(gains) < CONVERGED_CHI2:
                raise _Converged(trace[-1].candidate)
        try:
            x, _ = minimize.least_squares(x0, shoot.residual, bounds=shoot.bounds(), jacobian=shoot.jacobian,
                                          max_iter=max_iter, verbose=0, iter_callback=callback, **_STEP_TOLERANCE)
        except _Converged as done:
            x = done.x
        iterations = len(history)
    elif method == "gd":
        x, iterations = _descend(shoot, x0, max_iter, history, progress)
    else:
        raise ValueError(f"method must be 'lm' or 'gd', not {method!r}")
    seconds = time.perf_counter() - t0
    r = shoot.residual(x[:, None] if x.ndim == 1 else x)[:, 0]
    jac = shoot.jacobian(x, r)
    n_pose = shoot.n_pose_samples
    rows = shoot.n_pose_rows
    rss = float(np.sum(r[:rows] ** 2)) * n_pose
    dof = max(n_pose - x.size, 1)
    jtj = jac[:rows].T @ jac[:rows] * n_pose
    cov = np.linalg.pinv(jtj, hermitian=True) * rss / dof
    theta = shoot.theta(shoot.split(x)[0])
    se = np.full(len(theta), np.nan)
    se[shoot.free] = np.sqrt(np.abs(np.diag(cov)[: shoot.n_theta])) * shoot.scale[shoot.free]
    return FitOutcome(theta, se, history, iterations, seconds, seconds / max(iterations, 1),
                      shoot.pose_loss(x))


#: up to this many fitted parameters, a grid over C picks the start (7 points a parameter)
GRID_MAX_PARAMETERS = 3


def coarse_search(shoot: Shooting, x0: np.ndarray, points: int = 7, batch: int = 64) -> np.ndarray:
    """The best of a grid over C (log-spaced for positive parameters) and the current start.

    With contacts or dry friction the loss is rough on the scale of a few percent (stick-slip
    changes with every parameter), so a gradient method from a far start stalls on a bump; a
    handful of parameters can afford a look at the whole box first, all candidates batched.
    """
    lo, hi = shoot.prior.lower[shoot.free], shoot.prior.upper[shoot.free]
    axes = []
    for a, b in zip(lo, hi):
        axes.append(np.geomspace(a, b, points) if a > 0 else np.linspace(a, b, points))
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(lo)) / shoot.scale[shoot.free]
    grid = np.vstack([x0[: shoot.n_theta], grid])
    rest = x0[shoot.n_theta:]
    losses = []
    for i in range(0, len(grid), batch):
        chunk = grid[i:i + batch]
        x = np.hstack([chunk, np.tile(rest, (len(chunk), 1))]).T
        r = shoot.residual(x)
        losses.append(np.sum(np.where(np.isfinite(r), r, 1e30) ** 2, axis=0))
    return grid[int(np.argmin(np.concatenate(losses)))]


def _descend(shoot: Shooting, x: np.ndarray, max_iter: int, history: list[float],
             progress: Callable[[int, float], None] | None) -> tuple[np.ndarray, int]:
    lo, hi = shoot.bounds()
    r = shoot.residual(x[:, None])[:, 0]
    loss = float(r @ r)
    rate = 0.01                          # 1/100 of each parameter's scale (x is normalised)
    for it in range(max_iter):
        grad = shoot.jacobian(x, r).T @ r
        step = rate * grad / max(np.max(np.abs(grad)), 1e-300)
        trial = np.clip(x - step, lo, hi)
        r_new = shoot.residual(trial[:, None])[:, 0]
        new = float(r_new @ r_new)
        if new < loss:
            x, r, loss = trial, r_new, new
            rate = min(rate * 1.2, 0.05)
        else:
            rate *= 0.5
            if rate < 1e-6:
                break
        history.append(loss)
        if progress:
            progress(it + 1, loss)
    return x, len(history)

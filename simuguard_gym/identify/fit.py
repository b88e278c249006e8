"""identify(): RigPI's two stages on one measured series.

1. A prior provider gives theta0 and the box C. The Newton-Euler least-squares baseline runs
   on the same data; its information matrix under the wrench sensor's resolution says which
   parameters the data can determine at all (those that can't keep the prior's value and are
   reported with a warning instead of a confident number).
2. The determinable parameters are refined through MuJoCo simulation by multiple shooting.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from simuguard_gym.identify import kinematics, newton_euler
from simuguard_gym.identify.prior import GeometryPrior, Prior
from simuguard_gym.identify.problem import Problem
from simuguard_gym.identify.result import IdentificationResult
from simuguard_gym.identify.series import WrenchPoseSeries

#: Axia80-class six-axis sensor (RigPI 5.2): N, N m
AXIA80_RESOLUTION = (1 / 80, 1 / 2000)


def identify(series: WrenchPoseSeries, problem: Problem,
             prior: Prior | Callable[..., Prior] | None = None, *, method: str = "lm",
             init: str | tuple[str, ...] = ("least_squares", "prior", "high"), wrench_resolution: tuple[float, float] = AXIA80_RESOLUTION,
             pose_noise: tuple[float, float] = (1e-3, np.radians(0.5)), window_s: float | None = None,
             max_iter: int = 60, substeps: int | None = None, nthread: int | None = None,
             progress: Callable[[int, float], None] | None = None) -> IdentificationResult:
    """Identify theta of one body (free, on a support, or on a 1-DoF joint) from wrench and pose.

    ``method``: ``"lm"`` (Levenberg-Marquardt, default) or ``"gd"`` (RigPI's gradient descent);
    ``"least_squares"`` returns the Newton-Euler baseline alone. ``init``: where the fit starts,
    one or several (the fit with the lowest final loss wins): ``"prior"`` the prior's theta0
    (RigPI), ``"least_squares"`` the baseline where it lies in C, ``"high"`` half-way (in log
    scale) from theta0 to C's upper bound. Several starts matter with contacts: a body sliding on
    a support gives a rough loss on which one start can stall. ``window_s``: the shooting
    windows; by default 0.25 s for a free body, refitted in 0.5 s windows where nothing
    frictional is simulated, and 0.5 s on a joint; a value given is used as it is.

    Example:
        >>> from simuguard_gym.identify import Problem, Shape, identify, GeometryPrior
        >>> from simuguard_gym.identify.simulation.excitation import TrueBody, synthesise
        >>> import numpy as np
        >>> problem = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),))
        >>> truth = TrueBody(0.5, inertia=np.diag([4.2e-4, 5.7e-4, 6.8e-4]))
        >>> measured, _ = synthesise(problem, truth, duration=1.5, seed=1)
        >>> result = identify(measured, problem, GeometryPrior(density=1000))
        >>> abs(result["mass"] - 0.5) < 0.02
        True
    """
    from simuguard_gym.identify.simulation.shooting import Shooting, refine

    began = time.perf_counter()
    if prior is None:
        prior = GeometryPrior()
    if not isinstance(prior, Prior):
        prior = prior(problem, series.poses[0])
    if tuple(prior.names) != problem.names:
        raise ValueError(f"the prior names {prior.names} but the problem identifies {problem.names}")
    if method not in ("lm", "gd", "least_squares"):
        raise ValueError(f"method must be 'lm', 'gd' or 'least_squares', not {method!r}")
    baseline = newton_euler.fit(problem, series, wrench_resolution, prior.value)
    identified = newton_euler.identifiable(baseline, prior.scale)
    warnings = list(baseline.notes)
    for name, ok, se, sc in zip(prior.names, identified, baseline.se_resolution, prior.scale):
        if not ok:
            why = ("the data carry no information on it" if not np.isfinite(se)
                   else f"the wrench resolution leaves it uncertain by {se / sc:.0%} of its size")
            warnings.append(f"{name} is not identifiable here ({why}); reported as the prior's value")
    if problem.kind == "free" and problem.support is None and not identified[0]:
        warnings.append("mass is not identifiable: the body hardly accelerates against the sensor's resolution")
    if method == "least_squares" or not identified.any():  # nothing for a simulation to refine
        theta = np.where(identified, baseline.value, prior.value)
        se = np.where(identified, baseline.se_resolution, np.nan)
        return IdentificationResult(prior.names, theta, se, identified, warnings, [], 0, 0.0, 0.0, float("nan"),
                                    method, prior.as_dict(), baseline.value)
    from simuguard_gym.identify.simulation.shooting import GRID_MAX_PARAMETERS

    starts = (init,) if isinstance(init, str) else tuple(init)
    if identified.sum() <= GRID_MAX_PARAMETERS:
        starts = starts[:1]        # a grid over C picks the start anyway

    window = window_s or _window(problem)

    def run(start: Prior, window: float = window) -> Any:
        shoot = Shooting(problem, start, series, free=identified, window_s=window,
                         pose_noise=pose_noise, substeps=substeps or _substeps(problem, series),
                         fit_starts=series.velocity is None, nthread=nthread)
        try:
            return refine(shoot, method, max_iter, progress), shoot
        finally:
            shoot.close()

    def total_se(out: Any) -> np.ndarray:
        return np.where(identified, np.hypot(out.se, np.where(np.isfinite(baseline.se_resolution),
                                                              baseline.se_resolution, 0.0)), np.nan)

    # A bound of C is the prior's belief; data that determine a parameter overrule it: refit
    # with C widened along each parameter that ended on a bound while the data's own standard
    # error for it (the baseline's, from the sensor's resolution: not the fit's, which a poor
    # fit inflates) is a small part of C's range. A hollow or filled object is not the named
    # material's solid one.
    data_se = np.where(np.isfinite(baseline.se_resolution), baseline.se_resolution, np.inf)

    def fit_from(how: str) -> dict[str, Any]:
        """One start, and its refits in C widened where the data pin it on a bound."""
        box, fits, notes = prior, [], []
        out, shoot = run(_start(prior, how, baseline.value, identified))
        timings = [(how, out.iterations, out.seconds)]
        for _ in range(MAX_WIDENINGS):
            pinned = _on_bound(out.theta, box) & identified & (data_se < DETERMINED_SHARE * (box.upper - box.lower))
            wider = _widened(box, pinned, out.theta)
            pinned &= (wider.lower != box.lower) | (wider.upper != box.upper)  # a lower bound of 0 stays
            if not pinned.any():
                break
            for i in np.flatnonzero(pinned):
                notes.append(f"{box.names[i]} ended on the bound of C ({box.lower[i]:.4g}..{box.upper[i]:.4g}) at "
                             f"{out.theta[i]:.4g} though the data determine it (standard error {data_se[i]:.3g}): "
                             f"refit with C widened to {wider.lower[i]:.4g}..{wider.upper[i]:.4g}")
            se = total_se(out)
            fits.append({"theta": out.theta.tolist(), "se": [None if not np.isfinite(x) else float(x) for x in se],
                         "lower": box.lower.tolist(), "upper": box.upper.tolist(), "pose_loss": out.pose_loss})
            box = wider  # theta0 stays the prior's; the refit starts where the clamped fit ended
            out, shoot = run(box.start(**dict(zip(box.names, out.theta))))
            timings.append(("widened C", out.iterations, out.seconds))
        return {"out": out, "shoot": shoot, "box": box, "fits": fits, "notes": notes, "timings": timings}

    # Several starts matter where the loss is rough; once one explains the poses to within the
    # stated pose noise (the weighted residuals average at most 1 per pose component), no other
    # start can do meaningfully better.
    floor = 6.0 if problem.joint is None else 1.0
    best, tried, timings = None, [], []
    for how in starts:
        start = _start(prior, how, baseline.value, identified).value
        if any(np.allclose(start, other) for other in tried):
            continue
        tried.append(start)
        found = fit_from(how)
        timings += found["timings"]
        if best is None or found["out"].loss_history[-1:] < best["out"].loss_history[-1:]:
            best = found
        if best["out"].loss_history and best["out"].loss_history[-1] <= floor:
            break
    out, shoot, box, fits = best["out"], best["shoot"], best["box"], best["fits"]
    warnings += best["notes"]
    # Short windows converge from a poor start, but each window's free start state absorbs part
    # of what the poses say about theta. Windows twice as long, started where the short ones
    # ended, keep more of it (on the offset-CoM box the inertia's standard error halves); they
    # replace the short fit only where they explain the poses as well. Not where dry friction or
    # contacts are simulated: stick-slip makes a longer window's loss rougher (the door's friction
    # came out worse, the pushed cube no better).
    longer = LONGER_WINDOWS * window
    if (window_s is None and not _frictional(problem) and out.loss_history and out.loss_history[-1] <= floor
            and series.t[-1] - series.t[0] >= 2 * longer):
        out_long, shoot_long = run(box.start(**dict(zip(box.names, out.theta))), longer)
        timings.append(("longer windows", out_long.iterations, out_long.seconds))
        if out_long.loss_history and out_long.loss_history[-1] <= min(floor, LONGER_ACCEPT * out.loss_history[-1]):
            out, shoot = out_long, shoot_long
    if out.loss_history and out.loss_history[-1] > POOR_FIT * floor:
        warnings.append(f"no start explains the poses: the best fit's loss is {out.loss_history[-1] / floor:.3g} "
                        "times what the stated pose noise allows; its values are not reliable (the noise is larger "
                        "than stated, or the model lacks what moves the body: contacts, a joint, very fast motion)")
    se = total_se(out)
    bounded = _on_bound(out.theta, box) & identified
    for i in np.flatnonzero(bounded):
        if box.lower[i] == 0 and out.theta[i] <= (box.upper[i] - box.lower[i]) / 2:
            # 0 is the physical floor of a friction or a damping, not a belief a wider C would revise
            warnings.append(f"{box.names[i]} is 0, its physical floor: the data show none (no standard error "
                            "at a bound)")
            continue
        warnings.append(f"{box.names[i]} ended on the bound of C ({box.lower[i]:.4g}..{box.upper[i]:.4g}): its "
                        "standard error does not hold there (reported as none); widen the prior if the range "
                        "was wrong")
    se = np.where(bounded, np.nan, se)
    for name, v, s, sc, ok in zip(prior.names, out.theta, se, prior.scale, identified):
        if ok and np.isfinite(s) and s > newton_euler.RELATIVE_SE_LIMIT * sc:
            warnings.append(f"{name} is weakly determined (standard error {s:.3g}, {s / sc:.0%} of its size)")
    extra: dict[str, Any] = {"windows": int(len(shoot.starts)), "window_s": float(shoot.window_s),
                             "fits": [{"start": how, "iterations": int(n), "seconds": float(sec)}
                                      for how, n, sec in timings]}
    if fits:
        extra["bounded_fits"] = fits  # each fit that a widening of C replaced, first first
    return IdentificationResult(prior.names, out.theta, se, identified, warnings, out.loss_history, out.iterations,
                                time.perf_counter() - began, out.seconds_per_iteration, out.pose_loss, method, box.as_dict(),
                                baseline.value, extra)


#: A best fit whose loss exceeds the noise floor by this factor is reported as not reliable.
POOR_FIT = 10.0
#: The refit's windows are this many times the first fit's ...
LONGER_WINDOWS = 2.0
#: ... and replace it where their loss is at most this many times the first fit's (fewer free
#: start states fit the noise a little less closely; a diverging rollout is far above).
LONGER_ACCEPT = 1.25
#: How many times C may be widened along a parameter that the data pin on its bound.
MAX_WIDENINGS = 3
#: A parameter counts as determined by the data where its standard error is below this share of
#: C's range along it.
DETERMINED_SHARE = 0.05
#: A positive parameter's bound moves by this factor (the lower one divided), a signed one's by
#: this many times C's half-width.
WIDEN_FACTOR = 2.5


def _on_bound(theta: np.ndarray, box: Prior) -> np.ndarray:
    margin = 1e-6 * (box.upper - box.lower)
    return (theta <= box.lower + margin) | (theta >= box.upper - margin)


def _widened(box: Prior, pinned: np.ndarray, theta: np.ndarray) -> Prior:
    """C widened on the side each pinned parameter sits on; a positive parameter stays positive
    (a lower bound of 0 stays)."""
    lo, hi = box.lower.copy(), box.upper.copy()
    half = (hi - lo) / 2
    for i in np.flatnonzero(pinned):
        positive = lo[i] >= 0
        if theta[i] >= (lo[i] + hi[i]) / 2:
            hi[i] = hi[i] * WIDEN_FACTOR if positive and hi[i] > 0 else hi[i] + WIDEN_FACTOR * half[i]
        elif not positive:
            lo[i] = lo[i] - WIDEN_FACTOR * half[i]
        elif lo[i] > 0:
            lo[i] = lo[i] / WIDEN_FACTOR
    return replace(box, lower=lo, upper=hi)


def _window(problem: Problem) -> float:
    """Shooting window: 0.25 s for a free body (longer ones diverge from a poor start); 0.5 s on
    a joint, whose one coordinate drifts slowly, so fewer start states are fitted (on the drawer
    benchmark the worst mass error over 5 seeds fell from 1.1 % to 0.4 %)."""
    return 0.25 if problem.joint is None else 0.5


def _substeps(problem: Problem, series: WrenchPoseSeries) -> int:
    """Model steps per sample: at most 1 ms where dry friction or contacts are simulated (their
    regularised response at 2 ms biased friction by a few percent); for a free body integrated by
    RK4, as many as keep its turn per step within what this MuJoCo's RK4 follows; else one."""
    from simuguard_gym.identify.simulation.candidate import RK4_TURN_PER_STEP

    if _frictional(problem):
        return max(1, int(np.ceil(series.dt / 0.001 - 1e-9)))
    if RK4_TURN_PER_STEP is None or problem.integrator not in (None, "RK4"):
        return 1
    turn = kinematics.turn_per_sample(series.quaternion)
    return max(1, int(np.ceil(turn / RK4_TURN_PER_STEP - 1e-9)))


def _frictional(problem: Problem) -> bool:
    """Whether the model simulates dry friction or contacts (a joint's friction, a support, a scene)."""
    return problem.joint is not None or problem.support is not None or bool(problem.static_geoms)


def _start(prior: Prior, how: str, baseline: np.ndarray, identified: np.ndarray) -> Prior:
    if how == "prior":
        return prior
    if how == "least_squares":
        ok = identified & (baseline >= prior.lower) & (baseline <= prior.upper)
        return prior.start(**{n: v for n, v, k in zip(prior.names, baseline, ok) if k})
    if how == "high":
        positive = (prior.value > 0) & (prior.upper > prior.value)
        value = np.where(positive, np.sqrt(np.abs(prior.value * prior.upper)), prior.value)
        return prior.start(**{n: v for n, v, k in zip(prior.names, value, identified) if k})
    raise ValueError(f"init must be 'prior', 'least_squares' or 'high', not {how!r}")

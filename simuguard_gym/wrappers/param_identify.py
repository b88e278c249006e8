"""ParamIdentify: identify a body's mass, centre of mass, inertia and friction from what the env
does to it, and compare them with the parameters the model declares."""

from __future__ import annotations

import logging
from typing import Any, Callable, SupportsFloat

import gymnasium as gym

from simuguard_gym.engines.base import adapter_for
from simuguard_gym.physics.adapter import PhysicsAdapter
from simuguard_gym.physics.hooks import HookError
from simuguard_gym.identify.fit import identify
from simuguard_gym.identify.prior import Prior
from simuguard_gym.identify.result import IdentificationResult
from simuguard_gym.wrappers.guard import guarded
from simuguard_gym.wrappers.info_key import with_simuguard
from simuguard_gym.wrappers.substep_audit import SubstepAudit

logger = logging.getLogger(__name__)

EVERY = ("episode",)


class ParamIdentify(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Identify theta of one body at the end of every episode (RigPI through MuJoCo).

    The body is a free body (an object the robot handles: mass, centre of mass, inertia, and
    friction against the static scene it touches) or a link on a hinge or slide joint (a door, a
    drawer: its inertia about the axis or its mass, the joint's dry friction and damping;
    ``joint=`` names the joint, checked against the body's). Every physics substep the wrapper
    samples the body's pose and what the robot (any moving body in contact), applied forces and,
    on a link, the joint's limits and springs exert on it. At episode end it identifies theta on
    a model of the body (and the static geoms a free body touched), and puts into ``info["simuguard"]["params"]``
    the identified values, their standard errors, the model's declared values, the relative errors,
    which parameters the data could not determine, and warnings. A large error on an identified
    parameter says the simulated object does not behave like its declared parameters (solver
    softness, contact drift, a wrong mass scale in an asset).

    The identification runs after the episode's last step, so the env's observations, rewards and
    own infos are untouched; an exception inside it is reported in ``info["simuguard"]["errors"]``.

    Example:
        >>> import gymnasium as gym
        >>> from simuguard_gym import ParamIdentify
        >>> from simuguard_gym.envs.pusher_box import PUSHER_BOX_XML, push_policy
        >>> env = ParamIdentify(gym.make("simuguard_gym/MujocoScene-v0", xml=PUSHER_BOX_XML, frame_skip=10,
        ...                              max_episode_steps=150), body="box")
        >>> obs, info = env.reset(seed=0)
        >>> for k in range(150):
        ...     obs, reward, terminated, truncated, info = env.step(push_policy(k * 0.02))
        >>> params = info["simuguard"]["params"]
        >>> abs(params["relative_error"]["mass"]) < 0.05
        True
        >>> env.close()
    """

    def __init__(self, env: gym.Env, body: str, every: str = "episode", prior: Prior | Callable | None = None, *,
                 joint: str | None = None, method: str = "lm", wrench_resolution: tuple[float, float] = (1e-6, 1e-7),
                 pose_noise: tuple[float, float] = (1e-4, 1e-3), adapter: PhysicsAdapter | None = None,
                 **identify_kwargs: Any) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, body=body, every=every, prior=prior, joint=joint, method=method,
                                                 wrench_resolution=wrench_resolution, pose_noise=pose_noise,
                                                 **identify_kwargs, _disable_deepcopy=True)  # not the adapter
        super().__init__(env)
        if every not in EVERY:
            raise ValueError(f"every must be one of {EVERY}, got {every!r}")
        from simuguard_gym.engines.mujoco import MujocoAdapter
        from simuguard_gym.identify.simulation.probe import probe_for

        self.adapter = adapter_for(env, adapter)
        if not isinstance(self.adapter, MujocoAdapter):
            raise TypeError(f"ParamIdentify needs a MuJoCo env; this one runs on {type(self.adapter).__name__}")
        self.body, self.prior, self.method = body, prior, method
        # the data come from this env's own physics: the model steps exactly as the env does
        identify_kwargs.setdefault("substeps", 1)
        self.identify_kwargs = dict(wrench_resolution=wrench_resolution, pose_noise=pose_noise, **identify_kwargs)
        self.probe = probe_for(self.adapter, body, joint)
        self.adapter.hooks.add(self.probe)
        #: the last episode's result (None before the first episode ends)
        self.result: IdentificationResult | None = None
        self._errors: list[dict[str, Any]] = []
        self._audit = SubstepAudit(self.adapter, seen=lambda: self.probe.samples)
        self._lost: str | None = None  # substeps that missed the probe this episode

    # The env's own calls run unguarded; simuguard's parts under guarded() (see RecordPhysics).
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._errors = []
        guarded(self._record, "identify.reset", self._start_episode)
        return obs, with_simuguard(info, errors=list(self._errors))

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        fields = guarded(self._record, "identify.step", lambda: self._after_step(terminated or truncated), default={})
        return obs, reward, terminated, truncated, with_simuguard(info, errors=list(self._errors), **fields)

    def close(self) -> None:
        try:
            super().close()
        finally:
            guarded(self._record, "identify.close", lambda: self.adapter.hooks.remove(self.probe))

    def _start_episode(self) -> None:
        self._lost = None
        self.adapter.refresh()
        self.probe.start_episode()
        self._audit.start_episode()

    def _check_substeps(self) -> None:
        lost = self._audit.check()
        if lost is not None and self._lost is None:
            self._lost = lost
            message = f"{lost}: this episode is not identified (its samples have a hole)"
            self._record(HookError(self.probe.samples, "identify.substeps", "LostSubsteps", message))

    def _after_step(self, ended: bool) -> dict[str, Any]:
        guarded(self._record, "identify.substeps", self._check_substeps)
        fields = {"params": self._identify() if self._lost is None else None} if ended else {}
        for where, error in self.probe.errors:
            self._errors.append(HookError.capture(self.probe.samples, where, error).to_dict())
        self.probe.errors.clear()
        return fields

    def _record(self, error: HookError) -> None:
        self._errors.append(error.to_dict())
        logger.warning("ParamIdentify error (%s): %s", error.where, error.message)

    def _identify(self) -> dict[str, Any] | None:
        try:
            problem = self.probe.problem()
            series = self.probe.series()
            truth = self.probe.truth()
            result = identify(series, problem, self.prior, method=self.method, **self.identify_kwargs)
        except Exception as error:  # noqa: BLE001
            self._errors.append(HookError.capture(self.probe.samples, "identify.fit", error).to_dict())
            logger.warning("ParamIdentify: identification failed: %s", error)
            return None
        self.result = result
        out = result.as_dict()
        out["warnings"] = self.probe.notes + out["warnings"]
        values = {n: float(v) for n, v in zip(result.names, result.theta)}
        out["values"] = values
        out["truth"] = truth
        out["relative_error"] = {n: (values[n] - t) / t if t != 0 else values[n] - t
                                 for n, t in truth.items() if n in values}
        out["body"] = self.body
        out["samples"] = len(series)
        return out


__all__ = ["ParamIdentify"]

"""DepenetrationRerun: rerun every episode that had a contact artifact, with one parameter changed."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, SupportsFloat

import gymnasium as gym

from simuguard_gym.attach import BenchmarkEnv
from simuguard_gym.engines.base import adapter_for
from simuguard_gym.physics.hooks import HookError
from simuguard_gym.replay.interventions import DEFAULTS, Intervention, default_intervention
from simuguard_gym.replay.rerun import MODES, SWITCHES, rerun
from simuguard_gym.scoring.report import write_rerun
from simuguard_gym.wrappers.artifact_monitor import ArtifactMonitor
from simuguard_gym.wrappers.guard import guarded
from simuguard_gym.wrappers.info_key import INFO_KEY, success_from_info, with_simuguard
from simuguard_gym.wrappers.record_physics import RecordPhysics

logger = logging.getLogger(__name__)


class DepenetrationRerun(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """At the end of an episode with a contact artifact, rerun it with ``intervention`` (default:
    the engine's, ``replay.interventions.DEFAULTS``) switched on (by default 0.1 s before the
    artifact's onset) and report the corrected outcome.

    The final step's ``info["simuguard"]`` gains ``rerun`` (intervention, the values it changed,
    switch substep, ``prefix_exact``, success, the object's peak speed after the switch) and
    ``corrected_success``: the rerun's outcome for an episode with an artifact whose rerun
    replayed its prefix bit for bit, the recorded outcome for an episode without one or whose
    rerun is unverified, and absent where the rerun could read no outcome of the recorded kind
    (``rerun["unscored"]`` says why). The rerun is scored like the recording: through the env's
    own ``step`` and ``info`` where its outcome came from ``info``, else by the env's check
    after a substep-by-substep replay (``mode``, see :func:`~simuguard_gym.replay.rerun`). The
    env's own ``success`` / ``is_success`` keys are never touched, and the rerun runs in a fresh env built from the
    env's spec (or ``env_fn``), never in this one: the evaluation's episodes, RNG streams and
    results are those it would have without the wrapper.

    It needs the physics stream: if no :class:`RecordPhysics` and :class:`ArtifactMonitor` are
    below it, it adds them (recordings go to ``directory``, or to a temporary directory that is
    removed at ``close()``).

    Example:
        >>> import gymnasium as gym, simuguard_gym.envs
        >>> from simuguard_gym import DepenetrationRerun
        >>> env = DepenetrationRerun(gym.make("simuguard_gym/PlaceCanBasket-v0"))   # doctest: +SKIP
        >>> obs, info = env.reset(seed=116)                                         # doctest: +SKIP
        >>> for _ in range(90):                                                     # doctest: +SKIP
        ...     obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
        >>> info["success"], info["simuguard"]["corrected_success"]                 # doctest: +SKIP
        (False, True)
    """

    def __init__(self, env: gym.Env, intervention: str | Intervention | None = None, *,
                 switch: str = "before_onset", lead: float = 0.1, env_fn: Callable[[], gym.Env] | None = None,
                 success_fn: Callable[[gym.Env], bool] | None = None, directory: str | Path | None = None,
                 mode: str = "auto") -> None:
        # A stack rebuilt from its spec has the recorder and monitor this wrapper added below it
        # already, so the rebuilt wrapper adds none.
        gym.utils.RecordConstructorArgs.__init__(self, intervention=intervention, switch=switch, lead=lead, env_fn=env_fn,
                                                 success_fn=success_fn, directory=directory, mode=mode,
                                                 _disable_deepcopy=True)
        engine = adapter_for(env).engine
        if intervention is None:
            intervention = default_intervention(engine)
        change = intervention if isinstance(intervention, Intervention) else Intervention.parse(intervention)
        if switch not in SWITCHES:
            raise ValueError(f"switch must be one of {SWITCHES}, got {switch!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not change.supported_by(engine):
            hint = f" (on {engine}: {DEFAULTS[engine]})" if engine in DEFAULTS else ""
            raise ValueError(f"{change.name} does not exist in {engine}{hint}")
        if env_fn is None and isinstance(env.unwrapped, BenchmarkEnv):  # attach(..., env_fn=): rebuilt with it
            env_fn = env.unwrapped.env_fn
        spec = getattr(env.unwrapped, "spec", None)  # wrappers' specs need every wrapper to be re-creatable
        if env_fn is None and spec is None:
            raise ValueError("the env has no spec to rebuild it from; pass env_fn=...")
        below = _wrappers_below(env)
        self._temporary = None
        if RecordPhysics not in below:
            if directory is None:
                self._temporary = directory = tempfile.mkdtemp(prefix="simuguard-rerun-")
            env = RecordPhysics(env, directory)
        if ArtifactMonitor not in below:
            env = ArtifactMonitor(env)
        super().__init__(env)
        self.intervention, self.switch, self.lead = change, switch, float(lead)
        self.env_fn, self.success_fn, self.mode = env_fn, success_fn, mode
        self._spec = spec

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            return obs, reward, terminated, truncated, info
        errors: list[HookError] = []
        recorded = success_from_info(info)
        fields = guarded(errors.append, "rerun", lambda: self._rerun(info, recorded),
                         default={"corrected_success": recorded, "rerun": None})
        if errors:
            logger.warning("simuguard rerun failed: %s", errors[0].message)
            fields["errors"] = [e.to_dict() for e in errors]
        return obs, reward, terminated, truncated, with_simuguard(info, **fields)

    def _rerun(self, info: dict[str, Any], recorded: bool | None) -> dict[str, Any]:
        ours = info.get(INFO_KEY) or {}
        fields: dict[str, Any] = {"corrected_success": recorded, "rerun": None}
        if ours.get("artifact") and ours.get("recording"):
            result = rerun(ours["recording"], self.intervention, switch=self.switch, lead=self.lead,
                           env_fn=self.env_fn or self._rebuild, success_fn=self.success_fn, mode=self.mode)
            fields["rerun"] = result.to_dict()
            if result.recorded_success is not None:
                fields["corrected_success"] = result.recorded_success
            if result.verified and result.success is not None:
                fields["corrected_success"] = result.success
            elif result.verified:  # no outcome of the recorded kind: nothing to correct with
                del fields["corrected_success"]
            write_rerun(ours["recording"], fields["rerun"])  # for `simuguard report` (replay-corrected scores)
        return fields

    def _rebuild(self) -> gym.Env:
        import simuguard_gym.envs  # noqa: F401 - registers the built-in ids

        return gym.make(self._spec)

    def close(self) -> None:
        super().close()
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)


def _wrappers_below(env: gym.Env) -> set[type]:
    found = set()
    while isinstance(env, gym.Wrapper):
        found.add(type(env))
        env = env.env
    return found

"""Reruns (SimuGuard 3.5, D.3): replay an episode with one physics parameter changed.

The rerun rebuilds the env (from its spec or ``env_fn``, never the user's instance), resets it
as recorded and runs the episode again with the intervention switched on at a chosen substep.
Two ways of driving it (``mode``):

- ``"substeps"`` (the paper's): the recorded actuation and between-step writes are replayed
  substep by substep, open loop; the outcome is the env's check (``_check_success``,
  ManiSkill's ``evaluate()``, or ``success_fn(env)``) at the end of each recorded env step,
  stopping at the first success as a benchmark's evaluator does.
- ``"actions"``: the recorded actions go through the env's own ``step``, so its controller
  reacts to the changed physics and its ``info`` reports the outcome, read from the same key as
  the recording's; the rerun ends where the recording ended or where the env ends the episode.

``"auto"`` (the default) scores a rerun with the signal the recording was scored with: through
the env's ``step`` where the recorded outcome came from ``info`` and the actions are recorded,
else substep by substep. Either way the prefix before the switch is verified bit for bit
against the recording: a rerun whose prefix diverged is *unverified* and is never evidence; a
rerun that cannot read an outcome of the recorded kind is *unscored* and says why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from simuguard_gym.capture.recorder import SubstepRecorder
from simuguard_gym.detection.offline import detect
from simuguard_gym.outcome import CHECK, success_in_info
from simuguard_gym.physics.adapter import Intervenes, PhysicsAdapter
from simuguard_gym.physics.hooks import HookError
from simuguard_gym.physics.parameters import ParameterValue, changes_between
from simuguard_gym.recording.reader import Recording
from simuguard_gym.replay.interventions import Intervention
from simuguard_gym.replay.isolation import isolated
from simuguard_gym.engines.mujoco_stored import StoredScene
from simuguard_gym.replay.rebuild import build_env, recording_of
from simuguard_gym.replay.replay import Divergence, Prepared, _ChunkChecker, _drive, prepare

SWITCHES = ("auto", "before_onset", "start")
MODES = ("auto", "substeps", "actions")


@dataclass
class RerunResult:
    """One rerun: where the intervention switched on, what it changed, whether the prefix
    replayed exactly, and the outcome. ``verified`` (prefix exact) decides whether it counts as
    evidence; ``unscored`` says why there is no outcome where there is none."""

    intervention: str
    switch: str
    switch_substep: int
    prefix_exact: bool
    success: bool | None
    recorded_success: bool | None
    substeps: int
    body: str | None = None  # the artifact's object
    peak_speed: float | None = None  # its peak speed after the switch, in the rerun
    recorded_peak_speed: float | None = None  # the same in the recording
    divergence: Divergence | None = None  # the first prefix divergence, if any
    simulation_parameter: bool = True
    notes: list[str] = field(default_factory=list)
    mode: str = "substeps"  # how it was driven: "substeps" or "actions" (see the module docstring)
    success_source: str | None = None  # where its outcome was read: "info:<key>" or "check"
    unscored: str | None = None  # why there is no outcome of the recorded kind
    #: Each parameter the intervention set: {parameter, element, before, after}.
    changes: list[dict[str, Any]] = field(default_factory=list)
    #: Per tracked body: its peak speed after the switch, recorded and in the rerun (m/s).
    peaks: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.prefix_exact

    def to_dict(self) -> dict[str, Any]:
        return {"intervention": self.intervention, "switch": self.switch, "switch_substep": self.switch_substep,
                "prefix_exact": self.prefix_exact, "success": self.success, "recorded_success": self.recorded_success,
                "substeps": self.substeps, "body": self.body, "peak_speed": self.peak_speed,
                "recorded_peak_speed": self.recorded_peak_speed,
                "divergence": str(self.divergence) if self.divergence else None,
                "simulation_parameter": self.simulation_parameter, "notes": list(self.notes), "mode": self.mode,
                "success_source": self.success_source, "unscored": self.unscored, "changes": list(self.changes),
                "peaks": dict(self.peaks)}


def rerun(recording: Recording | str | os.PathLike[str], intervention: Intervention | str, *,
          switch: str = "auto", lead: float = 0.1, env_fn: Callable[[], gym.Env] | None = None,
          success_fn: Callable[[gym.Env], bool] | None = None, adapter: PhysicsAdapter | None = None,
          mode: str = "auto", trust: bool = False, from_file: bool = False) -> RerunResult:
    """Rerun a recorded episode with ``intervention`` from ``switch`` on.

    ``switch="before_onset"`` switches ``lead`` seconds before the onset of the episode's first
    contact artifact (from the recording's online events, else detected now); ``"start"`` from
    the first substep; ``"auto"`` (default) before the onset where the episode has an artifact,
    else from the start (``result.switch`` says which). ``mode`` chooses how the episode is
    driven and scored (module docstring); ``success_fn(env)`` replaces the env's own outcome. An intervention that would leave every
    value as it is raises ``ValueError`` naming the current value. The env is rebuilt as
    :func:`~simuguard_gym.replay.replay` rebuilds it (``env_fn``, ``trust``), in a child process
    where the file is not signed by this user. With ``from_file``, or where the env cannot be
    built here, a MuJoCo recording reruns on the model stored with it, driven by its substeps
    (its outcome then needs ``success_fn``).

    >>> from simuguard_gym.replay import rerun
    >>> result = rerun("episode_000000.msgpack", "depenetration=1.0")   # doctest: +SKIP
    >>> result.prefix_exact, result.recorded_success, result.success    # doctest: +SKIP
    (True, False, True)
    >>> result.changes[0]                                               # doctest: +SKIP
    {'parameter': 'max_depenetration_velocity', 'element': 'body can', 'before': 1e+32, 'after': 1.0}
    """
    rec = recording_of(recording, trust)
    change = intervention if isinstance(intervention, Intervention) else Intervention.parse(intervention)
    if switch not in SWITCHES:
        raise ValueError(f"switch must be one of {SWITCHES}, got {switch!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not lead >= 0:
        raise ValueError(f"lead must be >= 0 seconds, got {lead!r}")
    if not change.supported_by(rec.header.get("engine", "")):
        raise ValueError(f"{change.name} does not exist in {rec.header.get('engine')}")
    artifacts = _artifacts(rec)
    event = min(artifacts, key=lambda e: e["onset_substep"]) if artifacts else None
    if switch == "auto":
        switch = "before_onset" if event is not None else "start"
    if switch == "before_onset":
        if event is None:
            raise ValueError("the recording has no contact artifact to switch before: switch from the start instead")
        at = max(0, int(event["onset_substep"]) - int(round(lead / rec.substep_dt)))
    else:
        at = 0
    chosen = "substeps" if from_file and mode == "auto" else _mode_for(rec, mode, success_fn)
    if chosen == "actions" and rec.actions is None:
        raise ValueError("the recording keeps no actions to step the env with"
                         f" ({(rec.footer or {}).get('actions_missing') or 'none recorded'}); use mode='substeps'")
    result = RerunResult(str(change), switch, at, prefix_exact=False, success=None,
                         recorded_success=(rec.footer or {}).get("success"), substeps=0,
                         simulation_parameter=change.simulation_parameter, mode=chosen)

    def work() -> RerunResult:
        env = build_env(rec, env_fn, from_file=from_file, notes=result.notes)
        if isinstance(env, StoredScene) and result.mode == "actions":
            result.mode = "substeps"  # the stored model has no env code to take actions
        try:
            _rerun_in(env, rec, change, at, artifacts, success_fn, adapter, result)
        finally:
            env.close()
        return result

    return isolated(rec, work, "rerunning")


def _mode_for(rec: Recording, mode: str, success_fn: Callable[[gym.Env], bool] | None) -> str:
    """The mode "auto" stands for: the recorded outcome's own source where it can be read again."""
    if mode != "auto":
        return mode
    if success_fn is not None:
        return "substeps"
    source = (rec.footer or {}).get("success_source")
    has_actions = (rec.footer or {}).get("actions") is not None
    if has_actions and (source is None or source.startswith("info:")):
        return "actions"
    return "substeps"


def _artifacts(rec: Recording) -> list[dict[str, Any]]:
    """The recording's contact artifacts: its online events, else the detector's now."""
    found = ((rec.footer or {}).get("detector") or {}).get("events")
    events = found if found is not None else detect(rec).events
    return [e for e in events if e.get("artifact")]


def _rerun_in(env: gym.Env, rec: Recording, change: Intervention, at: int, artifacts: list[dict[str, Any]],
              success_fn: Callable[[gym.Env], bool] | None, adapter: PhysicsAdapter | None,
              result: RerunResult) -> None:
    prepared = prepare(env, rec, adapter, result.notes)
    if isinstance(prepared, Divergence):
        result.divergence = prepared
        return
    adapter = prepared.adapter
    if not isinstance(adapter, Intervenes):
        raise ValueError(f"{type(adapter).__name__} cannot change physics parameters")
    bodies = _bodies_of(adapter, change)
    if change.simulation_parameter:
        _refuse_no_change(change, adapter.parameter_values(change.name, bodies),
                          adapter.parameter_values(change.name, bodies, change.value),
                          [adapter.body_table().names[b] for b in bodies])
    event = min(artifacts, key=lambda e: e["onset_substep"]) if artifacts else None
    tracked = list(rec.tracked)
    col = tracked.index(event["body_id"]) if event is not None and event["body_id"] in tracked else None
    result.body = event["body"] if event is not None else None
    speeds: list[np.ndarray] = []  # per chunk: every tracked body's speed after each substep
    # The prefix is checked through every substep's state fingerprint, bodies and writes; contacts
    # are not captured (most of a replay's cost on contact-rich scenes, and redundant with the state).
    checker = _ChunkChecker(rec, contacts=False)

    def sink(columns: dict[str, np.ndarray], first: int, n: int) -> None:
        checker(columns, first, n)
        speeds.append(np.linalg.norm(columns["body_vel"][:n, :, :3], axis=2))

    def switch_on() -> None:
        if change.simulation_parameter:
            before = adapter.parameter_values(change.name, bodies)
            note = adapter.apply_intervention(change.name, change.value, bodies)
            if note:
                result.notes.append(note)
            after = adapter.parameter_values(change.name, bodies)
            result.changes = [c.to_dict() for c in changes_between(before, after)]

    def after_substep(k: int) -> None:
        if k >= at and change.name == "speed_clamp":
            adapter.clamp_speeds(bodies, change.value)

    recorder = SubstepRecorder(adapter, sink, snapshot_every=int(rec.header["snapshot_every"]),
                               chunk_substeps=int(rec.header["chunk_substeps"]), contacts=False)
    adapter.hooks.add(recorder)
    try:
        recorder.start_episode()
        if result.mode == "actions":
            _by_actions(env, rec, prepared, at, switch_on, after_substep, success_fn, result)
        else:
            _by_substeps(env, rec, prepared, checker, at, switch_on, after_substep, success_fn, result)
        recorder.finish()
    finally:
        adapter.hooks.remove(recorder)
    if recorder.errors:  # the prefix went unchecked from there on: nothing to claim about it
        first = recorder.errors[0]
        raise RuntimeError(f"rerun hook failed at substep {first.substep}: {first.type}: {first.message}")
    result.substeps = recorder.substep
    first = checker.first
    result.divergence = first if first is not None and first.substep < at else None
    if result.divergence is None and result.substeps < at:
        result.divergence = Divergence(result.substeps, "length", detail="the rerun ended before its switch")
    lost = rec.lost
    if lost is not None and result.divergence is None and at > int(lost["last_good_substep"]):
        # The switch lies past a hole in the recording: the prefix cannot have been verified.
        result.divergence = Divergence(int(lost["last_good_substep"]) + 1, "recording",
                                       detail=f"incomplete: {lost['reason']}")
    result.prefix_exact = result.divergence is None
    rerun_speed = np.concatenate(speeds) if speeds else np.zeros((0, len(tracked)))
    recorded_speed = np.linalg.norm(rec.columns["body_vel"][at:, :, :3], axis=2)
    if col is not None:
        result.peak_speed = float(rerun_speed[at:, col].max(initial=0.0))
        result.recorded_peak_speed = float(recorded_speed[:, col].max(initial=0.0))
    for c, name in enumerate(rec.tracked_names):
        result.peaks[name] = {"recorded": float(recorded_speed[:, c].max(initial=0.0)),
                              "rerun": float(rerun_speed[at:, c].max(initial=0.0))}


def _refuse_no_change(change: Intervention, now: list[ParameterValue], then: list[ParameterValue],
                      bodies: list[str]) -> None:
    """ValueError where the intervention would write nothing, or leave every value as it is."""
    if not now:
        raise ValueError(f"{change}: the bodies {', '.join(bodies)} have no {change.name} to change")
    if [v.value for v in now] == [v.value for v in then]:
        shown = ", ".join(f"{v.parameter} of {v.element} is {v.value:g}" for v in now[:3])
        raise ValueError(f"{change} changes nothing: {shown}{' ...' if len(now) > 3 else ''}")


def _bodies_of(adapter: PhysicsAdapter, change: Intervention) -> np.ndarray:
    table = adapter.body_table()
    if not change.bodies:
        return table.tracked
    missing = [n for n in change.bodies if n not in table.names]
    if missing:
        raise ValueError(f"{change}: no body {', '.join(missing)}; bodies: {', '.join(table.names)}")
    return np.array([table.names.index(n) for n in change.bodies])


def _by_substeps(env: gym.Env, rec: Recording, prepared: Prepared, checker: _ChunkChecker, at: int,
                 switch_on: Callable[[], None], after_substep: Callable[[int], None],
                 success_fn: Callable[[gym.Env], bool] | None, result: RerunResult) -> None:
    """The paper's rerun: recorded actuation substep by substep, scored by the env's check."""
    adapter = prepared.adapter
    step_ends = set((rec.footer or {}).get("step_substeps") or [])
    result.success_source = "success_fn" if success_fn is not None else CHECK

    def check() -> bool | None:
        return bool(success_fn(env)) if success_fn is not None else adapter.success()

    def before(k: int) -> None:
        if k == at:
            switch_on()

    def after(k: int) -> bool:
        if k < at:
            return False
        after_substep(k)
        if step_ends and (k + 1) not in step_ends:
            return False
        return bool(check())

    _drive(adapter, rec, checker, False, prepared.state, before, after)
    try:
        result.success = check()
    except Exception as error:  # noqa: BLE001 - reported, not fatal
        result.unscored = f"the success check failed: {type(error).__name__}: {error}"
    if result.success is None and result.unscored is None:
        result.unscored = ("the env has no success check (_check_success, evaluate()) to read after a substep "
                           "replay; its outcome may be in the info of its step (mode='actions'), or pass success_fn")


class _Switch:
    """Counts the substeps the env's own step runs, switches the intervention on before substep
    ``at`` and calls ``after(k)`` after each."""

    def __init__(self, at: int, switch_on: Callable[[], None], after: Callable[[int], None]) -> None:
        self.at, self.switch_on, self.after = at, switch_on, after
        self.substep = 0
        self.switched = False
        self.errors: list[HookError] = []

    def before_substep(self, phase: str) -> None:
        if self.substep == self.at and not self.switched:
            self.switched = True
            self.switch_on()

    def after_substep(self) -> None:
        self.after(self.substep)
        self.substep += 1

    def hook_failed(self, where: str, error: BaseException) -> None:
        self.errors.append(HookError.capture(self.substep, where, error))


def _by_actions(env: gym.Env, rec: Recording, prepared: Prepared, at: int, switch_on: Callable[[], None],
                after_substep: Callable[[int], None], success_fn: Callable[[gym.Env], bool] | None,
                result: RerunResult) -> None:
    """The recorded actions through the env's own step, scored by its info (or its check)."""
    adapter = prepared.adapter
    if prepared.model_restored or prepared.initial_state_restored:
        # The physics was written back; what the env keeps outside it (a goal, a task) was not.
        result.unscored = ("the env's reset did not reproduce the recorded episode (the recorded model or state "
                           "was written back): its info would score another episode")
    source = (rec.footer or {}).get("success_source")
    switch = _Switch(at, switch_on, after_substep)
    adapter.hooks.add(switch)
    info: dict[str, Any] = {}
    try:
        for action in rec.actions:
            *_, terminated, truncated, info = env.step(action.copy())
            if terminated or truncated:
                break
    finally:
        adapter.hooks.remove(switch)
    if switch.errors:
        first = switch.errors[0]
        raise RuntimeError(f"rerun intervention failed at substep {first.substep}: {first.type}: {first.message}")
    found, found_source = success_in_info(info)
    if success_fn is not None:
        found, found_source = bool(success_fn(env)), "success_fn"
    elif source == CHECK or (found is None and source is None):
        found, found_source = adapter.success(), CHECK
    elif source is not None and found_source != source:
        found = None
    result.success_source = found_source if found is not None else source
    if found is None and result.unscored is None:
        result.unscored = (f"the env's last step reported no {source.split(':', 1)[-1] if source else 'success'} "
                           "in its info" + ("" if source else " and it has no success check"))
    if result.unscored is None:
        result.success = found

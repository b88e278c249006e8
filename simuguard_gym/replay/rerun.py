"""Reruns (SimuGuard 3.5, D.3): replay an episode with one physics parameter changed.

The rerun rebuilds the env (from its spec or ``env_fn``, never the user's instance), replays the
recorded actuation and between-step writes substep by substep, switches the intervention on at
a chosen substep, and scores the outcome with the env's own success check at the end of each
recorded env step, stopping at the first success as a benchmark's evaluator does. The prefix
before the switch is verified bit for bit against the recording: a rerun whose prefix diverged
is *unverified* and is never evidence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from simuguard_gym.detection.offline import detect
from simuguard_gym.physics.adapter import PhysicsAdapter
from simuguard_gym.recording.reader import Recording, load_recording
from simuguard_gym.capture.recorder import SubstepRecorder
from simuguard_gym.replay.interventions import Intervention
from simuguard_gym.replay.replay import Divergence, _ChunkChecker, _drive, make_env, prepare

SWITCHES = ("before_onset", "start")


@dataclass
class RerunResult:
    """One rerun: where the intervention switched on, whether the prefix replayed exactly, and
    the outcome. ``verified`` (prefix exact) decides whether it counts as evidence."""

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

    @property
    def verified(self) -> bool:
        return self.prefix_exact

    def to_dict(self) -> dict[str, Any]:
        return {"intervention": self.intervention, "switch": self.switch, "switch_substep": self.switch_substep,
                "prefix_exact": self.prefix_exact, "success": self.success, "recorded_success": self.recorded_success,
                "substeps": self.substeps, "body": self.body, "peak_speed": self.peak_speed,
                "recorded_peak_speed": self.recorded_peak_speed,
                "divergence": str(self.divergence) if self.divergence else None,
                "simulation_parameter": self.simulation_parameter, "notes": list(self.notes)}


def rerun(recording: Recording | str | os.PathLike[str], intervention: Intervention | str, *,
          switch: str = "before_onset", lead: float = 0.1, env_fn: Callable[[], gym.Env] | None = None,
          success_fn: Callable[[gym.Env], bool] | None = None, adapter: PhysicsAdapter | None = None) -> RerunResult:
    """Rerun a recorded episode with ``intervention`` from ``switch`` on.

    ``switch="before_onset"`` switches ``lead`` seconds before the onset of the episode's first
    contact artifact (from the recording's online events, else detected now); ``"start"`` from
    the first substep. ``success_fn(env)`` replaces the env's own check (``_check_success``).

    >>> from simuguard_gym.replay import rerun
    >>> result = rerun("episode_000000.msgpack", "depenetration=1.0")   # doctest: +SKIP
    >>> result.prefix_exact, result.recorded_success, result.success    # doctest: +SKIP
    (True, False, True)
    """
    rec = recording if isinstance(recording, Recording) else load_recording(recording)
    change = intervention if isinstance(intervention, Intervention) else Intervention.parse(intervention)
    if switch not in SWITCHES:
        raise ValueError(f"switch must be one of {SWITCHES}, got {switch!r}")
    if not lead >= 0:
        raise ValueError(f"lead must be >= 0 seconds, got {lead!r}")
    if not change.supported_by(rec.header.get("engine", "")):
        raise ValueError(f"{change.name} does not exist in {rec.header.get('engine')}")
    event = _first_artifact(rec)
    if switch == "before_onset":
        if event is None:
            raise ValueError("the recording has no contact artifact to switch before; use switch='start'")
        at = max(0, int(event["onset_substep"]) - int(round(lead / rec.substep_dt)))
    else:
        at = 0
    result = RerunResult(str(change), switch, at, prefix_exact=False, success=None,
                         recorded_success=(rec.footer or {}).get("success"), substeps=0,
                         simulation_parameter=change.simulation_parameter)
    env = env_fn() if env_fn is not None else make_env(rec.header)
    try:
        _rerun_in(env, rec, change, at, event, success_fn, adapter, result)
    finally:
        env.close()
    return result


def _first_artifact(rec: Recording) -> dict[str, Any] | None:
    found = ((rec.footer or {}).get("detector") or {}).get("events")
    events = found if found is not None else detect(rec).events
    artifacts = [e for e in events if e.get("artifact")]
    return min(artifacts, key=lambda e: e["onset_substep"]) if artifacts else None


def _rerun_in(env: gym.Env, rec: Recording, change: Intervention, at: int, event: dict[str, Any] | None,
              success_fn: Callable[[gym.Env], bool] | None, adapter: PhysicsAdapter | None,
              result: RerunResult) -> None:
    prepared = prepare(env, rec, adapter, result.notes)
    if isinstance(prepared, Divergence):
        result.divergence = prepared
        return
    adapter, state, _ = prepared
    table = adapter.body_table()
    if change.bodies:
        missing = [n for n in change.bodies if n not in table.names]
        if missing:
            raise ValueError(f"{change}: no body {', '.join(missing)}; bodies: {', '.join(table.names)}")
        bodies = np.array([table.names.index(n) for n in change.bodies])
    else:
        bodies = table.tracked
    tracked = list(rec.tracked)
    col = tracked.index(event["body_id"]) if event is not None and event["body_id"] in tracked else None
    result.body = event["body"] if event is not None else None
    speeds: list[np.ndarray] = []
    # The prefix is checked through every substep's state fingerprint, bodies and writes; contacts
    # are not captured (most of a replay's cost on contact-rich scenes, and redundant with the state).
    checker = _ChunkChecker(rec, contacts=False)

    def sink(columns: dict[str, np.ndarray], first: int, n: int) -> None:
        checker(columns, first, n)
        if col is not None:
            speeds.append(np.linalg.norm(columns["body_vel"][:n, col, :3], axis=1))

    recorder = SubstepRecorder(adapter, sink, snapshot_every=int(rec.header["snapshot_every"]),
                               chunk_substeps=int(rec.header["chunk_substeps"]), contacts=False)
    step_ends = set((rec.footer or {}).get("step_substeps") or [])

    def before(k: int) -> None:
        if k == at:
            note = None
            if change.simulation_parameter:
                note = adapter.apply_intervention(change.name, change.value, bodies)
            if note:
                result.notes.append(note)

    def after(k: int) -> bool:
        if k < at:
            return False
        if change.name == "speed_clamp":
            adapter.clamp_speeds(bodies, change.value)
        if step_ends and (k + 1) not in step_ends:
            return False
        return bool(success_fn(env) if success_fn is not None else adapter.success())

    adapter.hooks.add(recorder)
    try:
        recorder.start_episode()
        _drive(adapter, rec, checker, False, state, before, after)
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
    try:
        result.success = bool(success_fn(env)) if success_fn is not None else adapter.success()
    except Exception as error:  # noqa: BLE001 - reported, not fatal
        result.notes.append(f"success check failed: {error}")
    if col is not None:
        rerun_speed = np.concatenate(speeds) if speeds else np.zeros(0)
        result.peak_speed = float(rerun_speed[at:].max(initial=0.0))
        recorded = np.linalg.norm(rec.columns["body_vel"][at:, col, :3], axis=1)
        result.recorded_peak_speed = float(recorded.max(initial=0.0))

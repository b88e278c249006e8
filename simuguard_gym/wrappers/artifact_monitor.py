"""ArtifactMonitor: flag contact artifacts while the env runs, without changing it."""

from __future__ import annotations

import logging
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from simuguard_gym.capture.screened import ScreenedDetection, replay_tap, tracked_kinds
from simuguard_gym.capture.tap import SubstepTap
from simuguard_gym.detection.config import DetectorConfig
from simuguard_gym.detection.detector import ArtifactDetector
from simuguard_gym.detection.false_contact import CollisionPieces
from simuguard_gym.engines.base import adapter_for
from simuguard_gym.physics.adapter import (FiltersCollisions, HasConvexPieces, PhysicsAdapter, ScreensSubsteps,
                                          StagesFromState, SubstepScreen)
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints
from simuguard_gym.physics.hooks import HookError
from simuguard_gym.task_spec import TaskSpec, task_bodies
from simuguard_gym.wrappers.guard import guarded
from simuguard_gym.wrappers.info_key import INFO_KEY, with_simuguard
from simuguard_gym.wrappers.substep_audit import SubstepAudit

logger = logging.getLogger(__name__)

ON_ARTIFACT = ("ignore", "truncate")

#: Quiet substeps wait to be decoded for at most this much simulated time (and at most three
#: quarters of the substeps the tap holds): decoding costs a fixed amount per batch, and only
#: the flags of quiet substeps come late by it, never an event.
MAX_DEFERRED_SECONDS = 2.0

#: A substep counts as quiet while every monitored object's speed bound stays this fraction under
#: ``min_speed``: far above the rounding between the bound and the decoded speed, so that no
#: candidate can start in a substep taken for quiet.
QUIET_MARGIN = 1e-9

#: The envs (by id) whose monitor said it watches nothing: it says so once per process.
_WARNED: set[str] = set()


class ArtifactMonitor(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Run the three-stage contact-artifact detector on every physics substep.

    After every step, ``info["simuguard"]`` holds ``artifact`` (a confirmed contact artifact
    occurred in this episode so far), ``events`` (those artifacts as plain dicts: body, partner
    and contact at onset, speeds, each stage's ratio and verdict), ``flags`` (deep penetration,
    non-finite or absurd states) and ``errors`` (exceptions caught inside the monitor; they never
    reach the caller); after every reset also ``watching``, the bodies it watches: the objects
    (bodies outside the robot that collide and move on a free joint or on slide joints no
    actuator drives, such as Pusher's object, and those a ``task_spec`` names as objects) and a
    legged or free robot's floating base (Ant's and Hopper's torso), for launches at a contact
    that its actuators cannot produce. A scene with neither (a fixed arm alone: Reacher, the
    pendulums) is watched for nothing; the monitor says why once (a warning in the log;
    :attr:`unwatched_reason`). Substeps are analysed in one batch per
    env step; an event is reported once its windows have closed (at most ``confirm_window`` after
    its onset).

    ``on_artifact="truncate"`` ends the episode (``truncated=True``) at the step that confirms an
    artifact, so that an RL learner does not learn from a simulator glitch. With ``"ignore"`` the
    env's outputs are untouched. Stacked with :class:`RecordPhysics` (either order), the config
    goes into the recording's header and the events into its footer.

    From the env's second episode on, a MuJoCo scene stepped with whole ``mj_step`` calls is
    watched by MuJoCo's control callback, in C (:mod:`~simuguard_gym.engines.mujoco_screen`): an
    env step costs one C call unless a substep could open a candidate, and those substeps are
    re-simulated and analysed at the end of the step (the same events and flags; ``screened``,
    and ``screen_unavailable`` says why not). Elsewhere the hooks run around each substep: quiet
    substeps (no monitored object faster than the detector's ``min_speed``, no candidate open) are
    decoded in batches of up to ``MAX_DEFERRED_SECONDS`` of simulated time (at most 1536
    substeps); a possible ejection is analysed at the end of the step in which it starts. Flags
    (deep penetration) of quiet substeps therefore appear up to that late; events never wait.
    In an episode whose scene lets no two shapes collide (MuJoCo's contype and conaffinity bits:
    Reacher, Swimmer, the pendulums) no contact can occur, and nothing runs at all (``idle``).

    Example:
        >>> import gymnasium as gym
        >>> from simuguard_gym import ArtifactMonitor
        >>> env = ArtifactMonitor(gym.make("Pusher-v5"))
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        >>> info["simuguard"]["artifact"], info["simuguard"]["events"]
        (False, [])
        >>> env.close()
    """

    def __init__(self, env: gym.Env, config: DetectorConfig | None = None, task_spec: TaskSpec | None = None,
                 on_artifact: str = "ignore", *, adapter: PhysicsAdapter | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, config=config, task_spec=task_spec, on_artifact=on_artifact,
                                                 _disable_deepcopy=True)  # the adapter belongs to this env only
        super().__init__(env)
        if on_artifact not in ON_ARTIFACT:
            raise ValueError(f"on_artifact must be one of {ON_ARTIFACT}, got {on_artifact!r}")
        if config is not None and not isinstance(config, DetectorConfig):
            raise TypeError(f"config must be a DetectorConfig, got {type(config).__name__}")
        self.config = config if config is not None else DetectorConfig()
        self.on_artifact = on_artifact
        self.adapter = adapter_for(env, adapter)
        if task_spec is not None:
            self.adapter.use_task_spec(task_spec)
        self.tap = SubstepTap(self.adapter, self._feed, on_error=self._on_hook_error, quiet_sink=self._feed_quiet)
        self.adapter.hooks.add(self.tap)
        self.adapter.hooks.annotators.append(self)
        #: The detector of the current episode (None before the first reset); the same object
        #: serves the next episode of the same scene (see ArtifactDetector.restart).
        self.detector: ArtifactDetector | None = None
        self._last_detector: ArtifactDetector | None = None
        self._errors: list[dict[str, Any]] = []
        self._reported = 0
        self._audit = SubstepAudit(self.adapter, seen=self._substeps_seen)
        #: Where the episode's substeps are screened by the engine (no Python per substep; see
        #: capture/screened.py), what feeds the detector; None while the hooks run (the first
        #: episode, stacked with a recorder, or where the engine cannot screen).
        self.screened: ScreenedDetection | None = None
        self._screen: SubstepScreen | None = None  # the engine's screen, once an episode used it
        self._can_screen = isinstance(self.adapter, ScreensSubsteps)
        self._convex_pieces = isinstance(self.adapter, HasConvexPieces)  # a protocol check: once, not per episode
        self._stager = self.adapter if isinstance(self.adapter, StagesFromState) else None
        self._filters = self.adapter if isinstance(self.adapter, FiltersCollisions) else None
        #: The episode's scene can make no contact: nothing is watched and nothing runs per substep.
        self.idle = False
        #: Why the substeps run through the hooks this episode (None: they are screened).
        self.screen_unavailable: str | None = None
        self._step_substeps = 1  # the most substeps one env step ran under the hooks
        self._fields_now: dict[str, Any] = {}  # what info["simuguard"] says while the screen tells nothing new
        self._truncate = False  # on_artifact="truncate": the screen confirmed an artifact at this step
        #: The bodies the detector watches this episode (objects and floating bases), by name.
        self.watching: tuple[str, ...] = ()
        #: Why it watches none (None while it watches some).
        self.unwatched_reason: str | None = None

    # ------------------------------------------------------------------ gymnasium API
    # The env's own calls run unguarded (its exceptions are its own); simuguard's parts run under
    # guarded(): what fails there is in info["simuguard"]["errors"] and ends detection.
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        known = len(self._errors)
        guarded(self._on_hook_error, "monitor.reset", self._finish_episode)
        ending = self._errors[known:]  # what failed ending the last episode is reported here
        obs, info = self.env.reset(seed=seed, options=options)
        self._errors, self._reported, self.detector = [], 0, None
        guarded(self._on_hook_error, "monitor.reset", self._start_episode)
        fields = self._fields()
        fields["errors"] = ending + fields["errors"]
        fields["watching"] = list(self.watching)
        return obs, with_simuguard(info, **fields)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        screened = self.screened
        if screened is None:
            if self.idle:  # no contact can occur: the entry as it stands, nothing else
                return self._with_entry(self.env.step(action))
            return self._step_hooked(action)
        # The screen watched the substeps. This path runs at every step of an RL loop: while no
        # candidate is open, one C call polls the screen and, where it tells nothing new, builds
        # the result with the entry as it stands (quiet_step); else the Python below.
        result = self.env.step(action)
        tell = None
        try:
            if not screened.open:
                tell = screened.quiet_step(screened.address, result, self._fields_now)
                if tell.__class__ is tuple:
                    return tell  # type: ignore[no-any-return]
        except Exception as error:  # noqa: BLE001 - never raise into the evaluation
            self._on_hook_error(HookError.capture(0, "monitor.step", error))
            tell = 0  # detection has ended: nothing to poll
        terminated, truncated = result[2], result[3]
        try:
            if (terminated or truncated or screened.open
                    or (screened.poll(screened.address) if tell is None else tell)):
                self._screened_step(terminated or truncated)
        except Exception as error:  # noqa: BLE001 - never raise into the evaluation
            self._on_hook_error(HookError.capture(0, "monitor.step", error))
        return self._with_entry(result)

    def _with_entry(self, result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
                    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The env's step result with the monitor's entry as it stands (each list a copy) added."""
        obs, reward, terminated, truncated, info = result
        now = self._fields_now
        fields = {"artifact": now["artifact"], "events": list(now["events"]), "flags": list(now["flags"]),
                  "errors": list(self._errors)}
        if self._truncate:
            truncated, self._truncate = True, False
        if INFO_KEY in info:
            return obs, reward, terminated, truncated, with_simuguard(info, **fields)
        out = dict(info)  # the env's own dict is never changed
        out[INFO_KEY] = fields
        return obs, reward, terminated, truncated, out

    def _step_hooked(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        active = self.tap.active
        before = self.tap.substep
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._step_substeps = max(self._step_substeps, self.tap.substep - before)
        guarded(self._on_hook_error, "monitor.step", lambda: self._after_step(active, terminated or truncated))
        fields = self._fields()
        if self.on_artifact == "truncate" and fields["artifact"] and len(fields["events"]) > self._reported:
            truncated = True
        self._reported = len(fields["events"])
        return obs, reward, terminated, truncated, with_simuguard(info, **fields)

    def close(self) -> None:
        guarded(self._on_hook_error, "monitor.close", self._finish_episode)
        try:
            super().close()  # an inner RecordPhysics writes its footer (with our events) first
        finally:
            guarded(self._on_hook_error, "monitor.close", self._detach)

    def _start_episode(self) -> None:
        self._stop_screen()
        adapter = self.adapter
        adapter.refresh()
        self.idle = self._filters is not None and not self._filters.makes_contacts()
        if self.idle:
            self._start_idle()
            return
        table = adapter.body_table()
        screen = self._screen_for_episode()
        if screen is None:
            self._listen()
            tracked, initial_pose, initial_vel = self.tap.tracked, self.tap.initial_pose, self.tap.initial_vel
            state = self.tap.initial_state
        else:  # the state the episode starts from, as the tap reads it; the bodies' start is
            # decoded only if the screen ever feeds the detector from the first substep on
            tracked, initial_pose, initial_vel = table.tracked, None, None
            state = np.empty(sum(c.size for c in adapter.state_layout()))
            adapter.read_state(state)
        stager = self._stager  # the stage box of the first state, computed only if an event asks for it
        stage = (lambda: stager.stage_box_of(state)) if stager is not None else adapter.stage_box()
        monitored = table.watched  # the tracked bodies in a watched role
        self.watching = tuple(table.names[i] for i in monitored.tolist())
        self.unwatched_reason = None if self.watching else unwatched_reason(table)
        if self.unwatched_reason is not None:
            self._warn_unwatched(". Name bodies to watch with ArtifactMonitor(env, task_spec=TaskSpec(objects=(...)))")
        deferred = round(MAX_DEFERRED_SECONDS / adapter.substep_dt)
        scene = dict(config=self.config, gravity=adapter.gravity, task_bodies=task_bodies(adapter.task_spec),
                     pieces=CollisionPieces.of_scene(adapter) if self._convex_pieces else None)
        episode = dict(initial_pose=initial_pose, initial_vel=initial_vel, stage=stage,
                       count_deep=screen is None)
        kept = self._last_detector
        if kept is not None and kept.serves(table, tracked, adapter.substep_dt, **scene):
            kept.restart(**episode)  # the scene's tables are the last episode's
            self.detector = kept
        else:
            self.detector = ArtifactDetector(table, tracked, adapter.substep_dt, **scene, **episode)
        self._last_detector = self.detector
        if screen is not None and not self._start_screen(screen, table, tracked, deferred, state):
            self.detector.count_deep = True
            self._listen()
            self.detector.start_state(self.tap.initial_pose, self.tap.initial_vel)
        if self.screened is None:
            self._speed_bound = adapter.speed_bound(monitored)
            # A base's quiet speed follows the fastest it moved (see candidate_speeds): only there.
            has_base = any(table.roles[b] == "base" for b in monitored.tolist())
            self._base_quiet = np.flatnonzero(np.isin(tracked, monitored)) if has_base else None
            # A quarter of the tap left for the step that reaches the deferral: a tap that fills
            # up drains in full by itself, and quiet batches would never be decoded as such.
            self._max_deferred = int(min(self.tap.max_batch * 3 // 4, max(1, deferred)))
            self._quiet_speed = self.config.min_speed * (1.0 - QUIET_MARGIN)
        self._audit.start_episode()  # after the tap's (or the screen's) start: its count begins there
        self._fields_now = self._fields()

    def _start_idle(self) -> None:
        """An episode of a scene in which no two shapes can collide: no contact, hence no event
        and no flag, can occur, so no hook of the monitor's runs and no detector is fed."""
        self._stop_listening()
        self.watching, self.unwatched_reason = (), NO_CONTACT_REASON
        self._warn_unwatched("")
        self._fields_now = self._fields()

    def _warn_unwatched(self, hint: str) -> None:
        name = _env_name(self.env)
        if name not in _WARNED:  # once per env and process
            _WARNED.add(name)
            logger.warning("ArtifactMonitor watches no body of %s, so it can report no contact artifact: %s%s",
                           name, self.unwatched_reason, hint)

    def _listen(self) -> None:
        """This episode's substeps through the hooks: the tap listens from its first substep."""
        if self.tap not in self.adapter.hooks.listeners:
            self.adapter.hooks.add(self.tap)
        self.tap.start_episode()
        self._checked, self._checked_drain = 0, self.tap.drains  # waiting substeps already speed-checked

    def _stop_listening(self) -> None:
        if self.tap in self.adapter.hooks.listeners:
            self.tap.active = False
            self.adapter.hooks.remove(self.tap)

    def _screen_for_episode(self) -> SubstepScreen | None:
        """The engine's screen for this episode's substeps, where it has one that can serve (not
        in the env's first episode: the hooks learn how it steps); a recorder's hooks may run beside."""
        if not self._can_screen:
            self.screen_unavailable = "the engine has no substep screen"
            return None
        screen, self.screen_unavailable = self.adapter.substep_screen()  # type: ignore[attr-defined]
        return screen

    def _start_screen(self, screen: SubstepScreen, table: BodyTable, tracked: np.ndarray, refresh: int,
                      initial_state: np.ndarray) -> bool:
        assert self.detector is not None
        started = screen.start_episode(
            tracked, tracked_kinds(table, tracked), self.config, lookback=self.detector.lookback_substeps,
            steps_between_polls=self._step_substeps, refresh_every=refresh)
        if not started:
            self.screen_unavailable = "the scene's memory could not be bound"
            return False
        self._stop_listening()  # no hook of ours around the env's substeps
        self._screen = screen  # released when the monitor closes
        self.screened = ScreenedDetection(screen, self.adapter, self.detector, table, refresh_substeps=refresh,
                                          initial_state=initial_state)
        return True

    def _stop_screen(self) -> None:
        if self.screened is not None:
            screened, self.screened = self.screened, None
            screened.screen.stop()

    def _screened_step(self, ended: bool) -> None:
        screened = self.screened
        if screened is not None:
            guarded(self._on_hook_error, "monitor.step", lambda: screened.update(replay_tap))
            if ended:
                self._finish_episode()
        fields = self._fields()
        if self.on_artifact == "truncate" and fields["artifact"] and len(fields["events"]) > self._reported:
            self._truncate = True
        self._reported = len(fields["events"])
        self._fields_now = fields

    def _substeps_seen(self) -> int:
        return self.screened.screen.seen if self.screened is not None else self.tap.substep

    def _after_step(self, active: bool, ended: bool) -> None:
        if active and self.tap.active:
            guarded(self._on_hook_error, "monitor.substeps", self._check_substeps, substep=self.tap.substep)
        self._decode_due()
        if ended:
            self._finish_episode()

    def _detach(self) -> None:
        self._stop_screen()
        if self._screen is not None:
            self._screen.release()
        if self in self.adapter.hooks.annotators:
            self.adapter.hooks.annotators.remove(self)
        self.adapter.hooks.remove(self.tap)

    # ------------------------------------------------------------------ recordings (RecordPhysics)
    def recording_header(self) -> dict[str, Any]:
        return {"detector_config": self.config.to_dict()}

    def recording_footer(self) -> dict[str, Any]:
        self._finish_episode()
        if self.idle:
            return {"detector": {"events": [], "flags": []}}
        if self.detector is None:
            return {}
        return {"detector": {"events": self.detector.events, "flags": self.detector.flags}}

    # ------------------------------------------------------------------ internals
    def _check_substeps(self) -> None:
        lost = self._audit.check()
        if lost is not None:
            self._on_hook_error(HookError(self.tap.substep, "monitor.substeps", "LostSubsteps", lost))

    def _feed(self, pose: Any, vel: Any, contacts: ContactPairs) -> None:
        if self.detector is not None and not self.detector.finished:
            self.detector.feed(pose, vel, contacts)

    def _feed_quiet(self, pose: Any, vel: Any, points: ContactPoints) -> None:
        if self.detector is not None and not self.detector.finished:
            self.detector.feed_quiet(pose, vel, points)

    def _decode_due(self) -> None:
        """Decode the waiting substeps now where they may start or decide an event; quiet ones
        wait up to ``_max_deferred`` substeps and are then decoded as quiet (see the class)."""
        try:
            tap, detector = self.tap, self.detector
            waiting = tap.waiting
            if waiting == 0 or detector is None:
                return
            if detector.open_candidates:
                tap.drain()
                return
            if self._checked_drain != tap.drains:  # the tap drained by itself (a long step)
                self._checked, self._checked_drain = 0, tap.drains
            bound = self._speed_bound
            fresh = tap.waiting_elements(self._checked, bound.elements)
            self._checked = waiting
            limit: float | np.ndarray = self._quiet_speed
            if self._base_quiet is not None:
                limit = detector.candidate_speeds()[self._base_quiet] * (1.0 - QUIET_MARGIN)
            if bound.may_exceed(fresh, limit):
                tap.drain()
            elif waiting >= self._max_deferred:
                keep = detector.contact_lookback
                if waiting > 2 * keep:
                    # A deep contact between convex pieces needs its false-contact check: in full.
                    tap.drain_quiet(keep, deep=self.config.max_penetration if detector.pieces is not None else None)
                    self._checked, self._checked_drain = tap.waiting, tap.drains
                else:
                    tap.drain()
        except Exception as error:  # noqa: BLE001 - never raise into the evaluation
            self._on_hook_error(HookError.capture(self.tap.substep, "monitor.step", error))

    def _drain(self) -> None:
        try:
            self.tap.drain()
        except Exception as error:  # noqa: BLE001
            self._on_hook_error(HookError.capture(self.tap.substep, "monitor.step", error))

    def _finish_episode(self) -> None:
        if self.detector is None or self.detector.finished:
            return
        screened = self.screened
        if screened is not None:
            try:
                screened.finish(replay_tap)
                self._check_substeps()
            except Exception as error:  # noqa: BLE001 - never raise into the evaluation
                self._on_hook_error(HookError.capture(self._substeps_seen(), "monitor.finish", error))
            self._stop_screen()
        else:
            self._drain()
        try:
            self.detector.finish()
        except Exception as error:  # noqa: BLE001
            self._on_hook_error(HookError.capture(self.tap.substep, "monitor.finish", error))
        self.tap.active = False

    def _on_hook_error(self, error: HookError) -> None:
        # The first failure ends detection for the episode: a broken detector would fail again at
        # every substep, and its later verdicts could not be trusted anyway.
        self._errors.append(error.to_dict())
        self._stop_screen()
        logger.warning("simuguard monitor error at substep %d (%s): %s; detection stops for this episode",
                       error.substep, error.where, error.message)
        if self.detector is not None:
            self.detector.finished = True
        self.tap.active = False

    def _fields(self) -> dict[str, Any]:
        def found() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            if self.detector is None:
                return [], []
            return [dict(e) for e in self.detector.artifacts], self.detector.flags

        artifacts, flags = guarded(self._on_hook_error, "monitor.step", found, default=([], []))
        return {"artifact": bool(artifacts), "events": artifacts, "flags": flags, "errors": list(self._errors)}


#: Why the monitor watches nothing of a scene in which no two shapes can collide.
NO_CONTACT_REASON = ("no two of its shapes can collide (the model's collision filters: MuJoCo's contype and "
                     "conaffinity), so no contact can throw anything")


def unwatched_reason(table: BodyTable) -> str:
    """Why a scene has no body to watch, in words, from its bodies' kinds and roles."""
    moving = [table.names[i] for i in table.tracked.tolist()]
    if moving:
        return (f"its moving bodies outside the robot ({', '.join(moving)}) turn about a hinge or never collide, "
                "and a contact cannot throw them")
    if any(k == "dynamic" for k, r in zip(table.kinds, table.roles) if r == "robot"):
        return ("nothing moves but the robot, whose actuators drive every link, and it has no floating base that "
                "a contact can throw (its base is fixed to the world, or never collides)")
    return "nothing in it moves but what code moves"


def _env_name(env: gym.Env) -> str:
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__

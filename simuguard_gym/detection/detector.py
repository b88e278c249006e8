"""The three-stage contact-artifact detector (SimuGuard 3.3), fed substep batches of any size.

Stage 1 (contact ejection) finds candidates vectorised over a whole batch; each candidate is then
decided once the data its windows need has arrived: confirmed when, within ``confirm_window``, the
object travels ``min_displacement`` and either flies free or stays in violent contact with its
container; then the gravity stage (peak speed against the free-fall speed of the height dropped)
and the carrier stage (peak speed against the fastest body that carried it from the robot).

Decisions depend only on the substeps, never on how they were batched: the online monitor (one
batch per env step) and the offline pass over a recording (large batches) give the same events.
Alongside, two flags: contacts deeper than ``max_penetration`` and non-finite or absurd states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simuguard_gym.detection.config import DetectorConfig
from simuguard_gym.detection.false_contact import CollisionPieces, check_contact
from simuguard_gym.physics.bodies import WATCHED_ROLES, BodyTable
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints

#: A world box: (lower, upper corner).
StageBox = tuple[np.ndarray, np.ndarray]

_NEVER = np.iinfo(np.int64).min // 4
#: The fastest a floating base moved is read to the micrometre per second: where a screen passed
#: over earlier substeps (ArtifactDetector.skip), it comes from speeds computed in another order,
#: equal but for the last bits.
FASTEST_DECIMALS = 6
#: The false-contact checks a deep-penetration flag gets at most (see ``ArtifactDetector._label``).
MAX_FLAG_CHECKS = 16


@dataclass
class _Pairs:
    """Contact pairs of the history, with the absolute substep of each."""

    sub: np.ndarray
    bodies: np.ndarray
    depth: np.ndarray
    abs_force: np.ndarray
    pieces: np.ndarray
    normal: np.ndarray
    speed: np.ndarray

    @classmethod
    def of(cls, contacts: ContactPairs, first: int) -> "_Pairs":
        sub = first + np.repeat(np.arange(len(contacts.counts), dtype=np.int64), contacts.counts)
        return cls(sub, contacts.bodies.astype(np.int64), contacts.depth, contacts.abs_force, contacts.pieces,
                   contacts.normal, contacts.speed)

    def since(self, substep: int) -> "_Pairs":
        i = int(np.searchsorted(self.sub, substep))
        return _Pairs(*(getattr(self, f)[i:] for f in _PAIR_FIELDS))

    def between(self, lo: int, hi: int) -> "_Pairs":
        i, j = np.searchsorted(self.sub, [lo, hi + 1])
        return _Pairs(*(getattr(self, f)[i:j] for f in _PAIR_FIELDS))

    def __add__(self, other: "_Pairs") -> "_Pairs":
        return _Pairs(*(np.concatenate([getattr(self, f), getattr(other, f)]) for f in _PAIR_FIELDS))


_PAIR_FIELDS = ("sub", "bodies", "depth", "abs_force", "pieces", "normal", "speed")
#: No pairs: where every episode's history starts (pairs are never changed in place).
_NO_PAIRS = _Pairs.of(ContactPairs.empty(0), 0)


@dataclass
class _Points:
    """Contact points of quiet substeps, with the absolute substep of each: what touches and
    flags read (the same fields as :class:`_Pairs`)."""

    sub: np.ndarray
    bodies: np.ndarray
    depth: np.ndarray


class ArtifactDetector:
    """Incremental detector over the tracked bodies of one episode.

    ``feed`` takes the poses (n, B, 7), centre-of-mass velocities (n, B, 6) and merged contacts of
    the next n substeps (B = the tracked bodies, in ``tracked`` order) and returns the events it
    decided; ``finish`` decides what is left at the end of the episode. Monitored bodies are the
    tracked bodies whose role is ``object``.

    >>> import numpy as np
    >>> from simuguard_gym.detection import ArtifactDetector, DetectorConfig
    >>> from simuguard_gym.physics import BodyTable, ContactPairs
    >>> table = BodyTable(("world", "can"), ("static", "dynamic"), ("scene", "object"), np.array([0, .01]))
    >>> detector = ArtifactDetector(table, np.array([1]), dt=0.002)
    >>> pose, vel = np.zeros((500, 1, 7)), np.zeros((500, 1, 6))
    >>> vel[100:, 0, 0] = 5.0; pose[:, 0, 0] = np.cumsum(vel[:, 0, 0]) * 0.002  # launched at substep 100
    >>> contacts = ContactPairs.empty(500)
    >>> contacts.counts[100] = 1                          # ... while touching the world (body 0)
    >>> contacts.bodies = np.array([[0, 1]], np.int32); contacts.depth = np.array([0.02], np.float32)
    >>> contacts.abs_force = np.ones(1, np.float32); contacts.pieces = np.zeros((1, 2), np.int32)
    >>> contacts.normal = np.array([[0, 0, 1]], np.float32); contacts.speed = np.zeros((1, 2), np.float32)
    >>> [e["onset_substep"] for e in detector.feed(pose, vel, contacts) if e["artifact"]]
    [100]
    """

    def __init__(self, bodies: BodyTable, tracked: np.ndarray, dt: float, *, config: DetectorConfig | None = None,
                 gravity: np.ndarray | None = None, initial_pose: np.ndarray | None = None,
                 initial_vel: np.ndarray | None = None, pieces: CollisionPieces | None = None,
                 stage: StageBox | Callable[[], StageBox | None] | None = None, task_bodies: tuple[str, ...] = (),
                 count_deep: bool = True) -> None:
        self.config = config = config if config is not None else DetectorConfig()
        if not isinstance(config, DetectorConfig):
            raise TypeError(f"config must be a DetectorConfig, got {type(config).__name__}")
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"substep dt must be positive, got {dt!r}")
        self.bodies, self.dt = bodies, float(dt)
        self.pieces = pieces  # convex pieces: each event's onset contact gets the false-contact check
        #: The bodies a TaskSpec names (never off stage).
        self.task_bodies = frozenset(task_bodies)
        self.tracked = np.asarray(tracked, dtype=np.int64)
        nbody, ntrack = len(bodies), len(self.tracked)
        if ntrack and (self.tracked.min() < 0 or self.tracked.max() >= nbody):
            raise ValueError("tracked body ids outside the body table")
        roles, kinds = bodies.role_array, bodies.kind_array
        self._col = np.full(nbody, -1, dtype=np.int64)
        self._col[self.tracked] = np.arange(ntrack)
        self._robot = bodies.robot_mask
        self._static = kinds == "static"
        # A robot link pressed into the static world or into the robot is its controller's
        # doing and throws nothing: such pairs are never flagged, however deep.
        self._pressed = (roles == "robot") | self._static
        self._base = roles == "base"
        self._base_cols = np.flatnonzero(self._base[self.tracked]) if ntrack else np.zeros(0, np.int64)
        container = roles == "container"
        # "Its container": the bodies named containers; a scene that names none lets any
        # non-robot body play that part (the floor a thrown object keeps hitting).
        self._container = container if container.any() else ~self._robot
        self.monitored = np.isin(roles[self.tracked], WATCHED_ROLES) if ntrack else np.zeros(0, bool)
        g = np.zeros(3) if gravity is None else np.asarray(gravity, dtype=float)
        self.gravity = None if gravity is None else g.copy()
        self._g = float(np.linalg.norm(g)) if gravity is not None else 9.81
        self._up = -g / self._g if self._g > 0 else np.array([0.0, 0.0, 1.0])
        c, s = config, self.dt
        self._w_contact = c.substeps(c.contact_window, s)
        self._w_confirm = c.substeps(c.confirm_window, s)
        self._w_free = c.substeps(c.free_flight, s)
        self._w_peak = c.substeps(c.peak_window, s)
        self._w_drop = c.substeps(c.drop_window, s)
        self._w_carrier = c.substeps(c.carrier_window, s)
        self._dv_min = c.velocity_change_per_substep(s)
        self._dv_violent = c.violent_change_per_substep(s)
        self._lookback = max(self._w_drop, self._w_carrier, self._w_contact) + 2
        self.restart(initial_pose=initial_pose, initial_vel=initial_vel, stage=stage, count_deep=count_deep)

    def serves(self, bodies: BodyTable, tracked: np.ndarray, dt: float, *, config: DetectorConfig,
               gravity: np.ndarray | None, pieces: CollisionPieces | None, task_bodies: tuple[str, ...]) -> bool:
        """Whether this detector's scene is the one these arguments describe (:meth:`restart`
        then serves a new episode as a new detector would)."""
        return (pieces is None and self.pieces is None and bodies is self.bodies and config is self.config
                and float(dt) == self.dt and np.array_equal(np.asarray(tracked, np.int64), self.tracked)
                and (gravity is None if self.gravity is None
                     else gravity is not None and np.array_equal(np.asarray(gravity, float), self.gravity))
                and frozenset(task_bodies) == self.task_bodies)

    def restart(self, *, initial_pose: np.ndarray | None = None, initial_vel: np.ndarray | None = None,
                stage: StageBox | Callable[[], StageBox | None] | None = None, count_deep: bool = True) -> None:
        """Start an episode of the same scene: nothing fed, nothing found (the scene's tables,
        windows and thresholds are kept). Arguments as the constructor's."""
        ntrack = len(self.tracked)
        # The stage box, or what computes it the first time an event asks (most episodes never do).
        self._stage_source: StageBox | Callable[[], StageBox | None] | None = stage
        self.substeps = 0
        self.start_state(np.zeros((ntrack, 7)) if initial_pose is None else initial_pose,
                         np.zeros((ntrack, 6)) if initial_vel is None else initial_vel)
        self._pairs = _NO_PAIRS
        self._last_touch = np.full(ntrack, _NEVER, dtype=np.int64)
        self._pending: list[list[int]] = [[] for _ in range(ntrack)]
        self._blocked = np.full(ntrack, -2, dtype=np.int64)  # candidates up to here belong to an event
        #: the largest speed (m/s) of each tracked body so far, over every substep fed
        self.peak_speed = np.zeros(ntrack)
        self.events: list[dict[str, Any]] = []  # confirmed by stage 1, with every stage's verdict
        self._flags: dict[tuple, dict[str, Any]] = {}
        #: False: deep penetrations are counted elsewhere (a screen that sees every substep) and
        #: handed over with :meth:`set_deep_flags`; the substeps fed here are not counted again.
        self.count_deep = count_deep
        self._deep_given: list[dict[str, Any]] = []
        self.finished = False

    # ------------------------------------------------------------------ public
    @property
    def stage(self) -> StageBox | None:
        """The stage box (lower, upper corner): where the task happens; None where the scene has none."""
        source = self._stage_source
        if callable(source):
            source = self._stage_source = source()
        return None if source is None else (np.asarray(source[0], float), np.asarray(source[1], float))

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        """Events that passed all three stages."""
        return [e for e in self.events if e["artifact"]]

    @property
    def open_candidates(self) -> bool:
        """Whether a candidate awaits data to be decided."""
        return any(self._pending)

    @property
    def flags(self) -> list[dict[str, Any]]:
        """Deep penetrations (one per body pair) and absurd states (one per body), by first substep."""
        given = [(("deep_penetration", *f["body_ids"]), f) for f in self._deep_given]
        ordered = sorted([*self._flags.items(), *given], key=lambda item: (item[1]["first_substep"], item[0]))
        return [dict(f) for _, f in ordered]

    def set_deep_flags(self, flags: list[dict[str, Any]]) -> None:
        """The deep-penetration flags as counted elsewhere (``count_deep=False``), all so far."""
        self._deep_given = list(flags)

    def take_deep_flags(self) -> list[dict[str, Any]]:
        """The deep-penetration flags counted here so far, handed over and forgotten (a screen
        merges those of substeps whose contacts it could not read into its own)."""
        keys = [key for key in self._flags if key[0] == "deep_penetration"]
        return [self._flags.pop(key) for key in keys]

    def start_state(self, pose: np.ndarray, vel: np.ndarray) -> None:
        """The tracked bodies' pose (B, 7) and velocity (B, 6) before the first substep, the
        history's start (the constructor's ``initial_pose`` and ``initial_vel``): told before the
        first substep is fed, e.g. by a screen only once it feeds the episode from its start."""
        if self.substeps:
            raise ValueError(f"the episode's start state told after {self.substeps} substeps were fed")
        self._history_from(pose, vel, None)  # from substep -1, the state before the first substep

    def _history_from(self, pose: np.ndarray, vel: np.ndarray, fastest: np.ndarray | None) -> None:
        """The history starts again at the state the substeps fed so far ended in (``pose``,
        ``vel``; ``fastest``: the fastest each body moved up to it, None: no faster than now)."""
        ntrack = len(self.tracked)
        pose, vel = np.asarray(pose, float).reshape(ntrack, 7), np.asarray(vel, float).reshape(ntrack, 6)
        self._h0 = self.substeps - 1
        self._pos, self._quat, self._vel = pose[None, :, :3].copy(), pose[None, :, 3:].copy(), vel[None, :, :3].copy()
        self._speed = np.linalg.norm(self._vel, axis=2)
        # per substep: the fastest each body moved up to it
        self._fastest = (self._speed.copy() if fastest is None
                         else np.fmax(np.asarray(fastest, float).reshape(1, ntrack), self._speed))
        self._dv = np.zeros((1, ntrack))
        self._touch = np.zeros((1, ntrack), bool)
        self._touch_container = np.zeros((1, ntrack), bool)

    def skip(self, n: int, pose: np.ndarray, vel: np.ndarray, fastest: np.ndarray) -> None:
        """Pass over the next ``n`` substeps unseen: a screen found none of them could start a
        candidate (nor hold an absurd state), and the substeps an event could examine will be fed.
        ``pose`` (B, 7) and ``vel`` (B, 6) are the state the last of them ended in, ``fastest``
        (B,) the fastest each body moved up to it; the history starts again there."""
        if self.finished:
            raise RuntimeError("the detector has finished this episode; make a new one")
        if self.open_candidates:
            raise ValueError("skip with a candidate open: its event needs these substeps")
        if n <= 0:
            return
        self.substeps += n
        self._history_from(pose, vel, fastest)
        np.fmax(self.peak_speed, self._fastest[0], out=self.peak_speed)
        self._pairs = self._pairs.since(self.substeps)
        self._last_touch = np.full(len(self.tracked), _NEVER, dtype=np.int64)

    def candidate_speeds(self) -> np.ndarray:
        """Per tracked body, a speed that no substep after those fed can open a candidate at or
        below: ``min_speed``, and for a floating base carrier_ratio x the fastest it moved before
        (as of the oldest substep a later candidate's rule reads)."""
        limits = np.full(len(self.tracked), self.config.min_speed)
        if self._base_cols.size:
            row = max(self.substeps - self._w_carrier - 1 - self._h0, 0)
            fastest = np.round(self._fastest[min(row, len(self._fastest) - 1), self._base_cols], FASTEST_DECIMALS)
            limits[self._base_cols] = np.maximum(limits[self._base_cols], self.config.carrier_ratio * fastest)
        return limits

    @property
    def lookback_substeps(self) -> int:
        """How many substeps before a candidate's onset its event can examine (any window)."""
        return self._lookback

    @property
    def contact_lookback(self) -> int:
        """How many substeps before an onset an event examines contacts from (carrier and
        contact windows): the contacts of older substeps only ever count as touches and flags."""
        return max(self._w_contact, self._w_carrier)

    def feed(self, pose: np.ndarray, vel: np.ndarray, contacts: ContactPairs) -> list[dict[str, Any]]:
        """Add the next substeps; return the events decided with them (artifacts or not)."""
        n = self._check_batch(pose, vel, contacts.counts)
        if n == 0:
            return []
        return self._advance(pose, vel, _Pairs.of(contacts, self.substeps), keep_pairs=True)

    def feed_quiet(self, pose: np.ndarray, vel: np.ndarray, points: ContactPoints) -> list[dict[str, Any]]:
        """Add the next substeps, known to be quiet, with their contacts as points only.

        Quiet: no candidate open, no monitored body faster than ``min_speed`` in them, and at
        least :attr:`contact_lookback` substeps fed after them before the next onset can occur
        (the caller holds those back). No event can start in such substeps nor examine their
        contacts, so touches and flags are all that is read of them: the events and flags are
        those :meth:`feed` gives with the full contacts. Raises ValueError where the substeps
        are not quiet (a candidate among them), before changing anything.
        """
        n = self._check_batch(pose, vel, points.counts)
        if n == 0:
            return []
        if self.open_candidates:
            raise ValueError("feed_quiet with a candidate open: its event may examine these contacts")
        if self.pieces is not None and (points.depth > self.config.max_penetration).any():
            raise ValueError("feed_quiet with a deep contact: its false-contact check needs the pieces")
        sub = self.substeps + np.repeat(np.arange(n, dtype=np.int64), points.counts)
        return self._advance(pose, vel, _Points(sub, points.bodies.astype(np.int64), points.depth), keep_pairs=False)

    def _check_batch(self, pose: np.ndarray, vel: np.ndarray, counts: np.ndarray) -> int:
        if self.finished:
            raise RuntimeError("the detector has finished this episode; make a new one")
        n = len(pose)
        ntrack = len(self.tracked)
        if pose.shape != (n, ntrack, 7) or vel.shape != (n, ntrack, 6) or len(counts) != n:
            raise ValueError(f"expected poses ({n}, {ntrack}, 7), velocities ({n}, {ntrack}, 6) and contacts of "
                             f"{n} substeps; got {pose.shape}, {vel.shape}, {len(counts)}")
        return n

    def _advance(self, pose: np.ndarray, vel: np.ndarray, pairs: "_Pairs | _Points", keep_pairs: bool
                 ) -> list[dict[str, Any]]:
        n = len(pose)
        first = self.substeps
        v = vel[:, :, :3]
        speed = np.linalg.norm(v, axis=2)
        dv = np.linalg.norm(np.diff(np.concatenate([self._vel[-1:], v]), axis=0), axis=2)
        touch, touch_container = self._touches(pairs, first, n)
        # Stage 1 candidates, vectorised: recent contact, fast, sudden velocity change.
        k = first + np.arange(n)
        last = np.maximum.accumulate(np.where(touch, k[:, None], _NEVER), axis=0)
        last = np.maximum(last, self._last_touch[None])
        recent = k[:, None] - last <= self._w_contact
        raw = recent & (speed > self.config.min_speed) & (dv >= self._dv_min) & self.monitored[None]
        fastest = np.concatenate([self._fastest, np.fmax.accumulate(
            np.concatenate([self._fastest[-1:], speed]), axis=0)[1:]])
        if self._base_cols.size:
            # A floating base leaves at carrier_ratio x the fastest it moved before carrier_window
            # ahead, or its actuators explain it (see _event): slower substeps are no candidates.
            before = np.maximum(k - self._w_carrier - 1 - self._h0, 0)
            raw[:, self._base_cols] &= speed[:, self._base_cols] > \
                self.config.carrier_ratio * np.round(fastest[before][:, self._base_cols], FASTEST_DECIMALS)
        rows, cols = np.nonzero(raw)
        if not keep_pairs and len(rows):
            raise ValueError(f"feed_quiet: substep {first + int(rows[0])} holds an ejection candidate; "
                             "feed it with its contacts")
        self._last_touch = last[-1]
        self._flag(pairs, pose, vel, speed, first)
        np.fmax(self.peak_speed, speed.max(axis=0), out=self.peak_speed)
        for row, col in zip(rows.tolist(), cols.tolist()):
            self._pending[col].append(first + row)
        self._pos = np.concatenate([self._pos, pose[:, :, :3]])
        self._quat = np.concatenate([self._quat, pose[:, :, 3:]])
        self._vel = np.concatenate([self._vel, v])
        self._speed = np.concatenate([self._speed, speed])
        self._fastest = fastest
        self._dv = np.concatenate([self._dv, dv])
        self._touch = np.concatenate([self._touch, touch])
        self._touch_container = np.concatenate([self._touch_container, touch_container])
        if keep_pairs:  # quiet substeps' contacts are never examined again (feed_quiet)
            self._pairs = self._pairs + pairs
        self.substeps += n
        decided = self._decide(final=False)
        self._trim()
        return decided

    def finish(self) -> list[dict[str, Any]]:
        """Decide the candidates still open at the end of the episode with the data there is."""
        if self.finished:
            return []
        decided = self._decide(final=True)
        self.finished = True
        return decided

    # ------------------------------------------------------------------ stage 1
    def _touches(self, pairs: _Pairs | _Points, first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        touch = np.zeros((n, len(self.tracked)), bool)
        touch_container = np.zeros_like(touch)
        row = pairs.sub - first
        for side in (0, 1):
            col = self._col[pairs.bodies[:, side]]
            hit = col >= 0
            touch[row[hit], col[hit]] = True
            other = pairs.bodies[:, 1 - side]
            hit &= self._container[other]
            touch_container[row[hit], col[hit]] = True
        return touch, touch_container

    def _decide(self, final: bool) -> list[dict[str, Any]]:
        decided = []
        for col, queue in enumerate(self._pending):
            while queue:
                onset = queue[0]
                if onset <= self._blocked[col]:
                    queue.pop(0)
                    continue
                verdict = self._confirm(col, onset, final)
                if verdict is None:
                    break  # the windows are not complete yet
                queue.pop(0)
                if verdict is False:
                    continue
                confirmed_at, confirmation = verdict
                if not final and self.substeps - 1 < onset + self._w_peak:
                    queue.insert(0, onset)
                    break
                self._blocked[col] = confirmed_at
                event = self._event(col, onset, confirmation)
                self.events.append(event)
                decided.append(event)
        return decided

    def _rows(self, lo: int, hi: int) -> slice:
        """History rows of substeps lo..hi (clipped to what the history holds)."""
        return slice(max(lo, self._h0) - self._h0, max(hi + 1 - self._h0, 0))

    def _confirm(self, col: int, onset: int, final: bool) -> Any:
        """(substep, details) if confirmed, False if rejected, None if undecidable yet.

        Displacement counts from the onset on; free flight and violent contact from the substep
        after it (the velocity change that made the candidate is not its own confirmation)."""
        c = self.config
        end = onset + self._w_confirm
        last = self.substeps - 1
        window = self._rows(onset, min(end, last))
        start = self._pos[onset - 1 - self._h0, col]
        disp = np.linalg.norm(self._pos[window, col] - start, axis=1)
        moved = np.flatnonzero(disp >= c.min_displacement)
        free = ~self._touch[window, col]
        free[0] = False
        run = np.cumsum(free)
        flying = np.flatnonzero(free & (run - _shift(run, self._w_free) >= self._w_free))
        violent = self._touch_container[window, col] & (self._dv[window, col] >= self._dv_violent) \
            & (self._speed[window, col] >= c.violent_speed)
        violent[0] = False
        violent = np.flatnonzero(violent)
        if len(moved) and (len(flying) or len(violent)):
            by = min(flying[0] if len(flying) else np.inf, violent[0] if len(violent) else np.inf)
            at = int(max(moved[0], by))
            return onset + at, {"substep": onset + at, "displacement": float(disp[:at + 1].max()),
                                "free_flight": bool(len(flying) and flying[0] <= at),
                                "violent_contact": bool(len(violent) and violent[0] <= at)}
        if final or last >= end:
            return False
        return None

    # ------------------------------------------------------------------ stages 2 and 3, the event
    def _event(self, col: int, onset: int, confirmation: dict[str, Any]) -> dict[str, Any]:
        c = self.config
        body = int(self.tracked[col])
        names = self.bodies.names
        last = self.substeps - 1
        peak_rows = self._rows(onset, min(onset + self._w_peak, last))
        speeds = self._speed[peak_rows, col]
        peak_at = onset + int(np.argmax(speeds))
        peak = float(speeds.max())
        # Gravity: the free-fall speed of the height dropped in drop_window before the peak.
        heights = self._pos[self._rows(peak_at - self._w_drop, peak_at), col] @ self._up
        drop = max(float(heights.max() - heights[-1]), 0.0)
        fall = float(np.sqrt(2.0 * self._g * drop))
        gravity_ratio = peak / max(fall, c.gravity_speed_floor)
        gravity_kept = gravity_ratio > c.gravity_ratio
        # Carrier: bodies that touched the object and a robot link before onset.
        window = self._pairs.between(onset - self._w_carrier, onset)
        a, b = window.bodies[:, 0], window.bodies[:, 1]
        with_object = (a == body) | (b == body)
        other = np.where(a == body, b, a)
        touches_robot = set(a[self._robot[b]].tolist()) | set(b[self._robot[a]].tolist())
        candidates = set(other[with_object & ~self._robot[other] & ~self._static[other]].tolist())
        carriers: dict[int, float] = {}
        before = self._rows(onset - self._w_carrier, peak_at if c.carrier_through_peak else onset - 1)
        for carrier in sorted(candidates & touches_robot):
            ccol = self._col[carrier]
            carriers[carrier] = float(self._speed[before, ccol].max(initial=0.0)) if ccol >= 0 else 0.0
        if c.robot_contact_carrier:
            # A robot link that touches the object carries it for as long as it touches it: its
            # speed at the contact point counts from carrier_window before onset until the peak
            # (a finger that starts a push at onset is still accelerating then).
            pushed = self._pairs.between(onset - self._w_carrier, peak_at)
            pa, pb = pushed.bodies[:, 0], pushed.bodies[:, 1]
            link = np.where(pa == body, pb, pa)
            touching = ((pa == body) | (pb == body)) & self._robot[link]
            link_speed = np.where(pa == body, pushed.speed[:, 1], pushed.speed[:, 0])
            for robot_link in sorted(set(link[touching].tolist())):
                carriers[robot_link] = float(link_speed[touching & (link == robot_link)].max())
        if self._base[body]:
            # A floating base is carried by its own robot: its actuators have shown they can move
            # it as fast as it ever moved before carrier_window ahead of onset (a launch at a
            # contact counts only well beyond that; at the episode's start, beyond the floor).
            carriers[body] = round(float(self._fastest[max(onset - self._w_carrier - 1 - self._h0, 0), col]),
                                   FASTEST_DECIMALS)
        carrier_speed = max(carriers.values()) if carriers else None
        carrier_ratio = peak / max(carrier_speed, c.carrier_speed_floor) if carriers else None
        carrier_kept = carrier_ratio is None or carrier_ratio >= c.carrier_ratio
        # Speed gain: the fastest the object moved in contact_window before onset.
        arrived = float(self._speed[self._rows(onset - self._w_contact, onset - 1), col].max(initial=0.0))
        gain_ratio = peak / max(arrived, c.gain_speed_floor)
        gain_kept = not c.speed_gain or gain_ratio >= c.gain_ratio
        recent = self._pairs.between(onset - self._w_contact, onset)
        off_stage = self._off_stage(body, self._pos[onset - 1 - self._h0, col])
        return {
            "body": names[body],
            "body_id": body,
            "onset_substep": onset,
            "onset_time": onset * self.dt,
            "speed_before": float(self._speed[onset - 1 - self._h0, col]),
            "peak_speed": peak,
            "peak_substep": peak_at,
            **self._contact_at_onset(body, recent, onset),
            "robot_contact": bool(((recent.bodies[:, 0] == body) & self._robot[recent.bodies[:, 1]]).any()
                                  or ((recent.bodies[:, 1] == body) & self._robot[recent.bodies[:, 0]]).any()),
            "ejection": {"confirmed": True, **confirmation},
            "gravity": {"drop_height": drop, "fall_speed": fall, "ratio": gravity_ratio, "kept": bool(gravity_kept)},
            "carrier": {"carriers": [names[i] for i in carriers], "speed": carrier_speed, "ratio": carrier_ratio,
                        "kept": bool(carrier_kept)},
            "gain": {"speed_before": arrived, "ratio": gain_ratio, "kept": bool(gain_kept), "applied": c.speed_gain},
            "off_stage": off_stage,
            "artifact": bool(gravity_kept and carrier_kept and gain_kept and off_stage is None),
            "decided_substep": min(max(confirmation["substep"], onset + self._w_peak), last),
        }

    def _off_stage(self, body: int, position: np.ndarray) -> dict[str, Any] | None:
        """How far outside the stage box the body was just before onset, where that is more than
        ``offstage_margin`` (and the TaskSpec does not name it); else None."""
        c = self.config
        if not c.off_stage or self.bodies.names[body] in self.task_bodies or self._base[body]:
            return None
        stage = self.stage
        if stage is None:
            return None
        lo, hi = stage
        distance = float(np.linalg.norm(np.maximum(np.maximum(lo - position, position - hi), 0.0)))
        if not distance > c.offstage_margin:
            return None
        return {"distance": distance, "position": [float(x) for x in position]}

    def _contact_at_onset(self, body: int, recent: _Pairs, onset: int) -> dict[str, Any]:
        """The contact that set the object moving: at the latest substep up to onset with a
        contact of the object, the pair with the largest force. With collision pieces, the
        false-contact check of that contact, from the poses the substep began with."""
        mine = np.flatnonzero((recent.bodies[:, 0] == body) | (recent.bodies[:, 1] == body))
        if not len(mine):
            return {"partner": None, "partner_id": None, "contact": None}
        latest = mine[recent.sub[mine] == recent.sub[mine].max()]
        i = int(latest[np.argmax(recent.abs_force[latest])])
        a, b = (int(x) for x in recent.bodies[i])
        partner = b if a == body else a
        contact = {"substep": int(recent.sub[i]), "depth": float(recent.depth[i]),
                   "pieces": [int(p) for p in recent.pieces[i]], "normal": [float(x) for x in recent.normal[i]],
                   "force": float(recent.abs_force[i])}
        if self.pieces is not None:
            row = contact["substep"] - 1 - self._h0
            poses = {int(tracked): np.concatenate([self._pos[row, c], self._quat[row, c]])
                     for c, tracked in enumerate(self.tracked) if tracked in (body, partner)}
            contact["false_contact"] = check_contact(self.pieces, contact, poses)
        return {"partner": self.bodies.names[partner], "partner_id": partner, "contact": contact}

    # ------------------------------------------------------------------ flags
    def _flag(self, pairs: _Pairs | _Points, pose: np.ndarray, vel: np.ndarray, speed: np.ndarray, first: int) -> None:
        c, names = self.config, self.bodies.names
        deep = np.flatnonzero((pairs.depth > c.max_penetration) & self.count_deep
                              & ~(self._pressed[pairs.bodies[:, 0]] & self._pressed[pairs.bodies[:, 1]]))
        if len(deep):
            keys, inverse = np.unique(pairs.bodies[deep], axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            for g, (a, b) in enumerate(keys.tolist()):
                rows = deep[inverse == g]
                flag = self._flags.setdefault(("deep_penetration", a, b), {
                    "kind": "deep_penetration", "bodies": [names[a], names[b]], "body_ids": [a, b],
                    "first_substep": int(pairs.sub[rows[0]]), "max_depth": 0.0, "substeps": 0})
                if self.pieces is not None and isinstance(pairs, _Pairs):
                    self._label(flag, pairs, rows, pose, first)
                flag["max_depth"] = max(flag["max_depth"], float(pairs.depth[rows].max()))
                flag["substeps"] += int(len(np.unique(pairs.sub[rows])))
        finite = np.isfinite(pose).all(axis=2) & np.isfinite(vel).all(axis=2)
        bad = ~finite | (speed > c.max_speed)
        for col in np.flatnonzero(bad.any(axis=0)).tolist():
            body = int(self.tracked[col])
            rows = np.flatnonzero(bad[:, col])
            flag = self._flags.setdefault(("absurd_state", body), {
                "kind": "absurd_state", "body": names[body], "body_id": body,
                "first_substep": first + int(rows[0]), "non_finite": False, "max_speed": 0.0, "substeps": 0})
            flag["non_finite"] |= bool((~finite[rows, col]).any())
            fast = speed[rows, col][np.isfinite(speed[rows, col])]
            flag["max_speed"] = max(flag["max_speed"], float(fast.max(initial=0.0)))
            flag["substeps"] += int(len(rows))

    def _label(self, flag: dict[str, Any], pairs: _Pairs, rows: np.ndarray, pose: np.ndarray, first: int) -> None:
        """The false-contact check of a deep-penetration flag's reports: the first, and each one
        deeper than all before it (at most ``MAX_FLAG_CHECKS``), in substep order, so that the
        label does not depend on how substeps were batched. ``contact`` is the deepest checked."""
        for row in rows.tolist():
            checked = flag.setdefault("false_contact", {"checked": 0, "false": 0})
            depth = float(pairs.depth[row])
            if checked["checked"] >= MAX_FLAG_CHECKS or (checked["checked"] and depth <= flag["contact"]["depth"]):
                continue
            sub = int(pairs.sub[row])
            a, b = (int(x) for x in pairs.bodies[row])
            poses = {}
            for body in (a, b):
                col = int(self._col[body])
                if col < 0:
                    continue
                at = pose[sub - 1 - first, col] if sub - 1 >= first else np.concatenate(
                    [self._pos[sub - 1 - self._h0, col], self._quat[sub - 1 - self._h0, col]])
                poses[body] = at
            contact = {"substep": sub, "depth": depth, "pieces": [int(x) for x in pairs.pieces[row]],
                       "normal": [float(x) for x in pairs.normal[row]]}
            contact["false_contact"] = check_contact(self.pieces, contact, poses)
            checked["checked"] += 1
            checked["false"] += bool(contact["false_contact"] and contact["false_contact"]["false_contact"])
            flag["contact"] = contact

    # ------------------------------------------------------------------ history
    def _trim(self) -> None:
        """Forget substeps no open candidate and no future candidate can look back to."""
        oldest = min([q[0] for q in self._pending if q] + [self.substeps])
        keep_from = oldest - self._lookback
        drop = keep_from - self._h0
        if drop <= max(256, len(self._pos) // 2):  # amortise: trim in large steps
            return
        for name in ("_pos", "_quat", "_vel", "_speed", "_fastest", "_dv", "_touch", "_touch_container"):
            setattr(self, name, getattr(self, name)[drop:])
        self._h0 = keep_from
        self._pairs = self._pairs.since(keep_from)


def _shift(run: np.ndarray, by: int) -> np.ndarray:
    """``run`` delayed by ``by`` entries, zeros first (for run lengths from a cumulative sum)."""
    out = np.zeros_like(run)
    if by < len(run):
        out[by:] = run[:-by]
    return out

"""ScreenedDetection: a detector fed from a substep screen, with no Python call per substep.

A :class:`~simuguard_gym.physics.adapter.SubstepScreen` (MuJoCo's control callback) marks the
substeps where the detector's first stage could open a candidate or a state is absurd, keeps the
states substeps started from, and counts deep penetrations. After each env step this class asks
it (one C call) whether anything needs the detector. Where a substep is marked, the substeps from
the detector's lookback before it on are re-simulated and fed in full, and so is every later
substep while a candidate stays open; the substeps before are passed over (``skip``): no event can
start in them or examine them. The events are those a detector fed every substep gives (the
substeps it reads are the same, bit for bit); deep-penetration flags come from the screen,
refreshed at least every ``refresh_substeps`` and whenever a new pair appears.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simuguard_gym.capture.tap import SubstepTap
from simuguard_gym.detection.detector import ArtifactDetector
from simuguard_gym.physics.adapter import PhysicsAdapter, SubstepScreen
from simuguard_gym.physics.bodies import BodyTable


class ScreenRingShort(RuntimeError):
    """The screen's ring no longer holds substeps an event may examine."""


#: poll() bits (see MujocoScreen.poll_call).
FLAGGED, UNREADABLE, NEW_PAIR, REFRESH = 1, 2, 4, 8


class ScreenedDetection:
    """Feeds ``detector`` from ``screen`` (already started for the episode) after each env step.

    >>> import gymnasium as gym
    >>> from simuguard_gym import ArtifactMonitor
    >>> env = ArtifactMonitor(gym.make("HalfCheetah-v5"))
    >>> for seed in (0, 1):   # the first episode runs the hooks; later ones the screen, where built
    ...     _ = env.reset(seed=seed)
    ...     for _ in range(20):
    ...         _ = env.step(env.action_space.sample())
    >>> env.screened is None or env.screened.detector is env.detector
    True
    >>> env.close()
    """

    def __init__(self, screen: SubstepScreen, adapter: PhysicsAdapter, detector: ArtifactDetector,
                 table: BodyTable, *, refresh_substeps: int, initial_state: np.ndarray | None = None) -> None:
        self.screen, self.adapter, self.detector = screen, adapter, detector
        # The state the episode started from (read_state's vector), where the detector was started
        # without its bodies' poses and velocities: decoded only if a substep is fed from the first
        # on (most episodes feed none), and told to the detector then (ArtifactDetector.start_state).
        self._initial_state = initial_state
        self._names = table.names
        self._refresh = refresh_substeps
        #: ``poll(address)``: after an env step, non-zero where :meth:`update` has work (one C call).
        self.poll, self.address = screen.poll_call()
        #: ``quiet_step(address, result, entry)``: an env step's result with the monitor's entry as
        #: it stands, where the screen tells nothing new; or poll()'s bits, or None (see
        #: MujocoScreen.quiet_step_call).
        self.quiet_step = screen.quiet_step_call()
        #: Whether a candidate is open: every substep is fed until it is decided.
        self.open = False
        self.replayed = 0  # substeps re-simulated this episode
        screen.refresh_after(refresh_substeps)

    def needs_work(self) -> bool:
        """After an env step: whether :meth:`update` has something to do."""
        return self.open or bool(self.poll(self.address))

    def update(self, make_tap: Callable[[Any, Callable[..., None]], Any]) -> None:
        """Feed the detector what the screen marked (and what open candidates need), and refresh
        the deep-penetration flags."""
        screen, detector = self.screen, self.detector
        # Contacts before the scene's first one was located went uncounted by the screen: every
        # substep fed now had none it could read, so the detector counts their deep pairs itself.
        recount = screen.unreadable and not screen.contacts_located
        if screen.unreadable:
            screen.locate_contacts()
        seen, flagged = screen.seen, screen.flagged
        if detector.open_candidates:
            lo = detector.substeps
        elif flagged >= detector.substeps:
            lo = max(detector.substeps, flagged - detector.lookback_substeps)
        else:
            lo = seen
        if lo < screen.oldest:
            # A step longer than the ring (the first of its length) left states behind that an
            # event may examine: said, and this episode's detection ends (the next ring holds more).
            raise ScreenRingShort(f"an env step of more substeps than the screen kept ({seen - screen.oldest}): "
                                  f"substeps {lo}-{screen.oldest - 1} are gone; detection ends for this episode")
        if recount:
            detector.count_deep = True
        try:
            self._feed(lo, seen, make_tap)
        finally:
            if recount:
                detector.count_deep = False
                screen.add_deep_flags(detector.take_deep_flags())
        screen.clear_flag()
        self.refresh_flags()
        self.open = detector.open_candidates

    def refresh_flags(self) -> None:
        self.detector.set_deep_flags(self.screen.deep_flags(self._names))
        self.screen.refresh_after(self._refresh)

    def finish(self, make_tap: Callable[[Any, Callable[..., None]], Any]) -> None:
        """The episode ends: screen its last end state, feed what that needs, refresh the flags."""
        screen = self.screen
        screen.settle()
        screen.end_state(screen.seen - 1)
        self.update(make_tap)

    def _feed(self, lo: int, hi: int, make_tap: Callable[[Any, Callable[..., None]], Any]) -> None:
        detector = self.detector
        if hi <= lo:
            return
        if lo == 0 and self._initial_state is not None:  # the bodies' start, decoded now it is needed
            pose, vel = self.adapter.body_states(self._initial_state[None], detector.tracked)
            detector.start_state(pose[0], vel[0])
            self._initial_state = None
        elif lo > detector.substeps:
            start = self.screen.states(lo, lo + 1)  # the state substep lo - 1 ended in
            pose, vel = self.adapter.body_states(start, detector.tracked)
            detector.skip(lo - detector.substeps, pose[0], vel[0], self.screen.fastest(lo - 1))
        self.screen.replay(lo, hi, make_tap, detector.feed)
        self.replayed += hi - lo


def replay_tap(adapter: Any, sink: Callable[..., None]) -> SubstepTap:
    """The tap that decodes re-simulated substeps (full batches: every one is examined)."""
    return SubstepTap(adapter, sink)


def tracked_kinds(table: BodyTable, tracked: np.ndarray) -> np.ndarray:
    """Per tracked body: 0 tracked only, 1 a watched object, 2 a watched floating base."""
    kind = {"base": 2, "object": 1}
    return np.array([kind.get(table.roles[i], 0) for i in np.asarray(tracked, np.int64).tolist()], np.uint8)

"""The robot links' speeds around an event, recovered by replaying its recording.

Recordings keep the bodies the detector watches, not the robot's links (that would double what
every substep costs to record); the report's artifact plots want the fastest link next to the
object (SimuGuard Figure 1 (c)). A bit-exact replay gives them back exactly.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from simuguard_gym.physics.adapter import HasLiveSpeeds
from simuguard_gym.recording.reader import Recording
from simuguard_gym.recording.trust import UntrustedRecordingError
from simuguard_gym.replay.isolation import isolated
from simuguard_gym.replay.rebuild import recording_of
from simuguard_gym.replay.replay import replay

logger = logging.getLogger(__name__)


class _LinkSpeedProbe:
    """Reads the fastest robot link's centre-of-mass speed after each substep in [lo, hi)."""

    needs_before = False

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.substep = 0
        self.adapter: Any = None
        self.speeds: dict[int, float] = {}
        self._state: np.ndarray | None = None
        self._robot: np.ndarray | None = None

    def attach(self, adapter: Any) -> None:
        self.adapter = adapter

    def before_substep(self, phase: str) -> None:
        pass

    def after_substep(self) -> None:
        k = self.substep
        self.substep += 1
        if not self.lo <= k < self.hi:
            return
        a = self.adapter
        if self._robot is None:
            self._robot = np.flatnonzero(a.body_table().robot_mask)
            self._state = np.empty(sum(c.size for c in a.state_layout()))
        if not len(self._robot):
            return
        if isinstance(a, HasLiveSpeeds):      # SAPIEN: kinematic links are not in its state vector
            self.speeds[k] = float(a.live_speeds(self._robot).max())
            return
        a.read_state(self._state)
        _, vel = a.body_states(self._state[None], self._robot)
        self.speeds[k] = float(np.linalg.norm(vel[0, :, :3], axis=1).max())

    def hook_failed(self, where: str, error: BaseException) -> None:
        logger.debug("link speed probe failed in %s: %s", where, error)


def robot_link_speeds(rec: Recording, lo: int, hi: int, *, trust: bool = False
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """(substeps, speeds in m/s) of the fastest robot link for substeps lo..hi-1, or None when the
    episode can't be replayed here (env not installed, code it names not trusted, not bit-exact,
    no robot). The env is rebuilt as :func:`~simuguard_gym.replay` rebuilds it (``trust``), in a
    child process where the file is not signed by this user."""
    rec = recording_of(rec, trust)

    def work() -> tuple[np.ndarray, np.ndarray] | None:
        probe = _LinkSpeedProbe(lo, hi)
        result = replay(rec, listeners=[probe], verify="states")
        if not result.exact or not probe.speeds:
            return None
        keys = np.array(sorted(probe.speeds))
        return keys, np.array([probe.speeds[k] for k in keys])

    try:
        return isolated(rec, work, "replaying")
    except UntrustedRecordingError as error:  # said: the user can allow it
        logger.warning("no robot link speeds for the plot: %s", error)
        return None
    except Exception as error:  # noqa: BLE001 - the plot falls back to contact speeds
        logger.info("no robot link speeds for the plot: %s", error)
        return None

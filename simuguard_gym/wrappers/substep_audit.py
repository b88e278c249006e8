"""SubstepAudit: every substep the engine ran reached the listener, checked after every env step."""

from __future__ import annotations

from typing import Callable

from simuguard_gym.physics.adapter import PhysicsAdapter


class SubstepAudit:
    """Compares the substeps the engine counted itself this episode
    (:meth:`PhysicsAdapter.engine_substeps`) with those a listener (the recorder, the monitor's
    tap) received, as running totals from the episode's start: substeps run between env steps
    count too. More on the engine's side means substeps ran outside simuguard's hooks (or a hook
    failed), so what the listener holds is no longer the episode.

    >>> import gymnasium as gym
    >>> from simuguard_gym.engines import adapter_for
    >>> from simuguard_gym.wrappers.substep_audit import SubstepAudit
    >>> env = gym.make("Pusher-v5"); _ = env.reset(seed=0)
    >>> audit = SubstepAudit(adapter_for(env), seen=lambda: 0); audit.start_episode()
    >>> _ = env.step(env.action_space.sample())
    >>> audit.check(), audit.env_substeps     # no listener saw Pusher's 5 substeps
    ('5 of the 5 substeps the env ran this episode did not reach the hooks', 5)
    """

    def __init__(self, adapter: PhysicsAdapter, seen: Callable[[], int]) -> None:
        self.adapter = adapter
        self._seen = seen
        #: Substeps the engine ran this episode, as of the last check; None once the count is
        #: unknown (the engine's counter was reset, or reading it failed).
        self.env_substeps: int | None = None
        self._engine_start = self._seen_start = self._engine_last = 0
        self._counting = False

    def start_episode(self) -> None:
        """Take the counts at the episode's start (after the adapter's refresh and the listener's
        own start)."""
        self._counting = False
        self._engine_start = self._engine_last = self.adapter.engine_substeps()
        self._seen_start = self._seen()
        self.env_substeps, self._counting = 0, True

    def check(self, seen: int | None = None) -> str | None:
        """A sentence saying how many substeps missed the hooks so far, or None; the count stops
        (``env_substeps`` None) where reading it fails or the engine's counter was reset.
        ``seen``: the listener's count, where the caller has just read it."""
        if not self._counting:
            return None
        try:
            engine, seen = self.adapter.engine_substeps(), self._seen() if seen is None else seen
        except Exception:
            self.stop()
            raise
        ran, got = engine - self._engine_start, seen - self._seen_start
        # A counter that went back, or that counts fewer substeps than reached the hooks, was
        # reset (an env resetting its data; MuJoCo resets an unstable simulation inside mj_step):
        # from here on how many substeps ran is unknown, which is no evidence of a loss.
        if engine < self._engine_last or ran < got:
            self.stop()
            return None
        self._engine_last, self.env_substeps = engine, ran
        if ran == got:
            return None
        return f"{ran - got} of the {ran} substeps the env ran this episode did not reach the hooks"

    def stop(self) -> None:
        """Count no more this episode."""
        self._counting, self.env_substeps = False, None

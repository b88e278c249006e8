"""SubstepAudit: every substep the engine ran reached the listener, checked env step by env step."""

from __future__ import annotations

from simuguard_gym.physics.adapter import PhysicsAdapter


class SubstepAudit:
    """Compares, for each env step, the substeps the engine counted itself
    (:meth:`PhysicsAdapter.engine_substeps`) with those a listener (the recorder, the monitor's tap)
    received. A difference means substeps ran outside simuguard's hooks (or a hook failed), so
    what the listener holds is no longer the episode.

    >>> import gymnasium as gym
    >>> from simuguard_gym.engines import adapter_for
    >>> from simuguard_gym.wrappers.substep_audit import SubstepAudit
    >>> env = gym.make("Pusher-v5"); _ = env.reset(seed=0)
    >>> audit = SubstepAudit(adapter_for(env)); audit.start_episode()
    >>> audit.before_step(0); _ = env.step(env.action_space.sample())
    >>> audit.after_step(0), audit.env_substeps     # no listener saw Pusher's 5 substeps
    ('the env ran 5 substeps in this step and 0 reached the hooks', 5)
    """

    def __init__(self, adapter: PhysicsAdapter) -> None:
        self.adapter = adapter
        #: Substeps the engine ran this episode (from the first step on); None where it keeps no count.
        self.env_substeps: int | None = None
        self._engine = self._seen = 0
        self._counting = False

    def start_episode(self) -> None:
        self.env_substeps, self._counting = 0, True

    def before_step(self, seen: int) -> None:
        """Call before ``env.step`` with the substeps the listener has received so far."""
        self._seen = seen
        if self._counting:
            self._engine = self.adapter.engine_substeps()

    def after_step(self, seen: int) -> str | None:
        """Call after ``env.step``; a sentence saying what differs, or None."""
        if not self._counting:
            return None
        ran = self.adapter.engine_substeps() - self._engine
        if ran < 0:
            # The engine's count was reset during the step (an env resetting its data, MuJoCo's
            # own reset of an unstable simulation): how many substeps ran is unknown from here on.
            self.stop()
            return None
        self.env_substeps = (self.env_substeps or 0) + ran
        got = seen - self._seen
        if got == ran:
            return None
        return f"the env ran {ran} substeps in this step and {got} reached the hooks"

    def stop(self) -> None:
        """Count no more this episode (the count failed)."""
        self._counting, self.env_substeps = False, None

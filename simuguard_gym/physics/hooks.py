"""Substep hooks (numpy only): what listens around every physics substep, how an adapter calls
its listeners, and the record of an error caught inside one (never raised into the env). The
loop around an engine call of several substeps runs in C where simuguard's extension is built
(``run_substeps`` in capture/_substep_copy.c), in Python otherwise."""

from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

logger = logging.getLogger(__name__)


def _native_loop() -> Callable[..., None] | None:
    # The substep loop in C (capture/_substep_copy.c, built by setup.py where a compiler exists):
    # the same calls in the same order, without a Python frame per substep.
    if os.environ.get("SIMUGUARD_NATIVE", "1") == "0":
        return None
    try:
        from _simuguard_substep_copy import run_substeps  # type: ignore[import-not-found]
    except ImportError:
        return None
    return run_substeps  # type: ignore[no-any-return]


_RUN_SUBSTEPS = _native_loop()


@runtime_checkable
class SubstepListener(Protocol):
    """Something that wants to run around every physics substep.

    Optional attributes: ``needs_before = False`` (never called before substeps) and
    ``guards_itself = True`` (its two hook methods catch their own exceptions and hand them to
    :func:`report_failure`, so they may be called without a guard around them).
    """

    def before_substep(self, phase: str) -> None: ...

    def after_substep(self) -> None: ...

    def hook_failed(self, where: str, error: BaseException) -> None: ...


class SubstepHooks:
    """Calls listeners around substeps; an exception in a listener never reaches the env.

    The failing listener is told through ``hook_failed`` (it records the error); the physics
    substep always runs exactly once whatever the listeners do. ``on_listening(True)`` is called
    when the first listener comes and ``on_listening(False)`` when the last one goes: an adapter
    hooks into its engine exactly while someone listens.

    >>> from simuguard_gym.physics.hooks import SubstepHooks
    >>> class Count:
    ...     n = 0
    ...     def before_substep(self, phase): pass
    ...     def after_substep(self): self.n += 1
    ...     def hook_failed(self, where, error): pass
    >>> hooks, counter = SubstepHooks(on_listening=print), Count()
    >>> hooks.add(counter)
    True
    >>> hooks.around("start", lambda: None); counter.n
    1
    >>> hooks.remove(counter)
    False
    """

    def __init__(self, on_listening: Callable[[bool], None] | None = None) -> None:
        self.listeners: list[SubstepListener] = []
        self._on_listening = on_listening
        #: Wrappers with something to write into every recording of this env (the detector's
        #: config and events): objects with ``recording_header()`` and ``recording_footer()``
        #: returning plain dicts. Kept here so that wrappers find each other in either order.
        self.annotators: list[Any] = []
        self._sync()

    def add(self, listener: SubstepListener) -> None:
        if listener not in self.listeners:
            self.listeners.append(listener)
            self._sync()
            if len(self.listeners) == 1 and self._on_listening is not None:
                self._on_listening(True)

    def remove(self, listener: SubstepListener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
            self._sync()
            if not self.listeners and self._on_listening is not None:
                self._on_listening(False)

    def around(self, phase: str, advance: Callable[..., Any], *args: Any, n: int = 1) -> None:
        """Run one substep, ``advance(*args)``, with the listeners before it (``phase``) and after
        it: the one way every adapter runs a hooked substep. ``n`` > 1: n substeps of one engine
        call, the later ones in phase "continue" (one Python frame for them all)."""
        # Listeners catch their own errors; the try is a second net that costs nothing until used
        # (a lone self-guarding listener is called directly): the substep runs once, whatever they do.
        if _RUN_SUBSTEPS is not None:
            _RUN_SUBSTEPS(self._before_call, advance, args, n, self.after, phase, self.escaped)
            return
        for _ in range(n):
            try:
                self.before(phase)
            except Exception as error:  # noqa: BLE001 - never raise into the env
                self.escaped(f"before_substep({phase})", error)
            advance(*args)
            try:
                self.after()
            except Exception as error:  # noqa: BLE001
                self.escaped("after_substep", error)
            phase = "continue"

    def _sync(self) -> None:
        # On a hot path of a few microseconds per substep even an empty call shows: listeners that
        # declare ``needs_before = False`` are not called before substeps, and a lone listener that
        # guards itself is called directly (``before``/``after`` are its own methods, no loop).
        self._before = [x for x in self.listeners if getattr(x, "needs_before", True)]
        self.before = (self._before[0].before_substep if len(self._before) == 1 and _guards_itself(self._before[0])
                       else self._guarded_before if self._before else _nothing)
        self._before_call: Callable[[str], None] | None = self.before if self._before else None  # None: no call
        self.after = (self.listeners[0].after_substep if len(self.listeners) == 1 and _guards_itself(self.listeners[0])
                      else self._guarded_after)

    def escaped(self, where: str, error: BaseException) -> None:
        """An error that got out of a listener called directly: every listener is told (only a
        lone self-guarding listener is called so); never raises."""
        for listener in list(self.listeners):
            report_failure(listener, where, error)

    #: Call the listeners before a substep (``phase``: "start", "split" or "continue"); never raises.
    before: Callable[[str], None]
    #: Call the listeners after a substep; never raises.
    after: Callable[[], None]

    def _guarded_before(self, phase: str) -> None:
        for listener in self._before:
            try:
                listener.before_substep(phase)
            except Exception as error:  # noqa: BLE001 - never raise into the evaluation
                report_failure(listener, f"before_substep({phase})", error)

    def _guarded_after(self) -> None:
        for listener in self.listeners:
            try:
                listener.after_substep()
            except Exception as error:  # noqa: BLE001
                report_failure(listener, "after_substep", error)


def report_failure(listener: SubstepListener, where: str, error: BaseException) -> None:
    """Tell ``listener`` that its hook raised ``error``; never raises (logs if telling fails)."""
    try:
        listener.hook_failed(where, error)
    except Exception:  # noqa: BLE001
        logger.error("simuguard hook failed and could not record it:\n%s", traceback.format_exc())


def _guards_itself(listener: SubstepListener) -> bool:
    return getattr(listener, "guards_itself", False) is True


def _nothing(phase: str) -> None:
    pass


@dataclass
class HookError:
    """An exception caught inside a simuguard hook, as recorded (never raised)."""

    substep: int
    where: str
    type: str
    message: str
    traceback: str = field(repr=False, default="")

    @classmethod
    def capture(cls, substep: int, where: str, error: BaseException) -> "HookError":
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(substep, where, type(error).__name__, str(error), tb)

    def to_dict(self) -> dict[str, Any]:
        return {"substep": self.substep, "where": self.where, "type": self.type, "message": self.message,
                "traceback": self.traceback}

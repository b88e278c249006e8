"""Replays of files this user did not sign run in a child process: a crash inside an engine
(SIGSEGV on a value no check foresaw) becomes a one-line error and the user's process lives.

The child is forked, so it has everything the parent has (the recording already read, an
``env_fn`` that is a lambda); it sends its result back pickled, or the exception it raised. A
child that dies by a signal is an :class:`EngineCrashError` naming the signal and the file.

>>> from simuguard_gym.replay.isolation import in_child
>>> in_child(lambda: sum(range(10)), "adding")
45
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Callable, TypeVar

from simuguard_gym.recording.format import RecordingError
from simuguard_gym.recording.reader import Recording
from simuguard_gym.recording.trust import signed_by_user

T = TypeVar("T")

# True in a child process: its own replays (a trace's, a video's) run in it, not in a grandchild.
_inside = False


class EngineCrashError(RuntimeError):
    """The child process running a replay died by a signal (an engine crash)."""


def isolated(rec: Recording, work: Callable[[], T], what: str) -> T:
    """``work()``: in a child process where ``rec`` is not signed by this user, else here."""
    if signed_by_user(rec.header):
        return work()
    return in_child(work, f"{what} {rec.path}")


def in_child(work: Callable[[], T], what: str) -> T:
    """``work()`` in a forked child process (here, inside one already or without ``fork``): its
    result, or the exception it raised; an :class:`EngineCrashError` if the child dies."""
    if _inside or not hasattr(os, "fork"):
        return work()
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side; it ends in os._exit
        os.close(read_end)
        _run_child(work, write_end)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C, SIGTERM: the child goes with the parent, never left running
        _kill(pid)
        raise
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise EngineCrashError(f"the engine crashed ({name}) {what}; the recording is not signed by you and "
                               "may hold values no engine should take")
    if not data:
        raise EngineCrashError(f"the child process {what} ended (exit {os.WEXITSTATUS(status)}) without a result")
    ok, value = pickle.loads(data)
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _run_child(work: Callable[[], T], write_end: int) -> None:  # pragma: no cover - runs in the child
    global _inside
    _inside = True
    code = 0
    try:
        try:
            payload: tuple[bool, object] = (True, work())
        except BaseException as error:  # noqa: BLE001 - whatever it is goes back to the parent
            payload = (False, error)
        data = _pickled(payload)
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
    except BaseException:  # noqa: BLE001 - the parent reads an empty pipe and says so
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _pickled(payload: tuple[bool, object]) -> bytes:
    """The payload pickled such that the parent can unpickle it: an exception whose class takes
    other arguments than its message goes back as the nearest kind the command line tells apart,
    with its text."""
    try:
        data = pickle.dumps(payload)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001 - unpicklable: its kind and text survive
        ok, value = payload
        if ok:
            return pickle.dumps((False, RuntimeError(f"an unpicklable result: {type(value).__name__}")))
        for kind in (RecordingError, ValueError, ImportError, OSError):
            if isinstance(value, kind):
                return pickle.dumps((False, kind(str(value))))
        return pickle.dumps((False, RuntimeError(f"{type(value).__name__}: {value}")))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass

"""Conformance: do simuguard's wrappers attach to an env, lose nothing and change nothing?

:func:`check_env` runs an env twice with the same seeds and actions, once plain and once wrapped
(``ArtifactMonitor(RecordPhysics(env))`` by default), and checks what a user of the wrappers
relies on:

* every ``info["simuguard"]["errors"]`` is empty;
* observations, rewards, ``terminated``/``truncated`` and infos (outside the ``simuguard`` key)
  are bit-identical with the wrappers on and off;
* every episode has its recording (matched by the seed its header holds), which holds every
  substep the env ran and replays bit for bit in a fresh process;
* the monitor's contact artifacts, per episode (a clean run should have none).

The project's conformance matrix (``tests/conformance``) runs it on third-party benchmarks;
run it on your own env before trusting an audit of it.

>>> import gymnasium as gym, tempfile
>>> from simuguard_gym.conformance import check_env
>>> report = check_env(lambda: gym.make("Pusher-v5"), tempfile.mkdtemp(), episodes=2, steps=10)
>>> report.failures(), [e.recorded_substeps for e in report.episodes]
([], [50, 50])
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from simuguard_gym.recording.reader import iter_records, load_recording
from simuguard_gym.wrappers.artifact_monitor import ArtifactMonitor
from simuguard_gym.wrappers.info_key import INFO_KEY, success_from_info
from simuguard_gym.wrappers.record_physics import RecordPhysics

Policy = Callable[[Any], Any]


@dataclass
class EpisodeCheck:
    """One episode of the wrapped run: its recording and what became of it."""

    seed: int
    steps: int
    recording: str | None
    #: Why the recording could not be read (then it is not replayed either); None: it was read.
    read_error: str | None = None
    recorded_substeps: int = 0
    env_substeps: int | None = None
    lost: dict[str, Any] | None = None
    replay_exact: bool = False
    replay: str = "not replayed"
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    #: The env's success signal at the episode's end, and at any step of it (experts may succeed
    #: and then knock the object again).
    success: bool | None = None
    succeeded: bool | None = None


@dataclass
class ConformanceReport:
    """What :func:`check_env` found; :meth:`failures` lists every check that failed."""

    name: str
    episodes: list[EpisodeCheck]
    errors: list[dict[str, Any]]
    differences: list[str]
    plain_seconds: float
    wrapped_seconds: float
    plain_steps: int
    #: Recordings the wrapped run wrote that belong to no episode: unreadable headers, seeds no
    #: episode was reset with, a second recording of one seed.
    stray_recordings: list[str] = field(default_factory=list)

    @property
    def step_time_ratio(self) -> float:
        """The wrapped run's time over the plain run's (both in this process, one after the other)."""
        return self.wrapped_seconds / self.plain_seconds if self.plain_seconds > 0 else math.nan

    def failures(self, *, artifacts: bool = True) -> list[str]:
        """Every failed check, in words (``artifacts=False``: contact artifacts are not failures)."""
        out = [f"info['simuguard']['errors'] at {e.get('at', '?')}: {e.get('where')}: {e.get('type')}: "
               f"{e.get('message')}" for e in self.errors]
        out += self.differences
        out += self.stray_recordings
        for e in self.episodes:
            where = f"episode seed {e.seed}"
            if e.recording is None:
                out.append(f"{where}: no recording")
                continue
            if e.read_error is not None:
                out.append(f"{where}: its recording cannot be read: {e.read_error}")
                continue
            if e.lost is not None:
                out.append(f"{where}: the recording lost substeps: {e.lost}")
            if e.env_substeps is not None and e.env_substeps != e.recorded_substeps:
                out.append(f"{where}: the env ran {e.env_substeps} substeps, the recording holds {e.recorded_substeps}")
            if not e.replay_exact:
                out.append(f"{where}: replay in a fresh process: {e.replay}")
            if artifacts and e.artifacts:
                out.append(f"{where}: contact artifact(s): " + "; ".join(
                    f"{a['body']} at substep {a['onset_substep']} ({a['peak_speed']:.2f} m/s)" for a in e.artifacts))
        return out


def check_env(make_env: Callable[[], gym.Env], directory: str | os.PathLike[str], *, episodes: int = 3,
              steps: int = 50, seed: int = 0, policy: Callable[[gym.Env], Policy] | None = None,
              wrap: Callable[[gym.Env, Path], gym.Env] | None = None, env_fn: str | None = None,
              name: str | None = None, fresh_process: bool = True) -> ConformanceReport:
    """Run ``make_env()`` plain and wrapped for ``episodes`` episodes (reset with seeds ``seed``,
    ``seed + 1``, ... on one env instance, as evaluations run) of at most ``steps`` steps each.

    Actions come from ``policy(env)(observation)`` (a scripted expert, built once per env) or else
    from the plain env's action space, seeded with ``seed``; the wrapped run gets the same actions.
    ``wrap(env, directory)`` builds the wrapped env (default: ``ArtifactMonitor(RecordPhysics(env,
    directory))``; it must have a RecordPhysics inside). Recordings are replayed in a fresh Python
    process (``simuguard replay``); ``env_fn`` (``MODULE:CALLABLE``) rebuilds envs that have no
    registered id. ``fresh_process=False`` replays in this process.
    """
    directory = Path(directory)
    wrap = wrap or (lambda env, out: ArtifactMonitor(RecordPhysics(env, out)))
    plain = make_env()
    try:
        plain_run, actions, plain_seconds = _run(plain, episodes, steps, seed, policy, None)
    finally:
        plain.close()
    wrapped = wrap(make_env(), directory)
    try:
        wrapped_run, _, wrapped_seconds = _run(wrapped, episodes, steps, seed, None, actions)
    finally:
        wrapped.close()
    recorder = _record_physics(wrapped)
    report = ConformanceReport(name or _name(wrapped), [], [], [], plain_seconds, wrapped_seconds,
                               sum(len(a) for a in actions))
    for episode, (off, on) in enumerate(zip(plain_run, wrapped_run)):
        for step, (a, b) in enumerate(zip(off, on)):
            where = f"episode {episode}, {'reset' if step == 0 else f'step {step}'}"
            info = b[-1] if isinstance(b[-1], dict) else {}
            report.errors += [{**e, "at": where} for e in (info.get(INFO_KEY) or {}).get("errors", [])]
            report.differences += [f"{where}: {d}" for d in _differences(a, b)]
        if len(off) != len(on):
            report.differences.append(f"episode {episode}: {len(off) - 1} steps plain, {len(on) - 1} wrapped")
    seeds = [seed + episode for episode in range(episodes)]
    matched, report.stray_recordings = match_recordings([str(p) for p in recorder.paths], seeds)
    for episode in range(episodes):
        check = EpisodeCheck(seeds[episode], len(actions[episode]), matched[episode])
        if check.recording is not None:
            try:
                rec = load_recording(check.recording, allow_partial=True)
            except Exception as error:  # noqa: BLE001 - one unreadable recording is that episode's failure
                check.read_error, check.replay = _one_line(error), "not replayed: the recording cannot be read"
            else:
                check.recorded_substeps, check.lost = rec.substeps, rec.lost
                footer = rec.footer or {}
                check.env_substeps, check.success = footer.get("env_substeps"), footer.get("success")
                events = (footer.get("detector") or {}).get("events") or []
                check.artifacts = [e for e in events if e.get("artifact")]
        outcomes = [success_from_info(out[-1]) for out in wrapped_run[episode][1:]] if episode < len(wrapped_run) else []
        known = [o for o in outcomes if o is not None]
        check.succeeded = any(known) if known else None
        report.episodes.append(check)
    readable = [e for e in report.episodes if e.recording is not None and e.read_error is None]
    for check, result in zip(readable, _replays([str(e.recording) for e in readable], env_fn, fresh_process),
                             strict=True):
        check.replay_exact, check.replay = bool(result.get("exact")), str(result.get("message"))
    return report


def match_recordings(paths: list[str], seeds: list[int]) -> tuple[list[str | None], list[str]]:
    """Each episode's recording among ``paths``, by the seed its header holds (episode ``i`` was
    reset with ``seeds[i]``; None where no recording holds its seed), and what is wrong with the
    recordings that belong to no episode (a header that cannot be read, a seed no episode was
    reset with, a second recording of one seed). Order plays no part: a recording that is
    missing (its episode's file could not be written, say) leaves the others on their episodes.
    """
    index = {s: i for i, s in enumerate(seeds)}
    matched: list[str | None] = [None] * len(seeds)
    stray = []
    for path in paths:
        try:
            found = _header_seed(path)
        except Exception as error:  # noqa: BLE001 - reported, and the other recordings are still matched
            stray.append(f"recording {path}: its header cannot be read: {_one_line(error)}")
            continue
        episode = index.get(found) if isinstance(found, int) and not isinstance(found, bool) else None
        if episode is None:
            stray.append(f"recording {path}: holds seed {found!r}, which no episode was reset with")
        elif matched[episode] is not None:
            stray.append(f"recording {path}: a second recording of seed {found} (the first is {matched[episode]})")
        else:
            matched[episode] = path
    return matched, stray


def _header_seed(path: str) -> Any:
    """The seed in a recording's header (read alone: the rest of the file may be damaged)."""
    with contextlib.closing(iter_records(path)) as records:
        for _, _, header in records:  # the first record is the header (iter_records checks it)
            found = header.get("seed")
            if isinstance(found, (list, tuple)) and len(found) == 1:
                found = found[0]  # reset(seed=[s]) of a single env
            return found
    raise ValueError(f"{path}: empty file, not a simuguard recording")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _run(env: gym.Env, episodes: int, steps: int, seed: int, policy: Callable[[gym.Env], Policy] | None,
         actions: list[list[Any]] | None) -> tuple[list[list[tuple[Any, ...]]], list[list[Any]], float]:
    """Every reset's and step's outputs per episode, the actions taken, and the seconds in step()."""
    act = policy(env) if policy is not None else None
    env.action_space.seed(seed)  # in both runs: some envs draw from the action space's generator (Meta-World)
    runs, taken, seconds = [], [], 0.0
    for episode in range(episodes):
        out, done = [_snapshot(env.reset(seed=seed + episode))], []
        for k in range(steps if actions is None else len(actions[episode])):
            if actions is not None:
                action = actions[episode][k]
            else:
                # A copy: some scripted experts edit the observation they are given (Meta-World's door-open).
                action = act(_snapshot(out[-1][0])) if act is not None else env.action_space.sample()
            started = time.perf_counter()
            result = env.step(action)
            seconds += time.perf_counter() - started
            out.append(_snapshot(result))
            done.append(action)
            if result[2] or result[3]:
                break
        runs.append(out)
        taken.append(done)
    return runs, taken, seconds


def _snapshot(value: Any) -> Any:
    """A copy of an env's outputs as they are now: some envs return buffers they later overwrite."""
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_snapshot(v) for v in value) if not hasattr(value, "_fields") else value
    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "clone") and hasattr(value, "cpu"):  # a torch tensor (ManiSkill)
        return value.clone()
    return value


def _record_physics(env: gym.Env) -> RecordPhysics:
    while True:
        if isinstance(env, RecordPhysics):
            return env
        if not hasattr(env, "env"):
            raise TypeError("wrap(env, directory) must return an env with a RecordPhysics inside")
        env = env.env


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(env.unwrapped).__name__


def _replays(paths: list[str], env_fn: str | None, fresh_process: bool) -> list[dict[str, Any]]:
    """The replay of each of ``paths``, in order: ``exact`` and ``message``. A file that cannot be
    replayed gets its own failure; the others are replayed all the same."""
    if not paths:
        return []
    if not fresh_process:
        from simuguard_gym.import_spec import load_callable
        from simuguard_gym.replay.replay import replay

        factory = load_callable(env_fn, "env factory") if env_fn else None
        results = []
        for path in paths:
            try:
                results.append(_replay_fields(replay(path, env_fn=factory)))
            except Exception as error:  # noqa: BLE001 - this episode's failure, not the others'
                results.append({"exact": False, "message": f"not replayed: {_one_line(error)}"})
        return results
    command = [sys.executable, "-m", "simuguard_gym.cli", "replay", "--json", *paths]
    if env_fn:
        command += ["--env-fn", env_fn]
    done = subprocess.run(command, capture_output=True, text=True)
    by_path: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():  # one line per file, named by its path
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "path" in found:
            by_path[str(Path(found["path"]))] = found
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    lost = {"exact": False, "message": f"no result: the replay process exited {done.returncode}: {tail}"}
    return [by_path.get(str(Path(p)), lost) for p in paths]


def _replay_fields(result: Any) -> dict[str, Any]:
    return {"exact": result.exact, "message": result.message}


def _differences(a: tuple[Any, ...], b: tuple[Any, ...]) -> list[str]:
    """Where one reset's or step's outputs differ, plain (``a``) against wrapped (``b``)."""
    names = ("observation", "reward", "terminated", "truncated", "info") if len(a) == 5 else ("observation", "info")
    out = []
    for name, x, y in zip(names, a, b):
        if name == "info":
            x = {k: v for k, v in x.items() if k != INFO_KEY}
            y = {k: v for k, v in y.items() if k != INFO_KEY}
        where = _first_difference(x, y, name)
        if where is not None:
            out.append(f"{where} differs with the wrappers on")
    return out


def _first_difference(x: Any, y: Any, path: str) -> str | None:
    """The path of the first value that differs bit for bit (NaN equals NaN), or None."""
    if isinstance(x, dict) or isinstance(y, dict):
        if not (isinstance(x, dict) and isinstance(y, dict)) or x.keys() != y.keys():
            return f"{path} (keys)"
        for key in x:
            found = _first_difference(x[key], y[key], f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        if len(x) != len(y):
            return f"{path} (length)"
        for i, (u, v) in enumerate(zip(x, y)):
            found = _first_difference(u, v, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    u, v = _array(x), _array(y)
    if u is None or v is None:
        return None if x == y else path
    if u.dtype != v.dtype or u.shape != v.shape:
        return f"{path} (dtype or shape)"
    return None if u.tobytes() == v.tobytes() else path  # bit for bit: NaN equals NaN, -0.0 is not 0.0


def _array(value: Any) -> np.ndarray | None:
    """Numbers, arrays and tensors as numpy arrays (None for anything else)."""
    if hasattr(value, "cpu") and hasattr(value, "numpy"):  # a torch tensor (ManiSkill)
        value = value.cpu().numpy()
    if isinstance(value, (bool, int, float, np.generic, np.ndarray)):
        return np.asarray(value)
    return None

"""`simuguard audit`: evaluate a policy on an env with recording, monitoring and reruns on.

One recording per episode, named by seed (``seed_000116.msgpack``), a run manifest (versions,
command, config, seeds) and, at the end, the score table and its report. A run resumes: rerun the
same command and the finished episodes are kept, a half-written one is redone. A directory that
holds another run, or recordings not signed by this user, is refused unless ``force``; one that
another audit is running on is refused, naming its pid (:func:`lock_directory`). ``workers`` > 1
runs episodes in that many local processes, ``ray`` as tasks on a Ray cluster; an episode's
outcome depends only on its seed, so the results are those of one worker.

A run survives any stop: Ctrl-C or SIGTERM (:func:`stopping_on_signals`) stops the workers with it
and leaves the episode it interrupted as a ``.partial`` file, which a resume redoes; an episode
whose recording could not be written (a full disk) is named as not recorded, never scored.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import multiprocessing
import os
import platform
import signal
import sys
import threading
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from simuguard_gym import __version__
from simuguard_gym.dependencies import install_hint
from simuguard_gym.output_files import write_output
from simuguard_gym.policy import BatchChunkPlayer, ChunkPlayer, load_policy
from simuguard_gym.recording import trust
from simuguard_gym.recording.format import FILE_SUFFIX, PARTIAL_SUFFIX, RecordingError
from simuguard_gym.recording.reader import load_recording
from simuguard_gym.replay.interventions import Intervention, default_intervention

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: The file an audit holds a lock on while it runs (:func:`lock_directory`).
LOCK = ".simuguard-audit.lock"


@dataclass(frozen=True)
class AuditConfig:
    """What a run evaluates; two runs into one directory must have the same."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    episodes: int = 20
    seed_base: int = 0
    policy: str = "scripted"  # "scripted" (the env's expert_action), MODULE:NAME, FILE.py:NAME or "sb3:PATH"
    intervention: str | None = None  # None: the engine's default (PhysX depenetration, MuJoCo timeconst)
    sapien_path: str | None = None  # a repaired SAPIEN copy (simuguard repair-physx) to run on
    num_envs: int = 1  # > 1: episodes over a vector env of this many, the policy acting on the batch
    vecnormalize: str | None = None  # SB3 VecNormalize statistics (a .pkl) the --sb3 model was trained with

    def seeds(self) -> list[int]:
        return list(range(self.seed_base, self.seed_base + self.episodes))

    def check(self) -> None:
        if self.episodes < 1:
            raise ValueError("--episodes must be at least 1")
        if self.num_envs < 1:
            raise ValueError("--num-envs must be at least 1")
        if self.num_envs > 1 and self.policy == "scripted":
            raise ValueError("--policy scripted acts in one env (its expert); --num-envs needs a policy that "
                             "acts on a batch")
        register(self.env_id)
        if self.env_id not in gym.registry:
            raise ValueError(f"unknown env id {self.env_id!r} (not registered with Gymnasium)")
        unknown = unknown_kwargs(self.env_id, self.env_kwargs)
        if unknown:
            raise ValueError(f"--env-kwargs: {self.env_id} takes no {', '.join(map(repr, unknown))}")
        if self.intervention is not None:
            Intervention.parse(self.intervention)
        if self.vecnormalize is not None and not self.policy.startswith("sb3:"):
            raise ValueError("--vecnormalize goes with --sb3 (the statistics of the model's training env)")
        if self.policy != "scripted":  # the expert is the env's own: checked when the env exists
            load_policy(self.policy, vecnormalize=self.vecnormalize)  # fails here, before any episode

    def make_env(self) -> gym.Env:
        """The env the run evaluates, as its episodes build it: its reruns and videos are made in
        it, not in whatever a file in the directory names."""
        register(self.env_id)
        return gym.make(self.env_id, **self.env_kwargs)


def register(env_id: str) -> None:
    """Make ``env_id`` known: simuguard's built-in tasks, else ManiSkill3's (headless)."""
    if env_id.startswith("simuguard_gym/"):
        import simuguard_gym.envs  # noqa: F401
    elif env_id not in gym.registry and importlib.util.find_spec("mani_skill") is not None:
        from simuguard_gym.engines.sapien import headless

        headless()
        import mani_skill.envs  # noqa: F401


class AuditRunError(RuntimeError):
    """The env could not be built, or the policy raised, during an audit: the episodes already
    written stay, and the message says where (``python -m simuguard_gym.cli -v audit ...`` logs the
    traceback)."""


def unknown_kwargs(env_id: str, kwargs: dict[str, Any]) -> list[str]:
    """Keys of ``kwargs`` that the env's constructor cannot take ([] where it takes ``**kwargs``
    or its signature cannot be read)."""
    entry = gym.spec(env_id).entry_point
    try:
        target = load_env_creator(entry) if isinstance(entry, str) else entry
        parameters = inspect.signature(target).parameters.values()
    except Exception:  # noqa: BLE001 - an entry point we cannot inspect is checked when it is built
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    names = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                       inspect.Parameter.KEYWORD_ONLY)}
    return sorted(k for k in kwargs if k not in names and k not in ("render_mode", "max_episode_steps"))


def _failure(what: str, error: BaseException) -> AuditRunError:
    logger.info("audit: %s", what, exc_info=error)
    hint = install_hint(error)
    return AuditRunError(f"{what}: {type(error).__name__}: {error}" + (f" ({hint})" if hint else ""))


def episode_name(seed: int) -> str:
    return f"seed_{seed:06d}"


def out_directory(out: Path) -> Path:
    """``--out`` made where missing; a clear error where it names a file."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; an audit's --out is a directory (made if missing)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def lock_directory(out: Path) -> int:
    """Hold ``out`` for this audit until its descriptor is closed or the process ends, however it
    ends; a second audit on it is refused, naming this one's pid. Returns the descriptor. A POSIX
    record lock: it belongs to this process alone, not to the processes it forks (a recorder's
    helper, a replay's child), which may outlive the run by a moment."""
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(f"{out} is in use by another audit (pid {holder}); wait for it to end or stop it, "
                         "or use another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


#: The signals that stopped the run, while :func:`stopping_on_signals` holds.
_stopped_by: list[str] = []


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP stop the run: a KeyboardInterrupt in the main thread, so that its
    workers are stopped and the interrupted episode is left as a ``.partial``. The stop is also
    remembered and raised again between env steps (:func:`check_stopped`): Python drops an
    exception raised while it runs its fork handlers (a recorder's helper process starting)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        _stopped_by.append(signal.Signals(signum).name)
        raise KeyboardInterrupt(f"stopped by {_stopped_by[-1]}")

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except KeyboardInterrupt:
        raise
    except Exception as error:
        # C code that calls back into Python (matplotlib's Agg writing the report's figures) turns
        # the KeyboardInterrupt raised inside it into an error of its own ("Invalid bounding box"):
        # after a stop, that error is the stop.
        if _stopped_by:
            raise KeyboardInterrupt(f"stopped by {_stopped_by[0]}") from error
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stopped_by.clear()


def check_stopped() -> None:
    """Raise the stop a signal asked for, where its first KeyboardInterrupt was lost."""
    if _stopped_by:
        raise KeyboardInterrupt(f"stopped by {_stopped_by[0]}")


def prepare_directory(out: Path, config: AuditConfig, force: bool, command: list[str]) -> list[int]:
    """Create or resume ``out``; returns the seeds still to run. What an interrupted run left of
    an episode (its ``.partial``, a recording it cut short, side files of either) is removed, and
    the episode redone."""
    out_directory(out)
    manifest = out / MANIFEST
    if manifest.exists():
        # a setting added since the run began is the default it ran with
        defaults = {f.name: f.default for f in fields(AuditConfig) if f.default is not MISSING}
        previous = {**_plain(defaults), **(json.loads(manifest.read_text()).get("config") or {})}
        if previous != _plain(asdict(config)):
            if not force:
                raise ValueError(f"{out} holds another run (its {MANIFEST} has another config); "
                                 "use another --out, or --force to replace it")
            for path in list(out.glob(f"*{FILE_SUFFIX}*")) + [manifest]:
                path.unlink()
    elif any(out.glob(f"*{FILE_SUFFIX}")) and not force:
        raise ValueError(f"{out} holds recordings of another run (no {MANIFEST}); use another --out or --force")
    write_output(manifest, json.dumps({
        "simuguard_version": __version__, "python": platform.python_version(), "platform": platform.platform(),
        "command": command, "config": _plain(asdict(config)), "seeds": config.seeds(), "versions": _versions(),
    }, indent=2))
    for unfinished in out.glob(f"*{PARTIAL_SUFFIX}"):
        unfinished.unlink()  # a recording, a side file or a report file never finished (the run holds out)
    todo = []
    for seed in config.seeds():
        path = out / f"{episode_name(seed)}{FILE_SUFFIX}"
        if _finished(path, force):
            continue
        for stale in out.glob(f"{path.name}*"):
            stale.unlink()  # the rest of an episode that is redone: its rerun, trace
        path.with_suffix(".mp4").unlink(missing_ok=True)
        todo.append(seed)
    return todo


def discard_unstarted(out: Path) -> None:
    """Remove the manifest of a run that recorded nothing (its env or policy failed at once): the
    directory then holds no run, and the next command may use it with other settings."""
    if not any(out.glob(f"*{FILE_SUFFIX}*")):
        (out / MANIFEST).unlink(missing_ok=True)


def _finished(path: Path, force: bool) -> bool:
    """Whether the run finished the episode of ``path``: its recording complete, ended by the env
    (not cut by an interruption), made by this user (an audit never scores files others put in
    its directory: with ``force`` they are redone)."""
    if not os.path.lexists(path):
        return False
    try:
        rec = load_recording(path)
    except RecordingError:
        return False
    if not trust.signed_by_user(rec.header):
        if not force:
            raise ValueError(f"{path} was not recorded by you (it is not signed with your key); an audit resumes "
                             "only its own episodes: use another --out, or --force to redo it")
        return False
    return (rec.footer or {}).get("ended") in ("terminated", "truncated")


def run_episodes(config: AuditConfig, out: Path, seeds: list[int],
                 progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run ``seeds`` in this process; returns one summary per episode."""
    if config.num_envs > 1:
        return _run_vector(config, out, seeds, progress)
    env, recorder = _audited_env(config, out)
    summaries = []
    try:
        player = ChunkPlayer(load_policy(config.policy, env, vecnormalize=config.vecnormalize),
                             env.action_space.shape or ())
        for seed in seeds:
            recorder.name_next(episode_name(seed))
            obs, info = env.reset(seed=seed)
            try:
                player.reset({**info, "seed": seed})
            except Exception as error:  # noqa: BLE001 - the user's policy: said in one line
                raise _failure(f"the policy raised in reset at seed {seed}", error) from None
            terminated = truncated = False
            steps, total = 0, 0.0
            while not (terminated or truncated):
                try:
                    action = player.act(obs, info)
                except Exception as error:  # noqa: BLE001
                    raise _failure(f"the policy raised at seed {seed}, step {steps}", error) from None
                obs, reward, terminated, truncated, info = env.step(action)
                steps, total = steps + 1, total + float(reward)
                check_stopped()
            summaries.append(_summary(seed, steps, total, info))
            if progress is not None:
                progress(summaries[-1])
    except BaseException:
        recorder.discard_episode()  # an interrupted episode stays a .partial, redone on resume
        raise
    finally:
        env.close()
    return summaries


def _audited_env(config: AuditConfig, out: Path) -> tuple[gym.Env, Any]:
    from simuguard_gym.engines.base import adapter_for
    from simuguard_gym.wrappers.depenetration_rerun import DepenetrationRerun
    from simuguard_gym.wrappers.record_physics import RecordPhysics

    try:
        base = config.make_env()
    except Exception as error:  # noqa: BLE001 - said in one line, the traceback under -v
        raise _failure(f"{config.env_id} could not be built with --env-kwargs {json.dumps(config.env_kwargs)}",
                       error) from None
    env = DepenetrationRerun(base, config.intervention or default_intervention(adapter_for(base).engine),
                             directory=out)
    return env, _find(env, RecordPhysics)


def _summary(seed: int, steps: int, total: float, info: dict[str, Any]) -> dict[str, Any]:
    """An episode's line: its outcome (``success``, None where the env reports none, and its
    ``return``), or why it was not recorded (``not_recorded``: the file could not be written, e.g.
    on a full disk; such an episode is never scored)."""
    ours = info.get("simuguard", {})
    not_recorded = None
    if not ours.get("recording"):
        errors = ours.get("errors") or []
        not_recorded = (f"{errors[0].get('type')}: {errors[0].get('message')}" if errors
                        else "no recording was written")
    return {"seed": seed, "steps": steps, "return": total,
            "success": _bool(info.get("success", info.get("is_success"))),
            "artifact": bool(ours.get("artifact")), "corrected_success": ours.get("corrected_success"),
            "rerun_unscored": (ours.get("rerun") or {}).get("unscored"),
            "events": [e["onset_substep"] for e in ours.get("events", [])], "not_recorded": not_recorded}


def _run_vector(config: AuditConfig, out: Path, seeds: list[int],
                progress: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    """Episodes on ``num_envs`` envs stepped side by side, the policy acting on their batch (the
    observations batched as Gymnasium's vector envs batch them). An env whose episode ended waits
    for the next seed; when none is left it is not stepped again, and the policy's answer for it
    is dropped."""
    from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

    n = min(config.num_envs, len(seeds))
    stacks = [_audited_env(config, out) for _ in range(n)]
    space = stacks[0][0].observation_space
    batch_space(space, n)  # fails here on a space Gymnasium cannot batch
    summaries: list[dict[str, Any]] = []
    pending = list(seeds)
    running: list[int | None] = [None] * n
    steps, totals, obs, infos = [0] * n, [0.0] * n, [None] * n, [{} for _ in range(n)]
    try:
        player = BatchChunkPlayer(load_policy(config.policy, stacks[0][0], vecnormalize=config.vecnormalize),
                                  stacks[0][0].action_space.shape or (), n)

        def start(i: int) -> None:
            seed = running[i] = pending.pop(0)
            stacks[i][1].name_next(episode_name(seed))
            obs[i], info = stacks[i][0].reset(seed=seed)
            infos[i], steps[i], totals[i] = {**info, "seed": seed}, 0, 0.0
            player.reset(i, infos[i])

        for i in range(n):
            start(i)
        while any(s is not None for s in running):
            # a new batch each time: a policy may keep the observations it was given
            try:
                actions = player.act(concatenate(space, obs, create_empty_array(space, n)), infos)
            except Exception as error:  # noqa: BLE001 - the user's policy: said in one line
                raise _failure(f"the policy raised on the batch of seeds {[s for s in running if s is not None]}",
                               error) from None
            for i, seed in enumerate(running):
                if seed is None:
                    continue
                obs[i], reward, terminated, truncated, infos[i] = stacks[i][0].step(actions[i])
                steps[i], totals[i] = steps[i] + 1, totals[i] + float(reward)
                check_stopped()
                if terminated or truncated:
                    summaries.append(_summary(seed, steps[i], totals[i], infos[i]))
                    if progress is not None:
                        progress(summaries[-1])
                    running[i] = None
                    if pending:
                        start(i)
    except BaseException:
        for _, recorder in stacks:
            recorder.discard_episode()  # interrupted episodes stay .partial files, redone on resume
        raise
    finally:
        for env, _ in stacks:
            env.close()
    return sorted(summaries, key=lambda s: s["seed"])


def holds_artifact(path: Path) -> bool:
    """Whether a final recording's detector found a contact artifact (False if it cannot be read)."""
    try:
        footer = load_recording(path).footer or {}
    except (RecordingError, OSError):
        return False
    return any(e.get("artifact") for e in (footer.get("detector") or {}).get("events") or [])


def missing_reruns(out: Path, seeds: list[int]) -> list[int]:
    """Seeds whose recording is final and holds a contact artifact but has no rerun result beside
    it: a run killed between the two (the recording is renamed into place before the rerun)."""
    from simuguard_gym.scoring.report import rerun_of

    return [seed for seed in seeds if holds_artifact(path := out / f"{episode_name(seed)}{FILE_SUFFIX}")
            and rerun_of(path) is None]


def redo_reruns(config: AuditConfig, out: Path, seeds: list[int]) -> list[dict[str, Any]]:
    """Rerun the recordings of ``seeds`` as DepenetrationRerun would have, writing their results."""
    from simuguard_gym.replay.rerun import rerun
    from simuguard_gym.scoring.report import write_rerun

    done = []
    for seed in seeds:
        path = out / f"{episode_name(seed)}{FILE_SUFFIX}"
        try:
            rec = load_recording(path)
            change = config.intervention or default_intervention(rec.header.get("engine", ""))
            result = rerun(rec, change, env_fn=config.make_env).to_dict()
            write_rerun(path, result)
        except Exception as error:  # noqa: BLE001 - one rerun that fails leaves its score uncorrected, the run goes on
            logger.warning("simuguard audit: the rerun of seed %d failed: %s", seed, error)
            continue
        done.append({"seed": seed, "rerun": result})
    return done


def write_videos(out: Path, seeds: list[int], env_fn: Callable[[], Any] | None = None) -> dict[str, str]:
    """An MP4 beside every recording of ``seeds`` that holds a contact artifact and has none yet
    (:func:`simuguard_gym.video.write_video`); returns why a video could not be made, by file name."""
    from simuguard_gym.video import write_video

    reasons: dict[str, str] = {}
    for seed in seeds:
        path = out / f"{episode_name(seed)}{FILE_SUFFIX}"
        if not holds_artifact(path) or path.with_suffix(".mp4").exists():
            continue
        try:
            write_video(path, env_fn=env_fn)
        except Exception as error:  # noqa: BLE001 - a video that cannot be made leaves its reason in the report
            reasons[path.name] = f"{type(error).__name__}: {error}"
            logger.warning("simuguard audit: no video of seed %d: %s", seed, error)
    return reasons


def _worker(payload: tuple[dict[str, Any], str, list[int], bytes | None]) -> list[dict[str, Any]]:
    config, out, seeds, key = payload
    if key is not None:  # a Ray node: the recordings are signed with the user's key, as local ones are
        trust.use_key(key)
    if config.get("sapien_path") is not None:  # a repaired SAPIEN copy, imported instead of the installed one
        sys.path.insert(0, config["sapien_path"])
    return run_episodes(AuditConfig(**config), Path(out), seeds)


def _die_with_parent() -> None:
    """A local worker ends when the audit's process does, however that ends (Linux's parent-death
    signal): no worker goes on writing into a directory its run has left."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() == 1:  # the parent ended before the signal was asked for
        os._exit(1)


def run_parallel(config: AuditConfig, out: Path, seeds: list[int], workers: int,
                 progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Episodes over ``workers`` processes (spawned: no state is shared with this one). On a
    repaired SAPIEN copy (``config.sapien_path``) they always run in subprocesses importing it."""
    if workers <= 1 and config.sapien_path is None:
        return run_episodes(config, out, seeds, progress)
    workers = max(workers, 1)
    parts = [seeds[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    results: list[dict[str, Any]] = []
    # Leaving the block on any exception (Ctrl-C, SIGTERM made one) terminates the workers.
    with context.Pool(workers, initializer=_die_with_parent) as pool:
        for part in pool.imap_unordered(_worker, [(asdict(config), str(out), p, None) for p in parts if p]):
            for summary in part:
                results.append(summary)
                if progress is not None:
                    progress(summary)
    return sorted(results, key=lambda s: s["seed"])


def run_ray(config: AuditConfig, out: Path, seeds: list[int], address: str,
            progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Episodes as Ray tasks, one per seed (``address``: a cluster, or ``auto``/``local``: the
    cluster of ``RAY_ADDRESS`` if any, else a local one). ``out`` must be a path every node sees."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'simuguard-gym[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=None if address in ("auto", "local") else address, log_to_driver=False,
                 include_dashboard=False)
    task = ray.remote(_worker)
    key = trust.user_key()
    pending = [task.remote((asdict(config), str(out), [seed], key)) for seed in seeds]
    results: list[dict[str, Any]] = []
    try:
        while pending:
            ready, pending = ray.wait(pending)
            for part in ray.get(ready):
                for summary in part:
                    results.append(summary)
                    if progress is not None:
                        progress(summary)
    except BaseException:
        for ref in pending:  # stopped: the tasks still queued or running go with the run
            ray.cancel(ref, force=True)
        raise
    return sorted(results, key=lambda s: s["seed"])


def _find(env: gym.Env, kind: type) -> Any:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    raise RuntimeError(f"no {kind.__name__} in the wrapper stack")


def _bool(value: Any) -> bool | None:
    if value is None:
        return None
    try:
        return bool(value)
    except (TypeError, ValueError):
        return None


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _versions() -> dict[str, str]:
    """Installed versions of what a run depends on, from the package metadata: importing them to
    ask would load every extra (SAPIEN, ManiSkill, robosuite) into a run that uses none."""
    found = {}
    for name in ("gymnasium", "mujoco", "numpy", "sapien", "robosuite", "mani-skill", "stable-baselines3"):
        try:
            found[name.replace("-", "_")] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found

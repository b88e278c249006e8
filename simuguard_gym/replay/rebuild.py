"""The env a recording is replayed in, and which code the file may have simuguard run to build it.

A recording is data (docs/security.md): it names its env, and simuguard builds that env from a
registered Gymnasium id with the recorded keyword arguments. Code the file names (a factory
``module:function``, a module to import, an id ``module:Id``, the methods a harness's env is driven
by) is used only where the user allows it: their own ``env_fn``, ``trust=True`` (``--trust``: the
recording is ``trusted``), or the file signed with their key, as the recordings they made
themselves are (:mod:`simuguard_gym.recording.trust`).

A MuJoCo recording also names the compiled model it was made on, stored beside it
(:mod:`simuguard_gym.recording.model_store`): where the env cannot be built here (its benchmark not
installed, its code refused) or the user asks for it (``from_file``), the replay runs on that
model alone, which needs no code from anyone.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from typing import Any, Callable

import gymnasium as gym

from simuguard_gym.attach import AttachedEnv, as_gymnasium, build_from_factory
from simuguard_gym.recording.model_store import model_file_entry, read_model_file
from simuguard_gym.recording.format import RecordingError
from simuguard_gym.recording.reader import Recording, load_recording
from simuguard_gym.recording.trust import refusal, signed_by_user

#: Packages whose import registers their benchmark's ids: an unregistered id from a file may
#: have simuguard import one of these (its top-level package, nothing the file chooses within it).
REGISTERING_PACKAGES = frozenset({"gymnasium_robotics", "metaworld", "mani_skill", "shimmy", "gym_aloha", "myosuite",
                                  "lerobot_env_so101"})
#: The methods a harness's env is driven by when nobody named others (attach's defaults).
DEFAULT_CALLS = {"reset": "reset", "step": "step"}


def recording_of(recording: Recording | str | os.PathLike[str], trust: bool = False) -> Recording:
    """``recording`` read (where it is a path), marked ``trusted`` where the user said ``trust``."""
    rec = recording if isinstance(recording, Recording) else load_recording(recording)
    return dataclasses.replace(rec, trusted=True) if trust and not rec.trusted else rec


def build_env(rec: Recording, env_fn: Callable[[], Any] | None = None, *, from_file: bool = False,
              notes: list[str] | None = None) -> gym.Env:
    """The env to replay ``rec`` in: ``env_fn()`` (a benchmark's own env object is seen as a
    Gymnasium env), else the recorded env id with the recorded kwargs; the code the file names
    only where the user vouches for it (``rec.trusted``) or it is signed by them. Anything that
    cannot be built is a ValueError that says why (an
    :class:`~simuguard_gym.recording.trust.UntrustedRecordingError` for code refused).

    With no ``env_fn``, a recording that names a stored model is replayed on it
    (:func:`stored_scene`) where the env cannot be built, and with ``from_file`` always; ``notes``
    gets a line saying so."""
    if from_file:
        return stored_scene(rec)
    try:
        return _built_env(rec, env_fn)
    except (ValueError, ImportError, gym.error.Error) as error:
        if env_fn is not None or model_file_entry(rec.header) is None:
            raise
        try:
            scene = stored_scene(rec)
        except ValueError:  # the model is not beside the file (a recording sent alone): why the env is not built
            raise error from None
        if notes is not None:
            notes.append(f"the env could not be built here ({type(error).__name__}: {error}); replayed on the "
                         "model stored with the recording")
        return scene


def stored_scene(rec: Recording) -> gym.Env:
    """The MuJoCo model ``rec`` names in its model store, as a scene to replay in
    (:class:`~simuguard_gym.engines.mujoco_stored.StoredScene`); a ValueError where it names none
    or it cannot be loaded here (another MuJoCo version is named)."""
    entry = model_file_entry(rec.header)
    if entry is None or rec.path is None:
        why = rec.header.get("model_file_skipped") or "it was made without a model store"
        raise RecordingError(f"{rec.path}: the recording carries no model to replay from ({why})")
    from simuguard_gym.engines.mujoco_stored import StoredScene

    try:
        return StoredScene(read_model_file(rec.path, entry), entry["fingerprint"], rec.header.get("engine_version"))
    except RecordingError as error:
        raise RecordingError(f"{rec.path}: {error}") from None


def _built_env(rec: Recording, env_fn: Callable[[], Any] | None) -> gym.Env:
    env_info = _env_info(rec.header)
    allowed = rec.trusted or signed_by_user(rec.header)
    if env_fn is None:
        return _make_env(rec, env_info, allowed)
    built = env_fn()
    calls = env_info.get("calls")
    if not isinstance(built, (gym.Env, AttachedEnv)) and calls not in (None, DEFAULT_CALLS) and not allowed:
        _close(built)  # a harness's env, to be driven by methods the file names
        raise refusal(rec.path, [f"to drive the env by its methods {calls!r}"])
    try:
        return as_gymnasium(built, calls=calls)
    except TypeError as error:
        _close(built)
        raise ValueError(f"the env factory returned {type(built).__name__}, which is not an env: {error}") from None


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()


def named_code(header: dict[str, Any]) -> list[str]:
    """The code a recording names to rebuild its env, in words (what runs only where the file is
    trusted); a registered id's defining module is listed too, being a name the file gives.

    >>> named_code({"env": {"id": None, "factory": {"callable": "subprocess:run", "kwargs": {}}}})
    ["env factory 'subprocess:run'"]
    """
    env_info = _env_info(header)
    found = []
    factory = env_info.get("factory")
    if factory:
        found.append(f"env factory {factory.get('callable') if isinstance(factory, dict) else factory!r}")
    env_id, module = env_info.get("id"), env_info.get("module")
    if isinstance(env_id, str) and ":" in env_id:
        found.append(f"module {env_id.split(':')[0]!r} (its env id is {env_id!r})")
    if isinstance(module, str) and module:
        found.append(f"module {module!r}")
    calls = env_info.get("calls")
    if calls not in (None, DEFAULT_CALLS):
        found.append(f"methods {calls!r}")
    return found


def _env_info(header: dict[str, Any]) -> dict[str, Any]:
    found = header.get("env")
    return found if isinstance(found, dict) else {}


def _make_env(rec: Recording, env_info: dict[str, Any], allowed: bool) -> gym.Env:
    env_id = env_info.get("id")
    if not env_id and env_info.get("factory"):
        factory = env_info["factory"]
        if not allowed:
            target = factory.get("callable") if isinstance(factory, dict) else factory
            raise refusal(rec.path, [f"to call the env factory {target!r}"])
        try:
            return build_from_factory(factory, env_info.get("calls"))
        except (ImportError, AttributeError, TypeError, KeyError, ValueError) as error:
            raise ValueError(f"the recording's env factory {factory!r} cannot build the env: {error}") from None
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"the recording names no registered env id and no importable factory (its env, "
                         f"{env_info.get('class')}, had no spec and no env_fn of module level); pass env_fn=...")
    if not env_info.get("kwargs_exact", True):
        raise ValueError(f"the recorded kwargs of {env_id} could not be stored exactly; pass env_fn=...")
    kwargs = env_info.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"the recorded kwargs of {env_id} are not a map")
    if ":" in env_id:  # gym.make imports the module before the ':'
        if not allowed:
            raise refusal(rec.path, [f"to import module {env_id.split(':')[0]!r} (its env id is {env_id!r})"])
    else:
        _register(rec, env_id, env_info.get("module"), allowed)
    return gym.make(env_id, **kwargs)


def _register(rec: Recording, env_id: str, module: Any, allowed: bool) -> None:
    """Have ``env_id`` registered: simuguard's built-in ids, ManiSkill's for a PhysX recording,
    a known benchmark's package where the file names a module of it, the module itself only
    where the file is trusted."""
    if env_id.startswith("simuguard_gym/"):
        import simuguard_gym.envs  # noqa: F401 - registers the built-in ids
    if rec.header.get("engine") == "sapien-physx":
        from simuguard_gym.engines.sapien import headless

        headless()
        if env_id not in gym.registry:
            try:
                import mani_skill.envs  # noqa: F401 - registers ManiSkill3's ids
            except ImportError:
                pass
    if env_id in gym.registry:
        return
    if isinstance(module, str) and module:
        package = module.split(".")[0]
        if allowed:
            importlib.import_module(module)  # the env's package registers its ids on import
        elif package not in REGISTERING_PACKAGES:
            raise refusal(rec.path, [f"to import module {module!r} to register {env_id!r}"])
        elif importlib.util.find_spec(package) is not None:
            importlib.import_module(package)
    if env_id not in gym.registry:
        raise ValueError(f"unknown env id {env_id!r}: it is not registered here (install the package that "
                         "registers it, or pass --env-fn MODULE:CALLABLE)")

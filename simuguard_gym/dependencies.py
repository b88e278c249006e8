"""Installed packages that cannot work together, told at import instead of as a missing library.

MuJoCo 4 ships as ``mujoco`` plus ``mujoco-core`` (which owns the ``mujoco/`` package's files)
and ``mujoco-studio``. A package that pins an older MuJoCo installed afterwards (Meta-World pins
3.3.0) replaces ``mujoco`` but leaves ``mujoco-core`` 4 behind, whose plugin libraries then fail
to load: ``import mujoco`` raises ``OSError: libmujoco.so.4.0.0: cannot open shared object
file``, and ``pip check`` says nothing.

>>> from simuguard_gym.dependencies import mujoco_mismatch
>>> mujoco_mismatch("3.3.0", "4.0.0", None)[:44]
'mujoco 3.3.0 is installed beside mujoco-core'
>>> mujoco_mismatch("4.0.0", "4.0.0", "4.0.0") is None
True
>>> mujoco_mismatch("4.1.0", "4.0.0", None) is None   # no exact pin to compare with
True

A module that an optional part needs and is missing is named with the extra that installs it:

>>> from simuguard_gym.dependencies import install_hint
>>> install_hint(ModuleNotFoundError("No module named 'sapien'", name="sapien"))
'pip install "simuguard-gym[sapien]"'
"""

from __future__ import annotations

import re
from importlib import metadata


def mujoco_mismatch(mujoco: str | None, core: str | None, wanted_core: str | None) -> str | None:
    """What is wrong with these installed versions (``wanted_core``: the mujoco-core version that
    the installed mujoco requires, None if it requires none), or None when they fit."""
    if mujoco is None or core is None or core == wanted_core:
        return None
    if wanted_core is None and int(re.match(r"\d*", mujoco).group() or 0) >= 4:
        return None  # a MuJoCo 4 whose metadata pins no exact core (a range, a source build): cannot tell
    return (f"mujoco {mujoco} is installed beside mujoco-core {core}, which it does not use"
            + (f" (it needs mujoco-core {wanted_core})" if wanted_core else "")
            + ": a package that pins another MuJoCo was installed after MuJoCo 4 and left mujoco-core "
            "behind, so `import mujoco` fails on a missing libmujoco. Repair the environment with "
            f"`pip uninstall -y mujoco-core mujoco-studio && pip install --force-reinstall --no-deps mujoco=={mujoco}`, "
            "or give that package a virtualenv of its own")


def check_mujoco() -> None:
    """Raise ImportError where the installed mujoco and mujoco-core do not fit together."""
    mujoco, core = _version("mujoco"), _version("mujoco-core")
    if core is None:
        return
    wanted = None
    for requirement in (metadata.requires("mujoco") or []) if mujoco else []:
        found = re.fullmatch(r"mujoco[-_]core\s*==\s*([^;\s]+)(\s*;.*)?", requirement.strip())
        if found:
            wanted = found.group(1)
    problem = mujoco_mismatch(mujoco, core, wanted)
    if problem:
        raise ImportError(problem)


#: The extra of setup.cfg that installs each optional top-level module.
EXTRAS = {"sapien": "sapien", "mani_skill": "maniskill", "h5py": "maniskill", "robosuite": "robosuite",
          "libero": "libero", "stable_baselines3": "sb3", "dm_control": "dm_control", "shimmy": "dm_control",
          "coacd": "decompose", "matplotlib": "report", "tqdm": "report", "rerun": "viewer", "av": "video",
          "ray": "ray"}


def install_hint(error: BaseException) -> str | None:
    """The install command of the extra whose module ``error`` (or an error it was raised from)
    misses; None where the missing module is no optional part's."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, ModuleNotFoundError) and found.name:
            extra = EXTRAS.get(found.name.split(".")[0])
            if extra is not None:
                return f'pip install "simuguard-gym[{extra}]"'
        found = found.__cause__ or found.__context__
    return None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None

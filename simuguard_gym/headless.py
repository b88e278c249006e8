"""MuJoCo's rendering backend where there is no display.

MuJoCo picks its OpenGL backend when ``mujoco`` is imported, from ``MUJOCO_GL``; unset, it takes
GLFW, which aborts the process without a display when a renderer is created. Where no display is
set, the user chose nothing and libEGL is installed, simuguard chooses EGL, which renders on a GPU
where there is one and otherwise on the CPU through Mesa's software driver (Debian's libegl1,
libegl-mesa0 and libgl1-mesa-dri). It must run before anything imports ``mujoco``: ``import
simuguard_gym`` first, or set ``MUJOCO_GL=egl``.
"""

from __future__ import annotations

import ctypes.util
import os
import sys


def choose_mujoco_gl() -> str | None:
    """``MUJOCO_GL`` as it now is: set to ``egl`` on Linux without a display where it was unset."""
    if "MUJOCO_GL" not in os.environ and sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and "mujoco" not in sys.modules \
            and ctypes.util.find_library("EGL"):  # without libEGL, MUJOCO_GL=egl makes `import mujoco` fail
        os.environ["MUJOCO_GL"] = "egl"
    return os.environ.get("MUJOCO_GL")


def headless_rendering_problem(backend_module: str) -> str | None:
    """Why MuJoCo cannot render here (its backend is that of ``backend_module``), or None."""
    if backend_module.endswith("glfw") and sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return ("MuJoCo cannot render here: there is no display and it was imported with the GLFW backend. "
                "Set MUJOCO_GL=egl (Debian: apt install libegl1 libegl-mesa0 libgl1-mesa-dri) before "
                "mujoco is imported, or import simuguard_gym first")
    return None

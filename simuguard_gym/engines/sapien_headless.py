"""SAPIEN and ManiSkill3 without a rendering device: what :func:`headless` changes and why.

Physics needs no rendering device, but SAPIEN creates render materials on one, and ManiSkill3
builds a render system for every scene; on a machine without a GPU or display both fail before
the first physics step.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from typing import Any, Callable

import sapien


def headless() -> None:
    """Let scene builders and ManiSkill3 envs run without a rendering device: render materials
    and textures become inert, builders' visual shapes are dropped and ManiSkill's envs default
    to ``render_backend="none"`` (physics is untouched; nothing is changed on disk).

    SAPIEN creates render materials on the rendering device, which fails on a machine without
    one (ManiSkill3's ``actors.build_cube`` does, and SAPIEN's URDF loader for a visual with a
    ``<material>``, as in ManiSkill's ``panda_wristcam``). Call this once before building the env
    (before or after importing ManiSkill); simuguard's replay calls it for SAPIEN recordings. An
    explicit ``render_backend=`` passed to ``gym.make`` still wins.
    """
    if getattr(sapien.render, "_simuguard_headless", False):
        return
    from sapien.wrapper.actor_builder import ActorBuilder

    class InertMaterial:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __getattr__(self, name: str) -> Callable[..., None]:
            return lambda *args, **kwargs: None

    def no_visual(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    for name in ("RenderMaterial", "RenderTexture2D"):
        _rebind(getattr(sapien.render, name), InertMaterial)
    for name in dir(ActorBuilder):
        if name.startswith("add_") and "visual" in name:
            setattr(ActorBuilder, name, no_visual)
    if importlib.util.find_spec("mani_skill") is not None:
        _maniskill_without_renderer()
    sapien.render._simuguard_headless = True


def _rebind(original: Any, replacement: Any) -> None:
    """Replace ``original`` in every loaded module that holds it by name. SAPIEN's URDF loader and
    ManiSkill's MJCF loader bind ``RenderMaterial`` at import (``from ... import``), so patching
    ``sapien.render`` alone leaves them creating real materials; modules imported later get the
    replacement from ``sapien.pysapien.render``, which is among the loaded ones."""
    name = original.__name__
    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", {}).get(name) is original:  # __dict__: no lazy __getattr__
            setattr(module, name, replacement)


def _maniskill_without_renderer() -> None:
    """Make ``render_backend="none"`` ManiSkill's default. Its default, "gpu", falls back to the CPU
    render device when there is no CUDA, and ManiSkill then creates a Vulkan ``RenderSystem`` for
    the scene, which fails without a rendering device; "none" is ManiSkill's own switch that keeps
    the render system, render components and cameras out of the scene (PhysX is the same)."""
    from mani_skill.envs.sapien_env import BaseEnv

    init = BaseEnv.__init__

    @functools.wraps(init)
    def without_renderer(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("render_backend", "none")
        init(self, *args, **kwargs)

    BaseEnv.__init__ = without_renderer

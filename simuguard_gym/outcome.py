"""An episode's outcome as the env reports it, and where a recording says it came from.

Envs report success in ``info`` (``success``: Meta-World, LIBERO-style harnesses, simuguard's
own envs; ``is_success``: Gymnasium-Robotics, Stable-Baselines3) or through a check method
(robosuite's ``_check_success``, ManiSkill's ``evaluate()``). A recording keeps the source of its
outcome (``info:success``, ``info:is_success``, ``check``) so that a rerun scores itself with the
same one.
"""

from __future__ import annotations

from typing import Any

#: The ``info`` keys that benchmarks report success under, in the order they are looked up.
SUCCESS_KEYS = ("success", "is_success")
#: The source of an outcome read from the adapter's check (``PhysicsAdapter.success``).
CHECK = "check"


def success_in_info(info: dict[str, Any]) -> tuple[bool | None, str | None]:
    """The env's own success in ``info`` and its source (``"info:<key>"``), or (None, None).

    >>> success_in_info({"is_success": 1.0})
    (True, 'info:is_success')
    >>> success_in_info({"reward_ctrl": -0.1})
    (None, None)
    """
    for key in SUCCESS_KEYS:
        if key in info:
            try:
                return bool(info[key]), f"info:{key}"
            except (TypeError, ValueError):  # e.g. an array of several envs' outcomes
                return None, None
    return None, None


def success_from_info(info: dict[str, Any]) -> bool | None:
    """The env's own success signal, under the names benchmarks use."""
    return success_in_info(info)[0]

"""The ``info["simuguard"]`` key that every wrapper writes into, and only that key."""

from __future__ import annotations

from typing import Any

from simuguard_gym.outcome import success_from_info

__all__ = ["INFO_KEY", "success_from_info", "with_simuguard"]

INFO_KEY = "simuguard"


def with_simuguard(info: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of ``info`` whose ``simuguard`` entry also holds ``fields``.

    The env's own dict is never mutated (it may be reused by the env), and the other keys are
    passed through untouched. ``errors`` lists of stacked wrappers are concatenated, not replaced.
    """
    out = dict(info)
    merged = dict(out.get(INFO_KEY) or {})
    if "errors" in fields and merged.get("errors"):
        fields = {**fields, "errors": list(merged["errors"]) + list(fields["errors"])}
    merged.update(fields)
    out[INFO_KEY] = merged
    return out

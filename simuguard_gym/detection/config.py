"""DetectorConfig: the thresholds of the three-stage detector (SimuGuard 3.3, B.5) and its flags.

Every threshold is in seconds, metres and m/s, so one config works at any physics step. The
velocity-change thresholds are given, as in the paper, per ``reference_step`` (4 ms) and scale
with the substep: they are accelerations (0.35 m/s per 4 ms = 87.5 m/s^2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the contact-artifact detector.

    The defaults are the paper's (Section B.5) plus four improvements, each switchable:
    ``robot_contact_carrier`` (a robot link touching the object is a carrier too: a finger that
    flicks an object explains it), ``carrier_through_peak`` (a carrier's speed counts until the
    object's peak, not only before onset: a pusher still accelerating at onset explains what it
    carries) and ``speed_gain`` (a fourth stage: the object must leave the contact faster than
    it arrived, by ``gain_ratio``; a bounce or a knock that only turns it is not an ejection).
    And ``off_stage`` keeps bodies that the benchmark parks far from the task (robosuite's
    ``clear_objects`` stacks unused objects at one point 10 m away, where they are thrown apart)
    from being artifacts: an event whose body is more than ``offstage_margin`` outside the stage
    box (the robot and the static scene) just before onset says ``off_stage`` and is no artifact,
    unless a TaskSpec names the body. :meth:`paper` switches all four off and reproduces the
    reference tool.

    >>> from simuguard_gym.detection import DetectorConfig
    >>> config = DetectorConfig()
    >>> round(config.velocity_change_per_substep(0.002), 3)   # 0.35 m/s per 4 ms, at a 2 ms step
    0.175
    >>> config.substeps(config.contact_window, 0.002)
    20
    >>> DetectorConfig.paper().robot_contact_carrier
    False
    """

    # stage 1: contact ejection
    contact_window: float = 0.040  # s: the object touched another body this recently
    min_speed: float = 0.5  # m/s: candidate moves faster than this
    min_velocity_change: float = 0.35  # m/s per reference_step, in one substep
    confirm_window: float = 0.240  # s after onset to confirm
    min_displacement: float = 0.04  # m travelled within the confirmation window
    free_flight: float = 0.016  # s without any contact
    violent_velocity_change: float = 0.75  # m/s per reference_step, while touching its container
    violent_speed: float = 1.0  # m/s, while touching its container
    reference_step: float = 0.004  # s: the step the velocity-change thresholds are given for
    # stage 2: gravity
    drop_window: float = 0.6  # s before the peak in which the drop height is measured
    peak_window: float = 0.1  # s after onset in which the peak speed is taken (stages 2 and 3)
    gravity_ratio: float = 1.5  # keep if peak / sqrt(2 g dz) > this
    gravity_speed_floor: float = 0.05  # m/s, floor of the free-fall speed
    # stage 3: carrier
    carrier_window: float = 0.040  # s before onset in which carriers touched object and robot
    carrier_ratio: float = 1.5  # keep if peak / fastest carrier speed >= this
    carrier_speed_floor: float = 0.05  # m/s, floor of the carrier speed
    robot_contact_carrier: bool = True  # a robot link touching the object is a carrier too
    carrier_through_peak: bool = True  # carrier speeds count until the peak, not only before onset
    # improvement: the object must gain speed at the contact (a bounce or a glancing knock does not)
    speed_gain: bool = True
    gain_ratio: float = 1.5  # keep if peak speed >= this x the fastest speed in contact_window before onset
    gain_speed_floor: float = 0.05  # m/s, floor of the speed before onset
    # improvement: bodies the benchmark parks far from the task (robosuite's clear_objects) are off stage
    off_stage: bool = True
    offstage_margin: float = 1.0  # m outside the stage box (robot and static scene) at onset: no artifact
    # flags
    max_penetration: float = 0.005  # m: deeper contacts are flagged (robot-robot pairs ignored)
    max_speed: float = 100.0  # m/s: faster bodies are flagged as absurd state

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SWITCHES:
                if not isinstance(value, bool):
                    raise TypeError(f"DetectorConfig.{f.name} must be a bool, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"DetectorConfig.{f.name} must be a finite number, got {value!r}")
            if value < 0 or (value == 0 and f.name in _POSITIVE):
                kind = "a window" if f.name.endswith("window") else "a threshold"
                raise ValueError(f"DetectorConfig.{f.name} is {kind} and must be "
                                 f"{'positive' if f.name in _POSITIVE else 'non-negative'}, got {value!r}")

    @classmethod
    def paper(cls) -> "DetectorConfig":
        """The reference tool's behaviour: three stages exactly as SimuGuard 3.3 states them."""
        return cls(robot_contact_carrier=False, carrier_through_peak=False, speed_gain=False, off_stage=False)

    def with_changes(self, **changes: Any) -> "DetectorConfig":
        return replace(self, **changes)

    # ------------------------------------------------------------------ at a given substep
    @staticmethod
    def substeps(seconds: float, dt: float) -> int:
        """A window in whole substeps (at least one)."""
        return max(1, int(round(seconds / dt)))

    def velocity_change_per_substep(self, dt: float) -> float:
        return self.min_velocity_change * dt / self.reference_step

    def violent_change_per_substep(self, dt: float) -> float:
        return self.violent_velocity_change * dt / self.reference_step

    # ------------------------------------------------------------------ plain data
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "DetectorConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown DetectorConfig fields: {', '.join(unknown)}")
        return cls(**values)


_SWITCHES = {"robot_contact_carrier", "carrier_through_peak", "speed_gain", "off_stage"}
_POSITIVE = {"contact_window", "confirm_window", "free_flight", "reference_step", "drop_window", "peak_window",
             "carrier_window"}

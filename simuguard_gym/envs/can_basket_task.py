"""The can-into-basket task, engine-free: the scripted placement and the success check.

Shared by the SAPIEN and the MuJoCo versions of PlaceCanBasket, so that a seed means the same
placement in both engines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simuguard_gym.envs.can_basket_geometry import (BASKET_INNER, CAN_HEIGHT, CAN_RADIUS, CAN_WEDGES, FLOOR_PIECE,
                                                    inside_basket)

#: Env steps of each phase of the placement (40 ms each).
HOLD, MOVE, LOWER, OPEN, LIFT = 5, 20, 15, 5, 15
EPISODE_STEPS = 90
OPEN_WIDTH = 0.045


@dataclass(frozen=True)
class PlacementPlan:
    """Where the gripper takes the can: home, target above the basket, release height, the
    can's yaw, and the drift of the gripper while its fingers open."""

    home: np.ndarray
    target: np.ndarray  # (x, y, z) of the can's centre at release
    yaw: float  # rad, turned while moving
    drift: np.ndarray  # (vx, vy) m/s of the gripper while it opens
    lag: int  # env steps by which the second finger opens after the first (it tips the can)
    against_wall: bool

    @classmethod
    def draw(cls, rng: np.random.Generator, home: np.ndarray) -> "PlacementPlan":
        """Near the centre or at a wall, released from up to 60 mm above the floor. Like a
        policy's placements, some are a few millimetres off: pressed into the wall (gap down to
        -6 mm) or into the floor (down to -4 mm), so the can starts its fall overlapping."""
        against_wall = bool(rng.random() < 0.5)
        if against_wall:
            reach = BASKET_INNER / 2 - CAN_RADIUS - rng.uniform(-0.006, 0.008)
            side = rng.integers(4)
            along = rng.uniform(-0.02, 0.02)
            xy = np.array([[reach, along], [-reach, along], [along, reach], [along, -reach]])[side]
        else:
            xy = rng.uniform(-0.015, 0.015, 2)
        drop = rng.uniform(-0.004, 0.060)
        z = FLOOR_PIECE[2] + CAN_HEIGHT / 2 + drop
        yaw = rng.uniform(-np.pi, np.pi) / CAN_WEDGES  # every orientation of the can's pieces, by symmetry
        heading = rng.uniform(0, 2 * np.pi)
        drift = rng.uniform(0.0, 0.3) * np.array([np.cos(heading), np.sin(heading)])
        lag = int(rng.integers(0, OPEN))
        return cls(np.asarray(home, float), np.array([xy[0], xy[1], z]), float(yaw), drift, lag, against_wall)

    def action(self, step: int, closed: float, dt: float = 0.04) -> np.ndarray:
        """Gripper target ``[x, y, z, yaw, opening left, opening right]`` at env step ``step``
        (``dt`` s per step)."""
        carry = np.array([self.target[0], self.target[1], self.home[2]])
        t = step
        if t < HOLD:
            return np.array([*self.home, 0.0, closed, closed])
        t -= HOLD
        if t < MOVE:
            s = (t + 1) / MOVE
            return np.array([*_lerp(self.home, carry, s), self.yaw * s, closed, closed])
        t -= MOVE
        if t < LOWER:
            return np.array([*_lerp(carry, self.target, (t + 1) / LOWER), self.yaw, closed, closed])
        t -= LOWER
        opening = OPEN + self.lag
        released = self.target + np.array([*self.drift * opening * dt, 0.0])
        if t < opening:
            s = (t + 1) / opening
            first = closed + (OPEN_WIDTH - closed) * min((t + 1) / OPEN, 1.0)
            second = closed + (OPEN_WIDTH - closed) * min(max(t + 1 - self.lag, 0) / OPEN, 1.0)
            return np.array([*_lerp(self.target, released, s), self.yaw, first, second])
        t -= opening
        lifted = released + np.array([0.0, 0.0, 0.12])
        return np.array([*_lerp(released, lifted, min((t + 1) / LIFT, 1.0)), self.yaw, OPEN_WIDTH, OPEN_WIDTH])


def _lerp(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    return a + (b - a) * s


def can_at_rest_inside(position: np.ndarray, velocity: np.ndarray) -> bool:
    """Success: the can is inside the basket (centred at the origin) and nearly at rest."""
    return inside_basket(position, np.zeros(3)) and float(np.linalg.norm(velocity)) < 0.05

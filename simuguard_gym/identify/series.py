"""The measured data: a time series of wrench and pose, from a CSV file or from a simulation.

CSV columns (a header row names them; order free, extra columns ignored):

=========  ==============================================================
t          time in seconds, strictly increasing, evenly spaced
fx fy fz   force applied to the body, N, world frame
tx ty tz   torque applied to the body about the wrench point, N m, world frame
x y z      position of the body frame's origin, m, world frame
qw qx qy qz  orientation of the body frame, unit quaternion (world <- body)
=========  ==============================================================
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

COLUMNS = ("t", "fx", "fy", "fz", "tx", "ty", "tz", "x", "y", "z", "qw", "qx", "qy", "qz")


class SeriesError(ValueError):
    """The measured data can't be used; the message says where and why."""


@dataclass(frozen=True)
class WrenchPoseSeries:
    """Samples k = 0..N-1: time t (N,), force and torque (N, 3), position (N, 3), quaternion (N, 4).

    The wrench of sample k acts from t[k] to t[k+1] (a controller's zero-order hold).

    Example:
        >>> import numpy as np
        >>> n = 5
        >>> s = WrenchPoseSeries(np.arange(n) * 0.002, np.zeros((n, 3)), np.zeros((n, 3)),
        ...                      np.zeros((n, 3)), np.tile([1.0, 0, 0, 0], (n, 1)))
        >>> s.dt
        0.002
    """

    t: np.ndarray
    force: np.ndarray
    torque: np.ndarray
    position: np.ndarray
    quaternion: np.ndarray
    #: optional exact velocities (N, 6) where a simulator provides them: the frame origin's
    #: world-frame linear velocity and the body-frame angular velocity (a free joint's qvel)
    velocity: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = np.asarray(self.t, float)
        n = t.shape[0] if t.ndim == 1 else -1
        if n < 3:
            raise SeriesError(f"need a 1-D time column of at least 3 samples, got shape {t.shape}")
        for name, width in (("force", 3), ("torque", 3), ("position", 3), ("quaternion", 4)):
            a = np.asarray(getattr(self, name), float)
            if a.shape != (n, width):
                raise SeriesError(f"{name} must have shape ({n}, {width}), got {a.shape}")
            object.__setattr__(self, name, a)
        object.__setattr__(self, "t", t)
        if self.velocity is not None:
            v = np.asarray(self.velocity, float)
            if v.shape != (n, 6):
                raise SeriesError(f"velocity must have shape ({n}, 6), got {v.shape}")
            object.__setattr__(self, "velocity", v)
        self.validate()

    def validate(self) -> None:
        for name in ("t", "force", "torque", "position", "quaternion"):
            a = getattr(self, name)
            bad = ~np.isfinite(a).reshape(len(self.t), -1).all(axis=1)
            if bad.any():
                k = int(np.argmax(bad))
                raise SeriesError(f"{name} is not finite (NaN or inf) at sample {k} (t={self.t[k]!r})")
        dt = np.diff(self.t)
        if np.any(dt <= 0):
            k = int(np.argmax(dt <= 0)) + 1
            raise SeriesError(f"time is not strictly increasing at sample {k}: t={self.t[k - 1]!r} then {self.t[k]!r}")
        if np.max(np.abs(dt - dt.mean())) > 0.01 * dt.mean():
            k = int(np.argmax(np.abs(dt - dt.mean()))) + 1
            raise SeriesError(f"samples must be evenly spaced (dt {dt.mean():.6g} s on average, {dt[k - 1]:.6g} s "
                              f"before sample {k}); resample the data first")
        norm = np.linalg.norm(self.quaternion, axis=1)
        off = np.abs(norm - 1.0) > 1e-3
        if off.any():
            k = int(np.argmax(off))
            raise SeriesError(f"quaternion at sample {k} is not unit (norm {norm[k]:.6g}); expected qw qx qy qz "
                              "of a rotation")

    def __len__(self) -> int:
        return len(self.t)

    @property
    def dt(self) -> float:
        return float(np.round(np.mean(np.diff(self.t)), 12))

    @property
    def poses(self) -> np.ndarray:
        """(N, 7): position and quaternion."""
        return np.concatenate([self.position, self.quaternion], axis=1)

    @property
    def wrench(self) -> np.ndarray:
        """(N, 6): force and torque."""
        return np.concatenate([self.force, self.torque], axis=1)

    def slice(self, start: int, stop: int) -> "WrenchPoseSeries":
        return WrenchPoseSeries(self.t[start:stop], self.force[start:stop], self.torque[start:stop],
                                self.position[start:stop], self.quaternion[start:stop],
                                None if self.velocity is None else self.velocity[start:stop])

    def to_csv(self, path: str | Path) -> None:
        data = np.column_stack([self.t, self.force, self.torque, self.position, self.quaternion])
        np.savetxt(path, data, delimiter=",", header=",".join(COLUMNS), comments="", fmt="%.10g")


def load_csv(path: str | Path) -> WrenchPoseSeries:
    """Read a CSV of :data:`COLUMNS`; raises :class:`SeriesError` naming the problem."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise SeriesError(f"{path}: {e.strerror}") from None
    if not rows:
        raise SeriesError(f"{path}: empty file")
    header = [h.strip().lower() for h in rows[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise SeriesError(f"{path}: missing column(s) {', '.join(missing)}; need {' '.join(COLUMNS)}")
    index = [header.index(c) for c in COLUMNS]
    values = np.empty((len(rows) - 1, len(COLUMNS)))
    for r, row in enumerate(rows[1:]):
        try:
            values[r] = [float(row[i]) for i in index]
        except (ValueError, IndexError):
            raise SeriesError(f"{path}: line {r + 2} has a missing or non-numeric value") from None
    try:
        return WrenchPoseSeries(values[:, 0], values[:, 1:4], values[:, 4:7], values[:, 7:10], values[:, 10:14])
    except SeriesError as e:
        raise SeriesError(f"{path}: {e}") from None

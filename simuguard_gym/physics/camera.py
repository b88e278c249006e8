"""What a video or a frame check needs of a camera on an engine's state (numpy only)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Camera(Protocol):
    """A camera on an adapter's current state (see :class:`Renders`)."""

    height: int
    width: int

    def render(self) -> np.ndarray:
        """The frame of the current state: RGB, uint8, (height, width, 3)."""

    def body_position(self, name: str) -> np.ndarray | None:
        """Where body ``name`` is now (None: no such body)."""

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixel (column, row) of world points (n, 3) in the frame last rendered; NaN behind it."""

    def close(self) -> None: ...

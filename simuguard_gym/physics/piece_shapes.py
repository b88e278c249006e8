"""What each collision piece is to its engine, beyond its vertices: kind, size, frame and offsets.

The false-contact check needs only a piece's vertices (:class:`~simuguard_gym.detection.
false_contact.CollisionPieces`); rebuilding an onset pair outside its scene (``simuguard trace``)
needs the piece as the engine had it: a primitive's kind and size, its pose in its body's frame,
and the contact and rest offsets that decide when the engine reports it. Kinds and ``size``
(metres): ``convex`` nothing (its vertices, in the body frame, are in the collision pieces);
``box`` half extents; ``sphere`` radius; ``capsule`` and ``cylinder`` radius and half length
along the shape's own x axis (PhysX's convention); ``plane`` nothing (its normal is the shape's x
axis); ``other`` a shape the rebuild does not know (a triangle mesh).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PIECE_KINDS = ("convex", "box", "sphere", "capsule", "cylinder", "plane", "other")


@dataclass(frozen=True)
class PieceShapes:
    """Per collision piece (the ids of the recording's ``contact_pieces``): ``kind``, ``size`` (n,
    3; unused entries 0), ``local_pose`` (n, 7: position, quaternion w x y z, in the body frame),
    ``contact_offset`` and ``rest_offset`` (n,).

    >>> import numpy as np
    >>> shapes = PieceShapes(("box",), np.array([[.01, .01, .02]]), np.array([[0, 0, 0, 1, 0, 0, 0.]]),
    ...                      np.array([.01]), np.array([0.]))
    >>> PieceShapes.from_dict(shapes.to_dict()).kind
    ('box',)
    """

    kind: tuple[str, ...]
    size: np.ndarray
    local_pose: np.ndarray
    contact_offset: np.ndarray
    rest_offset: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.kind)
        unknown = sorted(set(self.kind) - set(PIECE_KINDS))
        if unknown:
            raise ValueError(f"piece kinds must be among {', '.join(PIECE_KINDS)}, got {', '.join(unknown)}")
        if (np.shape(self.size) != (n, 3) or np.shape(self.local_pose) != (n, 7)
                or np.shape(self.contact_offset) != (n,) or np.shape(self.rest_offset) != (n,)):
            raise ValueError(f"piece shapes of {n} pieces need sizes (n, 3), local poses (n, 7) and offsets (n,)")

    def __len__(self) -> int:
        return len(self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": bytes(PIECE_KINDS.index(k) for k in self.kind),
                "size": np.asarray(self.size, "<f8").tobytes(),
                "local_pose": np.asarray(self.local_pose, "<f8").tobytes(),
                "contact_offset": np.asarray(self.contact_offset, "<f8").tobytes(),
                "rest_offset": np.asarray(self.rest_offset, "<f8").tobytes()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PieceShapes":
        """Read :meth:`to_dict`'s map; ValueError where its parts disagree (a damaged header)."""
        try:
            codes = bytes(d["kind"])
            if any(c >= len(PIECE_KINDS) for c in codes):
                raise ValueError(f"piece kind codes must be below {len(PIECE_KINDS)}")
            return cls(tuple(PIECE_KINDS[c] for c in codes), np.frombuffer(d["size"], "<f8").reshape(-1, 3),
                       np.frombuffer(d["local_pose"], "<f8").reshape(-1, 7), np.frombuffer(d["contact_offset"], "<f8"),
                       np.frombuffer(d["rest_offset"], "<f8"))
        except (KeyError, TypeError) as error:
            raise ValueError(f"piece_shapes must hold kind, size, local_pose, contact_offset and rest_offset as bytes "
                             f"({error})") from None

"""Detection on a stored recording: :func:`detect` and the :class:`DetectionReport` it returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from simuguard_gym.detection.config import DetectorConfig
from simuguard_gym.detection.detector import ArtifactDetector
from simuguard_gym.detection.false_contact import CollisionPieces
from simuguard_gym.physics.contacts import ContactPairs
from simuguard_gym.recording.reader import Recording, load_recording
from simuguard_gym.task_spec import task_bodies

#: Substeps fed to the detector at once: large enough to amortise numpy calls, small enough to
#: keep the temporaries of a 200k-substep episode small.
BATCH_SUBSTEPS = 8192


@dataclass
class DetectionReport:
    """What the detector found in one episode, with the config it used.

    ``events`` are all events confirmed by the contact-ejection stage, each with the verdict of
    the gravity and carrier stages; ``artifacts`` those that passed all three.
    """

    config: DetectorConfig
    events: list[dict[str, Any]]
    flags: list[dict[str, Any]]
    substeps: int
    substep_dt: float
    path: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["artifact"]]

    @property
    def artifact(self) -> bool:
        return bool(self.artifacts)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "config": self.config.to_dict(), "substeps": self.substeps,
                "substep_dt": self.substep_dt, "artifact": self.artifact, "events": self.events,
                "flags": self.flags, "notes": self.notes}


def detect(recording: Recording | str | os.PathLike[str], config: DetectorConfig | None = None) -> DetectionReport:
    """Run the detector over a stored episode.

    ``config=None`` uses the config written into the recording by the ArtifactMonitor that ran
    with it, if any, else the defaults, so that the offline pass gives the online events exactly.

    >>> import gymnasium as gym, tempfile
    >>> from simuguard_gym import RecordPhysics, detect
    >>> env = RecordPhysics(gym.make("Pusher-v5"), tempfile.mkdtemp())
    >>> _ = env.reset(seed=0)
    >>> for _ in range(20):
    ...     _ = env.step(env.action_space.sample())
    >>> env.close()
    >>> report = detect(env.paths[-1])
    >>> report.substeps, report.artifact
    (100, False)
    """
    rec = recording if isinstance(recording, Recording) else load_recording(recording)
    path = str(rec.path) if rec.path is not None else None
    notes = []
    if config is None:
        stored = rec.header.get("detector_config")
        config = DetectorConfig.from_dict(stored) if stored else DetectorConfig()
        notes.append("config from the recording" if stored else "default config")
    columns = rec.columns
    missing = [name for name in ("body_pose", "body_vel", "contact_count", "contact_bodies", "contact_speed")
               if name not in columns]
    if rec.substeps and missing:
        raise ValueError(f"{path or 'recording'}: has no contact data to detect from (missing columns: "
                         f"{', '.join(missing)})")
    for key in ("initial_body_pose", "initial_body_vel", "bodies", "tracked", "substep_dt"):
        if key not in rec.header:
            raise ValueError(f"{path or 'recording'}: header lacks {key!r}; it was not written by RecordPhysics")
    pieces = rec.header.get("collision_pieces")
    detector = ArtifactDetector(rec.bodies, rec.tracked, rec.substep_dt, config=config, gravity=rec.gravity,
                                initial_pose=rec.initial_body_pose, initial_vel=rec.initial_body_vel,
                                pieces=CollisionPieces.from_dict(pieces) if pieces else None,
                                stage=rec.header.get("stage"), task_bodies=task_bodies(rec.header.get("task_spec")))
    if rec.substeps:
        offsets = rec.contact_offsets()
        for lo in range(0, rec.substeps, BATCH_SUBSTEPS):
            hi = min(lo + BATCH_SUBSTEPS, rec.substeps)
            a, b = offsets[lo], offsets[hi]
            contacts = ContactPairs(counts=columns["contact_count"][lo:hi],
                                    **{f: columns[f"contact_{f}"][a:b] for f in ContactPairs.COLUMNS})
            detector.feed(columns["body_pose"][lo:hi], columns["body_vel"][lo:hi], contacts)
    detector.finish()
    if not rec.complete:
        notes.append("partial recording: the episode's last substeps are missing")
    return DetectionReport(config, detector.events, detector.flags, rec.substeps, rec.substep_dt, path, notes)

"""Contact-artifact detection (SimuGuard 3.3): numpy only, no simulator imports.

:class:`DetectorConfig` holds the thresholds, :class:`ArtifactDetector` runs the three stages
incrementally (online, one batch per env step), :func:`detect` runs them over a recording.
"""

from simuguard_gym.detection.config import DetectorConfig
from simuguard_gym.detection.detector import ArtifactDetector
from simuguard_gym.detection.offline import DetectionReport, detect

__all__ = ["ArtifactDetector", "DetectionReport", "DetectorConfig", "detect"]

"""The Gymnasium wrappers: thin, they wire an engine adapter to the numpy-only core."""

from simuguard_gym.wrappers.artifact_monitor import ArtifactMonitor
from simuguard_gym.wrappers.depenetration_rerun import DepenetrationRerun
from simuguard_gym.wrappers.param_identify import ParamIdentify
from simuguard_gym.wrappers.record_physics import RecordPhysics

__all__ = ["ArtifactMonitor", "DepenetrationRerun", "ParamIdentify", "RecordPhysics"]

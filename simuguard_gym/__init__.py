"""simuguard-gym: find the failures of a simulated robot evaluation that were the simulator's fault.

Public API: the wrappers, recordings, replay and detection. Everything else lives in subpackages.
"""

__version__ = "0.1.0"

from simuguard_gym.dependencies import check_mujoco  # noqa: E402
from simuguard_gym.headless import choose_mujoco_gl  # noqa: E402

choose_mujoco_gl()  # before anything imports mujoco: cameras render without a display

check_mujoco()  # before anything imports mujoco: a broken install gets its cause and its fix

from simuguard_gym.attach import BenchmarkEnv, attach  # noqa: E402
from simuguard_gym.detection import DetectionReport, DetectorConfig, detect  # noqa: E402
from simuguard_gym.recording.reader import Recording, load_recording  # noqa: E402
from simuguard_gym.replay.replay import ReplayResult, replay  # noqa: E402
from simuguard_gym.task_spec import TaskSpec  # noqa: E402
from simuguard_gym.wrappers.artifact_monitor import ArtifactMonitor  # noqa: E402
from simuguard_gym.wrappers.depenetration_rerun import DepenetrationRerun  # noqa: E402
from simuguard_gym.wrappers.param_identify import ParamIdentify  # noqa: E402
from simuguard_gym.wrappers.record_physics import RecordPhysics  # noqa: E402

__all__ = ["ArtifactMonitor", "BenchmarkEnv", "attach", "DepenetrationRerun", "ParamIdentify", "DetectionReport", "DetectorConfig", "RecordPhysics", "Recording", "ReplayResult",
           "TaskSpec", "detect", "load_recording", "replay", "__version__"]

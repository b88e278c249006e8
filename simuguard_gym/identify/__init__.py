"""Parameter identification of rigid bodies (RigPI): mass, centre of mass, inertia and friction
from wrench and pose series, refined through MuJoCo simulation."""

from simuguard_gym.identify.fit import AXIA80_RESOLUTION, identify
from simuguard_gym.identify.prior import VLM_PROMPT, VLM_SCHEMA, GeometryPrior, Prior, VlmPrior
from simuguard_gym.identify.problem import Joint, Problem, Support
from simuguard_gym.identify.result import IdentificationResult
from simuguard_gym.identify.series import COLUMNS, SeriesError, WrenchPoseSeries, load_csv
from simuguard_gym.identify.shapes import Shape, parse_shape

__all__ = ["identify", "AXIA80_RESOLUTION", "GeometryPrior", "Prior", "VlmPrior", "VLM_PROMPT", "VLM_SCHEMA",
           "Joint", "Problem", "Support", "IdentificationResult", "WrenchPoseSeries", "load_csv", "COLUMNS",
           "SeriesError", "Shape", "parse_shape"]

"""A recording's stored MuJoCo model as a scene to replay in: no benchmark, no env code.

A recording's substeps re-apply every write the env made (actuation, state it set) and MuJoCo's
step is a function of the model and the integration state alone, so the compiled model the
recording names in its model store (:mod:`simuguard_gym.recording.model_store`) is all a replay
needs. :class:`StoredScene` holds that model and one ``MjData``; a replay resets it, writes the
recorded episode's model changes and initial state into it, and drives its substeps as the env
did. It is never stepped as an env (there are no actions): what the env computed from them is in
the recording.

A compiled model is MuJoCo's own binary format, which only the MuJoCo version that wrote it
reads: another version is named and refused, never replayed.

>>> import mujoco, numpy as np
>>> model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><freejoint/><geom size=".1"/></body>'
...                                        '</worldbody></mujoco>')
>>> mjb = np.empty(mujoco.mj_sizeModel(model), np.uint8)
>>> mujoco.mj_saveModel(model, None, mjb)
>>> from simuguard_gym.engines import mujoco_model
>>> scene = StoredScene(mjb.tobytes(), mujoco_model.fingerprint(model), mujoco.__version__)
>>> scene.reset()[0].shape, scene.model.ngeom
((0,), 1)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from simuguard_gym.engines import mujoco_geometry, mujoco_model
from simuguard_gym.recording.format import RecordingError


class StoredScene(gym.Env):  # type: ignore[type-arg]
    """A stored compiled model and its ``MjData`` (``model``, ``data``), seen as an env by the
    replay: ``reset`` resets the data, ``step`` is refused.

    ``recorded_version`` is the MuJoCo version the recording was made with; the model must give
    ``fingerprint`` (its physics arrays' fingerprint, as the recording's header names it).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = gym.spaces.Box(-np.inf, np.inf, (0,))
    action_space = gym.spaces.Box(-np.inf, np.inf, (0,))

    def __init__(self, mjb: bytes, fingerprint: str, recorded_version: object) -> None:
        if recorded_version != mujoco.__version__:
            raise RecordingError(f"the recording's model was compiled by MuJoCo {recorded_version}, and only that "
                                 f"version loads it; this is MuJoCo {mujoco.__version__} (install "
                                 f"mujoco=={recorded_version} to replay it from the file)")
        try:
            self.model = mujoco_geometry.model_from_bytes(mjb)
        except ValueError as error:
            raise RecordingError(f"the recording's stored model does not load: {error}") from None
        found = mujoco_model.fingerprint(self.model)
        if found != fingerprint:
            raise RecordingError(f"the recording's stored model is not the one it names: fingerprint {found}, "
                                 f"named {fingerprint}")
        self.data = mujoco.MjData(self.model)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        return np.zeros(0), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        raise TypeError("a stored scene replays a recording's substeps; it takes no actions")

"""A MuJoCo onset contact against MuJoCo's own distance between its geoms at the recorded poses:
a real overlap, or a contact the geometry does not have."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from simuguard_gym.detection.false_contact import GAP_TOLERANCE
from simuguard_gym.recording.reader import Recording

REAL_OVERLAP = "real overlap: the geoms are as deep in each other as MuJoCo reported"
OTHER_DEPTH = "real overlap, of another depth than MuJoCo reported"
NO_SUCH_CONTACT = "a contact the geometry does not have: the geoms are apart"
NO_PENETRATION = "no penetration reported"


def model_of(rec: Recording, env_fn: Callable[[], Any] | None = None) -> Any:
    """The recording's MuJoCo model: the model stored with it, with the episode's recorded model
    changes written (where no ``env_fn`` is given), else the env rebuilt (by ``env_fn()`` where
    given, as a replay rebuilds it) and reset with the recorded seed (what a replay starts from)."""
    from simuguard_gym.engines import adapter_for
    from simuguard_gym.engines.mujoco import MujocoAdapter
    from simuguard_gym.engines.mujoco_geometry import model_from_bytes
    from simuguard_gym.recording.model_store import model_file_entry
    from simuguard_gym.replay.rebuild import build_env, stored_scene
    from simuguard_gym.replay.replay import Prepared, prepare

    if env_fn is None and model_file_entry(rec.header) is not None:
        try:
            prepared = prepare(stored_scene(rec), rec, None, [])
        except ValueError:  # not beside the file, or another MuJoCo version: the env rebuilt, as without one
            prepared = None
        if isinstance(prepared, Prepared) and isinstance(prepared.adapter, MujocoAdapter):
            return prepared.adapter.model
    if rec.header.get("model_mjb"):  # files from before the model store kept the MJB in the header
        return model_from_bytes(rec.header["model_mjb"])
    env = build_env(rec, env_fn)
    try:
        env.reset(seed=rec.header.get("seed"), options=rec.header.get("options"))
        return adapter_for(env).model
    finally:
        env.close()


def trace_mujoco(rec: Recording, contact: dict[str, Any], name: str, started: float, model: Any = None,
                 env_fn: Callable[[], Any] | None = None) -> Any:
    """The trace of a MuJoCo contact (see :func:`simuguard_gym.trace.trace_contact`)."""
    from simuguard_gym.engines.mujoco_geometry import geom_distance
    from simuguard_gym.trace import TraceResult

    substep = int(contact["substep"])
    geoms = tuple(int(g) for g in contact["pieces"])
    reported = -float(contact["depth"])
    model = model_of(rec, env_fn) if model is None else model
    if any(not 0 <= g < model.ngeom for g in geoms):
        return TraceResult(name, substep, [], list(geoms), reported, None, "not_traceable",
                           f"not traceable: geoms {list(geoms)} are not in the model",
                           seconds=time.perf_counter() - started)
    bodies = [int(model.geom_bodyid[g]) for g in geoms]
    names = [rec.bodies.names[b] for b in bodies]
    poses: dict[int, np.ndarray] = {}
    for body in bodies:
        tracked = np.flatnonzero(rec.tracked == body)
        if len(tracked):
            col = int(tracked[0])
            poses[body] = (rec.columns["body_pose"][substep - 1, col] if substep > 0
                           else rec.initial_body_pose.reshape(-1, 7)[col])
        elif rec.bodies.kinds[body] != "static":
            return TraceResult(name, substep, names, list(geoms), reported, None, "not_traceable",
                               f"not traceable: body {rec.bodies.names[body]!r} moves but its poses are not recorded",
                               seconds=time.perf_counter() - started)
    distance, fromto = geom_distance(model, geoms, poses)
    direction = fromto[1] - fromto[0]
    norm = float(np.linalg.norm(direction))
    direction = direction / norm * np.sign(distance) if norm > 0 else np.asarray(contact.get("normal", (0, 0, 1.0)))
    if reported >= -GAP_TOLERANCE:
        label, verdict = "no_penetration", NO_PENETRATION
    elif distance > GAP_TOLERANCE:
        label, verdict = "no_such_contact", NO_SUCH_CONTACT
    elif abs(distance - reported) <= max(1e-4, 0.05 * abs(reported)):
        label, verdict = "real_overlap", REAL_OVERLAP
    else:
        label, verdict = "real_overlap", OTHER_DEPTH
    normal = np.asarray(contact.get("normal", (0.0, 0.0, 1.0)), float)
    alignment = float(normal @ direction / max(np.linalg.norm(normal), 1e-12))
    return TraceResult(name, substep, names, list(geoms), reported, distance, label, verdict,
                       separating_direction=direction.tolist(), normal_alignment=alignment,
                       normal_flipped=alignment < 0, history=1, seconds=time.perf_counter() - started,
                       notes=["MuJoCo's distance (mj_geomDistance) at the poses the substep began with"])

"""`simuguard demo`: the main job on the built-in can-into-basket task, end to end.

A scripted gripper places a 10 g can into a thin-walled basket over a range of seeds, with
RecordPhysics, ArtifactMonitor and DepenetrationRerun on: every episode is recorded, contact
artifacts are flagged as they happen, each episode with an artifact is rerun with one parameter
changed, and the run ends with the success-rate table (as run, replay-corrected, excluded,
bounds) and its report files.

With SAPIEN installed it runs PhysX 5.3.1 (seeds 100-119: seed 116 ends with the false contact
of SimuGuard Section 4.2); without, the MuJoCo twin with PhysX's finger squeeze, whose opening
fingers push the can out on some seeds (MuJoCo's own artifact).

A demo is an audit with the env's scripted expert: its directory holds the audit's manifest, and
:func:`audit_command` is the ``simuguard audit`` command that gives the same table.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSetup:
    engine: str
    env_id: str
    env_kwargs: dict[str, Any]
    seed_base: int
    intervention: str
    #: How often the artifact occurs in this scene, as measured (the command that measures it), so
    #: that a user reads the demo's 20 seeds against the rate.
    measured: str = ""


PHYSX = DemoSetup("physx", "simuguard_gym/PlaceCanBasket-v0", {}, 100, "depenetration=1.0",
                  "in this scene PhysX 5.3.1 throws the can out through a false contact in 1 of seeds 0-199 (116); on "
                  "the decomposed can and basket (PlaceCanBasketDecomposed-v0), on seeds never used in its development "
                  "(60000-60199), the scripted placement has a contact artifact in 6 of 200 (95% CI 1.4-6.4%), the can "
                  "pressed into a wall in 24 of 200 (8.2-17.2%); the paper, on RoboTwin's scene, 18 of 60 (20-43%); "
                  "the repaired GJK threshold leaves no false report (docs/tasks.md, "
                  "python benchmarks/decomposed_placements.py --seed-base 60000)")
MUJOCO = DemoSetup("mujoco", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", {"pad_kp": 800.0, "pad_timeconst": 0.02}, 0,
                   "timeconst=0.1")


def setup_for(engine: str = "auto") -> DemoSetup:
    if engine == "auto":
        engine = "physx" if importlib.util.find_spec("sapien") is not None else "mujoco"
    if engine == "physx":
        if importlib.util.find_spec("sapien") is None:
            raise ValueError("the PhysX demo needs SAPIEN: pip install 'simuguard-gym[sapien]'")
        return PHYSX
    if engine == "mujoco":
        return MUJOCO
    raise ValueError(f"engine must be auto, physx or mujoco, got {engine!r}")


def audit_command(setup: DemoSetup, seeds: int, out: str | Path) -> str:
    """The ``simuguard audit`` command that runs the demo's episodes and prints its table."""
    argv = ["simuguard", "audit", "--env", setup.env_id]
    if setup.env_kwargs:
        argv += ["--env-kwargs", json.dumps(setup.env_kwargs)]
    argv += ["--episodes", str(seeds), "--seed-base", str(setup.seed_base), "--policy", "scripted",
             "--intervention", setup.intervention, "--out", str(out)]
    return shlex.join(argv)


def run_demo(out: str | Path | None = None, seeds: int = 20, engine: str = "auto",
             progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> tuple[Path, DemoSetup]:
    """Run the demo's episodes into ``out`` (a new temporary directory by default)."""
    import simuguard_gym.envs  # noqa: F401 - registers the built-in tasks
    from simuguard_gym.audit import episode_name
    from simuguard_gym.wrappers.depenetration_rerun import DepenetrationRerun

    if seeds < 1:
        raise ValueError("need at least one seed")
    setup = setup_for(engine)
    from simuguard_gym.audit import AuditConfig, prepare_directory

    directory = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="simuguard-demo-"))
    if directory.exists() and any(directory.glob("*.msgpack")):
        raise ValueError(f"{directory} already holds recordings; give another --out")
    # The audit's manifest: the directory is the run of that audit (its command resumes nothing new).
    config = AuditConfig(setup.env_id, dict(setup.env_kwargs), seeds, setup.seed_base, "scripted", setup.intervention)
    prepare_directory(directory, config, False, shlex.split(audit_command(setup, seeds, directory)))
    env = DepenetrationRerun(gym.make(setup.env_id, **setup.env_kwargs), setup.intervention, directory=directory)
    try:
        for i in range(seeds):
            seed = setup.seed_base + i
            start = time.perf_counter()
            env.get_wrapper_attr("name_next")(episode_name(seed))  # named by seed, as an audit names them
            env.reset(seed=seed)
            terminated = truncated = False
            info: dict[str, Any] = {}
            while not (terminated or truncated):
                _, _, terminated, truncated, info = env.step(env.unwrapped.expert_action())
            ours = info.get("simuguard", {})
            summary = {"seed": seed, "success": info.get("success"), "artifact": ours.get("artifact", False),
                       "corrected_success": ours.get("corrected_success"),
                       "rerun_unscored": (ours.get("rerun") or {}).get("unscored"), "seconds": time.perf_counter() - start,
                       "events": ours.get("events", [])}
            logger.info("seed %d: success %s, artifact %s", seed, summary["success"], summary["artifact"])
            if progress is not None:
                progress(i + 1, seeds, summary)
    finally:
        env.close()
    return directory, setup

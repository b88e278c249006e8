"""The built-in MuJoCo tasks: PlaceCanBasket-MuJoCo-v0 and the detector's negatives."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor, RecordPhysics, load_recording, replay
from simuguard_gym.envs.can_basket_geometry import basket_pieces, can_pieces


def run(env, seed):
    env.reset(seed=seed)
    for _ in range(env.spec.max_episode_steps):
        *_, info = env.step(env.unwrapped.expert_action())
    return info


@pytest.mark.parametrize("name", ["simuguard_gym/PlaceCanBasket-MuJoCo-v0", "simuguard_gym/DropInBin-v0",
                                  "simuguard_gym/ShoveBasket-v0"])
def test_check_env(name):
    check_env(gym.make(name).unwrapped, skip_render_check=True)


def test_geometry_is_the_papers():
    """22 wedges for the can; a floor of 20x20x12 mm tiles and 60 wall blocks of 12x20x15 mm in 3 layers."""
    assert len(can_pieces()) == 22
    pieces = basket_pieces()
    sizes = sorted({tuple(np.round(np.ptp(p.vertices, axis=0) * 1000).astype(int)) for p in pieces})
    assert sizes == [(12, 20, 15), (20, 12, 15), (20, 20, 12)]
    assert sum(np.ptp(p.vertices, axis=0)[2] == 0.015 for p in pieces) == 60


def test_mujoco_placement_succeeds_and_replays(record_dir):
    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0"), record_dir))
    outcomes = [run(env, seed)["success"] for seed in range(6)]
    env.close()
    assert sum(outcomes) >= 5  # the scripted gripper places the can
    rec = load_recording(env.env.paths[0])
    assert rec.substeps == 900 and replay(rec).exact


@pytest.mark.skipif(tuple(int(x) for x in mujoco.__version__.split(".")[:2]) < (3, 9),
                    reason="measured on MuJoCo 3.9 and 4.0; MuJoCo 3.3's own solver ejects the can on this seed")
def test_the_physx_artifact_seed_is_clean_in_mujoco():
    """Seed 116 ends with a false-contact ejection in PhysX 5.3.1 (tests/test_sapien.py); the
    same placement in MuJoCo 3.9 and 4.0 rests in the basket."""
    env = ArtifactMonitor(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0"))
    info = run(env, 116)
    assert info["success"] and not info["simuguard"]["artifact"]


@pytest.mark.parametrize("name", ["simuguard_gym/DropInBin-v0", "simuguard_gym/ShoveBasket-v0"])
def test_negatives_have_no_artifact_after_all_stages(name):
    """Fast motion that gravity (drops) or a carrier (shoves) explains: flagged by the first
    stage, removed by the others, on 50 seeds."""
    env = ArtifactMonitor(gym.make(name))
    first_stage = removed = 0
    for seed in range(50):
        info = run(env, seed)
        env.detector.finish()
        assert not env.detector.artifacts, (seed, env.detector.artifacts)
        assert info["simuguard"]["artifact"] is False
        first_stage += len(env.detector.events)
        removed += sum(not e["artifact"] for e in env.detector.events)
    env.close()
    assert first_stage >= 10 and removed == first_stage  # the later stages did the work


@pytest.mark.skipif(int(mujoco.__version__.split(".")[0]) < 4,
                    reason="seed pinned on MuJoCo 4: in 3.9 the squeeze ejects the can on other seeds")
def test_mujoco_squeeze_artifact_is_undone_by_a_softer_contact(record_dir):
    """With PhysX's squeeze and MuJoCo's default contact, the opening fingers push the can out
    (seed 4): flagged, a failure. Rerun with a 0.1 s time constant for the can from 0.1 s before
    the onset: prefix bit-exact, the push slower, the placement a success."""
    from simuguard_gym.replay import rerun

    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0", pad_kp=800,
                                                 pad_timeconst=0.02), record_dir))
    info = run(env, 4)
    env.close()
    assert info["simuguard"]["artifact"] and not info["success"]
    (event,) = info["simuguard"]["events"]
    assert event["robot_contact"] and event["partner"].startswith("finger")
    result = rerun(info["simuguard"]["recording"], "timeconst=0.1")
    assert result.prefix_exact and result.recorded_success is False and result.success is True
    assert result.peak_speed < 0.7 * result.recorded_peak_speed

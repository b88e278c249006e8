"""`simuguard trace` on PhysX recordings: a reported contact rebuilt as two pieces moved through
their recorded poses, in the stock engine and in the repaired copy (subprocesses)."""

from __future__ import annotations

import json
import shutil

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("sapien")
if shutil.which("objdump") is None or shutil.which("nm") is None:
    pytest.skip("binutils (nm, objdump) not installed: no repaired copy to trace against", allow_module_level=True)

import sapien  # noqa: E402

import simuguard_gym.envs  # noqa: E402,F401
from simuguard_gym import ArtifactMonitor, RecordPhysics, detect, load_recording  # noqa: E402
from simuguard_gym.cli import main  # noqa: E402
from simuguard_gym.physx_repair import gjk_probe  # noqa: E402
from simuguard_gym.trace import targets, trace, trace_contact  # noqa: E402
from simuguard_gym.trace.physx import FALSE_CONTACT, REAL, repaired_copy  # noqa: E402
from simuguard_gym.trace.replayed import rebuilt_hulls  # noqa: E402

from pair_scenes import OVERLAP, TwoPieceEnv  # noqa: E402

ARTIFACT_SEED = 116  # PhysX 5.3.1 reports 20.6 mm between pieces 4.7 mm apart and throws the can


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    # where the default lies under XDG_CACHE_HOME=.../cache (the demo's test uses the default)
    return repaired_copy(tmp_path_factory.mktemp("physx") / "cache" / "simuguard-gym" / "physx-repaired")


@pytest.fixture(scope="module")
def placements(tmp_path_factory):
    directory = tmp_path_factory.mktemp("placements")
    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-v0"), directory))
    for seed in (ARTIFACT_SEED, 1):
        env.reset(seed=seed)
        for _ in range(90):
            *_, info = env.step(env.unwrapped.expert_action())
        assert info["simuguard"]["errors"] == []
    env.close()
    return directory, env.env.paths


def record_pairs(layout, directory, episodes=2):
    env = RecordPhysics(TwoPieceEnv(layout), directory)
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            *_, terminated, truncated, info = env.step(env.action_space.sample())
            done = terminated or truncated
        assert info["simuguard"]["errors"] == []
    env.close()
    return env.paths


def test_the_pinned_placement_is_a_false_contact_from_gjk(placements, repaired):
    directory, paths = placements
    rec = load_recording(paths[0])
    event = detect(rec).artifacts[0]
    (result,) = trace(rec, 0, repaired=repaired)
    assert result.substep == event["contact"]["substep"] and result.label == "false_contact"
    assert result.verdict == FALSE_CONTACT
    assert abs(result.stock["separation"] - result.recorded_separation) < 1e-5  # the report, reproduced
    assert result.recorded_separation < -0.015 and result.true_gap > 0.004
    assert result.repaired["separation"] == pytest.approx(result.true_gap, abs=1e-5)  # 5.4's GJK: the true gap
    assert result.normal_flipped
    shortest = result.shortest_history
    assert 1 < shortest < result.history
    (shorter,) = trace(rec, 0, history=shortest - 1, repaired=repaired)
    assert shorter.label == "not_reproduced"  # the report needs its history: bisection found the least
    (exact,) = trace(rec, 0, history=shortest, repaired=repaired)
    assert exact.label == "false_contact"
    assert result.seconds < 60


def test_the_deep_penetration_flag_of_a_false_contact_carries_its_label(placements):
    rec = load_recording(placements[1][0])
    flag = next(f for f in detect(rec).flags if f["kind"] == "deep_penetration")
    assert flag["false_contact"]["false"] >= 1
    assert flag["contact"]["false_contact"]["false_contact"] and flag["contact"]["depth"] == flag["max_depth"]


def test_the_pinned_sweep_recorded_under_record_physics(tmp_path, repaired, capsys):
    """gjk_probe's sweep: 18 mm reported between pieces 6 mm apart, only with 39 steps of history.
    Its env has no registered id: ``env_fn`` rebuilds it, for what its hulls were cooked from."""
    paths = record_pairs("sweep", tmp_path)
    rec = load_recording(paths[-1])
    assert rebuilt_hulls(rec)(0)[0] is None  # nothing names the env: its recorded vertices are re-cooked
    assert all(rebuilt_hulls(rec, TwoPieceEnv)(piece)[0] is not None for piece in (0, 1))
    assert main(["trace", str(paths[-1]), "--env-fn", "pair_scenes:TwoPieceEnv", "--repaired", str(repaired)]) == 0
    assert FALSE_CONTACT in capsys.readouterr().out
    results = trace(paths[-1], repaired=repaired)
    assert [r.label for r in results] == ["false_contact"]
    (result,) = results
    assert result.substep == len(gjk_probe.SWEEP) - 1
    assert abs(result.stock["separation"] - result.recorded_separation) < 1e-5
    assert result.true_gap == pytest.approx(0.00599, abs=1e-4) and result.repaired["separation"] > 0.005
    assert result.shortest_history == len(gjk_probe.SWEEP) - 1 and result.normal_flipped


@pytest.mark.parametrize("layout", ["overlap", "overlap_primitives"])
def test_a_real_overlap_keeps_its_depth_in_both_engines(tmp_path, repaired, layout):
    paths = record_pairs(layout, tmp_path)
    (result,) = trace(paths[-1], repaired=repaired)
    assert result.label == "real_penetration" and result.verdict == REAL
    assert result.true_gap == pytest.approx(result.recorded_separation, abs=2e-5)
    assert -result.recorded_separation > OVERLAP
    assert result.stock["separation"] == pytest.approx(result.repaired["separation"], abs=1e-6)


def test_a_contact_without_the_recorded_pieces_is_not_traceable(placements, repaired):
    rec = load_recording(placements[1][0])
    result = trace_contact(rec, {"substep": 10, "pieces": [0, 0], "depth": 0.01, "normal": [0, 0, 1]},
                           repaired=repaired)
    assert result.label == "not_traceable" and "same body" in result.verdict


def test_the_command_prints_the_verdict_and_the_report_shows_it(placements, repaired, capsys):
    directory, paths = placements
    assert main(["trace", str(paths[0]), "--event", "0", "--repaired", str(repaired)]) == 0
    assert FALSE_CONTACT in capsys.readouterr().out
    assert main(["trace", str(paths[0]), "--repaired", str(repaired), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["label"] == "false_contact"
    saved = json.loads((directory / (paths[0].name + ".trace.json")).read_text())
    assert [t["label"] for t in saved] == [line["label"] for line in lines]
    pytest.importorskip("matplotlib")
    assert main(["report", str(directory), "--out", str(directory / "out")]) == 0
    page = (directory / "out" / "report.html").read_text()
    assert "gone with the 5.4 threshold" in page and "false contact in the episode" in page
    assert main(["trace", str(paths[0]), "--history", "0"]) == 2


def test_a_false_contact_of_the_decomposed_scene_is_traced(tmp_path, repaired):
    """Seed 73 of PlaceCanBasketDecomposed-v0: PhysX 5.3.1 reports CoACD pieces 20 mm apart as 27 mm
    deep and throws the can; the repaired copy reports the gap."""
    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasketDecomposed-v0"), tmp_path))
    env.reset(seed=73)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    assert info["simuguard"]["errors"] == [] and info["simuguard"]["artifact"]
    env.close()
    (result,) = trace(env.env.paths[-1], 0, repaired=repaired)
    assert result.label == "false_contact" and result.true_gap > 0.01
    assert abs(result.stock["separation"] - result.recorded_separation) < 1e-5
    assert result.repaired["separation"] is None or result.repaired["separation"] > 0


@pytest.mark.parametrize("seed, why", [
    (60132, "gave all 48 of the scene's earlier reports"),  # the pair's history recorded, and matched
    (60017, "holds no earlier report of this piece pair"),  # another pair was always the deepest
])
def test_a_report_the_rebuild_does_not_reproduce_says_what_its_recorded_history_shows(tmp_path, repaired, seed, why):
    """Two can-pressed-into-the-wall placements whose false contacts the rebuilt pair does not give:
    the trace compares the rebuild with the reports of the same piece pair the recording holds."""
    from simuguard_gym.envs.can_basket_task import POLICY_STYLES

    env = RecordPhysics(gym.make("simuguard_gym/PlaceCanBasketDecomposed-v0"), tmp_path)
    env.reset(seed=seed)
    style = np.random.default_rng([seed, 1 + POLICY_STYLES.index("press")])
    env.unwrapped.plan = env.unwrapped.plan.as_policy("press", style)
    for _ in range(90):
        env.step(env.unwrapped.expert_action())
    env.close()
    (result, *_) = trace(env.paths[-1], 0, repaired=repaired)
    assert result.label == "not_reproduced" and result.true_gap > 0.001
    assert any(why in note for note in result.notes), result.notes


def test_a_hull_physx_cooks_into_another_is_rebuilt_from_what_its_scene_cooked(tmp_path, repaired):
    """Seed 32 of the decomposed scene: PhysX 5.3.1 reports CoACD pieces 19 mm apart as 31.6 mm
    deep. Cooked again from its recorded vertices, a piece comes out another hull (PhysX's plane
    tolerance drops vertices of a cooked hull and reorders the rest) and the report does not come
    back; cooked from the points the env gave, as the scene cooked it, it does."""
    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasketDecomposed-v0"), tmp_path))
    env.reset(seed=32)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    assert info["simuguard"]["errors"] == [] and info["simuguard"]["artifact"]
    env.close()
    rec = load_recording(env.env.paths[-1])
    (onset,) = [r for r in trace(rec, repaired=repaired) if r.substep == 448]
    assert onset.label == "false_contact" and onset.stock["hulls_as_recorded"] == [True, True]
    assert abs(onset.stock["separation"] - onset.recorded_separation) < 1e-5 and onset.true_gap > 0.015
    contact = next(c for _, _, c in targets(rec) if c["substep"] == 448)
    recooked = trace_contact(rec, contact, repaired=repaired, hulls=lambda piece: (None, "the test withholds it"))
    assert recooked.label == "not_reproduced" and False in recooked.stock["hulls_as_recorded"]
    assert "the test withholds it" in recooked.verdict


def test_a_maniskill_robot_hulls_come_from_the_mesh_files_it_loaded(tmp_path):
    """ManiSkill3 builds the Panda's links from its collision meshes (URDF, SAPIEN's builders):
    the hulls' sources are those files, and cooked from them each is the recorded hull bit for
    bit, where cooking the recorded vertices again gives most of them another."""
    pytest.importorskip("mani_skill")
    from simuguard_gym.engines.sapien import headless
    from simuguard_gym.physx_repair.hull_sources import convex_shape, hull_sources

    headless()
    import mani_skill.envs  # noqa: F401

    env = RecordPhysics(gym.make("StackCube-v1", sim_backend="physx_cpu", obs_mode="state"), tmp_path)
    for seed in (0, 1):
        env.reset(seed=seed)
        *_, info = env.step(np.zeros(env.action_space.shape))
        assert info["simuguard"]["errors"] == []
    env.close()
    rec = load_recording(env.paths[-1])
    sources = [s for s in hull_sources(rec) if s is not None]
    assert len(sources) >= 8 and all(s["source"]["file"].endswith(".stl") for s in sources)
    recooked_differs = 0
    for found in sources:
        shape = convex_shape(found["source"], found["scale"])
        assert np.array_equal(np.asarray(shape.vertices, np.float32), np.asarray(found["cooked"], np.float32))
        body_frame = np.asarray(found["body_frame"], np.float32)
        again = sapien.physx.PhysxCollisionShapeConvexMesh(body_frame, np.ones(3, np.float32),
                                                           sapien.physx.PhysxMaterial(0.5, 0.5, 0.0))
        recooked_differs += not np.array_equal(np.asarray(again.vertices, np.float32), body_frame)
    assert recooked_differs >= len(sources) // 2


def test_a_maniskill_scene_of_primitives_is_traced(tmp_path, repaired):
    """A scene this project did not build: ManiSkill3's StackCube (box primitives, ManiSkill's own
    contact offsets and PhysX settings), cube A misplaced 8 mm into cube B by the evaluation's
    reset: a real penetration, its depth kept in both engines."""
    pytest.importorskip("mani_skill")
    from simuguard_gym.engines.sapien import headless

    headless()
    import mani_skill.envs  # noqa: F401

    class Misplaced(gym.Wrapper):
        def reset(self, **kwargs):
            out = self.env.reset(**kwargs)
            cubes = self.env.unwrapped
            pose = cubes.cubeB.pose.raw_pose[0].cpu().numpy().copy()
            pose[2] += 0.04 - 0.008  # half sizes 0.02: 8 mm into cube B
            cubes.cubeA.set_pose(sapien.Pose(pose[:3], pose[3:]))
            return out

    env = RecordPhysics(Misplaced(gym.make("StackCube-v1", sim_backend="physx_cpu", obs_mode="state")), tmp_path)
    for seed in (0, 1):
        env.reset(seed=seed)
        for _ in range(5):  # cube A resting on B is StackCube's success: the episode may end early
            *_, terminated, truncated, info = env.step(np.zeros(env.action_space.shape))
            if terminated or truncated:
                break
        assert info["simuguard"]["errors"] == []
    env.close()
    (result,) = trace(env.paths[-1], repaired=repaired)
    assert result.label == "real_penetration" and result.verdict == REAL
    assert result.recorded_separation == pytest.approx(-0.008, abs=1e-5)
    assert result.true_gap == pytest.approx(-0.008, abs=1e-5)
    assert load_recording(env.paths[-1]).header["piece_shapes"]  # the primitives, as ManiSkill made them


def test_a_teleport_starts_the_pair_history_after_it(tmp_path, repaired):
    """An env that sets a body's pose clears PhysX's contact caches: the rebuild's history starts
    after the write, and a report right after one is not traceable (its poses are not recorded)."""
    env = RecordPhysics(TwoPieceEnv("overlap"), tmp_path)
    env.reset(seed=0)
    for k in range(12):
        if k == 5:
            pose = env.unwrapped.mover.entity_pose
            env.unwrapped.mover.set_pose(sapien.Pose(pose.p + np.float32([0, 0, -1e-4]), pose.q))
        *_, info = env.step(env.action_space.sample())
    assert info["simuguard"]["errors"] == []
    env.close()
    rec = load_recording(env.paths[-1])
    written = int(np.flatnonzero(rec.columns["start_mask"] & 1)[0])
    assert written == 5
    contact = {"substep": 10, "pieces": [0, 1], "depth": 0.0095, "normal": [0, 0, 1]}
    assert trace_contact(rec, contact, repaired=repaired).history == 10 - written
    assert trace_contact(rec, dict(contact, substep=written), repaired=repaired).label == "not_traceable"


def test_a_false_contact_with_a_gripper_link_is_traced_from_the_replay(tmp_path, repaired):
    """Seed 44 of the decomposed scene: PhysX reports a finger 8.5 mm inside the can while their
    pieces are 5 mm apart. A recording does not hold the links' poses; the trace reads them from
    the episode's bit-exact replay."""
    env = RecordPhysics(gym.make("simuguard_gym/PlaceCanBasketDecomposed-v0"), tmp_path)
    env.reset(seed=44)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    assert info["simuguard"]["errors"] == []
    env.close()
    results = trace(env.paths[-1], repaired=repaired)
    finger = [r for r in results if "finger_right" in r.bodies]
    assert finger and finger[0].label == "false_contact" and finger[0].true_gap > 0.004
    assert abs(finger[0].stock["separation"] - finger[0].recorded_separation) < 1e-5


def test_the_physx_demo_says_how_often_and_traces_its_artifact(tmp_path, repaired, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(repaired.parent.parent))  # the copy the other tests made
    assert main(["demo", "--engine", "physx", "--episodes", "17", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "how often: in this scene PhysX 5.3.1 throws the can out through a false contact in 1 of seeds 0-199" in out
    assert "never used in its development (60000-60199)" in out  # counts that compare with the paper's
    assert "trace, seed_000116: event 0 (can, artifact): " + FALSE_CONTACT in out
    if (tmp_path / "demo" / "report.html").exists():  # the report extra
        assert "gone with the 5.4 threshold" in (tmp_path / "demo" / "report.html").read_text()

"""Reruns with one parameter changed: prefix verified bit for bit, outcome scored by the env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes
from simuguard_gym import ArtifactMonitor, DepenetrationRerun, RecordPhysics, load_recording
from simuguard_gym.cli import main
from simuguard_gym.replay import Intervention, rerun
from simuguard_gym.scoring import Episode, score


def can_in_place(env) -> bool:
    """Success for the can created inside the floor: it ends near where it was put, at rest."""
    data = env.unwrapped.data
    return bool(np.linalg.norm(data.qpos[:2]) < 0.02 and data.qpos[2] < 0.05 and np.linalg.norm(data.qvel[:3]) < 0.05)


@pytest.fixture(scope="module")
def inside_floor(tmp_path_factory):
    return load_recording(scenes.record_scene(scenes.created_inside_floor, tmp_path_factory.mktemp("rerun"),
                                              depth=0.03))


def test_timeconst_rerun_lowers_the_ejection_in_mujoco(inside_floor):
    """The can 30 mm inside the floor with a 2-substep time constant: with MuJoCo's default
    20 ms from the start, it comes out slowly and stays."""
    result = rerun(inside_floor, "timeconst=0.02@can", switch="start", success_fn=can_in_place)
    assert result.prefix_exact and result.switch_substep == 0 and result.substeps > 0
    assert result.peak_speed < 0.7 * result.recorded_peak_speed
    assert result.success is True
    assert result.changes == [{"parameter": "geom_solref[0]", "element": "geom #1", "before": 0.004, "after": 0.02}]
    with pytest.raises(ValueError, match=r"changes nothing: geom_solref\[0\] of geom #1 is 0.004"):
        rerun(inside_floor, "timeconst=0.004@can", switch="start", success_fn=can_in_place)


def test_damping_keeps_the_stiffness_and_stops_at_mujocos_floor():
    """damping=N: the time constant / N and the damping ratio x N (MuJoCo's stiffness, 1 / (dmax
    T dampratio)^2, stays), floored at 2 dt and said so; a geom in the direct solref format and
    one already at the floor are left as they are."""
    import mujoco

    from simuguard_gym.engines.mujoco import MujocoAdapter

    model = mujoco.MjModel.from_xml_string(
        '<mujoco><option timestep="0.002"/><worldbody><geom type="plane" size="1 1 .1"/>'
        '<body name="box"><freejoint/><geom size=".05" solref="0.02 1"/><geom size=".05" solref="-2000 -20"/>'
        '<geom size=".05" solref="0.004 1"/></body></worldbody></mujoco>')
    adapter = MujocoAdapter(model, mujoco.MjData(model))
    box = np.array([model.body("box").id])
    note = adapter.apply_intervention("damping", 5.0, box)
    np.testing.assert_allclose(model.geom_solref[1:], [[0.004, 5.0], [-2000, -20], [0.004, 1.0]])
    assert model.geom_solmix[1:].tolist() == [1000.0, 1.0, 1.0]
    assert "1 geom(s) of the bodies use MuJoCo's direct solref" in note
    model.geom_solref[1] = (0.02, 1.0)
    note = adapter.apply_intervention("damping", 10.0, box)  # 0.002 would be under the floor of 0.004
    np.testing.assert_allclose(model.geom_solref[1], [0.004, 5.0])
    assert "2 geom(s) is at most 5 times, not 10: their time constant reached MuJoCo's floor of 2 dt" in note


@pytest.mark.parametrize("text", ["timeconst=inf", "depenetration=inf", "timeconst=nan", "iterations=0.5",
                                  "iterations=0", "mass=can:-1"])
def test_values_that_are_no_physics_are_refused(text):
    with pytest.raises(ValueError, match="finite positive|whole number"):
        Intervention.parse(text)


def test_timeconst_below_two_substeps_is_floored_and_said(inside_floor):
    result = rerun(inside_floor, "timeconst=0.001", switch="start", success_fn=can_in_place)
    assert any("floors contact time constants at 2 dt" in note for note in result.notes)


def test_altered_prefix_is_unverified_and_not_counted(inside_floor):
    rec = inside_floor
    onset = rec.footer["detector"]["events"][0]["onset_substep"]
    assert onset >= 1
    rec.columns["fingerprint"][0] ^= 1  # the recording disagrees with physics before the switch
    result = rerun(rec, "timeconst=0.02@can", switch="before_onset", lead=0.0, success_fn=can_in_place)
    rec.columns["fingerprint"][0] ^= 1
    assert not result.prefix_exact and result.divergence.substep == 0
    episode = Episode(success=False, artifact=True, rerun_success=result.success, rerun_verified=result.verified)
    assert score([episode]).replay_corrected is None  # no verified rerun: nothing to correct with


class CanWithInfoSuccess(gym.Wrapper):
    """The can created inside the floor, as an env that reports success only in its step's info
    (``is_success``, as Gymnasium-Robotics does) and has no check method: the can is in place at
    rest and was never thrown above 4 cm on the way (it starts 3 cm inside the floor)."""

    def __init__(self):
        xml, _ = scenes.created_inside_floor(depth=0.03)
        super().__init__(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP,
                                  max_episode_steps=40))

    def reset(self, **kwargs):
        self.highest = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.highest = max(self.highest, float(self.env.unwrapped.data.qpos[2]))
        placed = can_in_place(self.env) and self.highest < 0.04
        return obs, reward, terminated, truncated, {**info, "is_success": placed}


def test_a_rerun_of_an_env_with_success_only_in_info_is_scored_by_its_info(tmp_path):
    assert not hasattr(CanWithInfoSuccess().unwrapped, "_check_success")
    env = DepenetrationRerun(CanWithInfoSuccess(), "timeconst=0.02@can", env_fn=CanWithInfoSuccess,
                             directory=tmp_path)
    env.reset(seed=0)
    for _ in range(40):
        *_, info = env.step(np.zeros(0, np.float32))
    env.close()
    ours = info["simuguard"]
    assert ours["errors"] == [] and ours["artifact"] and info["is_success"] is False
    found = ours["rerun"]
    assert (found["mode"], found["success_source"], found["prefix_exact"]) == ("actions", "info:is_success", True)
    assert found["success"] is True and ours["corrected_success"] is True
    assert found["changes"][0]["before"] == 0.004 and found["changes"][0]["after"] == 0.02
    # The paper's substep replay has no check to read here: unscored, and it says why.
    unscored = rerun(ours["recording"], "timeconst=0.02@can", mode="substeps", env_fn=CanWithInfoSuccess)
    assert unscored.prefix_exact and unscored.success is None and "no success check" in unscored.unscored


def test_an_unscored_rerun_corrects_nothing_and_is_counted_apart(tmp_path, capsys):
    """Forced to the paper's substep replay, the env with success only in info has no outcome to
    read: corrected_success is left out, and the report counts the episode as unscored."""
    import json

    env = DepenetrationRerun(CanWithInfoSuccess(), "timeconst=0.02@can", env_fn=CanWithInfoSuccess,
                             directory=tmp_path, mode="substeps")
    env.reset(seed=0)
    for _ in range(40):
        *_, info = env.step(np.zeros(0, np.float32))
    env.close()
    ours = info["simuguard"]
    assert ours["errors"] == [] and ours["rerun"]["prefix_exact"] and ours["rerun"]["unscored"]
    assert "corrected_success" not in ours
    assert main(["report", str(tmp_path)]) == 0
    assert "1 flagged episode(s) have a verified rerun without an outcome of the recorded kind" in capsys.readouterr().out
    row = json.loads((tmp_path / "report.json").read_text())["tasks"][-1]
    assert (row["reruns_unscored"], row["reruns_verified"], row["replay"]) == (1, 0, None)


def test_the_default_mujoco_intervention_turns_an_artifact_failure_into_a_success(tmp_path):
    """The can created 30 mm inside the floor is thrown out (a failure); MuJoCo's default
    intervention for the named body, from the first substep, changes its geom's contact and
    the can rises into place instead."""
    from simuguard_gym.replay.interventions import default_intervention

    env = ArtifactMonitor(RecordPhysics(CanWithInfoSuccess(), tmp_path))
    env.reset(seed=0)
    for _ in range(40):
        *_, info = env.step(np.zeros(0, np.float32))
    env.close()
    assert info["simuguard"]["artifact"] and info["is_success"] is False
    change = Intervention.parse(default_intervention("mujoco"))
    result = rerun(env.env.paths[0], Intervention(change.name, change.value, ("can",)), switch="start",
                   env_fn=CanWithInfoSuccess)
    assert result.prefix_exact and result.recorded_success is False and result.success is True
    (changed,) = result.changes
    assert changed["element"] == "geom #1" and changed["before"] != changed["after"] == change.value
    assert result.peak_speed < 0.5 < result.recorded_peak_speed


def test_a_rerun_whose_capture_fails_claims_nothing(inside_floor, monkeypatch):
    """A rerun compares states only, staging each substep without contacts: when that fails the
    prefix went unchecked, and the rerun says so instead of calling it exact."""
    from simuguard_gym.capture.stage import RecordStage

    def fails(self):
        raise MemoryError("no room to stage")

    monkeypatch.setattr(RecordStage, "add_empty", fails)
    with pytest.raises(RuntimeError, match="rerun hook failed at substep 0: MemoryError"):
        rerun(inside_floor, "timeconst=0.02@can", switch="start", success_fn=can_in_place)


def test_interventions_parse_and_refuse_what_the_engine_lacks(inside_floor):
    assert Intervention.parse("mass=can:0.1") == Intervention("mass", 0.1, ("can",))
    with pytest.raises(ValueError, match="unknown intervention 'gravity'"):
        Intervention.parse("gravity=1")
    with pytest.raises(ValueError, match="needs a finite positive value"):
        Intervention.parse("timeconst=-1")
    with pytest.raises(ValueError, match="depenetration does not exist in mujoco"):
        rerun(inside_floor, "depenetration=1.0")
    with pytest.raises(ValueError, match="no body basket"):
        rerun(inside_floor, "timeconst=0.02@basket", switch="start")


def test_cli_rerun(inside_floor, capsys):
    assert main(["rerun", str(inside_floor.path), "--intervention", "mass=can:0.5", "--switch", "start"]) == 0
    out = capsys.readouterr().out
    assert "prefix     bit-exact" in out and "peak       can:" in out


def test_an_episode_without_an_artifact_reruns_from_its_start_by_default(tmp_path, capsys):
    """What a report offers on every row, ``simuguard rerun FILE``, works on unflagged episodes too."""
    env = RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0"), tmp_path)
    env.reset(seed=0)
    for _ in range(5):
        env.step(env.unwrapped.expert_action())
    env.close()
    (path,) = env.paths
    assert main(["rerun", str(path)]) == 0  # the engine's default intervention
    out = capsys.readouterr().out
    assert "from substep 0 (start)" in out and "prefix     bit-exact" in out
    assert rerun(path, "dampratio=4").switch == "start"
    with pytest.raises(ValueError, match="no contact artifact to switch before"):
        rerun(path, "dampratio=4", switch="before_onset")




@pytest.mark.skipif(__import__("importlib").util.find_spec("sapien") is None, reason="sapien extra not installed")
def test_depenetration_rerun_flips_the_physx_false_contact(tmp_path):
    """PlaceCanBasket-v0 seed 116: the can thrown by a false contact lands in the basket when the
    depenetration limit of 1 m/s is switched on 0.1 s before the onset; the prefix is exact."""
    import simuguard_gym.envs  # noqa: F401

    env = DepenetrationRerun(gym.make("simuguard_gym/PlaceCanBasket-v0"), directory=tmp_path)
    env.reset(seed=116)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    env.close()
    assert info["success"] is False and info["simuguard"]["corrected_success"] is True
    found = info["simuguard"]["rerun"]
    rec = load_recording(info["simuguard"]["recording"])
    assert found["prefix_exact"] and found["success"] is True
    assert found["substeps"] > found["switch_substep"]  # every substep of the rerun was captured and checked
    assert found["switch_substep"] == rec.footer["detector"]["events"][0]["onset_substep"] - 25
    assert found["peak_speed"] < 1.0 < 3.0 < found["recorded_peak_speed"]
    assert rerun(rec, "mass=can:0.1").peak_speed > 2.0  # a heavier can is thrown all the same (paper D.3)


def test_depenetration_rerun_wrapper_changes_nothing_in_the_evaluation(tmp_path):
    """A seeded loop of 20 episodes, every one with an artifact and so a rerun: observations,
    rewards, flags, infos (outside the simuguard key) and the env's RNG are those without the wrapper."""
    xml, actions = scenes.created_inside_floor(depth=0.03)
    make = lambda: gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP,  # noqa: E731
                            reset_noise=0.002, max_episode_steps=30)
    plain = make()
    wrapped = DepenetrationRerun(make(), "timeconst=0.02@can", switch="start", success_fn=can_in_place,
                                 directory=tmp_path)
    finals = []
    for env in (plain, wrapped):
        steps = []
        for episode in range(20):
            steps.append(env.reset(seed=100 + episode))
            for action in actions[:30]:
                steps.append(env.step(action))
        finals.append(steps)
        rng_state = env.unwrapped.np_random.bit_generator.state
        env.close()
    off, on = finals
    for a, b in zip(off, on):
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:-1] == b[1:-1]
        assert {k: v for k, v in b[-1].items() if k != "simuguard"} == a[-1]
    assert plain.unwrapped.np_random.bit_generator.state == rng_state
    ends = [s[-1]["simuguard"] for s in on if len(s) == 5 and s[3]]
    assert len(ends) == 20 and all(e["rerun"]["prefix_exact"] for e in ends)
    assert all(e["corrected_success"] is e["rerun"]["success"] for e in ends)
    assert sum(e["corrected_success"] for e in ends) >= 15  # the slow time constant keeps the can in place


def test_depenetration_rerun_refuses_what_cannot_work():
    xml, _ = scenes.created_inside_floor()
    with pytest.raises(ValueError, match=r"depenetration does not exist in mujoco \(on mujoco: dampratio="):
        DepenetrationRerun(gym.make("simuguard_gym/MujocoScene-v0", xml=xml), "depenetration=1.0")
    env = DepenetrationRerun(gym.make("simuguard_gym/MujocoScene-v0", xml=xml))  # the engine's default
    assert env.intervention.name == "dampratio"
    env.close()


def test_report_of_a_mujoco_evaluation(tmp_path, capsys):
    """`simuguard report` over recordings of PlaceCanBasket-MuJoCo-v0, against a second arm."""
    import json

    import simuguard_gym.envs  # noqa: F401

    def evaluate(directory, **kwargs):
        env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-MuJoCo-v0", **kwargs), directory))
        outcomes = {}
        for seed in range(4):
            env.reset(seed=seed)
            for _ in range(90):
                *_, info = env.step(env.unwrapped.expert_action())
            outcomes[seed] = info["success"]
        env.close()
        return outcomes

    a = evaluate(tmp_path / "a")
    evaluate(tmp_path / "b", contact_timeconst=0.1)  # another arm: very soft contact
    assert main(["report", str(tmp_path / "a"), "--vs", str(tmp_path / "b"), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "simuguard_gym/PlaceCanBasket-MuJoCo-v0" in out and "paired, as run (4 shared episodes)" in out
    assert "paired, corrected by verified reruns (4 shared episodes)" in out
    saved = json.loads((tmp_path / "report.json").read_text())
    assert set(saved["paired"]) == {"as_run", "corrected"} and saved["paired"]["as_run"]["pairs"] == 4
    assert (tmp_path / "paired.csv").read_text().startswith("outcomes,pairs,a_only,b_only")
    row = next(r for r in saved["tasks"] if r["task"] == "all")
    assert row["n"] == 4 and row["as_run"] == pytest.approx(100 * sum(a.values()) / 4)
    assert (tmp_path / "report.csv").read_text().startswith("task,n,flagged,as_run,replay")


@pytest.mark.skipif(__import__("importlib").util.find_spec("sapien") is None, reason="sapien extra not installed")
def test_report_counts_verified_reruns(tmp_path, capsys):
    import json

    import simuguard_gym.envs  # noqa: F401

    env = DepenetrationRerun(gym.make("simuguard_gym/PlaceCanBasket-v0"), directory=tmp_path)
    for seed in (1, 116):
        env.reset(seed=seed)
        for _ in range(90):
            env.step(env.unwrapped.expert_action())
    env.close()
    assert main(["report", str(tmp_path)]) == 0
    row = json.loads((tmp_path / "report.json").read_text())["tasks"][-1]
    assert (row["n"], row["flagged"], row["as_run"], row["replay"]) == (2, 1, 50.0, 100.0)
    assert (row["lower"], row["upper"], row["excluded"]) == (50.0, 100.0, 100.0)
    # The same episodes without reruns as the other arm: equal as run, apart once corrected.
    plain = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-v0"), tmp_path / "b"))
    for seed in (1, 116):
        plain.reset(seed=seed)
        for _ in range(90):
            plain.step(plain.unwrapped.expert_action())
    plain.close()
    assert main(["report", str(tmp_path), "--vs", str(tmp_path / "b"), "--out", str(tmp_path / "out")]) == 0
    paired = json.loads((tmp_path / "out" / "report.json").read_text())["paired"]
    assert (paired["as_run"]["a_only"], paired["as_run"]["b_only"]) == (0, 0)
    assert (paired["corrected"]["a_only"], paired["corrected"]["b_only"]) == (1, 0)
    if __import__("importlib").util.find_spec("matplotlib") is not None:
        page = (tmp_path / "out" / "report.html").read_text()
        assert "corrected by verified reruns" in page and "Paired comparison" in page

"""The detector's verdicts on real MuJoCo scenes, online (ArtifactMonitor) and offline (detect).

Each scene runs with ArtifactMonitor and RecordPhysics stacked; the offline pass over the
recording must give exactly the events the monitor gave.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import artifact_scenes as scenes
import simuguard_gym.envs  # noqa: F401 - registers the envs
from simuguard_gym import ArtifactMonitor, DetectorConfig, RecordPhysics, TaskSpec, detect, load_recording


def run_scene(tmp_path, scene, config=None, task_spec=None, monitor_outside=True, **kwargs):
    xml, actions = scene(**kwargs)
    env = gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP)
    if monitor_outside:
        env = ArtifactMonitor(RecordPhysics(env, tmp_path), config, task_spec)
    else:
        env = RecordPhysics(ArtifactMonitor(env, config, task_spec), tmp_path)
    env.reset(seed=0)
    infos = [env.step(action)[4] for action in actions]
    env.close()
    monitor = env if monitor_outside else env.env
    (path,) = tmp_path.glob("episode_*.msgpack")
    offline = detect(path)
    assert offline.events == monitor.detector.events  # online and offline agree exactly
    assert offline.flags == monitor.detector.flags
    assert offline.config == monitor.config and "config from the recording" in offline.notes
    return monitor.detector, infos, path


def test_a_object_created_inside_the_floor_is_flagged(tmp_path):
    detector, infos, path = run_scene(tmp_path, scenes.created_inside_floor)
    (event,) = detector.events
    assert event["artifact"] and event["body"] == "can" and event["partner"] == "world"
    assert event["contact"]["depth"] > 0.02 and not event["robot_contact"]
    assert infos[-1]["simuguard"]["artifact"] and infos[-1]["simuguard"]["events"] == [event]
    assert not infos[0]["simuguard"]["artifact"]  # reported once its windows closed, not before
    (flag,) = detector.flags
    assert flag["kind"] == "deep_penetration" and flag["max_depth"] == pytest.approx(0.03, abs=1e-3)
    footer = load_recording(path).footer
    assert footer["detector"]["events"] == detector.events


def test_b_object_dropped_into_a_bin_is_removed_by_gravity(tmp_path):
    detector, infos, _ = run_scene(tmp_path, scenes.dropped_into_bin)
    assert detector.events, "the bounce must pass the contact-ejection stage"
    for event in detector.events:
        assert event["ejection"]["confirmed"] and not event["gravity"]["kept"] and not event["artifact"]
        assert event["gravity"]["drop_height"] > 0.2
    assert not infos[-1]["simuguard"]["artifact"] and infos[-1]["simuguard"]["events"] == []


@pytest.mark.parametrize("config", [DetectorConfig(), DetectorConfig.paper()], ids=["default", "paper"])
def test_c_basket_shoved_by_the_robot_is_removed_by_the_carrier_stage(tmp_path, config):
    detector, _, _ = run_scene(tmp_path, scenes.basket_shoved, config, TaskSpec(containers=("basket",)))
    bread = [e for e in detector.events if e["body"] == "bread"]
    assert bread, "the bread must pass the contact-ejection stage"
    for event in bread:
        assert event["gravity"]["kept"] and event["carrier"]["carriers"] == ["basket"]
        assert not event["carrier"]["kept"] and not event["artifact"] and not event["robot_contact"]
    assert not detector.artifacts


def test_quiet_substeps_decoded_as_points_give_the_same_events_and_flags(tmp_path):
    """2.6 s of rest before the shove: the monitor decodes those substeps' contacts as points
    only (touches and depths), and still agrees exactly with the offline pass (run_scene), the
    soft box's deep penetration counted at every substep."""
    detector, infos, _ = run_scene(tmp_path, scenes.shoved_after_rest, None, TaskSpec(containers=("basket",)))
    bread = [e for e in detector.events if e["body"] == "bread"]
    assert bread and not detector.artifacts
    assert all(e["carrier"]["carriers"] == ["basket"] and e["onset_substep"] > 1300 for e in bread)
    (sunk,) = [f for f in detector.flags if "sunk" in f["bodies"]]
    assert sunk["first_substep"] == 0 and sunk["substeps"] == len(infos) * scenes.FRAME_SKIP
    assert infos[-1]["simuguard"]["errors"] == []


def test_quiet_batches_are_used(tmp_path):
    xml, actions = scenes.shoved_after_rest()
    env = ArtifactMonitor(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP))
    env.reset(seed=0)
    for action in actions[:125]:
        env.step(action)
    assert env.tap.quiet_drains >= 1  # 2.5 s of rest: batches of up to MAX_DEFERRED_SECONDS (2 s)
    assert env.tap.waiting >= env.detector.contact_lookback  # held for the next batch
    env.close()


def test_a_tap_full_of_contacts_drains_by_itself_and_detects_the_same(tmp_path, monkeypatch):
    """Staged contacts over MAX_STAGED_BYTES (here: any) end a batch every 64 substeps."""
    from simuguard_gym.capture import tap as tap_module

    monkeypatch.setattr(tap_module, "MAX_STAGED_BYTES", 0)
    sizes = []
    drain = tap_module.SubstepTap.drain
    monkeypatch.setattr(tap_module.SubstepTap, "drain", lambda self: (sizes.append(self.waiting), drain(self))[1])
    detector, infos, _ = run_scene(tmp_path, scenes.shoved_after_rest, None, TaskSpec(containers=("basket",)))
    assert any(e["body"] == "bread" for e in detector.events) and infos[-1]["simuguard"]["errors"] == []
    assert max(sizes) <= 64 and detector.substeps == len(infos) * scenes.FRAME_SKIP


def test_d_object_placed_gently_gives_nothing(tmp_path):
    detector, infos, _ = run_scene(tmp_path, scenes.placed_gently, monitor_outside=False)
    assert detector.events == [] and detector.flags == []
    assert infos[-1]["simuguard"]["artifact"] is False


def test_e_finger_flick_is_removed_by_the_direct_robot_carrier_rule(tmp_path):
    detector, _, _ = run_scene(tmp_path, scenes.finger_flick)
    (event,) = detector.events
    assert event["robot_contact"] and event["partner"] == "finger" and event["gravity"]["kept"]
    assert event["carrier"]["carriers"] == ["finger"] and not event["artifact"]


def test_e_finger_flick_is_flagged_by_the_paper_detector(tmp_path):
    detector, _, _ = run_scene(tmp_path, scenes.finger_flick, DetectorConfig.paper())
    (event,) = detector.events
    assert event["robot_contact"] and event["carrier"]["carriers"] == [] and event["artifact"]


def test_offline_detect_with_another_config(tmp_path):
    """The same recording, judged by the paper's detector after the fact."""
    _, _, path = run_scene(tmp_path, scenes.finger_flick)
    report = detect(path, DetectorConfig.paper())
    assert report.artifact and report.config == DetectorConfig.paper()
    assert report.to_dict()["config"]["robot_contact_carrier"] is False


def test_a_detector_restarted_for_the_next_episode_finds_what_a_new_one_finds(tmp_path):
    """The monitor keeps its detector for the next episode of the same scene (restart): the
    second of two episodes gives the events, flags and peaks of a monitor that runs it alone."""
    xml, actions = scenes.basket_shoved()

    def episodes(seeds):
        env = ArtifactMonitor(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP))
        found = []
        for seed in seeds:
            env.reset(seed=seed)
            for action in actions:
                env.step(action)
            env.detector.finish()
            found.append((env.detector, env.detector.events, env.detector.flags, env.detector.peak_speed.copy()))
        env.close()
        return found

    (first, *_), (second, events, flags, peak) = episodes([0, 1])
    (_, alone_events, alone_flags, alone_peak), = episodes([1])
    assert second is first  # the same object, restarted
    assert events and events == alone_events and flags == alone_flags
    assert (peak == alone_peak).all()

"""Frames on the CPU: render_mode="rgb_array" on the built-in MuJoCo envs, rendering that changes
nothing, a clear refusal where MuJoCo cannot render, and `simuguard video` (PhysX episodes too)."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest

import artifact_scenes as scenes
from simuguard_gym import load_recording
from simuguard_gym.cli import main
from simuguard_gym.headless import headless_rendering_problem

needs_av = pytest.mark.skipif(importlib.util.find_spec("av") is None, reason="video extra")


@pytest.mark.parametrize("env_id", ["simuguard_gym/PlaceCanBasket-MuJoCo-v0", "simuguard_gym/DropInBin-v0"])
def test_builtin_envs_render_rgb_arrays_and_rendering_changes_nothing(env_id, rendering):
    plain, shown = gym.make(env_id), gym.make(env_id, render_mode="rgb_array")
    assert "rgb_array" in shown.metadata["render_modes"] and shown.metadata["render_fps"] > 0
    frames = []
    for env in (plain, shown):
        env.reset(seed=3)
    for _ in range(20):
        action = plain.action_space.sample() if env_id.endswith("DropInBin-v0") else plain.unwrapped.expert_action()
        a = plain.step(action)
        b = shown.step(action)
        frames.append(shown.render())
        assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4]
    assert frames[0].shape == (480, 480, 3) and frames[0].dtype == np.uint8
    assert not all(np.array_equal(frames[0], f) for f in frames[1:])  # things move in view
    assert plain.render() is None  # no render mode: nothing rendered (Gymnasium's convention)
    for env in (plain, shown):
        env.close()


def test_an_unknown_render_mode_is_refused():
    from simuguard_gym.envs.negatives import DropInBinEnv

    with pytest.raises(ValueError, match="renders \\['rgb_array'\\], not 'human'"):
        DropInBinEnv(render_mode="human")


def test_glfw_without_a_display_is_refused_with_the_fix(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert "MUJOCO_GL=egl" in headless_rendering_problem("mujoco.glfw")
    assert headless_rendering_problem("mujoco.egl") is None
    monkeypatch.setenv("DISPLAY", ":0")
    assert headless_rendering_problem("mujoco.glfw") is None


@needs_av
def test_simuguard_video_has_a_frame_per_step_and_marks_the_onset(tmp_path, capsys, rendering):
    from simuguard_gym.video import count_frames

    path = scenes.record_scene(scenes.created_inside_floor, tmp_path)
    assert main(["video", str(path), "--size", "64"]) == 0
    out = capsys.readouterr().out
    video = path.with_suffix(".mp4")
    steps = load_recording(path).footer["steps"]
    assert count_frames(video) == steps and f"{steps} frames" in out and "onset at frame 0 (can)" in out
    assert "replay exact" in out


@needs_av
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="report extra")
def test_the_audit_report_links_a_video_of_every_flagged_episode(tmp_path, rendering):
    out = tmp_path / "run"
    assert main(["audit", "--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--env-kwargs",
                 '{"pad_kp": 800, "pad_timeconst": 0.02}', "--episodes", "6", "--intervention", "timeconst=0.1",
                 "--quiet", "--out", str(out)]) == 0
    flagged = [p for p in sorted(out.glob("seed_*.msgpack"))
               if any(e["artifact"] for e in load_recording(p).footer["detector"]["events"])]
    assert flagged, "the scene should give flagged episodes"
    page = (out / "report.html").read_text()
    for path in flagged:
        assert path.with_suffix(".mp4").exists() and f'href="{path.stem}.mp4"' in page


@needs_av
@pytest.mark.skipif(importlib.util.find_spec("sapien") is None, reason="sapien extra")
def test_a_physx_episode_is_filmed_on_the_cpu_with_its_thrown_can_marked(tmp_path, rendering):
    """SAPIEN renders through Vulkan on a GPU; its collision shapes at the replayed poses are drawn
    by MuJoCo's renderer instead, with the onset's border and the event body's box."""
    import av

    import simuguard_gym.envs  # noqa: F401 - registers PlaceCanBasket-v0
    from simuguard_gym import ArtifactMonitor, RecordPhysics
    from simuguard_gym.video import BOX_COLOUR, ONSET_COLOUR, write_video

    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-v0"), tmp_path))
    env.reset(seed=116)  # PhysX 5.3.1 reports a 21 mm overlap of pieces 4.7 mm apart and throws the can
    for _ in range(90):
        env.step(env.unwrapped.expert_action())
    env.close()
    (path,) = env.env.paths
    assert any(e["artifact"] and e["body"] == "can" for e in load_recording(path).footer["detector"]["events"])
    video = write_video(path, size=96)
    assert video.exact and video.body == "can" and 0 < video.onset_frame < video.frames
    with av.open(str(video.path)) as container:
        frames = [f.to_ndarray(format="rgb24").astype(int) for f in container.decode(video=0)]
    assert len(frames) == video.frames == 90 and frames[0].shape == (96, 96, 3)
    assert not all(np.array_equal(frames[0], f) for f in frames[1:])  # the scene moves in view
    near = lambda image, colour: (np.abs(image - colour).sum(axis=-1) < 90).sum()  # noqa: E731 - lossy video
    before, after = frames[video.onset_frame - 1], frames[video.onset_frame + 2]
    assert near(before, ONSET_COLOUR) < 50 and near(after[:4], ONSET_COLOUR) > 96  # the border from the onset on
    assert near(before, BOX_COLOUR) < 10 and near(after, BOX_COLOUR) > 20  # the can's box
    assert near(frames[0], np.array([242, 115, 25])) > 0  # the can itself, orange, before anything happens

"""`simuguard view`: the .rrd export shows the replayed scene (collision geometry, every moving
body, contact points and normals, the onset) and falls back to the recording where the env
cannot be rebuilt. The file is read back with rerun's own reader."""

from __future__ import annotations

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest

from artifact_scenes import created_inside_floor, record_scene
from conftest import make_contact_scene, run_random
from simuguard_gym import RecordPhysics
from simuguard_gym.cli import main
from simuguard_gym.recording.reader import load_recording
from simuguard_gym.recording.writer import RecordingWriter
from simuguard_gym.view import export_rrd

rr_chunk = pytest.importorskip("rerun.chunk")


def _read(path):
    """Entity path -> {column: [values of every row]} of the .rrd's recording; the ``sim`` time
    line in nanoseconds."""
    import pyarrow as pa

    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for chunk in rr_chunk.RrdReader(str(path)).stream():
        batch = chunk.to_record_batch()
        for name in batch.schema.names:
            if name == "log_time" or name.startswith("rerun."):
                continue
            column = batch.column(name)
            if name == "sim":
                column = column.cast(pa.int64())
            out[str(chunk.entity_path)][name].extend(column.to_pylist())
    return out


def _kinds(entities):
    return {col.split(":")[0] for path, cols in entities.items() if "/shape_" in path for col in cols
            if col.endswith(("half_sizes", "radii", "vertex_positions"))}


def test_mujoco_view_shows_geometry_moving_bodies_and_contacts(tmp_path):
    env = RecordPhysics(make_contact_scene(max_episode_steps=40), tmp_path)
    run_random(env, 40, seed=1)
    env.close()
    export = export_rrd(env.paths[0], tmp_path / "scene.rrd")
    assert export.replayed and export.note is None and export.frames == load_recording(env.paths[0]).substeps
    entities = _read(export.path)
    assert {"Boxes3D", "Ellipsoids3D", "Cylinders3D", "Capsules3D"} <= _kinds(entities)
    # a moving body has its pose at the start and after every substep, as recorded; a static one once
    rec = load_recording(env.paths[0])
    can = entities["/world/bodies/can"]
    order = np.argsort(can["sim"])
    shown = np.array([can["Transform3D:translation"][i][0] for i in order])
    assert len(shown) == export.frames + 1
    dt_ns = round(rec.substep_dt * 1e9)
    assert np.array_equal(np.array(can["sim"])[order] // dt_ns, np.arange(export.frames + 1))
    recorded = rec.columns["body_pose"][:, rec.tracked_names.index("can"), :3]
    assert np.abs(shown[1:] - recorded).max() < 1e-6  # float32 in the file
    assert len(entities["/world/bodies/table"]["Transform3D:translation"]) == 1
    points = [p for p in entities["/world/contacts"]["Points3D:positions"] if p]
    normals = [v for v in entities["/world/contacts/normals"]["Arrows3D:vectors"] if v]
    assert points and len(points) == len(normals)
    lengths = np.linalg.norm(np.array([v for batch in normals for v in batch]), axis=1)
    assert np.allclose(lengths, 0.03, atol=1e-4)


def test_onset_is_marked_at_its_body(tmp_path):
    path = record_scene(created_inside_floor, tmp_path)
    events = load_recording(path).footer["detector"]["events"]
    assert events, "the scene must produce an event"
    export = export_rrd(path, tmp_path / "onset.rrd")
    entities = _read(export.path)
    labels = entities["/world/onset"]["Points3D:labels"]
    assert labels and labels[0] == [f"onset: {events[0]['body']}"]
    assert any("can" in str(t) for t in entities["/events"]["TextLog:text"])


def test_sapien_view_shows_convex_pieces_and_robot_links(tmp_path):
    pytest.importorskip("sapien")
    import simuguard_gym.envs  # noqa: F401

    env = RecordPhysics(gym.make("simuguard_gym/PlaceCanBasket-v0"), tmp_path)
    env.reset(seed=3)
    for _ in range(10):
        env.step(env.unwrapped.expert_action())
    env.close()
    export = export_rrd(env.paths[0], tmp_path / "sapien.rrd")
    assert export.replayed
    entities = _read(export.path)
    assert "Mesh3D" in _kinds(entities)
    meshes = [p for p in entities if p.startswith("/world/bodies/basket/shape_")]
    assert len(meshes) > 10  # the basket's convex pieces, one mesh each
    finger = [p for p in entities if p.startswith("/world/bodies/") and "finger" in p and "/shape_" not in p]
    assert finger and len(entities[finger[0]]["Transform3D:translation"]) == export.frames + 1


def test_view_falls_back_to_the_recording_without_an_env(tmp_path):
    env = RecordPhysics(make_contact_scene(max_episode_steps=10), tmp_path)
    run_random(env, 10, seed=0)
    env.close()
    rec = load_recording(env.paths[0])
    moved = tmp_path / "sent" / "unknown_env.msgpack"  # sent alone: without the models/ beside the recordings
    moved.parent.mkdir()
    writer = RecordingWriter(moved, {**rec.header, "env": {**rec.header["env"], "id": "nobody/NoSuchEnv-v0",
                                                           "factory": None}})
    writer.write_chunk(rec.columns, first=0, n=rec.substeps)
    writer.close({k: v for k, v in rec.footer.items() if k not in ("chunks", "substeps", "sha256")})
    export = export_rrd(moved, tmp_path / "fallback.rrd")
    assert not export.replayed and "nobody" in export.note
    beside = tmp_path / "unknown_env.msgpack"  # beside the models/ its recorder stored: replayed on the stored model
    beside.write_bytes(moved.read_bytes())
    assert export_rrd(beside, tmp_path / "stored.rrd").replayed
    entities = _read(export.path)
    assert "/world/tracked/can" in entities and not _kinds(entities)
    assert export_rrd(env.paths[0], tmp_path / "plain.rrd", replayed=False).replayed is False


def test_view_cli_writes_into_the_out_directory(tmp_path):
    env = RecordPhysics(make_contact_scene(max_episode_steps=10), tmp_path / "rec")
    run_random(env, 10, seed=0)
    env.close()
    path = env.paths[0]
    assert main(["view", str(path), "--out", str(tmp_path / "views")]) == 0
    out = tmp_path / "views" / (path.stem + ".rrd")
    assert out.read_bytes()[:3] == b"RRF"  # rerun's file magic
    assert main(["view", str(path), "--out", str(tmp_path / "one.rrd")]) == 2  # --out is a directory
    assert main(["view", str(path), "--stride", "0"]) == 2

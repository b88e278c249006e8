"""The recording file: bad input gives clear errors, complete data is never lost or half-written."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest

from conftest import make_contact_scene, run_random
from simuguard_gym import RecordPhysics, load_recording
from simuguard_gym.recording.format import (
    SCHEMA_VERSION,
    CorruptRecordingError,
    NotARecordingError,
    TruncatedRecordingError,
    UnsupportedSchemaError,
)
from simuguard_gym.recording.reader import iter_records
from simuguard_gym.recording.writer import pack_record


@pytest.fixture
def recording(record_dir) -> Path:
    """A 2000-substep episode in chunks of 256 substeps."""
    env = RecordPhysics(make_contact_scene(max_episode_steps=400), record_dir, chunk_substeps=256)
    run_random(env, 400, seed=2)
    env.close()
    return env.paths[0]


def test_roundtrip_columns(recording):
    rec = load_recording(recording)
    assert rec.complete and rec.substeps == 2000 and rec.footer["chunks"] == 8
    assert rec.columns["body_pose"].shape == (2000, 5, 7)
    assert rec.columns["body_vel"].dtype == np.float64
    # Quaternions are unit, contact depths finite: the decode produced physical data.
    np.testing.assert_allclose(np.linalg.norm(rec.columns["body_pose"][..., 3:], axis=-1), 1.0, atol=1e-9)
    assert np.isfinite(rec.columns["contact_depth"]).all()
    assert rec.contact_offsets()[-1] == len(rec.columns["contact_bodies"])


def test_truncated_file_recovers_complete_chunks(recording, tmp_path):
    data = recording.read_bytes()
    offsets = [offset for offset, kind, _ in iter_records(recording) if kind == "chunk"]
    cut = offsets[3] + 100  # inside the 4th chunk
    broken = tmp_path / "cut.msgpack"
    broken.write_bytes(data[:cut])
    with pytest.raises(TruncatedRecordingError) as caught:
        load_recording(broken)
    error = caught.value
    assert error.offset == offsets[3]
    assert error.substeps_recovered == 3 * 256
    assert f"byte {offsets[3]}" in str(error) and "768 substeps recovered" in str(error)
    assert error.recovered.substeps == 768
    partial = load_recording(broken, allow_partial=True)
    assert not partial.complete and partial.substeps == 768
    full = load_recording(recording)
    np.testing.assert_array_equal(partial.columns["body_pose"], full.columns["body_pose"][:768])


def test_file_cut_at_record_boundary_is_truncated_not_complete(recording, tmp_path):
    offsets = [offset for offset, kind, _ in iter_records(recording) if kind == "footer"]
    broken = tmp_path / "nofooter.msgpack"
    broken.write_bytes(recording.read_bytes()[:offsets[0]])
    with pytest.raises(TruncatedRecordingError, match="without a footer; 2000 substeps recovered"):
        load_recording(broken)


def test_flipped_bytes_fail_the_checksum(recording, tmp_path):
    data = bytearray(recording.read_bytes())
    offsets = [offset for offset, kind, _ in iter_records(recording) if kind == "chunk"]
    position = offsets[2] + 5000
    data[position] ^= 0xFF
    broken = tmp_path / "flipped.msgpack"
    broken.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordingError, match=f"at byte {offsets[2]}") as caught:
        load_recording(broken)
    assert "checksum" in str(caught.value) or "corrupted" in str(caught.value)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.msgpack"
    path.write_bytes(pack_record("header", {"format": "simuguard-recording", "schema": SCHEMA_VERSION + 1}))
    with pytest.raises(UnsupportedSchemaError) as caught:
        load_recording(path)
    assert f"version {SCHEMA_VERSION + 1}" in str(caught.value) and f"schema {SCHEMA_VERSION}" in str(caught.value)


@pytest.mark.parametrize("content", [b"", b"\xc1\xc1\xc1 not msgpack at all", b"PK\x03\x04zipfile",
                                     msgpack.packb({"hello": "world"}), msgpack.packb([1, 2, 3])])
def test_non_recording_files_get_a_clear_error(tmp_path, content):
    path = tmp_path / "other.msgpack"
    path.write_bytes(content)
    with pytest.raises(NotARecordingError, match="not a simuguard recording"):
        load_recording(path)


def test_crafted_huge_array_is_not_allocated(recording, tmp_path):
    header = next(payload for _, kind, payload in iter_records(recording) if kind == "header")
    chunk = next(payload for _, kind, payload in iter_records(recording) if kind == "chunk")
    chunk["columns"]["fingerprint"] = {"dtype": "<u8", "shape": [10 ** 12], "data": b"\x00" * 8}
    path = tmp_path / "huge.msgpack"
    path.write_bytes(pack_record("header", header) + pack_record("chunk", chunk))
    with pytest.raises(CorruptRecordingError, match="declares shape"):
        load_recording(path)


def test_crafted_huge_msgpack_length_is_refused(tmp_path):
    header = pack_record("header", {"format": "simuguard-recording", "schema": SCHEMA_VERSION})
    # A bin 32 header declaring 4 GiB - 1 bytes, followed by almost nothing.
    bogus = b"\x93\xa5chunk\xc6\xff\xff\xff\xff" + b"\x00" * 16
    path = tmp_path / "bogus.msgpack"
    path.write_bytes(header + bogus)
    with pytest.raises((CorruptRecordingError, TruncatedRecordingError)):
        load_recording(path)


def test_unwritable_directory_fails_at_construction(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(PermissionError, match="cannot record into"):
        RecordPhysics(make_contact_scene(), blocker / "recordings")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only directories")
def test_read_only_directory_fails_at_construction(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    with pytest.raises(PermissionError):
        RecordPhysics(make_contact_scene(), target)


def test_never_half_written_under_the_final_name(record_dir):
    env = RecordPhysics(make_contact_scene(max_episode_steps=1000), record_dir, chunk_substeps=64)
    env.reset(seed=0)
    for _ in range(100):
        env.step(env.action_space.sample())
    names = sorted(p.name for p in record_dir.iterdir() if p.is_file())  # models/ holds the model
    assert names == ["episode_000000.msgpack.partial"]
    # A crash now leaves a partial file whose complete chunks read: 7 chunks of 64 of the 500
    # substeps are complete, of which up to 2 may still be in the encoder thread's hands.
    partial = load_recording(record_dir / names[0], allow_partial=True)
    assert partial.substeps in (320, 384, 448)
    env.close()
    assert sorted(p.name for p in record_dir.iterdir()) == ["episode_000000.msgpack", "models"]


def test_existing_recordings_are_not_overwritten(record_dir):
    for _ in range(2):
        env = RecordPhysics(make_contact_scene(max_episode_steps=3), record_dir)
        run_random(env, 3)  # one episode, then a reset that is never stepped (no file)
        env.close()
    names = sorted(p.name for p in record_dir.glob("*.msgpack"))
    assert names == ["episode_000000.msgpack", "episode_000001.msgpack"]


def test_crc_is_over_the_payload(recording):
    offset, kind, payload = next(iter_records(recording))
    raw = msgpack.Unpacker(open(recording, "rb"), raw=False)
    kind_, body, crc = raw.unpack()
    assert kind_ == kind == "header" and zlib.crc32(body) == crc


def test_two_envs_in_one_directory_never_share_a_file(record_dir):
    first = RecordPhysics(make_contact_scene(max_episode_steps=5), record_dir)
    second = RecordPhysics(make_contact_scene(max_episode_steps=5), record_dir)
    first.reset(seed=0)
    second.reset(seed=1)  # both started counting at 0 when they were built
    for _ in range(5):
        first.step(first.action_space.sample())
        second.step(second.action_space.sample())
    first.close()
    second.close()
    seeds = sorted(load_recording(p).header["seed"] for p in first.paths + second.paths)
    assert seeds == [0, 1] and first.paths[0] != second.paths[0]


def test_task_spec_naming_a_missing_body_fails_at_construction(record_dir):
    from simuguard_gym import TaskSpec

    with pytest.raises(ValueError, match="not in the scene: basket.*available bodies:.*box_a"):
        RecordPhysics(make_contact_scene(), record_dir, task_spec=TaskSpec(containers=("basket",)))
    env = RecordPhysics(make_contact_scene(max_episode_steps=3), record_dir, task_spec=TaskSpec(containers=("box_a",)))
    run_random(env, 3)
    env.close()
    bodies = load_recording(env.paths[0]).bodies
    assert bodies.roles[bodies.names.index("box_a")] == "container"

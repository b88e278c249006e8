"""Nothing from a file reaches an engine unchecked (docs/security.md).

A recording carries the model arrays its env changed (``model_changes``) and a checksum of every
array, both from the file. Only floating-point parameter arrays are written back, of the model's
own dtype and shape, finite; index, address, count and flag arrays never are. Whatever a crafted
file holds, the test process lives: a replay of a file not signed by this user runs in a child
process, and an engine crash there is one line.
"""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifact_scenes import created_inside_floor, created_inside_floor_env, record_scene
from recording_files import craft, records_of
from simuguard_gym import replay
from simuguard_gym.engines.mujoco_model import physics_arrays
from simuguard_gym.recording.format import RecordingError, encode_array
from simuguard_gym.replay.isolation import EngineCrashError, in_child


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    return record_scene(created_inside_floor, tmp_path_factory.mktemp("scene"), depth=0.03)


@pytest.fixture(scope="module")
def model():
    env = created_inside_floor_env()
    env.reset(seed=0)
    yield env.unwrapped.model
    env.close()


def with_model_change(scene: Path, path: Path, name: str, change: dict[str, np.ndarray]) -> Path:
    """``scene`` whose header says its episode's model had ``change`` in array ``name`` (the
    checksum made to match, the fingerprint to differ, so that a replay writes it back)."""
    records = records_of(scene)
    header = dict(records[0][1])
    values = change["values"]
    header["model_fingerprint"] = "0" * 32
    header["model_changes"] = {**header.get("model_changes", {}),
                               name: {key: encode_array(np.asarray(a)) for key, a in change.items()}}
    if "index" not in change:
        header["model_digests"] = {**header["model_digests"], name: zlib.crc32(np.ascontiguousarray(values).tobytes())}
    else:
        header["model_digests"] = {**header["model_digests"], name: 12345}
    return craft([("header", header), *records[1:]], path)


@pytest.mark.parametrize("name, values, problem", [
    ("geom_bodyid", lambda v: np.where(np.arange(v.size) == 0, 10**6, v).astype(v.dtype), "never written"),
    ("body_parentid", lambda v: np.where(np.arange(v.size) == 0, 10**6, v).astype(v.dtype), "never written"),
    ("jnt_qposadr", lambda v: np.full_like(v, 10**8), "never written"),
    ("body_mass", lambda v: np.full_like(v, np.nan), "not finite"),
    ("body_mass", lambda v: np.append(v, 1.0), "given for the model's"),
    ("body_mass", lambda v: v.astype(np.float32), "given for the model's"),
    ("body_pos", lambda v: np.full_like(v, np.inf), "not finite"),
])
def test_index_arrays_and_bad_values_are_refused(scene, model, tmp_path, name, values, problem):
    current = dict(physics_arrays(model))[name]
    path = with_model_change(scene, tmp_path / "crafted.msgpack", name, {"values": values(np.array(current))})
    with pytest.raises(RecordingError, match=f"model_changes {name}: .*{problem}"):
        replay(path)


@pytest.mark.parametrize("index", [[10**9], [-1], [0.5]])
def test_changed_elements_outside_the_array_are_refused(scene, tmp_path, index):
    change = {"index": np.array(index), "values": np.ones(len(index))}
    path = with_model_change(scene, tmp_path / "crafted.msgpack", "body_mass", change)
    with pytest.raises(RecordingError, match="model_changes body_mass"):
        replay(path)


def test_a_valid_parameter_change_is_written_back(scene, model, tmp_path):
    mass = np.array(dict(physics_arrays(model))["body_mass"]) * 1.5  # a heavier world: replays, but not exactly
    result = replay(with_model_change(scene, tmp_path / "heavier.msgpack", "body_mass", {"values": mass}))
    assert any("body_mass" in note for note in result.notes) and not result.exact


def _arrays(model) -> dict[str, np.ndarray]:
    return {name: np.array(value) for name, value in physics_arrays(model)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_model_values_never_kill_the_process(scene, model, tmp_path, data):
    arrays = _arrays(model)
    name = data.draw(st.sampled_from(sorted(arrays)), label="array")
    current = arrays[name]
    dtype = data.draw(st.sampled_from([current.dtype, np.dtype("<f8"), np.dtype("<i4"), np.dtype("<f4")]),
                      label="dtype")
    shape = data.draw(st.sampled_from([current.shape, (current.size + 1,), ()]), label="shape")
    fill = data.draw(st.sampled_from([0, -1, 10**6, 2**31 - 1, 1e308, -1e308, float("nan"), float("inf")]),
                     label="value")
    with np.errstate(invalid="ignore", over="ignore"):
        values = np.full(shape, fill).astype(dtype)
    path = with_model_change(scene, tmp_path / "fuzzed.msgpack", name, {"values": values})
    try:
        result = replay(path)
    except RecordingError as error:  # refused: the file named what it may not write
        assert f"model_changes {name}" in str(error)
        return
    except EngineCrashError:  # a float no check foresaw: the child died, this process lives
        return
    if zlib.crc32(values.tobytes()) == zlib.crc32(current.tobytes()):
        # the model holds these bytes already, or bytes of the same CRC-32 (four zero bytes and
        # eight 0xff bytes share one): the file's checksum is the model's own, nothing to write
        return
    # written back: a float array of the model's dtype and shape, finite where the model's is
    assert current.dtype.kind == "f" and values.dtype == current.dtype and values.shape == current.shape
    assert result.substeps > 0 or result.divergence is not None


def test_an_engine_crash_in_the_child_is_an_error_here():
    import ctypes
    import faulthandler

    def crash() -> None:
        faulthandler.disable()  # pytest's handler would print the child's stack: the crash is the test
        ctypes.string_at(0)

    with pytest.raises(EngineCrashError, match=r"the engine crashed \(SIGSEGV\) reading address 0"):
        in_child(crash, "reading address 0")
    assert in_child(lambda: 6 * 7, "multiplying") == 42  # and the next one runs


def test_a_crash_while_replaying_a_file_is_one_line(scene, tmp_path):
    records = records_of(scene)
    path = craft([("header", {k: v for k, v in records[0][1].items() if k != "signature"}), *records[1:]],
                 tmp_path / "colleague.msgpack")
    factory = tmp_path / "crashing_env.py"
    factory.write_text("import ctypes\n\n\ndef make():\n    ctypes.string_at(0)\n")
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.cli", "replay", str(path), "--env-fn",
                           f"{factory}:make"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"simuguard replay: error: {path}: EngineCrashError: the engine crashed (SIGSEGV) replaying {path}; the "
        "recording is not signed by you and may hold values no engine should take"], done.stderr

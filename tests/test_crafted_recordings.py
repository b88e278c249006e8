"""Files whose checksums are all valid but whose structure is wrong: the reader says what and
where (a RecordingError naming the file, the record and its byte offset), never anything else,
and the command line reports a bad file and goes on."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_contact_scene, run_random
from simuguard_gym import RecordPhysics, load_recording
from simuguard_gym.cli import main
from simuguard_gym.recording.format import ALL_COLUMNS, CorruptRecordingError, RecordingError
from simuguard_gym.recording.reader import iter_records
from simuguard_gym.recording.writer import pack_record

Records = list[tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Records:
    """A good 600-substep recording in chunks of 200, as (kind, payload) records."""
    directory = tmp_path_factory.mktemp("good")
    env = RecordPhysics(make_contact_scene(max_episode_steps=120), directory, chunk_substeps=200)
    run_random(env, 120, seed=4)
    env.close()
    return [(kind, payload) for _, kind, payload in iter_records(env.paths[0])]


def craft(records: Records, path: Path, tail: bytes = b"") -> Path:
    """Write records with valid checksums, the footer's file hash made anew."""
    out = b""
    for kind, payload in records:
        if kind == "footer":
            payload = {**payload, "sha256": hashlib.sha256(out).hexdigest()}
        out += pack_record(kind, payload)
    path.write_bytes(out + tail)
    return path


def chunk(records: Records, i: int) -> dict[str, Any]:
    return [p for k, p in records if k == "chunk"][i]


def test_the_good_recording_reads(records, tmp_path):
    assert load_recording(craft(records, tmp_path / "good.msgpack")).substeps == 600


def _column(name: str, dtype: str | None = None, shape: Callable[[list[int]], list[int]] | None = None):
    def mutate(records: Records) -> None:
        encoded = chunk(records, 1)["columns"][name]
        array = np.frombuffer(encoded["data"], encoded["dtype"]).reshape(encoded["shape"])
        if dtype is not None:
            array = array.astype(dtype)
        if shape is not None:
            array = np.resize(array, shape(list(array.shape)))
        encoded.update(dtype=array.dtype.str, shape=list(array.shape), data=array.tobytes())
    return mutate


def _drop(name: str):
    return lambda records: chunk(records, 1)["columns"].pop(name)


def _set(field: str, value: Any, which: str = "chunk"):
    def mutate(records: Records) -> None:
        target = chunk(records, 1) if which == "chunk" else next(p for k, p in records if k == which)
        target[field] = value
    return mutate


CASES = {
    "a column of another dtype": (_column("body_pose", dtype="<f4"), "chunk 1 at byte .*: column body_pose is <f4"),
    "a column of another shape": (_column("body_vel", shape=lambda s: [s[0], s[1] + 1, s[2]]),
                                  "chunk 1 at byte .*: column body_vel has shape"),
    "a missing column": (_drop("contact_force"), "chunk 1 at byte .*: lacks column\\(s\\) contact_force"),
    "an empty chunk": (_set("n", 0), "chunk 1 at byte .*: holds 0 substeps"),
    "a chunk out of order": (_set("first", 0), "chunk 1 at byte .*: says it is chunk 1 from substep 0"),
    "more contact rows than counted": (_column("contact_depth", shape=lambda s: [s[0] + 1]),
                                       "chunk 1 at byte .*: column contact_depth has shape"),
    "a write mask beyond the layout": (lambda r: chunk(r, 1)["columns"]["start_mask"].update(
        data=np.full(200, 1 << 15, np.uint16).tobytes()), "chunk 1 at byte .*: start_mask names components"),
    "footer counts that disagree": (_set("substeps", 700, "footer"), "footer at byte .*: declares 3 chunks of 700"),
    "a header without its layout": (lambda r: r[0][1].pop("state_layout"), "header at byte 0: lacks state_layout"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_structural_fault_is_named_with_file_record_and_offset(case, records, tmp_path):
    mutate, message = CASES[case]
    broken = copy.deepcopy(records)
    mutate(broken)
    path = craft(broken, tmp_path / "crafted.msgpack")
    with pytest.raises(CorruptRecordingError, match=f"{path}: {message}"):
        load_recording(path)


def test_bytes_after_the_footer_are_refused(records, tmp_path):
    path = craft(records, tmp_path / "tail.msgpack", tail=b"\x00garbage")
    with pytest.raises(CorruptRecordingError, match=r"8 bytes after the footer, from byte \d+"):
        load_recording(path)
    path = craft(records + [("error", {"substep": 1, "where": "x", "type": "y", "message": "z"})],
                 tmp_path / "after.msgpack")
    with pytest.raises(CorruptRecordingError, match=r"\d+ bytes after the footer"):
        load_recording(path)


def test_detect_and_inspect_report_a_bad_file_and_go_on(records, tmp_path, capsys):
    directory = tmp_path / "mixed"
    directory.mkdir()
    scored = copy.deepcopy(records)
    scored[-1][1]["success"] = True  # an outcome, for the report
    craft(scored, directory / "a_good.msgpack")
    broken = copy.deepcopy(scored)
    _drop("fingerprint")(broken)
    bad = craft(broken, directory / "b_bad.msgpack")
    craft(scored, directory / "c_good.msgpack")
    assert main(["detect", str(directory)]) == 2  # exit 2: a file could not be read
    out, err = capsys.readouterr()
    assert "2 recordings read" in out and "1 unreadable" in out and "b_bad.msgpack" in err
    assert main(["inspect", str(bad)]) == 2
    assert "lacks column(s) fingerprint" in capsys.readouterr().err
    assert main(["report", str(directory), "--out", str(tmp_path / "report")]) == 0  # the good two are scored
    out, err = capsys.readouterr()
    table = out.splitlines()
    assert "skipped" in err and "b_bad.msgpack" in err and table[2].split()[1] == "2"  # N: the two good files


MUTABLE = sorted(ALL_COLUMNS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_crafted_structures_raise_a_recording_error_or_read_consistently(records, tmp_path, data):
    """Property: whatever is changed in a file with valid checksums, reading it either raises a
    RecordingError or gives a recording whose columns agree with each other and the footer."""
    broken = copy.deepcopy(records)
    chunks = [p for k, p in broken if k == "chunk"]
    target = data.draw(st.sampled_from(chunks))
    what = data.draw(st.sampled_from(["dtype", "shape", "drop", "n", "first", "bytes", "footer", "duplicate"]))
    name = data.draw(st.sampled_from(MUTABLE))
    encoded = target["columns"][name]
    if what == "dtype":
        encoded["dtype"] = data.draw(st.sampled_from(["<f8", "<f4", "<u4", "<i4", "|u1", "<u2", "<i8"]))
        size = np.dtype(encoded["dtype"]).itemsize
        encoded["data"] = encoded["data"][:len(encoded["data"]) // size * size]
        encoded["shape"] = [len(encoded["data"]) // size]
    elif what == "shape":
        encoded["shape"] = data.draw(st.lists(st.integers(0, 40), min_size=0, max_size=4))
    elif what == "drop":
        del target["columns"][name]
    elif what in ("n", "first"):
        target[what] = data.draw(st.one_of(st.integers(-5, 2000), st.none(), st.text(max_size=3)))
    elif what == "bytes":
        raw = bytearray(encoded["data"])
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        encoded["data"] = bytes(raw)
    elif what == "footer":
        footer = broken[-1][1]
        footer[data.draw(st.sampled_from(["substeps", "chunks", "incomplete", "env_substeps", "step_substeps"]))] = \
            data.draw(st.one_of(st.integers(-3, 10**6), st.none(), st.text(max_size=4), st.lists(st.integers(-9, 9))))
    else:
        broken.insert(data.draw(st.integers(1, len(broken) - 1)), ("chunk", copy.deepcopy(target)))
    path = craft(broken, tmp_path / "fuzzed.msgpack")
    try:
        rec = load_recording(path)
    except RecordingError:
        return
    n = rec.substeps
    assert n == rec.footer["substeps"]
    for column in ("split", "start_mask", "mid_mask", "contact_count", "body_pose", "body_vel"):
        assert len(rec.columns[column]) == n
    assert rec.contact_offsets()[-1] == len(rec.columns["contact_bodies"]) == len(rec.columns["contact_speed"])
    assert rec.write_offsets("start")[-1] == len(rec.columns["start_values"])

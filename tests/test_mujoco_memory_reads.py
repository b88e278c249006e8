"""The per-substep reads that go straight to MuJoCo's memory give what the bindings give.

The recorder and the monitor copy the state and the contacts through views on ``mjData``
(``engines/mujoco_memory.py``, ``capture.rows.SpanRows``) instead of binding calls; these tests run a
scene that uses every state component those views must cover and compare, substep by substep,
with ``mj_getState``, ``data.ncon``/``data.nefc`` and ``data.efc_force``.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from simuguard_gym.engines.mujoco import MujocoAdapter
from simuguard_gym.capture.rows import SpanRows
from simuguard_gym.capture.stage import RecordStage
from simuguard_gym.engines.mujoco_memory import live_fields

# Free boxes falling onto each other, a hinged paddle with an activation-filtered actuator, a
# mocap body, a weld toggled on and off (eq_active) and user data: each state component non-empty.
SCENE = """
<mujoco>
  <size nuserdata="3"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="paddle" pos="0 0 .3">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="box" size=".3 .05 .02" mass="1"/>
    </body>
    <body name="a" pos=".1 0 .6"><freejoint/><geom type="box" size=".05 .05 .05"/></body>
    <body name="b" pos=".12 .01 .8"><freejoint/><geom type="box" size=".05 .05 .05"/></body>
    <body name="c" pos="-.4 0 .1"><freejoint/><geom type="sphere" size=".05"/></body>
    <body name="target" mocap="true" pos="-.4 0 .4"><geom type="sphere" size=".02" contype="0" conaffinity="0"/></body>
  </worldbody>
  <equality><weld body1="c" body2="target" active="false"/></equality>
  <actuator><general joint="hinge" dyntype="filter" dynprm=".05" gainprm="5"/></actuator>
</mujoco>
"""


def run_scene(substeps: int):
    model = mujoco.MjModel.from_xml_string(SCENE)
    data = mujoco.MjData(model)
    for k in range(substeps):
        data.ctrl[0] = np.sin(0.05 * k)
        data.userdata[:] = (k, -k, 0.5 * k)
        data.mocap_pos[0, 2] = 0.4 + 0.001 * k
        data.eq_active[0] = (k // 40) % 2
        if k == 70:
            data.qvel[6] += 1.0  # a write to the state between substeps
        mujoco.mj_step(model, data)
        yield model, data


def test_state_rows_gather_exactly_what_mj_getstate_reads():
    adapter = None
    for model, data in run_scene(200):
        if adapter is None:
            adapter = MujocoAdapter(model, data)
            rows = adapter.state_rows()
            assert isinstance(rows, SpanRows)  # the memory view path, not the fallback
            buffer = rows.allocate(200)
            targets = rows.targets(buffer)
            expected = np.empty((200, rows.size))
            k = 0
        rows.copy(targets[k])
        mujoco.mj_getState(model, data, expected[k], mujoco.mjtState.mjSTATE_INTEGRATION)
        k += 1
    assert np.array_equal(rows.states(buffer).view(np.uint64), expected.view(np.uint64))
    assert len(np.unique(expected[:, adapter._component("eq_active").offset])) == 2  # the weld did toggle
    # The monitor's speed check reads a few elements straight from the rows.
    floats = np.array([c.offset + i for c in adapter.state_layout() if c.name != "eq_active" for i in range(c.size)])
    picked = floats[::3]
    assert np.array_equal(buffer.view(np.float64)[:, rows.words(picked)], expected[:, picked])
    with pytest.raises(ValueError, match="float state elements"):
        rows.words(np.array([adapter._component("eq_active").offset]))
    # The write encoder compares rows word by word and gathers values from them (eq_active too).
    everything = np.arange(rows.size)
    assert np.array_equal(rows.gather(buffer, everything[::-1]).view(np.uint64), expected[:, ::-1].view(np.uint64))
    layout = [c for c in adapter.state_layout() if c.size]
    ranges = rows.word_ranges(layout)
    ordered = ranges[np.argsort(ranges[:, 0])]
    assert (ordered[1:, 0] >= ordered[:-1, 1]).all()  # no word holds two components
    for c, (first, end) in zip(layout, ranges):
        changes = np.flatnonzero((expected[1:, c.offset:c.offset + c.size] != expected[:-1, c.offset:c.offset + c.size])
                                 .any(axis=1))
        words = buffer.view(np.uint64)
        in_range = np.flatnonzero((words[1:, first:end] != words[:-1, first:end]).any(axis=1))
        assert np.array_equal(changes, in_range), c.name


def test_decoding_rows_hold_positions_velocities_and_mocap_only_and_decode_the_same():
    """The monitor's rows (``decoding_only``) copy time, qpos, qvel and the mocap poses (a span
    per group) and read 0 elsewhere; decoding them gives the bits that full states give."""
    adapter = None
    for k, (model, data) in enumerate(run_scene(300)):
        if adapter is None:
            adapter = MujocoAdapter(model, data)
            full, rows = adapter.state_rows(), adapter.state_rows(decoding_only=True)
            assert isinstance(rows, SpanRows) and rows.row_bytes < full.row_bytes / 2
            buffers = full.allocate(300), rows.allocate(300)
            stages = RecordStage(), RecordStage()
        for form, buffer, stage in zip((full, rows), buffers, stages):
            form.copy(form.targets(buffer)[k])
            adapter.capture_contacts(stage)
    states, decoding = full.states(buffers[0]), rows.states(buffers[1])
    copied = np.zeros(rows.size, bool)
    for c in adapter.state_layout():
        copied[c.offset:c.offset + c.size] = c.name in MujocoAdapter.DECODE_COMPONENTS
    assert copied.sum() < rows.size and adapter._component("mocap_pos").size
    assert np.array_equal(decoding[:, copied].view(np.uint64), states[:, copied].view(np.uint64))
    assert not decoding[:, ~copied].any() and states[:, ~copied].any()
    assert np.array_equal(rows.gather(buffers[1], np.arange(rows.size)), decoding)
    with pytest.raises(ValueError, match="every component"):
        rows.word_ranges(adapter.state_layout())
    ids = np.arange(1, model.nbody)  # the paddle (hinge: kinematics), free boxes, the mocap body
    decoded = [adapter.decode_chunk(stage, s, ids) for stage, s in zip(stages, (states, decoding))]
    for one, other in zip(decoded[0][:2], decoded[1][:2]):
        assert np.array_equal(one.view(np.uint64), other.view(np.uint64))
    pairs = [d[2] for d in decoded]
    assert pairs[0].bodies.size and np.array_equal(pairs[0].speed.view(np.uint32), pairs[1].speed.view(np.uint32))
    assert np.array_equal(adapter.body_states_of_rows(rows, buffers[1], ids[1:4])[1], decoded[0][1][:, 1:4])


def test_recordings_from_memory_rows_equal_those_from_state_vectors():
    """The recorder's columns (writes, fingerprints, snapshots, bodies, contacts) are the same bits
    whether its rows are MuJoCo's memory or plain ``mj_getState`` vectors, also when the env runs
    mj_forward between substeps (it rewrites arrays that the rows span but the state leaves out)."""
    from simuguard_gym.physics.state import StateRows
    from simuguard_gym.capture.recorder import SubstepRecorder

    columns = {}
    for form in ("memory", "vectors"):
        model = mujoco.MjModel.from_xml_string(SCENE)
        data = mujoco.MjData(model)
        adapter = MujocoAdapter(model, data)
        if form == "vectors":
            adapter.state_rows = lambda a=adapter: StateRows(a.read_state, a.state_size)
        chunks = []
        recorder = SubstepRecorder(adapter, lambda cols, first, n: chunks.append(cols), chunk_substeps=64)
        adapter.hooks.add(recorder)
        recorder.start_episode()
        assert isinstance(recorder._rows, SpanRows) == (form == "memory")
        for k in range(200):  # the writes of run_scene, between substeps the adapter runs
            data.ctrl[0] = np.sin(0.05 * k)
            data.userdata[:] = (k, -k, 0.5 * k)
            data.mocap_pos[0, 2] = 0.4 + 0.001 * k
            data.eq_active[0] = (k // 40) % 2
            if k == 70:
                data.qvel[6] += 1.0
            if k % 3 == 0:  # rewrites qacc, which lies between mocap_quat and userdata in the rows
                mujoco.mj_forward(model, data)
            adapter.step(1)
        recorder.finish()
        columns[form] = {key: np.concatenate([c[key] for c in chunks]) for key in chunks[0]}
    assert columns["memory"].keys() == columns["vectors"].keys()
    for key, value in columns["memory"].items():
        other = columns["vectors"][key]
        assert value.dtype == other.dtype and value.tobytes() == other.tobytes(), key
    assert columns["memory"]["start_mask"].any() and len(np.unique(columns["memory"]["start_mask"])) > 2


def test_struct_fields_follow_the_contacts_and_forces():
    checked = 0
    for model, data in run_scene(200):
        fields = live_fields(data)
        assert fields is not None
        assert (fields.ncon, fields.nefc) == (data.ncon, data.nefc)
        if data.nefc:
            assert fields.efc_force_address == data.efc_force.__array_interface__["data"][0]
            checked += 1
    assert checked > 100


def test_contacts_staged_through_memory_equal_those_staged_through_the_bindings():
    adapter = None
    for model, data in run_scene(200):
        if adapter is None:
            adapter = MujocoAdapter(model, data)
            direct, bound = RecordStage(), RecordStage()
        if data.ncon and adapter._arena is None:
            adapter.capture_contacts(RecordStage())  # locates the arena and the struct views
        assert adapter._counters is not None or not data.ncon
        adapter.capture_contacts(direct)
        counters, adapter._counters = adapter._counters, None  # the bindings' path
        adapter.capture_contacts(bound)
        adapter._counters = counters
    assert sum(direct.counts) > 200
    assert direct.counts == bound.counts and direct.efc_counts == bound.efc_counts
    assert direct.raw.tobytes() == bound.raw.tobytes() and direct.efc.tobytes() == bound.efc.tobytes()

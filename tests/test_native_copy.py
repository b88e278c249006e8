"""The native per-substep copy (the optional C extension) gives the bytes the Python copies give.

The tap's batches are compared bit for bit with the extension on and off, on scenes that make
the native copy hand work back to Python: stage buffers that must grow, batches that fill up or
hold too many staged bytes, and a scene with no contact at the start (nothing to bind yet).
"""

from __future__ import annotations

import os

import mujoco
import numpy as np
import pytest

from simuguard_gym.capture import native
from simuguard_gym.engines.mujoco import MujocoAdapter
from simuguard_gym.capture import tap as tap_module
from simuguard_gym.capture.tap import SubstepTap

needs_native = pytest.mark.skipif(native.SubstepCopy is None, reason="the C extension is not built")


def pile(n: int = 12, height: float = 0.05) -> str:
    """``n`` boxes in a 3-wide grid dropped from ``height`` onto each other and the floor."""
    boxes = "".join(
        f'<body pos="{0.07 * (k % 3):.2f} {0.07 * (k // 3 % 2):.2f} {height + 0.06 * (k // 6):.2f}">'
        f'<freejoint/><geom type="box" size=".03 .03 .03" mass=".1"/></body>' for k in range(n))
    return f'<mujoco><worldbody><geom type="plane" size="2 2 .1"/>{boxes}</worldbody></mujoco>'


def tap_batches(xml: str, use_native: bool, monkeypatch, substeps: int = 600, max_batch: int = 100,
                steps_of: int = 25):
    monkeypatch.setattr(native, "SubstepCopy", native.SubstepCopy if use_native else None)
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    adapter = MujocoAdapter(model, data)
    batches = []
    tap = SubstepTap(adapter, lambda pose, vel, c: batches.append(
        (pose.copy(), vel.copy(), *(getattr(c, f).copy() for f in ("counts", *c.COLUMNS)))), max_batch=max_batch)
    adapter.hooks.add(tap)
    tap.start_episode()
    bound = []
    for step in range(substeps // steps_of):
        adapter.step(steps_of)  # an env step of steps_of substeps
        bound.append(tap._fill.bound)
        if step % 3 == 2:
            tap.drain()
    tap.drain()
    assert tap.substep == substeps and tap.errors == []
    return batches, bound, tap


def same_bits(one, other) -> bool:
    return len(one) == len(other) and all(
        len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8))
                                 for x, y in zip(a, b)) for a, b in zip(one, other))


@needs_native
@pytest.mark.parametrize("staged_limit", [None, 0])
def test_native_and_python_copies_decode_the_same_bits(monkeypatch, staged_limit):
    """A pile of 12 boxes: stage buffers grow (callbacks into Python mid-batch), batches of
    100 fill up; with a staged-bytes limit of 0 every 64th substep ends a batch."""
    if staged_limit is not None:
        monkeypatch.setattr(tap_module, "MAX_STAGED_BYTES", staged_limit)
    fast, bound, tap = tap_batches(pile(), True, monkeypatch)
    slow, unbound, _ = tap_batches(pile(), False, monkeypatch)
    assert all(bound) and not any(unbound)
    assert sum(len(b[2]) for b in fast) == 600 and len(tap._stage._raw) > 1 << 16  # grew from 64 kB
    if staged_limit == 0:
        assert max(len(b[2]) for b in fast) == 64
    assert same_bits(fast, slow)


@needs_native
def test_a_scene_without_contacts_at_first_is_copied_natively_from_its_first_substep(monkeypatch):
    """Boxes dropped from 30 cm: no contact for the first substeps, then many. MuJoCo's checked
    layout says where contacts will be, so the native copy binds at once (a scene that never
    touches anything, InvertedPendulum's, never copies in Python) and copies the later contacts
    bit for bit."""
    fast, bound, _ = tap_batches(pile(4, 0.3), True, monkeypatch)
    slow, _, _ = tap_batches(pile(4, 0.3), False, monkeypatch)
    assert all(bound)
    assert same_bits(fast, slow)
    assert sum(int(batch[2].sum()) for batch in fast) > 0  # contacts came, and were copied


@needs_native
def test_a_scene_that_never_touches_anything_is_copied_natively():
    import gymnasium as gym

    env = gym.make("InvertedPendulum-v5")
    env.reset(seed=0)
    adapter = MujocoAdapter(env.unwrapped.model, env.unwrapped.data)
    tap = SubstepTap(adapter, lambda pose, vel, c: None)
    adapter.hooks.add(tap)
    tap.start_episode()
    assert env.unwrapped.data.ncon == 0 and tap._fill.bound
    adapter.step(10)
    assert tap._fill.bound and tap.waiting == 10
    env.close()


def binding(source, rows, offset):
    b = native.CopyBinding(version=native.BINDING_VERSION, nspans=1, rows=rows.ctypes.data, row_bytes=40, capacity=2)
    b.span_src[0], b.span_bytes[0], b.span_offset[0] = source.ctypes.data, 32, offset
    return bytes(b)


@needs_native
def test_substep_copy_checks_what_it_is_given():
    copy = native.SubstepCopy()
    copy()  # unbound: nothing
    source, rows = np.arange(4.0), np.zeros((2, 40), np.uint8)
    calls = []
    with pytest.raises(ValueError, match="outside the row"):
        copy.bind(binding(source, rows, 16), calls.append, (source, rows))
    assert not copy.active
    with pytest.raises(ValueError, match="capture/native.py and _substep_copy.c disagree"):
        copy.bind(binding(source, rows, 8)[:-8], calls.append, (source, rows))  # not a whole copy_binding
    with pytest.raises(TypeError, match="no arguments"):
        copy(1)
    copy.bind(binding(source, rows, 8), calls.append, (source, rows))
    copy()
    source += 1
    copy()
    assert np.array_equal(rows[:, 8:].view(np.float64), [[0, 1, 2, 3], [1, 2, 3, 4]]) and calls == [True]
    copy()  # full: handed to Python, nothing copied
    assert calls == [True, False] and copy.row == 2


def test_the_extension_is_built_where_ci_requires_it():
    """CI sets SIMUGUARD_REQUIRE_NATIVE=1: the README's install must have compiled it there."""
    if os.environ.get("SIMUGUARD_REQUIRE_NATIVE") != "1":
        pytest.skip("SIMUGUARD_REQUIRE_NATIVE is not set")
    assert native.SubstepCopy is not None


def record_files(make, directory, use_native: bool, monkeypatch, *, helper: bool, steps: int = 150):
    from conftest import run_random
    from simuguard_gym import RecordPhysics

    monkeypatch.setattr(native, "SubstepCopy", native.SubstepCopy if use_native else None)
    env = RecordPhysics(make(), directory, chunk_substeps=64, helper_process=helper)
    out = run_random(env, steps, seed=1)
    env.close()
    assert out[-1][-1]["simuguard"]["errors"] == []
    return [p.read_bytes() for p in env.paths], env.recorder


@needs_native
@pytest.mark.parametrize("helper", [False, True], ids=["in-process", "helper"])
def test_recordings_are_the_same_bytes_with_native_and_python_copies(tmp_path, monkeypatch, helper):
    """RecordPhysics's before- and after-substep copies and its contact staging, in C or in
    Python: the same files (episodes of several 64-substep chunks, Gymnasium's frames after the
    first read as "continue")."""
    from conftest import make_contact_scene

    def make():
        return make_contact_scene(max_episode_steps=70)

    fast, recorder = record_files(make, tmp_path / "native", True, monkeypatch, helper=helper)
    slow, python_recorder = record_files(make, tmp_path / "python", False, monkeypatch, helper=helper)
    assert recorder.after_substep is recorder._fill.copy and python_recorder._fill.copy is None
    assert len(fast) == 3 and fast == slow


@needs_native
def test_the_binding_is_one_structure_laid_out_alike_in_c_and_python():
    """The C copy takes one named structure (copy_binding), mirrored by native.CopyBinding: the
    extension's own layout (offsetof and sizeof of every field) equals the ctypes one."""
    import _simuguard_substep_copy

    version, size, fields = _simuguard_substep_copy.binding_layout()
    assert version == native.BINDING_VERSION and (size, fields) == native.layout_of(native.CopyBinding)
    assert [name for name, _, _ in fields][:4] == ["version", "nspans", "span_src", "span_bytes"]

"""What an env changes in its model between episodes is recorded and written back by replay."""

from __future__ import annotations

import mujoco
import numpy as np

from simuguard_gym.engines import mujoco_model
from simuguard_gym.engines.mujoco_model import ModelArrays, fingerprint

XML = """<mujoco><worldbody><site name="goal" pos="0 0 1"/>
  <body name="box" pos="0 0 .1"><freejoint/><geom type="box" size=".03 .03 .03"/></body>
  <body name="door" pos=".5 0 .2"><joint type="hinge"/><geom type="box" size=".2 .01 .2"/></body>
</worldbody></mujoco>"""


def test_changes_are_written_back_on_a_fresh_build(monkeypatch):
    monkeypatch.setattr(mujoco_model, "WHOLE_BYTES", 32)  # geom_size (2 x 3 floats) goes as changed elements
    recorded = mujoco.MjModel.from_xml_string(XML)
    arrays = ModelArrays(recorded)
    recorded.site_pos[0] = [0.2, 0.1, 0.9]         # Meta-World's new goal at reset
    recorded.geom_size[1, 0] = 0.04                  # robosuite's randomised cube
    recorded.opt.timestep = 0.004
    changes, digests = arrays.changes(recorded), arrays.digests(recorded)
    assert set(changes) == {"site_pos", "geom_size", "opt.timestep"}
    assert changes["geom_size"]["index"].tolist() == [3] and "index" not in changes["site_pos"]

    fresh = mujoco.MjModel.from_xml_string(XML)  # the replay's own build
    assert fingerprint(fresh) != fingerprint(recorded)
    written, differing = ModelArrays(fresh).restore(fresh, changes, digests)
    assert sorted(written) == ["geom_size", "opt.timestep", "site_pos"] and differing == []
    assert fingerprint(fresh) == fingerprint(recorded)


def test_an_array_changed_in_one_episode_is_recorded_in_every_later_one():
    model = mujoco.MjModel.from_xml_string(XML)
    arrays = ModelArrays(model)
    model.site_pos[0] = [0.3, 0.0, 1.0]
    assert set(arrays.changes(model)) == {"site_pos"}
    model.site_pos[0] = [0.0, 0.0, 1.0]  # back to the build's value: still recorded
    assert np.array_equal(arrays.changes(model)["site_pos"]["values"], model.site_pos)


def test_what_cannot_be_restored_is_named():
    recorded = mujoco.MjModel.from_xml_string(XML)
    arrays = ModelArrays(recorded)
    recorded.body_mass[1] = 2.0
    digests = arrays.digests(recorded)
    fresh = mujoco.MjModel.from_xml_string(XML)
    written, differing = ModelArrays(fresh).restore(fresh, {}, digests)  # a recording without the change
    assert written == [] and differing == ["body_mass"]
    assert arrays.changes(recorded)["body_mass"]["values"][1] == 2.0


def test_the_fingerprint_and_checksums_are_those_of_the_arrays_as_they_are_now():
    """Computed once for the model as built, they follow every change: an array, an option."""
    model = mujoco.MjModel.from_xml_string(XML)
    arrays = ModelArrays(model)

    def full_digests() -> dict:
        import zlib

        return {name: zlib.crc32(np.ascontiguousarray(v).tobytes()) for name, v in mujoco_model.physics_arrays(model)}

    for change in (lambda: None, lambda: model.body_mass.__setitem__(1, 2.0), lambda: setattr(model.opt, "timestep", 0.003),
                   lambda: model.body_mass.__setitem__(1, float(arrays.reference["body_mass"][1]))):
        change()
        assert arrays.fingerprint(model) == fingerprint(model)
        assert arrays.digests(model) == full_digests()
    assert arrays.differing(model) == ["opt.timestep"]


def test_a_changed_option_replays_from_a_file(tmp_path):
    """An env that changes a scalar option (opt.timestep) between episodes: the recording keeps it
    as a scalar, and the replay writes it back."""
    import gymnasium as gym

    import simuguard_gym.envs  # noqa: F401
    from simuguard_gym import RecordPhysics, replay

    env = RecordPhysics(gym.make("simuguard_gym/MujocoScene-v0", xml=XML), tmp_path)
    env.reset(seed=0)
    env.unwrapped.model.opt.timestep = 0.004  # the env's own change, after it was built
    env.reset(seed=1)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.close()
    result = replay(env.paths[-1])
    assert result.exact, result.message
    assert any("opt.timestep" in note for note in result.notes)


def test_every_array_that_differs_is_found_whatever_lies_beside_it():
    """Arrays side by side in the model's memory are compared as one span; a change anywhere in
    a span (a physics array, or a drawing-only array between two) is resolved array by array."""
    model = mujoco.MjModel.from_xml_string(XML.replace("<worldbody>", '<worldbody><camera name="c" pos="0 0 2"/>'))
    arrays = ModelArrays(model)
    model.cam_pos[0] = [1.0, 1.0, 1.0]  # drawing only: not a physics array
    assert arrays.differing(model) == []
    for name in ("body_pos", "geom_size", "site_pos", "dof_damping", "body_mass"):
        value = getattr(model, name)
        before = value.copy()
        value.flat[-1] += 0.5
        assert arrays.differing(model) == [name]
        value[...] = before
    assert arrays.differing(model) == []
    model.body_pos[1, 2] += 1.0
    model.geom_size[0, 0] += 1.0
    assert arrays.differing(model) == ["body_pos", "geom_size"]  # in physics_arrays' order
    # the listing was made with body_pos changed: restoring it is still seen as the reference
    listed = ModelArrays(mujoco.MjModel.from_xml_string(XML))
    other = mujoco.MjModel.from_xml_string(XML)
    built = other.body_pos[1, 2]
    other.body_pos[1, 2] = built + 1.0
    assert listed.differing(other) == ["body_pos"]
    other.body_pos[1, 2] = built
    assert listed.differing(other) == []

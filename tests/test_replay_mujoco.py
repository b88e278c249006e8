"""Bit-exact replay on a raw MuJoCo scene and Gymnasium MuJoCo envs, and the divergence check."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from conftest import make_contact_scene, run_random
from simuguard_gym import RecordPhysics, load_recording, replay

ENVS = {
    "contact-scene": lambda: make_contact_scene(max_episode_steps=1000),
    "Pusher-v5": lambda: gym.make("Pusher-v5", max_episode_steps=1000),
    # Random actions topple the Ant; keep the episode running for all 300 steps.
    "Ant-v5": lambda: gym.make("Ant-v5", terminate_when_unhealthy=False, max_episode_steps=1000),
}


def record(make, directory, steps=300, seed=0, **kwargs):
    env = RecordPhysics(make(), directory, **kwargs)
    run_random(env, steps, seed)
    env.close()
    assert len(env.paths) == 1
    return load_recording(env.paths[0])


@pytest.mark.parametrize("name", list(ENVS))
def test_replay_is_bit_exact(name, record_dir):
    rec = record(ENVS[name], record_dir, snapshot_every=100)
    assert rec.substeps == 300 * 5
    assert len(rec.columns["snapshot_substep"]) == 15
    if name == "contact-scene":
        # The scene really is contact-rich: objects touch each other and the table.
        pairs = {tuple(p) for p in rec.columns["contact_bodies"]}
        names = rec.bodies.names
        assert {(names.index("box_a"), names.index("box_c"))} <= pairs
        assert len(rec.tracked) == 5
    result = replay(rec)
    assert result.exact, result.message
    assert result.substeps == rec.substeps
    assert not result.initial_state_restored


@pytest.mark.parametrize("phase_index", [0, 1])
def test_altered_actuation_diverges_at_that_substep(phase_index, record_dir):
    rec = record(ENVS["contact-scene"], record_dir, steps=60)
    # The gymnasium-style env writes ctrl before the first substep of each env step.
    written = np.flatnonzero(rec.columns["start_mask"])
    k = int(written[[3, 17][phase_index]])
    offsets = rec.write_offsets("start")
    layout = {c.name: c for c in rec.state_layout}
    assert "ctrl" in rec.writes_at(k)
    # Find ctrl inside the substep's written values and change one actuator's command.
    bits = int(rec.columns["start_mask"][k])
    position = offsets[k]
    for i, comp in enumerate(rec.state_layout):
        if bits >> i & 1:
            if comp.name == "ctrl":
                break
            position += comp.size
    rec.columns["start_values"][position] += 0.05
    assert layout["ctrl"].size == 2
    result = replay(rec)
    assert not result.exact
    assert result.divergence.substep == k, result.message
    light = replay(rec, verify="states")  # no contacts captured: the state fingerprint still sees it
    assert not light.exact and light.divergence.substep == k


def test_states_only_replay_and_bad_verify(record_dir):
    rec = record(ENVS["contact-scene"], record_dir, steps=40)
    assert replay(rec, verify="states").exact
    rec.columns["contact_depth"][5] += 1e-3  # contacts are not compared in this mode ...
    assert replay(rec, verify="states").exact
    assert not replay(rec).exact  # ... but are in the full one
    with pytest.raises(ValueError, match="verify must be 'all' or 'states'"):
        replay(rec, verify="contacts")


def test_altered_body_state_names_the_body(record_dir):
    rec = record(ENVS["contact-scene"], record_dir, steps=20)
    rec.columns["body_pose"][40, 2, 0] += 1e-12
    result = replay(rec)
    assert not result.exact
    assert result.divergence.substep == 40
    assert result.divergence.quantity == "body_pose"
    assert result.divergence.body == rec.tracked_names[2]


def test_replay_with_env_fn_and_unseeded_reset(record_dir):
    env = RecordPhysics(make_contact_scene(reset_noise=0.01), record_dir)
    env.reset()  # no seed: the reset cannot be reproduced from the recording
    for _ in range(20):
        env.step(env.action_space.sample())
    env.close()
    rec = load_recording(env.paths[0])
    assert rec.header["seed"] is None
    result = replay(rec, env_fn=lambda: make_contact_scene(reset_noise=0.01))
    # The model is the same, so the recorded initial state is written back and the rest is exact.
    assert result.initial_state_restored
    assert result.exact, result.message


def test_replay_refuses_a_different_model(record_dir):
    rec = record(ENVS["Pusher-v5"], record_dir, steps=5)
    result = replay(rec, env_fn=lambda: gym.make("Ant-v5"))  # the user's env, as asked
    assert not result.exact
    assert result.divergence.quantity == "model"


def test_contact_speeds_compare_to_a_few_units_in_the_last_place():
    """Speeds are derived from verified states; another simuguard version may round their last bit."""
    from simuguard_gym.replay.replay import SPEED_ULPS, _first_segment_diff

    recorded = np.array([[1.0, 2.0], [3.0, 0.0]], np.float32)
    replayed = recorded.copy()
    replayed[1, 0] = np.nextafter(replayed[1, 0], np.float32(10))
    offsets = np.array([0, 1, 2])
    assert _first_segment_diff(replayed, recorded, offsets) == 1
    assert _first_segment_diff(replayed, recorded, offsets, SPEED_ULPS) is None
    replayed[1, 0] = 3.001
    assert _first_segment_diff(replayed, recorded, offsets, SPEED_ULPS) == 1

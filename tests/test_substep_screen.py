"""The monitor's substep screen (MuJoCo's control callback, engines/mujoco_screen.py): from the
env's second episode on it watches the substeps without Python, and gives the events and flags
of the hooks, bit for bit, while changing nothing the env measures; where it cannot serve (a
control callback of the user's, an env stepping in halves) the hooks run and say why."""

from __future__ import annotations

import tempfile

import artifact_scenes as scenes
import gymnasium as gym
import mujoco
import numpy as np
import pytest

import simuguard_gym.envs  # noqa: F401 - registers MujocoScene-v0
from simuguard_gym import ArtifactMonitor, RecordPhysics
from simuguard_gym.engines.mujoco_screen import MujocoScreen
from simuguard_gym.envs.mujoco_scene import MujocoSceneEnv
from simuguard_gym.wrappers.info_key import INFO_KEY

pytestmark = pytest.mark.skipif(MujocoScreen.extension is None, reason="the C extension is not built")


def _ant_torso_into_floor(env: gym.Env, step: int) -> None:
    # Before the first step: later, the random flailing before it may have lifted the torso a
    # metre, and a teleport from there reads as a fall that explains the launch (gravity stage).
    # The torso's deep contact is then the scene's first: the screen has not located the contact
    # records yet, and the detector counts that substep's flag for it.
    if step == 0:
        data = env.unwrapped.data
        data.qpos[2], data.qvel[:] = 0.12, 0


def _scene(scene):
    xml, actions = scene()
    return (lambda: gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=scenes.FRAME_SKIP)), len(actions)


CASES = {
    "Ant-v5 (a launch injected)": (lambda: gym.make("Ant-v5", terminate_when_unhealthy=False), 120,
                                   _ant_torso_into_floor),
    "HalfCheetah-v5": (lambda: gym.make("HalfCheetah-v5"), 300, None),
    "Hopper-v5 (RK4, fallen)": (lambda: gym.make("Hopper-v5", terminate_when_unhealthy=False), 300, None),
    "Pusher-v5": (lambda: gym.make("Pusher-v5"), 200, None),
    "created inside the floor": (*_scene(scenes.created_inside_floor), None),
    "dropped into a bin": (*_scene(scenes.dropped_into_bin), None),
    "a basket shoved": (*_scene(scenes.basket_shoved), None),
    "a finger's flick": (*_scene(scenes.finger_flick), None),
}


#: The screened episodes of each case: Gymnasium's MujocoEnvs from the first (their stepping is
#: known), the scenes (a plain gym.Env) from the second (the hooks learn it first).
GYMNASIUM = {"Ant-v5 (a launch injected)", "HalfCheetah-v5", "Hopper-v5 (RK4, fallen)", "Pusher-v5"}


def _episodes(make, steps, inject, episodes=3):
    """Seeded random episodes under the monitor: per episode (screened?, events, flags, outputs)."""
    env = ArtifactMonitor(make())
    env.action_space.seed(5)
    out = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=100 + episode)
        outputs = [obs]
        screened = env.screened is not None
        for step in range(steps):
            if inject is not None:
                inject(env, step)
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            outputs.append((obs, reward, terminated, truncated, {k: v for k, v in info.items() if k != INFO_KEY}))
            if terminated or truncated:
                break
        qpos = env.unwrapped.data.qpos.copy()
        env.reset()  # ends the episode (its events decided) before it is read
        assert info[INFO_KEY]["errors"] == []
        out.append((screened, env.detector_events, env.detector_flags, outputs, qpos))
    env.close()
    return out


@pytest.fixture(autouse=True)
def _keep_last_episode(monkeypatch):
    """The monitor's last episode's events and flags, kept across the reset that ends it."""
    original = ArtifactMonitor._finish_episode

    def finish(self):
        original(self)
        if self.detector is not None:
            self.detector_events, self.detector_flags = self.detector.events, self.detector.flags

    monkeypatch.setattr(ArtifactMonitor, "_finish_episode", finish)


@pytest.mark.parametrize("case", list(CASES))
def test_the_screen_gives_the_events_and_flags_of_the_hooks(case, monkeypatch):
    make, steps, inject = CASES[case]
    screened = _episodes(make, steps, inject)
    monkeypatch.setattr(MujocoScreen, "extension", None)  # the hooks, every episode
    hooked = _episodes(make, steps, inject)
    assert [s[0] for s in screened] == [case in GYMNASIUM, True, True]
    assert [h[0] for h in hooked] == [False, False, False]
    for s, h in zip(screened, hooked):
        assert s[1] == h[1]  # events, every field
        assert s[2] == h[2]  # flags
        np.testing.assert_array_equal(s[4], h[4])


def test_the_injected_launch_is_found_by_the_screen():
    make, steps, inject = CASES["Ant-v5 (a launch injected)"]
    for screened, events, _, _, _ in _episodes(make, steps, inject):
        assert screened and [e["body"] for e in events if e["artifact"]] == ["torso"]


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Ant-v5"])
def test_the_screen_changes_nothing_the_env_measures(env_id):
    plain = gym.make(env_id)
    plain.action_space.seed(5)
    expected = []
    for episode in range(3):
        obs, _ = plain.reset(seed=100 + episode)
        outputs = [obs]
        for _ in range(150):
            obs, reward, terminated, truncated, info = plain.step(plain.action_space.sample())
            outputs.append((obs, reward, terminated, truncated, info))
            if terminated or truncated:
                break
        expected.append((outputs, plain.unwrapped.data.qpos.copy()))
    monitored = _episodes(lambda: gym.make(env_id), 150, None)
    assert [m[0] for m in monitored] == [True, True, True]
    for (outputs, qpos), m in zip(expected, monitored):
        assert len(outputs) == len(m[3])
        np.testing.assert_array_equal(outputs[0], m[3][0])
        for a, b in zip(outputs[1:], m[3][1:]):
            np.testing.assert_array_equal(a[0], b[0])
            assert a[1:4] == b[1:4]
            assert a[4].keys() == b[4].keys()
            for key in a[4]:
                np.testing.assert_array_equal(a[4][key], b[4][key])
        np.testing.assert_array_equal(qpos, m[4])


def test_a_control_callback_of_the_users_keeps_the_hooks():
    calls = []
    env = ArtifactMonitor(gym.make("Ant-v5"))  # built first: MuJoCo compiles no model under a Python callback
    mujoco.set_mjcb_control(lambda model, data: calls.append(data.time))
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            for _ in range(5):
                env.step(env.action_space.sample())
        assert env.screened is None and env.screen_unavailable == "another control callback is installed"
        env.close()
        assert len(calls) >= 2 * 5 * 5 * 4  # the user's callback ran at every call (RK4: four a substep)
    finally:
        mujoco.set_mjcb_control(None)


def test_a_callback_set_and_cleared_between_episodes_leaves_the_screen_watching():
    # The screen stays on MuJoCo's callback between episodes; a user's callback in between
    # (an observer of their own) replaces it, and clearing it leaves none: the next episode's
    # screen must be called again, or it would see no substep (LostSubsteps).
    env = ArtifactMonitor(gym.make("HalfCheetah-v5"))
    env.action_space.seed(0)
    screened = []
    for seed in range(4):
        if seed == 2:
            mujoco.set_mjcb_control(lambda model, data: None)
            mujoco.set_mjcb_control(None)
        env.reset(seed=seed)
        for _ in range(20):
            _, _, _, _, info = env.step(env.action_space.sample())
        assert info[INFO_KEY]["errors"] == []
        screened.append(env.screened is not None and env.screened.screen.seen == 20 * 5)
    env.close()
    assert screened == [True, True, True, True]


class HalvesEnv(gym.Env):
    """A scene stepped as robosuite steps: mj_step1, the control written, mj_step2."""

    def __init__(self) -> None:
        xml, _ = scenes.created_inside_floor()
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.model.nq,))
        self.action_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        return self.data.qpos.copy(), {}

    def step(self, action):
        for _ in range(4):
            mujoco.mj_step1(self.model, self.data)
            mujoco.mj_step2(self.model, self.data)
        return self.data.qpos.copy(), 0.0, False, False, {}


def test_an_env_stepping_in_halves_keeps_the_hooks():
    env = ArtifactMonitor(HalvesEnv())
    for seed in (0, 1):
        env.reset(seed=seed)
        for _ in range(30):
            _, _, _, _, info = env.step(env.action_space.sample())
    assert env.screened is None and "halves" in env.screen_unavailable
    assert [e["body"] for e in info[INFO_KEY]["events"]] == ["can"]  # the hooks found the launch
    env.close()


@pytest.mark.faults
def test_a_callback_that_replaces_the_screen_mid_episode_is_a_reported_loss():
    env = ArtifactMonitor(gym.make("HalfCheetah-v5"))
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert env.screened is not None
    mujoco.set_mjcb_control(lambda model, data: None)  # someone else's, over the screen's
    try:
        for _ in range(10):
            env.step(env.action_space.sample())
        _, info = env.reset(seed=2)
    finally:
        mujoco.set_mjcb_control(None)
    env.close()
    assert [e["type"] for e in info[INFO_KEY]["errors"]] == ["LostSubsteps"]


def test_on_artifact_truncate_ends_a_screened_episode_at_the_hooks_step(monkeypatch):
    def run() -> list[tuple[bool, int | None]]:
        env = ArtifactMonitor(gym.make("Ant-v5", terminate_when_unhealthy=False), on_artifact="truncate")
        env.action_space.seed(3)
        out = []
        for seed in (7, 7):  # the same episode twice
            env.reset(seed=seed)
            ended = None
            for step in range(100):
                _ant_torso_into_floor(env, step)
                _, _, _, truncated, _ = env.step(env.action_space.sample())
                if truncated:
                    ended = step
                    break
            out.append((env.screened is not None or env.screen_unavailable is None, ended))
        env.close()
        return out

    screened = run()
    monkeypatch.setattr(MujocoScreen, "extension", None)
    hooked = run()
    assert [s for s, _ in screened] == [True, True] and [s for s, _ in hooked] == [False, False]
    assert [e for _, e in screened] == [e for _, e in hooked] and hooked[0][1] is not None


class AntInHalves(gym.Wrapper):
    """Ant-v5 stepped as robosuite steps (mj_step1, the control written, mj_step2) behind Gymnasium's
    own stepping methods: its class says whole steps, its substeps say otherwise."""

    def step(self, action):
        env = self.env.unwrapped
        for _ in range(env.frame_skip):
            mujoco.mj_step1(env.model, env.data)
            env.data.ctrl[:] = action
            mujoco.mj_step2(env.model, env.data)
        return env._get_obs(), 0.0, False, False, {}


@pytest.mark.faults
def test_a_screened_env_found_stepping_in_halves_is_reported_and_handed_to_the_hooks():
    env = ArtifactMonitor(AntInHalves(gym.make("Ant-v5")))
    env.reset(seed=0)
    assert env.screened is not None  # Ant's class steps whole
    env.action_space.seed(0)
    errors = []
    for step in range(60):
        _ant_torso_into_floor(env, step)  # a marked substep: the screen re-simulates and diverges
        _, _, _, _, info = env.step(env.action_space.sample())
        errors += info[INFO_KEY]["errors"]
    assert [e["type"] for e in errors][:1] == ["ScreenDiverged"] and "between substeps" in errors[0]["message"]
    env.reset(seed=1)
    assert env.screened is None and "halves" in env.screen_unavailable
    env.close()


@pytest.mark.faults
def test_a_step_longer_than_the_ring_is_said_and_the_next_episode_keeps_more():
    """A scene whose steps grow from 10 substeps to 1,000 after its first episode: the screen's
    ring (sized from the steps seen) cannot hold what an event starting early in such a step
    examines; the monitor says so, and the next episode's ring holds it."""
    make, _ = _scene(scenes.created_inside_floor)
    env = ArtifactMonitor(make())
    env.reset(seed=0)
    env.step(np.zeros(0))  # the hooks' episode: 10 substeps a step
    env.unwrapped.frame_skip = 1000
    found = []
    for seed in (1, 2):
        env.reset(seed=seed)
        _, _, _, _, info = env.step(np.zeros(0))
        found.append(([e["type"] for e in info[INFO_KEY]["errors"]], [e["body"] for e in info[INFO_KEY]["events"]]))
    env.close()
    assert found == [(["ScreenRingShort"], []), ([], ["can"])]


def _entries(make, inject, steps=120, episodes=2):
    """Every step's whole output under the monitor, its info entry included."""
    env = ArtifactMonitor(make())
    env.action_space.seed(7)
    out = []
    for episode in range(episodes):
        env.reset(seed=200 + episode)
        for step in range(steps):
            if inject is not None:
                inject(env, step)
            result = env.step(env.action_space.sample())
            out.append(result)
            if result[2] or result[3]:
                break
    env.close()
    return out


@pytest.mark.parametrize("env_id, recorded", [("HalfCheetah-v5", False), ("Walker2d-v5", False),
                                              ("HalfCheetah-v5", True)])
def test_the_one_call_step_returns_what_the_monitors_python_returns(env_id, recorded, monkeypatch, tmp_path):
    """While no candidate is open, one C call polls the screen and builds the step's output
    (quiet_step); it returns what the Python path returns, before and after the episode's first
    deep-penetration flag (the first of these random episodes raises one: later steps report it
    through the same call), also into the entry of a RecordPhysics inside."""
    calls = {"quiet": 0, "flagged": 0}
    original = MujocoScreen.quiet_step_call

    def counted(self):
        quiet_step = original(self)

        def call(address, result, entry):
            got = quiet_step(address, result, entry)
            calls["quiet"] += isinstance(got, tuple)
            calls["flagged"] += isinstance(got, tuple) and bool(got[4][INFO_KEY]["flags"])
            return got
        return call

    def make():
        env = gym.make(env_id, terminate_when_unhealthy=False) if env_id == "Walker2d-v5" else gym.make(env_id)
        return RecordPhysics(env, tempfile.mkdtemp(dir=tmp_path)) if recorded else env

    monkeypatch.setattr(MujocoScreen, "quiet_step_call", counted)
    fast = _entries(make, None, steps=150)
    monkeypatch.setattr(MujocoScreen, "quiet_step_call", lambda self: (lambda address, result, entry: None))
    python = _entries(make, None, steps=150)
    assert calls["quiet"] > 50 and calls["flagged"] > 10
    assert len(fast) == len(python) == 300
    for a, b in zip(fast, python):
        np.testing.assert_array_equal(a[0], b[0])
        if recorded:  # each run records into files of its own
            a, b = (r[:4] + ({**r[4], INFO_KEY: {k: v for k, v in r[4][INFO_KEY].items() if k != "recording"}},)
                    for r in (a, b))
            assert set(a[4][INFO_KEY]) >= {"substeps", "errors", "artifact", "events", "flags"}
        assert a[1:] == b[1:]  # reward, terminated, truncated, info with its entry
    flagged = [bool(info[INFO_KEY]["flags"]) for *_, info in fast]
    assert any(not flagged[k] and flagged[k + 1] for k in range(149))  # a quiet step, then a flagged one


def test_the_one_call_step_leaves_other_results_to_python():
    quiet_step = MujocoScreen.extension.quiet_step
    for result in [(1, 0.0, False, False, {INFO_KEY: None}), (1, 0.0, False, False, {INFO_KEY: {"errors": ()}}),
                   (1, 0.0, True, False, {}), (1, 0.0, False, True, {}),
                   (1, 0.0, False, False, []), (1, 0.0, False, False), [1, 0.0, False, False, {}]]:
        assert quiet_step(0, result, {}) is None  # decided before the screen is read (address 0: none)
    for info in [{}, {INFO_KEY: {}}, {INFO_KEY: {"errors": [], "substeps": 5}}]:
        with pytest.raises(ValueError, match="no screen binding"):  # a result to poll, and no screen to poll
            quiet_step(0, (1, 0.0, False, False, info), {})
    with pytest.raises(TypeError, match="entry: dict"):
        quiet_step(0, (1, 0.0, False, False, {}), [])
    with pytest.raises(ValueError, match="no screen binding"):
        MujocoScreen.extension.poll(0)


def test_the_one_call_step_builds_the_entry_as_the_python_path_does():
    """Where the screen tells nothing new, the entry is the monitor's as it stands, each list a
    copy of its own, merged into a copy of an inner wrapper's entry with that entry's errors first
    (as with_simuguard merges): what the Python path returns."""
    env = ArtifactMonitor(gym.make("HalfCheetah-v5"))
    env.reset(seed=0)
    env.step(env.action_space.sample())
    screened = env.screened
    assert screened is not None
    entry = {"artifact": True, "events": [{"body": "torso"}], "flags": [{"kind": "deep_penetration"}],
             "errors": [{"where": "monitor"}]}
    inner = {"substeps": 5, "errors": [{"where": "recorder"}]}
    info = {"x_position": 0.1, INFO_KEY: inner}
    out = screened.quiet_step(screened.address, (1, 0.5, False, False, info), entry)  # nothing ran since the poll
    assert out[:4] == (1, 0.5, False, False)
    assert out[4] == {"x_position": 0.1, INFO_KEY: {"substeps": 5, "artifact": True, "events": [{"body": "torso"}],
                                                      "flags": [{"kind": "deep_penetration"}],
                                                      "errors": [{"where": "recorder"}, {"where": "monitor"}]}}
    got = out[4][INFO_KEY]
    assert all(got[k] is not entry[k] for k in ("events", "flags", "errors"))  # a user's edit stays in its step
    assert info == {"x_position": 0.1, INFO_KEY: inner} and inner["errors"] == [{"where": "recorder"}]
    env.close()


@pytest.mark.faults
def test_a_failing_one_call_step_is_reported_not_raised(monkeypatch):
    def failing(address, result, entry):
        raise RuntimeError("the screen's call failed")

    monkeypatch.setattr(MujocoScreen, "quiet_step_call", lambda self: failing)
    env = ArtifactMonitor(gym.make("HalfCheetah-v5"))
    env.reset(seed=0)
    assert env.screened is not None
    plain = gym.make("HalfCheetah-v5")
    plain.reset(seed=0)
    for _ in range(3):
        action = env.action_space.sample()
        obs, reward, *_, info = env.step(action)
        expected, expected_reward, *_ = plain.step(action)
        np.testing.assert_array_equal(obs, expected)
        assert reward == expected_reward
    assert [(e["type"], e["message"]) for e in info[INFO_KEY]["errors"]] == [("RuntimeError", "the screen's call failed")]
    env.close()


class _ControlledPerSubstep(MujocoSceneEnv):
    """A scene stepped as robosuite's controllers step theirs: one mj_step per substep, the
    controls (and, at some substeps, an applied force) written before each; the state each
    substep starts from, as MuJoCo gives it, kept for the test."""

    def __init__(self, xml: str) -> None:
        super().__init__(xml, frame_skip=6)
        self.started: list[np.ndarray] = []

    def _step_mujoco_simulation(self, ctrl: np.ndarray, n_frames: int) -> None:
        size = mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_INTEGRATION)
        for k in range(n_frames):
            self.data.ctrl[:] = ctrl * (1 + 0.1 * k)
            self.data.xfrc_applied[2, 0] = 0.5 if k % 3 == 0 else self.data.xfrc_applied[2, 0]
            state = np.empty(size)
            mujoco.mj_getState(self.model, self.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
            self.started.append(state)
            mujoco.mj_step(self.model, self.data)


def test_the_ring_gives_the_states_substeps_started_from_with_inputs_written_between_them():
    """The ring keeps the integrated state every substep and the inputs where they changed: the
    states it gives back are MuJoCo's own, bit for bit, where the env writes its controls before
    every substep and an applied force before some, and where it writes them once a step."""
    xml, actions = scenes.basket_shoved()
    env = ArtifactMonitor(_ControlledPerSubstep(xml))
    env.reset(seed=0)
    env.step(actions[0])  # the hooks' episode learns how the env steps
    env.reset(seed=1)
    assert env.screened is not None
    inner = env.unwrapped
    inner.started.clear()
    for action in actions[:20]:
        env.step(action + 1.0)
    screen = env.screened.screen
    lo = screen.oldest
    given = screen.states(lo, screen.seen)
    assert len(given) == len(inner.started[lo:]) >= 60
    np.testing.assert_array_equal(given.view(np.uint64), np.array(inner.started[lo:]).view(np.uint64))
    env.close()

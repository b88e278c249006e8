"""The audit's policy protocol (simuguard_gym.policy): reset(info) and act(observation, info) with
action chunks, a policy file in the current directory, and episodes over envs side by side."""

from __future__ import annotations

import json
import textwrap

import numpy as np

from simuguard_gym import load_recording
from simuguard_gym.cli import main

ENV = ["--env", "simuguard_gym/PlaceCanBasket-MuJoCo-v0", "--episodes", "3", "--quiet", "--no-videos"]

POLICY = textwrap.dedent('''
    import json, os
    import numpy as np

    class ChunkedExpert:
        """Plays the task's scripted placement in chunks of 4, after a reset that must come first."""

        def __init__(self):
            self.log = open(os.environ["POLICY_LOG"], "a")

        def reset(self, info):
            self.t = 0
            self.log.write(json.dumps({"reset": info.get("seed"), "env_index": info.get("env_index")}) + "\\n")

        def act(self, observation, info):
            batched = isinstance(info, list)
            n = len(info) if batched else 1
            self.log.write(json.dumps({"act": self.t, "n": n}) + "\\n")
            self.log.flush()
            # the built-in task's expert reads the step count; here a chunk of 4 steps of holding still
            chunk = np.tile(np.array([-0.18, 0.0, 0.16, 0.0, 0.02, 0.02], np.float32), (4, 1))
            self.t += 4
            return np.stack([chunk] * n) if batched else chunk
''')


def _run(tmp_path, monkeypatch, *extra):
    (tmp_path / "mypolicy.py").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POLICY_LOG", str(tmp_path / "calls.jsonl"))
    out = tmp_path / "run"
    assert main(["audit", *ENV, "--policy", "mypolicy:ChunkedExpert", "--out", str(out), *extra]) == 0
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    return out, calls


def test_a_policy_module_in_the_current_directory_acts_in_chunks(tmp_path, monkeypatch):
    out, calls = _run(tmp_path, monkeypatch)
    resets = [c["reset"] for c in calls if "reset" in c]
    assert resets[-3:] == [0, 1, 2]  # one reset per episode, with its seed (the first is the import check's)
    steps = load_recording(out / "seed_000000.msgpack").footer["steps"]
    acts = [c for c in calls if "act" in c]
    assert len(acts) == 3 * -(-steps // 4)  # one call per chunk of 4 steps, none left over across episodes
    actions = load_recording(out / "seed_000001.msgpack").actions
    assert actions.shape == (steps, 6) and np.allclose(actions[:, 0], -0.18)


def test_a_policy_file_path_works_too(tmp_path, monkeypatch):
    (tmp_path / "mypolicy.py").write_text(POLICY)
    monkeypatch.setenv("POLICY_LOG", str(tmp_path / "calls.jsonl"))
    assert main(["audit", *ENV, "--episodes", "1", "--policy", f"{tmp_path / 'mypolicy.py'}:ChunkedExpert",
                 "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "seed_000000.msgpack").exists()


def test_episodes_over_envs_side_by_side_give_the_same_recordings(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, _ = _run(tmp_path / "a", monkeypatch)
    two, calls = _run(tmp_path / "b", monkeypatch, "--num-envs", "2")
    assert any(c.get("n") == 2 for c in calls)  # the policy saw a batch of two
    assert {c["env_index"] for c in calls if "reset" in c and c["env_index"] is not None} == {0, 1}
    for seed in range(3):
        a = load_recording(one / f"seed_{seed:06d}.msgpack")
        b = load_recording(two / f"seed_{seed:06d}.msgpack")
        assert a.footer["steps"] == b.footer["steps"] and np.array_equal(a.actions, b.actions)
        assert np.array_equal(a.columns["fingerprint"], b.columns["fingerprint"])


def test_a_bad_policy_is_refused_before_any_episode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["audit", *ENV, "--policy", "nosuchmodule:Policy", "--out", str(tmp_path / "run")]) == 2
    assert "cannot import the policy nosuchmodule:Policy" in capsys.readouterr().err
    (tmp_path / "broken.py").write_text("class P:\n    def __init__(self):\n        raise RuntimeError('no weights')\n")
    assert main(["audit", *ENV, "--policy", "broken:P", "--out", str(tmp_path / "run2")]) == 2
    assert "could not be built with no arguments: RuntimeError: no weights" in capsys.readouterr().err
    assert main(["audit", *ENV, "--num-envs", "2", "--out", str(tmp_path / "run3")]) == 2  # scripted: one env
    assert "--num-envs needs a policy that acts on a batch" in capsys.readouterr().err

"""The wrappers follow Gymnasium's conventions: Gymnasium's own env checker passes on each over a
built-in env, a wrapped env's spec rebuilds the same stack (gym.make(env.spec)), and the package
ships its type hints (py.typed)."""

from __future__ import annotations

import importlib.metadata

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import simuguard_gym.envs  # noqa: F401
from simuguard_gym import ArtifactMonitor, DepenetrationRerun, ParamIdentify, RecordPhysics
from simuguard_gym.wrappers.info_key import INFO_KEY

ENV_ID = "simuguard_gym/PlaceCanBasket-MuJoCo-v0"

STACKS = {
    "RecordPhysics": lambda d: RecordPhysics(gym.make(ENV_ID), d),
    "ArtifactMonitor": lambda d: ArtifactMonitor(gym.make(ENV_ID)),
    "ArtifactMonitor(RecordPhysics)": lambda d: ArtifactMonitor(RecordPhysics(gym.make(ENV_ID), d, chunk_substeps=64)),
    "DepenetrationRerun": lambda d: DepenetrationRerun(gym.make(ENV_ID), directory=d),
    "ParamIdentify": lambda d: ParamIdentify(gym.make(ENV_ID), body="can"),
}


def _chain(env: gym.Env) -> list[tuple[str, dict]]:
    out = []
    while isinstance(env, gym.Wrapper):
        out.append((type(env).__name__, dict(getattr(env, "_saved_kwargs", {}))))
        env = env.env
    return out


@pytest.mark.parametrize("name", list(STACKS))
def test_check_env_passes_and_the_spec_rebuilds_the_stack(name, tmp_path):
    env = STACKS[name](tmp_path)
    check_env(env, skip_render_check=True)
    rebuilt = gym.make(env.spec)
    assert _chain(rebuilt) == _chain(env)  # the same wrappers, the same arguments, none twice
    obs, info = rebuilt.reset(seed=3)
    for _ in range(5):
        obs, reward, terminated, truncated, info = rebuilt.step(rebuilt.action_space.sample())
        assert info[INFO_KEY]["errors"] == []
    assert np.all(np.isfinite(obs))
    rebuilt.close()
    env.close()


def test_the_adapter_argument_is_not_part_of_the_spec(tmp_path):
    """An adapter belongs to the env it was made for: a rebuilt stack finds its own."""
    from simuguard_gym.engines.base import adapter_for

    inner = gym.make(ENV_ID)
    env = RecordPhysics(inner, tmp_path, adapter=adapter_for(inner))
    assert "adapter" not in env._saved_kwargs
    rebuilt = gym.make(env.spec)
    assert adapter_for(rebuilt) is not adapter_for(env)
    rebuilt.close()
    env.close()


def test_an_installed_package_ships_py_typed():
    try:
        files = importlib.metadata.files("simuguard-gym") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("simuguard-gym is not installed")
    names = {str(f).replace("\\", "/") for f in files}
    if not any(n.startswith("simuguard_gym/") and n.endswith(".py") for n in names):
        pytest.skip("an editable install lists no package files")
    assert "simuguard_gym/py.typed" in names

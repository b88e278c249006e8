"""ParamIdentify on links inside third-party envs: Meta-World's drawer and door, opened by
Meta-World's own scripted experts, several episodes in a row, with the default prior."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("metaworld")

from simuguard_gym import ParamIdentify  # noqa: E402

# (task, link body, its joint, the name of its inertia, a dry friction to give the joint:
# Meta-World's assets have none, and a friction of 0 would test nothing)
LINKS = [("drawer-open-v3", "drawer_link", "goal_slidey", "mass", 1.0),
         ("door-open-v3", "door_link", "doorjoint", "hinge_inertia", 0.3)]


def make(task: str, joint: str, friction: float | None) -> gym.Env:
    import metaworld  # noqa: F401 - registers Meta-World/MT1

    env = gym.make("Meta-World/MT1", env_name=task, seed=0, max_episode_steps=300)
    if friction is not None:
        m = env.unwrapped.model
        m.dof_frictionloss[m.jnt_dofadr[m.joint(joint).id]] = friction
    return env


def run_episode(env: gym.Env, task: str, seed: int) -> tuple[list, dict]:
    from metaworld.policies import ENV_POLICY_MAP

    policy = ENV_POLICY_MAP[task]()
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.get_action(obs))
        trace.append((obs, reward, {k: v for k, v in info.items() if k != "simuguard"}))
        if terminated or truncated:
            return trace, info


def inertia_about_the_joint(env: gym.Env, body: str, joint: str) -> float:
    """The link's mass (slide) or inertia about the hinge from its bodies' inertial parameters,
    the joint's armature included: computed here, not by the wrapper's mass matrix."""
    m, d = env.unwrapped.model, env.unwrapped.data
    j, root = m.joint(joint).id, m.body(body).id
    armature = float(m.dof_armature[m.jnt_dofadr[j]])
    bodies = [b for b in range(m.nbody) if b == root or _below(m, b, root)]
    if m.jnt_type[j] == 2:  # mjJNT_SLIDE
        return float(sum(m.body_mass[b] for b in bodies)) + armature
    axis, anchor = d.xaxis[j], d.xanchor[j]
    total = armature
    for b in bodies:
        r = d.ximat[b].reshape(3, 3)
        total += axis @ r @ np.diag(m.body_inertia[b]) @ r.T @ axis
        total += m.body_mass[b] * float(np.linalg.norm(np.cross(axis, d.xipos[b] - anchor))) ** 2
    return float(total)


def _below(m, b: int, root: int) -> bool:
    while b > 0:
        b = int(m.body_parentid[b])
        if b == root:
            return True
    return False


@pytest.mark.parametrize("task,body,joint,inertia,friction", LINKS)
def test_a_metaworld_link_is_identified_from_its_expert_episodes(task, body, joint, inertia, friction):
    warnings.filterwarnings("ignore", module="metaworld")  # its experts warn about clipped actions
    env = ParamIdentify(make(task, joint, friction), body=body, joint=joint)
    m = env.unwrapped.model
    dof = m.jnt_dofadr[m.joint(joint).id]
    for seed in (0, 1):
        _, info = run_episode(env, task, seed)
        ours = info["simuguard"]
        assert ours["errors"] == []
        params = ours["params"]
        assert params["truth"][inertia] == pytest.approx(inertia_about_the_joint(env, body, joint), rel=1e-6)
        assert params["truth"]["damping"] == m.dof_damping[dof] == 2.0
        assert params["truth"]["friction"] == friction
        for name in (inertia, "friction", "damping"):
            assert params["parameters"][name]["identified"], name
            assert abs(params["relative_error"][name]) < 0.01, (name, params["relative_error"])
    env.close()


def test_a_link_with_no_friction_is_reported_at_its_physical_floor():
    warnings.filterwarnings("ignore", module="metaworld")
    env = ParamIdentify(make("drawer-open-v3", "goal_slidey", None), body="drawer_link")
    _, info = run_episode(env, "drawer-open-v3", 0)
    env.close()
    params = info["simuguard"]["params"]
    assert info["simuguard"]["errors"] == []
    assert params["truth"]["friction"] == 0.0
    assert params["values"]["friction"] == pytest.approx(0.0, abs=1e-3)
    assert any(w.startswith("friction is 0, its physical floor") for w in params["warnings"])
    assert not any("widen the prior" in w for w in params["warnings"])


def test_identifying_the_drawer_changes_nothing_the_env_measures():
    warnings.filterwarnings("ignore", module="metaworld")
    plain, _ = run_episode(make("drawer-open-v3", "goal_slidey", 1.0), "drawer-open-v3", 3)
    wrapped = ParamIdentify(make("drawer-open-v3", "goal_slidey", 1.0), body="drawer_link", joint="goal_slidey")
    traced, info = run_episode(wrapped, "drawer-open-v3", 3)
    wrapped.close()
    assert info["simuguard"]["params"] is not None
    assert len(plain) == len(traced)
    assert np.array_equal(plain[0], traced[0])
    for (a_obs, a_r, a_info), (b_obs, b_r, b_info) in zip(plain[1:], traced[1:]):
        assert np.array_equal(a_obs, b_obs) and a_r == b_r and a_info == b_info


def test_a_body_and_a_joint_that_do_not_belong_together_are_refused():
    env = make("drawer-open-v3", "goal_slidey", None)
    with pytest.raises(ValueError, match="does not move body 'drawer_link'"):
        ParamIdentify(env, body="drawer_link", joint="r_close")
    with pytest.raises(ValueError, match="one hinge or slide joint"):
        ParamIdentify(env, body="drawercase_link")
    env.close()

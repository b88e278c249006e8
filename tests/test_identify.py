"""Parameter identification (RigPI) on real MuJoCo simulations with a known truth."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import simuguard_gym.envs  # noqa: F401 - registers the envs
from simuguard_gym import ParamIdentify
from simuguard_gym.cli import main
from simuguard_gym.identify.simulation.excitation import SensorNoise, TrueBody, spin, synthesise
from simuguard_gym.envs.pusher_box import PUSHER_BOX_XML, push_policy
from simuguard_gym.identify import (GeometryPrior, Joint, Problem, SeriesError, Shape, VlmPrior, identify,
                                    load_csv)
from simuguard_gym.identify.inertia import is_physical, make_physical
from simuguard_gym.identify.prior import parse_vlm_answer
from simuguard_gym.identify.shapes import _mesh_properties

BOX = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),), point=(0, 0, 0.03))
BOX_I = np.array([[4.2e-4, 1e-5, 0], [1e-5, 5.7e-4, -5e-6], [0, -5e-6, 6.8e-4]])
BOX_TRUTH = TrueBody(0.5, (0.004, -0.002, 0.003), BOX_I)


@pytest.fixture(scope="module")
def clean_box():
    # the truth at a quarter of the fit's step: closer to continuous physics than the fit's model
    return synthesise(BOX, BOX_TRUTH, duration=2.0, seed=3, dt_truth=0.0005, noise=None, amplitude=2.0)[0]


def test_noise_free_recovery_is_tight(clean_box):
    result = identify(clean_box, BOX, GeometryPrior(density=1000), wrench_resolution=(1e-6, 1e-7),
                      pose_noise=(1e-4, 1e-3))
    assert abs(result["mass"] - 0.5) / 0.5 < 1e-3
    com = np.array([result["com_x"], result["com_y"], result["com_z"]])
    assert np.linalg.norm(com - BOX_TRUTH.com) < 2e-5
    for i, name in enumerate(("ixx", "iyy", "izz")):
        assert abs(result[name] - BOX_I[i, i]) / BOX_I[i, i] < 5e-3, name
    assert result.identified.all() and not any("not identifiable" in w for w in result.warnings)
    assert result.loss_history[-1] < result.loss_history[0]


def test_bound_penalty_keeps_theta_inside_c_and_data_widen_it(clean_box):
    """Each fit stays inside its C; the first one is held on the mass bound that the data
    contradict, the refit in the widened C reaches the truth."""
    prior = GeometryPrior(density=1000)(BOX, clean_box.poses[0]).widen(mass=(0.1, 0.4))
    result = identify(clean_box, BOX, prior, wrench_resolution=(1e-6, 1e-7), pose_noise=(1e-4, 1e-3))
    lower, upper = np.array(result.prior["lower"]), np.array(result.prior["upper"])
    inside = (result.theta >= lower - 1e-12) & (result.theta <= upper + 1e-12)
    assert inside.all(), dict(zip(result.names, result.theta))
    (clamped,) = result.extra["bounded_fits"]
    assert clamped["theta"][0] == pytest.approx(0.4) and upper[0] == pytest.approx(1.0)
    assert abs(result["mass"] - 0.5) / 0.5 < 1e-3
    assert any(w.startswith("mass ended on the bound of C") and "widened" in w for w in result.warnings)


def test_small_cube_inertia_is_reported_unidentifiable():
    cube = Problem(shapes=(Shape("box", (0.02, 0.02, 0.02)),), point=(0, 0, 0.01))
    truth = TrueBody(0.02, inertia=0.02 / 6 * 0.02 ** 2 * np.eye(3))
    measured, _ = synthesise(cube, truth, duration=2.0, seed=0, noise=SensorNoise())
    result = identify(measured, cube, GeometryPrior(material="pla"))
    for name in ("ixx", "iyy", "izz"):
        assert not result.identified[result.names.index(name)]
        assert any(w.startswith(f"{name} is not identifiable") for w in result.warnings)
        assert np.isnan(result.se[result.names.index(name)])
    assert result.as_dict()["parameters"]["ixx"]["identified"] is False


def test_door_hinge_inertia_friction_and_damping():
    door = Problem(shapes=(Shape("box", (0.5, 0.02, 0.7), pos=(0.25, 0, 0)),),
                   joint=Joint("revolute", (0, 0, 1), (0, 0, 0)), point=(0.45, 0.02, 0))
    i_c = 3.0 / 12 * np.diag([0.02 ** 2 + 0.7 ** 2, 0.5 ** 2 + 0.7 ** 2, 0.5 ** 2 + 0.02 ** 2])
    truth = TrueBody(3.0, (0.25, 0, 0), i_c, joint_friction=0.5, joint_damping=0.8)
    measured, _ = synthesise(door, truth, duration=2.0, seed=1, dt_truth=0.002, noise=None)
    # the model steps like the truth (2 ms): the recovery must then be exact up to the optimiser
    result = identify(measured, door, GeometryPrior(density=(100, 300, 1200)), wrench_resolution=(1e-6, 1e-7),
                      substeps=1)
    hinge = i_c[2, 2] + 3.0 * 0.25 ** 2
    assert result.names == ("hinge_inertia", "friction", "damping")
    assert result["hinge_inertia"] == pytest.approx(hinge, rel=2e-3)
    assert result["friction"] == pytest.approx(0.5, rel=1e-2)
    assert result["damping"] == pytest.approx(0.8, rel=1e-2)
    assert any("only its inertia about the hinge" in w for w in result.warnings)
    # RigPI's optimiser: gradient steps of 1/100 of each parameter's scale
    descent = identify(measured, door, GeometryPrior(density=(100, 300, 1200)), wrench_resolution=(1e-6, 1e-7),
                       substeps=1, method="gd", max_iter=150)
    assert descent.method == "gd" and descent.loss_history[-1] <= descent.loss_history[0]
    assert descent["hinge_inertia"] == pytest.approx(hinge, rel=0.05)


def test_inertia_projection_makes_candidates_physical():
    bad = np.diag([1.0, 1.0, 5.0])            # violates the triangle inequality
    assert not is_physical(bad) and is_physical(make_physical(bad))
    assert is_physical(make_physical(-np.eye(3)))


def test_mesh_mass_properties_match_the_box():
    v = np.array([[x, y, z] for x in (0, 0.02) for y in (0, 0.03) for z in (0, 0.04)]) + [0.1, 0.2, 0.3]
    f = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1], [2, 3, 7], [2, 7, 6],
                  [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    vol, centre, inertia = _mesh_properties(v, f)
    box = Shape("box", (0.02, 0.03, 0.04)).local_properties()
    assert vol == pytest.approx(box[0]) and np.allclose(centre, [0.11, 0.215, 0.32])
    assert np.allclose(inertia, box[2], atol=1e-20)


def test_vlm_prior_is_an_interface_with_a_checked_answer():
    answer = {"material": "pla", "density_kg_m3": [400, 1100, 1300], "friction": [0.2, 0.4, 0.7],
              "shape": "box", "dimensions_m": [0.02, 0.02, 0.02]}
    seen = {}

    def ask(images, prompt):
        seen["prompt"] = prompt
        return "```json\n" + json.dumps(answer) + "\n```"

    prior = VlmPrior(ask, images=["img"], description="a printed cube")(Problem(shapes=()))
    assert prior.source == "vlm" and prior.value[0] == pytest.approx(1100 * 8e-6)
    assert "a printed cube" in seen["prompt"]
    with pytest.raises(ValueError, match="density_kg_m3"):
        parse_vlm_answer('{"material": "pla"}')
    with pytest.raises(ValueError, match="ascending"):
        parse_vlm_answer({"density_kg_m3": [900, 500, 1000]})
    with pytest.raises(ValueError, match="not JSON"):
        parse_vlm_answer("I think it is plastic")


def _write(tmp_path, rows, header="t,fx,fy,fz,tx,ty,tz,x,y,z,qw,qx,qy,qz"):
    path = tmp_path / "data.csv"
    path.write_text(header + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows) + "\n")
    return path


def _rows(n=10):
    return [[0.002 * k, 0, 0, 0, 0, 0, 0, 0.001 * k, 0, 0, 1, 0, 0, 0] for k in range(n)]


@pytest.mark.parametrize("mutate, message", [
    (lambda r, h: (r, h.replace(",qz", "")), "missing column.*qz"),
    (lambda r, h: ([x if i != 4 else x[:2] + ["nan"] + x[3:] for i, x in enumerate(r)], h), "not finite.*sample 4"),
    (lambda r, h: ([x if i != 5 else [0.002 * 3] + x[1:] for i, x in enumerate(r)], h), "not strictly increasing"),
    (lambda r, h: ([x if i != 2 else x[:10] + [0.9, 0.1, 0, 0] for i, x in enumerate(r)], h), "not unit"),
    (lambda r, h: (r[:1], h), "at least 3 samples"),
])
def test_malformed_csv_gives_a_clear_error(tmp_path, mutate, message):
    rows, header = mutate(_rows(), "t,fx,fy,fz,tx,ty,tz,x,y,z,qw,qx,qy,qz")
    path = _write(tmp_path, rows, header)
    with pytest.raises(SeriesError, match=message):
        load_csv(path)
    assert main(["identify", str(path), "--shape", "box:0.02,0.02,0.02"]) == 2


def test_cli_identifies_a_drawer_from_csv(tmp_path, capsys):
    drawer = Problem(shapes=(Shape("box", (0.4, 0.3, 0.1)),), joint=Joint("prismatic", (1, 0, 0)),
                     point=(0.2, 0, 0))
    truth = TrueBody(2.0, inertia=2.0 / 12 * np.diag([0.1, 0.17, 0.25]), joint_friction=2.0)
    measured, _ = synthesise(drawer, truth, duration=2.0, seed=0)
    path = tmp_path / "drawer.csv"
    measured.to_csv(path)
    assert load_csv(path).t.shape == measured.t.shape
    rc = main(["identify", str(path), "--shape", "box:0.4,0.3,0.1", "--density", "170", "--joint", "prismatic",
               "--axis", "1,0,0", "--point", "0.2,0,0", "--out", str(tmp_path / "results")])
    assert rc == 0
    out = json.loads((tmp_path / "results" / "drawer.identify.json").read_text())
    assert out["parameters"]["mass"]["value"] == pytest.approx(2.0, rel=0.03)
    assert out["parameters"]["friction"]["value"] == pytest.approx(2.0, rel=0.05)
    assert "mass" in capsys.readouterr().out


def _run_pusher(wrapped: bool, steps: int = 150):
    env = gym.make("simuguard_gym/MujocoScene-v0", xml=PUSHER_BOX_XML, frame_skip=10, max_episode_steps=steps)
    if wrapped:
        env = ParamIdentify(env, body="box")
    obs, info = env.reset(seed=0)
    trace = [obs]
    for k in range(steps):
        obs, reward, terminated, truncated, info = env.step(push_policy(k * 0.02))
        trace.append(obs)
    env.close()
    return np.array(trace), info


def test_param_identify_reports_box_parameters_without_changing_the_env():
    plain, plain_info = _run_pusher(False)
    traced, info = _run_pusher(True)
    assert np.array_equal(plain, traced)
    assert {k: v for k, v in info.items() if k != "simuguard"} == plain_info
    params = info["simuguard"]["params"]
    assert info["simuguard"]["errors"] == []
    assert params["truth"]["mass"] == pytest.approx(0.3) and params["truth"]["mu"] == pytest.approx(0.5)
    assert abs(params["relative_error"]["mass"]) < 0.05
    assert abs(params["relative_error"]["mu"]) < 0.05
    assert not params["parameters"]["ixx"]["identified"]


def test_param_identify_rejects_a_body_without_free_joint():
    env = gym.make("simuguard_gym/MujocoScene-v0", xml=PUSHER_BOX_XML, frame_skip=10)
    with pytest.raises(ValueError, match="free joint"):
        ParamIdentify(env, body="pusher")
    with pytest.raises(ValueError, match="no body named"):
        ParamIdentify(env, body="can")
    env.close()


def test_oven_door_on_a_horizontal_hinge_identifies_its_gravity_moment():
    oven = Problem(shapes=(Shape("box", (0.5, 0.02, 0.4), pos=(0, 0, 0.2)),),
                   joint=Joint("revolute", (1, 0, 0), (0, 0, 0)), point=(0.0, 0.02, 0.35))
    i_c = 2.0 / 12 * np.diag([0.02 ** 2 + 0.4 ** 2, 0.5 ** 2 + 0.4 ** 2, 0.5 ** 2 + 0.02 ** 2])
    truth = TrueBody(2.0, (0, 0, 0.2), i_c, joint_friction=0.2)
    measured, _ = synthesise(oven, truth, seed=0, noise=None, dt_truth=0.002, start=np.array([0.6]))
    result = identify(measured, oven, GeometryPrior(density=(100, 300, 1200)), substeps=1,
                      wrench_resolution=(1e-6, 1e-7))
    assert result.names == ("hinge_inertia", "gravity_moment", "friction", "damping")
    assert result["hinge_inertia"] == pytest.approx(i_c[0, 0] + 2.0 * 0.2 ** 2, rel=5e-3)
    assert result["gravity_moment"] == pytest.approx(2.0 * 0.2, rel=5e-3)
    assert result["friction"] == pytest.approx(0.2, rel=2e-2)


def test_a_body_that_never_moves_gives_the_prior_with_a_reason(tmp_path, capsys):
    """Data that carry no information on any parameter: the prior, every parameter said to be
    unidentifiable and why, not a crash in the refinement."""
    rows = [[i * 0.01, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0] for i in range(20)]
    path = _write(tmp_path, rows, "t,fx,fy,fz,tx,ty,tz,x,y,z,qw,qx,qy,qz")
    assert main(["identify", str(path), "--shape", "sphere:0.1", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.count("is not identifiable here") >= 10
    assert json.loads((tmp_path / "out" / (path.stem + ".identify.json")).read_text())


def test_a_wrong_material_is_overruled_by_informative_data():
    """A box heavier than the named material makes a solid one (a filled or weighted object): the
    mass ends on C's bound, the data determine it, so C is widened and the fit refitted; the
    result matches the fit with the right density, and the clamped fit is kept beside it."""
    problem = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),))
    mass = 0.9  # wood would make it 0.29 kg, C's upper bound 0.43 kg
    inertia = 1.1 * mass / 12 * np.diag([0.08 ** 2 + 0.06 ** 2, 0.1 ** 2 + 0.06 ** 2, 0.1 ** 2 + 0.08 ** 2])
    truth = TrueBody(mass, (0.008, -0.005, 0.004), inertia)
    measured, _ = synthesise(problem, truth, duration=2.0, seed=1)
    result = identify(measured, problem, GeometryPrior(material="wood"))
    assert abs(result["mass"] / mass - 1) < 0.01
    assert max(abs(result[k] - c) for k, c in zip(("com_x", "com_y", "com_z"), truth.com)) < 0.5e-3
    assert max(abs(result[k] / inertia[i, i] - 1) for i, k in enumerate(("ixx", "iyy", "izz"))) < 0.03
    assert any("refit with C widened" in w for w in result.warnings)
    (clamped,) = result.extra["bounded_fits"]
    assert clamped["theta"][0] == pytest.approx(clamped["upper"][0]) and result.prior["upper"][0] > mass
    assert result.prior["value"][0] == pytest.approx(0.1 * 0.08 * 0.06 * 600)  # theta0 is still wood's
    assert np.isfinite(result.se[0]) and result.se[0] < 0.01 * mass


def test_longer_windows_after_the_first_fit_keep_more_of_the_data():
    """A fit in 0.25 s windows, then one in windows twice as long started where it ended: the
    longer one replaces it, the inertia's standard errors shrink and the truth stays within them.
    The first fit leaves the triangle-inequality boundary at once (on these data it once crept
    along it for 50 iterations, 20 % off)."""
    problem = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),))
    mass = 0.9
    inertia = 1.1 * mass / 12 * np.diag([0.08 ** 2 + 0.06 ** 2, 0.1 ** 2 + 0.06 ** 2, 0.1 ** 2 + 0.08 ** 2])
    measured, _ = synthesise(problem, TrueBody(mass, (0.008, -0.005, 0.004), inertia), duration=3.0, seed=0)
    prior = GeometryPrior(density=mass / (0.1 * 0.08 * 0.06))
    short = identify(measured, problem, prior, window_s=0.25)
    result = identify(measured, problem, prior)
    assert [f["start"] for f in short.extra["fits"]] == ["least_squares"] and short.iterations <= 25
    assert [f["start"] for f in result.extra["fits"]] == ["least_squares", "longer windows"]
    assert result.extra["window_s"] == pytest.approx(0.5)
    for i, name in enumerate(("ixx", "iyy", "izz")):
        k = result.names.index(name)
        assert result.se[k] < 0.7 * short.se[k], name
        assert abs(result[name] - inertia[i, i]) < 3 * result.se[k] + 1e-3 * inertia[i, i], name


SPIN_TRUTH = TrueBody(0.5, (0.004, -0.002, 0.003), np.diag([4.2e-4, 5.7e-4, 6.8e-4]))


@pytest.mark.parametrize("w0,point", [((5, 3, 8), (0, 0, 0)), ((40, 20, 60), (0, 0, 0)), ((70, 40, 110), (0, 0, 0)),
                                      ((80, 60, 130), (0, 0, 0)), ((40, 20, 60), (0.05, -0.02, 0.03))])
def test_a_spinning_body_is_recovered_from_noise_free_data(w0, point):
    """Slow and fast rotation (up to 130 rad/s, 0.3 rad per 2 ms sample), the wrench at the
    origin or at a corner, from a generator with another step than the fit's (RK4 at 0.5 ms):
    every parameter to 0.5 %, the CoM to 0.05 mm. Above ~100 rad/s this needs the seeds'
    smoothing windows shortened to the body's turn."""
    box = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),), point=point)
    measured, _ = spin(box, SPIN_TRUTH, np.array(w0, float))
    result = identify(measured, box, GeometryPrior(density=1000), wrench_resolution=(1e-6, 1e-7),
                      pose_noise=(1e-4, 1e-3))
    assert abs(result["mass"] / SPIN_TRUTH.mass - 1) < 5e-3
    for i, name in enumerate(("ixx", "iyy", "izz")):
        assert abs(result[name] / SPIN_TRUTH.inertia[i, i] - 1) < 5e-3, (name, result[name])
    for name in ("ixy", "ixz", "iyz"):
        assert abs(result[name]) < 5e-3 * SPIN_TRUTH.inertia[0, 0], (name, result[name])
    com = np.array([result["com_x"], result["com_y"], result["com_z"]])
    assert np.linalg.norm(com - SPIN_TRUTH.com) < 5e-5


WEDGE = Shape("mesh", vertices=np.array([[0, 0, -0.03], [0.1, 0, -0.03], [0, 0.08, -0.03],
                                          [0, 0, 0.03], [0.1, 0, 0.03], [0, 0.08, 0.03]]),
              faces=np.array([[0, 2, 1], [3, 4, 5], [0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4], [2, 0, 3], [2, 3, 5]]))


@pytest.mark.parametrize("shape,integrator", [(Shape("cylinder", (0.04, 0.1)), "implicitfast"), (WEDGE, "Euler")])
def test_other_shapes_and_integrators_are_recovered_from_noise_free_data(shape, integrator):
    """A filled cylinder and a wedge-shaped mesh, CoM off their centroid, the truth integrated
    by another integrator than the fit's at a 20th of its step: every parameter to 0.5 %."""
    body = Problem(shapes=(shape,), point=(0.02, -0.01, 0.03))
    volume, centroid, unit_inertia = shape.local_properties()
    mass = 0.6
    truth = TrueBody(mass, tuple(centroid + [0.004, -0.003, 0.006]), 1.1 * mass / volume * unit_inertia)
    measured, _ = spin(body, truth, np.array([5.0, 3.0, 8.0]), dt_truth=1e-4, integrator=integrator)
    result = identify(measured, body, GeometryPrior(density=1000), wrench_resolution=(1e-6, 1e-7),
                      pose_noise=(1e-4, 1e-3))
    assert abs(result["mass"] / mass - 1) < 5e-3
    for i, name in enumerate(("ixx", "iyy", "izz")):
        assert abs(result[name] / truth.inertia[i, i] - 1) < 5e-3, (name, result[name])
    for name, (i, j) in zip(("ixy", "ixz", "iyz"), ((0, 1), (0, 2), (1, 2))):
        assert abs(result[name] - truth.inertia[i, j]) < 5e-3 * truth.inertia[0, 0], (name, result[name])
    com = np.array([result["com_x"], result["com_y"], result["com_z"]])
    assert np.linalg.norm(com - truth.com) < 5e-5


def test_a_fit_that_cannot_explain_the_poses_says_so():
    """Half of the wrench is missing from the data (an unmodelled push): no theta reproduces the
    poses, and the result says its values are not reliable instead of reporting them plainly."""
    from simuguard_gym.identify import WrenchPoseSeries

    box = Problem(shapes=(Shape("box", (0.1, 0.08, 0.06)),))
    clean, _ = spin(box, SPIN_TRUTH, np.array([5.0, 3.0, 8.0]))
    reported = clean.force.copy()
    reported[len(reported) // 2:, :2] -= 2.0       # a 2 N push the data do not report
    lying = WrenchPoseSeries(clean.t, reported, clean.torque, clean.position, clean.quaternion)
    result = identify(lying, box, GeometryPrior(density=1000), wrench_resolution=(1e-6, 1e-7),
                      pose_noise=(1e-4, 1e-3))
    assert any(w.startswith("no start explains the poses") for w in result.warnings)
    honest = identify(clean, box, GeometryPrior(density=1000), wrench_resolution=(1e-6, 1e-7), pose_noise=(1e-4, 1e-3))
    assert not any(w.startswith("no start explains the poses") for w in honest.warnings)

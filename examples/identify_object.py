"""Identify an object's mass, centre of mass and inertia from wrench and pose data (RigPI).

Three ways in, from the same code:

1. measured data (a CSV of t, fx..tz, x..qz): ``simuguard identify data.csv --shape ... --material ...``;
2. the Python API on a series (here: synthetic, with a known truth, so the errors can be printed);
3. ``ParamIdentify`` on a MuJoCo env: what the robot does to a body, identified at episode end,
   next to the model's declared values.

    python examples/identify_object.py [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

import simuguard_gym.envs  # noqa: F401 - registers simuguard_gym/MujocoScene-v0
from simuguard_gym import ParamIdentify
from simuguard_gym.identify.simulation.excitation import TrueBody, synthesise
from simuguard_gym.envs.pusher_box import PUSHER_BOX_XML, push_policy
from simuguard_gym.identify import GeometryPrior, Problem, Shape, identify
from simuguard_gym.identify.inertia import to_entries


def apple_from_a_series(out: Path) -> None:
    # A 200 g apple-like ellipsoid held at its top by a gripper with an Axia80-class sensor.
    problem = Problem(shapes=(Shape("ellipsoid", (0.04, 0.04, 0.037)),), point=(0, 0, 0.037))
    inertia = np.diag([1.15e-4, 1.2e-4, 1.28e-4])
    truth = TrueBody(0.2, com=(0.002, -0.001, 0.002), inertia=inertia)
    measured, _ = synthesise(problem, truth, duration=3.0, seed=0, amplitude=2.0)
    measured.to_csv(out / "apple.csv")   # the same data for `simuguard identify apple.csv ...`
    result = identify(measured, problem, GeometryPrior(material="fruit"))
    print(f"apple: {result.iterations} iterations, {result.seconds:.2f} s")
    print(result.table(dict(zip(result.names, [0.2, *truth.com, *to_entries(inertia)]))))
    print(f"same from the command line: simuguard identify {out / 'apple.csv'} --shape ellipsoid:0.04,0.04,0.037 "
          "--point 0,0,0.037 --material fruit\n")


def box_in_an_env() -> None:
    env = ParamIdentify(gym.make("simuguard_gym/MujocoScene-v0", xml=PUSHER_BOX_XML, frame_skip=10,
                                 max_episode_steps=150), body="box")
    env.reset(seed=0)
    for k in range(150):
        *_, info = env.step(push_policy(k * 0.02))
    params = info["simuguard"]["params"]
    env.close()
    print("pushed box: identified vs declared by the model")
    for name in ("mass", "mu"):
        print(f"  {name:<5} {params['values'][name]:.4g} vs {params['truth'][name]:.4g} "
              f"({100 * params['relative_error'][name]:+.1f} %)")
    for warning in params["warnings"]:
        print("  warning:", warning)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("."), help="where apple.csv goes (default: here)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    apple_from_a_series(args.out)
    box_in_an_env()

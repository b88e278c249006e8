"""A scripted pusher and a free box on a floor: the scene ParamIdentify's docs and tests use.

The pusher is a flat paddle on two actuated slide joints (x, y) with stiff position servos; it
pushes the box along x at a speed that swings between ~0 and ~0.35 m/s, so the box accelerates
under the push and decelerates by friction when the paddle slows: both its mass and its friction
show in the data. Run it with ``simuguard_gym/MujocoScene-v0`` (``frame_skip=10``: 20 ms steps).
"""

from __future__ import annotations

import numpy as np

PUSHER_BOX_XML = """
<mujoco model="pusher_box">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="0.5 0.005 0.0001"/>
    <body name="pusher" pos="-0.08 0 0.03">
      <joint name="px" type="slide" axis="1 0 0" damping="5"/>
      <joint name="py" type="slide" axis="0 1 0" damping="5"/>
      <geom name="paddle" type="box" size="0.01 0.06 0.02" mass="1.0" contype="1" conaffinity="1"/>
    </body>
    <body name="box" pos="0 0 0.0301">
      <freejoint/>
      <geom name="box" type="box" size="0.03 0.03 0.03" mass="0.3" friction="0.5 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <position joint="px" kp="2000" kv="100" ctrlrange="-1 1"/>
    <position joint="py" kp="2000" kv="100" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


def push_policy(t: float) -> np.ndarray:
    """Paddle target (x, y) at time t (relative to the paddle's start), pushing along +x."""
    x = 0.2 * t - 0.045 * np.sin(2 * np.pi * 0.7 * t) / (2 * np.pi * 0.7) * 2 * np.pi * 0.7 * 0.9
    return np.array([x, 0.0])

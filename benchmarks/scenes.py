"""Scenes shared by the benchmarks."""

from __future__ import annotations

import numpy as np


def pile_scene(n_objects: int) -> str:
    """A table with ``n_objects`` boxes and spheres piled in a grid, and an actuated pusher."""
    rng = np.random.default_rng(0)
    side = int(np.ceil(np.sqrt(n_objects)))
    bodies = []
    for i in range(n_objects):
        x, y, layer = (i % side) * 0.061 - 0.15, ((i // side) % side) * 0.061 - 0.15, i // (side * side)
        z = 0.45 + 0.061 * layer
        shape = 'type="box" size="0.03 0.03 0.03"' if i % 3 else 'type="sphere" size="0.03"'
        bodies.append(f'<body name="obj{i}" pos="{x:.3f} {y:.3f} {z:.3f}" euler="0 0 {rng.uniform(0, 0.2):.3f}">'
                      f'<freejoint/><geom {shape} mass="0.05"/></body>')
    return f"""<mujoco><option timestep="0.002"/><worldbody>
      <body name="table" pos="0 0 0.4"><geom type="box" size="0.6 0.6 0.02"/></body>
      {''.join(bodies)}
      <body name="pusher" pos="-0.3 0 0.46"><joint name="px" type="slide" axis="1 0 0" damping="10"/>
        <joint name="py" type="slide" axis="0 1 0" damping="10"/><geom type="capsule" size="0.02" fromto="0 0 -0.02 0 0 0.05"/>
      </body></worldbody>
      <actuator><position joint="px" kp="100" ctrlrange="-0.3 0.4" ctrllimited="true"/>
        <position joint="py" kp="100" ctrlrange="-0.3 0.3" ctrllimited="true"/></actuator></mujoco>"""

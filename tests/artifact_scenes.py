"""Real MuJoCo scenes that produce (or must not produce) contact artifacts, with their scripts.

Each scene is a function returning ``(xml, actions)``: run it as ``simuguard_gym/MujocoScene-v0``
with frame_skip 10 (20 ms per step at the 2 ms substep), applying ``actions[i]`` at step i.
"""

from __future__ import annotations

from typing import Any

import numpy as np

DT = 0.002
FRAME_SKIP = 10

_FLOOR = '<geom name="floor" type="plane" size="2 2 0.1"/>'


def _scene(body: str, actuators: str = "", option: str = "") -> str:
    return f"""<mujoco><option timestep="{DT}" {option}/>
<worldbody>{_FLOOR}{body}</worldbody><actuator>{actuators}</actuator></mujoco>"""


def created_inside_floor(depth: float = 0.03) -> tuple[str, np.ndarray]:
    """(a) A box created ``depth`` inside the floor; its contact time constant is 2 substeps, so
    MuJoCo removes the overlap in a few substeps and launches it."""
    half = 0.03
    xml = _scene(f"""<body name="can" pos="0 0 {half - depth}"><freejoint/>
      <geom type="box" size="{half} {half} {half}" mass="0.05" solref="{2 * DT} 1"/></body>""")
    return xml, np.zeros((60, 0))


def _bin(x: float = 0.0, name: str = "bin", free: bool = False, size: float = 0.12, wall: float = 0.01,
         height: float = 0.08, mass: float = 0.5) -> str:
    joint = "<freejoint/>" if free else ""
    geoms = f"""<geom name="{name}_floor" type="box" size="{size} {size} {wall}" pos="0 0 {wall}" mass="{mass / 2}"/>
      <geom type="box" size="{wall} {size} {height}" pos="{size} 0 {height}" mass="{mass / 8}"/>
      <geom type="box" size="{wall} {size} {height}" pos="{-size} 0 {height}" mass="{mass / 8}"/>
      <geom type="box" size="{size} {wall} {height}" pos="0 {size} {height}" mass="{mass / 8}"/>
      <geom type="box" size="{size} {wall} {height}" pos="0 {-size} {height}" mass="{mass / 8}"/>"""
    return f'<body name="{name}" pos="{x} 0 0">{joint}{geoms}</body>'


def dropped_into_bin(height: float = 0.30) -> tuple[str, np.ndarray]:
    """(b) A ball dropped ``height`` onto the floor of a static bin; its contact is a stiff spring, so it
    bounces off at about its impact speed."""
    radius = 0.03
    xml = _scene(_bin() + f"""<body name="ball" pos="0.02 0.01 {0.02 + radius + height}"><freejoint/>
      <geom type="sphere" size="{radius}" mass="0.1" solref="-20000 -2"/></body>""")
    return xml, np.zeros((60, 0))


def _pusher(x: float, z: float) -> tuple[str, str]:
    body = f"""<body name="pusher" pos="{x} 0 {z}"><joint name="slide" type="slide" axis="1 0 0" damping="5"/>
      <geom type="box" size="0.02 0.1 0.03" mass="2"/></body>"""
    return body, '<velocity joint="slide" kv="200" ctrlrange="-3 3" ctrllimited="true"/>'


def basket_shoved(speed: float = 1.5) -> tuple[str, np.ndarray]:
    """(c) An actuated pusher shoves a free basket across the floor; an object rests inside."""
    pusher, actuator = _pusher(-0.3, 0.05)
    xml = _scene(pusher + _bin(name="basket", free=True, size=0.08, height=0.04, mass=0.3)
                 + """<body name="bread" pos="0 0 0.05"><freejoint/>
      <geom type="box" size="0.03 0.03 0.025" mass="0.05"/></body>""", actuator)
    actions = np.zeros((60, 1))
    actions[5:25] = speed
    return xml, actions


def shoved_after_rest(rest_steps: int = 130, speed: float = 1.5) -> tuple[str, np.ndarray]:
    """(c) after ``rest_steps`` steps of rest (2.6 s: quiet substeps, which the monitor decodes
    lightly), with a soft box resting 15 mm deep in the floor beside it all along (a deep
    penetration flag in those quiet substeps)."""
    pusher, actuator = _pusher(-0.3, 0.05)
    xml = _scene(pusher + _bin(name="basket", free=True, size=0.08, height=0.04, mass=0.3)
                 + """<body name="bread" pos="0 0 0.05"><freejoint/>
      <geom type="box" size="0.03 0.03 0.025" mass="0.05"/></body>
      <body name="sunk" pos="0 0.5 0.02"><freejoint/>
        <geom type="box" size="0.03 0.03 0.03" mass="2" solref="0.2 1" solimp="0.1 0.2 0.05"/></body>""", actuator)
    actions = np.zeros((rest_steps + 55, 1))
    actions[rest_steps:rest_steps + 20] = speed
    return xml, actions


def placed_gently() -> tuple[str, np.ndarray]:
    """(d) An object released 1 mm above the floor of a bin, and one on the floor nearby."""
    xml = _scene(_bin() + """<body name="cup" pos="0 0 0.046"><freejoint/>
      <geom type="cylinder" size="0.03 0.025" mass="0.1"/></body>
      <body name="box" pos="0.4 0 0.031"><freejoint/><geom type="box" size="0.03 0.03 0.03" mass="0.2"/></body>""")
    return xml, np.zeros((100, 0))


def finger_flick(speed: float = 1.5) -> tuple[str, np.ndarray]:
    """(e) An actuated finger, resting 2 mm from a marble on a thin post, swings in a horizontal
    plane and flicks the marble off."""
    reach, height, finger_radius, marble_radius = 0.13, 0.12, 0.01, 0.02
    x, y = reach, finger_radius + marble_radius + 0.002
    xml = _scene(f"""<body name="finger" pos="0 0 {height}">
        <joint name="swing" type="hinge" axis="0 0 1" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.16 0 0" size="{finger_radius}" mass="0.5"/></body>
      <geom name="post" type="cylinder" size="0.006 {(height - 0.02) / 2}" pos="{x} {y} {(height - 0.02) / 2}"/>
      <body name="marble" pos="{x} {y} {height}"><freejoint/>
        <geom type="sphere" size="{marble_radius}" mass="0.02"/></body>""",
                 '<velocity joint="swing" kv="2" ctrlrange="-30 30" ctrllimited="true"/>')
    actions = np.zeros((60, 1))
    actions[:5] = speed / reach  # angular speed giving the finger ``speed`` m/s at the marble
    return xml, actions


def parked_off_stage(park: float = 10.0) -> tuple[str, np.ndarray]:
    """An actuated pusher and a static table at the origin (the stage); ``park`` m away, two
    boxes and a can created inside the floor side by side, like the objects robosuite's
    ``clear_objects`` parks at one point, overlapping: all three are thrown out."""
    pusher, actuator = _pusher(-0.3, 0.5)
    boxes = "".join(f"""<body name="{name}" pos="{park + dx} {park} 0"><freejoint/>
      <geom type="box" size="0.03 0.03 0.03" mass="0.05" solref="{2 * DT} 1"/></body>"""
                    for name, dx in (("parked_a", 0.0), ("parked_b", 0.15), ("can", 0.3)))
    xml = _scene(pusher + '<geom name="table" type="box" size="0.4 0.4 0.02" pos="0 0 0.4"/>' + boxes, actuator)
    return xml, np.zeros((60, 1))


def record_scene(scene, directory, seed: int = 0, **scene_kwargs):
    """Run ``scene``'s script once under ArtifactMonitor and RecordPhysics; the recording's path."""
    import gymnasium as gym

    import simuguard_gym.envs  # noqa: F401
    from simuguard_gym import ArtifactMonitor, RecordPhysics

    xml, actions = scene(**scene_kwargs)
    env = ArtifactMonitor(RecordPhysics(gym.make("simuguard_gym/MujocoScene-v0", xml=xml, frame_skip=FRAME_SKIP),
                                        directory))
    env.reset(seed=seed)
    for action in actions:
        env.step(action)
    env.close()
    return env.env.paths[-1]


def created_inside_floor_env(depth: float = 0.03) -> Any:
    """The env of :func:`created_inside_floor`, as a user's own factory builds it (``--env-fn
    artifact_scenes:created_inside_floor_env``)."""
    import gymnasium as gym

    import simuguard_gym.envs  # noqa: F401

    return gym.make("simuguard_gym/MujocoScene-v0", xml=created_inside_floor(depth)[0], frame_skip=FRAME_SKIP)

"""SAPIEN 3 (PhysX 5.3.1 on the CPU) behind the adapter contract (simuguard_gym/physics/adapter.py).

The physics substep is ``scene.step()``; the adapter replaces it on the scene instance with a
call that runs the listeners around it. The between-substep state is, as float64:

- ``rigid``: every dynamic body's pose and velocity, as ``PhysxCpuSystem.pack()`` lays them out
  (quaternion w x y z, position, linear velocity of the centre of mass, angular velocity; 13 per
  body, float32 in PhysX);
- per articulation joint: ``qpos``, ``qvel``, ``qf`` (joint forces) and the drives' position and
  velocity targets: the actuation of a robot.

Replay writes back only the bodies and joints whose values differ, through the same setters an
env uses (``set_entity_pose``, ``set_drive_target``, ...), so a replayed write has the effect
the original one had. PhysX keeps contact caches that no API restores, so replay always runs
from the env's own reset, never from a restored state.

Contacts come from ``scene.get_contacts()``: one entry per pair of collision pieces within the
contact offset. Only entries that involve a tracked body are read, and of their points only the
separation and impulse (reading a point costs microseconds in SAPIEN's Python API); entries whose
points are all apart by more than :data:`CONTACT_TOLERANCE` and carry no impulse are PhysX's
speculative contacts and are dropped.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym.engines.base import BodyTableMixin
from simuguard_gym.engines.sapien_headless import headless  # noqa: F401 - public here since the first release
from simuguard_gym.engines.sapien_interventions import SapienInterventions
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs, merge_contact_points, staged_counts
from simuguard_gym.physics.hooks import SubstepHooks
from simuguard_gym.physics.state import SpeedBound, StateComponent, StateRows
from simuguard_gym.physics.vector_math import cross

#: PhysX reports pieces up to the contact offset (10 mm by default) apart; closer than this, or
#: with an impulse, they touch.
CONTACT_TOLERANCE = 1e-3

PHYSX_VERSION = "5.3.1"  # the PhysX that SAPIEN 3.0.x bundles

_RIGID = 13  # q(4) p(3) v(3) w(3) per dynamic body in pack()

# A copy written by `simuguard repair-physx` carries its record beside the package.
_REPAIRED = (Path(sapien.__file__).resolve().parent.parent / "simuguard-physx-repair.json").exists()


class SapienAdapter(SapienInterventions, BodyTableMixin):
    """The SAPIEN/PhysX implementation of :class:`~simuguard_gym.physics.adapter.PhysicsAdapter`.

    >>> import numpy as np, sapien, sapien.physx as physx
    >>> from simuguard_gym.engines.sapien import SapienAdapter
    >>> scene = sapien.Scene([physx.PhysxCpuSystem()])
    >>> ball = physx.PhysxRigidDynamicComponent()
    >>> _ = ball.attach(physx.PhysxCollisionShapeSphere(0.05, physx.get_default_material()))
    >>> entity = sapien.Entity(); _ = entity.add_component(ball); scene.add_entity(entity)
    >>> adapter = SapienAdapter(scene)
    >>> adapter.step(10)   # ten substeps, listeners called around each
    >>> adapter.body_table().roles
    ('object',)
    """

    engine = "sapien-physx"
    engine_version = f"sapien {sapien.__version__}, PhysX {PHYSX_VERSION}" + (
        ", GJK threshold repaired (simuguard repair-physx)" if _REPAIRED else "")

    def __init__(self, scene: Any, *, owner: Any = None) -> None:
        if not isinstance(_system_of(scene), physx.PhysxCpuSystem):
            raise TypeError("SapienAdapter needs a sapien.Scene (or a ManiSkill3 scene) on the PhysX CPU backend")
        self.hooks = SubstepHooks(on_listening=self._listening)
        self.task_spec: Any = None
        self._owner = owner
        self._patched: Any = None
        self._scene_steps = 0  # calls of the scene's step while hooked (see engine_substeps)
        self._bind(scene)

    @classmethod
    def from_env(cls, base: Any) -> "SapienAdapter":
        return cls(base.scene, owner=base)

    # ------------------------------------------------------------------ binding and hooks
    def _bind(self, scene: Any) -> None:
        self.scene = scene
        self._system = system = _system_of(scene)
        self.substep_dt = float(system.timestep)
        self._statics = list(system.rigid_static_components)
        self._dynamics = list(system.rigid_dynamic_components)
        self._links = list(system.articulation_link_components)
        self._components = self._statics + self._dynamics + self._links
        self._index = {c: i for i, c in enumerate(self._components)}
        self._articulations = []
        for link in self._links:
            if link.articulation not in self._articulations:
                self._articulations.append(link.articulation)
        self._joints = [j for a in self._articulations for j in a.active_joints]
        self._dofs = [int(a.dof) for a in self._articulations]
        ndof = sum(self._dofs)
        njoint = len(self._joints)
        layout, offset = [], 0
        for name, size in (("rigid", _RIGID * len(self._dynamics)), ("qpos", ndof), ("qvel", ndof), ("qf", ndof),
                           ("drive_target", njoint), ("drive_velocity_target", njoint)):
            layout.append(StateComponent(name, offset, size))
            offset += size
        self._layout = layout
        self.state_size = offset
        self._shapes: list[Any] = []
        self._shape_body: list[int] = []
        for body, component in enumerate(self._components):
            for shape in component.collision_shapes:
                self._shapes.append(shape)
                self._shape_body.append(body)
        self._shape_index = {s: i for i, s in enumerate(self._shapes)}
        self._table: BodyTable | None = None
        self._cmass: np.ndarray | None = None
        self._tracked_mask = np.zeros(len(self._components), bool)
        self._robot_mask = np.zeros(len(self._components), bool)
        if self.hooks.listeners:
            self._patch(scene)

    def _patch(self, scene: sapien.Scene) -> None:
        if self._patched is scene:
            return
        around, step = self.hooks.around, type(scene).step

        def hooked_step() -> None:
            self._scene_steps += 1
            around("start", step, scene)

        scene.step = hooked_step
        self._patched = scene

    def refresh(self) -> None:
        """Follow the env to its current scene (envs that rebuild the scene on reset)."""
        scene = getattr(self._owner, "scene", None) if self._owner is not None else None
        if scene is not None and scene is not self.scene:
            self.detach()
            self._bind(scene)
        elif len(self._system.rigid_dynamic_components) != len(self._dynamics):
            self.detach()
            self._bind(self.scene)  # bodies were added or removed
        elif self.hooks.listeners:
            self._patch(self.scene)

    def detach(self) -> None:
        """Put the scene's own ``step`` back (the hooks detach by themselves when their last
        listener goes)."""
        if self._patched is not None:
            self._patched.__dict__.pop("step", None)
            self._patched = None

    def _listening(self, listening: bool) -> None:
        if listening:
            self._patch(self.scene)
        else:
            self.detach()

    def step(self, nstep: int = 1) -> None:
        """Advance the scene by ``nstep`` substeps with the listeners called around each."""
        for _ in range(nstep):
            self.run_substep(False, None)

    def run_substep(self, split: bool, apply_mid: Callable[[], None] | None) -> None:
        if split:
            raise ValueError("PhysX substeps are never split")
        self.hooks.around("start", type(self.scene).step, self.scene)

    def split_late_components(self) -> frozenset[str]:
        return frozenset()

    def engine_substeps(self) -> int:
        """Calls of the scene's ``step`` (PhysX keeps no count of its own, so this is the hook's
        own count: a step of the PhysX system behind the scene's back goes unseen)."""
        return self._scene_steps

    # ------------------------------------------------------------------ scene description
    @property
    def gravity(self) -> np.ndarray:
        return np.asarray(self._system.config.gravity, dtype=float)

    def _body_count(self) -> int:
        return len(self._components)

    def _describe_bodies(self) -> BodyTable:
        names, kinds, roles, masses = [], [], [], []
        for component in self._components:
            names.append(component.entity.name or f"body{len(names)}")
            if isinstance(component, physx.PhysxRigidStaticComponent):
                kinds.append("static"), roles.append("scene"), masses.append(0.0)
            elif isinstance(component, physx.PhysxArticulationLinkComponent):
                kinds.append("dynamic"), roles.append("robot"), masses.append(float(component.mass))
            elif component.kinematic:  # moved by code: a scripted gripper, like a MuJoCo mocap body
                kinds.append("kinematic"), roles.append("robot"), masses.append(float(component.mass))
            else:
                kinds.append("dynamic"), roles.append("object"), masses.append(float(component.mass))
        return BodyTable(tuple(names), tuple(kinds), tuple(roles), np.array(masses))

    def model_fingerprint(self) -> str:
        """Hash of what the physics depends on: bodies, masses, pieces, materials, settings."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.float64(self.substep_dt).tobytes())
        h.update(self.gravity.tobytes())
        for component in self._components:
            h.update((component.entity.name or "").encode())
            h.update(type(component).__name__.encode())
            if not isinstance(component, physx.PhysxRigidStaticComponent):
                h.update(np.float64(component.mass).tobytes())
                h.update(np.asarray(component.inertia, np.float64).tobytes())
                h.update(np.float64(component.max_depenetration_velocity).tobytes())
            for shape in component.collision_shapes:
                h.update(type(shape).__name__.encode())
                pose = shape.local_pose
                h.update(np.concatenate([pose.p, pose.q]).astype(np.float64).tobytes())
                h.update(np.float64(shape.contact_offset).tobytes())
                vertices = getattr(shape, "vertices", None)
                if vertices is not None:
                    h.update(np.asarray(vertices, np.float64).tobytes())
                material = shape.physical_material
                h.update(np.array([material.static_friction, material.dynamic_friction, material.restitution],
                                  np.float64).tobytes())
        return h.hexdigest()

    def model_bytes(self) -> bytes:
        return b""  # a SAPIEN scene has no serialised form; the env rebuilds it from its spec

    def collision_pieces(self) -> list[tuple[int, np.ndarray] | None]:
        """For each piece id: its body and its vertices in the body frame (convex meshes), or
        None for primitives (planes, boxes: the false-contact check skips them)."""
        out: list[tuple[int, np.ndarray] | None] = []
        for shape, body in zip(self._shapes, self._shape_body):
            vertices = getattr(shape, "vertices", None)
            if vertices is None:
                out.append(None)
                continue
            pose = shape.local_pose
            local = np.asarray(vertices, np.float64) * np.asarray(shape.scale, np.float64)
            out.append((body, _rotate(np.asarray(pose.q, np.float64), local) + np.asarray(pose.p, np.float64)))
        return out

    @property
    def piece_bodies(self) -> np.ndarray:
        """The body of each collision piece, by piece id."""
        return np.array(self._shape_body, dtype=np.int64)

    def body_poses(self) -> np.ndarray:
        """Current frame poses (n, 7: position, quaternion w x y z) of every body."""
        out = np.zeros((len(self._components), 7))
        for i, component in enumerate(self._components):
            pose = component.entity.pose
            out[i, :3], out[i, 3:] = pose.p, pose.q
        return out

    def stage_box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The world box (lower, upper corner) around the robot's links and the static bodies
        with collision shapes (their frames: PhysX gives no cheap bounds), in the current state."""
        roles, kinds = self.body_table().roles, self.body_table().kinds
        keep = [i for i, c in enumerate(self._components)
                if roles[i] == "robot" or (kinds[i] == "static" and c.collision_shapes)]
        if not keep:
            return None
        points = self.body_poses()[keep, :3]
        return points.min(axis=0), points.max(axis=0)

    def live_speeds(self, ids: np.ndarray) -> np.ndarray:
        """Centre-of-mass speeds (m/s) of bodies as the engine holds them now; unlike
        :meth:`body_states` this covers kinematic robot links too (static bodies: 0)."""
        out = np.zeros(len(ids))
        for k, i in enumerate(np.asarray(ids).tolist()):
            velocity = getattr(self._components[i], "linear_velocity", None)
            if velocity is not None:
                out[k] = float(np.linalg.norm(velocity))
        return out

    # ------------------------------------------------------------------ state
    def state_layout(self) -> list[StateComponent]:
        return list(self._layout)

    def read_state(self, out: np.ndarray) -> None:
        n = _RIGID * len(self._dynamics)
        if n:
            out[:n] = np.frombuffer(self._system.pack(), np.float32, count=n)
        at = n
        for name in ("qpos", "qvel", "qf"):
            for articulation, dof in zip(self._articulations, self._dofs):
                out[at:at + dof] = getattr(articulation, name)
                at += dof
        for joint in self._joints:
            out[at] = joint.drive_target[0]
            at += 1
        for joint in self._joints:
            out[at] = joint.drive_velocity_target[0]
            at += 1

    def state_rows(self, *, decoding_only: bool = False) -> StateRows:
        return StateRows(self.read_state, self.state_size)  # every component, whatever the use

    def write_state(self, state: np.ndarray) -> None:
        """Set what differs from the current state, through the env-facing setters."""
        now = np.empty(self.state_size)
        self.read_state(now)
        rigid = self._layout[0].size
        for i, component in enumerate(self._dynamics):
            lo = _RIGID * i
            new, old = state[lo:lo + _RIGID], now[lo:lo + _RIGID]
            if not np.array_equal(new[:7], old[:7]):
                component.set_entity_pose(sapien.Pose(new[4:7].astype(np.float32), new[0:4].astype(np.float32)))
            if not np.array_equal(new[7:10], old[7:10]):
                component.set_linear_velocity(new[7:10].astype(np.float32))
            if not np.array_equal(new[10:13], old[10:13]):
                component.set_angular_velocity(new[10:13].astype(np.float32))
        at = rigid
        for name in ("qpos", "qvel", "qf"):
            for articulation, dof in zip(self._articulations, self._dofs):
                if not np.array_equal(state[at:at + dof], now[at:at + dof]):
                    getattr(articulation, f"set_{name}")(state[at:at + dof].astype(np.float32))
                at += dof
        for setter in ("set_drive_target", "set_drive_velocity_target"):
            for joint in self._joints:
                if state[at] != now[at]:
                    getattr(joint, setter)(np.float32(state[at]))
                at += 1

    @staticmethod
    def state_fingerprint(state: np.ndarray | bytes) -> int:
        return zlib.crc32(state)

    def success(self) -> bool | None:
        check = getattr(self._owner, "_check_success", None)
        if check is not None:
            return bool(check())
        evaluate = getattr(self._owner, "evaluate", None)  # ManiSkill3: a dict with "success"
        if evaluate is not None:
            found = evaluate()
            if isinstance(found, dict) and "success" in found:
                return bool(np.asarray(found["success"]).reshape(-1)[0])
        return None

    # ------------------------------------------------------------------ bodies
    def body_states(self, states: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Poses (n, len(ids), 7: position, quaternion w x y z) and centre-of-mass velocities
        (n, len(ids), 6) of dynamic bodies ``ids``, decoded from the states with numpy."""
        n = len(states)
        pose, vel = np.zeros((n, len(ids), 7)), np.zeros((n, len(ids), 6))
        if not len(ids):
            return pose, vel
        slot = np.asarray(ids, np.int64) - len(self._statics)
        if (slot < 0).any() or (slot >= len(self._dynamics)).any():
            raise ValueError("body_states decodes dynamic bodies only (robot links are not in the state)")
        rigid = states[:, :_RIGID * len(self._dynamics)].reshape(n, len(self._dynamics), _RIGID)[:, slot]
        pose[..., :3], pose[..., 3:] = rigid[..., 4:7], rigid[..., 0:4]
        vel[...] = rigid[..., 7:13]
        return pose, vel

    def speed_bound(self, ids: np.ndarray) -> SpeedBound:
        """Exact: a dynamic body's centre-of-mass velocity is in the state (robot links are not:
        unbounded)."""
        slot = np.asarray(ids, np.int64) - len(self._statics)
        dynamic = (slot >= 0) & (slot < len(self._dynamics))
        elements = (np.where(dynamic, slot, 0)[:, None] * _RIGID + 7 + np.arange(3)).reshape(-1)
        return SpeedBound(elements, np.ones((len(ids), 3)), None if dynamic.all() else ~dynamic)

    # ------------------------------------------------------------------ contacts
    def new_contact_stage(self, reuse: Any = None) -> "SapienContactStage":
        return SapienContactStage()  # lists of rows: nothing worth keeping between episodes

    def capture_contacts(self, stage: "SapienContactStage") -> None:
        """Read this substep's contacts of tracked bodies. SAPIEN has no bulk read, so this is the
        one Python loop per piece pair: it reads separations, and impulses, normal and position
        only where the pieces touch; sums and magnitudes are computed vectorised at decode."""
        self.body_table()
        index, tracked, robot, shapes = self._index, self._tracked_mask, self._robot_mask, self._shape_index
        rows, impulses = stage.rows, stage.impulses
        tolerance = CONTACT_TOLERANCE
        links: dict[int, tuple] = {}  # robot links read once per substep
        count = 0
        for contact in self._system.get_contacts():
            b0, b1 = contact.bodies
            i0, i1 = index.get(b0, -1), index.get(b1, -1)
            if i0 < 0 or i1 < 0 or not (tracked[i0] or tracked[i1]):
                continue
            points = contact.points
            seps = [p.separation for p in points]
            if not seps:
                continue
            closest = min(seps)
            if closest > tolerance:
                continue  # speculative: PhysX reports pieces up to the contact offset apart
            deepest = points[seps.index(closest)]
            impulses.extend(p.impulse for p in points)
            s0, s1 = contact.shapes
            link = (links.get(i0) or links.setdefault(i0, _motion(b0))) if robot[i0] else _NO_MOTION
            if robot[i1]:
                link = links.get(i1) or links.setdefault(i1, _motion(b1))
            rows.append((i0, i1, shapes.get(s0, -1), shapes.get(s1, -1), -closest, *deepest.normal,
                         len(points), float(robot[i0]) - float(robot[i1]), *deepest.position, *link))
            count += 1
        stage.counts.append(count)
        stage.nbytes += 120 * count

    def decode_chunk(self, stage: "SapienContactStage", states: np.ndarray, ids: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, ContactPairs]:
        pose, vel = self.body_states(states, ids)
        return pose, vel, self.decode_contacts(stage, states)

    def decode_contacts(self, stage: "SapienContactStage", states: np.ndarray) -> ContactPairs:
        """Merge the staged piece pairs per body pair within each substep (vectorised), add the
        two bodies' point speeds, then clear the stage."""
        counts = staged_counts(stage, states)
        if counts is None:
            return ContactPairs.empty(len(states))
        rows = np.array(stage.rows, dtype=np.float64)
        impulse = np.array(stage.impulses, dtype=np.float64).reshape(-1, 3)
        stage.clear()
        substep = np.repeat(np.arange(len(counts)), counts)
        npoints = rows[:, 8].astype(np.int64)
        first = np.concatenate([[0], np.cumsum(npoints)[:-1]])
        total = np.add.reduceat(impulse, first, axis=0)
        magnitude = np.add.reduceat(np.linalg.norm(impulse, axis=1), first)
        # PhysX lists piece pairs in an order that can change between runs of the same physics;
        # sorting them by substep, bodies and pieces makes sums and tie-breaks reproducible.
        order = np.lexsort((rows[:, 3], rows[:, 2], rows[:, 1], rows[:, 0], substep))
        rows, total, magnitude, npoints = rows[order], total[order], magnitude[order], npoints[order]
        bodies = rows[:, 0:2].astype(np.int64)
        dt = self.substep_dt
        # PhysX: the normal points from the second piece to the first and the impulse acts on the
        # first; the recording wants the normal from first to second and the force of first on second.
        pairs, deepest = merge_contact_points(
            substep, len(counts), bodies, rows[:, 2:4].astype(np.int64), rows[:, 4], -rows[:, 5:8],
            -total / dt, magnitude / dt, npoints)
        row = rows[deepest]
        point = row[:, 10:13]
        # The robot link's point at the contact: velocity of its centre of mass plus w x r.
        link_speed = np.linalg.norm(row[:, 16:19] + cross(row[:, 19:22], point - row[:, 13:16]), axis=1)
        robot_side = np.where(row[:, 9] > 0, bodies[deepest, 0], np.where(row[:, 9] < 0, bodies[deepest, 1], -1))
        link = np.full((len(row), 2), np.nan)
        for side in (0, 1):
            hit = pairs.bodies[:, side] == robot_side
            link[hit, side] = link_speed[hit]
        pairs.speed = self._pair_speeds(pairs, states, point, link)
        return pairs

    def _pair_speeds(self, pairs: ContactPairs, states: np.ndarray, point: np.ndarray, link: np.ndarray) -> np.ndarray:
        """Speed of each body's point at the deepest contact: robot links as read at capture,
        dynamic bodies from the states, static bodies 0."""
        speed = link.astype(np.float32)
        substep = np.repeat(np.arange(len(pairs.counts)), pairs.counts)
        first = len(self._statics)
        for side in (0, 1):
            body = pairs.bodies[:, side].astype(np.int64)
            static = body < first
            speed[static, side] = 0.0
            dynamic = np.flatnonzero((body >= first) & (body < first + len(self._dynamics)))
            if len(dynamic):
                rigid = states[substep[dynamic]].reshape(len(dynamic), -1)[:, :_RIGID * len(self._dynamics)]
                rigid = rigid.reshape(len(dynamic), len(self._dynamics), _RIGID)[np.arange(len(dynamic)),
                                                                               body[dynamic] - first]
                com = rigid[:, 4:7] + _rotate(rigid[:, 0:4], self._cmass_offsets()[body[dynamic] - first])
                v = rigid[:, 7:10] + cross(rigid[:, 10:13], point[dynamic] - com)
                speed[dynamic, side] = np.linalg.norm(v, axis=1)
        return speed

    def _cmass_offsets(self) -> np.ndarray:
        if self._cmass is None:
            self._cmass = np.array([c.cmass_local_pose.p for c in self._dynamics], np.float64).reshape(-1, 3)
        return self._cmass


class SapienContactStage:
    """Contact rows of consecutive substeps, awaiting a decode (one tuple per piece pair)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.rows: list[tuple] = []
        self.impulses: list[np.ndarray] = []  # every point of the kept rows, in row order
        self.counts: list[int] = []
        self.nbytes = 0

    def add_empty(self) -> None:
        """Stage a substep without contacts."""
        self.counts.append(0)


_NO_MOTION = (np.nan,) * 9


def _system_of(scene: Any) -> Any:
    """The PhysX system of a SAPIEN scene (``physx_system``) or a ManiSkill3 scene (``px``)."""
    return getattr(scene, "physx_system", None) or getattr(scene, "px", None)


def _motion(component: Any) -> tuple:
    """Centre of mass, its linear velocity and the angular velocity of a body, as floats."""
    com = (component.entity_pose * component.cmass_local_pose).p
    return (*com, *component.linear_velocity, *component.angular_velocity)


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v (..., 3) by unit quaternions q (..., 4: w, x, y, z), broadcast: one
    quaternion for many vectors, or one each."""
    w, u = q[..., :1], q[..., 1:]
    return v + 2.0 * cross(u, cross(u, v) + w * v)

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

Contacts come from ``scene.get_contacts()``, read as engines/sapien_contacts.py describes.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import sapien
import sapien.physx as physx

from simuguard_gym.engines import sapien_geometry
from simuguard_gym.engines.base import BodyTableMixin
from simuguard_gym.engines.sapien_headless import headless  # noqa: F401 - public here since the first release
from simuguard_gym.engines.sapien_contacts import SapienContacts, compiled_gather
from simuguard_gym.engines.sapien_interventions import SapienInterventions
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.hooks import SubstepHooks
from simuguard_gym.physics.piece_shapes import PieceShapes
from simuguard_gym.physics.scene_geometry import ContactPointsNow, GeometryPart
from simuguard_gym.physics.state import SpeedBound, StateComponent, StateRows
from simuguard_gym.physics.vector_math import rotate

PHYSX_VERSION = "5.3.1"  # the PhysX that SAPIEN 3.0.x bundles

_RIGID = 13  # q(4) p(3) v(3) w(3) per dynamic body in pack()

# A copy written by `simuguard repair-physx` carries its record beside the package.
_REPAIRED = (Path(sapien.__file__).resolve().parent.parent / "simuguard-physx-repair.json").exists()


class SapienAdapter(SapienContacts, SapienInterventions, BodyTableMixin):
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
        self._substeps_run = 0  # hooked substeps run, however called: what a shared capture is keyed by
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
        self._index_pack()
        self._shapes: list[Any] = []
        self._shape_body: list[int] = []
        for body, component in enumerate(self._components):
            for shape in component.collision_shapes:
                self._shapes.append(shape)
                self._shape_body.append(body)
        self._shape_index = {s: i for i, s in enumerate(self._shapes)}
        self._bind_contact_reader()
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
            self._substeps_run += 1
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
        self._substeps_run += 1
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

    def collision_shapes(self) -> list[Any]:
        """SAPIEN's collision shape of each piece id (the ids contacts and recordings use)."""
        return list(self._shapes)

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
            out.append((body, rotate(np.asarray(pose.q, np.float64), local) + np.asarray(pose.p, np.float64)))
        return out

    def piece_shapes(self) -> PieceShapes:
        """Each piece as PhysX holds it (see :class:`~simuguard_gym.physics.piece_shapes.PieceShapes`)."""
        return sapien_geometry.piece_shapes(self._shapes)

    def contact_settings(self) -> dict[str, Any]:
        """The PhysX scene flags contact generation reads (PCM, enhanced determinism, ...)."""
        config = self._system.config
        return {"enable_pcm": bool(config.enable_pcm), "enable_tgs": bool(config.enable_tgs),
                "enable_ccd": bool(config.enable_ccd), "enable_enhanced_determinism": bool(config.enable_enhanced_determinism),
                "enable_friction_every_iteration": bool(config.enable_friction_every_iteration),
                "bounce_threshold": float(config.bounce_threshold)}

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

    def scene_geometry(self) -> list[GeometryPart]:
        """Every collision shape in its body's frame (see :class:`~simuguard_gym.physics.adapter.ShowsScene`)."""
        return sapien_geometry.scene_geometry(self._shapes, self._shape_body)

    def contact_points_now(self) -> ContactPointsNow:
        return sapien_geometry.contact_points_now(self.scene, self._index)

    def camera(self, name: str | None = None, *, height: int = 256, width: int = 256,
               follow: str | None = None) -> Any:
        """A camera on the scene's collision shapes at their current poses, drawn by MuJoCo's
        renderer on the CPU (SAPIEN's own renders through Vulkan, on a GPU): see
        :class:`~simuguard_gym.engines.geometry_camera.GeometryCamera`. The scene's cameras are
        SAPIEN's: none can be named here."""
        if name is not None:
            raise ValueError(f"a SAPIEN scene is drawn from its collision shapes by a free camera; its own camera "
                             f"{name!r} renders through Vulkan on a GPU: leave the camera unnamed")
        from simuguard_gym.engines.geometry_camera import GeometryCamera

        return GeometryCamera(self, height=height, width=width, follow=follow)

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

    def _index_pack(self) -> None:
        """Where each state element but ``qf`` sits in ``PhysxCpuSystem.pack()`` (SAPIEN 3's own
        snapshot: per dynamic body its 13 values, then per articulation, in the order of its root
        links, the root's 13, qpos, qvel and per active joint its drive's position and velocity
        targets), so that :meth:`read_state` takes them in one call and one gather."""
        at, found = _RIGID * len(self._dynamics), {}
        for link in self._links:
            if not link.is_root:
                continue
            articulation = link.articulation
            dof = int(articulation.dof)
            qpos, qvel = at + _RIGID, at + _RIGID + dof
            at = qvel + dof
            targets = []
            for joint in articulation.active_joints:
                width = int(joint.dof)
                targets.append((at, at + width))
                at += 2 * width
            found[id(articulation)] = (qpos, qvel, targets)
        src = list(range(_RIGID * len(self._dynamics)))
        try:
            parts = [found[id(a)] for a in self._articulations]
        except KeyError:  # an articulation without a root link among the system's: read one by one
            self._pack = None
            return
        for k in (0, 1):  # qpos, qvel
            for part, dof in zip(parts, self._dofs):
                src += range(part[k], part[k] + dof)
        qf = len(src)
        for k in (0, 1):  # drive targets, drive velocity targets
            src += [target[k] for part in parts for target in part[2]]
        src, dst = np.array(src, np.int64), np.r_[np.arange(qf), np.arange(qf, len(src)) + sum(self._dofs)]
        self._pack = (4 * at, src, dst, qf, src.tobytes(), dst.astype(np.int64).tobytes())
        self._gather = compiled_gather()

    def read_state(self, out: np.ndarray) -> None:
        packed = self._system.pack()
        if self._pack is not None and len(packed) == self._pack[0]:
            _, src, dst, at, src_bytes, dst_bytes = self._pack
            if self._gather is not None and out.flags.c_contiguous:
                self._gather(packed, src_bytes, out, dst_bytes)  # one call, no numpy temporaries
            else:
                out[dst] = np.frombuffer(packed, np.float32)[src]
            for articulation, dof in zip(self._articulations, self._dofs):
                out[at:at + dof] = articulation.qf  # joint forces are not in pack()
                at += dof
            return
        n = _RIGID * len(self._dynamics)
        out[:n] = np.frombuffer(packed, np.float32, count=n)
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


def _system_of(scene: Any) -> Any:
    """The PhysX system of a SAPIEN scene (``physx_system``) or a ManiSkill3 scene (``px``)."""
    return getattr(scene, "physx_system", None) or getattr(scene, "px", None)

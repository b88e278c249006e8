"""The contract between simuguard and a physics engine, written as protocols.

An adapter is the only object that knows a simulator. The recorder, the detector and the replay
speak to it through :class:`PhysicsAdapter`; they never import an engine. What only some engines
can do is a small protocol of its own, checked with ``isinstance``: :class:`RestorableModel`,
:class:`DecodesQuietBatches`, :class:`DecodesInFork`, :class:`DeclaresCopySources` and
:class:`StagesFromState` and :class:`FiltersCollisions` (MuJoCo),
:class:`HasConvexPieces` and :class:`HasLiveSpeeds` (SAPIEN); :class:`Intervenes` (both, for reruns),
:class:`ShowsScene` (both, for ``simuguard view``).

The contract in one paragraph: an adapter calls its listeners around every physics substep:
``before_substep(phase)`` then ``after_substep()``. The phase is ``"start"`` before a whole
substep, ``"continue"`` when the adapter guarantees that nothing wrote the state since the
previous substep ended, and ``"split"`` between the two halves of a substep that the env runs as
two calls (robosuite's step1/step2, with the controller writing ``ctrl`` in between). It exposes
the *between-substep state* (every value that the next substep depends on and that code outside
the physics may write: actuation, applied forces, positions, warm start) as one float64 vector
with named components, decodes body states from those vectors, stages contacts cheaply and
merges them later, and can run one substep itself for replay. Everything per substep is a copy;
decoding runs per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.camera import Camera
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints
from simuguard_gym.physics.hooks import SubstepHooks
from simuguard_gym.physics.parameters import ParameterValue
from simuguard_gym.physics.piece_shapes import PieceShapes
from simuguard_gym.physics.scene_geometry import ContactPointsNow, GeometryPart
from simuguard_gym.physics.state import SpeedBound, StateComponent, StateRows


@runtime_checkable
class ContactStage(Protocol):
    """An engine's buffer of the raw contacts of consecutive substeps, awaiting a decode by its
    adapter (:meth:`PhysicsAdapter.new_contact_stage`): what the recorder and the tap use of it."""

    #: One entry per staged substep (its contact count).
    counts: list[int]

    @property
    def nbytes(self) -> int:
        """Bytes staged (a listener decodes early when they grow large)."""

    def clear(self) -> None: ...

    def add_empty(self) -> None:
        """Stage a substep without contacts (a replay that compares states only)."""


@runtime_checkable
class PhysicsAdapter(Protocol):
    """What the recorder, detector and replay need from an engine (see module docstring)."""

    engine: str
    engine_version: str
    substep_dt: float
    hooks: SubstepHooks
    #: Roles by body name applied on top of the defaults whenever the body table is (re)built.
    task_spec: Any

    def use_task_spec(self, spec: Any, *, default: bool = False) -> None:
        """Apply a TaskSpec's roles now and on every rebuild of the body table (see
        ``engines.base.BodyTableMixin``)."""

    @property
    def gravity(self) -> np.ndarray:
        """The scene's gravity vector (m/s^2, world frame)."""

    def refresh(self) -> None:
        """Re-bind to the simulator after an env reset (some envs rebuild it) and re-hook."""

    def detach(self) -> None:
        """Remove every hook; the env behaves as if the adapter never existed."""

    def body_table(self) -> BodyTable: ...

    def model_fingerprint(self) -> str: ...

    def state_layout(self) -> list[StateComponent]: ...

    def read_state(self, out: np.ndarray) -> None: ...

    def state_rows(self, *, decoding_only: bool = False) -> "StateRows":
        """How to copy the state per substep into rows of a listener's buffer (cheaper than
        ``read_state`` where the engine allows), bound to the current scene. ``decoding_only``:
        the rows may leave out components that :meth:`body_states` and :meth:`decode_chunk`
        never read (they then read as 0), for a listener that only decodes them."""

    def write_state(self, state: np.ndarray) -> None: ...

    def body_states(self, states: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Poses (n, len(ids), 7) and centre-of-mass velocities (n, len(ids), 6) of bodies ``ids``
        from the states read after n substeps (vectorised; runs once per chunk, not per substep)."""

    def speed_bound(self, ids: np.ndarray) -> "SpeedBound":
        """A cheap upper bound of the speeds of bodies ``ids`` from a few state elements; lets the
        online detector skip quiet substeps."""

    def state_fingerprint(self, state: np.ndarray | bytes) -> int: ...

    def set_body_table(self, table: BodyTable) -> None:
        """Use ``table`` (roles from a TaskSpec or a recording) to choose the tracked bodies."""

    def new_contact_stage(self, reuse: Any = None) -> ContactStage:
        """An engine-defined buffer for raw contacts of consecutive substeps. ``reuse``: a stage
        from an earlier episode, returned cleared when it is of this engine (its buffers stay
        allocated)."""

    def capture_contacts(self, stage: Any) -> None:
        """Stage this substep's contacts; cheap, called after every substep."""

    def decode_contacts(self, stage: Any, states: np.ndarray) -> ContactPairs:
        """Contacts of the staged substeps, merged per body pair, with the speeds of both bodies
        decoded from ``states`` (the states after those substeps, one row each); clears the stage.
        Pairs of two robot links are left out (self-contact of the robot is not audited)."""

    def decode_chunk(self, stage: Any, states: np.ndarray, ids: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, ContactPairs]:
        """``body_states(states, ids)`` and ``decode_contacts(stage, states)`` together (an engine
        may share work between them)."""

    def run_substep(self, split: bool, apply_mid: Callable[[], None] | None) -> None:
        """Run one substep for replay: whole, or split with ``apply_mid()`` between the halves;
        listeners are called as they were while recording."""

    def success(self) -> bool | None: ...

    def stage_box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The world box (lower, upper corner) around the robot and the static scene in the
        current state: bodies parked far outside it by the benchmark are off stage (the
        detector's ``offstage_margin``); None where the scene has neither."""

    def engine_substeps(self) -> int:
        """Substeps the engine ran on the current scene by its own count, whoever made them (a
        check that every one reached the hooks; only differences between two reads count)."""

    def split_late_components(self) -> frozenset[str]:
        """State components replayed between the halves of a split substep (the rest: before)."""


@runtime_checkable
class RestorableModel(Protocol):
    """An adapter whose model an env may change between episodes (MuJoCo: Meta-World moves goal
    sites and bodies at reset), and which can put a recorded episode's model back for replay."""

    def model_changes(self) -> dict[str, dict[str, np.ndarray]]:
        """The model arrays that differ from the model as built (or did in an earlier episode):
        ``{"values": array}``, or ``{"index": flat indices, "values": elements}`` for large ones."""

    def model_digests(self) -> dict[str, int]:
        """A checksum of every physics-relevant model array, by name."""

    def model_record(self) -> tuple[str, dict[str, dict[str, np.ndarray]], dict[str, int]]:
        """The model's fingerprint, changes and digests at once (what a recording's header holds)."""

    def restore_model(self, changes: dict[str, dict[str, np.ndarray]], digests: dict[str, int] | None
                      ) -> tuple[list[str], list[str]]:
        """Write a recorded episode's model back: (arrays written, arrays that still differ)."""


@runtime_checkable
class StoresModel(Protocol):
    """An adapter whose compiled model a recording can carry (MuJoCo's MJB): a replay then needs
    no benchmark to rebuild the env (:mod:`~simuguard_gym.recording.model_store`)."""

    def model_to_store(self, held: Callable[[str], bool]) -> tuple[str, bytes | None]:
        """The fingerprint of the model a recording of this episode references, and its bytes
        where ``held(fingerprint)`` is False."""


@runtime_checkable
class DecodesQuietBatches(Protocol):
    """An adapter that decodes what a quiet batch needs more cheaply than a full decode (MuJoCo;
    the monitor's tap decodes in full elsewhere)."""

    def decode_contact_points(self, stage: Any, substeps: int) -> ContactPoints:
        """The bodies and depth of each contact point of the first ``substeps`` staged
        substeps, which leave the stage."""

    def deepest_staged(self, stage: Any, substeps: int) -> float:
        """The deepest contact of the first ``substeps`` staged substeps (0 without any), which
        stay staged: whether a quiet decode would drop what a deep contact's check needs."""

    def body_states_of_rows(self, rows: StateRows, buffer: np.ndarray, ids: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
        """``body_states`` of the states in a buffer of rows, bit for bit, without building whole
        state vectors."""


@runtime_checkable
class DecodesInFork(Protocol):
    """An adapter whose decoding reads only staged copies, the model's constant arrays and
    scratch memory of its own: a process forked from this one decodes the same (MuJoCo), so a
    recorder may encode chunks there."""

    decodes_in_fork: bool

    def decoding_scene(self) -> tuple[object, ...]:
        """The engine objects decoding reads (compared by identity): a process forked while they
        were these, with the model's arrays as they were then, decodes chunks of a later episode
        as this one would."""

    def new_contact_stage(self, reuse: Any = None, *, memory: Any = None) -> Any:
        """As :meth:`PhysicsAdapter.new_contact_stage`; with ``memory`` (a records and a forces
        buffer in shared memory) a stage that fills them first, so that the forked process sees
        what was staged (and takes over bytes that outgrew them through the stage's handoff)."""


@dataclass(frozen=True)
class CopySources:
    """Where an engine keeps a substep's contacts, for the optional C copy: ``count`` (address of
    an int32, the records of this substep), ``records`` (their address, ``stride`` bytes apart),
    ``extra_count`` (an int32: float64 values staged with them, MuJoCo's constraint forces) and
    ``extra_pointer`` (the address of the pointer to those values); ``owners`` keep the memory."""

    count: int
    records: int
    stride: int
    extra_count: int
    extra_pointer: int
    owners: tuple[Any, ...] = field(repr=False, default=())


@runtime_checkable
class DeclaresCopySources(Protocol):
    """An adapter whose contacts the optional C copy (``capture.native``) stages from memory
    (MuJoCo); its state rows are then ``capture.rows.SpanRows``, whose spans say where the state is."""

    def copy_sources(self) -> CopySources | None:
        """Where this substep's contacts are; None where that is not located yet."""


class SubstepScreen(Protocol):
    """Substeps watched by the engine itself, with no Python call per substep (MuJoCo's control
    callback: ``engines.mujoco_screen``): it marks the substeps where a candidate could start,
    keeps the states they started from, re-simulates them on demand and counts deep penetrations."""

    @property
    def seen(self) -> int:
        """Substeps run this episode."""

    @property
    def flagged(self) -> int:
        """The earliest substep marked since the last ``clear_flag()`` (-1: none)."""

    @property
    def unreadable(self) -> bool:
        """Contacts came that the screen could not read (its marks then cover them)."""

    @property
    def contacts_located(self) -> bool:
        """Whether the screen reads the scene's contacts (False before its first contact was
        located: then no contact of the episode so far was counted)."""

    @property
    def oldest(self) -> int:
        """The oldest substep whose start state the screen still holds."""

    @property
    def deep_pairs(self) -> int:
        """How many body pairs have a deep-penetration flag."""

    def start_episode(self, tracked: np.ndarray, kinds: np.ndarray, config: Any, *, lookback: int,
                      steps_between_polls: int, refresh_every: int) -> bool: ...

    def stop(self) -> None: ...

    def release(self) -> None: ...

    def clear_flag(self) -> None: ...

    def settle(self) -> None: ...

    def poll_call(self) -> tuple[Callable[[int], int], int]: ...

    def quiet_step_call(self) -> Callable[[int, Any, dict[str, Any]], Any]: ...

    def refresh_after(self, substeps: int) -> None: ...

    def locate_contacts(self) -> bool: ...

    def end_state(self, k: int) -> None: ...

    def fastest(self, k: int) -> np.ndarray: ...

    def deep_flags(self, names: tuple[str, ...]) -> list[dict[str, Any]]: ...

    def add_deep_flags(self, flags: list[dict[str, Any]]) -> None:
        """Count deep penetrations found elsewhere (the detector's, in substeps whose contacts
        the screen could not read) with its own."""

    def states(self, lo: int, hi: int) -> np.ndarray: ...

    def replay(self, lo: int, hi: int, make_tap: Callable[[Any, Callable[..., None]], Any],
               sink: Callable[..., None]) -> None: ...


@runtime_checkable
class ScreensSubsteps(Protocol):
    """An adapter whose substeps a :class:`SubstepScreen` can watch (MuJoCo, where built)."""

    def substep_screen(self) -> tuple[SubstepScreen | None, str | None]:
        """A screen for the scene as it is now, or None and why not."""


@runtime_checkable
class FiltersCollisions(Protocol):
    """An adapter whose model says which of its shapes may collide (MuJoCo's contype and
    conaffinity bits): in a scene where no two can, no contact, hence no artifact, can occur."""

    def makes_contacts(self) -> bool:
        """False where the model as it is now lets no two shapes collide; True where some may."""


@runtime_checkable
class StagesFromState(Protocol):
    """An adapter that computes :meth:`PhysicsAdapter.stage_box` of a state read earlier (MuJoCo,
    by its kinematics): a consumer keeps the episode's first state and asks only if it needs the box."""

    def stage_box_of(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``stage_box()`` as it was in ``state`` (one from ``read_state``)."""


@runtime_checkable
class HasConvexPieces(Protocol):
    """An engine that collides convex pieces given by vertices (SAPIEN/PhysX): the false-contact
    check recomputes their true distance."""

    @property
    def piece_bodies(self) -> np.ndarray:
        """The body of each collision piece."""

    def collision_pieces(self) -> list[tuple[int, np.ndarray] | None]:
        """Each collision piece's kind and vertices in its body's frame (None: not a convex piece)."""

    def body_poses(self) -> np.ndarray:
        """Every body's pose now (n, 7)."""


@runtime_checkable
class HasPieceShapes(Protocol):
    """An engine whose onset pairs can be rebuilt alone (SAPIEN/PhysX, ``simuguard trace``): what
    each piece is to the engine, and the scene settings contact generation depends on."""

    def piece_shapes(self) -> PieceShapes:
        """Each collision piece's kind, size, frame in its body and contact/rest offsets."""

    def contact_settings(self) -> dict[str, Any]:
        """The scene's settings that contact generation reads (plain values, for a header)."""


@runtime_checkable
class HasLiveSpeeds(Protocol):
    """An engine whose state vector leaves some moving bodies out (SAPIEN's kinematic links):
    their speeds are read from the engine as it is."""

    def live_speeds(self, ids: np.ndarray) -> np.ndarray:
        """Centre-of-mass speeds of bodies ``ids`` as the engine holds them now."""


@runtime_checkable
class Intervenes(Protocol):
    """An adapter that changes one physics parameter of some bodies from a substep on (a rerun's
    intervention, named as in ``replay.interventions.KINDS``)."""

    def parameter_values(self, name: str, bodies: np.ndarray, value: float | None = None) -> list[ParameterValue]:
        """The values that intervention ``name`` on ``bodies`` (ids) writes, one per element and
        parameter (a geom, a body, a collision shape, or the model's option): as they are now,
        or with ``value`` those the intervention would set."""

    def apply_intervention(self, name: str, value: float, bodies: np.ndarray) -> str | None:
        """Set intervention ``name`` to ``value`` on ``bodies`` from now on; a note or None."""

    def clamp_speeds(self, bodies: np.ndarray, limit: float) -> None:
        """Scale down the linear velocity of ``bodies`` faster than ``limit`` (m/s)."""


@runtime_checkable
class Renders(Protocol):
    """An adapter that renders its current state from a camera, on the CPU too (MuJoCo its own
    scene; SAPIEN its collision shapes, drawn by MuJoCo's renderer)."""

    def camera(self, name: str | None = None, *, height: int = 256, width: int = 256,
               follow: str | None = None) -> Camera:
        """A camera by name; None: the scene's front view if it has one, else a free camera that
        follows body ``follow`` (if named)."""


@runtime_checkable
class ShowsScene(Protocol):
    """An adapter that tells a viewer what its scene looks like (MuJoCo and SAPIEN): the
    collision geometry of every body, the bodies' poses and the contact points now."""

    def scene_geometry(self) -> list[GeometryPart]:
        """Every collision shape, in its body's frame."""

    def body_poses(self) -> np.ndarray:
        """Every body's pose now (n, 7: position, quaternion w x y z), by body table index."""

    def contact_points_now(self) -> ContactPointsNow:
        """The contact points the engine reported for its last substep."""

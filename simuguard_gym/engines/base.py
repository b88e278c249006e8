"""The adapter contract every physics engine implements, and adapter autodetection.

An adapter is the only object that knows a simulator. The recorder, the detector and the
replay speak to it through :class:`PhysicsAdapter`; they never import an engine.

The contract in one paragraph: an adapter calls its listeners around every physics substep:
``before_substep(phase)`` then ``after_substep()``. The phase is ``"start"`` before a whole
substep, ``"continue"`` when the adapter guarantees that nothing wrote the state since the
previous substep ended, and ``"split"`` between the two halves of a substep that the env runs as
two calls (robosuite's step1/step2, with the controller writing ``ctrl`` in between). It exposes
the *between-substep state* (every value that the next substep depends on and that code outside
the physics may write: actuation, applied forces, positions, warm start) as one float64 vector
with named components, decodes body
states from those vectors, stages contacts cheaply and merges them later, and can run one
substep itself for replay. Everything per substep is a copy; decoding runs per batch.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class BodyTable:
    """Every body of a scene, indexed by the engine's body id.

    Kinds: ``static`` bodies never move, ``kinematic`` ones are moved by code (mocap, kinematic
    actors), ``dynamic`` ones by the solver. Roles: ``robot``, ``object``, ``container``, ``scene``
    (see :class:`simuguard_gym.TaskSpec`).

    ``tracked`` are the bodies whose state is recorded each substep: every body that can move
    and is not part of the robot (objects, containers, free-standing scene bodies).
    """

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    roles: tuple[str, ...]
    masses: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.names)
        if not (len(self.kinds) == len(self.roles) == len(self.masses) == n):
            raise ValueError("BodyTable columns must have one entry per body")

    def __len__(self) -> int:
        return len(self.names)

    @property
    def tracked(self) -> np.ndarray:
        """Ids of the bodies recorded every substep (moving, not robot), ascending."""
        return np.array(
            [i for i, (k, r) in enumerate(zip(self.kinds, self.roles)) if k != "static" and r != "robot"],
            dtype=np.int32,
        )

    def with_roles(self, roles: Sequence[str]) -> "BodyTable":
        return BodyTable(self.names, self.kinds, tuple(roles), self.masses)

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "kinds": list(self.kinds),
            "roles": list(self.roles),
            "masses": [float(m) for m in self.masses],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BodyTable":
        return cls(tuple(d["names"]), tuple(d["kinds"]), tuple(d["roles"]), np.asarray(d["masses"], float))


@dataclass(frozen=True)
class StateComponent:
    """One named slice of the between-substep state vector."""

    name: str
    offset: int
    size: int


@dataclass
class ContactPairs:
    """Contacts of one or more substeps, merged per body pair (``body_a < body_b``).

    ``force`` is the net contact force that ``body_a`` exerts on ``body_b`` (world frame, N);
    ``abs_force`` the sum of the point force magnitudes; ``depth`` the deepest penetration (m,
    positive when the pieces overlap); ``pieces`` the engine's geoms/shapes of the deepest point
    and ``normal`` its contact normal, pointing from ``pieces[0]`` to ``pieces[1]``.
    ``speed`` holds the speed (m/s) after the substep of the material point of ``body_a`` and of
    ``body_b`` at the deepest contact point (0 for static bodies, NaN in pairs without a tracked
    body): the detector's carrier stage needs how fast a robot link strikes an object, and robot
    links are not recorded bodies.
    ``counts[k]`` is the number of pairs of the k-th substep.
    """

    counts: np.ndarray  # (substeps,) uint32
    bodies: np.ndarray  # (m, 2) int32
    depth: np.ndarray  # (m,) float32
    force: np.ndarray  # (m, 3) float32
    abs_force: np.ndarray  # (m,) float32
    points: np.ndarray  # (m,) uint16
    pieces: np.ndarray  # (m, 2) int32
    normal: np.ndarray  # (m, 3) float32
    speed: np.ndarray  # (m, 2) float32

    COLUMNS = ("bodies", "depth", "force", "abs_force", "points", "pieces", "normal", "speed")

    @classmethod
    def empty(cls, substeps: int) -> "ContactPairs":
        return cls(counts=np.zeros(substeps, np.uint32), bodies=np.zeros((0, 2), np.int32),
                   depth=np.zeros(0, np.float32), force=np.zeros((0, 3), np.float32),
                   abs_force=np.zeros(0, np.float32), points=np.zeros(0, np.uint16),
                   pieces=np.zeros((0, 2), np.int32), normal=np.zeros((0, 3), np.float32),
                   speed=np.zeros((0, 2), np.float32))


@dataclass
class ContactPoints:
    """Which bodies touch and how deep, per contact point: all a detector needs of substeps whose
    contacts no later event examines (see :meth:`ArtifactDetector.feed_quiet`). Cheaper to decode
    than :class:`ContactPairs`: no forces, frames, merging or point speeds.

    ``bodies`` (m, 2) int32 hold the two bodies of each point, lower id first; ``depth`` (m,)
    float32 its penetration (as :class:`ContactPairs`, whose ``depth`` of a pair is the deepest of
    its points); ``counts[k]`` the number of points of the k-th substep. Points where two robot
    links touch are left out, as they are from :class:`ContactPairs`.
    """

    counts: np.ndarray  # (substeps,) int64
    bodies: np.ndarray  # (m, 2) int32
    depth: np.ndarray  # (m,) float32


@runtime_checkable
class SubstepListener(Protocol):
    """Something that wants to run around every physics substep.

    Optional attributes: ``needs_before = False`` (never called before substeps) and
    ``guards_itself = True`` (its two hook methods catch their own exceptions and hand them to
    :func:`report_failure`, so they may be called without a guard around them).
    """

    def before_substep(self, phase: str) -> None: ...

    def after_substep(self) -> None: ...

    def hook_failed(self, where: str, error: BaseException) -> None: ...


class SubstepHooks:
    """Calls listeners around substeps; an exception in a listener never reaches the env.

    The failing listener is told through ``hook_failed`` (it records the error); the physics
    substep always runs exactly once whatever the listeners do.
    """

    def __init__(self) -> None:
        self.listeners: list[SubstepListener] = []
        #: Wrappers with something to write into every recording of this env (the detector's
        #: config and events): objects with ``recording_header()`` and ``recording_footer()``
        #: returning plain dicts. Kept here so that wrappers find each other in either order.
        self.annotators: list[Any] = []
        self._sync()

    def add(self, listener: SubstepListener) -> None:
        if listener not in self.listeners:
            self.listeners.append(listener)
        self._sync()

    def remove(self, listener: SubstepListener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)
        self._sync()

    def _sync(self) -> None:
        # On a hot path of a few microseconds per substep even an empty call shows: listeners that
        # declare ``needs_before = False`` are not called before substeps, and a lone listener that
        # guards itself is called directly (``before``/``after`` are its own methods; robosuite's
        # Lift: ~3 us per substep less than through the guarded loops, measured in place).
        self._before = [x for x in self.listeners if getattr(x, "needs_before", True)]
        self.before = (self._before[0].before_substep if len(self._before) == 1 and _guards_itself(self._before[0])
                       else self._guarded_before if self._before else _nothing)
        self.after = (self.listeners[0].after_substep if len(self.listeners) == 1 and _guards_itself(self.listeners[0])
                      else self._guarded_after)

    def escaped(self, where: str, error: BaseException) -> None:
        """An error that got out of a listener called directly: every listener is told (only a
        lone self-guarding listener is called so); never raises."""
        for listener in list(self.listeners):
            report_failure(listener, where, error)

    #: Call the listeners before a substep (``phase``: "start", "split" or "continue"); never raises.
    before: Callable[[str], None]
    #: Call the listeners after a substep; never raises.
    after: Callable[[], None]

    def _guarded_before(self, phase: str) -> None:
        for listener in self._before:
            try:
                listener.before_substep(phase)
            except Exception as error:  # noqa: BLE001 - never raise into the evaluation
                report_failure(listener, f"before_substep({phase})", error)

    def _guarded_after(self) -> None:
        for listener in self.listeners:
            try:
                listener.after_substep()
            except Exception as error:  # noqa: BLE001
                report_failure(listener, "after_substep", error)


def report_failure(listener: SubstepListener, where: str, error: BaseException) -> None:
    """Tell ``listener`` that its hook raised ``error``; never raises (logs if telling fails)."""
    try:
        listener.hook_failed(where, error)
    except Exception:  # noqa: BLE001
        logger.error("simuguard hook failed and could not record it:\n%s", traceback.format_exc())


def _guards_itself(listener: SubstepListener) -> bool:
    return getattr(listener, "guards_itself", False) is True


def _nothing(phase: str) -> None:
    pass


class PhysicsAdapter(Protocol):
    """What the recorder, detector and replay need from an engine (see module docstring)."""

    engine: str
    engine_version: str
    substep_dt: float
    hooks: SubstepHooks
    #: Roles by body name applied on top of the defaults whenever the body table is (re)built.
    task_spec: Any

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

    def model_bytes(self) -> bytes: ...

    def set_body_table(self, table: BodyTable) -> None:
        """Use ``table`` (roles from a TaskSpec or a recording) to choose the tracked bodies."""

    def new_contact_stage(self, reuse: Any = None) -> Any:
        """An engine-defined buffer for raw contacts of consecutive substeps; it has ``counts`` (a list,
        one entry per staged substep), ``nbytes`` and ``clear()``. ``reuse``: a stage from an
        earlier episode, returned cleared when it is of this engine (its buffers stay allocated)."""

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

    # Optional (the monitor's tap uses them where present, MuJoCo has them; else it decodes in full):
    # decode_contact_points(stage, substeps) -> ContactPoints: the bodies and depth of each contact
    #     point of the first ``substeps`` staged substeps, which leave the stage;
    # body_states_of_rows(rows, buffer, ids): body_states of the states in a buffer of StateRows
    #     rows, bit for bit, without building whole state vectors.


@runtime_checkable
class RestorableModel(Protocol):
    """An adapter whose model an env may change between episodes (MuJoCo: Meta-World moves goal
    sites and bodies at reset), and which can put a recorded episode's model back for replay."""

    def model_changes(self) -> dict[str, dict[str, np.ndarray]]:
        """The model arrays that differ from the model as built (or did in an earlier episode):
        ``{"values": array}``, or ``{"index": flat indices, "values": elements}`` for large ones."""

    def model_digests(self) -> dict[str, int]:
        """A checksum of every physics-relevant model array, by name."""

    def restore_model(self, changes: dict[str, dict[str, np.ndarray]], digests: dict[str, int] | None
                      ) -> tuple[list[str], list[str]]:
        """Write a recorded episode's model back: (arrays written, arrays that still differ)."""


@dataclass(frozen=True)
class SpeedBound:
    """An upper bound of some bodies' centre-of-mass speeds, read from a few state elements: body
    b's squared speed is at most ``sum_k weights[b, k] * state[elements[b * per + k]] ** 2`` (``per
    = weights.shape[1]`` elements per body). Bodies whose speed cannot be bounded this way
    (``unbounded``, e.g. on hinges) always count as fast.

    >>> import numpy as np
    >>> bound = SpeedBound(elements=np.array([3, 4, 5]), weights=np.ones((1, 3)))
    >>> bound.bounds(np.array([[0.0, 0, 0, 0.3, 0.4, 0]])).tolist()
    [[0.5]]
    >>> bound.may_exceed(np.array([[0.3, 0.4, 0.0]]), 0.6)
    False
    >>> SpeedBound(np.zeros(0, int), np.ones((0, 3))).may_exceed(np.zeros((5, 0)), 0.6)  # no bodies
    False
    """

    elements: np.ndarray  # (bodies * per,), body by body
    weights: np.ndarray  # (bodies, per)
    unbounded: np.ndarray | None = None  # (bodies,) bool; None: every body is bounded

    def __post_init__(self) -> None:
        if self.unbounded is not None and not np.any(self.unbounded):
            object.__setattr__(self, "unbounded", None)  # may_exceed tests it per env step
        # The weights as an (elements, bodies) block matrix: may_exceed's sums in one product.
        bodies, per = self.weights.shape
        matrix = np.zeros((bodies * per, bodies))
        matrix[np.arange(bodies * per), np.repeat(np.arange(bodies), per)] = self.weights.reshape(-1)
        object.__setattr__(self, "_matrix", matrix)

    def bounds(self, states: np.ndarray) -> np.ndarray:
        """The bounds (n, bodies) after each state (n, state size); +inf for unbounded bodies."""
        bounds = np.sqrt(self._squared(states[:, self.elements]))
        return bounds if self.unbounded is None else np.where(self.unbounded, np.inf, bounds)

    def may_exceed(self, values: np.ndarray, limit: float) -> bool:
        """Whether any body may be faster than ``limit`` after any of n states, given their
        ``elements`` (n, len(elements)); a NaN counts as fast. Three numpy calls: this runs per
        env step, where each call costs several microseconds (robosuite's Lift: 5 us a call)."""
        if not values.size:  # no substeps, or no bodies to bound (a scene without free objects)
            return False
        if self.unbounded is not None:
            return True
        return not (np.square(values).dot(self._matrix).max() <= limit * limit)

    def _squared(self, values: np.ndarray) -> np.ndarray:
        return ((values * values).reshape(len(values), *self.weights.shape) * self.weights).sum(axis=2)


class StateRows:
    """How a listener copies the between-substep state into rows of its own buffer, one row per
    substep, and turns a batch of rows into state vectors (``read_state``'s layout) afterwards.

    This plain form stores the state vector itself; an adapter may store something cheaper to
    copy (``MujocoAdapter`` stores MuJoCo's own memory and gathers the vectors per batch).

    >>> import numpy as np
    >>> rows = StateRows(lambda out: out.fill(1.0), size=3)
    >>> buffer = rows.allocate(2)
    >>> for target in rows.targets(buffer):
    ...     rows.copy(target)   # the per-substep call
    >>> rows.states(buffer).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def __init__(self, read_state: Callable[[np.ndarray], None], size: int) -> None:
        self.size = int(size)
        #: Bytes per row; a multiple of 8.
        self.row_bytes = 8 * self.size
        #: ``copy(target)`` fills one row; ``target`` is an element of :meth:`targets`.
        self.copy: Callable[[Any], None] = read_state

    def allocate(self, n: int) -> np.ndarray:
        """A buffer of ``n`` rows, zeroed: a form whose copies leave bytes of a row unwritten
        (the padding after MuJoCo's ``eq_active`` bytes) must find the same bytes there in
        every row, or rows compared word by word would differ where nothing changed."""
        return np.zeros((n, self.row_bytes), np.uint8)

    @property
    def targets_key(self) -> tuple[Any, ...]:
        """Equal for two row forms whose :meth:`targets` of the same buffer are interchangeable
        (a listener keeps its buffers and targets across episodes while it stays equal)."""
        return (type(self).__name__, self.row_bytes)

    def targets(self, rows: np.ndarray) -> list[Any]:
        """What :attr:`copy` takes for each row of ``rows`` (made once per buffer, not per substep)."""
        return list(rows.view(np.float64))

    def states(self, rows: np.ndarray) -> np.ndarray:
        """State vectors (n, size) of filled rows (a view here; a new array in other forms)."""
        return rows.view(np.float64)

    def words(self, elements: np.ndarray) -> np.ndarray:
        """Where state ``elements`` (float components) sit in a row: ``rows.view(np.float64)[:,
        words]`` reads them without building whole state vectors."""
        return np.asarray(elements, np.int64)

    def word_ranges(self, components: list[StateComponent]) -> np.ndarray:
        """(len(components), 2): the 8-byte words [first, end) of a row that hold each component.
        Components never share a word, so two rows compared word by word tell which components
        differ."""
        return np.array([[c.offset, c.offset + c.size] for c in components], np.int64).reshape(-1, 2)

    def gather(self, rows: np.ndarray, elements: np.ndarray) -> np.ndarray:
        """State ``elements`` (any component) of filled rows, (n, len(elements)), bit for bit what
        :meth:`states` holds there, without building whole state vectors."""
        return np.take(rows.view(np.float64), np.asarray(elements, np.int64), axis=1)


class BodyTableMixin:
    """The body table an adapter keeps: the engine's default roles (``_describe_bodies()``), a
    TaskSpec on top, and masks of the tracked and the robot bodies for the hot paths."""

    task_spec: Any = None
    _table: BodyTable | None = None

    def _describe_bodies(self) -> BodyTable:
        raise NotImplementedError

    def _body_count(self) -> int:
        raise NotImplementedError

    def body_table(self) -> BodyTable:
        if self._table is None:
            table = self._describe_bodies()
            if self.task_spec is not None:
                table = self.task_spec.apply(table)
            self.set_body_table(table)
        return self._table

    def set_body_table(self, table: BodyTable) -> None:
        if len(table) != self._body_count():
            raise ValueError(f"body table has {len(table)} bodies, the scene {self._body_count()}")
        self._table = table
        self._tracked_mask = np.zeros(len(table), dtype=bool)
        self._tracked_mask[table.tracked] = True
        self._robot_mask = np.array([r == "robot" for r in table.roles], dtype=bool)


def staged_counts(stage: Any, states: np.ndarray) -> np.ndarray | None:
    """Contact counts of a stage's substeps, checked against the states given for them; None
    (after clearing the stage) when no contact was staged at all."""
    counts = np.asarray(stage.counts, dtype=np.int64)
    if len(states) != len(counts):
        stage.clear()
        raise ValueError(f"{len(counts)} substeps staged but {len(states)} states given")
    if not counts.any():
        stage.clear()
        return None
    return counts


_ADAPTER_ATTR = "_simuguard_adapter"


def adapter_for(env: Any, adapter: PhysicsAdapter | None = None) -> PhysicsAdapter:
    """Return the adapter of ``env``'s simulator, creating it on first use.

    Gymnasium 1.x wrappers forward no attributes, so detection looks at ``env.unwrapped``: a
    SAPIEN scene on the PhysX CPU backend at ``scene`` (SAPIEN, ManiSkill3), else the one
    ``mujoco.MjData`` it keeps, wherever it is (``data``, robosuite's ``sim.data._data``, or found
    among its attributes: see :func:`simuguard_gym.engines.mujoco_hooking.locate`). The adapter is
    cached on the unwrapped env, so stacked wrappers share one set of hooks. An env may name its
    roles in a ``simuguard_task_spec`` attribute (a :class:`~simuguard_gym.TaskSpec`), used unless
    a wrapper is given another.

    >>> import gymnasium as gym
    >>> from simuguard_gym.engines import adapter_for
    >>> adapter_for(gym.make("Pusher-v5")).engine
    'mujoco'
    """
    base = getattr(env, "unwrapped", env)
    if adapter is not None:
        setattr(base, _ADAPTER_ATTR, adapter)
        return adapter
    cached = base.__dict__.get(_ADAPTER_ATTR) if hasattr(base, "__dict__") else None
    if cached is not None:
        return cached
    if _looks_like_sapien(base):
        from simuguard_gym.engines.sapien import SapienAdapter

        found: PhysicsAdapter = SapienAdapter.from_env(base)
    else:
        from simuguard_gym.engines.mujoco import MujocoAdapter

        try:
            found = MujocoAdapter.from_env(base)
        except TypeError as error:
            raise TypeError(f"cannot attach simuguard to {type(base).__name__}: no SAPIEN scene on the PhysX CPU "
                            f"backend at env.unwrapped.scene, and {error}") from None
    default_spec = getattr(base, "simuguard_task_spec", None)
    if default_spec is not None:  # the env names its own containers; a user's TaskSpec still wins
        from simuguard_gym.task_spec import use_task_spec

        use_task_spec(found, default_spec, default=True)
    setattr(base, _ADAPTER_ATTR, found)
    return found


def _looks_like_sapien(base: Any) -> bool:
    scene = getattr(base, "scene", None)
    system = getattr(scene, "physx_system", None) or getattr(scene, "px", None)  # SAPIEN / ManiSkill3
    return type(system).__name__ == "PhysxCpuSystem"


@dataclass
class HookError:
    """An exception caught inside a simuguard hook, as recorded (never raised)."""

    substep: int
    where: str
    type: str
    message: str
    traceback: str = field(repr=False, default="")

    @classmethod
    def capture(cls, substep: int, where: str, error: BaseException) -> "HookError":
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(substep, where, type(error).__name__, str(error), tb)

    def to_dict(self) -> dict[str, Any]:
        return {"substep": self.substep, "where": self.where, "type": self.type, "message": self.message,
                "traceback": self.traceback}

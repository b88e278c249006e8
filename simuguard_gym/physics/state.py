"""The between-substep state as listeners see it (numpy only): its named components, how a
listener copies it into rows of its own buffer (:class:`StateRows`), and a cheap bound of the
bodies' speeds read from a few of its elements (:class:`SpeedBound`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class StateComponent:
    """One named slice of the between-substep state vector."""

    name: str
    offset: int
    size: int


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

    def may_exceed(self, values: np.ndarray, limit: float | np.ndarray) -> bool:
        """Whether any body may be faster than ``limit`` (one for all, or one per body) after any
        of n states, given their ``elements`` (n, len(elements)); a NaN counts as fast. Three numpy
        calls: this runs per env step, where each call costs several microseconds inside
        robosuite's step."""
        if not values.size:  # no substeps, or no bodies to bound (a scene without free objects)
            return False
        if self.unbounded is not None:
            return True
        squared = np.square(values).dot(self._matrix)
        if np.ndim(limit):
            return not (squared.max(axis=0) <= np.square(limit)).all()
        return not (squared.max() <= limit * limit)

    def _squared(self, values: np.ndarray) -> np.ndarray:
        return ((values * values).reshape(len(values), *self.weights.shape) * self.weights).sum(axis=2)


class RowTargets(dict[int, Any]):
    """A row buffer's copy targets by row index, each made on first use by ``make(row)``:
    building every row's target up front costs milliseconds for a batch of thousands of rows
    that the native copy fills without them.

    >>> from simuguard_gym.physics.state import RowTargets
    >>> targets = RowTargets(lambda row: f"row {row}")
    >>> len(targets), targets[3], len(targets)
    (0, 'row 3', 1)
    """

    def __init__(self, make: Callable[[int], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, row: int) -> Any:
        target = self[row] = self._make(row)
        return target


class StateRows:
    """How a listener copies the between-substep state into rows of its own buffer, one row per
    substep, and turns a batch of rows into state vectors (``read_state``'s layout) afterwards.

    This plain form stores the state vector itself; an adapter may store something cheaper to
    copy (``MujocoAdapter`` stores MuJoCo's own memory and gathers the vectors per batch).

    >>> import numpy as np
    >>> rows = StateRows(lambda out: out.fill(1.0), size=3)
    >>> buffer = rows.allocate(2)
    >>> targets = rows.targets(buffer)
    >>> for row in range(len(buffer)):
    ...     rows.copy(targets[row])   # the per-substep call
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

    def targets(self, rows: np.ndarray) -> RowTargets:
        """What :attr:`copy` takes for each row of ``rows``, by row index: each made the first
        time it is asked for and kept (where a native copy fills the rows, never)."""
        words = rows.view(np.float64)
        return RowTargets(lambda row: words[row])

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

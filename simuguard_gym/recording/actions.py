"""The actions of an episode's env steps, kept exactly as the env received them (numpy only).

A rerun that drives the env through its own ``step`` (so that its controller runs and its
``info`` reports the outcome) gives it these again, step by step. Actions are kept when they
are numeric arrays of one shape and dtype for the whole episode (every Box, Discrete and
MultiDiscrete space); otherwise the footer says why they are not there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simuguard_gym.recording.format import ALLOWED_DTYPES, encode_array


class ActionLog:
    """Collects one episode's actions for the recording's footer.

    >>> log = ActionLog()
    >>> log.add(np.array([0.5, -1.0], np.float32)); log.add([0.25, 0.0])
    >>> log.missing
    'the actions change dtype from float32 to float64 at step 1'
    >>> log = ActionLog(); log.add(np.zeros(2, np.float32)); log.footer()["actions"]["shape"]
    [1, 2]
    """

    def __init__(self) -> None:
        self._rows: list[np.ndarray] = []
        #: Why the actions are not kept (None while they are).
        self.missing: str | None = None

    def add(self, action: Any) -> None:
        if self.missing is not None:
            return
        rows = self._rows
        # Every step of an RL loop: an array like the first one is copied without the checks below.
        if rows and type(action) is np.ndarray and action.dtype is rows[0].dtype and action.shape == rows[0].shape:
            rows.append(action.copy())  # a copy: harnesses reuse their action buffers
            return
        step = len(rows)
        try:
            row = np.array(action, copy=True)  # a copy: harnesses reuse their action buffers
        except Exception as error:  # noqa: BLE001 - e.g. a tensor on a GPU: not kept, and said why
            self.missing = f"the action of step {step} ({type(action).__name__}) is not an array: {error}"
            return
        if self._rows:  # the first action's dtype was checked: later ones only compare with it
            first = self._rows[0]
            if row.dtype != first.dtype:
                self.missing = f"the actions change dtype from {first.dtype} to {row.dtype} at step {step}"
                self._rows = []
                return
            if row.shape != first.shape:
                self.missing = f"the actions change shape from {first.shape} to {row.shape} at step {step}"
                self._rows = []
                return
        elif row.dtype.kind not in "biuf" or row.dtype.newbyteorder("<").str not in ALLOWED_DTYPES:
            self.missing = f"the action of step {step} ({type(action).__name__}, dtype {row.dtype}) is not numeric"
            return
        self._rows.append(row)

    def footer(self) -> dict[str, Any]:
        """The footer's ``actions`` (an encoded array, one row per step) and, when they are not
        kept, ``actions_missing`` (why)."""
        if self.missing is not None:
            return {"actions": None, "actions_missing": self.missing}
        return {"actions": encode_array(np.stack(self._rows)) if self._rows else None}

"""The actions a recording keeps for reruns through the env's own step (recording/actions.py)."""

from __future__ import annotations

import numpy as np

from simuguard_gym.recording.actions import ActionLog
from simuguard_gym.recording.format import decode_array


def test_a_reused_action_buffer_is_kept_step_by_step():
    """Harnesses write each action into one buffer: every step's values are kept, not the last."""
    log, buffer = ActionLog(), np.zeros(2, np.float32)
    for k in range(4):
        buffer[:] = k
        log.add(buffer)
    kept = decode_array(log.footer()["actions"], "actions", 0)
    assert kept.dtype == np.float32 and kept.tolist() == [[0, 0], [1, 1], [2, 2], [3, 3]]


def test_actions_that_change_dtype_or_shape_are_not_kept_and_the_footer_says_why():
    for second, why in ((np.zeros(2, np.float64), "change dtype"), (np.zeros(3, np.float32), "change shape"),
                        ([0.0, 0.0], "change dtype")):
        log = ActionLog()
        log.add(np.zeros(2, np.float32))
        log.add(second)
        footer = log.footer()
        assert footer["actions"] is None and why in footer["actions_missing"]

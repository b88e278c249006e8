"""The identification result's text table: errors against a truth, relative, or absolute for a zero."""

from __future__ import annotations

import numpy as np

from simuguard_gym.identify.result import IdentificationResult


def test_a_zero_truth_gets_an_absolute_error_not_nan():
    result = IdentificationResult(names=("mass", "com_x"), theta=np.array([0.202, 0.0003]), se=np.array([1e-3, 1e-5]),
                                  identified=np.array([True, True]), warnings=[], loss_history=[], iterations=1,
                                  seconds=0.1, seconds_per_iteration=0.1, pose_loss=0.0, method="lm", prior={},
                                  baseline=np.zeros(2))
    text = result.table({"mass": 0.2, "com_x": 0.0})
    assert "nan" not in text
    mass, com = text.splitlines()[1:3]
    assert mass.endswith("1.00%") and com.endswith("0.0003 (absolute)")

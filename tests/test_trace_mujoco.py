"""`simuguard trace` on MuJoCo recordings: an onset contact against MuJoCo's own distance between
its geoms at the recorded poses."""

from __future__ import annotations

import numpy as np
import pytest

from simuguard_gym import load_recording
from simuguard_gym.cli import main
from simuguard_gym.trace import trace, trace_contact

from artifact_scenes import created_inside_floor, record_scene


def test_an_object_created_inside_the_floor_is_a_real_overlap(tmp_path, capsys):
    path = record_scene(created_inside_floor, tmp_path, depth=0.03)
    rec = load_recording(path)
    results = trace(rec)
    assert results and results[0].target.startswith("event 0")
    result = results[0]
    assert result.label == "real_overlap"
    # the box's lowest face against the floor plane, from its recorded pose (half size 0.03)
    col = int(np.flatnonzero(rec.tracked == rec.bodies.names.index("can"))[0])
    z = rec.columns["body_pose"][result.substep - 1, col, 2] if result.substep else rec.initial_body_pose[2]
    assert result.true_gap == pytest.approx(z - 0.03, abs=1e-6)
    assert result.true_gap == pytest.approx(result.recorded_separation, abs=1e-6)
    assert main(["trace", str(path), "--event", "0"]) == 0
    assert "real overlap" in capsys.readouterr().out


def test_a_reported_contact_between_geoms_apart_has_no_such_contact(tmp_path):
    path = record_scene(created_inside_floor, tmp_path, depth=0.03)
    rec = load_recording(path)
    event = trace(rec)[0]
    col = int(np.flatnonzero(rec.tracked == rec.bodies.names.index("can"))[0])
    highest = int(np.argmax(rec.columns["body_pose"][:, col, 2])) + 1  # thrown up: the geoms apart there
    result = trace_contact(rec, {"substep": highest, "pieces": event.pieces, "depth": 0.01, "normal": [0, 0, 1]})
    assert result.true_gap > 1e-3 and result.label == "no_such_contact"

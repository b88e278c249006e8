"""Every threshold of the detector, just below and just above, on synthetic substep arrays.

The scenes of test_detector_scenes.py check the verdicts on real physics; here each threshold is
isolated: one trajectory per case, built so that only the parameter under test decides.
"""

from __future__ import annotations

import numpy as np
import pytest

from simuguard_gym.detection import ArtifactDetector, DetectorConfig
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints

DT = 0.002
G = 9.81
EPS = 1e-4
ONSET = 400  # late enough for the 0.6 s drop window to fit before it


class Episode:
    """One object (body 1) on a world (body 0); optionally a carrier (2) and a robot link (3)."""

    def __init__(self, n: int = 700, roles: tuple[str, ...] = ("scene", "object", "container", "robot")) -> None:
        kinds = ("static", "dynamic", "dynamic", "dynamic")
        self.table = BodyTable(("world", "can", "basket", "finger"), kinds, roles, np.ones(4))
        self.tracked = np.array([1, 2])
        self.n = n
        self.pose = np.zeros((n, 2, 7))
        self.pose[..., 3] = 1.0
        self.vel = np.zeros((n, 2, 6))
        self.pairs: dict[int, list[tuple]] = {}

    def contact(self, substeps, a: int = 0, b: int = 1, depth: float = 0.001, speed=(0.0, 0.0)) -> None:
        for k in np.atleast_1d(substeps):
            self.pairs.setdefault(int(k), []).append((a, b, depth, speed))

    def launch(self, speed: float, at: int = ONSET, until: int | None = None) -> None:
        """The object moves along x at ``speed`` from substep ``at`` (to ``until``), positions integrated."""
        end = self.n if until is None else until
        self.vel[at:end, 0, 0] = speed
        self.pose[:, 0, 0] = np.cumsum(self.vel[:, 0, 0]) * DT

    def contacts(self) -> ContactPairs:
        rows = [(k, *p) for k in sorted(self.pairs) for p in self.pairs[k]]
        counts = np.bincount([r[0] for r in rows], minlength=self.n).astype(np.uint32)
        m = len(rows)
        return ContactPairs(
            counts=counts, bodies=np.array([[r[1], r[2]] for r in rows], np.int32).reshape(m, 2),
            depth=np.array([r[3] for r in rows], np.float32), force=np.zeros((m, 3), np.float32),
            abs_force=np.ones(m, np.float32), points=np.ones(m, np.uint16), pieces=np.zeros((m, 2), np.int32),
            normal=np.tile(np.float32([0, 0, 1]), (m, 1)), speed=np.array([r[4] for r in rows], np.float32).reshape(m, 2))

    def detect(self, config: DetectorConfig | None = None, batches=None) -> ArtifactDetector:
        detector = ArtifactDetector(self.table, self.tracked, DT, config=config, gravity=np.array([0, 0, -G]),
                                    initial_pose=self.pose[0], initial_vel=self.vel[0])
        contacts = self.contacts()
        offsets = np.concatenate([[0], np.cumsum(contacts.counts, dtype=np.int64)])
        bounds = [0, *(batches or []), self.n]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            part = ContactPairs(counts=contacts.counts[lo:hi], **{
                f: getattr(contacts, f)[offsets[lo]:offsets[hi]] for f in ContactPairs.COLUMNS})
            detector.feed(self.pose[lo:hi], self.vel[lo:hi], part)
        detector.finish()
        return detector


def resting_then_launched(speed: float) -> Episode:
    ep = Episode()
    ep.contact(range(0, ONSET + 1))  # resting on the world until it is launched
    ep.launch(speed)
    return ep


# ---------------------------------------------------------------------- stage 1: candidate
def test_a_clean_ejection_is_an_artifact_with_its_details():
    detector = resting_then_launched(3.0).detect()
    (event,) = detector.events
    assert event["artifact"] and event["onset_substep"] == ONSET and event["partner"] == "world"
    assert event["peak_speed"] == pytest.approx(3.0) and event["speed_before"] == 0.0
    assert event["contact"]["depth"] == pytest.approx(0.001) and event["ejection"]["free_flight"]
    assert event["onset_time"] == pytest.approx(ONSET * DT)


@pytest.mark.parametrize("speed, found", [(0.5, False), (0.5 + EPS, True)])
def test_min_speed(speed, found):
    assert bool(resting_then_launched(speed).detect().events) is found


@pytest.mark.parametrize("change, found", [(0.175 - EPS, False), (0.175 + EPS, True)])
def test_min_velocity_change_scales_with_dt(change, found):
    """0.35 m/s per 4 ms is 0.175 m/s per 2 ms substep."""
    ep = Episode()
    ep.contact(range(0, ONSET + 1))
    ep.launch(0.6, at=0)  # sliding fast from the start, with no sudden change
    ep.launch(0.6 + change, at=ONSET)
    ep.vel[:ONSET, 0, 0] = 0.6
    ep.pose[:, 0, 0] = np.cumsum(ep.vel[:, 0, 0]) * DT
    onsets = [e["onset_substep"] for e in ep.detect().events]
    assert (ONSET in onsets) is found and all(o == ONSET for o in onsets)


@pytest.mark.parametrize("gap, found", [(20, True), (21, False)])
def test_recent_contact_window(gap, found):
    """Touched within 40 ms (20 substeps) before the velocity change, or not."""
    ep = Episode()
    ep.contact(range(0, ONSET - gap + 1))
    ep.launch(3.0)
    assert bool(ep.detect().events) is found


# ---------------------------------------------------------------------- stage 1: confirmation
@pytest.mark.parametrize("distance, found", [(0.04 - EPS, False), (0.04 + EPS, True)])
def test_min_displacement(distance, found):
    ep = resting_then_launched(1.0)
    x = np.minimum(ep.pose[:, 0, 0], distance)
    ep.pose[:, 0, 0] = x
    ep.vel[1:, 0, 0] = np.where(np.diff(x) > 0, 1.0, 0.0)
    assert bool(ep.detect().events) is found


@pytest.mark.parametrize("free, found", [(7, False), (8, True)])
def test_free_flight(free, found):
    """16 ms = 8 substeps without any contact; contact everywhere else, never violent."""
    ep = Episode()
    ep.launch(0.8)
    start = ONSET + 30
    ep.contact([k for k in range(ep.n) if not start <= k < start + free])
    assert bool(ep.detect().events) is found


@pytest.mark.parametrize("change, found", [(0.375 - EPS, False), (0.375 + EPS, True)])
def test_violent_contact_velocity_change(change, found):
    """In contact all the time (no free flight): confirmed only by a velocity change of 0.75 m/s
    per 4 ms (0.375 per substep) at >= 1 m/s while touching the container."""
    ep = Episode()
    ep.contact(range(ep.n), 2, 1)  # the basket (a container) holds it throughout
    ep.launch(1.2)
    ep.vel[ONSET + 5:, 0, 1] = change  # a sideways knock inside the basket
    ep.pose[:, 0, 1] = np.cumsum(ep.vel[:, 0, 1]) * DT
    assert bool(ep.detect().events) is found


@pytest.mark.parametrize("speed, found", [(1.0 - EPS, False), (1.0, True)])
def test_violent_contact_speed(speed, found):
    ep = Episode()
    ep.contact(range(ep.n), 2, 1)
    ep.launch(0.9)
    ep.vel[ONSET + 5:, 0, :2] = [speed * np.sqrt(1 - 0.6 ** 2), speed * 0.6]  # |change| > 0.375
    ep.pose[:, 0, :2] = np.cumsum(ep.vel[:, 0, :2], axis=0) * DT
    assert bool(ep.detect().events) is found


def test_violent_contact_must_be_with_the_container():
    ep = Episode()
    ep.contact(range(ep.n), 0, 1)  # the world floor, while the scene names a container
    ep.launch(1.2)
    ep.vel[ONSET + 5:, 0, 1] = 0.5
    ep.pose[:, 0, 1] = np.cumsum(ep.vel[:, 0, 1]) * DT
    assert not ep.detect().events


def test_confirmation_window():
    """Free flight that starts after 240 ms does not confirm."""
    for delay, found in ((120 - 8, True), (121, False)):
        ep = Episode()
        ep.launch(0.8)
        ep.contact([k for k in range(ep.n) if not ONSET + delay <= k < ONSET + delay + 8])
        assert bool(ep.detect().events) is found, delay


# ---------------------------------------------------------------------- stage 2: gravity
@pytest.mark.parametrize("factor, kept", [(1.5 * (1 - 1e-3), False), (1.5 * (1 + 1e-3), True)])
def test_gravity_ratio(factor, kept):
    drop = 0.1
    ep = resting_then_launched(factor * np.sqrt(2 * G * drop))
    ep.pose[: ONSET - 100, 0, 2] = drop  # it fell from 10 cm within the 0.6 s before the peak
    (event,) = ep.detect().events
    assert event["gravity"]["kept"] is kept and event["artifact"] is kept
    assert event["gravity"]["drop_height"] == pytest.approx(drop)


def test_gravity_drop_outside_the_window_does_not_count():
    ep = resting_then_launched(1.5)
    ep.pose[: ONSET - 301, 0, 2] = 0.5  # fell more than 0.6 s before the peak
    (event,) = ep.detect().events
    assert event["gravity"]["drop_height"] == 0.0 and event["gravity"]["kept"]


def test_gravity_speed_floor():
    ep = resting_then_launched(0.6)
    (event,) = ep.detect().events
    assert event["gravity"]["ratio"] == pytest.approx(0.6 / 0.05)


# ---------------------------------------------------------------------- stage 3: carrier
def carried(object_speed: float, carrier_speed: float) -> Episode:
    """The basket (2) touches the robot link (3) and the object, and moves at carrier_speed."""
    ep = Episode(roles=("scene", "object", "scene", "robot"))
    ep.contact(range(0, ONSET + 1))
    ep.contact(range(ONSET - 20, ONSET + 1), 1, 2)
    ep.contact(range(ONSET - 20, ONSET + 1), 2, 3)
    ep.vel[ONSET - 20:ONSET, 1, 0] = carrier_speed
    ep.launch(object_speed)
    return ep


@pytest.mark.parametrize("factor, kept", [(1.5 - 1e-3, False), (1.5 + 1e-3, True)])
def test_carrier_ratio(factor, kept):
    (event,) = carried(factor * 0.6, 0.6).detect().events
    assert event["carrier"]["carriers"] == ["basket"] and event["carrier"]["kept"] is kept
    assert event["artifact"] is kept


def test_carrier_speed_floor_and_window():
    (event,) = carried(1.0, 0.01).detect().events
    assert event["carrier"]["ratio"] == pytest.approx(1.0 / 0.05)
    ep = carried(0.8, 0.6)
    ep.pairs = {k: [p for p in v if p[:2] != (2, 3)] for k, v in ep.pairs.items()}
    ep.contact(ONSET - 21, 2, 3)  # the robot touched the basket 42 ms before onset: no carrier
    (event,) = ep.detect().events
    assert event["carrier"]["carriers"] == [] and event["artifact"]


@pytest.mark.parametrize("config, artifact", [(DetectorConfig(), False), (DetectorConfig.paper(), True)])
def test_direct_robot_carrier(config, artifact):
    """A robot link touching the object at 1.0 m/s explains an object at 1.2 m/s; the paper's
    detector looks only for bodies between object and robot."""
    ep = Episode()
    ep.contact(range(0, ONSET + 1))
    ep.contact(range(ONSET - 5, ONSET + 1), 1, 3, speed=(0.0, 1.0))
    ep.launch(1.2)
    (event,) = ep.detect(config).events
    assert event["robot_contact"] and event["artifact"] is artifact
    assert event["carrier"]["carriers"] == ([] if artifact else ["finger"])


# ---------------------------------------------------------------------- flags
@pytest.mark.parametrize("depth, flagged", [(0.005, False), (0.0051, True)])
def test_deep_penetration_flag(depth, flagged):
    ep = Episode(n=50)
    ep.contact(10, 0, 1, depth=depth)
    ep.contact(11, 3, 3, depth=0.05)  # robot-robot: never flagged
    flags = ep.detect().flags
    assert [f["bodies"] for f in flags] == ([["world", "can"]] if flagged else [])


@pytest.mark.parametrize("speed, flagged", [(100.0, False), (100.1, True)])
def test_absurd_speed_flag(speed, flagged):
    ep = Episode(n=50)
    ep.vel[20, 1, 0] = speed
    assert [f["kind"] for f in ep.detect().flags] == (["absurd_state"] if flagged else [])


def test_non_finite_state_flag():
    ep = Episode(n=50)
    ep.pose[30:, 0, 2] = np.nan
    (flag,) = ep.detect().flags
    assert flag["non_finite"] and flag["first_substep"] == 30 and flag["body"] == "can"


# ---------------------------------------------------------------------- batching and config
def test_batching_does_not_change_events():
    ep = carried(0.8, 0.6)
    ep.contact(range(ONSET + 200, ONSET + 240))
    ep.launch(2.0, at=ONSET + 220)  # a second event, on the ground again
    whole = ep.detect()
    rng = np.random.default_rng(0)
    cuts = sorted(set(rng.integers(1, ep.n, 60).tolist()))
    assert ep.detect(batches=cuts).events == whole.events and len(whole.events) == 2
    assert ep.detect(batches=list(range(1, ep.n))).events == whole.events


def _fed_quiet_until(ep: Episode, quiet: int) -> ArtifactDetector:
    """Substeps [0, quiet) fed as quiet (contacts as points), the rest in full."""
    detector = ArtifactDetector(ep.table, ep.tracked, DT, gravity=np.array([0, 0, -G]),
                                initial_pose=ep.pose[0], initial_vel=ep.vel[0])
    contacts = ep.contacts()
    m = int(contacts.counts[:quiet].sum())
    points = ContactPoints(contacts.counts[:quiet].astype(np.int64), contacts.bodies[:m], contacts.depth[:m])
    detector.feed_quiet(ep.pose[:quiet], ep.vel[:quiet], points)
    detector.feed(ep.pose[quiet:], ep.vel[quiet:], ContactPairs(
        counts=contacts.counts[quiet:], **{f: getattr(contacts, f)[m:] for f in ContactPairs.COLUMNS}))
    detector.finish()
    return detector


def test_quiet_substeps_fed_as_points_give_the_same_events_and_flags():
    ep = carried(0.8, 0.6)  # a carrier's contacts just before onset decide the event
    ep.contact(range(50, 120), 0, 2, depth=0.009)  # a deep penetration while all is quiet
    whole = ep.detect()
    lookback = whole.contact_lookback
    quiet = _fed_quiet_until(ep, ONSET - lookback)
    assert quiet.events == whole.events and quiet.flags == whole.flags
    assert len(whole.events) == 1 and whole.events[0]["carrier"]["carriers"] == ["basket"]
    assert [f["substeps"] for f in whole.flags if f["bodies"] == ["world", "basket"]] == [70]


def test_quiet_feeding_refuses_a_candidate():
    ep = resting_then_launched(2.0)
    detector = ArtifactDetector(ep.table, ep.tracked, DT)
    contacts = ep.contacts()
    points = ContactPoints(contacts.counts.astype(np.int64), contacts.bodies, contacts.depth)
    with pytest.raises(ValueError, match=f"substep {ONSET} holds an ejection candidate"):
        detector.feed_quiet(ep.pose, ep.vel, points)
    assert detector.substeps == 0 and detector.flags == []  # nothing was taken in


@pytest.mark.parametrize("field", ["contact_window", "confirm_window", "drop_window", "min_speed"])
def test_negative_values_are_refused(field):
    with pytest.raises(ValueError, match=field):
        DetectorConfig(**{field: -0.1})


def test_config_round_trips_and_rejects_unknown_fields():
    config = DetectorConfig(min_speed=0.7)
    assert DetectorConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown DetectorConfig fields: speed"):
        DetectorConfig.from_dict({"speed": 1})


# ---------------------------------------------------------------------- improvements over the paper
@pytest.mark.parametrize("factor, kept", [(1.5 - 1e-3, False), (1.5 + 1e-3, True)])
def test_speed_gain(factor, kept):
    """An object sliding at 0.8 m/s that leaves a contact at factor x 0.8 m/s."""
    ep = Episode()
    ep.contact(range(0, ONSET + 1))
    ep.vel[:ONSET, 0, 0] = 0.8
    ep.vel[ONSET:, 0, 0] = factor * 0.8
    ep.pose[:, 0, 0] = np.cumsum(ep.vel[:, 0, 0]) * DT
    (event,) = ep.detect(DetectorConfig(), batches=None).events
    assert event["gain"]["kept"] is kept and event["artifact"] is kept
    assert event["gain"]["speed_before"] == pytest.approx(0.8)
    (paper,) = ep.detect(DetectorConfig.paper()).events
    assert paper["artifact"] and not paper["gain"]["applied"]


def test_carrier_speed_through_the_peak():
    """The basket moves at 0.4 m/s before onset and 0.8 m/s after: the object's 1.0 m/s is its
    doing by default (ratio 1.25), not for the paper's detector (ratio 2.5)."""
    ep = carried(1.0, 0.4)
    ep.vel[ONSET:ONSET + 30, 1, 0] = 0.8
    (event,) = ep.detect().events
    assert event["carrier"]["speed"] == pytest.approx(0.8) and not event["carrier"]["kept"]
    (paper,) = ep.detect(DetectorConfig.paper()).events
    assert paper["carrier"]["speed"] == pytest.approx(0.4) and paper["carrier"]["kept"]


@pytest.mark.parametrize("batches", [None, [1] * 40, [7, 33]])
def test_a_deep_report_between_pieces_apart_labels_its_flag_whatever_the_batching(batches):
    """Deep-penetration flags get the false-contact check (not only events): two cubes 6 mm apart
    reported 12 mm deep (a real 8 mm overlap of the same pieces later stays real)."""
    from simuguard_gym.detection.false_contact import CollisionPieces

    cube = np.array([[x, y, z] for x in (-.01, .01) for y in (-.01, .01) for z in (-.01, .01)])
    table = BodyTable(("floor", "can"), ("static", "dynamic"), ("scene", "object"), np.array([0.0, 0.01]))
    pieces = CollisionPieces.from_adapter([(0, cube), (1, cube)], np.array([0, 1]),
                                          np.array([[0, 0, 0, 1, 0, 0, 0.]] * 2), table.kinds)
    n = 40
    pose = np.zeros((n, 1, 7))
    pose[:, 0, 3] = 1.0
    pose[:, 0, 2] = 0.026  # 6 mm above the floor cube
    pose[25:, 0, 2] = 0.012  # from substep 26 on, 8 mm into it
    counts = np.zeros(n, np.int64)
    counts[[10, 30]] = 1
    depth = np.array([0.012, 0.008], np.float32)
    contacts = ContactPairs(counts=counts, bodies=np.array([[0, 1]] * 2, np.int32), depth=depth,
                            force=np.zeros((2, 3), np.float32), abs_force=np.ones(2, np.float32),
                            points=np.ones(2, np.uint16), pieces=np.array([[0, 1]] * 2, np.int32),
                            normal=np.array([[0, 0, 1]] * 2, np.float32), speed=np.zeros((2, 2), np.float32))
    detector = ArtifactDetector(table, np.array([1]), 0.002, pieces=pieces, initial_pose=pose[0])
    lo = 0
    for size in batches or [n]:
        part = slice(lo, lo + size)
        a, b = counts[:lo].sum(), counts[:lo + size].sum()
        detector.feed(pose[part], np.zeros((size, 1, 6)), ContactPairs(counts=counts[part], **{
            f: getattr(contacts, f)[a:b] for f in ContactPairs.COLUMNS}))
        lo += size
    (flag,) = detector.flags
    assert flag["false_contact"] == {"checked": 1, "false": 1}  # the 8 mm report is not deeper: not checked
    assert flag["contact"]["substep"] == 10
    assert flag["contact"]["false_contact"]["true_gap"] == pytest.approx(0.006, abs=1e-5)

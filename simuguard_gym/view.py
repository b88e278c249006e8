"""Export a recording to a rerun-sdk ``.rrd`` file (``simuguard view``). Needs the ``viewer``
extra (rerun-sdk).

The episode is replayed bit for bit (the env rebuilt as for ``simuguard replay``) and the
replayed engine shows what the recording leaves out: every body's collision geometry (boxes,
spheres, capsules, cylinders, planes, meshes and convex pieces), the poses of every moving body,
the robot's links included, and each substep's contact points with their normals. Beside them:
the tracked bodies' speeds, the number of body pairs in contact and the deepest penetration, the
event's onset marked at its body, and the detector's events as a text log. Where the env cannot
be rebuilt (a package missing, an env without a registered id or factory), the export falls back
to what the recording holds: the tracked bodies' frames, the convex pieces recorded for the
false-contact check, speeds and events, and says so.

>>> from simuguard_gym.view import export_rrd
>>> export_rrd("recordings/seed_000003.msgpack", "views/seed_000003.rrd").replayed   # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from simuguard_gym.detection.false_contact import CollisionPieces
from simuguard_gym.detection.offline import detect
from simuguard_gym.physics.adapter import ShowsScene
from simuguard_gym.physics.scene_geometry import GeometryPart
from simuguard_gym.recording.reader import Recording, load_recording
from simuguard_gym.output_files import output_path
from simuguard_gym.replay.isolation import isolated
from simuguard_gym.replay.rebuild import recording_of
from simuguard_gym.replay.replay import replay

#: At most this many substeps are exported (a longer episode is exported with a stride).
MAX_FRAMES = 5000
#: A contact point deeper than this (m) is drawn red, the others green.
DEEP = 0.005
NORMAL_LENGTH = 0.03  # m: the arrows show directions; depths are in contacts/deepest_mm
_COLOURS = {"robot": (150, 150, 160), "base": (120, 120, 135), "object": (70, 130, 220), "container": (200, 150, 60),
            "scene": (170, 170, 150)}


@dataclass
class ViewExport:
    """What ``export_rrd`` wrote: the file, the substeps shown, whether they come from the replayed
    engine (geometry, every body, contact points) or from the recording alone, and why not."""

    path: Path
    frames: int
    replayed: bool
    note: str | None = None


def export_rrd(recording: Recording | str | os.PathLike[str], out: str | os.PathLike[str],
               stride: int | None = None, *, env_fn: Callable[[], Any] | None = None,
               replayed: bool = True, trust: bool = False) -> ViewExport:
    """Write ``out`` (a ``.rrd`` file) for the recorded episode.

    ``replayed=False`` skips the replay and exports what the recording holds. The env is rebuilt
    as :func:`~simuguard_gym.replay` rebuilds it (``env_fn``, ``trust``), in a child process where
    the file is not signed by this user; where it cannot be, the file holds what the recording does."""
    rec = recording if isinstance(recording, Recording) else load_recording(recording, allow_partial=True)
    rec = recording_of(rec, trust)
    n = rec.substeps
    if n == 0:
        raise ValueError("the recording holds no substeps")
    step = stride or max(1, -(-n // MAX_FRAMES))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    found = ((rec.footer or {}).get("detector") or {}).get("events")
    events = found if found is not None else detect(rec).events
    note = None
    with output_path(out) as aside:
        if replayed:
            try:
                return isolated(rec, lambda: _replayed_view(rec, out, aside, step, events, env_fn), "viewing")
            except Exception as error:  # noqa: BLE001 - any failure to rebuild or replay falls back
                note = f"{type(error).__name__}: {error}"
            note = f"exported from the recording alone (no geometry, robot or contact points): {note}"
        import rerun as rr

        stream = _stream(rr, rec, aside)
        _log_recorded(rr, stream, rec, step, events, geometry=True)
        stream.flush()
    return ViewExport(out, len(range(0, n, step)), False, note)


def _replayed_view(rec: Recording, out: Path, aside: Path, step: int, events: list[dict[str, Any]],
                   env_fn: Callable[[], Any] | None) -> ViewExport:
    """The view from the episode's replay, written to ``aside``; an exception where it shows nothing."""
    import rerun as rr

    stream = _stream(rr, rec, aside)
    scene = _SceneLog(rr, stream, rec, step, events)
    try:
        result = replay(rec, env_fn, verify="states", listeners=[scene])
        if scene.error is not None:
            raise scene.error
        if not scene.frames:
            raise RuntimeError(f"the replay showed no substep ({result.message})")
        _log_recorded(rr, stream, rec, step, events, geometry=False)
        stream.flush()
        return ViewExport(out, scene.frames, True, None if result.exact else result.message)
    except BaseException:
        stream.disconnect()  # what the replay logged is written over
        raise


def _stream(rr: Any, rec: Recording, out: Path) -> Any:
    stream = rr.RecordingStream(application_id="simuguard", recording_id=str(rec.path or "recording"))
    stream.save(out)
    stream.log("world", rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
    return stream


def _entity(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "body"
    path, k = base, 1
    while path in taken:
        k += 1
        path = f"{base}_{k}"
    taken.add(path)
    return path


def _xyzw(q: np.ndarray) -> list[float]:
    return [float(q[1]), float(q[2]), float(q[3]), float(q[0])]


def _transform(rr: Any, pose: np.ndarray) -> Any:
    return rr.Transform3D(translation=pose[:3], quaternion=rr.Quaternion(xyzw=_xyzw(pose[3:])))


def _shape(rr: Any, part: GeometryPart, colour: tuple[int, int, int]) -> Any:
    size = part.size
    if part.kind == "box":
        return rr.Boxes3D(half_sizes=[size], colors=[colour], fill_mode="solid")
    if part.kind == "plane":
        return rr.Boxes3D(half_sizes=[[size[0], size[1], 0.0]], colors=[colour], fill_mode="solid")
    if part.kind in ("sphere", "ellipsoid"):
        half = [size[0]] * 3 if part.kind == "sphere" else size
        return rr.Ellipsoids3D(half_sizes=[half], colors=[colour], fill_mode="solid")
    if part.kind == "capsule":
        # rerun's capsule runs from its origin along +z; the part's is centred on its origin
        return rr.Capsules3D(lengths=[2 * size[1]], radii=[size[0]], translations=[[0.0, 0.0, -size[1]]],
                             colors=[colour])
    if part.kind == "cylinder":
        return rr.Cylinders3D(lengths=[2 * size[1]], radii=[size[0]], colors=[colour], fill_mode="solid")
    return rr.Mesh3D(vertex_positions=part.vertices, triangle_indices=part.faces, vertex_colors=[colour])


class _SceneLog:
    """A replay listener: the scene's geometry once, then every ``step``-th substep's body poses
    and contact points, the onsets marked at their bodies."""

    def __init__(self, rr: Any, stream: Any, rec: Recording, step: int, events: list[dict[str, Any]]) -> None:
        self.rr, self.stream, self.step, self.dt = rr, stream, step, rec.substep_dt
        self.onsets = {int(e["onset_substep"]): e for e in events}
        self.frames = 0
        self.error: BaseException | None = None
        self._adapter: Any = None
        self._moving: list[tuple[int, str]] = []
        self._paths: dict[int, str] = {}
        self._body_ids: dict[str, int] = {}
        self._substep = 0

    def attach(self, adapter: Any) -> None:
        if not isinstance(adapter, ShowsScene):
            raise ValueError(f"the {adapter.engine} adapter does not show its scene")
        rr, table = self.rr, adapter.body_table()
        parts = adapter.scene_geometry()
        poses = adapter.body_poses()
        taken: set[str] = set()
        shown = sorted({p.body for p in parts})
        self._paths = {b: "world/bodies/" + _entity(table.names[b], taken) for b in shown}
        for k, part in enumerate(parts):
            path = f"{self._paths[part.body]}/shape_{k}"
            colour = _COLOURS.get(table.roles[part.body], (160, 160, 160))
            self.stream.log(path, _transform(rr, part.pose), static=True)
            self.stream.log(path, _shape(rr, part, colour), static=True)
        for b in shown:
            if table.kinds[b] == "static":
                self.stream.log(self._paths[b], _transform(rr, poses[b]), static=True)
            else:
                self._moving.append((b, self._paths[b]))
        self.stream.set_time("sim", duration=0.0)
        for b, path in self._moving:
            self.stream.log(path, _transform(rr, poses[b]))
        self._body_ids = {table.names[b]: b for b, _ in self._moving}
        self._adapter = adapter

    def before_substep(self, phase: str) -> None:
        pass

    def after_substep(self) -> None:
        k = self._substep
        self._substep += 1
        if self.error is not None or (k % self.step and k not in self.onsets):
            return
        try:
            self._log(k)
        except Exception as error:  # noqa: BLE001 - reported by export_rrd, which falls back
            self.error = error

    def _log(self, k: int) -> None:
        """Substep ``k`` runs from time k dt to (k + 1) dt: its contacts, found from the poses it
        started from, at k dt; the poses it ends with at (k + 1) dt."""
        rr, stream = self.rr, self.stream
        stream.set_time("sim", duration=(k + 1) * self.dt)
        poses = self._adapter.body_poses()
        for b, path in self._moving:
            stream.log(path, _transform(rr, poses[b]))
        stream.set_time("sim", duration=k * self.dt)
        points = self._adapter.contact_points_now()
        deep = points.depths > DEEP
        colours = np.where(deep[:, None], [[230, 40, 40]], [[40, 200, 80]]).astype(np.uint8)
        stream.log("world/contacts", rr.Points3D(points.positions, radii=0.003, colors=colours))
        stream.log("world/contacts/normals", rr.Arrows3D(origins=points.positions,
                                                         vectors=points.normals * NORMAL_LENGTH, colors=colours))
        self.frames += 1
        event = self.onsets.get(k)
        if event is not None:
            body = self._body_ids.get(event.get("body"))
            if body is not None:
                stream.log("world/onset", rr.Points3D([poses[body, :3]], radii=0.02, colors=[[255, 215, 0]],
                                                      labels=[f"onset: {event['body']}"]))

    def hook_failed(self, where: str, error: BaseException) -> None:
        self.error = self.error or error


def _log_recorded(rr: Any, stream: Any, rec: Recording, step: int, events: list[dict[str, Any]],
                  geometry: bool) -> None:
    """What the recording itself holds: tracked bodies' speeds (and, without a replay, their
    frames and recorded convex pieces), pair counts, deepest penetrations, events."""
    n, dt, names = rec.substeps, rec.substep_dt, rec.tracked_names
    pose, vel = rec.columns["body_pose"], rec.columns["body_vel"]
    counts = rec.columns["contact_count"].astype(np.int64)
    offsets = rec.contact_offsets()
    depth = rec.columns.get("contact_depth", np.zeros(0, np.float32))
    taken: set[str] = set()
    paths = ["world/tracked/" + _entity(name, taken) for name in names]
    if geometry:
        _log_recorded_pieces(rr, stream, rec, paths)
    for k in range(0, n, step):
        stream.set_time("sim", duration=(k + 1) * dt)  # the state after substep k
        for j, name in enumerate(names):
            if geometry:
                stream.log(paths[j], _transform(rr, pose[k, j]))
                stream.log(f"{paths[j]}/centre", rr.Points3D([[0.0, 0.0, 0.0]], radii=0.005))
            stream.log(f"speed/{_entity(name, set())}", rr.Scalars(float(np.linalg.norm(vel[k, j, :3]))))
        pairs = depth[offsets[k]:offsets[k] + counts[k]]
        stream.set_time("sim", duration=k * dt)  # the contacts substep k found at its start
        stream.log("contacts/pairs", rr.Scalars(float(counts[k])))
        stream.log("contacts/deepest_mm", rr.Scalars(float(1000 * pairs.max()) if len(pairs) else 0.0))
    for event in sorted(events, key=lambda e: int(e["onset_substep"])):
        stream.set_time("sim", duration=int(event["onset_substep"]) * dt)
        verdict = "CONTACT ARTIFACT" if event["artifact"] else "ejection explained by gravity, carrier or speed"
        stream.log("events", rr.TextLog(f"{verdict}: {event['body']} {event['speed_before']:.2f} -> "
                                        f"{event['peak_speed']:.2f} m/s, partner {event['partner']}",
                                        level="WARN" if event["artifact"] else "INFO"))


def _log_recorded_pieces(rr: Any, stream: Any, rec: Recording, paths: list[str]) -> None:
    """The convex pieces a SAPIEN recording carries, as point clouds on their tracked bodies."""
    raw = rec.header.get("collision_pieces")
    if raw is None:
        return
    pieces = CollisionPieces.from_dict(raw)
    where = {int(b): j for j, b in enumerate(rec.tracked)}
    for p, body in enumerate(pieces.body):
        j = where.get(int(body))
        if j is not None and pieces.offsets[p + 1] > pieces.offsets[p]:
            stream.log(f"{paths[j]}/piece_{p}", rr.Points3D(pieces.vertices[pieces.offsets[p]:pieces.offsets[p + 1]],
                                                            radii=0.001), static=True)

"""Export a recording to a rerun-sdk ``.rrd`` file: body poses and speeds, contacts and the
detector's events on one time line (``simuguard view``). Needs the ``viewer`` extra (rerun-sdk)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from simuguard_gym.detection.offline import detect
from simuguard_gym.recording.reader import Recording, load_recording

#: At most this many substeps are exported (a longer episode is exported with a stride).
MAX_FRAMES = 5000


def export_rrd(recording: Recording | str | os.PathLike[str], out: str | os.PathLike[str],
               stride: int | None = None) -> Path:
    """Write ``out`` (a ``.rrd`` file) for the recorded episode; returns its path."""
    import rerun as rr

    rec = recording if isinstance(recording, Recording) else load_recording(recording, allow_partial=True)
    n = rec.substeps
    if n == 0:
        raise ValueError("the recording holds no substeps")
    step = stride or max(1, -(-n // MAX_FRAMES))
    stream = rr.RecordingStream(application_id="simuguard", recording_id=str(rec.path or "recording"))
    out = Path(out)
    stream.save(out)
    names = rec.tracked_names
    pose, vel = rec.columns["body_pose"], rec.columns["body_vel"]
    counts = rec.columns["contact_count"].astype(np.int64)
    offsets = rec.contact_offsets()
    depth = rec.columns.get("contact_depth", np.zeros(0, np.float32))
    found = ((rec.footer or {}).get("detector") or {}).get("events")
    events = found if found is not None else detect(rec).events
    onsets = {int(e["onset_substep"]): e for e in events}
    dt = rec.substep_dt
    for k in range(0, n, step):
        stream.set_time("sim", duration=k * dt)
        for j, name in enumerate(names):
            q = pose[k, j, 3:]
            stream.log(f"world/{name}", rr.Transform3D(translation=pose[k, j, :3], quaternion=rr.Quaternion(
                xyzw=[q[1], q[2], q[3], q[0]])))
            stream.log(f"world/{name}/centre", rr.Points3D([[0.0, 0.0, 0.0]], radii=0.005))
            stream.log(f"speed/{name}", rr.Scalars(float(np.linalg.norm(vel[k, j, :3]))))
        pairs = depth[offsets[k]:offsets[k] + counts[k]]
        stream.log("contacts/pairs", rr.Scalars(float(counts[k])))
        stream.log("contacts/deepest_mm", rr.Scalars(float(1000 * pairs.max()) if len(pairs) else 0.0))
    for onset, event in sorted(onsets.items()):
        stream.set_time("sim", duration=onset * dt)
        verdict = "CONTACT ARTIFACT" if event["artifact"] else "ejection explained by gravity, carrier or speed"
        stream.log("events", rr.TextLog(f"{verdict}: {event['body']} {event['speed_before']:.2f} -> "
                                        f"{event['peak_speed']:.2f} m/s, partner {event['partner']}",
                                        level="WARN" if event["artifact"] else "INFO"))
    stream.flush()
    return out

"""The HTML report of a directory of recordings: the score table, a chart of the estimates with
their bounds, and for each contact artifact the object's speed around its onset (SimuGuard
Figure 1 (c)). Self-contained (plots embedded as PNG data), opens offline; the PNGs are also
written beside it. Needs matplotlib (the ``report`` extra), drawn with the Agg backend.
"""

from __future__ import annotations

import base64
import html
import io
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from simuguard_gym.detection.offline import detect
from simuguard_gym.recording.format import RecordingError
from simuguard_gym.recording.reader import load_recording

#: Seconds shown before and after each artifact's onset.
WINDOW = (0.3, 0.5)


def write_html_report(directory: str | os.PathLike[str], rows: list[dict[str, Any]], out: Path,
                      link_speeds: Callable[[Any, int, int], tuple[np.ndarray, np.ndarray] | None] | None = None,
                      skipped: Sequence[str] = (), paired: dict[str, Any] | None = None,
                      no_video: dict[str, str] | None = None) -> list[Path]:
    """``report.html`` and its PNGs in ``out``; returns the paths written.

    ``skipped`` names the files the table left out, each with the reason (the ``skipped`` list of
    :func:`simuguard_gym.scoring.report.report`); the page lists them under the table.

    ``link_speeds(recording, lo, hi)`` returns (substeps, speed) of the fastest robot link (the
    recordings don't keep the robot: :func:`simuguard_gym.replay.link_speeds.robot_link_speeds`
    replays them); without it, or where it returns None, the plots show the links' speeds at their
    contacts with the object only. ``paired`` (the comparisons of ``report(..., versus)``) adds
    the paired counts and exact tests on as-run and on corrected outcomes. Each artifact's figure
    links the episode's video where one lies beside its recording (``simuguard video``), else says
    why there is none where ``no_video`` (recording file name -> reason) tells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures: list[tuple[str, str, bytes, str]] = []  # (file name, caption, png, html after the caption)

    def save(fig: Any, name: str, caption: str, extra: str = "") -> None:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        png = buffer.getvalue()
        (out / name).write_bytes(png)
        written.append(out / name)
        figures.append((name, caption, png, extra))

    save(_scores_chart(plt, rows), "scores.png", "Success rate by estimate; bars span the bounds (every flagged "
         "episode fails / passes), whiskers the Wilson 95% interval of the as-run rate.")
    peaks, artifacts = [], []
    for path in sorted(Path(directory).glob("*.msgpack")):
        try:
            rec = load_recording(path, allow_partial=True)
        except (RecordingError, OSError):  # in the table's skipped list (scoring.report.episodes_in), listed below it
            continue
        events = ((rec.footer or {}).get("detector") or {}).get("events")
        if events is None and rec.substeps:
            events = detect(rec).events
        for event in events or []:
            peaks.append((event["peak_speed"], bool(event["artifact"])))
            if event["artifact"]:
                artifacts.append((path, rec, event))
    if peaks:
        save(_peak_histogram(plt, peaks), "peak_speeds.png", "Peak speed of every event confirmed by the "
             "contact-ejection stage; artifacts are those the gravity, carrier and speed-gain stages kept.")
    for i, (path, rec, event) in enumerate(artifacts):
        caption = (f"{path.name}: {event['body']} at {event['onset_time']:.3f} s, partner {event['partner']}, "
                   f"peak {event['peak_speed']:.2f} m/s")
        save(_artifact_plot(plt, rec, event, link_speeds), f"artifact_{i:03d}.png", caption,
             _video_link(path, out, (no_video or {}).get(path.name)))
    page = out / "report.html"
    page.write_text(_page(rows, figures, skipped, paired))
    written.insert(0, page)
    return written


def _scores_chart(plt: Any, rows: list[dict[str, Any]]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.55 * len(rows)))
    labels = [r["task"] for r in rows]
    y = np.arange(len(rows))
    lower = np.array([r["lower"] for r in rows])
    upper = np.array([r["upper"] for r in rows])
    ax.barh(y, upper - lower, left=lower, height=0.5, color="#dddddd", label="bounds")
    marks = (("as_run", "o", "#555555", "as run"), ("replay", "s", "#1f77b4", "replay-corrected"),
             ("excluded", "^", "#2ca02c", "excluded"))
    for key, marker, color, label in marks:
        x = np.array([np.nan if r[key] is None else r[key] for r in rows], float)
        ax.scatter(x, y, marker=marker, color=color, zorder=3, label=label)
    lo = np.array([r["as_run_wilson"][0] for r in rows])
    hi = np.array([r["as_run_wilson"][1] for r in rows])
    ax.hlines(y, lo, hi, color="#555555", linewidth=1)
    ax.set_yticks(y, labels)
    ax.set_xlabel("success rate (%)")
    ax.set_xlim(0, 100)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def _peak_histogram(plt: Any, peaks: list[tuple[float, bool]]) -> Any:
    fig, ax = plt.subplots(figsize=(6, 3))
    speeds = np.array([p for p, _ in peaks])
    flags = np.array([a for _, a in peaks])
    bins = np.linspace(0, max(1.0, float(speeds.max())) * 1.05, 30)
    ax.hist(speeds[~flags], bins=bins, color="#aaaaaa", label="removed by a later stage")
    ax.hist(speeds[flags], bins=bins, color="#d62728", label="contact artifact")
    ax.set_xlabel("peak speed (m/s)")
    ax.set_ylabel("events")
    ax.legend(fontsize=8)
    return fig


def _artifact_plot(plt: Any, rec: Any, event: dict[str, Any], link_speeds: Callable | None = None) -> Any:
    """The object's speed, the fastest robot link's (when it can be had) and, where they touched
    it, the links' speeds at the contact."""
    dt = rec.substep_dt
    onset = int(event["onset_substep"])
    lo = max(0, onset - int(WINDOW[0] / dt))
    hi = min(rec.substeps, onset + int(WINDOW[1] / dt))
    tracked = list(rec.tracked)
    col = tracked.index(event["body_id"])
    speed = np.linalg.norm(rec.columns["body_vel"][lo:hi, col, :3], axis=1)
    t = (np.arange(lo, hi) - onset) * dt * 1000
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(t, speed, color="#d62728", label=f"{event['body']} (object)")
    fastest = link_speeds(rec, lo, hi) if link_speeds is not None else None
    if fastest is not None:
        ax.plot((fastest[0] - onset) * dt * 1000, fastest[1], color="#1f77b4", linewidth=1,
                label="fastest robot link")
    offsets = rec.contact_offsets()
    roles = rec.bodies.roles
    link_t, link_v = [], []
    for k in range(lo, hi):
        a, b = offsets[k], offsets[k + 1]
        bodies = rec.columns["contact_bodies"][a:b]
        speeds = rec.columns["contact_speed"][a:b]
        for (x, y), (sx, sy) in zip(bodies, speeds):
            for body, other, s in ((x, y, sx), (y, x, sy)):
                if other == event["body_id"] and roles[body] == "robot" and np.isfinite(s):
                    link_t.append((k - onset) * dt * 1000)
                    link_v.append(s)
    if link_t:
        ax.scatter(link_t, link_v, s=6, color="#1f77b4", label="robot link at the contact")
    ax.axvline(0, color="#333333", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time from onset (ms)")
    ax.set_ylabel("speed (m/s)")
    ax.legend(fontsize=8)
    return fig


def _paired_table(paired: dict[str, Any] | None) -> str:
    """The paired comparisons (``scoring.report.PAIRED_KINDS``) as a table, or nothing."""
    from simuguard_gym.scoring.report import PAIRED_KINDS

    if not paired:
        return ""
    head = ("<tr><th>outcomes</th><th>pairs</th><th>A</th><th>B</th><th>A - B (95% seed bootstrap)</th>"
            "<th>A only</th><th>B only</th><th>exact sign test p</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(PAIRED_KINDS[name])}</td><td>{c.pairs}</td><td>{100 * c.rate_a:.1f}</td>"
        f"<td>{100 * c.rate_b:.1f}</td><td>{100 * c.difference:+.1f} ({100 * c.difference_low:+.1f} to "
        f"{100 * c.difference_high:+.1f})</td><td>{c.a_only}</td><td>{c.b_only}</td><td>{c.p_value:.3f}</td></tr>"
        for name, c in paired.items())
    return f"<h2>Paired comparison (this run A against B on shared task and seed)</h2><table>{head}{body}</table>"


def _video_link(recording: Path, out: Path, reason: str | None) -> str:
    video = recording.with_suffix(".mp4")
    if video.exists():
        href = html.escape(Path(os.path.relpath(video, out)).as_posix())
        return f' <a class="video" href="{href}">video of the episode</a>'
    return f" (no video: {html.escape(reason)})" if reason else ""


def _page(rows: list[dict[str, Any]], figures: list[tuple[str, str, bytes, str]], skipped: Sequence[str] = (),
          paired: dict[str, Any] | None = None) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None or x != x else f"{x:.1f}"

    header = "<tr><th>task</th><th>N</th><th>flagged</th><th>Rep.</th><th>Replay</th><th>Excl.</th><th>bounds</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(str(r['task']))}</td><td>{r['n']}</td><td>{r['flagged']}</td><td>{pct(r['as_run'])}</td>"
        f"<td>{pct(r['replay'])}</td><td>{pct(r['excluded'])}</td><td>{pct(r['lower'])}-{pct(r['upper'])}</td></tr>"
        for r in rows)
    unscored = next((r.get("reruns_unscored", 0) for r in rows if r["task"] == "all"), 0)
    unscored_line = (f"<p>{unscored} flagged episode(s) have a verified rerun without an outcome of the recorded "
                     "kind (unscored): Replay keeps them as run.</p>") if unscored else ""
    left_out = unscored_line + (f"<p>Not scored: {len(skipped)} file(s) could not be read.</p><ul>"
                + "".join(f"<li>{html.escape(problem)}</li>" for problem in skipped) + "</ul>" if skipped else "")
    images = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{html.escape(caption)} ({html.escape(name)}){extra}</figcaption></figure>"
        for name, caption, png, extra in figures)
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>simuguard report</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
figure{{margin:1.5em 0}}img{{max-width:100%}}figcaption{{font-size:90%;color:#444}}</style></head><body>
<h1>simuguard report</h1>
<p>Success rates in percent. Rep.: as run. Replay: flagged episodes replaced by their verified reruns.
Excl.: episodes without a contact artifact. Bounds: every flagged episode fails / passes.</p>
<table>{header}{body}</table>{left_out}{_paired_table(paired)}{images}</body></html>
"""

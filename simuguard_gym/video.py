"""`simuguard video`: an MP4 of a recorded episode, rendered from its bit-exact replay.

The env is rebuilt as for a replay (its id and kwargs, its factory, or ``env_fn``) with its
cameras, and driven through the recorded substeps; one frame is rendered at the end of every env
step from the replayed state, so the physics is the recording's and the rendering touches none of
it. From the step of the event's onset on, the frame has a red border and the event's body a yellow
box around it. The replay's verdict (exact or not) comes with the video.

Encoding uses PyAV (``pip install "simuguard-gym[video]"``). SAPIEN renders through Vulkan on a
GPU (SAPIEN 3.0.3 finds no rendering device on Mesa's CPU Vulkan driver), so a SAPIEN episode is
filmed as its collision shapes at the replayed poses, drawn by MuJoCo's renderer on the CPU
(:class:`~simuguard_gym.engines.geometry_camera.GeometryCamera`), with the same marks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from simuguard_gym.output_files import output, refuse_link
from simuguard_gym.physics.adapter import Renders
from simuguard_gym.physics.camera import Camera
from simuguard_gym.recording.reader import Recording
from simuguard_gym.replay.isolation import isolated
from simuguard_gym.replay.rebuild import recording_of
from simuguard_gym.replay.replay import replay

ONSET_COLOUR = np.array([230, 30, 30], np.uint8)  # the frame's border from the onset on
BOX_COLOUR = np.array([255, 215, 0], np.uint8)  # around the event's body
BORDER = 4


@dataclass
class Video:
    """An episode's video: where it is, how many frames, the frame of the onset, the replay's verdict."""

    path: Path
    frames: int
    fps: float
    onset_frame: int | None
    body: str | None
    exact: bool
    replay: str


def write_video(recording: Recording | str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
                env_fn: Callable[[], Any] | None = None, camera: str | None = None, size: int = 256,
                event: int | None = None, trust: bool = False) -> Video:
    """Render ``recording``'s episode from its replay into ``out`` (default: beside it, ``.mp4``).

    ``event`` picks the detector event to mark (default: the first contact artifact, else the
    first event; none: no marks). ``size`` is the frame's height and width in pixels (even). The
    env is rebuilt as :func:`~simuguard_gym.replay` rebuilds it (``env_fn``, ``trust``), in a child
    process where the file is not signed by this user.

    >>> from simuguard_gym.video import write_video
    >>> write_video("recordings/seed_000003.msgpack").frames        # doctest: +SKIP
    100
    """
    _pyav()  # before the replay, not after it
    rec = recording_of(recording, trust)
    if rec.path is None and out is None:
        raise ValueError("name the video's path: out=...")
    path = Path(out) if out is not None else Path(str(rec.path).removesuffix(".msgpack") + ".mp4")
    refuse_link(path)  # before the replay, not after it
    size = int(size)
    if size < 16 or size % 2:
        raise ValueError(f"size must be an even number of pixels >= 16, got {size}")
    footer = rec.footer or {}
    ends = [int(k) for k in footer.get("step_substeps") or []]
    if not ends:
        raise ValueError(f"{rec.path} records no env steps (its footer has no step_substeps)")
    onset, body = _marked_event(footer, event)

    def work() -> Video:
        frames = _Frames(ends, camera, size, onset, body)
        result = replay(rec, env_fn, listeners=[frames])
        if frames.error is not None:
            raise frames.error
        if not frames.images:
            raise RuntimeError(f"the replay of {rec.path} rendered no frame ({result.message})")
        step_seconds = (ends[0] if len(ends) == 1 else ends[1] - ends[0]) * float(rec.header["substep_dt"])
        fps = float(np.clip(round(1.0 / step_seconds) if step_seconds > 0 else 20, 1, 60))
        encode_mp4(frames.images, path, fps)
        return Video(path, len(frames.images), fps, frames.onset_frame, body, result.exact, result.message)

    return isolated(rec, work, "filming")


def encode_mp4(images: Sequence[np.ndarray], path: str | os.PathLike[str], fps: float) -> None:
    """Write RGB frames (uint8, one shape, even sides) as an H.264 MP4 (MPEG-4 part 2 where the
    FFmpeg build has no H.264 encoder)."""
    av = _pyav()
    height, width = images[0].shape[:2]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with output(path) as file, av.open(file, mode="w", format="mp4") as container:
        try:
            stream = container.add_stream("libx264", rate=int(round(fps)))
        except Exception:  # noqa: BLE001 - an FFmpeg build without x264
            stream = container.add_stream("mpeg4", rate=int(round(fps)))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _pyav() -> Any:
    try:
        import av
    except ImportError:
        raise ImportError('videos need PyAV: pip install "simuguard-gym[video]"') from None
    return av


def count_frames(path: str | os.PathLike[str]) -> int:
    """The frames an MP4 holds, decoded (not the header's count)."""
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def _marked_event(footer: dict[str, Any], event: int | None) -> tuple[int | None, str | None]:
    events = (footer.get("detector") or {}).get("events") or []
    if not events:
        if event is not None:
            raise ValueError("the recording holds no detector events to mark")
        return None, None
    if event is None:
        chosen = next((e for e in events if e.get("artifact")), events[0])
    elif not 0 <= event < len(events):
        raise ValueError(f"the recording holds events 0..{len(events) - 1}, not {event}")
    else:
        chosen = events[event]
    return int(chosen["onset_substep"]), chosen.get("body")


class _Frames:
    """A replay listener: one frame at the end of every env step, marked from the onset on."""

    def __init__(self, ends: list[int], camera: str | None, size: int, onset: int | None, body: str | None) -> None:
        self.ends, self.name, self.size, self.onset, self.body = set(ends), camera, size, onset, body
        self.images: list[np.ndarray] = []
        self.onset_frame: int | None = None
        self.error: BaseException | None = None
        self._camera: Camera | None = None
        self._substep = 0

    def attach(self, adapter: Any) -> None:
        if not isinstance(adapter, Renders):
            raise ValueError(f"videos of {adapter.engine} recordings need a renderer, and this engine's adapter "
                             "renders no frames")
        self._camera = adapter.camera(self.name, height=self.size, width=self.size, follow=self.body)

    def before_substep(self, phase: str) -> None:
        pass

    def after_substep(self) -> None:
        self._substep += 1
        if self._substep not in self.ends or self._camera is None or self.error is not None:
            return
        image = self._camera.render()
        if self.onset is not None and self._substep > self.onset:
            if self.onset_frame is None:
                self.onset_frame = len(self.images)
            image = _mark(image, self._camera, self.body)
        self.images.append(_fit(image, self.size))

    def hook_failed(self, where: str, error: BaseException) -> None:
        self.error = self.error or error


def _mark(image: np.ndarray, camera: Camera, body: str | None) -> np.ndarray:
    out = image.copy()
    out[:BORDER], out[-BORDER:], out[:, :BORDER], out[:, -BORDER:] = (ONSET_COLOUR,) * 4
    position = camera.body_position(body) if body else None
    if position is not None:
        col, row = camera.project(position[None])[0]
        if np.isfinite(col) and np.isfinite(row):
            half = max(6, image.shape[0] // 12)
            r0, r1 = int(np.clip(row - half, 0, out.shape[0] - 1)), int(np.clip(row + half, 0, out.shape[0] - 1))
            c0, c1 = int(np.clip(col - half, 0, out.shape[1] - 1)), int(np.clip(col + half, 0, out.shape[1] - 1))
            out[r0:r0 + 2, c0:c1], out[r1 - 1:r1 + 1, c0:c1] = BOX_COLOUR, BOX_COLOUR
            out[r0:r1, c0:c0 + 2], out[r0:r1, c1 - 1:c1 + 1] = BOX_COLOUR, BOX_COLOUR
    return out


def _fit(image: np.ndarray, size: int) -> np.ndarray:
    """Pad a frame that the model's offscreen buffer capped below ``size`` (one shape per video)."""
    if image.shape[0] == size and image.shape[1] == size:
        return image
    out = np.zeros((size, size, 3), np.uint8)
    out[:min(size, image.shape[0]), :min(size, image.shape[1])] = image[:size, :size]
    return out

"""A replay listener rendering a camera at the end of every recorded env step (tests of frames)."""

from __future__ import annotations


class StepFrames:
    """Renders ``camera`` (64 px) after each substep that ended an env step of the recording."""

    def __init__(self, ends, camera: str = "agentview"):
        self.ends, self.camera_name, self.substep, self.frames, self.errors = set(ends), camera, 0, [], []

    def attach(self, adapter):
        self.camera = adapter.camera(self.camera_name, height=64, width=64)

    def before_substep(self, phase):
        pass

    def after_substep(self):
        self.substep += 1
        if self.substep in self.ends:
            self.frames.append(self.camera.render())

    def hook_failed(self, where, error):
        self.errors.append(error)

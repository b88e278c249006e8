"""Recordings taken into the tools users already have (``simuguard export``): ManiSkill's
trajectory files (:func:`write_maniskill`), one episode per recording, the step-level actions and
states the format holds, and simuguard's own fields (events, flags, rerun verdicts, contact
depths, the source recording) kept alongside."""

from simuguard_gym.export.episodes import StepEpisode, step_episode, step_episodes
from simuguard_gym.export.maniskill import write_maniskill

__all__ = ["StepEpisode", "step_episode", "step_episodes", "write_maniskill"]

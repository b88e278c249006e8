"""Exact replay of recorded episodes, and reruns with one physics parameter changed."""

from simuguard_gym.replay.interventions import Intervention
from simuguard_gym.replay.replay import Divergence, ReplayResult, replay
from simuguard_gym.replay.rerun import RerunResult, rerun

__all__ = ["Divergence", "Intervention", "ReplayResult", "RerunResult", "replay", "rerun"]

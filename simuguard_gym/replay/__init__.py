"""Exact replay of recorded episodes (reruns with one parameter changed build on it)."""

from simuguard_gym.replay.replay import Divergence, ReplayResult, replay

__all__ = ["Divergence", "ReplayResult", "replay"]

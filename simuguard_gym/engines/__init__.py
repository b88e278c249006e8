"""Engine adapters: the only modules that import a simulator (the contract they implement is
simuguard_gym.physics.adapter)."""

from simuguard_gym.engines.base import adapter_for

__all__ = ["adapter_for"]

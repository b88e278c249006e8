"""Engine adapters: how simuguard's wrappers bind a simulator (the contract they implement is
simuguard_gym.physics.adapter). The other packages that import one are listed, with why, in
tests/test_layout.py."""

from simuguard_gym.engines.base import adapter_for

__all__ = ["adapter_for"]

"""Engine adapters: the only modules that import a simulator."""

from simuguard_gym.engines.base import BodyTable, ContactPairs, PhysicsAdapter, SubstepHooks, adapter_for

__all__ = ["BodyTable", "ContactPairs", "PhysicsAdapter", "SubstepHooks", "adapter_for"]

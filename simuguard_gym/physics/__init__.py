"""What simuguard knows of a physics scene, engine-free (numpy only): bodies, contacts, the
between-substep state, substep hooks, and the adapter contract every engine implements
(:mod:`~simuguard_gym.physics.adapter`). The engines' adapters live in ``simuguard_gym.engines``."""

from simuguard_gym.physics.adapter import PhysicsAdapter, RestorableModel
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.physics.contacts import ContactPairs, ContactPoints
from simuguard_gym.physics.hooks import HookError, SubstepHooks, SubstepListener
from simuguard_gym.physics.state import SpeedBound, StateComponent, StateRows

__all__ = ["BodyTable", "ContactPairs", "ContactPoints", "HookError", "PhysicsAdapter", "RestorableModel",
           "SpeedBound", "StateComponent", "StateRows", "SubstepHooks", "SubstepListener"]

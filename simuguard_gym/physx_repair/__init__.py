"""The repaired engine: a copy of SAPIEN whose PhysX 5.3.1 GJK uses PhysX 5.4's degeneracy
threshold (``simuguard repair-physx``, SimuGuard 4.2), and the two-piece scene that proves it
(``gjk_probe``). Imports SAPIEN; run the probe as ``python -m simuguard_gym.physx_repair.gjk_probe``."""

"""Metadata lives in setup.cfg; this file only declares the optional C extension."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        # The per-substep copies in one C call. optional: where it cannot be compiled (no C
        # compiler, no Python headers) the package installs without it and copies in Python.
        Extension("simuguard_gym.engines._substep_copy", ["simuguard_gym/engines/_substep_copy.c"], optional=True),
    ],
)

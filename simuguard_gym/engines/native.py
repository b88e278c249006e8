"""The optional C extension: a substep listener's copies in one call (``_substep_copy.c``,
built as the top-level module ``_simuguard_substep_copy``).

Built with the package where a C compiler and Python's headers are present; elsewhere, or with
``SIMUGUARD_NATIVE=0`` in the environment, listeners copy in Python: the same bytes, slower
(inside robosuite's step every Python-level operation costs 0.3-0.5 us).
"""

from __future__ import annotations

import os
from typing import Any

try:  # a top-level module (see setup.py), compiled from engines/_substep_copy.c
    from _simuguard_substep_copy import SubstepCopy
except ImportError:  # not compiled: Python copies
    SubstepCopy = None


def new_substep_copy() -> Any:
    """A fresh, unbound ``SubstepCopy``, or None where the extension is missing or switched off."""
    if SubstepCopy is None or os.environ.get("SIMUGUARD_NATIVE", "1") == "0":
        return None
    return SubstepCopy()

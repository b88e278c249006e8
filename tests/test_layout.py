"""The layout's promise: only engines/ imports a simulator (checked on the source, since importing
simuguard_gym itself brings the wrappers and their engines in)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "simuguard_gym"
SIMULATORS = {"mujoco", "sapien", "robosuite", "mani_skill", "libero"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["recording", "detection", "scoring", "identify"])
def test_core_packages_import_no_simulator(package):
    offenders = {str(p.relative_to(PACKAGE)): sorted(_imports(p) & SIMULATORS)
                 for p in (PACKAGE / package).glob("*.py") if _imports(p) & SIMULATORS}
    assert offenders == {}

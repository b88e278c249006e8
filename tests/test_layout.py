"""The layout's promises, checked on the source (importing simuguard_gym itself brings the wrappers
and their engines in): who may import a simulator, who may import the engines, no import circle
between packages, capabilities as protocols, the C copy's binding as one named structure."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "simuguard_gym"
SIMULATORS = {"mujoco", "sapien", "robosuite", "mani_skill", "libero", "metaworld", "gymnasium_robotics", "dm_control"}

#: Where a simulator may be imported, and why. Everything else is numpy only.
SIMULATOR_ALLOWED = {
    "engines/": "the adapters: the only place that binds a simulator for the wrappers",
    "envs/": "the built-in envs are simulator scenes",
    "identify/simulation/": "identification by simulating candidate bodies in MuJoCo (RigPI stage 2)",
    "physx_repair/": "the repaired engine and its probe are about the simulator itself",
    # lazy imports, each in the one function that needs it:
    "audit.py": "registers ManiSkill3's ids for an audit of a ManiSkill task",
    "replay/rebuild.py": "registers ManiSkill3's ids to rebuild a ManiSkill recording's env",
    "libero_audit.py": "reads LIBERO's stored initial states (simuguard audit-init)",
}

#: The packages that must never reach into an engine (they see only simuguard_gym.physics).
ENGINE_FREE = ("recording", "detection", "scoring", "identify", "capture", "physics")

#: engines/ holds adapters only: the MuJoCo adapter's modules, SAPIEN's (with what lets SAPIEN
#: and ManiSkill scenes be built without a rendering device), and what both share.
ADAPTER_MODULES = {"__init__.py", "base.py", "mujoco.py", "mujoco_contacts.py", "mujoco_hooking.py",
                   "mujoco_geometry.py", "mujoco_interventions.py", "mujoco_kinematics.py", "mujoco_memory.py",
                   "mujoco_model.py", "mujoco_render.py", "geometry_camera.py", "mujoco_stored.py", "mujoco_screen.py", "mujoco_screen_binding.py", "_mujoco_screen.c",
                   "_mujoco_kinematics.c", "libmujoco.py", "mujoco_step.py", "_mujoco_step.c",
                   "sapien.py", "sapien_contacts.py", "sapien_geometry.py", "sapien_headless.py",
                   "sapien_interventions.py", "_physx_capture.c"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imported(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside a function (``if TYPE_CHECKING``
    blocks left out)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    names = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_simulators_are_imported_only_where_allowed():
    offenders = {}
    for path in _modules():
        found = {m.split(".")[0] for m in _imported(path)} & SIMULATORS
        rel = _relative(path)
        if found and not any(rel == place or rel.startswith(place) for place in SIMULATOR_ALLOWED):
            offenders[rel] = sorted(found)
    assert offenders == {}


@pytest.mark.parametrize("package", ENGINE_FREE)
def test_engine_free_packages_never_import_the_engines(package):
    offenders = {_relative(p): sorted(m for m in _imported(p) if m.startswith("simuguard_gym.engines"))
                 for p in (PACKAGE / package).rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_engines_hold_adapters_only():
    assert {p.name for p in (PACKAGE / "engines").iterdir() if p.suffix in (".py", ".c")} == ADAPTER_MODULES


def test_no_import_circle_between_packages():
    """Packages (and top-level modules) as nodes, an import from one into another as an edge: a
    circle would make the room one enters depend on the room it came from."""
    def unit(path: Path) -> str:
        parts = path.relative_to(PACKAGE).parts
        return parts[0] if len(parts) > 1 else parts[0][:-3]

    edges: dict[str, set[str]] = defaultdict(set)
    for path in _modules():
        for module in _imported(path):
            parts = module.split(".")
            if parts[0] == "simuguard_gym" and len(parts) > 1 and parts[1] != unit(path):
                edges[unit(path)].add(parts[1])
    edges.pop("__init__", None)  # the package's public API imports from every room
    state: dict[str, int] = {}  # 1: on the path, 2: done
    circle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circle.extend(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, path + [nxt]):
                return True
        state[node] = 2
        return False

    assert not any(visit(n, [n]) for n in sorted(edges) if state.get(n) is None), " -> ".join(circle)


def _capabilities() -> set[str]:
    """The members of the adapter protocols (physics/adapter.py)."""
    tree = ast.parse((PACKAGE / "physics" / "adapter.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "Protocol" for b in node.bases):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
    return names


def test_no_adapter_capability_is_looked_up_by_name():
    capabilities = _capabilities()
    assert {"decode_contact_points", "copy_sources", "collision_pieces", "model_changes"} <= capabilities
    offenders = []
    for path in _modules():
        if _relative(path) == "physics/adapter.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in capabilities:
                offenders.append(f"{_relative(path)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert offenders == []


def test_the_c_copy_binds_one_named_structure():
    """bind() takes the bytes of a copy_binding (and a callback and the owners), not a tuple of
    addresses; the structure is defined once in C and mirrored by capture.native.CopyBinding."""
    source = (PACKAGE / "capture" / "_substep_copy.c").read_text()
    assert re.search(r"typedef struct \{[^}]*\} copy_binding;", source, re.S)
    assert '"y*OO:bind"' in source and "binding_layout" in source
    table = source[source.index("binding_fields[] = {"):]
    fields_c = re.findall(r"FIELD\((\w+)\)", table[:table.index("};")])
    native = (PACKAGE / "capture" / "native.py").read_text()
    fields_py = re.findall(r'\("(\w+)", ctypes\.c_', native)
    assert fields_c == fields_py and len(fields_c) > 20

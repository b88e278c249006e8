"""A repaired copy of SAPIEN whose PhysX 5.3.1 uses PhysX 5.4's GJK degeneracy threshold.

PhysX 5.3.1's GJK treats a simplex triangle abc as degenerate when |ab x ac|^2 <= FLT_EPSILON
(2^-23, in metres squared), which centimetre-scale convex pieces fall below: the search stops
early and a gap is reported as a deep penetration (SimuGuard 4.2, D.1). PhysX 5.4.0 compares
with FLT_EPSILON^2. SAPIEN links PhysX statically into ``libsapien.so``; this module finds, in the
installed library, the four RIP-relative ``movss`` loads of FLT_EPSILON that feed the ``comiss``
of those triangle tests (in the two ``GJKCPairDoSimplex`` and the two vector
``closestPtPointTetrahedron`` overloads), writes a copy of the whole ``sapien`` package, adds a
2^-46 constant in the padding after the executable segment of the copy (growing that segment by
eight bytes) and points the four loads at it. The shared FLT_EPSILON constant and the installed
package are not touched; anything not recognised exactly is refused.

Before it reports success the copy is verified: the pinned scene of
:mod:`simuguard_gym.physx_repair.gjk_probe` runs in a subprocess on the installed SAPIEN and on
the copy; the copy must not report that scene's false contact and must keep a real overlap's
depth, or the copy is removed and the repair fails.

Needs binutils (``nm``, ``objdump``) on the PATH. Use the copy with ``PYTHONPATH=DIR``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simuguard_gym.output_files import write_output

FLT_EPSILON = struct.pack("<f", 2.0 ** -23)  # 00 00 00 34
REPAIRED = struct.pack("<f", 2.0 ** -46)
EXPECTED_PHYSX = b"105.1-physx-5.3."
FUNCTIONS = ("physx::Gu::GJKCPairDoSimplex(float __vector(4)*", "physx::Gu::closestPtPointTetrahedron(float __vector(4)*")
RECORD = "simuguard-physx-repair.json"


class RepairError(RuntimeError):
    """The library is not the one this repair knows, or a tool it needs is missing."""


@dataclass(frozen=True)
class Site:
    function: str
    address: int  # of the movss instruction (file offset = virtual address in this segment)
    length: int
    old: str  # hex of the instruction's displacement before and after
    new: str


def installed_sapien() -> tuple[Path, Path]:
    """The installed ``sapien`` package directory and its ``libsapien.so``."""
    spec = importlib.util.find_spec("sapien")
    if spec is None or not spec.submodule_search_locations:
        raise RepairError("SAPIEN is not installed: pip install 'simuguard-gym[sapien]'")
    package = Path(list(spec.submodule_search_locations)[0])
    found = sorted((package.parent / "sapien.libs").glob("libsapien*.so")) + sorted(package.glob("libsapien*.so"))
    if not found:
        raise RepairError(f"no libsapien*.so next to {package}")
    return package, found[0]


def find_sites(library: Path, data: bytes) -> list[Site]:
    """The four movss loads of FLT_EPSILON feeding a comiss in the GJK triangle tests."""
    for tool in ("nm", "objdump"):
        if shutil.which(tool) is None:
            raise RepairError(f"{tool} (binutils) is needed to locate the GJK code; install binutils")
    symbols = subprocess.run(["nm", "-S", "-C", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
    functions = []
    for line in symbols.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[3].startswith(FUNCTIONS):
            functions.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    if len(functions) != 4:
        raise RepairError(f"expected 2 GJKCPairDoSimplex and 2 closestPtPointTetrahedron overloads, found "
                          f"{len(functions)}: not the PhysX 5.3.1 build this repair knows")
    sites = []
    pattern = re.compile(r"\s*([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(\w+)\s+([^#]*)(?:#\s*([0-9a-f]+))?")
    for start, size, name in functions:
        listing = subprocess.run(["objdump", "-d", "--insn-width=16", f"--start-address={start}",
                                  f"--stop-address={start + size}", str(library)], capture_output=True, text=True,
                                 check=True).stdout
        rows = [m for m in map(pattern.match, listing.splitlines()) if m]
        found = []
        for i, m in enumerate(rows):
            if m[3] != "movss" or "(%rip)" not in m[4] or not m[5]:
                continue
            target = _file_offset(data, int(m[5], 16))
            if data[target:target + 4] not in (FLT_EPSILON, REPAIRED):
                continue
            register = m[4].split(",")[-1].strip()
            if any(r[3] == "comiss" and r[4].strip().endswith(register) for r in rows[i + 1:i + 4]):
                raw = bytes.fromhex("".join(m[2].split()))
                found.append((int(m[1], 16), raw, target))
        if len(found) != 1:
            raise RepairError(f"{name}: expected one FLT_EPSILON load feeding a comiss, found {len(found)}")
        address, raw, target = found[0]
        if data[target:target + 4] == REPAIRED:
            raise RepairError(f"{library} is already repaired (its GJK loads 2^-46): nothing to do")
        sites.append(Site(name, address, len(raw), raw[-4:].hex(), ""))
    return sites


def _file_offset(data: bytes, vaddr: int) -> int:
    """File offset of a virtual address, through the PT_LOAD segments."""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_vaddr <= vaddr < p_vaddr + p_filesz:
            return p_offset + vaddr - p_vaddr
    return -1


def _executable_segment(data: bytearray) -> tuple[int, int, int, int]:
    """(program header offset, p_offset, p_vaddr, p_filesz) of the executable PT_LOAD, and checks."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RepairError("not a little-endian 64-bit ELF library")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads = []
    for i in range(phnum):
        at = phoff + i * phentsize
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", data, at)
        if p_type == 1:
            loads.append((at, p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
    loads.sort(key=lambda x: x[2])
    for k, (at, flags, offset, vaddr, filesz, memsz) in enumerate(loads):
        if flags & 1:
            following = loads[k + 1][2] if k + 1 < len(loads) else len(data)
            if offset != vaddr or filesz != memsz or offset + filesz + 8 > following:
                raise RepairError("the executable segment has no padding to hold the new constant")
            return at, offset, vaddr, filesz
    raise RepairError("no executable segment")


def repair(out: str | Path) -> dict[str, Any]:
    """Write the repaired copy of the installed SAPIEN into ``out``; returns what was changed."""
    package, library = installed_sapien()
    original = library.read_bytes()
    if EXPECTED_PHYSX not in original:
        raise RepairError(f"{library} does not contain PhysX 5.3.1 (looked for {EXPECTED_PHYSX!r})")
    out = Path(out)
    record_path = out / RECORD
    source_hash = hashlib.sha256(original).hexdigest()
    if record_path.exists():
        previous = json.loads(record_path.read_text())
        if previous.get("source_sha256") == source_hash:
            return previous  # idempotent: this library was already repaired into out
        raise RepairError(f"{out} holds a repair of another library ({previous.get('source')}); use another --out")
    if out.exists() and any(out.iterdir()):
        raise RepairError(f"{out} is not empty")
    data = bytearray(original)
    sites = find_sites(library, original)
    header, offset, vaddr, filesz = _executable_segment(data)
    constant = (offset + filesz + 3) & ~3
    data[constant:constant + 4] = REPAIRED
    grown = constant + 4 - offset
    struct.pack_into("<QQ", data, header + 32, grown, grown)  # p_filesz, p_memsz
    done = []
    for site in sites:
        end = site.address + site.length
        displacement = struct.pack("<i", constant - end)
        data[end - 4:end] = displacement
        done.append(Site(site.function, site.address, site.length, site.old, displacement.hex()))
    copy_package = out / package.name
    shutil.copytree(package, copy_package, ignore=shutil.ignore_patterns("__pycache__"))
    libs = package.parent / "sapien.libs"
    target_library = (out / "sapien.libs" if library.parent == libs else copy_package) / library.name
    if library.parent == libs:
        shutil.copytree(libs, out / "sapien.libs")
    target_library.write_bytes(bytes(data))  # in the tree copied just now (its mode kept)
    record = {
        "source": str(library), "source_sha256": source_hash, "repaired": str(target_library),
        "repaired_sha256": hashlib.sha256(bytes(data)).hexdigest(), "constant_offset": constant,
        "constant": REPAIRED.hex(), "segment_filesz": [filesz, grown],
        "sites": [asdict(s) | {"address": hex(s.address)} for s in done],
        "use": f"PYTHONPATH={out}",
    }
    try:
        record["verified"] = verify(out)
    except RepairError:
        shutil.rmtree(out)
        raise
    write_output(record_path, json.dumps(record, indent=2))
    return record


#: A real overlap must keep its depth in the copy to this tolerance (m).
DEPTH_TOLERANCE = 1e-4


def run_probe(sapien_copy: str | Path | None = None, args: tuple[str, ...] = (), timeout: float = 300
              ) -> dict[str, Any]:
    """The pinned false-contact scene and the real overlap (or, with ``args``, what else
    ``python -m simuguard_gym.physx_repair.gjk_probe ARGS`` runs), in a subprocess on the
    installed SAPIEN or (``sapien_copy``) on a repaired copy."""
    package_root = str(Path(__file__).resolve().parents[2])
    paths = ([str(sapien_copy)] if sapien_copy is not None else []) + [package_root, os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    done = subprocess.run([sys.executable, "-m", "simuguard_gym.physx_repair.gjk_probe", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RepairError(f"the false-contact probe failed on {sapien_copy or 'the installed SAPIEN'}: "
                          f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def verify(out: str | Path) -> dict[str, Any]:
    """Check a repaired copy against the installed engine on the pinned scene; what each reported."""
    stock, repaired = run_probe(), run_probe(out)
    if Path(repaired["sapien"]).resolve().parent.parent != Path(out).resolve():
        raise RepairError(f"the probe imported {repaired['sapien']}, not the copy in {out}")
    if repaired["sweep"]["false_contact"]:
        raise RepairError(f"the repaired copy still reports the pinned false contact "
                          f"({repaired['sweep']['reported_depth'] * 1000:.1f} mm deep, pieces "
                          f"{repaired['sweep']['true_gap'] * 1000:.2f} mm apart); the copy was removed")
    depths = [r["overlap"]["reported_depth"] for r in (stock, repaired)]
    if None in depths or abs(depths[0] - depths[1]) > DEPTH_TOLERANCE:
        raise RepairError(f"a real {stock['overlap']['true_depth'] * 1000:.1f} mm overlap is reported "
                          f"{depths} m deep by the stock engine and the copy; the copy was removed")

    def summary(result: dict[str, Any]) -> dict[str, Any]:
        return {k: result["sweep"][k] for k in ("false_contact", "reported_depth", "true_gap", "normal_alignment")} | {
            "overlap_depth": result["overlap"]["reported_depth"]}

    # On another PhysX 5.3.1 build the stock engine may not show this pinned report; the copy
    # is then still checked, and the record says the contrast was not seen.
    return {"scene": "simuguard_gym.physx_repair.gjk_probe", "stock": summary(stock), "repaired": summary(repaired),
            "stock_shows_false_contact": stock["sweep"]["false_contact"]}

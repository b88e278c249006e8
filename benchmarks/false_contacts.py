"""How often PhysX 5.3.1 reports a false contact between the can-and-basket pieces, and how often
the repaired copy (``simuguard repair-physx``) does: random sweeps of one can piece past one
basket piece (``gjk_probe.survey``: the pieces of envs/can_basket_geometry.py, a placed
can's speeds), the same sweeps on both engines, each in its own subprocess.

A false report is a contact reported at least 0.1 mm deep between pieces that are apart (their
true distance computed in float64). The deep ones (> 5 mm, the detector's deep-penetration flag)
are what throws a can out.

    python benchmarks/false_contacts.py                   # 2000 sweeps, repairs into a temp dir
    python benchmarks/false_contacts.py --sweeps 500 --repaired ~/physx-repaired
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from simuguard_gym.physx_repair.repair import repair, run_probe

DEEP = 0.005


def row(name: str, result: dict) -> str:
    reports = np.array(result["false_reports"], float).reshape(-1, 4)

    def sweeps(mask: np.ndarray) -> int:
        return len(np.unique(reports[mask, 0]))

    deep = reports[:, 2] > DEEP
    apart = reports[:, 3] > 1e-3
    depth = f"{reports[:, 2].max() * 1000:.1f}" if len(reports) else "-"
    gap = f"{reports[:, 3].max() * 1000:.2f}" if len(reports) else "-"
    return (f"| {name} | {result['sweeps']} | {sweeps(np.ones(len(reports), bool))} | {sweeps(deep)} | "
            f"{sweeps(deep & apart)} | {len(reports)} | {depth} | {gap} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repaired", help="a copy written by `simuguard repair-physx` (default: repair into a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        copy = args.repaired
        if copy is None:
            copy = Path(scratch) / "repaired"
            repair(copy)
        survey = ("survey", str(args.sweeps), str(args.seed))
        with ThreadPoolExecutor(2) as pool:
            stock, fixed = pool.map(lambda c: run_probe(c, survey, timeout=3600), (None, copy))
    print(f"{args.sweeps} sweeps (seed {args.seed}) of a can piece past a basket piece, 100 substeps of 4 ms each\n")
    print("| engine | sweeps | with a false report | with one > 5 mm deep | > 5 mm deep, pieces > 1 mm apart "
          "| false reports | deepest (mm) | largest true gap (mm) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(row("PhysX 5.3.1 (stock)", stock))
    print(row("PhysX 5.3.1, repaired GJK threshold", fixed))


if __name__ == "__main__":
    main()

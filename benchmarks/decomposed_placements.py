"""How often PhysX 5.3.1 throws the can out of the decomposed basket with a false contact, and
how often the repaired copy does: the scripted placement of ``PlaceCanBasketDecomposed-v0`` (the
CoACD pieces of envs/decomposed_geometry.py) over the same seeds in the stock and the repaired
engine, each in its own subprocess, with success rates, the paired test and, for every stock
episode with a false contact, ``simuguard trace`` of it.

An episode has a false contact when an event's onset contact or a deep-penetration flag's
checked report is between pieces that are apart (the detector's false-contact check).

    python benchmarks/decomposed_placements.py                       # seeds 0-99, repairs into a temp dir
    python benchmarks/decomposed_placements.py --episodes 20 --repaired ~/physx-repaired
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORKER = """
import json, sys, gymnasium as gym, sapien
import simuguard_gym.envs
from simuguard_gym import ArtifactMonitor, RecordPhysics
from simuguard_gym.scoring.html_report import false_contact_count
env_id, first, count, directory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
inner = gym.make(env_id)
env = ArtifactMonitor(RecordPhysics(inner, directory) if directory != "-" else inner)
for seed in range(first, first + count):
    env.reset(seed=seed)
    for _ in range(90):
        *_, info = env.step(env.unwrapped.expert_action())
    d = env.detector
    print(json.dumps({"seed": seed, "success": bool(info["success"]), "artifact": bool(d.artifacts),
                      "false_contacts": false_contact_count(d.events, d.flags), "errors": info["simuguard"]["errors"],
                      "sapien": sapien.__file__}), flush=True)
env.close()
"""


def run(env_id: str, first: int, count: int, copy: Path | None, directory: str) -> list[dict]:
    root = str(Path(__file__).resolve().parent.parent)
    paths = ([str(copy)] if copy else []) + [root, os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    done = subprocess.run([sys.executable, "-c", WORKER, env_id, str(first), str(count), directory],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="simuguard_gym/PlaceCanBasketDecomposed-v0")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed-base", type=int, default=0)
    parser.add_argument("--repaired", type=Path, help="a repaired copy (simuguard repair-physx --out DIR)")
    args = parser.parse_args()

    from simuguard_gym.detection.false_contact import GAP_TOLERANCE
    from simuguard_gym.scoring.estimates import wilson
    from simuguard_gym.scoring.paired import compare
    from simuguard_gym.trace import save_traces, trace
    from simuguard_gym.trace.physx import repaired_copy

    copy = repaired_copy(args.repaired or Path(tempfile.mkdtemp()) / "repaired")
    recordings = tempfile.mkdtemp(prefix="placements-")
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:  # one engine per core
        stock_job = pool.submit(run, args.env, args.seed_base, args.episodes, None, recordings)
        fixed_job = pool.submit(run, args.env, args.seed_base, args.episodes, copy, "-")
        stock, fixed = stock_job.result(), fixed_job.result()
    print(f"{args.env}, seeds {args.seed_base}-{args.seed_base + args.episodes - 1}, "
          f"{time.perf_counter() - started:.0f} s for both engines")
    print("| engine | episodes | succeeded | with a false contact (95% CI) | with a contact artifact | seeds with a false contact |")
    print("|---|---:|---:|---:|---:|---|")
    for name, rows in (("PhysX 5.3.1 (stock)", stock), ("repaired GJK threshold", fixed)):
        n, ok = len(rows), sum(r["success"] for r in rows)
        false = [r["seed"] for r in rows if r["false_contacts"]]
        lo, hi = wilson(len(false), n)
        errors = sum(bool(r["errors"]) for r in rows)
        print(f"| {name} | {n} | {ok} | {len(false)} ({100 * len(false) / n:.0f}%, {100 * lo:.1f}-{100 * hi:.1f}%) | "
              f"{sum(r['artifact'] for r in rows)} | {', '.join(map(str, false)) or '-'} |"
              + (f" ({errors} episodes with errors)" if errors else ""))
    paired = compare({("t", r["seed"]): r["success"] for r in fixed}, {("t", r["seed"]): r["success"] for r in stock})
    print(f"paired (repaired vs stock): {paired.a_only} seeds succeed only repaired, {paired.b_only} only stock, "
          f"difference {100 * paired.difference:+.0f} points (95% {100 * paired.difference_low:+.0f} to "
          f"{100 * paired.difference_high:+.0f}), exact sign test p = {paired.p_value:.2g}")
    labels: dict[str, int] = {}
    seconds, traced_false, artifacts, untraced_artifacts = [], [], 0, []
    for seed, path in enumerate(sorted(Path(recordings).glob("*.msgpack")), start=args.seed_base):
        results = trace(path, repaired=copy)
        save_traces(path, results)
        for r in results:
            labels[r.label] = labels.get(r.label, 0) + 1
            seconds.append(r.seconds)
            if (r.source == "artifact" and r.true_gap is not None and r.true_gap > GAP_TOLERANCE
                    and r.recorded_separation < 0):  # reported overlapping while apart: the detector's false contact
                artifacts += 1
                if r.label != "false_contact":
                    untraced_artifacts.append(f"seed {seed} substep {r.substep}: {r.verdict}")
        if any(r.label in ("false_contact", "overstated_depth") for r in results):
            traced_false.append(seed)
    if seconds:
        lo, hi = wilson(len(traced_false), len(stock))
        print(f"traced {len(seconds)} contacts of the stock episodes (events and deep-penetration flags): "
              + ", ".join(f"{k} {v}" for k, v in sorted(labels.items()))
              + f"; {max(seconds):.1f} s at most per contact (stock and repaired)")
        print(f"stock episodes with a false contact the trace reproduces (gripper links included, whose poses only the "
              f"replay has): {len(traced_false)} ({100 * lo:.1f}-{100 * hi:.1f}%): {', '.join(map(str, traced_false))}")
        print(f"false-contact artifacts (onset pieces apart) traced as false contacts: "
              f"{artifacts - len(untraced_artifacts)} of {artifacts}"
              + "".join(f"\n  not: {line}" for line in untraced_artifacts))


if __name__ == "__main__":
    main()

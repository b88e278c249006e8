"""Run the conformance matrix (tests/conformance/families.py) and write docs/compatibility.md.

Each family needs its own virtualenv (Meta-World pins mujoco 3.3.0, robosuite 1.5.2 needs mujoco
< 3.10): a run measures the families importable here and rewrites their sections of the page,
keeping the sections of the others. Every env runs 3 episodes plain and wrapped
(``ArtifactMonitor(RecordPhysics(env))``) through ``simuguard_gym.conformance.check_env``.

    python benchmarks/compatibility.py                      # the families installed here
    python benchmarks/compatibility.py --family Meta-World --print
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "tests" / "conformance"
PAGE = ROOT / "docs" / "compatibility.md"

HEAD = """# Compatibility: the conformance matrix

simuguard's wrappers on benchmark envs that this project did not write, built as their users
build them. Every env runs 3 episodes in a row on one instance, with the same seeds and actions
plain and wrapped (`ArtifactMonitor(RecordPhysics(env))`), and is checked by
`simuguard_gym.conformance.check_env` (run it on your own env the same way):

- no entry in `info["simuguard"]["errors"]` at any reset or step;
- observations, rewards, `terminated`/`truncated` and infos (outside `simuguard`) bit-identical;
- every recording holds every substep the env ran (MuJoCo's own count), and replays bit for bit
  in a fresh process (`simuguard replay`);
- no contact artifact in any episode (expert and random-action episodes alike).

The tests in `tests/conformance/` assert all of this in CI (`.ci/run`, one virtualenv per family
where pins conflict). This page is written by `python benchmarks/compatibility.py`, run in each
family's virtualenv. "Step time" is the wrapped run's time in `env.step` over the plain run's,
for these short episodes, including each episode's end (the last chunk encoded, the file
written and synced): a cost per episode that longer episodes spread thinner. Steady-state costs
per substep are measured by `benchmarks/record_overhead.py` and `benchmarks/detector.py`
([performance.md](performance.md)).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", help="only the family whose name starts with this")
    parser.add_argument("--print", action="store_true", help="print the sections instead of writing the page")
    args = parser.parse_args()
    sys.path.insert(0, str(CONFORMANCE))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CONFORMANCE), os.environ.get("PYTHONPATH")]))
    from families import FAMILIES, run

    sections = {}
    for family in FAMILIES:
        if (args.family and not family.name.startswith(args.family)) or not family.available():
            continue
        rows, started = [], time.perf_counter()
        for case in family.cases():
            print(f"{family.name}: {case.name}", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory() as directory:
                try:
                    rows.append((case, run(case, Path(directory)), None))
                except Exception as error:  # noqa: BLE001 - an env that cannot attach is a row too
                    rows.append((case, None, f"{type(error).__name__}: {error}"))
        sections[family.name] = _section(family, rows, time.perf_counter() - started)
    if args.print:
        print("\n".join(sections.values()))
        return
    PAGE.write_text(_page(PAGE.read_text() if PAGE.exists() else "", sections))
    print(f"wrote {', '.join(sections) or 'nothing'} into {PAGE}", file=sys.stderr)


def _section(family, rows, seconds: float) -> str:
    versions = ", ".join(f"{p} {_version(p)}" for p in family.packages)
    attached = sum(report is not None for _, report, _ in rows)
    episodes = [e for _, report, _ in rows if report is not None for e in report.episodes]
    exact = sum(e.replay_exact for e in episodes)
    ratios = [report.step_time_ratio for _, report, _ in rows if report is not None]
    lines = [f"<!-- family: {family.name} -->", f"## {family.name}", "",
             f"{versions}; Python {sys.version.split()[0]}. Envs attached: {attached} of {len(rows)}; replays "
             f"exact in a fresh process: {exact} of {len(episodes)} episodes; every check passed on "
             f"{sum(report is not None and not report.failures() for _, report, _ in rows)} of {len(rows)} envs "
             f"({seconds:.0f} s for the family)."]
    if any(case.expert for case, _, _ in rows):
        won = [e for e in episodes if e.succeeded]
        lines[-1] += (f" Experts succeeded in {len(won)} of {len(episodes)} episodes; contact artifacts in those: "
                      f"{sum(bool(e.artifacts) for e in won)}.")
    if ratios:
        lines[-1] += f" Step time wrapped / plain: median {statistics.median(ratios):.2f}."
    needs = sorted({case.needs for case, _, _ in rows if case.needs})
    lines[-1] += " Beyond the wrappers: " + ("; ".join(needs) if needs else "nothing") + "."
    lines += ["", "| env | max steps x substeps per step | substeps per episode | replays exact | artifacts | step time |"
              + (" expert succeeded |" if any(c.expert for c, _, _ in rows) else ""),
              "|---|---:|---:|---:|---:|---:|" + ("---:|" if any(c.expert for c, _, _ in rows) else "")]
    for case, report, error in rows:
        if report is None:
            lines.append(f"| {case.name} | cannot attach: {error} | | | | |")
            continue
        cells = [case.name, f"{case.steps} x {case.substeps_per_step()}",
                 " / ".join(str(e.recorded_substeps) for e in report.episodes),
                 f"{sum(e.replay_exact for e in report.episodes)} of {len(report.episodes)}",
                 str(sum(len(e.artifacts) for e in report.episodes)), f"{report.step_time_ratio:.2f}"]
        if case.expert:
            cells.append(f"{sum(bool(e.succeeded) for e in report.episodes)} of {len(report.episodes)}")
        lines.append("| " + " | ".join(cells) + " |")
        lines += [f"|  | failed: {f} | | | | |" for f in report.failures()]
    lines += ["", f"<!-- end: {family.name} -->"]
    return "\n".join(lines)


def _page(old: str, sections: dict[str, str]) -> str:
    """The page with ``sections`` measured anew, the others kept; the notes written below a
    family's section (up to the next one) stay below it."""
    found = re.finditer(r"(?s)<!-- family: (.+?) -->.*?<!-- end: \1 -->(.*?)(?=<!-- family: |\Z)", old)
    kept, notes = {}, {}
    for m in found:
        kept[m.group(1)] = m.group(0)[:len(m.group(0)) - len(m.group(2))]
        notes[m.group(1)] = m.group(2).strip()
    kept.update(sections)
    from families import FAMILIES

    order = [f.name for f in FAMILIES]
    body = [kept[name] + (f"\n\n{notes[name]}" if notes.get(name) else "") for name in order if name in kept]
    return HEAD + "\n" + "\n\n".join(body) + "\n"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    main()

"""simuguard audit-init: LIBERO's stored initial states, audited for contact artifacts (SimuGuard E.2).

For every stored initial state of a task: build the env as LIBERO's evaluation does (reset, then
``set_init_state``), measure how deep each object starts inside the bodies that support it, run
the settle steps that precede the policy (15 no-op steps, gripper open) with the contact-artifact
detector on, and keep per state: the objects deeper than 5 mm in a support, the ejections the
detector's first stage confirmed, the contact artifacts left after stages 2 and 3, and per
object its initial depth and peak speed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from simuguard_gym.detection.config import DetectorConfig
from simuguard_gym.envs.libero_task import SETTLE_STEPS

logger = logging.getLogger(__name__)

#: an object further than this inside a support at the start counts as starting inside it
DEPTH_LIMIT = 0.005


@dataclass
class StateAudit:
    """One stored initial state after its settle steps."""

    suite: str
    task: int
    state: int
    inside: list[str] = field(default_factory=list)          # objects > DEPTH_LIMIT inside a support
    ejections: int = 0                                        # events confirmed by stage 1
    artifacts: int = 0                                        # left after stages 2 and 3
    objects: dict[str, dict[str, float]] = field(default_factory=dict)   # name -> depth, peak_speed
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SuiteSummary:
    """Per suite: states audited; states with an object inside a support, with an ejection, with a
    contact artifact; ejection and artifact events (an event is one object); affected tasks."""

    suite: str
    states: int
    inside: int
    states_with_ejection: int
    states_with_artifact: int
    ejections: int
    artifacts: int
    tasks_with_artifacts: list[int]
    tasks: int


def audit_task(suite: str, task: int, states: Sequence[int] | int = 10, *, settle: int = SETTLE_STEPS,
               config: DetectorConfig | None = None, assets: str | None = None,
               progress: Callable[[StateAudit], None] | None = None) -> list[StateAudit]:
    """Audit stored initial states of one LIBERO task: the first ``states`` of them, or those listed."""
    from simuguard_gym.envs.libero_task import NOOP, LiberoEnv
    from simuguard_gym.wrappers.artifact_monitor import ArtifactMonitor

    env = ArtifactMonitor(LiberoEnv(suite, task, init_state=None, assets=assets), config=config)
    base: Any = env.unwrapped
    try:
        stored = len(base.init_states)
        indices = range(min(states, stored)) if isinstance(states, int) else [i for i in states if i < stored]
        out = []
        for k in indices:
            env.reset(seed=k, options={"init_state": k})
            adapter = env.adapter
            table = adapter.body_table()
            roles = np.array(table.roles)
            pairs, depth = adapter.current_contacts()
            audit = StateAudit(suite, task, k)
            is_object = roles == "object"
            # a support: anything that is neither the robot nor another loose object
            support = (roles != "robot") & ~is_object
            deepest = np.zeros(len(roles))
            for side in (0, 1):
                rows = is_object[pairs[:, side]] & support[pairs[:, 1 - side]]
                np.maximum.at(deepest, pairs[rows, side], depth[rows])
            for body in np.flatnonzero(is_object).tolist():
                audit.objects[table.names[body]] = {"depth": float(deepest[body]), "peak_speed": 0.0}
                if deepest[body] > DEPTH_LIMIT:
                    audit.inside.append(table.names[body])
            for _ in range(settle):
                env.step(NOOP)
            # ends the detector's episode: every substep analysed, every window closed
            events = list(env.recording_footer().get("detector", {}).get("events", []))
            if env.detector is not None:
                for col, body in enumerate(env.detector.tracked.tolist()):
                    name = table.names[body]
                    if name in audit.objects:
                        audit.objects[name]["peak_speed"] = float(env.detector.peak_speed[col])
            audit.ejections = len(events)
            audit.artifacts = sum(bool(e["artifact"]) for e in events)
            audit.events = events
            out.append(audit)
            if progress:
                progress(audit)
        return out
    finally:
        env.close()


def summarise(audits: Sequence[StateAudit]) -> list[SuiteSummary]:
    rows = []
    for suite in dict.fromkeys(a.suite for a in audits):
        mine = [a for a in audits if a.suite == suite]
        rows.append(SuiteSummary(
            suite, len(mine), sum(bool(a.inside) for a in mine), sum(a.ejections > 0 for a in mine),
            sum(a.artifacts > 0 for a in mine), sum(a.ejections for a in mine), sum(a.artifacts for a in mine),
            sorted({a.task for a in mine if a.artifacts}), len({a.task for a in mine})))
    return rows


def table(audits: Sequence[StateAudit]) -> str:
    """The per-suite table and, for objects that started inside a support or were ejected, per
    object: states, mean initial depth, peak speed."""
    lines = [f"{'':<16}{'':>7}{'states with':^36}{'events':^20}",
             f"{'suite':<16}{'states':>7}{'inside >5mm':>12}{'ejection':>12}{'artifact':>12}"
             f"{'ejections':>10}{'artifacts':>10}  tasks with artifacts"]
    for r in summarise(audits):
        lines.append(f"{r.suite:<16}{r.states:>7}{r.inside:>12}{r.states_with_ejection:>12}{r.states_with_artifact:>12}"
                     f"{r.ejections:>10}{r.artifacts:>10}  {len(r.tasks_with_artifacts)}/{r.tasks} "
                     f"{r.tasks_with_artifacts or ''}")
    notable: dict[tuple[str, int, str], list[tuple[float, float, int]]] = {}
    for a in audits:
        for name, o in a.objects.items():
            if name in a.inside or any(e["body"] == name for e in a.events):
                notable.setdefault((a.suite, a.task, name), []).append(
                    (o["depth"], o["peak_speed"], sum(bool(e["artifact"]) for e in a.events if e["body"] == name)))
    if notable:
        lines.append("")
        lines.append(f"{'suite':<16}{'task':>5}  {'object':<34}{'states':>7}{'depth mm':>10}{'peak m/s':>10}{'artifacts':>10}")
        for (suite, task, name), rows in sorted(notable.items()):
            d = np.array(rows)
            lines.append(f"{suite:<16}{task:>5}  {name:<34}{len(rows):>7}{1000 * d[:, 0].mean():>10.1f}"
                         f"{d[:, 1].mean():>10.2f}{int(d[:, 2].sum()):>10}")
    return "\n".join(lines)


def run(suites: Sequence[str], tasks: Sequence[int] | None = None, states: int = 10, *,
        settle: int = SETTLE_STEPS, assets: str | None = None, quiet: bool = False) -> list[StateAudit]:
    """Audit several suites; a tqdm bar when tqdm is installed and not quiet."""
    from simuguard_gym.envs.libero_task import import_libero

    import_libero(assets)
    from libero.libero import benchmark

    plan = []
    for suite in suites:
        if suite not in benchmark.get_benchmark_dict():
            raise ValueError(f"unknown LIBERO suite {suite!r}")
        n = benchmark.get_benchmark_dict()[suite]().n_tasks
        plan += [(suite, t) for t in (tasks if tasks is not None else range(n)) if t < n]
    bar = None
    if not quiet:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(plan) * states, unit="state", desc="audit-init")
        except ImportError:
            bar = None
    audits: list[StateAudit] = []
    t0 = time.perf_counter()
    for suite, task in plan:
        audits += audit_task(suite, task, states, settle=settle, assets=assets,
                             progress=(lambda a: bar.update(1)) if bar else None)
        logger.info("%s task %d done (%.0f s)", suite, task, time.perf_counter() - t0)
    if bar:
        bar.close()
    return audits


def to_json(audits: Sequence[StateAudit]) -> dict[str, Any]:
    return {"summary": [asdict(r) for r in summarise(audits)], "states": [asdict(a) for a in audits]}


def from_json(data: dict[str, Any]) -> list[StateAudit]:
    """The states of a ``--json`` file, e.g. to print its table again."""
    return [StateAudit(**s) for s in data["states"]]

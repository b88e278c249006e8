"""Exact replay: rebuild the env, apply the recorded writes substep by substep, verify every float."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from simuguard_gym.engines.base import adapter_for
from simuguard_gym.engines.mujoco_stored import StoredScene
from simuguard_gym.physics.adapter import PhysicsAdapter, RestorableModel
from simuguard_gym.physics.bodies import BodyTable
from simuguard_gym.recording.format import CONTACT_COLUMNS, SUBSTEP_COLUMNS, RecordingError, decode_array
from simuguard_gym.recording.reader import Recording
from simuguard_gym.capture.recorder import SubstepRecorder
from simuguard_gym.replay.isolation import isolated
from simuguard_gym.recording.model_store import model_file_entry
from simuguard_gym.replay.rebuild import build_env, recording_of, stored_scene

# Order in which columns are reported when several diverge at the same substep: the most
# specific (a named body) first.
_REPORT_ORDER = ("body_pose", "body_vel", "contacts", "fingerprint", "snapshot_state", "split", "start_mask",
                 "mid_mask", "start_values", "mid_values")

#: Contact speeds are derived from the states (which are verified bit for bit) by numpy
#: arithmetic whose last bit may differ between simuguard versions; they are compared to this
#: many float32 units in the last place, so recordings made by another version verify.
SPEED_ULPS = 4


@dataclass(frozen=True)
class Divergence:
    """The first place where a replay differs from its recording."""

    substep: int
    quantity: str
    body: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f" of body {self.body!r}" if self.body else ""
        return f"substep {self.substep}: {self.quantity}{where} differs{': ' + self.detail if self.detail else ''}"


@dataclass
class ReplayResult:
    """What a replay found. ``exact`` means every recorded float and every snapshot matched."""

    exact: bool
    substeps: int
    recorded_substeps: int
    divergence: Divergence | None = None
    success: bool | None = None
    recorded_success: bool | None = None
    initial_state_restored: bool = False
    notes: list[str] = field(default_factory=list)
    #: Why the recording does not hold its whole episode (None: it does); only its intact
    #: substeps are replayed then, and the replay is never ``exact``.
    lost: str | None = None

    @property
    def message(self) -> str:
        if self.exact:
            return f"exact: {self.substeps} of {self.recorded_substeps} substeps bit-identical"
        if self.lost is not None:
            prefix = (f"its {self.substeps} intact substeps replay bit-identical" if self.divergence is None
                      else f"first divergence at {self.divergence}")
            return f"not exact: the recording is incomplete ({self.lost}); {prefix}"
        return f"not exact: first divergence at {self.divergence}"


def replay(recording: Recording | str | os.PathLike[str], env_fn: Callable[[], gym.Env] | None = None, *,
           stop_at_divergence: bool = True, adapter: PhysicsAdapter | None = None,
           verify: str = "all", listeners: Sequence[Any] = (), trust: bool = False,
           from_file: bool = False) -> ReplayResult:
    """Replay a recording in a fresh env and compare every recorded float.

    The env comes from ``env_fn()`` or, by default, ``gym.make`` with the recorded env id and
    kwargs; it is reset with the recorded seed and options. If the reset does not reproduce the
    recorded initial state but the model matches (an unseeded fixture placement, say), the
    recorded state is written back and ``initial_state_restored`` says so. The env's success
    signal is read at the end.

    A recording is data (docs/security.md): code it names (an env factory, a module) runs only
    when the file is signed by this user (the recordings they made), or with ``trust=True``;
    otherwise pass ``env_fn``. A replay of a file not signed by this user runs in a child
    process (an engine crash is an ``EngineCrashError``), except one with ``listeners``, which
    runs where they are, after the same checks of every value the file writes into the engine.

    ``verify="all"`` compares every recorded column; ``"states"`` skips the contacts (the full
    integration state is still checked bit for bit at every substep through its fingerprint,
    and the tracked bodies and writes as recorded), which is several times faster on
    contact-rich scenes. ``listeners`` are extra substep listeners (``before_substep``,
    ``after_substep``, ``hook_failed``; ``attach(adapter)`` if they need the adapter) that see the
    replayed physics, e.g. to read what the recording left out.

    A MuJoCo recording names the compiled model it was made on (the model store beside it): with
    ``from_file=True``, or (no ``env_fn`` given) where the env cannot be built here or builds
    another model, the replay runs on that model alone (no benchmark needed; the same MuJoCo
    version), and its notes say so. The env's success is then not read (``success`` None): it
    needs the env's code.

    >>> from simuguard_gym import replay
    >>> result = replay("episode_000000.msgpack")   # doctest: +SKIP
    >>> result.exact, result.message                # doctest: +SKIP
    (True, 'exact: 1500 of 1500 substeps bit-identical')
    """
    rec = recording_of(recording, trust)
    if verify not in ("all", "states"):
        raise ValueError(f"verify must be 'all' or 'states', got {verify!r}")

    def replay_on(env: gym.Env, given: PhysicsAdapter | None) -> ReplayResult:
        try:
            return _replay_in(env, rec, stop_at_divergence, given, verify == "all", listeners)
        finally:
            env.close()

    def work() -> ReplayResult:
        notes: list[str] = []
        env = build_env(rec, env_fn, from_file=from_file, notes=notes)
        rebuilt = not isinstance(env, StoredScene)
        result = replay_on(env, adapter)
        found = result.divergence
        if (rebuilt and env_fn is None and found is not None and found.quantity == "model"
                and model_file_entry(rec.header) is not None):
            notes.append(f"the rebuilt env's model differs from the recorded one ({found.detail}); replayed on the "
                         "model stored with the recording")
            result = replay_on(stored_scene(rec), None)
        result.notes[:0] = notes
        return result

    return work() if listeners else isolated(rec, work, "replaying")


def _replay_in(env: gym.Env, rec: Recording, stop: bool, adapter: PhysicsAdapter | None,
               contacts: bool = True, listeners: Sequence[Any] = ()) -> ReplayResult:
    header = rec.header
    result = ReplayResult(exact=False, substeps=0, recorded_substeps=rec.substeps,
                          recorded_success=(rec.footer or {}).get("success"))
    prepared = prepare(env, rec, adapter, result.notes)
    if isinstance(prepared, Divergence):
        result.divergence = prepared
        return result
    adapter, state, result.initial_state_restored = prepared.adapter, prepared.state, prepared.initial_state_restored

    checker = _ChunkChecker(rec, contacts)
    recorder = SubstepRecorder(adapter, checker, snapshot_every=int(header["snapshot_every"]),
                               chunk_substeps=int(header["chunk_substeps"]), contacts=contacts)
    adapter.hooks.add(recorder)
    for listener in listeners:
        if hasattr(listener, "attach"):
            listener.attach(adapter)
        adapter.hooks.add(listener)
    lost = rec.lost
    intact = rec.substeps if lost is None else max(0, min(rec.substeps, int(lost["last_good_substep"]) + 1))
    try:
        recorder.start_episode()
        _drive(adapter, rec, checker, stop, state, limit=intact)
        recorder.finish()
    finally:
        adapter.hooks.remove(recorder)
        for listener in listeners:
            adapter.hooks.remove(listener)
    if recorder.errors:
        first = recorder.errors[0]
        raise RuntimeError(f"replay hook failed at substep {first.substep}: {first.type}: {first.message}")
    result.substeps = recorder.substep
    result.divergence = checker.first
    result.lost = lost["reason"] if lost is not None else None
    result.exact = lost is None and checker.first is None and result.substeps == rec.substeps
    try:
        result.success = adapter.success()
    except Exception as error:  # noqa: BLE001 - a success check that fails is reported, not fatal
        result.notes.append(f"success check failed: {error}")
    return result


@dataclass
class Prepared:
    """An env reset as recorded: its adapter, a state buffer, and what had to be written back
    because the reset did not reproduce the recorded episode."""

    adapter: PhysicsAdapter
    state: np.ndarray
    initial_state_restored: bool
    model_restored: bool


def prepare(env: gym.Env, rec: Recording, adapter: PhysicsAdapter | None, notes: list[str]) -> Divergence | Prepared:
    """Reset ``env`` as recorded and check it is the recorded scene; or the divergence that stops it."""
    header = rec.header
    if rec.errors:
        notes.append(f"the recording holds {len(rec.errors)} hook error(s)")
    if adapter is None:
        # Found before the reset where the env has its scene already, as the recorder found it:
        # the recorded model changes are relative to the model as the env was built, and a reset
        # may build another (robosuite's hard reset redraws TwoArmHandover's hammer).
        try:
            adapter = adapter_for(env)
        except TypeError:  # a scene made at the first reset (RoboTwin's tasks)
            pass
    env.reset(seed=header.get("seed"), options=header.get("options"))
    adapter = adapter_for(env, adapter)
    adapter.refresh()
    if adapter.engine != header.get("engine"):
        return Divergence(0, "engine", detail=f"recorded {header.get('engine')}, replay {adapter.engine}")
    if adapter.engine_version != header.get("engine_version"):
        notes.append(f"engine version differs: recorded {header.get('engine_version')}, "
                     f"replay {adapter.engine_version}")
    model_restored = not _same_model(adapter, header)
    if model_restored:
        try:
            differing = _restore_model(adapter, header, notes)
        except RecordingError as error:
            raise RecordingError(f"{rec.path}: {error}") from None
        if not _same_model(adapter, header):
            detail = ("the rebuilt scene's model differs from the recorded one (seed not honoured, or different "
                      "env kwargs/version)")
            if differing:
                detail += f"; arrays the recording does not carry differ: {', '.join(differing[:8])}"
            return Divergence(0, "model", detail=detail)
    adapter.set_body_table(BodyTable.from_dict(header["bodies"]))
    state = np.empty(sum(c.size for c in adapter.state_layout()))
    adapter.read_state(state)
    recorded_initial = rec.initial_state
    if state.size != recorded_initial.size:
        return Divergence(0, "state layout", detail="state sizes differ")
    restored = state.tobytes() != recorded_initial.tobytes()
    if restored:
        adapter.write_state(recorded_initial.copy())
        notes.append("the reset did not reproduce the recorded initial state; it was written back")
    return Prepared(adapter, state, restored, model_restored)


def _same_model(adapter: PhysicsAdapter, header: dict[str, Any]) -> bool:
    """Whether the rebuilt scene's model is the recorded one: by every array's checksum where the
    recording keeps them (MuJoCo; whatever the fingerprint's definition when it was written), else
    by the fingerprint."""
    digests = header.get("model_digests")
    if isinstance(adapter, RestorableModel) and isinstance(digests, dict):
        return adapter.model_digests() == digests
    return adapter.model_fingerprint() == header.get("model_fingerprint")


def _restore_model(adapter: PhysicsAdapter, header: dict[str, Any], notes: list[str]) -> list[str]:
    """Write the recorded episode's model back where the env changes its model between episodes
    (Meta-World's goal and bodies at reset; LIBERO's fixtures placed by an unseeded generator,
    SimuGuard C.1); the names of the arrays that still differ."""
    if not isinstance(adapter, RestorableModel):
        return []
    if "model_digests" in header:
        written, differing = adapter.restore_model(_model_changes(header), header["model_digests"])
    elif header.get("model_body_pose"):  # files that stored only the bodies' placement
        pose = np.frombuffer(header["model_body_pose"], dtype="<f8").reshape(-1, 7)
        written, differing = adapter.restore_model({"body_pos": {"values": pose[:, :3].copy()},
                                                    "body_quat": {"values": pose[:, 3:].copy()}}, None)
    else:
        return []
    if written:
        notes.append(f"the env's model differed from the recorded one in {', '.join(written[:8])}"
                     f"{' ...' if len(written) > 8 else ''}; the recorded values were written back")
    return differing


def _model_changes(header: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The header's ``model_changes`` decoded, its structure checked (what may be written into
    the model is the adapter's to check)."""
    found, digests = header.get("model_changes") or {}, header.get("model_digests")
    if not (isinstance(found, dict) and isinstance(digests, dict)
            and all(isinstance(k, str) and type(v) is int for k, v in digests.items())):
        raise RecordingError("model_changes and model_digests must be maps by array name")
    changes = {}
    for name, change in found.items():
        if not isinstance(change, dict) or not set(change) <= {"index", "values"} or "values" not in change:
            raise RecordingError(f"model_changes {name}: must hold values (and, for some arrays, index)")
        changes[name] = {key: decode_array(part, f"model_changes {name} {key}", 0) for key, part in change.items()}
    return changes


def _drive(adapter: PhysicsAdapter, rec: Recording, checker: "_ChunkChecker", stop: bool,
           state: np.ndarray, before: Callable[[int], None] | None = None,
           after: Callable[[int], bool] | None = None, limit: int | None = None) -> None:
    """Re-apply the recorded writes and run every substep as the env did (the first ``limit``).
    ``before(k)`` runs before substep k's writes (a rerun switches its intervention on there);
    ``after(k)`` returning True stops the run (a rerun stops at the first success)."""
    if not (rec.substeps if limit is None else limit):
        return  # nothing recorded (a recording that lost its first substep)
    cols = rec.columns
    layout = rec.state_layout
    slices = [np.arange(c.offset, c.offset + c.size) for c in layout]
    indices: dict[int, np.ndarray] = {}  # state elements written, per component mask
    plans = {}
    for phase in ("start", "mid"):
        mask = cols[f"{phase}_mask"]
        plans[phase] = (mask, rec.write_offsets(phase), cols[f"{phase}_values"])

    def apply(phase: str, k: int) -> None:
        mask, offsets, values = plans[phase]
        bits = int(mask[k])
        if not bits:
            return
        index = indices.get(bits)
        if index is None:
            index = indices[bits] = np.concatenate([slices[i] for i in range(len(layout)) if bits >> i & 1])
        adapter.read_state(state)
        state[index] = values[offsets[k]:offsets[k + 1]]
        adapter.write_state(state)

    split = cols["split"]
    for k in range(rec.substeps if limit is None else limit):
        if before is not None:
            before(k)
        apply("start", k)
        adapter.run_substep(bool(split[k]), lambda k=k: apply("mid", k))
        if stop and checker.first is not None:
            return
        if after is not None and after(k):
            return


class _ChunkChecker:
    """Receives the replay's chunks and compares them with the recording's columns."""

    def __init__(self, rec: Recording, contacts: bool = True) -> None:
        self.rec = rec
        self.contacts = contacts
        self.first: Divergence | None = None
        self._contact_offsets = rec.contact_offsets()
        self._write_offsets = {p: rec.write_offsets(p) for p in ("start", "mid")}
        snap_at = rec.columns.get("snapshot_substep", np.zeros(0, np.int64))
        self._snap_index = {int(s): i for i, s in enumerate(snap_at)}

    def __call__(self, columns: dict[str, np.ndarray], first: int, n: int) -> None:
        if self.first is not None:
            return
        found: list[Divergence] = []
        rec = self.rec.columns
        end = first + n
        if end > self.rec.substeps:
            found.append(Divergence(self.rec.substeps, "length", detail="replay runs past the recording"))
            end = self.rec.substeps
            n = end - first
        for name in SUBSTEP_COLUMNS:
            if name == "contact_count":
                continue
            k, body = _first_row_diff(columns[name][:n], rec[name][first:end])
            if k is not None:
                name_of = self.rec.tracked_names[body] if body is not None and name.startswith("body_") else None
                found.append(Divergence(first + k, name, name_of))
        for phase in ("start", "mid"):
            off = self._write_offsets[phase]
            k = _first_segment_diff(columns[f"{phase}_values"], rec[f"{phase}_values"][off[first]:off[end]],
                                    off[first:end + 1] - off[first])
            if k is not None:
                found.append(Divergence(first + k, f"{phase}_values"))
        if self.contacts:
            found.extend(self._contacts(columns, first, n))
        for i, s in enumerate(columns["snapshot_substep"]):
            j = self._snap_index.get(int(s))
            if j is None or columns["snapshot_state"][i].tobytes() != rec["snapshot_state"][j].tobytes():
                found.append(Divergence(int(s), "snapshot_state", detail="full integration state"))
                break
        if found:
            self.first = min(found, key=lambda d: (d.substep, _REPORT_ORDER.index(d.quantity)
                                                   if d.quantity in _REPORT_ORDER else 99))

    def _contacts(self, columns: dict[str, np.ndarray], first: int, n: int) -> list[Divergence]:
        rec = self.rec.columns
        counts = columns["contact_count"][:n]
        k, _ = _first_row_diff(counts, rec["contact_count"][first:first + n])
        limit = n if k is None else k  # compare pairs only where the counts agree
        lo, hi = self._contact_offsets[first], self._contact_offsets[first + limit]
        local = np.concatenate([[0], np.cumsum(counts[:limit], dtype=np.int64)])
        worst = None if k is None else k
        for name in CONTACT_COLUMNS:
            j = _first_segment_diff(columns[name][:local[-1]], rec[name][lo:hi], local,
                                    SPEED_ULPS if name == "contact_speed" else 0)
            if j is not None and (worst is None or j < worst):
                worst = j
        return [] if worst is None else [Divergence(first + worst, "contacts")]


def _bits(a: np.ndarray) -> np.ndarray:
    """View an array's elements as unsigned integers so that comparison is bitwise (NaN == NaN)."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "f":
        return a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return a


def _first_row_diff(replayed: np.ndarray, recorded: np.ndarray) -> tuple[int | None, int | None]:
    """First differing row, and for (rows, bodies, ...) arrays the first differing body in it."""
    if replayed.shape != recorded.shape:
        return 0, None
    if replayed.size == 0:
        return None, None
    diff = _bits(replayed) != _bits(recorded)
    if diff.ndim > 1:
        row_diff = diff.reshape(diff.shape[0], -1).any(axis=1)
    else:
        row_diff = diff
    rows = np.flatnonzero(row_diff)
    if rows.size == 0:
        return None, None
    k = int(rows[0])
    if diff.ndim > 2:
        body = int(np.flatnonzero(diff[k].reshape(diff.shape[1], -1).any(axis=1))[0])
        return k, body
    return k, None


def _first_segment_diff(replayed: np.ndarray, recorded: np.ndarray, offsets: np.ndarray, ulps: int = 0
                        ) -> int | None:
    """Index of the first segment (substep) whose elements differ (by more than ``ulps`` units in
    the last place, for floats); ``offsets`` bound the segments."""
    if replayed.shape[1:] != recorded.shape[1:]:
        return 0
    common = min(len(replayed), len(recorded))
    if replayed.size == 0 and recorded.size == 0:
        return None
    # Different lengths (one run wrote more): compare the common prefix; where it agrees, the
    # streams part where the shorter one ends.
    diff = _bits(replayed[:common]) != _bits(recorded[:common])
    if ulps and diff.any() and replayed.dtype.kind == "f":
        # Same-sign floats are ordered like their bit patterns read as integers.
        signed = np.dtype(f"i{replayed.dtype.itemsize}")
        a = np.ascontiguousarray(replayed[:common]).view(signed).astype(np.int64)
        b = np.ascontiguousarray(recorded[:common]).view(signed).astype(np.int64)
        diff &= np.abs(a - b) > ulps
    if len(replayed) != len(recorded):
        diff = np.concatenate([diff, np.ones((1,) + diff.shape[1:], bool)])
    if diff.ndim > 1:
        diff = diff.reshape(diff.shape[0], -1).any(axis=1)
    where = np.flatnonzero(diff)
    if where.size == 0:
        return None
    return int(np.searchsorted(offsets, where[0], side="right") - 1)

"""MujocoScreen: a MuJoCo scene's substeps watched without a Python call per substep.

The hooks of :mod:`~simuguard_gym.engines.mujoco_hooking` run Python around every substep and
hand every substep to the detector. An RL loop pays for that at every env step, though almost no
substep can start an artifact. The screen turns it round: MuJoCo's own control callback (a C
function, ``_mujoco_screen.c``) runs inside every ``mj_step``, keeps the state each substep starts
from in a ring, and marks a substep only where the detector's first stage could open a candidate
(a watched body that touched something, fast, with a sudden velocity change) or a state is
absurd; it counts the deep-penetration flags itself. Nothing else runs. Where a substep is marked,
the substeps from ``lookback`` before it on are re-simulated from their saved states on a scratch
MjData with the hooks around each (MuJoCo is deterministic: the same contacts, forces and states,
bit for bit) and fed to the detector, which thus sees every substep an event can examine.

It serves a scene stepped with whole ``mj_step`` calls (any integrator: RK4's later stages are
told apart by their time), while no other control callback is installed; elsewhere (split steps,
another callback, the C extension not built) :meth:`MujocoScreen.unavailable` says why and the
monitor keeps its hooks. A Gymnasium ``MujocoEnv`` stepping as Gymnasium does is screened from
its first episode; other envs run the hooks in their first episode, which learn how they step.
A re-simulation that does not continue itself (an env that writes the state inside its substeps
after all) is reported as an error and hands the env back to the hooks.

>>> import gymnasium as gym
>>> from simuguard_gym import ArtifactMonitor
>>> from simuguard_gym.engines.mujoco_screen import MujocoScreen
>>> env = ArtifactMonitor(gym.make("Ant-v5"))
>>> screened = []
>>> for seed in (0, 1):
...     _ = env.reset(seed=seed)
...     _ = env.step(env.action_space.sample())
...     screened.append(env.screened is not None)
>>> screened == [MujocoScreen.extension is not None] * 2   # Gymnasium's own stepping: whole mj_step calls
True
>>> env.close()
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np

from simuguard_gym.capture.rows import SpanRows
from simuguard_gym.engines import mujoco_memory
from simuguard_gym.engines.mujoco_screen_binding import BINDING_VERSION, MAX_SEGMENTS, ScreenBinding, load_extension

#: The state components an env or its user writes (between env steps): a row points to a copy of
#: them made where they changed. Every other component (MuJoCo's integrated state, and any it
#: adds) is copied every substep.
INPUT_COMPONENTS = frozenset({"ctrl", "qfrc_applied", "xfrc_applied", "eq_active", "mocap_pos", "mocap_quat",
                              "userdata"})
#: Words of alignment padding a copy of the state takes along rather than split in two.
_PADDING_WORDS = 8
#: Deep body pairs the callback counts (more end the screening for the episode: hooks again).
PAIR_CAPACITY = 256
#: Deep contact points of one substep the callback holds until the substep ends.
PENDING_CAPACITY = 4096
_INTEGRATION = int(mujoco.mjtState.mjSTATE_INTEGRATION)


_CALLBACK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _packed(specs: dict[str, tuple[tuple[int, ...], Any]]) -> dict[str, np.ndarray]:
    """Zeroed arrays of the given shapes and dtypes, one after another in one buffer (each at a
    multiple of 8 bytes, the first at a multiple of 64)."""
    sizes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in specs.values()]
    starts = np.concatenate([[0], np.cumsum([-(-size // 8) * 8 for size in sizes])])
    buffer = np.zeros(int(starts[-1]) + 64, np.uint8)
    first = -buffer.ctypes.data % 64
    return {name: buffer[first + start:first + start + size].view(dtype).reshape(shape)
            for (name, (shape, dtype)), start, size in zip(specs.items(), starts.tolist(), sizes)}


class ScreenDiverged(RuntimeError):
    """Re-simulated substeps did not continue one another: the screen cannot serve this env."""


def _detach(extension: Any, binding: ScreenBinding, *keep: Any) -> None:
    """The finalizer of a screen collected while attached: off the callback's list (``keep``: the
    arrays and MjData the binding points into, alive until then)."""
    extension.detach(ctypes.addressof(binding))
    MujocoScreen._release()


class MujocoScreen:
    """The substeps of one MuJoCo scene, screened by MuJoCo's control callback (see the module).

    ``start_episode`` binds it to the adapter's current MjData and starts counting at substep 0;
    the env then steps as usual. After each env step, :attr:`seen` substeps have run and
    :attr:`flagged` is the earliest marked one (-1: none); :meth:`replay` re-simulates substeps
    and hands them, decoded, to a sink; :meth:`deep_flags` are the deep-penetration flags so far.
    """

    extension = load_extension()
    _callback: Any = None  # the ctypes function installed as mjcb_control, while any screen runs
    _running = 0

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.binding = ScreenBinding()
        self._attached = False
        self._arrays: dict[str, np.ndarray] = {}
        self._replayer: Any = None  # (scratch adapter, its tap, the decoded batches), made on first use
        self._rows: SpanRows | None = None
        #: (is an input, offset in its ring's row, bytes, offset in a SpanRows row) per copied run
        self._segments: list[tuple[bool, int, int, int]] = []
        self._key: tuple[Any, ...] | None = None  # the scene and tracked set the binding holds
        self._thresholds_for: tuple[Any, float] | None = None  # the (config, substep dt) it holds
        self._data_address = 0  # the bound MjData's, which the callback matches while an episode is screened
        self._finalizer: weakref.finalize | None = None
        self._owners: tuple[Any, ...] = ()

    # ------------------------------------------------------------------ availability
    @classmethod
    def unavailable(cls, adapter: Any) -> str | None:
        """Why ``adapter``'s scene cannot be screened (None: it can)."""
        if cls.extension is None:
            return "the C extension _simuguard_mujoco_screen is not built"
        if os.environ.get("SIMUGUARD_NATIVE", "1") == "0":
            return "SIMUGUARD_NATIVE=0"
        if "split" in adapter.stepping:
            return "the env steps in halves (mj_step1, mj_step2): the callback runs before its mid-step writes"
        if "whole" not in adapter.stepping and not adapter.steps_whole():
            return "the env has not stepped under the hooks yet (they learn how it steps in its first episode)"
        current = mujoco.get_mjcb_control()
        if current is not None and current is not cls._callback:
            return "another control callback is installed"
        return None

    # ------------------------------------------------------------------ an episode
    def start_episode(self, tracked: np.ndarray, kinds: np.ndarray, config: Any, *, lookback: int,
                      steps_between_polls: int, refresh_every: int) -> bool:
        """Screen from substep 0 on, the tracked bodies' columns of kind 0 (tracked), 1 (watched
        object) or 2 (watched base), with the detector's thresholds (``config``: a
        :class:`~simuguard_gym.detection.DetectorConfig`); False (nothing bound) where the
        scene's memory cannot be bound, or the callback not installed."""
        self.stop()
        adapter = self.adapter
        # The ring holds the lookback and a few env steps (the most substeps one took so far).
        steps = max(steps_between_polls, int(self.binding.max_gap), adapter.substeps_per_step(), 1)
        capacity = int(lookback + 4 * steps + 64)
        key = (id(adapter.data), id(adapter.model), np.asarray(tracked).tobytes(), np.asarray(kinds).tobytes(),
               capacity, id(adapter.body_table()))
        if self._key != key:
            self.release()  # the callback's list holds the binding with the arrays its finalizer keeps
            if not self._bind_scene(key, tracked, kinds, capacity):
                return False
        b, a = self.binding, self._arrays
        if not b.contacts:  # located since (the scene's first contact)
            self.locate_contacts()
        dt = adapter.substep_dt
        if self._thresholds_for != (config, dt):  # a config is frozen: its thresholds, once per scene
            for name, value in {
                    "min_speed": config.min_speed, "dv_min": config.velocity_change_per_substep(dt),
                    "ratio": config.carrier_ratio, "max_speed": config.max_speed,
                    "max_penetration": config.max_penetration, "w_contact": config.substeps(config.contact_window, dt),
                    "w_carrier": config.substeps(config.carrier_window, dt)}.items():
                setattr(b, name, value)
            self._thresholds_for = (config, dt)
        # vel, speed0 and running: the callback sets them at the episode's first substep, from
        # the velocities MuJoCo computed of the state it starts from.
        a["last_touch"][:] = -(1 << 40)
        a["touching"][:] = 0
        b.base, b.current, b.current_time, b.seen, b.moved = adapter.step_counter(), -1, 0.0, 0, 0
        b.flagged, b.unreadable, b.npairs, b.pair_overflow, b.npending, b.npairs_told = -1, 0, 0, 0, 0, 0
        b.polled_at, b.ninputs, b.input_from, b.refresh_at = 0, 0, -1, refresh_every
        b.data = self._data_address  # the callback reads it from the next substep of this MjData on
        if self._attached:  # on the list since an earlier episode (see stop)
            if mujoco.get_mjcb_control() is None:  # cleared meanwhile (substep_screen checked no other is set)
                mujoco.set_mjcb_control(type(self)._callback)
            return True
        if not self._install():
            b.data = 0
            return False
        if not self.extension.attach(ctypes.addressof(b)):
            b.data = 0
            self._release()
            return False
        self._attached = True
        # A screen dropped without release() (an env never closed) must leave MuJoCo's callback
        # first: the finalizer holds the binding and its arrays until it has.
        self._finalizer = weakref.finalize(self, _detach, self.extension, b, self._arrays, self._owners)
        return True

    def _bind_scene(self, key: tuple[Any, ...], tracked: np.ndarray, kinds: np.ndarray, capacity: int) -> bool:
        """The addresses and arrays of the scene as it is bound now (once per MjData, tracked set
        and capacity)."""
        self._key = None
        adapter = self.adapter
        model, data = adapter.model, adapter.data
        rows = adapter.state_rows()
        counter, time = mujoco_memory.step_counter_address(data), mujoco_memory.time_address(data)
        if not isinstance(rows, SpanRows) or counter is None or not time:
            return False
        segments = self._segments_of(rows, adapter.state_layout())
        if len(segments) > MAX_SEGMENTS:
            return False
        sources = adapter.copy_sources()
        ncon = sources.count if sources is not None else mujoco_memory.ncon_address(data)
        if not ncon:
            return False
        n = len(tracked)
        table = adapter.body_table()
        pressed = np.array([r == "robot" for r in table.roles]) | np.array([k == "static" for k in table.kinds])
        body_col = np.full(model.nbody, -1, np.int32)
        body_col[tracked] = np.arange(n, dtype=np.int32)
        width = max(n, 1)
        a = self._arrays
        row_bytes = sum(nbytes for is_input, _, nbytes, _, _ in segments if not is_input)
        input_bytes = sum(nbytes for is_input, _, nbytes, _, _ in segments if is_input)
        # One buffer, in the order the callback reads them: it runs once a substep, between
        # MuJoCo's own passes over its memory, and finds what it reads in fewer lines and pages.
        packed = _packed({
            "tracked": ((width,), np.int32), "kind": ((width,), np.uint8), "touching": ((width,), np.uint8),
            "vel": ((width, 3), np.float64), "running": ((width,), np.float64), "speed0": ((width,), np.float64),
            "last_touch": ((width,), np.int64), "rootid": ((model.nbody,), np.int32),
            "body_col": ((model.nbody,), np.int32), "body_class": ((model.nbody,), np.uint8),
            "geom_body": ((model.ngeom,), np.int32), "input_of": ((capacity,), np.int64),
            "fastest": ((capacity, width), np.float64), "rows": ((capacity, max(row_bytes, 1)), np.uint8),
            "inputs": ((capacity, max(input_bytes, 1)), np.uint8), "pairs": ((PAIR_CAPACITY, 5), np.int64),
            "pair_depth": ((PAIR_CAPACITY,), np.float64), "pending": ((PENDING_CAPACITY, 3), np.float64)})
        a.update(packed)
        a["tracked"][:n], a["kind"][:n] = tracked, kinds
        a["rootid"][:], a["geom_body"][:], a["body_col"][:] = model.body_rootid, model.geom_bodyid, body_col
        a["body_class"][:] = table.robot_mask.astype(np.uint8) | (pressed.astype(np.uint8) << 1)
        dtype = adapter.contact_record_dtype
        b = self.binding
        for name, value in {
                "version": BINDING_VERSION, "data": 0, "step_count": counter, "time_src": time,
                "nsegments": len(segments), "nstate": sum(not seg[0] for seg in segments), "row_bytes": row_bytes,
                "input_bytes": input_bytes, "capacity": capacity, "ntracked": n,
                "cvel": data.cvel.ctypes.data, "xipos": data.xipos.ctypes.data, "subtree_com": data.subtree_com.ctypes.data,
                "ncon": ncon, "contacts": sources.records if sources is not None else 0, "stride": dtype.itemsize,
                "dist_offset": dtype.fields["dist"][1], "geom_offset": dtype.fields["geom"][1], "ngeom": model.ngeom,
                "nbody": model.nbody, "pair_cap": PAIR_CAPACITY, "pending_cap": PENDING_CAPACITY}.items():
            setattr(b, name, value)
        for name, array in packed.items():  # each is the binding's field of the same name
            setattr(b, name, array.ctypes.data)
        for i, (_, offset, nbytes, address, _) in enumerate(segments):  # the state's first (_segments_of)
            b.seg_src[i], b.seg_bytes[i], b.seg_offset[i] = address, nbytes, offset
        self._segments = [(is_input, offset, nbytes, at) for is_input, offset, nbytes, _, at in segments]
        self._rows, self._owners = rows, (data, model, sources)
        self._data_address = data._address
        self._qpos_at = next(c.offset for c in adapter.state_layout() if c.name == "qpos")
        self._key = key
        return True

    @staticmethod
    def _segments_of(rows: SpanRows, layout: list[Any]) -> list[tuple[bool, int, int, int, int]]:
        """The runs a ring row copies: (is an input, offset in its ring's row, bytes, source
        address, offset in a ``rows`` row), the integrated state's first."""
        ranges = rows.word_ranges(layout)
        inputs, state = np.zeros(rows.row_bytes // 8, bool), np.zeros(rows.row_bytes // 8, bool)
        state[0] = True  # the time
        for component, (lo, hi) in zip(layout, ranges.tolist()):
            (inputs if component.name in INPUT_COMPONENTS else state)[lo:hi] = True
        padding = ~(inputs | state)
        out: list[tuple[bool, int, int, int, int]] = []
        for is_input, words in ((False, state), (True, inputs)):
            offset = 0
            for address, nbytes, at in rows.word_runs(words, fill=padding, max_gap=_PADDING_WORDS):
                out.append((is_input, offset, nbytes, address, at))
                offset += nbytes
        return out

    def stop(self) -> None:
        """Screen nothing more this episode. The binding stays on the callback's list, matching
        no MjData (the callback, installed, passes it over) until the next :meth:`start_episode`
        of the scene: an episode costs no installing or listing."""
        self.binding.data = 0

    def release(self) -> None:
        """Off the callback's list; the callback goes once no screen is on it (the env closes)."""
        self.binding.data = 0
        if self._attached:
            self._attached = False
            if self._finalizer is not None:
                self._finalizer.detach()
            self.extension.detach(ctypes.addressof(self.binding))
            self._release()

    @property
    def running(self) -> bool:
        """Whether an episode is screened (from :meth:`start_episode` to :meth:`stop`)."""
        return self._attached and self.binding.data != 0

    @property
    def seen(self) -> int:
        """Substeps run this episode."""
        return int(self.binding.seen)

    @property
    def flagged(self) -> int:
        """The earliest marked substep since :meth:`clear_flag` (-1: none)."""
        return int(self.binding.flagged)

    def clear_flag(self) -> None:
        self.binding.flagged = -1

    def poll_call(self) -> tuple[Callable[[int], int], int]:
        """``(poll, address)``: ``poll(address)`` after each env step settles the last substep's
        contacts and tells, in bits, what needs the caller: 1 a substep is marked, 2 contacts could
        not be read, 4 a body pair has its first deep penetration, 8 the refresh is due
        (:meth:`refresh_after`). One C call: the one thing an env step pays when nothing happens."""
        return self.extension.poll, ctypes.addressof(self.binding)

    def quiet_step_call(self) -> Callable[[int, Any, dict[str, Any]], Any]:
        """``quiet_step(address, result, entry)`` (``address`` as :meth:`poll_call` gives it): an
        env step's result ``(obs, reward, terminated, truncated, info)`` as the monitor returns it
        where the episode goes on and the screen tells nothing new (``info`` copied, its
        ``"simuguard"`` entry ``entry`` with each list copied, merged into a copy of an inner
        wrapper's entry as :func:`~simuguard_gym.wrappers.info_key.with_simuguard` merges);
        poll()'s bits where the screen has work; None, before any poll, for a result that is not
        that case's (an episode that ends, an ``info`` that is no dict, or whose entry is no dict
        or has errors that are no list). One C call."""
        return self.extension.quiet_step  # type: ignore[no-any-return]

    def refresh_after(self, substeps: int) -> None:
        """Make poll() tell (8) once ``substeps`` more have run."""
        self.binding.refresh_at = self.binding.seen + max(int(substeps), 1)

    @property
    def unreadable(self) -> bool:
        return bool(self.binding.unreadable)

    @property
    def contacts_located(self) -> bool:
        return bool(self.binding.contacts)

    @property
    def deep_pairs(self) -> int:
        return int(self.binding.npairs) + int(self.binding.pair_overflow)

    def locate_contacts(self) -> bool:
        """Bind the contact records once the adapter has located them (a scene that had no
        contact when the episode started); True when bound."""
        b = self.binding
        if b.contacts:
            return True
        sources = self.adapter.copy_sources()
        if sources is None:
            return False
        b.ncon, b.contacts = sources.count, sources.records
        self._owners = (*self._owners, sources)
        b.unreadable = 0
        return True

    def settle(self) -> None:
        """Count the last substep's contacts now (between env steps: no call for it can follow)."""
        if self._attached:
            self.extension.settle(ctypes.addressof(self.binding))

    def end_state(self, k: int) -> None:
        """Screen the state substep ``k`` (the last run) ended in: MuJoCo's velocities for it are
        computed on a scratch MjData (the env's own is never touched)."""
        if k < 0 or self.binding.moved > k:
            return
        self.settle()
        adapter = self.adapter
        model, scratch = adapter.model, self._scratch()
        state = np.empty(adapter.state_size)
        adapter.read_state(state)
        mujoco.mj_setState(model, scratch, state, _INTEGRATION)
        mujoco.mj_kinematics(model, scratch)
        mujoco.mj_comPos(model, scratch)
        mujoco.mj_comVel(model, scratch)
        b = self.binding
        own = (b.cvel, b.xipos, b.subtree_com)
        b.cvel, b.xipos, b.subtree_com = scratch.cvel.ctypes.data, scratch.xipos.ctypes.data, \
            scratch.subtree_com.ctypes.data
        try:
            self.extension.screen_end(ctypes.addressof(b), k)
        finally:
            b.cvel, b.xipos, b.subtree_com = own

    def fastest(self, k: int) -> np.ndarray:
        """Per tracked column, the fastest it moved up to substep ``k`` (-1: the episode's start)."""
        a, b = self._arrays, self.binding
        if k < 0 or b.seen - k > b.capacity:
            return a["speed0"].copy()
        return a["fastest"][k % b.capacity, :b.ntracked].copy()

    def deep_flags(self, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """The deep-penetration flags so far, as the detector writes them."""
        b, a = self.binding, self._arrays
        out = []
        for (lo, hi, first, substeps, _), depth in zip(a["pairs"][:b.npairs].tolist(), a["pair_depth"][:b.npairs].tolist()):
            out.append({"kind": "deep_penetration", "bodies": [names[lo], names[hi]], "body_ids": [lo, hi],
                        "first_substep": first, "max_depth": depth, "substeps": substeps})
        return out

    def add_deep_flags(self, flags: list[dict[str, Any]]) -> None:
        """Count deep-penetration flags of substeps the callback could not read (the detector's,
        from their re-simulation) in the pair table, as settle_contacts() would have."""
        b, a = self.binding, self._arrays
        pairs, depth = a["pairs"], a["pair_depth"]
        for flag in flags:
            lo, hi = sorted(int(i) for i in flag["body_ids"])
            found = np.flatnonzero((pairs[:b.npairs, 0] == lo) & (pairs[:b.npairs, 1] == hi))
            if len(found):
                i = int(found[0])
                pairs[i, 2] = min(int(pairs[i, 2]), int(flag["first_substep"]))
            elif b.npairs == b.pair_cap:
                b.pair_overflow = 1
                continue
            else:
                i = int(b.npairs)
                pairs[i] = (lo, hi, int(flag["first_substep"]), 0, -1)
                depth[i] = 0.0
                b.npairs += 1
            pairs[i, 3] += int(flag["substeps"])
            depth[i] = max(float(depth[i]), float(flag["max_depth"]))

    # ------------------------------------------------------------------ re-simulation
    @property
    def oldest(self) -> int:
        """The oldest substep whose start state the ring still holds."""
        return max(0, int(self.binding.seen) - int(self.binding.capacity))

    def states(self, lo: int, hi: int) -> np.ndarray:
        """The states substeps ``lo`` to ``hi - 1`` started from (mj_getState's vectors)."""
        b = self.binding
        if lo < 0 or hi > b.seen or b.seen - lo > b.capacity:
            raise ValueError(f"substeps {lo}-{hi} are not in the ring ({b.seen} seen, {b.capacity} kept)")
        a, index = self._arrays, np.arange(lo, hi) % b.capacity
        assert self._rows is not None
        inputs = a["input_of"][index]
        if len(inputs) and inputs.min() < b.ninputs - b.capacity:
            raise ValueError(f"the inputs of substeps {lo}-{hi} are no longer in the ring")
        state, given = a["rows"][index], a["inputs"][inputs % b.capacity]
        full = np.zeros((len(index), self._rows.row_bytes), np.uint8)
        for is_input, offset, nbytes, at in self._segments:
            full[:, at:at + nbytes] = (given if is_input else state)[:, offset:offset + nbytes]
        return self._rows.states(full)

    def replay(self, lo: int, hi: int, make_tap: Callable[[Any, Callable[..., None]], Any],
               sink: Callable[..., None]) -> None:
        """Re-simulate substeps ``lo`` to ``hi - 1`` from their saved states on a scratch MjData,
        with a tap (``make_tap(scratch adapter, sink)``) around each; the tap's batches go to ``sink``."""
        if hi <= lo:
            return
        replayer, tap = self._replaying(make_tap, sink)
        model, scratch = replayer.model, replayer.data
        states = self.states(lo, hi)
        nq, nv = model.nq, model.nv
        at = self._qpos_at
        tap.start_episode()
        broken = 0
        for k, state in enumerate(states):
            if k and not (np.array_equal(scratch.qpos, state[at:at + nq])
                          and np.array_equal(scratch.qvel, state[at + nq:at + nq + nv])):
                broken += 1  # substep k did not start where k - 1 ended: written in between
            mujoco.mj_setState(model, scratch, state, _INTEGRATION)
            replayer.step(1)
        tap.drain()
        tap.active = False
        if broken > 1:
            # Between env steps an env may write the state (a teleport, once); a scene written
            # between most of its substeps is stepped in halves with the writes in the middle,
            # after the callback ran: the screen cannot serve it (the hooks can, from now on).
            self.adapter.stepping.add("split")
            raise ScreenDiverged(f"{broken} of {len(states) - 1} re-simulated substeps did not start where the one "
                                 "before ended: the env writes the state between substeps (mj_step1 and mj_step2?); "
                                 "the hooks watch it from the next episode")

    def _replaying(self, make_tap: Callable[[Any, Callable[..., None]], Any], sink: Callable[..., None]
                   ) -> tuple[Any, Any]:
        from simuguard_gym.engines.mujoco import MujocoAdapter

        adapter = self.adapter
        if self._replayer is None or self._replayer[0].model is not adapter.model:
            replayer = MujocoAdapter(adapter.model, mujoco.MjData(adapter.model))
            tap = make_tap(replayer, lambda *batch: self._replayer[2](*batch))
            replayer.hooks.add(tap)
            replayer.detach()  # its hooks run around replayer.step() only, never around the env's mj_step
            self._replayer = [replayer, tap, sink]
        replayer, tap = self._replayer[0], self._replayer[1]
        self._replayer[2] = sink
        replayer.set_body_table(adapter.body_table())
        return replayer, tap

    def _scratch(self) -> mujoco.MjData:
        scratch = self._arrays.get("scratch")
        if scratch is None or scratch.model is not self.adapter.model:  # type: ignore[attr-defined]
            scratch = mujoco.MjData(self.adapter.model)
            self._arrays["scratch"] = scratch  # type: ignore[assignment]
        return scratch  # type: ignore[return-value]

    # ------------------------------------------------------------------ the callback
    @classmethod
    def _install(cls) -> bool:
        current = mujoco.get_mjcb_control()
        if cls._callback is None:
            cls._callback = _CALLBACK_TYPE(cls.extension.callback_address())
        if current is None:
            mujoco.set_mjcb_control(cls._callback)
        elif current is not cls._callback:
            return False
        cls._running += 1
        return True

    @classmethod
    def _release(cls) -> None:
        cls._running -= 1
        if cls._running <= 0:
            cls._running = 0
            if mujoco.get_mjcb_control() is cls._callback:
                mujoco.set_mjcb_control(None)

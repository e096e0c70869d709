"""Schedules as action streams: which state is computed, uncomputed, reversed, when.

A schedule is written once, in Python, against a :class:`PlanBuilder` that speaks
in *time indices* (``fwd(t)`` makes state ``s[t+1]`` from ``s[t]``).  The builder
assigns each held state a storage *slot*, counts exactly what the schedule does
(forward, inverse and reverse steps, the most states held at once) and turns it
into rows of small integers, ``(op, t, a, b)``.  It is how a strategy without a compiled
generator (:mod:`revbench.checkpoint.actions`) is written: ``TimeLoop`` collects its rows,
turns them into actions (:func:`revbench.checkpoint.actions.from_rows`) and runs them in
the loop's kernel; the course and the tests count schedules with it.

The ops, for a step that writes a new state from the old one (*out-of-place*)
and for one that updates its state in place (*in-place*):

=========  ====================================  ===================================
op         out-of-place, slots ``a`` -> ``b``   in-place, slot ``a``
=========  ====================================  ===================================
``FWD``    ``b = 0``; ``step(b, a, t)``           ``step(a, t)``
``INV``    ``~step(b, a, t)``: uncompute ``b``    (none: in-place steps need no pebbles)
``REV``    reverse sweep of step ``t``: adjoint   reverse sweep of step ``t``: ``a``
           of ``a`` from that of ``b``;           goes back to ``s[t]``, its adjoint too;
           uncomputes ``b``                       ``b``: a stored ``s[t]`` to check it
                                                  against, or -1
``COPY``   ``b = a``                              ``b = a``
``LOSS``   value and adjoint of the loss at ``a``  the same
=========  ====================================  ===================================

Counting follows the contract (``experiments.md`` §7): a reverse step that starts
from the step's output is one reverse step and no forward step.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import numpy as np

FWD, INV, REV, COPY, LOSS = 0, 1, 2, 3, 4
OP_NAMES = ("forward", "inverse", "reverse", "copy", "loss")

#: rows per batch handed to the compiled driver (16 bytes a row)
BATCH_ROWS = 8192


@dataclass
class Counts:
    """What a schedule did, counted exactly as it was emitted."""

    forward_steps: int = 0
    inverse_steps: int = 0
    reverse_steps: int = 0
    peak_states: int = 0


class PlanBuilder:
    """Turns a schedule written in time indices into slot-level rows, counting as it goes.

    ``held`` maps each state index ``t`` that is currently stored to its slot.
    Slots are reused as soon as a state is dropped or uncomputed, so the number of
    slots a schedule needs is the most states it ever holds at once.
    """

    def __init__(self, inplace: bool, n_slots: int, emit: Callable[[np.ndarray], None],
                 batch_rows: int = BATCH_ROWS):
        self.inplace = inplace
        self.n_slots = n_slots
        self.held: dict[int, int] = {}
        self.free = list(range(n_slots - 1, -1, -1))
        self.rows = array("i")  # (op, t, a, b) flattened: 16 bytes a row, not a tuple
        self.emit = emit
        self.batch_rows = batch_rows
        self.counts = Counts()
        self.extra = 0  # slots held outside the schedule (the saved initial state of Reverse)
        self.saved_slot: int | None = None

    # -- slots ----------------------------------------------------------------------
    def _take(self, t: int) -> int:
        if t in self.held:
            raise AssertionError(f"schedule error: state {t} is already held")
        if not self.free:
            raise AssertionError(f"schedule error: more than {self.n_slots} states held")
        slot = self.free.pop()
        self.held[t] = slot
        self._note_peak()
        return slot

    def _note_peak(self) -> None:
        n = len(self.held) + self.extra
        if n > self.counts.peak_states:
            self.counts.peak_states = n

    def _slot(self, t: int) -> int:
        try:
            return self.held[t]
        except KeyError:
            raise AssertionError(f"schedule error: state {t} is not held") from None

    def _row(self, op: int, t: int, a: int, b: int) -> None:
        self.rows.extend((op, t, a, b))
        if len(self.rows) >= 4 * self.batch_rows:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.emit(np.frombuffer(self.rows, dtype=np.int32).reshape(-1, 4).copy())
            self.rows = array("i")

    # -- the schedule's vocabulary ----------------------------------------------------
    def start(self) -> int:
        """The initial state ``s[0]`` enters; returns its slot."""
        return self._take(0)

    def save_initial(self) -> int:
        """Keep a copy of ``s[0]`` aside (to measure how well ``Reverse()`` recovers it)."""
        slot = self.free.pop()
        self.extra += 1
        self._note_peak()
        self._row(COPY, 0, self._slot(0), slot)
        self.saved_slot = slot
        return slot

    def fwd(self, t: int, keep: bool) -> None:
        """Compute ``s[t+1]`` from ``s[t]``; ``keep`` holds on to ``s[t]`` as well."""
        self.counts.forward_steps += 1
        src = self._slot(t)
        if not self.inplace:
            dst = self._take(t + 1)
            self._row(FWD, t, src, dst)
            if not keep:
                self.drop(t)
        elif keep:
            dst = self._take(t + 1)
            self._row(COPY, t, src, dst)
            self._row(FWD, t, dst, 0)
        else:
            if t + 1 in self.held:
                raise AssertionError(f"schedule error: state {t + 1} is already held")
            self.held[t + 1] = self.held.pop(t)
            self._row(FWD, t, src, 0)

    def inv(self, t: int) -> None:
        """Uncompute ``s[t+1]`` by running the step's inverse from ``s[t]`` (out-of-place)."""
        assert not self.inplace, "in-place steps are never uncomputed by a schedule"
        self.counts.inverse_steps += 1
        self._row(INV, t, self._slot(t), self._slot(t + 1))
        self.drop(t + 1)

    def rev(self, t: int) -> None:
        """The reverse sweep of step ``t``: adjoint of ``s[t]`` from that of ``s[t+1]``."""
        self.counts.reverse_steps += 1
        if not self.inplace:
            self._row(REV, t, self._slot(t), self._slot(t + 1))
            self.drop(t + 1)
            return
        slot = self.held.pop(t + 1)
        # b: the slot of a stored s[t] (the driver checks the recovered state against it), or -1
        self._row(REV, t, slot, self.held.get(t, -1))
        if t in self.held:  # a stored copy of s[t] is exact: prefer it to the recovered one
            self.free.append(slot)
        else:
            self.held[t] = slot

    def drop(self, t: int) -> None:
        self.free.append(self.held.pop(t))

    def loss(self, t: int) -> None:
        self._row(LOSS, t, self._slot(t), 0)


@dataclass(frozen=True)
class Sweep:
    """Rows for ``t`` in ``range(start, stop, step)``: for each ``t``, one row per entry of
    ``ops``, each ``(op, a0, a1, b0, b1)`` meaning slots ``a = a0 + a1 t``, ``b = b0 + b1 t``."""

    ops: tuple[tuple[int, int, int, int, int], ...]
    start: int
    stop: int
    step: int = 1


@dataclass(frozen=True)
class FastPlan:
    """A regular schedule given as sweeps, generated with NumPy a batch at a time (no Python
    work per step), with its counts known in advance."""

    sweeps: tuple[Sweep, ...]
    counts: Counts
    saved_slot: int | None = None
    final_slot_of_s0: int | None = None

    def batches(self, batch_rows: int = BATCH_ROWS) -> Iterator[np.ndarray]:
        for sw in self.sweeps:
            per_t = max(1, batch_rows // len(sw.ops))
            ts = range(sw.start, sw.stop, sw.step)
            for i in range(0, len(ts), per_t):
                t = np.arange(ts[i], ts[min(i + per_t, len(ts)) - 1] + sw.step, sw.step,
                              dtype=np.int32)
                rows = np.empty((len(t), len(sw.ops), 4), dtype=np.int32)
                for j, (op, a0, a1, b0, b1) in enumerate(sw.ops):
                    rows[:, j, 0] = op
                    rows[:, j, 1] = t
                    rows[:, j, 2] = a0 + a1 * t
                    rows[:, j, 3] = b0 + b1 * t
                yield rows.reshape(-1, 4)


def store_all_fast(n: int, inplace: bool) -> FastPlan:
    """``store_all`` as sweeps: state ``s[t]`` lives in slot ``t``."""
    counts = Counts(forward_steps=n, reverse_steps=n, peak_states=n + 1)
    if inplace:  # copy s[t] into slot t+1, step it there; reverse from the stored s[t+1]
        fwd = Sweep(((COPY, 0, 1, 1, 1), (FWD, 1, 1, 0, 0)), 0, n)
        rev = Sweep(((REV, 1, 1, 0, 1),), n - 1, -1, -1)
    else:
        fwd = Sweep(((FWD, 0, 1, 1, 1),), 0, n)
        rev = Sweep(((REV, 0, 1, 1, 1),), n - 1, -1, -1)
    loss = Sweep(((LOSS, n, 0, 0, 0),), n, n + 1)
    return FastPlan((fwd, loss, rev), counts, None, 0)


def reverse_fast(n: int) -> FastPlan:
    """``reverse`` as sweeps: the working state in slot 0, the initial one kept in slot 1."""
    counts = Counts(forward_steps=n, reverse_steps=n, peak_states=2)
    sweeps = (Sweep(((COPY, 0, 0, 1, 0),), 0, 1), Sweep(((FWD, 0, 0, 0, 0),), 0, n),
              Sweep(((LOSS, 0, 0, 0, 0),), n, n + 1), Sweep(((REV, 0, 0, -1, 0),), n - 1, -1, -1))
    return FastPlan(sweeps, counts, 1, 0)


# --------------------------------------------------------------------------- #
# The schedules
# --------------------------------------------------------------------------- #
def forward_only(b: PlanBuilder, n: int) -> None:
    """``run()``: n steps, nothing kept."""
    for t in range(n):
        b.fwd(t, keep=False)


def store_all(b: PlanBuilder, n: int) -> None:
    for t in range(n):
        b.fwd(t, keep=True)
    b.loss(n)
    for t in range(n - 1, -1, -1):
        b.rev(t)


def reverse(b: PlanBuilder, n: int) -> None:
    """In place, no stored state: each earlier state comes back by running the step backwards.

    A copy of ``s[0]`` is kept aside, only to measure how well it comes back.
    """
    b.save_initial()
    for t in range(n):
        b.fwd(t, keep=False)
    b.loss(n)
    for t in range(n - 1, -1, -1):
        b.rev(t)


def periodic(b: PlanBuilder, n: int, every: int) -> None:
    """Every ``every``-th state kept; each segment recomputed from its start, then reversed."""
    for t in range(n):
        b.fwd(t, keep=(t % every == 0))
    b.loss(n)
    for a in range((n - 1) // every * every, -1, -every):
        end = min(a + every, n)
        for t in range(a, end - 1):
            b.fwd(t, keep=True)
        for t in range(end - 1, a - 1, -1):
            b.rev(t)


def from_actions(b: PlanBuilder, n: int, schedule: Iterable[tuple[int, int, int, int]]) -> None:
    """A compiled schedule's actions (:mod:`revbench.checkpoint.actions`, on slots of its
    own store) replayed on the builder, which places states in its own slots: a state is
    kept after the action that reads it only if a later action reads its slot before
    another overwrites it.  (So every schedule also runs row by row, and the plan tests
    check it there too.)"""
    from revbench.checkpoint.actions import FWD, INV, REV, SEED

    acts = list(schedule)
    read_later = [False] * len(acts)  # does the next action touching slot a read it?
    next_use: dict[int, bool] = {}  # slot -> its next action reads it (True) or kills it
    for k in range(len(acts) - 1, -1, -1):
        op, _, a, slot_b = acts[k]
        read_later[k] = next_use.get(a, False)
        if op == FWD:
            next_use[slot_b] = False  # overwritten
        elif op in (INV, REV):
            next_use[slot_b] = True  # read, then uncomputed
        next_use[a] = True
    content: dict[int, int] = {0: 0}  # slot -> the state the builder holds for it
    for k, (op, i, a, slot_b) in enumerate(acts):
        if op == FWD:
            old = content.pop(slot_b, None)
            if old is not None:
                b.drop(old)
            b.fwd(i, keep=read_later[k])
            if not read_later[k]:
                content.pop(a)
            content[slot_b] = i + 1
            continue
        if op == SEED:
            b.loss(n)
        elif op == INV:
            b.inv(i)
            content.pop(slot_b)
        elif op == REV:
            in_place_recovered = b.inplace and i not in b.held
            b.rev(i)
            content.pop(slot_b)
            if in_place_recovered:
                content[a] = i
        if not read_later[k] and content.get(a) is not None:
            b.drop(content.pop(a))


def revolve(b: PlanBuilder, n: int, snapshots: int) -> None:
    """Griewank's binomial schedule, as ``checkpoint_schedules`` plans it.

    ``MultistageCheckpointSchedule`` with RAM snapshots only gives the optimal
    number of forward steps and plans 10^5 steps in about a second (its ``Revolve``
    class is far slower); its ``n_advance`` runs as plain Python here
    (:func:`_library_plans`).  Its actions map onto the builder: ``Forward`` advances
    (keeping the states it marks as snapshots), ``Reverse`` runs reverse steps,
    ``Copy``/``Move`` restart from a snapshot (``Move`` frees it afterwards; for an in-place
    step only once its reverse step has run, so the recovered state is checked against it).
    """
    from checkpoint_schedules import (
        Copy,
        EndForward,
        EndReverse,
        Forward,
        Move,
        MultistageCheckpointSchedule,
        Reverse,
    )

    snaps: set[int] = set()
    moved: set[int] = set()
    with _library_plans():  # (the loop within: the planner is a generator)
        for action in MultistageCheckpointSchedule(n, snapshots, 0):
            if isinstance(action, Forward):
                if action.write_ics:
                    snaps.add(action.n0)
                for t in range(action.n0, action.n1):
                    last = t == action.n1 - 1
                    keep = t in snaps or (last and action.write_adj_deps and not b.inplace)
                    b.fwd(t, keep=keep)
            elif isinstance(action, Reverse):
                for t in range(action.n1 - 1, action.n0 - 1, -1):
                    b.rev(t)
                snaps -= moved
                moved.clear()
                # the state left at the front of the adjoint is recomputed when needed again
                for t in [t for t in b.held if t not in snaps and t != 0]:
                    b.drop(t)
            elif isinstance(action, Move):
                if b.inplace:  # keep it until reversed: the recovered state is checked against it
                    moved.add(action.n)
                else:
                    snaps.discard(action.n)
            elif isinstance(action, Copy):
                pass  # forward steps from a snapshot keep it: nothing to do
            elif isinstance(action, EndForward):
                b.loss(n)
            elif isinstance(action, EndReverse):
                break
            else:  # pragma: no cover - checkpoint_schedules grew a new action
                raise NotImplementedError(f"unexpected checkpoint_schedules action {action!r}")


_LIBRARY_LOCK = threading.Lock()


@contextmanager
def _library_plans() -> Iterator[None]:
    """checkpoint_schedules' multistage planner with its ``n_advance`` uncompiled.

    The planner is Python and calls ``n_advance``, a ``numba.njit`` function, once per
    ``Forward`` action: from Python, Numba's dispatch costs about what the arithmetic
    does (10^5 steps plan in about a second either way), but its first call compiles it
    (4-9 s, in every process: the library does not cache it).  Within the block the
    module's ``n_advance`` is its own Python function (``py_func``): the same code, the
    same plan."""
    import checkpoint_schedules.multistage as library

    with _LIBRARY_LOCK:
        compiled = library.n_advance
        python = getattr(compiled, "py_func", None)
        if python is None:  # (the library without Numba: already plain Python)
            yield
            return
        library.n_advance = python
        try:
            yield
        finally:
            library.n_advance = compiled


def _chunks(n: int, k: int) -> list[int]:
    """Boundaries (relative to the segment's start) of a k-ary split of n steps."""
    m = min(k, n)
    return [(i * n) // m for i in range(m + 1)]


def bennett(b: PlanBuilder, n: int, k: int) -> None:
    """Bennett's k-ary pebbling, then its reverse sweep (out-of-place steps).

    ``compute(a, e)`` goes from ``s[a]`` to ``s[e]`` the reversible way: k
    sub-segments computed in turn, then the k-1 intermediate boundaries
    *uncomputed* (the inverse step, not a deletion), leaving only ``s[a]`` and
    ``s[e]``.  ``undo(a, e, leaf)`` is exactly the reverse of ``compute``: with
    ``leaf = inv`` it uncomputes ``s[e]``; with ``leaf = rev`` it is the reverse
    sweep of AD, each step's adjoint run exactly once.  No state is ever discarded,
    so the whole gradient is a reversible computation.
    """

    def compute(a: int, e: int) -> None:
        if e - a == 1:
            b.fwd(a, keep=True)
            return
        m = [a + d for d in _chunks(e - a, k)]
        for i in range(len(m) - 1):
            compute(m[i], m[i + 1])
        for i in range(len(m) - 2, 0, -1):
            undo(m[i - 1], m[i], b.inv)

    def undo(a: int, e: int, leaf: Callable[[int], None]) -> None:
        if e - a == 1:
            leaf(a)
            return
        m = [a + d for d in _chunks(e - a, k)]
        for i in range(len(m) - 2):
            compute(m[i], m[i + 1])
        for i in range(len(m) - 1, 0, -1):
            undo(m[i - 1], m[i], leaf)

    # top level: the boundaries are kept through the loss (no uncompute-recompute)
    m = _chunks(n, k)
    for i in range(len(m) - 1):
        compute(m[i], m[i + 1])
    b.loss(n)
    for i in range(len(m) - 1, 0, -1):
        undo(m[i - 1], m[i], b.rev)


@cache
def _bennett_peak(n: int, k: int, kind: str) -> int:
    """Extra states held at once by ``compute`` / ``undo`` on a segment of n steps
    (beyond ``s[a]``, and ``s[e]`` for ``undo``): the slots Bennett needs."""
    if n == 1:
        return 1 if kind == "compute" else 0
    m = _chunks(n, k)
    sizes = [m[i + 1] - m[i] for i in range(len(m) - 1)]
    K = len(sizes)
    peak = 0
    if kind == "compute":
        for i in range(1, K + 1):
            peak = max(peak, (i - 1) + _bennett_peak(sizes[i - 1], k, "compute"))
        peak = max(peak, K)
        for i in range(K - 1, 0, -1):
            peak = max(peak, (i + 1) + _bennett_peak(sizes[i - 1], k, "undo"))
    else:
        for i in range(1, K):
            peak = max(peak, (i - 1) + _bennett_peak(sizes[i - 1], k, "compute"))
        for i in range(K, 0, -1):
            peak = max(peak, (i - 1) + _bennett_peak(sizes[i - 1], k, "undo"))
    return peak


def bennett_slots(n: int, k: int) -> int:
    """The most states Bennett's schedule holds at once, ``s[0]`` included."""
    m = _chunks(n, k)
    sizes = [m[i + 1] - m[i] for i in range(len(m) - 1)]
    K = len(sizes)
    peak = 1
    for i in range(1, K + 1):
        peak = max(peak, 1 + (i - 1) + _bennett_peak(sizes[i - 1], k, "compute"))
    for i in range(K, 0, -1):
        peak = max(peak, 1 + i + _bennett_peak(sizes[i - 1], k, "undo"))
    return peak

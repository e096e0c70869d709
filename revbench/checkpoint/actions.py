"""Schedules as compiled generators: the loop statement's (and later the drivers') plans.

A checkpointed loop inside reversible code (``for t in checkpointed(range(n), ...)``)
runs its schedule where its step runs: in the generated kernel, compiled by Numba, with
no Python per step and no table of rows in memory.  Each schedule here is a plain
Python generator -- Numba compiles generators in nopython mode -- that yields actions
``(op, i, a, b)`` on *slots* of a store of states:

=========  ===================================================================
op         meaning (``i``: the step's index, 0-based; ``s[i]``: the i-th state)
=========  ===================================================================
``FWD``    ``s[i+1]`` into slot ``b`` (cleared first) from ``s[i]`` in slot ``a``
``INV``    uncompute ``s[i+1]`` in slot ``b`` from ``s[i]`` in slot ``a``
``REV``    the reverse sweep of step ``i``: ``s[i]`` in ``a``, ``s[i+1]`` in ``b``,
           which it uncomputes; the adjoint moves from ``s[i+1]`` to ``s[i]``
``COPY``   copy ``s[i]`` from slot ``a`` to slot ``b`` (rows planned in Python)
``SEED``   the final state ``s[n]`` is in slot ``a``: the adjoint enters there
``ASK``    is there a step ``i``? (a ``while`` loop's condition, on slot ``a``)
``STORE``  copy ``s[i]`` from slot ``a`` to slot ``b`` of the second level (disk)
``LOAD``   copy ``s[i]`` from slot ``a`` of the second level to slot ``b``
=========  ===================================================================

Slot 0 holds ``s[0]`` from the start; a loop of no step has no action.
``*_slots(n, knob)`` is the size of the store each schedule needs, ``*_peak(n, knob)`` the
most states it holds at once.  The same generators run uncompiled under the Python
backend and in the tests, which replay them on symbols (:func:`simulate`) and count their
steps against the optima (``tests/test_checkpointed.py``); ``TimeLoop`` runs them in the
same kernels (:mod:`revbench.backends.loop_code`), its in-place steps too: a forward step
then copies ``s[i]`` from slot ``a`` into slot ``b`` (where they differ) and steps there, and
a reverse step turns ``s[i+1]`` in slot ``b`` back into ``s[i]``, checked against slot
``a`` where ``a >= 0``.  ``*_calibration`` time one kind of step, for the experiments' cost
model.
"""

from __future__ import annotations

import types

import numpy as np

FWD, INV, REV, COPY, SEED, ASK, STORE, LOAD = 0, 1, 2, 3, 4, 5, 6, 7

#: the functions of this module the schedules call: compiled with them under Numba
#: (:func:`revbench.backends.numba_backend.helper`)
NUMBA_CALLS = ("extra_steps", "_cost", "best_split", "bennett_bound", "new_pool", "take", "give",
               "revolve_segment", "online_actions", "multistage_weights", "multistage_storage",
               "_advance", "_on_disk", "revolve_slots", "two_level_slots", "multistage_slots")


# --------------------------------------------------------------------------- #
# StoreAll: every state kept, s[t] in slot t
# --------------------------------------------------------------------------- #
def store_all_slots(n, knob):
    return n + 1


def store_all_peak(n, knob):
    return n + 1


def store_all_actions(n, knob):
    if n == 0:  # (no step: nothing to schedule, the loop's kernel handles it)
        return
    for i in range(n):
        yield FWD, i, i, i + 1
    yield SEED, n, n, 0
    for i in range(n - 1, -1, -1):
        yield REV, i, i, i + 1


# --------------------------------------------------------------------------- #
# Periodic: every k-th state kept, each segment recomputed from its start
# --------------------------------------------------------------------------- #
def periodic_slots(n, k):
    return (n + k - 1) // k + min(k, n)


def periodic_peak(n, k):
    """The most states alive at once: all kept states, the final one and the last
    segment's; or, reversing the segment before it, the kept states up to it, its end and
    its k - 1 inner states."""
    q = (n + k - 1) // k
    last = n - (q - 1) * k
    return max(q + last, q + k - 1 if q >= 2 else 0)


def periodic_actions(n, k):
    """Slots: ``0..q-1`` the kept states ``s[0], s[k], ...``; ``q`` the final state;
    ``q+j`` the state ``j`` steps into a segment (the first sweep's working states use
    the first two of them)."""
    if n == 0:
        return
    q = (n + k - 1) // k
    final = q
    src = 0
    for i in range(n):
        if i + 1 == n:
            dst = final
        elif (i + 1) % k == 0:
            dst = (i + 1) // k
        elif src == q + 1:
            dst = q + 2
        else:
            dst = q + 1
        yield FWD, i, src, dst
        src = dst
    yield SEED, n, final, 0
    for a in range((q - 1) * k, -1, -k):
        e = min(a + k, n)
        src = a // k
        for i in range(a, e - 1):
            dst = q + (i - a + 1)
            yield FWD, i, src, dst
            src = dst
        for i in range(e - 1, a - 1, -1):
            here = a // k if i == a else q + (i - a)
            if i + 1 == n:
                after = final
            elif i + 1 == e:
                after = e // k
            else:
                after = q + (i + 1 - a)
            yield REV, i, here, after


# --------------------------------------------------------------------------- #
# Revolve: Griewank's binomial schedule, the fewest forward steps for c snapshots
# --------------------------------------------------------------------------- #
def extra_steps(steps, c):
    """Forward steps beyond one per step that reversing ``steps`` steps costs with ``c``
    snapshots (``s[0]``'s included): ``r * l - C(c + r, c + 1)`` with ``r`` the least
    repetition number for which ``C(c + r, c) >= l`` (Griewank & Walther, 2000)."""
    if steps <= 1:
        return 0
    r = 0
    beta = 1  # C(c + r, c)
    while beta < steps:
        r += 1
        beta = beta * (c + r) // r
    return r * steps - beta * r // (c + 1)


def _cost(steps, c, m):
    """Extra steps when the first snapshot goes ``m`` steps ahead."""
    return m + extra_steps(steps - m, c - 1) + extra_steps(m, c)


def best_split(steps, c):
    """An optimal distance to the next snapshot: the cost is convex in it, so the first
    place where it stops falling is a minimum (found by bisection)."""
    lo, hi = 1, steps - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _cost(steps, c, mid + 1) >= _cost(steps, c, mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def revolve_slots(n, c):
    return 2 if n <= 1 else min(c, n - 1) + 2


def revolve_peak(n, c):
    return revolve_slots(n, c)


def revolve_actions(n, c):
    """Slots: ``0`` holds ``s[0]``; the snapshots and the two states being advanced take
    the others, lowest free first (:func:`revolve_segment` on the whole loop)."""
    if n == 0:
        return
    c = min(c, max(n - 1, 1))
    pool = new_pool(c + 2)
    for j in range(c + 1, 0, -1):
        give(pool, j)
    # (Numba compiles no ``yield from``: the generators here yield in a loop)
    for action in revolve_segment(0, n, c, 0, -1, pool):  # noqa: UP028
        yield action


def new_pool(size):
    """A stack of free slots: ``pool[0]`` is how many, ``pool[1:]`` the slots (the one
    handed out next on top)."""
    return np.zeros(size + 1, np.int64)


def take(pool):
    pool[0] -= 1
    return pool[pool[0] + 1]


def give(pool, slot):
    pool[pool[0] + 1] = slot
    pool[0] += 1


def revolve_segment(a0, e0, c, base, last, pool):
    """Reverse steps ``a0 .. e0-1`` by Griewank's binomial schedule with ``c`` snapshots
    (``s[a0]``, in slot ``base``, included).  ``s[e0]`` is in slot ``last`` with the
    adjoint there, or, for ``last < 0``, is computed and seeded here (a whole loop).  The
    other snapshots and the two states being advanced take slots from ``pool``; all go
    back to it, and ``last``'s too once ``s[e0]`` is uncomputed (``s[a0]`` stays)."""
    if e0 == a0:
        return
    c = min(c, max(e0 - a0 - 1, 1))
    w0 = take(pool)
    w1 = take(pool)
    snap = np.zeros(c + 1, np.int64)  # the step index of each snapshot on the stack
    held = np.zeros(c + 1, np.int64)  # and its slot
    snap[0], held[0] = a0, base
    top = 0
    end = e0  # steps end-1, end-2, ... are still to reverse
    while end > a0:
        a = snap[top]
        steps = end - a
        free = c - top
        if steps > 1 and free > 1:
            m = best_split(steps, free)
            slot = take(pool)
            src = held[top]
            for j in range(m):
                if j == m - 1:
                    dst = slot
                elif src == w0:
                    dst = w1
                else:
                    dst = w0
                yield FWD, a + j, src, dst
                src = dst
            top += 1
            snap[top], held[top] = a + m, slot
            continue
        src = held[top]
        for j in range(steps - 1):
            dst = w1 if src == w0 else w0
            yield FWD, a + j, src, dst
            src = dst
        if end == e0 and last >= 0:
            yield REV, end - 1, src, last
            give(pool, last)
        else:
            dst = w1 if src == w0 else w0
            yield FWD, end - 1, src, dst
            if end == e0:
                yield SEED, e0, dst, 0
            yield REV, end - 1, src, dst
        end -= 1
        if top > 0 and end == snap[top]:
            give(pool, held[top])
            top -= 1
    give(pool, w1)
    give(pool, w0)


# --------------------------------------------------------------------------- #
# Online: loops whose length is known only when they end (``while``)
# --------------------------------------------------------------------------- #
def online_slots(n, c):
    """``c + 2``, or fewer for a loop known to be shorter (``n``: its length, or its
    ``max_steps``): a loop of ``n`` steps never holds more than ``n + 1`` states, in the
    slots ``0 .. n`` (``tests/test_checkpointed_while.py``)."""
    return c + 2 if n < 0 else min(c + 2, n + 2)


def online_peak(n, c):
    """The most states alive at once: every state while the loop is shorter than ``c``
    steps, else the whole store (the last segments' binomial reversal fills it)."""
    return n + 1 if n < c else c + 2


def online_actions(n, c, ended):
    """Checkpointing a loop whose length is known only when it ends, in ``c + 2`` slots.

    The forward sweep asks before each step whether there is one (``ASK``: the kernel
    evaluates the loop's condition on ``s[i]`` in slot ``a`` and sets ``ended[0]`` when
    it fails; for ``n >= 0`` the loop simply has ``n`` steps).  It keeps the states at
    the multiples of a stride: every state while ``c`` fit, then, whenever the kept states
    would exceed ``c // 2`` (at least 2), it doubles the stride and frees the states no
    longer on it -- so the kept states stay spread over the whole loop, however long,
    and each step runs once.  When the loop has ended, the segments between kept states
    are reversed last first, each by Griewank's binomial schedule
    (:func:`revolve_segment`) on the slots free by then (each finished segment frees its
    start).  Cost: ``n`` steps, then for segments of ``d <= 2 n / (c // 2)`` steps with at
    least ``c - c // 2`` snapshots each, the binomial optimum (``tests``:
    :func:`online_bound`)."""
    keep_cap = max(2, c // 2)
    pool = new_pool(c + 2)
    for j in range(c + 1, 0, -1):
        give(pool, j)
    pos = np.zeros(c + 2, np.int64)  # the kept states' step indices, increasing
    slot = np.zeros(c + 2, np.int64)  # and their slots
    m = 1  # kept states (s[0] in slot 0)
    stride = 1
    src = 0  # the slot of s[i]
    src_kept = True
    i = 0
    while True:
        if n >= 0:
            if i == n:
                break
        else:
            yield ASK, i, src, 0
            if ended[0]:
                break
        dst = take(pool)
        yield FWD, i, src, dst
        if not src_kept:
            give(pool, src)
        nxt = i + 1
        keep = nxt % stride == 0
        if keep:
            pos[m], slot[m] = nxt, dst
            m += 1
        while m > (c if stride == 1 else keep_cap):
            stride *= 2  # thin: keep only the multiples of the doubled stride
            kept = 0
            for j in range(m):
                if pos[j] % stride == 0:
                    pos[kept], slot[kept] = pos[j], slot[j]
                    kept += 1
                elif slot[j] == dst:
                    keep = False  # s[i+1] is the next step's input: freed after it
                else:
                    give(pool, slot[j])
            m = kept
        src, src_kept = dst, keep
        i += 1
    if i == 0:
        return
    yield SEED, i, src, 0
    if src_kept:
        m -= 1  # s[n] itself is kept: the end of the last segment, not a start
    else:
        pos[m], slot[m] = i, src
    for j in range(m - 1, -1, -1):
        for action in revolve_segment(pos[j], pos[j + 1], pool[0] - 1,  # noqa: UP028
                                      slot[j], slot[j + 1], pool):
            yield action


def online_known(n, c):
    """:func:`online_actions` for a loop of ``n`` steps known ahead (``TimeLoop``, and a
    ``for`` loop under ``Online``): the same schedule, without asking."""
    for action in online_actions(n, c, np.zeros(1, np.int64)):  # noqa: UP028
        yield action


def online_bound(n, c):
    """The forward steps :func:`online_actions` makes for a loop of ``n`` steps, from its
    rule alone: the stride ``d`` it ends with (the least power of two that spreads the
    states over ``c // 2`` kept ones, or 1 while ``c`` fit), then each segment's
    binomial optimum on the snapshots free when it is reversed."""
    if n == 0:
        return 0
    keep_cap = max(2, c // 2)
    d = 1
    if n + 1 > c:
        d = 2
        while n // d + 1 > keep_cap:
            d *= 2
    starts = range(0, n, d)
    free = c + 2 - len(starts) - 1  # slots left by the kept states and s[n]
    total = n
    end = n
    for a in reversed(starts):
        # (its start and end are held: a whole loop's count, less the step to its end)
        total += end - a - 1 + extra_steps(end - a, free - 1)
        end = a
        free += 1  # the segment's end state, uncomputed
    return total


# --------------------------------------------------------------------------- #
# Two levels: every k-th state on disk, each segment reversed by Revolve in RAM
# --------------------------------------------------------------------------- #
def two_level_slots(n, knob):
    """RAM slots: ``s[0]``, a segment's start and end, and what Revolve with ``c``
    snapshots needs besides its start (``c - 1`` snapshots, two states being advanced); for
    a shorter loop, no more than its ``n + 1`` states, in the slots ``0 .. n``."""
    return min(knob[1] + 4, n + 2)


def two_level_peak(n, knob):
    return min(n + 1, two_level_slots(n, knob))


def two_level_disk(n, knob):
    """States on the second level: ``s[k], s[2k], ...`` before ``s[n]``."""
    return max(0, (n - 1) // knob[0])


def two_level_actions(n, knob):
    """``knob = (k, c)``: the forward sweep stores every k-th state on the second level
    (``STORE``; ``s[0]`` stays in slot 0); then the segments are reversed last first, each
    loaded back (``LOAD``) and reversed by :func:`revolve_segment` with ``c`` snapshots
    (``c + 1`` for the first segment, whose start needs no slot of its own).  As ``checkpoint_schedules``'
    ``TwoLevelCheckpointSchedule`` with binomial snapshots in RAM (Pringle et al.): disk
    holds about n / k states, RAM c + 2, and each segment costs its binomial optimum."""
    if n == 0:
        return
    k = knob[0]
    c = knob[1]
    pool = new_pool(c + 4)
    for j in range(c + 3, 0, -1):
        give(pool, j)
    w0 = take(pool)
    w1 = take(pool)
    src = np.int64(0)  # (an int64, not a literal 0: Numba unifies the slots' types)
    for i in range(n):
        dst = w1 if src == w0 else w0
        yield FWD, i, src, dst
        src = dst
        if (i + 1) % k == 0 and i + 1 < n:
            yield STORE, i + 1, src, (i + 1) // k - 1
    yield SEED, n, src, 0
    give(pool, w0 if src == w1 else w1)  # the final state stays in src
    end = n
    last = src
    for j in range((n - 1) // k, -1, -1):
        a = j * k
        if j == 0:
            base = np.int64(0)
        else:
            base = take(pool)
            yield LOAD, a, j - 1, base
        for action in revolve_segment(a, end, pool[0] - 1, base, last, pool):  # noqa: UP028
            yield action
        end = a
        last = base


def two_level_bound(n, knob):
    """The forward steps of :func:`two_level_actions`: ``n``, then each segment's binomial
    count with the RAM slots left (its start and end are held)."""
    k = knob[0]
    c = knob[1]
    total = n
    end = n
    for j in range((n - 1) // k, -1, -1):
        a = j * k
        snapshots = c + 1 if j == 0 else c  # (s[0] has its own slot)
        total += end - a - 1 + extra_steps(end - a, snapshots)
        end = a
    return total


# --------------------------------------------------------------------------- #
# Multistage: binomial snapshots in RAM and on disk (Stumm & Walther), as
# checkpoint_schedules' MultistageCheckpointSchedule
# --------------------------------------------------------------------------- #
def _positional(fn, default):
    """``fn`` with its keyword-only last argument taken by position too (default
    ``default``): Numba cannot bind keyword-only arguments in compiled calls."""
    fn = getattr(fn, "py_func", fn)  # (checkpoint_schedules compiles it with Numba)
    fn = getattr(fn, "__wrapped__", fn)
    code = fn.__code__.replace(co_argcount=fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount,
                               co_kwonlyargcount=0)
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, (default,), fn.__closure__)
    copy.__doc__ = fn.__doc__
    return copy


def _advance(steps, snapshots):
    """How far the binomial schedule advances before its next snapshot: checkpoint_schedules'
    ``n_advance`` (Griewank & Walther's Algorithm 799, "maximum" trajectory).  This stand-in
    loads it on first use and replaces itself: the library imports Numba, which importing
    revbench does not (``Multistage.loop_schedule`` loads it before anything compiles)."""
    load_advance()
    return _advance(steps, snapshots)


def load_advance() -> None:
    """Put checkpoint_schedules' ``n_advance`` in the place of :func:`_advance`."""
    global _advance
    if _advance.__module__ == __name__:
        from checkpoint_schedules.multistage import n_advance

        _advance = _positional(n_advance, "maximum")


def multistage_weights(n, s):
    """How often each snapshot of the stack is written and read (its position's weight)
    in the binomial schedule of ``n`` steps with ``s`` snapshots, all in RAM: what
    ``checkpoint_schedules.multistage.allocate_snapshots`` counts to put the busiest
    positions in RAM.  The same control flow as :func:`multistage_actions`, without states."""
    w = np.zeros(max(s, 1), np.int64)
    if n <= 1:
        return w
    snap = np.zeros(max(s, 1), np.int64)
    top = 0
    i = 0
    while i < n - 1:
        w[top] += 1  # written
        snap[top] = i
        top += 1
        i += _advance(n - i, s - top + 1)
    for r in range(1, n):
        cp = snap[top - 1]
        w[top - 1] += 1  # read (copied or moved back)
        if cp == n - r - 1:
            top -= 1
            continue
        i = cp + _advance(n - r - cp, s - top + 1)
        while i < n - r - 1:
            w[top] += 1
            snap[top] = i
            top += 1
            i += _advance(n - r - i, s - top + 1)
    return w


def multistage_storage(n, knob):
    """``knob = (ram, disk)``: the snapshots the schedule has, and for each position of
    its stack whether it is on disk (1) or in RAM (0): the ``ram`` busiest positions in RAM
    (ties: the lower position), the others on disk -- ``allocate_snapshots`` with unit
    read and write weights, which Stumm & Walther (2009) show optimal."""
    ram = min(knob[0], max(n - 1, 0))
    disk = min(knob[1], max(n - 1, 0))
    if ram == 0 or disk == 0:
        s = disk if ram == 0 else ram
        on_disk = np.zeros(max(s, 1), np.int64)
        if ram == 0:
            on_disk[:] = 1
        return s, on_disk
    s = min(ram + disk, n - 1)
    w = multistage_weights(n, s)
    on_disk = np.ones(max(s, 1), np.int64)
    for _ in range(min(ram, s)):
        best = -1
        for p in range(s):
            if on_disk[p] == 1 and (best < 0 or w[p] > w[best]):
                best = p
        on_disk[best] = 0
    return s, on_disk


def _on_disk(on_disk, s):
    """How many of the first ``s`` positions are on disk (a loop: what the native code
    generator lowers inline, as it does the rest of this module)."""
    count = 0
    for p in range(s):
        count += on_disk[p]
    return count


def multistage_slots(n, knob):
    """RAM slots: the RAM snapshots, the two states being advanced, and one more for
    ``s[0]``'s slot while it is free (numbering)."""
    s, on_disk = multistage_storage(n, knob)
    return s - _on_disk(on_disk, s) + 3


def multistage_peak(n, knob):
    return min(n + 1, multistage_slots(n, knob) - 1)


def multistage_disk(n, knob):
    """States on the second level: the positions of the stack on disk."""
    s, on_disk = multistage_storage(n, knob)
    return _on_disk(on_disk, s)


def multistage_actions(n, knob):
    """The binomial schedule of ``checkpoint_schedules``' ``MultistageCheckpointSchedule``
    (its ``n_advance``, maximum trajectory) with each snapshot where
    :func:`multistage_storage` puts its position: a RAM snapshot keeps its slot, a disk
    snapshot is stored (``STORE``) and loaded back (``LOAD``) into a working slot.  Action
    for action the library's schedule (``tests/test_checkpoint_disk.py`` replays both)."""
    if n == 0:
        return
    s, on_disk = multistage_storage(n, knob)
    nram = s - _on_disk(on_disk, s)
    pool = new_pool(nram + 3)
    for j in range(nram + 2, 0, -1):
        give(pool, j)
    ndisk = s - nram
    dpool = new_pool(max(ndisk, 1))
    for j in range(ndisk - 1, -1, -1):
        give(dpool, j)
    snap = np.zeros(max(s, 1), np.int64)  # each snapshot's step
    where = np.zeros(max(s, 1), np.int64)  # and its slot (RAM or disk)
    top = 0
    cur = np.int64(0)  # the working state's slot
    kept = False  # is it a RAM snapshot's slot (kept after the next step)?
    i = 0
    end = n - 1  # advance to s[end], then its last step is reversed
    for r in range(n):
        if r > 0:  # the latest snapshot comes back: moved when it is s[end], else copied
            end = n - r - 1
            t = top - 1
            i = snap[t]
            if on_disk[t] == 1:
                cur = take(pool)
                yield LOAD, i, where[t], cur
                kept = False
            else:
                cur = where[t]
                kept = True
            if i == end:
                top -= 1
                if on_disk[t] == 1:
                    give(dpool, where[t])
                else:
                    kept = False
        copied = r > 0 and i < end  # (a copied snapshot: its first stretch takes no new one)
        while i < end:  # advance, taking a snapshot at the start of each stretch
            if copied:
                stop = i + _advance(end - i + 1, s - top + 1)
                copied = False
            else:
                stop = i + _advance(end - i + 1, s - top)
                if on_disk[top] == 1:
                    d = take(dpool)
                    yield STORE, i, cur, d
                    where[top] = d
                else:
                    where[top] = cur
                    kept = True
                snap[top] = i
                top += 1
            while i < stop:
                b = take(pool)
                yield FWD, i, cur, b
                if not kept:
                    give(pool, cur)
                cur = b
                kept = False
                i += 1
        b = take(pool)  # the last step of the stretch, kept for its reverse sweep
        yield FWD, end, cur, b
        if r == 0:
            yield SEED, n, b, 0
        yield REV, end, cur, b
        give(pool, b)
        if not kept:
            give(pool, cur)


# --------------------------------------------------------------------------- #
# Bennett: k-ary pebbling, intermediate states uncomputed by the inverse step
# --------------------------------------------------------------------------- #
_COMPUTE, _UNDO_INV, _UNDO_REV, _TOP = 0, 1, 2, 3


def bennett_bound(n, k):
    """Slots enough for Bennett's schedule: at most k boundary states per level of its
    recursion, and ``s[0]``.  (Slots are handed out lowest first, so the schedule uses
    only as many as it holds at once: ``plan.bennett_slots``.)"""
    depth = 1
    length = n
    while length > 1:
        length = (length + k - 1) // k
        depth += 1
    return 2 + k * (depth + 1)


def bennett_actions(n, k):
    """Bennett's pebbling (:func:`revbench.checkpoint.plan.bennett`, the same schedule),
    its recursion run on an explicit stack of frames: ``compute(a, e)`` makes ``s[e]``
    from ``s[a]`` through k sub-segments, then uncomputes their inner boundaries;
    ``undo(a, e)`` is its exact reverse, ending in the inverse step (``INV``) or, at the
    top level after the seed, the reverse sweep (``REV``).  Each frame keeps the slots of
    its segment's boundary states."""
    if n == 0:
        return
    cap = bennett_bound(n, k)
    free = np.zeros(cap, np.int64)  # a stack of free slots, lowest on top
    nfree = 0
    for j in range(cap - 1, 0, -1):
        free[nfree] = j
        nfree += 1
    depth = 72
    kind = np.zeros(depth, np.int64)
    lo = np.zeros(depth, np.int64)
    hi = np.zeros(depth, np.int64)
    parts = np.zeros(depth, np.int64)
    phase = np.zeros(depth, np.int64)
    at = np.zeros(depth, np.int64)
    slot = np.zeros((depth, k + 1), np.int64)  # the slots of the boundary states
    top = 0
    kind[0], lo[0], hi[0], parts[0] = _TOP, 0, n, min(k, n)
    ret = -1  # the slot of the state a finished compute() made
    while top >= 0:
        f = top
        a, e, K = lo[f], hi[f], parts[f]
        d = kind[f]
        if d == _COMPUTE and e - a == 1:
            nfree -= 1
            b = free[nfree]
            yield FWD, a, slot[f, 0], b
            ret = b
            top -= 1
            continue
        if d != _COMPUTE and d != _TOP and e - a == 1:
            yield (INV if d == _UNDO_INV else REV), a, slot[f, 0], slot[f, 1]
            free[nfree] = slot[f, 1]
            nfree += 1
            top -= 1
            continue
        if phase[f] == 0:  # compute the sub-segments in turn (undo: all but the last)
            i = at[f]
            if i > 0:
                slot[f, i] = ret
            last = K if d == _COMPUTE or d == _TOP else K - 1
            if i < last:
                at[f] = i + 1
                top += 1
                kind[top], phase[top], at[top] = _COMPUTE, 0, 0
                lo[top] = a + (i * (e - a)) // K
                hi[top] = a + ((i + 1) * (e - a)) // K
                parts[top] = min(k, hi[top] - lo[top])
                slot[top, 0] = slot[f, i]
                continue
            phase[f] = 1
            if d == _TOP:
                yield SEED, n, slot[f, K], 0
            at[f] = K - 1 if d == _COMPUTE else K
        i = at[f]  # phase 1: undo the sub-segments, last first
        if i >= 1:
            at[f] = i - 1
            top += 1
            kind[top] = _UNDO_INV if d == _COMPUTE or d == _UNDO_INV else _UNDO_REV
            phase[top], at[top] = 0, 0
            lo[top] = a + ((i - 1) * (e - a)) // K
            hi[top] = a + (i * (e - a)) // K
            parts[top] = min(k, hi[top] - lo[top])
            slot[top, 0] = slot[f, i - 1]
            slot[top, parts[top]] = slot[f, i]
            continue
        if d == _COMPUTE:
            ret = slot[f, K]
        top -= 1


# --------------------------------------------------------------------------- #
# Reverse: an in-place step run backwards, no state stored (TimeLoop's Reverse())
# --------------------------------------------------------------------------- #
def reverse_slots(n, knob):
    return 2


def reverse_peak(n, knob):
    return 2


def reverse_actions(n, knob):
    """In place: ``s[0]`` stays in slot 0, the loop steps in slot 1 and back again; the
    last reverse step recovers ``s[0]`` in slot 1, checked against slot 0 (how well
    running the steps backwards recovered the initial state: ``roundtrip_error``).  The
    other reverse steps have no stored state to check against (``a = -1``)."""
    if n == 0:
        return
    yield FWD, 0, 0, 1
    for i in range(1, n):
        yield FWD, i, 1, 1
    yield SEED, n, 1, 0
    for i in range(n - 1, 0, -1):
        yield REV, i, -1, 1
    yield REV, 0, 0, 1


# --------------------------------------------------------------------------- #
# Rows planned in Python (a strategy with only a PlanBuilder schedule)
# --------------------------------------------------------------------------- #
def planned_actions(n, rows):
    """The actions of rows planned in Python (:mod:`revbench.checkpoint.plan`), converted
    to this module's convention by :func:`from_rows`: ``rows`` is their knob."""
    for r in range(rows.shape[0]):
        yield rows[r, 0], rows[r, 1], rows[r, 2], rows[r, 3]


def from_rows(rows: np.ndarray, inplace: bool) -> np.ndarray:
    """A :class:`~revbench.checkpoint.plan.PlanBuilder`'s rows as actions.  Out of place
    they are the same; in place, the rows step in slot ``a`` and check a reverse step's
    result against ``b``, where an action steps from ``a`` into ``b`` and reverses in ``b``
    against ``a``."""
    out = np.asarray(rows, dtype=np.int64).copy()
    if inplace and out.size:
        op = out[:, 0]
        fwd, rev = op == FWD, op == REV
        out[fwd, 3] = out[fwd, 2]
        out[rev, 2], out[rev, 3] = rows[rev, 3], rows[rev, 2]
    return out


# --------------------------------------------------------------------------- #
# Calibration: one kind of step, many times, to time it inside the same driver
# --------------------------------------------------------------------------- #
def forward_calibration(n, steps):
    """``n`` forward steps of ``s[0]`` (slot 0) into slot 1: what one forward step costs
    (the step numbers cycle through the loop's ``steps``, which a step may index by)."""
    for i in range(n):
        yield FWD, i % steps, 0, 1


def reverse_calibration(n, steps):
    """``n`` pairs of a forward step and its reverse sweep (no adjoint enters, so every
    adjoint stays zero): one forward and one reverse step each."""
    for i in range(n):
        yield FWD, i % steps, 0, 1
        yield REV, i % steps, 0, 1


def inverse_calibration(n, steps):
    """``n`` pairs of a forward step and its inverse (out-of-place steps)."""
    for i in range(n):
        yield FWD, i % steps, 0, 1
        yield INV, i % steps, 0, 1


def simulate(actions, n: int, slots: int) -> dict[str, int]:
    """Run a schedule on symbols instead of states, checking that every action finds the
    states it needs where it says: the counts (``forward_steps``, ``inverse_steps``,
    ``reverse_steps``) and the most states alive at once (``peak_states``: a state is
    alive from the action that makes it to the last that reads it).  For the tests and
    the documentation; raises ``AssertionError`` on a wrong schedule."""
    held = [-1] * slots  # which s[i] each slot holds
    held[0] = 0
    counts = {"forward_steps": 0, "inverse_steps": 0, "reverse_steps": 0, "peak_states": 1,
              "loads": 0}
    disk: dict[int, int] = {}  # the second level: slot -> the state it holds
    adjoint_at = None
    # (the state each action reads or ends, and the one it makes: for the liveness pass)
    events: list[tuple[tuple[int, ...], int | None, int | None]] = []
    serial = [0] * slots  # a state's identity: (slot, how many times it was written)
    for op, i, a, b in actions:
        if op == FWD:
            assert held[a] == i, f"FWD {i}: slot {a} holds s[{held[a]}]"
            assert a != b, f"FWD {i}: reads and writes slot {a}"
            held[b] = i + 1
            serial[b] += 1
            events.append((((a, serial[a]),), (b, serial[b]), None))
            counts["forward_steps"] += 1
        elif op in (INV, REV):
            name = "INV" if op == INV else "REV"
            assert held[a] == i and held[b] == i + 1, f"{name} {i}: slots hold {held[a]}, {held[b]}"
            if op == REV:
                assert adjoint_at == i + 1, f"REV {i}: the adjoint is at s[{adjoint_at}]"
                adjoint_at = i
            held[b] = -1
            events.append((((a, serial[a]), (b, serial[b])), None, (b, serial[b])))
            counts["inverse_steps" if op == INV else "reverse_steps"] += 1
        elif op == STORE:
            assert held[a] == i, f"STORE {i}: slot {a} holds s[{held[a]}]"
            disk[b] = i
            events.append((((a, serial[a]),), None, None))
        elif op == LOAD:
            assert disk.get(a) == i, f"LOAD {i}: disk slot {a} holds s[{disk.get(a)}]"
            held[b] = i
            serial[b] += 1
            events.append(((), (b, serial[b]), None))
            counts["loads"] += 1
        elif op == SEED:
            assert i == n and held[a] == n, f"SEED: slot {a} holds s[{held[a]}]"
            adjoint_at = n
            events.append((((a, serial[a]),), None, None))
        else:
            raise AssertionError(f"unknown action {op}")
    assert adjoint_at == 0, f"the adjoint ends at s[{adjoint_at}], not s[0]"
    last_read: dict[tuple[int, int], int] = {}
    for k, (reads, _, _) in enumerate(events):
        for r in reads:
            last_read[r] = k
    alive = {(0, 0)}
    for k, (_, made, ended) in enumerate(events):
        if made is not None:
            alive.add(made)
        counts["peak_states"] = max(counts["peak_states"], len(alive))
        alive = {x for x in alive if last_read.get(x, -1) > k and x != ended}
    return counts

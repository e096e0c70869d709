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
``SEED``   the final state ``s[n]`` is in slot ``a``: the adjoint enters there
=========  ===================================================================

Slot 0 holds ``s[0]`` from the start; a loop of no step has no action.
``*_slots(n, knob)`` is the size of the store each schedule needs, ``*_peak(n, knob)`` the
most states it holds at once.  The same generators run uncompiled under the Python
backend and in the tests, which replay them on symbols (:func:`simulate`) and count their
steps against the optima (``tests/test_checkpointed.py``); ``TimeLoop`` runs them in its
compiled driver too.  ``*_calibration`` time one kind of step, for the experiments' cost
model.
"""

from __future__ import annotations

import numpy as np

FWD, INV, REV, SEED = 0, 1, 2, 4

#: the functions of this module the schedules call: compiled with them under Numba
#: (:func:`revbench.backends.numba_backend.helper`)
NUMBA_CALLS = ("extra_steps", "_cost", "best_split", "bennett_bound")


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
    """Slots: ``d`` holds the snapshot at depth ``d`` of the stack (``s[0]`` at 0); the
    two after the last snapshot hold the states being advanced."""
    c = min(c, max(n - 1, 1))
    w0 = c
    w1 = c + 1
    snap = np.zeros(c + 1, np.int64)  # the step index of each snapshot on the stack
    top = 0
    end = n  # steps end-1, end-2, ... are still to reverse
    while end > 0:
        a = snap[top]
        steps = end - a
        free = c - top
        if steps > 1 and free > 1:
            m = best_split(steps, free)
            src = top
            for j in range(m):
                if j == m - 1:
                    dst = top + 1
                elif src == w0:
                    dst = w1
                else:
                    dst = w0
                yield FWD, a + j, src, dst
                src = dst
            top += 1
            snap[top] = a + m
            continue
        src = top
        for j in range(steps - 1):
            dst = w1 if src == w0 else w0
            yield FWD, a + j, src, dst
            src = dst
        dst = w1 if src == w0 else w0
        yield FWD, end - 1, src, dst
        if end == n:
            yield SEED, n, dst, 0
        yield REV, end - 1, src, dst
        end -= 1
        if top > 0 and end == snap[top]:
            top -= 1


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
    counts = {"forward_steps": 0, "inverse_steps": 0, "reverse_steps": 0, "peak_states": 1}
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

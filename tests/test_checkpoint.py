"""``revbench.checkpoint``: TimeLoop and its strategies (``experiments.md`` §7).

* gradients: every strategy agrees with ``StoreAll()``, which agrees with NumPy
  (a forward loop and central finite differences), on both backends;
* counts: ``loop.stats`` exactly as the contract states them;
* schedules: every strategy's rows, simulated symbolically (no Numba), read and
  write the right states in the right slots (a hypothesis property);
* bad input: clear errors, and the caller's arrays never change;
* nothing silently wrong: ``Reverse()`` on chaotic dynamics raises (or reports a
  large ``roundtrip_error`` with checks off);
* ``loop.run`` and the on-disk cache of the compiled driver.
"""

from __future__ import annotations

import functools
import math
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import revbench
from revbench.checkpoint import (
    STRATEGIES,
    Bennett,
    InsufficientMemoryError,
    Online,
    Periodic,
    Reverse,
    Revolve,
    StoreAll,
    TimeLoop,
    actions,
)
from revbench.checkpoint import plan as plans
from revbench.checkpoint.strategies import INPLACE

optimal_steps_binomial = pytest.importorskip("checkpoint_schedules").optimal_steps_binomial


# --------------------------------------------------------------------------- #
# The loops under test, and their independent NumPy versions
# --------------------------------------------------------------------------- #
# Out-of-place: an array parameter w, a scalar dt, an int array m (no gradient),
# and the step number t, which changes both the value and the step's derivative.
OOP_SRC = """
def oop_step(u_new, u, t, dt, w, m):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * w[i] * np.sin(u[i]) * np.cos(0.1 * t) + 0.01 * m[i] * np.sin(0.1 * t)

def oop_loss(out, u, dt, w, m):
    for i in range(len(u)):
        out += w[i] * u[i] * u[i]
"""

# In-place leapfrog with two state arrays; t again in the derivative.
LEAP_SRC = """
def leap(q, p, t, h, k):
    for i in range(len(q)):
        p[i] -= h * k[i] * np.sin(q[i]) * np.cos(0.1 * t)
    for i in range(len(q)):
        q[i] += h * p[i]

def leap_energy(out, q, p, h, k):
    for i in range(len(q)):
        out += 0.5 * p[i] * p[i] + k[i] * q[i] * q[i]
"""

# Complex state and a complex scalar parameter.
CPLX_SRC = """
def cstep(z_new, z, t, c):
    for i in range(len(z)):
        z_new[i] += z[i] * c + 0.1 * np.sin(z[i]) + 0.01j * t

def closs(out, z, c):
    for i in range(len(z)):
        out += abs(z[i]) ** 2
"""

# A 2-D state.
GRID_SRC = """
def gstep(A_new, A, t, h):
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            A_new[i, j] += A[i, j] + h * np.cos(A[i, j] + 0.1 * t)

def gloss(out, A, h):
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            out += A[i, j] * A[i, j] * (i + 1)
"""

# The standard map: chaotic for K around 5 and above.
CHAOS_SRC = """
def standard_map(q, p, t, K):
    for i in range(len(q)):
        p[i] += K * np.sin(q[i])
    for i in range(len(q)):
        q[i] += p[i]

def chaos_loss(out, q, p, K):
    for i in range(len(q)):
        out += q[i] * q[i] + p[i] * p[i]
"""


@functools.cache
def _defs(source: str, backend: str, check: bool = True) -> dict:
    return revbench.define(textwrap.dedent(source), {"np": np}, backend=backend, check=check)


def oop_loop(backend, n_steps):
    f = _defs(OOP_SRC, backend)
    return TimeLoop(f["oop_step"], n_steps, loss=f["oop_loss"])


def leap_loop(backend, n_steps):
    f = _defs(LEAP_SRC, backend)
    return TimeLoop(f["leap"], n_steps, loss=f["leap_energy"], n_state=2, inplace=True)


def oop_args():
    return (np.array([0.3, -0.7, 1.1, 0.2]), 0.05, np.array([1.0, 0.5, -0.8, 2.0]),
            np.array([1, -2, 3, 4]))


def leap_args():
    return (np.array([0.4, -1.0, 0.9]), np.array([0.1, 0.3, -0.2]), 0.1,
            np.array([1.0, 0.7, 1.5]))


def np_oop(u0, dt, w, m, n):
    u = np.array(u0, dtype=float)
    for t in range(n):
        u = u + dt * w * np.sin(u) * np.cos(0.1 * t) + 0.01 * m * np.sin(0.1 * t)
    return (u,)


def np_oop_value(u0, dt, w, m, n):
    (u,) = np_oop(u0, dt, w, m, n)
    return float(np.sum(w * u * u))


def np_leap(q0, p0, h, k, n):
    q, p = np.array(q0, dtype=float), np.array(p0, dtype=float)
    for t in range(n):
        p = p - h * k * np.sin(q) * np.cos(0.1 * t)
        q = q + h * p
    return q, p


def np_leap_value(q0, p0, h, k, n):
    q, p = np_leap(q0, p0, h, k, n)
    return float(np.sum(0.5 * p * p + k * q * q))


def np_cplx_value(z0, c, n):
    z = np.array(z0, dtype=complex)
    for t in range(n):
        z = z * c + 0.1 * np.sin(z) + 0.01j * t
    return float(np.sum(np.abs(z) ** 2))


def np_grid_value(A0, h, n):
    A = np.array(A0, dtype=float)
    for t in range(n):
        A = A + h * np.cos(A + 0.1 * t)
    return float(np.sum(A * A * (np.arange(A.shape[0])[:, None] + 1)))


def fd_grads(value, args, eps=1e-6):
    """Central finite differences of ``value(*args)`` for every float (or complex) argument,
    scalar or array; None for int arrays.  Complex: dL/dRe + i dL/dIm (§4)."""

    def d(i, idx, delta):
        plus = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        minus = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        if idx is None:
            plus[i] = plus[i] + delta
            minus[i] = minus[i] - delta
        else:
            plus[i][idx] += delta
            minus[i][idx] -= delta
        return (value(*plus) - value(*minus)) / (2 * eps)

    out = []
    for i, a in enumerate(args):
        is_complex = np.iscomplexobj(a)
        if isinstance(a, np.ndarray):
            if a.dtype.kind in "iub":
                out.append(None)
                continue
            g = np.zeros(a.shape, dtype=complex if is_complex else float)
            for idx in np.ndindex(a.shape):
                g[idx] = d(i, idx, eps)
                if is_complex:
                    g[idx] += 1j * d(i, idx, 1j * eps)
            out.append(g)
        else:
            g = d(i, None, eps)
            out.append(g + 1j * d(i, None, 1j * eps) if is_complex else g)
    return tuple(out)


def assert_grads_close(got, want, rtol, atol=0.0):
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None, f"gradient {j}: expected None (an int parameter), got {g!r}"
            continue
        assert g is not None, f"gradient {j} is None"
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.shape == w.shape, (j, g)
        else:
            assert np.ndim(g) == 0, (j, g)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"gradient {j}")


def snapshot(args):
    return [(a, a.copy()) if isinstance(a, np.ndarray) else (a, a) for a in args]


def assert_unchanged(snap):
    for obj, before in snap:
        if isinstance(obj, np.ndarray):
            assert obj.dtype == before.dtype and obj.shape == before.shape
            np.testing.assert_array_equal(obj, before, err_msg="the caller's array changed")


def registered_strategies(n, inplace):
    """Each registered strategy that fits (``STRATEGIES``: one added to strategies.py is
    tested here with nothing to change), over its knob's edges: its least value and the
    next, a few small ones, ``n`` and beyond ``n``."""
    out = []
    for cls in STRATEGIES.values():
        if not cls.fits(inplace):
            continue
        if cls.knob_name is None:
            out.append(cls())
            continue
        values = {cls.knob_min, cls.knob_min + 1, 3, 5, 7, n, n + 1, n + 5}
        out += [cls(**{cls.knob_name: v}) for v in sorted(values) if v >= cls.knob_min]
    return out


def out_of_place_strategies(n):
    return registered_strategies(n, inplace=False)


def in_place_strategies(n):
    return registered_strategies(n, inplace=True)


STEPS = [1, 2, 3, 13, 40]


# --------------------------------------------------------------------------- #
# 1. Gradients
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("n", STEPS)
def test_out_of_place_store_all_matches_numpy(backend, n):
    loop = oop_loop(backend, n)
    args = oop_args()
    snap = snapshot(args)
    value, grads = loop.value_and_grad(*args, strategy=StoreAll())
    assert_unchanged(snap)
    assert isinstance(value, float)
    assert value == pytest.approx(np_oop_value(*args, n), rel=1e-12)
    assert_grads_close(grads, fd_grads(lambda *a: np_oop_value(*a, n), args), rtol=1e-6, atol=1e-8)
    assert grads[3] is None  # the int array parameter
    assert isinstance(grads[1], float)
    # the default strategy is StoreAll
    v2, g2 = loop.value_and_grad(*args)
    assert v2 == value and loop.stats.strategy == "StoreAll()"
    assert_grads_close(g2, grads, rtol=0)
    assert_grads_close(loop.grad(*args, strategy=StoreAll()), grads, rtol=0)


# (every strategy's compiled driver: on Numba in the slow suite, seconds each)
@pytest.mark.parametrize("backend", ["python", pytest.param("numba", marks=pytest.mark.slow)])
@pytest.mark.parametrize("n", STEPS)
def test_out_of_place_every_strategy_agrees(backend, n):
    loop = oop_loop(backend, n)
    args = oop_args()
    snap = snapshot(args)
    v_ref, g_ref = loop.value_and_grad(*args, strategy=StoreAll())
    for strategy in out_of_place_strategies(n):
        value, grads = loop.value_and_grad(*args, strategy=strategy)
        assert value == pytest.approx(v_ref, rel=1e-10), strategy
        assert_grads_close(grads, g_ref, rtol=1e-10, atol=1e-14)
        assert loop.stats.strategy == strategy.label
        assert_unchanged(snap)


@pytest.mark.parametrize("backend", ["python", pytest.param("numba", marks=pytest.mark.slow)])
@pytest.mark.parametrize("n", STEPS)
def test_in_place_every_strategy_agrees_and_matches_numpy(backend, n):
    loop = leap_loop(backend, n)
    args = leap_args()
    snap = snapshot(args)
    v_ref, g_ref = loop.value_and_grad(*args, strategy=StoreAll())
    assert v_ref == pytest.approx(np_leap_value(*args, n), rel=1e-12)
    assert_grads_close(g_ref, fd_grads(lambda *a: np_leap_value(*a, n), args),
                       rtol=1e-6, atol=1e-8)
    for strategy in in_place_strategies(n):
        value, grads = loop.value_and_grad(*args, strategy=strategy)
        assert value == pytest.approx(v_ref, rel=1e-10), strategy
        assert_grads_close(grads, g_ref, rtol=1e-10, atol=1e-13)
        assert_unchanged(snap)


# complex numbers are compiled by Numba, not by revbench's code generator (16 s)
@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.slow), "python"])
def test_complex_state_and_parameter(backend):
    f = _defs(CPLX_SRC, backend)
    n = 9
    loop = TimeLoop(f["cstep"], n, loss=f["closs"])
    args = (np.array([0.1 + 0.2j, 0.3 - 0.1j, -0.2 + 0.05j]), 0.9 + 0.1j)
    snap = snapshot(args)
    v_ref, g_ref = loop.value_and_grad(*args)
    assert v_ref == pytest.approx(np_cplx_value(*args, n), rel=1e-12)
    assert isinstance(g_ref[1], complex)
    assert_grads_close(g_ref, fd_grads(lambda *a: np_cplx_value(*a, n), args),
                       rtol=1e-6, atol=1e-8)
    for strategy in out_of_place_strategies(n):
        value, grads = loop.value_and_grad(*args, strategy=strategy)
        assert value == pytest.approx(v_ref, rel=1e-10)
        assert_grads_close(grads, g_ref, rtol=1e-10, atol=1e-14)
    assert_unchanged(snap)


def test_two_dimensional_state(backend):
    f = _defs(GRID_SRC, backend)
    n = 11
    loop = TimeLoop(f["gstep"], n, loss=f["gloss"])
    args = (np.arange(6.0).reshape(2, 3) / 6, 0.1)
    v_ref, g_ref = loop.value_and_grad(*args)
    assert v_ref == pytest.approx(np_grid_value(*args, n), rel=1e-12)
    assert g_ref[0].shape == (2, 3)
    assert_grads_close(g_ref, fd_grads(lambda *a: np_grid_value(*a, n), args),
                       rtol=1e-6, atol=1e-8)
    for strategy in (Periodic(every=4), Revolve(snapshots=2), Bennett(k=3)):
        value, grads = loop.value_and_grad(*args, strategy=strategy)
        assert value == pytest.approx(v_ref, rel=1e-10)
        assert_grads_close(grads, g_ref, rtol=1e-10, atol=1e-14)
        assert loop.stats.peak_bytes == loop.stats.peak_states * 6 * 8


def test_gradient_is_not_stale_between_calls(backend):
    """A second call with other inputs gives that call's gradient, not the first's."""
    loop = oop_loop(backend, 7)
    a1 = oop_args()
    a2 = (a1[0] * 0.5, 0.2, a1[2][::-1].copy(), a1[3])
    for strategy in (StoreAll(), Revolve(snapshots=2), Bennett(k=2)):
        loop.value_and_grad(*a1, strategy=strategy)
        v2, g2 = loop.value_and_grad(*a2, strategy=strategy)
        assert v2 == pytest.approx(np_oop_value(*a2, 7), rel=1e-12)
        assert_grads_close(g2, fd_grads(lambda *a: np_oop_value(*a, 7), a2), rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- #
# 2. Counts
# --------------------------------------------------------------------------- #
def _check_common_stats(stats, n, strategy, state_bytes):
    assert stats.n_steps == n
    assert stats.strategy == strategy.label
    assert stats.reverse_steps == n
    assert stats.peak_bytes == stats.peak_states * state_bytes
    assert stats.seconds > 0
    assert stats.forward_steps >= n
    if not isinstance(strategy, Reverse):
        assert stats.roundtrip_error == 0


@pytest.mark.parametrize("n", [1, 2, 3, 4, 10, 37])
def test_counts_out_of_place(backend, n):
    loop = oop_loop(backend, n)
    args = oop_args()
    state_bytes = args[0].nbytes
    for strategy in out_of_place_strategies(n):
        loop.value_and_grad(*args, strategy=strategy)
        s = loop.stats
        _check_common_stats(s, n, strategy, state_bytes)
        if isinstance(strategy, StoreAll):
            assert (s.forward_steps, s.inverse_steps, s.peak_states) == (n, 0, n + 1)
        elif isinstance(strategy, Periodic):
            e = strategy.every
            assert s.inverse_steps == 0
            assert s.forward_steps == 2 * n - math.ceil(n / e)
            assert s.peak_states <= min(n + 1, math.ceil(n / e) + min(e, n) + 1)
            if e == 1:
                assert (s.forward_steps, s.peak_states) == (n, n + 1)
        elif isinstance(strategy, Revolve):
            c = strategy.snapshots
            assert s.inverse_steps == 0
            assert s.forward_steps == optimal_steps_binomial(n, min(c, n - 1))
            assert s.peak_states <= c + 2
            assert s.peak_states <= n + 1
        elif isinstance(strategy, Bennett):
            # every state computed is uncomputed again: by the inverse or by the reverse sweep
            assert s.forward_steps == s.inverse_steps + s.reverse_steps
            # the k top-level segments are kept through the loss: with n <= k, nothing
            # is uncomputed (it is StoreAll); with more steps than that, something is
            if n > strategy.k:
                assert s.inverse_steps > 0
            else:
                assert (s.inverse_steps, s.peak_states) == (0, n + 1)
            assert s.peak_states == plans.bennett_slots(n, strategy.k)
            assert s.peak_states <= n + 1


@pytest.mark.parametrize("n", [1, 2, 3, 10, 37])
def test_counts_in_place(backend, n):
    loop = leap_loop(backend, n)
    args = leap_args()
    state_bytes = args[0].nbytes + args[1].nbytes
    for strategy in in_place_strategies(n):
        loop.value_and_grad(*args, strategy=strategy)
        s = loop.stats
        _check_common_stats(s, n, strategy, state_bytes)
        assert s.inverse_steps == 0
        if isinstance(strategy, StoreAll):
            assert (s.forward_steps, s.peak_states) == (n, n + 1)
        elif isinstance(strategy, Reverse):
            assert (s.forward_steps, s.peak_states) == (n, 2)
            assert 0 <= s.roundtrip_error < 1e-12
        elif isinstance(strategy, Revolve):
            c = strategy.snapshots
            assert s.forward_steps == optimal_steps_binomial(n, min(c, n - 1))
            assert s.peak_states <= c + 2
        elif isinstance(strategy, Periodic):
            assert s.forward_steps == 2 * n - math.ceil(n / strategy.every)


def test_bennett_memory_grows_slowly(backend):
    """Bennett's states grow like log T, StoreAll's like T (the point of the knob)."""
    n = 60
    loop = oop_loop(backend, n)
    loop.value_and_grad(*oop_args(), strategy=Bennett(k=2))
    assert loop.stats.peak_states <= 2 * math.ceil(math.log2(n)) + 2
    assert loop.stats.forward_steps > 2 * n  # it pays in time


def test_stats_before_any_call_and_per_call(backend):
    loop = oop_loop(backend, 5)
    assert loop.stats is None
    loop.value_and_grad(*oop_args(), strategy=Revolve(snapshots=1))
    first = loop.stats
    loop.value_and_grad(*oop_args(), strategy=StoreAll())
    assert loop.stats is not first and loop.stats.strategy == "StoreAll()"
    d = loop.stats.as_dict()
    for key in ("forward_steps", "inverse_steps", "reverse_steps", "peak_states", "peak_bytes",
                "seconds", "roundtrip_error"):
        assert key in d


# --------------------------------------------------------------------------- #
# 3. Schedules, simulated symbolically (no Numba)
# --------------------------------------------------------------------------- #
def simulate_rows(rows, n, inplace, n_slots, saved_slot=None, final_slot_of_s0=None):
    """Execute ``(op, t, a, b)`` rows on slots that hold *time indices*: slot -> t of s[t]
    (None: zero / nothing).  Asserts each row sees the states the driver assumes."""
    content: dict[int, int | None] = {0: 0}  # the executor loads s[0] into slot 0
    next_rev = n - 1
    loss_seen = False
    counts = {op: 0 for op in range(5)}
    for r, (op, t, a, b) in enumerate(rows.tolist()):
        where = f"row {r}: {plans.OP_NAMES[op] if 0 <= op < 5 else op} t={t} a={a} b={b}"
        assert 0 <= a < n_slots, where
        two_slots = op == plans.COPY or (not inplace and op in (plans.FWD, plans.INV, plans.REV))
        if two_slots:
            assert 0 <= b < n_slots and a != b, where
        counts[op] += 1
        if op == plans.FWD:
            assert 0 <= t < n, where
            assert content.get(a) == t, f"{where}: slot {a} holds {content.get(a)}, not s[{t}]"
            content[a if inplace else b] = t + 1
        elif op == plans.INV:
            assert not inplace, where
            assert 0 <= t < n, where
            assert content.get(a) == t and content.get(b) == t + 1, f"{where}: {content}"
            content[b] = None
        elif op == plans.REV:
            assert loss_seen, f"{where}: reverse step before the loss"
            assert t == next_rev, f"{where}: expected reverse step {next_rev}"
            next_rev -= 1
            if inplace:
                assert content.get(a) == t + 1, f"{where}: {content}"
                content[a] = t
            else:
                assert content.get(a) == t and content.get(b) == t + 1, f"{where}: {content}"
                content[b] = None
        elif op == plans.COPY:
            assert content.get(a) is not None, f"{where}: copies an empty slot"
            content[b] = content[a]
        elif op == plans.LOSS:
            assert not loss_seen, f"{where}: a second loss"
            loss_seen = True
            assert t == n and content.get(a) == n, f"{where}: {content}"
        else:
            raise AssertionError(f"{where}: unknown op")
    assert loss_seen, "no loss row"
    assert next_rev == -1, f"reverse steps {next_rev}..0 never ran"
    if saved_slot is not None:
        assert content.get(saved_slot) == 0, "the saved copy of s[0] was overwritten"
        assert final_slot_of_s0 is not None and final_slot_of_s0 != saved_slot
        assert content.get(final_slot_of_s0) == 0, "s[0] is not where the plan says it is"
    return counts


def build_plan(strategy, n, inplace, batch_rows):
    n_slots = strategy.slots(n, inplace)
    batches = []
    b = plans.PlanBuilder(inplace, n_slots, batches.append, batch_rows=batch_rows)
    assert b.start() == 0
    strategy.schedule(b, n)
    b.flush()
    assert all(x.shape[0] <= batch_rows + 1 and x.dtype == np.int32 for x in batches)
    rows = np.concatenate(batches) if batches else np.zeros((0, 4), np.int32)
    return b, rows, n_slots


def check_schedule(strategy, n, inplace, batch_rows):
    b, rows, n_slots = build_plan(strategy, n, inplace, batch_rows)
    counts = simulate_rows(rows, n, inplace, n_slots, b.saved_slot, b.held.get(0))
    c = b.counts
    assert counts[plans.FWD] == c.forward_steps
    assert counts[plans.INV] == c.inverse_steps
    assert counts[plans.REV] == c.reverse_steps == n
    assert counts[plans.LOSS] == 1
    assert 1 <= c.peak_states <= n_slots
    if isinstance(strategy, StoreAll):
        assert (c.forward_steps, c.peak_states) == (n, n + 1)
    elif isinstance(strategy, Reverse):
        assert (c.forward_steps, c.peak_states) == (n, 2)
    elif isinstance(strategy, Revolve):
        assert c.forward_steps == optimal_steps_binomial(n, min(strategy.snapshots, n - 1))
        assert c.peak_states <= strategy.snapshots + 2
    elif isinstance(strategy, Bennett):
        assert c.peak_states == plans.bennett_slots(n, strategy.k)
        assert c.forward_steps == c.inverse_steps + n
    elif isinstance(strategy, Periodic):
        assert c.forward_steps == 2 * n - math.ceil(n / strategy.every)
    elif isinstance(strategy, Online):
        assert c.forward_steps == actions.online_bound(n, strategy.snapshots)

    fast = strategy.fast_plan(n, inplace)
    if fast is not None:  # the NumPy-generated rows do the same as the builder's
        frows = np.concatenate(list(fast.batches(batch_rows)))
        fcounts = simulate_rows(frows, n, inplace, n_slots, fast.saved_slot,
                                fast.final_slot_of_s0 if fast.saved_slot is not None else None)
        assert fcounts == counts
        assert fast.counts == c
        assert fast.saved_slot == b.saved_slot


@st.composite
def strategy_and_kind(draw):
    inplace = draw(st.booleans())
    cls = draw(st.sampled_from([c for c in STRATEGIES.values() if c.fits(inplace)
                                and not hasattr(c, "disk_states")]))  # (rows: RAM only)
    if cls.knob_name is None:
        return cls(), inplace
    return cls(**{cls.knob_name: draw(st.integers(cls.knob_min, cls.knob_min + 19))}), inplace


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 200), sk=strategy_and_kind(), batch_rows=st.sampled_from([1, 3, 64, 8192]))
def test_schedules_property(n, sk, batch_rows):
    strategy, inplace = sk
    assert strategy.fits(inplace)
    check_schedule(strategy, n, inplace, batch_rows)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 200])
@pytest.mark.parametrize("inplace", [False, True])
def test_schedules_examples(n, inplace):
    """The same checks on fixed cases, with the edges (knob 1, knob >= n).  (A schedule
    with a disk level runs only compiled: test_checkpoint_disk.py checks it on symbols.)"""
    for strategy in registered_strategies(n, inplace):
        if hasattr(strategy, "disk_states"):
            continue
        check_schedule(strategy, n, inplace, batch_rows=5)


def test_simulator_catches_a_wrong_schedule():
    """The property test can fail: a schedule that reverses out of order is caught."""

    def bad(b, n):
        for t in range(n):
            b.fwd(t, keep=True)
        b.loss(n)
        b.rev(n - 1)
        b.counts.reverse_steps += 1
        b._row(plans.REV, 0, b.held[0], b.held[1])  # skips t = n - 2
        b.flush()

    rows = []
    b = plans.PlanBuilder(False, 6, rows.append)
    b.start()
    bad(b, 4)
    with pytest.raises(AssertionError, match="expected reverse step 2"):
        simulate_rows(np.concatenate(rows), 4, False, 6)


# --------------------------------------------------------------------------- #
# 4. Bad input
# --------------------------------------------------------------------------- #
def _one(source, backend, name):
    return revbench.define(textwrap.dedent(source), {"np": np}, backend=backend)[name]


def test_step_with_too_few_arguments(backend):
    f = _defs(OOP_SRC, backend)
    step = _one("""
        def short(u_new, u):
            for i in range(len(u)):
                u_new[i] += u[i]
        """, backend, "short")
    with pytest.raises(ValueError, match=r"short.*does not fit.*at least 3 arguments"):
        TimeLoop(step, 5, loss=f["oop_loss"])
    g = _defs(LEAP_SRC, backend)
    with pytest.raises(ValueError, match=r"leap.*in-place.*5 state argument.*at least 6 arguments"):
        TimeLoop(g["leap"], 5, loss=g["leap_energy"], n_state=5, inplace=True)


@pytest.mark.parametrize("body, name, role", [
    ("w[i] += 1.0", "w", "a parameter"),
    ("t += 1", "t", "the step number"),
    ("u[i] += dt", "u", "the old state"),
    ("bump(w[i])", "w", "a parameter"),  # through a call
])
def test_step_that_writes_what_it_may_not(backend, body, name, role):
    fns = revbench.define(textwrap.dedent(f"""
        def bump(x):
            x += 1.0

        def bad_step(u_new, u, t, dt, w):
            for i in range(len(u)):
                u_new[i] += u[i] * dt
            for i in range(len(u)):
                {body}

        def ok_loss(out, u, dt, w):
            for i in range(len(u)):
                out += u[i]
        """), {"np": np}, backend=backend)
    with pytest.raises(ValueError, match=rf"bad_step changes `{name}`.*{role}"):
        TimeLoop(fns["bad_step"], 5, loss=fns["ok_loss"])


def test_in_place_step_that_writes_a_parameter(backend):
    fns = revbench.define(textwrap.dedent("""
        def ip_bad(q, t, h):
            q[0] += h
            h += 1.0

        def ip_loss(out, q, h):
            out += q[0]
        """), {"np": np}, backend=backend)
    with pytest.raises(ValueError, match=r"changes `h`.*parameter.*only change its state"):
        TimeLoop(fns["ip_bad"], 5, loss=fns["ip_loss"], inplace=True)


def test_bad_losses(backend):
    f = _defs(OOP_SRC, backend)
    fns = revbench.define(textwrap.dedent("""
        def short_loss(out, u, dt):
            for i in range(len(u)):
                out += u[i]

        def writing_loss(out, u, dt, w, m):
            for i in range(len(u)):
                out += u[i]
            u[0] += 1.0
        """), {"np": np}, backend=backend)
    with pytest.raises(ValueError, match=r"short_loss.*does not fit.*loss\(out, u, dt, w, m\)"
                                         r".*5 arguments"):
        TimeLoop(f["oop_step"], 5, loss=fns["short_loss"])
    with pytest.raises(ValueError, match=r"writing_loss changes `u`.*only add into.*`out`"):
        TimeLoop(f["oop_step"], 5, loss=fns["writing_loss"])


def test_not_reversible_functions(backend):
    f = _defs(OOP_SRC, backend)
    with pytest.raises(TypeError, match="step must be a reversible function"):
        TimeLoop(lambda *a: None, 5, loss=f["oop_loss"])
    with pytest.raises(TypeError, match="loss must be a reversible function"):
        TimeLoop(f["oop_step"], 5, loss=None)


@pytest.mark.parametrize("n_steps", [0, -1, 2.5, True, "10", None])
def test_bad_n_steps(backend, n_steps):
    f = _defs(OOP_SRC, backend)
    with pytest.raises(ValueError, match=r"n_steps must be an int >= 1"):
        TimeLoop(f["oop_step"], n_steps, loss=f["oop_loss"])


def test_numpy_int_n_steps(backend):
    loop = oop_loop(backend, np.int64(4))
    assert loop.n_steps == 4 and type(loop.n_steps) is int
    loop.value_and_grad(*oop_args())
    assert loop.stats.forward_steps == 4


@pytest.mark.parametrize("n_state", [0, -2, 1.0, True])
def test_bad_n_state(backend, n_state):
    f = _defs(LEAP_SRC, backend)
    with pytest.raises(ValueError, match=r"n_state must be an int >= 1"):
        TimeLoop(f["leap"], 5, loss=f["leap_energy"], n_state=n_state, inplace=True)


def test_strategies_that_do_not_fit(backend):
    loop = oop_loop(backend, 5)
    args = oop_args()
    snap = snapshot(args)
    with pytest.raises(ValueError, match=r"Reverse\(\) does not fit an out-of-place loop.*"
                                         r"inplace=True.*StoreAll, Periodic, Revolve, Bennett"):
        loop.value_and_grad(*args, strategy=Reverse())
    ip = leap_loop(backend, 5)
    with pytest.raises(ValueError, match=r"Bennett\(k=2\) does not fit an in-place loop.*"
                                         r"StoreAll, Periodic, Revolve, Online, TwoLevel, Multistage, "
                                         r"Reverse"):
        ip.grad(*leap_args(), strategy=Bennett(k=2))
    assert_unchanged(snap)
    assert loop.stats is None and ip.stats is None  # failed calls record nothing


@pytest.mark.parametrize("make, words", [
    (lambda: Bennett(k=1), r"Bennett\(k=\.\.\.\) must be an int >= 2"),
    (lambda: Bennett(k=0), r"Bennett.*>= 2"),
    (lambda: Bennett(k=2.0), r"Bennett.*int"),
    (lambda: Bennett(k=True), r"Bennett.*int"),
    (lambda: Revolve(snapshots=0), r"Revolve\(snapshots=\.\.\.\) must be an int >= 1"),
    (lambda: Revolve(snapshots=-3), r"Revolve.*>= 1"),
    (lambda: Periodic(every=0), r"Periodic\(every=\.\.\.\) must be an int >= 1"),
    (lambda: Periodic(every=1.5), r"Periodic.*int"),
])
def test_bad_strategy_knobs(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_strategy_class_instead_of_instance(backend):
    loop = oop_loop(backend, 5)
    for cls in (StoreAll, Revolve):
        with pytest.raises(TypeError, match=rf"strategy object.*{cls.__name__}\(\).*not the class"):
            loop.value_and_grad(*oop_args(), strategy=cls)
    with pytest.raises(TypeError, match=r"strategy must be one of StoreAll, Periodic, Revolve"):
        loop.value_and_grad(*oop_args(), strategy="revolve")


def test_wrong_number_of_arguments(backend):
    loop = oop_loop(backend, 5)
    args = oop_args()
    snap = snapshot(args)
    with pytest.raises(TypeError, match=r"takes 4 arguments \(u, dt, w, m\).*got 3"):
        loop.value_and_grad(*args[:3])
    with pytest.raises(TypeError, match=r"takes 4 arguments.*got 5"):
        loop.grad(*args, 1.0)
    with pytest.raises(TypeError, match=r"takes 4 arguments.*got 2"):
        loop.run(*args[:2])
    ip = leap_loop(backend, 5)
    with pytest.raises(TypeError, match=r"takes 4 arguments \(q, p, h, k\)"):
        ip.value_and_grad(*leap_args()[1:])
    assert_unchanged(snap)


@pytest.mark.parametrize("bad", [0.5, [0.1, 0.2, 0.3, 0.4], np.array([1, 2, 3, 4]),
                                 np.float64(0.3), np.array(0.3), np.ones(4, np.float32)])
def test_bad_state(backend, bad):
    loop = oop_loop(backend, 5)
    _, dt, w, m = oop_args()
    with pytest.raises(TypeError, match=r"initial state `u` must be a float64.*NumPy array"):
        loop.value_and_grad(bad, dt, w, m)
    with pytest.raises(TypeError, match=r"initial state `u`"):
        loop.run(bad, dt, w, m)


def test_store_all_that_does_not_fit_in_memory_is_refused_before_allocating(backend):
    n_state = 10**4
    loop = oop_loop(backend, 10**9)
    args = (np.zeros(n_state), 0.01, np.ones(n_state), np.zeros(n_state, dtype=np.int64))
    snap = snapshot(args)
    with pytest.raises(InsufficientMemoryError, match=r"StoreAll\(\).*Revolve") as info:
        loop.value_and_grad(*args, strategy=StoreAll())
    # (revbench's refusal, before anything is allocated: NumPy's own MemoryError for the
    # 80 TB of states would be no ValueError)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ValueError)
    with pytest.raises(MemoryError, match="Revolve"):
        loop.value_and_grad(*args, strategy=Periodic(every=1))
    assert_unchanged(snap)
    ip = leap_loop(backend, 10**9)
    q = np.zeros(n_state)
    with pytest.raises(InsufficientMemoryError, match=r"Revolve.*Reverse\(\)"):
        ip.value_and_grad(q, q.copy(), 0.1, np.ones(n_state), strategy=StoreAll())


def test_read_only_and_non_contiguous_inputs(backend):
    loop = oop_loop(backend, 6)
    u0, dt, w, m = oop_args()
    v_ref, g_ref = loop.value_and_grad(u0, dt, w, m, strategy=Revolve(snapshots=2))
    u_ro, w_ro = u0.copy(), w.copy()
    u_ro.flags.writeable = False
    w_ro.flags.writeable = False
    v, g = loop.value_and_grad(u_ro, dt, w_ro, m, strategy=Revolve(snapshots=2))
    assert v == v_ref
    assert_grads_close(g, g_ref, rtol=0)
    # strided views
    u_big = np.zeros(8)
    u_big[::2] = u0
    w_big = np.zeros(8)
    w_big[1::2] = w
    v, g = loop.value_and_grad(u_big[::2], dt, w_big[1::2], m, strategy=Bennett(k=2))
    assert v == pytest.approx(v_ref, rel=1e-12)
    assert_grads_close(g, g_ref, rtol=1e-10)
    np.testing.assert_array_equal(u_big[1::2], 0)
    np.testing.assert_array_equal(w_big[::2], 0)


def test_results_do_not_alias_inputs(backend):
    loop = oop_loop(backend, 4)
    args = oop_args()
    _, g = loop.value_and_grad(*args)
    _, g2 = loop.value_and_grad(*args)
    assert g[0] is not args[0] and g[2] is not args[2]
    assert g[0] is not g2[0] and g[2] is not g2[2]
    g2[0][:] = 123.0
    assert not np.any(g[0] == 123.0)


# --------------------------------------------------------------------------- #
# 5. Nothing silently wrong: Reverse() on chaotic dynamics
# --------------------------------------------------------------------------- #
CHAOS_K, CHAOS_STEPS = 6.0, 300


def np_standard_map(q, p, K, n, backwards=False):
    q, p = q.copy(), p.copy()
    for _ in range(n):
        if backwards:
            q = q - p
            p = p - K * np.sin(q)
        else:
            p = p + K * np.sin(q)
            q = q + p
    return q, p


def chaos_args():
    return np.array([0.3, 1.7, -2.1]), np.array([0.2, -0.4, 0.9]), CHAOS_K


def test_chaos_is_real():
    """Independently of revbench: forward then backward in floating point does not come
    back, and nearby orbits separate."""
    q0, p0, K = chaos_args()
    q, p = np_standard_map(q0, p0, K, CHAOS_STEPS)
    qb, pb = np_standard_map(q, p, K, CHAOS_STEPS, backwards=True)
    assert max(np.abs(qb - q0).max(), np.abs(pb - p0).max()) > 1e-3
    q2, _ = np_standard_map(q0 + 1e-12, p0, K, CHAOS_STEPS)
    assert np.abs(q2 - q).max() > 1e-3
    # but a short loop does come back (Reverse() is fine there)
    q, p = np_standard_map(q0, p0, K, 3)
    qb, pb = np_standard_map(q, p, K, 3, backwards=True)
    assert max(np.abs(qb - q0).max(), np.abs(pb - p0).max()) < 1e-12


def test_reverse_on_chaotic_dynamics_raises(backend):
    f = _defs(CHAOS_SRC, backend)
    loop = TimeLoop(f["standard_map"], CHAOS_STEPS, loss=f["chaos_loss"], n_state=2, inplace=True)
    args = chaos_args()
    snap = snapshot(args)
    with pytest.raises(revbench.ReversibilityError,
                       match=r"Reverse\(\) did not recover.*standard_map.*`[qp]`.*"
                             r"Revolve.*StoreAll") as info:
        loop.value_and_grad(*args, strategy=Reverse())
    assert info.value.variable in ("q", "p")
    assert f"`{info.value.variable}`" in str(info.value)
    assert_unchanged(snap)
    # the strategies that store states still give the gradient
    v1, g1 = loop.value_and_grad(*args, strategy=StoreAll())
    v2, g2 = loop.value_and_grad(*args, strategy=Revolve(snapshots=4))
    assert np.isfinite(v1) and v1 == v2
    for a, b in zip(g1[:2], g2[:2]):
        assert np.all(np.isfinite(a)) and np.abs(a).max() > 1e6  # chaos: a huge gradient
        np.testing.assert_allclose(b, a, rtol=1e-10)
    q, p = np_standard_map(*args[:2], CHAOS_K, CHAOS_STEPS)
    assert v1 == pytest.approx(float(np.sum(q * q + p * p)), rel=1e-12)
    assert_unchanged(snap)
    # a short loop is fine with Reverse()
    short = TimeLoop(f["standard_map"], 3, loss=f["chaos_loss"], n_state=2, inplace=True)
    _, gs = short.value_and_grad(*args, strategy=Reverse())
    _, gr = short.value_and_grad(*args, strategy=StoreAll())
    assert_grads_close(gs, gr, rtol=1e-9)


def test_reverse_on_chaotic_dynamics_unchecked_reports_roundtrip_error(backend):
    f = _defs(CHAOS_SRC, backend, check=False)
    loop = TimeLoop(f["standard_map"], CHAOS_STEPS, loss=f["chaos_loss"], n_state=2, inplace=True)
    args = chaos_args()
    snap = snapshot(args)
    loop.value_and_grad(*args, strategy=Reverse())  # returns: no check to fail
    assert loop.stats.roundtrip_error > 1e-3
    assert loop.stats.peak_states == 2
    assert_unchanged(snap)
    loop.value_and_grad(*args, strategy=Revolve(snapshots=3))
    assert loop.stats.roundtrip_error == 0


def test_multiplicative_step_uncomputes_exactly_enough(backend):
    """``u_new *= a`` after adding to it: the inverse divides, which brings u_new back to
    zero only up to round-off; Bennett's checked uncomputation accepts that."""
    fns = revbench.define(textwrap.dedent("""
        def mul_step(u_new, u, t, a):
            for i in range(len(u)):
                u_new[i] += u[i] + 0.1
            for i in range(len(u)):
                u_new[i] *= a

        def mul_loss(out, u, a):
            for i in range(len(u)):
                out += u[i] * u[i]
        """), {"np": np}, backend=backend)
    n = 12
    loop = TimeLoop(fns["mul_step"], n, loss=fns["mul_loss"])
    args = (np.array([0.3, -0.2, 0.7]), 1.1)
    v_ref, g_ref = loop.value_and_grad(*args)
    u = args[0].copy()
    for _ in range(n):
        u = (u + 0.1) * 1.1
    assert v_ref == pytest.approx(float(np.sum(u * u)), rel=1e-12)
    v, g = loop.value_and_grad(*args, strategy=Bennett(k=2))
    assert loop.stats.inverse_steps > 0
    assert v == pytest.approx(v_ref, rel=1e-10)
    assert_grads_close(g, g_ref, rtol=1e-9)


def test_uncomputation_that_does_not_reach_zero_raises(backend):
    """White box: the kernel's check on an inverse step that does not bring the new
    state back to zero (here: the slot holds s[0], a copy, not s[1])."""
    from revbench.checkpoint.actions import COPY, FWD, INV, planned_actions
    from revbench.checkpoint.strategies import LoopSchedule

    loop = oop_loop(backend, 3)
    u0, dt, w, m = oop_args()
    ex = loop._executor([u0], [dt, w, m])
    schedule = LoopSchedule(planned_actions, None, None, uncomputes=True)
    wrong = np.array([[COPY, 0, 0, 1], [INV, 0, 0, 1]], dtype=np.int64)
    with pytest.raises(revbench.ReversibilityError,
                       match=r"inverse of oop_step at step t=0 did not bring the new state "
                             r"`u_new` back to zero.*StoreAll\(\)/Revolve\(\)") as info:
        ex.sweep(schedule, wrong, 2, "rows")
    assert info.value.variable == "u_new"
    right = np.array([[FWD, 0, 0, 1], [INV, 0, 0, 1]], dtype=np.int64)
    _, _, counts = ex.sweep(schedule, right, 2, "rows")  # s[1] uncomputed without complaint
    assert list(counts[:2]) == [1, 1]


def test_many_row_batches(backend):
    """Schedules longer than one batch of rows: scalar parameter adjoints carry over."""
    assert plans.BATCH_ROWS < 10_000
    n = 150
    loop = oop_loop(backend, n)
    args = oop_args()
    v_ref, g_ref = loop.value_and_grad(*args, strategy=StoreAll())
    v, g = loop.value_and_grad(*args, strategy=Revolve(snapshots=1))
    assert loop.stats.forward_steps > plans.BATCH_ROWS
    assert v == pytest.approx(v_ref, rel=1e-10)
    assert_grads_close(g, g_ref, rtol=1e-10)
    n = 4200
    ip = leap_loop(backend, n)
    q0, p0, _, k = leap_args()
    h = 0.01  # a stable trajectory over this many steps (0.1 is not)
    v, g = ip.value_and_grad(q0, p0, h, k, strategy=StoreAll())
    assert v == pytest.approx(np_leap_value(q0, p0, h, k, n), rel=1e-10)
    eps = 1e-7
    dh = (np_leap_value(q0, p0, h + eps, k, n) - np_leap_value(q0, p0, h - eps, k, n)) / (2 * eps)
    assert g[2] == pytest.approx(dh, rel=1e-5)
    v2, g2 = ip.value_and_grad(q0, p0, h, k, strategy=Reverse())
    assert v2 == v
    assert_grads_close(g2, g, rtol=1e-8)


TWO_STATE_SRC = """
def osc(x_new, v_new, x, v, t, h, c):
    for i in range(len(x)):
        v_new[i] += v[i] - h * c[i] * np.sin(x[i]) + 0.01 * np.cos(0.2 * t)
    for i in range(len(x)):
        x_new[i] += x[i] + h * v[i]

def osc_loss(out, x, v, h, c):
    for i in range(len(x)):
        out += x[i] * x[i] + 2.0 * v[i] * x[i]
"""


@pytest.mark.parametrize("backend", ["python", pytest.param("numba", marks=pytest.mark.slow)])
def test_two_state_out_of_place(backend):
    f = _defs(TWO_STATE_SRC, backend)
    n = 17
    loop = TimeLoop(f["osc"], n, loss=f["osc_loss"], n_state=2)
    args = (np.array([0.5, -0.3, 1.2]), np.array([0.0, 0.4, -0.1]), 0.1, np.array([1.0, 2.0, 0.5]))

    def forward(x, v, h, c, n):
        for t in range(n):
            x, v = x + h * v, v - h * c * np.sin(x) + 0.01 * np.cos(0.2 * t)
        return x, v

    def value(x, v, h, c):
        x, v = forward(x, v, h, c, n)
        return float(np.sum(x * x + 2.0 * v * x))

    snap = snapshot(args)
    v_ref, g_ref = loop.value_and_grad(*args)
    assert v_ref == pytest.approx(value(*args), rel=1e-12)
    assert_grads_close(g_ref, fd_grads(value, args), rtol=1e-6, atol=1e-8)
    for strategy in out_of_place_strategies(n):
        v, g = loop.value_and_grad(*args, strategy=strategy)
        assert v == pytest.approx(v_ref, rel=1e-10)
        assert_grads_close(g, g_ref, rtol=1e-10, atol=1e-14)
        assert loop.stats.peak_bytes == loop.stats.peak_states * 48
    out = loop.run(*args)
    for got, want in zip(out, forward(*args, n)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert_unchanged(snap)


# --------------------------------------------------------------------------- #
# 6. loop.run
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("n", [1, 17])
def test_run_out_of_place(backend, n):
    loop = oop_loop(backend, n)
    args = oop_args()
    snap = snapshot(args)
    out = loop.run(*args)
    assert isinstance(out, tuple) and len(out) == 1
    assert out[0] is not args[0]
    np.testing.assert_allclose(out[0], np_oop(*args, n)[0], rtol=1e-13, atol=1e-15)
    assert_unchanged(snap)


@pytest.mark.parametrize("n", [1, 17])
def test_run_in_place(backend, n):
    loop = leap_loop(backend, n)
    args = leap_args()
    snap = snapshot(args)
    out = loop.run(*args)
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0] is not args[0] and out[1] is not args[1]
    for got, want in zip(out, np_leap(*args, n)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert_unchanged(snap)
    again = loop.run(*args)
    for a, b in zip(out, again):
        np.testing.assert_array_equal(a, b)
        assert a is not b


def test_run_complex_and_two_dimensional(backend):
    f = _defs(GRID_SRC, backend)
    A0 = np.arange(6.0).reshape(2, 3) / 6
    (A,) = TimeLoop(f["gstep"], 5, loss=f["gloss"]).run(A0, 0.1)
    B = A0.copy()
    for t in range(5):
        B = B + 0.1 * np.cos(B + 0.1 * t)
    np.testing.assert_allclose(A, B, rtol=1e-13)
    g = _defs(CPLX_SRC, backend)
    z0 = np.array([0.1 + 0.2j, 0.3 - 0.1j])
    (z,) = TimeLoop(g["cstep"], 4, loss=g["closs"]).run(z0, 0.9 + 0.1j)
    w = z0.copy()
    for t in range(4):
        w = w * (0.9 + 0.1j) + 0.1 * np.sin(w) + 0.01j * t
    np.testing.assert_allclose(z, w, rtol=1e-13)


# --------------------------------------------------------------------------- #
# 7. The driver is loaded from the on-disk cache by a second process
# --------------------------------------------------------------------------- #
CACHE_SCRIPT = """
import time
t0 = time.perf_counter()
import numpy as np
import revbench
from revbench.checkpoint import TimeLoop, Revolve
f = revbench.define('''
def cache_step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i] + 0.01 * t)

def cache_loss(out, u, dt):
    for i in range(len(u)):
        out += u[i] * u[i]
''', {"np": np})
loop = TimeLoop(f["cache_step"], 20, loss=f["cache_loss"])
v, g = loop.value_and_grad(np.linspace(0.1, 0.5, 4), 0.03, strategy=Revolve(snapshots=3))
from revbench.backends.native import engine
print(repr(v), time.perf_counter() - t0, engine.stats["compiled"], engine.stats["loaded"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("native", ["1", "0"])
def test_second_process_loads_the_driver_from_disk(tmp_path, native):
    """The driver and its kernels, compiled by revbench's code generator (``native``) or by
    Numba (``REVBENCH_NATIVE=0``), are machine code a second process loads from disk."""
    env = dict(os.environ, REVBENCH_CACHE_DIR=str(tmp_path), REVBENCH_NATIVE=native)
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], env=env, capture_output=True,
                             text=True, timeout=600, check=True)
        value, _, compiled, loaded = out.stdout.split()
        runs.append((value, time.perf_counter() - t0, int(compiled), int(loaded)))
    assert runs[0][0] == runs[1][0]  # the same value
    drivers = [p for p in tmp_path.rglob("rbgen_*.py")
               if "seeded by its loss" in p.read_text().partition("\n")[0]]
    assert drivers, "no generated TimeLoop kernel in the cache"
    if native == "1":  # the second process compiles nothing: it loads the modules
        assert runs[0][2] >= 1 and runs[1][2] == 0 and runs[1][3] >= 1, runs
        assert list(tmp_path.rglob("native/*.o")), "no native machine code in the cache"
    else:
        for p in drivers:
            index = list((p.parent / "__pycache__").glob(f"{p.stem}.*__backward-*.nbi"))
            assert index, f"no Numba cache index for {p.name}"
    print("first and second process:", runs)  # (their times: for reading, not asserted)


def test_in_place_reverse_step_that_misses_the_stored_state_raises(make):
    """An in-place step that is reversible in exact arithmetic but not in floating point
    (adding 1e20 * p to an O(1) q loses q's digits): with a stored s[t] to compare with,
    the recovered state is checked, and the error names the state and the step."""
    step = make("""
        def lossy(q, p, t):
            for i in range(len(q)):
                q[i] += 1e20 * p[i]
            for i in range(len(q)):
                p[i] += q[i] * 1e-20
    """)
    loss = make("""
        def sq(out, q, p):
            for i in range(len(q)):
                out += q[i] * q[i] + p[i] * p[i]
    """)
    loop = TimeLoop(step, 3, loss=loss, n_state=2, inplace=True)
    q0, p0 = np.array([0.3, -0.7]), np.array([1.0, 2.0])
    for strategy in (StoreAll(), Revolve(snapshots=1), Periodic(every=2)):
        with pytest.raises(revbench.ReversibilityError, match=r"at step t=0 did not recover the state `q`"):
            loop.value_and_grad(q0, p0, strategy=strategy)
    assert np.array_equal(q0, [0.3, -0.7]) and np.array_equal(p0, [1.0, 2.0])


def test_a_step_and_a_loss_on_different_backends_work_together():
    """(A compiled driver cannot call the Python backend's loss: the loop then drives the
    compiled step from Python; it used to fail inside Numba's type inference.)"""
    src = ("def step(u_new, u, t, dt):\n    for i in range(len(u)):\n"
           "        u_new[i] += u[i] + dt * np.sin(u[i])\n"
           "def loss(out, u, dt):\n    for i in range(len(u)):\n        out += u[i] * u[i]\n")
    fns = {b: revbench.define(src, {"np": np}, backend=b) for b in ("python", "numba")}
    u0 = np.linspace(0.0, 1.0, 4)
    results = {}
    for sb, lb in (("numba", "python"), ("python", "numba"), ("numba", "numba")):
        loop = TimeLoop(fns[sb]["step"], n_steps=20, loss=fns[lb]["loss"])
        results[sb, lb] = loop.value_and_grad(u0, 0.01, strategy=Revolve(snapshots=3))
    ref = results["numba", "numba"]
    for key, (value, (g, gdt)) in results.items():
        assert value == pytest.approx(ref[0], rel=1e-14), key
        np.testing.assert_allclose(g, ref[1][0], rtol=1e-13)
        assert gdt == pytest.approx(ref[1][1], rel=1e-13)


def test_a_loop_the_settings_do_not_fit_says_which_settings_would(make):
    """An out-of-place step given ``inplace=True``, an in-place step of two arrays without
    ``n_state=2``: the refusal names the settings under which step and loss fit (it used to
    blame the loss, or fail typing the step with its step number as a state array)."""
    fns = make("""
def step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i])

def loss(out, u, dt):
    for i in range(len(u)):
        out += u[i] * u[i]

def leap(q, p, t, h):
    for i in range(len(q)):
        q[i] += h * p[i]

def energy(out, q, p, h):
    for i in range(len(q)):
        out += q[i] * q[i]
""", all=True)
    with pytest.raises(ValueError, match="with inplace=False, n_state=1 they would fit"):
        TimeLoop(fns["step"], 5, loss=fns["loss"], inplace=True)
    with pytest.raises(ValueError, match=r"passes the step number as `p`.*inplace=True, n_state=2"):
        TimeLoop(fns["leap"], 5, loss=fns["energy"], inplace=True)
    with pytest.raises(ValueError, match="must fit in int64"):
        TimeLoop(fns["step"], 2**63, loss=fns["loss"])
    # the right settings: an index error of mismatched states is named with its line
    loop = TimeLoop(fns["leap"], 5, loss=fns["energy"], inplace=True, n_state=2)
    q0, p0 = np.zeros(3), np.array([0.1, 0.2])
    for call in (lambda: loop.value_and_grad(q0, p0, 0.1, strategy=Revolve(snapshots=2)),
                 lambda: loop.run(q0, p0, 0.1)):
        with pytest.raises(IndexError) as info:
            call()
        text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
        assert "index 2 is out of bounds for axis 0 with size 2" in text
        assert "q[i] += h * p[i]" in text and "its first step (t=0)" in text
    np.testing.assert_array_equal(q0, 0.0)


def test_a_loss_that_changes_the_state_is_refused(make):
    fns = make("""
def step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] * dt

def loss(out, u, dt):
    u[0] += 1.0
    out += u[0]
""", all=True)
    with pytest.raises(ValueError, match="loss changes `u`: a loss may only add into its first "
                                         "argument `out`"):
        TimeLoop(fns["step"], 5, loss=fns["loss"])


# --------------------------------------------------------------------------- #
# TimeLoop is the loop statement followed by its loss
# --------------------------------------------------------------------------- #
STATEMENT_SRC = OOP_SRC + """
def as_statement(out, uT, u0, dt, w, m, n):
    for t in checkpointed(range(n), STRATEGY, new=uT, old=u0):
        oop_step(uT, u0, t, dt, w, m)
    oop_loss(out, uT, dt, w, m)
"""


@pytest.mark.parametrize("strategy", [StoreAll(), Revolve(snapshots=3), Bennett(k=2)],
                         ids=str)
def test_a_time_loop_is_the_loop_statement_and_its_loss(backend, strategy):
    """The same value and gradients as the statement's, bit for bit where the order of
    operations is the same; a gradient runs the schedule once (no forward run first)."""
    from revbench.checkpoint import checkpointed

    n = 13
    f = revbench.define(STATEMENT_SRC, {"np": np, "checkpointed": checkpointed,
                                        "STRATEGY": strategy}, backend=backend)
    u0, dt, w, m = oop_args()
    (out, _, _, _, _, _, _), grads = revbench.value_and_grad(
        f["as_statement"], loss="out", wrt=("u0", "dt", "w"))(0.0, np.zeros(4), u0, dt, w, m, n)
    loop = TimeLoop(f["oop_step"], n, loss=f["oop_loss"])
    value, (g_u0, g_dt, g_w, g_m) = loop.value_and_grad(u0, dt, w, m, strategy=strategy)
    assert value == pytest.approx(out, rel=1e-14)
    np.testing.assert_allclose(g_u0, grads[2], rtol=1e-12)
    assert g_dt == pytest.approx(grads[3], rel=1e-12)
    np.testing.assert_allclose(g_w, grads[4], rtol=1e-12)
    assert g_m is None  # (an int parameter)
    schedule = strategy.loop_schedule()
    counted = actions.simulate(schedule.actions(n, schedule.knob), n,
                               schedule.slots(n, schedule.knob))
    assert loop.stats.forward_steps == counted["forward_steps"]


# --------------------------------------------------------------------------- #
# Strategies of one's own, planned in Python
# --------------------------------------------------------------------------- #
def _keep_all(b, n):
    for t in range(n):
        b.fwd(t, keep=True)


@pytest.mark.parametrize("mistake, said", [
    ("no rev(0)", "runs 4 reverse step"),
    ("no loss", "takes the loss 0 time"),
    ("loss twice", "takes the loss 2 time"),
    ("loss of s[n-1]", "takes the loss of s[4], not of the final state s[5]"),
    ("revs first to last", "schedule error: state 1 is not held"),
])
def test_a_schedule_of_ones_own_that_would_give_a_wrong_gradient_is_refused(mistake, said):
    """The rows a strategy plans in Python are checked: the loss of s[n] once, then every
    step reversed once, last to first (a schedule without its last reverse step gave a zero
    gradient of the initial state, silently)."""
    from dataclasses import dataclass

    from revbench.checkpoint import ScheduleError, Strategy

    @dataclass(frozen=True, repr=False)
    class Careless(Strategy):
        """Keeps every state, and makes one mistake."""

        def slots(self, n, inplace):
            return n + 1

        def schedule(self, b, n):
            _keep_all(b, n)
            if mistake == "revs first to last":
                b.loss(n)
                for t in range(n):
                    b.rev(t)
                return
            if mistake != "no loss":
                b.loss(n - 1 if mistake == "loss of s[n-1]" else n)
            if mistake == "loss twice":
                b.loss(n)
            for t in range(n - 1, 0 if mistake == "no rev(0)" else -1, -1):
                b.rev(t)

    loop = oop_loop("python", 5)
    with pytest.raises(ScheduleError, match=f"schedule of Careless\\(\\) is not valid for a loop "
                                            f"of 5 steps: .*{re.escape(said)}"):
        loop.value_and_grad(*oop_args(), strategy=Careless())


def test_a_strategy_of_ones_own_that_changes_is_planned_again():
    """A plan is remembered only for a strategy that cannot change (a frozen dataclass): a
    plain class's settings may differ at the next call, and a plain dataclass is not even
    hashable."""
    from dataclasses import dataclass

    from revbench.checkpoint import Strategy

    class Every(Strategy):
        """Checkpoints every k steps (a plain class)."""

        def __init__(self, k):
            self.k = k

        def slots(self, n, inplace):
            return Periodic(every=self.k).slots(n, inplace)

        def schedule(self, b, n):
            plans.periodic(b, n, self.k)

    @dataclass(repr=False)
    class EveryDC(Every):
        """Checkpoints every k steps (a dataclass that is not frozen)."""

        k: int = 2

    loop = oop_loop("python", 20)
    args = oop_args()
    _, want = loop.value_and_grad(*args, strategy=StoreAll())
    s = Every(5)
    for k in (5, 2, 5):
        s.k = k
        _, got = loop.value_and_grad(*args, strategy=s)
        b = plans.PlanBuilder(False, s.slots(20, False), lambda rows: None)
        b.start()
        plans.periodic(b, 20, k)
        assert loop.stats.forward_steps == b.counts.forward_steps  # (this k's plan, not the last)
        assert_grads_close(got, want, rtol=1e-12)
    _, got = loop.value_and_grad(*args, strategy=EveryDC(3))
    assert_grads_close(got, want, rtol=1e-12)


@pytest.mark.parametrize("strategy", [Online(snapshots=10**6),
                                      revbench.checkpoint.TwoLevel(period=3, snapshots=10**6)],
                         ids=lambda s: type(s).__name__)
def test_more_snapshots_than_steps_hold_no_more_than_the_steps(strategy):
    """Online and TwoLevel size their store by the loop's length where it is shorter than
    their snapshots (they allocated c + 2 states: a 10-step loop was refused as needing
    74 GiB, or took seconds and gigabytes)."""
    schedule = strategy.loop_schedule()
    assert schedule.slots(10, schedule.knob) == strategy.slots(10, False) == 12
    loop = oop_loop("python", 10)
    args = oop_args()
    _, want = loop.value_and_grad(*args, strategy=StoreAll())
    _, got = loop.value_and_grad(*args, strategy=strategy)
    assert_grads_close(got, want, rtol=1e-12)


def test_an_index_error_at_a_later_step_names_its_line(backend):
    """Compiled code's IndexError has no line: a TimeLoop replays the loop on the Python
    backend, which names the line, the index and the size (only the first step was tried
    on its own, which does not fail here)."""
    f = _defs("""
    def wstep(u_new, u, t, dt, W):
        for i in range(len(u)):
            u_new[i] += u[i] + dt * W[t]

    def wloss(out, u, dt, W):
        for i in range(len(u)):
            out += u[i] * u[i]
    """, backend)
    loop = TimeLoop(f["wstep"], 6, loss=f["wloss"])
    for call in (loop.run, loop.grad):
        with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3") \
                as info:
            call(np.ones(4), 0.1, np.ones(3))
        assert any("u_new[i] += u[i] + dt * W[t]" in note for note in info.value.__notes__)


# -- one schedule per strategy ------------------------------------------------------------
def _counts(inplace: bool, slots: int, write) -> tuple[int, int, int, int]:
    b = plans.PlanBuilder(inplace, slots, lambda rows: None)
    b.start()
    write(b)
    b.flush()
    c = b.counts
    return c.forward_steps, c.inverse_steps, c.reverse_steps, c.peak_states


@pytest.mark.parametrize("n", [1, 2, 7, 30, 101])
@pytest.mark.parametrize("strategy, twin", [
    (StoreAll(), lambda b, n: plans.store_all(b, n)),
    (Periodic(every=4), lambda b, n: plans.periodic(b, n, 4)),
    (Revolve(snapshots=3), lambda b, n: plans.revolve(b, n, 3)),  # checkpoint_schedules' own
    (Bennett(k=3), lambda b, n: plans.bennett(b, n, 3)),
])
def test_a_library_strategys_schedule_is_its_compiled_generators(n, strategy, twin):
    """A library strategy has one schedule, its compiled generator (``actions``): what the
    experiments count and the plots draw is those actions replayed on the builder.  They make
    the steps of the builder-written plan of the same strategy (for Revolve, the plan of
    checkpoint_schedules' MultistageCheckpointSchedule), held here as an independent
    reference: the same forward, inverse and reverse steps."""
    for inplace in [k == INPLACE for k in strategy.kinds]:
        slots = strategy.slots(n, inplace) + 2
        got = _counts(inplace, slots, lambda b: strategy.schedule(b, n))
        want = _counts(inplace, slots, lambda b: twin(b, n))
        assert got[:3] == want[:3], (strategy, n, inplace, got, want)
        # the states held at once are the generator's own count (what TimeLoop reports);
        # in place, the library's plan lets go of one state sooner than the kernel can
        compiled = strategy.compiled_schedule()
        assert got[3] == compiled.size(compiled.peak, n), (strategy, n, inplace, got)
        assert got[3] - want[3] in ((0, 1) if inplace else (0,)), (strategy, n, got, want)

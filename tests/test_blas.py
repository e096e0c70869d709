"""The matrix-product update ``C op= op(A) @ op(B)`` of :mod:`revbench.backends.blas`: one
routine (``rb_matmul``), exact where the products are exact, the same bits from the
Python entry (ctypes) and from Numba-compiled code, reversible, checked, and the same
whatever BLAS's thread count."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import revbench
from revbench.backends import blas, numba_checks, runtime

T = blas.MATMUL_THRESHOLD
REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- #
# Operands in every layout
# --------------------------------------------------------------------------- #
LAYOUTS = ("c", "f", "step", "neg", "cols", "odd", "bcast")


def laid_out(x: np.ndarray, layout: str) -> np.ndarray:
    """``x``'s values in an array of another layout (its strides), same shape."""
    if layout == "c":
        return np.ascontiguousarray(x)
    if layout == "f":
        return np.asfortranarray(x)
    if layout == "step":  # every other element along each axis of a larger array
        big = np.full(tuple(2 * s + 1 for s in x.shape), np.nan)
        view = big[tuple(slice(1, None, 2) for _ in x.shape)]
        view[...] = x
        return view
    if layout == "neg":  # negative strides
        big = np.ascontiguousarray(x[(slice(None, None, -1),) * x.ndim])
        return big[(slice(None, None, -1),) * x.ndim]
    if layout == "cols":  # a slice of a wider row-major array (X[:, :n])
        big = np.full(x.shape[:-1] + (x.shape[-1] + 3,), np.nan)
        big[..., :x.shape[-1]] = x
        return big[..., :x.shape[-1]]
    if layout == "odd":  # strides that are not whole float64 (unaligned)
        rec = np.zeros(x.shape, dtype=[("v", "<f8"), ("pad", "i1")])
        rec["v"] = x
        return rec["v"]
    if layout == "bcast":  # a zero stride: one row (or value) repeated
        if x.size == 0:
            return x.copy()
        first = x[0] if x.ndim == 2 else x[0:1]
        x[...] = first  # (the reference is taken from x afterwards)
        return np.broadcast_to(first, x.shape)
    raise ValueError(layout)


def ints(rng, shape) -> np.ndarray:
    return rng.integers(-4, 5, size=shape).astype(np.float64)


def operands(rng, m, n, k, dims, ta, tb, la="c", lb="c", lc="c"):
    """(C, A, B as passed, the logical op(A), op(B)) for ``C op= op(A) @ op(B)``."""
    cd, ad, bd = dims
    A = ints(rng, (m, k) if ad == 2 else (k,))
    B = ints(rng, (k, n) if bd == 2 else (k,))
    Ap = laid_out(A.T.copy() if (ad == 2 and ta) else A.copy(), la)
    Bp = laid_out(B.T.copy() if (bd == 2 and tb) else B.copy(), lb)
    Aop = Ap.T if (ad == 2 and ta) else Ap
    Bop = Bp.T if (bd == 2 and tb) else Bp
    shape = (m, n) if cd == 2 else ((m,) if bd == 1 else (n,))
    C = laid_out(ints(rng, shape), lc if lc != "bcast" else "c")
    return C, Ap, Bp, np.array(Aop), np.array(Bop)


DIMS = ((2, 2, 2), (1, 2, 1), (1, 1, 2))  # C, A, B ranks: matrix, matrix-vector, vector-matrix


def sizes_below_and_above():
    """(m, n, k) below the threshold and at or above it, for every rank combination."""
    above_k = max(1, -(-T // (9 * 7)))
    return [(3, 4, 5), (9, 7, above_k), (1, 6, 4), (6, 1, 4),
            (1, 1, 1), (2, 3, 1), (17, 1, max(1, -(-T // 17))), (1, 13, max(1, -(-T // 13)))]


def as_dims(m, n, dims):
    _, ad, bd = dims
    return (m if ad == 2 else 1), (n if bd == 2 else 1)


# --------------------------------------------------------------------------- #
# (a) exact against NumPy
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("ta", (0, 1))
@pytest.mark.parametrize("tb", (0, 1))
@pytest.mark.parametrize("subtract", (0, 1))
def test_exact_for_every_transpose_rank_and_size(dims, ta, tb, subtract):
    rng = np.random.default_rng([ta, tb, subtract, *dims])
    for m, n, k in sizes_below_and_above():
        m, n = as_dims(m, n, dims)
        C, A, B, Aop, Bop = operands(rng, m, n, k, dims, ta, tb)
        expect = C - Aop @ Bop if subtract else C + Aop @ Bop
        assert blas.matmul_update(C, A, B, ta, tb, subtract, 1) == -1
        assert np.array_equal(C, expect), (m, n, k)


@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
def test_exact_for_every_layout(la, lb):
    rng = np.random.default_rng([LAYOUTS.index(la), LAYOUTS.index(lb)])
    for lc in ("c", "f", "neg", "step", "odd"):
        for dims in DIMS:
            for ta in (0, 1):
                for m, n, k in ((3, 4, 5), (11, 9, max(1, -(-T // 99))), (40, 1, max(1, -(-T // 40)))):
                    m, n = as_dims(m, n, dims)
                    C, A, B, Aop, Bop = operands(rng, m, n, k, dims, ta, 1 - ta, la, lb, lc)
                    expect = C + Aop @ Bop
                    assert blas.matmul_update(C, A, B, ta, 1 - ta, 0, 1) == -1
                    assert np.array_equal(C, expect), (la, lb, lc, dims, ta, (m, n, k))


@pytest.fixture
def knobs():
    """The routine's benchmark settings, put back after the test."""
    before = blas.knobs.settings()
    yield blas.knobs
    for name, value in before.items():
        setattr(blas.knobs, name, value)


@pytest.mark.parametrize("path", ("loop", "gemm", "gemv", "untiled"))
def test_each_path_is_exact(knobs, path):
    """The loop, dgemm (also for one row or column), dgemv (one row or column), and BLAS
    called once for the whole product, on the same operands."""
    knobs.threshold = 2**63 - 1 if path == "loop" else 0
    knobs.gemv = 2 if path == "gemv" else 0 if path == "gemm" else 1
    if path == "untiled":
        for name in ("tile_m", "tile_n", "tile_k", "tile_out", "tile_red"):
            setattr(knobs, name, 0)
    rng = np.random.default_rng(7)
    for la in ("c", "f", "neg", "odd", "bcast"):
        for dims in DIMS:
            for m, n, k in ((5, 6, 7), (1, 6, 7), (5, 1, 7), (1, 1, 7), (4, 3, 1)):
                m, n = as_dims(m, n, dims)
                C, A, B, Aop, Bop = operands(rng, m, n, k, dims, 0, 1, la, la, "c")
                expect = C + Aop @ Bop
                assert blas.matmul_update(C, A, B, 0, 1, 0, 1) == -1
                assert np.array_equal(C, expect), (path, la, dims, (m, n, k))


def test_exact_across_tiles():
    """Products of several BLAS tiles in each dimension (and of several dgemv blocks)."""
    rng = np.random.default_rng(11)
    for m, n, k in ((150, 70, 200), (130, 1, 300), (1, 140, 300), (65, 129, 1)):
        for la in ("c", "f", "neg"):
            C, A, B, Aop, Bop = operands(rng, m, n, k, (2, 2, 2), 0, 0, la, la, "c")
            expect = C + Aop @ Bop
            assert blas.matmul_update(C, A, B, 0, 0, 0, 1) == -1
            assert np.array_equal(C, expect), (m, n, k, la)


@pytest.mark.parametrize("m,n,k", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0), (0, 5, T), (7, 9, 0)])
def test_zero_sizes(m, n, k):
    C = np.arange(m * n, dtype=float).reshape(m, n)
    before = C.copy()
    assert blas.matmul_update(C, np.ones((m, k)), np.ones((k, n)), 0, 0, 0, 1) == -1
    assert np.array_equal(C, before)  # (k == 0: nothing added)
    assert blas.matmul_update(C, np.ones((k, m)), np.ones((n, k)), 1, 1, 1, 1) == -1
    assert np.array_equal(C, before)


def test_shape_mismatches_raise_value_error_naming_the_shapes():
    with pytest.raises(ValueError, match=r"C \(3, 4\), A \(3, 5\), B \(6, 4\)"):
        blas.matmul_update(np.zeros((3, 4)), np.zeros((3, 5)), np.zeros((6, 4)), 0, 0, 0, 1)
    with pytest.raises(ValueError, match=r"C \(3,\)"):
        blas.matmul_update(np.zeros(3), np.zeros((3, 5)), np.zeros((5, 4)), 0, 0, 0, 1)
    with pytest.raises(ValueError, match="A"):
        blas.matmul_update(np.zeros(()), np.zeros(5), np.zeros(5), 0, 0, 0, 1)
    with pytest.raises(ValueError, match="float64"):
        blas.matmul_update(np.zeros((2, 2)), np.zeros((2, 2), dtype=np.float32),
                           np.zeros((2, 2)), 0, 0, 0, 1)
    with pytest.raises(ValueError, match="read-only"):
        blas.matmul_update(np.broadcast_to(0.0, (2, 2)), np.zeros((2, 2)), np.zeros((2, 2)),
                           0, 0, 0, 1)


# --------------------------------------------------------------------------- #
# (b) the Python entry and Numba's give the same bits
# --------------------------------------------------------------------------- #
def test_python_and_numba_give_the_same_bits():
    import numba

    update = blas.numba_matmul_update

    @numba.njit
    def caller(C, A, B, ta, tb, subtract):
        return update(C, A, B, ta, tb, subtract, 1)

    assert numba_checks.inline_helper(blas.matmul_update) is update
    assert numba_checks.inline_helper(blas.matmul_failed) is blas.numba_matmul_failed
    rng = np.random.default_rng(3)
    shapes = [(3, 4, 5), (8, 8, 8), (16, 16, 16), (33, 17, 29), (64, 48, 80), (1, 100, 90),
              (100, 1, 90), (128, 128, 128)]
    for m, n, k in shapes:
        for ta, tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
            A = rng.standard_normal((k, m) if ta else (m, k))
            B = rng.standard_normal((n, k) if tb else (k, n))
            if m == n == k == 33:
                A, B = A[::-1], np.asfortranarray(B)
            C1 = rng.standard_normal((m, n))
            C2 = C1.copy()
            for subtract in (0, 1):
                assert caller(C1, A, B, ta, tb, subtract) == -1
                assert blas.matmul_update(C2, A, B, ta, tb, subtract, 1) == -1
                assert C1.tobytes() == C2.tobytes(), (m, n, k, ta, tb, subtract)
        for dims in ((1, 2, 1), (1, 1, 2)):  # a vector operand
            A = rng.standard_normal((m, k) if dims[1] == 2 else k)
            B = rng.standard_normal((k, n) if dims[2] == 2 else k)
            C1 = rng.standard_normal(m if dims[2] == 1 else n)
            C2 = C1.copy()
            assert caller(C1, A, B, 0, 0, 0) == blas.matmul_update(C2, A, B, 0, 0, 0, 1) == -1
            assert C1.tobytes() == C2.tobytes(), (m, n, k, dims)


def test_below_the_threshold_the_product_is_the_plain_loop():
    """s = 0.0; s = s + a*b in order (no fused multiply-add): Python's own floats."""
    rng = np.random.default_rng(4)
    m, n, k = 3, 4, max(1, min(50, (T - 1) // 12))
    assert m * n * k < T
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    C = rng.standard_normal((m, n))
    expect = C.copy()
    for i in range(m):
        for j in range(n):
            s = 0.0
            for p in range(k):
                s = s + float(A[i, p]) * float(B[p, j])
            expect[i, j] = expect[i, j] + s
    assert blas.matmul_update(C, A, B, 0, 0, 0, 1) == -1
    assert C.tobytes() == expect.tobytes()


# --------------------------------------------------------------------------- #
# (c) reversible
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (96, 1, 200), (1, 77, 300), (50, 40, 30)])
def test_add_then_subtract_on_a_zero_ancilla_is_zero(m, n, k):
    assert m * n * k >= T
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    C = np.zeros((m, n))
    assert blas.matmul_update(C, A, B, 0, 1, 0, 1) == -1
    first = C.copy()
    assert not np.all(first == 0)
    again = np.zeros((m, n))
    blas.matmul_update(again, A, B, 0, 1, 0, 1)
    assert again.tobytes() == first.tobytes()  # (the same product, bit for bit)
    assert blas.matmul_update(C, A, B, 0, 1, 1, 1) == -1
    assert np.array_equal(C, np.zeros((m, n))) and not np.signbit(C).any()


# --------------------------------------------------------------------------- #
# (d) checked
# --------------------------------------------------------------------------- #
def overflowing(m, n, k, i0, j0):
    """Every product element 1e308, and C[i0, j0] = 1e308: their sum overflows there."""
    A = np.zeros((m, k))
    A[:, 0] = 1e308
    B = np.zeros((k, n))
    B[0, :] = 1.0
    C = np.zeros((m, n))
    C[i0, j0] = 1e308
    return C, A, B


def float_update_failure(old, value, subtract, module, k):
    """What a failed checked float ``y += value`` raises."""
    with pytest.raises(runtime.CheckFailed) as info:
        runtime.float_shift(old, value, subtract, module, k)
    return info.value


@pytest.mark.parametrize("m,n,k", [(3, 4, 2), (30, 20, max(2, -(-T // 600)))])
@pytest.mark.parametrize("numba_side", (False, True))
def test_an_overflow_stops_at_its_element(m, n, k, numba_side):
    i0, j0 = 1, 2
    C, A, B = overflowing(m, n, k, i0, j0)
    before = C.copy()
    update = blas.numba_matmul_update if numba_side else blas.matmul_update
    failed = blas.numba_matmul_failed if numba_side else blas.matmul_failed
    index = update(C, A, B, 0, 0, 0, 1)
    assert index == i0 * n + j0
    flat, was = C.reshape(-1), before.reshape(-1)
    assert np.all(flat[:index] == 1e308)  # written
    assert np.array_equal(flat[index:], was[index:])  # that element and the later ones: not
    with pytest.raises(runtime.CheckFailed) as info:
        failed(C, A, B, 0, 0, 0, index, 12345, 6)
    expected = float_update_failure(1e308, 1e308, False, 12345, 6)
    assert type(info.value) is type(expected) and info.value.args == expected.args
    assert info.value.args == (12345, 7, 1e308, np.inf)
    # unchecked: everything written, C[i0, j0] infinite
    C2, A, B = overflowing(m, n, k, i0, j0)
    assert update(C2, A, B, 0, 0, 0, 0) == -1
    assert np.isinf(C2[i0, j0]) and np.isfinite(np.delete(C2.reshape(-1), index)).all()


@pytest.mark.parametrize("numba_side", (False, True))
def test_a_non_finite_product_raises_the_value_check(numba_side):
    m, n, k = 4, 5, max(2, -(-T // 20))
    A, B = np.full((m, k), 1e200), np.full((k, n), 1e200)  # products overflow: inf
    C = np.zeros((m, n))
    update = blas.numba_matmul_update if numba_side else blas.matmul_update
    failed = blas.numba_matmul_failed if numba_side else blas.matmul_failed
    assert update(C, A, B, 0, 0, 1, 1) == 0
    with pytest.raises(runtime.CheckFailed) as info:
        failed(C, A, B, 0, 0, 1, 0, 9, 2)
    assert info.value.args == float_update_failure(0.0, np.inf, True, 9, 2).args == (9, 2, 0, np.inf)


@pytest.mark.parametrize("numba_side", (False, True))
def test_an_element_infinite_already_is_updated_and_the_update_goes_on(numba_side):
    """As a checked float update: inf + finite is no failure (it stays inf)."""
    rng = np.random.default_rng(6)
    m, n, k = 5, 6, 4
    A, B = ints(rng, (m, k)), ints(rng, (k, n))
    C = ints(rng, (m, n))
    C[1, 1] = np.inf
    expect = C + A @ B
    update = blas.numba_matmul_update if numba_side else blas.matmul_update
    failed = blas.numba_matmul_failed if numba_side else blas.matmul_failed
    index = update(C, A, B, 0, 0, 0, 1)
    assert index == 1 * n + 1
    failed(C, A, B, 0, 0, 0, index, 1, 0)  # (returns: nothing to raise)
    assert np.array_equal(C, expect)
    # a later element that overflows still raises
    C = np.zeros((m, n))
    C[0, 0], C[3, 2] = np.inf, 1e308
    A2 = np.zeros((m, k))
    A2[:, 0] = 1e308
    B2 = np.zeros((k, n))
    B2[0, :] = 1.0
    index = update(C, A2, B2, 0, 0, 0, 1)
    assert index == 0
    with pytest.raises(runtime.CheckFailed) as info:
        failed(C, A2, B2, 0, 0, 0, index, 1, 0)
    assert info.value.args == (1, 1, 1e308, np.inf)
    assert np.all(C.reshape(-1)[1:3 * n + 2] == 1e308) and C[0, 0] == np.inf


def test_failed_on_vector_operands():
    """A 1-D C (non-contiguous): the flat index is C's own."""
    m, k = 6, 3
    A = np.zeros((m, k))
    A[:, 0] = 1e308
    b = np.array([1.0, 0.0, 0.0])
    big = np.zeros(2 * m)
    c = big[::2]
    c[4] = 1e308
    for update, failed in ((blas.matmul_update, blas.matmul_failed),
                           (blas.numba_matmul_update, blas.numba_matmul_failed)):
        big[:] = 0.0
        c[4] = 1e308
        assert update(c, A, b, 0, 0, 0, 1) == 4
        with pytest.raises(runtime.CheckFailed) as info:
            failed(c, A, b, 0, 0, 0, 4, 3, 10)
        assert info.value.args == (3, 11, 1e308, np.inf)
        assert np.all(c[:4] == 1e308) and np.all(big[1::2] == 0.0)


# --------------------------------------------------------------------------- #
# (e) threads
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (300, 200, 500), (1000, 1, 800),
                                   (1, 900, 700), (64, 512, 96)])
def test_the_same_bits_with_one_thread_and_with_two(m, n, k):
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = {}
    for threads in (1, 2, 1):
        C = np.zeros((m, n))
        with blas.blas_threads(threads):
            assert all(info["num_threads"] == threads for info in blas.blas_thread_info())
            assert blas.matmul_update(C, A, B, 0, 0, 0, 1) == -1
        if threads in out:
            assert C.tobytes() == out[threads]
        out[threads] = C.tobytes()
    assert out[1] == out[2]


@pytest.mark.parametrize("m,n,k", [(300, 200, 500), (200, 130, 70), (1000, 1, 800),
                                   (1, 900, 700), (65, 513, 96)])
@pytest.mark.parametrize("layout", ["c", "f", "step"])
def test_the_routines_own_threads_change_no_bit(m, n, k, layout):
    """The blocks of a product run on up to ``set_threads`` threads (here every product
    gets them all: ``thread_work`` 1), each block whole on one: the same bits on 1, 2, 3
    and 7 threads, for ``+=`` and ``-=``, and the same failing element with checks on."""
    rng = np.random.default_rng(9)
    A = laid_out(rng.standard_normal((m, k)), layout)
    B = laid_out(rng.standard_normal((k, n)), layout)
    base = rng.standard_normal((m, n))
    base[m // 2, n // 2] = np.inf  # (checked, the routine stops there)
    work = blas.knobs.thread_work
    blas.knobs.thread_work = 1
    out = []
    try:
        for t in (1, 2, 3, 7, 1):
            with revbench.threads(t):
                assert blas.knobs.threads == t
                C = base.copy()
                plus = blas.matmul_update(C, A, B, 0, 0, 0, 0)
                D = C.copy()
                minus = blas.matmul_update(D, A, B, 0, 0, 1, 0)
                E = base.copy()
                failed = blas.matmul_update(E, A, B, 0, 0, 0, 1)
            out.append((plus, minus, failed, C.tobytes(), D.tobytes(), E.tobytes()))
    finally:
        blas.knobs.thread_work = work
    assert all(o == out[0] for o in out), [o[:3] for o in out]
    assert out[0][:3] == (-1, -1, (m // 2) * n + n // 2)
    np.testing.assert_allclose(np.frombuffer(out[0][3]).reshape(m, n)[0],
                               base[0] + (np.asarray(A) @ np.asarray(B))[0], atol=1e-10)


def test_a_forked_child_starts_its_own_pool():
    """The pool's threads do not survive ``fork`` (multiprocessing, Dask's workers): a
    child's first threaded product starts a pool of its own -- no hang waiting for
    threads that are not there -- and gives the parent's bits."""
    import select
    import signal

    rng = np.random.default_rng(11)
    A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 250))
    work = blas.knobs.thread_work
    blas.knobs.thread_work = 1
    try:
        with revbench.threads(3):
            C = np.zeros((300, 250))
            assert blas.matmul_update(C, A, B, 0, 0, 0, 0) == -1  # (the pool exists now)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                try:
                    D = np.zeros((300, 250))
                    blas.matmul_update(D, A, B, 0, 0, 0, 0)
                    blas.matmul_update(D, A, B, 0, 0, 0, 0)
                    os.write(write, (D - C).tobytes())
                finally:
                    os._exit(0)
            os.close(write)
            got = b""
            while len(got) < C.nbytes:
                ready, _, _ = select.select([read], [], [], 60)
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    pytest.fail("the forked child's threaded product hung")
                chunk = os.read(read, 1 << 20)
                if not chunk:
                    break
                got += chunk
            os.close(read)
            os.waitpid(pid, 0)
    finally:
        blas.knobs.thread_work = work
    assert got == C.tobytes()  # (D - C == C: the same product, twice, from zero)


def test_set_threads_and_its_default(monkeypatch):
    before = blas.get_threads()
    with revbench.threads(3):
        assert blas.get_threads() == 3 and blas.knobs.threads == 3
        with revbench.threads(None):  # (the default, inside)
            assert blas.get_threads() == blas.default_threads()
        assert blas.get_threads() == 3
    assert blas.get_threads() == before
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be a positive int or None"):
            revbench.set_threads(bad)
    for name in ("REVBENCH_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "5")
    assert blas.default_threads() == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "3,2")  # (OpenMP's list: the outer level)
    assert blas.default_threads() == 3
    monkeypatch.setenv("REVBENCH_THREADS", "2")
    assert blas.default_threads() == 2
    monkeypatch.setenv("REVBENCH_THREADS", "many")
    with pytest.raises(ValueError, match="REVBENCH_THREADS='many': the number of threads"):
        blas.default_threads()
    monkeypatch.delenv("REVBENCH_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    assert blas.default_threads() == len(os.sched_getaffinity(0))


def test_batched_items_keep_products_on_the_workers_threads():
    with revbench.threads(4):
        with blas.batched_items():
            assert blas.knobs.threads == 1
            with blas.batched_items():
                assert blas.knobs.threads == 1
            assert blas.knobs.threads == 1
        assert blas.knobs.threads == 4


def test_blas_threads_limits_scipys_blas():
    before = [lib["num_threads"] for lib in blas.blas_thread_info()]
    limiter = blas.blas_threads(1)
    try:
        libs = blas.blas_thread_info()
        assert libs and all(lib["user_api"] == "blas" and lib["num_threads"] == 1 for lib in libs)
    finally:
        limiter.restore_original_limits()
    assert [lib["num_threads"] for lib in blas.blas_thread_info()] == before


# --------------------------------------------------------------------------- #
# (f) Numba's disk cache, in a new process
# --------------------------------------------------------------------------- #
CACHED = textwrap.dedent("""
    import numba
    from revbench.backends import blas

    update = blas.numba_matmul_update  # (registers the symbol rb_matmul)

    @numba.njit(cache=True)
    def caller(C, A, B):
        return update(C, A, B, 0, 1, 1, 1)
""")

RUN = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import cached_caller
    from revbench.backends import blas

    rng = np.random.default_rng(0)
    for m, n, k in ((3, 4, 5), (40, 30, 50)):
        A, B = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        C = rng.standard_normal((m, n))
        C2 = C.copy()
        assert cached_caller.caller(C, A, B) == -1
        blas.matmul_update(C2, A, B, 0, 1, 1, 1)
        assert C.tobytes() == C2.tobytes()
    stats = cached_caller.caller.stats
    print("hits", sum(stats.cache_hits.values()), "misses", sum(stats.cache_misses.values()))
""")


@pytest.mark.slow  # two processes that import revbench and Numba: ~5 s
def test_numba_cached_caller_loads_in_a_new_process(tmp_path):
    (tmp_path / "cached_caller.py").write_text(CACHED)
    (tmp_path / "run.py").write_text(RUN)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    outs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)],
                              capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split())
    assert outs[0] == ["hits", "0", "misses", "1"], outs
    assert outs[1] == ["hits", "1", "misses", "0"], outs  # loaded from the cache, and it ran


# --------------------------------------------------------------------------- #
# The symbol, as native kernels call it
# --------------------------------------------------------------------------- #
NATIVE_CALLER = """
declare i64 @rb_matmul(ptr, i64, i64, ptr, i64, i64, ptr, i64, i64, i64, i64, i64, i64, i64)
define i64 @rb_test_blas_native_caller(ptr %C, ptr %A, ptr %B, i64 %m, i64 %n, i64 %k) {
entry:
  %cs0 = mul i64 %n, 8
  %as0 = mul i64 %k, 8
  %r = call i64 @rb_matmul(ptr %C, i64 %cs0, i64 8, ptr %A, i64 %as0, i64 8, ptr %B, i64 %cs0,
                           i64 8, i64 %m, i64 %n, i64 %k, i64 0, i64 1)
  ret i64 %r
}
"""


def test_a_native_module_calls_the_routine_by_name():
    import ctypes

    from revbench.backends.native import engine

    assert blas.matmul_symbol() == blas.matmul_symbol()  # (idempotent)
    [address] = engine.build_runtime(NATIVE_CALLER, ("rb_test_blas_native_caller",))
    call = ctypes.CFUNCTYPE(ctypes.c_int64, *(ctypes.c_void_p,) * 3, *(ctypes.c_int64,) * 3)(address)
    rng = np.random.default_rng(12)
    for m, n, k in ((3, 4, 5), (40, 30, 20)):
        A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        C1 = rng.standard_normal((m, n))
        C2 = C1.copy()
        assert call(C1.ctypes.data, A.ctypes.data, B.ctypes.data, m, n, k) == -1
        assert blas.matmul_update(C2, A, B, 0, 0, 0, 1) == -1
        assert C1.tobytes() == C2.tobytes()


def test_the_symbol_is_made_once_when_threads_ask_at_once():
    """matmul_symbol first called from several threads of a new process: one routine
    (engine.build_runtime's lock), one address."""
    code = textwrap.dedent("""
        from concurrent.futures import ThreadPoolExecutor
        from revbench.backends import blas
        from revbench.backends.native import engine

        with ThreadPoolExecutor(4) as pool:
            found = set(pool.map(lambda _: blas.matmul_symbol(), range(8)))
        made = engine.stats["compiled"] + engine.stats["loaded"]
        print(len(found), made)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1"]

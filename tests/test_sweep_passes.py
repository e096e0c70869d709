"""The passes that make natural code fast (issue 10): each must leave every result
unchanged, and each test also reads the generated source, so a pass that silently did
nothing fails here too.

* zero adjoints through array elements (a replayed routine carries no adjoint work);
* pruning that tells a read of an array's *shape* from a read of its values;
* allocations of sizes that cannot fail (``n, d = x.shape``) pruned where dead;
* one buffer per allocation site inside loops (no heap allocation per iteration);
* adjoint accumulators kept in a local across a loop (exact: the same additions in
  the same order);
* helpers typed once per argument types (not once per constant at each call site);
* ``fastmath=True``: reassociated sums, results equal to rounding.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from generated_text import plain

import revbench
from revbench import grad, reversible, value_and_grad

BACKENDS = ["python", "numba"]

# A GMM-like term: a row difference, a triangular product and a squared norm, computed in a
# routine per component and uncomputed after use, inside loops, with `n, d = x.shape`.
ROWS = """
def f(err, mu, L, x):
    n, d = x.shape
    k_comp = mu.shape[0]
    for i in range(n):
        with routine as main:
            term = np.zeros(k_comp)
            for k in range(k_comp):
                with routine as q:
                    xc = np.zeros(d)
                    xc += x[i] - mu[k]
                    qx = np.zeros(d)
                    qx += xc
                    for l in range(d):
                        for j in range(l + 1, d):
                            qx[j] += L[k, l * d + j] * xc[l]
                term[k] += np.dot(qx, qx)
                ~q
        for k in range(k_comp):
            err += math.sin(term[k])
        ~main
"""


def _rows_args(seed=0, n=4, d=3, k=2):
    rng = np.random.default_rng(seed)
    return (0.0, rng.normal(size=(k, d)), 0.3 * rng.normal(size=(k, d * d)), rng.normal(size=(n, d)))


def _rows_value(mu, L, x):
    k_comp, d = mu.shape
    total = 0.0
    for i in range(len(x)):
        for k in range(k_comp):
            xc = x[i] - mu[k]
            Q = np.eye(d) + np.tril(L[k].reshape(d, d).T, -1)
            total += math.sin(float((Q @ xc) @ (Q @ xc)))
    return total


def central_difference_gradient(value, a, h=1e-6):
    g = np.zeros_like(a)
    for ix in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[ix] += h
        down[ix] -= h
        g[ix] = (value(up) - value(down)) / (2 * h)
    return g


def _define(src, **opts):
    return revbench.define(src, {"np": np, "math": math}, **opts)["f"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", [True, False])
def test_rows_program_values_and_gradients(backend, check):
    f = _define(ROWS, backend=backend, check=check)
    args = _rows_args()
    assert f(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])[0] == pytest.approx(
        _rows_value(*args[1:]), rel=1e-12)
    g = grad(f, loss="err")(*args)
    for pos in (1, 2):
        def value(v, pos=pos):
            a = list(args)
            a[pos] = v
            return _rows_value(*a[1:])
        np.testing.assert_allclose(g[pos], central_difference_gradient(value, args[pos]),
                                   rtol=1e-6, atol=1e-8)


def _sweep(f, *args):
    return plain(f.source("adjoint", *args))


@pytest.mark.parametrize("check", [True, False])
def test_a_replayed_routine_carries_no_adjoint_work(check):
    """Reading ``~main`` backwards replays ``main`` with the adjoints of its ancillas at
    zero: no adjoint update may be left in that replay (elements of zero adjoint arrays,
    and temporaries that hold them, are zero)."""
    f = _define(ROWS, check=check)
    src = _sweep(f, *_rows_args())
    replay = src[src.index("# ~routine:main"):src.index("_rb_adj_err")]
    updates = [ln.strip() for ln in replay.splitlines()
               if ln.strip().startswith("_rb_adj") and ("+=" in ln or "-=" in ln)]
    assert updates == [], updates


def test_unchecked_sweep_drops_an_uncompute_whose_array_is_only_measured_later():
    """``for w in range(qx.shape[0])`` after the last read of ``qx``'s values must not keep
    the updates that uncompute ``qx`` alive: a shape read needs the array, not its values."""
    f = _define(ROWS, check=False)
    src = _sweep(f, *_rows_args())
    assert "qx[j] -= " not in src, src
    assert "qx[j] -= " in _sweep(_define(ROWS), *_rows_args())


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_allocations_of_sizes_that_cannot_fail_are_pruned(backend):
    f = _define(ROWS, backend=backend, check=False)
    fwd = f.source("forward", *_rows_args())
    # the uncompute of `main` (dead without checks) leaves no loop and no allocation
    tail = fwd[fwd.index("# ~routine:main"):]
    assert "for k in" not in tail and "zeros" not in tail and "empty" not in tail, tail
    # a size from an argument may be negative: its dead allocation still raises
    g = revbench.define("def f(y, n):\n    t = np.zeros(n)\n    y += 1.0\n    del t\n",
                        {"np": np}, backend=backend, check=False)["f"]
    with pytest.raises(ValueError, match="negative"):
        g(0.0, -1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", [True, False])
def test_allocations_in_loops_reuse_one_buffer_per_site(backend, check):
    f = _define(ROWS, backend=backend, check=check)
    args = _rows_args()
    fwd = f.source("forward", *args)
    assert "_rb_np.zeros((d,)" not in fwd and "xc = _rb_buf" in fwd, fwd
    # zeroed in place: a loop under Numba (its fill() is slower on small arrays), fill()
    # in plain Python
    assert ("xc.fill(0.0)" in fwd) == (backend == "python"), fwd
    # sizes that change from one iteration to the next, every dtype
    src = """
def f(s, x):
    for i in range(len(x)):
        t = np.zeros(i, dtype=int)
        b = np.zeros((2, i), dtype=bool)
        c = np.zeros_like(x, dtype=complex)
        u = np.zeros(i)
        for j in range(i):
            t[j] += j
            u[j] += x[j] * j
        s += np.sum(u)
        for j in range(i):
            u[j] -= x[j] * j
            t[j] -= j
        del u
        del c
        del b
        del t
"""
    g = _define(src, backend=backend, check=check)
    x = np.arange(1.0, 6.0)
    want = sum(x[j] * j for i in range(5) for j in range(i))
    assert g(0.0, x)[0] == pytest.approx(want)
    assert (~g)(want, x)[0] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(grad(g, loss="s")(0.0, x)[1], [sum(j for i in range(5) if j < i)
                                                                   for j in range(5)])
    neg = revbench.define("def f(y, n):\n    for i in range(2):\n        t = np.zeros(n - i)\n"
                          "        y += 1.0\n        del t\n", {"np": np}, backend=backend,
                          check=check)["f"]
    assert neg(0.0, 1)[0] == 2.0
    # (checked: revbench's error, naming `t`; unchecked: NumPy's ValueError)
    with pytest.raises(revbench.ReversibilityError if check else ValueError,
                       match="`t` cannot be allocated with a negative size" if check
                       else "negative"):
        neg(0.0, 0)


def test_adjoint_accumulators_are_kept_in_locals_exactly():
    exact = _define(ROWS, check=False)
    python = _define(ROWS, check=False, backend="python")
    args = _rows_args(1, n=5, d=6, k=3)
    src = _sweep(exact, *args)
    assert "_rb_adj_acc" in src and "_rb_adj_xc[l] += " not in src, src
    # the same additions in the same order: bit-identical to the Python backend (which
    # keeps the element in memory)
    for a, b in zip(grad(exact, loss="err")(*args), grad(python, loss="err")(*args)):
        if a is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("check", [True, False])
def test_an_accumulator_of_a_loop_that_never_runs_is_never_touched(check):
    """The element is loaded and stored only when the loop runs: here it is out of
    range (checked code would raise IndexError; unchecked code would corrupt memory)."""
    src = """
def f(s, x, w):
    k = len(x) + 3
    for j in range(len(w)):
        s += x[k] * w[j]
"""
    f = _define(src, check=check)
    x, w = np.arange(3.0), np.zeros(0)
    assert f(0.0, x, w)[0] == 0.0
    g = grad(f, loss="s")(0.0, x, w)
    np.testing.assert_array_equal(g[1], np.zeros(3))
    assert "_rb_adj_acc" in _sweep(f, 0.0, x, np.ones(2))


def test_accumulators_are_refused_where_the_array_is_touched_elsewhere():
    src = """
def f(s, x, i):
    for j in range(len(x)):
        s += x[i] * x[j]
"""
    f = _define(src, check=False)
    x = np.array([0.5, 1.5, -2.5])
    # _rb_adj_x is updated at x[i] and at x[j]: no local may hold x[i] across the loop
    assert "_rb_adj_acc" not in _sweep(f, 0.0, x, 1)
    g = grad(f, loss="s")(0.0, x, 1)[1]
    want = np.full(3, x[1])  # d/dx[m] of x[i] * sum(x) = x[i] + (m == i) * sum(x)
    want[1] += x.sum()
    np.testing.assert_allclose(g, want)


def test_helpers_are_compiled_once_per_types_not_per_call_site(monkeypatch):
    """Every checked update calls its helper with its own check number: a plain
    dispatcher compiled one specialisation per number (66 of the float-shift helper for
    the GMM gradient).  No compilation may be specialised on a constant."""
    from numba.core import event, types

    monkeypatch.setenv("REVBENCH_NATIVE", "0")  # (Numba's own compilations, counted)

    compiled = []

    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            d = ev.data["dispatcher"]
            compiled.append((getattr(d, "py_func", d).__name__, ev.data["args"]))

    fresh = time.time_ns() % 1_000_003  # new source: compiled now, not loaded from the cache
    body = "\n".join(f"    y += x * {k + 1}.5" for k in range(8))
    f = revbench.define(f"def f(y, x):\n{body}\n    y -= x\n    z = {fresh}\n    z += 4\n"
                        "    z -= 4\n    del z\n")["f"]
    with event.install_listener("numba:compile", Listener()):
        assert f(0.0, 1.25)[0] == pytest.approx(1.25 * (sum(k + 1.5 for k in range(8)) - 1))
    assert any(name == "f__forward" for name, _ in compiled), compiled
    literal = [(name, args) for name, args in compiled
               if any(isinstance(a, types.Literal) for a in args)]
    assert literal == [], literal


@pytest.mark.parametrize("check", [True, False])
def test_fastmath_reassociates_sums_within_rounding(check):
    def src(s, x, y):
        s += np.dot(x, y)
        s += np.sum(x * x)

    exact = reversible(check=check)(src)
    fast = reversible(check=check, fastmath=True)(src)
    assert fast.fastmath and not exact.fastmath and "fastmath=True" in repr(fast)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=1001), rng.normal(size=1001)
    assert "# fastmath: contract, reassoc" in fast.source("forward", 0.0, x, y)
    a, b = exact(0.0, x, y)[0], fast(0.0, x, y)[0]
    assert b == pytest.approx(a, rel=1e-12)
    assert (~fast)(b, x, y)[0] == pytest.approx(0.0, abs=1e-10)
    (va, ga), (vb, gb) = (value_and_grad(f, loss="s")(0.0, x, y) for f in (exact, fast))
    assert vb[0] == pytest.approx(va[0], rel=1e-12)
    for u, v in zip(ga[1:], gb[1:]):
        np.testing.assert_allclose(v, u, rtol=1e-12)


def test_fastmath_option_is_validated_and_accepted_in_source_text():
    with pytest.raises(TypeError, match="fastmath must be True or False"):
        reversible(fastmath="yes")
    f = revbench.define("@reversible(fastmath=True)\ndef f(y, x):\n    y += x * x\n")["f"]
    assert f.fastmath and f(0.0, 3.0) == (9.0, 3.0)
    with pytest.raises(revbench.ReversibilitySyntaxError, match="fastmath"):
        revbench.define("@reversible(fastmath=1)\ndef f(y, x):\n    y += x\n")


MATVEC = """
def f(y, A, x):
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            y[i] += A[i, j] * x[j]
"""


@pytest.mark.parametrize("check", [True, False])
def test_a_running_sum_into_an_element_stays_in_a_local(check):
    f = _define(MATVEC, check=check)
    rng = np.random.default_rng(5)
    A, x, y0 = rng.normal(size=(4, 5)), rng.normal(size=5), rng.normal(size=4)
    src = f.source("forward", y0.copy(), A, x)
    assert "_rb_acc" in src and "y[i] += " not in src, src
    # bit for bit what the Python backend computes in memory
    py = _define(MATVEC, check=check, backend="python")
    np.testing.assert_array_equal(f(y0.copy(), A, x)[0], py(y0.copy(), A, x)[0])
    np.testing.assert_array_equal((~f)(*f(y0.copy(), A, x))[0], (~py)(*py(y0.copy(), A, x))[0])
    g = grad(f, loss=("y", 2))(y0.copy(), A, x)
    np.testing.assert_allclose(g[2], A[2])


def test_a_failing_check_in_a_promoted_sum_names_the_element_and_keeps_the_data():
    f = _define(MATVEC)
    A, x, y = np.array([[1e308, 1e308]]), np.array([1.0, 1.0]), np.array([1.0])
    with pytest.raises(revbench.ReversibilityError, match=r"y\[i\]") as info:
        f(y, A, x)
    assert "line 5" in str(info.value)
    np.testing.assert_array_equal(y, [1.0])


CALLS = """
def g(out, x):
    with routine:
        s = 0.0
        s += np.dot(x, x)
    out += math.sqrt(s)
    ~routine

def f(y, x, n):
    y -= n * g(x)
"""


@pytest.mark.parametrize("check", [True, False])
def test_a_reverse_sweep_of_a_call_with_zero_seeds_is_a_plain_call(check):
    """``y -= n * g(x)`` computes g into an ancilla, uses it and uncomputes it: read
    backwards, the uncompute is a reverse sweep of ``~g`` whose seed (the ancilla's
    adjoint) is still zero -- it only recomputes the ancilla, which the plain ``g`` does,
    without compiling a reverse sweep of ``~g``."""
    ns = revbench.define(CALLS, {"np": np, "math": math}, check=check)
    x = np.array([3.0, 4.0])
    out, grads = value_and_grad(ns["f"], loss="y")(1.0, x, 2)
    assert out[0] == pytest.approx(1.0 - 2 * 5.0)
    np.testing.assert_allclose(grads[1], -2 * x / 5.0)
    directions = {key[0].name for key in ns["g"]._program._cache}
    assert "backward" in directions and "backward-inverse" not in directions, directions
    fwd = ns["f"].source("forward", 1.0, x, 2)
    calls = [ln for ln in fwd.splitlines() if "_rb_call_g_" in ln]
    # without checks the uncompute of the ancilla is dead: only the computing call is left
    assert len(calls) == (2 if check else 1), calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", [True, False])
def test_no_accumulator_for_an_array_the_loop_allocates(backend, check):
    """Found by the program generator: ``w1`` is a new array in every iteration, so its
    element cannot be loaded before the loop."""
    src = """
def f(a0):
    for i in range(0, 2, 1):
        a0 += 0.5
        w1 = np.zeros((2, 2))
        w1[0, 0] += 0.5
        a0 *= 0.5
        w1[0, 0] -= 0.5
        del w1
"""
    f = _define(src, backend=backend, check=check)
    assert f(0.0)[0] == pytest.approx(0.375)
    assert (~f)(0.375)[0] == pytest.approx(0.0)
    assert "_rb_acc" not in f.source("forward", 0.0)


def test_a_dead_call_that_prints_or_asserts_is_kept():
    src = """
def g(out, x):
    assert x > -1.0, "x too small"
    out += x * x

def p(out, x):
    print("p runs with", x)
    out += x

def f(y, x):
    y -= 2.0 * g(x) + p(x)
"""
    ns = revbench.define(src, check=False)
    fwd = ns["f"].source("forward", 0.0, 3.0)
    for name in ("g", "p"):
        assert len([ln for ln in fwd.splitlines() if f"_rb_call_{name}_" in ln]) == 2, fwd
    assert ns["f"](0.0, 3.0)[0] == pytest.approx(-21.0)


CALL_BETWEEN_READS = '''
def doubles(t):
    t *= 2.0

def f(y, x):
    for i in range(len(x)):
        y[0] += x[i] * x[i]
        doubles(y[0])
        y[0] += np.sin(x[i])
'''


@pytest.mark.parametrize("backend", ["numba", "python"])
@pytest.mark.parametrize("check", [True, False])
def test_an_adjoint_read_twice_is_not_hoisted_across_the_call_that_updates_it(backend, check):
    """The sweep reads ``y[0]``'s adjoint on both sides of ``doubles``'s reverse sweep, which
    doubles it: loading it once per iteration gave a wrong gradient, because the passes did
    not count the adjoints a reverse-sweep call carries as written (found in review)."""
    f = revbench.define(CALL_BETWEEN_READS, {"np": np}, backend=backend, check=check)["f"]
    x = np.array([0.3, -0.7, 1.1])
    got = revbench.grad(f, loss=("y", 0))(np.zeros(1), x)[1]
    # y = sum over i of 2^(n-1-i) * (x_i^2 * 2 + sin x_i): each doubling scales what came before
    n = len(x)
    want = np.array([2.0 ** (n - 1 - i) * (4.0 * x[i] + np.cos(x[i])) for i in range(n)])
    np.testing.assert_allclose(got, want, rtol=1e-12)

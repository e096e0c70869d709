"""Matrix statements on BLAS: ``C += op(A) @ op(B)`` as one call of ``rb_matmul``.

What must hold, for every geometry (matrix, transposes, matrix-vector, vector-matrix, outer
product), below and above the size from which the routine calls BLAS:

* the value is NumPy's (to rounding), and the Python backend, native code and (slow
  suite) Numba give the same bits;
* an ancilla computed by a product and uncomputed by it comes back to exactly zero, so a
  routine's ``~hidden`` and the inverse ``~f`` recover the arguments to the bit;
* gradients equal the hand-derived ``C_bar B^T`` / ``A^T C_bar`` (and finite differences),
  tangents the product rule, only for the operands in ``wrt``;
* checks raise the same located error on every path, and leave the target as a checked
  float update does; aliasing is refused; the GPU runs small products with the CPU's
  bits and refuses large ones at their line.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import define
from revbench.backends import blas

rng = np.random.default_rng(7)

SOURCE = '''
def nn(C, A, B):
    C += A @ B

def tn(C, A, B):
    C += A.T @ B

def nt(C, A, B):
    C -= A @ B.T

def tt(C, A, B):
    C += -(A.T @ B.T)

def mv(y, A, x):
    y += A @ x

def tv(y, A, x):
    y -= A.T @ x

def vm(y, x, A):
    y += x @ A

def vt(y, x, A):
    y += x @ A.T

def outer(C, u, v):
    C += np.outer(u, v)

def loss_of(loss, A, B, R):
    with routine as made:
        C = np.zeros((A.shape[0], B.shape[1]))
        C += A @ B
    loss += np.sum((C - R) ** 2)
    ~made
'''

#: name -> operand shapes of (target, first, second) for sizes m, k, n
GEOMETRY = {
    "nn": lambda m, k, n: ((m, n), (m, k), (k, n)),
    "tn": lambda m, k, n: ((m, n), (k, m), (k, n)),
    "nt": lambda m, k, n: ((m, n), (m, k), (n, k)),
    "tt": lambda m, k, n: ((m, n), (k, m), (n, k)),
    "mv": lambda m, k, n: ((m,), (m, k), (k,)),
    "tv": lambda m, k, n: ((m,), (k, m), (k,)),
    "vm": lambda m, k, n: ((n,), (k,), (k, n)),
    "vt": lambda m, k, n: ((n,), (k,), (n, k)),
    "outer": lambda m, k, n: ((m, n), (m,), (n,)),
}


def _numpy(name, C, A, B):
    return {"nn": lambda: C + A @ B, "tn": lambda: C + A.T @ B, "nt": lambda: C - A @ B.T,
            "tt": lambda: C - A.T @ B.T, "mv": lambda: C + A @ B, "tv": lambda: C - A.T @ B,
            "vm": lambda: C + A @ B, "vt": lambda: C + A @ B.T,
            "outer": lambda: C + np.outer(A, B)}[name]()


_FUNCS: dict = {}


def funcs(backend: str, check: bool = True):
    key = (backend, check)
    if key not in _FUNCS:
        _FUNCS[key] = define(SOURCE, {"np": np}, backend=backend, check=check)
    return _FUNCS[key]


#: sizes below and above the BLAS size (blas.MATMUL_THRESHOLD = m * n * k)
SIZES = [(3, 4, 5), (24, 16, 20)]


def _args(name, m, k, n):
    return [rng.standard_normal(s) for s in GEOMETRY[name](m, k, n)]


@pytest.mark.parametrize("size", SIZES, ids=["loop", "blas"])
@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_value_and_bits_agree_on_every_path(name, size):
    args = _args(name, *size)
    outs = {}
    for backend in ("python", "numba"):
        C = args[0].copy()
        outs[backend] = funcs(backend)[name](C, *args[1:])[0]
    np.testing.assert_allclose(outs["python"], _numpy(name, *args), rtol=1e-12, atol=1e-12)
    assert np.array_equal(outs["python"], outs["numba"])
    # the bits of the routine itself, called directly
    C = args[0].copy()
    ta, tb = name in ("tn", "tt", "tv"), name in ("nt", "tt", "vt")
    blas.matmul_update(C, args[1], args[2], ta, tb, name in ("nt", "tt", "tv"), False)
    assert np.array_equal(C, outs["python"])


def test_the_statement_is_one_call_of_the_routine():
    C, A, B = _args("nn", 4, 5, 6)
    f = funcs("python")["nn"]
    f(C, A, B)
    text = f.source()
    assert "_rb_matmul_update(C, A, B, False, False, False, True)" in text
    assert "np.dot" not in text


@pytest.mark.parametrize("size", SIZES, ids=["loop", "blas"])
@pytest.mark.parametrize("backend", ["python", "numba"])
def test_ancillas_come_back_to_exactly_zero(backend, size):
    m, k, n = size
    A, B, R = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    f = funcs(backend)["loss_of"]
    out = f(0.0, A, B, R)
    assert out[0] == pytest.approx(np.sum((A @ B - R) ** 2), rel=1e-12)
    back = (~f)(*out)
    assert abs(back[0]) < 1e-9 * out[0]
    assert all(np.array_equal(x, y) for x, y in zip(back[1:], (A, B, R)))


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("size", SIZES, ids=["loop", "blas"])
def test_gradients_are_the_hand_derived_products(backend, size):
    m, k, n = size
    A, B, R = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    f = funcs(backend)["loss_of"]
    g = revbench.grad(f, loss="loss", wrt=("A", "B"))(0.0, A, B, R)
    Cbar = 2 * (A @ B - R)
    np.testing.assert_allclose(g[1], Cbar @ B.T, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g[2], A.T @ Cbar, rtol=1e-11, atol=1e-11)
    only_a = revbench.grad(f, loss="loss", wrt="A")(0.0, A, B, R)
    assert np.array_equal(only_a[1], g[1]) and only_a[2] is None


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_gradient_is_the_same_bits_on_one_thread_and_on_several(backend):
    """``revbench.threads(n)``: a model's products on 1, 2 or 3 threads (every product
    threaded: ``thread_work`` 1), its value, gradient and round trip to the bit."""
    m, k, n = 150, 70, 90
    A, B, R = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    f = funcs(backend)["loss_of"]
    work = blas.knobs.thread_work
    blas.knobs.thread_work = 1
    seen = []
    try:
        for t in (1, 2, 3):
            with revbench.threads(t):
                value, g = revbench.value_and_grad(f, loss="loss", wrt=("A", "B"))(0.0, A, B, R)
                back = (~f)(*f(0.0, A, B, R))
            seen.append((value.tobytes() if hasattr(value, "tobytes") else repr(value),
                         g[1].tobytes(), g[2].tobytes(), back[0]))
    finally:
        blas.knobs.thread_work = work
    assert seen[0] == seen[1] == seen[2]


def test_batched_items_with_products_on_two_workers_are_each_items_own_gradient():
    """``batch=`` over 600 items, each with a product BLAS computes, on two workers (the
    products then run on the workers' threads): each item's gradient is the one a call
    for that item alone gives, to the bit."""
    f = funcs("numba")["loss_of"]
    items, m, k, n = 600, 12, 13, 14
    A = rng.standard_normal((items, m, k))
    B, R = rng.standard_normal((k, n)), rng.standard_normal((items, m, n))
    with revbench.threads(2):
        g = revbench.grad(f, "loss", wrt=("A",), batch=("loss", "A", "R"),
                          workers=2)(np.zeros(items), A, B, R)
        assert blas.knobs.threads == 2  # (back after the batched run)
    for i in (0, 299, 300, 599):
        one = revbench.grad(f, "loss", wrt=("A",))(0.0, A[i], B, R[i])
        assert np.array_equal(g[1][i], one[1])


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_every_geometry_differentiates_like_numpy(name, backend):
    """The pullback of each statement against central differences of NumPy's formula (it
    is linear: they are exact up to rounding), and its tangent against the product rule."""
    m, k, n = 6, 5, 7
    C, A, B = _args(name, m, k, n)
    f = funcs(backend)[name]
    seed = rng.standard_normal(C.shape)
    _, pullback = revbench.vjp(f, C, A, B, outputs=0, wrt=(1, 2))
    bars = pullback(seed)
    for pos, arr in ((0, A), (1, B)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, down = [A.copy(), B.copy()], [A.copy(), B.copy()]
            up[pos][idx] += 0.5
            down[pos][idx] -= 0.5
            fd[idx] = np.sum(seed * (_numpy(name, C, *up) - _numpy(name, C, *down)))
        np.testing.assert_allclose(bars[pos], fd, rtol=1e-10, atol=1e-10)
    dA, dB = rng.standard_normal(A.shape), rng.standard_normal(B.shape)
    _, (dC,) = revbench.jvp(f, C, A, B, tangents={1: dA, 2: dB}, outputs=0)
    zero = np.zeros_like(C)
    want = _numpy(name, zero, dA, B) + _numpy(name, zero, A, dB)
    np.testing.assert_allclose(dC, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_product_that_overflows_raises_the_same_located_error(backend):
    f = funcs(backend)["nn"]
    A, B = np.full((20, 20), 1e200), np.full((20, 20), 1e200)
    C = np.zeros((20, 20))
    with pytest.raises(revbench.ReversibilityError) as info:
        f(C, A, B)
    text = str(info.value)
    assert "`+=` by `A @ B`: the operand is infinite or nan" in text and "line 3" in text
    assert not np.any(C)  # (stopped at the first element: nothing written)
    C[3, 4] = np.inf  # an element infinite already is updated, and the update goes on
    B2 = np.full((20, 20), 1.0)
    g = funcs(backend)["nn"]
    got = g(C, np.ones((20, 20)), B2)[0]
    assert got[3, 4] == np.inf and got[0, 0] == 20.0
    big = np.full((2, 2), 1.7e308)
    C = np.full((2, 2), 1.7e308)
    with pytest.raises(revbench.ReversibilityError, match=r"overflow|infinite"):
        g(C, np.eye(2), big)


def test_unchecked_products_do_not_raise():
    f = funcs("numba", check=False)["nn"]
    C = np.zeros((20, 20))
    out = f(C, np.full((20, 20), 1e200), np.full((20, 20), 1e200))[0]
    assert np.all(np.isinf(out))


def test_a_target_read_on_the_right_is_refused():
    for src in ("def bad(C, B):\n    C += C @ B\n", "def bad(C, A):\n    C -= A @ C.T\n"):
        with pytest.raises(SyntaxError, match="read on its own right-hand side"):
            define(src, {"np": np})["bad"](np.ones((3, 3)), np.ones((3, 3)))


def test_a_size_mismatch_is_named_at_its_line():
    f = funcs("python")["nn"]
    with pytest.raises(AssertionError, match="must have as many rows as `A` has columns"):
        f(np.zeros((3, 4)), np.ones((3, 5)), np.ones((4, 4)))


def test_the_gpu_runs_small_products_with_the_cpus_bits_and_refuses_large_ones(monkeypatch):
    pytest.importorskip("numba.cuda")
    g = define('''
def mm(C, A, B):
    C += A @ B.T
''', {"np": np})
    As, Bs = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 2, 5))
    J = revbench.jacobian(g["mm"], outputs="C", wrt="A", batch=("C", "A", "B"),
                          device="cuda")(np.zeros((4, 3, 2)), As, Bs)
    Jcpu = revbench.jacobian(g["mm"], outputs="C", wrt="A", batch=("C", "A", "B"))(
        np.zeros((4, 3, 2)), As, Bs)
    assert np.array_equal(np.asarray(J), np.asarray(Jcpu))
    big = rng.standard_normal((2, 16, 16))
    too_large = r"`A @ B\.T` is too large for the GPU, which has no BLAS yet"
    with pytest.raises(revbench.ReversibilityError, match=too_large):
        revbench.grad(define('''
def loss_of(loss, A, B):
    with routine as made:
        C = np.zeros((A.shape[0], B.shape[0]))
        C += A @ B.T
    loss += np.sum(C * C)
    ~made
''', {"np": np})["loss_of"], loss="loss", wrt="A", batch=("loss", "A", "B"), device="cuda")(
            np.zeros(2), big, big.copy())


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES, ids=["loop", "blas"])
@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_numba_alone_gives_the_same_bits(name, size, monkeypatch):
    monkeypatch.setenv("REVBENCH_NATIVE", "0")
    args = _args(name, *size)
    f = define(SOURCE, {"np": np})[name]
    py = funcs("python")[name](args[0].copy(), *args[1:])[0]
    assert np.array_equal(f(args[0].copy(), *args[1:])[0], py)

"""Matrix products (``A @ x``) and reductions along an axis (``np.sum(A, axis=1)``).

Lowered to loops of sums once types are known (:mod:`revbench.lang.products`): checked
against NumPy for values, JAX for gradients and second derivatives, on both backends, by a
hypothesis property over shapes, and for every misuse's message.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revbench import ReversibilityError, ReversibilityTypeError, define, hessian, vjp
from revbench.lang.errors import ReversibilitySyntaxError

SOURCE = '''
@reversible
def affine(y, A, x, b):
    y += 2.0 * (A @ x) + b

@reversible
def left(z, x, A):
    z += x @ A

@reversible
def matmul(C, A, B):
    C += A @ B

@reversible
def inner(s, x, y):
    s += x @ y

@reversible
def rows(y, A):
    y += np.sum(A, axis=1)
    y -= 0.5 * np.max(A * A, axis=-1)

@reversible
def cols(z, A):
    z += np.min(A, axis=0)

@reversible
def cube(Y, T):
    Y += np.sum(T, axis=1)

@reversible
def parts(Y, A, x):
    Y[1, 1:] += A[1:, :] @ x[:2]
    Y[:, 0] *= np.exp(A[:, :2] @ x[1:3])

@reversible
def mlp(loss, W1, b1, W2, b2, X, Y):
    """A two-layer network's squared error over the rows of X, as the formula reads."""
    for s in range(X.shape[0]):
        with routine as hidden:
            h = np.zeros(len(b1))
            h += np.tanh(W1 @ X[s] + b1)
        loss += np.sum((W2 @ h + b2 - Y[s]) ** 2)
        ~hidden

@reversible
def quad(e, A, x):
    """e += sin(x) . (A x): a quadratic-like form, for second derivatives."""
    t = np.zeros_like(x)
    t += A @ x
    e += np.sin(x) @ t
    t -= A @ x
    del t
'''

BACKENDS = ["python", "numba"]
rng = np.random.default_rng(7)
A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
x, b, w = rng.standard_normal(4), rng.standard_normal(3), rng.standard_normal(3)


def fns(backend: str) -> dict:
    return define(SOURCE, {"np": np}, backend=backend)


@pytest.fixture(scope="module", params=BACKENDS)
def f(request):
    return fns(request.param)


def test_values_match_numpy(f):
    np.testing.assert_allclose(f["affine"](np.ones(3), A, x, b)[0], 1 + 2 * (A @ x) + b,
                               rtol=1e-14)
    np.testing.assert_allclose(f["left"](np.zeros(4), w, A)[0], w @ A, rtol=1e-14)
    np.testing.assert_allclose(f["matmul"](np.zeros((3, 2)), A, B)[0], A @ B, rtol=1e-14)
    assert f["inner"](0.5, x, 2 * x)[0] == pytest.approx(0.5 + x @ (2 * x), rel=1e-14)
    np.testing.assert_allclose(f["rows"](np.zeros(3), A)[0],
                               A.sum(axis=1) - 0.5 * (A * A).max(axis=-1), rtol=1e-14)
    np.testing.assert_allclose(f["cols"](np.zeros(4), A)[0], A.min(axis=0))
    T = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(f["cube"](np.zeros((2, 4)), T)[0], T.sum(axis=1), rtol=1e-14)


def test_sub_array_operands_and_targets(f):
    Y = rng.standard_normal((3, 3))
    xx = rng.standard_normal(4)
    A2 = rng.standard_normal((3, 2))
    want = Y.copy()
    want[1, 1:] += A2[1:, :] @ xx[:2]
    want[:, 0] *= np.exp(A2[:, :2] @ xx[1:3])
    got = f["parts"](Y.copy(), A2, xx)[0]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_round_trips(f):
    for name, args in [("affine", (np.ones(3), A, x, b)), ("matmul", (np.ones((3, 2)), A, B)),
                       ("rows", (np.ones(3), A)), ("left", (np.ones(4), w, A))]:
        g = f[name]
        out = g(*(a.copy() for a in args))
        back = (~g)(*(a.copy() for a in out))
        np.testing.assert_allclose(back[0], args[0], rtol=1e-12, atol=1e-12)


def test_gradients_match_jax(f):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    ct = rng.standard_normal((3, 2))
    (_,), pull = vjp(f["matmul"], np.zeros((3, 2)), A, B, outputs="C", wrt=("A", "B"))
    dA, dB = pull(ct)
    _, jpull = jax.vjp(lambda a, bb: a @ bb, A, B)
    jA, jB = jpull(ct)
    np.testing.assert_allclose(dA, np.asarray(jA), rtol=1e-13)
    np.testing.assert_allclose(dB, np.asarray(jB), rtol=1e-13)

    c3 = rng.standard_normal(3)
    (_,), pull = vjp(f["rows"], np.zeros(3), A, outputs="y", wrt="A")
    _, jpull = jax.vjp(lambda a: jnp.sum(a, axis=1) - 0.5 * jnp.max(a * a, axis=-1), A)
    np.testing.assert_allclose(pull(c3)[0], np.asarray(jpull(c3)[0]), rtol=1e-13)

    (_,), pull = vjp(f["affine"], np.zeros(3), A, x, b, outputs="y", wrt=("A", "x", "b"))
    _, jpull = jax.vjp(lambda a, xx, bb: 2.0 * (a @ xx) + bb, A, x, b)
    for got, want in zip(pull(c3), jpull(c3)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-13)


def test_a_network_written_with_products_matches_jax(f):
    """Products inside sums (an ancilla array each), in a loop, under a routine."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    r = np.random.default_rng(3)
    W1, b1, W2, b2 = (r.standard_normal(s) for s in ((5, 3), (5,), (2, 5), (2,)))
    X, Y = r.standard_normal((7, 3)), r.standard_normal((7, 2))

    def loss(W1, b1, W2, b2):
        return jnp.sum((jnp.tanh(X @ W1.T + b1) @ W2.T + b2 - Y) ** 2)

    assert f["mlp"](0.0, W1, b1, W2, b2, X, Y)[0] == pytest.approx(float(loss(W1, b1, W2, b2)),
                                                                   rel=1e-13)
    from revbench import grad

    g = grad(f["mlp"], loss="loss", wrt=("W1", "b1", "W2", "b2"))(0.0, W1, b1, W2, b2, X, Y)
    for got, want in zip(g[1:5], jax.grad(loss, argnums=(0, 1, 2, 3))(W1, b1, W2, b2)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)


def test_second_derivatives_match_jax(f):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    A4 = rng.standard_normal((4, 4))
    H = hessian(f["quad"], loss="e", wrt="x")(0.0, A4, x)
    J = jax.hessian(lambda xx: jax.numpy.sin(xx) @ (A4 @ xx))(x)
    np.testing.assert_allclose(H, np.asarray(J), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", [True, False])
def test_size_mismatches_name_the_line_and_the_sizes_that_differ(backend, check):
    g = define(SOURCE, {"np": np}, backend=backend, check=check)
    lines = SOURCE.splitlines()
    mv, mm = (lines.index(text) + 1 for text in ("    y += 2.0 * (A @ x) + b", "    C += A @ B"))
    b3 = np.ones(3)
    cases = [
        (g["affine"], (np.zeros(3), A, np.ones(5), b3),
         "`x` must have as many elements as `A` has columns",
         f"`A.shape[1] == x.shape[0]` (in affine, line {mv})"),
        (g["affine"], (np.zeros(4), A, x, b3), "`A @ x` must have the shape of `y` (axis 0)",
         f"`A.shape[0] == y.shape[0]` (in affine, line {mv})"),
        (g["matmul"], (np.zeros((3, 2)), A, np.ones((3, 2))),
         "`B` must have as many rows as `A` has columns", f"(in matmul, line {mm})"),
        (g["matmul"], (np.zeros((3, 3)), A, B), "`A @ B` must have the shape of `C` (axis 1)",
         f"`B.shape[1] == C.shape[1]` (in matmul, line {mm})"),
    ]
    for fn, args, words, where in cases:
        before = [a.copy() for a in args]
        with pytest.raises(AssertionError) as info:
            fn(*args)
        assert words in str(info.value) and where in str(info.value)
        for a, was in zip(args, before):
            np.testing.assert_array_equal(a, was)  # nothing half-updated


OVERLAPS = """
def row_times_own_row(A, i):
    A[i] += A[1:3, :] @ A[0]
def row_times_block(A, x, i):
    A[i] += A[1:3, :] @ x
def row_plus_column_sums(A, i):
    A[i] += np.sum(A[1:3, :], axis=0)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_product_or_axis_sum_overlapping_its_target_is_refused(backend):
    """A product reads its operands whole for every element of its target: a target that
    overlaps an operand would read values it already changed (a wrong result, and an
    inverse that does not restore).  With checks on that is refused at run time, naming
    the statement's target as written, with the caller's array unchanged; targets that
    miss the operands run, in both directions."""
    g = define(OVERLAPS, {"np": np}, backend=backend)
    cases = [(g["row_times_own_row"], (0,), "A[0]"),
             (g["row_times_block"], (np.ones(2), 1), "A[1:3, :]"),
             (~g["row_times_block"], (np.ones(2), 2), "A[1:3, :]"),
             (g["row_plus_column_sums"], (1,), "A[1:3, :]"),
             (~g["row_plus_column_sums"], (2,), "A[1:3, :]")]
    for fn, args, operand in cases:
        A = np.arange(6.0).reshape(3, 2)
        with pytest.raises(ReversibilityError) as info:
            fn(A, *args)
        msg = str(info.value)
        assert f"`A[i]` and `{operand}` overlap" in msg and "_rb_" not in msg, msg
        np.testing.assert_array_equal(A, np.arange(6.0).reshape(3, 2))
    A = np.arange(6.0).reshape(3, 2)
    want = A.copy()
    want[0] += A[1:3] @ np.ones(2)
    g["row_times_block"](A, np.ones(2), 0)
    np.testing.assert_array_equal(A, want)
    (~g["row_times_block"])(A, np.ones(2), 0)
    np.testing.assert_array_equal(A, np.arange(6.0).reshape(3, 2))


@pytest.mark.parametrize("source, error, words", [
    ("s += 2.0 @ x", ReversibilityTypeError, "`@` multiplies arrays, but `2.0` is a scalar"),
    ("y[0] += A @ x", ReversibilityTypeError, "`A @ x` is an array (float64[:]) but a scalar"),
    ("y += np.sum(A, axis=2)", ReversibilityTypeError, "axis 2 does not exist"),
    ("s += np.sum(A, axis=0)", ReversibilityTypeError, "is a 1-D array, but a scalar is needed"),
    ("y += np.sum(A, axis=n)", ReversibilitySyntaxError, "must be a constant integer"),
    ("y += A @ y", ReversibilitySyntaxError, "`y` is read on its own right-hand side"),
    ("y += np.dot(A, x)", ReversibilityTypeError,
     "np.dot() of a 2-D array is a matrix product in NumPy: write `A @ x`"),
    ("y += np.cumsum(A)", ReversibilityTypeError, "takes a 1-D array expression, got float64[:, :]"),
    ("s += np.cumsum(x)", ReversibilityTypeError, "is an array (float64[:]) but a scalar"),
    ("y += np.cumsum(x, axis=0)", ReversibilitySyntaxError, "`axis=` is not supported in `np.cumsum`"),
    ("y += np.cumsum(np.cumprod(x))", ReversibilityTypeError, "`np.cumprod(x)` inside"),
    ("y += np.cumsum(y)", ReversibilitySyntaxError, "`y` is read on its own right-hand side"),
])
def test_misuses_are_named_at_their_line(source, error, words):
    src = f"@reversible\ndef f(s, y, A, x, n):\n    {source}\n"
    with pytest.raises(error) as info:
        g = define(src, {"np": np})["f"]
        g(0.0, np.zeros(3), np.ones((3, 3)), np.ones(3), 1)
    assert words in str(info.value)
    assert info.value.lineno == 3


def test_three_d_and_bool_operands_are_refused():
    g = define("@reversible\ndef f(y, T, x):\n    y += T @ x\n", {"np": np})["f"]
    with pytest.raises(ReversibilityTypeError, match="takes 1-D and 2-D arrays, but `T`"):
        g(np.zeros(2), np.ones((2, 2, 2)), np.ones(2))
    with pytest.raises(ReversibilityTypeError, match="of bools"):
        g(np.zeros(2), np.ones((2, 2), dtype=bool), np.ones(2))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.sampled_from(BACKENDS),
       st.integers(0, 2**31))
def test_property_products_and_their_adjoints(m, n, k, backend, seed):
    """C += A @ B for any shapes: NumPy's value, and the adjoints ct B^T and A^T ct."""
    r = np.random.default_rng(seed)
    a, bb, c0, ct = (r.standard_normal(s) for s in ((m, n), (n, k), (m, k), (m, k)))
    g = _cached(backend)
    np.testing.assert_allclose(g(c0.copy(), a, bb)[0], c0 + a @ bb, rtol=1e-12, atol=1e-12)
    (_,), pull = vjp(g, c0, a, bb, outputs="C", wrt=("A", "B"))
    dA, dB = pull(ct)
    np.testing.assert_allclose(dA, ct @ bb.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dB, a.T @ ct, rtol=1e-12, atol=1e-12)


_CACHE: dict = {}


def _cached(backend: str):
    if backend not in _CACHE:
        _CACHE[backend] = fns(backend)["matmul"]
    return _CACHE[backend]


# --------------------------------------------------------------------------- #
# running sums and products: np.cumsum, np.cumprod
# --------------------------------------------------------------------------- #
SCANS = '''
@reversible
def running(y, x, w):
    y += 2.0 * np.cumsum(x * w) - np.cumprod(x)

@reversible
def total(s, x):
    s += np.sum(np.cumsum(x) * x)

@reversible
def counts(k, n):
    k += np.cumsum(n)

@reversible
def of_product(y, A, x):
    y += np.cumsum(A @ x)
'''


@pytest.fixture(scope="module", params=BACKENDS)
def scans(request):
    return define(SCANS, {"np": np}, backend=request.param)


def test_running_sums_and_products_match_numpy(scans):
    xs, ws = rng.standard_normal(6), rng.standard_normal(6)
    y = scans["running"](np.ones(6), xs, ws)[0]
    np.testing.assert_allclose(y, 1 + 2 * np.cumsum(xs * ws) - np.cumprod(xs), rtol=1e-13)
    np.testing.assert_allclose((~scans["running"])(y.copy(), xs, ws)[0], 1.0, rtol=1e-13)
    assert scans["total"](0.0, xs)[0] == pytest.approx(np.sum(np.cumsum(xs) * xs), rel=1e-13)
    k = scans["counts"](np.zeros(4, dtype=np.int64), np.array([3, -1, 4, 1]))[0]
    np.testing.assert_array_equal(k, [3, 2, 6, 7])
    np.testing.assert_allclose(scans["of_product"](np.zeros(3), A, x)[0], np.cumsum(A @ x),
                               rtol=1e-13)
    empty = scans["running"](np.zeros(0), np.zeros(0), np.zeros(0))[0]
    assert empty.shape == (0,)


def test_the_running_ancilla_is_given_back_exactly(scans):
    """Large values and many elements: the ancilla of running sums is uncomputed to exactly
    zero (no round-off), forwards, backwards and in the reverse sweep, whose check of the
    ancilla would fail on round-off (its tolerance is 1e-8, the sums are near 1e13)."""
    from revbench import grad

    big = rng.standard_normal(5000) * 1e11
    g = define("@reversible\ndef f(y, x):\n    y += np.cumsum(x)\n", {"np": np},
               backend=scans["total"]._program.backend)["f"]
    y = g(np.zeros(5000), big)[0]
    np.testing.assert_array_equal(y, np.cumsum(big))  # the same additions, in the same order
    np.testing.assert_array_equal((~g)(y.copy(), big)[0] == 0.0, True)
    gs = grad(scans["total"], loss="s")(0.0, big)[1]
    # d/dx_j sum_i x_i S_i = S_j + sum_{i >= j} x_i
    np.testing.assert_allclose(gs, np.cumsum(big) + np.cumsum(big[::-1])[::-1], rtol=1e-9)


def test_scan_gradients_and_second_derivatives_match_jax(scans):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    xs = np.array([0.5, -1.5, 2.0, 0.0, 1.25])  # a zero: cumprod's gradient there too
    ws = rng.standard_normal(5)
    c = rng.standard_normal(5)
    (_,), pull = vjp(scans["running"], np.zeros(5), xs, ws, outputs="y", wrt=("x", "w"))
    _, jpull = jax.vjp(lambda a, b: 2.0 * jnp.cumsum(a * b) - jnp.cumprod(a), xs, ws)
    for got, want in zip(pull(c), jpull(c)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-12)
    H = hessian(scans["total"], loss="s", wrt="x")(0.0, xs)
    J = jax.hessian(lambda a: jnp.sum(jnp.cumsum(a) * a))(xs)
    np.testing.assert_allclose(H, np.asarray(J), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_sizes_are_checked_before_anything_changes(backend):
    g = define("@reversible\ndef f(y, x, w):\n    y += np.cumsum(x * w)\n", {"np": np},
               backend=backend)["f"]
    y = np.ones(3)
    with pytest.raises(AssertionError, match=r"`np.cumsum\(x \* w\)` must have the shape of `y`"):
        g(y, np.ones(4), np.ones(4))
    with pytest.raises(AssertionError, match="`w` and `x` must have one shape"):
        g(y, np.ones(3), np.ones(4))
    np.testing.assert_array_equal(y, 1.0)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=0, max_size=7), st.sampled_from(BACKENDS))
def test_property_scans_match_numpy_and_their_adjoints(values, backend):
    """cumsum and cumprod of any short array (zeros included): NumPy's values, a round
    trip, and the adjoint of y += cumsum(x) (reversed cumulative sums of the cotangent)."""
    xs = np.array(values, dtype=float)
    g = _scan_functions(backend)["running"]
    ws = np.ones_like(xs)
    y = g(np.zeros_like(xs), xs, ws)[0]
    np.testing.assert_allclose(y, 2 * np.cumsum(xs) - np.cumprod(xs), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose((~g)(y.copy(), xs, ws)[0], 0.0, atol=1e-9)
    if len(xs):
        ct = np.linspace(-1.0, 1.0, len(xs))
        (_,), pull = vjp(g, np.zeros_like(xs), xs, ws, outputs="y", wrt="w")
        np.testing.assert_allclose(pull(ct)[0], 2 * xs * np.cumsum(ct[::-1])[::-1],
                                   rtol=1e-12, atol=1e-12)


_SCAN_CACHE: dict = {}


def _scan_functions(backend: str) -> dict:
    if backend not in _SCAN_CACHE:
        _SCAN_CACHE[backend] = define(SCANS, {"np": np}, backend=backend)
    return _SCAN_CACHE[backend]


def test_products_and_scans_run_on_the_gpu():
    """The lowered loops are core language: the same kernels on ``device="cuda"`` (Numba's
    CUDA simulator in CI), one item per thread."""
    from revbench import jacobian

    g = define('''
@reversible
def mv(r, A, x):
    r += A @ x

@reversible
def running(r, x):
    r += np.cumsum(x * x)
''', {"np": np})
    As, xs = rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 3))
    J = jacobian(g["mv"], outputs="r", wrt="x", batch=("r", "A", "x"), device="cuda")(
        np.zeros((4, 2)), As, xs)
    np.testing.assert_allclose(J, As, rtol=1e-14)
    J = jacobian(g["running"], outputs="r", wrt="x", batch=("r", "x"), device="cuda")(
        np.zeros((4, 3)), xs)
    for b in range(4):
        np.testing.assert_allclose(J[b], np.tril(np.ones((3, 3))) * 2 * xs[b], rtol=1e-14)

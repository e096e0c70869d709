"""Sub-arrays: rows ``A[i]``, columns ``A[:, j]`` and slices ``x[a:b]``.

They are NumPy views: whole-array statements read and update them, sums take
them, calls update them in place.  Every test runs on both backends and with
checks off; gradients are compared with central differences, round trips with
the inputs, and every misuse must give a clear error and leave the data as it was.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench

VARIANTS = [("numba", True), ("python", True), ("numba", False)]
IDS = ["numba", "python", "numba-unchecked"]

SRC = '''
def axpy(y, a, x):
    y += a * x


def rows(A, c, x):
    for i in range(A.shape[0]):
        axpy(A[i], c, x)


def centred(z, x, mu, i, k):
    z += x[i] - mu[k]


def pieces(s, x, a, b):
    s += np.sum(x[a:b]) + np.dot(x[:2], x[-2:]) + 0.5 * sum(x[1:]) ** 2


def update_views(A, x, w):
    A[1] += x * w[0]
    A[0, 1:3] *= 2.0 + w[1]
    A[:, 0] -= w[2:5] * w[2:5]


def gmm_term(out, x, means, icf, alphas):
    n, d = x.shape
    for i in range(n):
        for k in range(len(alphas)):
            with routine:
                xc = np.zeros(d)
                xc += x[i] - means[k]
                qx = np.zeros(d)
                qx += np.exp(icf[k, :d]) * xc
            out += alphas[k] + np.sum(icf[k, :d]) - 0.5 * np.dot(qx, qx)
            ~routine
'''


@pytest.fixture(params=VARIANTS, ids=IDS)
def ns(request):
    backend, check = request.param
    return revbench.define(SRC, backend=backend, check=check)


def test_rows_passed_to_a_function_are_updated_in_place(ns):
    A, x = np.zeros((3, 4)), np.arange(4.0)
    out = ns["rows"](A, 2.0, x)
    np.testing.assert_array_equal(out[0], np.tile(2.0 * x, (3, 1)))
    assert out[0] is A  # updated in place, as every array argument
    back = (~ns["rows"])(*out)
    np.testing.assert_array_equal(back[0], 0.0)


def test_views_in_whole_array_expressions(ns):
    X, mu = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    np.testing.assert_array_equal(ns["centred"](np.zeros(3), X, mu, 1, 0)[0], X[1] - mu[0])
    x = np.arange(5.0)
    s = ns["pieces"](0.0, x, 1, 4)[0]
    assert s == pytest.approx(x[1:4].sum() + x[:2] @ x[-2:] + 0.5 * x[1:].sum() ** 2)


def test_whole_array_updates_of_views(ns):
    A, x, w = np.ones((3, 4)), np.arange(4.0), np.array([2.0, 1.0, 0.5, 1.5, 2.5])
    want = A.copy()
    want[1] += x * w[0]
    want[0, 1:3] *= 2.0 + w[1]
    want[:, 0] -= w[2:5] * w[2:5]
    out = ns["update_views"](A, x, w)
    np.testing.assert_allclose(out[0], want, rtol=1e-15)
    np.testing.assert_allclose((~ns["update_views"])(*out)[0], 1.0, rtol=1e-15)


@pytest.mark.parametrize("name,args,loss", [
    ("pieces", lambda r: (0.0, r.normal(size=6), 1, 5), "s"),
    ("centred", lambda r: (np.zeros(3), r.normal(size=(2, 3)), r.normal(size=(2, 3)), 1, 0),
     ("z", 2)),
    ("update_views", lambda r: (r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=5) + 2),
     ("A", (0, 2))),
    ("update_views", lambda r: (r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=5) + 2),
     ("A", (2, 0))),
    ("rows", lambda r: (r.normal(size=(3, 4)), 1.5, r.normal(size=4)), ("A", (1, 3))),
    ("gmm_term", lambda r: (0.0, r.normal(size=(4, 3)), r.normal(size=(2, 3)),
                            0.3 * r.normal(size=(2, 6)), r.normal(size=2)), "out"),
])
def test_gradients_through_views_match_central_differences(ns, name, args, loss):
    revbench.check_grad(ns[name], *args(np.random.default_rng(3)), loss=loss)


def test_gmm_term_matches_numpy(ns):
    r = np.random.default_rng(4)
    x, means, icf, alphas = r.normal(size=(5, 3)), r.normal(size=(2, 3)), \
        0.3 * r.normal(size=(2, 6)), r.normal(size=2)
    want = sum(alphas[k] + icf[k, :3].sum()
               - 0.5 * np.sum((np.exp(icf[k, :3]) * (x[i] - means[k])) ** 2)
               for i in range(5) for k in range(2))
    assert ns["gmm_term"](0.0, x, means, icf, alphas)[0] == pytest.approx(want, rel=1e-13)


def test_backends_agree_on_gradients():
    r = np.random.default_rng(5)
    args = (0.0, r.normal(size=(4, 3)), r.normal(size=(2, 3)), 0.3 * r.normal(size=(2, 6)),
            r.normal(size=2))
    results = [revbench.grad(revbench.define(SRC, backend=b, check=c)["gmm_term"], loss="out")(*args)
               for b, c in VARIANTS]
    for other in results[1:]:
        for a, b in zip(results[0][1:], other[1:]):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_batched_jacobian_of_a_function_using_views():
    ns = revbench.define(SRC)
    r = np.random.default_rng(6)
    A, x = r.normal(size=(5, 3, 4)), r.normal(size=(5, 4))
    J = revbench.jacobian(ns["rows"], outputs="A", wrt="x", batch=("A", "x"))(A, 1.5, x)
    one = revbench.jacobian(ns["rows"], outputs="A", wrt="x")
    for i in range(5):
        np.testing.assert_array_equal(J[i], one(A[i], 1.5, x[i]))


# -- misuse: clear errors, data kept ---------------------------------------------------------
AXPY = "def axpy(y, a, x):\n    y += a * x\n"


@pytest.mark.parametrize("backend", ["numba", "python"])
@pytest.mark.parametrize("src,args,match", [
    ("def f(s, x, a, b):\n    s += np.sum(x[a:b])\n", (0.0, np.arange(5.0), 1, 9),
     r"the sub-array `x\[a:b\]` is out of range along axis 0: its bounds.* are 1:9, .* length 5"),
    ("def f(s, x, a, b):\n    s += np.sum(x[a:b])\n", (0.0, np.arange(5.0), 3, 1),
     r"out of range along axis 0: its bounds.* are 3:1"),
    (AXPY + "def f(A, c, i, j):\n    axpy(A[i], c, A[j])\n", (np.ones((3, 2)), 2.0, 1, 1),
     r"`A\[i\]` and `A\[j\]` overlap at run time: arguments of one call must not alias"),
    (AXPY + "def f(x, c):\n    axpy(x[0:2], c, x[1:3])\n", (np.ones(4), 2.0),
     r"`x\[0:2\]` and `x\[1:3\]` overlap"),
    (AXPY + "def f(A, c, j):\n    axpy(A[0], c, A[:, j])\n", (np.ones((3, 3)), 2.0, 2),
     r"`A\[0\]` and `A\[:, j\]` overlap"),
    ("def f(z, x):\n    z += x[1:3]\n", (np.zeros(3), np.arange(5.0)),
     r"`z` and `x\[1:3\]` must have the same shape"),
    ("def f(A, i, j):\n    A[i] += 2.0 * A[j]\n", (np.ones((3, 2)), 2, 2),
     r"`A\[i\]` and `A\[j\]` overlap at run time: an update cannot read its own target"),
    ("def f(x, w):\n    x[0:2] *= w\n", (np.ones(3), np.array([1.0, 0.0])),
     r"the operand is zero"),
])
def test_runtime_errors_restore_the_data(backend, src, args, match):
    f = revbench.define(src, backend=backend)["f"]
    saved = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(revbench.ReversibilityError, match=match):
        f(*args)
    for a, s in zip(args, saved):
        np.testing.assert_array_equal(a, s)


@pytest.mark.parametrize("src,args,error,match", [
    (AXPY + "def f(A, c):\n    axpy(A[0], c, A)\n", (np.ones((3, 2)), 2.0),
     revbench.ReversibilitySyntaxError, r"`A` is passed twice to `axpy` \(as `A\[0\]` too\)"),
    ("def f(s, x):\n    s += np.sum(x[::-2])\n", (0.0, np.ones(4)),
     revbench.ReversibilitySyntaxError, r"`x\[::-2\]`: a negative step \(a reversed view\) is not"),
    ("def f(s, x, k):\n    s += np.sum(x[::k])\n", (0.0, np.ones(4), 2),
     revbench.ReversibilitySyntaxError, r"step must be a constant positive integer"),
    ("def f(s, A):\n    s += A[0]\n", (0.0, np.ones((2, 2))), revbench.ReversibilityTypeError,
     r"`A\[0\]` is a sub-array \(float64\[:\]\) but a scalar is needed here"),
    ("def f(x, y):\n    x[0:2], y = y, x[0:2]\n", (np.ones(3), np.ones(2)),
     revbench.ReversibilityTypeError, r"swapping a sub-array \(`x\[0:2\]`\) is not supported"),
    ("def f(s, x, a):\n    s += np.sum(x[a:2])\n", (0.0, np.ones(3), 1.5),
     revbench.ReversibilityTypeError, r"a slice bound must be an integer, got float64"),
    ("def f(x):\n    x[0:2] += x[1:3]\n", (np.ones(4),), revbench.ReversibilityError,
     r"`x\[0:2\]` and `x\[1:3\]` overlap at run time"),
])
def test_static_and_type_errors(src, args, error, match):
    with pytest.raises(error, match=match):
        revbench.define(src)["f"](*args)


def test_negative_bounds_count_from_the_end():
    f = revbench.define("def f(s, x):\n    s += np.sum(x[-3:-1]) + np.sum(x[:-4])\n")["f"]
    x = np.arange(6.0)
    assert f(0.0, x)[0] == x[-3:-1].sum() + x[:-4].sum()


@pytest.mark.parametrize("name,args,loss", [
    ("rows", lambda r: (r.normal(size=(3, 4)), 1.5, r.normal(size=4)), ("A", (1, 3))),
    ("update_views", lambda r: (r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=5) + 2),
     ("A", (2, 0))),
    ("pieces", lambda r: (0.0, r.normal(size=6), 1, 5), "s"),
    ("gmm_term", lambda r: (0.0, r.normal(size=(2, 3)), r.normal(size=(2, 3)),
                            0.3 * r.normal(size=(2, 6)), r.normal(size=2)), "out"),
])
def test_the_debugger_steps_through_sub_arrays(ns, name, args, loss):
    # the debugger runs the generated code of each statement: what compiled code accepts,
    # it steps through (tests/test_trace.py looks at the steps themselves)
    args = args(np.random.default_rng(7))
    want = ns[name](*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    grads = revbench.grad(ns[name], loss=loss)(*args)
    tr = revbench.debugging.tracing.trace(ns[name], *args, loss=loss)
    assert tr.error is None and tr.turn is not None
    for got, w, back, a, g, gw in zip(tr.outputs, want, tr.inputs, args, tr.gradients, grads):
        np.testing.assert_allclose(got, w, rtol=1e-13)
        np.testing.assert_allclose(back, a, rtol=1e-12, atol=1e-12)  # the inverse ran
        if gw is not None:
            np.testing.assert_allclose(g, gw, rtol=1e-12, atol=1e-15)

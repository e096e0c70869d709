"""``np.max`` / ``np.min`` / one-argument ``max(x)`` of an array expression.

The largest (smallest) element, found by a loop in index order, as a scalar
of the elements' type; its gradient goes to the extreme element, split evenly
between ties.  Compared with NumPy and with central differences, on both
backends and with checks off.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import revbench

VARIANTS = [("numba", True), ("python", True), ("numba", False)]
IDS = ["numba", "python", "numba-unchecked"]

SRC = '''
def lse(out, x):
    with routine:
        m = 0.0
        m += np.max(x)
        s = 0.0
        s += np.sum(np.exp(x - m))
    out += m + log(s)
    ~routine


def spread(r, x, A, k):
    r += max(x) - min(x) + np.min(A * A) + np.amax(A[k]) + 2.0 * np.max(x[1:])


def counts(n, b, k):
    n += np.max(k) - np.min(k)
    n += np.max(b)
'''


@pytest.fixture(params=VARIANTS, ids=IDS)
def ns(request):
    backend, check = request.param
    return revbench.define(SRC, backend=backend, check=check)


def test_values_match_numpy(ns):
    rng = np.random.default_rng(0)
    x, A = rng.normal(size=7), rng.normal(size=(3, 4))
    assert ns["lse"](0.0, x)[0] == pytest.approx(np.log(np.exp(x).sum()), rel=1e-14)
    want = x.max() - x.min() + (A * A).min() + A[2].max() + 2.0 * x[1:].max()
    assert ns["spread"](0.0, x, A, 2)[0] == pytest.approx(want, rel=1e-14)
    k = np.array([3, -9, 4], dtype=np.int64)
    assert ns["counts"](0, np.array([False, True]), k)[0] == 13 + 1


def test_gradients_match_central_differences(ns):
    rng = np.random.default_rng(1)
    revbench.check_grad(ns["lse"], 0.0, rng.normal(size=6), loss="out")
    revbench.check_grad(ns["spread"], 0.0, rng.normal(size=6), rng.normal(size=(3, 4)), 1,
                        loss="r")


def test_gradient_of_a_tie_is_split_evenly(ns):
    g = revbench.grad(ns["spread"], loss="r")(0.0, np.array([1.0, 3.0, 3.0, -2.0, -2.0]),
                                              np.ones((2, 2)), 0)
    # max(x): 1/2 each to the two 3.0s; -min(x): -1/2 each to the two -2.0s; 2 max(x[1:]) too
    np.testing.assert_allclose(g[1], [0.0, 1.5, 1.5, -0.5, -0.5])
    # min(A * A) over four ties of 1: 2 A / 4 each; amax(A[0]): 1/2 to each of row 0
    np.testing.assert_allclose(g[2], [[1.0, 1.0], [0.5, 0.5]])


def test_a_nan_wins_and_passes_no_gradient():
    f = revbench.define("def f(r, x):\n    r += 0.0 * np.max(x)\n", check=False)["f"]
    assert math.isnan(f(0.0, np.array([1.0, math.nan, 2.0]))[0])
    g = revbench.grad(f, loss="r")(0.0, np.array([1.0, math.nan, 2.0]))[1]
    np.testing.assert_array_equal(g, 0.0)


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_max_of_an_empty_array_raises(backend):
    f = revbench.define("def f(r, x):\n    r += np.max(x)\n", backend=backend)["f"]
    with pytest.raises(revbench.ReversibilityError, match=r"`np.max\(x\)` of an empty array"):
        f(0.0, np.zeros(0))


@pytest.mark.parametrize("src,match", [
    ("def f(r, z):\n    r += abs(np.max(z))\n", r"np.max\(\) of complex numbers is not defined"),
    ("def f(r, x):\n    r += np.max(x[0])\n", r"np.max\(\) needs an array expression"),
    ("def f(r, x):\n    if np.max(x) > 0.0:\n        r += 1.0\n", r"cannot be part of a condition"),
])
def test_refused(src, match):
    z = np.ones(2) + 1j
    with pytest.raises(revbench.ReversibilityTypeError, match=match):
        f = revbench.define(src)["f"]
        f(0.0, z if "z" in src else np.ones(2))


def test_two_arguments_stay_the_elementwise_function():
    f = revbench.define("def f(y, a, b):\n    y += max(a, b) + np.maximum(a, b)\n")["f"]
    assert f(0.0, 1.0, 2.0)[0] == 4.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=12))
def test_backends_agree_with_numpy(values):
    x = np.array(values)
    for backend, check in VARIANTS:
        f = revbench.define("def f(r, s, x):\n    r += np.max(x)\n    s += np.min(x)\n",
                            backend=backend, check=check)["f"]
        r, s, _ = f(0.0, 0.0, x)
        assert (r, s) == (x.max(), x.min())


@pytest.mark.parametrize(("backend", "check"), VARIANTS, ids=IDS)
def test_jacobians_carry_reduction_seeds_in_every_lane(backend, check):
    """A Jacobian runs several seeds at once (lanes): the seed a reduction's adjoint holds
    for its loop is an adjoint too, one per lane (it was shared, unrenamed: the jacobian
    of ``p[i] += np.max(x) * x[i]`` did not compile)."""
    src = '''
def f(p, x):
    for i in range(len(x)):
        p[i] += np.max(x) * x[i] + np.sum(x * x) * x[i]

def g(out, x):
    with routine:
        m = 0.0
        m += np.max(x)
    out += m * m
    ~routine

def h(p, x):
    t = 0.0
    g(t, x)
    for i in range(len(x)):
        p[i] += t * x[i]
    ~g(t, x)
    del t
'''
    ns = revbench.define(src, {"np": np}, backend=backend, check=check)
    x = np.array([1.0, 3.0, 2.0, -0.5])
    eye = np.eye(4)
    want_f = (x.max() + x @ x) * eye + np.outer(x, eye[1]) + 2.0 * np.outer(x, x)
    want_h = x.max() ** 2 * eye + np.outer(x, 2.0 * x.max() * eye[1])
    for name, want in (("f", want_f), ("h", want_h)):
        J = revbench.jacobian(ns[name], outputs="p", wrt="x")(np.zeros(4), x)
        np.testing.assert_allclose(J, want, rtol=1e-13, err_msg=name)


@pytest.mark.parametrize("backend", ["numba", "python"])
@pytest.mark.parametrize("body", [
    "y += np.sqrt(np.sum(x * x))",                       # a norm: sqrt's rule guards 0
    "y += abs(np.sum(x)) + 2.0 * np.sqrt(np.dot(x, x))",
    "y += np.sum(x * x) if np.max(x) > 0.0 else np.min(x)",  # reductions in both branches
])
def test_reductions_inside_guarded_expressions_have_gradients(backend, body):
    """A reduction inside a conditional expression -- the user's, or the one a rule such as
    sqrt's builds to give 0 where there is no derivative -- is evaluated once, so it is not
    a statement's condition; and each branch's reduction gets its gradient only where that
    branch is taken (found by a student writing sqrt(np.sum(x * x)) in lesson 03)."""
    f = list(revbench.define(f"def f(y, x):\n    {body}\n", {"np": np}, backend=backend).values())[-1]
    for x in (np.array([3.0, -4.0, 1.0]), np.array([-3.0, -4.0, -1.0])):
        revbench.check_grad(f, 0.0, x, loss="y")
    g = revbench.grad(f, loss="y")(0.0, np.array([3.0, 4.0, 0.0]))[1]
    if body.startswith("y += np.sqrt"):
        np.testing.assert_allclose(g, [0.6, 0.8, 0.0])

"""``np.sign`` and ``math.lgamma`` / ``scipy.special.gammaln`` (issue 26, item 3): values,
first and second derivatives against SciPy and JAX, on both backends, and the digamma and
trigamma they differentiate into (revbench.rules.special) against SciPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st

import revbench
from revbench.rules.special import digamma, trigamma


# --------------------------------------------------------------------------- #
# digamma and trigamma themselves
# --------------------------------------------------------------------------- #
def _grid() -> np.ndarray:
    return np.concatenate([np.linspace(0.05, 40.0, 2001), np.logspace(-6, 8, 300),
                           [0.5, 1.0, 1.4616321449683622, 2.0, 10.0]])


def test_digamma_and_trigamma_match_scipy_for_positive_arguments():
    x = _grid()
    d = np.array([digamma(v) for v in x])
    t = np.array([trigamma(v) for v in x])
    np.testing.assert_allclose(d, sc.digamma(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(t, sc.polygamma(1, x), rtol=1e-13, atol=0)


def test_digamma_and_trigamma_match_scipy_for_negative_arguments():
    x = np.linspace(-20.25, -0.01, 1500)
    x = x[np.abs(x - np.round(x)) > 1e-3]  # away from the poles (conditioning, not method)
    np.testing.assert_allclose([digamma(v) for v in x], sc.digamma(x), rtol=1e-11)
    np.testing.assert_allclose([trigamma(v) for v in x], sc.polygamma(1, x), rtol=1e-11)


@pytest.mark.parametrize("x", [0.0, -1.0, -7.0, math.nan, -math.inf])
def test_poles_and_nan_give_nan(x):
    assert math.isnan(digamma(x)) and math.isnan(trigamma(x))


def test_the_far_end():
    assert digamma(math.inf) == math.inf and trigamma(math.inf) == 0.0
    assert trigamma(1e-200) == math.inf  # 1 / x^2 past the float range, not a division error


# --------------------------------------------------------------------------- #
# in reversible code
# --------------------------------------------------------------------------- #
LGAMMA = """
def f(y, x):
    y += math.lgamma(x) + sc.gammaln(2.0 * x) + gammaln(x + 1.0)
"""


def _lgamma_f(backend: str, check: bool = True):
    from scipy.special import gammaln

    return revbench.define(LGAMMA, {"math": math, "sc": sc, "gammaln": gammaln},
                           backend=backend, check=check)["f"]


@pytest.mark.parametrize("backend", ["numba", "python"])
@pytest.mark.parametrize("x", [0.3, 1.0, 3.7, 25.0, -2.3])
def test_lgamma_value_gradient_and_second_derivative(backend, x):
    f = _lgamma_f(backend)
    want = math.lgamma(x) + sc.gammaln(2 * x) + sc.gammaln(x + 1)
    assert f(0.0, x)[0] == pytest.approx(want, rel=1e-14, abs=1e-14)
    g = revbench.grad(f, loss="y")(0.0, x)[1]
    assert g == pytest.approx(sc.digamma(x) + 2 * sc.digamma(2 * x) + sc.digamma(x + 1),
                              rel=1e-11)
    h = revbench.hvp(f, loss="y", wrt="x")(0.0, x, 1.0)
    assert h == pytest.approx(sc.polygamma(1, x) + 4 * sc.polygamma(1, 2 * x)
                              + sc.polygamma(1, x + 1), rel=1e-10)


def test_both_backends_agree_bit_for_bit():
    xs = np.concatenate([np.linspace(0.01, 30, 97), -np.linspace(0.3, 9.7, 31)])
    a, b = _lgamma_f("numba"), _lgamma_f("python")
    ga, gb = revbench.grad(a, loss="y"), revbench.grad(b, loss="y")
    for x in xs:
        assert a(0.0, x)[0] == b(0.0, x)[0]
        assert ga(0.0, x)[1] == gb(0.0, x)[1]


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 200.0))
def test_lgamma_gradient_matches_jax(x):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    f = _FNS.setdefault("numba", _lgamma_f("numba"))

    def loss(v):
        return (jax.scipy.special.gammaln(v) + jax.scipy.special.gammaln(2.0 * v)
                + jax.scipy.special.gammaln(v + 1.0))

    assert revbench.grad(f, loss="y")(0.0, x)[1] == pytest.approx(float(jax.grad(loss)(x)),
                                                                rel=1e-9, abs=1e-12)
    assert revbench.hvp(f, loss="y", wrt="x")(0.0, x, 1.0) == pytest.approx(
        float(jax.grad(jax.grad(loss))(x)), rel=1e-8, abs=1e-12)


_FNS: dict[str, object] = {}


def test_lgamma_at_a_pole_is_an_error_not_a_silent_inf(make):
    f = make("""
        def f(y, x):
            y += math.lgamma(x)
    """)
    with pytest.raises(revbench.ReversibilityError, match="infinite or nan"):
        f(0.0, -3.0)


def test_lgamma_of_an_array_expression(make):
    f = make("""
        def f(y, x):
            y += math.lgamma(x)
    """)
    x = np.array([0.5, 1.5, 4.0])
    np.testing.assert_allclose(f(np.zeros(3), x)[0], sc.gammaln(x), rtol=1e-15)


# --------------------------------------------------------------------------- #
# np.sign
# --------------------------------------------------------------------------- #
def test_sign_values_gradient_and_ints(make):
    f = make("""
        def f(y, x, k):
            y += np.sign(x) * x * x + np.sign(k)
    """)
    x = np.array([-2.0, 0.0, 3.0])
    out = f(np.zeros(3), x, -4)[0]
    np.testing.assert_array_equal(out, np.sign(x) * x * x + np.sign(-4))
    # d/dx sign(x) x^2 = 2 |x| (sign's own derivative is 0)
    _, grads = revbench.value_and_grad(f, loss=("y", 2))(np.zeros(3), x, -4)
    np.testing.assert_array_equal(grads[1], [0.0, 0.0, 6.0])
    g = make("""
        def g(a, k):
            a += np.sign(k)
    """)
    a, _ = g(0, -7)
    assert a == -1 and type(a) is int


def test_sign_matches_jax_first_and_second_derivatives(make):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    f = make("""
        def f(y, x):
            y += np.sign(x) * x * x * x
    """)
    for x in (-1.5, 0.7, 2.0):
        def loss(v):
            return jax.numpy.sign(v) * v ** 3

        assert revbench.grad(f, loss="y")(0.0, x)[1] == pytest.approx(float(jax.grad(loss)(x)))
        assert revbench.hvp(f, loss="y", wrt="x")(0.0, x, 1.0) == pytest.approx(
            float(jax.grad(jax.grad(loss))(x)))

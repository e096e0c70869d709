"""revbench's own elementary functions (``rules/special.py``): accurate, and the same bits
on every path.

``tanh`` of a real number is revbench's own straight-line code, not the C library's, so
that a loop of it vectorises (docs/language.md section 9, docs/performance.md).  These
tests hold it to what that promises: within 1.5 ulp of the true value (mpmath, 40
digits), the documented values at the edges (signed zeros, infinities, nan, the ends of
both formulas), the same bits on the Python backend, revbench's code generator and Numba,
in scalar code and in a whole-array loop the generator vectorises -- and derivatives
that use it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_edge_semantics import on_every_path
from test_native import same

import revbench
from revbench.rules import special

mpmath = pytest.importorskip("mpmath")


def ulps(got: float, x: float) -> float:
    """|got - tanh(x)| in units in the last place of the true value."""
    with mpmath.workdps(40):
        true = mpmath.tanh(mpmath.mpf(x))
        if true == 0:
            return 0.0 if got == 0 else math.inf
        return float(abs(mpmath.mpf(got) - true) / math.ulp(float(true)))


def arguments(n: int, seed: int) -> np.ndarray:
    """Arguments over every range the formulas treat apart: tiny, around the switch at
    0.55, the exponential's whole range and past the cap at 20."""
    rng = np.random.default_rng(seed)
    return np.concatenate([
        rng.normal(size=n) * 3, rng.uniform(0.54, 0.56, n // 4), rng.uniform(-1e-3, 1e-3, n // 8),
        np.exp(rng.uniform(-745, 3.5, n // 4)), rng.uniform(17, 21, n // 8),
        -np.exp(rng.uniform(-30, 3, n // 8))])


def test_tanh_is_within_one_and_a_half_ulp_of_the_true_value():
    xs = arguments(4000, seed=1)
    worst = max(ulps(special.tanh(float(x)), float(x)) for x in xs)
    assert worst <= 1.5, worst


@pytest.mark.parametrize("x, expected", [
    (0.0, 0.0), (-0.0, -0.0), (math.inf, 1.0), (-math.inf, -1.0), (5e-324, 5e-324),
    (-1e-310, -1e-310), (1e-8, 1e-8), (20.0, 1.0), (-25.0, -1.0), (1e300, 1.0),
    (19.0, math.tanh(19.0))])
def test_tanh_at_the_edges(x, expected):
    got = special.tanh(x)
    assert same(got, expected), (x, got)
    assert math.isnan(special.tanh(math.nan))


def test_tanh_is_odd_and_monotone():
    xs = np.sort(np.abs(arguments(3000, seed=2)))
    ys = np.array([special.tanh(float(x)) for x in xs])
    assert np.all(np.diff(ys) >= 0)  # (a faithful rounding that is monotone)
    assert all(special.tanh(-float(x)) == -special.tanh(float(x)) for x in xs[::7])


TANH = """
def f(y, x):
    y += np.tanh(x)
"""

TANH_ARRAY = """
def f(H, Z):
    H += np.tanh(Z)
"""


@pytest.mark.parametrize("check", [True, False])
def test_a_scalar_tanh_gives_the_same_bits_on_every_path(monkeypatch, check):
    for x in (0.3, 0.5499999999999999, 0.55, 0.7, -2.0, 19.999, 20.0, 1e-300, -0.0, 7,
              math.inf):
        out = on_every_path(monkeypatch, TANH, (0.0, x), check=check)
        assert out[0] == "returned" and same(out[1][0], 0.0 + special.tanh(float(x))), (x, out)


@pytest.mark.parametrize("check", [True, False])
def test_a_whole_array_tanh_gives_the_same_bits_on_every_path(monkeypatch, check):
    """The loop the code generator vectorises (several elements at a time) gives each
    element the bits of the scalar code: 2,000 arguments of every range, nan included with
    checks off (checked, a nan is refused by the update's finiteness check)."""
    z = arguments(1000, seed=3)
    if not check:
        z[::97] = np.nan
    Z = z[: (z.size // 8) * 8].reshape(-1, 8)
    out = on_every_path(monkeypatch, TANH_ARRAY, (np.zeros_like(Z), Z), check=check)
    assert out[0] == "returned"
    want = 0.0 + np.array([special.tanh(float(v)) for v in Z.ravel()]).reshape(Z.shape)
    assert same(out[1][0], want)


def test_the_code_generator_needs_no_zero_test_for_tanh_s_division():
    """``tanh``'s divisor is never zero (``special.NONZERO_DIVISORS``), so its inlined code
    has no division-by-zero exit -- the exit that kept a loop of it from vectorising --
    where a function that may divide by zero keeps its test."""
    from revbench.backends.native import lower

    assert special.tanh.__code__ in special.NONZERO_DIVISORS
    assert special.digamma.__code__ not in special.NONZERO_DIVISORS

    def messages(fn) -> list[str]:
        src = "def g(y, x):\n    y += own(x)\n    return (y, x)\n"
        k = lower.Kernel(src, "g", 1, lambda symbol: None,
                         resolve_python=lambda name: fn if name == "own" else None)
        return lower.lower_module(k, (lower.F64, lower.F64))[2]

    assert not any("division by zero" in m for m in messages(special.tanh))
    assert any("division by zero" in m for m in messages(special.digamma))


def test_gradients_through_tanh_use_it_and_match_the_hand_derived_ones():
    src = """
def f(loss, w, x):
    with routine:
        h = np.zeros(len(w))
        h += np.tanh(w * x)
    loss += np.sum(h * h)
    ~routine
"""
    rng = np.random.default_rng(4)
    w, x = rng.normal(size=5), rng.normal(size=5) * 2
    for backend in ("python", "numba"):
        f = revbench.define(src, {"np": np}, backend=backend)["f"]
        g = revbench.grad(f, loss="loss", wrt="w")(0.0, w, x)[1]
        t = np.array([special.tanh(float(v)) for v in w * x])
        assert np.allclose(g, 2 * t * (1 - t * t) * x, rtol=1e-14, atol=0), backend

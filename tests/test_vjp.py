"""``revbench.vjp``: cotangents of any outputs, pulled back to chosen inputs by one sweep.

Oracles: the Jacobian (``ct @ J`` for every cotangent, ``jacobian`` computed by unit seeds),
central finite differences of ``<ct, outputs>``, and hand-derived values; on both backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ad_roundtrip import CHAOS  # the chaotic map whose sweep cannot come back

import revbench
from revbench import ReversibilityError, ReversibilityTypeError, jacobian, vjp

RESID = """
    def resid(r, s, a, x, n):
        for i in range(len(r)):
            r[i] += a[i] * x[i] * x[i] + sin(s)
        for i in range(n):
            s += x[i] * a[i]
"""
# r_i = a_i x_i^2 + sin(s0), s = s0 + sum_{i<n} x_i a_i


def resid_args():
    return np.zeros(3), 0.5, np.array([1.0, 10.0, -2.0]), np.array([1.5, 2.0, -0.5]), 2


def fd_pullback(f, args, ko, kw, cts, eps=1e-6):
    """Central differences of sum_k <ct_k, outputs_k> with respect to argument kw."""
    def objective(a):
        out = f(*(x.copy() if isinstance(x, np.ndarray) else x for x in a))
        return sum(np.sum(np.asarray(ct) * np.asarray(out[k])) for k, ct in zip(ko, cts))
    base = args[kw]
    if isinstance(base, np.ndarray):
        g = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            up, down = list(args), list(args)
            up[kw], down[kw] = base.copy(), base.copy()
            up[kw][idx] += eps
            down[kw][idx] -= eps
            g[idx] = (objective(up) - objective(down)) / (2 * eps)
        return g
    up, down = list(args), list(args)
    up[kw], down[kw] = base + eps, base - eps
    return (objective(up) - objective(down)) / (2 * eps)


def test_pullback_of_two_outputs_matches_hand_derived_values(make):
    f = make(RESID)
    args = resid_args()
    _, s0, a, x, n = args
    outs, pullback = vjp(f, *args, outputs=("r", "s"), wrt=("a", "x", "s"))
    np.testing.assert_allclose(outs[0], a * x * x + np.sin(s0))
    assert outs[1] == pytest.approx(s0 + x[0] * a[0] + x[1] * a[1])
    cr, cs = np.array([1.0, -2.0, 0.5]), 3.0
    ga, gx, gs = pullback(cr, cs)
    mask = np.arange(3) < n
    np.testing.assert_allclose(ga, cr * x * x + cs * x * mask)
    np.testing.assert_allclose(gx, cr * 2 * a * x + cs * a * mask)
    assert gs == pytest.approx(cs + np.cos(s0) * cr.sum())
    assert isinstance(gs, float)


def test_pullback_is_ct_times_the_jacobian(make):
    f = make(RESID)
    args = resid_args()
    rng = np.random.default_rng(3)
    _, pullback = vjp(f, *args, outputs="r", wrt=("a", "x"))
    Ja, Jx = jacobian(f, outputs="r", wrt=("a", "x"))(*args)
    for _ in range(3):
        ct = rng.normal(size=3)
        ga, gx = pullback(ct)
        np.testing.assert_allclose(ga, ct @ Ja, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gx, ct @ Jx, rtol=1e-12, atol=1e-12)


def test_pullback_against_finite_differences(make):
    f = make(RESID)
    args = resid_args()
    cts = (np.array([0.3, -1.0, 2.0]), -0.7)
    _, pullback = vjp(f, *args, outputs=(0, 1), wrt=(1, 2, 3))
    got = pullback(*cts)
    for g, kw in zip(got, (1, 2, 3)):
        np.testing.assert_allclose(g, fd_pullback(f, args, (0, 1), kw, cts), rtol=1e-6, atol=1e-8)


def test_wrt_none_is_aligned_with_all_arguments_and_ints_get_none(make):
    f = make(RESID)
    args = resid_args()
    (_r,), pullback = vjp(f, *args, outputs="r")
    grads = pullback(np.ones(3))
    assert len(grads) == 5 and grads[4] is None
    np.testing.assert_allclose(grads[0], np.ones(3))  # r's final value is r at entry plus ...
    assert grads[1] == pytest.approx(3 * np.cos(0.5))
    # an int argument named in wrt is an error (issue 26): named, a gradient is never None
    with pytest.raises(ReversibilityTypeError, match="`n` is named in wrt="):
        vjp(f, *args, outputs="r", wrt=("n",))


def test_same_as_grad_for_a_scalar_output(make):
    f = make(RESID)
    args = resid_args()
    g = revbench.grad(f, loss="s")(*args)
    _, pullback = vjp(f, *args, outputs="s")
    got = pullback(1.0)
    for a, b in zip(got, g):
        if b is None:
            assert a is None
        else:
            np.testing.assert_allclose(a, b)


def test_pullback_twice_and_nothing_of_the_callers_changes(make):
    f = make(RESID)
    args = resid_args()
    keep = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    outs, pullback = vjp(f, *args, outputs="r", wrt=("r", "x"))
    ct = np.array([1.0, 2.0, 3.0])
    first = pullback(ct)
    outs[0][:] = 99.0  # the caller may change the outputs: the sweep has its own state
    second = pullback(ct)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert first[0] is not second[0]  # fresh arrays per call
    np.testing.assert_array_equal(ct, [1.0, 2.0, 3.0])
    for a, b in zip(args, keep):
        np.testing.assert_array_equal(a, b)
    zero = pullback(None)  # None: a zero cotangent
    assert not zero[0].any() and not zero[1].any()


def test_an_unwritten_output_pulls_back_to_itself(make):
    f = make(RESID)
    args = resid_args()
    (a,), pullback = vjp(f, *args, outputs="a", wrt="a")
    assert a is args[2] or np.array_equal(a, args[2])
    np.testing.assert_allclose(pullback(np.array([1.0, 2.0, 3.0]))[0], [1.0, 2.0, 3.0])


def test_complex_output_and_argument_follow_the_grad_convention(make):
    f = make("""
        def cplx(z, w, t):
            z += w * w * t
    """)
    w, t = 1.0 + 2.0j, 0.7
    (z,), pullback = vjp(f, 0j, w, t, outputs="z", wrt=("w", "t"))
    assert z == pytest.approx(w * w * t)
    c = 0.3 - 1.1j
    gw, gt = pullback(c)
    # L = Re(conj(c) z): dL/dRe(w) + i dL/dIm(w) = conj(conj(c) * dz/dw) for holomorphic z
    assert gw == pytest.approx(np.conj(np.conj(c) * 2 * w * t))
    assert gt == pytest.approx((np.conj(c) * w * w).real)
    assert isinstance(gt, float) and isinstance(gw, complex)


def test_inverse_view(make):
    f = make("""
        def double(x):
            for i in range(len(x)):
                x[i] *= 2.0
    """)
    (x,), pullback = vjp(~f, np.array([4.0, 6.0]), outputs="x")
    np.testing.assert_allclose(x, [2.0, 3.0])
    np.testing.assert_allclose(pullback(np.array([1.0, 1.0]))[0], [0.5, 0.5])


def test_bad_requests_are_refused_clearly(make):
    f = make(RESID)
    args = resid_args()
    with pytest.raises(ValueError, match="'q' is not an argument"):
        vjp(f, *args, outputs="q")
    with pytest.raises(ValueError, match="names an argument twice"):
        vjp(f, *args, outputs=("r", 0))
    with pytest.raises(ValueError, match="names no argument"):
        vjp(f, *args, outputs=())
    with pytest.raises(ReversibilityTypeError, match="output `n` must be a float or complex"):
        vjp(f, *args, outputs="n")
    with pytest.raises(TypeError, match="takes 5 argument"):
        vjp(f, *args[:4], outputs="r")
    with pytest.raises(TypeError, match="reversible function"):
        vjp(np.sin, 1.0, outputs=0)
    _, pullback = vjp(f, *args, outputs=("r", "s"))
    with pytest.raises(TypeError, match=r"one cotangent per output \(r, s\), got 1"):
        pullback(np.ones(3))
    with pytest.raises(ValueError, match=r"cotangent of `r` has shape \(2,\); `r` has shape \(3,\)"):
        pullback(np.ones(2), 1.0)
    with pytest.raises(ValueError, match=r"cotangent of `s` has shape \(3,\).*a scalar"):
        pullback(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="cotangent of `s` is complex"):
        pullback(np.ones(3), 1j)
    with pytest.raises(TypeError, match="cotangent of `r` must be a number"):
        pullback(["a", "b", "c"], 1.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_sweep_that_does_not_recover_the_inputs_raises(make):
    chaos = make(CHAOS)
    args = (0.0, np.array([0.1, 0.7, 1.3, 2.9]), np.array([0.0, 0.2, -0.3, 0.5]), 6.0, 2000)
    _, pullback = vjp(chaos, *args, outputs="L", wrt="p")
    with pytest.raises(ReversibilityError, match=r"vjp\(chaos\): the reverse sweep did not recover "
                                                 r"the value of argument `x`") as info:
        pullback(1.0)
    assert info.value.variable == "x"
    # a few steps are recovered fine
    _, pullback = vjp(chaos, *args[:4], 3, outputs="L", wrt="p")
    assert np.isfinite(pullback(1.0)[0]).all()

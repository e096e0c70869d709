"""``check_grad`` judges a gradient at the scale of its values.

Its step is relative to each element (``h = eps * max(1, |x|)``) and its tolerance adds the
finite difference's estimated error (the rounding of the loss, about
``machine_eps * |loss| / h``), so a right gradient of a loss of hundreds or millions is not
called wrong -- a fixed step of 1e-6 and a fixed tolerance did that to a user's MLP -- while a
gradient a few percent off still is, with a message that says the step, the loss, the
estimated error and the tolerance it applied.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import revbench
from revbench import check_grad, grad

MLP = """
    def mlp(loss, W, v, X, Y):
        Z = np.zeros((X.shape[0], W.shape[1]))
        Z += X @ W
        H = np.zeros((X.shape[0], W.shape[1]))
        H += np.tanh(Z)
        loss += 0.5 * np.sum((H @ v - Y) ** 2)
        H -= np.tanh(Z)
        del H
        Z -= X @ W
        del Z
"""


def _near_the_fit(scale: float, seed: int = 0):
    """An MLP's arguments with its output weights ``v`` near the least-squares fit: a large
    loss (the targets' misfit) and small gradients -- what the user's check met."""
    rng = np.random.default_rng(seed)
    X, W = rng.normal(size=(40, 3)), rng.normal(size=(3, 5))
    Y = scale * 6.0 * rng.normal(size=40)
    H = np.tanh(X @ W)
    v = np.linalg.lstsq(H, Y, rcond=None)[0] + 1e-4 * rng.normal(size=5)
    return (0.0, W, v, X, Y), H


@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_a_right_gradient_of_a_large_loss_passes(make, scale):
    """A loss of about 670 (scale 1) or 67000 (scale 10): with the old fixed step
    (1e-6) and tolerance, d loss / d v failed by a few 1e-7 -- the finite difference's
    own rounding error, not the gradient's."""
    f = make(MLP)
    args, H = _near_the_fit(scale)
    loss = f(*args)[0]
    assert 400.0 * scale ** 2 < loss < 1e3 * scale ** 2
    g = grad(f, loss="loss")(*args)
    v, Y = args[2], args[4]
    np.testing.assert_allclose(g[2], H.T @ (H @ v - Y), rtol=1e-9, atol=1e-9 * loss)
    assert np.min(np.abs(g[2])) < 0.01  # small next to the loss
    checked = check_grad(f, *args, loss="loss", wrt=("W", "v"))
    np.testing.assert_array_equal(checked[2], g[2])
    # the tolerance follows the finite difference's error for a step given as well
    check_grad(f, *args, loss="loss", wrt="v", eps=1e-6)


def test_the_old_fixed_step_and_tolerance_did_reject_it(make):
    """What the user met, redone by hand: central differences with h = 1e-6 against
    |ad - fd| <= 1e-7 + 1e-5 |fd| fail for the right gradient of this loss.  (At the loss
    of about 67000: the differences' rounding, about 1e-5 there, is far past 1e-7; at 670
    it is about 1e-7, and whether one of five elements fails is the BLAS build's last
    bits.)"""
    f = make(MLP)
    args, _ = _near_the_fit(10.0)
    g = grad(f, loss="loss")(*args)[2]
    failed = []
    for i in range(len(args[2])):
        plus, minus = [list(args) for _ in range(2)]
        plus[2], minus[2] = args[2].copy(), args[2].copy()
        plus[2][i] += 1e-6
        minus[2][i] -= 1e-6
        fd = (f(*plus)[0] - f(*minus)[0]) / 2e-6
        failed.append(not abs(g[i] - fd) <= 1e-7 + 1e-5 * abs(fd))
    assert any(failed)


def test_a_large_constant_loss_with_a_small_slope(make):
    """loss = 1e4 + 0.01 sum(sin x): the slope is 1e6 times smaller than the loss."""
    f = make("""
        def f(loss, x):
            loss += 1e4 + 0.01 * np.sum(np.sin(x))
    """)
    x = np.linspace(-2.0, 3.0, 12)
    g = check_grad(f, 0.0, x, loss="loss")
    np.testing.assert_allclose(g[1], 0.01 * np.cos(x), rtol=1e-12)
    big = check_grad(f, 0.0, 1e3 * x, loss="loss")  # elements of 1e3: steps of 6e-3
    np.testing.assert_allclose(big[1], 0.01 * np.cos(1e3 * x), rtol=1e-9)


def _adjoint(factor: float):
    def adjoint(loss, x, loss_bar, x_bar):
        return loss_bar, x_bar + loss_bar * factor * 0.01 * np.cos(x)
    adjoint.__name__ = f"slope_times_{str(factor).replace('.', '_')}"
    return adjoint


@pytest.mark.parametrize("factor", [1.03, 0.98])
def test_a_gradient_a_few_percent_off_is_still_rejected_and_the_message_says_why(make, factor):
    f = make("""
        def slope(loss, x):
            loss += 1e4 + 0.01 * np.sum(np.sin(x))
    """)
    x = np.linspace(-2.0, 3.0, 7)
    try:
        revbench.custom_adjoint(f, _adjoint(1.0))
        check_grad(f, 0.0, x, loss="loss")  # the right adjoint passes
        revbench.custom_adjoint(f, _adjoint(factor))
        with pytest.raises(AssertionError) as info:
            check_grad(f, 0.0, x, loss="loss")
    finally:
        revbench.remove_adjoint(f)
    msg = str(info.value)
    assert msg.startswith("check_grad(slope): d loss / d x[0]: AD gives ")
    assert "step: h = 1.2e-05 either way (eps=6e-06 times max(1, |x[0]|) = 2)" in msg
    assert "loss: 10000" in msg
    assert "estimated finite-difference error: " in msg
    assert "tolerance: atol + rtol * |fd| + estimated error = 1e-07 + 1e-05 * " in msg
    assert f"custom adjoint(s) slope_times_{str(factor).replace('.', '_')} (of slope)" in msg


def test_a_wrong_derived_gradient_is_not_blamed_on_an_adjoint(make, monkeypatch):
    """Without custom adjoints the message does not send the user to one: it says what
    the options change."""
    f = make("""
        def f(loss, x):
            loss += 766.0 * np.sum(x * x)
    """)
    import revbench.ad.reverse as reverse

    real = reverse.grad

    def off(*a, **kw):  # the gradient, 2 % too large
        run = real(*a, **kw)
        return lambda *args: tuple(None if v is None else 1.02 * v for v in run(*args))

    monkeypatch.setattr(reverse, "grad", off)
    with pytest.raises(AssertionError) as info:
        check_grad(f, 0.0, np.array([0.5, -2.0]), loss="loss", wrt="x")
    msg = str(info.value)
    assert "d loss / d x[0]" in msg and "adjoint" not in msg
    assert "(eps= sets the relative step; rtol= and atol= loosen the comparison)" in msg
    assert "loss: 3255.5" in msg  # 766 * (0.25 + 4), at x[0] +- h


def test_complex_arguments_are_checked_part_by_part(make):
    f = make("""
        def f(loss, z):
            loss += 500.0 * np.real(z * z) + np.imag(z)
    """)
    g = check_grad(f, 0.0, 3.0 - 40.0j, loss="loss")
    assert g[1] == pytest.approx(1000.0 * np.conj(3.0 - 40.0j) + 1j, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(eps=0), dict(eps=-6e-6), dict(eps=math.nan),
                                dict(eps=math.inf), dict(eps=True), dict(eps="6e-6"),
                                dict(eps=None), dict(rtol=-1e-5), dict(rtol=math.inf),
                                dict(atol=-1e-7), dict(atol=math.nan), dict(atol=False)])
def test_steps_and_tolerances_are_still_validated(make, kw):
    f = make("""
        def f(v, x):
            v += x * x
    """)
    with pytest.raises(ValueError, match=next(iter(kw))):
        check_grad(f, 0.0, 1.0, loss="v", **kw)
    assert check_grad(f, 0.0, 1.0, loss="v", eps=1e-3, rtol=0.0, atol=0.0) == \
        pytest.approx((1.0, 2.0))

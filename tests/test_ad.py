"""Automatic differentiation by reverse computing: hand-derived values and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import revbench
from revbench import check_grad, grad, jacobian, value_and_grad
from revbench.transforms.pipeline import BACKWARD


def test_contract_example(make):
    poly = make("""
        def poly(y, x):
            t = 0.0
            t += x * x
            y += 3.0 * t + x
            t -= x * x
            del t
    """)
    assert grad(poly, loss="y")(0.0, 2.0) == pytest.approx((1.0, 13.0))
    outs, grads = value_and_grad(poly, loss="y")(0.0, 2.0)
    assert outs == (14.0, 2.0) and grads == pytest.approx((1.0, 13.0))
    assert grad(poly, loss=0)(0.0, 2.0) == pytest.approx((1.0, 13.0))


def test_ancilla_from_expression_passes_its_gradient_back(make):
    # t = x * y is allocated from an expression; dL/dx must include the path through t
    f = make("""
        def f(L, x, y):
            t = x * y
            L += t * t
            del t
    """)
    x, y = 1.5, -0.5
    gL, gx, gy = grad(f, loss="L")(0.0, x, y)
    assert gL == 1.0
    assert gx == pytest.approx(2 * x * y * y) and gy == pytest.approx(2 * x * x * y)


def test_mul_div_hand_derived(make):
    f = make("""
        def f(y, a, b):
            y *= a
            y /= b
            y += a * b
    """)
    y, a, b = 2.0, 3.0, 5.0
    gy, ga, gb = grad(f, loss="y")(y, a, b)
    # y_out = y a / b + a b
    assert gy == pytest.approx(a / b)
    assert ga == pytest.approx(y / b + b)
    assert gb == pytest.approx(-y * a / b**2 + a)


def test_ints_and_bools_have_no_gradient(make):
    f = make("""
        def f(y, n, flag, x):
            for i in range(n):
                y += x * i
            if flag:
                y += x
    """)
    g = grad(f, loss="y")(0.0, 4, True, 2.0)
    assert g[1] is None and g[2] is None
    assert g[3] == pytest.approx(0 + 1 + 2 + 3 + 1)


def test_complex_convention(make):
    # L = Re(z) where z += c * w : dL/dRe(w) + i dL/dIm(w) = conj(c)
    f = make("""
        def f(L, z, w):
            z += (2.0 + 3.0j) * w
            t = 0.0
            t += abs(z)
            L += t * t
            t -= abs(z)
            del t
    """)
    z, w = 1.0 + 0.5j, 0.3 - 0.2j
    _, gz, gw = grad(f, loss="L")(0.0, z, w)
    # L = |z + c w|^2 ; dL/dRe + i dL/dIm = 2 (z + c w) conj-weighted
    zz = z + (2 + 3j) * w
    assert gz == pytest.approx(2 * zz)
    assert gw == pytest.approx(2 * zz * np.conj(2 + 3j))
    check_grad(f, 0.0, z, w, loss="L")


CORPUS = {
    "functions": ("""
        def f(y, x, a):
            y += np.sin(x) * math.exp(a) + np.tanh(x * a) - np.sqrt(a) + np.log1p(x * x)
            y += np.arctan2(x, a) + np.hypot(x, a) + np.maximum(x, a) * min(x, a) + abs(x)
            y += np.cos(x) ** 2 + a ** x + np.expm1(x) + np.sinh(a) / np.cosh(x) + np.arctan(x)
    """, (0.0, 0.7, 1.3), "y"),
    "routine_and_if": ("""
        def f(y, x, k):
            with routine:
                t = 0.0
                t += x * x
                if (x > 0.0, t > 0.0):
                    t *= 2.0
            y += t * k
            ~routine
    """, (0.0, 0.9, 1.7), "y"),
    "while_loop": ("""
        def f(y, x, n):
            k = 0
            while (k < n, k > 0):
                y += x * k
                y *= 1.1
                k += 1
            while (k > 0, k < n):
                k -= 1
            del k
    """, (0.5, 0.3, 5), "y"),
    "swap_and_inverted": ("""
        def f(y, z, x):
            y += x * x
            y, z = z, y
            with inverted:
                z -= np.sin(x) * y
    """, (0.1, 0.2, 0.8), "z"),
    "arrays": ("""
        def f(L, x, w):
            t = np.zeros(len(x))
            for i in range(len(x)):
                t[i] += w * x[i] * x[i]
            L += t[0] * t[1]
            for i in range(1, len(x)):
                L += t[i] / (1.0 + x[i - 1] ** 2)
            for i in range(len(x)):
                t[i] -= w * x[i] * x[i]
            del t
    """, (0.0, np.array([0.3, -0.4, 0.9, 1.1]), 0.6), "L"),
    "whole_array_with_scalar": ("""
        def f(y, a, x):
            y += a * x
            y *= 1.5
            y -= np.sin(x) * a
    """, (np.array([0.1, 0.2, 0.3]), 0.7, np.array([1.0, -2.0, 0.5])), ("y", 1)),
    "copy_ancilla": ("""
        def f(L, x):
            t = x.copy()
            t *= 3.0
            L += t[0] * t[2]
            t /= 3.0
            del t
    """, (0.0, np.array([0.5, 1.5, -2.0])), "L"),
    "matrix": ("""
        def f(r, A, x):
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    r[i] += A[i, j] * x[j]
    """, (np.zeros(2), np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.array([0.5, -1.0, 2.0])),
        ("r", 1)),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_against_finite_differences(make, name):
    src, args, loss = CORPUS[name]
    f = make(src)
    check_grad(f, *args, loss=loss, rtol=1e-5, atol=1e-6)


def test_calls_differentiate_through_callee_and_its_inverse(make):
    fns = make("""
        def square_into(t, x):
            t += x * x

        def f(y, x, a):
            t = 0.0
            square_into(t, x)
            y += a * t
            ~square_into(t, x)
            del t
            y *= a
    """, all=True)
    f = fns["f"]
    y, x, a = 0.4, 1.3, 0.6
    g = check_grad(f, y, x, a, loss="y")
    assert g[1] == pytest.approx(2 * a * x * a)  # y_out = (y + a x^2) a


def test_element_arguments_carry_their_adjoints(make):
    fns = make("""
        def mul_add(y, a, b):
            y += a * b

        def f(r, x):
            for i in range(len(r)):
                mul_add(r[i], x[i], x[i + 1])
    """, all=True)
    r, x = np.zeros(3), np.array([1.0, 2.0, 3.0, 4.0])
    J = jacobian(fns["f"], outputs="r", wrt="x")(r, x)
    expected = np.array([[2.0, 1.0, 0, 0], [0, 3.0, 2.0, 0], [0, 0, 4.0, 3.0]])
    np.testing.assert_allclose(J, expected)


def test_gradient_of_the_inverse(make):
    f = make("""
        def f(y, x):
            y += x * x
            y *= 2.0
    """)
    # (~f): y_in -> y/2 - x^2
    g = grad(~f, loss="y")(3.0, 1.5)
    assert g == pytest.approx((0.5, -3.0))


def test_users_arrays_are_not_modified(make):
    f = make("""
        def f(y, x):
            for i in range(len(x)):
                y[i] += x[i] * x[i]
    """)
    y, x = np.ones(3), np.arange(3.0)
    grad(f, loss=("y", 2))(y, x)
    np.testing.assert_array_equal(y, np.ones(3))
    np.testing.assert_array_equal(x, np.arange(3.0))


def test_registered_function_partials(make):
    def softplus(x):
        return math.log1p(math.exp(x))

    def dsoftplus(x):
        return 1.0 / (1.0 + math.exp(-x))

    revbench.register(softplus, partials=(dsoftplus,))
    f = make("""
        def f(y, x):
            y += softplus(x) * x
    """)
    x = 0.4
    g = grad(f, loss="y")(0.0, x)
    assert g[1] == pytest.approx(softplus(x) + x * dsoftplus(x))


def test_a_registered_function_without_partials_names_the_line_when_differentiated(make):
    def softplus_np(x):
        return math.log1p(math.exp(x))

    revbench.register(softplus_np)  # (no partials: it runs, it has no gradient)
    f = make("""
        def f(y, x):
            y += softplus_np(x)
    """)
    assert f(0.0, 0.3)[0] == pytest.approx(softplus_np(0.3))
    with pytest.raises(revbench.ReversibilityTypeError,
                       match=r"softplus_np\(\) has no partial derivative for argument 1.*"
                             r"partials=.*\n  in reversible function f, .*line 3: "
                             r"y \+= softplus_np\(x\)"):
        grad(f, loss="y")(0.0, 0.3)


def test_bad_loss_is_a_clear_error(make):
    f = make("""
        def f(y, n, z):
            y += 1.0
    """)
    with pytest.raises(ValueError, match="not an argument"):
        grad(f, loss="nope")(0.0, 1, 1j)
    with pytest.raises(TypeError, match="real float"):
        grad(f, loss="n")(0.0, 1, 1j)
    with pytest.raises(TypeError, match="real float"):
        grad(f, loss="z")(0.0, 1, 1j)


def test_adjoint_source_is_reversible_plain_code(make):
    f = make("""
        def f(y, x):
            y += np.sin(x)
    """)
    src = f.source("adjoint")
    assert "_rb_adj_x" in src and "cos" in src


def test_jacobian_with_several_lanes_matches_row_by_row(make, monkeypatch):
    f = make("""
        def f(r, x, c):
            for i in range(len(r)):
                t = x[i % len(x)] * c
                r[i] += np.sin(t) * x[(i + 1) % len(x)]
                r[i] *= 1.5
                del t
    """)
    r, x = np.zeros(11), np.linspace(0.2, 1.4, 5)
    J8 = jacobian(f, outputs="r", wrt="x")(r, x, 0.7)
    monkeypatch.setattr(revbench.ad.reverse, "JACOBIAN_LANES", 1)
    J1 = jacobian(f, outputs="r", wrt="x")(r, x, 0.7)
    np.testing.assert_allclose(J8, J1, rtol=1e-12)
    eps = 1e-6
    for j in range(len(x)):
        xp, xm = x.copy(), x.copy()
        xp[j] += eps
        xm[j] -= eps
        fd = (f(np.zeros(11), xp, 0.7)[0] - f(np.zeros(11), xm, 0.7)[0]) / (2 * eps)
        np.testing.assert_allclose(J8[:, j], fd, rtol=1e-6, atol=1e-8)


def test_backward_kernel_with_lanes_through_calls(make):
    fns = make("""
        def g(a, b, x):
            a += x * x
            b += np.sin(x) * a

        def f(r0, r1, x, y):
            t = x * y
            g(r0, r1, t)
            r0 += y
            del t
    """, all=True)
    f = fns["f"]
    args = (0.0, 0.0, 0.5, 2.0)
    bk = f.kernel("backward", *args, lanes=2)
    out = f(*args)
    seeds = (1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0)  # lane 0 seeds r0, lane 1 seeds r1
    res = bk(*out, *seeds, 1e-8, 1e-8)
    assert res[:4] == pytest.approx(args)  # the sweep restores the inputs
    lane0, lane1 = res[4:8], res[8:12]
    assert lane0 == pytest.approx(grad(f, loss="r0")(*args))
    assert lane1 == pytest.approx(grad(f, loss="r1")(*args))


def test_wrt_drops_adjoint_code_of_read_only_data(make):
    fns = make("""
        def inner(s, w, z):
            for g in range(len(z)):
                s += w[g] * z[g]

        def f(s, w, z, c):
            inner(s, w, z)
            s *= c
    """, all=True)
    f = fns["f"]
    w, z = np.array([0.5, -1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    full = grad(f, loss="s")(0.0, w, z, 2.0)
    only_w = grad(f, loss="s", wrt=("w",))(0.0, w, z, 2.0)
    assert only_w[2] is None and only_w[3] is None  # z and c left out
    np.testing.assert_allclose(only_w[1], full[1])
    assert only_w[0] == full[0]
    with_c = grad(f, loss=0, wrt=["w", 3])(0.0, w, z, 2.0)
    assert with_c[3] == pytest.approx(full[3]) and with_c[2] is None
    src = f.kernel("backward", 0.0, w, z, 2.0, wrt=("w",))
    assert src is not None
    bwd_src = f._program.generate(BACKWARD, f.backend, f.check, f.signature_of((0.0, w, z, 2.0)),
                                  compile_callees=False, inactive=frozenset({"z", "c"}))[0].source
    assert "_rb_adj_z" not in bwd_src and "_rb_adj_c" not in bwd_src
    J = jacobian(f, outputs="s", wrt="w")(0.0, w, z, 2.0)
    np.testing.assert_allclose(J[0], full[1])


def test_wrt_cannot_leave_out_an_argument_the_program_changes(make):
    f = make("""
        def f(s, t, x):
            t += x
            s += t * t
    """)
    g = grad(f, loss="s", wrt=("x",))(0.0, 1.0, 2.0)
    assert g[1] == pytest.approx(6.0) and g[2] == pytest.approx(6.0)  # t changes: kept


def test_an_argument_named_twice_in_wrt_or_outputs_is_refused(make):
    f = make("""
        def f(s, x):
            s += x * x
    """)
    for wrt in (("x", "x"), ("x", 1)):  # (by name and position alike)
        with pytest.raises(ValueError, match=r"grad: wrt names an argument twice"):
            grad(f, loss="s", wrt=wrt)
        with pytest.raises(ValueError, match=r"value_and_grad: wrt names an argument twice"):
            value_and_grad(f, loss="s", wrt=wrt)
    with pytest.raises(ValueError, match=r"jacobian: outputs names an argument twice"):
        revbench.jacobian(f, outputs=["s", "s"], wrt="x")(0.0, 1.0)


def test_kinks_get_the_central_difference_subgradient(make):
    f = make("""
        def f(y, a, b, c):
            y += abs(a) + np.hypot(b, b) + min(a, c) + max(c, a)
    """)
    g = grad(f, loss="y")(0.0, 0.0, 0.0, 0.0)  # every function at its kink
    assert g == pytest.approx((1.0, 1.0, 0.0, 1.0))  # abs: 0; min/max ties: 1/2 + 1/2
    check_grad(f, 0.0, 0.0, 0.0, 0.0, loss="y")
    check_grad(f, 0.0, -0.3, 0.7, 0.2, loss="y")


def test_infinite_slopes_give_zero_not_a_division_by_zero(make):
    """docs/ad.md, section 5: where the one-sided limit of the derivative is infinite (asin,
    acos at +-1, acosh at 1, atanh's pole) or at a kink with no derivative (atan2 and the
    modulus of a complex number at 0), the gradient is 0, as for sqrt at 0 -- in reverse
    and forward mode alike.  (These used to stop with a bare ZeroDivisionError.)"""
    f = make("""
        def f(y, a, b, c, d):
            y += np.arcsin(a) + np.arccos(b) + np.arccosh(c) + np.arctan2(d, d)
    """)
    assert grad(f, loss="y")(0.0, 1.0, -1.0, 1.0, 0.0)[1:] == (0.0, 0.0, 0.0, 0.0)
    ys = revbench.jvp(f, 0.0, 1.0, -1.0, 1.0, 0.0, tangents={"a": 1.0, "b": 1.0, "c": 1.0,
                                                               "d": 1.0}, outputs="y")
    assert ys[1] == (0.0,)  # (the tangents of the outputs named)
    h = make("""
        def h(y, z, x):
            y += abs(z) + abs(x + 1j * x)
    """)
    g = grad(h, loss="y")(0.0, 0j, 0.0)
    assert g[1] == 0j and g[2] == 0.0
    # away from the points, the derivatives are the usual ones
    g = grad(f, loss="y")(0.0, 0.5, 0.5, 2.0, 1.0)
    assert g[1:] == pytest.approx((1 / np.sqrt(0.75), -1 / np.sqrt(0.75), 1 / np.sqrt(3.0), 0.0))

"""Second derivatives (``hvp``, ``hessian``): against hand-derived Hessians and central
finite differences of ``revbench.grad``, on both backends (the python backend for the
many cases, numba for a few)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import revbench
from revbench import grad, hessian, hvp


def define(source: str, backend: str = "python", **options):
    ns = {"np": np, "math": __import__("math")}
    fns = revbench.define(textwrap.dedent(source), ns, backend=backend, **options)
    return list(fns.values())[-1], fns


def fd_hessian(f, args, loss, wrt, eps=1e-5) -> np.ndarray:
    """Central differences of the AD gradient: the oracle (never used by hvp itself)."""
    k = wrt if isinstance(wrt, int) else f.params.index(wrt)
    g = grad(f, loss=loss)
    x = np.asarray(args[k], dtype=float)
    n = x.size
    H = np.empty((n, n))
    for j in range(n):
        cols = []
        for h in (eps, -eps):
            xs = x.copy().reshape(-1)
            xs[j] += h
            new = list(args)
            new[k] = xs.reshape(x.shape) if x.ndim else float(xs[0])
            cols.append(np.asarray(g(*new)[k], dtype=float).reshape(-1))
        H[:, j] = (cols[0] - cols[1]) / (2 * eps)
    return H


POLY = """
    def poly(y, x):
        t = 0.0
        t += x * x
        y += 3.0 * t * x + x
        t -= x * x
        del t
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_scalar_polynomial_hand_derived(backend):
    f, _ = define(POLY, backend)  # y = 3 x^3 + x: y'' = 18 x
    assert hvp(f, loss="y", wrt="x")(0.0, 2.0, 1.0) == pytest.approx(36.0)
    assert hvp(f, loss="y", wrt="x")(0.0, 2.0, 0.5) == pytest.approx(18.0)
    H = hessian(f, loss="y", wrt="x")(0.0, -1.5)
    assert H.shape == (1, 1) and H[0, 0] == pytest.approx(-27.0)
    assert hvp(f, loss=0, wrt=1)(0.0, 2.0, 1.0) == pytest.approx(36.0)  # positions
    assert hvp(f, loss="y", wrt=("x",))(0.0, 2.0, 1.0) == pytest.approx(36.0)


SIN_EXP_LOG = """
    def f(y, a, b):
        y += np.sin(a) * np.exp(b) + np.log(a) * b * b + a / b
"""


def hand_sin_exp_log(a, b):
    # y = sin a e^b + log(a) b^2 + a / b, as a function of (a, b)
    ab = np.cos(a) * np.exp(b) + 2 * b / a - 1 / b ** 2
    return np.array([[-np.sin(a) * np.exp(b) - b * b / a ** 2, ab],
                     [ab, np.sin(a) * np.exp(b) + 2 * np.log(a) + 2 * a / b ** 3]])


def test_sin_exp_log_products_scalar_arguments():
    f, _ = define(SIN_EXP_LOG)
    a, b = 0.7, 1.3
    H = hand_sin_exp_log(a, b)
    assert hessian(f, "y", "a")(0.0, a, b)[0, 0] == pytest.approx(H[0, 0], rel=1e-12)
    assert hessian(f, "y", "b")(0.0, a, b)[0, 0] == pytest.approx(H[1, 1], rel=1e-12)


ARRAY_FN = """
    def f(y, x):
        y += np.sin(x[0]) * np.exp(x[1]) + np.log(x[0]) * x[1] * x[1] + x[0] / x[1]
        for i in range(len(x)):
            y += x[i] * x[i] * x[i] / 6.0
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_array_hessian_hand_derived_and_symmetric(backend):
    f, _ = define(ARRAY_FN, backend)
    x = np.array([0.7, 1.3, -0.4])
    H = hessian(f, loss="y", wrt="x")(0.0, x)
    want = np.zeros((3, 3))
    want[:2, :2] = hand_sin_exp_log(*x[:2])
    want += np.diag(x)  # d2 (x^3 / 6) = x
    np.testing.assert_allclose(H, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-14)
    v = np.array([0.3, -2.0, 1.0])
    np.testing.assert_allclose(hvp(f, "y", "x")(0.0, x, v), want @ v, rtol=1e-12)
    assert x.tolist() == [0.7, 1.3, -0.4]  # the caller's array is untouched


def test_loop_over_array_against_finite_differences():
    f, _ = define("""
        def f(s, x, w):
            for i in range(len(x) - 1):
                t = x[i] * x[i + 1]
                s += w[i] * np.tanh(t) + np.sqrt(1.0 + x[i] * x[i])
                del t
    """)
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=5), rng.normal(size=4)
    H = hessian(f, "s", "x")(0.0, x, w)
    np.testing.assert_allclose(H, fd_hessian(f, (0.0, x, w), "s", "x"), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, H.T, atol=1e-13)
    # with respect to the read-only weights: the loss is linear in w
    np.testing.assert_allclose(hessian(f, "s", "w")(0.0, x, w), np.zeros((4, 4)), atol=1e-14)


def test_multiply_and_divide_updates():
    f, _ = define("""
        def f(y, x):
            u = 1.0
            u *= x[0] * x[1] + 2.0
            u /= x[2]
            y += u * u
            u *= x[2]
            u /= x[0] * x[1] + 2.0
            del u
    """)
    x = np.array([0.5, 1.5, 2.0])
    H = hessian(f, "y", "x")(0.0, x)
    np.testing.assert_allclose(H, fd_hessian(f, (0.0, x), "y", "x"), rtol=1e-6, atol=1e-7)
    a, b, c = x  # y = ((ab + 2) / c)^2
    assert H[0, 0] == pytest.approx(2 * b * b / c ** 2)
    assert H[2, 2] == pytest.approx(6 * (a * b + 2) ** 2 / c ** 4)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_call_of_another_reversible_function(backend):
    fns = revbench.define(textwrap.dedent("""
        def inner(t, a, b):
            t += a * np.exp(b)

        def outer(y, x):
            t = 0.0
            inner(t, x[0], x[1])
            y += t * t + x[2] * t
            ~inner(t, x[0], x[1])
            del t
    """), {"np": np}, backend=backend)
    f = fns["outer"]
    x = np.array([0.8, -0.3, 1.7])
    H = hessian(f, "y", "x")(0.0, x)
    np.testing.assert_allclose(H, fd_hessian(f, (0.0, x), "y", "x"), rtol=1e-6, atol=1e-7)
    b = x[1]  # t = a e^b, y = t^2 + c t
    assert H[0, 0] == pytest.approx(2 * np.exp(2 * b))
    assert H[0, 2] == pytest.approx(np.exp(b)) and H[2, 0] == pytest.approx(np.exp(b))


def test_if_routine_and_sum():
    f, _ = define("""
        def f(y, x):
            with routine:
                s = 0.0
                s += np.sum(x * x)
            if (s > 1.0, s > 1.0):
                y += s * s + np.sum(np.sin(x))
            else:
                y += np.exp(s)
            ~routine
    """)
    for x in (np.array([0.9, -0.6, 0.4]), np.array([0.3, 0.2, -0.1])):
        H = hessian(f, "y", "x")(0.0, x)
        np.testing.assert_allclose(H, fd_hessian(f, (0.0, x), "y", "x"), rtol=1e-6, atol=1e-7)
        s = float(x @ x)
        if s > 1.0:  # y = s^2 + sum sin x
            want = 8 * np.outer(x, x) + 4 * s * np.eye(3) - np.diag(np.sin(x))
        else:  # y = e^s
            want = np.exp(s) * (4 * np.outer(x, x) + 2 * np.eye(3))
        np.testing.assert_allclose(H, want, rtol=1e-12, atol=1e-12)


def test_whole_array_updates_and_array_loss_element():
    f, _ = define("""
        def f(r, x):
            r += x * x * x
            r[0] += np.sum(np.exp(x)) * x[1]
    """)
    x = np.array([0.2, -0.5, 1.1])
    for i in range(3):
        H = hessian(f, ("r", i), "x")(np.zeros(3), x)
        np.testing.assert_allclose(H, fd_hessian(f, (np.zeros(3), x), ("r", i), "x"),
                                   rtol=1e-6, atol=1e-7)
    r = np.zeros(3)
    H0 = hessian(f, ("r", 0), "x")(r, x)
    assert not r.any() and x.tolist() == [0.2, -0.5, 1.1]  # the caller's arrays untouched
    want = np.diag(np.exp(x)) * x[1]
    want[0, 0] += 6 * x[0]
    want[1, :] += np.exp(x)
    want[:, 1] += np.exp(x)
    np.testing.assert_allclose(H0, want, rtol=1e-12)


def test_max_reduction():
    f, _ = define("""
        def f(y, x):
            y += np.max(x * x) * x[0]
    """)
    x = np.array([0.5, -2.0, 1.0])  # max at x[1]: y = x1^2 x0
    H = hessian(f, "y", "x")(0.0, x)
    np.testing.assert_allclose(H, [[0, 2 * x[1], 0], [2 * x[1], 2 * x[0], 0], [0, 0, 0]],
                               atol=1e-12)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_hvp_matches_hessian_times_v_and_backends_agree(backend):
    f, _ = define(ARRAY_FN, backend)
    other, _ = define(ARRAY_FN, "numba" if backend == "python" else "python")
    x, v = np.array([0.4, 0.9, 2.0]), np.array([1.0, 0.5, -1.5])
    got = hvp(f, "y", "x")(0.0, x, v)
    np.testing.assert_allclose(got, hessian(f, "y", "x")(0.0, x) @ v, rtol=1e-12)
    np.testing.assert_allclose(got, hvp(other, "y", "x")(0.0, x, v), rtol=1e-13)


def test_inverse_view():
    f, _ = define("""
        def f(y, x):
            y -= x * x * x
    """)  # (~f) adds x^3 to y
    assert hvp(~f, "y", "x")(0.0, 2.0, 1.0) == pytest.approx(12.0)


def test_errors():
    f, _ = define(POLY)
    with pytest.raises(TypeError, match="wrt must name one argument"):
        hvp(f, "y", ("x", "y"))
    with pytest.raises(ValueError, match="shape of `x`"):
        hvp(f, "y", "x")(0.0, 2.0, np.ones(2))
    g, _ = define(ARRAY_FN)
    with pytest.raises(ValueError, match=r"shape of `x`, \(3,\)"):
        hvp(g, "y", "x")(0.0, np.ones(3), np.ones(4))
    with pytest.raises(TypeError, match="v must be real"):
        hvp(g, "y", "x")(0.0, np.ones(3), np.ones(3) * 1j)
    r, _ = define("""
        def r(out, x):
            out += x * x
    """)
    with pytest.raises(revbench.ReversibilityTypeError, match="is an array"):
        hessian(r, "out", "x")(np.zeros(2), np.ones(2))
    n, _ = define("""
        def n(y, x, k):
            for i in range(k):
                y += x * x
    """)
    with pytest.raises(revbench.ReversibilityTypeError, match=r"wrt `k`.*real float"):
        hessian(n, "y", "k")(0.0, 1.0, 3)
    assert hessian(n, "y", "x")(0.0, 1.0, 3)[0, 0] == pytest.approx(6.0)


def test_registered_function_without_second_partials_is_refused_at_its_line():
    def cube(x):
        return x * x * x

    def dcube(x):
        return 3.0 * x * x

    revbench.register(cube, partials=(dcube,))
    f, _ = define("""
        def f(y, x):
            y += cube(x)
    """)
    assert grad(f, "y")(0.0, 2.0)[1] == pytest.approx(12.0)
    with pytest.raises(revbench.ReversibilityTypeError,
                       match=r"(?s)`cube` is a registered function.*line 3: y \+= cube\(x\)"):
        hvp(f, "y", "x")(0.0, 2.0, 1.0)


MIXED = """
    def cubes(s, v):
        for i in range(len(v)):
            s += v[i] * v[i] * v[i]

    def f(y, x):
        a = np.zeros(3)
        a += x * x
        a[0], a[1] = a[1], a[0]
        cubes(y, a[0:2])
        k = 0
        while (k < 2, k > 0):
            y += np.cos(a[k]) * x[2]
            k += 1
        t = 0.0
        t += x[0] * x[2]
        cubes(y, x[1:3])
        y += t / (1.0 + x[1] * x[1]) + x[2] ** 2.5
        t -= x[0] * x[2]
        del t
        k -= 2
        del k
        a[0], a[1] = a[1], a[0]
        a -= x * x
        del a
"""


@pytest.mark.parametrize(("backend", "check"), [("python", True), ("numba", False)])
def test_array_ancilla_swap_while_and_subarray_calls(backend, check):
    fns = revbench.define(textwrap.dedent(MIXED), {"np": np}, backend=backend, check=check)
    f = fns["f"]
    x = np.array([0.6, -1.2, 1.4])
    H = hessian(f, "y", "x")(0.0, x)
    np.testing.assert_allclose(H, fd_hessian(f, (0.0, x), "y", "x"), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(H, H.T, atol=1e-12)


def test_complex_program_is_refused_at_its_line():
    f, _ = define("""
        def f(y, x):
            z = 0j
            z += x * 1j
            y += abs(z)
            z -= x * 1j
            del z
    """)
    with pytest.raises(revbench.ReversibilityTypeError,
                       match=r"(?s)`z` is complex.*line 3: z = 0j"):
        hvp(f, "y", "x")(0.0, 2.0, 1.0)
    # a complex argument nothing writes: the line that reads it; jvp is forward mode
    g, _ = define("""
        def q(l, x, z):
            l += x * x
            l += (z * z).real
    """)
    with pytest.raises(revbench.ReversibilityTypeError,
                       match=r"(?s)^forward mode .*`z` is complex.*line 4: l \+= \(z \* z\)\.real"):
        revbench.jvp(g, 0.0, 1.0, 1 + 1j, tangents={"x": 1.0}, outputs="l")

"""The language as users write it (issue 10): constructs that need no bookkeeping.

* names for shapes and constants (``n = len(x)``, ``m = x.shape[1] - 1``, ``c = 0.5``)
  that are never changed need no ``del``: they are freed at the end of their block;
* a reversible function whose first argument accumulates its result can be called in
  the value of an update (``out -= n * logsumexp(alpha)``) or to allocate an ancilla
  (``t = logsumexp(alpha)`` ... ``del t``): computed into an ancilla, used, uncomputed.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from generated_text import plain

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, grad
from revbench.lib import dot, logsumexp


def define(source: str, backend: str = "python", **options):
    ns = {"np": np, "math": math, "logsumexp": logsumexp, "dot": dot}
    fns = revbench.define(textwrap.dedent(source).lstrip("\n"), ns,
                          filename="<natural>", backend=backend, **options)
    return list(fns.values())[-1]


# --------------------------------------------------------------------------- #
# names for shapes need no `del`
# --------------------------------------------------------------------------- #
SHAPES = """
def f(y, x, a):
    n = len(x)
    m = a.shape[1] - 1
    c = 0.5
    for i in range(n):
        y += c * x[i]
    for i in range(a.shape[0]):
        k = i + 0
        for j in range(m):
            y += a[i, j] * a[k, j + 1]
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_shape_names_are_freed_at_the_end_of_their_block(backend):
    f = define(SHAPES, backend)
    x, a = np.arange(4.0), np.arange(6.0).reshape(2, 3)
    y, _, _ = f(0.0, x, a)
    assert y == pytest.approx(0.5 * x.sum() + (a[:, :-1] * a[:, 1:]).sum())
    assert (~f)(y, x, a)[0] == pytest.approx(0.0)
    gx = grad(f, loss="y")(0.0, x, a)[1]
    np.testing.assert_allclose(gx, 0.5)


def test_the_implicit_free_is_in_the_generated_code_and_its_inverse():
    f = define(SHAPES)
    fwd, inv = f.source("forward"), f.source("inverse")
    assert "n = len(x)" in fwd.replace("_rb_", "") or "n = x.shape[0]" in fwd
    # the inverse allocates the names again before it uses them
    assert inv.index("c = 0.5") < inv.index("\n    for ")


@pytest.mark.parametrize("source, name", [
    ("def g(y, x):\n    n = len(x)\n    n += 1\n    y += n\n", "n"),
    ("def g(y, x):\n    t = 0.0\n    t += x\n    y += t\n", "t"),
    ("def g(y, x):\n    t = x * 2.0\n    y += t\n", "t"),            # not a shape name
    ("def g(y, x):\n    t = 1.0\n    s = 2.0\n    t, s = s, t\n", "s"),  # swapped
    ("def h(a, b):\n    a += b\n\ndef g(y, x):\n    t = 0.0\n    h(t, x)\n    y += t\n", "t"),
])
def test_changed_or_computed_ancillas_still_need_a_del(source, name):
    with pytest.raises(ReversibilitySyntaxError, match=f"ancilla `{name}` is allocated here but "
                                                        f"not deallocated"):
        define(source)


def test_a_shape_of_an_ancilla_freed_before_the_end_needs_a_del():
    with pytest.raises(ReversibilitySyntaxError, match="ancilla `n` is allocated here"):
        define("""
            def g(y, x):
                t = x.copy()
                n = len(t)
                y += n
                del t
        """)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_int_name_a_callee_changes_fails_its_check_at_its_line(backend):
    f = define("""
        def bump(k, x):
            k += 1

        def g(y, x):
            n = len(x)
            bump(n, x)
            y += n
    """, backend)
    with pytest.raises(ReversibilityError) as info:
        f(0, np.ones(3))
    assert "ancilla `n` is not back at its allocated value" in str(info.value)
    assert info.value.lineno == 5


def test_explicit_del_still_works_and_names_in_branches_and_loops():
    f = define("""
        def g(y, x, flag):
            n = len(x)
            if flag:
                h = n // 2
                y += x[h]
            while (y > 100.0, y > 100.0):
                y -= 1.0
            del n
    """)
    assert f(0.0, np.array([1.0, 2.0, 3.0]), True)[0] == 2.0


@pytest.mark.parametrize("init", ["1.0 * i", "x[i]", "i * 0.5", "i + 0.5"])
def test_float_arithmetic_is_a_computed_value_that_needs_a_del(init):
    with pytest.raises(ReversibilitySyntaxError, match="ancilla `t` is allocated here but not"):
        define(f"""
            def g(y, x):
                for i in range(len(x)):
                    t = {init}
                    y += t
        """)


@pytest.mark.parametrize("init", ["i + 1", "len(x) - i", "-1", "2.5", "True", "(i + 1) // 2 * 3"])
def test_integer_names_and_literals_are_freed_implicitly(init):
    f = define(f"""
        def g(y, x):
            for i in range(len(x)):
                t = {init}
                y += t * x[i]
    """)
    x = np.arange(3.0)
    y, _ = f(0.0, x)
    assert (~f)(y, x)[0] == pytest.approx(0.0, abs=1e-12)


# --------------------------------------------------------------------------- #
# reversible functions inside expressions
# --------------------------------------------------------------------------- #
def _lse(a):
    return math.log(np.exp(a).sum())


A = np.array([0.1, 0.5, -0.3])
X = np.array([1.0, 2.0, 3.0])


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_calls_in_an_update_value_run_forwards_backwards_and_differentiate(backend):
    f = define("""
        def f(out, alpha, x, n):
            out -= n * logsumexp(alpha) + 2.0 * dot(alpha, x)
    """, backend)
    out, *_ = f(0.0, A, X, 3.0)
    assert out == pytest.approx(-(3.0 * _lse(A) + 2.0 * A @ X), rel=1e-14)
    assert (~f)(out, A, X, 3.0)[0] == pytest.approx(0.0, abs=1e-14)
    g = grad(f, loss="out")(0.0, A, X, 3.0)
    softmax = np.exp(A) / np.exp(A).sum()
    np.testing.assert_allclose(g[1], -(3.0 * softmax + 2.0 * X), rtol=1e-13)
    np.testing.assert_allclose(g[2], -2.0 * A, rtol=1e-13)
    assert g[3] == pytest.approx(-_lse(A), rel=1e-13)
    revbench.check_grad(f, 0.0, A, X, 3.0, loss="out")


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_ancilla_allocated_from_a_call_is_uncomputed_by_its_del(backend):
    f = define("""
        def f(out, alpha):
            lse = logsumexp(alpha)
            out += lse * lse
            del lse
    """, backend)
    out, _ = f(0.0, A)
    assert out == pytest.approx(_lse(A) ** 2, rel=1e-14)
    assert (~f)(out, A)[0] == pytest.approx(0.0, abs=1e-14)
    softmax = np.exp(A) / np.exp(A).sum()
    np.testing.assert_allclose(grad(f, loss="out")(0.0, A)[1], 2 * _lse(A) * softmax, rtol=1e-13)


def test_the_call_is_plain_ir_compute_use_uncompute():
    f = define("""
        def f(out, alpha):
            out += 2.0 * logsumexp(alpha)
    """)
    src = plain(f.source("forward"))
    body = [ln.strip() for ln in src.splitlines()]
    calls = [ln for ln in body if "logsumexp" in ln]
    assert len(calls) == 2  # the compute and the uncompute
    assert any("_rb_v1 = 0.0" in ln for ln in body)
    assert src.index(calls[0]) < src.index("out += (2.0 * _rb_v1)") < src.index(calls[1])


def test_a_routine_holding_an_allocation_from_a_call_uncomputes_it():
    f = define("""
        def f(out, alpha):
            with routine:
                lse = logsumexp(alpha)
            out += lse
            ~routine
    """)
    assert f(0.0, A)[0] == pytest.approx(_lse(A), rel=1e-14)
    np.testing.assert_allclose(grad(f, loss="out")(0.0, A)[1], np.exp(A) / np.exp(A).sum(),
                               rtol=1e-13)


def test_the_debugger_steps_through_the_compute_and_uncompute():
    f = define("""
        def f(out, alpha):
            out += logsumexp(alpha)
    """)
    rec = revbench.trace(f, 0.0, A)
    assert rec.error is None


@pytest.mark.parametrize("source, needle", [
    ("def f(out, a):\n    a[0] += logsumexp(a)\n", "`a` is read by `logsumexp(a)`"),
    ("def f(out, a):\n    out += logsumexp(out)\n", "`out` is read by `logsumexp(out)`"),
    ("def f(out, a):\n    if logsumexp(a) > 0.0:\n        out += 1.0\n",
     "not in a condition, an index or a bound"),
    ("def f(out, a):\n    t = 2.0 * logsumexp(a)\n    del t\n", "on its own (`t = f(x)`)"),
    ("def f(out, a):\n    out += logsumexp(dot(a, a))\n", "must be variables or elements"),
])
def test_calls_in_expressions_that_cannot_be_undone_are_refused(source, needle):
    with pytest.raises(ReversibilitySyntaxError) as info:
        define(source)
    assert needle in str(info.value)
    assert info.value.lineno == 2


def test_a_call_on_a_wrong_type_names_the_line_in_the_expression():
    f = define("""
        def f(out, a):
            out += logsumexp(a[0])
    """)
    with pytest.raises(revbench.ReversibilityTypeError) as info:
        f(0.0, A)
    assert str(info.value).splitlines()[-1].endswith("line 2: out += logsumexp(a[0])")


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_shape_unpacks_into_names(backend):
    f = define("""
        def f(y, a):
            m, n = a.shape
            for i in range(m):
                for j in range(n):
                    y += a[i, j]
    """, backend)
    a = np.arange(6.0).reshape(2, 3)
    assert f(0.0, a)[0] == 15.0 and (~f)(15.0, a)[0] == 0.0


@pytest.mark.parametrize("shape", [(3,), (2, 2, 2)])
def test_a_shape_unpacked_into_the_wrong_number_of_names_is_a_type_error(shape):
    f = define("""
        def f(y, a):
            m, n = a.shape
            y += m * n
    """)
    with pytest.raises(revbench.ReversibilityTypeError, match=f"has {len(shape)} dimension"):
        f(0.0, np.ones(shape))


@pytest.mark.parametrize("source, needle", [
    ("def f(y, a):\n    m, n = b.shape\n    y += m\n", "`.shape` of a local array only"),
    ("def f(y, a):\n    m, a[0] = a.shape\n    y += m\n", "unpack a shape into new names"),
])
def test_shape_unpacking_mistakes_are_static_errors(source, needle):
    with pytest.raises(ReversibilitySyntaxError, match=needle.replace("(", r"\(")):
        define(source)


# --------------------------------------------------------------------------- #
# sums in expressions: sum(x), np.sum(a * b), np.dot(a, b)
# --------------------------------------------------------------------------- #
SUMS = """
def f(out, a, b, A):
    out += np.sum(a * b) + 2.0 * sum(a) + np.dot(a, b) ** 2 + np.sum(A * A)
"""


def _sums_value(a, b, A):
    return (a * b).sum() + 2 * a.sum() + (a @ b) ** 2 + (A * A).sum()


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("check", [True, False])
def test_sums_run_forwards_backwards_and_differentiate(backend, check):
    f = define(SUMS, backend, check=check)
    rng = np.random.default_rng(1)
    a, b, A = rng.normal(size=5), rng.normal(size=5), rng.normal(size=(3, 4))
    out = f(0.0, a, b, A)[0]
    assert out == pytest.approx(_sums_value(a, b, A), rel=1e-13)
    assert (~f)(out, a, b, A)[0] == pytest.approx(0.0, abs=1e-12)
    g = grad(f, loss="out")(0.0, a, b, A)
    np.testing.assert_allclose(g[1], b + 2.0 + 2 * (a @ b) * b, rtol=1e-12)
    np.testing.assert_allclose(g[2], a + 2 * (a @ b) * a, rtol=1e-12)
    np.testing.assert_allclose(g[3], 2 * A, rtol=1e-12)


def test_the_sum_is_a_loop_in_the_generated_code_and_the_backends_agree_bitwise():
    f, g = define(SUMS, "python"), define(SUMS, "numba")
    rng = np.random.default_rng(2)
    args = (0.0, rng.normal(size=1000), rng.normal(size=1000), rng.normal(size=(30, 40)))
    assert f(*args)[0] == g(*args)[0]
    src = f.source("forward", *args)
    assert "_rb_np.sum" not in src and "for _rb_i" in src


def test_the_tracer_sums_in_the_same_order():
    f = define(SUMS, "python")
    rng = np.random.default_rng(3)
    args = (0.0, rng.normal(size=7), rng.normal(size=7), rng.normal(size=(2, 3)))
    rec = revbench.trace(f, *args)
    assert rec.error is None


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_sum_in_a_whole_array_statement_is_computed_once(backend):
    f = define("""
        def f(z, x, w):
            z += x * np.sum(w)
    """, backend)
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5])
    z = f(np.zeros(3), x, w)[0]
    np.testing.assert_allclose(z, x * w.sum())
    src = f.source("forward", np.zeros(3), x, w)
    assert src.index("_rb_sum") < src.index("for _rb_i3")  # before the statement's loop
    revbench.check_grad(f, np.zeros(3), x, w, loss=("z", 1))


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_sums_of_ints_bools_and_complex_numbers(backend):
    f = define("""
        def f(n, c, k, m, z):
            n += np.sum(k) + sum(m)
            c += np.sum(z * z)
    """, backend)
    k, m, z = np.array([1, 2, 3]), np.array([True, False, True]), np.array([1 + 2j, 3 - 1j])
    n, c, *_ = f(0, 0j, k, m, z)
    assert n == 8 and isinstance(n, int)
    assert c == pytest.approx(np.sum(z * z))


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_int_sum_that_overflows_raises(backend):
    f = define("""
        def f(n, k):
            n += np.sum(k)
    """, backend)
    with pytest.raises(ReversibilityError, match="integer overflow"):
        f(0, np.array([2**62, 2**62]))


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_sums_in_allocations_bounds_and_deallocations(backend):
    f = define("""
        def f(y, x, k):
            s = np.sum(x * x)
            for i in range(np.sum(k)):
                y += s * x[i]
            del s
    """, backend)
    x, k = np.array([1.0, 2.0, 3.0]), np.array([1, 1])
    y = f(0.0, x, k)[0]
    assert y == pytest.approx(14.0 * 3.0)
    assert (~f)(y, x, k)[0] == pytest.approx(0.0)
    revbench.check_grad(f, 0.0, x, k, loss="y")


@pytest.mark.parametrize("source, error, needle", [
    ("def f(y, x):\n    if np.sum(x) > 0.0:\n        y += 1.0\n", revbench.ReversibilityTypeError,
     "cannot be part of a condition"),
    ("def f(y, x):\n    while (y < np.sum(x), y > 0.0):\n        y += 1.0\n",
     revbench.ReversibilityTypeError, "cannot be part of a condition"),
    ("def f(y, x):\n    y += np.sum(y * 2.0)\n", ReversibilitySyntaxError, "own right-hand side"),
    ("def f(y, x):\n    x[0] += np.sum(x)\n", ReversibilitySyntaxError, "own right-hand side"),
    ("def f(y, x):\n    y += np.sum(x, 0)\n", ReversibilitySyntaxError, "no start value, axis"),
    ("def f(y, x):\n    y += np.dot(x)\n", ReversibilitySyntaxError, "takes two arrays"),
])
def test_sums_that_cannot_work_are_refused(source, error, needle):
    with pytest.raises(error, match=needle):
        f = define(source)
        f(0.0, np.ones(3))


@pytest.mark.parametrize("expr, shape, needle", [
    ("sum(x)", (2, 2), "sum() of 2-D arrays would not be a sum of every element"),
    ("np.dot(x, x)", (2, 2), "a matrix product"),
    ("np.sum(w[0] * 2.0)", (3,), "needs an array expression"),
    ("np.sum(x * w)", (3,), "must have the same shape"),
])
def test_sums_of_the_wrong_shapes_are_errors(expr, shape, needle):
    f = define(f"def f(y, x, w):\n    y += {expr}\n")
    pattern = needle.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises((revbench.ReversibilityTypeError, ReversibilityError), match=pattern):
        f(0.0, np.ones(shape), np.ones(2))


def test_a_sum_of_an_empty_array_is_zero():
    f = define("def f(y, x):\n    y += np.sum(x * x) + 1.0\n")
    assert f(0.0, np.zeros(0))[0] == 1.0


# --------------------------------------------------------------------------- #
# jacobian with several outputs and several wrt
# --------------------------------------------------------------------------- #
def _fd_jacobian(f, args, out, wrt, eps=1e-6):
    def value(v):
        a = list(args)
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
        a[wrt] = v
        return np.atleast_1d(np.asarray(f(*a)[out], dtype=float)).reshape(-1)
    x0 = np.atleast_1d(np.asarray(args[wrt], dtype=float)).astype(float)
    cols = []
    for k in range(x0.size):
        up, dn = x0.copy(), x0.copy()
        up.reshape(-1)[k] += eps
        dn.reshape(-1)[k] -= eps
        conv = (lambda v: v.reshape(np.shape(args[wrt]))) if isinstance(args[wrt], np.ndarray) \
            else (lambda v: float(v[0]))
        cols.append((value(conv(up)) - value(conv(dn))) / (2 * eps))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_jacobian_with_several_wrt_gives_one_block_per_name(backend):
    f = define("""
        def f(r, cam, X, w):
            r[0] += w * (cam[0] * X[0] + cam[1] * X[1] * X[2])
            r[1] += w * math.sin(cam[2] * X[1]) + cam[0] * w
    """, backend)
    rng = np.random.default_rng(4)
    args = (np.zeros(2), rng.normal(size=3), rng.normal(size=3), 0.7)
    blocks = revbench.jacobian(f, outputs="r", wrt=("cam", "X", "w"))(*args)
    assert [b.shape for b in blocks] == [(2, 3), (2, 3), (2, 1)]
    for b, k in zip(blocks, (1, 2, 3)):
        np.testing.assert_allclose(b, _fd_jacobian(f, args, 0, k), rtol=1e-6, atol=1e-8)
    single = revbench.jacobian(f, outputs="r", wrt="X")(*args)
    np.testing.assert_array_equal(single, blocks[1])
    both = revbench.jacobian(f, outputs=("r", "X"), wrt=("cam", "X"))(*args)
    np.testing.assert_array_equal(both[0][1], blocks[1])
    np.testing.assert_array_equal(both[1][1], np.eye(3))  # X is read only: dX/dX = I
    np.testing.assert_array_equal(both[1][0], np.zeros((3, 3)))


@pytest.mark.parametrize("outputs, wrt, needle", [
    ("r", (), "wrt names no argument"),
    ((), "x", "outputs names no argument"),
    ("r", ("x", "x"), "names an argument twice"),
    ("r", ("x", "q"), "'q' is not an argument"),
])
def test_jacobian_name_mistakes(outputs, wrt, needle):
    f = define("def f(r, x):\n    r += x * x\n")
    with pytest.raises(ValueError, match=needle):
        revbench.jacobian(f, outputs=outputs, wrt=wrt)(0.0, 2.0)

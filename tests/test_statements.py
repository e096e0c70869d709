"""Every statement of the language contract (docs §1-§3): forward result and inverse.

Each test compiles small reversible functions with the ``make`` fixture, so it runs
on both backends (Numba and plain Python).  ``roundtrip`` runs a function forward,
checks the expected result, then runs ``~f`` on the outputs and checks that the
arguments come back (exactly for int/bool, within 1e-8 for floats).
"""

from __future__ import annotations

import math
import sys
import textwrap

import numpy as np
import pytest

import revbench
from revbench import reversible

# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
ATOL = 1e-8


def _copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def assert_value(got, want, *, exact: bool = False):
    """``got == want``: exactly for int/bool (same type), within 1e-8 for floats."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"expected an array, got {got!r}"
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        if exact or want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=ATOL)
    elif isinstance(want, bool):
        assert type(got) is bool, f"expected a bool, got {got!r} ({type(got).__name__})"
        assert got == want
    elif isinstance(want, int):
        assert type(got) is int, f"expected an int, got {got!r} ({type(got).__name__})"
        assert got == want
    elif isinstance(want, complex):
        assert isinstance(got, complex), f"expected a complex, got {got!r}"
        assert abs(got - want) <= ATOL + 1e-10 * abs(want), (got, want)
    else:
        assert isinstance(got, float), f"expected a float, got {got!r} ({type(got).__name__})"
        if exact:
            assert got == want
        else:
            assert abs(got - want) <= ATOL + 1e-10 * abs(want), (got, want)


def assert_values(got, want, *, exact: bool = False):
    assert isinstance(got, tuple), f"a reversible function returns a tuple, got {type(got)}"
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert_value(g, w, exact=exact)


def roundtrip(f, *args, expect=None):
    """Run ``f`` forward (checking ``expect``), then ``~f``; the arguments must come back.

    Returns copies of the forward outputs.
    """
    original = tuple(_copy(a) for a in args)
    call_args = tuple(_copy(a) for a in args)
    out = f(*call_args)
    assert isinstance(out, tuple) and len(out) == len(args)
    for a, o in zip(call_args, out):
        if isinstance(a, np.ndarray):
            assert o is a, "arrays are updated in place and the same objects returned"
    forward = tuple(_copy(o) for o in out)
    if expect is not None:
        assert_values(forward, tuple(expect))
    back = (~f)(*out)
    for a, o in zip(out, back):
        if isinstance(a, np.ndarray):
            assert o is a
    assert_values(back, original)
    return forward


_COMPILED: dict = {}


@pytest.fixture
def make(backend):
    """Like conftest's ``make``, but reuses the function compiled for the same source,
    backend and options, so parametrised cases share one compilation per signature."""

    def _make(source: str, all: bool = False, namespace: dict | None = None, **options):
        src = textwrap.dedent(source)
        key = (backend, src, all, tuple((k, id(v)) for k, v in sorted((namespace or {}).items())),
               tuple(sorted(options.items())))
        if key not in _COMPILED:
            ns = {"np": np, "math": math}
            ns.update(namespace or {})
            fns = revbench.define(src, ns, backend=backend, **options)
            _COMPILED[key] = (fns if all else list(fns.values())[-1], namespace)
        return _COMPILED[key][0]

    return _make


def define(source: str, backend: str, ns: dict | None = None, **options):
    """``revbench.define`` with a namespace the caller keeps (for frozen-constant tests)."""
    namespace = {"np": np, "math": math} if ns is None else ns
    return revbench.define(textwrap.dedent(source), namespace, backend=backend, **options)


# --------------------------------------------------------------------------- #
# functions defined with the decorator at module level
# --------------------------------------------------------------------------- #
SCALE = 3.0
OFFSET = 2


@reversible
def mod_poly(y, x):
    t = 0.0
    t += x * x
    y += SCALE * t + x
    t -= x * x
    del t


@reversible
def mod_count(k, n):
    for i in range(n):
        k += OFFSET * i


@reversible(backend="python")
def mod_axpy(y, a, x):
    for i in range(len(x)):
        y[i] += a * x[i]


@reversible(check=False)
def mod_unchecked(y, x):
    t = 0.0
    t += x
    y += t * 2.0
    t -= x
    del t


@reversible
def mod_caller(y, x):
    mod_poly(y, x)
    ~mod_poly(y, x)
    mod_poly(y, x)


# --------------------------------------------------------------------------- #
# 1. the decorator
# --------------------------------------------------------------------------- #
class TestDecorator:
    def test_module_level_forward_and_inverse(self):
        assert mod_poly(0.0, 2.0) == (14.0, 2.0)
        roundtrip(mod_poly, 1.5, -0.75, expect=(1.5 + 3.0 * 0.5625 - 0.75, -0.75))
        assert isinstance(mod_poly, revbench.ReversibleFunction)

    def test_module_level_int(self):
        roundtrip(mod_count, 1, 5, expect=(1 + 2 * 10, 5))

    def test_module_level_python_backend(self):
        y, x = np.zeros(3), np.array([1.0, 2.0, 3.0])
        out = mod_axpy(y, 2.0, x)
        assert out[0] is y and out[2] is x
        np.testing.assert_array_equal(y, [2.0, 4.0, 6.0])
        roundtrip(mod_axpy, np.ones(3), 0.5, np.arange(3.0), expect=(1 + 0.5 * np.arange(3.0), 0.5,
                                                                      np.arange(3.0)))

    def test_module_level_check_false(self):
        roundtrip(mod_unchecked, 1.0, 3.0, expect=(7.0, 3.0))
        src = mod_unchecked.source("forward")
        assert "raise" not in src

    def test_module_level_call_of_decorated_function(self):
        roundtrip(mod_caller, 0.0, 2.0, expect=(14.0, 2.0))

    def test_double_inverse_is_the_function(self):
        assert (~~mod_poly)(0.0, 2.0) == (14.0, 2.0)
        assert ~~mod_poly is mod_poly
        assert mod_poly.inverse is ~mod_poly
        assert (~mod_poly)(14.0, 2.0) == pytest.approx((0.0, 2.0))

    def test_module_constants_frozen_at_decoration(self, monkeypatch):
        @reversible(backend="python")
        def uses_scale(y, x):
            y += SCALE * x

        module = sys.modules[__name__]
        monkeypatch.setattr(module, "SCALE", 100.0)
        assert uses_scale(0.0, 2.0) == (6.0, 2.0)
        assert (~uses_scale)(6.0, 2.0) == (0.0, 2.0)

    def test_decorator_on_local_function_with_closure_constant(self, backend):
        factor = 4.0

        @reversible(backend=backend)
        def local(y, x):
            y += factor * x

        roundtrip(local, 1.0, 2.0, expect=(9.0, 2.0))

    def test_source_strings(self):
        mod_poly(0.0, 1.0)
        fwd, inv = mod_poly.source("forward"), mod_poly.source("inverse")
        assert isinstance(fwd, str) and isinstance(inv, str)
        assert fwd != inv
        assert (~mod_poly).source("forward") == inv
        assert (~mod_poly).source("inverse") == fwd

    def test_bad_source_kind(self):
        with pytest.raises(ValueError):
            mod_poly.source("sideways")


# --------------------------------------------------------------------------- #
# 2. updates: += -= *= /= ^=
# --------------------------------------------------------------------------- #
def _apply(op, y, e):
    if op == "+=":
        return y + e
    if op == "-=":
        return y - e
    if op == "*=":
        return y * e
    if op == "/=":
        return y // e if isinstance(y, int) else y / e
    raise AssertionError(op)


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
@pytest.mark.parametrize("y, x", [(1.5, 1.25), (12, 3), (1 + 2j, 0.5 - 1j)],
                         ids=["float", "int", "complex"])
def test_arithmetic_update(make, op, y, x):
    f = make(f"""
        def f(y, x):
            y {op} x * 2
    """)
    expected = _apply(op, y, x * 2)
    roundtrip(f, y, x, expect=(expected, x))


def test_int_division_exact_keeps_int(make):
    f = make("""
        def f(y, x):
            y /= x
    """)
    out = roundtrip(f, -12, 4, expect=(-3, 4))
    assert type(out[0]) is int
    roundtrip(f, 0, 7, expect=(0, 7))


@pytest.mark.parametrize("y, x, expected", [(12, 5, 9), (-3, 7, -3 ^ 7), (True, True, False),
                                            (False, True, True), (True, False, True)])
def test_xor(make, y, x, expected):
    f = make("""
        def f(y, x):
            y ^= x
    """)
    roundtrip(f, y, x, expect=(expected, x))


def test_xor_bool_with_condition(make):
    f = make("""
        def f(b, x):
            b ^= x > 0.5 and not (x > 2.0)
    """)
    roundtrip(f, False, 1.0, expect=(True, 1.0))
    roundtrip(f, True, 1.0, expect=(False, 1.0))
    roundtrip(f, True, 3.0, expect=(True, 3.0))


def test_update_sequence(make):
    f = make("""
        def f(y, x):
            y += x
            y *= 3.0
            y -= 1.0
            y /= x
    """)
    roundtrip(f, 2.0, 0.5, expect=(((2.0 + 0.5) * 3.0 - 1.0) / 0.5, 0.5))


# --------------------------------------------------------------------------- #
# 3. swap
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("a, b", [(1.0, 2.5), (3, -4), (True, False), (1j, 2 - 1j)],
                         ids=["float", "int", "bool", "complex"])
def test_swap_scalars(make, a, b):
    f = make("""
        def f(a, b):
            a, b = b, a
    """)
    roundtrip(f, a, b, expect=(b, a))


def test_swap_elements(make):
    f = make("""
        def f(x, i, j):
            x[i], x[j] = x[j], x[i]
    """)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    roundtrip(f, x, 0, 3, expect=(np.array([4.0, 2.0, 3.0, 1.0]), 0, 3))
    roundtrip(f, x, 1, 2, expect=(np.array([1.0, 3.0, 2.0, 4.0]), 1, 2))


def test_swap_elements_2d(make):
    f = make("""
        def f(A):
            for i in range(A.shape[0]):
                for j in range(i + 1, A.shape[1]):
                    A[i, j], A[j, i] = A[j, i], A[i, j]
    """)
    A = np.arange(9.0).reshape(3, 3)
    roundtrip(f, A, expect=(A.T.copy(),))


def test_swap_element_with_scalar(make):
    f = make("""
        def f(x, s, i):
            x[i], s = s, x[i]
    """)
    roundtrip(f, np.array([1, 2, 3]), 7, 1, expect=(np.array([1, 7, 3]), 2, 1))


def test_swap_element_of_two_arrays(make):
    f = make("""
        def f(x, y, i):
            x[i], y[i] = y[i], x[i]
    """)
    roundtrip(f, np.array([1.0, 2.0]), np.array([3.0, 4.0]), 1,
              expect=(np.array([1.0, 4.0]), np.array([3.0, 2.0]), 1))


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_swap_whole_arrays_in_place(make, shape):
    f = make("""
        def f(x, y):
            x, y = y, x
    """)
    x = np.arange(float(np.prod(shape))).reshape(shape)
    y = -x - 1.0
    x0, y0 = x.copy(), y.copy()
    out = f(x, y)
    assert out[0] is x and out[1] is y, "contents are swapped in place, the same objects returned"
    np.testing.assert_array_equal(x, y0)
    np.testing.assert_array_equal(y, x0)
    roundtrip(f, x0, y0, expect=(y0, x0))


# --------------------------------------------------------------------------- #
# 4. ancillas
# --------------------------------------------------------------------------- #
def test_scalar_ancilla_from_expression(make):
    f = make("""
        def f(y, x):
            t = x * 2.0
            y += t * t
            del t
    """)
    roundtrip(f, 1.0, 1.5, expect=(1.0 + 9.0, 1.5))


@pytest.mark.parametrize("init, value, y, expected", [
    ("0", 5, 1, 1 + 2 * 5),
    ("0.0", 2.5, 1.0, 1.0 + 2 * 2.5),
    ("0j", 1 + 1j, 0j, 2 + 2j),
], ids=["int", "float", "complex"])
def test_scalar_ancilla_types(make, init, value, y, expected):
    f = make(f"""
        def f(y, v):
            t = {init}
            t += v
            y += 2 * t
            t -= v
            del t
    """)
    roundtrip(f, y, value, expect=(expected, value))


def test_bool_ancilla(make):
    f = make("""
        def f(y, x):
            b = x > 0.0
            if b:
                y += x
            del b
    """)
    roundtrip(f, 1.0, 2.0, expect=(3.0, 2.0))
    roundtrip(f, 1.0, -2.0, expect=(1.0, -2.0))


def test_del_compares_with_allocation_expression_evaluated_now(make):
    f = make("""
        def f(y, x):
            t = x * 2.0
            x += 1.0
            t += 2.0
            y += t
            del t
    """)
    # at `del t`, t == 4 == x * 2 with the new x
    roundtrip(f, 0.0, 1.0, expect=(4.0, 2.0))


def test_ancilla_reused_after_del(make):
    f = make("""
        def f(y, x):
            t = 0.0
            t += x
            y += t
            t -= x
            del t
            t = 1.0
            y *= t + x
            del t
    """)
    roundtrip(f, 1.0, 2.0, expect=((1.0 + 2.0) * 3.0, 2.0))


def test_array_ancilla_zeros_n(make):
    f = make("""
        def f(s, x):
            t = np.zeros(len(x))
            for i in range(len(x)):
                t[i] += x[i] * x[i]
            for i in range(len(x)):
                s += t[i]
            for i in range(len(x)):
                t[i] -= x[i] * x[i]
            del t
    """)
    x = np.array([1.0, 2.0, 3.0])
    roundtrip(f, 0.5, x, expect=(14.5, x))


def test_array_ancilla_zeros_2d(make):
    f = make("""
        def f(s, A):
            T = np.zeros((A.shape[0], A.shape[1]))
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    T[i, j] += 2.0 * A[i, j]
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    s += T[i, j]
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    T[i, j] -= 2.0 * A[i, j]
            del T
    """)
    A = np.arange(6.0).reshape(2, 3)
    roundtrip(f, 0.0, A, expect=(30.0, A))


def test_array_ancilla_zeros_like(make):
    f = make("""
        def f(y, x):
            t = np.zeros_like(x)
            t += x * x
            y += 2.0 * t
            t -= x * x
            del t
    """)
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    roundtrip(f, np.ones((2, 2)), x, expect=(1.0 + 2.0 * x * x, x))


def test_array_ancilla_copy(make):
    f = make("""
        def f(y, x):
            t = x.copy()
            for i in range(len(x)):
                y[i] += t[i] * x[i]
            del t
    """)
    x = np.array([1.0, 2.0, -3.0])
    roundtrip(f, np.zeros(3), x, expect=(x * x, x))


def test_array_ancilla_copy_modified_and_restored(make):
    f = make("""
        def f(y, x):
            t = x.copy()
            for i in range(len(x)):
                t[i] *= 3.0
            for i in range(len(x)):
                y += t[i]
            for i in range(len(x)):
                t[i] /= 3.0
            del t
    """)
    x = np.array([1.0, 2.0, 4.0])
    roundtrip(f, 0.0, x, expect=(21.0, x))


@pytest.mark.parametrize("dtype, value, expected", [
    ("np.int64", 3, 3 * 6),
    ("np.complex128", 1j, 6j),
    ("np.float64", 0.5, 3.0),
])
def test_array_ancilla_dtype(make, dtype, value, expected):
    f = make(f"""
        def f(y, v, n):
            t = np.zeros(n, dtype={dtype})
            for i in range(n):
                t[i] += v * i
            for i in range(n):
                y += t[i]
            for i in range(n):
                t[i] -= v * i
            del t
    """)
    y0 = type(expected)(0)
    roundtrip(f, y0, value, 4, expect=(expected, value, 4))


def test_bool_array_ancilla_dtype(make):
    f = make("""
        def f(k, x):
            b = np.zeros(len(x), dtype=np.bool_)
            for i in range(len(x)):
                b[i] ^= x[i] > 0.0
            for i in range(len(x)):
                if b[i]:
                    k += 1
            for i in range(len(x)):
                b[i] ^= x[i] > 0.0
            del b
    """)
    x = np.array([1.0, -1.0, 2.0, 0.0])
    roundtrip(f, 0, x, expect=(2, x))


# --------------------------------------------------------------------------- #
# 5. calls
# --------------------------------------------------------------------------- #
CALLEE = """
    def g(a, b):
        a += 2.0 * b
        b *= 3.0
"""


def test_call(make):
    f = make(CALLEE + """
    def f(a, b):
        g(a, b)
    """)
    roundtrip(f, 1.0, 2.0, expect=(5.0, 6.0))


def test_call_inverse(make):
    f = make(CALLEE + """
    def f(a, b):
        ~g(a, b)
    """)
    roundtrip(f, 5.0, 6.0, expect=(1.0, 2.0))


def test_call_then_inverse_call_is_identity(make):
    f = make(CALLEE + """
    def f(a, b):
        g(b, a)
        ~g(b, a)
        g(a, b)
    """)
    roundtrip(f, 1.0, 2.0, expect=(5.0, 6.0))


def test_call_with_element_arguments(make):
    f = make(CALLEE + """
    def f(x, y, i):
        g(x[i], y)
        g(x[0], x[2])
    """)
    x = np.array([1.0, 2.0, 3.0])
    # g(x[1], y): x[1] = 2 + 2*0.5 = 3, y = 1.5; g(x[0], x[2]): x[0] = 1 + 6 = 7, x[2] = 9
    roundtrip(f, x, 0.5, 1, expect=(np.array([7.0, 3.0, 9.0]), 1.5, 1))


def test_call_with_2d_element_arguments(make):
    f = make(CALLEE + """
    def f(A, i, j):
        g(A[i, j], A[j, i])
    """)
    A = np.array([[1.0, 2.0], [3.0, 4.0]])
    roundtrip(f, A, 0, 1, expect=(np.array([[1.0, 8.0], [9.0, 4.0]]), 0, 1))


def test_call_with_arrays_and_ints(make):
    f = make("""
        def scale(x, k):
            for i in range(len(x)):
                x[i] *= k
            k += 1

        def f(x, k):
            scale(x, k)
            scale(x, k)
    """)
    roundtrip(f, np.array([1, 2]), 2, expect=(np.array([6, 12]), 4))


def test_nested_calls(make):
    f = make(CALLEE + """
    def h(a, b, c):
        g(a, b)
        ~g(c, b)

    def f(a, b, c):
        h(a, b, c)
        ~h(c, a, b)
    """)
    roundtrip(f, 1.0, 2.0, 3.0)


def test_call_in_loop_and_inverse_call_in_loop(make):
    f = make(CALLEE + """
    def f(x, y):
        for i in range(len(x)):
            g(x[i], y[i])
        for i in range(len(x) - 1):
            ~g(y[i + 1], x[i])
    """)
    roundtrip(f, np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]))


# --------------------------------------------------------------------------- #
# 6. routines and inverted blocks
# --------------------------------------------------------------------------- #
def test_routine_with_outer_ancilla(make):
    f = make("""
        def f(y, x):
            t = 0.0
            with routine:
                t += x * x
                t *= 2.0
            y += t
            ~routine
            del t
    """)
    roundtrip(f, 1.0, 3.0, expect=(19.0, 3.0))


def test_routine_allocating_ancilla(make):
    f = make("""
        def f(y, x):
            with routine:
                t = 0.0
                t += sin(x)
            y += 2.0 * t
            ~routine
    """)
    roundtrip(f, 0.0, 0.5, expect=(2.0 * math.sin(0.5), 0.5))


def test_named_routine(make):
    f = make("""
        def f(y, x):
            with routine as r:
                t = x * 1.0
                t += 1.0
            y += t * t
            ~r
    """)
    roundtrip(f, 0.0, 2.0, expect=(9.0, 2.0))


def test_two_named_routines_undone_last_first(make):
    f = make("""
        def f(y, x):
            with routine as a:
                t = 0.0
                t += x + 1.0
            with routine as b:
                u = 0.0
                u += t * t
            y += u
            ~b
            ~a
    """)
    roundtrip(f, 0.5, 2.0, expect=(9.5, 2.0))


def test_nested_routines(make):
    f = make("""
        def f(y, x):
            with routine:
                t = 0.0
                with routine:
                    u = 0.0
                    u += x * 2.0
                t += u * u
                ~routine
            y += t
            ~routine
    """)
    roundtrip(f, 1.0, 1.5, expect=(10.0, 1.5))


def test_nested_routines_without_inner_ancilla(make):
    f = make("""
        def f(y, x):
            t = 0.0
            u = 0.0
            with routine:
                with routine:
                    u += x * 2.0
                t += u * u
                ~routine
            y += t
            ~routine
            del u
            del t
    """)
    roundtrip(f, 1.0, 1.5, expect=(10.0, 1.5))


def test_routine_with_call(make):
    f = make(CALLEE + """
    def f(a, b, y):
        with routine:
            g(a, b)
        y += a
        ~routine
    """)
    roundtrip(f, 1.0, 2.0, 0.0, expect=(1.0, 2.0, 5.0))


def test_routine_with_loop_and_array(make):
    f = make("""
        def f(s, x):
            with routine as sq:
                t = np.zeros_like(x)
                for i in range(len(x)):
                    t[i] += x[i] * x[i]
            for i in range(len(x)):
                s += t[i]
            ~sq
    """)
    x = np.array([1.0, 2.0, 3.0])
    roundtrip(f, 0.0, x, expect=(14.0, x))


def test_inverted_block_with_if_and_nested_inverted(make):
    f = make("""
        def f(y, x):
            with inverted:
                if x > 0.0:
                    y += x
                else:
                    y -= 1.0
                with inverted:
                    y *= 2.0
    """)
    # inverse of [if ...; ~(y *= 2)] is [y *= 2; inverse of if]
    roundtrip(f, 1.0, 3.0, expect=(-1.0, 3.0))
    roundtrip(f, 1.0, -3.0, expect=(3.0, -3.0))


def test_routines_inside_loops_and_branches(make):
    f = make("""
        def f(y, x):
            for i in range(len(x)):
                with routine:
                    t = x[i] * 2.0
                y += t
                ~routine
            if y > 0.0:
                with routine as r:
                    k = 0
                    u = 0.0
                    while (k < 3, k > 0):
                        u += 1.5
                        k += 1
                y += u
                ~r
    """)
    x = np.arange(3.0)
    roundtrip(f, 0.0, x, expect=(6.0 + 4.5, x))


def test_allocation_inside_while_and_call_inside_if_in_for(make):
    f = make(CALLEE + """
    def f(x, y, k, n):
        while (k < n, k > 0):
            t = y[0] * 1.0
            x[0] += t
            del t
            k += 1
        for i in range(len(x)):
            if y[i] > 0.0:
                g(x[i], y[i])
    """)
    x, y = np.zeros(3), np.array([1.0, -1.0, 2.0])
    roundtrip(f, x, y, 0, 2, expect=(np.array([4.0, 0.0, 4.0]), np.array([3.0, -1.0, 6.0]), 2, 2))


def test_inverted_block(make):
    f = make(CALLEE + """
    def f(a, b, y):
        with inverted:
            g(a, b)
            y += a
    """)
    # inverse of [g(a, b); y += a] is [y -= a; ~g(a, b)]
    roundtrip(f, 5.0, 6.0, 10.0, expect=(1.0, 2.0, 5.0))


def test_inverted_block_with_ancilla(make):
    f = make("""
        def f(y, x):
            with inverted:
                t = x * 3.0
                y += t
                del t
            y *= 2.0
    """)
    roundtrip(f, 10.0, 1.0, expect=(14.0, 1.0))


def test_inverted_block_order(make):
    f = make("""
        def f(y, x):
            with inverted:
                y *= 2.0
                y += x
    """)
    # inverse: y -= x; then y /= 2
    roundtrip(f, 10.0, 4.0, expect=(3.0, 4.0))


# --------------------------------------------------------------------------- #
# 7. if / elif / else
# --------------------------------------------------------------------------- #
def test_if_else(make):
    f = make("""
        def f(y, x):
            if x > 0.0:
                y += x
            else:
                y -= 2.0 * x
    """)
    roundtrip(f, 1.0, 2.0, expect=(3.0, 2.0))
    roundtrip(f, 1.0, -2.0, expect=(5.0, -2.0))


def test_if_without_else(make):
    f = make("""
        def f(y, x):
            if x > 0.0:
                y *= x
    """)
    roundtrip(f, 3.0, 2.0, expect=(6.0, 2.0))
    roundtrip(f, 3.0, -2.0, expect=(3.0, -2.0))


@pytest.mark.parametrize("x, expected", [(5.0, 1), (1.0, 2), (-1.0, 3), (-5.0, 4)])
def test_if_elif_else(make, x, expected):
    f = make("""
        def f(k, x):
            if x > 2.0:
                k += 1
            elif x > 0.0:
                k += 2
            elif x > -2.0:
                k += 3
            else:
                k += 4
    """)
    roundtrip(f, 0, x, expect=(expected, x))


def test_if_pre_post(make):
    f = make("""
        def f(b, x):
            if (x > 0.0, b):
                b ^= True
    """)
    roundtrip(f, False, 1.0, expect=(True, 1.0))
    roundtrip(f, False, -1.0, expect=(False, -1.0))


def test_if_pre_post_with_else_changes_condition_variable(make):
    f = make("""
        def f(x):
            if (x > 0.0, x > 10.0):
                x += 100.0
            else:
                x -= 100.0
    """)
    roundtrip(f, 1.0, expect=(101.0,))
    roundtrip(f, -1.0, expect=(-101.0,))


@pytest.mark.parametrize("x, expected", [(2.0, 1), (0.5, 2), (-1.0, 3)])
def test_if_pre_post_with_elif(make, x, expected):
    f = make("""
        def f(k, x):
            if (x > 1.0, k == 1):
                k += 1
            elif (x > 0.0, k == 2):
                k += 2
            else:
                k += 3
    """)
    roundtrip(f, 0, x, expect=(expected, x))


@pytest.mark.parametrize("x, z, expected", [(1.0, 1.0, 1.0), (1.0, -1.0, 0.0), (-1.0, 1.0, 0.0),
                                            (-1.0, -1.0, 0.0), (-1.0, 0.0, 1.0)])
def test_if_condition_with_and_or_not(make, x, z, expected):
    f = make("""
        def f(r, x, z):
            if x > 0.0 and not (z < 0.0) or z == 0.0:
                r += 1.0
    """)
    roundtrip(f, 0.0, x, z, expect=(expected, x, z))


@pytest.mark.parametrize("x, expected", [(0.5, 1), (1.0, 0), (-0.5, 0), (0.0, 1)])
def test_chained_comparison_and_comparison_ops(make, x, expected):
    f = make("""
        def f(k, x):
            if 0.0 <= x < 1.0 and x != 0.25 and not (x == 0.75) and x >= -1.0:
                k += 1
    """)
    roundtrip(f, 0, x, expect=(expected, x))


# --------------------------------------------------------------------------- #
# 8. while
# --------------------------------------------------------------------------- #
def test_while_counter(make):
    f = make("""
        def f(k, n):
            while (k < n, k > 0):
                k += 1
    """)
    roundtrip(f, 0, 5, expect=(5, 5))
    roundtrip(f, 0, 0, expect=(0, 0))


def test_while_with_accumulator(make):
    f = make("""
        def f(y, x, k, n):
            while (k < n, k > 0):
                y += x
                k += 1
    """)
    roundtrip(f, 1.0, 0.5, 0, 4, expect=(3.0, 0.5, 4, 4))


def test_while_float_condition(make):
    f = make("""
        def f(x, k):
            while (x < 100.0, k > 0):
                x *= 2.0
                k += 1
    """)
    roundtrip(f, 3.0, 0, expect=(192.0, 0 + 6))


# --------------------------------------------------------------------------- #
# 9. for
# --------------------------------------------------------------------------- #
RANGES = [(0, 10, 3), (10, 0, -3), (5, 5, 1), (5, 0, 1), (0, 5, -1), (-3, 4, 2), (3, -4, -2),
          (0, 1, 1), (4, -1, -1)]


@pytest.mark.parametrize("a, b, s", RANGES)
def test_for_range_three_args(make, a, b, s):
    f = make("""
        def f(y, a, b, s):
            for i in range(a, b, s):
                y *= 3
                y += i
    """)
    y = 1
    for i in range(a, b, s):
        y = y * 3 + i
    roundtrip(f, 1, a, b, s, expect=(y, a, b, s))


@pytest.mark.parametrize("a, b", [(0, 4), (2, 6), (3, 3), (5, 2), (-2, 1)])
def test_for_range_two_args(make, a, b):
    f = make("""
        def f(y, a, b):
            for i in range(a, b):
                y *= 3
                y += i
    """)
    y = 1
    for i in range(a, b):
        y = y * 3 + i
    roundtrip(f, 1, a, b, expect=(y, a, b))


@pytest.mark.parametrize("n", [0, 1, 4, -2])
def test_for_range_one_arg(make, n):
    f = make("""
        def f(y, n):
            for i in range(n):
                y *= 3
                y += i
    """)
    y = 1
    for i in range(n):
        y = y * 3 + i
    roundtrip(f, 1, n, expect=(y, n))


def test_for_constant_negative_step(make):
    f = make("""
        def f(x):
            for i in range(len(x) - 1, 0, -1):
                x[i] -= x[i - 1]
    """)
    x = np.array([1.0, 3.0, 6.0, 10.0])
    roundtrip(f, x, expect=(np.array([1.0, 2.0, 3.0, 4.0]),))


def test_for_loop_reads_loop_variable_in_expressions(make):
    f = make("""
        def f(y, x):
            for i in range(1, len(x)):
                y[i] += x[i - 1] * i + 0.5 * x[i] ** 2
    """)
    x = np.array([1.0, 2.0, 3.0])
    want = np.zeros(3)
    for i in range(1, 3):
        want[i] += x[i - 1] * i + 0.5 * x[i] ** 2
    roundtrip(f, np.zeros(3), x, expect=(want, x))


def test_nested_control_flow(make):
    f = make("""
        def f(s, k, A):
            for i in range(A.shape[0]):
                for j in range(i + 1):
                    if A[i, j] > 0.0:
                        s += A[i, j]
                    elif A[i, j] < 0.0:
                        s -= 2.0 * A[i, j]
                    else:
                        k += 1
                c = 0
                while (c < i, c > 0):
                    k += 10
                    c += 1
                c -= i
                del c
    """)
    A = np.array([[1.0, 0.0, 0.0], [-2.0, 0.0, 9.0], [3.0, -1.0, 0.0]])
    # lower triangle: 1, -2, 0, 3, -1, 0 -> s = 1 + 4 + 3 + 2, zeros counted: 2; whiles: 0+1+2
    roundtrip(f, 0.0, 0, A, expect=(10.0, 2 + 30, A))


# --------------------------------------------------------------------------- #
# 10. print and assert
# --------------------------------------------------------------------------- #
def test_print_runs_in_both_directions(make, capfd):
    f = make("""
        def f(y, x):
            print("value of y:", y)
            y += x
            print("done", x)
    """)
    capfd.readouterr()
    out = f(1.0, 2.0)
    sys.stdout.flush()
    first = capfd.readouterr().out
    assert "value of y:" in first and "done" in first
    assert first.index("value of y:") < first.index("done")
    (~f)(*out)
    second = capfd.readouterr().out
    assert "value of y:" in second and "done" in second
    # the inverse runs the statements backwards
    assert second.index("done") < second.index("value of y:")


def test_print_python_backend_capsys(capsys):
    f = revbench.define("def f(y, x):\n    print('hello', x)\n    y += x\n", backend="python")["f"]
    assert f(0.0, 2.0) == (2.0, 2.0)
    assert "hello" in capsys.readouterr().out


def test_assert(make):
    f = make("""
        def f(y, x):
            assert x > 0.0
            y += x
            assert y > x, "y must stay above x"
    """)
    roundtrip(f, 1.0, 2.0, expect=(3.0, 2.0))
    with pytest.raises(AssertionError):
        f(1.0, -2.0)
    with pytest.raises(AssertionError):
        (~f)(1.0, -2.0)
    with pytest.raises(AssertionError):
        f(-5.0, 2.0)


# --------------------------------------------------------------------------- #
# 11. elements and whole arrays
# --------------------------------------------------------------------------- #
def test_matvec_2d_elements(make):
    f = make("""
        def f(y, A, x):
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    y[i] += A[i, j] * x[j]
    """)
    A = np.arange(6.0).reshape(2, 3)
    x = np.array([1.0, -1.0, 2.0])
    roundtrip(f, np.ones(2), A, x, expect=(1.0 + A @ x, A, x))


def test_2d_element_target(make):
    f = make("""
        def f(A, x, y):
            for i in range(len(x)):
                for j in range(len(y)):
                    A[i, j] += x[i] * y[j]
    """)
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    roundtrip(f, np.zeros((2, 3)), x, y, expect=(np.outer(x, y), x, y))


def test_negative_indices(make):
    f = make("""
        def f(x):
            x[-1] += x[0]
            x[0] *= x[-2]
    """)
    roundtrip(f, np.array([1.0, 2.0, 3.0]), expect=(np.array([2.0, 2.0, 4.0]),))


def test_different_elements_of_one_array(make):
    f = make("""
        def f(x, i, j):
            x[i] += 2.0 * x[j]
    """)
    roundtrip(f, np.array([1.0, 2.0, 3.0]), 0, 2, expect=(np.array([7.0, 2.0, 3.0]), 0, 2))


def test_whole_array_axpy(make):
    f = make("""
        def f(y, a, x):
            y += a * x
    """)
    x = np.array([1.0, 2.0, 3.0])
    roundtrip(f, np.ones(3), 2.0, x, expect=(1.0 + 2.0 * x, 2.0, x))


def test_whole_array_2d(make):
    f = make("""
        def f(Y, a, X, Z):
            Y += a * X * Z
            Y -= X
    """)
    X = np.arange(6.0).reshape(2, 3)
    Z = X + 1.0
    roundtrip(f, np.ones((2, 3)), 0.5, X, Z, expect=(1.0 + 0.5 * X * Z - X, 0.5, X, Z))


def test_whole_array_scale_by_scalar(make):
    f = make("""
        def f(y, a):
            y *= a
            y /= 4.0
    """)
    y = np.array([1.0, -2.0, 3.0])
    roundtrip(f, y, 2.0, expect=(y * 2.0 / 4.0, 2.0))


def test_whole_array_with_function(make):
    f = make("""
        def f(y, x):
            y += np.sin(x) + x ** 2
    """)
    x = np.array([0.1, 0.5, 2.0])
    roundtrip(f, np.zeros(3), x, expect=(np.sin(x) + x ** 2, x))


def test_views_and_fortran_arrays_updated_in_place(make):
    f = make("""
        def f(y, a, x):
            y += a * x
    """)
    base = np.zeros(6)
    view = base[::2]
    out = f(view, 2.0, np.arange(3.0))
    assert out[0] is view
    np.testing.assert_array_equal(base, [0.0, 0.0, 2.0, 0.0, 4.0, 0.0])
    F = np.asfortranarray(np.ones((2, 3)))
    roundtrip(f, F, 3.0, np.arange(6.0).reshape(2, 3), expect=(
        1.0 + 3.0 * np.arange(6.0).reshape(2, 3), 3.0, np.arange(6.0).reshape(2, 3)))


def test_whole_array_int_and_complex(make):
    f = make("""
        def f(k, n, z, w):
            k += 2 * n
            z *= w
    """)
    n = np.array([1, -2, 3])
    w = np.array([1j, 2.0, 1 - 1j])
    z = np.array([1 + 1j, 2.0 + 0j, -1j])
    roundtrip(f, np.zeros(3, dtype=np.int64), n, z, w, expect=(2 * n, n, z * w, w))


def test_whole_array_xor_bool(make):
    f = make("""
        def f(b, c):
            b ^= c
    """)
    b = np.array([True, False, True])
    c = np.array([True, True, False])
    roundtrip(f, b, c, expect=(b ^ c, c))


# --------------------------------------------------------------------------- #
# 12. expressions
# --------------------------------------------------------------------------- #
FLOAT_EXPRESSIONS = [
    "x + z", "x - z", "x * z", "x / z", "x ** 2", "x ** 0.5", "x ** -1.5", "x ** z",
    "2.0 ** x", "x // z", "-x", "-(x * z)", "x - -z", "(x + z) * (x - z) / 2.0",
    "x if x > z else z", "x if x < z else -z", "3 * x + 1", "-x ** 2", "x * 1e-3 + 1.5e2",
]


@pytest.mark.parametrize("expr", FLOAT_EXPRESSIONS)
def test_float_expression(make, expr):
    f = make(f"""
        def f(y, x, z):
            y += {expr}
    """)
    x, z = 1.7, 0.6
    expected = 0.25 + eval(expr, {}, {"x": x, "z": z})
    roundtrip(f, 0.25, x, z, expect=(expected, x, z))


INT_EXPRESSIONS = ["a + b", "a - b", "a * b", "a // b", "a ** 2", "-a", "-a // b", "a * b - a",
                   "a if a > b else b", "(a + 1) * (b - 1) // 3"]


@pytest.mark.parametrize("expr", INT_EXPRESSIONS)
def test_int_expression(make, expr):
    f = make(f"""
        def f(k, a, b):
            k += {expr}
    """)
    a, b = 17, 5
    expected = 3 + eval(expr, {}, {"a": a, "b": b})
    roundtrip(f, 3, a, b, expect=(expected, a, b))


def test_complex_expression(make):
    f = make("""
        def f(z, w, x):
            z += w * w - 2.0 * x + 1j * x
            z -= w / (1.0 + 1j)
    """)
    w, x = 1.0 - 2.0j, 0.5
    expected = 0.5j + (w * w - 2.0 * x + 1j * x) - w / (1.0 + 1j)
    roundtrip(f, 0.5j, w, x, expect=(expected, w, x))


def test_len_and_shape(make):
    f = make("""
        def f(k, y, x, A):
            k += len(x) * 100 + A.shape[0] * 10 + A.shape[1]
            y += len(A) * 0.5
    """)
    x, A = np.zeros(7), np.zeros((2, 3))
    roundtrip(f, 1, 0.0, x, A, expect=(1 + 723, 1.0, x, A))
    g = make("""
        def g(k, A):
            k += A.shape[-1] * 10 + A.shape[-2]
    """)
    roundtrip(g, 0, A, expect=(32, A))
    with pytest.raises(revbench.ReversibilityTypeError, match="axis -2 does not exist"):
        g(0, x)


def test_element_read_in_expression(make):
    f = make("""
        def f(y, x, A, i):
            y += x[i] * A[i, i + 1] - x[-1]
    """)
    x = np.array([1.0, 2.0, 3.0])
    A = np.arange(9.0).reshape(3, 3)
    roundtrip(f, 0.0, x, A, 1, expect=(2.0 * 5.0 - 3.0, x, A, 1))


# --------------------------------------------------------------------------- #
# 13. functions of §3, every spelling
# --------------------------------------------------------------------------- #
X, Z = 0.7, -1.3
FUNCTIONS = {
    "sin": (["sin(x)", "math.sin(x)", "np.sin(x)"], math.sin(X)),
    "cos": (["cos(x)", "math.cos(x)", "np.cos(x)"], math.cos(X)),
    "tan": (["tan(x)", "math.tan(x)", "np.tan(x)"], math.tan(X)),
    "exp": (["exp(x)", "math.exp(x)", "np.exp(x)"], math.exp(X)),
    "log": (["log(x)", "math.log(x)", "np.log(x)"], math.log(X)),
    "log1p": (["log1p(x)", "math.log1p(x)", "np.log1p(x)"], math.log1p(X)),
    "expm1": (["expm1(x)", "math.expm1(x)", "np.expm1(x)"], math.expm1(X)),
    "sqrt": (["sqrt(x)", "math.sqrt(x)", "np.sqrt(x)"], math.sqrt(X)),
    "tanh": (["tanh(x)", "math.tanh(x)", "np.tanh(x)"], math.tanh(X)),
    "sinh": (["sinh(x)", "math.sinh(x)", "np.sinh(x)"], math.sinh(X)),
    "cosh": (["cosh(x)", "math.cosh(x)", "np.cosh(x)"], math.cosh(X)),
    "atan": (["atan(x)", "math.atan(x)", "np.arctan(x)"], math.atan(X)),
    "atan2": (["atan2(x, z)", "math.atan2(x, z)", "np.arctan2(x, z)"], math.atan2(X, Z)),
    "hypot": (["hypot(x, z)", "math.hypot(x, z)", "np.hypot(x, z)"], math.hypot(X, Z)),
    "abs": (["abs(z)", "np.abs(z)", "math.fabs(z)", "np.absolute(z)"], abs(Z)),
    "min": (["min(x, z)", "np.minimum(x, z)", "min(z, x)"], min(X, Z)),
    "max": (["max(x, z)", "np.maximum(x, z)", "max(z, x)"], max(X, Z)),
    "pow": (["x ** z", "x ** 3", "z ** 2", "x ** 0.5"], None),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_pure_function_spellings(make, name):
    spellings, value = FUNCTIONS[name]
    body = "\n".join(f"    r[{k}] += {s}" for k, s in enumerate(spellings))
    f = make(f"def f(r, x, z):\n{body}\n")
    if value is None:
        expected = np.array([eval(s, {}, {"x": X, "z": Z}) for s in spellings])
    else:
        expected = np.full(len(spellings), value)
    roundtrip(f, np.zeros(len(spellings)), X, Z, expect=(expected, X, Z))


def test_functions_imported_by_name(make):
    f = make("""
        def f(y, x):
            y += sin(x) + cos(x) * arctan(x)
    """, namespace={"sin": math.sin, "cos": np.cos, "arctan": np.arctan})
    roundtrip(f, 0.0, X, expect=(math.sin(X) + math.cos(X) * math.atan(X), X))


def test_nested_function_calls(make):
    f = make("""
        def f(y, x, z):
            y += exp(-x * x) * np.sqrt(hypot(x, z)) + max(abs(z), min(x, 0.1))
    """)
    expected = math.exp(-X * X) * math.sqrt(math.hypot(X, Z)) + max(abs(Z), min(X, 0.1))
    roundtrip(f, 0.0, X, Z, expect=(expected, X, Z))


def test_int_abs_min_max_stay_int(make):
    f = make("""
        def f(k, a, b):
            k += max(a, b) * 100 + min(a, b) * 10 + abs(b)
    """)
    roundtrip(f, 0, 4, -3, expect=(400 - 30 + 3, 4, -3))


def test_complex_functions(make):
    f = make("""
        def f(z, w, r):
            z += np.exp(w) + sqrt(w)
            r += abs(w)
    """)
    w = 0.3 + 0.4j
    import cmath

    roundtrip(f, 0j, w, 0.0, expect=(cmath.exp(w) + cmath.sqrt(w), w, abs(w)))


# --------------------------------------------------------------------------- #
# 14. module-level constants, frozen at definition
# --------------------------------------------------------------------------- #
def test_module_constants_frozen(backend):
    ns = {"np": np, "math": math, "K": 2.5, "N": 3, "FLAG": True, "C": 1j,
          "NPF": np.float64(0.25), "NPI": np.int64(7)}
    fns = define("""
        def f(y, k, b, z, x):
            y += K * x + NPF
            k += N * NPI
            b ^= FLAG
            z += C * x
            y += math.pi + np.e
    """, backend, ns)
    f = fns["f"]
    for name, value in (("K", 100.0), ("N", 100), ("FLAG", False), ("C", 5.0), ("NPF", 9.0),
                        ("NPI", 9)):
        ns[name] = value
    expected = (1.0 + 2.5 * 2.0 + 0.25 + math.pi + math.e, 21, True, 2j, 2.0)
    roundtrip(f, 1.0, 0, False, 0j, 2.0, expect=expected)
    ns["K"] = -1.0
    assert_values(f(1.0, 0, False, 0j, 2.0), expected)


def test_constant_in_range_and_shape(backend):
    ns = {"np": np, "math": math, "STEPS": 4}
    f = define("""
        def f(k):
            for i in range(STEPS):
                k += i
    """, backend, ns)["f"]
    ns["STEPS"] = 10
    roundtrip(f, 0, expect=(6,))


# --------------------------------------------------------------------------- #
# 15. types
# --------------------------------------------------------------------------- #
def test_scalar_types_preserved(make):
    f = make("""
        def f(x, k, b, z):
            x += 1.5
            k += 2
            b ^= True
            z *= 1j
    """)
    out = roundtrip(f, 1.0, 1, False, 1 + 1j, expect=(2.5, 3, True, (1 + 1j) * 1j))
    assert [type(v) for v in out] == [float, int, bool, complex]


def test_array_types(make):
    f = make("""
        def f(x, k, b, z):
            for i in range(len(x)):
                x[i] += 1.5
                k[i] -= i
                b[i] ^= k[i] > 0
                z[i] *= 1j
    """)
    x = np.array([1.0, 2.0])
    k = np.array([1, 5], dtype=np.int64)
    b = np.array([False, True])
    z = np.array([1 + 1j, 2 - 1j])
    roundtrip(f, x, k, b, z, expect=(x + 1.5, np.array([1, 4]), np.array([True, False]), z * 1j))


def test_int_arg_in_float_expression(make):
    f = make("""
        def f(y, n):
            y += n / 2
    """)
    roundtrip(f, 0.0, 3, expect=(1.5, 3))


# --------------------------------------------------------------------------- #
# 16. options: check=False, backend, source
# --------------------------------------------------------------------------- #
SOURCE_POLY = """
    def poly(y, x):
        t = 0.0
        t += x * x
        y += 3.0 * t + x
        t -= x * x
        del t
"""


def test_check_false_runs(make):
    f = make(SOURCE_POLY, check=False)
    roundtrip(f, 0.0, 2.0, expect=(14.0, 2.0))
    assert not f.check


@pytest.mark.parametrize("kind", ["forward", "inverse"])
def test_check_false_source_has_no_raise(make, kind):
    f = make(SOURCE_POLY + """
    def g(x, i, j, n):
        x[i] += x[j]
        x[i] *= 2.0
        for k in range(n):
            x[0] += 1.0
        if (x[0] > 0.0, x[1] > 0.0):
            x[1] += 1.0
    """, check=False)
    f(np.array([1.0, 2.0, 3.0]), 0, 1, 2)
    src = f.source(kind)
    assert isinstance(src, str) and "def " in src
    assert "raise" not in src


def test_check_false_source_has_no_check_failed_name(make):
    f = make(SOURCE_POLY, check=False)
    f(0.0, 2.0)
    assert "_RbCheckFailed" not in f.source("forward")
    assert "_RbCheckFailed" not in f.source("inverse")


def test_checked_source_has_checks(make):
    f = make(SOURCE_POLY)
    f(0.0, 2.0)
    assert "raise" in f.source("forward")


def test_source_forward_inverse_strings(make):
    f = make(SOURCE_POLY)
    f(0.0, 1.0)
    fwd, inv = f.source("forward"), f.source("inverse")
    assert isinstance(fwd, str) and isinstance(inv, str) and fwd != inv
    assert (~f).source("inverse") == fwd
    assert f.source() == fwd


def test_python_backend_option():
    f = revbench.define(textwrap.dedent(SOURCE_POLY), backend="python")["poly"]
    roundtrip(f, 0.0, 2.0, expect=(14.0, 2.0))


def test_define_returns_all_functions_and_fills_namespace(backend):
    ns = {"np": np}
    fns = define(CALLEE + """
    def f(a, b):
        g(a, b)
    """, backend, ns)
    assert set(fns) == {"g", "f"}
    assert ns["g"] is fns["g"] and ns["f"] is fns["f"]


def test_decorator_inside_define_source_is_optional(backend):
    fns = define("""
        @reversible(check=False)
        def f(y, x):
            y += x
    """, backend)
    roundtrip(fns["f"], 1.0, 2.0, expect=(3.0, 2.0))


# --------------------------------------------------------------------------- #
# 17. register
# --------------------------------------------------------------------------- #
def tstreg_square_plus(x):
    return x * x + 1.0


def tstreg_dsquare_plus(x):
    return 2.0 * x


def tstreg_mix(a, b):
    return a * b - a


def test_register_user_function(make):
    revbench.register(tstreg_square_plus, partials=(tstreg_dsquare_plus,))
    f = make("""
        def f(y, x):
            y += tstreg_square_plus(x) * 2.0
    """, namespace={"tstreg_square_plus": tstreg_square_plus})
    roundtrip(f, 0.0, 3.0, expect=(20.0, 3.0))


def test_register_two_argument_function(make):
    revbench.register(tstreg_mix, partials=(lambda a, b: b - 1.0, lambda a, b: a))
    f = make("""
        def f(y, x, z):
            y += tstreg_mix(x, z) + sin(tstreg_mix(z, x))
    """, namespace={"tstreg_mix": tstreg_mix})
    roundtrip(f, 0.0, 2.0, 3.0, expect=(4.0 + math.sin(3.0), 2.0, 3.0))


def test_register_returns_function():
    assert revbench.register(tstreg_square_plus, partials=(tstreg_dsquare_plus,)) is tstreg_square_plus


def _make_versioned(k: float):
    def tstreg_versioned(x):
        return x * k

    def dtstreg_versioned(x):
        return k

    return tstreg_versioned, dtstreg_versioned


def test_register_again_replaces(make, backend, request):
    fn1, d1 = _make_versioned(2.0)
    revbench.register(fn1, partials=(d1,))
    f1 = make("""
        def f1(y, x):
            y += tstreg_versioned(x)
    """, namespace={"tstreg_versioned": fn1})
    assert_values(f1(0.0, 3.0), (6.0, 3.0))

    fn2, d2 = _make_versioned(5.0)
    revbench.register(fn2, partials=(d2,))
    f2 = make("""
        def f2(y, x):
            y += tstreg_versioned(x)
    """, namespace={"tstreg_versioned": fn2})
    roundtrip(f2, 0.0, 3.0, expect=(15.0, 3.0))


def test_register_again_replaces_other_source():
    """Re-running a notebook cell: same name, different body (defined from source text)."""
    for k in (2.0, 7.0):
        ns: dict = {}
        exec(f"def tstreg_cell(x):\n    return x * {k}\n", ns)
        revbench.register(ns["tstreg_cell"], partials=(lambda x, k=k: k,))
        for backend in ("numba", "python"):
            f = revbench.define("def f(y, x):\n    y += tstreg_cell(x)\n", dict(ns), backend=backend)["f"]
            assert_values(f(0.0, 3.0), (3.0 * k, 3.0))


# --------------------------------------------------------------------------- #
# 18. check_inverse
# --------------------------------------------------------------------------- #
def test_check_inverse_passes_and_keeps_caller_arrays(make):
    f = make("""
        def f(y, a, x):
            y += a * x
    """)
    y, x = np.ones(3), np.arange(3.0)
    out = revbench.check_inverse(f, y, 2.0, x)
    np.testing.assert_array_equal(y, np.ones(3))
    np.testing.assert_array_equal(out[0], 1.0 + 2.0 * x)


def test_check_inverse_detects_lost_precision(make):
    f = make("""
        def f(y, x):
            y += x
    """)
    revbench.check_inverse(f, 1.0, 2.0)
    with pytest.raises(AssertionError):
        revbench.check_inverse(f, 1.0, 1e20)


def test_check_inverse_ints(make):
    f = make("""
        def f(k, n):
            k *= n
    """)
    assert revbench.check_inverse(f, 3, 4) == (12, 4)

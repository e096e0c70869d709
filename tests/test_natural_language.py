"""The language as users write it (issue 10): constructs that need no bookkeeping.

* names for shapes and constants (``n = len(x)``, ``m = x.shape[1] - 1``, ``c = 0.5``)
  that are never changed need no ``del``: they are freed at the end of their block.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, grad


def define(source: str, backend: str = "python", **options):
    fns = revbench.define(textwrap.dedent(source).lstrip("\n"), {"np": np, "math": math},
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

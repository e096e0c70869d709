"""Issue 9, the static holes: bool indices (3), the order of deallocations (6), empty
nested blocks (7), unchecked gradients through branches that allocate (8), call arity
(9), an atomic and strict ``define`` (12), the arguments of ``grad``/``check_grad``
(13), the swap advice for an allocated ancilla (14) and "did you mean" for typos (16).

Each item starts with the issue's own example, then tries the rest of its class.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import revbench
from revbench import (
    ReversibilitySyntaxError,
    ReversibilityTypeError,
    check_grad,
    grad,
    reversible,
)

FILENAME = "<issue9>"


def refuse(source: str, backend: str = "python", ns: dict | None = None, **options):
    """``source`` must be refused at definition; returns the error and the source's lines."""
    src = textwrap.dedent(source).lstrip("\n")
    namespace = {"np": np, "math": math, **(ns or {})}
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define(src, namespace, filename=FILENAME, backend=backend, **options)
    return info.value, src.splitlines()


def at_line(err: SyntaxError, lines: list[str], needle: str) -> None:
    """The error points at the (only) line holding ``needle``, with its text and a column."""
    hits = [k for k, line in enumerate(lines, 1) if needle in line]
    assert len(hits) == 1, hits
    assert err.lineno == hits[0], (err.lineno, hits[0], err.msg)
    assert err.text.rstrip("\n") == lines[hits[0] - 1]
    assert err.filename == FILENAME
    assert isinstance(err.offset, int) and err.offset >= 1


# --------------------------------------------------------------------------- #
# 3. bool indices
# --------------------------------------------------------------------------- #


def test_issue_example_bool_literal_index_is_a_static_error(backend):
    err, lines = refuse("""
        def f(x, j):
            x[True] += x[j]
    """, backend)
    at_line(err, lines, "x[True]")
    assert "bool" in err.msg and "x[1]" in err.msg
    err, lines = refuse("""
        def f(y, x):
            y += x[True]
    """, backend)
    at_line(err, lines, "x[True]")


@pytest.mark.parametrize("body, needle", [
    ("y += x[False]", "x[False]"),
    ("y += A[0, True]", "A[0, True]"),
    ("t = x[True]\n    y += t\n    del t", "t = x[True]"),
    ("g(x[True], y)", "g(x[True], y)"),
    ("x[FLAG], y = y, x[FLAG]", "x[FLAG]"),  # a frozen module-level bool
    ("if x[True] > 0.0:\n        y += 1.0", "if x[True]"),
])
def test_bool_constant_indices_are_static_errors(backend, body, needle):
    src = f"def g(a, b):\n    a += b\n\ndef f(y, x, A):\n    {body}\n"
    err, lines = refuse(src, backend, ns={"FLAG": True})
    at_line(err, lines, needle)
    assert "bool" in err.msg


def test_issue_example_bool_argument_index_is_a_type_error(make):
    f = make("""
        def f(y, x, k):
            y += x[k]
    """)
    x = np.arange(3.0)
    with pytest.raises(ReversibilityTypeError) as info:
        f(0.0, x, True)
    err = info.value
    assert err.lineno == 3 and "`k`" in str(err) and "bool" in str(err)
    assert err.variable == "k"
    assert (x == np.arange(3.0)).all()
    assert f(0.0, x, 1) == (1.0, x, 1)  # an int index still works


@pytest.mark.parametrize("body", [
    "x[k] += x[j]",
    "y += x[i > j]",
    "y += x[not k]",
    "b = k\n    y += x[b]\n    del b",
    "y += A[j, k]",
    "t = 0.0\n    g(t, x[k])\n    del t",
])
def test_bool_typed_indices_are_type_errors(make, body):
    f = make(f"def g(a, b):\n    a += b\n\ndef f(y, x, A, i, j, k):\n    {body}\n")
    x, A = np.arange(3.0), np.ones((2, 2))
    with pytest.raises(ReversibilityTypeError, match="bool"):
        f(0.0, x, A, 1, 0, True)
    assert (x == np.arange(3.0)).all() and (A == 1.0).all()


def test_bool_arithmetic_gives_an_int_index(make):
    # k + 0 is an int: a fine index, read as the element 1 on both backends
    f = make("""
        def f(y, x, k):
            y += x[k + 0]
    """)
    assert f(0.0, np.array([1.0, 2.0, 3.0]), True)[0] == 2.0


def test_bool_array_as_index_is_refused(make):
    f = make("""
        def f(y, x, m):
            y += x[m]
    """)
    with pytest.raises(ReversibilityTypeError):
        f(0.0, np.arange(3.0), np.array([True, False, True]))


# --------------------------------------------------------------------------- #
# 6. the order of deallocations
# --------------------------------------------------------------------------- #


def test_issue_example_deallocating_what_a_live_ancilla_reads(backend):
    err, lines = refuse("""
        def f(y, x):
            a = x*2.0
            b = a + 1.0
            y += b
            del a
            del b
    """, backend)
    at_line(err, lines, "del b")
    assert "`a`" in err.msg and "`b`" in err.msg and "line 3" in err.msg


def test_the_right_order_runs_both_ways(make):
    f = make("""
        def f(y, x):
            a = x*2.0
            b = a + 1.0
            y += b
            del b
            del a
    """)
    assert f(0.0, 2.0) == (5.0, 2.0)
    assert (~f)(5.0, 2.0) == (0.0, 2.0)
    assert grad(f, loss="y")(0.0, 2.0) == (1.0, 2.0)


@pytest.mark.parametrize("body, needle", [
    # an array copied, mimicked or measured by the ancilla freed first
    ("a = x.copy()\n    b = a.copy()\n    del a\n    del b", "del b"),
    ("a = x.copy()\n    b = np.zeros_like(a)\n    del a\n    del b", "del b"),
    ("a = x.copy()\n    b = np.zeros(len(a))\n    del a\n    del b", "del b"),
    ("a = x.copy()\n    n = a.shape[0]\n    del a\n    del n", "del n"),
    ("a = x.copy()\n    s = a[0] * 2.0\n    del a\n    del s", "del s"),
    # an index of the allocation expression
    ("k = 1\n    s = x[k]\n    del k\n    del s", "del s"),
    # three deep, and the condition of an if inside
    ("a = y + 1.0\n    b = a * a\n    c = b - a\n    del b\n    del c\n    del a", "del c"),
    ("for i in range(3):\n        a = x[i]\n        b = a * 2.0\n        del a\n        del b", "del b"),
    ("if y > 0.0:\n        a = y\n        b = a\n        del a\n        del b", "del b"),
    # freed by an uncomputed routine
    ("with routine:\n        a = y * 2.0\n    b = a + 1.0\n    ~routine\n    del b", "del b"),
    ("with inverted:\n        a = y * 2.0\n        b = a + 1.0\n        del a\n        del b", "del b"),
])
def test_deallocation_order_is_checked_statically(backend, body, needle):
    err, lines = refuse(f"def f(y, x):\n    {body}\n", backend)
    at_line(err, lines, needle)
    assert "Deallocate" in err.msg


# found while testing item 6: a routine's ancillas and `~routine`


@pytest.mark.parametrize("body, needle, words", [
    # freed twice: by `del a`, then by `~routine` (with checks off, silently)
    ("with routine:\n        a = x * 2.0\n    y += a\n    del a\n    ~routine",
     "del a", ("still open", "~routine")),
    # freed, allocated anew, and the new one freed by `~routine` (a leak nobody checks)
    ("with routine:\n        a = x * 2.0\n    del a\n    a = x * 3.0\n    y += a\n    ~routine",
     "del a", ("still open",)),
    # `~routine` allocates again what the routine freed, over a live ancilla of that name
    ("a = x * 2.0\n    with routine:\n        del a\n    a = 5.0\n    y += a\n    ~routine\n"
     "    del a", "~routine", ("allocates `a` again",)),
    # `~routine` allocates again from an ancilla freed since
    ("a = x * 2.0\n    b = a + 1.0\n    with routine:\n        del b\n    del a\n    ~routine\n"
     "    y += b\n    del b", "~routine", ("`a`", "`b`")),
    # `~routine` deallocates an ancilla whose expression reads one freed since
    ("a = x * 2.0\n    with routine:\n        b = a + 1.0\n    del a\n    y += b\n    ~routine",
     "~routine", ("deallocates `b`", "`a`")),
])
def test_routine_ancillas_are_freed_by_their_uncompute_only(backend, body, needle, words):
    err, lines = refuse(f"def f(y, x):\n    {body}\n", backend)
    at_line(err, lines, needle)
    for w in words:
        assert w in err.msg, err.msg


@pytest.mark.parametrize("body", [
    # a later routine may free an earlier routine's ancilla: it is undone first
    "with routine as r1:\n        a = x * 2.0\n    with routine as r2:\n        del a\n"
    "    y += x\n    ~r2\n    y += a\n    ~r1",
    # a routine freeing an outer ancilla, which its uncompute allocates again
    "a = x * 2.0\n    with routine:\n        del a\n    y += x\n    ~routine\n    y += a\n    del a",
    "a = x * 2.0\n    with routine:\n        del a\n    a = 5.0\n    y += a\n    del a\n"
    "    ~routine\n    del a",
])
def test_routines_that_free_and_allocate_across_run_both_ways(make, body):
    f = make(f"def f(y, x):\n    {body}\n")
    out = f(0.0, 1.0)
    assert (~f)(*out) == pytest.approx((0.0, 1.0))
    assert grad(f, loss="y")(0.0, 1.0)[0] == 1.0


def test_an_ancilla_reallocated_under_the_same_name_is_fine(make):
    f = make("""
        def f(y, x):
            a = x * 2.0
            b = a + 1.0
            del b
            del a
            a = x * 3.0
            y += a
            del a
    """)
    assert f(0.0, 1.0) == (3.0, 1.0)
    assert (~f)(3.0, 1.0) == (0.0, 1.0)


# --------------------------------------------------------------------------- #
# 7. empty nested blocks
# --------------------------------------------------------------------------- #

EMPTY_BLOCKS = [
    "if x > 0.0:\n        with inverted:\n            pass",
    "if x > 0.0:\n        pass\n    else:\n        with inverted:\n            pass",
    "for i in range(3):\n        with inverted:\n            pass",
    "if x > 0.0:\n        with routine:\n            pass\n        ~routine",
    "with inverted:\n        with inverted:\n            pass",
    "if x > 0.0:\n        with inverted:\n            with routine:\n                pass\n"
    "            ~routine",
    "if x > 0.0:\n        t = 0.0\n        del t",  # `del t` is a comment without checks
    "for i in range(2):\n        if x > 0.0:\n            with inverted:\n                pass",
    "while (n < 0, n > 0):\n        with inverted:\n            pass",
]


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("block", EMPTY_BLOCKS)
def test_empty_nested_blocks_generate_code_in_every_direction(make, block, check):
    f = make(f"def f(y, x, n):\n    {block}\n    y += x\n", check=check)
    assert f(0.0, 2.0, 0) == (2.0, 2.0, 0)
    assert (~f)(2.0, 2.0, 0) == (0.0, 2.0, 0)
    assert grad(f, loss="y")(0.0, 2.0, 0) == (1.0, 1.0, None)
    for kind in ("forward", "inverse", "adjoint"):
        compile(f.source(kind, 0.0, 2.0, 0), "<generated>", "exec")


def test_issue_example_empty_block_alone_in_a_function(make):
    f = make("""
        def f(x):
            if x > 0.0:
                with inverted:
                    pass
    """)
    assert f(1.0) == (1.0,)
    assert (~f)(1.0) == (1.0,)
    assert grad(f, loss="x")(1.0) == (1.0,)


# --------------------------------------------------------------------------- #
# 8. unchecked gradients through branches that allocate
# --------------------------------------------------------------------------- #

ISSUE_8 = """
@reversible(check=False)
def f(e, x):
    with routine:
        q = 0.0
        if x > 0.0:
            th = math.sqrt(x)
            q += th
            del th
    e += q * q
    ~routine
"""


def test_issue_example_unchecked_grad_with_an_ancilla_in_a_branch(make):
    f = make(ISSUE_8)
    assert not f.check
    checked = make(ISSUE_8.replace("@reversible(check=False)", ""))
    for x in (2.0, -1.0):
        assert grad(f, loss="e")(0.0, x) == pytest.approx(grad(checked, loss="e")(0.0, x))
    assert grad(f, loss="e")(0.0, 2.0) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("source", [
    # the same ancilla name in both branches, and in a loop
    """
    def f(e, x):
        with routine:
            q = 0.0
            if x > 0.0:
                th = x * x
                q += th
                del th
            else:
                th = x * 3.0
                q += th
                del th
        e += q * q
        ~routine
    """,
    """
    def f(e, x):
        with routine:
            q = 0.0
            for i in range(3):
                if x > 0.0:
                    th = math.sin(x)
                    q += th
                    del th
        e += q * x
        ~routine
    """,
    # nested routines, and an ancilla freed by an inverted block
    """
    def f(e, x):
        with routine:
            q = 0.0
            with routine:
                r = x * 2.0
                if r > 1.0:
                    th = r * r
                    q += th
                    del th
            ~routine
        e += q * 1.5
        ~routine
    """,
    """
    def f(e, x):
        with inverted:
            with routine:
                q = 0.0
                if x > 0.0:
                    th = math.exp(x)
                    q -= th
                    del th
            e -= q * q
            ~routine
    """,
])
@pytest.mark.parametrize("x", [0.7, -0.4])
def test_unchecked_gradients_equal_checked_ones(make, source, x):
    checked = make(source)
    unchecked = make(source, check=False)
    g = grad(checked, loss="e")(0.25, x)
    assert grad(unchecked, loss="e")(0.25, x) == pytest.approx(g)
    check_grad(checked, 0.25, x, loss="e")


# --------------------------------------------------------------------------- #
# 9. call arity
# --------------------------------------------------------------------------- #


def test_issue_example_too_few_arguments_is_refused_at_the_call(backend):
    err, lines = refuse("""
        def h(y, x):
            y += x

        def g(y):
            h(y)
    """, backend)
    at_line(err, lines, "h(y)")
    assert "`h` takes 2 arguments (y, x)" in err.msg and "passes 1" in err.msg
    assert "function g" in err.msg


@pytest.mark.parametrize("call", ["h(y, x, z)", "~h(y)", "h.inverse(y, x, z)", "(~h)(y)"])
def test_arity_of_known_callees(backend, call):
    err, lines = refuse(f"""
        def h(y, x):
            y += x

        def g(y, x, z):
            {call}
    """, backend)
    at_line(err, lines, call)
    assert "takes 2 arguments" in err.msg


def test_arity_of_a_callee_defined_later_in_the_same_source(backend):
    err, lines = refuse("""
        def g(y):
            if y > 0.0:
                h(y)

        def h(y, x):
            y += x
    """, backend)
    at_line(err, lines, "h(y)")


def test_arity_against_the_new_definition_in_the_same_source(backend):
    # h(y, x) in the namespace is redefined as h(y) by the same source: g's call is fine
    ns = {}
    revbench.define("def h(y, x):\n    y += x\n", ns, backend=backend)
    fns = revbench.define("def g(y):\n    h(y)\n\ndef h(y):\n    y += 1.0\n", ns,
                          backend=backend)
    assert fns["g"](1.0) == (2.0,)


def test_arity_of_a_callee_defined_after_the_caller_is_checked_at_the_first_call(backend):
    @reversible(backend=backend)
    def g(y):
        h(y)  # defined below

    @reversible(backend=backend)
    def h(y, x):
        y += x

    globals()["h"] = h
    try:
        with pytest.raises(ReversibilityTypeError) as info:
            g(1.0)
    finally:
        del globals()["h"]
    err = info.value
    assert "`h` takes 2 arguments" in str(err) and "passes 1" in str(err)
    assert err.function == "g" and err.lineno == g.__wrapped__.__code__.co_firstlineno + 2
    assert "h(y)" in str(err)


def test_arity_of_a_redefined_callee_is_checked_at_the_call(backend):
    ns = {}
    revbench.define("def h(y):\n    y += 1.0\n", ns, backend=backend)
    g = revbench.define("def g(y):\n    h(y)\n", ns, backend=backend, filename="<g>")["g"]
    assert g(0.0) == (1.0,)
    revbench.define("def h(y, x):\n    y += x\n", ns, backend=backend)
    with pytest.raises(ReversibilityTypeError) as info:
        g(0.0)
    assert info.value.function == "g" and info.value.lineno == 2
    assert info.value.filename == "<g>"


# --------------------------------------------------------------------------- #
# 12. define(): all or nothing, and no statement silently ignored
# --------------------------------------------------------------------------- #


def test_issue_example_define_is_atomic(backend):
    ns = {"np": np}
    old = revbench.define("def a(y):\n    y += 1.0\n", ns, backend=backend)["a"]
    src = "def a(y):\n    y += 2.0\n\ndef c(y):\n    y += 1.0\n\ndef b(y):\n    y = 1\n"
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define(src, ns, backend=backend)
    assert info.value.lineno == 8
    assert ns["a"] is old and "b" not in ns and "c" not in ns
    assert set(ns) == {"np", "a"}


def test_define_is_atomic_for_type_and_option_errors_too(backend):
    ns = {}
    src = "import math\n\ndef a(y):\n    y += 2.0\n\n@reversible(backend='cuda')\ndef b(y):\n    y += 1.0\n"
    with pytest.raises((ValueError, ReversibilitySyntaxError)):
        revbench.define(src, ns, backend=backend)
    assert ns == {}
    src = "def a(y):\n    y += 2.0\n\ndef b(y):\n    a(y, y)\n"
    with pytest.raises(ReversibilitySyntaxError):
        revbench.define(src, ns, backend=backend)
    assert ns == {}


@pytest.mark.parametrize("statement, needle", [
    ("x = 3", "x = 3"),
    ("N: int = 3", "N: int"),
    ("x += 1", "x += 1"),
    ("class A:\n    pass", "class A"),
    ("async def a(y):\n    y += 1.0", "async def"),
    ("a(1.0)", "a(1.0)"),
    ("print('hi')", "print"),
    ("if True:\n    pass", "if True"),
    ("for i in range(3):\n    pass", "for i"),
    ("with open('f') as fh:\n    pass", "with open"),
    ("from math import *", "import *"),
    ("from . import x", "from ."),
    ("import no_such_module_issue9", "no_such_module"),
    ("try:\n    pass\nexcept Exception:\n    pass", "try:"),
    ("del np", "del np"),
])
def test_define_refuses_top_level_statements_it_would_not_run(backend, statement, needle):
    for where in ("before", "after"):
        src = ("def a(y):\n    y += 1.0\n\n" + statement + "\n" if where == "after"
               else statement + "\n\ndef a(y):\n    y += 1.0\n")
        ns = {"np": np}
        err, lines = refuse(src, backend, ns=ns)
        at_line(err, lines, needle)
        assert err.msg
        assert "a" not in ns


def test_define_located_errors_count_from_first_line(backend):
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define("def a(y):\n    y += 1.0\nx = 3\n", {}, filename="<c>", first_line=2,
                        backend=backend)
    assert info.value.lineno == 4 and info.value.text.strip() == "x = 3"


def test_define_allows_docstrings_imports_and_pass(backend):
    ns: dict = {}
    src = '''"""A module docstring."""
import math
from math import pi as PI
import numpy as np
import os.path
from revbench import reversible
pass

@reversible
def a(y, x):
    """The function's docstring."""
    y += PI * np.sin(x) + math.cos(x)
'''
    fns = revbench.define(src, ns, backend=backend)
    assert list(fns) == ["a"]
    assert fns["a"](0.0, 0.0) == (1.0, 0.0)
    assert ns["PI"] == math.pi and ns["np"] is np and ns["os"].path is __import__("os").path
    assert ns["a"] is fns["a"]


# --------------------------------------------------------------------------- #
# 13. the arguments of grad and check_grad
# --------------------------------------------------------------------------- #


@pytest.fixture
def vsum(make):
    return make("""
        def f(v, x):
            v += x * x
    """)


@pytest.mark.parametrize("loss", [("v", 1.5), ("v", True), ("v", (1, 0.0)), ("v", ()),
                                  ("v", "1"), ("v", np.float64(1.0)), ("v", None)])
def test_issue_example_loss_index_must_be_ints(vsum, loss):
    with pytest.raises(TypeError, match=r"index .* must be an int"):
        grad(vsum, loss=loss)


@pytest.mark.parametrize("loss", [("v", 1), ("v", np.int64(1)), ("v", (1,)), ("v", [1]),
                                  ("v", np.array([1])), (0, -2)])
def test_int_loss_indices_are_accepted(vsum, loss):
    g = grad(vsum, loss=loss)(np.zeros(3), np.array([1.0, 2.0, 3.0]))
    assert g[1] == pytest.approx([0.0, 4.0, 0.0])


@pytest.mark.parametrize("kw", [dict(eps=0), dict(eps=0.0), dict(eps=-1e-6),
                                dict(eps=math.nan), dict(eps=math.inf), dict(eps=True),
                                dict(eps="1e-6"), dict(eps=None), dict(rtol=-1.0),
                                dict(atol=-1e-9), dict(rtol=math.nan), dict(atol=math.inf)])
def test_issue_example_check_grad_refuses_bad_steps_and_tolerances(make, kw):
    f = make("""
        def g(v, x):
            v += x * x
    """)
    with pytest.raises(ValueError, match=next(iter(kw))):
        check_grad(f, 0.0, 1.0, loss="v", **kw)
    assert check_grad(f, 0.0, 1.0, loss="v", rtol=0.0, atol=1e-5) == pytest.approx((1.0, 2.0))


# --------------------------------------------------------------------------- #
# 14. assigning to an allocated ancilla: the advice includes a swap
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("body", [
    "a = 1.0\n    a = 2.0\n    del a",
    "a = 1.0\n    a += 1.0\n    a = 2.0\n    del a",
    "a = x.copy()\n    a = np.zeros(3)\n    del a",
])
def test_assigning_an_allocated_ancilla_suggests_a_swap(backend, body):
    err, lines = refuse(f"def f(y, x):\n    {body}\n", backend)
    assert "already allocated" in err.msg
    assert "a, t = t, a" in err.msg and "+=" in err.msg and "del a" in err.msg
    assert err.lineno == [k for k, line in enumerate(lines, 1) if "a = " in line][1]


# --------------------------------------------------------------------------- #
# 16. did you mean
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("expr, want", [
    ("sinn(x)", "`sin`"), ("np.sinn(x)", "`np.sin`"), ("math.sqr(x)", "`math.sqrt`"),
    ("exq(x)", "`exp`"), ("atn2(x, x)", "`atan2`"), ("np.arctn(x)", "`np.arctan`"),
])
def test_issue_example_misspelt_pure_function(backend, expr, want):
    err, lines = refuse(f"def f(y, x):\n    y += {expr}\n", backend)
    at_line(err, lines, expr)
    assert f"Did you mean {want}" in err.msg
    assert "define the reversible" not in err.msg


def test_misspelt_registered_and_reversible_functions(backend):
    def softish(x):
        return x / (1.0 + abs(x))

    revbench.register(softish, partials=(lambda x: 1.0 / (1.0 + abs(x)) ** 2,))
    err, _ = refuse("def f(y, x):\n    y += sofish(x)\n", backend)
    assert "Did you mean `softish`" in err.msg
    err, _ = refuse("def helper(a, b):\n    a += b\n\ndef f(y, x):\n    y += helpr(x)\n", backend)
    assert "the reversible function `helper`" in err.msg


def test_no_suggestion_when_nothing_is_close(backend):
    err, _ = refuse("def f(y, x):\n    y += qqqqzz(x)\n", backend)
    assert "Did you mean" not in err.msg
    err, _ = refuse("def f(y, x):\n    y += qqqqzz\n", backend)
    assert "Did you mean" not in err.msg


@pytest.mark.parametrize("body, needle, want", [
    ("y += xx", "xx", "`x`"),
    ("y += 2.0 * xs[0]", "xs[0]", "`x`"),
    ("yy += x", "yy", "`y`"),
    ("y += SCALEE * x", "SCALEE", "`SCALE`"),
    ("y += math.pii", "math.pii", "`math.pi`"),
    ("t = x * 2.0\n    y += tt\n    del t", "tt", "`t`"),
    ("t = x * 2.0\n    del t\n    y += t", "y += t", None),
])
def test_issue_example_misspelt_variable(backend, body, needle, want):
    err, lines = refuse(f"def f(y, x, total):\n    {body}\n", backend, ns={"SCALE": 2.0})
    at_line(err, lines, needle)
    if want is None:
        assert "not defined here" in err.msg
    else:
        assert f"Did you mean {want}" in err.msg, err.msg


def test_misspelt_callee_statement_is_told_at_the_call(make):
    f = make("""
        def h(y, x):
            y += x

        def g(y, x):
            hh(y, x)

        def k(y, x):
            sinn(x)
    """, all=True)
    with pytest.raises(ReversibilityTypeError) as info:
        f["g"](0.0, 1.0)
    assert "Did you mean `h`?" in str(info.value) and info.value.lineno == 6
    with pytest.raises(ReversibilityTypeError) as info:
        f["k"](0.0, 1.0)
    msg = str(info.value)
    assert "`sin` is a pure function" in msg and "y += sin(x)" in msg
    assert "@reversible" not in msg


@pytest.mark.parametrize("body, want", [
    ("y += sinn(x)", "Did you mean `sin`?"),
    ("y += np.sqr(x)", None),  # a dotted name is not a notebook name: told by the parser
    ("hh(y)", "Did you mean `h`?"),
    ("y += xx", "Did you mean `x`?"),
    ("y += qqqqzz", "allocate it here"),
])
def test_misspelt_names_in_a_cell_program(body, want):
    pytest.importorskip("IPython")
    from revbench.jupyter.cell import compile_program, read_cell

    h = revbench.define("def h(y):\n    y += 1.0\n", backend="python")["h"]
    ns = {"y": 0.0, "x": 1.0, "np": np, "h": h}
    with pytest.raises(ReversibilitySyntaxError) as info:
        compile_program(read_cell("%%reversible", body + "\n"), ns, check=True, backend="python")
    err = info.value
    assert err.lineno == 2
    assert "define the reversible function" not in err.msg
    if want is not None:
        assert want in err.msg, err.msg
    else:
        assert "Did you mean `np.sqrt`?" in err.msg, err.msg
    assert ns == {"y": 0.0, "x": 1.0, "np": np, "h": h}


# =========================================================================== #
# A type mismatch found in a callee also names the calling line
# =========================================================================== #
@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("args, needle", [
    ((1.0, np.ones(3)), "is an array"),
    ((1, 2.0), "`y` is int but the right-hand side is float"),
    ((True, 1.0), "`+=` is not defined for `y`"),
])
def test_a_callee_type_error_names_the_call(backend, args, needle):
    fns = revbench.define(textwrap.dedent("""
        def h(y, x):
            y += x * 2.0

        def f(y, v):
            h(y, v)
    """).lstrip("\n"), {}, filename=FILENAME, backend=backend)
    with pytest.raises(ReversibilityTypeError) as info:
        fns["f"](*args)
    msg = str(info.value)
    assert needle in msg
    assert "in reversible function h, <issue9>, line 2" in msg  # where it was found
    assert msg.splitlines()[-1] == "  called from reversible function f, <issue9>, line 5: h(y, v)"
    assert info.value.call_sites == [("f", FILENAME, 5)]


def test_a_callee_type_error_through_two_calls_names_both():
    fns = revbench.define(textwrap.dedent("""
        def h(y, x):
            y ^= x

        def g(y, x):
            h(y, x)

        def f(y, x):
            g(y, x)
    """).lstrip("\n"), {}, filename=FILENAME, backend="python")
    with pytest.raises(ReversibilityTypeError) as info:
        fns["f"](1.0, 2.0)
    lines = str(info.value).splitlines()
    assert lines[-2:] == ["  called from reversible function g, <issue9>, line 5: h(y, x)",
                          "  called from reversible function f, <issue9>, line 8: g(y, x)"]
    assert fns["f"](1, 2) == (3, 2)  # the failed compile left nothing behind


# =========================================================================== #
# An update refused while running backwards names the statement it undoes
# =========================================================================== #
@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_refused_inverse_update_names_the_written_statement(backend):
    f = revbench.define("def f(y, x):\n    y *= x\n    y += 1.0\n", {}, filename=FILENAME,
                        backend=backend)["f"]
    with pytest.raises(revbench.ReversibilityError) as info:
        (~f)(1.0, 0.0)
    first, where = str(info.value).splitlines()
    assert first == ("`/=` by `x`: the operand is zero, which cannot be undone (undoing `y *= x`): "
                     "got 0.0")
    assert where.endswith("(running its inverse), <issue9>, line 2: y *= x")
    with pytest.raises(revbench.ReversibilityError, match=r"overflows to infinity \(undoing `y \*= x`\)"):
        (~f)(1e300 + 1.0, 1e-300)
    with pytest.raises(revbench.ReversibilityError) as info:
        f(1.0, 0.0)
    assert "undoing" not in str(info.value)  # forwards, the statement is the one written

"""Every static refusal of the contract (§2, §5) raises ReversibilitySyntaxError at definition.

The offending line of each source is marked with ``# <-``; the error must carry that
line's number (line 1 is the first line of the source given to ``revbench.define``),
its text, a column, the file name, and a message naming the variable and saying what
to write instead.
"""

from __future__ import annotations

import math
import re
import textwrap
import traceback

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError, reversible

FILENAME = "<static-errors-test>"
MARK = "# <-"

CALLEE = """\
def g(a, b):
    a += b
"""


def refuse(source: str, backend: str, ns: dict | None = None) -> tuple[ReversibilitySyntaxError, str]:
    """Define ``source``; it must be refused.  Returns the error and the dedented source."""
    src = textwrap.dedent(source).lstrip("\n")
    namespace = {"np": np, "math": math}
    namespace.update(ns or {})
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define(src, namespace, filename=FILENAME, backend=backend)
    err = info.value
    assert isinstance(err, SyntaxError)
    return err, src


def mentions(message: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", message) is not None


def assert_points_at_mark(err: ReversibilitySyntaxError, src: str, *words: str) -> None:
    lines = src.splitlines()
    marked = [k for k, line in enumerate(lines, 1) if line.rstrip().endswith(MARK)]
    assert len(marked) == 1, "test source must mark exactly one line"
    line_no = marked[0]
    line = lines[line_no - 1]
    assert err.lineno == line_no, f"lineno {err.lineno}, expected {line_no}: {err.msg}"
    assert err.text is not None and err.text.rstrip("\n") == line, (err.text, line)
    assert err.filename == FILENAME
    assert isinstance(err.offset, int), err.offset
    indent = len(line) - len(line.lstrip())
    assert indent + 1 <= err.offset <= len(line), (err.offset, line)
    for w in words:
        assert mentions(err.msg, w), f"message should mention {w!r}: {err.msg}"


def expect_refusal(source: str, backend: str, *words: str,
                   ns: dict | None = None) -> ReversibilitySyntaxError:
    err, src = refuse(source, backend, ns)
    assert_points_at_mark(err, src, *words)
    return err


# --------------------------------------------------------------------------- #
# aliasing a target on its own right-hand side
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("stmt, var", [
    ("y += y", "y"),
    ("y -= 2.0 * y", "y"),
    ("y *= sin(y) + 1.0", "y"),
    ("y /= y", "y"),
])
def test_self_read_scalar(backend, stmt, var):
    err = expect_refusal(f"""
        def f(y, x):
            x += 1.0
            {stmt}  {MARK}
    """, backend, var)
    assert "ancilla" in err.msg


@pytest.mark.parametrize("stmt", ["x[i] -= x[i] * 2", "x[i] += x[i]", "x[i] *= 1.0 + x[i]"])
def test_self_read_element(backend, stmt):
    expect_refusal(f"""
        def f(x, i):
            {stmt}  {MARK}
    """, backend, "x[i]")


def test_self_read_2d_element(backend):
    expect_refusal(f"""
        def f(A, i, j):
            A[i, j] += A[i, j] ** 2  {MARK}
    """, backend, "A[i, j]")


def test_self_read_whole_array_via_element(backend):
    expect_refusal(f"""
        def f(x, i):
            x += x[i]  {MARK}
    """, backend, "x")


def test_self_read_of_ancilla(backend):
    expect_refusal(f"""
        def f(y):
            t = 1.0
            t += t  {MARK}
            del t
    """, backend, "t")


# --------------------------------------------------------------------------- #
# plain assignments
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("value", ["3", "x + 1.0", "0.0"])
def test_plain_assignment_to_argument(backend, value):
    err = expect_refusal(f"""
        def f(y, x):
            y += 1.0
            x = {value}  {MARK}
    """, backend, "x")
    assert "+=" in err.msg and "-=" in err.msg and "swap" in err.msg
    assert "reversible" in err.msg


def test_plain_assignment_to_live_ancilla(backend):
    err = expect_refusal(f"""
        def f(y, x):
            t = 0.0
            t += x
            t = 2.0  {MARK}
            del t
    """, backend, "t")
    assert "+=" in err.msg


@pytest.mark.parametrize("stmt, var", [("x[i] = 1", "x[i]"), ("A[0, 1] = 2.0", "A[0, 1]")])
def test_plain_assignment_to_element(backend, stmt, var):
    err = expect_refusal(f"""
        def f(x, A, i):
            {stmt}  {MARK}
    """, backend, var)
    assert "+=" in err.msg


def test_allocation_over_argument_array(backend):
    expect_refusal(f"""
        def f(x, y):
            y += 1.0
            x = np.zeros(3)  {MARK}
    """, backend, "x", "argument")


def test_chained_assignment(backend):
    expect_refusal(f"""
        def f(y):
            a = b = 0.0  {MARK}
    """, backend)


@pytest.mark.parametrize("stmt, var", [("a, a = a, a", "a"), ("x[i], x[i] = x[i], x[i]", "x[i]")])
def test_swap_of_a_target_with_itself(backend, stmt, var):
    expect_refusal(f"""
        def f(a, x, i):
            {stmt}  {MARK}
    """, backend, var)


def test_swap_of_loop_variable(backend):
    err = expect_refusal(f"""
        def f(a, n):
            for i in range(n):
                a, i = i, a  {MARK}
    """, backend, "i")
    assert "read-only" in err.msg


def test_tuple_assignment_that_is_not_a_swap(backend):
    expect_refusal(f"""
        def f(a, b, c):
            a, b = c, a  {MARK}
    """, backend)


# --------------------------------------------------------------------------- #
# ancillas
# --------------------------------------------------------------------------- #
def test_ancilla_never_deallocated(backend):
    err = expect_refusal(f"""
        def f(y, x):
            t = 0.0  {MARK}
            t += x
            y += t
    """, backend, "t")
    assert "del t" in err.msg


def test_array_ancilla_never_deallocated(backend):
    expect_refusal(f"""
        def f(y, x):
            y += 1.0
            w = np.zeros_like(x)  {MARK}
    """, backend, "w")


def test_ancilla_in_branch_not_deallocated_in_branch(backend):
    expect_refusal(f"""
        def f(y, x):
            if x > 0.0:
                t = x * 2.0  {MARK}
                y += t
            y += 1.0
    """, backend, "t")


def test_ancilla_in_loop_not_deallocated(backend):
    expect_refusal(f"""
        def f(y, n):
            for i in range(n):
                t = 1.0 * i  {MARK}
                y += t
    """, backend, "t")


def test_ancilla_deallocated_in_one_branch_only(backend):
    expect_refusal(f"""
        def f(y, x):
            t = 0.0  {MARK}
            if x > 0.0:
                y += t
                del t
            else:
                y -= 1.0
    """, backend, "t")


def test_ancilla_deallocated_in_one_branch_only_is_refused(backend):
    refuse("""
        def f(y, x):
            t = 0.0
            if x > 0.0:
                y += t
                del t
            else:
                y -= 1.0
    """, backend)


def test_del_argument(backend):
    err = expect_refusal(f"""
        def f(y, x):
            y += x
            del x  {MARK}
    """, backend, "x")
    assert "ancilla" in err.msg


def test_del_unknown(backend):
    expect_refusal(f"""
        def f(y, x):
            y += x
            del t  {MARK}
    """, backend, "t")


def test_del_twice(backend):
    expect_refusal(f"""
        def f(y, x):
            t = 0.0
            del t
            del t  {MARK}
    """, backend, "t")


def test_ancilla_used_after_del(backend):
    expect_refusal(f"""
        def f(y, x):
            t = 0.0
            del t
            y += t  {MARK}
    """, backend, "t")


@pytest.mark.parametrize("alloc", ["np.empty(3)", "np.ones(3)"])
def test_uninitialised_or_unsupported_array_allocation(backend, alloc):
    expect_refusal(f"""
        def f(y):
            t = {alloc}  {MARK}
            del t
    """, backend, "np.zeros")


# --------------------------------------------------------------------------- #
# for-loop variables
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("stmt", ["i += 1", "i -= 1", "i *= 2", "i ^= 1"])
def test_update_loop_variable(backend, stmt):
    err = expect_refusal(f"""
        def f(y, n):
            for i in range(n):
                y += 1.0
                {stmt}  {MARK}
    """, backend, "i")
    assert "read-only" in err.msg


def test_assign_loop_variable(backend):
    expect_refusal(f"""
        def f(y, n):
            for i in range(n):
                i = 3  {MARK}
    """, backend, "i")


def test_pass_loop_variable_to_call(backend):
    expect_refusal(CALLEE + f"""
def f(y, n):
    for i in range(n):
        g(i, y)  {MARK}
""", backend, "i")


# --------------------------------------------------------------------------- #
# routines
# --------------------------------------------------------------------------- #
def test_uncompute_without_routine(backend):
    err = expect_refusal(f"""
        def f(y, x):
            y += x
            ~routine  {MARK}
    """, backend)
    assert "with routine" in err.msg


def test_routine_never_undone(backend):
    err = expect_refusal(f"""
        def f(y, x):
            t = 0.0
            with routine:  {MARK}
                t += x
            y += t
            del t
    """, backend)
    assert "~routine" in err.msg


def test_named_routine_never_undone(backend):
    err = expect_refusal(f"""
        def f(y, x):
            t = 0.0
            with routine as r:  {MARK}
                t += x
            y += t
            del t
    """, backend, "r")
    assert "~r" in err.msg


def test_wrong_routine_order(backend):
    err = expect_refusal(f"""
        def f(y, x):
            t = 0.0
            u = 0.0
            with routine as a:
                t += x
            with routine as b:
                u += t
            y += u
            ~a  {MARK}
            ~b
            del u
            del t
    """, backend, "a", "b")
    assert "last" in err.msg


def test_routine_undone_in_another_block(backend):
    refuse("""
        def f(y, x):
            t = 0.0
            with routine:
                t += x
            if x > 0.0:
                y += t
                ~routine
            del t
    """, backend)


# --------------------------------------------------------------------------- #
# calls
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("call, var", [("g(a, a)", "a"), ("g(x, x[i])", "x"), ("g(x[i], x)", "x"),
                                       ("g(x[i], x[i])", "x[i]"), ("~g(a, a)", "a")])
def test_same_variable_twice_in_call(backend, call, var):
    expect_refusal(CALLEE + f"""
def f(a, x, i):
    {call}  {MARK}
""", backend, var)


def test_call_with_expression_for_a_parameter_the_callee_changes(backend):
    expect_refusal(CALLEE + f"""
def f(a, b):
    g(a + 1.0, b)  {MARK}
""", backend, "`g` may change its parameter `a`", "not a value")


def test_call_with_expression_for_a_parameter_the_callee_reads(backend):
    f = revbench.define(CALLEE + "def f(a, b):\n    g(a, b + 1.0)\n", backend=backend)["f"]
    assert f(1.0, 2.0) == (4.0, 2.0)


def test_pure_function_as_statement(backend):
    expect_refusal(f"""
        def f(y, x):
            np.sin(x)  {MARK}
    """, backend)


def test_reversible_function_in_expression(backend):
    expect_refusal(CALLEE + f"""
def f(a, b):
    a += g(a, b)  {MARK}
""", backend, "g")


# --------------------------------------------------------------------------- #
# unsupported statements
# --------------------------------------------------------------------------- #
UNSUPPORTED = {
    "return": ("y += x", "return  " + MARK),
    "return-value": ("y += x", "return y  " + MARK),
    "break": ("for i in range(3):", "    break  " + MARK),
    "continue": ("for i in range(3):", "    continue  " + MARK),
    "try": ("try:  " + MARK, "    y += x", "except Exception:", "    pass"),
    "import": ("import math  " + MARK, "y += x"),
    "from-import": ("from math import sin  " + MARK, "y += x"),
    "floordiv-update": ("y //= x  " + MARK,),
    "mod-update": ("y %= x  " + MARK,),
    "pow-update": ("y **= x  " + MARK,),
    "or-update": ("y |= x  " + MARK,),
    "shift-update": ("y <<= x  " + MARK,),
    "global": ("global z  " + MARK, "y += x"),
    "raise": ("raise ValueError()  " + MARK,),
    "nested-def": ("def h(a):  " + MARK, "    a += 1"),
    "while-else": ("while (y < x, y > 0):", "    y += 1", "else:  " + MARK, "    y += 2"),
    "lambda-expr": ("y += (lambda: 1)()  " + MARK,),
    "list-expr": ("y += [1, 2][0]  " + MARK,),
    "expression-statement": ("y + x  " + MARK,),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_statement(backend, name):
    body = "\n".join("    " + line for line in UNSUPPORTED[name])
    err, src = refuse(f"def f(y, x):\n{body}\n", backend)
    lines = src.splitlines()
    marked = next(k for k, line in enumerate(lines, 1) if line.rstrip().endswith(MARK))
    if name == "while-else":
        # the error may point at the `while` or at its `else`
        assert err.lineno in (marked - 2, marked)
    else:
        assert_points_at_mark(err, src)
    assert err.msg


@pytest.mark.parametrize("op", ["//=", "%="])
def test_unsupported_update_message_names_operator(backend, op):
    err = expect_refusal(f"""
        def f(y, x):
            y {op} x  {MARK}
    """, backend)
    assert op in err.msg
    assert "+=" in err.msg  # says what is reversible instead


# --------------------------------------------------------------------------- #
# loops
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("header", ["while k < n:", "while (k < n):", "while (k < n, k > 0, k > 1):"])
def test_while_without_postcondition(backend, header):
    err = expect_refusal(f"""
        def f(k, n):
            {header}  {MARK}
                k += 1
    """, backend)
    assert "postcondition" in err.msg


@pytest.mark.parametrize("it", ["x", "enumerate(x)", "range(n, step=2)", "reversed(range(n))",
                                "range(1, 2, 3, 4)", "range(n, 0, 0)"])
def test_for_over_something_else_than_range(backend, it):
    err = expect_refusal(f"""
        def f(y, x, n):
            for i in {it}:  {MARK}
                y += 1.0
    """, backend)
    assert "range" in err.msg


def test_for_loop_variable_must_be_a_name(backend):
    expect_refusal(f"""
        def f(y, x):
            for i, j in range(3):  {MARK}
                y += 1.0
    """, backend)


def test_for_loop_variable_shadowing_argument(backend):
    expect_refusal(f"""
        def f(y, i):
            for i in range(3):  {MARK}
                y += 1.0
    """, backend, "i")


# --------------------------------------------------------------------------- #
# names and globals
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("expr, name", [("q", "q"), ("x * undefined_q", "undefined_q"),
                                        ("sin(q2)", "q2"), ("notafunction(x)", "notafunction")])
def test_unknown_name(backend, expr, name):
    expect_refusal(f"""
        def f(y, x):
            y += {expr}  {MARK}
    """, backend, name)


def test_unknown_target(backend):
    expect_refusal(f"""
        def f(y, x):
            z += x  {MARK}
    """, backend, "z")


def test_unknown_reversible_function(make):
    """A callee may be defined after its caller (as in a module), so an unknown callee is
    refused at definition time or, at the latest, at the first call, naming it."""
    try:
        f = make("""
            def f(y, x):
                undefined_rev_fn(y, x)
        """)
    except ReversibilitySyntaxError as err:
        assert mentions(err.msg, "undefined_rev_fn")
        return
    with pytest.raises(ReversibilityError) as info:
        f(1.0, 2.0)
    assert "undefined_rev_fn" in str(info.value)


def test_callee_defined_after_caller(backend):
    fns = revbench.define(textwrap.dedent("""
        def f(a, b):
            later(a, b)

        def later(a, b):
            a += 2.0 * b
    """), {}, backend=backend)
    assert fns["f"](1.0, 2.0) == (5.0, 2.0)


@pytest.mark.parametrize("value", ["hello", [1.0, 2.0], np.zeros(3), None, {"a": 1}],
                         ids=["str", "list", "array", "none", "dict"])
def test_non_numeric_global(backend, value):
    expect_refusal(f"""
        def f(y, x):
            y += x * CONST  {MARK}
    """, backend, "CONST", ns={"CONST": value})


@pytest.mark.parametrize("name", ["_rb_t", "_RB_MODULE"])
def test_reserved_name(backend, name):
    expect_refusal(f"""
        def f(y, x):
            {name} = 0.0  {MARK}
            del {name}
    """, backend)


@pytest.mark.parametrize("where", ["alloc", "annotated", "param", "loop"])
def test_builtin_names_are_reserved(backend, where):
    """A variable named like a built-in the generated code calls would hide it in the whole
    generated function (found by the mutation fuzzer: ``max: float = 0.0`` after a use of
    ``max(x, k)`` ran into an UnboundLocalError)."""
    body = {"alloc": f"y += max(x, 1.0)\n            max = 0.0  {MARK}\n            del max",
            "annotated": f"y += max(x, 1.0)\n            max: float = 0.0  {MARK}\n            del max",
            "param": "y += x",
            "loop": f"for len in range(3):  {MARK}\n                y += x"}[where]
    head = f"def f(y, max):  {MARK}" if where == "param" else "def f(y, x):"
    expect_refusal(f"""
        {head}
            {body}
    """, backend, "rename it")


def test_signature_with_defaults(backend):
    expect_refusal(f"""
        def f(y, x=1.0):  {MARK}
            y += x
    """, backend)


def test_slices_with_a_negative_step_refused(backend):
    expect_refusal(f"""
        def f(y, x):
            y += np.sum(x[::-2])  {MARK}
    """, backend)


def test_slices_with_a_variable_step_refused(backend):
    expect_refusal(f"""
        def f(y, x, k):
            y += np.sum(x[::k])  {MARK}
    """, backend)


def test_unsupported_with(backend):
    expect_refusal(f"""
        def f(y, x):
            with open("f"):  {MARK}
                y += x
    """, backend)


# --------------------------------------------------------------------------- #
# lines are counted in the user's source; the error prints like a SyntaxError
# --------------------------------------------------------------------------- #
def test_lineno_counts_leading_lines_of_source(backend):
    src = "\n\n# a comment\n" + f"def f(y):\n    y += y  {MARK}\n"
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define(src, {}, filename=FILENAME, backend=backend)
    assert_points_at_mark(info.value, src, "y")
    assert info.value.lineno == 5


def test_lineno_of_second_function(backend):
    err = expect_refusal(CALLEE + f"""
def ok(a):
    a += 1.0

def bad(a, b):
    a += 1.0
    g(b, b)  {MARK}
""", backend, "b")
    assert "bad" in err.msg


def test_indented_source_with_first_line(backend):
    """``first_line`` shifts every reported line (a cell that starts later in a file)."""
    src = f"def f(y):\n    y -= y  {MARK}\n"
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define(src, {}, filename=FILENAME, backend=backend, first_line=10)
    assert info.value.lineno == 11
    assert info.value.text.rstrip("\n") == src.splitlines()[1]


def test_error_prints_line_with_caret(backend):
    err, _ = refuse(f"""
        def f(y, x):
            y += y  {MARK}
    """, backend)
    shown = "".join(traceback.format_exception_only(type(err), err))
    assert f"y += y  {MARK}" in shown
    assert "^" in shown
    assert FILENAME in shown and "line 2" in shown


def test_python_level_syntax_error_is_reversibility_syntax_error(backend):
    with pytest.raises(ReversibilitySyntaxError) as info:
        revbench.define("def f(y, x):\n    y += (x\n", {}, filename=FILENAME, backend=backend)
    assert isinstance(info.value, SyntaxError)
    assert info.value.filename == FILENAME


def test_decorator_reports_file_lines(backend):
    def bad(y, x):
        x += 1.0
        y += y * x

    first = bad.__code__.co_firstlineno
    with pytest.raises(ReversibilitySyntaxError) as info:
        reversible(backend=backend)(bad)
    err = info.value
    assert err.filename == __file__
    assert err.lineno == first + 2
    assert err.text.strip() == "y += y * x"
    assert mentions(err.msg, "y")


def test_decorator_reports_missing_del_at_allocation(backend):
    def bad(y, x):
        t = 0.0
        t += x
        y += t

    first = bad.__code__.co_firstlineno
    with pytest.raises(ReversibilitySyntaxError) as info:
        reversible(backend=backend)(bad)
    assert info.value.lineno == first + 1
    assert info.value.text.strip() == "t = 0.0"
    assert info.value.filename == __file__


def test_decorator_reports_plain_assignment(backend):
    def bad(y, x):
        y = 3  # noqa: F841

    with pytest.raises(ReversibilitySyntaxError) as info:
        reversible(backend=backend)(bad)
    assert info.value.lineno == bad.__code__.co_firstlineno + 1
    assert "+=" in info.value.msg


# --------------------------------------------------------------------------- #
# ^= on a float: a type error, at definition or at the first call
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("args", [(1.0, 2.0), (1.0, 2), (1, 2.5), (np.zeros(2), np.ones(2))],
                         ids=["float-float", "float-int", "int-float", "float-arrays"])
def test_xor_on_float_is_type_error(make, args):
    try:
        f = make("""
            def f(y, x):
                y ^= x
        """)
    except ReversibilitySyntaxError:
        return  # refused statically: also fine
    with pytest.raises((TypeError, ReversibilityError)) as info:
        f(*args)
    assert "^=" in str(info.value)


def test_xor_on_float_type_error_class(make):
    f = make("""
        def f(y, x):
            y ^= x
    """)
    with pytest.raises(revbench.ReversibilityTypeError) as info:
        f(1.0, 2.0)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ReversibilityError)


def test_a_call_in_an_expression_counts_the_arguments_the_user_wrote(backend):
    """Inside an expression a reversible call's first parameter is the result, which
    revbench provides: the count is of the others (it used to count that one too)."""
    err = expect_refusal(f"""
        def add_sq(y, x):
            y += x * x

        def f(out, a, b):
            out += 2.0 * add_sq(a, b)  {MARK}
    """, backend, "add_sq", "y")
    assert "in an expression takes 1 argument (x;" in err.msg and "passes 2" in err.msg


def test_indexing_a_gradient_taken_inside_says_what_to_do_instead(backend):
    def pot(v, q):
        for i in range(len(q)):
            v += q[i] ** 4

    err = expect_refusal(f"""
        def first_force(y, x):
            y -= revbench.grad(pot, loss="v", wrt="q")(0.0, x)[0]  {MARK}
    """, backend, ns={"revbench": revbench, "pot": reversible(backend=backend)(pot)})
    assert "cannot be indexed" in err.msg and "ancilla array" in err.msg

"""What a user porting a real program meets (issue 26, items 2 to 4; issue 27, item 4): the
messages that misled, each naming the line, the variable and the fix, and the loop
variable passed straight to a call.

Each message test asserts what the text must say *and* what it must no longer say (the
misleading suggestion it replaced).
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilitySyntaxError, ReversibilityTypeError


def refused(make, source: str, error=ReversibilitySyntaxError, **ns):
    with pytest.raises(error) as info:
        make(source, namespace={"revbench": revbench, **ns})
    return info.value


# --------------------------------------------------------------------------- #
# functions that exist but are not supported: no look-alike suggestion
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("call, lookalike", [
    ("np.sinc(x)", "np.sin"), ("np.tril(x)", "np.tan"), ("math.erf(x)", "math.exp"),
    ("np.cbrt(x)", "np.sqrt"),
])
def test_an_existing_unsupported_function_is_not_answered_with_a_lookalike(make, call, lookalike):
    err = refused(make, f"""
        def f(y, x):
            y += {call}
    """)
    text = str(err)
    assert f"`{call.split('(')[0]}` is not a revbench function" in text
    assert "does not support (yet)" in text and "revbench.register" in text
    assert f"Did you mean `{lookalike}`" not in text
    assert err.lineno == 3


def test_a_typo_is_still_answered_with_the_function_meant(make):
    err = refused(make, """
        def f(y, x):
            y += np.sinn(x)
    """)
    assert "Did you mean `np.sin`?" in str(err)


def test_a_suggestion_must_take_as_many_arguments(make):
    err = refused(make, """
        def f(y, x):
            y += np.sinn(x, x)
    """)
    assert "Did you mean" not in str(err)


def test_axis_keyword_of_python_sum_names_np_sum(make):
    err = refused(make, """
        def f(y, A):
            y += sum(A, axis=1)
    """)
    text = str(err)
    assert "`axis=` is not an argument of `sum`" in text
    assert "np.sum(A, axis=k)" in text and "positional arguments only" not in text
    assert err.lineno == 3


def test_axis_must_be_a_constant(make):
    err = refused(make, """
        def f(y, A, k):
            y += np.sum(A, axis=k)
    """)
    assert "`axis=` of `np.sum` must be a constant integer (one axis), got `k`" in str(err)
    assert err.lineno == 3


def test_other_keywords_are_named_too(make):
    err = refused(make, """
        def f(y, x):
            y += np.sin(x, out=x)
    """)
    assert "`out=`" in str(err)


# --------------------------------------------------------------------------- #
# derivatives inside reversible code
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("body", [
    'y += revbench.grad(h, loss="out")(0.0, x)[1]',
    'y += revbench.grad(h, loss="out")(0.0, x)[1][0]',
    "y += revbench.grad(x)",
    "y += grad(x)",
])
def test_a_derivative_inside_reversible_code_says_so(make, body):
    err = refused(make, f"""
        def f(y, x):
            {body}
    """, grad=revbench.grad)
    text = str(err)
    assert "only local arrays can be indexed" not in text
    assert err.lineno == 3
    if "][" in body or ")[" in body:  # indexing a gradient: what to write instead
        assert "the result of a derivative taken inside reversible code cannot be indexed" in text
        assert "compute the gradient into an ancilla array first" in text
        return
    assert "the derivatives taken inside reversible code are a gradient, spelt" in text
    assert "g += revbench.grad(f, loss=..., wrt=...)(...)" in text
    assert "pass the result in as an argument" in text


# --------------------------------------------------------------------------- #
# indexing what is not an array of the function (issue 27, item 4)
# --------------------------------------------------------------------------- #
def test_a_misspelt_array_is_not_defined(make):
    err = refused(make, """
        def f(y, a, x):
            for i in range(len(y)):
                y[i] += a * xx[i]
    """)
    text = str(err)
    assert "`xx` is not defined here" in text and "Did you mean `x`?" in text
    assert "only local arrays can be indexed" not in text
    assert err.lineno == 4


def test_a_module_array_must_be_passed_in(make):
    err = refused(make, """
        def f(y):
            y += TABLE[0]
    """, TABLE=np.arange(3.0))
    assert "`TABLE` is an array of the module" in str(err)
    assert "Pass `TABLE` in as an argument" in str(err)


def test_the_result_of_a_call_cannot_be_indexed(make):
    err = refused(make, """
        def f(y, x):
            y += g(x)[0]
    """, g=np.cumsum)
    assert "the result of a call cannot be indexed" in str(err)


# --------------------------------------------------------------------------- #
# recursion, refused where it is written (issue 26, item 2)
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("call", ["det(out, m)", "out += 2.0 * det(m)"])
def test_recursion_is_refused_at_definition_with_one_message(make, call):
    err = refused(make, f"""
        def det(out, m):
            if m > 0:
                {call}
    """)
    text = str(err)
    assert "`det` calls itself: recursion is not supported" in text
    assert "write the recursion as a loop" in text
    assert "must be a variable" not in text and "not deallocated" not in text
    assert err.lineno == 4


# --------------------------------------------------------------------------- #
# wrt= naming an argument without a gradient
# --------------------------------------------------------------------------- #
def test_wrt_naming_an_int_argument_is_an_error(make):
    f = make("""
        def f(out, x, k):
            out += x * k
    """)
    for wrt in ("k", ("x", "k")):
        with pytest.raises(ReversibilityTypeError) as info:
            revbench.grad(f, loss="out", wrt=wrt)(0.0, 2.0, 3)
        assert "`k` is named in wrt=" in str(info.value)
        assert "only float and complex arguments have a gradient" in str(info.value)
    assert revbench.grad(f, loss="out", wrt="x")(0.0, 2.0, 3)[1] == 3.0


# --------------------------------------------------------------------------- #
# a loop variable passed straight to a call (issue 26, item 3)
# --------------------------------------------------------------------------- #
def test_a_loop_variable_can_be_passed_to_a_call_that_reads_it(make):
    fns = make("""
        def bump(x, k, w):
            x[k] += w * k

        def f(x, w):
            for i in range(len(x)):
                bump(x, i, w)
    """, all=True)
    f = fns["f"]
    x = np.zeros(4)
    out, _ = f(x.copy(), 0.5)
    np.testing.assert_array_equal(out, [0.0, 0.5, 1.0, 1.5])
    back, _ = (~f)(out.copy(), 0.5)
    np.testing.assert_array_equal(back, x)
    fl = make("""
        def bump(x, k, w):
            x[k] += w * k

        def loss(out, x, w):
            for i in range(len(x)):
                bump(x, i, w)
            for i in range(len(x)):
                out += x[i] * x[i]
    """)
    _, grads = revbench.value_and_grad(fl, loss="out")(0.0, np.ones(4), 0.5)
    # out = sum (1 + w i)^2: d/dw = sum 2 i (1 + w i), d/dx_i = 2 (1 + w i)
    i = np.arange(4)
    assert grads[2] == pytest.approx(np.sum(2 * i * (1 + 0.5 * i)))
    np.testing.assert_allclose(grads[1], 2 * (1 + 0.5 * i))


def test_a_loop_variable_passed_to_a_call_that_changes_it_is_refused_at_its_line(make, backend):
    # the callee defined first: refused at definition, at the argument
    with pytest.raises(ReversibilitySyntaxError) as info:
        make("""
            def shift(a, k):
                k += 1
                a += k

            def f(a, n):
                for i in range(n):
                    shift(a, i)
        """)
    text = str(info.value)
    assert "`i` is a for-loop variable, which is read-only" in text
    assert "`shift` may change its parameter `k`" in text and "copy `i` into an ancilla" in text
    assert info.value.lineno == 8
    # the callee defined later (another cell): refused at the first call, at the call
    ns: dict = {}
    f = revbench.define("def f(a, n):\n    for i in range(n):\n        shift(a, i)\n", ns,
                        backend=backend)["f"]
    revbench.define("def shift(a, k):\n    k += 1\n    a += k\n", ns, backend=backend)
    with pytest.raises(ReversibilityTypeError) as info:
        f(0, 3)
    assert "`shift` may change its parameter `k`" in str(info.value)
    assert info.value.lineno == 3


# --------------------------------------------------------------------------- #
# a dirty ancilla: the statement that broke the uncompute (issue 26 item 4, 27 item 2)
# --------------------------------------------------------------------------- #
EULER = """
def euler(y, h, n):
    for t in range(n):
        k1 = np.zeros_like(y)
        for i in range(len(y)):
            k1[i] += -y[i] * y[i]
        for i in range(len(y)):
            y[i] += h * k1[i]
        for i in range(len(y)):
            k1[i] -= -y[i] * y[i]
        del k1
"""


def test_an_in_place_step_names_the_update_between_compute_and_uncompute(make):
    f = make(EULER)
    y = np.array([1.0, 2.0])
    with pytest.raises(revbench.ReversibilityError) as info:
        f(y, 0.1, 3)
    text = str(info.value)
    assert "ancilla `k1[0]` is not back" in text
    assert "`y` changes at line 8 (`y[i] += h * k1[i]`)" in text
    assert "computed from it (line 6)" in text and "uncomputed (line 10)" in text
    assert "checkpointed(" in text
    np.testing.assert_array_equal(y, [1.0, 2.0])


def test_lesson_fours_kinetic_names_the_velocity_update(make):
    from revbench.course.lesson04 import KINETIC_ARGS, KINETIC_SOURCE

    f = make(KINETIC_SOURCE)
    with pytest.raises(revbench.ReversibilityError) as info:
        f(*KINETIC_ARGS)
    assert "`v` changes at line 6 (`v[i] -= dt * x[i]`)" in str(info.value)


def test_no_culprit_is_invented_when_the_uncompute_is_missing(make):
    f = make("""
        def f(y, x):
            t = 0.0
            t += x * x
            y += t
            del t
    """)
    with pytest.raises(revbench.ReversibilityError) as info:
        f(0.0, 2.0)
    assert "changes at line" not in str(info.value)


# --------------------------------------------------------------------------- #
# a value passed to a parameter the callee only reads (`axpy(y, 2.0 * h, x)`)
# --------------------------------------------------------------------------- #
VALUE_CALLS = """
    def axpy(y, a, x):
        y += a * x

    def bump(y, a):
        a += 1.0
        y += a

    def f(y, x, h):
        axpy(y, 2.0 * h, x)
        axpy(y, 3, x)
        ~axpy(y, h + 1.0, x)
"""


def test_a_value_is_passed_through_an_ancilla(make):
    f = make(VALUE_CALLS)
    x = np.array([1.0, -2.0, 0.5])
    y = f(np.zeros(3), x, 0.5)[0]
    np.testing.assert_allclose(y, (2.0 * 0.5 + 3 - 1.5) * x, rtol=1e-15)
    np.testing.assert_allclose((~f)(y.copy(), x, 0.5)[0], 0.0, atol=1e-15)
    g = revbench.grad(f, loss=("y", 0))(np.zeros(3), x, 0.5)
    assert g[2] == pytest.approx((2.0 - 1.0) * x[0])  # d y0 / dh through both values


def test_a_value_for_a_parameter_the_callee_changes_is_refused_at_definition(make):
    err = refused(make, VALUE_CALLS + """
    def g(y, h):
        bump(y, 2.0 * h)
    """)
    assert "`bump` may change its parameter `a`" in str(err) and "not a value" in str(err)
    assert err.lineno == 15


def test_it_is_refused_at_the_first_call_when_the_callee_comes_later(backend):
    ns: dict = {"np": np}
    g = revbench.define("def g(y, h):\n    later(y, 2.0 * h)\n", ns, backend=backend)["g"]
    ns.update(revbench.define("def later(y, a):\n    a += 1.0\n    y += a\n", ns,
                              backend=backend))
    with pytest.raises(ReversibilityTypeError) as info:
        g(0.0, 1.0)
    assert "`later` may change its parameter `a`" in str(info.value)
    assert info.value.lineno == 2 and "_rb_arg" not in str(info.value)


def test_an_array_expression_is_not_a_value(make):
    f = make(VALUE_CALLS + """
    def g(y, x):
        axpy(y, 2.0, x + 1.0)
    """)
    with pytest.raises(ReversibilityTypeError) as info:
        f(np.zeros(2), np.ones(2))
    text = str(info.value)
    assert "the array expression `x + 1.0` cannot be passed to a call as a value" in text
    assert "_rb_arg" not in text and info.value.lineno == 15


def test_a_value_inside_an_expression_call_is_named(make):
    err = refused(make, """
    def total(s, x, w):
        s += w * np.sum(x)

    def f(y, x):
        y += 2.0 * total(x, 3.0)
    """)
    assert "argument `3.0` of a reversible call inside an expression must be a variable" in str(err)


def test_a_reversible_function_called_in_an_expression_before_its_definition(make):
    """A call inside an expression is resolved when the caller is defined (a call as a
    statement, at its first call): the message says so, at the calling line."""
    err = refused(make, """
        def outer(l, x):
            l += 2.0 * later(x)
    """)
    assert "defined before the function that calls it" in str(err) and err.lineno == 3
    fns = make("""
        def later(out, x):
            out += x[0] * x[0]

        def outer(l, x):
            l += 2.0 * later(x)
    """, all=True)
    assert fns["outer"](0.0, np.array([3.0]))[0] == 18.0

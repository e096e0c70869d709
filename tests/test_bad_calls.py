"""Bad calls get clear errors and change nothing (issue 21, item 7)."""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilityTypeError

SOURCE = "def f(y, x):\n    for i in range(len(x)):\n        y[i] += x[i] * x[i]\n"


@pytest.fixture
def f(backend):
    return revbench.define(SOURCE, {}, backend=backend)["f"]


def plain(y, x):
    return y + x


@pytest.mark.parametrize("api", [
    lambda g: revbench.grad(g, loss="y"),
    lambda g: revbench.value_and_grad(g, loss="y"),
    lambda g: revbench.check_grad(g, 0.0, 1.0, loss="y"),
    lambda g: revbench.jacobian(g, outputs="y", wrt="x"),
    lambda g: revbench.vjp(g, outputs="y"),
])
def test_ad_of_a_plain_function_says_so(api):
    with pytest.raises(TypeError, match=r"needs a reversible function .* got the plain function plain"):
        api(plain)


def test_jacobian_names_the_bad_output_as_an_output(f):
    with pytest.raises(ValueError, match="outputs 'z' is not an argument"):
        revbench.jacobian(f, outputs="z", wrt="x")
    with pytest.raises(ValueError, match="wrt 'w' is not an argument"):
        revbench.jacobian(f, outputs="y", wrt="w")


def test_keyword_arguments_are_refused_as_positional_only(f):
    y = np.zeros(2)
    with pytest.raises(TypeError, match=r"f\(\) takes its arguments by position \(y, x\); got "
                                        r"keyword argument\(s\) x"):
        f(y, x=np.ones(2))
    with pytest.raises(TypeError, match=r"grad\(f\)\(\) takes its arguments by position"):
        revbench.grad(f, loss=("y", 0))(y, x=np.ones(2))
    assert not y.any()


def test_a_big_endian_array_is_refused_even_after_a_native_call(f):
    assert f(np.zeros(2), np.ones(2))[0].tolist() == [1.0, 1.0]
    for _ in range(2):
        with pytest.raises(ReversibilityTypeError, match="array of >f8"):
            f(np.zeros(2), np.ones(2, dtype=">f8"))


def test_a_long_double_scalar_is_refused_not_rounded(backend):
    """A long double does not fit a float64 without losing digits: refused by name on both
    backends (Numba failed inside its type inference), while float32 scalars widen exactly."""
    g = revbench.define("def g(y, x):\n    y += x\n", {}, backend=backend)["g"]
    for value, start in ((np.longdouble(1.5), 0.0), (np.clongdouble(1.5), 0j)):
        with pytest.raises(ReversibilityTypeError, match=r"argument `x` of g: expected .* got "
                                                         r"c?longdouble"):
            g(start, value)
        with pytest.raises(ReversibilityTypeError, match="argument `x`"):
            revbench.grad(g, loss="y")(start, value)
    assert g(0.0, np.float32(1.5)) == (1.5, 1.5)


def test_a_masked_array_is_refused(f):
    x = np.ma.masked_array(np.ones(2), mask=[False, True])
    with pytest.raises(ReversibilityTypeError, match="masked array, whose mask"):
        f(np.zeros(2), x)


def test_a_read_only_array_that_is_only_read_is_fine(f):
    x = np.arange(3.0)
    x.flags.writeable = False
    assert f(np.zeros(3), x)[0].tolist() == [0.0, 1.0, 4.0]
    assert revbench.grad(f, loss=("y", 2))(np.zeros(3), x)[1].tolist() == [0.0, 0.0, 4.0]
    y = np.zeros(3)
    y.flags.writeable = False
    with pytest.raises(ReversibilityTypeError, match="read-only array, and f updates `y` in place"):
        f(y, np.ones(3))


def test_recursion_inside_a_function_is_named_as_recursion(backend):
    def outer():
        @revbench.reversible(backend=backend)
        def rec(y, n):
            if n > 0:
                rec(y, n)
        return rec

    # refused where it is written (issue 26), not at the first call
    with pytest.raises(revbench.ReversibilitySyntaxError,
                       match="`rec` calls itself: recursion is not supported"):
        outer()


def test_the_read_only_check_is_per_function(backend):
    """The signature cache is shared by all functions: a read-only array accepted where it
    is only read must still be refused where it is written."""
    fns = revbench.define("def reads(y, x):\n    y += x[0]\ndef writes(y, x):\n    x[0] += y\n",
                          {}, backend=backend)
    x = np.ones(2)
    x.flags.writeable = False
    assert fns["reads"](0.0, x)[0] == 1.0
    with pytest.raises(ReversibilityTypeError, match="read-only array, and writes updates `x`"):
        fns["writes"](1.0, x)


def test_numba_functions_can_be_registered_and_wrapped(backend):
    """An ``@njit`` function is a natural thing to hand over: as a registered pure function
    and as an external one (its Python source is what revbench reads and compiles)."""
    import numba

    @numba.njit
    def rb_test_cube(x):
        return x * x * x

    @numba.njit
    def rb_test_square(x):
        return x * x

    from revbench.rules import functions as fn_rules

    saved = dict(fn_rules.USER_FUNCTIONS)
    try:
        revbench.register(rb_test_cube, [lambda x: 3 * x * x])
        f = revbench.define("def f(y, x):\n    y += rb_test_cube(x)\n", {}, backend=backend)["f"]
        assert f(0.0, 2.0)[0] == 8.0
        assert revbench.grad(f, loss="y")(0.0, 2.0)[1] == 12.0
    finally:
        fn_rules.USER_FUNCTIONS.clear()
        fn_rules.USER_FUNCTIONS.update(saved)
    h = revbench.external(rb_test_square, backend=backend)
    assert h(1.0, 3.0)[0] == 10.0


@pytest.mark.parametrize("wrt", [1.0, True, {"x": 1}, None.__class__])
def test_wrt_that_is_not_a_name_or_position_is_refused_by_name(f, wrt):
    """(A float used to fail inside the sweep with "'float' object is not iterable", and a
    dict was taken for its keys.)"""
    args = (np.zeros(2), np.ones(2))
    for api in (lambda: revbench.grad(f, ("y", 0), wrt=wrt)(*args),
                lambda: revbench.jacobian(f, outputs="y", wrt=wrt)(*args),
                lambda: revbench.vjp(f, *args, outputs="y", wrt=wrt)):
        with pytest.raises(TypeError, match="wrt must be an argument name or position, got"):
            api()


def test_derivatives_run_on_copies_so_read_only_arrays_are_fine(f):
    """docs/ad.md: the derivatives work on copies, so a read-only array (``np.broadcast_to``,
    ``np.asarray`` of a JAX array) the function updates is accepted there -- as
    ``check_inverse`` and ``device="cuda"`` accept it -- while a plain call still refuses it."""
    y = np.broadcast_to(0.0, (3,))
    x = np.array([1.0, 2.0, 3.0])
    x.flags.writeable = False
    J = revbench.jacobian(f, outputs="y", wrt="x")(y, x)
    np.testing.assert_array_equal(J, np.diag(2 * x))
    assert revbench.grad(f, ("y", 1))(y, x)[1].tolist() == [0.0, 4.0, 0.0]
    outs, pullback = revbench.vjp(f, y, x, outputs="y", wrt="x")
    assert outs[0].tolist() == [1.0, 4.0, 9.0]
    assert pullback(np.ones(3))[0].tolist() == [2.0, 4.0, 6.0]
    ys = revbench.jvp(f, y, x, tangents={"x": np.ones(3)}, outputs="y")
    assert ys[1][0].tolist() == [2.0, 4.0, 6.0]
    Y = np.broadcast_to(0.0, (2, 3))
    G = revbench.grad(f, ("y", 0), batch=("y", "x"))(Y, np.ones((2, 3)))
    assert G[1].tolist() == [[2.0, 0.0, 0.0]] * 2
    assert not y.flags.writeable and (y == 0).all()
    with pytest.raises(ReversibilityTypeError, match="read-only array, and f updates `y` in place"):
        f(y, x)


def test_second_order_and_loss_index_messages_say_what_is_missing(backend):
    f = revbench.define("def e(out, x, n):\n    for i in range(n):\n        out += x[i] ** 4\n",
                        backend=backend)["e"]
    with pytest.raises(TypeError, match=r"and then v, the vector \(the shape of `x`\): 4 in all, "
                                        r"got 3 -- is v missing\?"):
        revbench.hvp(f, "out", "x")(0.0, np.ones(3), 3)
    g = revbench.define("def g(y, A):\n    y += A[0, 1] * A[1, 0]\n", backend=backend)["g"]
    with pytest.raises(IndexError, match=r"has 1 part\(s\), but `A` has 2 axes .* "
                                         r"loss=\('A', \(0, 0\)\)"):
        revbench.grad(g, ("A", 1))(0.0, np.ones((2, 2)))


def test_calls_and_names_that_are_not_reversible_get_the_users_words(backend):
    """``np.sort(y)`` as a statement is not a typo of ``np.sqrt``; ``t = A`` wants a copy;
    an overflowing tangent is named ``tangent(q)``, not by a generated variable; a size
    assert that names its line gets no note that compiled code does not know it."""
    f = revbench.define("def f(y):\n    np.sort(y)\n", {"np": np}, backend=backend)["f"]
    with pytest.raises(ReversibilityTypeError) as info:
        f(np.ones(3))
    msg = str(info.value)
    assert "`np.sort` is a NumPy function" in msg and "sqrt" not in msg, msg
    g = revbench.define("def g(y, A):\n    t = A\n    y += t[0]\n    del t\n",
                        backend=backend)["g"]
    with pytest.raises(ReversibilityTypeError, match=r"allocate a copy with `t = A.copy\(\)`"):
        g(0.0, np.ones(3))
    h = revbench.define("import math\ndef h(q, p, k, n):\n    for t in range(n):\n"
                        "        p += k * math.sin(q)\n        q += p\n", backend=backend)["h"]
    with pytest.raises(revbench.ReversibilityError) as info:
        revbench.jvp(h, 0.3, 0.2, 5.0, 2000, tangents={"q": 1.0}, outputs="q")
    assert "tangent(q)" in str(info.value) and "_rb_" not in str(info.value)
    m = revbench.define("def m(h, W, x):\n    h += W @ x\n", backend=backend)["m"]
    with pytest.raises(AssertionError) as info:
        m(np.zeros(2), np.ones((2, 3)), np.ones(2))
    assert "(in m, line 2)" in str(info.value)
    assert not any("does not know its lines" in n for n in getattr(info.value, "__notes__", []))

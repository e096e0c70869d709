"""``revbench.trace``: steps recorded by really running the program forward, then backward.

The compiled code is the reference: a trace's forward result must be what ``f(*args)``
returns, its backward phase must bring the arguments back, its gradients must be what
``revbench.grad`` computes, and a failing runtime check must stop it with the very
message the compiled code raises.  No mocks: every test traces real reversible functions.
"""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import revbench
from revbench import ReversibilityError, ReversibilityTypeError
from revbench.backends.trace_data import ELEM, NEWARR, VAR, WHOLE
from revbench.debugging.tracing import StepLimitError, Trace, show_value


def define(source: str, backend: str = "python", **options) -> revbench.ReversibleFunction:
    """The last function of ``source`` (the Python backend: no compile time in these tests)."""
    ns = {"np": np, "math": math}
    fns = revbench.define(textwrap.dedent(source), ns, backend=backend, **options)
    return list(fns.values())[-1]


def copies(args: tuple) -> tuple:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def assert_same(got, want, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        elif isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        elif isinstance(w, (bool, int)) and not isinstance(w, float):
            assert g == w and type(g) is type(w), (g, w)
        else:
            assert g == pytest.approx(w, rel=rtol, abs=atol), (g, w)


def traced(f, *args, loss=None, **kw) -> Trace:
    """Trace f on args and check it against the compiled code."""
    original = copies(args)
    tr = revbench.trace(f, *args, loss=loss, **kw)
    assert tr.error is None, tr.error
    assert_same(args, original)  # the caller's values are never touched
    assert_same(tr.outputs, f(*copies(args)))
    assert_same(tr.inputs, original, rtol=1e-9, atol=1e-9)
    # the reconstructed states agree with the recorded results
    at_turn = tr.values_at(tr.turn)
    assert_same(tuple(at_turn[p] for p in f.params), tr.outputs)
    start = tr.values_at(0)
    assert_same(tuple(start[p] for p in f.params), original)
    end = tr.values_at(len(tr) - 1)
    assert_same(tuple(end[p] for p in f.params), tr.inputs)
    if loss is not None:
        assert_same(tr.gradients, revbench.grad(f, loss=loss)(*copies(args)), rtol=1e-9, atol=1e-12)
    return tr


POLY = """
    def poly(y, x):
        t = 0.0
        t += x * x
        y += 3.0 * t + x
        t -= x * x
        del t
"""


# --------------------------------------------------------------------------- the steps


def test_poly_forward_then_inverse_step_by_step():
    f = define(POLY)
    tr = traced(f, 0.0, 2.0)
    kinds = [s.kind for s in tr]
    assert kinds == ["start", "alloc", "update", "update", "update", "del",
                     "turn", "alloc", "update", "update", "update", "del"]
    assert tr.turn == 6
    assert [s.direction for s in tr] == ["forward"] * 6 + ["backward"] * 6
    # the source lines of define()'s text: the def is line 2; the turning point stands where
    # the backward run starts, the last line (not on the def)
    assert [s.lineno for s in tr] == [2, 3, 4, 5, 6, 7, 7, 7, 6, 5, 4, 3]
    assert tr[3].source == "    y += 3.0 * t + x"
    # the backward phase really runs the inverse statements
    assert tr[3].action == "y += (3.0 * t) + x"
    assert tr[9].action == "y -= (3.0 * t) + x"
    assert tr[9].function == "~poly" and tr[3].function == "poly"
    assert tr[3].changes == {"y": ("0.0", "14.0")}
    assert tr[9].changes == {"y": ("14.0", "0.0")}
    assert tr[1].changes == {"t": ("—", "0.0")}
    assert tr[5].changes == {"t": ("0.0", "—")}
    assert tr[3].stack == (("poly", 5),)
    assert tr.source[0] == (2, "def poly(y, x):")
    assert tr.outputs == (14.0, 2.0) and tr.inputs == (0.0, 2.0)
    assert "6 forward + 6 backward" in repr(tr)


def test_the_turning_point_is_where_the_backward_run_starts():
    f = define(POLY)
    for loss in (None, "y"):
        tr = traced(f, 0.0, 2.0, loss=loss)
        turn, first = tr[tr.turn], tr[tr.turn + 1]
        assert turn.kind == "turn" and turn.direction == first.direction == "backward"
        assert turn.lineno == first.lineno == 7 and first.source.strip() == "del t"
        assert "runs from line 7" in turn.action and turn.stack[-1][1] == 7
    assert "∂y seeded to 1" in tr[tr.turn].action
    # tracing the inverse: the backward run is poly itself, from its first statement
    tr = traced(~f, 14.0, 2.0)
    assert tr[tr.turn].lineno == tr[tr.turn + 1].lineno == 3
    # the backward run starts in a loop, or by entering a call: its line in f
    g = define("""
        def add_square(y, x):
            y += x * x

        def g(y, x):
            y += x
            add_square(y, x)
    """)
    tr = traced(g, 0.0, 3.0, loss="y")
    assert tr[tr.turn + 1].kind == "enter" and tr[tr.turn].lineno == 7
    tr = traced(define(LOOP), 0.0, np.ones(2))
    assert tr[tr.turn + 1].kind == "for" and tr[tr.turn].lineno == tr[tr.turn + 1].lineno
    # stopped by the step cap right after the turn: the last line, where an inverse begins
    tr = revbench.trace(f, 0.0, 2.0, max_steps=7)
    assert tr.turn == 6 and len(tr) == 7 and tr[6].lineno == 7


def test_steps_say_what_they_executed_from_the_ir():
    f = define(POLY)
    tr = traced(f, 0.0, 2.0)
    by_line = {s.lineno: s.executed for s in tr[tr.turn + 1:]}
    # each backward step ran the inverse of its line
    assert by_line == {7: ("t = 0.0",), 6: ("t += x * x",), 5: ("y -= (3.0 * t) + x",),
                       4: ("t -= x * x",), 3: ("del t",)}
    assert [s.executed for s in tr[1:tr.turn]] == [("t = 0.0",), ("t += x * x",),
                                                  ("y += (3.0 * t) + x",), ("t -= x * x",), ("del t",)]
    assert tr[0].executed == tr[tr.turn].executed == ()
    # the reverse sweep: the inverse statement, then the adjoint updates it implies
    tr = traced(f, 0.0, 2.0, loss="y")
    step = next(s for s in tr[tr.turn:] if s.lineno == 5)
    assert step.executed == ("y -= (3.0 * t) + x", "∂t += ∂y * 3.0", "∂x += ∂y")
    # structure inverted, not text rewritten: the loop runs reversed, the if swaps its
    # conditions, a product becomes a division, and a call runs its inverse
    g = define("""
        def double(y):
            y *= 2.0

        def g(s, x):
            for i in range(len(x)):
                if (x[i] > 0.0, x[i] > 1.0):
                    x[i] += 1.0
            s *= 2.0
            ~double(s)
    """)
    tr = traced(g, 1.0, np.array([1.0, -1.0]))
    assert tr[2].executed == ("if (x[i] > 0.0, x[i] > 1.0)",)
    back = {s.kind: s.executed for s in tr[tr.turn + 1:] if s.kind in ("for", "if", "return")}
    assert back["for"] == ("for i in reversed(range(len(x)))",)
    assert back["if"] == ("if (x[i] > 1.0, x[i] > 0.0)",)
    assert [s.executed for s in tr[tr.turn + 1:] if s.lineno == 8] == [("x[i] -= 1.0",)]
    assert back["return"] == ("double(s)",)  # ~(~double) is double
    assert [s.executed for s in tr[tr.turn + 1:] if s.lineno == 9] == [("s /= 2.0",)]
    inner = [s for s in tr if s.function == "~double" and s.kind == "update"]
    assert inner[0].executed == ("y /= 2.0",) and inner[0].direction == "forward"


def test_loss_label_and_calls():
    f = define(POLY)
    assert revbench.trace(f, 0.0, 2.0).loss_label is None
    assert revbench.trace(f, 0.0, 2.0, loss="y").loss_label == "y"
    assert revbench.trace(f, 0.0, 2.0, loss=0).loss_label == "y"
    assert not revbench.trace(f, 0.0, 2.0).has_calls
    g = define("""
        def mul_into(y, a, b):
            y += a * b

        def g(y, x):
            for i in range(len(x) - 1):
                mul_into(y[i], x[i], x[i + 1])
    """)
    tr = revbench.trace(g, np.zeros(3), np.array([1.0, 2.0, 3.0]), loss=("y", 1))
    assert tr.loss_label == "y[1]" and tr.has_calls
    h = define("""
        def h(A, x):
            A[0, 1] += x * x
    """)
    assert revbench.trace(h, np.zeros((2, 2)), 3.0, loss=("A", (0, 1))).loss_label == "A[0, 1]"


def test_state_shows_variables_and_ancilla_states():
    tr = traced(define(POLY), 0.0, 2.0)
    s = tr.state_at(1)  # t = 0.0
    assert [v.name for v in s.variables] == ["y", "x", "t"]
    assert s.var("t").role == "ancilla" and s.var("t").changed and not s.var("y").changed
    assert s.ancilla("t").state == "clean"
    assert tr.state_at(2).ancilla("t").state == "allocated"  # t += x * x: in use
    assert tr.state_at(4).ancilla("t").state == "clean"  # uncomputed, ready to free
    assert tr.state_at(5).ancilla("t") .state == "freed"
    assert [v.name for v in tr.state_at(5).variables] == ["y", "x"]
    assert tr[3].ancillas == {"t": "allocated"}
    # no adjoint column without a loss
    assert all(v.adjoint is None for v in s.variables)


def test_gradient_mode_carries_real_adjoints():
    f = define(POLY)
    tr = traced(f, 0.0, 2.0, loss="y")
    assert tr.gradient_mode
    assert tr.gradients == pytest.approx((1.0, 13.0))
    turn = tr[tr.turn]
    assert turn.kind == "turn" and turn.adjoint_changes == {"y": ("—", "1.0"), "x": ("—", "0.0")}
    assert turn.function == "poly (reverse sweep)"
    # the forward phase has no adjoints yet; the column is there, empty
    assert tr[2].adjoints == {"y": "", "x": "", "t": ""}
    # the reverse sweep: y -= 3t + x with the adjoint updates it implies, as one step
    step = next(s for s in tr[tr.turn:] if s.lineno == 5)
    assert step.action.startswith("y -= (3.0 * t) + x")
    assert step.changes == {"y": ("14.0", "0.0")}
    assert step.adjoint_changes == {"t": ("0.0", "3.0"), "x": ("0.0", "1.0")}
    assert tr[-1].adjoints == {"y": "1.0", "x": "13.0"}


CORPUS = {
    "arrays_loop_call_routine": ("""
        def sq(y, x):
            y += x * x

        def f(y, x, v):
            t = 0.0
            t += x * x
            y += 3.0 * t + x
            sq(y, v[1])
            with routine:
                s = v.copy()
                s *= 2.0
            y += s[2]
            ~routine
            if x > 0.0:
                y += 1.0
            for i in range(len(v)):
                y += v[i] * sin(v[i])
            t -= x * x
            del t
    """, (0.0, 2.0, np.arange(3.0)), "y"),
    "while_and_if_with_post": ("""
        def f(x, n, wrapped):
            while (x > 1.0, n > 0):
                x /= 2.0
                n += 1
            if (x >= 0.5, wrapped):
                x -= 0.5
                wrapped ^= True
    """, (10.0, 0, False), "x"),
    "swaps_and_whole_arrays": ("""
        def f(u, v, a, b):
            u, v = v, u
            a, b = b, a
            u[0], v[1] = v[1], u[0]
            u += 2.0 * v
            v *= 3.0
            a += u[0] * b
    """, (np.array([1.0, 2.0]), np.array([3.0, 4.0]), 0.5, 1.5), "a"),
    "whole_array_with_math_functions": ("""
        def f(y, x):
            y += atan2(x, 2.0) + max(x, 0.5) + np.hypot(x, 1.0)
    """, (np.zeros(4), np.linspace(-1.0, 1.0, 4)), ("y", 2)),
    "inverted_block_and_inverse_call": ("""
        def add_square(y, x):
            y += x * x

        def f(y, x, A):
            with inverted:
                y *= 2.0
                y += 1.0
            ~add_square(y, x)
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    add_square(A[i, j], x)
    """, (7.0, 1.5, np.ones((2, 2))), ("A", (1, 0))),
    "integers_bools_complex": ("""
        def f(n, k, flag, z, w):
            n *= 3
            n /= 3
            k += n * 2
            flag ^= k > 4
            z *= w
            z += conj(w)
    """, (6, 1, False, 1.0 + 2.0j, 0.5 - 1.0j), None),
    "two_d_ancilla_and_nested_loops": ("""
        def f(total, A):
            seen = np.zeros((A.shape[0], A.shape[1]))
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    seen[i, j] += A[i, j] * A[i, j]
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    total += seen[i, j]
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    seen[i, j] -= A[i, j] * A[i, j]
            del seen
    """, (0.0, np.arange(6.0).reshape(2, 3)), "total"),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_trace_agrees_with_the_compiled_code(name):
    source, args, loss = CORPUS[name]
    f = define(source)
    traced(f, *args)
    if loss is not None:
        traced(f, *args, loss=loss)


def test_agrees_with_the_numba_backend_too():
    source, args, loss = CORPUS["arrays_loop_call_routine"]
    f = define(source, backend="numba")
    traced(f, *args, loss=loss)


def test_tracing_the_inverse_runs_it_first():
    f = define(POLY)
    tr = traced(~f, 14.0, 2.0)
    assert tr.outputs == (0.0, 2.0)
    assert tr[0].function == "~poly" and tr[tr.turn].function == "poly"
    assert tr[tr.turn + 3].action == "y += (3.0 * t) + x"
    tr = traced(~f, 14.0, 2.0, loss="y")
    assert tr.gradients == pytest.approx((1.0, -13.0))


def test_moving_back_and_forth_rebuilds_the_same_states():
    source, args, _ = CORPUS["arrays_loop_call_routine"]
    tr = traced(define(source), *args, loss="y")
    forward = [tr.values_at(k) for k in range(len(tr))]
    rng = np.random.default_rng(0)
    for k in rng.permutation(len(tr)):
        got = tr.values_at(int(k))
        assert got.keys() == forward[k].keys()
        for name, v in got.items():
            np.testing.assert_array_equal(v, forward[k][name])


# --------------------------------------------------------------------------- calls


def test_steps_enter_called_functions():
    f = define("""
        def add_square(y, x):
            y += x * x

        def squares_into(y, x):
            for i in range(len(x)):
                add_square(y[i], x[i])
    """)
    tr = traced(f, np.zeros(2), np.array([2.0, 3.0]))
    enter = [s for s in tr if s.kind == "enter"]
    assert len(enter) == 4  # two forward calls, two inverse calls
    inner = tr[enter[1].index + 1]
    assert inner.function == "add_square" and inner.lineno == 3
    assert inner.stack == (("squares_into", 7), ("add_square", 3))
    assert inner.source.strip() == "y += x * x"
    assert inner.changes == {"y": ("0.0", "9.0")}
    assert [v.name for v in inner.state.variables] == ["y", "x"]  # the callee's own variables
    ret = tr[inner.index + 1]
    assert ret.kind == "return" and ret.function == "squares_into"
    assert ret.changes == {"y[1]": ("0.0", "9.0")}  # the element argument, written back
    assert ret.state.var("y").changed
    backward_inner = tr[enter[2].index + 1]
    assert backward_inner.function == "~add_square" and backward_inner.action == "y -= x * x"
    assert backward_inner.direction == "backward"


def test_gradient_through_calls_with_element_adjoints():
    f = define("""
        def mul_into(y, a, b):
            y += a * b

        def f(y, x):
            for i in range(len(x) - 1):
                mul_into(y[i], x[i], x[i + 1])
    """)
    tr = traced(f, np.zeros(3), np.array([1.0, 2.0, 3.0]), loss=("y", 1))
    inner = [s for s in tr[tr.turn:] if s.function == "mul_into (reverse sweep)" and s.kind == "update"]
    assert len(inner) == 2
    assert inner[0].adjoint_changes == {"a": ("0.0", "3.0"), "b": ("0.0", "2.0")}


# --------------------------------------------------------------------------- sub-arrays


VIEWS = """
    def axpy(y, a, x):
        y += a * x

    def swap_rows(u, v):
        u, v = v, u

    def halves(y, c, x):
        axpy(y[0:2], c, x[1:3])
        y[2:4] *= 2.0

    def f(A, c, x):
        for i in range(A.shape[0]):
            axpy(A[i], c, x)
        swap_rows(A[0], A[1])
        halves(A[2], c, x)
        A[1] += x * c
        A[0, 1:3] *= 2.0 + c
        A[:, 0] -= x[0:3] * c
        c += np.sum(A[1:3, 2]) + np.dot(x[:2], x[-2:])
"""
VIEW_ARGS = (np.arange(12.0).reshape(3, 4), 0.5, np.array([1.0, 2.0, 3.0, 4.0]))


@pytest.mark.parametrize("loss", [None, "c", ("A", (1, 2)), ("A", (2, 1))])
def test_sub_arrays_are_traced_as_compiled(loss):
    # rows and slices passed to calls (a view of a view in halves), swapped there, updated
    # whole, summed: the trace's results are the compiled code's, its gradients grad's
    for backend in ("python", "numba"):
        traced(define(VIEWS, backend), *VIEW_ARGS, loss=loss)


def test_sub_array_steps_show_what_they_changed():
    tr = traced(define(VIEWS), *VIEW_ARGS)
    A, c, x = copies(VIEW_ARGS)
    first = next(s for s in tr if s.function == "axpy" and s.kind == "update")
    assert first.changes == {"y": ("[0.0, 1.0, 2.0, 3.0]", "[0.5, 2.0, 3.5, 5.0]")}
    ret = tr[first.index + 1]
    assert ret.kind == "return" and ret.function == "f" and ret.state.var("A").value.startswith(
        "[[0.5, 2.0, 3.5, 5.0], [4.0")
    np.testing.assert_array_equal(tr.values_at(ret.index)["A"][0], A[0] + c * x)
    # the callee's own variable is the row itself: the caller's array changes with it
    swap = next(s for s in tr if s.kind == "swap")
    assert swap.function == "swap_rows" and swap.changes == {"u": ("", "⇄ v"), "v": ("", "⇄ u")}
    nested = [s for s in tr[:tr.turn] if s.function == "axpy" and s.kind == "update"][-1]
    assert nested.stack == (("f", 16), ("halves", 9), ("axpy", 3))
    assert nested.changes == {"y": ("[8.5, 10.0]", "[9.5, 11.5]")}
    # whole-array updates of sub-arrays name the part they changed, as written
    by_line = {s.lineno: s.changes for s in tr[:tr.turn] if s.function == "f" and s.kind == "update"}
    assert list(by_line[17]) == ["A[1]"] and list(by_line[18]) == ["A[0, 1:3]"]
    assert list(by_line[19]) == ["A[:, 0]"] and list(by_line[20]) == ["c"]
    assert by_line[18]["A[0, 1:3]"] == ("[6.0, 7.5]", "[15.0, 18.75]")
    step = next(s for s in tr if s.lineno == 18)
    assert step.state.var("A").change == "A[0, 1:3]: [6.0, 7.5] → [15.0, 18.75]"


def test_stepping_back_through_sub_arrays_rebuilds_earlier_states():
    tr = traced(define(VIEWS), *VIEW_ARGS, loss="c")
    A, c, x = copies(VIEW_ARGS)
    # what the forward run's statements of f make of A, computed with NumPy
    A += c * x
    states = [A.copy()]
    A[[0, 1]] = A[[1, 0]]
    states.append(A.copy())
    A[2, 0:2] += c * x[1:3]
    A[2, 2:4] *= 2.0
    states.append(A.copy())
    A[1] += x * c
    states.append(A.copy())
    A[0, 1:3] *= 2.0 + c
    states.append(A.copy())
    A[:, 0] -= x[0:3] * c
    states.append(A.copy())
    ends = [s.index for s in tr[:tr.turn] if s.function == "f" and s.lineno in (14, 15, 16, 17, 18, 19)
            and s.kind in ("return", "update")]
    ends = [ends[2], *ends[3:]]  # the loop's last call, then one step per statement
    assert len(ends) == len(states)
    tr.values_at(len(tr) - 1)  # from the end of the reverse sweep, step backwards
    for k, want in reversed(list(zip(ends, states))):
        np.testing.assert_array_equal(tr.values_at(k)["A"], want)
    for k, want in zip(ends, states):  # and forwards again
        np.testing.assert_array_equal(tr.values_at(k)["A"], want)
    forward = [tr.values_at(k) for k in range(len(tr))]
    for k in np.random.default_rng(1).permutation(len(tr)):
        got = tr.values_at(int(k))
        assert got.keys() == forward[k].keys()
        for name, v in got.items():
            np.testing.assert_array_equal(v, forward[k][name])


AXPY = """
    def axpy(y, a, x):
        y += a * x
"""
#: failing checks of sub-arrays (test_failed_checks_are_recorded_with_the_compiled_message)
SUB_ARRAY_FAILURES = [
    (AXPY + """
    def f(A, c, i, j):
        axpy(A[i], c, A[j])
    """, (np.ones((3, 2)), 2.0, 1, 1)),
    (AXPY + """
    def f(x, c):
        axpy(x[0:2], c, x[1:3])
    """, (np.ones(4), 2.0)),
    ("""
    def f(s, x, a, b):
        s += np.sum(x[a:b])
    """, (0.0, np.arange(5.0), 1, 9)),
    ("""
    def f(z, x):
        z += x[1:3]
    """, (np.zeros(3), np.arange(5.0))),
    ("""
    def f(A, i, j):
        A[i] += 2.0 * A[j]
    """, (np.ones((3, 2)), 2, 2)),
    ("""
    def f(x, w):
        x[0:2] *= w
    """, (np.ones(3), np.array([1.0, 0.0]))),
]


# --------------------------------------------------------------------------- runtime checks


def compiled_error(f, *args) -> ReversibilityError:
    with pytest.raises(ReversibilityError) as info:
        f(*copies(args))
    return info.value


DIRTY = """
    def f(y, x):
        t = 0.0
        t += x
        y += t
        del t
"""


def test_dirty_ancilla_stops_the_trace_with_the_compiled_message():
    f = define(DIRTY)
    tr = revbench.trace(f, 1.0, 2.0)
    assert isinstance(tr.error, ReversibilityError)
    assert str(tr.error) == str(compiled_error(f, 1.0, 2.0))
    assert tr.error.variable == "t" and tr.error.lineno == 6
    last = tr[-1]
    assert tr.error_step == len(tr) - 1 and last.error is tr.error
    assert last.kind == "del" and last.lineno == 6
    assert last.ancillas == {"t": "dirty"}
    assert tr.state_at(len(tr) - 1).ancilla("t").value == "2.0"
    assert tr.turn is None and tr.outputs is None
    assert "stopped" in repr(tr)


def test_dirty_array_ancilla_names_the_element():
    f = define("""
        def f(y, x):
            s = x.copy()
            s[1] += 1.0
            y += s
            del s
    """)
    tr = revbench.trace(f, np.zeros(3), np.ones(3))
    assert str(tr.error) == str(compiled_error(f, np.zeros(3), np.ones(3)))
    assert "s[1]" in str(tr.error)
    assert tr[-1].ancillas == {"s": "dirty"}


def test_unchecked_dirty_ancilla_is_shown_but_does_not_stop():
    f = define(DIRTY, check=False)
    tr = revbench.trace(f, 1.0, 2.0)
    assert tr.error is None
    assert tr.outputs == f(1.0, 2.0)
    assert tr[tr.turn - 1].ancillas == {"t": "dirty"}


@pytest.mark.parametrize("source, args", [
    ("""
        def f(x, a):
            x *= a
    """, (2.0, 0.0)),
    ("""
        def f(x):
            if x > 1.0:
                x -= 1.0
    """, (1.5,)),
    ("""
        def f(x, n):
            while (x > 1.0, n > 0):
                x /= 2.0
                n += 1
    """, (10.0, 3)),
    ("""
        def f(x, i, j):
            x[i] += x[j]
    """, (np.ones(3), 1, 1)),
    ("""
        def f(n, d):
            n /= d
    """, (7, 2)),
    ("""
        def f(y, x, n):
            for i in range(n):
                n += 1
                y += x
    """, (0.0, 1.0, 2)),
    *SUB_ARRAY_FAILURES,
])
def test_failed_checks_are_recorded_with_the_compiled_message(source, args):
    f = define(source)
    tr = revbench.trace(f, *args)
    assert isinstance(tr.error, ReversibilityError), tr.error
    assert str(tr.error) == str(compiled_error(f, *args))
    assert tr[-1].error is tr.error and tr[-1].lineno == tr.error.lineno


def test_failure_in_the_backward_phase_is_recorded_there():
    # rounding: (x + 3.3) - 3.3 is 0.2999999999999998 for this x, so going back the
    # `if` finds its condition false although the branch ran: the inverse's check fails
    f = define("""
        def f(x, flag):
            if (x > 0.3, flag):
                flag ^= True
            x += 3.3
    """)
    x = 0.30000000000000004
    tr = revbench.trace(f, x, False)
    assert isinstance(tr.error, ReversibilityError)
    assert str(tr.error) == str(compiled_error(~f, *f(x, False)))
    assert "running its inverse" in str(tr.error)
    assert tr.turn is not None and tr.outputs == f(x, False)
    last = tr[-1]
    assert last.direction == "backward" and last.kind == "if" and last.lineno == 3
    assert last.error is tr.error


def test_program_exceptions_are_recorded_on_the_users_line():
    f = define("""
        def f(y, x, i):
            y += x[i]
    """)
    tr = revbench.trace(f, 0.0, np.ones(3), 5)
    assert isinstance(tr.error, IndexError)
    assert "line 3" in "".join(tr.error.__notes__) and "y += x[i]" in "".join(tr.error.__notes__)
    assert tr[-1].kind == "error" and tr[-1].lineno == 3


def test_failed_assert_is_recorded():
    f = define("""
        def f(x):
            assert x > 0.0, "x must be positive"
            x += 1.0
    """)
    tr = revbench.trace(f, -1.0)
    assert isinstance(tr.error, AssertionError)
    assert "x must be positive" in str(tr.error)
    assert tr[-1].kind == "assert"


# --------------------------------------------------------------------------- size


LOOP = """
    def f(s, x):
        for i in range(len(x)):
            s += x[i] * x[i]
"""


def test_step_cap_stops_with_a_message_saying_how_to_raise_it():
    f = define(LOOP)
    tr = revbench.trace(f, 0.0, np.ones(100), max_steps=50)
    assert len(tr) == 50
    assert isinstance(tr.error, StepLimitError)
    assert "max_steps=50" in str(tr.error) and "larger max_steps" in str(tr.error)
    assert tr.turn is None
    tr.state_at(49)  # what was recorded is usable
    with pytest.raises(ValueError, match="max_steps"):
        revbench.trace(f, 0.0, np.ones(3), max_steps=0)


def test_big_arrays_are_shown_compactly_and_never_copied_per_step():
    f = define("""
        def f(x):
            for i in range(len(x)):
                x[i] *= 2.0
    """)
    x = np.arange(10_000.0)
    tr = revbench.trace(f, x)
    assert tr.error is None and len(tr) == 40_002
    step = tr[2 * 5000 + 2]
    assert step.changes == {"x[5000]": ("5000.0", "10000.0")}
    v = step.state.var("x")
    assert v.value == "float64[10000] [0.0, 2.0, 4.0, …, 9997.0, 9998.0, 9999.0]"
    assert v.change == "x[5000]: 5000.0 → 10000.0"
    # deltas: one snapshot of x at the start; every other step holds scalars only
    arrays = sum(isinstance(item, np.ndarray) for st in tr._steps for d in st.deltas for item in d)
    assert arrays == 1
    assert all(d.kind in (VAR, ELEM, NEWARR) for st in tr._steps for d in st.deltas)


def test_whole_array_statement_is_one_step():
    f = define("""
        def f(y, x):
            y += 2.0 * x
    """)
    tr = traced(f, np.zeros(20), np.arange(20.0))
    assert len(tr) == 4
    assert [d.kind for d in tr._steps[1].deltas] == [WHOLE]
    assert tr[1].changes["y"][1].startswith("float64[20] [0.0, 2.0, 4.0, …")


def test_show_value():
    assert show_value(2.0) == "2.0" and show_value(1e-17) == "1e-17"
    assert show_value(np.float64(1 / 3)) == "0.333333"
    assert show_value(3) == "3" and show_value(np.True_) == "True"
    assert show_value(1 - 2j) == "(1.0-2.0j)"
    assert show_value(np.eye(2)) == "[[1.0, 0.0], [0.0, 1.0]]"
    assert show_value(np.zeros((100, 3), dtype=np.int64)).startswith("int64[100×3] [0, 0, 0, …")  # noqa: RUF001


@pytest.mark.slow
def test_a_hundred_thousand_steps_record_in_seconds():
    f = define("""
        def f(s, x):
            for i in range(len(x)):
                t = 0.0
                t += x[i] * x[i]
                s += sin(t)
                t -= x[i] * x[i]
                del t
    """)
    x = np.linspace(0.0, 1.0, 8_400)
    gc.collect()
    t0 = time.perf_counter()
    tr = revbench.trace(f, 0.0, x, loss="s", max_steps=200_000)
    recorded = time.perf_counter() - t0
    t0 = time.perf_counter()
    tr.state_at(len(tr) - 1)
    tr.state_at(0)
    replayed = time.perf_counter() - t0
    print(f"\n{len(tr)} steps (gradient mode) recorded in {recorded:.2f} s; "
          f"replayed end to end and back in {replayed:.2f} s")
    assert len(tr) > 100_000 and tr.error is None
    np.testing.assert_allclose(tr.gradients[1], revbench.grad(f, loss="s")(0.0, x)[1])


# --------------------------------------------------------------------------- the interface


def test_users_mistakes_raise_before_anything_runs():
    f = define(POLY)
    with pytest.raises(ReversibilityTypeError, match="argument `y`"):
        revbench.trace(f, [1.0], 2.0)
    with pytest.raises(ReversibilityTypeError, match="`y` is int"):
        revbench.trace(f, 0, 2.0)
    with pytest.raises(ValueError, match="not an argument"):
        revbench.trace(f, 0.0, 2.0, loss="z")
    with pytest.raises(TypeError, match="reversible function"):
        revbench.trace(lambda y: y, 1.0)
    with pytest.raises(TypeError, match="takes 2 argument"):
        revbench.trace(f, 1.0)


def test_print_is_recorded_not_printed(capsys):
    f = define("""
        def f(x):
            print("x is", x)
            x += 1.0
    """)
    tr = revbench.trace(f, 1.0)
    assert capsys.readouterr().out == ""  # (the compiled function prints)
    assert tr.outputs == (2.0,) and tr.inputs == (1.0,)
    # the inverse undoes x += 1.0 first, then prints
    assert [(s.direction, s.action) for s in tr if s.kind == "print"] == [
        ("forward", "print: x is 1.0"), ("backward", "print: x is 1.0")]


def test_loop_variables_come_and_go():
    tr = traced(define(LOOP), 0.0, np.ones(2))
    assert [s.action for s in tr if s.kind == "for"][:2] == ["for i in range(len(x)): i = 0",
                                                             "for i in range(len(x)): i = 1"]
    assert tr.state_at(1).var("i").role == "loop"
    assert [v.name for v in tr.state_at(tr.turn).variables] == ["s", "x"]


def test_functions_from_source_text_show_their_lines():
    source = "def cellfn(y, x):\n    y += x\n"
    f = revbench.define(source, filename="<ipython-input-7-abc>", first_line=3)["cellfn"]
    tr = traced(f, 0.0, 1.0)
    assert tr.source == [(3, "def cellfn(y, x):"), (4, "    y += x")]
    assert tr[1].filename == "<ipython-input-7-abc>" and tr[1].source == "    y += x"


def test_import_revbench_stays_light():
    code = ("import sys, revbench; revbench.trace; "
            "print(sorted(m for m in ('IPython', 'ipywidgets', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_recursion_is_refused_as_when_compiling():
    fns = revbench.define(textwrap.dedent("""
        def f(y, x):
            g(y, x)

        def g(y, x):
            y += x
            f(y, x)
    """), backend="python")
    with pytest.raises(ReversibilityTypeError, match="calls itself") as info:
        revbench.trace(fns["f"], 0.0, 1.0)
    with pytest.raises(ReversibilityTypeError) as compiled:
        fns["f"](0.0, 1.0)
    # the same message (compiled code adds the calls that led there)
    assert str(compiled.value).startswith(str(info.value))


def test_registered_functions_and_their_partials():
    def tr_softplus(x):
        return math.log1p(math.exp(x))

    def tr_softplus_d(x):
        return 1.0 / (1.0 + math.exp(-x))

    revbench.register(tr_softplus, partials=(tr_softplus_d,))
    f = define("""
        def f(y, x):
            y += tr_softplus(x) * x
    """)
    tr = traced(f, 0.0, 0.7, loss="y")
    assert tr.gradients[1] == pytest.approx(tr_softplus(0.7) + tr_softplus_d(0.7) * 0.7)

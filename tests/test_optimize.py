"""The optimising transforms of a reverse sweep: ``prune``, zero adjoints, ``hoist``.

Each must leave results unchanged; the tests also read the generated source to
see that the work is really gone (a transform that silently did nothing would
pass the equality tests).
"""

from __future__ import annotations

import math

import numpy as np
import program_gen
import pytest
from generated_text import plain
from hypothesis import given, settings
from test_property import build, show, stable
from test_property_grad import SETTINGS

import revbench
from revbench import grad, reversible
from revbench.transforms.pipeline import Direction

SOURCE = """
def f(y, x):
    with routine:
        t = 0.0
        t += x * x
        u = 0.0
        u += sin(t)
    y += u * x
    ~routine
"""


def _sweep_lines(f, *args) -> list[str]:
    return [ln.strip() for ln in plain(f.source("adjoint", *args)).splitlines()]


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_unchecked_sweep_drops_dead_uncomputation_and_zero_adjoints(backend):
    checked = revbench.define(SOURCE, backend=backend)["f"]
    unchecked = revbench.define(SOURCE, backend=backend, check=False)["f"]
    lines_on, lines_off = _sweep_lines(checked, 0.0, 0.7), _sweep_lines(unchecked, 0.0, 0.7)
    # the uncomputation of t and u only serves the `del` checks
    assert {"t -= (x * x)", "u -= _rb_np.sin(t)"} <= set(lines_on), lines_on
    assert not any(ln.startswith(("t -=", "u -=")) for ln in lines_off), lines_off
    # grad reads only the unchecked sweep's adjoints: the loss is not restored either
    assert "y -= (u * x)" in lines_on and not any(ln.startswith("y -=") for ln in lines_off)
    # the replay of the routine adds nothing into the (zero) adjoints of t and u
    for lines, end in ((lines_on, "y -= (u * x)"), (lines_off, "_rb_adj_u += (_rb_adj_y * x)")):
        replay = lines[:lines.index(end)]
        assert not [ln for ln in replay if ln.startswith("_rb_adj") and "=" in ln
                    and not ln.endswith("= 0.0")], replay
    x = 0.7
    want = (1.0, math.sin(x * x) + 2 * x * x * math.cos(x * x))
    for f in (checked, unchecked):
        np.testing.assert_allclose(grad(f, loss="y")(0.0, x), want, rtol=1e-14)
        assert (~f)(*f(0.25, x)) == pytest.approx((0.25, x))


@reversible(check=False)
def gather(s, data, indices, x):
    for k in range(len(data)):
        s += data[k] * x[indices[k]]


def test_repeated_element_loads_are_hoisted_and_results_unchanged():
    rng = np.random.default_rng(0)
    data, x = rng.normal(size=40), rng.normal(size=9)
    indices = rng.integers(-9, 9, size=40)  # negative indices count from the end
    src = gather.source("adjoint", 0.0, data, indices, x)
    assert "_rb_h" in src and src.count("indices[k]") == 1, src
    s, gx = 0.0, np.zeros(9)
    np.add.at(gx, indices, data)
    want_s = float(data @ x[indices])
    assert gather(0.0, data, indices, x)[0] == pytest.approx(want_s)
    g = grad(gather, loss="s")(s, data, indices, x)
    np.testing.assert_allclose(g[1], x[indices])
    np.testing.assert_allclose(g[3], gx)


def test_a_load_under_a_condition_is_not_hoisted_out_of_it():
    # x[i + 5] is out of range for most i: it must only be read where the branch runs
    src = """
def f(s, x):
    for i in range(len(x)):
        if (i < 2, i < 2):
            s += x[i + 5] * x[i + 5]
"""
    f = revbench.define(src, backend="python")["f"]
    x = np.arange(7.0)
    assert f(0.0, x)[0] == 5.0 ** 2 + 6.0 ** 2
    np.testing.assert_allclose(grad(f, loss="s")(0.0, x)[1], [0, 0, 0, 0, 0, 10, 12])


@settings(max_examples=40, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_programs_same_gradient_with_and_without_checks(p):
    show(p)
    on, off = build(p, "python"), build(p, "python", check=False)
    g_on = stable("grad (checked)", lambda: grad(on, loss="a0")(*p.fresh_args()))
    g_off = stable("grad (check=False)", lambda: grad(off, loss="a0")(*p.fresh_args()))
    for a, b in zip(g_on, g_off):
        if a is None:
            assert b is None
        else:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


ROUTINE = """
def f(y, x):
    with routine:
        t = np.zeros(len(x))
        for i in range(len(x)):
            t[i] += x[i] * x[i]
    for i in range(len(x)):
        y += math.sin(t[i])
    ~routine
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_unchecked_forward_and_inverse_drop_an_uncompute_only_the_del_reads(backend):
    ns = {"np": np, "math": math}
    checked = revbench.define(ROUTINE, ns, backend=backend)["f"]
    unchecked = revbench.define(ROUTINE, ns, backend=backend, check=False)["f"]
    x = np.array([0.3, 0.7, 1.1])
    for kind in ("forward", "inverse"):
        on = plain(checked.source(kind, 0.0, x))
        off = plain(unchecked.source(kind, 0.0, x))
        assert on.count("t[i] -= ") == 1 or on.count("t[i] += ") == 2, on
        assert "t[i] -= " not in off if kind == "forward" else off.count("t[i] += ") == 1, off
    want = np.sin(x * x).sum()
    assert checked(0.0, x)[0] == pytest.approx(want) and unchecked(0.0, x)[0] == pytest.approx(want)
    assert (~unchecked)(want, x)[0] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(grad(unchecked, loss="y")(0.0, x)[1],
                               grad(checked, loss="y")(0.0, x)[1], rtol=1e-14)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_pruning_never_removes_an_error_the_program_raises(backend):
    """A dead allocation that fails (a negative size) still fails without checks."""
    f = revbench.define("def f(y, n):\n    t = np.zeros(n)\n    y += 1.0\n    del t\n",
                        {"np": np}, backend=backend, check=False)["f"]
    assert f(0.0, 2) == (1.0, 2)
    with pytest.raises(ValueError, match="negative"):
        f(0.0, -1)


# -- the run before a sweep (Direction.before_sweep) ---------------------------------------

def _lean(f) -> Direction:
    return f._direction.before_its_sweep()


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_checked_run_before_its_sweep_leaves_the_del_checks_to_the_sweep(backend):
    """grad's forward run, with checks on, drops the uncomputation only a ``del`` reads
    (the sweep checks those ancillas again) and keeps every other check."""
    ns = {"np": np, "math": math}
    f = revbench.define(ROUTINE, ns, backend=backend)["f"]
    x = np.array([0.3, 0.7, 1.1])
    sig = f.signature_of((0.0, x))
    raw = f._program.generate(_lean(f), backend, True, sig)[0].source
    lean = plain(raw)
    assert "t[i] -= " not in lean and "t[i] += " in lean, lean
    # an overflow of what is still computed is caught
    assert "t[i] = _rb_float_shift(t[i], " in raw, raw
    g = grad(f, loss="y")(0.0, x)[1]
    assert f._program.has_compiled(_lean(f), sig)  # grad ran the lean run ...
    np.testing.assert_allclose(g, 2 * x * np.cos(x * x), rtol=1e-14)
    # ... and gives what the full run gives (bit for bit: the same arithmetic)
    g2 = revbench.define(ROUTINE, ns, backend=backend)["f"]
    g2(0.0, x)  # compiled the full run first: grad reuses it rather than compile another
    assert np.array_equal(grad(g2, loss="y")(0.0, x)[1], g)
    assert not g2._program.has_compiled(_lean(g2), sig)


WRONG_UNCOMPUTE = """
def f(y, x):
    t = 0.0
    t += x
    y[0] += t * t
    t -= 0.5 * x
    del t
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "jacobian"])
def test_an_ancilla_left_dirty_still_fails_the_gradient(backend, api):
    """The run before the sweep checks no ``del``; the sweep finds the same mistake, at the
    same line and variable, and the caller's data is left as it was."""
    f, once_run = (revbench.define(WRONG_UNCOMPUTE, {}, backend=backend)["f"] for _ in "ab")
    y = np.array([1.0])
    with pytest.raises(revbench.ReversibilityError) as plain_run:
        once_run(y, 3.0)
    call = {"grad": lambda: grad(f, loss=("y", 0))(y, 3.0),
            "value_and_grad": lambda: revbench.value_and_grad(f, loss=("y", 0))(y, 3.0),
            "jacobian": lambda: revbench.jacobian(f, "y", "x")(y, 3.0)}[api]
    with pytest.raises(revbench.ReversibilityError) as swept:
        call()
    assert "`t`" in str(swept.value) and "`t`" in str(plain_run.value)
    assert swept.value.variable == plain_run.value.variable == "t"
    assert y[0] == 1.0
    assert f._program.has_compiled(_lean(f), f.signature_of((y, 3.0)))


@settings(max_examples=40, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_programs_same_gradient_after_the_lean_run_and_the_full_one(p):
    """Bit for bit: the lean run computes everything the sweep reads as the full one does."""
    show(p)
    lean_f, full_f = build(p, "python"), build(p, "python")
    stable("forward", lambda: full_f(*p.fresh_args()))  # compiles the full run: grad reuses it
    g_lean = stable("grad (lean run)", lambda: grad(lean_f, loss="a0")(*p.fresh_args()))
    g_full = stable("grad (full run)", lambda: grad(full_f, loss="a0")(*p.fresh_args()))
    for a, b in zip(g_lean, g_full):
        assert (a is None and b is None) or np.array_equal(a, b, equal_nan=True)


NESTED = """
def f(y, x):
    with routine:
        t = 0.0
        with routine:
            u = 0.0
            u += x
        t += u * x
        ~routine
    y += t
    ~routine
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_checked_sweep_replays_a_routine_without_the_uncompute_only_a_del_reads(backend):
    """In the sweep, the replay of the outer routine runs the inner one's compute but not its
    uncompute: the outer routine's adjoint, later in the sweep, uncomputes and checks ``u``."""
    f = revbench.define(NESTED, {}, backend=backend)["f"]
    sweep = _sweep_lines(f, 0.0, 3.0)
    assert sum(ln.startswith("u -= x") for ln in sweep) == 1, sweep  # was 2: replay and adjoint
    assert sum(ln.startswith("u += x") for ln in sweep) == 2, sweep
    checks = [ln for ln in sweep if ln.startswith("raise _RbCheckFailed")]
    assert len(checks) == 2, sweep  # `del u` and `del t`, once each
    assert grad(f, loss="y")(0.0, 3.0)[1] == 2 * 3.0


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_inner_ancilla_left_dirty_still_fails_the_gradient(backend):
    dirty = NESTED.replace("        t += u * x\n", "        t += u * x\n        u += 1.0\n")
    f = revbench.define(dirty, {}, backend=backend)["f"]
    with pytest.raises(revbench.ReversibilityError) as exc:
        grad(f, loss="y")(0.0, 3.0)
    assert exc.value.variable == "u" and "not back at its allocated value" in str(exc.value)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_the_derivative_of_a_quotient_by_a_tiny_divisor_is_finite(backend):
    """d(x/z)/dz = -x/z**2 is computed as -(x/z)/z: z*z underflows to 0 for |z| < 1e-162,
    which raised ZeroDivisionError (found by a hypothesis property over hvp)."""
    f = revbench.define("def f(y, x, z):\n    y += x / z\n", {}, backend=backend)["f"]
    _, dx, dz = grad(f, loss="y")(0.0, 1e-250, 1e-170)
    assert dx == pytest.approx(1e170) and dz == pytest.approx(-1e90)


# -- a routine's uncompute of a callee that asserts on shapes (``csr_matvec``) -------------

MATVEC_CALLEE = """
def rows(y, x):
    assert len(y) == len(x), "rows: y and x must have the same length"
    for i in range(len(y)):
        y[i] += {value} * x[i]
"""

MATVEC_CALLER = """
def step(u_new, u):
    with routine:
        lu = np.zeros_like(u)
        rows(lu, u)
    u_new += u + 0.5 * lu
    ~routine
"""

CALLER_INVERTED = """
def step(u_new, u):
    lu = np.zeros_like(u)
    rows(lu, u)
    u_new += u + lu
    with inverted:
        rows(lu, u)
    del lu
"""


def _calls(f, kind, *args) -> int:
    return plain(f.source(kind, *args)).count("_rb_call_rows")


def _define_step(value: str, caller: str, backend: str, check: bool):
    ns = revbench.define(MATVEC_CALLEE.format(value=value), {"np": np}, backend=backend,
                         check=check)
    return revbench.define(caller, {"np": np, **ns}, backend=backend, check=check)["step"]


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_uncompute_whose_callee_asserts_only_shapes_is_dropped_where_dead(backend):
    """``~routine`` runs ``rows`` again only to bring ``lu`` back to zeros before it is
    freed; its ``assert`` compares lengths, which the routine's own call of ``rows`` on
    the same arrays checked: unchecked, and before a sweep, the uncompute is gone (the
    heat equation's step did its sparse product twice)."""
    u = np.array([0.5, -1.0, 2.0])
    lean = _define_step("x[i]", MATVEC_CALLER, backend, True)
    off = _define_step("x[i]", MATVEC_CALLER, backend, False)
    assert _calls(off, "forward", np.zeros(3), u) == 1
    assert _calls(off, "inverse", np.zeros(3), u) == 1
    assert _calls(lean, "forward", np.zeros(3), u) == 2  # checked: the del check reads lu
    sig = lean.signature_of((np.zeros(3), u))
    raw = lean._program.generate(_lean(lean), backend, True, sig)[0].source
    assert raw.count("_rb_call_rows") == 1, raw
    want = u + 0.5 * u * u
    for f in (lean, off):
        np.testing.assert_array_equal(f(np.zeros(3), u)[0], want)
        np.testing.assert_allclose((~f)(want.copy(), u)[0], 0.0, atol=1e-15)
        np.testing.assert_array_equal(grad(f, loss=("u_new", 2))(np.zeros(3), u)[1],
                                      [0.0, 0.0, 1.0 + u[2]])


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_failing_shape_assert_still_fails_once_the_uncompute_is_dropped(backend):
    """The routine's compute of ``rows`` makes the same check: a length mismatch is still
    an AssertionError, with or without checks, before any array is changed."""
    for check in (True, False):
        f = _define_step("x[i]", MATVEC_CALLER.replace("np.zeros_like(u)", "np.zeros(2)"),
                         backend, check)
        u_new = np.zeros(3)
        with pytest.raises(AssertionError, match="same length"):
            f(u_new, np.ones(3))
        with pytest.raises(AssertionError, match="same length"):
            grad(f, loss=("u_new", 0))(u_new, np.ones(3))
        np.testing.assert_array_equal(u_new, 0.0)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_uncomputes_that_do_more_than_check_shapes_are_kept(backend):
    """An ``assert`` on values may differ in the uncompute (it reads changed values) and a
    ``print`` is output: such calls stay.  A ``with inverted:`` block mirrors nothing run
    before it: its call stays too, so its check of shapes is still made."""
    u = np.array([0.5, -1.0, 2.0])
    valued = MATVEC_CALLEE.format(value="x[i]").replace("len(y) == len(x)", "y[0] < 10.0")
    ns = revbench.define(valued, {"np": np}, backend=backend, check=False)
    f = revbench.define(MATVEC_CALLER, {"np": np, **ns}, backend=backend, check=False)["step"]
    assert _calls(f, "forward", np.zeros(3), u) == 2
    printing = MATVEC_CALLEE.format(value="x[i]") + "    print(len(y))\n"
    ns = revbench.define(printing, {"np": np}, backend=backend, check=False)
    f = revbench.define(MATVEC_CALLER, {"np": np, **ns}, backend=backend, check=False)["step"]
    assert _calls(f, "forward", np.zeros(3), u) == 2
    g = _define_step("x[i]", CALLER_INVERTED, backend, False)
    assert _calls(g, "forward", np.zeros(3), u) == 2
    np.testing.assert_array_equal(g(np.zeros(3), u)[0], u + u * u)


CALLER = """
def g(y, x):
    f(y, x)
"""


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_callee_of_a_run_before_its_sweep_runs_lean_too(backend):
    """grad's forward run of ``g`` calls ``f``'s lean run (its ``~routine`` left to the
    sweep, which runs ``f``'s own sweep): a checkpointed loop's step calls its callees so."""
    ns = revbench.define(ROUTINE, {"np": np, "math": math}, backend=backend)
    g = revbench.define(CALLER, {"np": np, **ns}, backend=backend)["g"]
    x = np.array([0.3, 0.7, 1.1])
    sig = ns["f"].signature_of((0.0, x))
    grads = grad(g, loss="y")(0.0, x)[1]
    assert ns["f"]._program.has_compiled(_lean(ns["f"]), sig)
    assert not ns["f"]._program.has_compiled(ns["f"]._direction, sig)
    np.testing.assert_allclose(grads, 2 * x * np.cos(x * x), rtol=1e-14)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_an_ancilla_left_dirty_in_a_callee_still_fails_the_gradient(backend):
    ns = revbench.define(WRONG_UNCOMPUTE, {}, backend=backend)
    g = revbench.define(CALLER, {**ns}, backend=backend)["g"]
    y = np.array([1.0])
    with pytest.raises(revbench.ReversibilityError) as swept:
        grad(g, loss=("y", 0))(y, 3.0)
    assert swept.value.variable == "t" and y[0] == 1.0
    assert ns["f"]._program.has_compiled(_lean(ns["f"]), ns["f"].signature_of((y, 3.0)))

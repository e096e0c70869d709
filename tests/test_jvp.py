"""``jvp``: forward mode for users, over the tangent transform.

Checked against JAX's ``jax.jvp`` (values and tangents), against ``jacobian(f) @ v``, by
the duality ``<grad, v> == jvp`` over generated programs (hypothesis), on both backends,
for an inverse (``~f``), and every bad input with its message.
"""

from __future__ import annotations

import re

import numpy as np
import program_gen
import pytest
from hypothesis import given, note, settings
from test_property import build, show, stable
from test_property_grad import SETTINGS

import revbench
from revbench import ReversibilityTypeError, define, grad, jacobian, jvp

SOURCE = '''
@reversible
def model(r, x, w, n):
    """r += w * sin(x) * x shifted, plus a softplus of x, n times over."""
    for k in range(n):
        for i in range(len(x)):
            r[i] += w * np.sin(x[i]) * x[(i + 1) % len(x)] + np.log(1.0 + np.exp(x[i]))

@reversible
def energy(e, x):
    for i in range(len(x) - 1):
        e += (x[i + 1] - x[i] * x[i]) ** 2 + np.exp(x[i])
'''


def functions(backend: str) -> dict:
    return define(SOURCE, {"np": np}, backend=backend)


def model_jax(x, w, n):
    import jax.numpy as jnp

    r = jnp.zeros_like(x)
    for _ in range(n):
        r = r + w * jnp.sin(x) * jnp.roll(x, -1) + jnp.log(1.0 + jnp.exp(x))
    return r


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_jvp_matches_jax(backend):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    model = functions(backend)["model"]
    x = np.array([0.3, -1.2, 2.0, 0.7])
    vx, vw = np.array([1.0, 0.5, -2.0, 0.25]), 0.3
    (r,), (dr,) = jvp(model, np.zeros(4), x, 1.5, 2, tangents={"x": vx, "w": vw}, outputs="r")
    want, dwant = jax.jvp(lambda x, w: model_jax(x, w, 2), (x, 1.5), (vx, vw))
    np.testing.assert_allclose(r, np.asarray(want), rtol=1e-13)
    np.testing.assert_allclose(dr, np.asarray(dwant), rtol=1e-12)


FIXED = '''
@reversible
def inner(y, x, A):
    with routine:
        t = np.zeros(len(y))
        t += A @ x
        u = np.zeros(len(y))
        for i in range(len(y)):
            u[i] += np.tanh(t[i]) * x[i % len(x)]
    y += u + A[:, 0]
    ~routine

@reversible
def outer(z, x, A, B):
    with routine:
        y = np.zeros(A.shape[0])
        inner(y, x, A)
    z += B @ y
    ~routine
'''


@pytest.mark.parametrize("backend", ["python", "numba"])
@pytest.mark.parametrize("check", [True, False])
def test_arguments_left_fixed_are_constants_of_the_tangent_program(backend, check):
    """A read-only argument a jvp leaves out has a zero tangent throughout: the program is
    compiled knowing it (and its callees too, through their calls) -- the same bits as
    moving it by an explicit zero, and no work of its own; unchecked, the tangent run
    prunes its uncomputations (a routine's ``~``) as the plain run does."""
    outer = define(FIXED, {"np": np}, backend=backend, check=check)["outer"]
    rng = np.random.default_rng(3)
    x, A, B = rng.normal(size=3), rng.normal(size=(5, 3)), rng.normal(size=(4, 5))
    v = rng.normal(size=3)
    args = (np.zeros(4), x, A, B)
    (z1,), (t1,) = jvp(outer, *args, tangents={"x": v}, outputs="z")
    (z2,), (t2,) = jvp(outer, *args, tangents={"x": v, "A": np.zeros_like(A),
                                               "B": np.zeros_like(B)}, outputs="z")
    assert np.array_equal(z1, z2) and np.array_equal(t1, t2)
    J = jacobian(outer, outputs="z", wrt="x")(*args)
    np.testing.assert_allclose(t1, J @ v, rtol=1e-12)
    (_,), (tA,) = jvp(outer, *args, tangents={"A": A}, outputs="z")  # (A moving: not fixed)
    np.testing.assert_allclose(tA, jacobian(outer, outputs="z", wrt="A")(*args) @ A.ravel(),
                               rtol=1e-12)
    prog = outer._program
    keys = [k for k in prog._cache if k[0].tangent]
    assert frozenset({"A", "B"}) in {k[6] for k in keys}  # compiled with A, B constant
    fixed = prog.generate(keys[0][0].__class__(tangent=True), prog.backend, check,
                          next(k[3] for k in keys), compile_callees=False,
                          inactive=frozenset({"A", "B"}))[0].source
    assert "_rb_tan_B" not in fixed.split("return")[0].split("def ")[-1].replace(
        "_rb_tan_B,", "").replace("_rb_tan_B)", "")  # never read
    if not check:  # (unchecked: no uncompute of the routine's ancilla y after z += B @ y)
        body = fixed.split("_rb_matmul_update(z")[1]
        assert "inner_tangent-inverse" not in body and "_tangent_inverse" not in body


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_jvp_is_the_jacobian_times_v_and_changes_nothing(backend):
    model = functions(backend)["model"]
    x = np.array([0.3, -1.2, 2.0])
    v = np.array([0.2, -1.0, 0.5])
    r0, x0, v0 = np.ones(3), x.copy(), v.copy()
    (r,), (dr,) = jvp(model, r0, x, 0.7, 1, tangents={"x": v}, outputs="r")
    J = jacobian(model, outputs="r", wrt="x")(np.ones(3), x, 0.7, 1)
    np.testing.assert_allclose(dr, J @ v, rtol=1e-12, atol=1e-14)
    assert np.array_equal(r0, np.ones(3)) and np.array_equal(x, x0) and np.array_equal(v, v0)
    assert np.allclose(r, model(np.ones(3), x.copy(), 0.7, 1)[0])


def test_every_output_and_the_sequence_form():
    model = functions("python")["model"]
    x = np.array([0.3, -1.2])
    outs, tans = jvp(model, np.zeros(2), x, 0.5, 1, tangents=[None, np.array([1.0, 0.0]), 0.0, None])
    assert len(outs) == len(tans) == 4
    assert outs[3] == 1 and tans[3] is None  # an int: no tangent
    np.testing.assert_array_equal(tans[1], [1.0, 0.0])  # x is read only: its tangent passes
    assert tans[2] == 0.0 and isinstance(tans[2], float)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_jvp_of_an_inverse(backend):
    model = functions(backend)["model"]
    inv = ~model
    x, v = np.array([0.4, 1.1]), np.array([0.5, -0.25])
    (r,), (dr,) = jvp(inv, np.zeros(2), x, 0.9, 1, tangents={"x": v}, outputs="r")
    (rf,), (drf,) = jvp(model, np.zeros(2), x, 0.9, 1, tangents={"x": v}, outputs="r")
    np.testing.assert_allclose(r, -rf, rtol=1e-14)
    np.testing.assert_allclose(dr, -drf, rtol=1e-14)


def test_jvp_along_grad_is_the_hessian_direction():
    """The duality with the reverse mode: <grad, v> is the tangent of the loss."""
    energy = functions("numba")["energy"]
    x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -0.5])
    (_,), (de,) = jvp(energy, 0.0, x, tangents={"x": v}, outputs="e")
    g = grad(energy, loss="e")(0.0, x)[1]
    assert de == pytest.approx(float(g @ v), rel=1e-13)


@pytest.mark.parametrize("tangents, error, words", [
    ({"n": 1}, ReversibilityTypeError, ["`n` is int64", "only float arguments have tangents"]),
    ({"x": np.ones(3)}, ValueError, ["tangent of `x`", "(2,)", "(3,)"]),
    ({"x": np.ones(2, dtype=complex)}, TypeError, ["real numbers", "complex"]),
    ({"q": 1.0}, ValueError, ["tangents 'q' is not an argument of model"]),
    ([None, None], TypeError, ["tangents has 2 entries", "4 argument(s)"]),
    ("x", TypeError, ["tangents must be a dict"]),
])
def test_bad_tangents_are_named(tangents, error, words):
    model = functions("python")["model"]
    with pytest.raises(error) as info:
        jvp(model, np.zeros(2), np.ones(2), 1.0, 1, tangents=tangents)
    for w in words:
        assert w in str(info.value)


def test_bad_calls_are_named():
    model = functions("python")["model"]
    with pytest.raises(TypeError, match="takes the 4 argument"):
        jvp(model, np.zeros(2), tangents={})
    with pytest.raises(TypeError, match="needs a reversible function"):
        jvp(np.sin, 1.0, tangents={})
    with pytest.raises(ValueError, match="outputs names an argument twice"):
        jvp(model, np.zeros(2), np.ones(2), 1.0, 1, tangents={}, outputs=("r", "r"))


def test_complex_programs_are_refused_at_their_line():
    (f,) = define('''
@reversible
def rot(z, x):
    z += x * 1j
''', {}).values()
    with pytest.raises(ReversibilityTypeError) as info:
        jvp(f, 0j, 1.0, tangents={"x": 1.0})
    assert "complex" in str(info.value) and "`z`" in str(info.value)


def test_jvp_is_public():
    assert revbench.jvp is jvp and "jvp" in revbench.__all__


def _duality_gap(f, args) -> tuple[float, float, float]:
    """(jvp's tangent of a0 along v, <grad a0, v>, the scale of the gradient) at ``args()``."""
    g = stable("grad", lambda: grad(f, loss="a0")(*args()))
    rng = np.random.default_rng(len(f.params))
    tangents, dot = {}, 0.0
    for name, a, gk in zip(f.params, args(), g):
        if isinstance(a, float) or (isinstance(a, np.ndarray) and a.dtype == float):
            v = rng.standard_normal(np.shape(a))
            v = v if isinstance(a, np.ndarray) else float(v)
            tangents[name] = v
            dot += float(np.sum(np.asarray(gk) * v))
    (_,), (da0,) = stable("jvp", lambda: jvp(f, *args(), tangents=tangents, outputs="a0"))
    note(f"jvp {da0!r}, <grad, v> {dot!r}")
    scale = 1.0 + sum(float(np.sum(np.abs(np.asarray(gk)))) for gk in g if gk is not None)
    return da0, dot, scale


def _nudged(args: tuple, rng) -> tuple:
    """``args`` with every float moved by a few parts in 10^7: off an exact tie."""
    return tuple(a + 1e-7 * (1.0 + np.abs(a)) * rng.uniform(0.5, 1.0, np.shape(a))
                 if isinstance(a, float) or (isinstance(a, np.ndarray) and a.dtype == float)
                 else a for a in args)


def check_duality(p, backend: str) -> None:
    """jvp's tangent of the loss a0 along v equals <grad a0, v>, for every program.

    At an exact tie of ``min``/``max`` (or ``abs`` at 0) both sides take the even split of
    the rule table, but the reverse sweep reads values it recovered by uncomputing, which
    may differ from the forward ones by a rounding, and that moves it off the tie onto one
    side's derivative.  Such a point is a kink, not a defect: there the same program is
    compared again a hair away from it, where both are differentiable and must agree.
    """
    show(p)
    f = build(p, backend)
    da0, dot, scale = _duality_gap(f, p.fresh_args)
    if abs(da0 - dot) <= 1e-9 * scale:
        return
    assert re.search(r"\b(min|max|abs)\(", p.source), (da0, dot)  # no kink: a real mismatch
    note("at a kink: compared again a hair away from it")
    nudge = np.random.default_rng(7).integers(1 << 30)
    args = lambda: _nudged(p.fresh_args(), np.random.default_rng(nudge))
    da0, dot, scale = _duality_gap(f, args)
    assert abs(da0 - dot) <= 1e-9 * scale, (da0, dot)


@settings(max_examples=40, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_programs_jvp_is_dual_to_grad_python(p):
    check_duality(p, "python")


@settings(max_examples=5, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_programs_jvp_is_dual_to_grad_numba(p):
    check_duality(p, "numba")


def test_registered_functions_have_tangents_from_their_first_partials():
    """docs/ad.md, section 3: a tangent needs only the first partials ``register`` takes."""
    import math

    def softplus_t(x):
        return math.log1p(math.exp(x))

    def softplus_t_dx(x):
        return 1.0 / (1.0 + math.exp(-x))

    revbench.register(softplus_t, partials=(softplus_t_dx,))
    for backend in ("python", "numba"):
        f = define("def f(y, x):\n    y += softplus_t(x) * x\n", {"softplus_t": softplus_t},
                   backend=backend)["f"]
        ys, ts = jvp(f, 0.0, 0.3, tangents={"x": 2.0}, outputs="y")
        want = 2.0 * (softplus_t_dx(0.3) * 0.3 + softplus_t(0.3))
        assert ys[0] == pytest.approx(softplus_t(0.3) * 0.3) and ts[0] == pytest.approx(want)
        assert ts[0] == pytest.approx(2.0 * grad(f, "y")(0.0, 0.3)[1], rel=1e-14)

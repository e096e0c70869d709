"""Gradients inside reversible code: ``g += revbench.grad(f, loss=..., wrt=...)(...)``.

The value against the hand-derived gradient; the gradient, ``jvp`` and Jacobian of a
program holding one (second derivatives of ``f``) against JAX's ``grad`` of a function
holding ``jax.grad`` -- a saddle-point ascent and an inner optimisation inside a
checkpointed loop; the inverse, both backends, checks on and off; and every misuse with
its message.
"""

from __future__ import annotations

import numpy as np
import pytest

import revbench
from revbench import ReversibilitySyntaxError, ReversibilityTypeError, define, grad, jacobian, jvp
from revbench.checkpoint import Online

BACKENDS = ["python", "numba"]

SOURCE = '''
@reversible
def f(out, x, y):
    """out += sum of x y - y^2 / 2 + 0.3 x sin(x y): concave in y near 0."""
    for i in range(len(y)):
        out += x[i] * y[i] - 0.5 * y[i] ** 2 + 0.3 * x[i] * np.sin(x[i] * y[i])

@reversible
def gradient_y(g, x, y):
    g += revbench.grad(f, loss="out", wrt="y")(0.0, x, y)

@reversible
def saddle(loss, x, y0, lr):
    """Two steps of gradient ascent on y, out of place, then f at the result."""
    with routine:
        y1 = np.zeros_like(y0)
        y1 += y0
        y1 += lr * revbench.grad(f, loss="out", wrt="y")(0.0, x, y0)
        y2 = np.zeros_like(y0)
        y2 += y1
        y2 += lr * revbench.grad(f, loss="out", wrt="y")(0.0, x, y1)
    f(loss, x, y2)
    ~routine
'''


def functions(backend: str, check: bool = True) -> dict:
    return define(SOURCE, {"np": np, "revbench": revbench}, backend=backend, check=check)


def grad_f_y(x, y):
    return x - y + 0.3 * x * x * np.cos(x * y)


def jax_saddle():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def f(x, y):
        return jnp.sum(x * y - 0.5 * y ** 2 + 0.3 * x * jnp.sin(x * y))

    def saddle(x, y0, lr):
        y1 = y0 + lr * jax.grad(f, argnums=1)(x, y0)
        y2 = y1 + lr * jax.grad(f, argnums=1)(x, y1)
        return f(x, y2)

    return jax, saddle


X = np.array([0.7, -1.3, 2.1, 0.4])
Y = np.array([0.2, 0.5, -0.8, 1.1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_inside_is_the_hand_derived_one(backend):
    fs = functions(backend)
    g, x, y = fs["gradient_y"](np.ones(4), X, Y)
    np.testing.assert_allclose(g, 1.0 + grad_f_y(X, Y), rtol=1e-14)
    assert np.array_equal(x, X) and np.array_equal(y, Y)  # nothing else changes
    back = (~fs["gradient_y"])(g, x, y)
    np.testing.assert_allclose(back[0], np.ones(4), rtol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_saddle_point_gradient_matches_jax(backend):
    """The outer gradient goes through f's Hessian: second derivatives, against JAX."""
    jax, saddle_jax = jax_saddle()
    saddle = functions(backend)["saddle"]
    loss, *_ = saddle(0.0, X, Y, 0.1)
    assert loss == pytest.approx(float(saddle_jax(X, Y, 0.1)), rel=1e-13)
    _, gx, gy, glr = grad(saddle, loss="loss", wrt=["x", "y0", "lr"])(0.0, X, Y, 0.1)
    want = jax.grad(saddle_jax, argnums=(0, 1, 2))(X, Y, 0.1)
    np.testing.assert_allclose(gx, np.asarray(want[0]), rtol=1e-12)
    np.testing.assert_allclose(gy, np.asarray(want[1]), rtol=1e-12)
    assert glr == pytest.approx(float(want[2]), rel=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jvp_and_jacobian_of_a_program_holding_a_gradient_match_jax(backend):
    jax, _ = jax_saddle()
    jnp = jax.numpy
    gradient_y = functions(backend)["gradient_y"]

    def g_jax(x, y):
        return x - y + 0.3 * x * x * jnp.cos(x * y)

    v = np.array([1.0, -0.5, 0.25, 2.0])
    (_,), (dg,) = jvp(gradient_y, np.zeros(4), X, Y, tangents={"y": v, "x": 2 * v}, outputs="g")
    _, want = jax.jvp(g_jax, (X, Y), (2 * v, v))
    np.testing.assert_allclose(dg, np.asarray(want), rtol=1e-12)
    # several adjoint lanes at once: every row of the Jacobian of the gradient
    J = jacobian(gradient_y, outputs="g", wrt=("x", "y"))(np.zeros(4), X, Y)
    want_x, want_y = jax.jacrev(g_jax, argnums=(0, 1))(X, Y)
    np.testing.assert_allclose(J[0], np.asarray(want_x), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(J[1], np.asarray(want_y), rtol=1e-12, atol=1e-15)


def test_both_backends_and_check_false_agree_to_the_bit():
    results = []
    for backend in BACKENDS:
        for check in (True, False):
            saddle = functions(backend, check)["saddle"]
            results.append(grad(saddle, loss="loss", wrt=["x", "y0"])(0.0, X, Y, 0.1)[1:3])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_gradients_a_bound_gradient_and_an_ancilla(backend):
    """``dfdz = revbench.grad(h, ...)`` of the module, a scalar ``wrt``, ``t = grad(...)``
    with its ``del t``, and ``-=``."""
    ns = {"np": np, "revbench": revbench}
    fs = define('''
@reversible
def h(e, z, k):
    e += np.exp(k * z) + z ** 3
''', ns, backend=backend)
    ns["dhdz"] = revbench.grad(fs["h"], loss="e", wrt="z")
    fs = define('''
@reversible
def use(r, s, z):
    t = dhdz(0.0, z, 2.0)
    r += s * t * t
    del t
    r -= revbench.grad(h, loss=0, wrt=1)(s, z, 2.0)
''', ns, backend=backend)
    use = fs["use"]
    z, s = 0.3, 1.5
    d = 2.0 * np.exp(2.0 * z) + 3 * z * z
    r, *_ = use(0.0, s, z)
    assert r == pytest.approx(s * d * d - d, rel=1e-14)
    dd = 4.0 * np.exp(2.0 * z) + 6 * z
    _, gs, gz = grad(use, loss="r", wrt=["s", "z"])(0.0, s, z)
    assert gs == pytest.approx(d * d, rel=1e-13)
    assert gz == pytest.approx(2 * s * d * dd - dd, rel=1e-13)
    assert (~use)(*use(0.0, s, z))[0] == pytest.approx(0.0, abs=1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inner_optimisation_inside_a_checkpointed_loop(backend):
    """A particle pulled down a potential's gradient for n steps (each step holds a
    gradient), under Revolve: the loss at the end against JAX's scan of jax.grad."""
    jax, _ = jax_saddle()
    jnp = jax.numpy
    from revbench.checkpoint import Revolve

    ns = {"np": np, "revbench": revbench, "Revolve": Revolve}
    fs = define('''
@reversible
def potential(v, p, c):
    for i in range(len(p)):
        v += c[i] * p[i] ** 2 + 0.1 * np.cos(3.0 * p[i])

@reversible
def descend(loss, p, p0, c, h, n):
    for t in checkpointed(range(n), Revolve(snapshots=3), new=p, old=p0):
        p += p0
        p -= h * revbench.grad(potential, loss="v", wrt="p")(0.0, p0, c)
    loss += np.sum(p * p)
''', ns, backend=backend)
    descend = fs["descend"]
    p0, c = np.array([0.9, -0.4, 0.3]), np.array([0.5, 1.5, 1.0])

    def loss_jax(p0, c):
        def potential(p):
            return jnp.sum(c * p ** 2 + 0.1 * jnp.cos(3.0 * p))

        def step(p, _):
            return p - 0.1 * jax.grad(potential)(p), None

        p, _ = jax.lax.scan(step, p0, None, length=7)
        return jnp.sum(p * p)

    loss, *_ = descend(0.0, np.zeros(3), p0, c, 0.1, 7)
    assert loss == pytest.approx(float(loss_jax(p0, c)), rel=1e-13)
    _, _, gp, gc, *_ = grad(descend, loss="loss", wrt=["p0", "c"])(0.0, np.zeros(3), p0, c,
                                                                   0.1, 7)
    want = jax.grad(loss_jax, argnums=(0, 1))(p0, c)
    np.testing.assert_allclose(gp, np.asarray(want[0]), rtol=1e-11)
    np.testing.assert_allclose(gc, np.asarray(want[1]), rtol=1e-11)
    # forward mode through the same loop: each step's tangent, no schedule
    dp, dc = np.array([0.3, -0.1, 0.2]), np.array([0.05, 0.0, -0.1])
    (_,), (t,) = revbench.jvp(descend, 0.0, np.zeros(3), p0, c, 0.1, 7,
                              tangents={"p0": dp, "c": dc}, outputs="loss")
    assert t == pytest.approx(float(jax.jvp(loss_jax, (p0, c), (dp, dc))[1]), rel=1e-11)


def test_third_derivatives_are_refused_with_the_reason():
    saddle = functions("python")["saddle"]
    with pytest.raises(ReversibilityTypeError, match="third derivatives of f") as e:
        revbench.hvp(saddle, loss="loss", wrt="x")(0.0, X, Y, 0.1, np.ones(4))
    assert "saddle" in str(e.value)


def refused(source: str, ns_extra: dict | None = None) -> Exception:
    ns = {"np": np, "revbench": revbench}
    define('''
@reversible
def f(out, x, y, n):
    for i in range(len(y)):
        out += x[i] * y[i] ** 2
''', ns, backend="python")
    ns.update(ns_extra or {})
    with pytest.raises((ReversibilitySyntaxError, ReversibilityTypeError)) as e:
        fs = define(source, ns, backend="python")
        (fn,) = fs.values()
        fn(np.zeros(3), np.ones(3), np.ones(3), np.ones(3), 2)
    return e.value


@pytest.mark.parametrize("line, words", [
    ('g += revbench.grad(f, loss="out", wrt="n")(0.0, x, y, n)',
     ["`n` is passed `n` (int", "has no gradient"]),
    ('g += revbench.grad(f, loss="out", wrt="z")(0.0, x, y, n)',
     ["`wrt='z'` is not an argument of f('out', 'x', 'y', 'n')"]),
    ('g += revbench.grad(f, loss="out", wrt=("x", "y"))(0.0, x, y, n)',
     ["must name one argument", "got `('x', 'y')`"]),
    ('g += revbench.grad(f, loss="out")(0.0, x, y, n)', ["`wrt=` of a gradient", "got nothing"]),
    ('g += revbench.grad(f, loss="out", wrt="y")(0.0, x, y)',
     ["takes the 4 argument(s) of f('out', 'x', 'y', 'n'), got 3"]),
    ('g += revbench.grad(f, loss="out", wrt="y", batch=2)(0.0, x, y, n)',
     ["`batch=` is not supported here"]),
    ('g += revbench.grad(f, loss="x", wrt="y")(0.0, x, y, n)',
     ["the loss `x` is passed `x` (float64[:])", "float scalar loss"]),
    ('g += revbench.grad(missing, loss="out", wrt="y")(0.0, x, y, n)',
     ["`missing`", "must name a reversible function defined before this one"]),
    ('g += revbench.jacobian(f, outputs="out", wrt="y")(0.0, x, y, n)',
     ["`revbench.jacobian(...)` inside a reversible function", "g += revbench.grad("]),
    ('g += revbench.grad(f, loss="out", wrt="y")(0.0, x, 2.0 * y, n)',
     ["argument `y` of", "is the array expression `2.0 * y`"]),
    ('if revbench.grad(f, loss="out", wrt="out")(0.0, x, y, n) > 0.0:\n        g[0] += 1.0',
     ["cannot be used here", "compute it into an ancilla first"]),
])
def test_misuse_is_refused_with_its_line_and_fix(line, words):
    error = refused(f'''
@reversible
def use(g, a, x, y, n):
    {line}
''')
    message = str(error)
    for w in words:
        assert w in message, message
    assert error.lineno == 4, message


def test_a_redefined_target_is_taken_again():
    """A notebook cell redefining f: the function differentiating it uses the new f."""
    ns = {"np": np, "revbench": revbench}
    define("@reversible\ndef f(out, y):\n    out += y * y\n", ns, backend="python")
    use = define("@reversible\ndef use(g, y):\n    g += revbench.grad(f, loss='out', "
                 "wrt='y')(0.0, y)\n", ns, backend="python")["use"]
    assert use(0.0, 3.0)[0] == 6.0
    define("@reversible\ndef f(out, y):\n    out += y * y * y\n", ns, backend="python")
    assert use(0.0, 3.0)[0] == 27.0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("steps, words", [
    (100, ["ancilla `p_recovered_by_chaos_sweep[0]` is not back", "line 12"]),
    (2000, ["`+=` by `dL_dp`: the operand is infinite or nan", "line 12"]),
])
def test_a_sweep_that_does_not_recover_its_inputs_is_an_error_not_a_gradient(steps, words):
    """The standard map kicked hard: chaos's reverse sweep loses the copies it should give
    back (or its adjoints overflow). With checks on that is an error at the user's line."""
    fs = define(f'''
@reversible
def chaos(L, x, p, k, n):
    for t in range(n):
        for i in range(len(x)):
            p[i] += k * np.sin(x[i])
            x[i] += p[i]
    L += x[0]

@reversible
def use(g, x, p):
    g += revbench.grad(chaos, loss="L", wrt="p")(0.0, x, p, 6.0, {steps})
''', {"np": np, "revbench": revbench}, backend="python")
    x, p = np.array([0.1, 0.7, 1.3, 2.9]), np.array([0.0, 0.2, -0.3, 0.5])
    with pytest.raises(revbench.ReversibilityError) as e:
        fs["use"](np.zeros(4), x, p)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert list(p) == [0.0, 0.2, -0.3, 0.5]  # the caller's arrays are untouched


def test_the_debugger_shows_the_gradient_as_one_step_both_ways():
    use = functions("python")["gradient_y"]
    trace = revbench.trace(use, np.zeros(4), X, Y, loss=("g", 0))
    calls = [str(s) for s in trace if "grad(f, loss=out, wrt=y)" in str(s)]
    assert len(calls) == 2  # forward, then backward
    assert "+= the gradient of f's `out` with respect to `y`" in calls[0]
    np.testing.assert_allclose(trace.outputs[0], grad_f_y(X, Y), rtol=1e-14)
    np.testing.assert_allclose(trace.inputs[0], 0.0, atol=1e-15)


# -- over generated programs ------------------------------------------------------------------

def check_nested(p, backend: str) -> None:
    """For a generated program f with the float loss a0 and a float argument x: the gradient
    taken inside reversible code is grad's, and the outer gradient of <w, dL/dx> with respect
    to x is hvp's H w (the rule of the gradient's reverse sweep)."""
    from hypothesis import note
    from test_property import build, show, stable

    show(p)
    f = build(p, backend)
    args = p.fresh_args()
    floats = [k for k, a in enumerate(args) if k > 0 and (isinstance(a, float) or (
        isinstance(a, np.ndarray) and a.dtype == float))]
    if not floats:
        return
    k = floats[0]
    x = f.params[k]
    ns = {"np": np, "revbench": revbench, p.name: f}
    sum_ = "np.sum(acc * weight)" if isinstance(args[k], np.ndarray) else "acc * weight"
    (outer,) = define(f'''
@reversible
def outer(total, weight, acc, {", ".join(f.params)}):
    acc += revbench.grad({p.name}, loss="a0", wrt="{x}")({", ".join(f.params)})
    total += {sum_}
''', ns, backend=backend).values()
    rng = np.random.default_rng(len(p.source))
    w = rng.standard_normal(np.shape(args[k]))
    w = w if isinstance(args[k], np.ndarray) else float(w)
    zero = np.zeros_like(args[k]) if isinstance(args[k], np.ndarray) else 0.0
    want = stable("grad", lambda: grad(f, loss="a0")(*p.fresh_args()))[k]
    got = stable("outer", lambda: outer(0.0, w, zero.copy() if isinstance(zero, np.ndarray)
                                        else zero, *p.fresh_args()))[2]
    note(f"inside {got!r}, grad {want!r}")
    scale = 1.0 + float(np.sum(np.abs(want)))
    assert np.max(np.abs(np.asarray(got) - want)) <= 1e-10 * scale
    hv = stable("hvp", lambda: revbench.hvp(f, loss="a0", wrt=x)(*p.fresh_args(), w))
    g_outer = stable("outer grad", lambda: grad(outer, loss="total", wrt=[x])(
        0.0, w, zero.copy() if isinstance(zero, np.ndarray) else zero, *p.fresh_args()))[3 + k]
    note(f"outer grad {g_outer!r}, hvp {hv!r}")
    scale = 1.0 + float(np.sum(np.abs(hv)))
    assert np.max(np.abs(np.asarray(g_outer) - hv)) <= 1e-9 * scale


def _generated():
    import program_gen
    from hypothesis import given, settings
    from test_property_grad import SETTINGS

    def property_for(backend: str, examples: int):
        @settings(max_examples=examples, **SETTINGS)
        @given(program_gen.programs(mode="float"))
        def run(p):
            check_nested(p, backend)
        return run
    return property_for


test_generated_programs_gradient_inside_python = _generated()("python", 15)
test_generated_programs_gradient_inside_numba = pytest.mark.slow(_generated()("numba", 6))


# -- a Jacobian-vector product inside reversible code ------------------------------------------

JVP_SOURCE = '''
@reversible
def model(r, x, w):
    for i in range(len(x)):
        r[i] += w * np.sin(x[i]) * x[(i + 1) % len(x)] + np.log(1.0 + np.exp(x[i]))

@reversible
def sensitivity(loss, x, w, v, u):
    """loss += |J_x v + J_w u|^2 (the tangent of r along v on x and u on w)."""
    with routine:
        r = np.zeros_like(x)
        s = np.zeros_like(x)
        s += revbench.jvp(model, r, x, w, tangents={"w": u, "x": v}, outputs="r")
    loss += np.sum(s * s)
    ~routine
'''


def model_jax(x, w):
    import jax.numpy as jnp

    return w * jnp.sin(x) * jnp.roll(x, -1) + jnp.log(1.0 + jnp.exp(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jvp_inside_and_its_gradient_match_jax(backend):
    jax, _ = jax_saddle()
    jnp = jax.numpy
    f = define(JVP_SOURCE, {"np": np, "revbench": revbench}, backend=backend)["sensitivity"]
    v, u = np.array([1.0, -0.5, 0.25, 2.0]), 0.7

    def sensitivity_jax(x, w, v, u):
        _, s = jax.jvp(model_jax, (x, w), (v, u))
        return jnp.sum(s * s)

    loss, *_ = f(0.0, X, 1.5, v, u)
    assert loss == pytest.approx(float(sensitivity_jax(X, 1.5, v, u)), rel=1e-13)
    _, gx, gw, gv, gu = grad(f, loss="loss")(0.0, X, 1.5, v, u)
    want = jax.grad(sensitivity_jax, argnums=(0, 1, 2, 3))(X, 1.5, v, u)
    for got, w in zip((gx, gw, gv, gu), want):
        np.testing.assert_allclose(got, np.asarray(w), rtol=1e-12)
    back = (~f)(*f(0.0, X, 1.5, v, u))
    assert back[0] == pytest.approx(0.0, abs=1e-12)


def test_jvp_inside_misuse():
    with pytest.raises(AssertionError, match="the tangent of `x` must have the shape of `x`"):
        refused('''
@reversible
def use(g, a, x, y, n):
    g += revbench.jvp(f, 0.0, x, y, n, tangents={"x": a[0:2]}, outputs="out")
''')
    error = refused('''
@reversible
def use(g, a, x, y, n):
    g[0] += revbench.jvp(f, 0.0, x, y, n, tangents=t, outputs="out")
''')
    assert "dict written out" in str(error) and error.lineno == 4
    saddle = define(JVP_SOURCE, {"np": np, "revbench": revbench}, backend="python")["sensitivity"]
    with pytest.raises(ReversibilityTypeError, match="Jacobian-vector product of an array") as e:
        revbench.jvp(saddle, 0.0, X, 1.5, X.copy(), 0.7, tangents={"x": X}, outputs="loss")
    assert "(`r` of model)" in str(e.value) and "one float output" in str(e.value)
    with pytest.raises(ReversibilityTypeError, match="Jacobian-vector product of an array"):
        revbench.hvp(saddle, loss="loss", wrt="x")(0.0, X, 1.5, X.copy(), 0.7, X)
    slope = define(JVP_OF_JVP, {"np": np, "revbench": revbench}, backend="python")["slope"]
    with pytest.raises(ReversibilityTypeError, match="third derivatives of pot"):
        revbench.hvp(slope, loss="out", wrt="x")(0.0, np.ones(2), 0.5, np.eye(2), np.ones(2))


JVP_OF_JVP = '''
@reversible
def pot(v, x, w):
    v += 1.0 / np.sqrt((x[0] - 10.0) ** 2 + (x[1] - 10.0 + w) ** 2) + np.sin(x[0] * x[1] * w)

@reversible
def slope(out, x, w, e):
    """out += w (d pot / d x along e[0])^2"""
    with routine:
        g = 0.0
        g += revbench.jvp(pot, 0.0, x, w, tangents={"x": e[0]}, outputs="v")
    out += g * g * w
    ~routine
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_jvp_of_a_jvp_inside_matches_jax(backend):
    """Forward over forward: the tangent of J v moves by J dv + H[dx, v], along the
    tangents of every argument (the point, the scalar, the direction itself)."""
    jax, _ = jax_saddle()
    jnp = jax.numpy
    f = define(JVP_OF_JVP, {"np": np, "revbench": revbench}, backend=backend)["slope"]

    def slope_jax(x, w, e):
        def pot(x):
            return 1.0 / jnp.sqrt((x[0] - 10.0) ** 2 + (x[1] - 10.0 + w) ** 2) + jnp.sin(
                x[0] * x[1] * w)
        g = jax.jvp(pot, (x,), (e[0],))[1]
        return g * g * w

    x, w, E = np.array([1.0, 2.0]), 0.7, np.array([[1.0, 0.5], [0.0, 1.0]])
    dx, dw, dE = np.array([0.3, -0.2]), 0.4, np.array([[0.1, 0.2], [0.3, 0.4]])
    (out,), (t,) = revbench.jvp(f, 0.0, x, w, E, tangents={"x": dx, "w": dw, "e": dE},
                                outputs="out")
    want_out, want_t = jax.jvp(slope_jax, (x, w, E), (dx, dw, dE))
    assert out == pytest.approx(float(want_out), rel=1e-14)
    assert t == pytest.approx(float(want_t), rel=1e-12)
    for k, name in enumerate(("x", "w", "e")):  # one argument moving at a time
        tangents = {name: (dx, dw, dE)[k]}
        (_,), (t,) = revbench.jvp(f, 0.0, x, w, E, tangents=tangents, outputs="out")
        zero = [np.zeros_like(x), 0.0, np.zeros_like(E)]
        zero[k] = (dx, dw, dE)[k]
        assert t == pytest.approx(float(jax.jvp(slope_jax, (x, w, E), tuple(zero))[1]),
                                  rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jvp_through_a_checkpointed_while_loop_holding_a_gradient_matches_jax(backend):
    """Forward mode through ``while checkpointed``: each step's tangent kernel, state and
    tangent side by side (the particle of GradBench's nested evals)."""
    jax, _ = jax_saddle()
    jnp = jax.numpy
    fs = define('''
@reversible
def pot(v, x, w):
    v += 1.0 / np.sqrt((x[0] - 10.0) ** 2 + (x[1] - 10.0 + w) ** 2) + 1.0 / np.sqrt(
        (x[0] - 10.0) ** 2 + x[1] ** 2)

@reversible
def step(s1, s0, w):
    s1[0] += s0[0] + 0.1 * s0[2]
    s1[1] += s0[1] + 0.1 * s0[3]
    s1[2:4] += s0[2:4]
    s1[2:4] -= 0.1 * revbench.grad(pot, loss="v", wrt="x")(0.0, s0[0:2], w)

@reversible
def fly(out, s_end, s0, w):
    while checkpointed(s0[1] + 0.1 * s0[3] > 0.0, Online(snapshots=4), new=s_end, old=s0):
        step(s_end, s0, w)
    out += (s_end[0] - s_end[1] / s_end[3] * s_end[2]) ** 2
''', {"np": np, "revbench": revbench, "Online": Online}, backend=backend)
    fly = fs["fly"]

    def fly_jax(s0, w):
        def p(x):
            return (1.0 / jnp.linalg.norm(x - jnp.array([10.0, 10.0 - w]))
                    + 1.0 / jnp.linalg.norm(x - jnp.array([10.0, 0.0])))

        def euler(s):
            return jnp.concatenate([s[:2] + 0.1 * s[2:], s[2:] - 0.1 * jax.grad(p)(s[:2])])
        s = jax.lax.while_loop(lambda s: s[1] + 0.1 * s[3] > 0.0, euler, s0)
        return (s[0] - s[1] / s[3] * s[2]) ** 2

    s0, w = np.array([0.0, 8.0, 0.75, 0.0]), 0.3
    ds0 = np.array([0.01, -0.02, 0.03, 0.01])
    (out, end), (t, dend) = revbench.jvp(fly, 0.0, np.zeros(4), s0, w,
                                         tangents={"w": 1.0, "s0": ds0}, outputs=("out", "s_end"))
    want, want_t = jax.jvp(fly_jax, (s0, w), (ds0, 1.0))
    assert out == pytest.approx(float(want), rel=1e-12)
    assert t == pytest.approx(float(want_t), rel=1e-9)
    g = grad(fly, loss="out", wrt=["s0", "w"])(0.0, np.zeros(4), s0, w)
    # (JAX differentiates a while_loop forward only)
    dw_jax = jax.jvp(fly_jax, (s0, w), (np.zeros(4), 1.0))[1]
    assert g[3] == pytest.approx(float(dw_jax), rel=1e-9)
    assert float(np.dot(g[2], ds0) + g[3]) == pytest.approx(t, rel=1e-9)
    (back,), (dback,) = revbench.jvp(~fly, out, end, s0, w, tangents={"w": 1.0, "s0": ds0,
                                                                     "out": t, "s_end": dend},
                                     outputs="out")
    assert back == pytest.approx(0.0, abs=1e-12) and dback == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_jacobian_of_a_jvp_inside_matches_jax(backend):
    """Several adjoint lanes through the jvp's reverse sweep: every row at once."""
    jax, _ = jax_saddle()
    fs = define(JVP_SOURCE + '''
@reversible
def tangent_of_r(s, r, x, w, v):
    s += revbench.jvp(model, r, x, w, tangents={"x": v}, outputs="r")
''', {"np": np, "revbench": revbench}, backend=backend)
    v = np.array([1.0, -0.5, 0.25, 2.0])
    Jx, Jv = jacobian(fs["tangent_of_r"], outputs="s", wrt=("x", "v"))(
        np.zeros(4), np.zeros(4), X, 1.5, v)

    def tangent_jax(x, v):
        return jax.jvp(lambda x: model_jax(x, 1.5), (x,), (v,))[1]

    want_x, want_v = jax.jacrev(tangent_jax, argnums=(0, 1))(X, v)
    np.testing.assert_allclose(Jx, np.asarray(want_x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Jv, np.asarray(want_v), rtol=1e-12, atol=1e-14)


def test_an_in_place_gradient_step_says_how_to_write_it():
    """The step a user writes first, `y += lr * grad(...)(..., y)`, is not reversible: the
    message says why and gives the out-of-place and checkpointed forms."""
    error = refused('''
@reversible
def use(g, a, x, y, n):
    y += 0.1 * revbench.grad(f, loss="out", wrt="y")(0.0, x, y, n)
''')
    message = str(error)
    assert "a gradient step in place cannot be undone" in message
    assert "y1 += y; y1 += lr * revbench.grad(...)(..., y)" in message
    assert "checkpointed(range(n), Revolve(snapshots=10), new=y1, old=y)" in message
    assert error.lineno == 4


def test_batched_gradients_of_a_program_holding_a_gradient():
    """batch= on the CPU runs the same kernels item by item; on the GPU (device='cuda') a
    derivative inside reversible code is refused at its line before anything runs."""
    saddle = functions("numba")["saddle"]
    xs, ys = np.stack([X, 0.5 * X, X + 1.0]), np.stack([Y, Y, -Y])
    g = grad(saddle, loss="loss", wrt=["x"], batch=("x", "y0"))(0.0, xs, ys, 0.1)
    for k in range(3):
        want = grad(saddle, loss="loss", wrt=["x"])(0.0, xs[k], ys[k], 0.1)[1]
        np.testing.assert_allclose(g[1][k], want, rtol=1e-14)
    with pytest.raises(ReversibilityTypeError, match="on the GPU") as e:
        grad(saddle, loss="loss", wrt=["x"], batch=("x", "y0"), device="cuda")(0.0, xs, ys, 0.1)
    assert "a derivative taken inside reversible code" in str(e.value)
    assert e.value.lineno == 18

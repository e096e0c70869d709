"""``revbench.interop.to_jax``: a reversible function inside JAX programs.

Oracles: ``revbench.grad`` / ``revbench.vjp`` / ``jacobian`` on the same function, hand
derived values, and JAX's own derivatives of the same formula written in ``jax.numpy``;
both backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from interop_programs import DIRTY, RESID

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'revbench[interop]')")
jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")

import revbench  # noqa: E402
from revbench import ReversibilityError  # noqa: E402
from revbench.interop import _jax_callback as host  # noqa: E402
from revbench.interop import jax as rb_jax  # noqa: E402
from revbench.interop import to_jax  # noqa: E402


@pytest.fixture(autouse=True)
def x64():
    """Every test here runs with 64-bit JAX (the export requires it); restored after."""
    saved = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", saved)




@pytest.fixture(params=["jacobian-in-forward", "pullback", "unpacked", "pure_callback"])
def path(request, monkeypatch):
    """How a gradient is taken: small outputs' Jacobian computed with the forward pass (one
    callback), or a second callback running the pullback (larger outputs); callback
    arguments concatenated by dtype, or each on its own (large arrays); revbench's own
    host-callback primitive, or ``jax.pure_callback`` (its fallback)."""
    if request.param == "pullback":
        monkeypatch.setattr(rb_jax, "JACOBIAN_IN_FORWARD", 0)
    if request.param == "unpacked":
        monkeypatch.setattr(rb_jax, "PACK_LIMIT", -1)
    if request.param == "pure_callback":
        monkeypatch.setattr(host, "USE_PRIMITIVE", False)
    return request.param


def args_of():
    return np.zeros(3), 0.5, np.array([1.0, 10.0, -2.0]), np.array([1.5, 2.0, -0.5]), 2, True


def jnp_resid(r, s, a, x, n, flag):
    """The same function in jax.numpy: JAX's own derivatives are an oracle."""
    r = r + a * x * x + jnp.sin(s)
    s = s + jnp.sum(jnp.where(jnp.arange(3) < n, x * a, 0.0)) + jnp.where(flag, 1.0, 0.0)
    return r, s


def test_value_grad_and_jit_grad_match_revbench_grad(make, path):
    f = make(RESID)
    jf = to_jax(f, outputs="s")
    args = args_of()
    keep = [np.copy(a) for a in args]
    assert float(jf(*args)) == pytest.approx(f(*args_of())[1])
    g = revbench.grad(f, loss="s")(*args)
    for grad_fn in (jax.grad(jf, argnums=(0, 1, 2, 3)),
                    jax.jit(jax.grad(jf, argnums=(0, 1, 2, 3)))):
        got = grad_fn(*args)
        for a, b in zip(got, g[:4]):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-13)
            assert a.dtype == jnp.float64
    for a, b in zip(args, keep):
        np.testing.assert_array_equal(a, b)


def test_several_outputs_and_jax_vjp_against_jax_numpy(make, path):
    f = make(RESID)
    jf = to_jax(f, outputs=("r", "s"))
    args = tuple(jnp.asarray(a) for a in args_of())
    (r, s), pullback = jax.vjp(lambda *d: jf(*d, *args[4:]), *args[:4])
    (r_, s_), pullback_ = jax.vjp(lambda *d: jnp_resid(*d, *args[4:]), *args[:4])
    np.testing.assert_allclose(r, r_)
    np.testing.assert_allclose(s, s_)
    ct = (jnp.array([1.0, -2.0, 0.5]), jnp.asarray(3.0))
    for a, b in zip(pullback(ct), pullback_(ct)):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    # and revbench's own vjp agrees
    _, rb_pullback = revbench.vjp(f, *args_of(), outputs=("r", "s"), wrt=(0, 1, 2, 3))
    for a, b in zip(pullback(ct), rb_pullback(np.asarray(ct[0]), 3.0)):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_jit_of_value_and_grad_with_jax_code_around_it(make):
    f = make(RESID)
    jf = to_jax(f, outputs="r")
    args = args_of()

    def objective(a, x):
        return jnp.sum(jf(args[0], args[1], a, x, 2, True) ** 2)

    def reference(a, x):
        return jnp.sum(jnp_resid(args[0], args[1], a, x, 2, True)[0] ** 2)

    v, g = jax.jit(jax.value_and_grad(objective, argnums=(0, 1)))(args[2], args[3])
    v_, g_ = jax.value_and_grad(reference, argnums=(0, 1))(args[2], args[3])
    assert float(v) == pytest.approx(float(v_))
    for a, b in zip(g, g_):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_int_and_bool_arguments_pass_through(make):
    f = make(RESID)
    jf = to_jax(f, outputs=("s", "n"))
    _, n = jf(*args_of())
    assert n.dtype == jnp.int64 and int(n) == 2
    g = jax.grad(lambda x: jf(args_of()[0], 0.5, args_of()[2], x, 3, False)[0])(args_of()[3])
    np.testing.assert_allclose(g, args_of()[2])  # three terms, flag off
    with pytest.raises(TypeError, match="integer"):  # JAX's own refusal
        jax.grad(lambda n: jf(*args_of()[:4], n, True)[0])(2)


def test_jacrev_and_vmap_against_jacobian(make, path):
    f = make(RESID)
    jf = to_jax(f, outputs="r")
    args = args_of()
    J = revbench.jacobian(f, outputs="r", wrt="x")(*args)
    np.testing.assert_allclose(jax.jacrev(jf, argnums=3)(*args), J)  # cotangents batched
    np.testing.assert_allclose(jax.jit(jax.jacrev(jf, argnums=3))(*args), J)
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(4, 3))
    # forward, vmapped over x only
    r = jax.vmap(jf, in_axes=(None, None, None, 0, None, None))(*args[:3], xs, *args[4:])
    for i in range(4):
        np.testing.assert_allclose(r[i], f(np.zeros(3), 0.5, args[2], xs[i].copy(), 2, True)[0])
    # gradients per item: the batched Jacobian path, under jit
    loss = lambda a, x: jnp.sum(jf(args[0], args[1], a, x, 2, True) * jnp.array([1.0, 2.0, 3.0]))
    ga, gx = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(None, 0)))(args[2], xs)
    for i in range(4):
        Ja, Jx = revbench.jacobian(f, outputs="r", wrt=("a", "x"))(*args[:3], xs[i], *args[4:])
        np.testing.assert_allclose(ga[i], np.array([1.0, 2.0, 3.0]) @ Ja, rtol=1e-13)
        np.testing.assert_allclose(gx[i], np.array([1.0, 2.0, 3.0]) @ Jx, rtol=1e-13)


def test_vmap_with_large_outputs_runs_the_batched_vjp(make, monkeypatch, path):
    f = make(RESID)
    jf = to_jax(f, outputs="r")
    args = args_of()
    monkeypatch.setattr(rb_jax, "JACOBIAN_LIMIT", 1)  # no Jacobian: pullbacks
    xs = np.arange(6.0).reshape(2, 3)
    cts = np.array([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]])

    def pull(x, ct):
        return jax.vjp(lambda x: jf(*args[:3], x, *args[4:]), x)[1](ct)[0]

    def per_item(*_):
        raise AssertionError("x is batched: one batched vjp, not a vjp per item")

    with monkeypatch.context() as m:
        m.setattr(rb_jax.Export, "backward", per_item)
        got = jax.vmap(pull)(xs, cts)
    for i in range(2):
        Jx = revbench.jacobian(f, outputs="r", wrt="x")(*args[:3], xs[i], *args[4:])
        np.testing.assert_allclose(got[i], cts[i] @ Jx, rtol=1e-13)
    # only the cotangents batched: one unbatched vjp per cotangent
    got = jax.vmap(lambda ct: pull(xs[0], ct))(cts)
    Jx = revbench.jacobian(f, outputs="r", wrt="x")(*args[:3], xs[0], *args[4:])
    np.testing.assert_allclose(got, cts @ Jx, rtol=1e-13)


def test_nested_vmap(make, path):
    f = make("""
        def sq(y, x, w):
            y += w * x * x
    """)
    jf = to_jax(f, outputs="y")
    x = np.arange(6.0).reshape(2, 3)
    w = np.array([1.0, 2.0, 3.0])
    g = jax.vmap(jax.vmap(jax.grad(jf, argnums=(1, 2)), in_axes=(None, 0, 0)),
                 in_axes=(None, 0, None))(0.0, x, w)
    np.testing.assert_allclose(g[0], 2 * w * x)
    np.testing.assert_allclose(g[1], x * x)


def test_gradient_descent_under_jit(make):
    f = make("""
        def rosen(e, x):
            for i in range(len(x) - 1):
                e += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2
    """)
    energy = to_jax(f, outputs="e")

    @jax.jit
    def step(x):
        e, g = jax.value_and_grad(lambda x: energy(0.0, x))(x)
        return x - 1e-3 * g, e

    x = jnp.array([-1.0, 1.5, 0.5])
    first = None
    for _ in range(200):
        x, e = step(x)
        first = e if first is None else first
    assert float(e) < 0.5 * float(first)


def test_errors(make):
    f = make(RESID)
    jf = to_jax(f, outputs="r")
    args = args_of()
    with pytest.raises(TypeError, match=r"`x` has dtype float32.*float64"):
        jf(*args[:3], np.float32(args[3]), *args[4:])
    with pytest.raises(TypeError, match=r"`x` has dtype complex128"):
        jax.jit(jf)(*args[:3], args[3] + 0j, *args[4:])
    with pytest.raises(TypeError, match=r"takes 6 argument\(s\)"):
        jf(*args[:5])
    with pytest.raises(ValueError, match="'q' is not an argument"):
        to_jax(f, outputs="q")
    with pytest.raises(TypeError, match="reversible function"):
        to_jax(jnp.sin, outputs=0)
    bad = make(DIRTY)
    jb = to_jax(bad, outputs="y")
    with pytest.raises(ReversibilityError, match="ancilla `t` is not back"):
        jb(0.0, 2.0)  # a plain call: revbench's own error
    with pytest.raises(Exception, match="ancilla `t` is not back") as info:
        jax.jit(jb)(0.0, 2.0)  # through XLA's callback
    assert "JaxRuntimeError" in type(info.value).__name__ or isinstance(info.value, RuntimeError)


def test_32_bit_mode_is_refused_not_rounded(make):
    f = make(RESID)
    jf = to_jax(f, outputs="r")
    jax.config.update("jax_enable_x64", False)
    with pytest.raises(RuntimeError, match=r'jax.config.update\("jax_enable_x64", True\)'):
        jf(*args_of())


@pytest.mark.slow  # a benchmark script's smoke run, in a process of its own
def test_bench_interop_quick_writes_json(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_interop.py"
    out = tmp_path / "interop.json"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "overhead" in proc.stdout
    data = json.loads(out.read_text())
    assert data["quick"] is True and data["gradients_agree"]["jax"] is True
    assert "jax_value_and_grad_jit" in data["exports"]
    assert all(t > 0 for t in data["per_call_s"].values())


def test_a_second_derivative_through_the_export_says_what_to_use(make):
    """(JAX said "Differentiation rule for 'revbench_host_call' not implemented".)"""
    cube = make("def cube(e, x):\n    for i in range(len(x)):\n        e += x[i] * x[i] * x[i]\n")
    f = to_jax(cube, outputs="e")
    x = jnp.array([1.0, 2.0])
    np.testing.assert_allclose(jax.grad(lambda x: f(0.0, x))(x), [3.0, 12.0])
    with pytest.raises(NotImplementedError, match=r"revbench\.hvp, revbench\.hessian"):
        jax.hessian(lambda x: f(0.0, x))(x)


def test_an_argument_that_is_not_a_number_is_named(make):
    en = make("def en(e, x):\n    for i in range(len(x)):\n        e += x[i] * x[i]\n")
    f = to_jax(en, outputs="e")
    for bad in (None, "abc"):
        with pytest.raises(TypeError, match=r"to_jax\(en\): argument `x` must be an array or a "
                                            r"number"):
            f(0.0, bad)

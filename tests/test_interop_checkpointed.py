"""A checkpointed loop written in revbench, exported to JAX and PyTorch (issue 25, part 4).

Inside ``jax.grad`` / ``loss.backward()`` the loop keeps its strategy (Revolve, Bennett,
StoreAll, a two-level nest): its reverse sweep runs in revbench.  Each gradient is checked
against the framework's own gradient of the same loop (``lax.scan``, a PyTorch loop), and
against revbench's ``grad``, and a two-level nest (Revolve inside Periodic) exports as it is.
"""

from __future__ import annotations

import numpy as np
import pytest

from revbench import define, grad

SOURCE = '''
@reversible
def damped(y_new, y, t, h):
    for i in range(len(y)):
        y_new[i] += y[i] + h * (np.sin(y[i]) - 0.1 * y[i])

@reversible
def block(z_new, z, t, h, m):
    for s in checkpointed(range(m), Revolve(snapshots=2), new=z_new, old=z):
        damped(z_new, z, s, h)

@reversible
def two_level(out, yT, y0, h, n):
    m = 6                                   # inner steps per outer step
    for t in checkpointed(range(n // m), Periodic(every=2), new=yT, old=y0):
        block(yT, y0, t, h, m)
    del m
    for i in range(len(yT)):
        out += yT[i] * yT[i]

'''
#: one loop per strategy, the same step and loss
LOOP = '''
@reversible
def {name}(out, yT, y0, h, n):
    for t in checkpointed(range(n), {strategy}, new=yT, old=y0):
        damped(yT, y0, t, h)
    for i in range(len(yT)):
        out += yT[i] * yT[i]
'''
SOURCE += "".join(LOOP.format(name=name, strategy=strategy) for name, strategy in
                  (("revolve", "Revolve(snapshots=5)"), ("bennett", "Bennett(k=3)")))
N, H = 60, 0.05
Y0 = np.array([0.3, -0.2, 1.0, 2.5])


@pytest.fixture(scope="module")
def loops():
    from revbench.checkpoint import Bennett, Periodic, Revolve, checkpointed

    return define(SOURCE, {"np": np, "checkpointed": checkpointed, "Revolve": Revolve,
                           "Bennett": Bennett, "Periodic": Periodic})


def _reference(y0: np.ndarray) -> np.ndarray:
    """d |y_N|^2 / d y0 by forward-mode finite differences of plain NumPy (the oracle)."""
    def final(y):
        for _ in range(N):
            y = y + H * (np.sin(y) - 0.1 * y)
        return float(np.sum(y * y))

    eps = 1e-6
    return np.array([(final(y0 + eps * e) - final(y0 - eps * e)) / (2 * eps)
                     for e in np.eye(len(y0))])


@pytest.mark.parametrize("name", ["revolve", "bennett", "two_level"])
def test_jax_grad_of_a_checkpointed_loop(loops, name):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    from revbench.interop import to_jax

    final = to_jax(loops[name], outputs="out")
    g = jax.grad(lambda y: final(0.0, jnp.zeros(4), y, H, N))(jnp.asarray(Y0))
    jit_g = jax.jit(jax.grad(lambda y: final(0.0, jnp.zeros(4), y, H, N)))(jnp.asarray(Y0))

    def step(y, _):
        return y + H * (jnp.sin(y) - 0.1 * y), None

    scan_g = jax.grad(lambda y: jnp.sum(jax.lax.scan(step, y, None, length=N)[0] ** 2))(
        jnp.asarray(Y0))
    np.testing.assert_allclose(np.asarray(g), np.asarray(scan_g), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jit_g), np.asarray(scan_g), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), grad(loops[name], loss="out")(
        0.0, np.zeros(4), Y0, H, N)[2], rtol=1e-13)
    np.testing.assert_allclose(np.asarray(g), _reference(Y0), rtol=1e-6)


@pytest.mark.parametrize("name", ["revolve", "bennett", "two_level"])
def test_torch_backward_through_a_checkpointed_loop(loops, name):
    torch = pytest.importorskip("torch")
    from revbench.interop import to_torch

    final = to_torch(loops[name], outputs="out")
    y0 = torch.tensor(Y0, dtype=torch.float64, requires_grad=True)
    final(0.0, torch.zeros(4, dtype=torch.float64), y0, H, N).backward()

    y_ref = torch.tensor(Y0, dtype=torch.float64, requires_grad=True)
    y = y_ref
    for _ in range(N):
        y = y + H * (torch.sin(y) - 0.1 * y)
    (y * y).sum().backward()
    np.testing.assert_allclose(y0.grad.numpy(), y_ref.grad.numpy(), rtol=1e-12)


def _final_state_jacobian(y0: np.ndarray) -> np.ndarray:
    """d y_N / d y0 of the damped step (diagonal: the step acts elementwise), in NumPy."""
    y, d = y0.copy(), np.ones_like(y0)
    for _ in range(N):
        d = d * (1.0 + H * (np.cos(y) - 0.1))
        y = y + H * (np.sin(y) - 0.1 * y)
    return np.diag(d)


@pytest.mark.slow  # (JAX and PyTorch, both loops: 12 s)
@pytest.mark.parametrize("name", ["revolve", "two_level"])
def test_vector_outputs_through_a_checkpointed_loop(loops, name):
    """The loop carries one adjoint seed at a time, so a Jacobian through it is taken one
    row per sweep: revbench.jacobian (plain and batched), JAX's jacrev and a vector
    output's grad, and PyTorch's backward of a vector output all work."""
    f = loops[name]
    n = N if name == "revolve" else 60  # (two_level: 10 outer steps of 6)
    ref = _final_state_jacobian(Y0)
    J = __import__("revbench").jacobian(f, outputs="yT", wrt="y0")(0.0, np.zeros(4), Y0, H, n)
    np.testing.assert_allclose(J, ref, rtol=1e-11, atol=1e-14)
    Jb = __import__("revbench").jacobian(f, outputs="yT", wrt="y0", batch=("yT", "y0"))(
        0.0, np.zeros((2, 4)), np.stack([Y0, Y0]), H, n)
    np.testing.assert_allclose(Jb, np.stack([ref, ref]), rtol=1e-11, atol=1e-14)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from revbench.interop import to_jax, to_torch

    F = to_jax(f, outputs="yT")
    jac = jax.jacrev(lambda y: F(0.0, jax.numpy.zeros(4), y, H, n))(jax.numpy.asarray(Y0))
    np.testing.assert_allclose(np.asarray(jac), ref, rtol=1e-11, atol=1e-14)
    both = to_jax(f, outputs=("out", "yT"))
    g = jax.grad(lambda y: both(0.0, jax.numpy.zeros(4), y, H, n)[0])(jax.numpy.asarray(Y0))
    np.testing.assert_allclose(np.asarray(g), grad(f, loss="out")(0.0, np.zeros(4), Y0, H, n)[2],
                               rtol=1e-12)
    torch = pytest.importorskip("torch")
    T = to_torch(f, outputs="yT")
    y0 = torch.tensor(Y0, dtype=torch.float64, requires_grad=True)
    T(0.0, torch.zeros(4, dtype=torch.float64), y0, H, n).sum().backward()
    np.testing.assert_allclose(y0.grad.numpy(), ref.sum(axis=0), rtol=1e-11)

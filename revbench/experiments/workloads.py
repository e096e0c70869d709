"""The built-in workloads of the experiments (``experiments.md`` §8), as reversible time steps.

Each workload is a reversible step (and a reversible loss of the final state) for
:class:`revbench.checkpoint.TimeLoop`, seeded arguments, and an independent NumPy
reference -- a forward loop that stores every state, then a hand-derived adjoint
loop -- against which the strategies' gradients are checked.

========  ======  ============  ==========================================================
name      kind    step          what it computes
========  ======  ============  ==========================================================
heat      sparse  out-of-place  explicit Euler for ``u' = kappa L u + f``, ``L`` the 5-point
                                CSR Laplacian of an ``m x m`` grid (Dirichlet)
wave      sparse  in-place      the wave equation ``u'' = c2 L u`` by symplectic Euler
                                (leapfrog): ``v += dt c2 L u; u += dt v``
rnn       ML      out-of-place  a tanh RNN over an input sequence ``X`` (one row per step):
                                ``h_new = tanh(W h + U x_t + b)``
revnet    ML      in-place      a reversible residual network of additive-coupling blocks,
                                the weights shared by every block (one block per step)
========  ======  ============  ==========================================================

The steps are written as a user of ``docs/language.md`` would write them: the ML steps
as a model is written, with matrix statements (``h_new += np.tanh(W @ h + U @ X[t] + b)``,
``y += np.tanh(x @ W + b)``: the products on the matrix routine, so that comparing
reverse computing with checkpointing measures the methods, not scalar loops); the sparse
steps with ancillas computed in a ``with routine:`` block and uncomputed by
``~routine`` and :mod:`revbench.lib`'s ``csr_matvec`` and ``sumsq``.  An out-of-place step adds its
new state in one update per element, so that its inverse (Bennett's uncomputation)
brings it back to zero exactly.

Importing this module compiles nothing (``@reversible`` compiles on the first call)
and imports neither Numba nor SciPy; SciPy builds the Laplacian on demand.

```python
from revbench.experiments.workloads import WORKLOADS
w = WORKLOADS["heat"]
loop, args = w.loop(100), w.args(100, seed=0)      # args = (*state0, *params)
value, grads = loop.value_and_grad(*args)
ref_value, ref_grads = w.reference(100, args)       # NumPy, same alignment
```
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from revbench.function import reversible
from revbench.lang.markers import routine
from revbench.lib.linalg import sumsq
from revbench.lib.sparse import csr_matvec

if TYPE_CHECKING:
    from revbench.checkpoint import TimeLoop

__all__ = ["WORKLOADS", "Workload", "laplacian_2d"]


# --------------------------------------------------------------------------- #
# the workload object
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Workload:
    """A built-in workload: a reversible step and loss, its arguments, and a NumPy reference.

    ``sizes`` holds the default size knobs; :meth:`loop` and :meth:`args` take them as
    keywords (``WORKLOADS["heat"].args(100, m=20)``).  ``step`` and ``loss`` are the
    reversible functions the :class:`~revbench.checkpoint.TimeLoop` runs.
    """

    name: str
    description: str
    kind: str
    inplace: bool
    n_state: int
    sizes: dict = field(compare=False)
    step: Any = field(repr=False, compare=False)
    loss: Any = field(repr=False, compare=False)
    _make: Callable[..., tuple] = field(repr=False, compare=False)
    _forward: Callable[[int, tuple], list] = field(repr=False, compare=False)
    _adjoint: Callable[[int, tuple, list], tuple] = field(repr=False, compare=False)

    def _size(self, size: dict) -> dict:
        unknown = sorted(set(size) - set(self.sizes))
        if unknown:
            raise TypeError(f"workload {self.name!r} has no size knob {unknown[0]!r}; its knobs "
                            f"are {', '.join(f'{k}={v}' for k, v in self.sizes.items())}")
        out = {**self.sizes, **size}
        for k, v in out.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"size knob {k} of workload {self.name!r} must be an int >= 1, "
                                 f"got {v!r}")
        return {k: int(v) for k, v in out.items()}

    def loop(self, n_steps: int, **size: int) -> TimeLoop:
        """The :class:`~revbench.checkpoint.TimeLoop` of ``n_steps`` steps.  (The steps work
        for any size; ``size`` is only checked here, the arguments carry it.)"""
        from revbench.checkpoint import TimeLoop

        self._size(size)
        return TimeLoop(self.step, n_steps, loss=self.loss, n_state=self.n_state,
                        inplace=self.inplace)

    def args(self, n_steps: int, seed: int = 0, **size: int) -> tuple:
        """``(*state0, *params)``: fresh arrays, the same for the same ``seed`` and sizes."""
        _check_steps(n_steps)
        return self._make(int(n_steps), np.random.default_rng([seed, _SEED_SALT[self.name]]),
                          **self._size(size))

    def trajectory(self, n_steps: int, args: tuple) -> list[tuple[np.ndarray, ...]]:
        """The states ``s_0 .. s_T`` of the NumPy forward loop (each a tuple of ``n_state`` arrays)."""
        _check_steps(n_steps)
        return self._forward(int(n_steps), tuple(args))

    def reference(self, n_steps: int, args: tuple) -> tuple[float, tuple]:
        """``(value, grads)`` by NumPy alone: the forward loop, storing every state, then a
        hand-derived adjoint loop.  ``grads`` is aligned with ``args``; ``None`` for the
        integer arrays (the CSR index arrays)."""
        states = self.trajectory(n_steps, args)
        return self._adjoint(int(n_steps), tuple(args), states)


def _check_steps(n_steps: int) -> None:
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be an int >= 1, got {n_steps!r}")


_SEED_SALT = {"heat": 1, "wave": 2, "rnn": 3, "revnet": 4}


# --------------------------------------------------------------------------- #
# the sparse Laplacian
# --------------------------------------------------------------------------- #
def laplacian_2d(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The 5-point Laplacian of the unit square with ``m x m`` interior points and zero
    (Dirichlet) boundary values, as CSR arrays ``(data, indices, indptr)`` -- float64 values,
    sorted int64 indices -- and the grid spacing ``h = 1 / (m + 1)``.

    ``L = (kron(I, T) + kron(T, I)) / h**2`` with ``T = tridiag(1, -2, 1)``; its eigenvalues
    lie in ``(-8 / h**2, 0)``.
    """
    import scipy.sparse as sp

    h = 1.0 / (m + 1)
    T = sp.diags([np.ones(m - 1), -2.0 * np.ones(m), np.ones(m - 1)], [-1, 0, 1])
    eye = sp.identity(m)
    L = ((sp.kron(eye, T) + sp.kron(T, eye)) / h**2).tocsr()
    L.sum_duplicates()
    L.sort_indices()
    return (np.ascontiguousarray(L.data, dtype=np.float64),
            np.ascontiguousarray(L.indices, dtype=np.int64),
            np.ascontiguousarray(L.indptr, dtype=np.int64), h)


def _csr_rows(indptr: np.ndarray) -> np.ndarray:
    """The row of every stored value."""
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def _csr(data, indices, indptr):
    """A SciPy CSR matrix on the given arrays (for the NumPy reference)."""
    import scipy.sparse as sp

    n = len(indptr) - 1
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


def _bump(m: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    """A smooth bump ``sin(pi x) sin(pi y)`` on the interior grid, plus seeded noise, flattened."""
    x = np.arange(1, m + 1) / (m + 1)
    u = np.outer(np.sin(np.pi * x), np.sin(np.pi * x)).ravel()
    return u + noise * rng.standard_normal(m * m)


# --------------------------------------------------------------------------- #
# heat: out-of-place explicit Euler with a CSR Laplacian
# --------------------------------------------------------------------------- #
#: dt * kappa / h**2 (explicit Euler is stable up to 1/4 for the 5-point Laplacian)
HEAT_CFL = 0.2


@reversible
def heat_step(u_new, u, t, data, indices, indptr, f, kappa, dt):
    """``u_new += u + dt * (kappa * L u + f)``: one explicit Euler step of the heat equation
    with source ``f``; ``L = (data, indices, indptr)`` in CSR."""
    with routine:
        lu = np.zeros_like(u)
        csr_matvec(lu, data, indices, indptr, u)
    u_new += u + dt * (kappa * lu + f)
    ~routine


@reversible
def heat_loss(out, u, data, indices, indptr, f, kappa, dt):
    """``out += sum(u ** 2)``."""
    sumsq(out, u)


def _heat_make(n_steps, rng, *, m):
    data, indices, indptr, h = laplacian_2d(m)
    kappa = 1.0
    dt = HEAT_CFL * h * h / kappa
    u0 = _bump(m, rng, 0.1)
    f = 1.0 + 0.5 * rng.standard_normal(m * m)        # a noisy source: steady state -L u = f
    return u0, data, indices, indptr, f, kappa, dt


def _heat_forward(n_steps, args):
    u0, data, indices, indptr, f, kappa, dt = args
    L = _csr(data, indices, indptr)
    states = [(np.array(u0, dtype=np.float64),)]
    for _ in range(n_steps):
        (u,) = states[-1]
        states.append((u + dt * (kappa * (L @ u) + f),))
    return states


def _heat_adjoint(n_steps, args, states):
    _, data, indices, indptr, f, kappa, dt = args
    L = _csr(data, indices, indptr)
    rows = _csr_rows(indptr)
    uT = states[-1][0]
    value = float(uT @ uT)
    a = 2.0 * uT                                  # d value / d u_T
    g_data, g_f, g_kappa, g_dt = np.zeros_like(data), np.zeros_like(f), 0.0, 0.0
    for k in range(n_steps - 1, -1, -1):          # u_{k+1} = u_k + dt (kappa L u_k + f)
        u = states[k][0]
        Lu = L @ u
        g_data += dt * kappa * a[rows] * u[indices]
        g_f += dt * a
        g_kappa += dt * float(a @ Lu)
        g_dt += float(a @ (kappa * Lu + f))
        a = a + dt * kappa * (L.T @ a)
    return value, (a, g_data, None, None, g_f, g_kappa, g_dt)


# --------------------------------------------------------------------------- #
# wave: in-place symplectic Euler (leapfrog) with a CSR Laplacian
# --------------------------------------------------------------------------- #
#: dt * sqrt(c2) / h (symplectic Euler is stable below 1 / sqrt(2) for the 5-point Laplacian)
WAVE_CFL = 0.5


@reversible
def wave_step(u, v, t, data, indices, indptr, c2, dt):
    """One leapfrog step of ``u'' = c2 L u``: ``v += dt * c2 * L u``, then ``u += dt * v``.
    Each half is a shear, so the step runs backwards exactly (up to rounding)."""
    with routine:
        lu = np.zeros_like(u)
        csr_matvec(lu, data, indices, indptr, u)
    v += (dt * c2) * lu
    ~routine
    u += dt * v


@reversible
def wave_loss(out, u, v, data, indices, indptr, c2, dt):
    """``out += sum(u ** 2) + sum(v ** 2)``."""
    sumsq(out, u)
    sumsq(out, v)


def _wave_make(n_steps, rng, *, m):
    data, indices, indptr, h = laplacian_2d(m)
    c2 = 1.0
    dt = WAVE_CFL * h / math.sqrt(c2)
    u0 = _bump(m, rng, 0.1)
    v0 = 0.1 * rng.standard_normal(m * m)
    return u0, v0, data, indices, indptr, c2, dt


def _wave_forward(n_steps, args):
    u0, v0, data, indices, indptr, c2, dt = args
    L = _csr(data, indices, indptr)
    states = [(np.array(u0, dtype=np.float64), np.array(v0, dtype=np.float64))]
    for _ in range(n_steps):
        u, v = states[-1]
        v = v + dt * c2 * (L @ u)
        states.append((u + dt * v, v))
    return states


def _wave_adjoint(n_steps, args, states):
    _, _, data, indices, indptr, c2, dt = args
    L = _csr(data, indices, indptr)
    rows = _csr_rows(indptr)
    uT, vT = states[-1]
    value = float(uT @ uT + vT @ vT)
    au, av = 2.0 * uT, 2.0 * vT
    g_data, g_c2, g_dt = np.zeros_like(data), 0.0, 0.0
    for k in range(n_steps - 1, -1, -1):
        u = states[k][0]
        v_new = states[k + 1][1]
        # u_{k+1} = u_k + dt v_{k+1}
        av = av + dt * au
        g_dt += float(au @ v_new)
        # v_{k+1} = v_k + dt c2 L u_k
        Lu = L @ u
        g_data += dt * c2 * av[rows] * u[indices]
        g_c2 += dt * float(av @ Lu)
        g_dt += c2 * float(av @ Lu)
        au = au + dt * c2 * (L.T @ av)
    return value, (au, av, g_data, None, None, g_c2, g_dt)


# --------------------------------------------------------------------------- #
# rnn: out-of-place tanh recurrent network over an input sequence
# --------------------------------------------------------------------------- #
@reversible
def rnn_step(h_new, h, t, W, U, b, X):
    """``h_new += tanh(W h + U X[t] + b)``, as a model is written: the products and the
    bias in one statement (``W @ h`` on the matrix routine, held in an ancilla the
    compiler uncomputes after the statement; ``U @ X[t]``, of a row, a loop of sums)."""
    h_new += np.tanh(W @ h + U @ X[t] + b)


@reversible
def rnn_loss(out, h, W, U, b, X):
    """``out += sum(h ** 2)``."""
    out += np.sum(h * h)


def _rnn_make(n_steps, rng, *, d, d_in):
    W = 0.9 / math.sqrt(d) * rng.standard_normal((d, d))
    U = 1.0 / math.sqrt(d_in) * rng.standard_normal((d, d_in))
    b = 0.1 * rng.standard_normal(d)
    X = rng.standard_normal((n_steps, d_in))
    h0 = 0.1 * rng.standard_normal(d)
    return h0, W, U, b, X


def _rnn_forward(n_steps, args):
    h0, W, U, b, X = args
    if X.shape[0] < n_steps:
        raise ValueError(f"rnn: the input sequence X has {X.shape[0]} rows, fewer than "
                         f"n_steps={n_steps}")
    states = [(np.array(h0, dtype=np.float64),)]
    for k in range(n_steps):
        (h,) = states[-1]
        states.append((np.tanh(W @ h + U @ X[k] + b),))
    return states


def _rnn_adjoint(n_steps, args, states):
    _, W, U, b, X = args
    hT = states[-1][0]
    value = float(hT @ hT)
    a = 2.0 * hT
    gW, gU, gb, gX = np.zeros_like(W), np.zeros_like(U), np.zeros_like(b), np.zeros_like(X)
    for k in range(n_steps - 1, -1, -1):          # h_{k+1} = tanh(W h_k + U X[k] + b)
        h, h_new = states[k][0], states[k + 1][0]
        delta = a * (1.0 - h_new * h_new)
        gW += np.outer(delta, h)
        gU += np.outer(delta, X[k])
        gb += delta
        gX[k] = U.T @ delta
        a = W.T @ delta
    return value, (a, gW, gU, gb, gX)


# --------------------------------------------------------------------------- #
# revnet: in-place additive coupling blocks with shared weights
# --------------------------------------------------------------------------- #
@reversible
def coupling(y, x, W, b):
    """``y += tanh(x @ W + b)`` for ``(batch, d)`` arrays ``x``, ``y``, the bias added to
    every row: the product on the matrix routine, into an ancilla the compiler uncomputes
    after the statement.  ``y`` must not be ``x``: that is what makes a pair of couplings
    invertible."""
    y += np.tanh(x @ W + b)


@reversible
def revnet_step(x1, x2, t, W1, b1, W2, b2):
    """One reversible residual block: ``x1 += tanh(x2 @ W1 + b1)``, then
    ``x2 += tanh(x1 @ W2 + b2)``.  The same weights in every block."""
    coupling(x1, x2, W1, b1)
    coupling(x2, x1, W2, b2)


@reversible
def revnet_loss(out, x1, x2, W1, b1, W2, b2):
    """``out += sum(x1 ** 2) + sum(x2 ** 2)``."""
    out += np.sum(x1 * x1) + np.sum(x2 * x2)


def _revnet_make(n_steps, rng, *, batch, d):
    """Hamiltonian initialisation (Haber & Ruthotto, "Stable architectures for deep neural
    networks", 2017): ``W2 = -W1^T``, ``b2 = -b1``.  The linearised block is then symplectic
    with its eigenvalues on the unit circle, so the states stay bounded over many blocks and
    neither direction amplifies round-off (``Reverse()`` recovers the input to about 1e-12
    after 5e4 blocks).  With independent random weights the blocks saturate, the states grow
    linearly, and running them backwards loses about 1e-4 after 1e4 blocks.  (``W2`` and
    ``b2`` are parameters of their own all the same: only their initial values are tied.)
    """
    x1 = 0.5 * rng.standard_normal((batch, d))
    x2 = 0.5 * rng.standard_normal((batch, d))
    W1 = 0.2 / math.sqrt(d) * rng.standard_normal((d, d))
    b1 = 0.01 * rng.standard_normal(d)
    return x1, x2, W1, b1, -W1.T.copy(), -b1


def _revnet_forward(n_steps, args):
    x1, x2, W1, b1, W2, b2 = args
    states = [(np.array(x1, dtype=np.float64), np.array(x2, dtype=np.float64))]
    for _ in range(n_steps):
        x1, x2 = states[-1]
        x1 = x1 + np.tanh(x2 @ W1 + b1)
        states.append((x1, x2 + np.tanh(x1 @ W2 + b2)))
    return states


def _revnet_adjoint(n_steps, args, states):
    _, _, W1, b1, W2, b2 = args
    x1T, x2T = states[-1]
    value = float(np.sum(x1T * x1T) + np.sum(x2T * x2T))
    a1, a2 = 2.0 * x1T, 2.0 * x2T
    gW1, gb1, gW2, gb2 = (np.zeros_like(W1), np.zeros_like(b1), np.zeros_like(W2),
                          np.zeros_like(b2))
    for k in range(n_steps - 1, -1, -1):
        x2 = states[k][1]
        x1_new = states[k + 1][0]
        # x2_{k+1} = x2_k + tanh(x1_{k+1} W2 + b2)
        d2 = a2 * (1.0 - np.tanh(x1_new @ W2 + b2) ** 2)
        gW2 += x1_new.T @ d2
        gb2 += d2.sum(axis=0)
        a1 = a1 + d2 @ W2.T
        # x1_{k+1} = x1_k + tanh(x2_k W1 + b1)
        d1 = a1 * (1.0 - np.tanh(x2 @ W1 + b1) ** 2)
        gW1 += x2.T @ d1
        gb1 += d1.sum(axis=0)
        a2 = a2 + d1 @ W1.T
    return value, (a1, a2, gW1, gb1, gW2, gb2)


# --------------------------------------------------------------------------- #
# the registry
# --------------------------------------------------------------------------- #
WORKLOADS: dict[str, Workload] = {
    "heat": Workload(
        "heat", "heat equation with a source, explicit Euler, 5-point CSR Laplacian on an "
                "m x m grid",
        "sparse", False, 1, {"m": 10}, heat_step, heat_loss,
        _heat_make, _heat_forward, _heat_adjoint),
    "wave": Workload(
        "wave", "wave equation, leapfrog (symplectic Euler, reversible), 5-point CSR "
                "Laplacian on an m x m grid",
        "sparse", True, 2, {"m": 10}, wave_step, wave_loss,
        _wave_make, _wave_forward, _wave_adjoint),
    "rnn": Workload(
        "rnn", "tanh recurrent network h' = tanh(W h + U x_t + b) over an input sequence, "
               "gradient wrt the weights",
        "ML", False, 1, {"d": 16, "d_in": 8}, rnn_step, rnn_loss,
        _rnn_make, _rnn_forward, _rnn_adjoint),
    "revnet": Workload(
        "revnet", "reversible residual network of additive-coupling blocks, one block per "
                  "step, weights shared by all blocks",
        "ML", True, 2, {"batch": 8, "d": 16}, revnet_step, revnet_loss,
        _revnet_make, _revnet_forward, _revnet_adjoint),
}

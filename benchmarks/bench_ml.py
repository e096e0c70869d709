#!/usr/bin/env python
"""Seven machine-learning losses in revbench against hand-written Numba, JAX and PyTorch.

Run it as::

    python benchmarks/bench_ml.py [--quick] [--reps N] [--out PATH] [--only NAME ...]
                                  [--threads 1|all] [--no-peers]

Each program is written in revbench's language the way a new user writes it from the
documentation alone (``docs/language.md`` sections 6, 7 and 9, ``docs/ad.md``,
``docs/checkpointing.md``): plain loops, ``with routine:`` ... ``~routine`` for the
intermediate values, matrix products ``W @ x`` where the docs allow them, ``np.dot``,
``np.sum``, ``np.max``, ``np.tanh``, ``np.exp``, ``np.log1p``; float64 throughout.

Programs (``--quick`` shrinks the number of samples / steps / tokens about 10x):

``logreg``       logistic regression, N = 10^5 samples, d = 32; gradient w.r.t. ``w``;
``mlp``          a 32-64-8 tanh network's squared error, N = 2000; w.r.t. W1, b1, W2, b2;
``softmax``      softmax cross-entropy, N = 10^4, d = 64, 10 classes; w.r.t. W, b;
``conv1d``       a 16-tap correlation + softplus, n = 10^5; w.r.t. w, b;
``rnn``          a tanh RNN, T = 1000, hidden 32, input 8, every state kept in an array
                 ``H`` of shape (T + 1, 32); w.r.t. Wh, Wx and the initial state ``H[0]``;
``rnn_revolve``  the same RNN with its loop ``checkpointed(range(T), Revolve(snapshots=10),
                 new=hT, old=h0)``, the step a reversible function; w.r.t. h0, Wh, Wx;
``attention``    one attention head, n = 128 tokens, d = 32; w.r.t. Wq, Wk, Wv;
``mlp_matrix``   the MLP written as a model reads (``docs/language.md``, "A model as it
                 reads"): ``H += np.tanh(X @ W1.T + b1)``, ``loss += np.sum((H @ W2.T + b2
                 - Y) ** 2)``, the same data and references as ``mlp``;
``attention_matrix``  the attention head written with whole matrices (``Q += X @ Wq.T``,
                 ``S += Q @ K.T / sqrt(d)``, a row softmax broadcast over columns), the same
                 data and references as ``attention``.

For each program it times, repetitions interleaved, medians (and minimums):

* ``rb fwd``: the revbench forward run ``f(*args)`` of ``@reversible(check=False)``;
* ``rb vg``: ``revbench.value_and_grad(f, loss="loss", wrt=(the parameters))`` of that
  function, and ``rb vg chk`` of the same source made reversible with checks on (the
  default);
* ``njit``: a hand-written ``@numba.njit`` objective and gradient of the same scalar loops
  (forward pass, then a hand-written reverse pass), returning the loss and the gradients;
* ``jax``: ``jax.jit(jax.value_and_grad(loss_fn, argnums=...))`` (``jax_enable_x64``, CPU),
  the array formula as a JAX user writes it (``lax.scan`` for the RNN);
* ``torch``: forward plus ``backward()`` in float64 (eager autograd).

Before timing, every gradient (revbench with and without checks, hand-written, JAX,
PyTorch) is compared with the hand-written one (``np.allclose``, rtol 1e-9); a mismatch
stops the run with an error.  Every case is then called once more (warm-up; compilation
is excluded from the timings, revbench's compiled code is cached on disk) and repeated,
the cases of one program interleaved; slow cases get fewer repetitions (at least 3).

The main table is single-threaded: ``NUMBA_NUM_THREADS=1`` (and the BLAS variables),
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"`` and
``torch.set_num_threads(1)``, set before anything is imported.  ``--threads all`` then runs
the whole benchmark again in a subprocess without those settings (every core for JAX and
PyTorch, and for revbench's matrix products -- ``revbench.threads``, ``docs/performance.md``;
the hand-written code and revbench's elementwise loops are one thread either way) and adds
its table.

Results (times, ratios, sizes, ``machine_info()``, ``loadavg()``) go to
``benchmarks/results/bench_ml.json`` (or ``--out``).  The table also gives the ratios
of the fastest repetitions (min / min), which a busy machine disturbs less than medians.
A full run takes about a minute on the project's 2-core machine once revbench's cache
holds the programs (the first run compiles them: a minute or two more), ``--quick``
about 20 s; ``--threads all`` doubles that.  On a 2-core machine the all-cores figures
are noisy: multi-threaded PyTorch and JAX compete with the machine's other work.
"""

from __future__ import annotations

import os

_THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "MKL_NUM_THREADS", "XLA_FLAGS")
#: the thread settings as the caller had them (the all-cores subprocess gets these back)
_CALLER_ENV = {v: os.environ.get(v) for v in _THREAD_VARS}
#: set in the environment of the ``--threads all`` subprocess
_ALL_CORES_ENV = "_BENCH_ML_ALL_CORES"

if __name__ == "__main__":
    if os.environ.get(_ALL_CORES_ENV) != "1":
        # one thread, before NumPy / Numba / JAX / PyTorch are imported
        for _var in _THREAD_VARS[:-1]:
            os.environ[_var] = "1"
        os.environ["XLA_FLAGS"] = ("--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(HERE), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import _common  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
from natural_reference import mlp_value  # noqa: E402 (the MLP's hand-written loops)
from natural_reference import mlp_value_and_grad as mlp_grad  # noqa: E402

from revbench import reversible, value_and_grad  # noqa: E402
from revbench.checkpoint import Revolve, checkpointed  # noqa: E402 (used in the language)

PROGRAMS = ("logreg", "mlp", "softmax", "conv1d", "rnn", "rnn_revolve", "attention",
            "mlp_matrix", "attention_matrix")
#: a program written another way, on the data (and against the references) of another
SAME_AS = {"mlp_matrix": "mlp", "attention_matrix": "attention"}
FULL = {"logreg": (100_000, 32), "mlp": (2000, 32, 64, 8), "softmax": (10_000, 64, 10),
        "conv1d": (100_000, 16), "rnn": (1000, 32, 8), "attention": (128, 32),
        "reps": 15, "case_budget_s": 4.0}
QUICK = {"logreg": (10_000, 32), "mlp": (200, 32, 64, 8), "softmax": (1000, 64, 10),
         "conv1d": (10_000, 16), "rnn": (100, 32, 8), "attention": (40, 32),
         "reps": 3, "case_budget_s": 1.0}
RTOL = 1e-9
REF = "njit"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# =======================================================================================
# The revbench programs, written from the docs.  Each is a plain function made reversible
# twice: NAME_fast (check=False) and NAME (checks on, the default).
# =======================================================================================


def logreg_src(loss, w, X, y):
    for i in range(X.shape[0]):
        with routine as lin:                       # noqa: F821 (a revbench keyword)
            z = np.dot(X[i], w)
        loss += np.log1p(np.exp(z)) - y[i] * z
        ~lin


def mlp_src(loss, W1, b1, W2, b2, X, Y):
    for s in range(X.shape[0]):
        with routine as hidden:                    # noqa: F821
            h = np.zeros(len(b1))
            h += np.tanh(W1 @ X[s] + b1)
        loss += np.sum((W2 @ h + b2 - Y[s]) ** 2)
        ~hidden


def softmax_src(loss, W, b, X, labels):
    for i in range(X.shape[0]):
        with routine as logits:                    # noqa: F821
            z = np.zeros(len(b))
            z += W @ X[i] + b
            m = np.max(z)
            s = np.sum(np.exp(z - m))
        loss += m + np.log(s) - z[labels[i]]
        ~logits


def conv1d_src(loss, w, b, x):
    K = len(w)
    for i in range(len(x) - K + 1):
        with routine as pre:                       # noqa: F821
            z = np.dot(w, x[i:i + K]) + b
        loss += np.log1p(np.exp(z))
        ~pre


def rnn_src(loss, H, Wh, Wx, X, Y):
    # H is (T + 1, hidden): row 0 the initial state, rows 1.. enter at zero
    T = X.shape[0]
    for t in range(T):
        H[t + 1] += np.tanh(Wh @ H[t] + Wx @ X[t])
    loss += np.sum((H[T] - Y) ** 2)


@reversible
def rnn_step(h_new, h, t, Wh, Wx, X):
    h_new += np.tanh(Wh @ h + Wx @ X[t])


def rnn_revolve_src(loss, hT, h0, Wh, Wx, X, Y):
    T = X.shape[0]
    for t in checkpointed(range(T), Revolve(snapshots=10), new=hT, old=h0):
        rnn_step(hT, h0, t, Wh, Wx, X)
    loss += np.sum((hT - Y) ** 2)


def attention_src(loss, Wq, Wk, Wv, X, Y):
    n = X.shape[0]
    d = Wq.shape[0]
    with routine as proj:                          # noqa: F821
        Q = np.zeros((n, d))
        K = np.zeros((n, d))
        V = np.zeros((n, d))
        for i in range(n):
            Q[i] += Wq @ X[i]
            K[i] += Wk @ X[i]
            V[i] += Wv @ X[i]
    with routine as att:                           # noqa: F821
        S = np.zeros((n, n))
        M = np.zeros(n)
        P = np.zeros((n, n))
        Z = np.zeros(n)
        O = np.zeros((n, d))                       # noqa: E741
        for i in range(n):
            S[i] += K @ Q[i] / math.sqrt(d)
            M[i] += np.max(S[i])
            P[i] += np.exp(S[i] - M[i])
            Z[i] += np.sum(P[i])
            O[i] += (P[i] @ V) / Z[i]
    loss += np.sum((O - Y) ** 2)
    ~att
    ~proj


def mlp_matrix_src(loss, W1, b1, W2, b2, X, Y):
    with routine as hidden:                        # noqa: F821
        H = np.zeros((X.shape[0], W1.shape[0]))
        H += np.tanh(X @ W1.T + b1)
    loss += np.sum((H @ W2.T + b2 - Y) ** 2)
    ~hidden


def attention_matrix_src(loss, Wq, Wk, Wv, X, Y):
    n = X.shape[0]
    d = Wq.shape[0]
    with routine as proj:                          # noqa: F821
        Q = np.zeros((n, d))
        K = np.zeros((n, d))
        V = np.zeros((n, d))
        Q += X @ Wq.T
        K += X @ Wk.T
        V += X @ Wv.T
    with routine as att:                           # noqa: F821
        S = np.zeros((n, n))
        M = np.zeros(n)
        P = np.zeros((n, n))
        Z = np.zeros(n)
        O = np.zeros((n, d))                       # noqa: E741
        S += Q @ K.T / math.sqrt(d)
        M += np.max(S, axis=1)
        P += np.exp(S.T - M).T                     # each row less its largest
        Z += np.sum(P, axis=1)
        O += ((P @ V).T / Z).T                    # noqa: E741
    loss += np.sum((O - Y) ** 2)
    ~att
    ~proj


logreg_fast, logreg = reversible(check=False)(logreg_src), reversible(logreg_src)
mlp_fast, mlp = reversible(check=False)(mlp_src), reversible(mlp_src)
softmax_fast, softmax = reversible(check=False)(softmax_src), reversible(softmax_src)
conv1d_fast, conv1d = reversible(check=False)(conv1d_src), reversible(conv1d_src)
rnn_fast, rnn = reversible(check=False)(rnn_src), reversible(rnn_src)
rnn_revolve_fast = reversible(check=False)(rnn_revolve_src)
rnn_revolve = reversible(rnn_revolve_src)
attention_fast, attention = reversible(check=False)(attention_src), reversible(attention_src)
mlp_matrix_fast, mlp_matrix = reversible(check=False)(mlp_matrix_src), reversible(mlp_matrix_src)
attention_matrix_fast = reversible(check=False)(attention_matrix_src)
attention_matrix = reversible(attention_matrix_src)


# =======================================================================================
# Hand-written @njit objectives and reverse-mode gradients of the same scalar loops
# =======================================================================================

njit = numba.njit(cache=True)


@njit
def logreg_value(w, X, y):
    loss = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * w[j]
        loss += math.log1p(math.exp(z)) - y[i] * z
    return loss


@njit
def logreg_grad(w, X, y):
    gw = np.zeros_like(w)
    loss = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * w[j]
        e = math.exp(z)
        loss += math.log1p(e) - y[i] * z
        dz = e / (1.0 + e) - y[i]
        for j in range(X.shape[1]):
            gw[j] += dz * X[i, j]
    return loss, gw


@njit
def _softmax_sample(W, b, x, z):
    """z = W x + b; returns (max, sum of exp(z - max))."""
    m = -np.inf
    for c in range(W.shape[0]):
        a = b[c]
        for j in range(W.shape[1]):
            a += W[c, j] * x[j]
        z[c] = a
        if a > m:
            m = a
    s = 0.0
    for c in range(W.shape[0]):
        s += math.exp(z[c] - m)
    return m, s


@njit
def softmax_value(W, b, X, labels):
    z = np.empty(W.shape[0])
    loss = 0.0
    for i in range(X.shape[0]):
        m, s = _softmax_sample(W, b, X[i], z)
        loss += m + math.log(s) - z[labels[i]]
    return loss


@njit
def softmax_grad(W, b, X, labels):
    gW, gb = np.zeros_like(W), np.zeros_like(b)
    z = np.empty(W.shape[0])
    loss = 0.0
    for i in range(X.shape[0]):
        m, s = _softmax_sample(W, b, X[i], z)
        loss += m + math.log(s) - z[labels[i]]
        for c in range(W.shape[0]):
            dz = math.exp(z[c] - m) / s - (1.0 if c == labels[i] else 0.0)
            gb[c] += dz
            for j in range(W.shape[1]):
                gW[c, j] += dz * X[i, j]
    return loss, gW, gb


@njit
def conv1d_value(w, b, x):
    K = len(w)
    loss = 0.0
    for i in range(len(x) - K + 1):
        z = b
        for k in range(K):
            z += w[k] * x[i + k]
        loss += math.log1p(math.exp(z))
    return loss


@njit
def conv1d_grad(w, b, x):
    K = len(w)
    gw = np.zeros_like(w)
    gb = 0.0
    loss = 0.0
    for i in range(len(x) - K + 1):
        z = b
        for k in range(K):
            z += w[k] * x[i + k]
        e = math.exp(z)
        loss += math.log1p(e)
        dz = e / (1.0 + e)
        gb += dz
        for k in range(K):
            gw[k] += dz * x[i + k]
    return loss, gw, gb


@njit
def _rnn_forward(h0, Wh, Wx, X, H):
    """Every state into H (T + 1, hidden), H[0] = h0."""
    nh = len(h0)
    H[0, :] = h0
    for t in range(X.shape[0]):
        for i in range(nh):
            a = 0.0
            for j in range(nh):
                a += Wh[i, j] * H[t, j]
            for j in range(Wx.shape[1]):
                a += Wx[i, j] * X[t, j]
            H[t + 1, i] = math.tanh(a)


@njit
def rnn_value(h0, Wh, Wx, X, Y):
    T = X.shape[0]
    H = np.empty((T + 1, len(h0)))
    _rnn_forward(h0, Wh, Wx, X, H)
    loss = 0.0
    for i in range(len(h0)):
        loss += (H[T, i] - Y[i]) ** 2
    return loss


@njit
def rnn_grad(h0, Wh, Wx, X, Y):
    """Back-propagation through time over the stored states."""
    T, nh = X.shape[0], len(h0)
    H = np.empty((T + 1, nh))
    _rnn_forward(h0, Wh, Wx, X, H)
    loss = 0.0
    dh = np.empty(nh)
    for i in range(nh):
        loss += (H[T, i] - Y[i]) ** 2
        dh[i] = 2.0 * (H[T, i] - Y[i])
    gWh, gWx = np.zeros_like(Wh), np.zeros_like(Wx)
    da = np.empty(nh)
    for t in range(T - 1, -1, -1):
        for i in range(nh):
            da[i] = dh[i] * (1.0 - H[t + 1, i] * H[t + 1, i])
        for j in range(nh):
            dh[j] = 0.0
        for i in range(nh):
            for j in range(nh):
                gWh[i, j] += da[i] * H[t, j]
                dh[j] += da[i] * Wh[i, j]
            for j in range(Wx.shape[1]):
                gWx[i, j] += da[i] * X[t, j]
    return loss, dh.copy(), gWh, gWx


@njit
def _attention_forward(Wq, Wk, Wv, X, Q, K, V, P, Z, Out):
    n, dm = X.shape
    d = Wq.shape[0]
    for i in range(n):
        for a in range(d):
            q, k, v = 0.0, 0.0, 0.0
            for c in range(dm):
                q += Wq[a, c] * X[i, c]
                k += Wk[a, c] * X[i, c]
                v += Wv[a, c] * X[i, c]
            Q[i, a], K[i, a], V[i, a] = q, k, v
    scale = 1.0 / math.sqrt(d)
    for i in range(n):
        m = -np.inf
        for j in range(n):
            s = 0.0
            for a in range(d):
                s += K[j, a] * Q[i, a]
            P[i, j] = s * scale
            if P[i, j] > m:
                m = P[i, j]
        z = 0.0
        for j in range(n):
            P[i, j] = math.exp(P[i, j] - m)
            z += P[i, j]
        Z[i] = z
        for a in range(d):
            o = 0.0
            for j in range(n):
                o += P[i, j] * V[j, a]
            Out[i, a] = o / z


@njit
def _attention_buffers(n, d):
    return (np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, n)),
            np.empty(n), np.empty((n, d)))


@njit
def attention_value(Wq, Wk, Wv, X, Y):
    Q, K, V, P, Z, Out = _attention_buffers(X.shape[0], Wq.shape[0])
    _attention_forward(Wq, Wk, Wv, X, Q, K, V, P, Z, Out)
    loss = 0.0
    for i in range(X.shape[0]):
        for a in range(Wq.shape[0]):
            loss += (Out[i, a] - Y[i, a]) ** 2
    return loss


@njit
def attention_grad(Wq, Wk, Wv, X, Y):
    n, dm = X.shape
    d = Wq.shape[0]
    Q, K, V, P, Z, Out = _attention_buffers(n, d)
    _attention_forward(Wq, Wk, Wv, X, Q, K, V, P, Z, Out)
    scale = 1.0 / math.sqrt(d)
    loss = 0.0
    dQ, dK, dV = np.zeros((n, d)), np.zeros((n, d)), np.zeros((n, d))
    dO = np.empty(d)
    dS = np.empty(n)
    for i in range(n):
        # O[i] = A[i] / Z[i] with A[i] = P[i] @ V
        dz = 0.0
        for a in range(d):
            r = Out[i, a] - Y[i, a]
            loss += r * r
            dO[a] = 2.0 * r / Z[i]                 # the adjoint of A[i, a]
            dz -= dO[a] * Out[i, a]                # d/dZ of A / Z is -A / Z^2 = -O / Z
        for j in range(n):
            dp = dz
            for a in range(d):
                dp += dO[a] * V[j, a]
                dV[j, a] += P[i, j] * dO[a]
            dS[j] = dp * P[i, j] * scale           # P = exp(S - max): the max cancels
        for j in range(n):
            for a in range(d):
                dQ[i, a] += dS[j] * K[j, a]
                dK[j, a] += dS[j] * Q[i, a]
    gWq, gWk, gWv = np.zeros_like(Wq), np.zeros_like(Wk), np.zeros_like(Wv)
    for i in range(n):
        for a in range(d):
            for c in range(dm):
                gWq[a, c] += dQ[i, a] * X[i, c]
                gWk[a, c] += dK[i, a] * X[i, c]
                gWv[a, c] += dV[i, a] * X[i, c]
    return loss, gWq, gWk, gWv


# =======================================================================================
# JAX and PyTorch: the array formulas as their users write them
# =======================================================================================


def jax_versions() -> dict | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def logreg_l(w, X, y):
        z = X @ w
        return jnp.sum(jnp.log1p(jnp.exp(z)) - y * z)

    def mlp_l(W1, b1, W2, b2, X, Y):
        return jnp.sum((jnp.tanh(X @ W1.T + b1) @ W2.T + b2 - Y) ** 2)

    def softmax_l(W, b, X, labels):
        z = X @ W.T + b
        return jnp.sum(jax.scipy.special.logsumexp(z, axis=1)
                       - jnp.take_along_axis(z, labels[:, None], axis=1)[:, 0])

    def conv1d_l(w, b, x):
        z = jnp.correlate(x, w, mode="valid") + b
        return jnp.sum(jnp.log1p(jnp.exp(z)))

    def rnn_l(h0, Wh, Wx, X, Y):
        def step(h, x):
            return jnp.tanh(Wh @ h + Wx @ x), None
        hT, _ = jax.lax.scan(step, h0, X)
        return jnp.sum((hT - Y) ** 2)

    def attention_l(Wq, Wk, Wv, X, Y):
        Q, K, V = X @ Wq.T, X @ Wk.T, X @ Wv.T
        P = jax.nn.softmax(Q @ K.T / math.sqrt(Wq.shape[0]), axis=1)
        return jnp.sum((P @ V - Y) ** 2)

    def vg(fn, n_params):
        return jax.jit(jax.value_and_grad(fn, argnums=tuple(range(n_params))))

    return {"logreg": vg(logreg_l, 1), "mlp": vg(mlp_l, 4), "softmax": vg(softmax_l, 2),
            "conv1d": vg(conv1d_l, 2), "rnn": vg(rnn_l, 3), "attention": vg(attention_l, 3),
            "jnp": jnp, "jax": jax}


def torch_versions(one_thread: bool) -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    if one_thread:
        torch.set_num_threads(1)
    F = torch.nn.functional

    def logreg_l(w, X, y):
        z = X @ w
        return torch.sum(torch.log1p(torch.exp(z)) - y * z)

    def mlp_l(W1, b1, W2, b2, X, Y):
        return torch.sum((torch.tanh(X @ W1.T + b1) @ W2.T + b2 - Y) ** 2)

    def softmax_l(W, b, X, labels):
        return F.cross_entropy(X @ W.T + b, labels, reduction="sum")

    def conv1d_l(w, b, x):
        z = F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1) + b
        return torch.sum(torch.log1p(torch.exp(z)))

    def rnn_l(h0, Wh, Wx, X, Y):
        h = h0
        for t in range(X.shape[0]):
            h = torch.tanh(Wh @ h + Wx @ X[t])
        return torch.sum((h - Y) ** 2)

    def attention_l(Wq, Wk, Wv, X, Y):
        Q, K, V = X @ Wq.T, X @ Wk.T, X @ Wv.T
        P = torch.softmax(Q @ K.T / math.sqrt(Wq.shape[0]), dim=1)
        return torch.sum((P @ V - Y) ** 2)

    def vg(fn, n_params):
        def run(*args):
            params = [a.detach().requires_grad_() for a in args[:n_params]]
            loss = fn(*params, *args[n_params:])
            loss.backward()
            return (loss.item(), *(p.grad for p in params))
        return run

    return {"logreg": vg(logreg_l, 1), "mlp": vg(mlp_l, 4), "softmax": vg(softmax_l, 2),
            "conv1d": vg(conv1d_l, 2), "rnn": vg(rnn_l, 3), "attention": vg(attention_l, 3),
            "torch": torch}


# =======================================================================================
# Data (seeded) and the cases of each program
# =======================================================================================


def make_data(name: str, cfg: dict) -> tuple[str, tuple, tuple]:
    """(size label, parameters, data) of a program, parameters first as in the losses."""
    if name in SAME_AS:
        return make_data(SAME_AS[name], cfg)
    rng = np.random.default_rng(PROGRAMS.index(name) + 1)
    if name == "logreg":
        n, d = cfg["logreg"]
        X = rng.normal(size=(n, d))
        y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-X @ rng.normal(size=d) * 0.3)))
        return f"N={n} d={d}", (0.1 * rng.normal(size=d),), (X, y.astype(np.float64))
    if name == "mlp":
        n, n_in, n_h, n_out = cfg["mlp"]
        params = (rng.normal(size=(n_h, n_in)) / np.sqrt(n_in), 0.1 * rng.normal(size=n_h),
                  rng.normal(size=(n_out, n_h)) / np.sqrt(n_h), 0.1 * rng.normal(size=n_out))
        return (f"N={n} {n_in}-{n_h}-{n_out}", params,
                (rng.normal(size=(n, n_in)), rng.normal(size=(n, n_out))))
    if name == "softmax":
        n, d, c = cfg["softmax"]
        params = (0.1 * rng.normal(size=(c, d)), 0.1 * rng.normal(size=c))
        return (f"N={n} d={d} C={c}", params,
                (rng.normal(size=(n, d)), rng.integers(0, c, size=n).astype(np.int64)))
    if name == "conv1d":
        n, k = cfg["conv1d"]
        return f"n={n} K={k}", (0.25 * rng.normal(size=k), 0.1), (rng.normal(size=n),)
    if name in ("rnn", "rnn_revolve"):
        rng = np.random.default_rng(PROGRAMS.index("rnn") + 1)    # the same data for both
        t, nh, ni = cfg["rnn"]
        params = (0.5 * rng.normal(size=nh), rng.normal(size=(nh, nh)) / np.sqrt(nh),
                  rng.normal(size=(nh, ni)) / np.sqrt(ni))
        size = f"T={t} hidden={nh} in={ni}" + (" Revolve10" if name == "rnn_revolve" else "")
        return size, params, (rng.normal(size=(t, ni)), 0.5 * rng.normal(size=nh))
    if name == "attention":
        n, d = cfg["attention"]
        params = tuple(rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3))
        return f"n={n} d={d}", params, (rng.normal(size=(n, d)), 0.5 * rng.normal(size=(n, d)))
    raise ValueError(name)


#: the revbench programs, the names of the parameters (wrt=), the hand-written references
SPECS = {
    "logreg": (logreg_fast, logreg, ("w",), logreg_value, logreg_grad),
    "mlp": (mlp_fast, mlp, ("W1", "b1", "W2", "b2"), mlp_value, mlp_grad),
    "softmax": (softmax_fast, softmax, ("W", "b"), softmax_value, softmax_grad),
    "conv1d": (conv1d_fast, conv1d, ("w", "b"), conv1d_value, conv1d_grad),
    "rnn": (rnn_fast, rnn, ("Wh", "Wx"), rnn_value, rnn_grad),
    "rnn_revolve": (rnn_revolve_fast, rnn_revolve, ("h0", "Wh", "Wx"), rnn_value, rnn_grad),
    "attention": (attention_fast, attention, ("Wq", "Wk", "Wv"), attention_value,
                  attention_grad),
    "mlp_matrix": (mlp_matrix_fast, mlp_matrix, ("W1", "b1", "W2", "b2"), mlp_value, mlp_grad),
    "attention_matrix": (attention_matrix_fast, attention_matrix, ("Wq", "Wk", "Wv"),
                         attention_value, attention_grad),
}


def rb_calls(name: str, fn, wrt: tuple, params: tuple, data: tuple):
    """The revbench forward call (returns the loss) and value_and_grad call (returns
    (loss, *gradients in the order of ``params``)), as a user writes them."""
    vg = value_and_grad(fn, loss="loss", wrt=wrt)
    if name == "rnn":
        h0, Wh, Wx = params
        H0 = np.zeros((data[0].shape[0] + 1, len(h0)))
        H0[0] = h0

        def fwd():
            return fn(0.0, H0.copy(), Wh, Wx, *data)[0]   # H is updated in place

        def run():
            # H is written, so its gradient comes back whatever wrt= says: its row 0 is
            # the gradient w.r.t. the initial state
            outs, grads = vg(0.0, H0, Wh, Wx, *data)
            return (outs[0], grads[1][0], grads[2], grads[3])
        return fwd, run
    if name == "rnn_revolve":
        nh = len(params[0])

        def fwd():
            return fn(0.0, np.zeros(nh), *params, *data)[0]   # hT must enter at zero

        def run():
            outs, grads = vg(0.0, np.zeros(nh), *params, *data)
            return (outs[0], *grads[2:5])
        return fwd, run
    k = len(params)

    def fwd():
        return fn(0.0, *params, *data)[0]

    def run():
        outs, grads = vg(0.0, *params, *data)
        return (outs[0], *grads[1:1 + k])
    return fwd, run


# =======================================================================================
# Checking and timing
# =======================================================================================


class Mismatch(AssertionError):
    pass


def check_all(what: str, got: tuple, want: tuple, rtol: float = RTOL) -> None:
    if len(got) != len(want):
        raise Mismatch(f"{what}: {len(got)} outputs, expected {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        # atol relative to the array's own scale (the RNN's gradient w.r.t. its initial
        # state has vanished to ~1e-20 after 1000 steps)
        atol = 1e-12 * float(np.max(np.abs(b))) if b.size else 0.0
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            diff = np.max(np.abs(a - b)) if a.shape == b.shape else "shape"
            rel = (np.max(np.abs(a - b) / (np.abs(b) + atol + 1e-300))
                   if a.shape == b.shape else "")
            raise Mismatch(f"{what}, output {i}: does not match the hand-written gradient "
                           f"(shapes {a.shape} vs {b.shape}, max abs diff {diff}, "
                           f"max rel diff {rel})")


def time_cases(cases: dict, reps: int, budget_s: float) -> dict:
    """Seconds of each zero-argument callable, repetitions interleaved.  Each case is
    called once first (warm-up); a case whose warm-up took longer than ``budget_s /
    reps`` gets fewer repetitions (``budget_s`` in all, at least 3)."""
    want = {}
    for name, fn in cases.items():
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        want[name] = max(3, min(reps, int(budget_s / max(dt, 1e-9))))
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(max(want.values())):
        for name, fn in cases.items():
            if r < want[name]:
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def bench_program(name: str, cfg: dict, peers: dict) -> dict:
    fast, checked, wrt, ref_value, ref_grad = SPECS[name]
    size, params, data = make_data(name, cfg)
    log(f"{name} {size}")
    ref_args = params + data
    first: dict[str, float] = {}

    def timed_first(label, fn):
        t0 = time.perf_counter()
        out = fn()
        first[label] = time.perf_counter() - t0
        return out

    want = timed_first("njit", lambda: ref_grad(*ref_args))
    want_val = timed_first("njit fwd", lambda: ref_value(*ref_args))
    check_all(f"{name}: hand-written objective", (want_val,), want[:1])
    cases = {"njit fwd": lambda: ref_value(*ref_args), REF: lambda: ref_grad(*ref_args)}

    for suffix, fn in (("", fast), (" chk", checked)):
        fwd, run = rb_calls(name, fn, wrt, params, data)
        check_all(f"{name}: revbench{suffix} forward", (timed_first(f"rb fwd{suffix}", fwd),),
                  want[:1])
        check_all(f"{name}: revbench{suffix} value_and_grad",
                  timed_first(f"rb vg{suffix}", run), want)
        cases[f"rb fwd{suffix}"] = fwd
        cases[f"rb vg{suffix}"] = run

    jx, th = peers.get("jax"), peers.get("torch")
    peer_key = "rnn" if name == "rnn_revolve" else SAME_AS.get(name, name)
    if jx is not None:
        jnp, jax = jx["jnp"], jx["jax"]
        jargs = tuple(jnp.asarray(a) for a in ref_args)
        jfn = jx[peer_key]

        def jrun(jfn=jfn, jargs=jargs):
            return jax.block_until_ready(jfn(*jargs))

        v, g = timed_first("jax", jrun)
        check_all(f"{name}: jax", (float(v), *g), want)
        cases["jax"] = jrun
    if th is not None:
        torch = th["torch"]
        targs = tuple(torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray)
                      else torch.tensor(a, dtype=torch.float64) for a in ref_args)
        tfn = th[peer_key]
        got = timed_first("torch", lambda: tfn(*targs))
        check_all(f"{name}: torch", tuple(g.numpy() if hasattr(g, "numpy") else g
                                          for g in got), want)
        cases["torch"] = lambda: tfn(*targs)

    times = time_cases(cases, cfg["reps"], cfg["case_budget_s"])
    med = {k: statistics.median(v) for k, v in times.items()}
    mins = {k: min(v) for k, v in times.items()}

    def ratio(a, b, of=med):
        return of[a] / of[b] if a in of and b in of else None

    pairs = {"vg/fwd": ("rb vg", "rb fwd"), "vg/njit": ("rb vg", REF),
             "vg chk/njit": ("rb vg chk", REF), "fwd/njit fwd": ("rb fwd", "njit fwd"),
             "vg/jax": ("rb vg", "jax"), "vg chk/jax": ("rb vg chk", "jax"),
             "vg/torch": ("rb vg", "torch"), "vg chk/vg": ("rb vg chk", "rb vg")}

    return {
        "program": name, "size": size,
        "wrt": list(wrt) + (["H[0] (initial state)"] if name == "rnn" else []),
        "median_s": med, "min_s": mins, "reps": {k: len(v) for k, v in times.items()},
        "times_s": times, "first_call_s": first,
        "ratios": {k: ratio(a, b) for k, (a, b) in pairs.items()},
        "ratios_of_min": {k: ratio(a, b, mins) for k, (a, b) in pairs.items()},
    }


# =======================================================================================
# Output
# =======================================================================================


def _ms(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.3f}" if t < 0.01 else f"{t * 1e3:.2f}" if t < 1 else f"{t * 1e3:.0f}"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def print_table(rows: list, title: str) -> None:
    print(f"\n{title}")
    cols = [("program", 12), ("size", 30), ("fwd ms", 8), ("njitfwd", 8), ("vg ms", 8),
            ("vg/fwd", 7), ("njit ms", 8), ("vg/njit", 8), ("chk ms", 8), ("chk/njit", 8),
            ("jax ms", 8), ("vg/jax", 7), ("chk/jax", 8), ("torch ms", 8)]
    print(" ".join(f"{c:<{w}s}" if i < 2 else f"{c:>{w}s}" for i, (c, w) in enumerate(cols)))
    for r in rows:
        m, q = r["median_s"], r["ratios"]
        vals = [r["program"], r["size"], _ms(m.get("rb fwd")), _ms(m.get("njit fwd")),
                _ms(m.get("rb vg")), _x(q["vg/fwd"]), _ms(m.get(REF)), _x(q["vg/njit"]),
                _ms(m.get("rb vg chk")), _x(q["vg chk/njit"]), _ms(m.get("jax")),
                _x(q["vg/jax"]), _x(q["vg chk/jax"]), _ms(m.get("torch"))]
        print(" ".join(f"{v:<{w}s}" if i < 2 else f"{v:>{w}s}"
                       for i, (v, (_, w)) in enumerate(zip(vals, cols))))


def print_min_ratios(rows: list) -> None:
    """The same ratios from the fastest repetitions (robust to a busy machine)."""
    keys = ("fwd/njit fwd", "vg/fwd", "vg/njit", "vg chk/njit", "vg/jax", "vg chk/jax",
            "vg/torch", "vg chk/vg")
    print("\nratios of the fastest repetitions (min / min)")
    print(f"{'program':<12s} " + " ".join(f"{k:>12s}" for k in keys))
    for r in rows:
        q = r["ratios_of_min"]
        print(f"{r['program']:<12s} " + " ".join(f"{_x(q[k]):>12s}" for k in keys))


LEGEND = ("fwd = revbench forward run, check=False; njitfwd = the hand-written @njit "
          "objective;\nvg = revbench value_and_grad, check=False; chk = value_and_grad "
          "with checks on;\nnjit = hand-written @njit loss + gradient; jax = "
          "jit(value_and_grad); torch = forward + backward (eager);\nratios are of "
          "medians measured in the same run, repetitions interleaved.")


def run_all_cores(argv: list[str]) -> dict:
    """The same benchmark in a subprocess with the caller's thread settings."""
    env = _common.child_env({**_CALLER_ENV, _ALL_CORES_ENV: "1"})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "all_cores.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--threads", "1",
               "--out", str(out)]
        log("all cores: " + " ".join(cmd[1:]))
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the all-cores subprocess failed ({proc.returncode})")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="sizes ~10x smaller (a smoke run)")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions per case (slow cases get fewer, at least 3)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_ml.json")
    ap.add_argument("--only", nargs="+", choices=PROGRAMS, default=None,
                    help="run only these programs")
    ap.add_argument("--threads", choices=("1", "all"), default="1",
                    help="'all': add an all-cores run (a subprocess) to the one-thread one")
    ap.add_argument("--no-peers", action="store_true", help="leave out JAX and PyTorch")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.reps is not None:
        cfg["reps"] = args.reps
        cfg["case_budget_s"] = float("inf")       # exactly --reps repetitions
    todo = list(args.only or PROGRAMS)
    all_cores = os.environ.get(_ALL_CORES_ENV) == "1"
    one_thread = not all_cores

    peers = {}
    if not args.no_peers:
        log("loading JAX / PyTorch (where installed)")
        for key, make in (("jax", jax_versions), ("torch", lambda: torch_versions(one_thread))):
            v = make()
            if v is not None:
                peers[key] = v
    started = time.perf_counter()
    load_start = _common.loadavg()
    extra = [m for m in ("jax", "torch") if m in peers]
    results = {
        "benchmark": "bench_ml",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "threads": "all" if all_cores else "1",
        "env": {v: os.environ.get(v) for v in _THREAD_VARS},
        "torch_threads": peers["torch"]["torch"].get_num_threads() if "torch" in peers else None,
        "config": cfg,
        "machine": _common.machine_info(*extra),
        "reference": REF,
        "rtol": RTOL,
        "programs": todo,
    }
    rows = [bench_program(name, cfg, peers) for name in todo]
    results["rows"] = rows
    results["seconds"] = time.perf_counter() - started
    results["loadavg"] = {"start": load_start, "end": _common.loadavg()}
    title = ("all cores (JAX and PyTorch multi-threaded)" if all_cores else
             "one thread (Numba, JAX, PyTorch)") + ", medians, milliseconds"
    print_table(rows, title)
    print_min_ratios(rows)
    print(f"\n{LEGEND}\nload average: start {load_start}, end {results['loadavg']['end']}; "
          f"{results['seconds']:.0f} s")
    if args.threads == "all" and not all_cores:
        child_argv = [a for a in (argv if argv is not None else sys.argv[1:])]
        for i, a in enumerate(child_argv):          # drop --threads and --out (and values)
            if a in ("--threads", "--out"):
                child_argv[i] = child_argv[i + 1] = ""
            elif a.startswith(("--threads=", "--out=")):
                child_argv[i] = ""
        child = run_all_cores([a for a in child_argv if a])
        results["all_cores"] = child
        print_table(child["rows"], "all cores (JAX and PyTorch multi-threaded), medians, "
                    "milliseconds")
        print_min_ratios(child["rows"])
    _common.write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

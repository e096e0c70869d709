"""Natural revbench programs, written from the documentation (docs/*.md) only.

Each program is written the way the formula stands: straightforward loops, ancillas
computed and uncomputed with ``with routine:`` / ``~routine``, the documented standard
library (``revbench.lib``) where it has the operation.  Nothing is restructured for
speed.  ``benchmarks/natural.py`` times them against hand-written Numba code
(``natural_reference.py``) and, where installed, JAX and PyTorch.

Every program is defined as a plain Python function and then made reversible twice:
``NAME`` (checks on, the default) and ``NAME_fast`` (``check=False``, which the docs
recommend "for speed once a function is known to be correct"); some a third time,
``NAME_fastmath`` (``check=False, fastmath=True``: sums reassociated, docs/performance.md).

Places where the language made the code less natural than the formula are marked
``# UNNATURAL:`` with the line we wanted to write.
"""

from __future__ import annotations

import math

import numpy as np

from revbench import reversible
from revbench.gradbench.evals import ba as gradbench_ba
from revbench.lib import csr_bilinear, csr_matvec, logsumexp, sumsq

# ---------------------------------------------------------------------------------------
# 1. GMM log-posterior (ADBench)
# ---------------------------------------------------------------------------------------


def gmm_objective_src(err, alphas, means, icf, x, gamma, m, wishart_const):
    n, d = x.shape                                 # names for shapes: no `del` needed
    k_comp = len(alphas)
    for i in range(n):
        with routine as main:                      # noqa: F821 (a revbench keyword)
            main_term = np.zeros(k_comp)
            for k in range(k_comp):
                with routine as qx_of_k:           # noqa: F821
                    xc = np.zeros(d)
                    xc += x[i] - means[k]          # rows: views, no copies
                    qx = np.zeros(d)
                    qx += np.exp(icf[k, :d]) * xc
                    p = d                          # running index into the lower triangle
                    for l in range(d):             # noqa: E741
                        for j in range(l + 1, d):
                            qx[j] += icf[k, p] * xc[l]
                            p += 1
                main_term[k] += alphas[k] + np.sum(icf[k, :d]) - 0.5 * np.dot(qx, qx)
                ~qx_of_k
        logsumexp(err, main_term)
        ~main
    err -= n * logsumexp(alphas)                   # computed, used and uncomputed
    err -= n * d * 0.5 * math.log(2.0 * math.pi)
    # the Wishart prior
    for k in range(k_comp):
        for j in range(d):
            err += 0.5 * gamma * gamma * math.exp(2.0 * icf[k, j]) - m * icf[k, j]
        for j in range(d, icf.shape[1]):
            err += 0.5 * gamma * gamma * icf[k, j] * icf[k, j]
    # UNNATURAL: the prior's constant needs lgamma, which is not a pure function: it is
    # computed outside (`wishart_constant` below) and passed in
    err -= k_comp * wishart_const


gmm_objective = reversible(gmm_objective_src)
gmm_objective_fast = reversible(check=False)(gmm_objective_src)
# docs/performance.md section 4: sums reassociated (results equal to rounding)
gmm_objective_fastmath = reversible(check=False, fastmath=True)(gmm_objective_src)


def wishart_constant(gamma: float, m: int, d: int) -> float:
    """The part of the log Wishart prior that does not depend on the parameters."""
    n = d + m + 1
    lgamma_p = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * n + 0.5 * (1 - j)) for j in range(1, d + 1))
    return n * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lgamma_p


# ---------------------------------------------------------------------------------------
# 2. Bundle adjustment: the reprojection residual of one observation
# ---------------------------------------------------------------------------------------


# (one program with GradBench's ba eval: its residual is this one, written once there)
ba_residual = gradbench_ba.residual
ba_residual_src = ba_residual.__wrapped__
ba_residual_fast = reversible(check=False)(ba_residual_src)


# ---------------------------------------------------------------------------------------
# 3. Sparse: x^T A y and sum((A x)^2), A in CSR (data, indices, indptr)
# ---------------------------------------------------------------------------------------


def sparse_bilinear_lib_src(s, x, data, indices, indptr, y):
    csr_bilinear(s, x, data, indices, indptr, y)


def sparse_bilinear_loop_src(s, x, data, indices, indptr, y):
    for i in range(len(indptr) - 1):
        for p in range(indptr[i], indptr[i + 1]):
            s += x[i] * data[p] * y[indices[p]]


def sparse_sqnorm_lib_src(s, x, data, indices, indptr):
    with routine as ax:                            # noqa: F821
        y = np.zeros(len(indptr) - 1)
        csr_matvec(y, data, indices, indptr, x)
    sumsq(s, y)
    ~ax


def sparse_sqnorm_loop_src(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        with routine as row:                       # noqa: F821
            t = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                t += data[p] * x[indices[p]]
        s += t * t
        ~row


sparse_bilinear_lib = reversible(sparse_bilinear_lib_src)
sparse_bilinear_lib_fast = reversible(check=False)(sparse_bilinear_lib_src)
sparse_bilinear_loop = reversible(sparse_bilinear_loop_src)
sparse_bilinear_loop_fast = reversible(check=False)(sparse_bilinear_loop_src)
sparse_sqnorm_lib = reversible(sparse_sqnorm_lib_src)
sparse_sqnorm_lib_fast = reversible(check=False)(sparse_sqnorm_lib_src)
sparse_sqnorm_loop = reversible(sparse_sqnorm_loop_src)
sparse_sqnorm_loop_fast = reversible(check=False)(sparse_sqnorm_loop_src)
sparse_bilinear_loop_fastmath = reversible(check=False, fastmath=True)(sparse_bilinear_loop_src)
sparse_sqnorm_loop_fastmath = reversible(check=False, fastmath=True)(sparse_sqnorm_loop_src)


# ---------------------------------------------------------------------------------------
# 4. Explicit heat equation, T steps, loss = sum(u_T^2)
# ---------------------------------------------------------------------------------------


def heat_src(loss, u, c):
    # UNNATURAL: `u = u + c * laplacian(u)` repeated in place would overwrite the state;
    # the plain reversible form keeps the whole trajectory: `u` is (T + 1, n), row 0 is
    # the initial state and row t + 1 is written from row t (fixed ends)
    rows, n = u.shape
    n_steps = rows - 1
    for t in range(n_steps):
        u[t + 1, 0] += u[t, 0]
        for i in range(1, n - 1):
            u[t + 1, i] += u[t, i] + c * (u[t, i - 1] - 2.0 * u[t, i] + u[t, i + 1])
        u[t + 1, n - 1] += u[t, n - 1]
    for i in range(n):
        loss += u[n_steps, i] * u[n_steps, i]


heat = reversible(heat_src)
heat_fast = reversible(check=False)(heat_src)


def heat_step_src(u_new, u, t, c):
    """One step, for ``revbench.checkpoint.TimeLoop`` (the docs' way for long loops)."""
    n = len(u)
    u_new[0] += u[0]
    for i in range(1, n - 1):
        u_new[i] += u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    u_new[n - 1] += u[n - 1]


def heat_loss_src(out, u, c):
    for i in range(len(u)):
        out += u[i] * u[i]


heat_step = reversible(heat_step_src)
heat_step_fast = reversible(check=False)(heat_step_src)
heat_loss = reversible(heat_loss_src)
heat_loss_fast = reversible(check=False)(heat_loss_src)


# ---------------------------------------------------------------------------------------
# 5. A reduction: x . y (docs/performance.md, sections 2 and 4)
# ---------------------------------------------------------------------------------------


def dot_src(s, x, y):
    s += np.dot(x, y)


dot = reversible(dot_src)
dot_fast = reversible(check=False)(dot_src)
dot_fastmath = reversible(check=False, fastmath=True)(dot_src)


# ---------------------------------------------------------------------------------------
# 6. A two-layer network's squared error, with matrix products (docs/language.md §9)
# ---------------------------------------------------------------------------------------


def mlp_src(loss, W1, b1, W2, b2, X, Y):
    for s in range(X.shape[0]):
        with routine as hidden:                    # noqa: F821 (a revbench keyword)
            h = np.zeros(len(b1))
            h += np.tanh(W1 @ X[s] + b1)
        loss += np.sum((W2 @ h + b2 - Y[s]) ** 2)
        ~hidden


mlp = reversible(mlp_src)
mlp_fast = reversible(check=False)(mlp_src)

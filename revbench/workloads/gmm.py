"""Gaussian mixture model fitting (GMM), as in ADBench, with GradBench's corrections.

The function is the log-posterior of a ``K``-component Gaussian mixture in ``D``
dimensions fitted to ``N`` points ``x_i``, with a Wishart prior on the precision
matrices.  Component ``k`` has the unnormalised log-weight ``alpha_k``, the mean
``mu_k`` and the precision matrix ``Sigma_k^-1 = Q_k^T Q_k``, where ``Q_k`` is lower
triangular with diagonal ``exp(q_k)`` and strictly-lower part ``l_k``::

    obj = - N D / 2 log(2 pi)
          + sum_i logsumexp_k( alpha_k + sum(q_k) - 1/2 |Q_k (x_i - mu_k)|^2 )
          - N logsumexp(alpha)
          + sum_k ( - gamma^2 / 2 (|exp(q_k)|^2 + |l_k|^2) + m sum(q_k) )
          + K ( n D log(gamma / sqrt 2) - log Gamma_D(n / 2) ),      n = D + m + 1

``sum(q_k) = 1/2 log det Sigma_k^-1`` is the normalisation of each Gaussian and
``|exp(q_k)|^2 + |l_k|^2 = |Q_k|_F^2 = tr(Sigma_k^-1)``; ``Gamma_D`` is the
multivariate gamma function.  This is GradBench's ``gmm`` eval, which fixes three
errors of the ADBench paper and code: the prior entered with the wrong sign (ADBench
returned ``out - K (C - log Gamma_D)`` where the log-prior is ``-out + K (...)``); the
precision matrix is ``Q^T Q``, not the transposed ``Q Q^T`` of the paper (the code
computes ``|Q (x - mu)|^2``); and the Wishart prior (scale ``I / gamma^2``,
``n = D + m + 1`` degrees of freedom) is on the precision matrices, so that its
trace term is ``|Q|_F^2``.

Parameters are stored as in ADBench's files: ``alpha [K]``, ``means [K, D]`` and
``icf [K, D + D (D - 1) / 2]``, whose row ``k`` holds ``q_k`` (``D`` numbers), then
``l_k``, the strictly-lower part of ``Q_k`` **column by column**:
``Q[1,0], Q[2,0], ..., Q[D-1,0], Q[2,1], ...`` (GradBench's order).

This module holds

* the data: :class:`GMMData`, :func:`read_gmm` / :func:`write_gmm` (ADBench's text
  format), the seeded generator :func:`generate_gmm` and :data:`GMM_SIZES`;
* the references: :func:`objective_numpy` and :func:`gradient_numpy` (plain NumPy,
  dense matrices, the gradient derived by hand: the test oracles) and
  :func:`objective_njit` (a hand-written ``@numba.njit`` loop: the speed reference);
* the program in the reversible language, each function also without runtime checks
  (``*_unchecked``): :data:`gmm_objective` (the whole log-posterior into a float
  accumulator ``out``; every work array allocated, uncomputed and freed inside), built
  from :data:`gmm_weights`, :data:`gmm_features_t`, :data:`gmm_dots_t`,
  :data:`gmm_row_max` and :data:`gmm_mixture`; and :data:`gmm_dots`, the same inner
  terms written for its reverse sweep;
* :func:`objective` and :func:`gmm_gradient`: the log-posterior and its gradient with
  respect to ``alpha``, ``means`` and ``icf`` by revbench's reverse sweeps.

How the reversible program is organised for speed
-------------------------------------------------

The quadratic form of a pair is expanded once per component::

    alpha_k + sum(q_k) - 1/2 |Q_k (x - mu_k)|^2 = W_k . z(x)

with the point's features ``z(x) = [1, x, x_a x_b (b <= a)]`` (``G = 1 + D +
D (D + 1) / 2`` numbers, :func:`n_features`) and the component's weights ``W_k =
[alpha_k + sum(q_k) - mu^T P mu / 2, P mu, -P_aa / 2 and -P_ab]``, ``P = Q^T Q``
(:data:`gmm_weights`, ``O(K D^3)`` once).  A pair then costs one dot product of length
``G``: as many multiply-adds as ``Q (x - mu)``, and all pairs together are the matrix
product ``V = Z W^T`` of the points' features ``Z [N, G]`` with the weights.

Numba does not reassociate floating-point sums (and leaves straight-line code
unvectorised), so what vectorises is an innermost loop whose iterations are
independent.  The product is therefore written twice, each time for one direction:

* :data:`gmm_dots_t` runs the forward pass with the points in the innermost loop
  (features and inner terms of a block of :func:`point_block` points stored transposed,
  ``Zt [G, B]`` and ``Vt [K, B]``): ``Vt[k, :] += w Zt[g, :]``, eight features per
  statement;
* :data:`gmm_dots` sums each pair into a scalar that is *swapped* into its slot of
  ``V`` (which starts at zero, so nothing needs uncomputing).  Its reverse sweep runs
  the features in the innermost loop, ``dL/dW[k, :] += dL/dV[i, k] Z[i, :]``, again
  without a reduction, and the sum's uncomputation, which nothing reads, is dead code
  that the compiler removes (without runtime checks).

Reductions go into scalar ancillas (registers) rather than array elements, and
loop-invariant reads into scalar ancillas (``w = W[k, g]``), so that the reverse sweep's
adjoint updates do not chain through memory.  The logsumexps are shifted by the row
maxima, which :data:`gmm_row_max` finds with a tree in a scratch array (no chain of
dependent maxima, built and cleared exactly).

The gradient
------------

:func:`gmm_gradient` (``method="split"``, the default) keeps intermediate results
instead of recomputing them, from a ``@numba.njit`` driver over the compiled kernels
(:func:`split_driver`): ``W`` forward; ``V [N, K]`` forward by :data:`gmm_dots_t`, a
block of points at a time; the row maxima ``C``; the reverse sweep of
:data:`gmm_mixture` alone (its only output is the accumulator, so it needs no forward
run), which gives ``dL/dV``; then the reverse sweeps of :data:`gmm_dots` and
:data:`gmm_weights`.  ``gmm_dots``'s sweep starts from the ``V`` that ``gmm_dots_t``
computed: the two programs compute the same inner terms (in different summation
orders; the sweep's uncomputation restores ``V`` to zero within rounding, which the
runtime checks' tolerance covers).  Two things are *data* there, which no reverse sweep
needs to differentiate: the shifts ``C`` (the logsumexp does not depend on them) and
the points' features.  The kernels are compiled with ``wrt=`` leaving them out
(:meth:`~revbench.ReversibleFunction.kernel`), so they get no adjoint and no adjoint
code: the features' adjoint would otherwise cost as much as the weights'.
``method="grad"`` runs ``value_and_grad`` on the single program :data:`gmm_objective`
instead, which uncomputes everything in its forward run and recomputes it in its
reverse sweep (several times slower).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from revbench.ad import value_and_grad
from revbench.backends.runtime import CheckFailed, to_user_error
from revbench.config import get_tolerance
from revbench.function import reversible

LOG_2PI = math.log(2.0 * math.pi)
LOG_PI = math.log(math.pi)

#: ``(D, K)`` of the benchmark goal (with ``N = 1000``)
GMM_SIZES: tuple[tuple[int, int], ...] = ((2, 5), (10, 5), (2, 200), (10, 50), (64, 5), (64, 10),
                                          (64, 25))
#: bounds of the points per block of features (the innermost loop of :data:`gmm_dots_t`):
#: as many as keep a block's features within ``2**16`` numbers (512 KB, in the L2 cache
#: between their computation and their use), within these bounds (see :func:`point_block`)
POINT_BLOCK_MIN = 32
POINT_BLOCK_MAX = 256


# -- data -----------------------------------------------------------------------------------


@dataclass
class GMMData:
    """One GMM problem: parameters ``alpha [K]``, ``means [K, D]``,
    ``icf [K, D + D(D-1)/2]`` (see the module docstring for the layout), points
    ``x [N, D]`` and the Wishart prior's ``gamma`` (float) and ``m`` (int >= 0)."""

    alpha: np.ndarray
    means: np.ndarray
    icf: np.ndarray
    x: np.ndarray
    gamma: float = 1.0
    m: int = 0

    def __post_init__(self) -> None:
        self.alpha = np.ascontiguousarray(self.alpha, dtype=np.float64)
        self.means = np.ascontiguousarray(self.means, dtype=np.float64)
        self.icf = np.ascontiguousarray(self.icf, dtype=np.float64)
        self.x = np.ascontiguousarray(self.x, dtype=np.float64)
        self.gamma = float(self.gamma)
        if int(self.m) != self.m or self.m < 0:
            raise ValueError(f"GMMData.m must be a non-negative integer, got {self.m!r}")
        self.m = int(self.m)
        if self.means.ndim != 2:
            raise ValueError(f"GMMData.means must be 2-D [K, D], got shape {self.means.shape}")
        k, d = self.means.shape
        shapes = {"alpha": (self.alpha, (k,)), "icf": (self.icf, (k, d + d * (d - 1) // 2)),
                  "x": (self.x, (self.x.shape[0] if self.x.ndim == 2 else -1, d))}
        for name, (a, shape) in shapes.items():
            if a.shape != shape:
                raise ValueError(f"GMMData.{name} must have shape {shape}, got {a.shape}")
        if k < 1 or d < 1:
            raise ValueError("GMMData needs at least one component and one dimension")

    @property
    def d(self) -> int:
        """Dimension of the points."""
        return self.means.shape[1]

    @property
    def k(self) -> int:
        """Number of mixture components."""
        return self.means.shape[0]

    @property
    def n(self) -> int:
        """Number of points."""
        return self.x.shape[0]

    @property
    def q(self) -> np.ndarray:
        """``[K, D]``: the logs of the diagonals of the ``Q_k``."""
        return self.icf[:, :self.d]

    @property
    def l(self) -> np.ndarray:  # noqa: E743 -- the name of the formulas
        """``[K, D(D-1)/2]``: the strictly-lower parts of the ``Q_k``, column by column."""
        return self.icf[:, self.d:]


def _floats(line: str, count: int, what: str) -> list[float]:
    parts = line.split()
    if len(parts) != count:
        raise ValueError(f"GMM file: expected {count} number(s) for {what}, got {len(parts)}")
    return [float(p) for p in parts]


def read_gmm(path: str | os.PathLike, replicate_point: bool = False) -> GMMData:
    """Read ADBench's GMM text format: a line ``D K N``; ``K`` lines of one ``alpha``;
    ``K`` lines of ``D`` means; ``K`` lines of ``D + D(D-1)/2`` icf numbers; ``N`` lines of
    ``D`` coordinates (one line, repeated ``N`` times, with ``replicate_point=True``, as
    ADBench's 2.5M-point files); a last line ``gamma m``."""
    with open(path) as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: empty GMM file")
    d, k, n = (int(v) for v in lines[0].split()[:3])
    icf_sz = d + d * (d - 1) // 2
    npts = 1 if replicate_point else n
    need = 1 + 3 * k + npts + 1
    if len(lines) < need:
        raise ValueError(f"{path}: a GMM file with D={d} K={k} N={n} has {need} lines, "
                         f"found {len(lines)}")
    pos = 1
    alpha = [_floats(lines[pos + j], 1, "alpha")[0] for j in range(k)]
    pos += k
    means = [_floats(lines[pos + j], d, "a mean") for j in range(k)]
    pos += k
    icf = [_floats(lines[pos + j], icf_sz, "an icf row") for j in range(k)]
    pos += k
    pts = [_floats(lines[pos + j], d, "a point") for j in range(npts)]
    pos += npts
    x = np.array(pts * n if replicate_point else pts, dtype=np.float64).reshape(n, d)
    last = lines[pos].split()
    return GMMData(np.array(alpha), np.array(means).reshape(k, d),
                   np.array(icf).reshape(k, icf_sz), x, float(last[0]), int(float(last[1])))


def write_gmm(path: str | os.PathLike, data: GMMData) -> None:
    """Write ``data`` in ADBench's GMM text format (numbers in full precision, so that
    :func:`read_gmm` gives them back exactly)."""

    def row(a) -> str:
        return " ".join(repr(float(v)) for v in a)

    out = [f"{data.d} {data.k} {data.n}"]
    out += [repr(float(a)) for a in data.alpha]
    out += [row(r) for r in data.means]
    out += [row(r) for r in data.icf]
    out += [row(r) for r in data.x]
    out.append(f"{data.gamma!r} {data.m}")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def generate_gmm(d: int, k: int, n: int, seed: int = 0, *, gamma: float = 1.0,
                 m: int = 0) -> GMMData:
    """A random problem distributed as ADBench's generator (``gmm-data-gen.py``) makes
    them: means uniform on ``[0, 1)``, ``alpha``, ``icf`` and the points standard normal,
    ``gamma = 1``, ``m = 0``.  The normal numbers are drawn in ADBench's order (alpha,
    then icf, then points) from one stream, the uniform ones from another, both seeded
    by ``seed``; the same arguments always give the same data."""
    if d < 1 or k < 1 or n < 0:
        raise ValueError(f"generate_gmm needs d >= 1, k >= 1, n >= 0, got {d}, {k}, {n}")
    icf_sz = d + d * (d - 1) // 2
    normal = np.random.default_rng([seed, 0]).standard_normal(k + k * icf_sz + n * d)
    uniform = np.random.default_rng([seed, 1]).uniform(0.0, 1.0, k * d)
    alpha = normal[:k]
    icf = normal[k:k + k * icf_sz].reshape(k, icf_sz)
    x = normal[k + k * icf_sz:].reshape(n, d)
    return GMMData(alpha.copy(), uniform.reshape(k, d), icf.copy(), x.copy(), gamma, m)


# -- references -----------------------------------------------------------------------------


def lower_triangular_q(icf: np.ndarray, d: int) -> np.ndarray:
    """``[K, D, D]``: the lower-triangular ``Q_k`` (diagonal ``exp(q_k)``, strictly-lower
    part ``l_k`` filled column by column)."""
    k = icf.shape[0]
    Q = np.zeros((k, d, d))
    idx = np.arange(d)
    Q[:, idx, idx] = np.exp(icf[:, :d])
    rows, cols = [], []
    for c in range(d):
        for r in range(c + 1, d):
            rows.append(r)
            cols.append(c)
    Q[:, rows, cols] = icf[:, d:]
    return Q


def multigammaln(a: float, p: int) -> float:
    """``log Gamma_p(a)``, the log of the multivariate gamma function."""
    return 0.25 * p * (p - 1) * LOG_PI + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, p + 1))


def _logsumexp(a: np.ndarray, axis=None) -> np.ndarray:
    mx = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - mx), axis=axis, keepdims=True)) + mx
    return np.squeeze(out, axis=axis) if axis is not None else out.item()


def _inner_terms(data: GMMData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(V [N, K], Q [K, D, D], xc [N, K, D], y [N, K, D])`` with ``xc = x_i - mu_k``,
    ``y = Q_k xc`` and ``V = alpha_k + sum(q_k) - |y|^2 / 2``."""
    Q = lower_triangular_q(data.icf, data.d)
    xc = data.x[:, None, :] - data.means[None, :, :]
    y = np.einsum("kab,nkb->nka", Q, xc)
    V = data.alpha[None, :] + data.q.sum(axis=1)[None, :] - 0.5 * np.sum(y * y, axis=2)
    return V, Q, xc, y


def objective_numpy(data: GMMData) -> float:
    """The log-posterior in plain NumPy, straight from the formulas (dense ``Q_k``,
    ``x_i - mu_k`` for every pair): the test oracle."""
    n, d, k, gamma, m = data.n, data.d, data.k, data.gamma, data.m
    V, Q, _, _ = _inner_terms(data)
    likelihood = np.sum(_logsumexp(V, axis=1)) - n * _logsumexp(data.alpha)
    frobenius = np.sum(np.exp(data.q) ** 2, axis=1) + np.sum(data.l ** 2, axis=1)
    assert np.allclose(frobenius, np.sum(Q * Q, axis=(1, 2)))
    dof = d + m + 1
    log_prior = (np.sum(-0.5 * gamma * gamma * frobenius + m * data.q.sum(axis=1))
                 + k * (dof * d * math.log(gamma / math.sqrt(2.0)) - multigammaln(0.5 * dof, d)))
    return float(-0.5 * n * d * LOG_2PI + likelihood + log_prior)


def gradient_numpy(data: GMMData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(d obj / d alpha, d obj / d means, d obj / d icf)``, derived by hand and
    computed with dense NumPy arrays (no AD): with the responsibilities
    ``r_ik = softmax_k(V_ik)``, ``y = Q_k (x_i - mu_k)``:
    ``dV/d alpha_k = 1``, ``dV/d mu_k = Q_k^T y``, ``dV/d Q_k = -y (x_i - mu_k)^T``
    (lower triangle), ``dQ_jj/dq_j = exp(q_j)``, ``dV/dq_kj = 1 + ...``; plus the
    prior's ``-gamma^2 exp(2 q) + m`` and ``-gamma^2 l``."""
    n, d, gamma, m = data.n, data.d, data.gamma, data.m
    V, Q, xc, y = _inner_terms(data)
    r = np.exp(V - _logsumexp(V, axis=1)[:, None])                       # [N, K]
    soft_alpha = np.exp(data.alpha - _logsumexp(data.alpha))
    g_alpha = r.sum(axis=0) - n * soft_alpha
    g_means = np.einsum("nk,kab,nka->kb", r, Q, y)                       # sum_i r Q^T y
    g_Q = -np.einsum("nk,nka,nkb->kab", r, y, xc)                        # [K, D, D]
    g_icf = np.zeros_like(data.icf)
    diag = np.arange(d)
    g_icf[:, :d] = (g_Q[:, diag, diag] * np.exp(data.q) + r.sum(axis=0)[:, None]
                    - gamma * gamma * np.exp(2.0 * data.q) + m)
    j = d
    for c in range(d):
        for row in range(c + 1, d):
            g_icf[:, j] = g_Q[:, row, c] - gamma * gamma * data.icf[:, j]
            j += 1
    return g_alpha, g_means, g_icf


@numba.njit(cache=True, fastmath=False, boundscheck=False)
def objective_njit(alpha, means, icf, x, gamma, m):
    """The log-posterior as a hand-written ``@numba.njit`` loop (the speed reference):
    per point and component, ``x - mu``, ``|Q (x - mu)|^2`` row by row, then a
    logsumexp over components stabilised by the maximum."""
    k, d = means.shape
    n = x.shape[0]
    qdiag = np.empty((k, d))
    sum_q = np.empty(k)
    L = np.zeros((k, d, d))       # strictly-lower part of Q, row-major for the row loops
    for c in range(k):
        s = 0.0
        for j in range(d):
            s += icf[c, j]
            qdiag[c, j] = math.exp(icf[c, j])
        sum_q[c] = s
        idx = d
        for col in range(d):
            for row in range(col + 1, d):
                L[c, row, col] = icf[c, idx]
                idx += 1
    xc = np.empty(d)
    main = np.empty(k)
    slse = 0.0
    for i in range(n):
        for c in range(k):
            for j in range(d):
                xc[j] = x[i, j] - means[c, j]
            sq = 0.0
            for row in range(d):
                t = qdiag[c, row] * xc[row]
                for col in range(row):
                    t += L[c, row, col] * xc[col]
                sq += t * t
            main[c] = alpha[c] + sum_q[c] - 0.5 * sq
        mx = main[0]
        for c in range(1, k):
            if main[c] > mx:
                mx = main[c]
        se = 0.0
        for c in range(k):
            se += math.exp(main[c] - mx)
        slse += math.log(se) + mx
    mx = alpha[0]
    for c in range(1, k):
        if alpha[c] > mx:
            mx = alpha[c]
    se = 0.0
    for c in range(k):
        se += math.exp(alpha[c] - mx)
    lse_alpha = math.log(se) + mx
    prior = 0.0
    for c in range(k):
        frob = 0.0
        for j in range(d):
            frob += qdiag[c, j] * qdiag[c, j]
        for j in range(d, icf.shape[1]):
            frob += icf[c, j] * icf[c, j]
        prior += -0.5 * gamma * gamma * frob + m * sum_q[c]
    dof = d + m + 1
    mgl = 0.25 * d * (d - 1) * LOG_PI
    for j in range(1, d + 1):
        mgl += math.lgamma(0.5 * dof + 0.5 * (1 - j))
    prior += k * (dof * d * math.log(gamma / math.sqrt(2.0)) - mgl)
    return -0.5 * n * d * LOG_2PI + slse - n * lse_alpha + prior


# -- the program in the reversible language -------------------------------------------------
# (`with routine:` is the language's, not a Python name: hence the `noqa: F821`.)


@reversible
def gmm_weights(alpha, means, icf, W):
    """``W [K, G] +=`` the weights of every component, with ``V_ik = W_k . z(x_i)`` (see
    the module docstring).  ``W`` must be zero on entry."""
    K = means.shape[0]
    D = means.shape[1]
    with routine as factor:  # noqa: F821
        Qm = np.zeros((K, D, D))                    # Q_k, dense lower-triangular
        for k in range(K):
            for j in range(D):
                Qm[k, j, j] += math.exp(icf[k, j])
            for c in range(D):
                for r in range(c + 1, D):
                    Qm[k, r, c] += icf[k, D + c * (2 * D - c - 1) // 2 + r - c - 1]
        P = np.zeros((K, D, D))                     # P_k = Q_k^T Q_k, lower triangle
        for k in range(K):
            for a in range(D):
                for b in range(a + 1):
                    t = 0.0
                    for j in range(D - 1, a - 1, -1):
                        t += Qm[k, j, a] * Qm[k, j, b]
                    P[k, a, b], t = t, P[k, a, b]
                    del t
    for k in range(K):
        c0 = 0.0                                    # alpha + sum(q) - mu^T P mu / 2
        c0 += alpha[k]
        for j in range(D):
            c0 += icf[k, j]
        for a in range(D):
            ma = means[k, a]
            c0 -= 0.5 * P[k, a, a] * ma * ma
            for b in range(a):
                c0 -= P[k, a, b] * ma * means[k, b]
            del ma
        W[k, 0], c0 = c0, W[k, 0]
        del c0
        for a in range(D):                          # P mu
            u = 0.0
            for b in range(a + 1):
                u += P[k, a, b] * means[k, b]
            for b in range(a + 1, D):
                u += P[k, b, a] * means[k, b]
            W[k, 1 + a], u = u, W[k, 1 + a]
            del u
        for a in range(D):                          # -P_aa / 2 and -P_ab for x_a x_b
            g = 1 + D + a * (a + 1) // 2
            W[k, g + a] -= 0.5 * P[k, a, a]
            for b in range(a):
                W[k, g + b] -= P[k, a, b]
            del g
    ~factor
    del D
    del K


@reversible
def gmm_features_t(xt, Zt, nb):
    """``Zt[:, j] += z(x_j) = [1, x_j, x_ja x_jb (b <= a)]`` for the first ``nb`` points
    of the block ``xt [D, B]`` (points in columns), features in the columns of
    ``Zt [G, B]``; the other columns stay zero.  ``Zt`` must be zero on entry."""
    D = xt.shape[0]
    for j in range(nb):
        Zt[0, j] += 1.0
    for a in range(D):
        for j in range(nb):
            Zt[1 + a, j] += xt[a, j]
    for a in range(D):
        g = 1 + D + a * (a + 1) // 2
        for b in range(a + 1):
            for j in range(nb):
                Zt[g + b, j] += xt[a, j] * xt[b, j]
        del g
    del D


@reversible
def gmm_dots_t(W, Zt, Vt):
    """``Vt[k, j] += W[k] . Zt[:, j]`` for every component ``k`` and point ``j`` of a
    block (points in columns).  The innermost loop runs over the points, so that it
    needs no reduction and the compiler vectorises it; eight features per statement
    (then the remainder one by one) make eight multiply-adds per update of ``Vt``.
    The forward pass of the gradient.  Its reverse sweep would accumulate ``dL/dW``
    across points, a reduction, so the gradient runs :data:`gmm_dots`'s sweep instead,
    from the same ``V``."""
    G8 = W.shape[1] // 8
    for g8 in range(G8):
        g = 8 * g8
        for k in range(W.shape[0]):
            w0 = W[k, g]
            w1 = W[k, g + 1]
            w2 = W[k, g + 2]
            w3 = W[k, g + 3]
            w4 = W[k, g + 4]
            w5 = W[k, g + 5]
            w6 = W[k, g + 6]
            w7 = W[k, g + 7]
            for j in range(Zt.shape[1]):
                Vt[k, j] += (((w0 * Zt[g, j] + w1 * Zt[g + 1, j])
                              + (w2 * Zt[g + 2, j] + w3 * Zt[g + 3, j]))
                             + ((w4 * Zt[g + 4, j] + w5 * Zt[g + 5, j])
                                + (w6 * Zt[g + 6, j] + w7 * Zt[g + 7, j])))
            del w7
            del w6
            del w5
            del w4
            del w3
            del w2
            del w1
            del w0
        del g
    for g in range(8 * G8, W.shape[1]):
        for k in range(W.shape[0]):
            w = W[k, g]
            for j in range(Zt.shape[1]):
                Vt[k, j] += w * Zt[g, j]
            del w
    del G8


@reversible
def gmm_dots(W, Z, V):
    """``V[i, k] = W[k] . Z[i]`` for every point ``i`` (features ``Z [N, G]``, points in
    rows) and component ``k``.  ``V`` must be zero on entry (each sum is swapped in);
    the inverse sets it back to zero.  Written for its reverse sweep: there the
    innermost loop runs over the features, ``dL/dW[k, g] += dL/dV[i, k] Z[i, g]``,
    with no reduction (it vectorises: loops written downwards run upwards in the
    sweep, the direction the vectoriser takes), while the uncomputation of the sum,
    which nothing reads, is dead code without runtime checks.  Four points share each
    pass over the features (then the remainder one by one), so that the sweep loads and
    stores each ``dL/dW[k, g]`` once for four multiply-adds."""
    N4 = Z.shape[0] // 4
    for i in range(Z.shape[0] - 1, 4 * N4 - 1, -1):
        for k in range(W.shape[0] - 1, -1, -1):
            v = 0.0
            for g in range(W.shape[1] - 1, -1, -1):   # the sweep runs g upwards
                v += W[k, g] * Z[i, g]
            V[i, k], v = v, V[i, k]
            del v
    for i4 in range(N4 - 1, -1, -1):
        i = 4 * i4
        for k in range(W.shape[0] - 1, -1, -1):
            v0 = 0.0
            v1 = 0.0
            v2 = 0.0
            v3 = 0.0
            for g in range(W.shape[1] - 1, -1, -1):
                v0 += W[k, g] * Z[i, g]
                v1 += W[k, g] * Z[i + 1, g]
                v2 += W[k, g] * Z[i + 2, g]
                v3 += W[k, g] * Z[i + 3, g]
            V[i, k], v0 = v0, V[i, k]
            V[i + 1, k], v1 = v1, V[i + 1, k]
            V[i + 2, k], v2 = v2, V[i + 2, k]
            V[i + 3, k], v3 = v3, V[i + 3, k]
            del v3
            del v2
            del v1
            del v0
        del i
    del N4


@reversible
def gmm_row_max(V, C):
    """``C[i] +=`` the maximum of ``V[i, :]``, for every point, from a tree in a scratch
    array ``T``: leaves ``T[K + k] = V[i, k]``, nodes ``T[j] = max(T[2j], T[2j + 1])``,
    root ``T[1]``; the tree is built and cleared exactly for every point."""
    K = V.shape[1]
    T = np.zeros(2 * K)
    for i in range(V.shape[0] - 1, -1, -1):
        with routine as tree:  # noqa: F821
            for k in range(K):
                T[K + k] += V[i, k]
            for j in range(K - 1, 0, -1):
                T[j] += max(T[2 * j], T[2 * j + 1])
        C[i] += T[1]
        ~tree
    del T
    del K


@reversible
def gmm_mixture(alpha, means, icf, V, C, gamma, m, out):
    """``out += sum_i logsumexp_k V[i, k] - N logsumexp(alpha) - N D log(2 pi) / 2`` plus
    the Wishart log-prior of the precision matrices (``means`` gives only ``D``).

    ``C[i]`` is the shift of point ``i``'s logsumexp, ``log(sum_k exp(V[i, k] - C[i])) +
    C[i]``: any value gives the same result and the same derivatives with respect to
    ``V``; the row maximum (:data:`gmm_row_max`) keeps the exponentials in range."""
    N = V.shape[0]
    K = V.shape[1]
    D = means.shape[1]
    # The reverse sweep of `s += exp(-c + V[i, k])` restores s, then adds to the adjoints
    # of what the expression reads, in its order: c (a scalar) first, V[i, k] (an array
    # element) last, so that the three exponentials are evaluated before anything is
    # stored to memory -- and the compiler shares them.  (V[i, k] - c would cost two.)
    for i in range(N - 1, -1, -1):
        c = C[i]
        with routine as lse:  # noqa: F821
            s = 0.0
            for k in range(K - 1, -1, -1):
                s += math.exp(-c + V[i, k])
        out += math.log(s) + c
        ~lse
        del c
    with routine as lse_alpha:  # noqa: F821 -- logsumexp(alpha) = log(sa) + Ta[1]
        Ta = np.zeros(2 * K)
        for k in range(K):
            Ta[K + k] += alpha[k]
        for j in range(K - 1, 0, -1):
            Ta[j] += max(Ta[2 * j], Ta[2 * j + 1])
        ma = Ta[1]
        sa = 0.0
        for k in range(K):
            sa += math.exp(-ma + alpha[k])
    out -= N * (math.log(sa) + ma)
    ~lse_alpha
    out -= 0.5 * N * D * LOG_2PI
    for k in range(K):                              # Wishart log-prior
        for j in range(D):
            out -= 0.5 * gamma * gamma * math.exp(2.0 * icf[k, j])
            out += m * icf[k, j]
        for j in range(D, icf.shape[1]):
            out -= 0.5 * gamma * gamma * icf[k, j] * icf[k, j]
    dof = D + m + 1
    out += K * dof * D * (math.log(gamma) - 0.5 * math.log(2.0))
    out -= K * 0.25 * D * (D - 1) * LOG_PI          # log Gamma_D(dof / 2), exactly: the
    for j in range(1, D + 1):                       # arguments are halves of integers
        if (dof + 1 - j) % 2 == 1:
            out -= K * 0.5 * LOG_PI
        for b in range(dof - 1 - j, 0, -2):
            out -= K * math.log(0.5 * b)
    del dof
    del D
    del K
    del N


@reversible
def gmm_objective(alpha, means, icf, x, gamma, m, out):
    """``out +=`` the GMM log-posterior (module docstring); ``m`` is an int.  Every work
    array is allocated once, uncomputed and freed inside; the points go through in
    blocks of :func:`point_block` points, their features computed and uncomputed in a
    ``[G, B]`` scratch array."""
    N = x.shape[0]
    K = means.shape[0]
    D = means.shape[1]
    G = 1 + D + D * (D + 1) // 2
    with routine as weights:  # noqa: F821
        W = np.zeros((K, G))
        gmm_weights(alpha, means, icf, W)
    with routine as pairs:  # noqa: F821
        V = np.zeros((N, K))
        B = max(1, min(N, max(POINT_BLOCK_MIN, min(POINT_BLOCK_MAX, 65536 // G))))
        xt = np.zeros((D, B))                       # one block at a time: its points,
        Zt = np.zeros((G, B))                       # their features and their
        Vt = np.zeros((K, B))                       # columns of V, transposed
        for b0 in range(0, N, B):
            nb = min(B, N - b0)
            for a in range(D):
                for j in range(nb):
                    xt[a, j] += x[b0 + j, a]
            gmm_features_t(xt, Zt, nb)
            gmm_dots_t(W, Zt, Vt)                   # columns nb.. have zero features
            for j in range(nb):
                for k in range(K):
                    V[b0 + j, k], Vt[k, j] = Vt[k, j], V[b0 + j, k]
            ~gmm_features_t(xt, Zt, nb)
            for a in range(D):
                for j in range(nb):
                    xt[a, j] -= x[b0 + j, a]
            del nb
        del Vt
        del Zt
        del xt
        del B
    with routine as shifts:  # noqa: F821
        C = np.zeros(N)
        gmm_row_max(V, C)
    gmm_mixture(alpha, means, icf, V, C, gamma, m, out)
    ~shifts
    ~pairs
    ~weights
    del G
    del D
    del K
    del N


#: the same programs without runtime checks (for speed); a caller with check=False runs
#: its callees unchecked too
gmm_weights_unchecked = reversible(check=False)(gmm_weights.__wrapped__)
gmm_features_t_unchecked = reversible(check=False)(gmm_features_t.__wrapped__)
gmm_dots_t_unchecked = reversible(check=False)(gmm_dots_t.__wrapped__)
gmm_dots_unchecked = reversible(check=False)(gmm_dots.__wrapped__)
gmm_row_max_unchecked = reversible(check=False)(gmm_row_max.__wrapped__)
gmm_mixture_unchecked = reversible(check=False)(gmm_mixture.__wrapped__)
gmm_objective_unchecked = reversible(check=False)(gmm_objective.__wrapped__)


def _args(data: GMMData) -> tuple:
    return (data.alpha, data.means, data.icf, data.x, data.gamma, data.m)


def objective(data: GMMData, check: bool = True) -> float:
    """The log-posterior computed by the reversible program :data:`gmm_objective`
    (``check=False``: without runtime checks)."""
    f = gmm_objective if check else gmm_objective_unchecked
    return f(*_args(data), 0.0)[-1]


@dataclass
class SplitWorkspace:
    """The work arrays of :func:`gmm_gradient`'s split method for one problem shape, to
    reuse across calls (``SplitWorkspace.new(D, K, N)``; every call sets what it needs).

    Why: ``V`` and its adjoint are ``N x K`` each.  Allocated and freed on every call,
    blocks that large go back to the operating system (glibc trims or unmaps them), and
    touching fresh pages then costs about as much as the dot products at small ``D`` and
    large ``K`` (measured without a workspace: 1.2 ms of a 5.7 ms gradient at D=2,
    K=200, N=1000).  A caller
    that differentiates the same shape repeatedly -- an optimiser, a benchmark -- keeps
    one workspace, as ADBench's tools allocate theirs in a ``prepare`` step."""

    W: np.ndarray                   # [K, G] weights
    gW: np.ndarray                  # [K, G] their adjoint
    V: np.ndarray                   # [N, K] inner terms
    gV: np.ndarray                  # [N, K] their adjoint
    C: np.ndarray                   # [N] shifts of the logsumexps
    Zt: np.ndarray                  # [G, B] one block's features, points in columns
    Vt: np.ndarray                  # [K, B] that block's inner terms
    Z: np.ndarray                   # [B, G] one block's features, points in rows

    @classmethod
    def new(cls, d: int, k: int, n: int) -> SplitWorkspace:
        g = n_features(d)
        b = max(1, min(n, point_block(d)))
        return cls(np.zeros((k, g)), np.zeros((k, g)), np.zeros((n, k)), np.zeros((n, k)),
                   np.zeros(n), np.zeros((g, b)), np.zeros((k, b)), np.zeros((b, g)))

    def fits(self, data: GMMData) -> bool:
        """Whether this workspace has ``data``'s shape."""
        return self.V.shape == (data.n, data.k) and self.W.shape[1] == n_features(data.d)


def point_block(d: int) -> int:
    """Points per block of features: ``2**16 // G`` within ``[POINT_BLOCK_MIN,
    POINT_BLOCK_MAX]`` (long enough an innermost loop for the vectoriser, small enough a
    block to stay in the L2 cache between the features' computation and their use)."""
    return max(POINT_BLOCK_MIN, min(POINT_BLOCK_MAX, 65536 // n_features(d)))


def n_features(d: int) -> int:
    """``G = 1 + D + D (D + 1) / 2``: the features of a point, ``[1, x, x_a x_b (b <= a)]``."""
    return 1 + d + d * (d + 1) // 2


def gmm_gradient(data: GMMData, check: bool = False, method: str = "split",
                 workspace: SplitWorkspace | None = None
                 ) -> tuple[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(value, (d/d alpha, d/d means, d/d icf))`` of the log-posterior, by revbench's
    reverse sweeps (``check=True``: with the runtime checks).

    ``method="split"`` (default) keeps the stages' results instead of recomputing them,
    from a ``@numba.njit`` driver over the compiled kernels (:func:`split_driver`):
    forward runs of :data:`gmm_weights` (``W``) and :data:`gmm_dots_t` (``V``, a block of
    points at a time, each block's features in a small buffer); the row maxima ``C`` of
    ``V`` (the logsumexps' shifts); the reverse sweep of :data:`gmm_mixture` alone, from
    ``out = 0`` (its only output is the accumulator, so it needs no forward run; it ends
    at ``-value``), which gives ``dL/dV``; then the reverse sweeps of :data:`gmm_dots`
    (block by block, features recomputed) and ``gmm_weights``.  The features and the
    shifts are left out of the sweeps' ``wrt``: the points are data, and the result
    does not depend on the shifts, so neither gets an adjoint.  ``workspace`` (a
    :class:`SplitWorkspace` of ``data``'s shape) holds the work arrays between calls;
    without one they are allocated for this call.
    ``method="grad"``: ``value_and_grad(gmm_objective, loss="out")``, the single program
    that uncomputes everything in its forward run and recomputes it in its reverse sweep.
    """
    if method == "grad":
        f = gmm_objective if check else gmm_objective_unchecked
        outs, grads = value_and_grad(f, loss="out")(*_args(data), 0.0)
        return outs[-1], (grads[0], grads[1], grads[2])
    if method != "split":
        raise ValueError(f"method must be 'split' or 'grad', got {method!r}")
    if workspace is None:
        workspace = SplitWorkspace.new(data.d, data.k, data.n)
    elif not workspace.fits(data):
        raise ValueError(f"the workspace is for another shape than D={data.d}, K={data.k}, "
                         f"N={data.n}: make one with SplitWorkspace.new({data.d}, {data.k}, "
                         f"{data.n})")
    alpha, means, icf, x, gamma, m = _args(data)
    ga, gm, gi = np.zeros_like(alpha), np.zeros_like(means), np.zeros_like(icf)
    atol, rtol = get_tolerance()
    driver = split_driver(check)
    ws = workspace
    try:
        value = driver(alpha, means, icf, x, gamma, m, ga, gm, gi, ws.W, ws.gW, ws.V, ws.gV,
                       ws.C, ws.Zt, ws.Vt, ws.Z, atol, rtol)
    except CheckFailed as exc:
        raise to_user_error(exc) from None
    return value, (ga, gm, gi)


@numba.njit(cache=True, boundscheck=False)
def point_features(x, Z):
    """``Z[i] = z(x_i)`` for every point (points in rows), the numbers that
    :data:`gmm_features_t` computes (points in columns)."""
    n, d = x.shape
    for i in range(n):
        Z[i, 0] = 1.0
        for a in range(d):
            Z[i, 1 + a] = x[i, a]
        g = 1 + d
        for a in range(d):
            xa = x[i, a]
            for b in range(a + 1):
                Z[i, g + b] = xa * x[i, b]
            g += a + 1


@numba.njit(cache=True, boundscheck=False)
def point_features_t(x, Zt):
    """``Zt[:, j] = z(x_j)`` for the points ``x [nb, D]`` (points in columns, as
    :data:`gmm_features_t` computes them); columns ``nb..`` of ``Zt`` are zeroed."""
    nb, d = x.shape
    xt = np.ascontiguousarray(x.T)                 # [D, nb]: the loops below run along rows
    Zt[:, nb:] = 0.0
    Zt[0, :nb] = 1.0
    Zt[1:1 + d, :nb] = xt
    g = 1 + d
    for a in range(d):
        for b in range(a + 1):
            for j in range(nb):
                Zt[g + b, j] = xt[a, j] * xt[b, j]
        g += a + 1


def _make_driver(weights, weights_bwd, dots_t, dots_bwd, mixture_bwd):

    @numba.njit(boundscheck=False)
    def driver(alpha, means, icf, x, gamma, m, ga, gm, gi, W, gW, V, gV, C, Zt, Vt, Z,
               atol, rtol):
        n = x.shape[0]
        k = W.shape[0]
        block = Zt.shape[1]
        W[:] = 0.0
        weights(alpha, means, icf, W, atol, rtol)
        for b0 in range(0, n, block):              # V, a block at a time, by gmm_dots_t
            nb = min(block, n - b0)
            point_features_t(x[b0:b0 + nb], Zt)
            Vt[:] = 0.0
            dots_t(W, Zt, Vt, atol, rtol)
            for j in range(nb):
                for c in range(k):
                    V[b0 + j, c] = Vt[c, j]
        for i in range(n):                         # the shifts of the logsumexps: row maxima
            C[i] = V[i].max()
        gV[:] = 0.0
        # adjoints of alpha, means, icf, V and out (C and gamma are outside wrt)
        res = mixture_bwd(alpha, means, icf, V, C, gamma, m, 0.0, ga, gm, gi, gV, 1.0,
                          atol, rtol)
        gW[:] = 0.0
        for b0 in range(0, n, block):              # gmm_dots's reverse sweep, a block at a time
            nb = min(block, n - b0)
            Zb = Z[:nb]
            point_features(x[b0:b0 + nb], Zb)
            # adjoints of W and V (Z, the features, is outside wrt); the sweep sets
            # V and gV back to zero, and they are not needed any more
            dots_bwd(W, Zb, V[b0:b0 + nb], gW, gV[b0:b0 + nb], atol, rtol)
        weights_bwd(alpha, means, icf, W, ga, gm, gi, gW, atol, rtol)
        return -res[7]

    return driver


#: what each stage's reverse sweep differentiates with respect to (written arguments,
#: ``W`` and ``V``, always carry adjoints)
_WRT_DOTS = ("W",)
_WRT_MIXTURE = ("alpha", "means", "icf", "V")
_DRIVERS: dict[bool, Callable[..., float]] = {}


def split_driver(check: bool = False) -> Callable[..., float]:
    """The compiled ``@numba.njit`` driver of :func:`gmm_gradient`'s split method (for
    benchmarks): ``driver(alpha, means, icf, x, gamma, m, g_alpha, g_means, g_icf, W, gW,
    V, gV, C, Zt, Vt, Z, atol, rtol) -> value`` adds the gradient into ``g_alpha``,
    ``g_means``, ``g_icf``; ``W ... Z`` are the arrays of a :class:`SplitWorkspace`."""
    driver = _DRIVERS.get(check)
    if driver is None:
        f = {name: fn if check else fn_unchecked for name, fn, fn_unchecked in (
            ("weights", gmm_weights, gmm_weights_unchecked),
            ("dots_t", gmm_dots_t, gmm_dots_t_unchecked),
            ("dots", gmm_dots, gmm_dots_unchecked),
            ("mixture", gmm_mixture, gmm_mixture_unchecked))}

        def a(*shape):                  # example arguments: only their types matter
            return np.zeros(shape)

        w_args = (a(1), a(1, 1), a(1, 1), a(1, 1))
        d_args = (a(1, 1), a(1, 1), a(1, 1))
        m_args = (a(1), a(1, 1), a(1, 1), a(1, 1), a(1), 1.0, 0, 0.0)
        driver = _make_driver(
            f["weights"].kernel("forward", *w_args), f["weights"].kernel("backward", *w_args),
            f["dots_t"].kernel("forward", *d_args),
            f["dots"].kernel("backward", *d_args, wrt=_WRT_DOTS),
            f["mixture"].kernel("backward", *m_args, wrt=_WRT_MIXTURE))
        _DRIVERS[check] = driver
    return driver

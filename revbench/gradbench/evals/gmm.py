"""``gmm``: ADBench's Gaussian mixture log-posterior and its gradient with respect to every
parameter, by ``revbench.grad``.

Component ``c`` has weight ``alpha[c]``, mean ``mu[c]`` and the Cholesky factor of its
precision ``Q_c = diag(exp(q[c])) + L_c``, ``L_c`` strictly lower triangular, filled column
by column from ``l[c]`` (``lower`` in the program).  With ``lse`` the stable LogSumExp,

    objective = -n d / 2 log(2 pi) + sum_i lse_c(alpha_c + sum(q_c) - |Q_c (x_i - mu_c)|^2 / 2)
                - n lse(alpha) + k C - sum_c (gamma^2 / 2 (|exp(q_c)|^2 + |l_c|^2) - m sum(q_c))

(``C = n_w d (log gamma - log(2) / 2) - log Gamma_d(n_w / 2)``, ``n_w = d + m + 1``: the
Wishart prior's constant).  The program is written with matrices, as a model reads
(``docs/language.md`` §9): for each component, the centred data ``x - mu[c]`` (a row
broadcast over the rows), ``Q_c``'s product with it (``xc @ L.T`` on BLAS), and a column
of the ``n x k`` matrix of terms, whose rows' LogSumExp is one sum along an axis -- at
GradBench's largest size about 3 times faster than the same model written with loops over
the points.  GradBench's inputs come in two forms: ``mu``, ``q``, ``l``
(its jacobian answered as an object of the four gradients), and ADBench's ``means`` and
``icf`` (``q`` then ``l`` in one row; the jacobian one flat list), both accepted."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program
from revbench.lang.markers import routine


def gmm_objective(err, alpha, mu, q, lower, x, gamma, m, const):
    n, d = x.shape
    k = alpha.shape[0]
    with routine as main:
        terms = np.zeros((n, k))
        for c in range(k):
            with routine as quad:
                L = np.zeros((d, d))
                for col in range(d):
                    for row in range(col + 1, d):
                        L[row, col] += lower[c, col * (2 * d - col - 1) // 2 + row - col - 1]
                xc = np.zeros((n, d))
                xc += x - mu[c]
                Qx = np.zeros((n, d))
                Qx += xc * np.exp(q[c])
                Qx += xc @ L.T
            terms[:, c] += alpha[c] + np.sum(q[c]) - 0.5 * np.sum(Qx * Qx, axis=1)
            ~quad
        top = np.zeros(n)
        top += np.max(terms, axis=1)
        s = np.zeros(n)
        s += np.sum(np.exp((terms.T - top).T), axis=1)
    err += np.sum(top + np.log(s))
    ~main
    with routine as weights:
        a_top = np.max(alpha)
        a_s = 0.0
        a_s += np.sum(np.exp(alpha - a_top))
    err -= n * (a_top + np.log(a_s))
    ~weights
    for c in range(k):
        err -= 0.5 * gamma * gamma * (np.sum(np.exp(2.0 * q[c])) + np.sum(lower[c] * lower[c]))
        err += m * np.sum(q[c])
    err += const


def constant(n: int, d: int, k: int, gamma: float, m: int) -> float:
    """``-n d / 2 log(2 pi) + k C``: the terms that do not depend on the parameters."""
    nw = d + m + 1
    a = nw / 2
    log_gamma_d = d * (d - 1) / 4 * math.log(math.pi) + sum(
        math.lgamma(a + (1 - j) / 2) for j in range(1, d + 1))
    C = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    return -n * d / 2 * math.log(2 * math.pi) + k * C


def _args(raw: Any) -> tuple:
    x = floats(field(raw, "x"), "x", 2)
    n, d = x.shape
    alpha = floats(field(raw, "alpha"), "alpha", 1)
    k = alpha.size
    if "icf" in raw or "means" in raw:  # (ADBench's form)
        mu = floats(field(raw, "means"), "means", 2)
        icf = floats(field(raw, "icf"), "icf", 2)
        q, lower, flat = icf[:, :d].copy(), icf[:, d:].copy(), True
    else:
        mu = floats(field(raw, "mu"), "mu", 2)
        q = floats(field(raw, "q"), "q", 2)
        lower, flat = floats(field(raw, "l"), "l", 2), False
    for name, a, shape in (("mu", mu, (k, d)), ("q", q, (k, d)),
                           ("l", lower, (k, d * (d - 1) // 2))):
        if a.shape != shape:
            raise ValueError(f"`{name}` must have shape {shape} (k = {k}, d = {d}), got {a.shape}")
    gamma = float(field(raw, "gamma"))
    m = integer(field(raw, "m"), "m", 0)
    return (alpha, mu, q, lower, x, gamma, m, constant(n, d, k, gamma, m)), flat


class Gmm(Eval):
    name = "gmm"

    def steps(self) -> dict[str, Steps]:
        f = program(gmm_objective, self.check)
        g = ad.grad(f, loss="err", wrt=("alpha", "mu", "q", "lower"))

        def jacobian(a):
            args, flat = a
            return g(0.0, *args)[1:5], flat

        def jacobian_json(r):
            (ga, gmu, gq, gl), flat = r
            if flat:
                return np.concatenate([ga, gmu.ravel(), np.hstack([gq, gl]).ravel()]).tolist()
            return {"alpha": ga.tolist(), "mu": gmu.tolist(), "q": gq.tolist(), "l": gl.tolist()}

        return {"objective": (_args, lambda a: f(0.0, *a[0])[0], float),
                "jacobian": (_args, jacobian, jacobian_json)}

    def sample(self) -> Any:
        return {"d": 2, "k": 2, "n": 3, "x": [[0.1, 0.2], [0.3, -0.1], [1.0, 0.5]], "m": 0,
                "gamma": 1.0, "mu": [[0.0, 0.1], [0.5, 0.5]], "q": [[0.1, -0.2], [0.0, 0.3]],
                "l": [[0.2], [-0.1]], "alpha": [0.1, -0.3]}

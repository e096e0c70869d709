"""Numerically stable special functions in the reversible language.

``logsumexp(out, x)`` adds ``log(sum(exp(x)))`` to ``out`` without overflow, by
shifting with the maximum of ``x``.  A maximum cannot be computed into a scalar
reversibly (``max(m, x[i])`` forgets the old ``m``), so ``logsumexp`` keeps the
*running maximum* in an ancilla array ``mx`` (``mx[i] = max(x[0..i])``), computed
in a ``with routine:`` and uncomputed exactly by ``~routine`` once the result is
added.  That array has the length of ``x`` and lives only during the call: it is
not a tape (nothing grows with the number of calls or steps executed).

The shift changes nothing mathematically (the derivative of the result with
respect to the maximum is zero), so its gradient contribution is only rounding
noise; the gradient is ``softmax(x)``.
"""

from __future__ import annotations

import math
from math import exp, log, log1p

import numpy as np

from revbench.function import reversible

__all__ = ["log_softmax", "logaddexp", "logsumexp", "softmax"]


@reversible
def logsumexp(out, x):
    """``out += log(sum_i exp(x[i]))`` for a non-empty 1-D float array ``x``, computed as
    ``m + log(sum_i exp(x[i] - m))`` with ``m = max(x)``: no overflow for large ``x``
    (``x ~ 1000``) and no ``log(0)`` for very negative ``x``.

    The sum is accumulated divided by ``len(x)`` (so it stays in ``[1/n, 1]`` and its
    uncomputation is exact to ~``n`` ulps of 1, far inside the ancilla check's tolerance).
    Cost: 2 n ``exp`` and 4 passes over ``x`` (compute and uncompute the running maximum
    and the sum); an ancilla array of ``len(x)`` floats during the call.
    Gradient: ``d out / dx = softmax(x)``.
    """
    assert len(x) > 0, "logsumexp: x must not be empty"
    with routine:  # noqa: F821 (reversible-language syntax)
        mx = np.zeros_like(x)
        mx[0] += x[0]
        for i in range(1, len(x)):
            mx[i] += max(mx[i - 1], x[i])
        s = 0.0
        for i in range(len(x)):
            s += exp(x[i] - mx[len(x) - 1]) / len(x)
    out += log(s) + math.log(len(x)) + mx[len(x) - 1]
    ~routine  # noqa: F821


@reversible
def logaddexp(out, a, b):
    """``out += log(exp(a) + exp(b))`` for scalars, as ``max(a, b) + log1p(exp(-|a - b|))``
    (no overflow).  Cost: one ``exp`` and one ``log1p``.
    Gradient: ``(sigmoid(a - b), sigmoid(b - a))``.
    """
    out += max(a, b) + log1p(exp(-abs(a - b)))


@reversible
def softmax(p, x):
    """``p += exp(x - logsumexp(x))`` (the softmax of a 1-D array ``x``, added into ``p``).

    Cost: two ``logsumexp`` (the shift is computed, used, then uncomputed) and n ``exp``.
    """
    assert len(p) == len(x), "softmax: p and x must have the same length"
    lse = 0.0
    logsumexp(lse, x)
    for i in range(len(x)):
        p[i] += exp(x[i] - lse)
    ~logsumexp(lse, x)
    del lse


@reversible
def log_softmax(p, x):
    """``p += x - logsumexp(x)`` (the log-softmax of a 1-D array ``x``, added into ``p``).

    Cost: two ``logsumexp`` and n subtractions.
    """
    assert len(p) == len(x), "log_softmax: p and x must have the same length"
    lse = 0.0
    logsumexp(lse, x)
    for i in range(len(x)):
        p[i] += x[i] - lse
    ~logsumexp(lse, x)
    del lse

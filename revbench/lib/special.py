"""Numerically stable special functions in the reversible language.

``logsumexp(out, x)`` adds ``log(sum(exp(x)))`` to ``out`` without overflow, by
shifting with the maximum of ``x``: the maximum is added into a scalar ancilla
(``m += np.max(x)``, undone exactly by ``m -= np.max(x)``), the shifted sum is
computed beside it in a ``with routine:`` and both are uncomputed by ``~routine``
once the result is added.  Nothing but two scalars lives during the call.

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
    Cost: n ``exp`` and two passes over ``x`` (the maximum and the sum); with checks on,
    two more to uncompute them.  No ancilla array.
    Gradient: ``d out / dx = softmax(x)``.
    """
    assert len(x) > 0, "logsumexp: x must not be empty"
    with routine:  # noqa: F821 (reversible-language syntax)
        m = 0.0
        m += np.max(x)
        s = 0.0
        for i in range(len(x)):
            s += exp(x[i] - m) / len(x)
    out += log(s) + math.log(len(x)) + m
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

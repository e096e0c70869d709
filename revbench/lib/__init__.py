"""revbench's reversible standard library.

Reversible functions (``@reversible``, checks on) to call from your own reversible
code or directly.  The convention everywhere: **the first argument accumulates the
result** and the others are only read -- ``dot(s, x, y)`` does ``s += x . y``; the
inverse (``~dot``) subtracts it again, and ``grad`` differentiates through them
like any reversible function.  A caller with ``check=False`` runs them without
checks too.

=========================================  ==============================================
``linalg``                                 ``dot``, ``sumsq``, ``total``, ``axpy``, ``scale``,
                                           ``matvec`` (``y += A x``), ``matvec_t``
                                           (``y += A^T x``), ``outer`` (``A += x y^T``),
                                           ``matmul`` (``C += A B``)
``sparse`` (CSR as ``data, indices,        ``csr_matvec`` (``y += A x``), ``csr_matvec_t``
indptr``; int64 index arrays)              (``y += A^T x``), ``csr_bilinear``
                                           (``s += x^T A y``), ``sparse_dot``, ``csr_todense``
``special``                                ``logsumexp`` (stable), ``logaddexp``, ``softmax``,
                                           ``log_softmax``
=========================================  ==============================================

Example::

    from revbench import reversible, grad
    from revbench.lib import dot, logsumexp

    @reversible
    def loss(L, w, x):
        logsumexp(L, w)      # L += log(sum(exp(w)))
        dot(L, w, x)         # L += w . x

    grad(loss, loss="L")(0.0, w, x)
"""

from revbench.lib.linalg import axpy, dot, matmul, matvec, matvec_t, outer, scale, sumsq, total
from revbench.lib.sparse import csr_bilinear, csr_matvec, csr_matvec_t, csr_todense, sparse_dot
from revbench.lib.special import log_softmax, logaddexp, logsumexp, softmax

__all__ = [
    "axpy",
    "csr_bilinear",
    "csr_matvec",
    "csr_matvec_t",
    "csr_todense",
    "dot",
    "log_softmax",
    "logaddexp",
    "logsumexp",
    "matmul",
    "matvec",
    "matvec_t",
    "outer",
    "scale",
    "softmax",
    "sparse_dot",
    "sumsq",
    "total",
]

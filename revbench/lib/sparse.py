"""Sparse (CSR) linear algebra in the reversible language.

A CSR matrix ``A`` of shape ``(m, n)`` is passed as its three arrays, as SciPy
stores them: ``data`` (float64, the ``nnz`` stored values), ``indices`` (int64,
the column of each stored value) and ``indptr`` (int64, length ``m + 1``: row
``i`` holds ``data[indptr[i]:indptr[i + 1]]``).  SciPy often uses int32 index
arrays; convert them with ``A.indices.astype(np.int64)`` (revbench takes int64,
see :func:`revbench.workloads.sparse.make_csr`).  The index arrays are only
read, and carry no gradient (``grad`` gives ``None`` for them); the gradient
with respect to ``data`` has the sparsity pattern of ``A``.

The sizes of the arrays are checked by ``assert`` statements (kept with ``check=False``);
column indices are not (an index out of range is an ``IndexError`` with checks on, and
undefined behaviour with ``check=False``).

Every function accumulates into its first argument (``csr_matvec(y, ...)`` does
``y += A x``).  Each is one pass over the stored values; the running sums of a
row live in registers (see :mod:`revbench.lib.linalg`), so the reverse sweep of
AD is one pass too.  Duplicate entries (the same column twice in a row) are
allowed and simply add up, as in SciPy.
"""

from __future__ import annotations

from revbench.function import reversible

__all__ = ["csr_bilinear", "csr_matvec", "csr_matvec_t", "csr_todense", "sparse_dot"]


@reversible
def sparse_dot(s, data, indices, x):
    """``s += sum_k data[k] * x[indices[k]]``: a sparse vector (values ``data`` at positions
    ``indices``) dotted with a dense vector ``x``.

    Cost: nnz multiply-adds (a gather from ``x``).  Gradient: ``ds/ddata[k] = x[indices[k]]``,
    ``ds/dx = the sparse vector, scattered``.
    """
    assert len(indices) == len(data), "sparse_dot: data and indices must have the same length"
    for k in range(len(data)):
        s += data[k] * x[indices[k]]


@reversible
def csr_matvec(y, data, indices, indptr, x):
    """``y += A x`` for the CSR matrix ``A = (data, indices, indptr)`` of shape ``(m, n)``,
    ``x`` of length ``n`` and ``y`` of length ``m``.

    Row by row, the row's sum in a register (``y[i]`` is swapped into an ancilla).
    Cost: nnz multiply-adds, one pass over ``data`` and ``indices`` (a gather from ``x``).
    Gradient of ``w . y``: ``ddata[k] = w[row(k)] * x[indices[k]]``, ``dx = A^T w``.
    """
    assert len(indices) == len(data), "csr_matvec: data and indices must have the same length"
    assert len(indptr) == len(y) + 1, "csr_matvec: y must have one element per row of A"
    for i in range(len(indptr) - 1):
        t = 0.0
        t, y[i] = y[i], t
        for k in range(indptr[i], indptr[i + 1]):
            t += data[k] * x[indices[k]]
        t, y[i] = y[i], t
        del t


@reversible
def csr_matvec_t(y, data, indices, indptr, x):
    """``y += A^T x`` for the CSR matrix ``A = (data, indices, indptr)`` of shape ``(m, n)``,
    ``x`` of length ``m`` and ``y`` of length ``n``.

    Row by row, ``x[i] * A[i, :]`` is scattered into ``y``.  Cost: nnz multiply-adds,
    one pass over ``data`` and ``indices``.
    Gradient of ``w . y``: ``ddata[k] = x[row(k)] * w[indices[k]]``, ``dx = A w``.
    """
    assert len(indices) == len(data), "csr_matvec_t: data and indices must have the same length"
    assert len(indptr) == len(x) + 1, "csr_matvec_t: x must have one element per row of A"
    for i in range(len(indptr) - 1):
        xi = x[i]
        for k in range(indptr[i], indptr[i + 1]):
            y[indices[k]] += data[k] * xi
        del xi


@reversible
def csr_bilinear(s, x, data, indices, indptr, y):
    """``s += x^T A y`` for the CSR matrix ``A = (data, indices, indptr)`` of shape ``(m, n)``,
    ``x`` of length ``m`` and ``y`` of length ``n``.

    One pass: ``s += x[i] * (data[k] * y[indices[k]])`` for every stored value, with
    ``x[i]`` held in a register for its row (and, in the reverse sweep, its adjoint).
    Cost: nnz multiply-adds plus one multiplication each.  Gradient: ``ds/dx = A y``,
    ``ds/dy = A^T x``, ``ds/ddata[k] = x[row(k)] * y[indices[k]]`` (the pattern of ``A``).
    """
    assert len(indices) == len(data), "csr_bilinear: data and indices must have the same length"
    assert len(indptr) == len(x) + 1, "csr_bilinear: x must have one element per row of A"
    for i in range(len(indptr) - 1):
        xi = x[i]
        for k in range(indptr[i], indptr[i + 1]):
            s += xi * (data[k] * y[indices[k]])
        del xi


@reversible
def csr_todense(D, data, indices, indptr):
    """``D += A`` for the CSR matrix ``A = (data, indices, indptr)`` and a dense ``(m, n)``
    float array ``D``.  Cost: nnz additions.  Gradient of ``sum(W * D)``:
    ``ddata[k] = W[row(k), indices[k]]``.
    """
    assert len(indices) == len(data), "csr_todense: data and indices must have the same length"
    assert len(indptr) == D.shape[0] + 1, "csr_todense: D must have one row per row of A"
    for i in range(len(indptr) - 1):
        for k in range(indptr[i], indptr[i + 1]):
            D[i, indices[k]] += data[k]

"""Dense linear algebra in the reversible language.

Every function *accumulates into its first argument* and leaves the others as
they were: ``dot(s, x, y)`` does ``s += x . y``, ``matvec(y, A, x)`` does
``y += A x``; the inverse (``~dot``) subtracts the same amount again.  Scalars
come back from a call (``s, x, y = dot(0.0, x, y)``); arrays are updated in place.

The loops are written so that Numba keeps every running sum in a register: an
array element that is accumulated over an inner loop (``y[i]`` in ``matvec``)
is first swapped into a scalar ancilla (``t, y[i] = y[i], t``) and swapped back
afterwards, and an element read in every iteration of an inner loop (``x[i]`` in
``matvec_t``) is copied into a scalar ancilla (``xi = x[i]`` ... ``del xi``).  Both
are exact, cost nothing, and in the reverse sweep of AD they turn the adjoint
of that element into a register too (one pass over the data, no memory
round trip per term).

Sizes are checked by ``assert`` statements (kept with ``check=False``; they cost
nothing per element).  Arguments that are read must not be the array being updated (``dot(s, x, x)``
is refused as aliasing: use ``sumsq(s, x)``).  Costs are the forward costs;
``~f`` costs the same, and a gradient costs about three times as much (the
forward run, then the inverse run with the adjoint updates beside it).
"""

from __future__ import annotations

from revbench.function import reversible

__all__ = ["axpy", "dot", "matmul", "matvec", "matvec_t", "outer", "scale", "sumsq", "total"]


@reversible
def dot(s, x, y):
    """``s += sum_i x[i] * y[i]`` for 1-D float arrays ``x``, ``y`` of one length.

    Cost: n multiply-adds.  Gradient: ``ds/dx = y``, ``ds/dy = x``.
    """
    assert len(x) == len(y), "dot: x and y must have the same length"
    for i in range(len(x)):
        s += x[i] * y[i]


@reversible
def sumsq(s, x):
    """``s += sum_i x[i] ** 2`` (the squared 2-norm of a 1-D array).

    Cost: n multiply-adds.  Gradient: ``ds/dx = 2 x``.
    """
    for i in range(len(x)):
        s += x[i] * x[i]


@reversible
def total(s, x):
    """``s += sum_i x[i]`` (the sum of a 1-D array; ``total`` because ``sum`` is a builtin).

    Cost: n additions.  Gradient: ``ds/dx = 1``.
    """
    for i in range(len(x)):
        s += x[i]


@reversible
def axpy(y, a, x):
    """``y += a * x`` for arrays ``y``, ``x`` of one shape and a scalar ``a``.

    Cost: one multiply-add per element.  Gradient: ``dy/dx = a``,
    ``d(w . y)/da = w . x``.
    """
    y += a * x


@reversible
def scale(x, a):
    """``x *= a`` for an array ``x`` and a **non-zero** scalar ``a`` (zero is refused at
    run time: it could not be undone).

    Cost: one multiplication per element; the inverse divides.
    """
    x *= a


@reversible
def matvec(y, A, x):
    """``y += A x`` for an ``(m, n)`` array ``A``, ``x`` of length ``n``, ``y`` of length ``m``.

    Row by row; each row's sum runs in a register (``y[i]`` is swapped into an
    ancilla).  Cost: m n multiply-adds, one pass over ``A``.
    Gradient of ``w . y``: ``dA = w x^T``, ``dx = A^T w``.
    """
    assert A.shape[0] == len(y) and A.shape[1] == len(x), "matvec: A must be len(y) x len(x)"
    for i in range(A.shape[0]):
        t = 0.0
        t, y[i] = y[i], t
        for j in range(A.shape[1]):
            t += A[i, j] * x[j]
        t, y[i] = y[i], t
        del t


@reversible
def matvec_t(y, A, x):
    """``y += A^T x`` for an ``(m, n)`` array ``A``, ``x`` of length ``m``, ``y`` of length ``n``.

    Walks ``A`` row by row (C order) and adds ``x[i] * A[i, :]`` into ``y``.
    Cost: m n multiply-adds, one pass over ``A``.
    Gradient of ``w . y``: ``dA = x w^T``, ``dx = A w``.
    """
    assert A.shape[0] == len(x) and A.shape[1] == len(y), "matvec_t: A must be len(x) x len(y)"
    for i in range(A.shape[0]):
        xi = x[i]
        for j in range(A.shape[1]):
            y[j] += A[i, j] * xi
        del xi


@reversible
def outer(A, x, y):
    """``A += x y^T`` (a rank-one update) for an ``(m, n)`` array ``A``, ``x`` of length ``m``,
    ``y`` of length ``n``.

    Cost: m n multiply-adds.  Gradient of ``sum(W * A)``: ``dx = W y``, ``dy = W^T x``.
    """
    assert A.shape[0] == len(x) and A.shape[1] == len(y), "outer: A must be len(x) x len(y)"
    for i in range(A.shape[0]):
        xi = x[i]
        for j in range(A.shape[1]):
            A[i, j] += xi * y[j]
        del xi


@reversible
def matmul(C, A, B):
    """``C += A B`` for ``(m, k)`` ``A``, ``(k, n)`` ``B`` and ``(m, n)`` ``C``.

    Loop order i, p, j (all three arrays walked in C order).  Cost: m k n multiply-adds.
    Gradient of ``sum(W * C)``: ``dA = W B^T``, ``dB = A^T W``.
    """
    assert A.shape[1] == B.shape[0] and C.shape[0] == A.shape[0] and C.shape[1] == B.shape[1], (
        "matmul: shapes must be C (m, n), A (m, k), B (k, n)")
    for i in range(A.shape[0]):
        for p in range(A.shape[1]):
            aip = A[i, p]
            for j in range(B.shape[1]):
                C[i, j] += aip * B[p, j]
            del aip

"""The sparse workload: ``x^T A y`` and ``y = A x`` for a CSR matrix ``A``, with gradients.

``A`` is a random ``n x n`` CSR matrix (``make_csr``: 1000 x 1000, density 0.05,
seeded), float64 values and int64 index arrays.  Two problems:

``bilinear``
    ``s = x^T A y``.  Gradients: ``ds/dx = A y``, ``ds/dy = A^T x`` and, for the
    stored values, ``ds/dA.data[k] = x[row(k)] * y[indices[k]]`` -- a matrix with
    the sparsity pattern of ``A`` (entries outside the pattern are not variables).
``matvec``
    ``y_out = y + A x``, differentiated through the scalar ``L = w . y_out`` for a
    cotangent ``w`` (default: ones): ``dL/dx = A^T w``, ``dL/dy = w``,
    ``dL/dA.data[k] = w[row(k)] * x[indices[k]]``.  (This is the vector-Jacobian
    product of ``y = A x`` with ``w``.)

The reversible programs are thin wrappers of :mod:`revbench.lib.sparse`
(``csr_bilinear``, ``csr_matvec``), each in a checked and an unchecked version.
:func:`gradients` differentiates them by reverse computing, three ways
(``method``):

``"grad"``
    :func:`revbench.value_and_grad`, the public API (it copies every argument,
    runs the forward program, then the reverse sweep).
``"kernels"``
    the same two runs -- forward, then the reverse sweep -- through the compiled
    code (:meth:`~revbench.ReversibleFunction.kernel`), without the per-call
    Python work of ``value_and_grad``.  The default.
``"sweep"``
    the reverse sweep alone, started at the *input* state.  Valid here because
    the output (``s``, or ``y``) is a pure accumulator: the program only ever adds
    to it and nothing reads it, so the adjoints computed by the sweep do not
    depend on its value, and the sweep, which subtracts what the forward run
    would have added, also yields the value (``s_in - s_end``).  One pass over the
    matrix instead of two.

:func:`oracle_gradients` computes the same quantities with NumPy/SciPy from the
formulas above, for testing; :func:`scipy_forward` is the speed reference of
``benchmarks/bench_sparse.py``.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import numpy as np
import scipy.sparse

from revbench.ad import value_and_grad
from revbench.backends.runtime import CheckFailed, to_user_error
from revbench.config import get_tolerance
from revbench.function import reversible
from revbench.lib.linalg import dot
from revbench.lib.sparse import csr_bilinear, csr_matvec

N = 1000
DENSITY = 0.05
SEED = 0
KINDS = ("bilinear", "matvec")
METHODS = ("grad", "kernels", "sweep")


# --------------------------------------------------------------------------- #
# data
# --------------------------------------------------------------------------- #
def make_csr(n: int = N, density: float = DENSITY, seed: int = SEED, *, m: int | None = None
             ) -> scipy.sparse.csr_matrix:
    """A random ``m x n`` (default ``n x n``) CSR matrix with about ``density * m * n`` stored
    values, uniform in [0, 1), from ``scipy.sparse.random`` with a seeded NumPy generator.

    Float64 values; int64 ``indices`` and ``indptr`` (SciPy would pick int32); sorted
    indices, no duplicates.  The same ``(n, density, seed)`` always gives the same matrix.
    """
    rng = np.random.default_rng(seed)
    A = scipy.sparse.random(n if m is None else m, n, density=density, format="csr",
                            dtype=np.float64, random_state=rng)
    A.sum_duplicates()
    A.sort_indices()
    A.indices = np.ascontiguousarray(A.indices, dtype=np.int64)
    A.indptr = np.ascontiguousarray(A.indptr, dtype=np.int64)
    return A


def make_vectors(m: int, n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Seeded standard-normal vectors ``x`` (length ``m``) and ``y`` (length ``n``)."""
    rng = np.random.default_rng([seed, 1])
    return rng.standard_normal(m), rng.standard_normal(n)


def make_problem(n: int = N, density: float = DENSITY, seed: int = SEED):
    """``(A, x, y)``: ``make_csr(n, density, seed)`` and two vectors of length ``n``."""
    A = make_csr(n, density, seed)
    x, y = make_vectors(A.shape[0], A.shape[1], seed)
    return A, x, y


def csr_arrays(A) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data, indices, indptr)`` of a CSR matrix as revbench takes them: contiguous
    float64 values and int64 index arrays (no copy when they already are)."""
    if not scipy.sparse.issparse(A) or A.format != "csr":
        raise TypeError(f"expected a scipy.sparse CSR matrix, got {type(A).__name__}")
    return (np.ascontiguousarray(A.data, dtype=np.float64),
            np.ascontiguousarray(A.indices, dtype=np.int64),
            np.ascontiguousarray(A.indptr, dtype=np.int64))


def with_data(A, data: np.ndarray):
    """A CSR matrix with ``A``'s sparsity pattern (the very same ``indices`` and ``indptr``
    arrays) and the values ``data`` (a shallow copy of ``A``: no check, no index copy)."""
    G = copy.copy(A)
    G.data = data
    return G


# --------------------------------------------------------------------------- #
# reversible programs
# --------------------------------------------------------------------------- #
@reversible
def bilinear(s, x, data, indices, indptr, y):
    """``s += x^T A y`` (A in CSR)."""
    csr_bilinear(s, x, data, indices, indptr, y)


@reversible(check=False)
def bilinear_unchecked(s, x, data, indices, indptr, y):
    """``bilinear`` without runtime checks."""
    csr_bilinear(s, x, data, indices, indptr, y)


@reversible
def matvec(y, data, indices, indptr, x):
    """``y += A x`` (A in CSR)."""
    csr_matvec(y, data, indices, indptr, x)


@reversible(check=False)
def matvec_unchecked(y, data, indices, indptr, x):
    """``matvec`` without runtime checks."""
    csr_matvec(y, data, indices, indptr, x)


@reversible
def matvec_loss(L, y, data, indices, indptr, x, w):
    """``y += A x``, then ``L += w . y``: a scalar loss for ``value_and_grad``."""
    csr_matvec(y, data, indices, indptr, x)
    dot(L, w, y)


@reversible(check=False)
def matvec_loss_unchecked(L, y, data, indices, indptr, x, w):
    """``matvec_loss`` without runtime checks."""
    csr_matvec(y, data, indices, indptr, x)
    dot(L, w, y)


PROGRAMS = {
    ("bilinear", True): bilinear, ("bilinear", False): bilinear_unchecked,
    ("matvec", True): matvec, ("matvec", False): matvec_unchecked,
}
LOSS_PROGRAMS = {("bilinear", True): (bilinear, "s"), ("bilinear", False): (bilinear_unchecked, "s"),
                 ("matvec", True): (matvec_loss, "L"), ("matvec", False): (matvec_loss_unchecked, "L")}
_VALUE_AND_GRAD = {key: value_and_grad(f, loss=loss) for key, (f, loss) in LOSS_PROGRAMS.items()}
_KERNELS: dict = {}


def kernels(kind: str, checked: bool, example_args: tuple):
    """The compiled forward and backward code of the ``kind`` program (cached)."""
    key = (kind, checked)
    k = _KERNELS.get(key)
    if k is None:
        f = PROGRAMS[key]
        k = _KERNELS[key] = (f.kernel("forward", *example_args), f.kernel("backward", *example_args))
    return k


def _run(kernel, *args):
    try:
        return kernel(*args)
    except CheckFailed as exc:
        raise to_user_error(exc) from None


# --------------------------------------------------------------------------- #
# gradients
# --------------------------------------------------------------------------- #
class Gradients(NamedTuple):
    """The value of the workload and its gradients.

    ``value``: ``s`` (a float) for ``bilinear``, ``y_out`` (an array) for ``matvec``;
    ``A``: a CSR matrix with ``A``'s sparsity pattern holding ``d/dA.data``;
    ``x``, ``y``: arrays.
    """

    value: float | np.ndarray
    A: scipy.sparse.csr_matrix
    x: np.ndarray
    y: np.ndarray


def _check_vectors(A, x, y, kind):
    m, n = A.shape
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    want = (m, n) if kind == "bilinear" else (n, m)
    if x.shape != (want[0],) or y.shape != (want[1],):
        raise ValueError(f"{kind} with A of shape {A.shape} needs x of length {want[0]} and y of "
                         f"length {want[1]}, got {x.shape} and {y.shape}")
    return x, y


def gradients(A, x, y, *, kind: str = "bilinear", w: np.ndarray | None = None,
              checked: bool = True, method: str = "kernels") -> Gradients:
    """The value and gradients of the ``kind`` workload, by reverse computing.

    ``bilinear``: ``s = x^T A y`` (``x`` of length ``A.shape[0]``, ``y`` of length
    ``A.shape[1]``).  ``matvec``: ``y_out = y + A x`` with cotangent ``w`` (default
    ones; ``x`` of length ``A.shape[1]``, ``y`` and ``w`` of length ``A.shape[0]``).
    ``checked`` picks the program with runtime checks or without; ``method`` is
    ``"grad"``, ``"kernels"`` or ``"sweep"`` (see the module docstring).
    The arguments are not modified.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    data, indices, indptr = csr_arrays(A)
    x, y = _check_vectors(A, x, y, kind)
    if kind == "bilinear":
        return _bilinear(A, x, data, indices, indptr, y, checked, method)
    w = np.ones(A.shape[0]) if w is None else np.ascontiguousarray(w, dtype=np.float64)
    if w.shape != (A.shape[0],):
        raise ValueError(f"w must have length {A.shape[0]}, got shape {w.shape}")
    return _matvec(A, y, data, indices, indptr, x, w, checked, method)


def _bilinear(A, x, data, indices, indptr, y, checked, method) -> Gradients:
    if method == "grad":
        outs, g = _VALUE_AND_GRAD["bilinear", checked](0.0, x, data, indices, indptr, y)
        return Gradients(outs[0], with_data(A, g[2]), g[1], g[5])
    atol, rtol = get_tolerance()
    args = (0.0, x, data, indices, indptr, y)
    fwd, bwd = kernels("bilinear", checked, args)
    gx, gdata, gy = np.zeros(x.shape[0]), np.zeros(data.shape[0]), np.zeros(y.shape[0])
    if method == "kernels":
        s = _run(fwd, *args, atol, rtol)[0]
        _run(bwd, s, x, data, indices, indptr, y, 1.0, gx, gdata, gy, atol, rtol)
    else:  # sweep: from s = 0 the reverse sweep ends at s = -x^T A y
        s = -_run(bwd, *args, 1.0, gx, gdata, gy, atol, rtol)[0]
    return Gradients(float(s), with_data(A, gdata), gx, gy)


def _matvec(A, y, data, indices, indptr, x, w, checked, method) -> Gradients:
    if method == "grad":
        outs, g = _VALUE_AND_GRAD["matvec", checked](0.0, y, data, indices, indptr, x, w)
        return Gradients(outs[1], with_data(A, g[2]), g[5], g[1])
    atol, rtol = get_tolerance()
    yo = y.copy()
    fwd, bwd = kernels("matvec", checked, (yo, data, indices, indptr, x))
    gy, gdata, gx = w.copy(), np.zeros(data.shape[0]), np.zeros(x.shape[0])
    if method == "kernels":
        _run(fwd, yo, data, indices, indptr, x, atol, rtol)
        value = yo.copy()
        _run(bwd, yo, data, indices, indptr, x, gy, gdata, gx, atol, rtol)
    else:  # sweep: from y the reverse sweep ends at y - A x
        _run(bwd, yo, data, indices, indptr, x, gy, gdata, gx, atol, rtol)
        value = 2.0 * y - yo
    return Gradients(value, with_data(A, gdata), gx, gy)


# --------------------------------------------------------------------------- #
# references
# --------------------------------------------------------------------------- #
def row_of(A) -> np.ndarray:
    """The row of every stored value of the CSR matrix ``A``."""
    return np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))


def oracle_gradients(A, x, y, *, kind: str = "bilinear", w: np.ndarray | None = None) -> Gradients:
    """The same as :func:`gradients`, from the closed forms, with NumPy and SciPy."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    x, y = _check_vectors(A, x, y, kind)
    rows, cols = row_of(A), np.asarray(A.indices)
    if kind == "bilinear":
        return Gradients(float(x @ (A @ y)), with_data(A, x[rows] * y[cols]), A @ y, A.T @ x)
    w = np.ones(A.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
    return Gradients(y + A @ x, with_data(A, w[rows] * x[cols]), A.T @ w, w.copy())


def scipy_forward(A, x, y, kind: str = "bilinear"):
    """The forward computation in SciPy: ``x @ (A @ y)`` or ``A @ x`` (the speed reference)."""
    if kind == "bilinear":
        return x @ (A @ y)
    return A @ x

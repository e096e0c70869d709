"""The workloads of ``bench_core.py``: reversible functions and their hand-written twins.

Everything is defined at module level so that Numba's on-disk cache (used by revbench
for its generated code, keyed on the generated source) applies, and so that a fresh
process can import one function by name to measure the cached load.

Each workload comes in three versions that do the same arithmetic, statement for
statement:

- ``<name>``            ``@reversible`` with the default runtime checks;
- ``<name>_unchecked``  ``@reversible(check=False)``;
- ``<name>_ref`` / ``<name>_ref_inv``  plain ``@numba.njit`` forward and inverse, written
  by hand (the reference the generated code is measured against).

The reference functions are compiled without ``cache=True`` so that running the
benchmark writes nothing beside this file; their compile time is measured fresh.
"""

from __future__ import annotations

import numba

from revbench import reversible

# --------------------------------------------------------------------------- #
# (a) scalar recurrence: symplectic Euler of a Duffing oscillator
#     (x'' = -b x - c x^3), with the cubic term computed through an ancilla that is
#     uncomputed every iteration.  Area-preserving, so it stays bounded.
# --------------------------------------------------------------------------- #


@reversible
def duffing(x, y, a, b, c, n):
    for _i in range(n):
        t = 0.0
        t += x * x
        y -= b * x + c * x * t
        t -= x * x
        del t
        x += a * y


@reversible(check=False)
def duffing_unchecked(x, y, a, b, c, n):
    for _i in range(n):
        t = 0.0
        t += x * x
        y -= b * x + c * x * t
        t -= x * x
        del t
        x += a * y


@numba.njit
def duffing_ref(x, y, a, b, c, n):
    for _i in range(n):
        t = 0.0
        t += x * x
        y -= b * x + c * x * t
        t -= x * x
        x += a * y
    return x, y, a, b, c, n


@numba.njit
def duffing_ref_inv(x, y, a, b, c, n):
    for _i in range(n - 1, -1, -1):
        x -= a * y
        t = 0.0
        t += x * x
        y += b * x + c * x * t
        t -= x * x
    return x, y, a, b, c, n


# --------------------------------------------------------------------------- #
# (b) 2-D stencil: leapfrog sweeps between two arrays,
#       v += A u,  then  u -= A v,   A = I + c * (5-point Laplacian)
#     on the interior points.  Each half step is a shear (reads one array, updates the
#     other), so the whole sweep is reversible; stable for 0 < c < 3/8.
# --------------------------------------------------------------------------- #


@reversible
def leapfrog(u, v, c, sweeps):
    for _s in range(sweeps):
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                v[i, j] += u[i, j] + c * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                          - 4.0 * u[i, j])
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                u[i, j] -= v[i, j] + c * (v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1]
                                          - 4.0 * v[i, j])


@reversible(check=False)
def leapfrog_unchecked(u, v, c, sweeps):
    for _s in range(sweeps):
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                v[i, j] += u[i, j] + c * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                          - 4.0 * u[i, j])
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                u[i, j] -= v[i, j] + c * (v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1]
                                          - 4.0 * v[i, j])


@numba.njit
def leapfrog_ref(u, v, c, sweeps):
    for _s in range(sweeps):
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                v[i, j] += u[i, j] + c * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                          - 4.0 * u[i, j])
        for i in range(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                u[i, j] -= v[i, j] + c * (v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1]
                                          - 4.0 * v[i, j])
    return u, v, c, sweeps


@numba.njit
def leapfrog_ref_inv(u, v, c, sweeps):
    for _s in range(sweeps - 1, -1, -1):
        for i in range(u.shape[0] - 2, 0, -1):
            for j in range(u.shape[1] - 2, 0, -1):
                u[i, j] += v[i, j] + c * (v[i - 1, j] + v[i + 1, j] + v[i, j - 1] + v[i, j + 1]
                                          - 4.0 * v[i, j])
        for i in range(u.shape[0] - 2, 0, -1):
            for j in range(u.shape[1] - 2, 0, -1):
                v[i, j] -= u[i, j] + c * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                          - 4.0 * u[i, j])
    return u, v, c, sweeps


#: name -> (checked, unchecked, reference forward, reference inverse)
WORKLOADS = {
    "scalar_recurrence": (duffing, duffing_unchecked, duffing_ref, duffing_ref_inv),
    "stencil_2d": (leapfrog, leapfrog_unchecked, leapfrog_ref, leapfrog_ref_inv),
}

"""Bundle adjustment, as in ADBench's BA benchmark (and GradBench's ``ba`` eval).

Per observation ``i`` (camera ``obs[i, 0]``, point ``obs[i, 1]``), two
reprojection residuals and one weight residual::

    reproj_err[i] = w[i] * (project(cam, X) - feat[i])      # 2 values
    w_err[i]      = 1 - w[i]**2

``project`` rotates ``X - C`` by the Rodrigues vector ``rot`` (with ADBench's
small-angle branch ``X + rot x X`` when ``|rot|^2 == 0``), divides by the
depth, applies the radial distortion ``1 + k1 r^2 + k2 r^4``, scales by the
focal length and adds the principal point.  A camera row holds 11 numbers, in
ADBench's order: rotation (0:3), centre (3:6), focal length (6), principal
point (7:9), radial distortion (9:11).

The Jacobian is sparse, of shape ``(2p + p, 11n + 3m + p)``: the ``2p``
reprojection rows come first (rows ``2i`` and ``2i + 1`` for observation
``i``), each with 15 nonzeros (11 camera, 3 point and 1 weight columns), then
the ``p`` weight rows with one nonzero ``-2 w[i]``.  Columns: the cameras
(``11 n``), then the points (``3 m``), then the weights (``p``) -- ADBench's
``BASparseMat`` layout.

This module holds

* the data: :class:`BAData`, :func:`read_ba` / :func:`write_ba` for ADBench's
  text format, the seeded generator :func:`generate_ba`, and the sizes of
  ADBench's ba1, ba4 and ba10 (:data:`BA_SIZES`);
* the references: :func:`objective_numpy` (plain NumPy, ADBench's formulas
  literally: the test oracle), :func:`jacobian_numpy` (forward-mode
  derivatives of the same NumPy formulas, written by hand: an AD-independent
  Jacobian) and :func:`objective_njit` (a hand-written ``@numba.njit`` loop:
  the speed reference);
* the program in the reversible language: :data:`ba_reproj` (one observation),
  :data:`ba_weight`, :data:`ba_objective` (all observations), and the sparse
  Jacobian :func:`jacobian`, built by running the reverse sweep of
  ``ba_reproj`` twice per observation (one adjoint seed per residual) from a
  ``@numba.njit`` loop over the compiled kernels.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numba
import numpy as np

from revbench.backends.runtime import CheckFailed, to_user_error
from revbench.config import get_tolerance
from revbench.function import reversible

# -- layout and sizes -----------------------------------------------------------------------

BA_NCAMPARAMS = 11
ROT_IDX = 0
C_IDX = 3
F_IDX = 6
X0_IDX = 7
RAD_IDX = 9
#: nonzeros of one reprojection row of the Jacobian: 11 camera + 3 point + 1 weight
BA_ROW_NNZ = BA_NCAMPARAMS + 3 + 1

#: ``(n, m, p)``: cameras, points and observations of ADBench's data files
#: ``ba1_n49_m7776_p31843.txt``, ``ba4_n372_m47423_p204472.txt`` and
#: ``ba10_n1197_m126327_p563734.txt``.
BA_SIZES: dict[str, tuple[int, int, int]] = {
    "ba1": (49, 7776, 31843),
    "ba4": (372, 47423, 204472),
    "ba10": (1197, 126327, 563734),
}


# -- data -----------------------------------------------------------------------------------


@dataclass
class BAData:
    """One bundle-adjustment problem.

    ``cams`` ``[n, 11]``, ``X`` ``[m, 3]``, ``w`` ``[p]``, ``feats`` ``[p, 2]``
    (float64) and ``obs`` ``[p, 2]`` (int64: camera index, point index).
    """

    cams: np.ndarray
    X: np.ndarray
    w: np.ndarray
    feats: np.ndarray
    obs: np.ndarray

    def __post_init__(self) -> None:
        self.cams = np.ascontiguousarray(self.cams, dtype=np.float64)
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.w = np.ascontiguousarray(self.w, dtype=np.float64)
        self.feats = np.ascontiguousarray(self.feats, dtype=np.float64)
        self.obs = np.ascontiguousarray(self.obs, dtype=np.int64)
        n, m, p = self.n, self.m, self.p
        shapes = {"cams": (self.cams, (n, BA_NCAMPARAMS)), "X": (self.X, (m, 3)),
                  "w": (self.w, (p,)), "feats": (self.feats, (p, 2)), "obs": (self.obs, (p, 2))}
        for name, (a, shape) in shapes.items():
            if a.shape != shape:
                raise ValueError(f"BAData.{name} must have shape {shape}, got {a.shape}")
        if p and not (0 <= self.obs[:, 0].min() and self.obs[:, 0].max() < n
                      and 0 <= self.obs[:, 1].min() and self.obs[:, 1].max() < m):
            raise ValueError("BAData.obs holds a camera or point index out of range")

    @property
    def n(self) -> int:
        """Number of cameras."""
        return self.cams.shape[0]

    @property
    def m(self) -> int:
        """Number of points."""
        return self.X.shape[0]

    @property
    def p(self) -> int:
        """Number of observations."""
        return self.w.shape[0]

    def copy(self) -> BAData:
        return BAData(self.cams.copy(), self.X.copy(), self.w.copy(), self.feats.copy(),
                      self.obs.copy())

    def is_replicated(self) -> bool:
        """Whether this is what ADBench's file format can hold: one camera, point,
        weight and feature, replicated, with observation i on camera i mod n and point i mod m."""
        i = np.arange(self.p)
        return bool((self.cams == self.cams[:1]).all() and (self.X == self.X[:1]).all()
                    and (self.w == self.w[:1]).all() and (self.feats == self.feats[:1]).all()
                    and (self.obs[:, 0] == i % self.n).all() and (self.obs[:, 1] == i % self.m).all())


def _replicated(n: int, m: int, p: int, cam, x, w: float, feat) -> BAData:
    i = np.arange(p, dtype=np.int64)
    return BAData(np.tile(np.asarray(cam, dtype=np.float64), (n, 1)),
                  np.tile(np.asarray(x, dtype=np.float64), (m, 1)),
                  np.full(p, float(w)),
                  np.tile(np.asarray(feat, dtype=np.float64), (p, 1)),
                  np.stack([i % n, i % m], axis=1))


def read_ba(path: str | os.PathLike) -> BAData:
    """Read an ADBench BA file: ``n m p``, then one camera (11 numbers), one point
    (3), one weight and one feature (2), replicated ``n``, ``m``, ``p`` and ``p``
    times; observation ``i`` uses camera ``i mod n`` and point ``i mod m``."""
    with open(path) as fh:
        tokens = fh.read().split()
    need = 3 + BA_NCAMPARAMS + 3 + 1 + 2
    if len(tokens) < need:
        raise ValueError(f"{os.fspath(path)}: an ADBench BA file holds at least {need} numbers, "
                         f"found {len(tokens)}")
    n, m, p = (int(t) for t in tokens[:3])
    if min(n, m, p) < 1:
        raise ValueError(f"{os.fspath(path)}: n, m and p must be positive, got {n} {m} {p}")
    v = [float(t) for t in tokens[3:need]]
    cam, x, w, feat = v[:11], v[11:14], v[14], v[15:17]
    return _replicated(n, m, p, cam, x, w, feat)


def write_ba(path: str | os.PathLike, data: BAData) -> None:
    """Write ``data`` in ADBench's BA format (floats written exactly, as ``repr``).

    The format holds one camera, point, weight and feature, so ``data`` must be
    replicated (:meth:`BAData.is_replicated`, as :func:`read_ba` and
    ``generate_ba(..., replicate=True)`` make); anything else is refused rather
    than silently truncated.
    """
    if not data.is_replicated():
        raise ValueError("ADBench's BA format holds one camera, point, weight and feature, "
                         "replicated; this data is not (generate it with replicate=True)")

    def line(values) -> str:
        return " ".join(repr(float(v)) for v in values)

    with open(path, "w") as fh:
        fh.write(f"{data.n} {data.m} {data.p}\n")
        fh.write(line(data.cams[0]) + "\n")
        fh.write(line(data.X[0]) + "\n")
        fh.write(repr(float(data.w[0])) + "\n")
        fh.write(line(data.feats[0]) + "\n")


def _random_cameras(rng: np.random.Generator, k: int) -> np.ndarray:
    cams = np.empty((k, BA_NCAMPARAMS))
    cams[:, ROT_IDX:ROT_IDX + 3] = rng.uniform(-0.15, 0.15, (k, 3))
    cams[:, C_IDX:C_IDX + 3] = rng.uniform(-0.5, 0.5, (k, 3))
    cams[:, F_IDX] = rng.uniform(300.0, 600.0, k)
    cams[:, X0_IDX:X0_IDX + 2] = rng.uniform(-5.0, 5.0, (k, 2))
    cams[:, RAD_IDX] = rng.uniform(-0.1, 0.1, k)
    cams[:, RAD_IDX + 1] = rng.uniform(-0.01, 0.01, k)
    return cams


def _random_points(rng: np.random.Generator, k: int) -> np.ndarray:
    X = rng.uniform(-1.0, 1.0, (k, 3))
    X[:, 2] = -rng.uniform(2.5, 6.0, k)  # in front of the cameras: depth well away from 0
    return X


def generate_ba(n: int, m: int, p: int, seed: int = 0, *, replicate: bool = True) -> BAData:
    """A seeded random BA problem with ``n`` cameras, ``m`` points, ``p`` observations.

    ``replicate=True`` (the default) makes what ADBench's files hold: one random
    camera, point, weight and feature, replicated, with observation ``i`` on
    camera ``i mod n`` and point ``i mod m`` (so ``write_ba`` can save it).
    ``replicate=False`` draws every camera, point, weight and feature on its own
    and pairs observations with random cameras and points -- better for tests.
    The same arguments always give the same data.  Magnitudes: rotations of
    about 0.1 rad, focal lengths 300-600, points 2.5-6 in front of the camera,
    weights 0.5-1.5, features of the size of the projections.
    """
    if min(n, m, p) < 1:
        raise ValueError(f"n, m and p must be positive, got {n}, {m}, {p}")
    rng = np.random.default_rng(seed)
    if replicate:
        cam = _random_cameras(rng, 1)[0]
        x = _random_points(rng, 1)[0]
        w = rng.uniform(0.5, 1.5)
        feat = rng.uniform(-150.0, 150.0, 2)
        return _replicated(n, m, p, cam, x, w, feat)
    cams = _random_cameras(rng, n)
    X = _random_points(rng, m)
    w = rng.uniform(0.5, 1.5, p)
    feats = rng.uniform(-150.0, 150.0, (p, 2))
    obs = np.stack([rng.integers(0, n, p), rng.integers(0, m, p)], axis=1)
    # every camera and point observed at least once where p allows it
    k = min(p, n)
    obs[:k, 0] = np.arange(k)
    k = min(p, m)
    obs[:k, 1] = np.arange(k)
    return BAData(cams, X, w, feats, obs)


# -- the plain-NumPy oracle (ADBench's formulas, vectorised over observations) -----------------


def _rodrigues_rotate_numpy(rot: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Rotate rows of ``X`` by the Rodrigues vectors in the rows of ``rot``."""
    sqtheta = np.sum(rot * rot, axis=1)
    general = sqtheta != 0.0
    theta = np.sqrt(np.where(general, sqtheta, 1.0))[:, None]
    costheta, sintheta = np.cos(theta), np.sin(theta)
    axis = rot / theta
    tmp = np.sum(axis * X, axis=1, keepdims=True) * (1.0 - costheta)
    rotated = X * costheta + np.cross(axis, X) * sintheta + axis * tmp
    small = X + np.cross(rot, X)  # ADBench's branch for a zero rotation
    return np.where(general[:, None], rotated, small)


def _radial_distort_numpy(rad: np.ndarray, proj: np.ndarray) -> np.ndarray:
    rsq = np.sum(proj * proj, axis=1, keepdims=True)
    L = 1.0 + rad[:, :1] * rsq + rad[:, 1:2] * rsq * rsq
    return proj * L


def _project_numpy(cams: np.ndarray, X: np.ndarray) -> np.ndarray:
    Xcam = _rodrigues_rotate_numpy(cams[:, ROT_IDX:ROT_IDX + 3], X - cams[:, C_IDX:C_IDX + 3])
    distorted = _radial_distort_numpy(cams[:, RAD_IDX:RAD_IDX + 2], Xcam[:, :2] / Xcam[:, 2:3])
    return distorted * cams[:, F_IDX:F_IDX + 1] + cams[:, X0_IDX:X0_IDX + 2]


def objective_numpy(data: BAData) -> tuple[np.ndarray, np.ndarray]:
    """``(reproj_err [p, 2], w_err [p])`` in plain NumPy: the test oracle."""
    cams = data.cams[data.obs[:, 0]]
    X = data.X[data.obs[:, 1]]
    reproj = data.w[:, None] * (_project_numpy(cams, X) - data.feats)
    return reproj, 1.0 - data.w * data.w


# -- an AD-independent Jacobian: forward mode on the NumPy formulas, by hand -------------------
# A "dual" value is (v [p], d [p, 15]): its value per observation and its derivatives
# with respect to the observation's 15 parameters (11 camera, 3 point, 1 weight).


def _d_mul(a, b):
    return a[0] * b[0], a[0][:, None] * b[1] + b[0][:, None] * a[1]


def _d_add(a, b):
    return a[0] + b[0], a[1] + b[1]


def _d_sub(a, b):
    return a[0] - b[0], a[1] - b[1]


def _d_div(a, b):
    v = a[0] / b[0]
    return v, (a[1] - v[:, None] * b[1]) / b[0][:, None]


def _d_scale(a, s):
    return a[0] * s, a[1] * s


def _d_func(a, f, df):
    return f(a[0]), df(a[0])[:, None] * a[1]


def _d_where(mask, a, b):
    return np.where(mask, a[0], b[0]), np.where(mask[:, None], a[1], b[1])


def _d_cross(a, b):
    return [_d_sub(_d_mul(a[1], b[2]), _d_mul(a[2], b[1])),
            _d_sub(_d_mul(a[2], b[0]), _d_mul(a[0], b[2])),
            _d_sub(_d_mul(a[0], b[1]), _d_mul(a[1], b[0]))]


def _d_dot(a, b):
    return _d_add(_d_add(_d_mul(a[0], b[0]), _d_mul(a[1], b[1])), _d_mul(a[2], b[2]))


def jacobian_numpy(data: BAData):
    """The sparse Jacobian by forward-mode differentiation of ADBench's formulas in
    NumPy, written out by hand (no revbench involved): the independent reference.

    Same layout as :func:`jacobian`.  Memory: ``O(p * 15)`` per intermediate.
    """
    p = data.p
    cams = data.cams[data.obs[:, 0]]
    X = data.X[data.obs[:, 1]]
    eye = np.eye(BA_ROW_NNZ)

    def var(values, k):
        return values, np.broadcast_to(eye[k], (p, BA_ROW_NNZ))

    cam = [var(cams[:, k], k) for k in range(BA_NCAMPARAMS)]
    pt = [var(X[:, k], BA_NCAMPARAMS + k) for k in range(3)]
    w = var(data.w, BA_NCAMPARAMS + 3)
    rot = cam[ROT_IDX:ROT_IDX + 3]
    d = [_d_sub(pt[k], cam[C_IDX + k]) for k in range(3)]
    # Rodrigues, general branch (evaluated at a safe angle where the rotation is zero)
    sq = _d_dot(rot, rot)
    general = sq[0] != 0.0
    safe_sq = (np.where(general, sq[0], 1.0), sq[1])
    theta = _d_func(safe_sq, np.sqrt, lambda v: 0.5 / np.sqrt(v))
    cos_t = _d_func(theta, np.cos, lambda v: -np.sin(v))
    sin_t = _d_func(theta, np.sin, np.cos)
    axis = [_d_div(r, theta) for r in rot]
    wx = _d_cross(axis, d)
    one_minus_cos = (1.0 - cos_t[0], -cos_t[1])
    tmp = _d_mul(_d_dot(axis, d), one_minus_cos)
    rotated = [_d_add(_d_add(_d_mul(d[k], cos_t), _d_mul(wx[k], sin_t)), _d_mul(axis[k], tmp))
               for k in range(3)]
    # small-angle branch: X + rot x X
    rx = _d_cross(rot, d)
    small = [_d_add(d[k], rx[k]) for k in range(3)]
    Xcam = [_d_where(general, rotated[k], small[k]) for k in range(3)]
    u = [_d_div(Xcam[0], Xcam[2]), _d_div(Xcam[1], Xcam[2])]
    rsq = _d_add(_d_mul(u[0], u[0]), _d_mul(u[1], u[1]))
    L = _d_add(_d_mul(cam[RAD_IDX], rsq), _d_mul(cam[RAD_IDX + 1], _d_mul(rsq, rsq)))
    L = (L[0] + 1.0, L[1])
    rows = []
    for k in range(2):
        proj = _d_add(_d_mul(_d_mul(u[k], L), cam[F_IDX]), cam[X0_IDX + k])
        proj = (proj[0] - data.feats[:, k], proj[1])
        rows.append(_d_mul(w, proj)[1])
    block = np.stack(rows, axis=1)  # [p, 2, 15]
    return _assemble(data, block, _d_scale(_d_mul(w, w), -1.0)[1][:, BA_NCAMPARAMS + 3])


def _sparsity(n: int, m: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``indptr`` and column indices of the BA Jacobian (ADBench's layout)."""
    p = obs.shape[0]
    one = np.empty((p, BA_ROW_NNZ), dtype=np.int64)
    one[:, :BA_NCAMPARAMS] = BA_NCAMPARAMS * obs[:, :1] + np.arange(BA_NCAMPARAMS)
    one[:, BA_NCAMPARAMS:BA_NCAMPARAMS + 3] = BA_NCAMPARAMS * n + 3 * obs[:, 1:2] + np.arange(3)
    one[:, -1] = BA_NCAMPARAMS * n + 3 * m + np.arange(p)
    cols = np.concatenate([np.repeat(one, 2, axis=0).ravel(),
                           BA_NCAMPARAMS * n + 3 * m + np.arange(p)]).astype(np.int32)
    return jacobian_indptr(p), cols


def _assemble(data: BAData, block: np.ndarray, dw: np.ndarray):
    indptr, cols = _sparsity(data.n, data.m, data.obs)
    vals = np.concatenate([block.ravel(), dw])
    return _csr(data, vals, cols, indptr)


def _csr(data: BAData, vals, cols, indptr):
    import scipy.sparse

    shape = (3 * data.p, BA_NCAMPARAMS * data.n + 3 * data.m + data.p)
    return scipy.sparse.csr_matrix((vals, cols, indptr), shape=shape, copy=False)


# -- the hand-written @njit objective (speed reference) ----------------------------------------


@numba.njit(cache=True, fastmath=False, boundscheck=False)
def objective_njit(cams, X, w, feats, obs, reproj_err, w_err):
    """Hand-written Numba objective, ADBench's formulas: fills ``reproj_err [p, 2]``
    and ``w_err [p]``.  The speed reference of the benchmarks."""
    for i in range(w.shape[0]):
        c = obs[i, 0]
        q = obs[i, 1]
        r0 = cams[c, 0]
        r1 = cams[c, 1]
        r2 = cams[c, 2]
        d0 = X[q, 0] - cams[c, 3]
        d1 = X[q, 1] - cams[c, 4]
        d2 = X[q, 2] - cams[c, 5]
        sqtheta = r0 * r0 + r1 * r1 + r2 * r2
        if sqtheta != 0.0:
            theta = math.sqrt(sqtheta)
            costheta = math.cos(theta)
            sintheta = math.sin(theta)
            inv = 1.0 / theta
            a0 = r0 * inv
            a1 = r1 * inv
            a2 = r2 * inv
            tmp = (a0 * d0 + a1 * d1 + a2 * d2) * (1.0 - costheta)
            x0 = d0 * costheta + (a1 * d2 - a2 * d1) * sintheta + a0 * tmp
            x1 = d1 * costheta + (a2 * d0 - a0 * d2) * sintheta + a1 * tmp
            x2 = d2 * costheta + (a0 * d1 - a1 * d0) * sintheta + a2 * tmp
        else:
            x0 = d0 + (r1 * d2 - r2 * d1)
            x1 = d1 + (r2 * d0 - r0 * d2)
            x2 = d2 + (r0 * d1 - r1 * d0)
        u0 = x0 / x2
        u1 = x1 / x2
        rsq = u0 * u0 + u1 * u1
        L = 1.0 + cams[c, 9] * rsq + cams[c, 10] * rsq * rsq
        f = cams[c, 6]
        reproj_err[i, 0] = w[i] * (u0 * L * f + cams[c, 7] - feats[i, 0])
        reproj_err[i, 1] = w[i] * (u1 * L * f + cams[c, 8] - feats[i, 1])
        w_err[i] = 1.0 - w[i] * w[i]


# -- the program in the reversible language ----------------------------------------------------


@reversible
def ba_reproj(e0, e1, rx, ry, rz, cx, cy, cz, f, px, py, k1, k2, X0, X1, X2, w, m0, m1):
    """Reprojection residuals of one observation: ``(e0, e1) += w * (project(cam, X) - m)``.

    Camera ``(rx, ry, rz, cx, cy, cz, f, px, py, k1, k2)`` in ADBench's order, point
    ``(X0, X1, X2)``, weight ``w``, measured feature ``(m0, m1)``.  The rotation of
    ``d = X - C`` is written ``a d + b (r x d) + c (r . d) r`` with ``a = cos t``,
    ``b = sin t / t``, ``c = (1 - cos t) / t^2`` (``t = |r|``), which is ADBench's
    formula with the axis ``r / t`` multiplied out; its small-angle branch is
    ``a = b = 1, c = 0``, i.e. ADBench's ``X + rot x X``.
    """
    with routine:  # noqa: F821 (reversible-language syntax)
        d0 = X0 - cx
        d1 = X1 - cy
        d2 = X2 - cz
        sq = rx * rx + ry * ry + rz * rz
        # the angle's functions, computed outside the branch (on a safe angle when
        # sq == 0) so that the reverse sweep reuses them instead of calling sin/cos again
        sqs = sq if sq != 0.0 else 1.0
        t = math.sqrt(sqs)
        it = 1.0 / t
        cs = math.cos(t)
        sn = math.sin(t)
        a = 0.0
        b = 0.0
        c = 0.0
        # the branches leave sq alone, so the condition is its own postcondition
        if (sq != 0.0, sq != 0.0):
            a += cs
            b += sn * it
            c += (1.0 - cs) * (it * it)
        else:  # ADBench's small-angle branch: X + rot x X
            a += 1.0
            b += 1.0
        rd = rx * d0 + ry * d1 + rz * d2
        q0 = a * d0 + b * (ry * d2 - rz * d1) + c * rd * rx
        q1 = a * d1 + b * (rz * d0 - rx * d2) + c * rd * ry
        q2 = a * d2 + b * (rx * d1 - ry * d0) + c * rd * rz
        iq = 1.0 / q2
        u0 = q0 * iq
        u1 = q1 * iq
        rsq = u0 * u0 + u1 * u1
        s = f * (1.0 + k1 * rsq + k2 * rsq * rsq)
    e0 += w * (s * u0 + px - m0)
    e1 += w * (s * u1 + py - m1)
    ~routine  # noqa: F821


@reversible
def ba_weight(e, w):
    """Weight residual of one observation: ``e += 1 - w^2``."""
    e += 1.0 - w * w


@reversible
def ba_objective(reproj_err, w_err, cams, X, w, feats, obs):
    """All residuals: ``reproj_err [p, 2] += ...``, ``w_err [p] += 1 - w^2``."""
    for i in range(len(w)):
        # the observation's camera, point and feature as scalars (so the call below
        # gets 19 distinct variables: no runtime alias checks between its arguments)
        with routine:  # noqa: F821 (reversible-language syntax)
            c = obs[i, 0]
            q = obs[i, 1]
            rx = cams[c, 0]
            ry = cams[c, 1]
            rz = cams[c, 2]
            cx = cams[c, 3]
            cy = cams[c, 4]
            cz = cams[c, 5]
            f = cams[c, 6]
            px = cams[c, 7]
            py = cams[c, 8]
            k1 = cams[c, 9]
            k2 = cams[c, 10]
            X0 = X[q, 0]
            X1 = X[q, 1]
            X2 = X[q, 2]
            m0 = feats[i, 0]
            m1 = feats[i, 1]
        ba_reproj(reproj_err[i, 0], reproj_err[i, 1], rx, ry, rz, cx, cy, cz, f, px, py, k1, k2,
                  X0, X1, X2, w[i], m0, m1)
        ba_weight(w_err[i], w[i])
        ~routine  # noqa: F821


#: the same programs without runtime checks (for speed); a caller with check=False
#: runs its callees unchecked too
ba_reproj_unchecked = reversible(check=False)(ba_reproj.__wrapped__)
ba_weight_unchecked = reversible(check=False)(ba_weight.__wrapped__)
ba_objective_unchecked = reversible(check=False)(ba_objective.__wrapped__)


def objective(data: BAData, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(reproj_err [p, 2], w_err [p])`` computed by the reversible program
    :data:`ba_objective` (``check=False``: without runtime checks)."""
    f = ba_objective if check else ba_objective_unchecked
    reproj_err = np.zeros((data.p, 2))
    w_err = np.zeros(data.p)
    f(reproj_err, w_err, data.cams, data.X, data.w, data.feats, data.obs)
    return reproj_err, w_err


# -- the sparse Jacobian by reverse sweeps, driven from @njit ----------------------------------

_EXAMPLE_REPROJ = (0.0,) * 19
_EXAMPLE_WEIGHT = (0.0, 1.0)
# positions in the tuple the two-lane backward kernel of ba_reproj returns: its 19
# arguments, then lane 0's adjoints of them (e0, e1, the 11 camera parameters, the point,
# w, m0, m1), then lane 1's
_NARGS = 19
_ADJ_CAM = 2  # offsets inside one lane's adjoints
_ADJ_X = _ADJ_CAM + BA_NCAMPARAMS
_ADJ_W = _ADJ_X + 3
_DRIVERS: dict[bool, object] = {}


def _make_driver(bwd, wbwd):
    """The @njit loop over observations calling the compiled reverse sweep.

    The reverse sweep of ``ba_reproj`` runs on the state *after* the forward run
    and restores the state before it.  Since the residuals enter ``e0``/``e1`` by
    addition, the adjoints do not depend on the values ``e0``/``e1`` hold, so the
    sweep can start from ``e0 = e1 = 0``: it then ends with ``e0 = -residual0``,
    ``e1 = -residual1``.  No forward run is needed.  The sweep carries two adjoint
    lanes (seed 1 on ``e0`` in lane 0, on ``e1`` in lane 1), so one uncomputation of
    the observation gives both Jacobian rows.  ``ba_weight``'s sweep likewise gives
    ``-(1 - w^2)`` and ``-2w``.
    """

    @numba.njit(boundscheck=False)
    def driver(cams, X, w, feats, obs, reproj_err, w_err, cols, vals, atol, rtol):
        p = w.shape[0]
        n = cams.shape[0]
        m = X.shape[0]
        col_pt = BA_NCAMPARAMS * n
        col_w = col_pt + 3 * m
        for i in range(p):
            c = obs[i, 0]
            q = obs[i, 1]
            rx, ry, rz = cams[c, 0], cams[c, 1], cams[c, 2]
            cx, cy, cz = cams[c, 3], cams[c, 4], cams[c, 5]
            f, px, py, k1, k2 = cams[c, 6], cams[c, 7], cams[c, 8], cams[c, 9], cams[c, 10]
            X0, X1, X2 = X[q, 0], X[q, 1], X[q, 2]
            wi, m0, m1 = w[i], feats[i, 0], feats[i, 1]
            g = bwd(0.0, 0.0, rx, ry, rz, cx, cy, cz, f, px, py, k1, k2, X0, X1, X2, wi, m0, m1,
                    1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                    0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                    0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, atol, rtol)
            for row in range(2):
                lane = _NARGS * (1 + row)
                reproj_err[i, row] = -g[row]
                k = BA_ROW_NNZ * (2 * i + row)
                for j in range(BA_NCAMPARAMS):
                    cols[k + j] = BA_NCAMPARAMS * c + j
                    vals[k + j] = g[lane + _ADJ_CAM + j]
                for j in range(3):
                    cols[k + BA_NCAMPARAMS + j] = col_pt + 3 * q + j
                    vals[k + BA_NCAMPARAMS + j] = g[lane + _ADJ_X + j]
                cols[k + BA_ROW_NNZ - 1] = col_w + i
                vals[k + BA_ROW_NNZ - 1] = g[lane + _ADJ_W]
        base = 2 * BA_ROW_NNZ * p
        for i in range(p):
            h = wbwd(0.0, w[i], 1.0, 0.0, atol, rtol)
            w_err[i] = -h[0]
            cols[base + i] = col_w + i
            vals[base + i] = h[3]

    return driver


def jacobian_driver(check: bool = False):
    """The compiled ``@njit`` driver of :func:`jacobian` (for benchmarks):
    ``driver(cams, X, w, feats, obs, reproj_err, w_err, cols, vals, atol, rtol)``
    fills the residuals, the column indices and the values (``nnz = 31 p``) in CSR
    order; the row pointer is ``jacobian_indptr(p)``."""
    driver = _DRIVERS.get(check)
    if driver is None:
        reproj = ba_reproj if check else ba_reproj_unchecked
        weight = ba_weight if check else ba_weight_unchecked
        driver = _make_driver(reproj.kernel("backward", *_EXAMPLE_REPROJ, lanes=2),
                              weight.kernel("backward", *_EXAMPLE_WEIGHT))
        _DRIVERS[check] = driver
    return driver


def jacobian_indptr(p: int) -> np.ndarray:
    """Row pointer of the BA Jacobian: ``2p`` rows of 15 nonzeros, then ``p`` rows of 1."""
    indptr = np.empty(3 * p + 1, dtype=np.int32)
    indptr[:2 * p + 1] = BA_ROW_NNZ * np.arange(2 * p + 1)
    indptr[2 * p + 1:] = indptr[2 * p] + np.arange(1, p + 1)
    return indptr


def jacobian_arrays(data: BAData, check: bool = False):
    """``(reproj_err, w_err, indptr, cols, vals)``: the residuals and the CSR arrays
    of the Jacobian, computed by the reverse sweeps of the reversible program."""
    p = data.p
    nnz = (2 * BA_ROW_NNZ + 1) * p
    reproj_err = np.empty((p, 2))
    w_err = np.empty(p)
    cols = np.empty(nnz, dtype=np.int32)
    vals = np.empty(nnz)
    atol, rtol = get_tolerance()
    driver = jacobian_driver(check)
    try:
        driver(data.cams, data.X, data.w, data.feats, data.obs, reproj_err, w_err, cols, vals,
               atol, rtol)
    except CheckFailed as exc:
        raise to_user_error(exc) from None
    return reproj_err, w_err, jacobian_indptr(p), cols, vals


def jacobian(data: BAData, check: bool = False):
    """The sparse Jacobian ``d (reproj_err, w_err) / d (cams, X, w)`` as a
    ``scipy.sparse.csr_matrix`` of shape ``(3p, 11n + 3m + p)`` (ADBench's layout:
    reprojection rows ``2i, 2i + 1``, then weight rows ``2p + i``; camera columns,
    then point columns, then weight columns)."""
    _, _, indptr, cols, vals = jacobian_arrays(data, check)
    return _csr(data, vals, cols, indptr)

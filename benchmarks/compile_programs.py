"""Programs for ``compile_time.py``: real-sized models written as a user writes them from
``docs/`` (no restructuring for the compiler).

* ``ht_objective`` / ``ht_residuals``: a hand-tracking-like model (as GradBench's ``ht``):
  per bone, a rotation from its pose angles (Rodrigues), composed with the bone's base
  transform into a 4x4 relative transform, chained into absolute transforms; each vertex
  skinned by a weighted sum of its bones' transforms; the residuals against target points.
  About 150 lines with its callees, nested compute / uncompute.
* ``mlp_loss``: a small two-layer network's squared loss (12 lines);
* ``mlp_matrix_loss``: a two-layer network written with matrices (6 lines).

The GMM log-posterior is ``natural_programs.gmm_objective``.
"""

from __future__ import annotations

import math

import numpy as np

from revbench import reversible, routine


@reversible
def rodrigues(R, ax, ay, az):
    """R += the rotation by the angle-axis vector (ax, ay, az); R starts at zero."""
    sq = ax * ax + ay * ay + az * az
    if sq > 1e-12:
        th = math.sqrt(sq)
        c = math.cos(th)
        s = math.sin(th)
        kx = ax / th
        ky = ay / th
        kz = az / th
        R[0, 0] += c + kx * kx * (1.0 - c)
        R[0, 1] += kx * ky * (1.0 - c) - kz * s
        R[0, 2] += kx * kz * (1.0 - c) + ky * s
        R[1, 0] += ky * kx * (1.0 - c) + kz * s
        R[1, 1] += c + ky * ky * (1.0 - c)
        R[1, 2] += ky * kz * (1.0 - c) - kx * s
        R[2, 0] += kz * kx * (1.0 - c) - ky * s
        R[2, 1] += kz * ky * (1.0 - c) + kx * s
        R[2, 2] += c + kz * kz * (1.0 - c)
        del kz
        del ky
        del kx
        del s
        del c
        del th
    else:  # first order near zero: I + [k]x
        R[0, 0] += 1.0
        R[0, 1] -= az
        R[0, 2] += ay
        R[1, 0] += az
        R[1, 1] += 1.0
        R[1, 2] -= ax
        R[2, 0] -= ay
        R[2, 1] += ax
        R[2, 2] += 1.0
    del sq


@reversible
def matmul4(C, A, B):
    """C += A @ B for 4x4 matrices."""
    for i in range(4):
        for j in range(4):
            for k in range(4):
                C[i, j] += A[i, k] * B[k, j]


@reversible
def compose(T, R, B):
    """T += [R 0; 0 1] @ B: a rotation applied to a bone's 4x4 base transform."""
    with routine as homogeneous:
        H = np.zeros((4, 4))
        for i in range(3):
            for k in range(3):
                H[i, k] += R[i, k]
        H[3, 3] += 1.0
    matmul4(T, H, B)
    ~homogeneous


@reversible
def bone_transforms(absT, pose, base):
    """absT[b] += the absolute transform of bone b (a chain: bone b's parent is b - 1)."""
    n_bones = pose.shape[0]
    for b in range(n_bones):
        with routine as local:
            R = np.zeros((3, 3))
            rodrigues(R, pose[b, 0], pose[b, 1], pose[b, 2])
            rel = np.zeros((4, 4))
            compose(rel, R, base[b])
        if b == 0:
            for i in range(4):
                for j in range(4):
                    absT[b, i, j] += rel[i, j]
        else:
            with routine as parent:
                P = np.zeros((4, 4))
                for i in range(4):
                    for j in range(4):
                        P[i, j] += absT[b - 1, i, j]
            matmul4(absT[b], P, rel)
            ~parent
        ~local


@reversible
def skin(p, absT, weights, vert):
    """p += the vertex skinned: the sum over bones of weight * (bone transform @ vertex)."""
    for b in range(absT.shape[0]):
        w = weights[b]
        for i in range(3):
            p[i] += w * (absT[b, i, 0] * vert[0] + absT[b, i, 1] * vert[1]
                         + absT[b, i, 2] * vert[2] + absT[b, i, 3])
        del w


@reversible
def ht_residuals(r, pose, base, verts, weights, targets):
    """r[v] += skinned vertex v - targets[v]."""
    n_bones = pose.shape[0]
    n_verts = verts.shape[0]
    with routine as chain:
        absT = np.zeros((n_bones, 4, 4))
        bone_transforms(absT, pose, base)
    for v in range(n_verts):
        with routine as one:
            p = np.zeros(3)
            skin(p, absT, weights[v], verts[v])
        for i in range(3):
            r[v, i] += p[i] - targets[v, i]
        ~one
    ~chain


@reversible
def ht_objective(err, pose, base, verts, weights, targets):
    """err += the sum of squared residuals."""
    n_verts = verts.shape[0]
    with routine as res:
        r = np.zeros((n_verts, 3))
        ht_residuals(r, pose, base, verts, weights, targets)
    for v in range(n_verts):
        for i in range(3):
            err += r[v, i] * r[v, i]
    ~res


def ht_data(n_bones: int = 6, n_verts: int = 50, seed: int = 0) -> tuple:
    """(pose, base, verts, weights, targets): random but well-formed."""
    rng = np.random.default_rng(seed)
    pose = 0.3 * rng.normal(size=(n_bones, 3))
    base = np.zeros((n_bones, 4, 4))
    for b in range(n_bones):
        base[b] = np.eye(4)
        base[b, :3, 3] = rng.normal(size=3)
    verts = rng.normal(size=(n_verts, 3))
    weights = rng.random(size=(n_verts, n_bones))
    weights /= weights.sum(axis=1, keepdims=True)
    targets = rng.normal(size=(n_verts, 3))
    return pose, base, verts, weights, targets


# ---------------------------------------------------------------------------------------
# A small network (12 lines)
# ---------------------------------------------------------------------------------------


@reversible
def mlp_loss(loss, W1, b1, W2, b2, X, Y):
    n = X.shape[0]
    h_dim = W1.shape[0]
    for s in range(n):
        with routine as layer:
            h = np.zeros(h_dim)
            for i in range(h_dim):
                z = b1[i] + np.dot(W1[i], X[s])
                h[i] += np.tanh(z)
                del z
            out = np.dot(W2, h) + b2
        loss += (out - Y[s]) * (out - Y[s])
        ~layer


@reversible
def mlp_matrix_loss(loss, W1, b1, W2, b2, X, Y):
    """The same kind of network written as a model reads (``docs/language.md``, "A model
    as it reads"): matrix products on BLAS, a bias broadcast over rows."""
    with routine as hidden:
        H = np.zeros((X.shape[0], W1.shape[0]))
        H += np.tanh(X @ W1.T + b1)
    loss += np.sum((H @ W2.T + b2 - Y) ** 2)
    ~hidden


def mlp_matrix_data(n: int = 2000, d: int = 32, h: int = 64, o: int = 8, seed: int = 0) -> tuple:
    """bench_ml.py's MLP sizes: N = 2000 samples, 32-64-8."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(h, d)) / np.sqrt(d), 0.1 * rng.normal(size=h),
            rng.normal(size=(o, h)) / np.sqrt(h), 0.1 * rng.normal(size=o),
            rng.normal(size=(n, d)), rng.normal(size=(n, o)))


@reversible
def spectrum_power(power, c, w, t):
    """The power of a sum of damped complex exponentials: complex arithmetic, a complex
    function and a complex array, differentiated with respect to the amplitudes ``c``."""
    with routine as total:
        s = 0j
        for k in range(c.shape[0]):
            s += c[k] * np.exp(1j * w[k] * t) / (1.0 + w[k] ** 2)
    power += abs(s) ** 2
    ~total


def spectrum_data(n: int = 64, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=n) + 1j * rng.normal(size=n), rng.normal(size=n), 0.7)


def mlp_data(n: int = 32, d: int = 8, h: int = 16, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return (0.3 * rng.normal(size=(h, d)), 0.1 * rng.normal(size=h), 0.3 * rng.normal(size=h),
            0.1, rng.normal(size=(n, d)), rng.normal(size=n))


@reversible
def poly(y, x):            # the README's example, as it is written there
    t = 0.0
    t += x * x
    y += 3.0 * t + x
    t -= x * x
    del t

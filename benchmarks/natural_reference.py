"""Hand-written references for ``benchmarks/natural.py``.

* ``@numba.njit`` objectives, the same loops as ``natural_programs.py``, and
  hand-written ``@njit`` reverse-mode gradients (Jacobians for bundle adjustment) of
  those loops, checked against central finite differences by
  ``tests/test_natural_benchmark.py``;
* JAX (``jax.jit(jax.value_and_grad(...))``, ``jax.jit(jax.vmap(jax.jacrev(...)))``)
  and PyTorch (autograd) versions, built only when the package is installed
  (``jax_versions()`` / ``torch_versions()`` return ``None`` otherwise).

Everything here is single-threaded when the caller sets ``NUMBA_NUM_THREADS=1`` (and
``natural.py`` limits JAX and PyTorch to one thread too).
"""

from __future__ import annotations

import math

import numba
import numpy as np

njit = numba.njit(cache=True)


# ---------------------------------------------------------------------------------------
# GMM
# ---------------------------------------------------------------------------------------


@njit
def gmm_wishart_constant(gamma, m, d):
    n = d + m + 1
    lg = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lg += math.lgamma(0.5 * n + 0.5 * (1 - j))
    return n * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lg


@njit
def _gmm_qx(icf, k, xc, qx, d):
    for j in range(d):
        qx[j] = math.exp(icf[k, j]) * xc[j]
    p = d
    for l in range(d):  # noqa: E741
        for j in range(l + 1, d):
            qx[j] += icf[k, p] * xc[l]
            p += 1


@njit
def _gmm_prior(icf, gamma, m, d):
    k_comp = icf.shape[0]
    out = 0.0
    for k in range(k_comp):
        for j in range(d):
            out += 0.5 * gamma * gamma * math.exp(2.0 * icf[k, j]) - m * icf[k, j]
        for j in range(d, icf.shape[1]):
            out += 0.5 * gamma * gamma * icf[k, j] * icf[k, j]
    return out - k_comp * gmm_wishart_constant(gamma, m, d)


@njit
def _logsumexp(v):
    mx = v[0]
    for k in range(1, len(v)):
        mx = max(mx, v[k])
    s = 0.0
    for k in range(len(v)):
        s += math.exp(v[k] - mx)
    return mx + math.log(s)


@njit
def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    k_comp = len(alphas)
    xc = np.empty(d)
    qx = np.empty(d)
    main = np.empty(k_comp)
    total = 0.0
    for i in range(n):
        for k in range(k_comp):
            for j in range(d):
                xc[j] = x[i, j] - means[k, j]
            _gmm_qx(icf, k, xc, qx, d)
            t = alphas[k]
            for j in range(d):
                t += icf[k, j] - 0.5 * qx[j] * qx[j]
            main[k] = t
        total += _logsumexp(main)
    total -= n * _logsumexp(alphas)
    total -= n * d * 0.5 * math.log(2.0 * math.pi)
    return total + _gmm_prior(icf, gamma, m, d)


@njit
def gmm_value_and_grad(alphas, means, icf, x, gamma, m):
    """The objective and its gradient w.r.t. alphas, means, icf, by hand (reverse mode)."""
    n, d = x.shape
    k_comp = len(alphas)
    dal = np.zeros(k_comp)
    dmu = np.zeros((k_comp, d))
    dicf = np.zeros_like(icf)
    xcs = np.empty((k_comp, d))
    qxs = np.empty((k_comp, d))
    main = np.empty(k_comp)
    dxc = np.empty(d)
    total = 0.0
    for i in range(n):
        for k in range(k_comp):
            for j in range(d):
                xcs[k, j] = x[i, j] - means[k, j]
            _gmm_qx(icf, k, xcs[k], qxs[k], d)
            t = alphas[k]
            for j in range(d):
                t += icf[k, j] - 0.5 * qxs[k, j] * qxs[k, j]
            main[k] = t
        lse = _logsumexp(main)
        total += lse
        for k in range(k_comp):
            wk = math.exp(main[k] - lse)           # d lse / d main[k]
            dal[k] += wk
            # main[k] = alphas[k] + sum_j icf[k, j] - 0.5 |qx|^2,  qx = Q xc
            for j in range(d):
                g = -wk * qxs[k, j]                # d/d qx[j]
                q = math.exp(icf[k, j])
                dicf[k, j] += wk + g * q * xcs[k, j]
                dxc[j] = g * q
            p = d
            for l in range(d):  # noqa: E741
                for j in range(l + 1, d):
                    g = -wk * qxs[k, j]
                    dicf[k, p] += g * xcs[k, l]
                    dxc[l] += g * icf[k, p]
                    p += 1
            for j in range(d):
                dmu[k, j] -= dxc[j]
    lse_a = _logsumexp(alphas)
    total -= n * lse_a
    for k in range(k_comp):
        dal[k] -= n * math.exp(alphas[k] - lse_a)
    total -= n * d * 0.5 * math.log(2.0 * math.pi)
    total += _gmm_prior(icf, gamma, m, d)
    for k in range(k_comp):
        for j in range(d):
            dicf[k, j] += gamma * gamma * math.exp(2.0 * icf[k, j]) - m
        for j in range(d, icf.shape[1]):
            dicf[k, j] += gamma * gamma * icf[k, j]
    return total, dal, dmu, dicf


@njit
def dot_value(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit
def dot_value_and_grad(x, y):
    """``x . y`` and its gradient ``(y, x)``, as one would write it by hand."""
    return dot_value(x, y), y.copy(), x.copy()


@njit
def _mlp_layers(W1, b1, W2, b2, x, y, h, o):
    """One sample: h = tanh(W1 x + b1), o = W2 h + b2 - y; returns |o|^2."""
    for i in range(W1.shape[0]):
        a = b1[i]
        for j in range(W1.shape[1]):
            a += W1[i, j] * x[j]
        h[i] = np.tanh(a)
    total = 0.0
    for k in range(W2.shape[0]):
        v = b2[k] - y[k]
        for i in range(W1.shape[0]):
            v += W2[k, i] * h[i]
        o[k] = v
        total += v * v
    return total


@njit
def mlp_value(W1, b1, W2, b2, X, Y):
    """sum_s |W2 tanh(W1 x_s + b1) + b2 - y_s|^2, as loops."""
    h, o = np.empty(W1.shape[0]), np.empty(W2.shape[0])
    total = 0.0
    for s in range(X.shape[0]):
        total += _mlp_layers(W1, b1, W2, b2, X[s], Y[s], h, o)
    return total


@njit
def mlp_value_and_grad(W1, b1, W2, b2, X, Y):
    """The loss and its gradient w.r.t. (W1, b1, W2, b2), backpropagated by hand."""
    n_hidden, n_in = W1.shape
    gW1, gb1 = np.zeros_like(W1), np.zeros_like(b1)
    gW2, gb2 = np.zeros_like(W2), np.zeros_like(b2)
    h, gh, o = np.empty(n_hidden), np.empty(n_hidden), np.empty(W2.shape[0])
    total = 0.0
    for s in range(X.shape[0]):
        total += _mlp_layers(W1, b1, W2, b2, X[s], Y[s], h, o)
        gh[:] = 0.0
        for k in range(W2.shape[0]):
            go = 2.0 * o[k]
            gb2[k] += go
            for i in range(n_hidden):
                gW2[k, i] += go * h[i]
                gh[i] += go * W2[k, i]
        for i in range(n_hidden):
            ga = gh[i] * (1.0 - h[i] * h[i])
            gb1[i] += ga
            for j in range(n_in):
                gW1[i, j] += ga * X[s, j]
    return total, gW1, gb1, gW2, gb2


def gmm_lower_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the packed lower triangle (column by column, as ADBench)."""
    rows, cols = [], []
    for col in range(d):
        for row in range(col + 1, d):
            rows.append(row)
            cols.append(col)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


# ---------------------------------------------------------------------------------------
# Bundle adjustment
# ---------------------------------------------------------------------------------------


@njit
def _ba_project(cam, X, w, feat, out):
    """Residual of one observation; returns the intermediates the Jacobian needs."""
    xc0 = X[0] - cam[3]
    xc1 = X[1] - cam[4]
    xc2 = X[2] - cam[5]
    theta = math.sqrt(cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2])
    c = math.cos(theta)
    s = math.sin(theta)
    w0 = cam[0] / theta
    w1 = cam[1] / theta
    w2 = cam[2] / theta
    wx = (w0 * xc0 + w1 * xc1 + w2 * xc2) * (1.0 - c)
    xr0 = xc0 * c + (w1 * xc2 - w2 * xc1) * s + w0 * wx
    xr1 = xc1 * c + (w2 * xc0 - w0 * xc2) * s + w1 * wx
    xr2 = xc2 * c + (w0 * xc1 - w1 * xc0) * s + w2 * wx
    u = xr0 / xr2
    v = xr1 / xr2
    rsq = u * u + v * v
    dist = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    out[0] = w * (u * dist * cam[6] + cam[7] - feat[0])
    out[1] = w * (v * dist * cam[6] + cam[8] - feat[1])


@njit
def ba_residuals(cams, points, weights, feats, cam_idx, pt_idx):
    n = len(cam_idx)
    r = np.empty((n, 2))
    for o in range(n):
        _ba_project(cams[cam_idx[o]], points[pt_idx[o]], weights[o], feats[o], r[o])
    return r


@njit
def _ba_jacobian_one(cam, X, w, feat, J, scratch):
    """J (2, 15) = d r / d (cam, X, w), by hand: one reverse sweep per residual.

    ``scratch`` is an (8, 3) work array (no allocation per observation)."""
    xc = scratch[0]
    for j in range(3):
        xc[j] = X[j] - cam[3 + j]
    sqt = cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2]
    theta = math.sqrt(sqt)
    c = math.cos(theta)
    s = math.sin(theta)
    wv = scratch[1]
    for j in range(3):
        wv[j] = cam[j] / theta
    wdotx = wv[0] * xc[0] + wv[1] * xc[1] + wv[2] * xc[2]
    wx = wdotx * (1.0 - c)
    cr = scratch[2]
    cr[0] = wv[1] * xc[2] - wv[2] * xc[1]
    cr[1] = wv[2] * xc[0] - wv[0] * xc[2]
    cr[2] = wv[0] * xc[1] - wv[1] * xc[0]
    xr = scratch[3]
    for j in range(3):
        xr[j] = xc[j] * c + cr[j] * s + wv[j] * wx
    u = xr[0] / xr[2]
    v = xr[1] / xr[2]
    rsq = u * u + v * v
    k1 = cam[9]
    k2 = cam[10]
    f = cam[6]
    dist = 1.0 + k1 * rsq + k2 * rsq * rsq
    p0 = u * dist * f + cam[7] - feat[0]
    p1 = v * dist * f + cam[8] - feat[1]
    dxr = scratch[4]
    dxc = scratch[5]
    dwv = scratch[6]
    dcr = scratch[7]
    for row in range(2):
        a0 = 1.0 if row == 0 else 0.0
        a1 = 1.0 - a0
        for q in range(15):
            J[row, q] = 0.0
        J[row, 14] = a0 * p0 + a1 * p1                    # d / d w
        b0 = a0 * w
        b1 = a1 * w
        J[row, 7] = b0
        J[row, 8] = b1
        J[row, 6] = (b0 * u + b1 * v) * dist
        du = b0 * dist * f
        dv = b1 * dist * f
        ddist = (b0 * u + b1 * v) * f
        J[row, 9] = ddist * rsq
        J[row, 10] = ddist * rsq * rsq
        drsq = ddist * (k1 + 2.0 * k2 * rsq)
        du += 2.0 * u * drsq
        dv += 2.0 * v * drsq
        dxr[0] = du / xr[2]
        dxr[1] = dv / xr[2]
        dxr[2] = -(du * u + dv * v) / xr[2]
        # xr = xc c + cr s + wv wx
        dc = 0.0
        ds = 0.0
        dwx = 0.0
        for j in range(3):
            dxc[j] = dxr[j] * c
            dc += dxr[j] * xc[j]
            dcr[j] = dxr[j] * s
            ds += dxr[j] * cr[j]
            dwv[j] = dxr[j] * wx
            dwx += dxr[j] * wv[j]
        # cr = wv x xc: d wv += xc x dcr, d xc += dcr x wv
        dwv[0] += xc[1] * dcr[2] - xc[2] * dcr[1]
        dwv[1] += xc[2] * dcr[0] - xc[0] * dcr[2]
        dwv[2] += xc[0] * dcr[1] - xc[1] * dcr[0]
        dxc[0] += dcr[1] * wv[2] - dcr[2] * wv[1]
        dxc[1] += dcr[2] * wv[0] - dcr[0] * wv[2]
        dxc[2] += dcr[0] * wv[1] - dcr[1] * wv[0]
        # wx = (wv . xc)(1 - c)
        for j in range(3):
            dwv[j] += xc[j] * (1.0 - c) * dwx
            dxc[j] += wv[j] * (1.0 - c) * dwx
        dc -= wdotx * dwx
        dtheta = -s * dc + c * ds
        # wv = rot / theta
        wdot = 0.0
        for j in range(3):
            wdot += dwv[j] * cam[j]
        dtheta -= wdot / sqt
        for j in range(3):
            J[row, j] = dwv[j] / theta + dtheta * cam[j] / theta
            J[row, 3 + j] = -dxc[j]
            J[row, 11 + j] = dxc[j]


@njit
def ba_jacobian(cams, points, weights, feats, cam_idx, pt_idx):
    n = len(cam_idx)
    J = np.empty((n, 2, 15))
    scratch = np.empty((8, 3))
    for o in range(n):
        _ba_jacobian_one(cams[cam_idx[o]], points[pt_idx[o]], weights[o], feats[o], J[o],
                         scratch)
    return J


# ---------------------------------------------------------------------------------------
# Sparse (CSR)
# ---------------------------------------------------------------------------------------


@njit
def csr_bilinear_value(x, data, indices, indptr, y):
    s = 0.0
    for i in range(len(indptr) - 1):
        t = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            t += data[p] * y[indices[p]]
        s += x[i] * t
    return s


@njit
def csr_bilinear_grad(x, data, indices, indptr, y):
    """s, ds/dx, ds/ddata."""
    dx = np.empty_like(x)
    ddata = np.empty_like(data)
    s = 0.0
    for i in range(len(indptr) - 1):
        t = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            yp = y[indices[p]]
            t += data[p] * yp
            ddata[p] = x[i] * yp
        dx[i] = t
        s += x[i] * t
    return s, dx, ddata


@njit
def csr_sqnorm_value(x, data, indices, indptr):
    s = 0.0
    for i in range(len(indptr) - 1):
        t = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            t += data[p] * x[indices[p]]
        s += t * t
    return s


@njit
def csr_sqnorm_grad(x, data, indices, indptr):
    """s = |A x|^2, ds/dx = 2 A^T A x, ds/ddata[p] = 2 (A x)[row] x[col]."""
    dx = np.zeros_like(x)
    ddata = np.empty_like(data)
    s = 0.0
    for i in range(len(indptr) - 1):
        t = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            t += data[p] * x[indices[p]]
        s += t * t
        g = 2.0 * t
        for p in range(indptr[i], indptr[i + 1]):
            ddata[p] = g * x[indices[p]]
            dx[indices[p]] += g * data[p]
    return s, dx, ddata


# ---------------------------------------------------------------------------------------
# Heat equation
# ---------------------------------------------------------------------------------------


@njit
def heat_value(u0, c, n_steps):
    n = len(u0)
    u = u0.copy()
    v = np.empty(n)
    for _ in range(n_steps):
        v[0] = u[0]
        v[n - 1] = u[n - 1]
        for i in range(1, n - 1):
            v[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s


@njit
def heat_value_and_grad(u0, c, n_steps):
    """loss = |u_T|^2; gradient w.r.t. u0 and c, storing the trajectory."""
    n = len(u0)
    traj = np.empty((n_steps + 1, n))
    traj[0] = u0
    for t in range(n_steps):
        u = traj[t]
        v = traj[t + 1]
        v[0] = u[0]
        v[n - 1] = u[n - 1]
        for i in range(1, n - 1):
            v[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    s = 0.0
    lam = np.empty(n)
    for i in range(n):
        s += traj[n_steps, i] * traj[n_steps, i]
        lam[i] = 2.0 * traj[n_steps, i]
    prev = np.empty(n)
    dc = 0.0
    for t in range(n_steps - 1, -1, -1):
        u = traj[t]
        prev[0] = lam[0]
        prev[n - 1] = lam[n - 1]
        for i in range(1, n - 1):
            prev[i] = 0.0
        for i in range(1, n - 1):
            g = lam[i]
            dc += g * (u[i - 1] - 2.0 * u[i] + u[i + 1])
            prev[i - 1] += c * g
            prev[i] += (1.0 - 2.0 * c) * g
            prev[i + 1] += c * g
        lam, prev = prev, lam
    return s, lam, dc


# ---------------------------------------------------------------------------------------
# JAX and PyTorch (only when installed)
# ---------------------------------------------------------------------------------------


def jax_versions():
    """A dict of jitted JAX functions, or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def gmm(alphas, means, icf, x, gamma, m, wconst, rows, cols):
        n, d = x.shape
        k_comp = alphas.shape[0]
        diag = icf[:, :d]
        L = jnp.zeros((k_comp, d, d)).at[:, rows, cols].set(icf[:, d:])
        Q = L + jax.vmap(jnp.diag)(jnp.exp(diag))
        xc = x[:, None, :] - means[None, :, :]                       # n, K, d
        qx = jnp.einsum("kij,nkj->nki", Q, xc)
        main = alphas[None, :] + diag.sum(1)[None, :] - 0.5 * (qx * qx).sum(-1)
        val = jax.scipy.special.logsumexp(main, axis=1).sum()
        val -= n * jax.scipy.special.logsumexp(alphas)
        val -= n * d * 0.5 * math.log(2.0 * math.pi)
        prior = (0.5 * gamma * gamma * (jnp.exp(2.0 * diag).sum() + (icf[:, d:] ** 2).sum())
                 - m * diag.sum())
        return val + prior - k_comp * wconst

    def ba_one(cam, X, w, feat):
        xc = X - cam[3:6]
        rot = cam[0:3]
        theta = jnp.sqrt(rot @ rot)
        c, s = jnp.cos(theta), jnp.sin(theta)
        wv = rot / theta
        xr = xc * c + jnp.cross(wv, xc) * s + wv * (wv @ xc) * (1.0 - c)
        p = xr[:2] / xr[2]
        rsq = p @ p
        dist = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
        return w * (p * dist * cam[6] + cam[7:9] - feat)

    def ba_jac(cams, points, weights, feats):
        jc, jx, jw = jax.vmap(jax.jacrev(ba_one, argnums=(0, 1, 2)))(cams, points, weights, feats)
        return jnp.concatenate([jc, jx, jw[:, :, None]], axis=2)

    def bilinear(x, data, rows, indices, y):
        return (x[rows] * data * y[indices]).sum()

    def sqnorm(x, data, rows, indices, n_rows):
        ax = jax.ops.segment_sum(data * x[indices], rows, num_segments=n_rows)
        return (ax * ax).sum()

    def heat(u0, c, n_steps):
        def step(u, _):
            lap = jnp.zeros_like(u).at[1:-1].set(u[:-2] - 2.0 * u[1:-1] + u[2:])
            return u + c * lap, None
        u, _ = jax.lax.scan(step, u0, None, length=n_steps)
        return (u * u).sum()

    return {
        "gmm_objective": jax.jit(gmm),
        "gmm_value_and_grad": jax.jit(jax.value_and_grad(gmm, argnums=(0, 1, 2))),
        "ba_residuals": jax.jit(jax.vmap(ba_one)),
        "ba_jacobian": jax.jit(ba_jac),
        "bilinear_value_and_grad": jax.jit(jax.value_and_grad(bilinear, argnums=(0, 1))),
        "sqnorm_value_and_grad": jax.jit(jax.value_and_grad(sqnorm, argnums=(0, 1)),
                                         static_argnums=4),
        "heat_value_and_grad": jax.jit(jax.value_and_grad(heat, argnums=(0, 1)),
                                       static_argnums=2),
        "dot_value_and_grad": jax.jit(jax.value_and_grad(lambda x, y: x @ y, argnums=(0, 1))),
        "mlp_value_and_grad": jax.jit(jax.value_and_grad(
            lambda W1, b1, W2, b2, X, Y: jnp.sum((jnp.tanh(X @ W1.T + b1) @ W2.T + b2 - Y) ** 2),
            argnums=(0, 1, 2, 3))),
        "version": jax.__version__,
    }


def torch_versions():
    """A dict of PyTorch functions (eager autograd), or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)

    def gmm(alphas, means, icf, x, gamma, m, wconst, rows, cols):
        n, d = x.shape
        k_comp = alphas.shape[0]
        diag = icf[:, :d]
        L = torch.zeros((k_comp, d, d), dtype=icf.dtype)
        L[:, rows, cols] = icf[:, d:]
        Q = L + torch.diag_embed(torch.exp(diag))
        xc = x[:, None, :] - means[None, :, :]
        qx = torch.einsum("kij,nkj->nki", Q, xc)
        main = alphas[None, :] + diag.sum(1)[None, :] - 0.5 * (qx * qx).sum(-1)
        val = torch.logsumexp(main, dim=1).sum() - n * torch.logsumexp(alphas, dim=0)
        val = val - n * d * 0.5 * math.log(2.0 * math.pi)
        prior = (0.5 * gamma * gamma * (torch.exp(2.0 * diag).sum() + (icf[:, d:] ** 2).sum())
                 - m * diag.sum())
        return val + prior - k_comp * wconst

    def gmm_value_and_grad(alphas, means, icf, x, gamma, m, wconst, rows, cols):
        a = alphas.detach().requires_grad_()
        mu = means.detach().requires_grad_()
        q = icf.detach().requires_grad_()
        val = gmm(a, mu, q, x, gamma, m, wconst, rows, cols)
        val.backward()
        return val.item(), (a.grad, mu.grad, q.grad)

    def bilinear_value_and_grad(x, data, rows, indices, y):
        xx = x.detach().requires_grad_()
        dd = data.detach().requires_grad_()
        val = (xx[rows] * dd * y[indices]).sum()
        val.backward()
        return val.item(), (xx.grad, dd.grad)

    def sqnorm_value_and_grad(x, data, rows, indices, n_rows):
        xx = x.detach().requires_grad_()
        dd = data.detach().requires_grad_()
        ax = torch.zeros(n_rows, dtype=x.dtype).index_add(0, rows, dd * xx[indices])
        val = (ax * ax).sum()
        val.backward()
        return val.item(), (xx.grad, dd.grad)

    def heat_value_and_grad(u0, c, n_steps):
        u = u0.detach().requires_grad_()
        cc = torch.tensor(c, dtype=u0.dtype, requires_grad=True)
        v = u
        for _ in range(n_steps):
            lap = torch.nn.functional.pad(v[:-2] - 2.0 * v[1:-1] + v[2:], (1, 1))
            v = v + cc * lap
        val = (v * v).sum()
        val.backward()
        return val.item(), (u.grad, cc.grad)

    return {
        "gmm_objective": lambda *a: gmm(*a),
        "gmm_value_and_grad": gmm_value_and_grad,
        "bilinear_value_and_grad": bilinear_value_and_grad,
        "sqnorm_value_and_grad": sqnorm_value_and_grad,
        "heat_value_and_grad": heat_value_and_grad,
        "version": torch.__version__,
        "torch": torch,
    }

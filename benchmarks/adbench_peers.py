"""The peers of ``adbench.py``: GMM and BA in JAX and in PyTorch, written for this benchmark.

Both are optional: :func:`load_peers` imports what is installed (JAX through the
``peers`` extra, PyTorch with ``pip install torch``) and says why a peer is missing.
The caller sets the single-thread environment variables *before* this module imports
JAX or PyTorch (``XLA_FLAGS``, ``OMP_NUM_THREADS``); :func:`load_peers` then pins
PyTorch's own thread pools and turns on JAX's float64.

What each peer computes, in float64, for the same data as revbench:

* GMM: the objective and its gradient with respect to ``alpha``, ``means`` and
  ``icf`` (JAX: ``jax.jit`` of the objective and of ``jax.grad``; PyTorch: eager
  ``torch.func.grad``).  Dense ``Q_k`` (built from ``icf`` column by column), the
  centred points ``x_i - mu_k`` for every pair, one batched contraction for
  ``Q_k (x_i - mu_k)`` -- the natural array-language formulation.
* BA: the residuals and the sparse Jacobian's values in the CSR order of
  :func:`revbench.workloads.ba.jacobian` (per observation: the two reprojection
  rows, 11 camera + 3 point + 1 weight columns each; then the ``p`` weight rows).
  The Jacobian is ADBench's formulation for these frameworks: the residual of *one*
  observation differentiated with respect to its 15 inputs (``jacfwd``: 15 tangents,
  or ``jacrev``: 2 cotangents), mapped over the observations with ``vmap``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from revbench.workloads import ba as BA
from revbench.workloads import gmm as GMM


@dataclass
class Peer:
    """One framework: its name, version, and the callables of each workload, which
    take NumPy data and return NumPy results (for validation) and have a ``timed``
    twin returning the framework's own arrays with the work finished (for timing)."""

    name: str
    version: str
    gmm: Callable[[GMM.GMMData], GMMPeer]
    ba: Callable[[BA.BAData, str], BAPeer]
    modes: tuple[str, ...] = ("jacfwd", "jacrev")


@dataclass
class GMMPeer:
    """A GMM problem prepared for one peer (data converted, functions traced once)."""

    objective: Callable[[], Any]
    gradient: Callable[[], Any]
    to_numpy: Callable[[Any], Any] = field(repr=False)


@dataclass
class BAPeer:
    """A BA problem prepared for one peer and one Jacobian mode."""

    objective: Callable[[], Any]
    jacobian: Callable[[], Any]
    to_numpy: Callable[[Any], Any] = field(repr=False)


def _lower_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the strictly-lower part of ``Q``, column by column (the order
    of ``icf[:, D:]``)."""
    rows = [r for c in range(d) for r in range(c + 1, d)]
    cols = [c for c in range(d) for _ in range(c + 1, d)]
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def _gmm_constant(d: int, k: int, n: int, m: int) -> float:
    """The parts of the log-posterior that depend on the sizes only (``gamma`` aside)."""
    dof = d + m + 1
    return -0.5 * n * d * math.log(2.0 * math.pi) - k * GMM.multigammaln(0.5 * dof, d)


# -- JAX ----------------------------------------------------------------------------------------


def _jax_peer() -> Peer:
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    jax.config.update("jax_enable_x64", True)

    def gmm_objective(alpha, means, icf, x, gamma, *, m: int):
        n, d = x.shape
        k = alpha.shape[0]
        rows, cols = _lower_indices(d)
        q, lower = icf[:, :d], icf[:, d:]
        Q = jnp.zeros((k, d, d)).at[:, rows, cols].set(lower)
        Q = Q + jnp.exp(q)[:, :, None] * jnp.eye(d)
        xc = x[:, None, :] - means[None, :, :]                       # [N, K, D]
        y = jnp.einsum("kab,nkb->nka", Q, xc)
        V = alpha + q.sum(axis=1) - 0.5 * jnp.sum(y * y, axis=2)     # [N, K]
        likelihood = jnp.sum(logsumexp(V, axis=1)) - n * logsumexp(alpha)
        frobenius = jnp.sum(jnp.exp(2.0 * q), axis=1) + jnp.sum(lower * lower, axis=1)
        dof = d + m + 1
        prior = (jnp.sum(-0.5 * gamma * gamma * frobenius + m * q.sum(axis=1))
                 + k * dof * d * jnp.log(gamma / math.sqrt(2.0)))
        return likelihood + prior + _gmm_constant(d, k, n, m)

    def gmm(data: GMM.GMMData) -> GMMPeer:
        args = tuple(jnp.asarray(a) for a in (data.alpha, data.means, data.icf, data.x))
        gamma = jnp.asarray(data.gamma)
        obj = jax.jit(lambda *a: gmm_objective(*a, m=data.m))
        grad = jax.jit(jax.grad(lambda *a: gmm_objective(*a, m=data.m), argnums=(0, 1, 2)))
        return GMMPeer(lambda: obj(*args, gamma).block_until_ready(),
                       lambda: jax.block_until_ready(grad(*args, gamma)),
                       lambda r: jax.tree_util.tree_map(np.asarray, r))

    def ba(data: BA.BAData, mode: str) -> BAPeer:
        jac = {"jacfwd": jax.jacfwd, "jacrev": jax.jacrev}[mode]
        residual = _ba_residual(jnp)
        per_obs_jacobian = jax.vmap(jac(residual, argnums=(0, 1, 2)))

        def objective(cams, X, w, feats, obs):
            reproj = jax.vmap(residual)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
            return reproj, 1.0 - w * w

        def jacobian(cams, X, w, feats, obs):
            jc, jx, jw = per_obs_jacobian(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
            rows = jnp.concatenate([jc, jx, jw[:, :, None]], axis=2)  # [p, 2, 15]
            return jnp.concatenate([rows.reshape(-1), -2.0 * w])

        args = tuple(jnp.asarray(a) for a in (data.cams, data.X, data.w, data.feats, data.obs))
        obj, J = jax.jit(objective), jax.jit(jacobian)
        return BAPeer(lambda: jax.block_until_ready(obj(*args)),
                      lambda: J(*args).block_until_ready(),
                      lambda r: jax.tree_util.tree_map(np.asarray, r))

    return Peer("jax", jax.__version__, gmm, ba)


# -- PyTorch ------------------------------------------------------------------------------------


def _torch_peer() -> Peer:
    import torch
    import torch.func

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (the pool starts on first parallel work)
        pass

    def gmm_objective(alpha, means, icf, x, gamma: float, m: int):
        n, d = x.shape
        k = alpha.shape[0]
        rows, cols = _lower_indices(d)
        q, lower = icf[:, :d], icf[:, d:]
        flat = torch.zeros((k, d * d), dtype=icf.dtype).index_copy(
            1, torch.from_numpy(rows * d + cols), lower)
        Q = flat.reshape(k, d, d) + torch.diag_embed(torch.exp(q))
        xc = x[:, None, :] - means[None, :, :]
        y = torch.einsum("kab,nkb->nka", Q, xc)
        V = alpha + q.sum(dim=1) - 0.5 * torch.sum(y * y, dim=2)
        likelihood = torch.sum(torch.logsumexp(V, dim=1)) - n * torch.logsumexp(alpha, dim=0)
        frobenius = torch.sum(torch.exp(2.0 * q), dim=1) + torch.sum(lower * lower, dim=1)
        dof = d + m + 1
        prior = (torch.sum(-0.5 * gamma * gamma * frobenius + m * q.sum(dim=1))
                 + k * dof * d * math.log(gamma / math.sqrt(2.0)))
        return likelihood + prior + _gmm_constant(d, k, n, m)

    def gmm(data: GMM.GMMData) -> GMMPeer:
        args = tuple(torch.from_numpy(a) for a in (data.alpha, data.means, data.icf, data.x))
        gamma, m = data.gamma, data.m
        grad = torch.func.grad(gmm_objective, argnums=(0, 1, 2))

        def objective():
            with torch.no_grad():
                return gmm_objective(*args, gamma, m)

        return GMMPeer(objective, lambda: grad(*args, gamma, m),
                       lambda r: tuple(t.numpy() for t in r) if isinstance(r, tuple) else r.item())

    def ba(data: BA.BAData, mode: str) -> BAPeer:
        jac = {"jacfwd": torch.func.jacfwd, "jacrev": torch.func.jacrev}[mode]
        residual = _ba_residual(torch)
        per_obs_jacobian = torch.func.vmap(jac(residual, argnums=(0, 1, 2)))
        cams, X, w, feats = (torch.from_numpy(a) for a in (data.cams, data.X, data.w, data.feats))
        obs = torch.from_numpy(data.obs)

        def objective():
            with torch.no_grad():
                reproj = torch.func.vmap(residual)(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
                return reproj, 1.0 - w * w

        def jacobian():
            jc, jx, jw = per_obs_jacobian(cams[obs[:, 0]], X[obs[:, 1]], w, feats)
            rows = torch.cat([jc, jx, jw[:, :, None]], dim=2)
            return torch.cat([rows.reshape(-1), -2.0 * w])

        def to_numpy(r):
            return tuple(t.numpy() for t in r) if isinstance(r, tuple) else r.detach().numpy()

        return BAPeer(objective, jacobian, to_numpy)

    return Peer("torch", torch.__version__, gmm, ba)


# -- the BA residual of one observation, for either framework --------------------------------------


def _ba_residual(xp) -> Callable:
    """``residual(cam [11], X [3], w, feat [2]) -> [2]`` with ``xp`` = ``jax.numpy`` or
    ``torch`` (the functions used exist in both with the same meaning).  ADBench's
    formulas: Rodrigues rotation of ``X - C`` (its small-angle branch ``X + rot x X``
    where ``|rot|^2 == 0``, both branches computed and one selected, as ``vmap`` needs),
    projection, radial distortion, focal length and principal point, times ``w``."""

    def cross(a, b):
        return xp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                         a[0] * b[1] - a[1] * b[0]])

    def residual(cam, X, w, feat):
        rot = cam[BA.ROT_IDX:BA.ROT_IDX + 3]
        d = X - cam[BA.C_IDX:BA.C_IDX + 3]
        sq = xp.sum(rot * rot)
        general = sq != 0.0
        theta = xp.sqrt(xp.where(general, sq, xp.ones_like(sq)))
        axis = rot / theta
        cos, sin = xp.cos(theta), xp.sin(theta)
        rotated = d * cos + cross(axis, d) * sin + axis * (xp.sum(axis * d) * (1.0 - cos))
        Xcam = xp.where(general, rotated, d + cross(rot, d))
        u = Xcam[:2] / Xcam[2]
        rsq = xp.sum(u * u)
        rad = cam[BA.RAD_IDX:BA.RAD_IDX + 2]
        distortion = 1.0 + rad[0] * rsq + rad[1] * rsq * rsq
        proj = u * distortion * cam[BA.F_IDX] + cam[BA.X0_IDX:BA.X0_IDX + 2]
        return w * (proj - feat)

    return residual


# -- loading -------------------------------------------------------------------------------------

_LOADERS = {"jax": _jax_peer, "torch": _torch_peer}
PEER_NAMES = tuple(_LOADERS)


def load_peers(names: tuple[str, ...] = PEER_NAMES) -> tuple[dict[str, Peer], dict[str, str]]:
    """``(peers, missing)``: the peers that import, and for the others why not."""
    peers, missing = {}, {}
    for name in names:
        try:
            peers[name] = _LOADERS[name]()
        except ImportError as exc:
            missing[name] = f"not installed ({exc})"
    return peers, missing

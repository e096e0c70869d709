"""GradBench's evals in PyTorch, as a PyTorch user writes them (eager, float64): the peers
``benchmarks/gradbench.py`` times beside revbench and JAX.

``torch_programs(module, raw)`` gives ``{function: (callable, args)}`` for the evals with
a primal and a derivative; the derivatives by ``torch.autograd.grad`` (``torch.func``'s
``jacfwd`` / ``vmap(jacrev)`` for the Jacobians of ``ht`` and ``ba``, a double backward for
k-means' Hessian-vector product).  Eager mode: ``torch.compile`` would compile for minutes
per workload here, and GradBench's PyTorch tool runs eager too.  The nested evals
(``particle``, ``saddle``) are left out: their descents are Python loops in any eager
framework, not what PyTorch would be measured on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def torch_programs(module: str, raw: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    f64 = torch.float64

    def t(v):
        return torch.as_tensor(np.asarray(v, dtype=np.float64), dtype=f64)

    def grad_of(fn):
        def g(*xs):
            xs = [x.detach().requires_grad_(True) for x in xs]
            return torch.autograd.grad(fn(*xs), xs)
        return g

    if module == "lse":
        def lse(x):
            a = torch.max(x)
            return a + torch.log(torch.sum(torch.exp(x - a)))
        x = t(raw["x"])
        return {"primal": (lse, (x,)), "gradient": (grad_of(lse), (x,))}
    if module == "llsq":
        n = raw["n"]
        x = t(raw["x"])

        def llsq(x):  # (the points and their powers inside, as JAX's and revbench's)
            tt = -1.0 + torch.arange(n, dtype=f64) * 2.0 / (n - 1)
            powers = tt[:, None] ** torch.arange(x.numel(), dtype=f64)[None, :]
            return 0.5 * torch.sum((torch.sign(tt) - powers @ x) ** 2)
        return {"primal": (llsq, (x,)), "gradient": (grad_of(llsq), (x,))}
    if module == "det":
        A = t(raw["A"]).reshape(raw["ell"], raw["ell"])
        return {"primal": (torch.linalg.det, (A,)), "gradient": (grad_of(torch.linalg.det), (A,))}
    if module == "kmeans":
        P = t(raw["points"])

        def cost(C):
            return torch.sum(torch.min(torch.sum((P[:, None, :] - C[None]) ** 2, dim=2), dim=1)[0])

        def direction(C):
            C = C.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(cost(C), C, create_graph=True)
            (h,) = torch.autograd.grad(g, C, grad_outputs=torch.ones_like(C))
            return g.detach() / h
        C = t(raw["centroids"])
        return {"cost": (cost, (C,)), "dir": (direction, (C,))}
    if module == "ode":
        s = raw["s"]

        from revbench.gradbench.reference import rk4_step

        def solve(x):
            def rhs(y):
                return torch.cat([x[:1], x[1:] * y[:-1]])
            y = torch.zeros_like(x)
            for _ in range(s):
                y = rk4_step(rhs, y, 2.0 / s)
            return y
        x = t(raw["x"])
        return {"primal": (solve, (x,)), "gradient": (grad_of(lambda x: solve(x)[-1]), (x,))}
    if module == "gmm":
        d, k, n, m, gamma = raw["d"], raw["k"], raw["n"], raw["m"], raw["gamma"]
        rows, cols = np.tril_indices(d, -1)
        order = np.lexsort((rows, cols))
        rows, cols = torch.as_tensor(rows[order]), torch.as_tensor(cols[order])
        nw = d + m + 1
        C = (nw * d * (math.log(gamma) - 0.5 * math.log(2.0))
             - float(torch.mvlgamma(torch.tensor(nw / 2, dtype=f64), d)))

        def objective(alpha, mu, q, lower, x):
            Q = torch.diag_embed(torch.exp(q))
            Q = Q.index_put((torch.arange(k)[:, None], rows[None, :], cols[None, :]), lower)
            Qx = torch.einsum("kij,nkj->nki", Q, x[:, None, :] - mu[None])
            main = alpha + torch.sum(q, dim=1) - 0.5 * torch.sum(Qx ** 2, dim=2)
            prior = k * C - torch.sum(0.5 * gamma ** 2 * (torch.sum(torch.exp(q) ** 2, dim=1)
                                                          + torch.sum(lower ** 2, dim=1))
                                      - m * torch.sum(q, dim=1))
            return (-n * d / 2 * math.log(2 * math.pi) + torch.sum(torch.logsumexp(main, dim=1))
                    - n * torch.logsumexp(alpha, dim=0) + prior)
        args = tuple(t(raw[key]) for key in ("alpha", "mu", "q", "l", "x"))

        def jacobian(*a):
            return grad_of(lambda *p: objective(*p, a[4]))(*a[:4])
        return {"objective": (objective, args), "jacobian": (jacobian, args)}
    if module == "lstm":
        seq, state = t(raw["sequence"]), t(raw["state"])
        c, b = seq.shape
        layers = state.shape[0] // 2

        def objective(main, extra):
            hs, cs = list(state[0::2]), list(state[1::2])
            total = 0.0
            for step in range(c - 1):
                x = seq[step] * extra[0]
                for i in range(layers):
                    w, bias = main[2 * i], main[2 * i + 1]
                    cell = (cs[i] * torch.sigmoid(x * w[:b] + bias[:b])
                            + torch.sigmoid(hs[i] * w[b:2 * b] + bias[b:2 * b])
                            * torch.tanh(hs[i] * w[3 * b:] + bias[3 * b:]))
                    x = torch.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b]) * torch.tanh(cell)
                    hs[i], cs[i] = x, cell
                y = x * extra[1] + extra[2]
                total = total + torch.sum(seq[step + 1] * (y - torch.log(torch.sum(torch.exp(y))
                                                                          + 2.0)))
            return -total / ((c - 1) * b)
        args = (t(raw["main_params"]), t(raw["extra_params"]))
        return {"objective": (objective, args), "jacobian": (grad_of(objective), args)}
    if module == "ba":
        from torch.func import jacrev, vmap

        n, m, p = raw["n"], raw["m"], raw["p"]
        cams, X = t(raw["cam"]).repeat(n, 1), t(raw["x"]).repeat(m, 1)
        w, feats = torch.full((p,), float(raw["w"]), dtype=f64), t(raw["feat"]).repeat(p, 1)
        ci, pi = torch.arange(p) % n, torch.arange(p) % m

        def project(cam, X, w, feat):
            r, xo = cam[:3], X - cam[3:6]
            theta = torch.sqrt(torch.sum(r * r))
            kk = r / theta
            xr = (xo * torch.cos(theta) + torch.linalg.cross(kk, xo) * torch.sin(theta)
                  + kk * torch.dot(kk, xo) * (1 - torch.cos(theta)))
            uv = xr[:2] / xr[2]
            rsq = torch.sum(uv * uv)
            return w * (uv * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9] - feat)

        def objective(cams, X, w, feats):
            return vmap(project)(cams[ci], X[pi], w, feats), 1.0 - w * w

        def jacobian(cams, X, w, feats):
            return vmap(jacrev(project, argnums=(0, 1, 2)))(cams[ci], X[pi], w, feats)
        args = (cams, X, w, feats)
        return {"objective": (objective, args), "jacobian": (jacobian, args)}
    if module == "ht":
        return _ht(torch, raw, t)
    return {}


def _ht(torch, raw: dict, t) -> dict:
    from torch.func import jacfwd

    model, data = raw["data"]["model"], raw["data"]
    parents = list(model["parents"])
    base_rel, inv_abs = t(model["base_relatives"]), t(model["inverse_base_absolutes"])
    base_pos, weights, points = t(model["base_positions"]), t(model["weights"]), t(data["points"])
    corr = torch.as_tensor(np.asarray(data["correspondences"], dtype=np.int64))
    n = points.shape[0]

    def euler(a):
        tx, ty, tz = a[0], a[2], a[1]
        one, zero = torch.ones((), dtype=a.dtype), torch.zeros((), dtype=a.dtype)
        rx = torch.stack([torch.stack([one, zero, zero]),
                          torch.stack([zero, torch.cos(tx), -torch.sin(tx)]),
                          torch.stack([zero, torch.sin(tx), torch.cos(tx)])])
        ry = torch.stack([torch.stack([torch.cos(ty), zero, -torch.sin(ty)]),
                          torch.stack([zero, one, zero]),
                          torch.stack([torch.sin(ty), zero, torch.cos(ty)])])
        rz = torch.stack([torch.stack([torch.cos(tz), -torch.sin(tz), zero]),
                          torch.stack([torch.sin(tz), torch.cos(tz), zero]),
                          torch.stack([zero, zero, one])])
        return rz @ ry @ rx

    def angle_axis(a):
        nn = torch.sqrt(torch.sum(a * a))
        x, y, z = a / torch.where(nn < 1e-4, torch.ones_like(nn), nn)
        s, c = torch.sin(nn), torch.cos(nn)
        r = torch.stack([
            torch.stack([x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s]),
            torch.stack([x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s]),
            torch.stack([x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c])])
        return torch.where(nn < 1e-4, torch.eye(3, dtype=a.dtype), r)

    def vertices(theta):
        pose = [theta[0:3], torch.ones(3, dtype=theta.dtype), theta[3:6]]
        pose += [torch.zeros(3, dtype=theta.dtype)] * len(parents)
        for f in range(5):
            pose[5 + 4 * f] = torch.stack([theta[6 + 4 * f], theta[7 + 4 * f],
                                           torch.zeros((), dtype=theta.dtype)])
            for j in (1, 2):
                pose[5 + 4 * f + j] = torch.stack([theta[7 + 4 * f + j]]
                                                  + [torch.zeros((), dtype=theta.dtype)] * 2)
        absolutes = []
        for b, p in enumerate(parents):
            tr = torch.eye(4, dtype=theta.dtype)
            tr = torch.cat([torch.cat([euler(pose[3 + b]), tr[:3, 3:]], dim=1), tr[3:]], dim=0)
            rel = base_rel[b] @ tr
            absolutes.append(rel if p == -1 else absolutes[p] @ rel)
        moved = sum(weights[:, b:b + 1] * (base_pos @ (absolutes[b] @ inv_abs[b]).T)
                    for b in range(len(parents)))[:, :3]
        return moved @ (angle_axis(pose[0]) * pose[1]).T + pose[2]

    theta = t(raw["theta"])
    if len(raw["us"]) > 0:
        tri = torch.as_tensor(np.asarray(model["triangles"], dtype=np.int64))[corr]

        def residuals(us, theta):
            v = vertices(theta)
            u = us.reshape(n, 2)
            hit = (u[:, :1] * v[tri[:, 0]] + u[:, 1:] * v[tri[:, 1]]
                   + (1.0 - u[:, :1] - u[:, 1:]) * v[tri[:, 2]])
            return (points - hit).reshape(-1)
        rows = torch.arange(3 * n)

        def jacobian(us, theta):
            j_us, j_theta = jacfwd(residuals, argnums=(0, 1))(us, theta)
            blocks = j_us[rows[:, None], 2 * (rows // 3)[:, None] + torch.arange(2)]
            return torch.cat([blocks, j_theta], dim=1)
        args: Any = (t(raw["us"]).reshape(-1), theta)
        return {"objective": (residuals, args), "jacobian": (jacobian, args)}

    def residuals_simple(theta):
        return (points - vertices(theta)[corr]).reshape(-1)
    return {"objective": (residuals_simple, (theta,)), "jacobian": (jacfwd(residuals_simple),
                                                                    (theta,))}

"""Independent references for the evals, written with JAX (``jax.grad``, float64): what
the driver (:mod:`revbench.gradbench.driver`) checks revbench's answers against.  Nothing
here uses revbench.  ``reference(module, function, input)`` is GradBench's JSON output
for that input: GradBench's own stored answer where its eval checks against one
(``particle`` and ``saddle`` at the input they send, :data:`STORED`), else JAX's, or
``None`` where JAX is not installed."""

from __future__ import annotations

import math
from typing import Any


def _jax():
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    return jax


def reference(module: str, function: str, raw: Any) -> Any:
    stored = _stored(module, raw)
    if stored is not None:  # (GradBench's own answer: no JAX needed)
        return stored
    jax = _jax()
    if jax is None:
        return None
    import jax.numpy as jnp
    import numpy as np

    if module == "hello":
        return raw * raw if function == "square" else 2.0 * raw
    if module == "lse":
        x = jnp.asarray(raw["x"])

        def lse(x):
            a = jnp.max(x)
            return a + jnp.log(jnp.sum(jnp.exp(x - a)))
        return float(lse(x)) if function == "primal" else np.asarray(jax.grad(lse)(x)).tolist()
    if module == "llsq":
        x, n = jnp.asarray(raw["x"]), raw["n"]
        t = -1.0 + jnp.arange(n) * 2.0 / (n - 1)
        powers = t[:, None] ** jnp.arange(x.size)[None, :]

        def llsq(x):
            return 0.5 * jnp.sum((jnp.sign(t) - powers @ x) ** 2)
        return float(llsq(x)) if function == "primal" else np.asarray(jax.grad(llsq)(x)).tolist()
    if module == "det":
        ell = raw["ell"]
        A = jnp.asarray(raw["A"]).reshape(ell, ell)
        if function == "primal":
            return float(jnp.linalg.det(A))
        return np.asarray(jax.grad(jnp.linalg.det)(A)).ravel().tolist()
    if module == "kmeans":
        P, C = jnp.asarray(raw["points"]), jnp.asarray(raw["centroids"])

        def cost(C):
            return jnp.sum(jnp.min(jnp.sum((P[:, None, :] - C[None, :, :]) ** 2, axis=2),
                                   axis=1))
        if function == "cost":
            return float(cost(C))
        g = jax.grad(cost)(C)
        h = jax.jvp(jax.grad(cost), (C,), (jnp.ones_like(C),))[1]
        return np.asarray(g / h).tolist()
    if module == "ode":
        x, s = jnp.asarray(raw["x"]), raw["s"]

        def rhs(x, y):
            return jnp.concatenate([x[:1], x[1:] * y[:-1]])

        def solve(x):
            y = jnp.zeros_like(x)
            for _ in range(s):
                y = rk4_step(lambda y: rhs(x, y), y, 2.0 / s)
            return y
        if function == "primal":
            return np.asarray(solve(x)).tolist()
        return np.asarray(jax.grad(lambda x: solve(x)[-1])(x)).tolist()
    if module == "gmm":
        return _gmm(jax, raw, function)
    if module == "lstm":
        return _lstm(jax, raw, function)
    if module == "ba":
        return _ba(jax, raw, function)
    if module == "ht":
        return _ht(jax, raw, function)
    if module in ("particle", "saddle"):
        return _nested(jax, module, raw)
    raise KeyError(f"no reference for {module}.{function}")


def rk4_step(rhs, y, h: float):
    """One classic Runge-Kutta step of ``y' = rhs(y)``: arithmetic only, so the same
    function steps JAX's arrays and PyTorch's (the benchmark's peers use it too)."""
    k1 = rhs(y)
    k2 = rhs(y + h / 2 * k1)
    k3 = rhs(y + h / 2 * k2)
    k4 = rhs(y + h * k3)
    return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def _gmm(jax, raw: Any, function: str) -> Any:
    import jax.numpy as jnp
    import jax.scipy.special as sp
    import numpy as np

    x = jnp.asarray(raw["x"])
    n, d = x.shape
    flat = "icf" in raw
    if flat:
        icf = jnp.asarray(raw["icf"])
        params = (jnp.asarray(raw["alpha"]), jnp.asarray(raw["means"]), icf[:, :d], icf[:, d:])
    else:
        params = tuple(jnp.asarray(raw[k]) for k in ("alpha", "mu", "q", "l"))
    k = params[0].size
    gamma, m = raw["gamma"], raw["m"]
    rows, cols = np.tril_indices(d, -1)
    # (l is filled column by column: sort the strictly lower entries by column, then row)
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]

    def objective(alpha, mu, q, lower):
        Q = jax.vmap(lambda qc, lc: jnp.diag(jnp.exp(qc)).at[rows, cols].set(lc))(q, lower)
        xc = x[:, None, :] - mu[None, :, :]
        Qx = jnp.einsum("kij,nkj->nki", Q, xc)
        main = alpha[None, :] + jnp.sum(q, axis=1)[None, :] - 0.5 * jnp.sum(Qx ** 2, axis=2)
        nw = d + m + 1
        C = nw * d * (math.log(gamma) - 0.5 * math.log(2.0)) - float(sp.multigammaln(nw / 2, d))
        prior = k * C - jnp.sum(0.5 * gamma ** 2 * (jnp.sum(jnp.exp(q) ** 2, axis=1)
                                                    + jnp.sum(lower ** 2, axis=1))
                                - m * jnp.sum(q, axis=1))
        return (-n * d / 2 * math.log(2 * math.pi) + jnp.sum(sp.logsumexp(main, axis=1))
                - n * sp.logsumexp(alpha) + prior)

    if function == "objective":
        return float(objective(*params))
    ga, gmu, gq, gl = (np.asarray(g) for g in jax.grad(objective, argnums=(0, 1, 2, 3))(*params))
    if flat:
        return np.concatenate([ga, gmu.ravel(), np.hstack([gq, gl]).ravel()]).tolist()
    return {"alpha": ga.tolist(), "mu": gmu.tolist(), "q": gq.tolist(), "l": gl.tolist()}


def _lstm(jax, raw: Any, function: str) -> Any:
    import jax.numpy as jnp
    import numpy as np

    main, extra = jnp.asarray(raw["main_params"]), jnp.asarray(raw["extra_params"])
    state, seq = jnp.asarray(raw["state"]), jnp.asarray(raw["sequence"])
    c, b = seq.shape
    layers = state.shape[0] // 2

    def objective(main, extra):
        def step(carry, t):
            hs, cs = carry
            x = seq[t] * extra[0]
            new_h, new_c = [], []
            for i in range(layers):
                w, bias = main[2 * i], main[2 * i + 1]
                forget = jax.nn.sigmoid(x * w[:b] + bias[:b])
                ingate = jax.nn.sigmoid(hs[i] * w[b:2 * b] + bias[b:2 * b])
                outgate = jax.nn.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                change = jnp.tanh(hs[i] * w[3 * b:] + bias[3 * b:])
                cell = cs[i] * forget + ingate * change
                h = outgate * jnp.tanh(cell)
                new_h.append(h)
                new_c.append(cell)
                x = h
            y = x * extra[1] + extra[2]
            ynorm = y - jnp.log(jnp.sum(jnp.exp(y)) + 2.0)
            return (jnp.stack(new_h), jnp.stack(new_c)), jnp.sum(seq[t + 1] * ynorm)

        _, totals = jax.lax.scan(step, (state[0::2], state[1::2]), jnp.arange(c - 1))
        return -jnp.sum(totals) / ((c - 1) * b)

    if function == "objective":
        return float(objective(main, extra))
    gm, ge = jax.grad(objective, argnums=(0, 1))(main, extra)
    return np.concatenate([np.asarray(gm).ravel(), np.asarray(ge).ravel()]).tolist()


def _ba(jax, raw: Any, function: str) -> Any:
    """The first observation's residuals and Jacobian (all GradBench's answer holds of
    them), the counts from ``n``, ``m``, ``p``."""
    import jax.numpy as jnp
    import numpy as np

    n, m, p, w = raw["n"], raw["m"], raw["p"], raw["w"]
    cam, X, feat = (jnp.asarray(raw[k]) for k in ("cam", "x", "feat"))

    def project(cam, X, w):
        r, C = cam[:3], cam[3:6]
        xo = X - C
        theta = jnp.sqrt(jnp.sum(r * r))
        k = r / theta
        xr = (xo * jnp.cos(theta) + jnp.cross(k, xo) * jnp.sin(theta)
              + k * jnp.dot(k, xo) * (1 - jnp.cos(theta)))
        uv = xr[:2] / xr[2]
        rsq = jnp.sum(uv * uv)
        uv = uv * (1 + cam[9] * rsq + cam[10] * rsq * rsq)
        return w * (uv * cam[6] + cam[7:9] - feat)

    if function == "objective":
        e = np.asarray(project(cam, X, w))
        return {"reproj_error": {"elements": e.tolist(), "repeated": p},
                "w_err": {"element": 1.0 - w * w, "repeated": p}}
    Jc, Jx, Jw = (np.asarray(a) for a in jax.jacobian(project, argnums=(0, 1, 2))(cam, X, w))
    block = np.concatenate([Jc, Jx, Jw[:, None]], axis=1)  # (2, 15)
    cols = list(range(11)) + [11 * n, 11 * n + 1, 11 * n + 2, 11 * n + 3 * m]
    rows = [15 * k for k in range(min(30, 2 * p + 1))]
    rows += [30 * p + k for k in range(1, p + 1)][:30 - len(rows)]
    return {"rows": rows + [31 * p], "cols": (cols * 2)[:30] + [11 * n + 3 * m + p - 1],
            "vals": block.ravel().tolist()[:30] + [-2.0 * w]}


def _ht(jax, raw: Any, function: str) -> Any:
    import numpy as np

    objective, jacobian, args = ht_functions(jax, raw)
    if function == "objective":
        return np.asarray(objective(*args)).tolist()
    return np.asarray(jacobian(*args)).tolist()


def ht_functions(jax, raw: Any):
    """``(objective, jacobian, args)``: ADBench's hand objective with jnp (one matrix per
    bone, absolutes down the tree, the weighted sum of every bone's transform of every
    vertex) and its Jacobian by ``jax.jacfwd``, GradBench's layout (the us columns are the
    diagonal blocks), as functions of ``args``."""
    import numpy as np

    jnp = jax.numpy
    model, data = raw["data"]["model"], raw["data"]
    parents = list(model["parents"])
    base_rel = jnp.asarray(model["base_relatives"])
    inv_abs = jnp.asarray(model["inverse_base_absolutes"])
    base_pos = jnp.asarray(model["base_positions"])
    weights = jnp.asarray(model["weights"])
    points = jnp.asarray(data["points"])
    corr = np.asarray(data["correspondences"], dtype=int)
    theta = jnp.asarray(raw["theta"])
    complicated = len(raw["us"]) > 0
    n = points.shape[0]

    def euler(xzy):
        tx, ty, tz = xzy[0], xzy[2], xzy[1]
        one, zero = jnp.ones(()), jnp.zeros(())
        rx = jnp.array([[one, zero, zero], [zero, jnp.cos(tx), -jnp.sin(tx)],
                        [zero, jnp.sin(tx), jnp.cos(tx)]])
        ry = jnp.array([[jnp.cos(ty), zero, -jnp.sin(ty)], [zero, one, zero],
                        [jnp.sin(ty), zero, jnp.cos(ty)]])
        rz = jnp.array([[jnp.cos(tz), -jnp.sin(tz), zero], [jnp.sin(tz), jnp.cos(tz), zero],
                        [zero, zero, one]])
        return rz @ ry @ rx

    def angle_axis(a):
        n_ = jnp.sqrt(jnp.sum(a * a))
        x, y, z = a / jnp.where(n_ < 1e-4, 1.0, n_)
        s, c = jnp.sin(n_), jnp.cos(n_)
        r = jnp.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                       [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                       [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])
        return jnp.where(n_ < 1e-4, jnp.eye(3), r)

    def vertices(theta):
        pose = jnp.zeros((len(parents) + 3, 3))
        pose = pose.at[0].set(theta[0:3]).at[1].set(1.0).at[2].set(theta[3:6])
        for f in range(5):
            pose = pose.at[5 + 4 * f, 0].set(theta[6 + 4 * f]).at[5 + 4 * f, 1].set(
                theta[7 + 4 * f]).at[6 + 4 * f, 0].set(theta[8 + 4 * f]).at[
                7 + 4 * f, 0].set(theta[9 + 4 * f])
        absolutes = []
        for b, p in enumerate(parents):
            tr = jnp.eye(4).at[:3, :3].set(euler(pose[3 + b]))
            rel = base_rel[b] @ tr
            absolutes.append(rel if p == -1 else absolutes[p] @ rel)
        moved = sum(weights[:, b:b + 1] * (base_pos @ (absolutes[b] @ inv_abs[b]).T)
                    for b in range(len(parents)))[:, :3]
        return moved @ (angle_axis(pose[0]) * pose[1]).T + pose[2]

    if complicated:
        tri = np.asarray(model["triangles"], dtype=int)[corr]

        def residuals(us, theta):
            v = vertices(theta)
            u = us.reshape(n, 2)
            hit = (u[:, :1] * v[tri[:, 0]] + u[:, 1:] * v[tri[:, 1]]
                   + (1.0 - u[:, :1] - u[:, 1:]) * v[tri[:, 2]])
            return (points - hit).ravel()
        us = jnp.asarray(raw["us"]).ravel()
        rows = np.arange(3 * n)

        def jacobian(us, theta):
            j_us, j_theta = jax.jacfwd(residuals, argnums=(0, 1))(us, theta)
            blocks = j_us[rows[:, None], 2 * (rows // 3)[:, None] + np.arange(2)]
            return jnp.concatenate([blocks, j_theta], axis=1)
        return residuals, jacobian, (us, theta)

    def residuals_simple(theta):
        return (points - vertices(theta)[corr]).ravel()
    return residuals_simple, jax.jacfwd(residuals_simple), (theta,)


#: GradBench's own check of particle and saddle: its one input and the answer it expects
STORED = {("particle", 0.0): 0.2071918746486116,
          ("saddle", (1.0, 1.0)): [8.246324826140356e-06] * 4}


def _argmin(jax, f, g, x):
    """Pearlmutter and Siskind's descent (GradBench's solver) as one ``lax.while_loop``,
    differentiable forward (``jax.jvp``) as the nested evals need.  The state: the point,
    its value and gradient, the step, the accepted steps in a row, whether it goes on."""
    jnp, lax = jax.numpy, jax.lax

    def step(s):
        x, fx, gx, eta, i, _ = s

        def longer(_):
            return x, fx, gx, 2.0 * eta, 0, True

        def trial(_):
            x1 = x - eta * gx
            f1 = f(x1)
            near = jnp.sqrt(jnp.sum((x - x1) ** 2)) <= 1e-5
            better = f1 < fx
            return (jnp.where(better & ~near, x1, x), jnp.where(better & ~near, f1, fx),
                    lax.cond(better & ~near, g, lambda _: gx, x1),
                    jnp.where(better | near, eta, eta / 2.0),
                    jnp.where(better & ~near, i + 1, 0), ~near)
        return lax.cond(i == 10, longer, trial, None)

    def going(s):
        return s[5] & (jnp.sqrt(jnp.sum(s[2] ** 2)) > 1e-5)

    x = jnp.asarray(x, dtype=jnp.float64)
    s0 = (x, f(x), g(x), jnp.float64(1e-5), 0, jnp.bool_(True))
    return lax.while_loop(going, step, s0)[0]


def _stored(module: str, raw: Any) -> Any:
    """GradBench's expected answer where its eval checks against one (particle and saddle
    at the input it sends), else None."""
    try:
        key: Any = (float(raw["w"]) if module == "particle" else
                    tuple(float(v) for v in raw["start"]) if module == "saddle" else None)
    except (KeyError, TypeError, ValueError):
        return None
    return STORED.get((module, key))


def _nested(jax, module: str, raw: Any) -> Any:
    key = raw["w"] if module == "particle" else raw["start"]
    solve = nested_solver(jax, module)
    out = solve(jax.numpy.asarray(key, dtype=jax.numpy.float64))
    return float(out) if module == "particle" else [float(v) for v in out]


def nested_solver(jax, module: str):
    """particle (a function of ``w``) or saddle (of ``start``) with JAX: each descent a
    ``while_loop`` (:func:`_argmin`), the inner gradient by ``jax.grad``, the outer by
    ``jax.jvp`` (JAX differentiates a ``while_loop`` forward only): GradBench's ``fr``."""
    jnp = jax.numpy

    def forward_grad(f):
        def g(x):
            return jnp.stack([jax.jvp(f, (x,), (e,))[1] for e in jnp.eye(x.size)])
        return g

    if module == "particle":
        def p(x, w):
            return (1.0 / jnp.linalg.norm(x - jnp.array([10.0, 10.0 - w]))
                    + 1.0 / jnp.linalg.norm(x - jnp.array([10.0, 0.0])))

        def miss(w):
            def go(s):
                return s[0][1] + 0.1 * s[1][1] > 0.0

            def euler(s):
                x, v = s
                return x + 0.1 * v, v - 0.1 * jax.grad(p)(x, w[0])
            x, v = jax.lax.while_loop(go, euler, (jnp.array([0.0, 8.0]),
                                                  jnp.array([0.75, 0.0])))
            return (x[0] - x[1] / v[1] * v[0]) ** 2
        return lambda w0: _argmin(jax, miss, forward_grad(miss), jnp.reshape(w0, (1,)))[0]

    def f(x, y):
        return (x[0] ** 2 + x[1] ** 2) - (y[0] ** 2 + y[1] ** 2)

    def saddle(start):
        def best(x):
            def loss(y):
                return -f(x, y)
            return f(x, _argmin(jax, loss, jax.grad(loss), start))
        x = _argmin(jax, best, forward_grad(best), start)

        def reply(y):
            return -f(x, y)
        return jnp.concatenate([x, _argmin(jax, reply, jax.grad(reply), start)])
    return saddle

"""``ba``: ADBench's bundle adjustment.  Observation ``i`` sees point ``i mod m`` from camera
``i mod n``; its reprojection error is ``w_i`` times the projected point (Rodrigues
rotation, perspective division, radial distortion) less the feature, and ``1 - w_i ** 2``
its weight error.  The Jacobian of every residual with respect to the cameras, points and
weights is the batched Jacobian of one observation's residual (``ad.jacobian(...,
batch=)``: one compiled loop over the observations, ``docs/ad.md``), 2 x 15 per
observation, laid out as GradBench's sparse matrix.

GradBench sends one camera, point, weight and feature and the counts ``n``, ``m``, ``p``:
the tool builds ``n`` cameras, ``m`` points, ``p`` observations from them and computes
every residual and every block (it must not use that they are copies), and answers with
the first observation's values and the first 30 entries (and the last) of the sparse
Jacobian's ``rows``, ``cols`` and ``vals``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from revbench import ad
from revbench.function import reversible
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program
from revbench.lang.markers import routine


@reversible
def residual(r, cam, X, w, feat):
    with routine as project:
        xc = np.zeros(3)
        xc += X - cam[3:6]
        xr = np.zeros(3)  # the rotated point (Rodrigues)
        sqtheta = cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2]
        if sqtheta != 0.0:
            theta = math.sqrt(sqtheta)
            c = math.cos(theta)
            s = math.sin(theta)
            w0 = cam[0] / theta
            w1 = cam[1] / theta
            w2 = cam[2] / theta
            wx = (w0 * xc[0] + w1 * xc[1] + w2 * xc[2]) * (1.0 - c)
            xr[0] += xc[0] * c + (w1 * xc[2] - w2 * xc[1]) * s + w0 * wx
            xr[1] += xc[1] * c + (w2 * xc[0] - w0 * xc[2]) * s + w1 * wx
            xr[2] += xc[2] * c + (w0 * xc[1] - w1 * xc[0]) * s + w2 * wx
            del wx
            del w2
            del w1
            del w0
            del s
            del c
            del theta
        else:
            xr[0] += xc[0] + cam[1] * xc[2] - cam[2] * xc[1]
            xr[1] += xc[1] + cam[2] * xc[0] - cam[0] * xc[2]
            xr[2] += xc[2] + cam[0] * xc[1] - cam[1] * xc[0]
        del sqtheta
        u = xr[0] / xr[2]  # perspective division, radial distortion
        v = xr[1] / xr[2]
        rsq = u * u + v * v
        dist = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    r[0] += w * (u * dist * cam[6] + cam[7] - feat[0])
    r[1] += w * (v * dist * cam[6] + cam[8] - feat[1])
    ~project


def ba_objective(reproj, w_err, cams, X, w, feats, obs):
    for i in range(obs.shape[0]):
        residual(reproj[i], cams[obs[i, 0]], X[obs[i, 1]], w[i], feats[i])
        w_err[i] += 1.0 - w[i] * w[i]


def _args(raw: Any) -> dict:
    n, m, p = (integer(field(raw, k), k, 1) for k in ("n", "m", "p"))
    cam, x = floats(field(raw, "cam"), "cam", 1), floats(field(raw, "x"), "x", 1)
    feat = floats(field(raw, "feat"), "feat", 1)
    if cam.shape != (11,) or x.shape != (3,) or feat.shape != (2,):
        raise ValueError(f"ba: `cam` must have 11 numbers, `x` 3 and `feat` 2, got "
                         f"{cam.size}, {x.size} and {feat.size}")
    w = float(field(raw, "w"))
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
    return {"n": n, "m": m, "p": p, "cams": np.tile(cam, (n, 1)), "X": np.tile(x, (m, 1)),
            "w": np.full(p, w), "feats": np.tile(feat, (p, 1)), "obs": obs}


def _objective_json(r) -> dict:
    reproj, w_err = r
    return {"reproj_error": {"elements": reproj[0].tolist(), "repeated": int(reproj.shape[0])},
            "w_err": {"element": float(w_err[0]), "repeated": int(w_err.shape[0])}}


def _sparse(a: dict, blocks: tuple) -> dict:
    """GradBench's CSR Jacobian (2 p rows of 15 entries, then p of one), first 30 entries
    and the last of each array."""
    n, m, p, obs = a["n"], a["m"], a["p"], a["obs"]
    J_cam, J_X, J_w = blocks  # (p, 2, 11), (p, 2, 3), (p, 2)
    rows = np.concatenate([np.arange(2 * p + 1) * 15, 30 * p + np.arange(1, p + 1)])
    cols_obs = np.concatenate([11 * obs[:, :1] + np.arange(11), 11 * n + 3 * obs[:, 1:2]
                               + np.arange(3), 11 * n + 3 * m + np.arange(p)[:, None]], axis=1)
    cols = np.concatenate([np.repeat(cols_obs, 2, axis=0).ravel(), 11 * n + 3 * m + np.arange(p)])
    vals_obs = np.concatenate([J_cam, J_X, J_w[:, :, None]], axis=2)  # (p, 2, 15)
    vals = np.concatenate([vals_obs.ravel(), -2.0 * a["w"]])
    return {"rows": rows[:30].tolist() + [int(rows[-1])],
            "cols": cols[:30].tolist() + [int(cols[-1])],
            "vals": vals[:30].tolist() + [float(vals[-1])]}


class Ba(Eval):
    name = "ba"

    def steps(self) -> dict[str, Steps]:
        f = program(ba_objective, self.check)
        one = residual if self.check else reversible(check=False)(residual.__wrapped__)
        jac = ad.jacobian(one, "r", ("cam", "X", "w"),
                                batch=("r", "cam", "X", "w", "feat"))

        def objective(a):
            p = a["p"]
            return f(np.zeros((p, 2)), np.zeros(p), a["cams"], a["X"], a["w"], a["feats"],
                     a["obs"])[:2]

        def jacobian(a):
            obs = a["obs"]
            J = jac(np.zeros((a["p"], 2)), a["cams"][obs[:, 0]], a["X"][obs[:, 1]], a["w"],
                    a["feats"])
            return a, (J[0], J[1], J[2][:, :, 0])

        return {"objective": (_args, objective, _objective_json),
                "jacobian": (_args, jacobian, lambda r: _sparse(*r))}

    def sample(self) -> Any:
        return {"n": 2, "m": 3, "p": 4, "cam": [0.1, -0.2, 0.05, 0.0, 0.1, -5.0, 1.2, 0.01,
                                               -0.02, 0.01, 0.001],
                "x": [0.3, -0.2, 1.0], "w": 0.9, "feat": [0.1, 0.2]}

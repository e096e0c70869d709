"""Reference solutions for notebooks/06_workloads.ipynb (for teachers).

``tests/test_course_lesson06.py`` runs the checks of :mod:`revbench.course.lesson06` on
them.  ``ba_residual`` is the notebook's residual, repeated here so that the module
stands alone.
"""

import math

import numpy as np

import revbench
from revbench import reversible


# Exercise 6.1: a row's sum into an ancilla, its square into s, the ancilla uncomputed.
@reversible
def csr_sqnorm(s, x, data, indices, indptr):
    for i in range(len(indptr) - 1):
        with routine:  # noqa: F821 (a revbench keyword)
            t = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                t += data[p] * x[indices[p]]
        s += t * t
        ~routine  # noqa: F821


# The notebook's bundle-adjustment residual of one observation.
@reversible(check=False)
def ba_residual(r, cam, X, w, feat):
    with routine as proj:  # noqa: F821
        xc = np.zeros(3)
        xc += X - cam[3:6]
        xr = np.zeros(3)
        theta = math.sqrt(cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2])
        c = math.cos(theta)
        s = math.sin(theta)
        w0 = cam[0] / theta
        w1 = cam[1] / theta
        w2 = cam[2] / theta
        wx = (w0 * xc[0] + w1 * xc[1] + w2 * xc[2]) * (1.0 - c)
        xr[0] += xc[0] * c + (w1 * xc[2] - w2 * xc[1]) * s + w0 * wx
        xr[1] += xc[1] * c + (w2 * xc[0] - w0 * xc[2]) * s + w1 * wx
        xr[2] += xc[2] * c + (w0 * xc[1] - w1 * xc[0]) * s + w2 * wx
        u = xr[0] / xr[2]
        v = xr[1] / xr[2]
        rsq = u * u + v * v
        dist = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    r[0] += w * (u * dist * cam[6] + cam[7] - feat[0])
    r[1] += w * (v * dist * cam[6] + cam[8] - feat[1])
    ~proj


# Exercise 6.2: gather each observation's camera and point, then one batched call.
def ba_jacobians(cams, X, w, feats, obs):
    p = len(w)
    jac = revbench.jacobian(ba_residual, outputs="r", wrt=("cam", "X", "w"),
                            batch=("r", "cam", "X", "w", "feat"))
    return jac(np.zeros((p, 2)), cams[obs[:, 0]], X[obs[:, 1]], w, feats)

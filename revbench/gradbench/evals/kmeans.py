"""``kmeans``: the k-means cost ``sum_i min_j |C_j - P_i| ** 2`` and ``dir``, a Newton step's
direction: the gradient with respect to the centroids divided by the Hessian's diagonal
(the Hessian is diagonal here: its product with ones, by ``revbench.hvp``, is the
diagonal)."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, program
from revbench.lang.markers import routine


def kmeans_cost(cost, P, C):
    n = P.shape[0]
    k = C.shape[0]
    for i in range(n):
        with routine as nearest:
            dist = np.zeros(k)
            for j in range(k):
                dist[j] += np.sum((C[j] - P[i]) ** 2)
            best = np.min(dist)
        cost += best
        ~nearest


def _args(raw: Any) -> tuple[np.ndarray, np.ndarray]:
    P = floats(field(raw, "points"), "points", 2)
    C = floats(field(raw, "centroids"), "centroids", 2)
    if P.shape[1] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"`points` {P.shape} and `centroids` {C.shape} must have the same "
                         "number of columns, and there must be a centroid")
    return P, C


class Kmeans(Eval):
    name = "kmeans"

    def steps(self) -> dict[str, Steps]:
        f = program(kmeans_cost, self.check)
        g = ad.grad(f, loss="cost", wrt="C")
        hv = ad.hvp(f, loss="cost", wrt="C")

        def direction(a):
            P, C = a
            return g(0.0, P, C)[2] / hv(0.0, P, C, np.ones_like(C))

        return {"cost": (_args, lambda a: f(0.0, *a)[0], float),
                "dir": (_args, direction, lambda v: v.tolist())}

    def sample(self) -> Any:
        return {"points": [[0.0, 1.0], [1.0, 0.5], [0.2, 0.3]], "centroids": [[1.0, 0.5],
                                                                               [0.2, 0.3]]}

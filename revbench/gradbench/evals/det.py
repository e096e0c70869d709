"""``det``: the determinant by expansion by minors (cmpad's ``det_by_minor``) and its
gradient, the cofactors, by ``revbench.grad``.

Reversible functions do not recurse, so the expansion along the first row is written as
the table of every minor it meets: the minor of the last ``k`` rows and the columns in a
set ``S`` of ``k`` columns (a number whose bits are ``S``) is
``sum over j in S of (-1) ** (the columns of S before j) * A[ell - k, j] * minor(S - j)``,
each minor once (``2 ** ell`` of them, where the recursion computes ``ell!`` products)."""

from __future__ import annotations

from typing import Any

import numpy as np

from revbench import ad
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program
from revbench.lang.markers import routine


def det_by_minors(d, A, ell):
    with routine as table:
        bit = np.zeros(ell + 1, dtype=int)  # bit[b] = 2 ** b
        bit[0] += 1
        for b in range(ell):
            bit[b + 1] += 2 * bit[b]
        minor = np.zeros(bit[ell])
        minor[0] += 1.0
        for cols in range(1, bit[ell]):
            with routine as count:
                k = 0
                for b in range(ell):
                    k += cols // bit[b] % 2
            for j in range(ell):
                if cols // bit[j] % 2 == 1:
                    with routine as before:
                        c = 0
                        for b in range(j):
                            c += cols // bit[b] % 2
                    minor[cols] += (-1.0) ** c * A[ell - k, j] * minor[cols - bit[j]]
                    ~before
            ~count
    d += minor[bit[ell] - 1]
    ~table


def _args(raw: Any) -> tuple[np.ndarray, int]:
    ell = integer(field(raw, "ell"), "ell", 1)
    flat = floats(field(raw, "A"), "A", 1)
    if flat.size != ell * ell:
        raise ValueError(f"`A` must have ell * ell = {ell * ell} elements, got {flat.size}")
    return flat.reshape(ell, ell), ell


class Det(Eval):
    name = "det"

    def steps(self) -> dict[str, Steps]:
        f = program(det_by_minors, self.check)
        g = ad.grad(f, loss="d", wrt="A")
        return {"primal": (_args, lambda a: f(0.0, *a)[0], float),
                "gradient": (_args, lambda a: g(0.0, *a)[1], lambda v: v.ravel().tolist())}

    def sample(self) -> Any:
        return {"A": [2.0, 1.0, 0.5, 3.0], "ell": 2}

"""A short demo: a reversible function run forward, then backwards, and its gradient.

Run it with ``python -m revbench.demo`` (or ``make demo``).
"""

from __future__ import annotations

import time

import numpy as np

from revbench import grad, reversible


@reversible
def poly(y, x):
    """y += 3 x^2 + x, computed through an ancilla that is uncomputed again."""
    t = 0.0
    t += x * x
    y += 3.0 * t + x
    t -= x * x
    del t


@reversible
def smooth(u, v, c):
    """One explicit diffusion step from u into v (v must start as zeros)."""
    for i in range(1, len(u) - 1):
        v[i] += u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])


def main() -> None:
    print("revbench demo: reversible functions run forward and backward\n")
    t0 = time.perf_counter()
    out = poly(0.0, 2.0)
    print(f"poly(0.0, 2.0)    -> {out}   (compiled by Numba in {time.perf_counter() - t0:.2f} s)")
    back = (~poly)(*out)
    print(f"(~poly){out} -> {back}   the inverse recovers the inputs")
    g = grad(poly, loss="y")(0.0, 2.0)
    print(f"grad(poly, loss='y')(0.0, 2.0) -> {g}   dy/dx = 6x + 1 = {6 * 2.0 + 1}: the reverse "
          "sweep runs poly backwards, no tape\n")

    u = np.sin(np.linspace(0.0, np.pi, 8))
    v = np.zeros_like(u)
    smooth(u, v, 0.25)
    print("u              =", np.round(u, 4))
    print("smooth -> v    =", np.round(v, 4))
    (~smooth)(u, v, 0.25)
    print("~smooth -> v   =", np.round(v, 4), " (back to zeros)\n")
    print("Generated inverse code of poly:\n")
    print(poly.source("inverse"))


if __name__ == "__main__":
    main()

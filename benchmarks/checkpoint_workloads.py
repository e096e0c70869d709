"""The steps of ``bench_checkpoint.py``, at module level so revbench's disk cache works.

* out-of-place: ``u_new = u + dt * sin(u)`` elementwise (``StoreAll()``);
* in-place: a leapfrog step of a chain of pendulums, ``p += h k sin(q); q += h p``
  (``Reverse()``), the state split evenly between ``q`` and ``p``.
"""

from __future__ import annotations

import numpy as np

from revbench import reversible


def _oop_step(u_new, u, t, dt):
    for i in range(len(u)):
        u_new[i] += u[i] + dt * np.sin(u[i])


def _oop_loss(out, u, dt):
    for i in range(len(u)):
        out += u[i] * u[i]


def _leapfrog(q, p, t, k, h):
    for i in range(len(q)):
        p[i] += h * k * np.sin(q[i])
    for i in range(len(q)):
        q[i] += h * p[i]


def _leapfrog_loss(out, q, p, k, h):
    for i in range(len(q)):
        out += q[i] * q[i] + p[i] * p[i]


STEPS = {
    (False, True): (reversible(_oop_step), reversible(_oop_loss)),
    (False, False): (reversible(check=False)(_oop_step), reversible(check=False)(_oop_loss)),
    (True, True): (reversible(_leapfrog), reversible(_leapfrog_loss)),
    (True, False): (reversible(check=False)(_leapfrog), reversible(check=False)(_leapfrog_loss)),
}


def steps(inplace: bool, check: bool):
    """(step, loss) of the in-place or out-of-place case, with checks on or off."""
    return STEPS[(inplace, check)]


def initial(inplace: bool, n: int):
    """(state, params) for a state of ``n`` floats in all."""
    rng = np.random.default_rng(0)
    if inplace:
        m = n // 2
        return [rng.uniform(-0.5, 0.5, m), np.zeros(m)], [-1.0, 0.01]
    return [rng.uniform(-1, 1, n)], [1e-4]

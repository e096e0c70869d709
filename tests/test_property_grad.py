"""Gradients of generated programs agree with central finite differences.

Programs come from the same generator as the round-trip property tests
(``program_gen``): straight-line code, loops, branches, ancillas, routines and
calls, over float64 scalars and arrays.  The loss is the first scalar argument
``a0``; every float argument except the read-only ones named ``c*`` (the
generator uses those in branch conditions, where a finite-difference step could
flip the branch) is perturbed.  Where a kink or an exact tie lies within a step
of the point (one-sided differences disagree, or the gradient itself changes
nearby), that coordinate is not compared: no difference quotient is the
derivative there.
"""

from __future__ import annotations

import math

import numpy as np
import program_gen
import pytest
from hypothesis import HealthCheck, given, note, settings
from test_property import build, show, stable

from revbench import grad

EPS = 1e-6
RTOL, ATOL = 2e-5, 2e-6

SETTINGS = dict(deadline=None, derandomize=False, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def _loss(f, args) -> float:
    return float(f(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))[0])


def _grad_at(f, args, k, idx) -> float:
    g = grad(f, loss="a0")(*args)[k]
    return float(g if idx is None else g[idx])


def check_program_gradient(p, backend: str) -> None:
    show(p)
    f = build(p, backend)
    g = stable("grad", lambda: grad(f, loss="a0")(*p.fresh_args()))
    for k, (name, a) in enumerate(zip(f.params, p.args)):
        if name.startswith("c") or not (isinstance(a, float) or
                                         (isinstance(a, np.ndarray) and a.dtype == float)):
            continue
        for idx in (np.ndindex(a.shape) if isinstance(a, np.ndarray) else [None]):
            def shifted(h, idx=idx, k=k):
                new = list(p.fresh_args())
                if idx is None:
                    new[k] = new[k] + h
                else:
                    new[k][idx] += h
                return new
            up, mid, down = _loss(f, shifted(EPS)), _loss(f, shifted(0.0)), _loss(f, shifted(-EPS))
            fd = (up - down) / (2 * EPS)
            ad = g[k] if idx is None else g[k][idx]
            forward, backward = (up - mid) / EPS, (mid - down) / EPS
            near = [_grad_at(f, shifted(h), k, idx) for h in (EPS / 2, -EPS / 2)]
            smooth = abs(forward - backward) <= 1e-3 * max(abs(fd), 1.0) and all(
                abs(ad - n) <= 1e-3 * max(abs(ad), 1.0) for n in near)
            if not (math.isfinite(fd) and smooth):
                # a kink (abs, min, max) or an exact tie within a step of the point: the
                # differences or the gradient itself jump there, so they cannot agree
                note(f"skipped d a0 / d {name}{'' if idx is None else list(idx)}: one-sided "
                     f"differences {forward!r} vs {backward!r}, gradients nearby {near!r}")
                continue
            note(f"d a0 / d {name}{'' if idx is None else list(idx)}: AD {ad!r}, FD {fd!r}")
            assert abs(ad - fd) <= ATOL + RTOL * max(abs(fd), 1.0), (name, idx, ad, fd)


@settings(max_examples=60, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_float_programs_gradients_python(p):
    check_program_gradient(p, "python")


@settings(max_examples=8, **SETTINGS)
@given(program_gen.programs(mode="float"))
def test_generated_float_programs_gradients_numba(p):
    check_program_gradient(p, "numba")


@pytest.mark.slow
@settings(max_examples=300, **SETTINGS)
@given(program_gen.programs(mode="float", depth=3))
def test_generated_float_programs_gradients_many(p):
    check_program_gradient(p, "python")

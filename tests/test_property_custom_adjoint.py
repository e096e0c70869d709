"""A custom adjoint that is exact changes no gradient: property-based, over generated
programs.

Each program (``program_gen``, float mode, with a helper ``h`` that ``f`` calls) is
built twice.  In one copy, ``h`` gets a custom adjoint computed from the *other* copy:
the values at ``h``'s entry come back by running the reference ``~h`` on the values at
exit, and ``revbench.vjp`` of the reference ``h`` there, seeded with the adjoints at
exit, gives the adjoints at entry -- exactly what the derived sweep computes.  So every
gradient of ``f`` must agree between the copies: the custom sweep must wire values,
adjoints, lanes, inactive arguments, calls in loops, ``~h`` calls and routines right,
whatever the program.  (Python backend: the adjoint calls revbench itself.)
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import program_gen
from hypothesis import HealthCheck, assume, given, note, settings
from test_property import show, stable

import revbench
from revbench.rules.adjoints import ADJOINTS

SETTINGS = dict(deadline=None, derandomize=False, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
RTOL, ATOL = 1e-9, 1e-11
CALLS = [0]


def _copy(source: str, module: str) -> dict:
    name = f"<generated-{module}-{hashlib.sha1(source.encode()).hexdigest()[:12]}>"
    ns = {"__name__": module, "np": np, "math": math}
    stable("define", lambda: revbench.define(source, ns, backend="python", filename=name))
    return ns


def _exact_adjoint(h_ref):
    floats: list[int] = []

    def adjoint(*values_and_adjoints):
        CALLS[0] += 1
        n = len(h_ref.params)
        values, adjoints = values_and_adjoints[:n], values_and_adjoints[n:]
        entry = (~h_ref)(*(v.copy() if isinstance(v, np.ndarray) else v for v in values))
        if not floats:
            floats.extend(k for k, v in enumerate(entry)
                          if isinstance(v, float) or (isinstance(v, np.ndarray) and v.dtype == float))
        _, pullback = revbench.vjp(h_ref, *entry, outputs=tuple(floats), wrt=tuple(floats))
        return tuple(pullback(*(np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                                for a in adjoints)))

    return adjoint


@settings(max_examples=40, **SETTINGS)
@given(program_gen.programs(mode="float", helper=True))
def test_an_exact_custom_adjoint_gives_the_derived_gradients(p):
    show(p)
    assume(re.search(r"(?<![\w.])~?h\(", p.source.split("def f(")[-1]) is not None)
    ref = _copy(p.source, "prop_reference")
    mine = _copy(p.source, "prop_custom")
    key = ("prop_custom", "h")
    try:
        revbench.custom_adjoint(mine["h"], _exact_adjoint(ref["h"]))
        want = stable("grad (derived)", lambda: revbench.grad(ref[p.name], loss="a0")(*p.fresh_args()))
        got = stable("grad (custom)", lambda: revbench.grad(mine[p.name], loss="a0")(*p.fresh_args()))
    finally:
        ADJOINTS.pop(key, None)
    for k, (g, w) in enumerate(zip(got, want)):
        note(f"argument {k}: custom {g!r}, derived {w!r}")
        if w is None:
            assert g is None
            continue
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)

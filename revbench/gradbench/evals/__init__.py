"""GradBench's evals, each a module with its programs written in revbench's language.

Each module defines its programs as ``docs/`` teaches (``@reversible`` functions, their
derivatives from :func:`revbench.value_and_grad` and friends) and one :class:`Eval`
subclass: for each function GradBench asks for, three steps --

* ``prepare(input)``: GradBench's JSON input as the program's arguments (not timed);
* ``compute(data)``: the function's value (timed, once per run);
* ``output(result)``: the value as GradBench's JSON output (not timed).

Creating the eval compiles its programs, by running each function once on a small input
of the right types (:meth:`Eval.warm`): what GradBench's ``define`` message times.
"""

from __future__ import annotations

from revbench.gradbench.evals import (
    ba,
    det,
    gmm,
    hello,
    ht,
    kmeans,
    llsq,
    lse,
    lstm,
    ode,
    particle,
    saddle,
)
from revbench.gradbench.evals.base import Eval, Steps, field, floats, integer, program

#: the evals by GradBench's name
EVALS: dict[str, type[Eval]] = {e.name: e for e in (
    hello.Hello, lse.Lse, llsq.Llsq, det.Det, kmeans.Kmeans, ode.Ode, gmm.Gmm, lstm.Lstm,
    ba.Ba, ht.Ht, particle.Particle, saddle.Saddle)}

__all__ = ["EVALS", "Eval", "Steps", "field", "floats", "integer", "program"]

"""Property-based tests: randomly generated reversible programs undo themselves.

``program_gen.programs()`` draws whole programs as source text (straight-line updates,
element updates with in-bounds indices, ancillas, routines, for/while loops, if/elif/else
with postconditions, `with inverted:`, calls of a helper and of its inverse, ...) and
arguments for them.  Every program is valid per the language contract, so:

* ``(~f)(*f(*args)) == args``: exactly for integer programs, within
  ``rtol=1e-7, atol=1e-9`` for float programs; on both backends;
* the numba and python backends compute the same forward results;
* ``~~f`` behaves exactly as ``f``.

A failing example prints the program's source and arguments (``note``), so it can be
pasted into a regression test.  Numba compiles every generated program, so the numba
tests draw few examples; ``-m slow`` runs many more (``test_many_programs_numba``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import traceback

import numpy as np
import program_gen
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from program_gen import GeneratedProgram, programs

import revbench

RTOL, ATOL = 1e-7, 1e-9

COMMON = dict(
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


# ---------------------------------------------------------------------------------------------
# helpers

def stable(what: str, fn, *args):
    """``fn(*args)``; an exception is re-raised as an AssertionError raised *here*.

    Hypothesis tells failures apart by where they were raised, following ``__context__``
    even through ``raise ... from None``; revbench's errors carry the generated module of
    each program as their context, so every program would look like a different bug: each
    one shrunk and reported separately, and a shrunk program never "the same failure".
    Raising outside the ``except`` block drops the context; the traceback goes in a note.
    """
    try:
        return fn(*args)
    except Exception as exc:
        error = exc
        note("".join(traceback.format_exception(exc)[-6:]))
    raise AssertionError(f"{what} raised {type(error).__name__}: {error}")


def build(p: GeneratedProgram, backend: str, **options):
    # a file name fixed by the source, so a replayed example regenerates identical code
    name = f"<generated-{hashlib.sha1(p.source.encode()).hexdigest()[:12]}>"
    define = functools.partial(revbench.define, backend=backend, filename=name, **options)
    fns = stable(f"define(..., backend={backend!r})", define, p.source, {"np": np, "math": math})
    return fns[p.name]


def snapshot(values: tuple) -> tuple:
    """Copy results: arrays are updated in place by later calls."""
    return tuple(v.copy() if isinstance(v, np.ndarray) else v for v in values)


def show(p: GeneratedProgram) -> None:
    note(f"program ({p.mode}):\n{p.source}")
    note(f"args = {p.args!r}")


def assert_same(got: tuple, want: tuple, what: str, exact: bool = False) -> None:
    """Ints exactly, floats within (RTOL, ATOL) (or exactly with ``exact``); types kept."""
    assert isinstance(got, tuple), f"{what}: expected a tuple, got {type(got).__name__}"
    assert len(got) == len(want), f"{what}: {len(got)} values, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        where = f"{what}: argument {k}"
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray), f"{where}: got {type(g).__name__}, expected an array"
            assert g.dtype == w.dtype and g.shape == w.shape, \
                f"{where}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
            if exact or w.dtype.kind in "iub":
                ok = np.array_equal(g, w)
            else:
                ok = np.allclose(g, w, rtol=RTOL, atol=ATOL)
        else:
            assert type(g) is type(w), f"{where}: got {type(g).__name__} {g!r}, expected {type(w).__name__}"
            if exact or isinstance(w, int):
                ok = g == w
            else:
                ok = abs(g - w) <= ATOL + RTOL * abs(w)
        assert ok, f"{where}: got {g!r}, expected {w!r}"


def check_round_trip(p: GeneratedProgram, backend: str, **options) -> tuple:
    """Run f then ~f on the program's arguments; returns f's results."""
    show(p)
    f = build(p, backend, **options)
    out = stable(f"f(*args) [{backend}]", f, *p.fresh_args())
    forward = snapshot(out)
    note(f"f(*args) = {forward!r}")
    back = stable(f"(~f)(*f(*args)) [{backend}]", ~f, *out)
    assert_same(back, p.args, f"(~f)(*f(*args)) [{backend}]", exact=p.mode == "int")
    return forward


def check_double_inversion(p: GeneratedProgram, backend: str) -> None:
    show(p)
    f = build(p, backend)
    ff = ~~f
    assert ff is f or (ff.name == f.name and not ff.is_inverse)
    want = snapshot(stable(f"f(*args) [{backend}]", f, *p.fresh_args()))
    got = stable(f"(~~f)(*args) [{backend}]", ff, *p.fresh_args())
    assert_same(got, want, f"(~~f)(*args) [{backend}]", exact=True)
    # and the inverse of ~~f undoes it
    back = stable(f"(~~~f)(*(~~f)(*args)) [{backend}]", ~ff, *got)
    assert_same(back, p.args, f"(~~~f)(*(~~f)(*args)) [{backend}]", exact=p.mode == "int")


# ---------------------------------------------------------------------------------------------
# round trips

@settings(max_examples=200, **COMMON)
@given(programs())
def test_round_trip_python(p):
    check_round_trip(p, "python")


@settings(max_examples=20, **COMMON)
@given(programs())
def test_round_trip_numba_and_backends_agree(p):
    forward = check_round_trip(p, "numba")
    reference = snapshot(stable("f(*args) [python]", build(p, "python"), *p.fresh_args()))
    assert_same(forward, reference, "numba vs python forward results", exact=p.mode == "int")


@settings(max_examples=60, **COMMON)
@given(programs())
def test_round_trip_unchecked_python(p):
    check_round_trip(p, "python", check=False)


@settings(max_examples=10, **COMMON)
@given(programs(mode="int", depth=3, max_len=4))
def test_round_trip_deep_int_programs_numba(p):
    check_round_trip(p, "numba")


@settings(max_examples=100, **COMMON)
@given(programs(mode="float", depth=3, max_len=4))
def test_round_trip_deep_float_programs_python(p):
    check_round_trip(p, "python")


# ---------------------------------------------------------------------------------------------
# ~~f

@settings(max_examples=100, **COMMON)
@given(programs())
def test_double_inversion_python(p):
    check_double_inversion(p, "python")


@settings(max_examples=8, **COMMON)
@given(programs())
def test_double_inversion_numba(p):
    check_double_inversion(p, "numba")


# ---------------------------------------------------------------------------------------------
# the generator itself: it must keep producing every construct

CONSTRUCTS = {
    "update": r"^\s+\w+(\[[^]]*\])? [-+]= ",
    "element update": r"^\s+\w+\[[^]]+\] [-+^]= ",
    "whole-array update": r"^\s+[xA]\d [-+^*/]= ",
    "2-D element": r"\bA\d\[[^],]+, [^]]+\]",
    "2-D ancilla": r"np\.zeros\(\(",
    "second dimension": r"\.shape\[1\]",
    "assert": r"^\s+assert ",
    "xor": r"\^= ",
    "multiply": r"\*= ",
    "function": r"\b(sin|cos|tanh|exp|arctan|atan|log1p|hypot)\(",
    "ancilla": r"^\s+del t\d+",
    "array ancilla": r"np\.zeros|\.copy\(\)",
    "routine": r"^\s+~routine$",
    "named routine": r"with routine as r\d+:",
    "inverted": r"with inverted:",
    "for": r"^\s+for \w+ in range\(",
    "descending for": r"range\([^()]*(\([^()]*\))?[^()]*, -\d\):",
    "if": r"^\s+if ",
    "postcondition": r"^\s+(el)?if \(",
    "elif": r"^\s+elif ",
    "else": r"^\s+else:",
    "while": r"^\s+while \(",
    "call": r"^\s+h\(",
    "inverse call": r"^\s+(~h\(|\(~h\)\(|h\.inverse\()",
    "flag": r"fl\d+ == 1",
    "element read of the target's array": r"^\s+(x\d)\[([^]]*)\] [-+^]= .*\b\1\[(?!\2\])",
}
if program_gen.ENABLE_SWAPS:
    CONSTRUCTS["swap"] = r"^\s+(\S+), (\S+) = \2, \1$"
if program_gen.ENABLE_BLOCKS_IN_ROUTINE_BODY:
    CONSTRUCTS["block in a routine body"] = (
        r"^( *)with routine.*:\n(?:\1 +\S.*\n)*?\1 +with (?:routine|inverted)")


def test_generator_covers_every_construct():
    sources: list[str] = []

    # a fixed seed: the question is whether the generator *can* produce every construct,
    # and a random sample of 300 occasionally misses a rare one (a flaky test otherwise)
    @settings(max_examples=600, phases=[Phase.generate], database=None,
              **{**COMMON, "derandomize": True})
    @given(programs())
    def collect(p):
        sources.append(p.source)

    collect()
    missing = [name for name, pat in CONSTRUCTS.items()
               if not any(re.search(pat, s, re.M) for s in sources)]
    assert not missing, f"the generator never produced: {missing}"


# ---------------------------------------------------------------------------------------------
# many more examples, for CI: pytest -m slow (the project deselects slow tests by default)

@pytest.mark.slow
@settings(max_examples=150, **COMMON)
@given(programs())
def test_many_programs_numba(p):
    forward = check_round_trip(p, "numba")
    reference = snapshot(stable("f(*args) [python]", build(p, "python"), *p.fresh_args()))
    assert_same(forward, reference, "numba vs python forward results", exact=p.mode == "int")


@pytest.mark.slow
@settings(max_examples=1500, **COMMON)
@given(programs(depth=3, max_len=6))
def test_many_programs_python(p):
    check_round_trip(p, "python")

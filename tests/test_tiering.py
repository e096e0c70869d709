"""Tiered execution (revbench.tiering): a first call runs interpreted while Numba compiles
in the background, with results bit for bit those of the compiled code."""

from __future__ import annotations

import itertools
import math
import textwrap
import time

import numba
import numpy as np
import pytest
from ipython_harness import ip, run_ok, shell  # noqa: F401 (fixtures)

import revbench
from revbench import tiering
from revbench.backends import libm

SOURCE = """
@reversible
def model(loss, w, x):
    n = len(x)
    for i in range(n):
        with routine:
            h = np.zeros(len(w))
            for j in range(len(w)):
                h[j] += np.tanh(w[j] * x[i]) + math.exp(SCALE * w[j]) * np.sin(x[i])
            loss += np.log(1.0 + np.sum(h * h)) + np.sqrt(abs(x[i]) + 1.0)
        ~routine
"""


_unique = itertools.count(1)


def unique_source(source: str = SOURCE) -> str:
    """``source`` with ``SCALE`` a constant no other test (or earlier run) used: code that
    is not compiled yet, in this process or in the disk cache."""
    scale = 0.1 + (time.time_ns() % 10**9 + next(_unique)) * 1e-18
    return source.replace("SCALE", repr(scale))


def define(source: str | None = None, **options):
    ns = {"np": np, "math": math}
    text = unique_source() if source is None else source
    return list(revbench.define(textwrap.dedent(text), ns, **options).values())[-1]


def data(n: int = 40):
    rng = np.random.default_rng(3)
    return rng.normal(size=6), rng.normal(size=n)


@pytest.fixture
def tiered(monkeypatch):
    """Tiering on; yields ``delta(stat)``: how often tiering did that in the test."""
    monkeypatch.setitem(tiering._state, "mode", "on")
    stats = dict(tiering.stats)
    yield lambda key: tiering.stats[key] - stats[key]
    assert tiering.wait(120)


def test_the_first_gradient_runs_interpreted_and_agrees_bit_for_bit(tiered):
    source = unique_source()
    f = define(source)
    w, x = data()
    vg = revbench.value_and_grad(f, loss="loss", wrt="w")
    first = vg(0.0, w, x)
    assert tiered("interpreted") == 2  # the forward run and the reverse sweep
    assert tiering.wait(120)
    second = vg(0.0, w, x)
    assert tiered("interpreted") == 2  # compiled now
    f_compiled = define(source)  # the same code: compiled by now
    revbench.set_tiered(False)
    try:
        reference = revbench.value_and_grad(f_compiled, loss="loss", wrt="w")(0.0, w, x)
    finally:
        revbench.set_tiered("on")
    for got in (first, second):
        assert got[0][0] == reference[0][0]
        assert np.array_equal(got[1][1], reference[1][1])  # bit for bit, not approximately


def test_calls_run_interpreted_within_a_budget_then_wait_for_the_compiled_code(
        tiered, monkeypatch):
    # (Numba's compilation: seconds, so the budget matters; the native path compiles this
    # small function before the second call)
    monkeypatch.setenv("REVBENCH_NATIVE", "0")
    f = define()
    w, x = data()
    out1 = f(0.0, w, x)
    out2 = f(0.0, w, x)  # a few milliseconds of the 2 s budget used: interpreted again
    assert tiered("interpreted") == 2
    monkeypatch.setattr(tiering, "INTERPRETED_BUDGET", 0.0)
    out3 = f(0.0, w, x)  # the budget spent (the compilation takes seconds): waits
    assert tiered("interpreted") == 2 and tiered("waited") >= 1
    assert out1[0] == out2[0] == out3[0]


LONG = """
@reversible
def spin(total, x, n):
    for i in range(n):
        for j in range(len(x)):
            total += x[j] * SCALE
"""


def test_a_long_interpreted_run_gives_way_to_the_compiled_code(tiered):
    """The interpreted run stops at a loop poll once the compiled code is ready; the
    arguments are restored and the compiled code runs the call from the start."""
    source = unique_source(LONG)
    f = define(source)
    x = np.linspace(0.0, 1.0, 50)
    n = 2_000_000  # minutes interpreted, milliseconds compiled
    total, x_out, _ = f(0.0, x, n)
    assert tiered("interpreted") == 1 and tiered("promoted") == 1
    untiered = define(source)  # the same code: compiled by now
    revbench.set_tiered(False)
    try:
        expected = untiered(0.0, x, n)[0]
    finally:
        revbench.set_tiered("on")
    assert total == expected
    assert x_out is x and np.array_equal(x, np.linspace(0.0, 1.0, 50))


def test_an_interpreted_run_past_its_budget_waits_for_the_compiled_code(tiered, monkeypatch):
    # (a compilation slower than the budget: Numba's; the native code generator may finish
    # this function before the interpreted run has used 0.05 s)
    monkeypatch.setenv("REVBENCH_NATIVE", "0")
    monkeypatch.setattr(tiering, "INTERPRETED_BUDGET", 0.05)
    f = define(unique_source(LONG))
    x = np.linspace(0.0, 1.0, 50)
    total = f(0.0, x, 20_000)[0]  # a second interpreted, milliseconds compiled
    assert tiered("interpreted") == 1 and tiered("promoted") == 1 and tiered("waited") >= 1
    assert total == pytest.approx(20_000 * x.sum() * 0.1, rel=1e-6)


def test_a_failed_check_in_the_interpreted_run_names_the_line_and_loses_nothing(tiered):
    f = define(unique_source("""
@reversible
def f(y, x):
    for i in range(len(x)):
        with routine:
            t = 0.0
            t += x[i] * SCALE
        y[i] += t
        x[i] += 1.0
        ~routine
"""))
    y, x = np.zeros(3), np.array([1.0, 2.0, 3.0])
    with pytest.raises(revbench.ReversibilityError) as info:
        f(y, x)
    assert "`t`" in str(info.value) and "line" in str(info.value)
    assert np.array_equal(y, np.zeros(3)) and np.array_equal(x, [1.0, 2.0, 3.0])
    assert tiered("interpreted") == 1


def test_code_numba_may_not_compile_or_that_prints_is_never_tiered(tiered):
    printing = define("""
@reversible
def f(y, x):
    print("x is", x)
    y += x
""")
    printing(0.0, 2.0)
    assert tiered("interpreted") == 0
    unchecked_fast = define(unique_source(), fastmath=True, check=False)
    unchecked_fast(0.0, *data())
    assert tiered("interpreted") == 0

    def softplus(v):
        return math.log1p(math.exp(v))

    revbench.register(softplus)
    user = define("""
@reversible
def f(y, x):
    y += softplus(x)
""")
    user(0.0, 1.0)
    assert tiered("interpreted") == 0


def test_a_warm_disk_cache_is_used_at_once(tiered):
    source = unique_source()
    w, x = data()
    define(source)(0.0, w, x)
    assert tiering.wait(120)
    again = define(source)  # a new function of the same code (a cell run again): compiled
    again(0.0, w, x)
    assert tiered("interpreted") == 1


def test_tiering_is_on_in_a_notebook_and_says_what_it_compiles(ip):  # noqa: F811
    assert tiering.enabled()
    ran = run_ok(ip, textwrap.dedent("""
        import math
        import revbench
        from revbench import reversible, routine
        """) + unique_source() + "\nw = np.arange(6.0) / 6\nx = np.linspace(-1, 1, 30)\n"
                        "out = model(0.0, w, x)")
    shown = [out.data.get("text/plain", "") for out in ran.displayed]
    assert any("revbench: compiling model (forward) in the background" in text
               for text in shown), shown
    assert tiering.wait(120)


@pytest.mark.parametrize("mode, expected", [("on", True), ("off", False), ("auto", False)])
def test_the_mode_is_set_by_name_or_bool(monkeypatch, mode, expected):
    monkeypatch.setitem(tiering._state, "mode", "off")
    revbench.set_tiered(mode)
    assert tiering.enabled() is expected or mode == "auto"
    revbench.set_tiered(expected)
    assert tiering.tiered_mode() == ("on" if expected else "off")
    with pytest.raises(ValueError, match="tiered must be"):
        revbench.set_tiered("sometimes")


EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-300, 5e-324, 700.0, 710.0, -710.0, 1e300,
         math.inf, -math.inf, math.nan, math.pi, 1e-8]
NUMPY_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
              "acosh": "arccosh", "atanh": "arctanh"}


@pytest.mark.parametrize("name", sorted(libm.FUNCTIONS))
def test_the_interpreters_real_functions_are_the_compiled_ones_bit_for_bit(name):
    """What makes an interpreted first call's results those of the compiled code:
    NumPy's own scalar exp differs from the C library's on ~4% of arguments."""
    # as generated code spells it (revbench.rules.functions): np.<name>, or math.lgamma
    spelled = {"lgamma": "math.lgamma", "hypot": "math.hypot"}.get(
        name, f"np.{NUMPY_NAME.get(name, name)}")
    two = name == "hypot"  # (a function of two numbers: the second from the values too)
    compiled = numba.njit(eval(f"lambda v, w: {spelled}(v{', w' if two else ''})",
                               {"np": np, "math": math}))
    rng = np.random.default_rng(7)
    values = np.concatenate([EDGES, rng.normal(size=300) * 3, rng.uniform(-1, 1, 200),
                             rng.uniform(0, 800, 100)])
    others = np.concatenate([EDGES[::-1], rng.normal(size=len(values) - len(EDGES))
                             * 10.0 ** rng.integers(-300, 300, size=len(values) - len(EDGES))])
    with np.errstate(all="ignore"):
        for v, w in zip(values, others):
            args = (float(v), float(w)) if two else (float(v),)
            want, got = compiled(float(v), float(w)), getattr(libm, name)(*args)
            assert (math.isnan(want) and math.isnan(got)) or (
                want == got and math.copysign(1, want) == math.copysign(1, got)), (name, v)

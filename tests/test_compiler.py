"""The compiler pipeline: stages, caching, error translation, generated code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import revbench
from revbench.lang import ir
from revbench.lang.check import check_function
from revbench.lang.parse import SourceInfo, parse_definition
from revbench.transforms.invert import invert


def _parse(src: str) -> ir.Function:
    import ast

    src = textwrap.dedent(src)
    node = ast.parse(src).body[0]
    info = SourceInfo("<test>", src.splitlines(keepends=True), 0, 0)
    return parse_definition(node, info, {"np": np})


def test_stage_parse_then_check_can_be_run_separately():
    raw = _parse("""
        def f(y, x):
            t = x * 2.0
            y += t
            del t
    """)
    assert isinstance(raw.body[2], ir.Dealloc) and raw.body[2].init is None  # parse leaves it open
    checked = check_function(raw)
    assert checked.body[2].init == raw.body[0].init  # check resolves it from the allocation


def test_invert_twice_is_identity_on_ir():
    f = check_function(_parse("""
        def f(y, x, n):
            with routine:
                t = 0.0
                t += x
            for i in range(n):
                if (y > 0.0, y > 1.0):
                    y *= 2.0
                else:
                    y -= 1.0
            y += t
            ~routine
    """))
    assert invert(invert(f)).body == f.body
    assert invert(f).body != f.body


def test_errors_carry_their_stage():
    with pytest.raises(revbench.ReversibilitySyntaxError) as e:
        revbench.define("def f(y):\n    return y\n")
    assert e.value.stage == "parse"
    with pytest.raises(revbench.ReversibilitySyntaxError) as e:
        revbench.define("def f(y):\n    y += y\n")
    assert e.value.stage == "check"
    f = revbench.define("def f(y, x):\n    y ^= x\n")["f"]
    with pytest.raises(revbench.ReversibilityTypeError) as e:
        f(1.0, 2.0)
    assert e.value.stage == "types" and e.value.lineno == 2


def test_static_error_traceback_has_no_compiler_frames(tmp_path):
    mod = tmp_path / "badmod.py"
    mod.write_text("from revbench import reversible\n\n@reversible\ndef bad(y, x):\n    y += y * x\n")
    out = subprocess.run([sys.executable, str(mod)], capture_output=True, text=True)
    assert out.returncode != 0
    err = out.stderr
    assert "revbench/lang" not in err and "revbench\\lang" not in err
    assert 'badmod.py", line 5' in err and "y += y * x" in err and "^" in err


def test_runtime_error_traceback_has_no_compiler_frames():
    f = revbench.define("def f(y, x):\n    t = 0.0\n    t += x\n    y += t\n    del t\n")["f"]
    with pytest.raises(revbench.ReversibilityError) as e:
        f(0.0, 1.0)
    frames = traceback.extract_tb(e.value.__traceback__)
    assert all("revbench/compiler" not in fr.filename for fr in frames)


CACHE_SCRIPT = """
import sys, time
sys.path.insert(0, {path!r})
import numba  # keep the numba import out of the timing
t0 = time.perf_counter()
from cachemod import f
f(0.0, 2.0)
print(time.perf_counter() - t0)
import revbench.backends.loader as L
from revbench.backends.native import engine
print(sorted(p.name for p in L.cache_dir().glob("native/*.o")))
print(engine.stats["compiled"], engine.stats["loaded"])
"""


@pytest.mark.slow
def test_second_process_reuses_the_compiled_code(tmp_path):
    (tmp_path / "cachemod.py").write_text(
        "from revbench import reversible\n\n@reversible\ndef f(y, x):\n"
        "    for i in range(10):\n        y += x * x\n")
    env = {**__import__("os").environ, "REVBENCH_CACHE_DIR": str(tmp_path / "cache")}
    script = CACHE_SCRIPT.format(path=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, check=True).stdout.splitlines() for _ in range(2)]
    # the same machine-code file, written once: the first process compiles, the second loads
    assert runs[0][1] == runs[1][1] and runs[0][1] != "[]"
    assert runs[0][2] == "1 0" and runs[1][2] == "0 1"
    obj = next((tmp_path / "cache").glob("*/native/*.o"))
    code = obj.read_bytes()
    third = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    assert third[2] == "0 1" and obj.read_bytes() == code  # loads, does not recompile


def test_generated_source_is_plain_loops_and_check_false_has_no_checks():
    src = textwrap.dedent("""
        def f(y, x):
            t = np.zeros(len(x))
            for i in range(len(x)):
                t[i] += x[i] * 2.0
            y += t
            for i in range(len(x)):
                t[i] -= x[i] * 2.0
            del t
    """)
    checked = revbench.define(src, {"np": np})["f"]
    unchecked = revbench.define(src, {"np": np}, check=False)["f"]
    y, x = np.zeros(3), np.arange(3.0)
    checked(y, x)
    np.testing.assert_array_equal(unchecked(np.zeros(3), x)[0], y)
    s_on, s_off = checked.source("forward"), unchecked.source("forward")
    assert "raise" in s_on
    assert "raise" not in s_off and "_RbCheckFailed(" not in s_off and "_rb_atol" not in s_off
    assert "for _rb_i" in s_off  # the whole-array statement became a loop
    assert "y -= " in unchecked.source("inverse") or "y[_rb_i" in unchecked.source("inverse")


def test_source_before_any_call_guesses_types():
    f = revbench.define("def f(y, x, n):\n    for i in range(n):\n        y[i] += x\n")["f"]
    src = f.source("forward")
    assert "def f__forward(y, x, n" in src
    with pytest.raises(ValueError):
        f.source("sideways")


def test_numba_typing_failure_points_at_user_line():
    def untypable(x):
        return float(len({"a": x, 1: "b"}))

    revbench.register(untypable)
    f = revbench.define("def f(y, x):\n    y += 1.0\n    y += untypable(x)\n")["f"]
    with pytest.raises(revbench.ReversibilityTypeError) as e:
        f(0.0, 1.0)
    assert e.value.lineno == 3 and "y += untypable(x)" in str(e.value)


def test_register_replaces_and_recompiles():
    def scale(x):
        return 2.0 * x

    revbench.register(scale, partials=(lambda x: 2.0,))
    f = revbench.define("def f(y, x):\n    y += scale(x)\n")["f"]
    assert f(0.0, 3.0) == (6.0, 3.0)

    def scale(x):
        return 3.0 * x

    revbench.register(scale, partials=(lambda x: 3.0,))
    g = revbench.define("def f(y, x):\n    y += scale(x)\n")["f"]
    assert g(0.0, 3.0) == (9.0, 3.0)


def test_recursion_is_refused_clearly():
    # a function calling itself: where it is written (issue 26); through another, at the call
    with pytest.raises(revbench.ReversibilitySyntaxError, match="calls itself"):
        revbench.define("def f(y):\n    if (y > 1.0, y > 1.0):\n        f(y)\n")
    fns = revbench.define("def f(y):\n    g(y)\n\ndef g(y):\n    if (y > 1.0, y > 1.0):\n"
                          "        f(y)\n")
    with pytest.raises(revbench.ReversibilityTypeError, match="calls itself"):
        fns["f"](0.0)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_redefined_callee_reaches_callers_compiled_before(backend):
    # a notebook re-running a def-cell: callers (and their callers) pick up the new callee
    ns: dict = {}
    revbench.define("def f(y):\n    y += 1.0\n", ns, backend=backend)
    revbench.define("def g(y):\n    f(y)\n", ns, backend=backend)
    revbench.define("def h(y):\n    g(y)\n    g(y)\n", ns, backend=backend)
    assert ns["h"](0.0) == (2.0,)
    assert (~ns["h"])(2.0) == (0.0,)
    revbench.define("def f(y):\n    y += 100.0\n", ns, backend=backend)
    assert ns["g"](0.0) == (100.0,)
    assert ns["h"](0.0) == (200.0,)
    assert (~ns["h"])(200.0) == (0.0,)
    revbench.define("def f(y):\n    y *= 3.0\n", ns, backend=backend)
    assert ns["h"](1.0) == (9.0,)
    assert revbench.grad(ns["h"], loss="y")(1.0) == (9.0,)

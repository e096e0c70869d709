"""The ``%%reversible`` cell magic, against a real IPython ``InteractiveShell``.

Each test runs cells the way a notebook does (``shell.run_cell``), and checks what
the user sees (the output, with colours stripped), whether IPython marks the cell
failed, and what the notebook's variables are afterwards.  Most cells run with
``--no-jit`` (the Python backend) for speed; a few run compiled with Numba.
"""

# ruff: noqa: F811  (the shell and ip fixtures come from ipython_harness)
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("IPython", reason="IPython is not installed: pip install -e '.[notebook]'")

from generated_text import plain
from IPython.utils.capture import capture_output
from ipython_harness import ANSI as _ANSI
from ipython_harness import Ran, ip, run, run_ok, shell  # noqa: F401

import revbench
from revbench.jupyter import magic as magic_module

POLY = """%%reversible --no-jit
def poly(y, x):
    t = 0.0
    t += x * x
    y += 3.0 * t + x
    t -= x * x
    del t
"""


# --------------------------------------------------------------------------- #
# The extension
# --------------------------------------------------------------------------- #


def test_import_revbench_does_not_import_ipython():
    code = "import sys, revbench; print('IPython' in sys.modules, 'ipywidgets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


SHOWN = (revbench.ReversibilitySyntaxError, revbench.ReversibilityError, TypeError, ValueError)


def test_load_reload_and_unload(shell):
    assert "reversible" in shell.magics_manager.magics["cell"]
    assert shell.custom_exceptions == SHOWN
    with capture_output() as cap:
        shell.run_line_magic("load_ext", "revbench")
    assert "already loaded" in cap.stdout
    shell.run_line_magic("reload_ext", "revbench")
    assert "reversible" in shell.magics_manager.magics["cell"]
    assert shell.custom_exceptions == SHOWN
    shell.run_line_magic("unload_ext", "revbench")
    assert "reversible" not in shell.magics_manager.magics["cell"]
    assert shell.custom_exceptions == ()
    ran = run(shell, "%%reversible\ny += 1.0\n")
    assert not ran.success and "Cell magic `%%reversible` not found" in ran.out
    shell.run_line_magic("load_ext", "revbench")
    assert "reversible" in shell.magics_manager.magics["cell"]


def test_a_taken_exception_slot_is_left_alone(shell):
    """Another extension's custom exception handler is not replaced; errors still fail the cell."""
    shell.run_line_magic("unload_ext", "revbench")
    shell.set_custom_exc((KeyError,), lambda *a, **k: None)
    try:
        shell.run_line_magic("load_ext", "revbench")
        assert shell.custom_exceptions == (KeyError,)
        ran = run(shell, "%%reversible --no-jit\ny = 0.0\ny += y\n")
        assert not ran.success and isinstance(ran.error, revbench.ReversibilitySyntaxError)
        assert "is read on its own right-hand side" in ran.out
        shell.run_line_magic("unload_ext", "revbench")
        assert shell.custom_exceptions == (KeyError,)
    finally:
        shell.set_custom_exc((), None)
        if "revbench" not in shell.extension_manager.loaded:
            shell.run_line_magic("load_ext", "revbench")


@pytest.mark.parametrize("line", ["--bogus", "--show sideways", "--loss", "extra words"])
def test_a_bad_flag_is_a_one_line_usage_error(ip, line):
    ran = run(ip, f"%%reversible {line}\ny += 1.0\n")
    assert not ran.success
    assert ran.out.strip().startswith("UsageError: ")
    assert len(ran.out.strip().splitlines()) == 1, ran.out


# --------------------------------------------------------------------------- #
# Cells of definitions
# --------------------------------------------------------------------------- #


def test_a_cell_of_defs_defines_reversible_functions(ip):
    ran = run_ok(ip, POLY + """
@reversible(check=False)
def twice(y, x):
    poly(y, x)
    poly(y, x)
""")
    assert ran.out.strip() == "defined reversible functions: poly(y, x), twice(y, x) [python backend]"
    poly, twice = ip.user_ns["poly"], ip.user_ns["twice"]
    assert isinstance(poly, revbench.ReversibleFunction)
    assert poly.backend == "python" and poly.check and not twice.check
    assert poly(0.0, 2.0) == (14.0, 2.0)
    assert (~twice)(28.0, 2.0) == (0.0, 2.0)


def test_a_cell_of_defs_compiles_with_numba_by_default(ip):
    ran = run_ok(ip, POLY.replace(" --no-jit", " --unchecked"))
    assert ran.out.strip() == "defined reversible functions: poly(y, x) [unchecked]"
    poly = ip.user_ns["poly"]
    assert poly.backend == "numba" and not poly.check
    assert poly(0.0, 2.0) == (14.0, 2.0)


def test_a_static_error_in_a_def_shows_the_cell_line_and_defines_nothing(ip):
    ip.user_ns["g"] = "an older g"
    ran = run(ip, """%%reversible --no-jit
def g(a):
    a += 1.0

def h(y, x):
    y += x * y
""")
    assert not ran.success and isinstance(ran.error, revbench.ReversibilitySyntaxError)
    assert ran.error.lineno == 6  # the %%reversible line is line 1
    assert ran.out.rstrip().splitlines() == [
        f"  Cell In[{ran.number}], line 6",
        "    y += x * y",
        "             ^",
        "ReversibilitySyntaxError: `y` is read on its own right-hand side (`y += x * y`): the update "
        "could not be undone. Compute the right-hand side into an ancilla first (in reversible "
        "function h)",
    ]
    assert "Traceback" not in ran.out
    assert ip.user_ns["g"] == "an older g" and "h" not in ip.user_ns  # all or nothing


def test_a_python_syntax_error_shows_the_cell_line(ip):
    ran = run(ip, "%%reversible --no-jit\ndef f(y):\n    y +== 1\n")
    assert not ran.success and ran.error.lineno == 3
    assert f"Cell In[{ran.number}], line 3" in ran.out and "    y +== 1" in ran.out
    assert "ReversibilitySyntaxError: invalid syntax" in ran.out


def test_a_cell_mixing_defs_and_statements_is_refused(ip):
    ran = run(ip, POLY + "y += 1.0\n")
    assert not ran.success and ran.error.lineno == 8
    assert "can hold only `def`s" in ran.out
    assert "poly" not in ip.user_ns
    ran = run(ip, "%%reversible\ny += 1.0\ndef f(a):\n    a += 1.0\n")
    assert not ran.success and ran.error.lineno == 3
    assert "a cell program cannot define functions" in ran.out


@pytest.mark.parametrize("flag", ["--inverse", "--debug", "--loss y"])
def test_program_flags_on_a_cell_of_defs_are_usage_errors(ip, flag):
    ran = run(ip, POLY.replace("--no-jit", f"--no-jit {flag}"))
    assert not ran.success and ran.out.startswith("UsageError: ")
    assert "applies to a cell program" in ran.out and len(ran.out.strip().splitlines()) == 1
    assert "poly" not in ip.user_ns


def test_show_displays_the_generated_code_of_each_function(ip):
    ran = run_ok(ip, POLY.replace("--no-jit", "--no-jit --show inverse --show adjoint"))
    codes = [o.data["text/plain"] for o in ran.displayed]
    assert len(codes) == 2
    assert codes[0].startswith("# revbench inverse code for poly")
    assert "y -= ((3.0 * t) + x)" in plain(codes[0])
    assert codes[1].startswith("# revbench backward code for poly")
    assert "text/html" in ran.displayed[0].data  # highlighted


# --------------------------------------------------------------------------- #
# Cell programs
# --------------------------------------------------------------------------- #


def test_a_cell_program_updates_the_notebook_variables(ip):
    run_ok(ip, POLY)
    run_ok(ip, "y = 0.0\nx = 2.0\nn = 0\na = np.arange(3.0)\nkeep = a")
    ran = run_ok(ip, """%%reversible --no-jit
poly(y, x)
for i in range(len(a)):
    a[i] += x
    n += 1
""")
    assert ran.out == "" and ran.result.result is None
    ns = ip.user_ns
    assert (ns["y"], ns["x"], ns["n"]) == (14.0, 2.0, 3)
    assert ns["a"] is ns["keep"]  # updated in place
    np.testing.assert_array_equal(ns["a"], [2.0, 3.0, 4.0])


def test_ancillas_and_loop_variables_do_not_leak(ip):
    run_ok(ip, "y = 0.0\nx = 2.0\nt = 'the notebook t'")
    run_ok(ip, """%%reversible --no-jit
t = 0.0
t += x
for k in range(3):
    y += t
t -= x
del t
with routine:
    s = 0.0
    s += x
y += s
~routine
""")
    assert ip.user_ns["y"] == 8.0
    assert ip.user_ns["t"] == "the notebook t"  # an ancilla shadows a notebook variable
    assert "k" not in ip.user_ns and "s" not in ip.user_ns


def test_inverse_undoes_a_cell_exactly(ip):
    run_ok(ip, POLY)
    rng = np.random.default_rng(0)
    run_ok(ip, "y = 0.1\nx = 0.7\nn = 5\nflag = False")
    ip.user_ns["a"] = rng.standard_normal(6)
    before = {k: ip.user_ns[k] for k in ("y", "x", "n", "flag")}
    a0 = ip.user_ns["a"].copy()
    cell = """poly(y, x)
for i in range(1, len(a)):
    a[i] += a[i - 1] * x
    n += i
a[0] *= 2.0
flag ^= n > 10
"""
    run_ok(ip, "%%reversible --no-jit\n" + cell)
    assert ip.user_ns["n"] == 20 and ip.user_ns["flag"] is True
    run_ok(ip, "%%reversible --no-jit --inverse\n" + cell)
    after = {k: ip.user_ns[k] for k in ("y", "x", "n", "flag")}
    assert after["n"] == before["n"] and after["flag"] is before["flag"]
    assert after["y"] == pytest.approx(before["y"], abs=1e-15) and after["x"] == before["x"]
    np.testing.assert_allclose(ip.user_ns["a"], a0, rtol=0, atol=1e-15)


def test_a_cell_program_compiled_with_numba(ip):
    run_ok(ip, "y = 1.0\nx = 3.0\na = np.arange(4.0)\nk = np.int64(2)")
    cell = "for i in range(len(a)):\n    a[i] *= x\ny += a[k]\n"
    run_ok(ip, "%%reversible\n" + cell)
    assert ip.user_ns["y"] == 7.0 and type(ip.user_ns["k"]) is np.int64
    np.testing.assert_array_equal(ip.user_ns["a"], [0.0, 3.0, 6.0, 9.0])
    run_ok(ip, "%%reversible --inverse\n" + cell)
    assert ip.user_ns["y"] == 1.0
    np.testing.assert_array_equal(ip.user_ns["a"], np.arange(4.0))


def test_numpy_scalars_keep_their_type(ip):
    ip.user_ns.update(y=np.float64(1.0), x=2.5)
    run_ok(ip, "%%reversible --no-jit\ny += x\n")
    assert type(ip.user_ns["y"]) is np.float64 and ip.user_ns["y"] == 3.5


def test_rerunning_a_cell_reuses_its_compiled_program(ip, monkeypatch):
    calls = []
    real = magic_module.compile_program
    monkeypatch.setattr(magic_module, "compile_program",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    run_ok(ip, POLY)
    run_ok(ip, "y = 0.0\nx = 1.0")
    for _ in range(3):
        run_ok(ip, "%%reversible --no-jit\npoly(y, x)\n")
    assert len(calls) == 1 and ip.user_ns["y"] == 12.0
    run_ok(ip, "%%reversible --no-jit --unchecked\npoly(y, x)\n")  # other options: compiled anew
    assert len(calls) == 2
    run_ok(ip, POLY.replace("y += 3.0 * t + x", "y += t"))  # a redefined callee is called anew
    run_ok(ip, "%%reversible --no-jit\npoly(y, x)\n")
    assert len(calls) == 3 and ip.user_ns["y"] == 17.0


def test_an_empty_cell_does_nothing(ip):
    ran = run_ok(ip, "%%reversible\n# nothing yet\n\n")
    assert ran.out == ""


# -- errors told in the cell's lines ------------------------------------------------------


def test_an_undefined_variable_is_named_at_its_cell_line(ip):
    run_ok(ip, "y = 0.0")
    ran = run(ip, "%%reversible --no-jit\ny += 1.0\ny += zz * 2.0\n")
    assert not ran.success and isinstance(ran.error, revbench.ReversibilitySyntaxError)
    assert ran.out.splitlines()[:3] == [f"  Cell In[{ran.number}], line 3", "    y += zz * 2.0",
                                        "         ^"]
    assert "`zz` is not defined" in ran.out
    assert ip.user_ns["y"] == 0.0
    ran = run(ip, "%%reversible --no-jit\nnothing_here(y)\n")
    assert not ran.success and "define the reversible function `nothing_here`" in ran.out


def test_a_static_error_in_a_cell_program_shows_line_and_caret(ip):
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run(ip, "%%reversible --no-jit\ny += x\nx = 3.0\n")
    assert not ran.success and ran.error.lineno == 3
    lines = ran.out.splitlines()
    assert lines[:3] == [f"  Cell In[{ran.number}], line 3", "    x = 3.0", "    ^"]
    assert lines[3].startswith("ReversibilitySyntaxError: plain assignment `x = ...` is not "
                               "reversible: `x` is a notebook variable")
    assert "Traceback" not in ran.out and "(in reversible function" not in ran.out
    assert ip.user_ns["y"] == 0.0


def test_a_runtime_error_names_variable_values_and_cell_line(ip):
    run_ok(ip, "y = 1.0\nx = 2.0\na = np.array([1.0, 2.0])")
    ran = run(ip, """%%reversible --no-jit
a[0] += x
t = 0.0
t += x
y += t
del t
""")
    assert not ran.success
    err = ran.error
    assert isinstance(err, revbench.ReversibilityError) and ran.result.error_in_exec is err
    assert (err.variable, err.expected, err.actual, err.lineno) == ("t", 0.0, 2.0, 6)
    assert ran.out.strip().splitlines() == [
        f"Cell In[{ran.number}], line 6",
        "    del t",
        "        ^",
        "ReversibilityError: ancilla `t` is not back at its allocated value when deallocated: "
        "expected 0.0, got 2.0; to fix it, undo the updates of `t` after its last use and before "
        "`del t`: `t -= x` (or compute it in a `with routine:` block and undo that with `~routine`)",
    ]
    # nothing lost: the cell's first update was undone, the scalars never written
    assert ip.user_ns["y"] == 1.0
    np.testing.assert_array_equal(ip.user_ns["a"], [1.0, 2.0])


def test_a_runtime_error_in_numba_code_also_restores_everything(ip):
    run_ok(ip, "y = 1.0\nx = 0.0\na = np.array([1.0, 2.0])")
    ran = run(ip, "%%reversible\na[0] += 5.0\ny += 1.0\ny *= x\n")
    assert not ran.success and isinstance(ran.error, revbench.ReversibilityError)
    assert f"Cell In[{ran.number}], line 4" in ran.out and "    y *= x" in ran.out
    assert "`*=` by `x`: the operand is zero, which cannot be undone: got 0.0" in ran.out
    assert ip.user_ns["y"] == 1.0
    np.testing.assert_array_equal(ip.user_ns["a"], [1.0, 2.0])


@pytest.mark.parametrize("flags", ["--no-jit", "--no-jit --unchecked", ""])
def test_an_index_error_leaves_the_variables_as_they_were(ip, flags):
    run_ok(ip, "a = np.array([1.0, 2.0, 3.0])\ny = 0.0")
    ran = run(ip, f"%%reversible {flags}\ny += 1.0\nfor i in range(len(a) + 1):\n    a[i] += 1.0\n")
    assert not ran.success and isinstance(ran.error, IndexError)
    # compiled code does not know its lines: the cell is replayed on the Python backend
    assert f"Cell In[{ran.number}], line 4" in ran.out and "    a[i] += 1.0" in ran.out
    assert "index 3 is out of bounds for axis 0 with size 3" in ran.out
    assert "Traceback" not in ran.out
    np.testing.assert_array_equal(ip.user_ns["a"], [1.0, 2.0, 3.0])
    assert ip.user_ns["y"] == 0.0


def test_a_type_error_points_at_the_cell_line(ip):
    run_ok(ip, "n = 3")
    ran = run(ip, "%%reversible --no-jit\nn += 0.5\n")
    assert not ran.success and isinstance(ran.error, revbench.ReversibilityTypeError)
    assert ran.out.strip().splitlines() == [
        f"Cell In[{ran.number}], line 2", "    n += 0.5", "    ^",
        "ReversibilityTypeError: `n` is int but the right-hand side is float: the update would "
        "change its type and its inverse would not be exact. Make `n` float (e.g. allocate it as 0.0)"]
    run_ok(ip, "b = [1.0]\nc = np.zeros(3, dtype=np.float32)")
    ran = run(ip, "%%reversible --no-jit\nc[0] += 1.0\n")
    assert not ran.success and ran.out.strip().splitlines()[:3] == [
        f"Cell In[{ran.number}], line 2", "    c[0] += 1.0", "    ^"]
    assert "ReversibilityTypeError: notebook variable `c`: expected an int, float" in ran.out


@pytest.mark.parametrize("flags", ["--no-jit", "", "--unchecked"])
def test_a_failing_assert_points_at_its_line_and_changes_nothing(ip, flags):
    run_ok(ip, "y = 1000.0\na = np.zeros(2)")
    ran = run(ip, f"%%reversible {flags}\ny += 1.0\na[1] += y\nassert y < 100.0, 'y is too big'\n")
    assert not ran.success and isinstance(ran.error, AssertionError)
    assert ran.out.strip().splitlines() == [
        f"Cell In[{ran.number}], line 4", "    assert y < 100.0, 'y is too big'", "    ^",
        "AssertionError: y is too big: `y < 100.0`"]
    assert ip.user_ns["y"] == 1000.0
    np.testing.assert_array_equal(ip.user_ns["a"], [0.0, 0.0])


def test_an_error_in_a_function_points_at_its_own_cell(ip):
    defs = run_ok(ip, """%%reversible --no-jit
def leaky(y, x):
    s = 0.0
    s += x
    y += s
    del s
""")
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run(ip, "%%reversible --no-jit\nleaky(y, x)\n")
    assert not ran.success
    assert ran.out.strip().splitlines() == [
        f"Cell In[{ran.number}], line 2", "    leaky(y, x)", "    ^",  # the call, then the error
        f"  Cell In[{defs.number}], line 6", "    del s", "        ^",
        "ReversibilityError: ancilla `s` is not back at its allocated value when deallocated: "
        "expected 0.0, got 2.0; to fix it, undo the updates of `s` after its last use and before "
        "`del s`: `s -= x` (or compute it in a `with routine:` block and undo that with "
        "`~routine`) (in reversible function leaky)"]
    ran = run(ip, "%%reversible --no-jit --inverse\nleaky(y, x)\n")
    assert f"Cell In[{defs.number}], line 3" in ran.out
    assert "(in reversible function leaky, running its inverse)" in ran.out


def test_shared_memory_between_notebook_variables_is_refused(ip):
    run_ok(ip, "a = np.zeros(3)\nb = a")
    ran = run(ip, "%%reversible --no-jit\na += b\n")
    assert not ran.success
    assert "notebook variables `a` and `b` share memory" in ran.out


def test_cell_numbers_follow_ipython_without_history(ip):
    """``run_cell(store_history=False)`` does not advance the counter: the label follows."""
    with capture_output() as cap:
        result = ip.run_cell("%%reversible --no-jit\ny += undefined_name\n")
    assert f"Cell In[{result.execution_count}], line 2" in _ANSI.sub("", cap.stdout)


def test_an_internal_error_keeps_its_traceback(ip, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("a compiler bug")

    monkeypatch.setattr(magic_module, "compile_program", broken)
    run_ok(ip, "y = 0.0")
    ran = run(ip, "%%reversible --no-jit\ny += 1.0\n")
    assert not ran.success and isinstance(ran.error, KeyError)
    assert "Traceback" in ran.out and "a compiler bug" in ran.out


# -- flags ----------------------------------------------------------------------------------


def test_loss_returns_the_gradient_and_runs_the_cell(ip):
    run_ok(ip, POLY)
    run_ok(ip, "y = 0.0\nx = 2.0\nn = 1")
    ran = run_ok(ip, "%%reversible --no-jit --loss y\npoly(y, x)\nn += 1\n")
    grads = ran.result.result
    assert isinstance(grads, magic_module.Gradients) and grads.loss == "y"
    assert grads == {"y": 1.0, "x": 13.0}  # no gradient for the integer n
    assert ip.user_ns["_"] is grads and "Out[" in ran.out
    assert (ip.user_ns["y"], ip.user_ns["n"]) == (14.0, 2)  # the cell ran forward
    assert "<table>" in grads._repr_html_()


def test_loss_of_an_array_element(ip):
    run_ok(ip, "r = np.zeros(2)\nw = np.array([1.0, 2.0])\nc = 3.0")
    ran = run_ok(ip, "%%reversible --no-jit --loss r[1]\nfor i in range(2):\n    r[i] += c * w[i] * w[i]\n")
    grads = ran.result.result
    np.testing.assert_array_equal(grads["w"], [0.0, 12.0])
    np.testing.assert_array_equal(grads["r"], [0.0, 1.0])
    assert grads["c"] == 4.0
    np.testing.assert_array_equal(ip.user_ns["r"], [3.0, 12.0])


def test_loss_with_inverse_and_numba(ip):
    run_ok(ip, "y = 14.0\nx = 2.0")
    ran = run_ok(ip, "%%reversible --inverse --loss y\ny += 3.0 * x * x + x\n")
    assert ran.result.result == {"y": 1.0, "x": -13.0}
    assert ip.user_ns["y"] == 0.0


@pytest.mark.parametrize("spec, message", [
    ("q", "the cell program does not use a variable `q` (the notebook variables it uses: y, x)"),
    ("y[", "write a variable name, or one element of an array variable such as `r[3]` or `A[1, 2]`"),
])
def test_a_bad_loss_is_a_usage_error(ip, spec, message):
    run_ok(ip, "y = 0.0\nx = 1.0")
    ran = run(ip, f"%%reversible --no-jit --loss {spec}\ny += x\n")
    assert not ran.success and ran.out.strip() == f"UsageError: --loss {spec}: {message}"
    assert ip.user_ns["y"] == 0.0


def test_an_integer_loss_is_refused(ip):
    run_ok(ip, "n = 1")
    ran = run(ip, "%%reversible --no-jit --loss n\nn += 1\n")
    assert not ran.success
    assert ran.out.strip() == ("UsageError: --loss n: `n` is an int (1), and a gradient needs a "
                               "float loss: --loss NAME differentiates a float variable, or one "
                               "element of a float array (`--loss r[3]`)")
    assert ip.user_ns["n"] == 1


def test_show_displays_the_cell_code_and_runs_it(ip):
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run_ok(ip, "%%reversible --no-jit --show forward --show inverse\ny += x * x\n")
    forward, inverse = (o.data["text/plain"] for o in ran.displayed)
    assert forward.startswith("# revbench forward code for cell") and "y += (x * x)" in plain(forward)
    assert inverse.startswith("# revbench inverse code for cell") and "y -= (x * x)" in plain(inverse)
    assert ip.user_ns["y"] == 4.0


def test_unchecked_generates_no_checks(ip):
    run_ok(ip, "y = 0.0\nx = 2.0")
    leaky = "t = 0.0\nt += x\ny += t\ndel t\n"
    ran = run_ok(ip, "%%reversible --no-jit --unchecked --show forward\n" + leaky)
    assert "# del t" in ran.displayed[0].data["text/plain"]
    assert ip.user_ns["y"] == 2.0


def test_debug_opens_the_debugger_on_copies(ip, monkeypatch):
    seen = {}

    class Widget:
        def _repr_html_(self):
            return "<b>debugger</b>"

    def fake_debug(f, *args, loss=None):
        seen.update(f=f, args=args, loss=loss)
        args[1][0] += 100.0  # whatever the debugger does, the notebook keeps its values
        return Widget()

    from revbench.jupyter import debugger  # what --debug opens (revbench.debug is the same)

    monkeypatch.setattr(debugger, "debug", fake_debug)
    run_ok(ip, "y = 0.0\na = np.array([1.0, 2.0])")
    ran = run_ok(ip, "%%reversible --no-jit --debug --inverse --loss y\ny += a[0] * a[1]\n")
    assert seen["f"].is_inverse and seen["f"].params == ("y", "a") and seen["loss"] == "y"
    assert seen["args"][1] is not ip.user_ns["a"]
    np.testing.assert_array_equal(ip.user_ns["a"], [1.0, 2.0])
    assert ip.user_ns["y"] == 0.0  # --debug steps through the cell; it does not run it
    assert [o.data.get("text/html") for o in ran.displayed] == ["<b>debugger</b>"]


def test_debug_shows_the_real_debugger_widget(ip):
    if not hasattr(revbench, "debug"):
        pytest.skip("revbench.debug (the stepping debugger) is not available in this tree")
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run_ok(ip, "%%reversible --no-jit --debug --loss y\nt = 0.0\nt += x\ny += t * t\nt -= x\ndel t\n")
    views = [o.data["application/vnd.jupyter.widget-view+json"] for o in ran.displayed
             if "application/vnd.jupyter.widget-view+json" in o.data]
    assert len(views) == 1
    assert ip.user_ns["y"] == 0.0
    # the source panel names the cell as IPython does, not by its internal file name
    from ipywidgets.widgets.widget import _instances

    panel = _instances[views[0]["model_id"]].source.value
    number = ip.execution_count - 1
    assert f"Cell In[{number}]" in panel and "revbench-cell" not in panel, panel


# --------------------------------------------------------------------------- #
# The user guide's cells
# --------------------------------------------------------------------------- #

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "notebook.md"
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*notebook-test:\s*(\w+)\s*-->\s*$")


def guide_cells(text: str) -> list[tuple[str, str, str | None]]:
    """The guide's ``ipython`` cells: (source, marker, expected output or None).

    A cell marked ``fails`` must fail, one marked ``skip`` is not run; a ``text``
    block marked ``output`` right after a cell is what that cell must print.
    """
    lines = text.splitlines()
    cells: list[list] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        j = i + 1
        while lines[j].rstrip() != "```":
            j += 1
        marker = _MARKER.match(lines[i - 1])
        body = "\n".join(lines[i + 1:j]) + "\n"
        if m.group(1) == "ipython":
            cells.append([body, marker.group(1) if marker else "", None])
        elif marker and marker.group(1) == "output":
            cells[-1][2] = body
        i = j + 1
    return [tuple(c) for c in cells]


def test_the_guide_shows_what_its_cells_print(shell):
    cells = guide_cells(GUIDE.read_text())
    assert len(cells) > 10 and sum(1 for c in cells if c[2] is not None) >= 8
    shell.reset(new_session=True)  # the guide's In[n] count from 1
    for source, marker, expected in cells:
        if marker == "skip":
            shell.execution_count += 1
            continue
        ran = run(shell, source)
        assert ran.success is (marker != "fails"), f"{source}\n{ran.out}"
        if expected is not None:
            assert ran.out.rstrip() == expected.rstrip(), source


def test_define_reports_python_syntax_errors_at_the_lines_of_first_line():
    """``revbench.define(..., first_line=n)`` counts a Python syntax error's line from n too."""
    with pytest.raises(revbench.ReversibilitySyntaxError) as info:
        revbench.define("def f(y):\n    y +== 1\n", {}, filename="<cell>", first_line=2)
    assert info.value.lineno == 3

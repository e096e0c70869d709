"""What a ``%%reversible`` cell *says* when it fails, against a real IPython ``InteractiveShell``.

The contract (language.md §5-§6): an error shows the user's line -- counted as IPython
counts the cell -- with a caret under it and a one-line message in the cell's own terms
(notebook variables, ``--no-jit``, ``--loss NAME``), never the internals' traceback, and a
failing cell changes no notebook variable.  Each group below starts from an example of
issue 9 and then tries variations of the same class.
"""

# ruff: noqa: F811  (the shell and ip fixtures come from ipython_harness)
from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("IPython", reason="IPython is not installed: pip install -e '.[notebook]'")

from ipython_harness import ANSI as _ANSI  # noqa: F401
from ipython_harness import Ran, ip, run, run_ok, shell  # noqa: F401

import revbench
from revbench.jupyter import cell as cell_module
from revbench.jupyter import magic as magic_module

_INTERNALS = ("Traceback", "revbench/", "rbgen_", "~cell", " of cell", "_rb_", "pyobject",
              "backend='python'")


def snapshot(ip) -> dict:
    """The notebook's data variables (copies), to check that a failing cell changed none."""
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in ip.user_ns.items()
            if not k.startswith("_") and cell_module.is_data(v)}


def assert_unchanged(ip, before: dict) -> None:
    after = snapshot(ip)
    assert after.keys() == before.keys()
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(after[k], v, err_msg=k)
            assert after[k].dtype == v.dtype
        else:
            assert type(after[k]) is type(v) and (after[k] == v or (v != v and after[k] != after[k])), k


def fails_at(ran: Ran, line: int, text: str, caret: int | None = None, number: int | None = None,
             error: str | None = None) -> str:
    """The cell failed at cell line ``line`` (shown with its text and a caret); returns the message."""
    assert not ran.success, ran.out
    lines = ran.lines
    where = f"Cell In[{ran.number if number is None else number}], line {line}"
    k = next((i for i, s in enumerate(lines) if s.strip() == where), None)
    assert k is not None, ran.out
    assert lines[k + 1] == "    " + text.strip(), ran.out
    assert set(lines[k + 2].strip()) == {"^"}, ran.out
    if caret is not None:  # column of the caret in the stripped line
        indent = len(text) - len(text.lstrip())
        assert lines[k + 2].index("^") - 4 == caret - indent, ran.out
    message = lines[-1]
    if error is not None:
        assert message.startswith(f"{error}: "), ran.out
    for internal in _INTERNALS:
        assert internal not in ran.out, (internal, ran.out)
    return message


# --------------------------------------------------------------------------- #
# 10. a def cell with a bad option value
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("option, col, says", [
    ("atol=-1", 17, "@reversible(atol=-1): atol must be a finite number >= 0, got -1"),
    ("check=None", 18, "@reversible(check=None): check must be True or False, got None"),
    ('backend="cuda"', 20, "@reversible(backend='cuda'): backend must be one of"),
    ("rtol='small'", 17, "rtol must be a finite number >= 0, got 'small'"),
    ("check=1", 18, "check must be True or False, got 1"),
    ("atol=[1e-3]", 17, "atol must be a finite number >= 0"),
    ("atol={[1]: 2}", 17, "must be a literal value"),
    ("atol=x", 17, "must be a literal value"),
    ("False", 12, "@reversible takes its options by name"),
    ("speed=3", 12, "unknown @reversible option 'speed'"),
])
def test_a_bad_decorator_option_is_a_located_error(ip, option, col, says):
    ip.user_ns["f"] = "an older f"
    src = f"@reversible({option})\ndef f(y, x):\n    y += x\n"
    ran = run(ip, "%%reversible --no-jit\n" + src)
    message = fails_at(ran, 2, f"@reversible({option})", col, error="ReversibilitySyntaxError")
    assert says in message
    assert isinstance(ran.error, revbench.ReversibilitySyntaxError)
    assert ip.user_ns["f"] == "an older f"  # nothing defined


def test_a_bad_option_on_its_own_line_points_at_that_line(ip):
    ran = run(ip, "%%reversible\n@reversible(\n    check=True,\n    atol=-0.5,\n)\ndef f(y):\n"
                  "    y += 1.0\n")
    assert fails_at(ran, 4, "    atol=-0.5,", 9).endswith("got -0.5")
    assert "f" not in ip.user_ns


def test_a_bad_option_in_a_later_def_defines_nothing(ip):
    ran = run(ip, "%%reversible --no-jit\ndef g(y):\n    y += 1.0\n\n@reversible(backend='cuda')\n"
                  "def h(y):\n    y += 2.0\n")
    fails_at(ran, 5, "@reversible(backend='cuda')")
    assert "g" not in ip.user_ns and "h" not in ip.user_ns


def test_define_reports_a_bad_option_at_its_line():
    src = "def ok(y):\n    y += 1.0\n\n@reversible(atol=-1)\ndef f(y):\n    y += 1.0\n"
    with pytest.raises(revbench.ReversibilitySyntaxError) as info:
        revbench.define(src, {}, filename="<opts>", first_line=10)
    err = info.value
    assert (err.filename, err.lineno, err.offset) == ("<opts>", 13, 18)
    assert err.text.strip() == "@reversible(atol=-1)"
    assert "atol must be a finite number >= 0, got -1" in err.msg


# --------------------------------------------------------------------------- #
# 11. every message in cell terms, at the user's line
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("flags", ["", "--no-jit", "--unchecked", "--no-jit --inverse"])
@pytest.mark.parametrize("value", ["2**70", "-2**63 - 1", "2**63", "np.uint64(2**64 - 1)"])
def test_an_integer_outside_int64_is_refused_at_its_first_use(ip, flags, value):
    run_ok(ip, f"y = 0.0\nn = 3\nbig = {value}\na = np.zeros(2)")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\na[0] += 1.0\ny += n\nn += big\n")
    message = fails_at(ran, 4, "n += big", 5, error="ReversibilityTypeError")
    assert "notebook variable `big` is " in message and "int64" in message
    assert_unchanged(ip, before)


def test_int64_limits_themselves_are_accepted(ip):
    run_ok(ip, f"lo = {-(2**63)}\nhi = {2**63 - 1}\nz = 0")
    run_ok(ip, "%%reversible\nz ^= lo\nz ^= hi\n")
    assert ip.user_ns["z"] == -1


@pytest.mark.parametrize("flags", ["", "--no-jit"])
@pytest.mark.parametrize("constant", ["2**70", str(2**70), "-2**64"])
def test_an_integer_constant_outside_int64_is_an_error_at_its_line(ip, flags, constant):
    run_ok(ip, "n = 3")
    ran = run(ip, f"%%reversible {flags}\nn += 1\nn += {constant}\n")
    message = fails_at(ran, 3, f"n += {constant}")
    assert "64" in message
    assert ip.user_ns["n"] == 3


@pytest.mark.parametrize("flags", ["", "--no-jit", "--unchecked", "--no-jit --unchecked"])
def test_a_negative_allocation_size_is_told_at_its_line(ip, flags):
    run_ok(ip, "n = 2\na = np.ones(3)")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\na[0] += 1.0\nm = n - 5\nt = np.zeros(m)\ndel t\n"
                  "m -= n - 5\ndel m\n")
    # (checked: revbench's own error, naming the variable; unchecked: NumPy's ValueError)
    checked = "--unchecked" not in flags
    error = "ReversibilityError" if checked else "ValueError"
    message = fails_at(ran, 4, "t = np.zeros(m)", error=error)
    assert ("`t` cannot be allocated with a negative size: `m`" if checked
            else "negative dimensions") in message
    assert_unchanged(ip, before)
    ran = run(ip, f"%%reversible {flags}\nt = np.zeros(-1)\ndel t\n")
    fails_at(ran, 2, "t = np.zeros(-1)", error=error)


@pytest.mark.parametrize("flags", ["--unchecked", "", "--no-jit --unchecked"])
def test_an_integer_division_by_zero_is_told_at_its_line(ip, flags):
    run_ok(ip, "n = 7\nk = 0\na = np.ones(2)")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\na[1] += 2.0\nn += 1\nn += 5 // k\n")
    fails_at(ran, 4, "n += 5 // k", error="ZeroDivisionError")
    assert_unchanged(ip, before)


def test_inverse_messages_name_notebook_variables(ip):
    run_ok(ip, "v = np.zeros(3)\nu = v\nw = v[1:]\ny = 0.0")
    before = snapshot(ip)
    for flags in ("--inverse", "--no-jit --inverse", ""):
        ran = run(ip, f"%%reversible {flags}\ny += 1.0\nv += u\n")
        message = fails_at(ran, 3, "v += u", 5, error="ReversibilityError")
        assert "notebook variables `v` and `u` share memory" in message
        assert "`v = v.copy()`" in message
        ran = run(ip, f"%%reversible {flags}\nw[0] += v[2]\n")
        assert "notebook variables `w` and `v` share memory" in fails_at(ran, 2, "w[0] += v[2]", 8)
    assert_unchanged(ip, before)


def test_arrays_the_cell_only_reads_may_share_memory_or_be_read_only(ip):
    run_ok(ip, "r = np.arange(3.0)\ns = r\nro = np.ones(2)\nro.flags.writeable = False\ny = 0.0")
    run_ok(ip, "%%reversible\ny += r[2] * s[1] + ro[0]\n")
    assert ip.user_ns["y"] == 3.0
    ran = run(ip, "%%reversible --inverse\ny += 1.0\nro[0] += 1.0\n")
    message = fails_at(ran, 3, "ro[0] += 1.0", 0, error="ReversibilityTypeError")
    assert "notebook variable `ro` is a read-only array" in message
    assert ip.user_ns["y"] == 3.0 and not ip.user_ns["ro"].flags.writeable


@pytest.mark.parametrize("flags", ["--inverse", "--no-jit --inverse", "--unchecked"])
def test_an_unsupported_variable_type_is_named_at_its_first_use(ip, flags):
    run_ok(ip, "c = np.zeros(3, dtype=np.float32)\ny = 0.0")
    ran = run(ip, f"%%reversible {flags}\ny += 1.0\ny += c[0]\n")
    message = fails_at(ran, 3, "y += c[0]", 5, error="ReversibilityTypeError")
    assert message.startswith("ReversibilityTypeError: notebook variable `c`: expected")
    assert ip.user_ns["y"] == 0.0


@pytest.mark.parametrize("body, line, text, caret, says", [
    ("  y += 1.0\n", 2, "  y += 1.0", 2, "unexpected indent"),
    ("y += 1.0\n    y += 2.0\n", 3, "    y += 2.0", 4, "unexpected indent"),
    ("\ty += 1.0\n", 2, "\ty += 1.0", 1, "unexpected indent"),
    ("if y > 0.0:\ny += 1.0\n", 3, "y += 1.0", 0,
     "expected an indented block after 'if' statement on line 2"),
    ("if y > 0.0:\n    y += 1.0\n  y -= 1.0\n", 4, "  y -= 1.0", 2, "unindent does not match"),
])
def test_an_indentation_error_points_at_the_line_s_first_character(ip, body, line, text, caret, says):
    run_ok(ip, "y = 0.0")
    ran = run(ip, "%%reversible\n" + body)
    message = fails_at(ran, line, text, error="ReversibilitySyntaxError")
    assert says in message
    err = ran.error
    assert err.lineno == line and err.offset == caret + 1
    assert err.end_offset is None or err.end_offset >= err.offset


@pytest.mark.parametrize("body, line, col", [
    ("y += 1.0\x00\n", 2, 8),
    ("y += 1.0\ny += \x002.0\n", 3, 5),
    ("\x00", 2, 0),
    ("def f(y):\n    y += 1.0  # \x00\n", 3, 16),
])
def test_a_nul_byte_is_located(ip, body, line, col):
    run_ok(ip, "y = 0.0")
    ran = run(ip, "%%reversible\n" + body)
    assert not ran.success and isinstance(ran.error, revbench.ReversibilitySyntaxError)
    assert (ran.error.lineno, ran.error.offset) == (line, col + 1)
    assert f"Cell In[{ran.number}], line {line}" in ran.out and "NUL character" in ran.out
    assert "Traceback" not in ran.out and ip.user_ns["y"] == 0.0


def test_a_syntax_error_mentioning_a_line_counts_cell_lines(ip):
    ran = run(ip, "%%reversible\ny += (1.0\n\n")
    assert not ran.success and ran.error.lineno == 2 and "line 1" not in ran.error.msg


# --------------------------------------------------------------------------- #
# 14. runtime errors: the cell line and a caret
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("flags", ["", "--no-jit"])
def test_a_runtime_error_shows_the_line_and_a_caret_under_what_it_names(ip, flags):
    run_ok(ip, "y = 1.0\nx = 0.0\na = np.array([1.0, 2.0])")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\na[0] += 5.0\ny += 1.0\ny *= x\n")
    message = fails_at(ran, 4, "y *= x", 5, error="ReversibilityError")
    assert "`*=` by `x`: the operand is zero" in message
    ran = run(ip, f"%%reversible {flags}\nfor i in range(2):\n    a[i] += 1.0\n"
                  "    assert a[i] < 2.5, 'too big'\n")
    assert fails_at(ran, 4, "    assert a[i] < 2.5, 'too big'", 4,
                    error="AssertionError").endswith("too big: `a[i] < 2.5`")
    assert_unchanged(ip, before)


@pytest.mark.parametrize("flags", ["", "--no-jit"])
def test_a_dirty_ancilla_gets_the_inverse_updates_as_its_fix(ip, flags):
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run(ip, f"%%reversible {flags}\nt = 0.0\nt += x * x\nt *= x\ny += t\ndel t\n")
    message = fails_at(ran, 6, "del t", 4, error="ReversibilityError")
    assert message.endswith("to fix it, undo the updates of `t` after its last use and before "
                            "`del t`: `t /= x`; `t -= x * x` (or compute it in a `with routine:` "
                            "block and undo that with `~routine`)")
    # updates the advice cannot read off the block: the general advice
    ran = run(ip, f"%%reversible {flags}\nt = 0.0\nfor i in range(2):\n    t += x\ny += t\ndel t\n")
    assert "undo its updates in reverse order" in fails_at(ran, 6, "del t", 4)
    assert ip.user_ns["y"] == 0.0


@pytest.mark.parametrize("flags, update", [("", "y += 5.0"), ("--no-jit", "y += 5.0"),
                                           ("--inverse", "y -= 5.0")])
def test_a_branch_that_changes_its_own_condition_gets_a_postcondition_as_its_fix(ip, flags, update):
    run_ok(ip, "y = 0.0")
    ran = run(ip, f"%%reversible {flags}\nif y < 1.0:\n    {update}\n")
    message = fails_at(ran, 2, "if y < 1.0:", 3, error="ReversibilityError")
    assert "the branch changes `y`, which its condition reads: to fix it, write " \
           "`if (y < 1.0, POST):` with a POST that is true after the branch exactly when " \
           "`y < 1.0` was true before it" in message
    run_ok(ip, "y = 0.0")
    ran = run(ip, "%%reversible\nif (y < 1.0, y < 2.0):\n    y += 5.0\n")
    assert "correct the postcondition" in fails_at(ran, 2, "if (y < 1.0, y < 2.0):")
    run_ok(ip, "%%reversible\nif (y < 1.0, y >= 5.0):\n    y += 5.0\n")
    assert ip.user_ns["y"] == 5.0


# --------------------------------------------------------------------------- #
# 17. compiled code: the line found by a replay; calls from other cells
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("flags", ["", "--no-jit", "--loss y"])
def test_an_index_out_of_range_under_numba_is_shown_at_its_line(ip, flags):
    run_ok(ip, "a = np.array([1.0, 2.0, 3.0])\ny = 0.0\nn = 5")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\ny += 1.0\nfor i in range(len(a)):\n    a[i] += 1.0\n"
                  "y += a[n]\n")
    message = fails_at(ran, 5, "y += a[n]", 0, error="IndexError")
    assert "index 5 is out of bounds for axis 0 with size 3" in message
    assert "--no-jit to see the line" not in message
    assert_unchanged(ip, before)


def test_the_replay_works_on_copies_and_runs_once(ip, monkeypatch, untiered):
    run_ok(ip, "a = np.array([1.0, 2.0, 3.0])\nkeep = a\ny = 0.0")
    replays = []
    real = cell_module.CellProgram._replay

    def spy(self, args, inverse):
        out = real(self, args, inverse)
        # the replay ran `a[i] *= 2.0` on a copy: the notebook's array is as it was
        replays.append(ip.user_ns["a"].copy())
        return out

    monkeypatch.setattr(cell_module.CellProgram, "_replay", spy)
    ran = run(ip, "%%reversible\nfor i in range(4):\n    a[i] *= 2.0\n    y += a[i]\n")
    fails_at(ran, 3, "    a[i] *= 2.0", error="IndexError")
    assert len(replays) == 1
    np.testing.assert_array_equal(replays[0], [1.0, 2.0, 3.0])
    assert ip.user_ns["a"] is ip.user_ns["keep"]
    np.testing.assert_array_equal(ip.user_ns["a"], [1.0, 2.0, 3.0])
    assert ip.user_ns["y"] == 0.0


def test_a_replay_that_would_take_too_long_falls_back_to_the_hint(ip, monkeypatch, untiered):
    monkeypatch.setattr(cell_module, "REPLAY_SECONDS", 0.0)
    run_ok(ip, "a = np.zeros(3)\ny = 0.0")
    ran = run(ip, "%%reversible\nfor i in range(100000):\n    y += 1.0\ny += a[7]\n")
    assert not ran.success and isinstance(ran.error, IndexError)
    assert ran.lines == ["IndexError: index is out of bounds (compiled code does not know its lines: "
                         "run it with --no-jit to see the line)"]
    assert ip.user_ns["y"] == 0.0


def test_an_error_in_a_function_of_another_cell_shows_the_calling_lines(ip):
    defs = run_ok(ip, """%%reversible
def bump(a, i):
    a[i] += 1.0

def twice(a, i):
    bump(a, i)
    bump(a, i)

def leaky(y, x):
    s = 0.0
    s += x
    y += s
    del s
""")
    run_ok(ip, "a = np.zeros(3)\nn = 4\ny = 0.0\nx = 2.0")
    before = snapshot(ip)
    for flags in ("", "--no-jit"):
        ran = run(ip, f"%%reversible {flags}\ny += 1.0\ntwice(a, n)\n")
        assert ran.lines[:9] == [
            f"Cell In[{ran.number}], line 3", "    twice(a, n)", "    ^",
            f"  Cell In[{defs.number}], line 6", "    bump(a, i)", "    ^",
            f"  Cell In[{defs.number}], line 3", "    a[i] += 1.0", "    ^"]
        assert ran.lines[9].startswith("IndexError: index 4 is out of bounds")
        assert ran.lines[9].endswith("(in reversible function bump)")
        assert len(ran.lines) == 10 and "Traceback" not in ran.out
        ran = run(ip, f"%%reversible {flags}\ny += x\nx += leaky(y, x) if False else 0.0\n")
        assert not ran.success  # (a call is a statement: static error, no crash)
        ran = run(ip, f"%%reversible {flags} --inverse\ny -= x\nleaky(y, x)\n")
        assert ran.lines[:6] == [
            f"Cell In[{ran.number}], line 3", "    leaky(y, x)", "    ^",
            f"  Cell In[{defs.number}], line 10", "    s = 0.0", "    ^"]
        assert "(in reversible function leaky, running its inverse)" in ran.lines[-1]
    assert_unchanged(ip, before)


def test_a_call_in_a_loop_points_at_the_call_with_a_caret(ip):
    defs = run_ok(ip, "%%reversible\ndef f(a, i):\n    a[i] += 1.0\n")
    run_ok(ip, "a = np.zeros(2)\ny = 0.0")
    ran = run(ip, "%%reversible\nfor k in range(3):\n    y += 1.0\n    m = k + 0\n    f(a, m)\n"
                  "    del m\n")
    assert ran.lines[:6] == [f"Cell In[{ran.number}], line 5", "    f(a, m)", "    ^",
                             f"  Cell In[{defs.number}], line 3", "    a[i] += 1.0", "    ^"]
    np.testing.assert_array_equal(ip.user_ns["a"], [0.0, 0.0])


# --------------------------------------------------------------------------- #
# 15. `--inverse` on a def cell; `~f(...)` in a Python cell
# --------------------------------------------------------------------------- #

POLY = "%%reversible --no-jit\ndef poly(y, x):\n    y += 3.0 * x * x\n"


def test_inverse_on_a_def_cell_hints_the_python_spelling(ip):
    ran = run(ip, POLY.replace("--no-jit", "--no-jit --inverse"))
    assert ran.lines == ["UsageError: --inverse applies to a cell program (plain statements); this "
                         "cell defines functions: run a function backwards with (~f)(...) or "
                         "f.inverse(...)"]
    assert "poly" not in ip.user_ns


@pytest.mark.parametrize("source, text, args", [
    ("~poly(y, a)", "~poly(y, a)", "y, a"),
    ("r = ~poly(y, a)", "~poly(y, a)", "y, a"),
    ("out = [~poly(1.0, float(i)) for i in range(2)]", "~poly(1.0, float(i))", "1.0, float(i)"),
    ("~poly(*[y, a])", "~poly(*[y, a])", "*[y, a]"),
    ("def g():\n    return ~poly(y, a)\ng()", "~poly(y, a)", "y, a"),
])
def test_tilde_call_of_a_reversible_function_explains_the_fix_and_runs_nothing(ip, source, text, args):
    run_ok(ip, POLY)
    run_ok(ip, "y = np.zeros(2)\na = np.array([1.0, 2.0])")  # arrays: a forward run would show
    before = snapshot(ip)
    ran = run(ip, source)
    assert not ran.success and isinstance(ran.error, TypeError)
    assert ran.lines[-1] == (
        f"TypeError: `{text}` means `~(poly({args}))` in Python: it would run `poly` forward and "
        f"then apply `~` to the tuple it returns. To run `poly` backwards, write `(~poly)({args})` "
        f"(or `poly.inverse({args})`). Nothing was run")
    assert "magic.py" not in ran.out and "refuse" not in ran.out
    assert "r" not in ip.user_ns and "out" not in ip.user_ns
    assert_unchanged(ip, before)


def test_tilde_call_of_anything_else_is_python_s(ip):
    run_ok(ip, POLY)
    ran = run_ok(ip, "def g(v):\n    return v + 1\n(~g(1), ~abs(-3), ~(g)(2), (~poly)(12.0, 2.0))")
    assert ran.result.result == (-3, -4, -4, (0.0, 2.0))
    ran = run(ip, "~str(1)")
    assert not ran.success and "bad operand type for unary ~: 'str'" in ran.out


def test_tilde_calls_inside_reversible_code_of_a_python_cell_are_the_language_s(ip):
    """``@reversible`` reads the cell's text, not the rewritten code: ``~g(...)`` there is an inverse call."""
    ran = run_ok(ip, """from revbench import reversible

@reversible(backend="python")
def g(y, x):
    y += x

@reversible(backend="python")
def h(y, x):
    g(y, x)
    ~g(y, x)
    ~g(y, x)

h(0.0, 2.0), (~h)(-2.0, 2.0)
""")
    assert ran.result.result == ((-2.0, 2.0), (0.0, 2.0))


def test_tilde_of_an_inverse_view_call_is_refused_too(ip):
    run_ok(ip, POLY)
    ran = run(ip, "~poly.inverse(3.0, 1.0)")
    assert not ran.success and "write `(~poly.inverse)(3.0, 1.0)`" in ran.out


def test_the_tilde_rewriting_is_registered_once_and_removed(shell):
    def ours():
        return [t for t in shell.ast_transformers if magic_module._is_invert_call(t)]

    assert len(ours()) == 1
    shell.run_line_magic("reload_ext", "revbench")
    assert len(ours()) == 1
    shell.run_line_magic("unload_ext", "revbench")
    try:
        assert ours() == []
    finally:
        shell.run_line_magic("load_ext", "revbench")
    assert len(ours()) == 1


# --------------------------------------------------------------------------- #
# 18. flags: --help, no abbreviations, --loss in the magic's terms, literal zeros
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("flag", ["--help", "-h", "--no-jit --help"])
def test_help_prints_the_usage_and_runs_nothing(ip, flag):
    run_ok(ip, "y = 0.0")
    ran = run_ok(ip, f"%%reversible {flag}\ny += 1.0\n")
    assert ran.lines[0] == ("usage: %%reversible [--no-jit] [--unchecked] [--show KIND] [--debug] "
                            "[--max-steps N] [--export PATH] [--loss NAME] [--inverse] "
                            "[--expect-error]")
    for name in ("--no-jit", "--unchecked", "--show KIND", "--debug", "--loss NAME", "--inverse"):
        assert f"  {name}" in ran.out
    assert ip.user_ns["y"] == 0.0


def test_a_loss_that_is_the_cells_own_ancilla_says_so(ip):
    run_ok(ip, "import numpy as np\nx = np.array([1.0, -2.0, 3.0])")
    ran = run(ip, "%%reversible --loss npos\nnpos = 0.0\nfor i in range(3):\n"
                  "    npos += x[i] * x[i]\nnpos -= np.dot(x, x)\ndel npos\n")
    assert not ran.success and len(ran.lines) == 1
    assert "`npos` is the cell's own variable" in ran.out
    assert "the loss must be a notebook variable" in ran.out
    assert "does not use a variable" not in ran.out


def test_the_del_after_a_routines_uncompute_is_named(ip):
    run_ok(ip, "y = 0.0\nx = 2.0")
    ran = run(ip, "%%reversible\nwith routine:\n    t = 0.0\n    t += x * x\ny += t\n"
                  "~routine\ndel t\n")
    assert not ran.success
    assert "`t` was already deallocated by `~routine` (line 6)" in ran.out
    assert "remove this `del t`" in ran.out
    assert ip.user_ns["y"] == 0.0


@pytest.mark.parametrize("cell", ["%%reversible --help", "%%reversible -h\n",
                                  "  %%reversible --unchecked --help  "])
def test_help_alone_in_a_cell_prints_the_usage(ip, cell):
    """IPython refuses a cell magic with an empty body before calling it ("the cell body is
    empty"): the help cell is let through."""
    ran = run_ok(ip, cell)
    assert ran.lines[0].startswith("usage: %%reversible [--no-jit]")
    assert "cell body is empty" not in ran.out


def test_an_empty_cell_without_help_is_still_ipythons_error(ip):
    ran = run(ip, "%%reversible --unchecked")
    assert not ran.success and "cell body is empty" in ran.out


@pytest.mark.parametrize("line, near", [
    ("--los y", "--los: did you mean --loss?"),
    ("--no-ji", "--no-ji: did you mean --no-jit?"),
    ("--inv", "--inv: did you mean --inverse?"),
    ("--unchecked --sho forward", "--sho: did you mean --show?"),
    ("--lost y", "--lost: did you mean --loss?"),
    ("--bogus", None),
])
def test_flags_are_not_abbreviated(ip, line, near):
    run_ok(ip, "y = 0.0")
    ran = run(ip, f"%%reversible {line}\ny += 1.0\n")
    assert not ran.success and len(ran.lines) == 1
    assert ran.lines[0].startswith("UsageError: unrecognized arguments: ")
    if near is None:
        assert "did you mean" not in ran.out
    else:
        assert near in ran.out
    assert ip.user_ns["y"] == 0.0


@pytest.mark.parametrize("spec, says", [
    ("n", "--loss n: `n` is an int (3), and a gradient needs a float loss: --loss NAME "
          "differentiates a float variable, or one element of a float array (`--loss r[3]`)"),
    ("flag", "--loss flag: `flag` is a bool (True)"),
    ("k", "--loss k: `k` is an array of int64"),
    ("r", "--loss r: `r` is an array (shape (3,)); the loss is one number: name one element, "
          "such as `--loss r[0]`"),
    ("A", "such as `--loss A[0, 0]`"),
    ("r[7]", "--loss r[7]: index 7 is out of range for `r` of shape (3,)"),
    ("r[-4]", "index -4 is out of range"),
    ("A[1]", "--loss A[1]: `A` has 2 dimension(s), so the element needs 2 index(es)"),
    ("y[0]", "--loss y[0]: `y` is a scalar, not an array: write `--loss y`"),
    ("r[]", "the index must be integers"),
    ("r[x]", "write a variable name, or one element"),
])
def test_a_bad_loss_is_told_in_the_magic_s_spelling(ip, spec, says):
    run_ok(ip, "n = 3\nflag = True\nk = np.arange(3)\nr = np.zeros(3)\nA = np.zeros((2, 2))\ny = 0.0")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible --no-jit --loss {spec}\ny += r[0] + A[0, 0]\nn += 1\n"
                  "flag ^= True\nk[0] += 1\n")
    assert not ran.success and len(ran.lines) == 1 and ran.lines[0].startswith("UsageError: ")
    assert says in ran.out
    assert "loss=(" not in ran.out  # the Python API's spelling
    assert_unchanged(ip, before)


@pytest.mark.parametrize("spec, grad_a", [("A[1, 0]", [[0.0, 0.0], [2.0, 0.0]]),
                                          ("A[1,0]", [[0.0, 0.0], [2.0, 0.0]]),
                                          ("A[-1, 0]", [[0.0, 0.0], [2.0, 0.0]])])
def test_an_element_loss_may_be_written_with_spaces_and_negative_indices(ip, spec, grad_a):
    run_ok(ip, "A = np.ones((2, 2))")
    ran = run_ok(ip, f"%%reversible --no-jit --loss {spec}\nA[1, 0] *= 2.0\n")
    np.testing.assert_array_equal(ran.result.result["A"], grad_a)


@pytest.mark.parametrize("statement, caret", [
    ("y *= 0.0", 5), ("y *= 0", 5), ("y *= -0.0", 5), ("y /= 0.0", 5), ("y /= -0", 5),
    ("a[1] *= 0.0", 8), ("a *= 0.0", 5), ("y *= (0.0)", 6), ("y *= False", 5),
])
@pytest.mark.parametrize("flags", ["", "--no-jit --unchecked"])
def test_a_literal_zero_factor_is_a_static_error(ip, statement, caret, flags):
    run_ok(ip, "y = 1.0\na = np.ones(2)")
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\ny += 1.0\n{statement}\n")
    message = fails_at(ran, 3, statement, caret, error="ReversibilitySyntaxError")
    verb = "multiplying" if "*=" in statement else "dividing"
    assert f"{verb} by zero cannot be undone: `{statement}`" in message
    assert isinstance(ran.error, revbench.ReversibilitySyntaxError)
    assert_unchanged(ip, before)


def test_a_literal_zero_factor_in_a_def_and_nested_blocks(ip):
    ran = run(ip, "%%reversible\ndef f(y, x):\n    if x > 0.0:\n        with inverted:\n"
                  "            y /= 0.0\n")
    assert "dividing by zero cannot be undone" in fails_at(ran, 5, "            y /= 0.0", 17)
    assert "f" not in ip.user_ns
    with pytest.raises(revbench.ReversibilitySyntaxError, match="multiplying by zero") as info:
        revbench.define("def g(y, a):\n    for i in range(2):\n        a[i] *= -0\n", {})
    assert (info.value.lineno, info.value.offset) == (3, 17)
    run_ok(ip, "%%reversible\ndef h(y, x):\n    y *= 0.5\n    y /= x + 0.0\n")  # not literal zeros


# --------------------------------------------------------------------------- #
# The class, not the examples: whatever a cell gets wrong, the same promises hold
# --------------------------------------------------------------------------- #

SETUP = ("y = 1.0\nx = 2.0\nz = 0.0\nn = 3\nk = 0\nflag = True\na = np.array([1.0, 2.0, 3.0])\n"
         "b = np.zeros(3)\nA = np.ones((2, 2))\nbig = 2**64\nalias = a[1:]\nf32 = np.ones(2, np.float32)")

BAD_CELLS = [
    "y += x\ny += y",
    "x = 3.0",
    "y += undefined_thing",
    "t = 0.0\nt += x\ndel t",
    "if y > 0.0:\n    y -= 5.0\n",
    "y *= z",
    "y /= z",
    "n /= 2",
    "n += 0.5",
    "a[5] += 1.0",
    "for i in range(4):\n    b[i] += a[i]",
    "y += a[n]",
    "n += big",
    "a[0] += alias[0]",
    "y += f32[0]",
    "assert y < 0.0, 'no'",
    "m = n - 9\nt = np.zeros(m)\ndel t\nm -= n - 9\ndel m",
    "n += 5 // k",
    "y *= 0.0",
    "  y += 1.0",
    "y += 1.0\x00",
    "with routine:\n    y += 1.0",
    "flag += 1",
    "while (y < 10.0, y > 0.5):\n    y += 1.0",
    "for i in range(n):\n    n += 1",
    "a[n - 3] += a[0]",
    "A[0] += a",
]


@pytest.mark.parametrize("flags", ["", "--no-jit", "--inverse", "--unchecked --no-jit"])
@pytest.mark.parametrize("body", BAD_CELLS, ids=range(len(BAD_CELLS)))
def test_a_failing_cell_says_where_in_cell_terms_and_changes_nothing(ip, flags, body):
    run_ok(ip, SETUP)
    before = snapshot(ip)
    ran = run(ip, f"%%reversible {flags}\n{body}\n")
    if ran.success:  # unchecked code may accept a mistake; an inverse may be fine
        assert "--unchecked" in flags or "--inverse" in flags or body.startswith("a[n - 3]"), ran.out
        return
    for internal in _INTERNALS:
        assert internal not in ran.out, (internal, ran.out)
    lines = ran.lines
    assert re.match(r"^(\w+Error|UsageError): \S", lines[-1]), ran.out
    located = [i for i, s in enumerate(lines) if re.fullmatch(r"\s*Cell In\[\d+\], line \d+", s)]
    if located:  # every shown line has its text and a caret under it
        for i in located:
            assert lines[i + 1].startswith("    ") and set(lines[i + 2].strip()) == {"^"}, ran.out
    else:
        assert len(lines) == 1, ran.out
    assert_unchanged(ip, before)


# --------------------------------------------------------------------------- #
# Errors of revbench's Python API in plain Python cells: the user's lines only
# --------------------------------------------------------------------------- #
def test_a_python_cell_calling_a_function_on_wrong_types_shows_the_calls(ip):
    run_ok(ip, "%%reversible\ndef h(y, x):\n    y += x * 2.0\n")
    run_ok(ip, "%%reversible\ndef f(y, x):\n    h(y, x)\n")
    ran = run(ip, "v = np.ones(3)\nf(1.0, v)")
    assert not ran.success and isinstance(ran.error, revbench.ReversibilityTypeError)
    assert "Traceback" not in ran.out and "revbench/" not in ran.out
    lines = [ln.strip() for ln in ran.lines]
    assert lines[0] == f"Cell In[{ran.number}], line 2"
    assert lines[1:3] == ["f(1.0, v)", "^"]
    assert lines[3] == f"Cell In[{ran.number - 1}], line 3"  # the call in f
    assert lines[4] == "h(y, x)"
    assert lines[6] == f"Cell In[{ran.number - 2}], line 3"  # the failing line in h
    assert lines[-1].startswith("ReversibilityTypeError: `x` is an array")
    assert lines[-1].endswith("(in reversible function h)")


def test_a_python_cell_whose_call_fails_a_check_shows_the_failing_line(ip):
    run_ok(ip, "import revbench\n@revbench.reversible\ndef g(y, x):\n    y *= x\n")
    run_ok(ip, "def wrap(a):\n    return (~g)(1.0, a)\n")
    ran = run(ip, "wrap(0.0)")
    assert isinstance(ran.error, revbench.ReversibilityError)
    assert [ln.strip() for ln in ran.lines[1::3][:3]] == ["wrap(0.0)", "return (~g)(1.0, a)", "y *= x"]
    assert ran.lines[-1].startswith("ReversibilityError: `/=` by `x`: the operand is zero")
    assert "running its inverse" in ran.lines[-1]


def test_revbench_api_misuse_in_a_python_cell_shows_no_internal_frames(ip):
    run_ok(ip, "import revbench\n@revbench.reversible\ndef g(y, x):\n    y *= x\n")
    for source, error in [("revbench.grad(g, loss='q')", "ValueError: loss 'q' is not an argument"),
                          ("g(1.0, [1])", "ReversibilityTypeError: argument `x` of g"),
                          ("revbench.check_grad(g, loss='y', eps=0)", "ValueError")]:
        ran = run(ip, source)
        assert not ran.success
        assert "revbench/" not in ran.out, ran.out  # no frame of revbench's files
        assert source in ran.out and ran.lines[-1].startswith(error), ran.out


def test_other_errors_in_python_cells_keep_their_traceback(ip):
    ran = run(ip, "def bad():\n    return int('x')\nbad()")
    assert isinstance(ran.error, ValueError) and "Traceback" in ran.out
    assert "return int('x')" in ran.out  # the user's inner frame is kept


def _interrupting(x):
    raise KeyboardInterrupt  # Ctrl-C, as it reaches Python code the cell runs


def test_ctrl_c_is_told_in_one_line_with_the_notebook_unchanged(ip):
    """(Its output was a traceback through revbench's magic, cell and function modules.)"""
    revbench.register(_interrupting, partials=(lambda x: 0.0,))
    ip.user_ns["_interrupting"] = _interrupting
    run_ok(ip, "a = np.array([1.0, 2.0])\ny = 0.0")
    ran = run(ip, "%%reversible --no-jit\na[0] += 5.0\ny += _interrupting(a[1])\n")
    assert not ran.success
    assert ran.out.strip().splitlines()[-1] == (
        "KeyboardInterrupt: the cell was interrupted; every notebook variable is as it was "
        "before it"), ran.out
    assert "magic.py" not in ran.out and "function.py" not in ran.out, ran.out
    assert ip.user_ns["a"].tolist() == [1.0, 2.0] and ip.user_ns["y"] == 0.0


def test_a_cell_function_called_from_python_names_its_cell_as_ipython_does(ip):
    """An error inside a function a ``%%reversible`` cell defined, called from plain Python,
    names the cell ``Cell In[n]``, never revbench's file name for it."""
    ran = run(ip, "%%reversible\ndef total(s, x):\n    for i in range(len(x) + 1):\n"
                  "        s += x[i]\n")
    number = ran.number
    ran = run(ip, "import numpy as np\ntotal(0.0, np.array([1.0, 2.0, 3.0]))")
    assert not ran.success
    assert f"in reversible function total, Cell In[{number}], line 4: s += x[i]" in ran.out, \
        ran.out
    assert "revbench-cell" not in ran.out, ran.out


def test_flags_given_twice_and_max_steps_without_debug_are_usage_errors(ip):
    run_ok(ip, "y, x = 1.0, 2.0")
    ran = run(ip, "%%reversible --loss y --loss x\ny += x * x\n")
    assert not ran.success and "--loss is given twice" in ran.out, ran.out
    ran = run(ip, "%%reversible --max-steps 50\ny += x\n")
    assert not ran.success and "use it with --debug" in ran.out, ran.out
    assert ip.user_ns["y"] == 1.0


def test_a_call_with_an_argument_too_many_says_so_before_aliasing(ip):
    """``add(y, x, x)`` for ``add(y, x)``: the count is the mistake, not the repeated ``x``."""
    run_ok(ip, "y, x = 0.0, 2.0")
    run_ok(ip, "%%reversible\ndef add(y, x):\n    y += x\n")
    ran = run(ip, "%%reversible\nadd(y, x, x)\n")
    assert not ran.success
    assert "`add` takes 2 arguments (y, x) but this call passes 3" in ran.out, ran.out
    assert "passed twice" not in ran.out and ip.user_ns["y"] == 0.0

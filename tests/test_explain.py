"""``f.explain()`` and ``%%reversible --show lines``: each source line beside its inverse
and adjoint, printed from the compiler's own IR.

The rows are checked against hand-derived expectations (the inverse and adjoint rules of
docs/language.md), and -- so that a printer slip cannot hide -- the inverse column is
turned back into a reversible function whose run must equal ``~f``'s, on hand-written
programs and on random ones (tests/program_gen.py).
"""

# ruff: noqa: F811  (the shell and ip fixtures come from ipython_harness)
from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path

import numpy as np
import program_gen
import pytest
from hypothesis import HealthCheck, assume, given, settings

import revbench
from revbench.debugging.explain import CSS, Explanation
from revbench.lang import ir
from revbench.lang.pretty import Printer, readable_name

NS = {"np": np, "math": math}

POLY = """
def poly(y, x):
    t = 0.0
    t += x * x
    y += 3.0 * t + x
    t -= x * x
    del t
"""

CONTROL = """
def body(y, x, a, n, k):
    with routine:
        t = 0.0
        t += x * x
    y += t
    ~routine
    for i in range(len(a)):
        a[i] *= x
    a += x * y
    if (y > 0, y > 0):
        y += np.sin(x)
    elif (x > 5.0, x > 5.0):
        y -= x
    else:
        y -= x ** 2
    poly(y, x)
    s = np.sum(a * a)
    y += s
    del s
    while (n > 0, k > 0):
        n -= 1
        k += 1
        y += x
    with inverted:
        y -= 2.0 * x
"""

#: what generated code holds and the table must not: its names and its check helpers
PLUMBING = re.compile(r"_rb_|_Rb|CheckFailed|_RB_MODULE|atol|rtol|shift_failed")


def define(source: str, **options) -> dict:
    return revbench.define(source, dict(NS), backend="python", **options)


def nfc(text: str) -> str:
    """Text as this file spells it: ``ȳ`` is one character here, ``y`` and a combining
    macron in the printer's output (which renders the same)."""
    return unicodedata.normalize("NFC", text)


def cells(e: Explanation) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
    return {r.line: (tuple(nfc(t) for t in r.inverse), tuple(nfc(t) for t in r.adjoint))
            for r in e.rows}


# --------------------------------------------------------------------------- #
# The rows
# --------------------------------------------------------------------------- #


def test_poly_rows_are_the_inverse_and_the_adjoint_of_each_line():
    poly = define(POLY)["poly"]
    e = poly.explain(0.0, 2.0)
    assert [(r.line, r.source) for r in e.rows] == [
        (3, "t = 0.0"), (4, "t += x * x"), (5, "y += 3.0 * t + x"), (6, "t -= x * x"), (7, "del t")]
    assert cells(e) == {
        3: (("del t",), ("del t̄",)),
        4: (("t -= x * x",), ("x̄ += t̄·x", "x̄ += t̄·x")),
        5: (("y -= 3.0 * t + x",), ("t̄ += ȳ·3.0", "x̄ += ȳ")),
        # t̄ is zero there: the compiled sweep drops the adjoint of line 6, so does the table
        6: (("t += x * x",), ()),
        7: (("t = 0.0",), ("t̄ = 0.0",)),
    }
    # the inverse runs the rows bottom to top
    assert [s.text for s in e.inverse_steps] == [
        "t = 0.0", "t += x * x", "y -= 3.0 * t + x", "t -= x * x", "del t"]
    assert [s.row for s in e.inverse_steps] == [7, 6, 5, 4, 3]


def test_the_adjoint_rows_add_up_to_the_gradient():
    """Line 5 gives x̄ += ȳ and t̄ += 3ȳ, line 4 x̄ += 2x·t̄: dy/dx = 1 + 6x, as grad says."""
    poly = define(POLY)["poly"]
    assert revbench.grad(poly, loss="y")(0.0, 2.0)[1] == pytest.approx(1 + 6 * 2.0)


def test_control_flow_rows():
    fns = define(POLY + CONTROL)
    e = fns["body"].explain(0.0, 2.0, np.arange(3.0), 3, 0, loss="y")
    c = cells(e)
    text = {r.line: r.source for r in e.rows}
    line = {src.strip(): ln for ln, src in text.items()}
    # routine: `with routine:` undone by `~routine`; `~routine` recomputes, indented below it
    assert c[line["with routine:"]][0] == ("~routine",)
    assert c[line["t = 0.0"]][0] == ("del t",)
    assert c[line["~routine"]][0] == ("with routine:", "    t = 0.0", "    t += x * x")
    # a loop walks its range backwards, its body inverted; the whole-array update's
    # adjoint is a loop over its elements, in its own row
    assert c[line["for i in range(len(a)):"]] == (("for i in reversed(range(len(a))):",),
                                                   ("for i in reversed(range(len(a))):",))
    assert c[line["a[i] *= x"]] == (("a[i] /= x",), ("x̄ += a[i]·ā[i]", "ā[i] *= x"))
    assert c[line["a += x * y"]] == (("a -= x * y",), (
        "for k₁ in range(a.shape[0]):", "    x̄ += ā[k₁]·y", "    ȳ += ā[k₁]·x"))
    # if / elif / else: the conditions swapped (here each is its own postcondition)
    assert c[line["if (y > 0, y > 0):"]][0] == ("if y > 0:",)
    assert c[line["elif (x > 5.0, x > 5.0):"]][0] == ("elif x > 5.0:",)
    assert c[line["else:"]] == (("else:",), ("else:",))
    assert c[line["y += np.sin(x)"]] == (("y -= sin(x)",), ("x̄ += ȳ·cos(x)",))
    assert c[line["y -= x ** 2"]] == (("y += x ** 2",), ("x̄ -= ȳ·(2·x)",))
    # a call: ~f in the inverse, the callee's reverse sweep in the adjoint
    assert c[line["poly(y, x)"]] == (("~poly(y, x)",), ("reverse sweep of poly(y, x) with ȳ, x̄",))
    # a sum: its adjoint loops over the elements summed
    assert c[line["s = np.sum(a * a)"]] == (("del s",), (
        "for k₀ in range(a.shape[0]):", "    ā[k₀] += s̄·a[k₀]", "    ā[k₀] += s̄·a[k₀]", "del s̄"))
    assert c[line["del s"]] == (("s = np.sum(a * a)",), ("s̄ = 0.0",))
    # while (cond, post) becomes while (post, cond); ints carry no adjoint
    assert c[line["while (n > 0, k > 0):"]] == (("while (k > 0, n > 0):",),
                                                 ("while (k > 0, n > 0):",))
    assert c[line["n -= 1"]] == (("n += 1",), ())
    assert c[line["y += x"]] == (("y -= x",), ("x̄ += ȳ",))
    # `with inverted:` undone runs its block as written
    assert c[line["with inverted:"]][0] == ("# the block, as written:",)
    # (inverted, the block adds 2x to y: its adjoint is that of `y += 2.0 * x`)
    assert c[line["y -= 2.0 * x"]] == (("y -= 2.0 * x",), ("x̄ += ȳ·2.0",))
    assert e.adjoint_heading == "reverse sweep: ∂y/∂·"
    assert "x̄ is ∂y/∂x" in nfc(e.legend())


def test_no_plumbing_in_the_text_or_the_html():
    fns = define(POLY + CONTROL)
    for f, args in ((fns["poly"], (0.0, 2.0)), (fns["body"], (0.0, 2.0, np.arange(3.0), 3, 0))):
        e = f.explain(*args)
        for shown in (str(e), e._repr_html_(), repr(e)):
            assert PLUMBING.search(shown) is None, PLUMBING.search(shown)
        assert "~" + f.name in str(e)


def test_explain_without_arguments_uses_the_last_call_or_a_guess():
    poly = define(POLY)["poly"]
    guessed = poly.explain()
    assert guessed.signature == poly.explain(0.0, 2.0).signature
    k = define("def k(y, n):\n    y += n * 2\n")["k"]
    k(1, 2)  # ints: no gradient at all
    e = k.explain()
    assert e.rows[0].inverse == ("y -= n * 2",) and e.rows[0].adjoint == ()
    assert "nothing has a gradient" in e.adjoint_note and "No adjoint column" in str(e)
    assert (~poly).explain(0.0, 2.0).rows == poly.explain(0.0, 2.0).rows


def test_the_loss_names_the_adjoints():
    poly = define(POLY)["poly"]
    e = poly.explain(0.0, 2.0, loss="y")
    assert e.adjoint_heading == "reverse sweep: ∂y/∂·" and "(the sweep starts from ȳ = 1" in nfc(
        e.legend())
    r = define("def r(v, x):\n    v[1] += x * x\n")["r"].explain(np.zeros(3), 2.0, loss="v[1]")
    assert r.adjoint_heading == "reverse sweep: ∂v[1]/∂·"
    assert "x̄ is ∂v[1]/∂x" in nfc(r.legend()) and "from v̄[1] = 1" in nfc(r.legend())
    assert cells(r)[2] == (("v[1] -= x * x",), ("x̄ += v̄[1]·x", "x̄ += v̄[1]·x"))


def test_types_that_cannot_be_guessed_say_how_to_give_them():
    f = define("def f(s, x, idx):\n    for k in range(len(idx)):\n        s += x[idx[k]]\n")["f"]
    e = f.explain()
    assert e.rows[1].inverse == ("s -= x[idx[k]]",) and e.rows[1].adjoint == ()
    assert "pass example arguments, f.explain(...)" in e.adjoint_note
    e = f.explain(0.0, np.ones(3), np.array([2, 0]))
    assert e.adjoint_note == "" and nfc(e.rows[1].adjoint[0]) == "x̄[idx[k]] += s̄"


def test_unchecked_code_is_shown_as_it_runs():
    """Without checks, nothing reads an ancilla's uncomputation: the compiled inverse drops
    it, and so does the table."""
    src = "def f(y, x):\n    t = 0.0\n    t += 3.0 * x\n    y -= t\n    t -= 3.0 * x\n    del t\n"
    on, off = define(src)["f"].explain(0.0, 2.0), define(src, check=False)["f"].explain(0.0, 2.0)
    assert cells(on)[3][0] == ("t -= 3.0 * x",) and cells(off)[3][0] == ()
    assert "Unchecked code" in off.legend() and "Unchecked" not in on.legend()


def test_multi_line_statements_and_comments_keep_their_rows():
    f = define("def f(y, x):\n    # a comment\n    y += (x *\n          x)\n    y += x\n")["f"]
    e = f.explain(0.0, 1.0)
    assert [(r.line, r.source, r.inverse) for r in e.rows] == [
        (2, "# a comment", ()), (3, "y += (x *", ("y -= x * x",)), (4, "      x)", ()),
        (5, "y += x", ("y -= x",))]


def test_text_table_aligns_columns_despite_combining_bars():
    e = define(POLY)["poly"].explain(0.0, 2.0)
    lines = [re.sub("[\u0304\u0305]", "", ln) for ln in str(e).split("\n\n")[0].splitlines()]
    col = lines[0].index("reverse sweep")
    adjoint = [ln[col:] for ln in lines[2:]]
    assert adjoint == ["del t", "x += t·x", "x += t·x", "t += y·3.0", "x += y", "", "t = 0.0"]
    assert all(ln[col - 2:col] == "  " for ln in lines[2:] if len(ln) > col)


def test_html_follows_the_theme():
    """Every colour is a JupyterLab theme variable, and each fallback reads on a light and
    a dark background alike (a translucent grey or the surrounding text colour)."""
    html = define(POLY)["poly"].explain(0.0, 2.0)._repr_html_()
    assert html.startswith('<div class="rb-explain"><style>') and "<table" in html
    colours = re.findall(r"(?:color|background)\s*:\s*([^;]+);", CSS)
    assert colours
    for value in colours:
        value = value.strip()
        assert value in ("transparent", "inherit") or value.startswith("var(--jp-"), value
        fallback = value.split(",", 1)[1] if value.startswith("var(") else ""
        assert "#" not in fallback, value  # no fixed colour that vanishes on one theme
    assert "x̄ += t̄·x" in nfc(html) and "&lt;" not in html.split("<tbody>")[1].split("</tbody>")[0]


# --------------------------------------------------------------------------- #
# The inverse column is what ~f runs: rebuilt as code, it runs as ~f does
# --------------------------------------------------------------------------- #

_ROUTINE_HEADER = re.compile(r"(with routine( as \w+)?:|~\w+)$")
_REVERSED = re.compile(r"^for (\w+) in reversed\(range\((.*)\)\):$")
_SUB = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")


def inverse_as_code(e: Explanation, name: str) -> str:
    """The inverse column as a reversible function: blocks of routines flattened (a block
    runs its statements in order, which the steps already are), reversed ranges written
    with a negative step, generated names made identifiers."""
    out = [f"def {name}({', '.join(e.params)}):"]
    dropped: list[int] = []  # depths of the routine headers being flattened
    for step in e.inverse_steps:
        while dropped and step.depth <= dropped[-1]:
            dropped.pop()
        text = step.text
        if _ROUTINE_HEADER.fullmatch(text):
            dropped.append(step.depth)
            continue
        m = _REVERSED.match(text)
        if m:
            args = [a.strip() for a in _split_args(m.group(2))]
            start, stop, by = (["0", *args, "1"] if len(args) == 1 else
                               [*args, "1"] if len(args) == 2 else args)
            assert by.lstrip("-").isdigit() and int(by) != 0, text
            if int(by) > 0:  # the last element up to the start, downwards
                text = (f"for {m.group(1)} in range(({start}) + (({stop}) - ({start}) - 1) // {by} "
                        f"* {by}, ({start}) - 1, -{by}):")
            else:
                s = -int(by)
                text = (f"for {m.group(1)} in range(({start}) - (({start}) - ({stop}) - 1) // {s} "
                        f"* {s}, ({start}) + 1, {s}):")
        text = re.sub(r"([a-z])([₀-₉]+)", lambda g: f"{g.group(1)}_gen{g.group(2).translate(_SUB)}",
                      text)
        out.append("    " * (step.depth - len(dropped) + 1) + text)
    return "\n".join(out) + "\n"


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        cur += ch
    return [*parts, cur]


def same(got: tuple, want: tuple) -> None:
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_the_inverse_column_runs_as_the_inverse():
    fns = define(POLY + CONTROL)
    f = fns["body"]
    args = (0.5, 2.0, np.arange(3.0), 3, 0)
    out = f(*(a.copy() if isinstance(a, np.ndarray) else a for a in args))
    code = inverse_as_code(f.explain(*args), "body_inverse")
    g = revbench.define(code, {**NS, "poly": fns["poly"]}, backend="python")["body_inverse"]
    copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in out)
    same(g(*copies), (~f)(*out))


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(program_gen.programs())
def test_random_programs_inverse_column_runs_as_the_inverse(p):
    ns = dict(NS)
    fns = revbench.define(p.source, ns, backend="python")
    f = fns[p.name]
    try:
        out = f(*p.fresh_args())
    except (revbench.ReversibilityError, ArithmeticError, IndexError):
        assume(False)
    e = f.explain(*p.args)
    for shown in (str(e), e._repr_html_()):
        assert PLUMBING.search(shown) is None, shown
    # every line holding a statement has an inverse
    for s in f._program.ir.body:
        if s.loc.line:
            assert cells(e)[s.loc.line][0], (s.loc.line, str(e))
    code = inverse_as_code(e, "f_inverse")
    g = revbench.define(code, ns, backend="python", filename=f"<inverse of {p.name}>")["f_inverse"]
    want = (~f)(*(a.copy() if isinstance(a, np.ndarray) else a for a in out))
    got = g(*(a.copy() if isinstance(a, np.ndarray) else a for a in out))
    same(got, want)


# --------------------------------------------------------------------------- #
# The printer: Python's precedence, and the text parses back to the same IR
# --------------------------------------------------------------------------- #

EXPRESSIONS = [
    "3.0 * t + x", "(x + t) * 2.0", "x - (t - 1.0)", "x - t - 1.0", "x / (t * 2.0)", "-x ** 2",
    "(-x) ** 2", "x ** t ** 2.0", "(x ** t) ** 2.0", "-(x + t)", "sin(x) * cos(t) / (1.0 + x)",
    "x if t > 0 else -x", "(x if t > 0 else t) + 1.0", "a[i + 1] * a[i - 1]", "np.sum(a * a)",
    "np.dot(a, a)", "sum(a)", "np.max(a)", "max(x, t)", "len(a) * 1.0", "a.shape[0] * x",
    "x * -3.0", "1.0 if 0 < t <= x and not x > 2 or t == 1 else 2.0", "atan2(x, t) % 2.0",
    "x // 2.0 + 1j", "2 ** -x",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_printed_expressions_parse_back_to_the_same_ir(text):
    src = "def g(y, x, t, a, i):\n    y += {}\n"
    first = define(src.format(text))["g"]._program.ir.body[0].value
    printed = Printer().expr(first)
    again = define(src.format(printed))["g"]._program.ir.body[0].value
    assert again == first, (text, printed)


def test_expressions_print_as_written():
    for text in ("3.0 * t + x", "x - (t - 1.0)", "-x ** 2", "(-x) ** 2", "np.sum(a * a)"):
        value = define(f"def g(y, x, t, a):\n    y += {text}\n")["g"]._program.ir.body[0].value
        assert Printer().expr(value) == text


def test_readable_names():
    assert readable_name("_rb_adj_x") == "x̄"
    assert readable_name("_rb_adj_acc") == "a\u0305c\u0305c\u0305"
    assert readable_name("_rb_w12") == "k₁₂" and readable_name("_rb_v0") == "v₀"
    assert readable_name("_rb_adj__rb_g3") == "g\u0305\u2083\u0305"
    assert readable_name("x") == "x" and readable_name("rb_w1") == "rb_w1"
    assert nfc(Printer(times="·").expr(ir.BinOp("*", ir.Var("_rb_adj_y"), ir.Var("x")))) == "ȳ·x"


# --------------------------------------------------------------------------- #
# In IPython: %%reversible --show lines
# --------------------------------------------------------------------------- #

pytest.importorskip("IPython", reason="IPython is not installed: pip install -e '.[notebook]'")

from ipython_harness import ip, run, run_ok, shell  # noqa: E402, F401

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "notebook.md"


def test_show_lines_on_a_cell_program_shows_the_table_and_runs_the_cell(ip):
    run_ok(ip, "y = 0.0\nx = 2.0\na = np.array([1.0, 2.0])")
    ran = run_ok(ip, "%%reversible --no-jit --show lines --loss y\n"
                     "y += x * x\nfor i in range(len(a)):\n    a[i] *= x\n")
    assert len(ran.displayed) == 1
    data = ran.displayed[0].data
    assert "text/html" in data and "rb-explain" in data["text/html"]
    text = nfc(data["text/plain"])
    assert "reverse sweep: ∂y/∂·" in text and "~cell runs" in text
    rows = {ln.split()[0]: ln for ln in text.splitlines()[2:6] if ln.strip()}
    assert "y -= x * x" in rows["2"] and "x̄ += ȳ·x" in rows["2"]
    assert "for i in reversed(range(len(a))):" in rows["3"]
    assert PLUMBING.search(text) is None and PLUMBING.search(data["text/html"]) is None
    assert ip.user_ns["y"] == 4.0  # the cell ran
    np.testing.assert_array_equal(ip.user_ns["a"], [2.0, 4.0])
    assert set(ran.result.result) == {"y", "x", "a"}  # and --loss still gives the gradients


def test_show_lines_on_a_cell_of_definitions(ip):
    ran = run_ok(ip, "%%reversible --no-jit --show lines --show inverse" + POLY)
    assert ran.out.strip() == "defined reversible functions: poly(y, x) [python backend]"
    table, code = (o.data["text/plain"] for o in ran.displayed)
    assert "~poly runs" in table and "y -= 3.0 * t + x" in table and "_rb_" not in table
    assert code.startswith("# revbench inverse code for poly")


def test_show_lines_is_listed_in_the_help(ip):
    run_ok(ip, "y = 0.0")
    ran = run_ok(ip, "%%reversible --help\ny += 1.0\n")
    assert "lines: each source line beside its inverse and adjoint" in " ".join(ran.out.split())


def test_the_guide_shows_the_table_its_cell_displays(ip):
    """docs/notebook.md §6: the `--show lines` table printed there is what the cell shows."""
    text = GUIDE.read_text()
    section = text.split("## 6. ", 1)[1].split("\n## 7. ", 1)[0]
    cell = re.search(r"```ipython\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"<!-- explain-test: lines -->\n```text\n(.*?)```", section, re.S).group(1)
    run_ok(ip, "y, x = 14.0, 2.0")  # their values at §6 of the guide
    ran = run_ok(ip, cell)
    tables = [o.data["text/plain"] for o in ran.displayed if "rb-explain" in o.data.get("text/html", "")]
    assert tables and nfc(tables[0]).rstrip() == nfc(shown).rstrip()
    assert ip.user_ns["y"] == 8.0

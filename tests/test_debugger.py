"""The stepping debugger widget, headless: click its buttons in Python, read its panels.

The panels are HTML following the DOM contract of ``revbench/jupyter/debugger.py``;
they are parsed here (no browser) and checked against the trace they show.  The
static page export is parsed the same way, and, when chromium and Playwright are
installed, loaded in headless chromium and clicked (slow).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import shutil
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import revbench

widgets = pytest.importorskip("ipywidgets")

from revbench.jupyter.debugger import Debugger, page_html, render_panels  # noqa: E402

CONTRACT = ("rb-debugger", "rb-start", "rb-back", "rb-forward", "rb-end", "rb-turn", "rb-play",
            "rb-slider", "rb-status", "rb-source", "rb-stack-panel")

# --------------------------------------------------------------------------- a small DOM


class Node:
    def __init__(self, tag: str, attrs: dict[str, str]):
        self.tag, self.attrs, self.children = tag, attrs, []
        self.parts: list = []  # text and child nodes, in order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text for p in self.parts)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def select(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.select(tag, cls, **attrs)
        assert len(found) == 1, f"{len(found)} elements match {tag} .{cls} {attrs}"
        return found[0]


class _Builder(HTMLParser):
    VOID = {"meta", "input", "br", "img", "link", "hr"}

    def __init__(self):
        super().__init__()
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def dom(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    assert len(b.stack) == 1, f"unclosed <{b.stack[-1].tag}>"
    return b.root


# --------------------------------------------------------------------------- helpers


def define(source: str, **options) -> revbench.ReversibleFunction:
    fns = revbench.define(textwrap.dedent(source), {"np": np, "math": math}, backend="python",
                          **options)
    return list(fns.values())[-1]


POLY = """
    def poly(y, x):
        t = 0.0
        t += x * x
        y += 3.0 * t + x
        t -= x * x
        del t
"""


def status(w: Debugger) -> str:
    return " ".join(dom(w.status.value).text.split())


def current_line(w: Debugger) -> Node:
    return dom(w.source.value).one(cls="rb-current")


def var_row(w: Debugger, name: str) -> Node:
    return dom(w.variables.value).one("table", "rb-vars").one("tr", data_name=name)


def descendants(w) -> list:
    out = [w]
    for c in getattr(w, "children", ()):
        out += descendants(c)
    return out


# --------------------------------------------------------------------------- the widget


def test_the_widget_carries_the_dom_contract():
    w = revbench.debug(define(POLY), 0.0, 2.0)
    assert isinstance(w, Debugger) and isinstance(w, widgets.VBox)
    every = descendants(w)
    for cls in CONTRACT:
        owners = [x for x in every if cls in getattr(x, "_dom_classes", ())]
        assert len(owners) == 1, (cls, owners)
    assert "rb-debugger" in w._dom_classes
    for b in (w.start_button, w.back_button, w.forward_button, w.end_button, w.turn_button):
        assert isinstance(b, widgets.Button) and b.tooltip
    assert isinstance(w.play, widgets.Play) and isinstance(w.slider, widgets.IntSlider)
    # the panels' markup: one vars table, one ancillas table, one current line
    dom(w.variables.value).one("table", "rb-vars")
    dom(w.ancillas.value).one("table", "rb-ancillas")
    current_line(w)


def test_buttons_step_through_forward_then_backward():
    w = revbench.debug(define(POLY), 0.0, 2.0)
    n = len(w.trace)
    assert n == 12 and w.index == 0
    assert status(w).startswith(f"step 1 / {n} · forward · line 2")
    w.back_button.click()  # nothing before the first step
    assert w.index == 0
    w.forward_button.click()
    w.forward_button.click()
    assert status(w).startswith(f"step 3 / {n} · forward · line 4")
    line = current_line(w)
    assert line.attrs["data-line"] == "4" and "t += x * x" in line.text
    assert "rb-dir-forward" in line.classes
    w.back_button.click()
    assert status(w).startswith(f"step 2 / {n} · forward · line 3")
    w.turn_button.click()
    assert w.index == w.trace.turn == 6
    # the turning point stands where the backward run starts: the last line, `del t`
    assert status(w).startswith(f"step 7 / {n} · backward · line 7")
    assert "turning point" in status(w) and "runs from line 7" in status(w)
    line = current_line(w)
    assert line.attrs["data-line"] == "7" and "rb-turning" in line.classes
    assert line.one(cls="rb-mark").text == "⟲"
    w.forward_button.click()
    assert current_line(w).attrs["data-line"] == "7" and "rb-turning" not in current_line(w).classes
    w.forward_button.click()
    line = current_line(w)
    assert line.attrs["data-line"] == "6" and "rb-dir-backward" in line.classes
    assert "t += x * x" in status(w)  # the inverse of line 6's `t -= x * x` runs
    w.end_button.click()
    assert status(w).startswith(f"step {n} / {n} · backward · line 3")
    w.forward_button.click()  # nothing after the last step
    assert w.index == n - 1
    w.start_button.click()
    assert w.index == 0


def test_variables_panel_highlights_changes_and_shows_adjoints():
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    w.go(3)  # y += 3.0 * t + x
    row = var_row(w, "y")
    assert "rb-changed" in row.classes
    assert row.one("td", "rb-value").text == "14.0"
    assert row.one("td", "rb-adjoint").text == ""  # forward: no adjoint yet
    assert "rb-changed" not in var_row(w, "x").classes
    w.turn_button.click()
    assert var_row(w, "y").one("td", "rb-adjoint").text == "1.0"
    w.end_button.click()
    assert var_row(w, "x").one("td", "rb-adjoint").text == "13.0"
    assert var_row(w, "x").one("td", "rb-value").text == "2.0"
    state = w.state()
    assert state.var("x").adjoint == "13.0"


def test_no_adjoint_column_without_a_loss():
    w = revbench.debug(define(POLY), 0.0, 2.0)
    assert not dom(w.variables.value).select("td", "rb-adjoint")


def test_ancilla_panel_shows_states():
    w = revbench.debug(define(POLY), 0.0, 2.0)

    def anc() -> tuple[str, str]:
        row = dom(w.ancillas.value).one("table", "rb-ancillas").one("tr", data_name="t")
        return row.attrs["data-state"], row.one("td", "rb-value").text

    assert not dom(w.ancillas.value).select("tr", data_name="t")  # not allocated yet
    w.go(1)
    assert anc() == ("clean", "0.0")
    w.go(2)
    assert anc() == ("allocated", "4.0")
    w.go(5)
    assert anc() == ("freed", "—")


def test_a_dirty_ancilla_stands_out():
    f = define("""
        def f(y, x):
            t = 0.0
            t += x
            y += t
            del t
    """)
    w = revbench.debug(f, 1.0, 2.0)
    assert isinstance(w.trace.error, revbench.ReversibilityError)
    assert "not back at its allocated value" in dom(w.error.value).text
    assert w.error in w.children
    goto = [x for x in descendants(w) if "rb-goto-error" in getattr(x, "_dom_classes", ())]
    goto[0].click()
    assert w.index == len(w.trace) - 1
    row = dom(w.ancillas.value).one("tr", data_name="t")
    assert row.attrs["data-state"] == "dirty" and "rb-dirty" in row.classes
    assert "rb-failed" in current_line(w).classes
    assert "✗ fails here" in status(w) and "✗ del t" in status(w)
    assert "not back at its allocated value" not in status(w)  # told once, in the error box


def test_play_and_slider_drive_the_same_position():
    w = revbench.debug(define(POLY), 0.0, 2.0)
    w.play.value = 4  # what the browser's play timer does
    assert w.index == 3 and w.slider.value == 4 and status(w).startswith("step 4 / 12")
    w.slider.value = 12
    assert w.play.value == 12 and status(w).startswith("step 12 / 12 · backward")
    w.go(100)
    assert w.index == 11


def test_stepping_into_a_call_shows_the_callee():
    f = define("""
        def add_square(y, x):
            y += x * x

        def f(y, x):
            add_square(y, x)
    """)
    w = revbench.debug(f, 1.0, 3.0)
    w.go(2)
    assert status(w).startswith("step 3 / ") and "in add_square:3 ← f:6" in status(w)
    assert "add_square" in dom(w.source.value).one(cls="rb-head").text
    assert "y += x * x" in current_line(w).text
    assert [r.attrs["data-name"] for r in dom(w.variables.value).select("tr")
            if "data-name" in r.attrs] == ["y", "x"]


def executed(w: Debugger) -> list[str]:
    """The statements shown as executed under the current line."""
    return [n.text for n in dom(w.source.value).select(cls="rb-executed-stmt")]


def test_backward_steps_show_the_inverse_they_execute():
    w = revbench.debug(define(POLY), 0.0, 2.0)
    for k in range(w.trace.turn + 1):  # forward (and the turn): the line is what runs
        w.go(k)
        assert not dom(w.source.value).select(cls="rb-executed"), k
    expected = {7: "t = 0.0", 6: "t += x * x", 5: "y -= (3.0 * t) + x", 4: "t -= x * x", 3: "del t"}
    for k in range(w.trace.turn + 1, len(w.trace)):
        w.go(k)
        code = dom(w.source.value).one(cls="rb-code")
        line = code.one(cls="rb-current")
        block = code.one(cls="rb-executed")
        # right under the current line
        assert code.children.index(block) == code.children.index(line) + 1
        assert executed(w) == [expected[int(line.attrs["data-line"])]]
        assert w.trace[k].executed == (expected[int(line.attrs["data-line"])],)


def test_the_reverse_sweep_shows_its_adjoint_updates_and_names_the_loss():
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    head = dom(w.variables.value).one("th", "rb-adjoint-head")
    assert head.text == "adjoint ∂y/∂·"
    assert "∂L" not in w.variables.value
    w.go(next(s.index for s in w.trace[w.trace.turn:] if s.lineno == 5))
    assert executed(w) == ["y -= (3.0 * t) + x", "∂t += ∂y * 3.0", "∂x += ∂y"]
    adj = [n.text for n in dom(w.source.value).select(cls="rb-executed-adj")]
    assert adj == ["∂t += ∂y * 3.0", "∂x += ∂y"]
    g = define("""
        def g(y, x):
            for i in range(len(x)):
                y[i] += x[i] * x[i]
    """)
    w = revbench.debug(g, np.zeros(3), np.ones(3), loss=("y", 2))
    assert dom(w.variables.value).one("th", "rb-adjoint-head").text == "adjoint ∂y[2]/∂·"


def test_a_call_inside_an_inverse_shows_the_inverted_statements():
    f = define("""
        def double(y):
            y *= 2.0

        def f(s):
            ~double(s)
    """)
    w = revbench.debug(f, 3.0)
    w.go(next(s.index for s in w.trace if s.function == "~double" and s.kind == "update"))
    assert w.trace[w.index].direction == "forward"  # the forward run, calling an inverse
    assert "y *= 2.0" in current_line(w).text and executed(w) == ["y /= 2.0"]


ADD_SQUARE = """
    def add_square(y, x):
        y += x * x

    def f(y, x):
        add_square(y, x)
"""


def stack_rows(w: Debugger) -> list[tuple[str, str, bool]]:
    return [(r.attrs["data-function"], r.attrs["data-line"], "rb-frame-current" in r.classes)
            for r in dom(w.stack.value).one("table", "rb-stack").select("tr", "rb-frame")]


def test_the_call_stack_panel_shows_the_frames():
    w = revbench.debug(define(ADD_SQUARE), 1.0, 3.0, loss="y")
    assert stack_rows(w) == [("f", "5", True)]
    w.go(2)  # inside add_square
    assert stack_rows(w) == [("add_square", "3", True), ("f", "6", False)]
    code = [n.text for n in dom(w.stack.value).select("td", "rb-frame-code")]
    assert code == ["y += x * x", "add_square(y, x)"]
    inner = next(s.index for s in w.trace[w.trace.turn:] if s.kind == "update")
    w.go(inner)
    assert stack_rows(w) == [("add_square (reverse sweep)", "3", True), ("f (reverse sweep)", "6", False)]
    # a function that calls none: no stack panel
    assert revbench.debug(define(POLY), 0.0, 2.0).stack.value == ""


LEAKY_CELL = """
    def leaky(y, x):
        t = 0.0
        t += x
        y += t
        del t

    def outer(y, x):
        y += 1.0
        leaky(y, x)
"""


def test_errors_name_the_cell_as_the_magic_does(monkeypatch):
    from revbench.jupyter import cell

    filename = cell.cell_filename("%%reversible\n" + LEAKY_CELL)
    monkeypatch.setitem(cell.CELL_LABELS, filename, "Cell In[7]")
    fns = revbench.define(textwrap.dedent(LEAKY_CELL), {"np": np}, backend="python", filename=filename)
    w = revbench.debug(fns["outer"], 0.0, 2.0)
    box = dom(w.error.value).one("div", "rb-error")
    assert "revbench-cell" not in box.text and "revbench-cell" not in w.source.value
    assert [d.text for d in box.select("div", "rb-error-where")] == [
        "Cell In[7], line 10: leaky(y, x)", "Cell In[7], line 6: del t"]
    message = box.one("div", "rb-error-message").text
    assert message.startswith("ReversibilityError: ancilla `t` is not back at its allocated value")
    assert "to fix it" in message  # the magic's advice too
    w.go(w.trace.error_step)
    assert "revbench-cell" not in w.status.value
    assert "✗ fails here" in status(w) and "ancilla `t`" not in status(w)
    assert "(Cell In[7])" in dom(w.source.value).one(cls="rb-head").text
    rows = dom(w.stack.value).select("tr", "rb-frame")
    assert rows[0].attrs["title"] == "Cell In[7], line 6"


#: sub-arrays passed to a call, a long commented line, and an error in a cell's file
SUBARRAY_CELL = """
    def axpy(y, x):
        y += 2.0 * x

    def spread(y, x):
        t = 0.0
        t += x[0]  # a long comment, """ + "and on " * 20 + """
        axpy(y[0:2], x[1:3])
        y[0] += t
        axpy(y[1:5], x[0:4])
        t -= x[0]
        del t
"""


def cell_function(source: str, name: str, monkeypatch, label: str | None = "Cell In[7]"):
    """``name`` defined in a ``%%reversible`` cell's file (labelled ``label`` as the magic
    labels it; None: a cell IPython has not numbered)."""
    from revbench.jupyter import cell

    filename = cell.cell_filename("%%reversible\n" + source)
    if label is not None:
        monkeypatch.setitem(cell.CELL_LABELS, filename, label)
    return revbench.define(textwrap.dedent(source), {"np": np}, backend="python",
                           filename=filename)[name]


def shown_text(w: Debugger) -> str:
    """Everything the widget shows at its current step, as text."""
    parts = [w.status.value, w.error.value if w.error in w.children else "", w.source.value,
             w.stack.value, w.variables.value, w.ancillas.value]
    return " ".join(dom(p).text for p in parts)


@pytest.mark.parametrize("label", ["Cell In[7]", None])
def test_a_sub_array_error_names_the_cell_not_its_file(monkeypatch, label):
    """Sub-arrays are stepped (no refusal); the error of one out of range says where in the
    cell's terms -- never the internal ``<revbench-cell-…>`` file -- and names the function
    once."""
    f = cell_function(SUBARRAY_CELL, "spread", monkeypatch, label)
    w = revbench.debug(f, np.zeros(3), np.ones(3))
    # the raw message names the cell as IPython does where the magic labelled it, else by
    # its file (which the debugger does not show)
    assert (label or "revbench-cell") in str(w.trace.error)
    stepped = [s for s in w.trace if s.function == "axpy" and s.kind == "update"]
    assert stepped, "the call with sub-arrays is stepped into"
    where = label or "this cell"
    box = dom(w.error.value).one("div", "rb-error")
    assert [d.text for d in box.select("div", "rb-error-where")] == [
        f"{where}, line 10: axpy(y[1:5], x[0:4])"]
    message = box.one("div", "rb-error-message").text
    assert message.startswith("ReversibilityError: the sub-array `y[1:5]` is out of range")
    assert message.count("spread") <= 1 and "axpy" not in message
    for k in range(len(w.trace)):
        w.go(k)
        assert "revbench-cell" not in shown_text(w), k
        assert "revbench-cell" not in w.stack.value  # (the frames' tooltips too)
    page = w.export_html(Path(os.environ.get("TMPDIR", "/tmp")) / f"subarray-{os.getpid()}.html")
    try:
        assert "revbench-cell" not in page.read_text(encoding="utf-8")
    finally:
        page.unlink()


def test_a_message_that_places_itself_is_told_in_user_terms(monkeypatch):
    """A message that names its place in internal terms (as the debugger's old refusal of
    sub-arrays did: ``(in reversible function f, <revbench-cell-…>, line 3); ...``) loses
    that place -- the box shows it on a line of its own -- and never repeats the function."""
    from revbench.jupyter.debugger import error_headline, error_text

    f = cell_function(SUBARRAY_CELL, "spread", monkeypatch)
    w = revbench.debug(f, np.zeros(3), np.ones(3))
    step = w.trace[w.trace.error_step]
    internal = f._program.ir.filename
    exc = revbench.ReversibilityError(
        f"the debugger cannot step through sub-arrays yet: `y[1:5]` (in reversible function "
        f"spread, {internal}, line 10); run the function itself instead\n  in reversible "
        f"function spread, {internal}, line 10: axpy(y[1:5], x[0:4])")
    for text in (error_headline(exc, step), error_text(exc, step), error_headline(exc, None)):
        assert "revbench-cell" not in text, text
        assert text.count("spread") <= 1, text
    assert error_text(exc, step).startswith("Cell In[7], line 10: axpy(y[1:5], x[0:4])\n")


def test_the_error_is_told_once_in_one_box():
    """One box: the place on a line of its own, the message below; the failing step's
    status says only that it failed (before: a red box in the status, then the place and
    the message run together in a second box)."""
    f = define(LEAKY_CELL)
    w = revbench.debug(f, 0.0, 2.0)
    w.go(w.trace.error_step)
    box = dom(w.error.value).one("div", "rb-error")
    assert box.one("div", "rb-error-title").text == f"✗ The trace stopped at step {len(w.trace)} of " \
        f"{len(w.trace)}"
    wheres = [d.text for d in box.select("div", "rb-error-where")]
    assert len(wheres) == 2 and wheres[0].endswith("line 10: leaky(y, x)") and \
        wheres[1].endswith("line 6: del t")
    message = box.one("div", "rb-error-message").text
    assert message.startswith("ReversibilityError: ancilla `t` is not back")
    assert shown_text(w).count("is not back at its allocated value") == 1
    # above the source, under the status line
    order = [c for c in w.children if c in (w.status, w.error) or "rb-main" in c._dom_classes]
    assert order[0] is w.status and order[1] is w.error
    # the static page: the same box, once, in the same place
    page = dom(page_html(w.trace, around=w.trace.error_step))
    root = page.one(cls="rb-debugger")
    assert root.one("div", "rb-error").text == box.text
    kids = [c for c in root.children if c.classes & {"rb-status", "rb-error", "rb-main"}]
    assert [sorted(c.classes)[0] for c in kids] == ["rb-status", "rb-error", "rb-main"]
    panels = page_data(page)
    shown = [panels["panels"][j] for j in panels["steps"][w.trace.error_step]]
    assert not any("is not back at its allocated value" in p for p in shown)


def test_the_executed_line_adds_to_the_line_never_repeats_it(monkeypatch):
    """The ``↳ runs`` line shows what the step runs beyond the line as written: nothing for
    a commented line run forward, ``~axpy, the inverse of axpy`` (not the call again) for a
    call run backwards, ``the reverse sweep of axpy`` in the reverse sweep."""
    f = define("""
        def axpy(y, x):
            y += 2.0 * x

        def spread(y, x):
            t = 0.0
            t += x[0]  # a comment the tracer does not print
            axpy(y[0:2], x[1:3])
            y[0] += t
            t -= x[0]
            del t
    """)

    def norm(code: str) -> str:
        return re.sub(r"[\s()]", "", code.split("#")[0]).rstrip(":")

    calls = {}
    for loss in (None, ("y", 0)):
        w = revbench.debug(f, np.zeros(3), np.ones(3), loss=loss)
        for k, step in enumerate(w.trace):
            w.go(k)
            line = current_line(w)
            code = "".join(p for p in line.parts if isinstance(p, str))
            for stmt in executed(w):
                assert norm(stmt) != norm(code), (k, stmt, code)
            if step.lineno == 7 and step.direction == "forward":
                assert executed(w) == [], k  # (before: "runs t += x[0]", the line again)
            if step.lineno == 8 and step.kind == "return" and step.direction == "backward":
                calls[loss is not None] = executed(w)
    assert calls == {False: ["~axpy, the inverse of axpy"], True: ["the reverse sweep of axpy"]}


def test_play_is_a_labelled_button_as_on_the_page():
    """*▶ play* is a button with a label (the widget's own timer is hidden), the same as on
    the static page; it reads *⏸ pause* while playing."""
    w = revbench.debug(define(POLY), 0.0, 2.0)
    play = [x for x in descendants(w) if "rb-play" in getattr(x, "_dom_classes", ())]
    assert play == [w.play_button] and isinstance(w.play_button, widgets.Button)
    assert w.play_button.description == "▶ play" and w.play_button.tooltip
    assert w.play.layout.display == "none" and "rb-play-timer" in w.play._dom_classes
    w.play_button.click()
    assert w.play.playing and w.play_button.description == "⏸ pause"
    w.play.value = 12  # the browser's timer reached the end, and stops
    w.play.playing = False
    assert w.play_button.description == "▶ play" and status(w).startswith("step 12 / 12")
    page = dom(page_html(w.trace))
    button = page.one("button", "rb-play")
    assert button.text == w.play_button.description and button.attrs["title"] == w.play_button.tooltip
    assert page_data(page)["labels"] == ["▶ play", "⏸ pause"]


def test_export_button_writes_the_page_and_offers_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    buttons = [x for x in descendants(w) if "rb-export" in getattr(x, "_dom_classes", ())]
    assert len(buttons) == 1 and buttons[0].tooltip
    assert w.export_link.value == ""
    buttons[0].click()
    written = tmp_path / "poly-debugger.html"
    assert written.exists()
    link = dom(w.export_link.value).one("a", "rb-download")
    assert link.attrs["download"] == "poly-debugger.html"
    prefix = "data:text/html;charset=utf-8;base64,"
    assert link.attrs["href"].startswith(prefix)
    assert base64.b64decode(link.attrs["href"][len(prefix):]) == written.read_bytes()
    assert dom(written.read_text(encoding="utf-8")).one(cls="rb-debugger")
    # export= on revbench.debug writes it at once, where it is told
    target = tmp_path / "sub.html"
    w = revbench.debug(define(POLY), 0.0, 2.0, export=target)
    assert target.exists() and w.export_path == target
    assert "sub.html" in w.export_link.value



def _magic_shell():
    """The ``ipython_harness`` module and an IPython shell with the magic loaded."""
    harness = pytest.importorskip("ipython_harness")
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    if "revbench" not in ip.extension_manager.loaded:
        ip.run_line_magic("load_ext", "revbench")
    return harness, ip


def test_the_magic_exports_the_debugger(tmp_path):
    harness, ip = _magic_shell()
    harness.run_ok(ip, "y = 0.0\nx = 2.0")
    target = tmp_path / "cell.html"
    ran = harness.run_ok(ip, f"%%reversible --no-jit --debug --loss y --export {target}\n"
                             "t = 0.0\nt += x\ny += t * t\nt -= x\ndel t\n")
    assert target.exists() and ip.user_ns["y"] == 0.0
    page = target.read_text(encoding="utf-8")
    assert f"Cell In[{ran.number}]" in page and "revbench-cell" not in page
    ran = harness.run(ip, f"%%reversible --no-jit --export {target}\ny += x\n")
    assert not ran.success and "--export" in ran.out and "--debug" in ran.out


def test_a_static_debugger_rides_along_when_asked(monkeypatch):
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    monkeypatch.delenv("REVBENCH_STATIC_DEBUGGER", raising=False)
    bundle = w._repr_mimebundle_()
    assert "text/html" not in bundle and "application/vnd.jupyter.widget-view+json" in bundle
    monkeypatch.setenv("REVBENCH_STATIC_DEBUGGER", "1")
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    frame = dom(bundle["text/html"]).one("iframe", "rb-static-debugger")
    assert "width:100%" in frame.attrs["style"] and "border:0" in frame.attrs["style"]
    page = dom(frame.attrs["srcdoc"])  # the standalone page, whole
    root = page.one(cls="rb-debugger")
    for cls in CONTRACT:
        root.one(cls=cls)
    assert len(page_data(page)["steps"]) == len(w.trace)
    monkeypatch.setenv("REVBENCH_STATIC_DEBUGGER", "0")
    assert "text/html" not in w._repr_mimebundle_()


def test_colours_follow_the_theme():
    """Every colour of the debugger comes from a variable that follows JupyterLab's theme
    (with a light fallback for the static page), so no fixed colour fights a dark theme."""
    from revbench.jupyter.debugger import CSS

    declared = re.findall(r"(?<![-\w])(color|background|background-color)\s*:\s*([^;}]+)", CSS)
    assert declared
    for prop, value in declared:
        assert value.strip().startswith("var(--"), (prop, value)
    for var, jp in (("--rb-fg", "--jp-content-font-color1"), ("--rb-bg", "--jp-layout-color0"),
                    ("--rb-border", "--jp-border-color1"), ("--rb-muted", "--jp-content-font-color2")):
        assert re.search(rf"{var}: var\({jp}, #[0-9a-f]{{6}}\);", CSS), var
    assert 'body[data-jp-theme-light="false"] .rb-debugger' in CSS


def test_debug_takes_a_recorded_trace_and_cell_sources():
    source = "x += a * a\n"
    f = revbench.define("def cellf(x, a):\n    " + source, filename="<ipython-input-3-f00>")["cellf"]
    t = revbench.trace(f, 0.0, 2.0)
    w = revbench.debug(t)
    assert w.trace is t
    w.go(1)
    code = dom(w.source.value)
    assert [n.attrs["data-line"] for n in code.select(cls="rb-line")] == ["1", "2"]
    assert "x += a * a" in current_line(w).text


# --------------------------------------------------------------------------- the static page


def page_data(page: Node) -> dict:
    return json.loads(page.one("script", "rb-data").text)


def test_exported_page_is_standalone_and_shows_the_same_panels(tmp_path):
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    w.go(4)
    path = w.export_html(tmp_path / "debugger.html")
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=", text)  # nothing loaded from anywhere
    page = dom(text)
    root = page.one(cls="rb-debugger")
    for cls in CONTRACT:
        root.one(cls=cls)
    assert page.one("input", "rb-slider").attrs["max"] == "12"
    data = page_data(page)
    assert data["current"] == 4 and data["turn"] == 6 and len(data["steps"]) == 12
    for k in (0, 4, 11):
        assert [data["panels"][j] for j in data["steps"][k]] == list(render_panels(w.trace, k))
    # identical panels are stored once (the source panel repeats)
    assert len(data["panels"]) < 4 * 12


def test_exported_page_of_a_long_trace_is_capped_with_a_note(tmp_path):
    f = define("""
        def f(s, x):
            for i in range(len(x)):
                s += x[i]
    """)
    t = revbench.trace(f, 0.0, np.ones(200))
    page = dom(page_html(t, around=300, max_steps=100))
    data = page_data(page)
    assert len(data["steps"]) == 100 and data["offset"] == 250
    assert "steps 251 to 350 of 802" in page.one(cls="rb-window").text
    slider = page.one("input", "rb-slider")
    assert (slider.attrs["min"], slider.attrs["max"]) == ("251", "350")


@contextlib.contextmanager
def headless_page(sync_api):
    """A page in headless chromium, and the list its script errors are collected in."""
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True, args=args)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


@pytest.mark.slow
def test_exported_page_steps_in_a_browser(tmp_path):
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH)")
    sync_api = pytest.importorskip("playwright.sync_api")
    f = define("""
        def f(y, x):
            t = 0.0
            t += x
            y += t
            del t
    """)
    path = revbench.debug(f, 1.0, 2.0).export_html(tmp_path / "page.html")
    with headless_page(sync_api) as (page, errors):
        page.goto(path.as_uri())
        status = page.locator(".rb-status")
        assert status.inner_text().startswith("step 1 / 5 · forward · line 2")
        page.locator(".rb-forward").click()
        page.locator(".rb-forward").click()
        assert status.inner_text().startswith("step 3 / 5 · forward · line 4")
        assert page.locator(".rb-current").get_attribute("data-line") == "4"
        assert page.locator(".rb-vars tr[data-name='t'] td.rb-value").inner_text() == "2.0"
        page.locator(".rb-back").click()
        assert status.inner_text().startswith("step 2 / 5")
        page.locator(".rb-goto-error").click()
        row = page.locator(".rb-ancillas tr[data-name='t']")
        assert row.get_attribute("data-state") == "dirty"
        assert "rb-dirty" in (row.get_attribute("class") or "")
        page.locator(".rb-start").click()
        page.locator(".rb-play").click()
        page.wait_for_function(
            "document.querySelector('.rb-status').textContent.startsWith('step 5 / 5')",
            timeout=10_000)
        assert errors == []


@pytest.mark.slow
def test_the_static_iframe_steps_in_a_browser(tmp_path, monkeypatch):
    """What a course website shows (an nbconvert page with REVBENCH_STATIC_DEBUGGER=1): the
    debugger in an iframe, stepping without a kernel, grown to fit its page."""
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH)")
    sync_api = pytest.importorskip("playwright.sync_api")
    monkeypatch.setenv("REVBENCH_STATIC_DEBUGGER", "1")
    w = revbench.debug(define(POLY), 0.0, 2.0, loss="y")
    site = tmp_path / "lesson.html"
    site.write_text("<!DOCTYPE html><html><body><h1>lesson</h1>"
                    f"{w._repr_mimebundle_()['text/html']}</body></html>", encoding="utf-8")
    with headless_page(sync_api) as (page, errors):
        page.goto(site.as_uri())
        frame = page.frame_locator("iframe.rb-static-debugger")
        status = frame.locator(".rb-status")
        assert status.inner_text().startswith("step 1 / 12 · forward · line 2")
        frame.locator(".rb-turn").click()
        assert status.inner_text().startswith("step 7 / 12 · backward · line 7")
        frame.locator(".rb-forward").click()
        frame.locator(".rb-forward").click()
        assert frame.locator(".rb-executed-stmt").first.inner_text() == "t += x * x"
        assert frame.locator("th.rb-adjoint-head").inner_text() == "adjoint ∂y/∂·"
        assert errors == []


#: what JupyterLab Dark sets, for a page shown inside it (the page's own fallbacks are light)
_DARK = """() => {
  document.body.setAttribute('data-jp-theme-light', 'false');
  const vars = {'--jp-layout-color0': '#111111', '--jp-content-font-color1': 'rgba(255,255,255,1)',
    '--jp-content-font-color2': 'rgba(255,255,255,0.7)', '--jp-content-font-color3': 'rgba(255,255,255,0.5)',
    '--jp-border-color1': '#616161', '--jp-border-color2': '#424242',
    '--jp-cell-editor-background': '#212121', '--jp-rendermime-error-background': '#460000'};
  for (const [k, v] of Object.entries(vars)) { document.documentElement.style.setProperty(k, v); }
  document.body.style.background = '#111111';
}"""


@pytest.mark.slow
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_page_keeps_long_lines_in_the_source_column(tmp_path, monkeypatch, theme):
    """The static page (the widget's HTML and CSS) in chromium, in a narrow window: a long
    commented line scrolls inside the source column, never over the variables (a DOM
    measurement); the error is told once, its place above its message; *▶ play* is
    labelled.  The same checks run on the widget in JupyterLab (tests/test_jupyterlab.py)."""
    if _chromium() is None:
        pytest.skip("no chromium (/usr/bin/chromium or `chromium` on PATH)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_jupyterlab import assert_error_told_once, assert_laid_out, assert_play_labelled

    f = cell_function(SUBARRAY_CELL, "spread", monkeypatch)
    w = revbench.debug(f, np.zeros(3), np.ones(3))
    path = w.export_html(tmp_path / "page.html")
    with headless_page(sync_api) as (page, errors):
        page.set_viewport_size({"width": 900, "height": 800})
        page.goto(path.as_uri())
        if theme == "dark":
            page.evaluate(_DARK)
        root = page.locator(".rb-debugger")
        assert_play_labelled(root)
        for _ in range(2):  # on to the long line
            page.locator(".rb-forward").click()
        assert "a long comment" in page.locator(".rb-current").inner_text()
        assert_laid_out(root, theme)
        page.locator(".rb-goto-error").click()
        assert_error_told_once(root, "is out of range along axis 0")
        assert_laid_out(root, theme)
        page.screenshot(path=str(tmp_path / f"page-{theme}.png"), full_page=True)
        assert errors == []



def test_the_magic_sets_the_step_limit_and_says_how_in_its_own_flags(tmp_path):
    """``--max-steps N`` with ``--debug``; the limit's message names that flag, not the
    keyword of ``revbench.debug`` (which a cell has no way to pass)."""
    harness, ip = _magic_shell()
    harness.run_ok(ip, "y = 0.0\nk = 0")
    target = tmp_path / "limit.html"
    harness.run_ok(ip, f"%%reversible --no-jit --debug --max-steps 40 --export {target}\n"
                       "while (y < 10.0, k > 0):\n    y -= 1.0\n    k += 1\n")
    page = target.read_text(encoding="utf-8")
    assert "stopped after max_steps=40 steps" in page
    assert "pass a larger --max-steps (e.g. %%reversible --debug --max-steps 400)" in page
    assert ip.user_ns["y"] == 0.0 and ip.user_ns["k"] == 0

"""The stepping debugger: a :class:`~revbench.debugging.tracing.Trace` as a Jupyter widget or an HTML page.

``revbench.debug(f, *args, loss=None, export=None)`` records a trace and
returns a :class:`Debugger` widget: the source with the current line marked
(▶ running forward, ◀ backward, ⟲ at the turning point), and under it, on a
line that runs its inverse, the statement actually executed (``t -= x * x``
for ``t += x * x``; in the reverse sweep the adjoint updates too; never the line
again: a call run backwards says only ``↳ runs ~axpy, the inverse of axpy``); a call
stack when functions call functions; a variables table (changed values
highlighted, adjoints ``∂y/∂·`` -- named after the loss -- beside values in
gradient mode); the ancillas with their states (a dirty one in red); and
controls: start, step back, *▶ play* (*⏸ pause* while playing), step forward, end,
the turning point (where the backward run starts), a slider, and *export page*.

**Layout.**  The source sits beside the side panels (stack, variables, ancillas) and
never spills into them: a long line (a comment, say) scrolls inside the source box.

**The static page.**  :meth:`Debugger.export_html` (the *export page* button,
``revbench.debug(..., export=PATH)``, ``%%reversible --debug --export PATH``)
writes the same debugger as one self-contained page that steps without a
kernel.  One rendering serves both: Python renders each panel's HTML for a
step (:func:`render_panels`); the widget shows it in ``HTML`` widgets, and the
page embeds the panels of every step (identical ones stored once) with a few
lines of inline JavaScript that only swaps them.  That keeps one source of
truth for what a step looks like, at the price of a page that grows with the
number of steps, so a page holds at most ``max_steps`` steps (5000 by
default) around the current one and says so when the trace is longer.

**For a static website** (``REVBENCH_STATIC_DEBUGGER=1`` in the kernel's
environment): the widget's ``_repr_mimebundle_`` also returns ``text/html``, the
static page in an ``<iframe class="rb-static-debugger" srcdoc="...">``, so a
notebook exported to HTML (nbconvert) keeps a debugger that steps without a
kernel.  Without the variable the bundle is the usual widget view only.

**Themes.**  Colours follow JupyterLab's CSS variables (``--jp-layout-color0``,
``--jp-content-font-color1``, ``--jp-border-color1`` ...), with light fallbacks
for the static page; highlights are translucent tints, readable on a light or a
dark background, and accents get lighter shades under a dark theme
(``body[data-jp-theme-light="false"]``).

**Errors** are told once, in one box above the source (``div.rb-error``): the
lines from the outermost call down to the failing one, each on its own line, as
the ``%%reversible`` magic tells them (``Cell In[5], line 3: del t``, or ``File
"...", line 3``), then the message and the usual fix; never a cell's internal
file name.  The failing step's status says only ``✗ fails here``.

The DOM carries the classes the browser tests rely on: ``rb-debugger`` (root),
``rb-start``, ``rb-back``, ``rb-forward``, ``rb-end``, ``rb-turn``, ``rb-play`` (a
button labelled ``▶ play``; the widget's hidden timer ``rb-play-timer``),
``rb-slider``, ``rb-export`` (widget only; its link ``rb-export-link``, an
``a.rb-download``), ``rb-status`` (``step K / N · forward · line L``), ``rb-source``
(current line ``rb-current``, plus ``rb-turning`` at the turning point; the
executed statements ``div.rb-executed`` with one ``.rb-executed-stmt`` each,
``rb-executed-adj`` for an adjoint update), the error box ``div.rb-error``
(``.rb-error-title``, ``.rb-error-where`` per line, ``.rb-error-message``; in the widget
inside ``rb-error-panel``), ``rb-stack-panel`` (``table.rb-stack``,
rows ``tr.rb-frame[data-function][data-line]``, innermost first, the current one
``rb-frame-current``; empty when the run calls no function), ``table.rb-vars``
(rows ``tr[data-name]``, ``td.rb-value``, ``td.rb-adjoint``, ``rb-changed``; the
adjoint column's head ``th.rb-adjoint-head``) and ``table.rb-ancillas``
(``tr[data-name][data-state]``, ``rb-dirty``); a static page's iframe
``iframe.rb-static-debugger``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from revbench.backends.tracer import DEFAULT_MAX_STEPS, StepLimitError
from revbench.debugging.tracing import State, Step, Trace, source_lines, trace
from revbench.function import ReversibleFunction
from revbench.jupyter.cell import CELL_FUNCTION, Place, cell_label, cell_wording
from revbench.jupyter.messages import cell_headline

#: at most this many source lines are shown; longer functions show a window around the line
SOURCE_WINDOW = 40
#: steps a static page holds at most (each step's panels are embedded)
PAGE_STEPS = 5000
#: the environment variable that makes the widget also carry its static page (text/html)
STATIC_ENV = "REVBENCH_STATIC_DEBUGGER"
#: a download link carries the page as a data: URI up to this size (bytes); bigger: a file link
DOWNLOAD_LIMIT = 8_000_000
#: the play button's labels (the same on the static page) and its timer's period
PLAY_LABEL, PAUSE_LABEL = "▶ play", "⏸ pause"
PLAY_INTERVAL_MS = 400
_PLAY_TIP = "play: step forward every 0.4 s (press again to pause)"
_TURN_TIP = "jump to the turning point: the forward run ends and the backward run begins"
_EXPORT_TIP = ("write this debugger as a standalone HTML page (it steps without a kernel) "
               "and offer it for download")

CSS = """
.rb-debugger {
  --rb-fg: var(--jp-content-font-color1, #1f2328);
  --rb-muted: var(--jp-content-font-color2, #57606a);
  --rb-faint: var(--jp-content-font-color3, #6e7781);
  --rb-bg: var(--jp-layout-color0, #ffffff);
  --rb-code-bg: var(--jp-cell-editor-background, #f6f8fa);
  --rb-border: var(--jp-border-color1, #d0d7de);
  --rb-rule: var(--jp-border-color2, #eaeef2);
  --rb-forward: var(--jp-success-color0, #1a7f37);
  --rb-backward: #9a6700;
  --rb-adjoint: #6639ba;
  --rb-error: var(--jp-error-color0, #82071e);
  --rb-error-bg: var(--jp-rendermime-error-background, #ffebe9);
  --rb-info: var(--jp-brand-color0, #0969da);
  --rb-tint-forward: rgba(46, 160, 67, 0.18);
  --rb-tint-backward: rgba(212, 167, 44, 0.26);
  --rb-tint-error: rgba(248, 81, 73, 0.22);
  --rb-tint-adjoint: rgba(163, 113, 247, 0.20);
  --rb-tint-executed: rgba(212, 167, 44, 0.12);
  font-size: 13px; color: var(--rb-fg); background: var(--rb-bg); padding: 6px;
  border: 1px solid var(--rb-border); border-radius: 6px; max-width: 1100px; }
body[data-jp-theme-light="false"] .rb-debugger {
  --rb-forward: #56d364; --rb-backward: #e3b341; --rb-adjoint: #d2a8ff;
  --rb-error: #ff7b72; --rb-info: #79c0ff; }
.rb-debugger .rb-controls { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; }
.rb-debugger .rb-status > .widget-html-content, .rb-debugger .rb-source > .widget-html-content,
.rb-debugger .rb-side .widget-html-content { line-height: 1.5; }
.rb-debugger .rb-status { font-family: monospace; margin: 4px 0; color: var(--rb-fg); }
.rb-debugger .rb-dir-forward { color: var(--rb-forward); font-weight: bold; }
.rb-debugger .rb-dir-backward { color: var(--rb-backward); font-weight: bold; }
.rb-debugger .rb-turning-label { color: var(--rb-backward); font-weight: bold; }
.rb-debugger .rb-action { color: var(--rb-muted); }
.rb-debugger .rb-failed-label { color: var(--rb-error); font-weight: bold; }
.rb-debugger .rb-error { color: var(--rb-error); background: var(--rb-error-bg); padding: 4px 8px;
  margin: 4px 0 6px 0; border-radius: 4px; border-left: 3px solid var(--rb-error);
  font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45; }
.rb-debugger .rb-error-title { font-family: sans-serif; font-weight: bold; }
.rb-debugger .rb-error-message { margin-top: 2px; }
.rb-debugger .rb-main { display: flex; gap: 12px; align-items: flex-start; }
.rb-debugger .rb-source { flex: 1 1 55%; min-width: 0; }
.rb-debugger .rb-side { flex: 1 1 45%; min-width: 0; overflow-x: auto; }
.rb-debugger .rb-source > .widget-html-content, .rb-debugger .rb-side .widget-html-content {
  min-width: 0; max-width: 100%; }
.rb-debugger .rb-head { font-weight: bold; margin: 2px 0 4px 0; color: var(--rb-fg); }
.rb-debugger .rb-file { color: var(--rb-muted); font-weight: normal; }
.rb-debugger .rb-code { font-family: monospace; white-space: pre; overflow-x: auto;
  max-width: 100%; box-sizing: border-box; border: 1px solid var(--rb-border); border-radius: 4px;
  padding: 2px 0; background: var(--rb-code-bg); color: var(--rb-fg); }
.rb-debugger .rb-code > div { min-width: max-content; }
.rb-debugger .rb-line { padding: 0 6px; color: var(--rb-fg); }
.rb-debugger .rb-ln { display: inline-block; width: 3.5em; color: var(--rb-faint); text-align: right;
  margin-right: 4px; }
.rb-debugger .rb-mark { display: inline-block; width: 1.2em; }
.rb-debugger .rb-current.rb-dir-forward { background: var(--rb-tint-forward);
  box-shadow: inset 3px 0 var(--rb-forward); }
.rb-debugger .rb-current.rb-dir-backward { background: var(--rb-tint-backward);
  box-shadow: inset 3px 0 var(--rb-backward); }
.rb-debugger .rb-current.rb-failed { background: var(--rb-tint-error);
  box-shadow: inset 3px 0 var(--rb-error); }
.rb-debugger .rb-executed { background: var(--rb-tint-executed); box-shadow: inset 3px 0 var(--rb-backward);
  color: var(--rb-fg); }
.rb-debugger .rb-executed-line { padding: 0 6px; }
.rb-debugger .rb-executed-label { color: var(--rb-muted); font-style: italic; }
.rb-debugger .rb-executed-stmt { color: var(--rb-fg); font-weight: bold; }
.rb-debugger .rb-executed-adj { color: var(--rb-adjoint); font-weight: normal; }
.rb-debugger .rb-side table { border-collapse: collapse; width: 100%; margin-bottom: 8px;
  font-family: monospace; color: var(--rb-fg); }
.rb-debugger .rb-side th { text-align: left; border-bottom: 1px solid var(--rb-border); padding: 2px 6px;
  font-family: sans-serif; font-weight: 600; color: var(--rb-fg); }
.rb-debugger .rb-side td { padding: 1px 6px; border-bottom: 1px solid var(--rb-rule);
  vertical-align: top; color: var(--rb-fg); }
.rb-debugger .rb-side td.rb-note { color: var(--rb-muted); font-size: 11px; }
.rb-debugger tr.rb-changed td { background: var(--rb-tint-backward); font-weight: bold; }
.rb-debugger td.rb-adjoint { color: var(--rb-adjoint); }
.rb-debugger td.rb-adjoint.rb-adj-changed { background: var(--rb-tint-adjoint); font-weight: bold; }
.rb-debugger tr.rb-dirty td { background: var(--rb-tint-error); color: var(--rb-error); font-weight: bold; }
.rb-debugger tr[data-state="freed"] td { color: var(--rb-faint); }
.rb-debugger tr[data-state="clean"] td.rb-state { color: var(--rb-forward); }
.rb-debugger tr[data-state="allocated"] td.rb-state { color: var(--rb-info); }
.rb-debugger tr.rb-frame-current td { background: var(--rb-tint-forward); font-weight: bold; }
.rb-debugger td.rb-frame-code { color: var(--rb-muted); white-space: pre-wrap; }
.rb-debugger .rb-empty td { color: var(--rb-faint); font-style: italic; }
.rb-debugger .rb-window { color: var(--rb-muted); font-style: italic; }
.rb-debugger .rb-export-link { font-size: 12px; color: var(--rb-muted); }
.rb-debugger .rb-export-link a { color: var(--jp-content-link-color, #0969da); }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


# --------------------------------------------------------------------------- #
# Rendering: the panels of one step, as HTML (shared by the widget and the page)
# --------------------------------------------------------------------------- #
def render_status(t: Trace, k: int) -> str:
    """``step K / N · forward · line L · in f ← g:12``, then what ran; the failing step says
    ``✗ fails here`` (its error is told once, in the error box: :func:`render_error`)."""
    step = t[k]
    stack = " ← ".join(f"{name}:{line}" for name, line in reversed(step.stack))
    parts = [
        f'<span class="rb-step">step {k + 1} / {len(t)}</span>',
        f'<span class="rb-dir rb-dir-{step.direction}">{step.direction}</span>',
        f'<span class="rb-lineno">line {step.lineno}</span>',
        f'<span class="rb-stack" title="call stack, innermost first">in {_e(stack)}</span>',
    ]
    if k == t.turn:
        parts.append('<span class="rb-turning-label">⟲ turning point</span>')
    action = step.action
    if step.error is not None:
        parts.append('<span class="rb-failed-label" title="the step that failed (its error is '
                     'told in the red box)">✗ fails here</span>')
        if step.kind == "error":  # the action is the error itself: show the statement instead
            action = code_only(step.frame.line_text(step.lineno))
    mark = "✗" if step.error is not None else "▶" if step.direction == "forward" else "◀"
    return " · ".join(parts) + f'<div class="rb-action">{mark} {_e(action)}</div>'


def code_only(line: str) -> str:
    """A source line without its indentation and its comment (``t += x  # why`` gives
    ``t += x``); a line Python cannot read alone is only stripped."""
    text = line.strip()
    if "#" not in text:
        return text
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text + "\n").readline):
            if tok.type == tokenize.COMMENT:
                return text[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket: a line of a longer statement
        pass
    return text


def _same_code(a: str, b: str) -> bool:
    """Whether two statements read alike, ignoring comments, spaces, parentheses and a
    trailing colon (the tracer prints ``y += (3.0 * t) + x`` for ``y += 3.0 * t + x``)."""
    def norm(s: str) -> str:
        return re.sub(r"[\s()]", "", code_only(s)).rstrip(":")
    return norm(a) == norm(b)


_SWEEP = " (its reverse sweep)"
_CALL = re.compile(r"(~?)([A-Za-z_]\w*)\(")


def _what_a_call_adds(stmt: str, text: str) -> str | None:
    """For a call that runs the line's own call another way (its inverse, its reverse
    sweep), what that adds, without repeating the arguments: ``~axpy, the inverse of
    axpy``; None when ``stmt`` is not the line's call."""
    sweep = stmt.endswith(_SWEEP)
    ran = _CALL.match(stmt[:-len(_SWEEP)] if sweep else stmt)
    line = _CALL.match(code_only(text))
    if ran is None or line is None or ran[2] != line[2]:
        return None
    if not _same_code(stmt[ran.end():].removesuffix(_SWEEP), code_only(text)[line.end():]):
        return None
    name = line[1] + line[2]
    if sweep:
        return f"the reverse sweep of {name}"
    if ran[1] == line[1]:
        return None  # the same call: nothing to add
    return f"{ran[1] + ran[2]}, the inverse of {name}"


def _executed_rows(step: Step, text: str) -> str:
    """The statements a step executed, under its line, when they are not the line itself:
    an inverse (or the reverse sweep) runs there, or an inverted block.  A statement that
    reads as the line is not repeated; a call run another way says only how (``~axpy,
    the inverse of axpy``)."""
    if not step.executed or step.kind in ("start", "turn", "enter"):
        return ""
    code = [(stmt, False) for stmt in step.executed]
    if _same_code(code[0][0], text):
        code = code[1:]  # what the line says runs: only the adjoint updates (if any) add
    elif (adds := _what_a_call_adds(code[0][0], text)) is not None:
        code[0] = (adds, True)
    if not code:
        return ""
    indent = " " * (len(text) - len(text.lstrip()))
    label = "runs "
    rows = []
    for i, (stmt, described) in enumerate(code):
        adj = stmt.startswith(("∂", "del ∂"))
        cls = "rb-executed-stmt" + (" rb-executed-adj" if adj else "") + \
            (" rb-executed-call" if described else "")
        lead = label if i == 0 else " " * len(label)
        rows.append(f'<div class="rb-executed-line"><span class="rb-ln"></span>'
                    f'<span class="rb-mark">{"↳" if i == 0 else " "}</span>{indent}'
                    f'<span class="rb-executed-label">{lead}</span>'
                    f'<span class="{cls}">{_e(stmt)}</span></div>')
    tip = ("what the tracer executed for this line: its inverse, from the program the compiler "
           "derives" + (", with the adjoint updates of the reverse sweep"
                        if step.frame.direction.sweep else ""))
    return f'<div class="rb-executed" title="{_e(tip)}">{"".join(rows)}</div>'


def render_source(t: Trace, k: int) -> str:
    """The current function's source, the step's line marked with its direction, and under
    it the statement really executed when that is not the line as written (an inverse)."""
    step = t[k]
    lines = source_lines(step.frame.function)
    if len(lines) > SOURCE_WINDOW:
        at = next((i for i, (n, _) in enumerate(lines) if n == step.lineno), 0)
        lo = max(0, min(at - SOURCE_WINDOW // 2, len(lines) - SOURCE_WINDOW))
        shown = lines[lo:lo + SOURCE_WINDOW]
    else:
        lo, shown = 0, lines
    turning = k == t.turn
    arrow = "⟲" if turning else "▶" if step.direction == "forward" else "◀"
    rows = []
    if lo > 0:
        rows.append('<div class="rb-line rb-window">⋮</div>')
    for n, text in shown:
        cls = "rb-line"
        mark = " "
        current = n == step.lineno
        if current:
            cls += f" rb-current rb-dir-{step.direction}" + (" rb-failed" if step.error else "") + \
                (" rb-turning" if turning else "")
            mark = "✗" if step.error else arrow
        rows.append(f'<div class="{cls}" data-line="{n}"><span class="rb-ln">{n}</span>'
                    f'<span class="rb-mark">{mark}</span>{_e(text)}</div>')
        if current:
            rows.append(_executed_rows(step, text))
    if lo + len(shown) < len(lines):
        rows.append('<div class="rb-line rb-window">⋮</div>')
    where = f"{_e(step.frame.name)} <span class='rb-file'>({_e(file_label(step.filename))})</span>"
    phase = "forward" if step.direction == "forward" else "backward: " + (
        "the reverse sweep (inverse + adjoints)" if step.frame.direction.sweep
        else "running the inverse")
    if turning:
        phase = "turning point: the backward run starts here"
    return (f'<div class="rb-head">{where} · {"◀" if turning else arrow} {_e(phase)}</div>'
            f'<div class="rb-code">{"".join(rows)}</div>')


def render_stack(t: Trace, k: int) -> str:
    """The call stack at step ``k``, innermost first ('' when the run calls no function)."""
    if not t.has_calls:
        return ""
    step = t[k]
    frame, line = step.frame, step.lineno
    rows = []
    while frame is not None:
        cls = "rb-frame" + (" rb-frame-current" if not rows else "")
        where = f"{file_label(frame.filename)}, line {line}"
        rows.append(f'<tr class="{cls}" data-function="{_e(frame.name)}" data-line="{line}" '
                    f'title="{_e(where)}"><td class="rb-fn">{_e(frame.name)}</td>'
                    f'<td class="rb-frame-line">line {line}</td>'
                    f'<td class="rb-frame-code">{_e(code_only(frame.line_text(line)))}</td></tr>')
        line, frame = frame.call_line or 0, frame.parent
    return ('<div class="rb-head">call stack</div><table class="rb-stack"><thead><tr>'
            '<th>function</th><th>line</th><th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def render_variables(state: State, gradient: bool, loss: str | None = None) -> str:
    """The variables table: value, what this step changed, the adjoint ``∂loss/∂·`` in
    gradient mode (named after the loss: ``∂y/∂·``, ``∂y[2]/∂·``)."""
    adjoint_head = f"adjoint ∂{loss or 'L'}/∂·"
    head = "<th>variable</th><th>value</th>" + \
        (f'<th class="rb-adjoint-head" title="d {_e(loss or "loss")} / d this variable">'
         f'{_e(adjoint_head)}</th>' if gradient else "") + "<th></th>"
    rows = []
    for v in state.variables:
        cls = f"rb-role-{v.role}" + (" rb-changed" if v.changed else "")
        cells = f'<td class="rb-name" title="{_e(v.role)}">{_e(v.name)}</td>' \
                f'<td class="rb-value">{_e(v.value)}</td>'
        if gradient:
            adj_cls = "rb-adjoint" + (" rb-adj-changed" if v.adjoint_changed else "")
            cells += f'<td class="{adj_cls}">{_e(v.adjoint or "")}</td>'
        cells += f'<td class="rb-note">{_e(v.change or "")}</td>'
        rows.append(f'<tr data-name="{_e(v.name)}" class="{cls}">{cells}</tr>')
    if not rows:
        rows.append('<tr class="rb-empty"><td colspan="4">no variables</td></tr>')
    return (f'<div class="rb-head">variables of {_e(state.step.function)}</div>'
            f'<table class="rb-vars"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def render_ancillas(state: State) -> str:
    """The ancillas with their states: clean, allocated (in use), freed, dirty."""
    rows = []
    for a in state.ancillas:
        cls = f"rb-anc-{a.state}" + (" rb-dirty" if a.state == "dirty" else "")
        rows.append(f'<tr data-name="{_e(a.name)}" data-state="{a.state}" class="{cls}">'
                    f'<td class="rb-name">{_e(a.name)}</td><td class="rb-state">{a.state}</td>'
                    f'<td class="rb-value">{_e(a.value)}</td></tr>')
    if not rows:
        rows.append('<tr class="rb-empty"><td colspan="3">no ancillas yet</td></tr>')
    return ('<div class="rb-head">ancillas</div><table class="rb-ancillas"><thead><tr>'
            '<th>ancilla</th><th>state</th><th>value</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


#: the panels of a step, in the order :func:`render_panels` returns them (and the page swaps them)
PANELS = ("rb-status", "rb-source", "rb-stack-panel", "rb-vars-panel", "rb-ancillas-panel")


def render_panels(t: Trace, k: int) -> tuple[str, str, str, str, str]:
    """The HTML of the status, source, call-stack, variables and ancillas panels at step ``k``."""
    state = t.state_at(k)
    return (render_status(t, k), render_source(t, k), render_stack(t, k),
            render_variables(state, t.gradient_mode, t.loss_label), render_ancillas(state))


def render_error(t: Trace) -> str:
    """Why the trace stopped, in one box (``div.rb-error``): a title, each line from the
    outermost call down to the failing one on its own line (``Cell In[5], line 3: del t``,
    ``div.rb-error-where``), then the message (``div.rb-error-message``).  '' when the trace
    ran through."""
    if t.error is None:
        return ""
    step = t[t.error_step] if t.error_step is not None else None
    title = "The trace stopped" + (f" at step {t.error_step + 1} of {len(t)}" if step else "")
    where = "".join(f'<div class="rb-error-where">{_e(w)}</div>' for w in error_places(t.error, step))
    return (f'<div class="rb-error" role="alert"><div class="rb-error-title">✗ {_e(title)}</div>'
            f'{where}<div class="rb-error-message">{_e(error_headline(t.error, step))}</div></div>')


# --------------------------------------------------------------------------- #
# Errors, named as the magic names them
# --------------------------------------------------------------------------- #
def file_label(filename: str) -> str:
    """A file as people read it: ``Cell In[5]`` for a notebook cell ("this cell" for a
    cell IPython has not numbered), else the file name."""
    return cell_label(filename) or ("this cell" if _CELL_FILE.fullmatch(filename) else filename)


def _where(filename: str, line: int) -> str:
    label = cell_label(filename) or ("this cell" if _CELL_FILE.fullmatch(filename) else None)
    return f"{label}, line {line}" if label else f'File "{filename}", line {line}'


#: where a message places itself, "(in reversible function f, FILE, line 3)" or a note
#: "in reversible function f, FILE, line 3: y += x": the error box shows the place on a line
#: of its own
_IN_FUNCTION = r"in reversible function ~?\w+(?: \(running its [\w-]+\))?, "
_PLACED_ASIDE = re.compile(rf" ?\({_IN_FUNCTION}[^()\n]*?, line \d+\)")
_PLACED_NOTE = re.compile(rf"\s*\b{_IN_FUNCTION}\S[^\n]*?, line \d+: [^\n]*?(?=\s\(in reversible|\n|$)")
#: the name of a cell's file (:func:`revbench.jupyter.cell.cell_filename`)
_CELL_FILE = re.compile(r"<revbench-cell-[0-9a-f]+>")


def _in_user_terms(text: str, placed: bool = True) -> str:
    """A message in the user's terms: a cell's file named as IPython names the cell
    (``Cell In[5]``, else "this cell"), never ``<revbench-cell-…>``; and when the box says
    where (``placed``), without the places the message names itself (``(in reversible
    function f, FILE, line 3)``), which would name the function again (else only an aside
    that a note says again)."""
    if placed:
        text = _PLACED_NOTE.sub("", _PLACED_ASIDE.sub("", text))
    elif _PLACED_NOTE.search(text):
        text = _PLACED_ASIDE.sub("", text)
    return _CELL_FILE.sub(lambda m: cell_label(m[0]) or "this cell", text)


def error_headline(exc: BaseException, step: Step | None) -> str:
    """``ReversibilityError: <message>; <the usual fix>``, in the magic's words."""
    name = type(exc).__name__
    if isinstance(exc, StepLimitError) or step is None:
        text = str(exc)
        if text.startswith(f"the trace of {CELL_FUNCTION} "):  # a cell's: the magic's flag
            text = cell_wording(text)
        return f"{name}: {_in_user_terms(text, placed=False)}"
    try:  # the magic's wording (cell terms, the fix)
        frame = step.frame
        place = Place(step.filename, step.lineno, None, frame.function.name,
                      frame.direction.name)
        return f"{name}: {_in_user_terms(cell_headline(exc, place))}"
    except Exception:  # pragma: no cover - the message itself is what matters
        notes = "".join("\n" + n for n in getattr(exc, "__notes__", ()))
        return f"{name}: {_in_user_terms(f'{exc}{notes}')}"


def error_places(exc: BaseException, step: Step | None) -> list[str]:
    """Where the error at ``step`` happened, as the magic tells it: each line from the
    outermost call down to the failing one (``Cell In[5], line 3: del t``)."""
    lines: list[str] = []
    if step is not None and not isinstance(exc, StepLimitError):
        frame, line = step.frame, step.lineno
        while frame is not None:
            lines.append(f"{_where(frame.filename, line)}: {code_only(frame.line_text(line))}")
            line, frame = frame.call_line or 0, frame.parent
        lines.reverse()
    return lines


def error_text(exc: BaseException, step: Step | None) -> str:
    """The error at ``step`` as the magic tells it: each line from the outermost call down
    to the failing one (``Cell In[5], line 3: del t``), then the message."""
    return "\n".join([*error_places(exc, step), error_headline(exc, step)])


# --------------------------------------------------------------------------- #
# The widget
# --------------------------------------------------------------------------- #
def _button(label: str, cls: str, tooltip: str, on_click: Callable[[], None]) -> widgets.Button:
    b = widgets.Button(description=label, tooltip=tooltip, layout=widgets.Layout(width="auto"))
    b.add_class(cls)
    b.on_click(lambda _b: on_click())
    return b


def static_debugger_wanted() -> bool:
    """Whether ``REVBENCH_STATIC_DEBUGGER=1``: widgets then also carry their static page."""
    return os.environ.get(STATIC_ENV, "").strip() == "1"


class Debugger(widgets.VBox):
    """The stepping debugger over one :class:`~revbench.debugging.tracing.Trace` (see the module docstring).

    ``index`` is the current step (0-based; the status line counts from 1);
    :meth:`go` moves to a step; the buttons and the slider call it.
    ``export_path`` is where the *export page* button writes (by default
    ``<function>-debugger.html`` in the working folder).
    """

    def __init__(self, t: Trace, start: int = 0, export_path: str | Path | None = None):
        self.trace = t
        self.export_path = None if export_path is None else Path(export_path)
        n = len(t)
        self.start_button = _button("|◀ start", "rb-start", "jump to the first step", lambda: self.go(0))
        self.back_button = _button("◀ back", "rb-back", "step back", lambda: self.go(self.index - 1))
        self.forward_button = _button("forward ▶", "rb-forward", "step forward",
                                      lambda: self.go(self.index + 1))
        self.end_button = _button("end ▶|", "rb-end", "jump to the last step", lambda: self.go(n - 1))
        self.turn_button = _button(
            "⟲ turning point", "rb-turn", _TURN_TIP,
            lambda: self.go(t.turn if t.turn is not None else self.index))
        self.turn_button.disabled = t.turn is None
        self.export_button = _button("⤓ export page", "rb-export", _EXPORT_TIP, self.export)
        # the browser's timer (a Play widget, hidden) driven by a labelled button, as on the
        # static page: "▶ play", then "⏸ pause" while it plays
        self.play = widgets.Play(value=1, min=1, max=n, step=1, interval=PLAY_INTERVAL_MS,
                                 show_repeat=False, layout=widgets.Layout(display="none"))
        self.play.add_class("rb-play-timer")
        self.play_button = _button(PLAY_LABEL, "rb-play", _PLAY_TIP, self.toggle_play)
        self.play.observe(self._show_playing, names="playing")
        self.slider = widgets.IntSlider(value=1, min=1, max=n, step=1, description="step",
                                        continuous_update=True, layout=widgets.Layout(width="420px"))
        self.slider.add_class("rb-slider")
        widgets.link((self.play, "value"), (self.slider, "value"))
        self.slider.observe(lambda _change: self._show(), names="value")
        self.status = widgets.HTML().add_class("rb-status")
        self.source = widgets.HTML().add_class("rb-source")
        self.stack = widgets.HTML().add_class("rb-stack-panel")
        self.variables = widgets.HTML().add_class("rb-vars-panel")
        self.ancillas = widgets.HTML().add_class("rb-ancillas-panel")
        self.error = widgets.HTML(render_error(t)).add_class("rb-error-panel")
        self.export_link = widgets.HTML().add_class("rb-export-link")
        controls = [self.start_button, self.back_button, self.play_button, self.play,
                    self.forward_button, self.end_button, self.turn_button]
        if t.error_step is not None:
            controls.append(_button("✗ go to the error", "rb-goto-error",
                                    "jump to the step that failed", lambda: self.go(t.error_step)))
        side = widgets.VBox([self.stack, self.variables, self.ancillas],
                            layout=widgets.Layout(flex="1 1 45%"))
        side.add_class("rb-side")
        main = widgets.HBox([self.source, side])
        main.add_class("rb-main")
        self.source.layout = widgets.Layout(flex="1 1 55%")
        bar = widgets.HBox(controls + [self.slider, self.export_button])
        bar.add_class("rb-controls")
        parts = [widgets.HTML(f"<style>{CSS}</style>").add_class("rb-style"), bar, self.status]
        if t.error is not None:
            parts.append(self.error)  # the error, told once, above the source
        parts += [main, self.export_link]
        super().__init__(parts)
        self.add_class("rb-debugger")
        self.go(start)

    @property
    def index(self) -> int:
        """The current step (0-based)."""
        return self.slider.value - 1

    def toggle_play(self) -> None:
        """What the *▶ play* button does: step forward every 0.4 s in the browser (from the
        first step when at the last), or pause."""
        self.play.playing = not self.play.playing

    def _show_playing(self, _change: Any = None) -> None:
        self.play_button.description = PAUSE_LABEL if self.play.playing else PLAY_LABEL

    def go(self, k: int) -> None:
        """Show step ``k`` (clamped to the trace)."""
        k = max(0, min(int(k), len(self.trace) - 1))
        if self.slider.value == k + 1:
            self._show()
        else:
            self.slider.value = k + 1  # the observer shows it

    def state(self) -> State:
        """What is shown now, as data."""
        return self.trace.state_at(self.index)

    def _show(self) -> None:
        status, source, stack, variables, ancillas = render_panels(self.trace, self.index)
        # the status line last: the front end applies the updates in order, so a status
        # that reads "step k" means every panel shows step k (a reader -- a person, or the
        # browser test -- never sees step k's number over step k-1's values)
        self.source.value = source
        self.stack.value = stack
        self.variables.value = variables
        self.ancillas.value = ancillas
        self.status.value = status

    def export_html(self, path: str | Path, max_steps: int = PAGE_STEPS) -> Path:
        """Write this debugger as a standalone HTML page (no kernel, no network), centred
        on the current step; see :func:`export_html`."""
        return export_html(self.trace, path, around=self.index, max_steps=max_steps)

    def default_export_path(self) -> Path:
        """``<function>-debugger.html`` in the working folder (``cell-debugger.html`` for a cell)."""
        name = re.sub(r"[^\w.-]+", "_", self.trace.function.__name__).strip("_") or "revbench"
        return Path(f"{name}-debugger.html")

    def export(self, path: str | Path | None = None) -> Path:
        """What the *export page* button does: write the page (to ``path``, else
        :attr:`export_path`, else :meth:`default_export_path`) and show a link that
        downloads it (a ``data:`` URI, so it works wherever the notebook runs)."""
        target = Path(path) if path is not None else self.export_path or self.default_export_path()
        written = self.export_html(target)
        self.export_link.value = download_link(written)
        return written

    def static_html(self) -> str:
        """The static page in an ``<iframe class="rb-static-debugger">`` (what a notebook
        exported to HTML shows when ``REVBENCH_STATIC_DEBUGGER=1``)."""
        return static_iframe(self.trace, around=self.index)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data = super()._repr_mimebundle_(**kwargs)
        if data is not None and static_debugger_wanted():
            data["text/html"] = self.static_html()
        return data


def download_link(path: Path) -> str:
    """A link that downloads the page at ``path``: its bytes in a ``data:`` URI (up to
    :data:`DOWNLOAD_LIMIT`; a bigger page gets a plain link to the file)."""
    raw = path.read_bytes()
    where = _e(path.resolve())
    if len(raw) <= DOWNLOAD_LIMIT:
        uri = "data:text/html;charset=utf-8;base64," + base64.b64encode(raw).decode("ascii")
        link = (f'<a class="rb-download" download="{_e(path.name)}" href="{uri}">'
                f'⤓ download {_e(path.name)}</a>')
    else:
        link = (f'<a class="rb-download" href="{_e(path.as_posix())}" target="_blank">'
                f'open {_e(path.name)}</a>')
    return (f"{link} · the page was written to <code>{where}</code> ({len(raw) // 1024 + 1} KiB); "
            "it steps without a kernel")


def debug(f: ReversibleFunction | Trace, *args: Any, loss: Any = None,
          max_steps: int = DEFAULT_MAX_STEPS, export: str | Path | None = None) -> Debugger:
    """The stepping debugger for ``f(*args)`` (or for a recorded :class:`Trace`); with
    ``export=PATH`` it also writes its static page there (the *export page* button's file)."""
    t = f if isinstance(f, Trace) else trace(f, *args, loss=loss, max_steps=max_steps)
    w = Debugger(t, export_path=export)
    if export is not None:
        w.export(export)
    return w


# --------------------------------------------------------------------------- #
# The static page
# --------------------------------------------------------------------------- #
_PAGE_JS = r"""
(function () {
  var root = document.currentScript.parentNode;
  var data = JSON.parse(root.querySelector('script.rb-data').textContent);
  var q = function (cls) { return root.querySelector('.' + cls); };
  var panels = data.classes.map(q);
  var slider = q('rb-slider'), play = q('rb-play'), timer = null, i = 0, tallest = 0;
  var PLAY = data.labels[0], PAUSE = data.labels[1];
  function fit() {
    // Inside an iframe (a static website): size the frame to the tallest step shown so far
    // (no jumping while stepping).  The frame's own height is no measure (the page fills
    // it), so measure the debugger itself; tell the frame directly where the origin allows,
    // else by message to the embedding page's listener (a page opened from disk).
    if (window.parent === window) { return; }
    var h = Math.ceil(root.getBoundingClientRect().bottom + window.scrollY) + 16;
    if (h <= tallest) { return; }
    tallest = h;
    try {
      if (window.frameElement) { window.frameElement.style.height = h + 'px'; return; }
    } catch (e) { /* another origin: ask the embedding page */ }
    window.parent.postMessage({revbenchDebuggerHeight: h}, '*');
  }
  function show(j) {
    i = Math.max(0, Math.min(data.steps.length - 1, j));
    var s = data.steps[i];
    for (var p = 0; p < panels.length; p++) { panels[p].innerHTML = data.panels[s[p]]; }
    slider.value = String(data.offset + i + 1);
    if (i === data.steps.length - 1) { stop(); }
    fit();
  }
  function stop() { if (timer !== null) { clearInterval(timer); timer = null; play.textContent = PLAY; } }
  q('rb-start').onclick = function () { show(0); };
  q('rb-back').onclick = function () { show(i - 1); };
  q('rb-forward').onclick = function () { show(i + 1); };
  q('rb-end').onclick = function () { show(data.steps.length - 1); };
  q('rb-turn').onclick = function () { if (data.turn !== null) { show(data.turn - data.offset); } };
  var err = q('rb-goto-error');
  if (err) { err.onclick = function () { show(data.error - data.offset); }; }
  play.onclick = function () {
    if (timer !== null) { stop(); return; }
    if (i === data.steps.length - 1) { show(0); }
    play.textContent = PAUSE;
    timer = setInterval(function () { show(i + 1); }, data.interval);
  };
  slider.oninput = function () { show(parseInt(slider.value, 10) - data.offset - 1); };
  root.addEventListener('keydown', function (ev) {
    if (ev.target === slider) { return; }
    if (ev.key === 'ArrowRight') { show(i + 1); ev.preventDefault(); }
    if (ev.key === 'ArrowLeft') { show(i - 1); ev.preventDefault(); }
  });
  show(data.current - data.offset);
  window.addEventListener('load', fit);
})();
"""


def page_html(t: Trace, around: int = 0, max_steps: int = PAGE_STEPS) -> str:
    """The debugger as one HTML document: inline CSS and JavaScript, no network."""
    n = len(t)
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    lo = max(0, min(around - max_steps // 2, n - max_steps))
    hi = min(n, lo + max_steps)
    table: dict[str, int] = {}
    panels: list[str] = []
    steps = []
    for k in range(lo, hi):
        row = []
        for text in render_panels(t, k):
            j = table.get(text)
            if j is None:
                j = table[text] = len(panels)
                panels.append(text)
            row.append(j)
        steps.append(row)
    turn_ok = t.turn is not None and lo <= t.turn < hi
    data = {"offset": lo, "current": max(lo, min(around, hi - 1)), "turn": t.turn if turn_ok else None,
            "error": t.error_step, "classes": list(PANELS), "steps": steps, "panels": panels,
            "labels": [PLAY_LABEL, PAUSE_LABEL], "interval": PLAY_INTERVAL_MS}
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    note = ""
    if (lo, hi) != (0, n):
        note = (f'<div class="rb-window">This page holds steps {lo + 1} to {hi} of {n} (the trace is '
                f'longer than max_steps={max_steps}); export with a larger max_steps, or from '
                "another step, to see the rest.</div>")
    error = render_error(t)
    goto_error = ('<button class="rb-goto-error" title="jump to the step that failed">✗ go to the '
                  'error</button>') if t.error_step is not None and lo <= t.error_step < hi else ""
    name = _e(t.function.__name__)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>revbench debugger: {name}</title>
<style>body {{ font-family: sans-serif; margin: 16px; }}
.rb-controls button {{ padding: 3px 8px; }}{CSS}</style></head>
<body>
<div class="rb-debugger rb-static" tabindex="0">
<div class="rb-controls">
<button class="rb-start" title="jump to the first step">|◀ start</button>
<button class="rb-back" title="step back">◀ back</button>
<button class="rb-play" title="{_PLAY_TIP}">{PLAY_LABEL}</button>
<button class="rb-forward" title="step forward">forward ▶</button>
<button class="rb-end" title="jump to the last step">end ▶|</button>
<button class="rb-turn" title="{_TURN_TIP}"{'' if turn_ok else ' disabled'}>⟲ turning point</button>
{goto_error}
<label>step <input type="range" class="rb-slider" min="{lo + 1}" max="{hi}" value="{lo + 1}" step="1"></label>
</div>
<div class="rb-status"></div>
{error}
<div class="rb-main"><div class="rb-source"></div>
<div class="rb-side"><div class="rb-stack-panel"></div><div class="rb-vars-panel"></div>
<div class="rb-ancillas-panel"></div></div></div>
{note}
<script type="application/json" class="rb-data">{payload}</script>
<script>{_PAGE_JS}</script>
</div>
</body></html>
"""


def export_html(t: Trace, path: str | Path, around: int = 0, max_steps: int = PAGE_STEPS) -> Path:
    """Write ``t`` as a standalone debugger page (see :func:`page_html`); returns the path."""
    path = Path(path)
    path.write_text(page_html(t, around, max_steps), encoding="utf-8")
    return path


def static_iframe(t: Trace, around: int = 0, max_steps: int = PAGE_STEPS) -> str:
    """The static page embedded in an HTML document: ``<iframe class="rb-static-debugger"
    srcdoc="...">`` (the page escaped into the attribute; no file, no network).  Its height
    is estimated from what the page shows; the page's script grows it to fit when the frame
    shares the document's origin."""
    page = page_html(t, around, max_steps)
    source = min(len(t.source), SOURCE_WINDOW) + 4
    side = len(t.params) + 8 + (6 if t.has_calls else 0)
    height = max(360, min(1200, 150 + 20 * max(source, side)))
    title = _e(f"revbench debugger: {t.function.__name__}")
    return (f'<iframe class="rb-static-debugger" title="{title}" srcdoc="{_e(page)}" '
            f'style="width:100%;height:{height}px;border:0"></iframe>' + _FIT_LISTENER)


#: beside each embedded page: sizes a frame whose page asks for a height by message (one
#: listener per document, however many debuggers it embeds)
_FIT_LISTENER = """<script>(function () {
  if (window.revbenchFitFrames) { return; }
  window.revbenchFitFrames = true;
  window.addEventListener('message', function (e) {
    var h = e.data && e.data.revbenchDebuggerHeight;
    if (typeof h !== 'number') { return; }
    var frames = document.querySelectorAll('iframe.rb-static-debugger');
    for (var k = 0; k < frames.length; k++) {
      if (frames[k].contentWindow === e.source) { frames[k].style.height = h + 'px'; }
    }
  });
})();</script>"""


__all__ = ["Debugger", "debug", "error_text", "export_html", "page_html", "render_panels",
           "static_iframe"]

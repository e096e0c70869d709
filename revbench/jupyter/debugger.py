"""The stepping debugger: a :class:`~revbench.tracing.Trace` as a Jupyter widget or an HTML page.

``revbench.debug(f, *args, loss=None)`` records a trace and returns a
:class:`Debugger` widget: the source with the current line marked (▶ running
forward, ◀ backward), a variables table (changed values highlighted, adjoints
beside values in gradient mode), the ancillas with their states (a dirty one
in red), and controls: start, step back, step forward, end, the turning
point, play, and a slider.  :meth:`Debugger.export_html` writes the same
debugger as one self-contained page that steps without a kernel.

One rendering serves both: Python renders each panel's HTML for a step
(:func:`render_panels`); the widget shows it in ``HTML`` widgets, and the page
embeds the panels of every step (identical ones stored once) with a few
lines of inline JavaScript that only swaps them.  That keeps one source of
truth for what a step looks like, at the price of a page that grows with the
number of steps, so a page holds at most ``max_steps`` steps (5000 by
default) around the current one and says so when the trace is longer.

The DOM carries the classes the browser tests rely on: ``rb-debugger`` (root),
``rb-start``, ``rb-back``, ``rb-forward``, ``rb-end``, ``rb-turn``, ``rb-play``,
``rb-slider``, ``rb-status`` (``step K / N · forward · line L``), ``rb-source``
(current line ``rb-current``), ``table.rb-vars`` (rows ``tr[data-name]``,
``td.rb-value``, ``td.rb-adjoint``, ``rb-changed``) and ``table.rb-ancillas``
(``tr[data-name][data-state]``, ``rb-dirty``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from revbench.backends.tracer import DEFAULT_MAX_STEPS
from revbench.function import ReversibleFunction
from revbench.jupyter.cell import CELL_LABELS
from revbench.tracing import State, Trace, source_lines, trace

#: at most this many source lines are shown; longer functions show a window around the line
SOURCE_WINDOW = 40
#: steps a static page holds at most (each step's panels are embedded)
PAGE_STEPS = 5000
_TURN_TIP = "jump to the turning point: the forward run ends and the backward run begins"

CSS = """
.rb-debugger { font-size: 13px; color: #1f2328; background: #ffffff; padding: 6px;
  border: 1px solid #d0d7de; border-radius: 6px; max-width: 1100px; }
.rb-debugger .rb-controls { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; }
.rb-status { font-family: monospace; margin: 4px 0; }
.rb-status .rb-dir-forward { color: #1a7f37; font-weight: bold; }
.rb-status .rb-dir-backward { color: #9a6700; font-weight: bold; }
.rb-status .rb-action { color: #57606a; }
.rb-status .rb-step-error, .rb-error { color: #82071e; background: #ffebe9; padding: 2px 6px;
  white-space: pre-wrap; font-family: monospace; border-radius: 4px; }
.rb-main { display: flex; gap: 12px; align-items: flex-start; }
.rb-source { flex: 1 1 55%; min-width: 0; }
.rb-side { flex: 1 1 45%; min-width: 0; }
.rb-head { font-weight: bold; margin: 2px 0 4px 0; }
.rb-code { font-family: monospace; white-space: pre; overflow-x: auto; border: 1px solid #d0d7de;
  border-radius: 4px; padding: 2px 0; background: #f6f8fa; }
.rb-line { padding: 0 6px; color: #1f2328; }
.rb-ln { display: inline-block; width: 3.5em; color: #8c959f; text-align: right; margin-right: 4px; }
.rb-mark { display: inline-block; width: 1.2em; }
.rb-current.rb-dir-forward { background: #dafbe1; box-shadow: inset 3px 0 #1a7f37; }
.rb-current.rb-dir-backward { background: #fff8c5; box-shadow: inset 3px 0 #9a6700; }
.rb-current.rb-failed { background: #ffebe9; box-shadow: inset 3px 0 #cf222e; }
.rb-side table { border-collapse: collapse; width: 100%; margin-bottom: 8px; font-family: monospace; }
.rb-side th { text-align: left; border-bottom: 1px solid #d0d7de; padding: 2px 6px;
  font-family: sans-serif; font-weight: 600; }
.rb-side td { padding: 1px 6px; border-bottom: 1px solid #eaeef2; vertical-align: top;
  color: #1f2328; }
.rb-side td.rb-note { color: #57606a; font-size: 11px; }
tr.rb-changed td { background: #fff8c5; font-weight: bold; }
td.rb-adjoint { color: #8250df; }
td.rb-adjoint.rb-adj-changed { background: #fbefff; font-weight: bold; }
tr.rb-dirty td { background: #ffebe9; color: #82071e; font-weight: bold; }
tr[data-state="freed"] td { color: #8c959f; }
tr[data-state="clean"] td.rb-state { color: #1a7f37; }
tr[data-state="allocated"] td.rb-state { color: #0969da; }
.rb-empty td { color: #8c959f; font-style: italic; }
.rb-window { color: #57606a; font-style: italic; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


# --------------------------------------------------------------------------- #
# Rendering: the panels of one step, as HTML (shared by the widget and the page)
# --------------------------------------------------------------------------- #
def render_status(t: Trace, k: int) -> str:
    """``step K / N · forward · line L · in f ← g:12``, then what ran (and any error)."""
    step = t[k]
    stack = " ← ".join(f"{name}:{line}" for name, line in reversed(step.stack))
    parts = [
        f'<span class="rb-step">step {k + 1} / {len(t)}</span>',
        f'<span class="rb-dir rb-dir-{step.direction}">{step.direction}</span>',
        f'<span class="rb-lineno">line {step.lineno}</span>',
        f'<span class="rb-stack" title="call stack, innermost first">in {_e(stack)}</span>',
    ]
    out = " · ".join(parts)
    out += f'<div class="rb-action">{"▶" if step.direction == "forward" else "◀"} {_e(step.action)}</div>'
    if step.error is not None:
        out += f'<div class="rb-step-error">✗ {_e(_error_text(step.error))}</div>'
    return out


def render_source(t: Trace, k: int) -> str:
    """The current function's source, the step's line marked with its direction."""
    step = t[k]
    lines = source_lines(step.frame.function)
    if len(lines) > SOURCE_WINDOW:
        at = next((i for i, (n, _) in enumerate(lines) if n == step.lineno), 0)
        lo = max(0, min(at - SOURCE_WINDOW // 2, len(lines) - SOURCE_WINDOW))
        shown = lines[lo:lo + SOURCE_WINDOW]
    else:
        lo, shown = 0, lines
    arrow = "▶" if step.direction == "forward" else "◀"
    rows = []
    if lo > 0:
        rows.append('<div class="rb-line rb-window">⋮</div>')
    for n, text in shown:
        cls = "rb-line"
        mark = " "
        if n == step.lineno:
            cls += f" rb-current rb-dir-{step.direction}" + (" rb-failed" if step.error else "")
            mark = "✗" if step.error else arrow
        rows.append(f'<div class="{cls}" data-line="{n}"><span class="rb-ln">{n}</span>'
                    f'<span class="rb-mark">{mark}</span>{_e(text)}</div>')
    if lo + len(shown) < len(lines):
        rows.append('<div class="rb-line rb-window">⋮</div>')
    shown_file = CELL_LABELS.get(step.filename, step.filename)
    where = f"{_e(step.frame.name)} <span class='rb-file'>({_e(shown_file)})</span>"
    phase = "forward" if step.direction == "forward" else "backward: " + (
        "the reverse sweep (inverse + adjoints)" if step.frame.direction.startswith("backward")
        else "running the inverse")
    return (f'<div class="rb-head">{where} · {arrow} {_e(phase)}</div>'
            f'<div class="rb-code">{"".join(rows)}</div>')


def render_variables(state: State, gradient: bool) -> str:
    """The variables table: value, what this step changed, the adjoint in gradient mode."""
    head = "<th>variable</th><th>value</th>" + ("<th>adjoint ∂L/∂·</th>" if gradient else "") + \
        "<th></th>"
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


def render_panels(t: Trace, k: int) -> tuple[str, str, str, str]:
    """The HTML of the status, source, variables and ancillas panels at step ``k``."""
    state = t.state_at(k)
    return (render_status(t, k), render_source(t, k), render_variables(state, t.gradient_mode),
            render_ancillas(state))


def render_error(t: Trace) -> str:
    if t.error is None:
        return ""
    where = f" (step {t.error_step + 1})" if t.error_step is not None else ""
    return f"<b>The trace stopped{where}:</b>\n{_e(_error_text(t.error))}"


def _error_text(exc: BaseException) -> str:
    notes = "".join("\n" + n for n in getattr(exc, "__notes__", ()))
    text = str(exc)
    if not isinstance(exc, RuntimeError):  # IndexError, AssertionError...: say which
        text = f"{type(exc).__name__}: {text}"
    return text + notes


# --------------------------------------------------------------------------- #
# The widget
# --------------------------------------------------------------------------- #
def _button(label: str, cls: str, tooltip: str, on_click: Callable[[], None]) -> widgets.Button:
    b = widgets.Button(description=label, tooltip=tooltip, layout=widgets.Layout(width="auto"))
    b.add_class(cls)
    b.on_click(lambda _b: on_click())
    return b


class Debugger(widgets.VBox):
    """The stepping debugger over one :class:`~revbench.tracing.Trace` (see the module docstring).

    ``index`` is the current step (0-based; the status line counts from 1);
    :meth:`go` moves to a step; the buttons and the slider call it.
    """

    def __init__(self, t: Trace, start: int = 0):
        self.trace = t
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
        self.play = widgets.Play(value=1, min=1, max=n, step=1, interval=400, show_repeat=False,
                                 tooltip="play: step forward every 0.4 s")
        self.play.add_class("rb-play")
        self.slider = widgets.IntSlider(value=1, min=1, max=n, step=1, description="step",
                                        continuous_update=True, layout=widgets.Layout(width="420px"))
        self.slider.add_class("rb-slider")
        widgets.link((self.play, "value"), (self.slider, "value"))
        self.slider.observe(lambda _change: self._show(), names="value")
        self.status = widgets.HTML().add_class("rb-status")
        self.source = widgets.HTML().add_class("rb-source")
        self.variables = widgets.HTML().add_class("rb-vars-panel")
        self.ancillas = widgets.HTML().add_class("rb-ancillas-panel")
        self.error = widgets.HTML(render_error(t)).add_class("rb-error-panel")
        controls = [self.start_button, self.back_button, self.play, self.forward_button,
                    self.end_button, self.turn_button]
        if t.error_step is not None:
            controls.append(_button("✗ go to the error", "rb-goto-error",
                                    "jump to the step that failed", lambda: self.go(t.error_step)))
        side = widgets.VBox([self.variables, self.ancillas], layout=widgets.Layout(flex="1 1 45%"))
        side.add_class("rb-side")
        main = widgets.HBox([self.source, side])
        main.add_class("rb-main")
        self.source.layout = widgets.Layout(flex="1 1 55%")
        bar = widgets.HBox(controls + [self.slider])
        bar.add_class("rb-controls")
        parts = [widgets.HTML(f"<style>{CSS}</style>").add_class("rb-style"), bar, self.status, main]
        if t.error is not None:
            parts.append(self.error)
        super().__init__(parts)
        self.add_class("rb-debugger")
        self.go(start)

    @property
    def index(self) -> int:
        """The current step (0-based)."""
        return self.slider.value - 1

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
        status, source, variables, ancillas = render_panels(self.trace, self.index)
        self.status.value = status
        self.source.value = source
        self.variables.value = variables
        self.ancillas.value = ancillas

    def export_html(self, path: str | Path, max_steps: int = PAGE_STEPS) -> Path:
        """Write this debugger as a standalone HTML page (no kernel, no network), centred
        on the current step; see :func:`export_html`."""
        return export_html(self.trace, path, around=self.index, max_steps=max_steps)


def debug(f: ReversibleFunction | Trace, *args: Any, loss: Any = None,
          max_steps: int = DEFAULT_MAX_STEPS) -> Debugger:
    """The stepping debugger for ``f(*args)`` (or for a recorded :class:`Trace`)."""
    t = f if isinstance(f, Trace) else trace(f, *args, loss=loss, max_steps=max_steps)
    return Debugger(t)


# --------------------------------------------------------------------------- #
# The static page
# --------------------------------------------------------------------------- #
_PAGE_JS = r"""
(function () {
  var root = document.currentScript.parentNode;
  var data = JSON.parse(root.querySelector('script.rb-data').textContent);
  var q = function (cls) { return root.querySelector('.' + cls); };
  var panels = [q('rb-status'), q('rb-source'), q('rb-vars-panel'), q('rb-ancillas-panel')];
  var slider = q('rb-slider'), play = q('rb-play'), timer = null, i = 0;
  function show(j) {
    i = Math.max(0, Math.min(data.steps.length - 1, j));
    var s = data.steps[i];
    for (var p = 0; p < 4; p++) { panels[p].innerHTML = data.panels[s[p]]; }
    slider.value = String(data.offset + i + 1);
    if (i === data.steps.length - 1) { stop(); }
  }
  function stop() { if (timer !== null) { clearInterval(timer); timer = null; play.textContent = '▶ play'; } }
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
    play.textContent = '⏸ pause';
    timer = setInterval(function () { show(i + 1); }, 400);
  };
  slider.oninput = function () { show(parseInt(slider.value, 10) - data.offset - 1); };
  root.addEventListener('keydown', function (ev) {
    if (ev.target === slider) { return; }
    if (ev.key === 'ArrowRight') { show(i + 1); ev.preventDefault(); }
    if (ev.key === 'ArrowLeft') { show(i - 1); ev.preventDefault(); }
  });
  show(data.current - data.offset);
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
            "error": t.error_step, "steps": steps, "panels": panels}
    payload = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    note = ""
    if (lo, hi) != (0, n):
        note = (f'<div class="rb-window">This page holds steps {lo + 1} to {hi} of {n} (the trace is '
                f'longer than max_steps={max_steps}); export with a larger max_steps, or from '
                "another step, to see the rest.</div>")
    error = f'<div class="rb-error">{render_error(t)}</div>' if t.error is not None else ""
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
<button class="rb-play" title="play: step forward every 0.4 s">▶ play</button>
<button class="rb-forward" title="step forward">forward ▶</button>
<button class="rb-end" title="jump to the last step">end ▶|</button>
<button class="rb-turn" title="{_TURN_TIP}"{'' if turn_ok else ' disabled'}>⟲ turning point</button>
{goto_error}
<label>step <input type="range" class="rb-slider" min="{lo + 1}" max="{hi}" value="{lo + 1}" step="1"></label>
</div>
<div class="rb-status"></div>
<div class="rb-main"><div class="rb-source"></div>
<div class="rb-side"><div class="rb-vars-panel"></div><div class="rb-ancillas-panel"></div></div></div>
{error}{note}
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


__all__ = ["Debugger", "debug", "export_html", "page_html", "render_panels"]

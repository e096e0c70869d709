"""Each source line beside its inverse and its adjoint: ``f.explain()`` and ``--show lines``.

In the spirit of ``%%cython -a``: a table with a row per line of a reversible
function (or a cell program), showing what the inverse ``~f`` runs for that line
and what the reverse sweep of automatic differentiation runs for it -- without
the plumbing of the generated code (runtime checks, tolerance arguments, buffers).

Nothing here rewrites source text.  The two columns are printed from the IR the
compiler itself runs: the inverse column from :meth:`Program.ir_for(INVERSE)
<revbench.compiler.Program.ir_for>` (the ``invert`` transform's output), the
adjoint column from :meth:`Program.typed(BACKWARD, ...)
<revbench.compiler.Program.typed>` (the ``adjoint`` transform's output) after
:func:`~revbench.transforms.prune.drop_zero_adjoint_updates`, which code
generation applies to every reverse sweep.  Each statement carries the line of
the user's source it came from (``ir.Loc``), which decides its row:

* a statement goes to the row of its own line when that line lies inside the
  statement that holds it (a loop's body, a branch);
* a statement whose line lies outside what holds it -- the routine's lines that
  ``~routine`` runs again in the inverse, the element loop the adjoint of a
  whole-array update runs on the update's own line -- stays in its holder's
  row, indented below it, with everything it holds.

The adjoint column shows the statements of the sweep that compute adjoints (on
``x̄``, the adjoint of ``x``); the sweep also runs, beside them, the line's
inverse (the middle column), which restores the values those formulas read.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from revbench.lang import ir
from revbench.lang.errors import ReversibilityError
from revbench.lang.pretty import ADJOINT_PREFIX, Printer, display_width, readable_name, routine_name
from revbench.lang.types import VarType
from revbench.rules.inverse import invert_body
from revbench.transforms.pipeline import BACKWARD, INVERSE
from revbench.transforms.prune import drop_zero_adjoint_updates, prune

if TYPE_CHECKING:
    from revbench.compiler import Program

#: names of the helper ancillas the adjoint transform adds for ``np.max``/``np.min``
_ADJOINT_HELPERS = ("_rb_m", "_rb_c")


@dataclass(frozen=True)
class Step:
    """One statement (or a block's header line) of the inverse or of the reverse sweep.

    ``depth`` is its nesting in that program, ``row`` the source line it is shown
    beside; :attr:`Explanation.inverse_steps` lists them in the order the program
    runs them (a loop's body once)."""

    text: str
    depth: int
    row: int


@dataclass(frozen=True)
class Row:
    """One source line: its text and, indented as they nest, what each column runs for it."""

    line: int
    source: str
    inverse: tuple[str, ...] = ()
    adjoint: tuple[str, ...] = ()


@dataclass
class _Node:
    text: str
    row: int
    depth: int
    adjoint: bool = False  # a statement on adjoints (kept in the adjoint column)
    children: list[_Node] = field(default_factory=list)

    def flatten(self, only_adjoint: bool) -> list[Step]:
        inner = [s for c in self.children for s in c.flatten(only_adjoint)]
        if only_adjoint and not self.adjoint and not inner:
            return []
        return ([Step(self.text, self.depth, self.row)] if self.text else []) + inner


class _Layout:
    """Walks one program (the inverse or the reverse sweep) and places each statement
    in a row: see the module docstring for the rule."""

    def __init__(self, source: ir.Function, printer: Printer, sweep: bool):
        self.source = source
        self.printer = printer
        self.sweep = sweep  # the reverse sweep: Blocks carry no header, adjoints are marked
        self.owner = _line_owners(source.body)

    def body(self, stmts, row: int, span: tuple[int, int] | None, depth: int) -> list[_Node]:
        """Nodes of a statement list; ``span`` is the lines of the statement holding it
        (None once a holder was placed outside its lines: all below stay in ``row``)."""
        out: list[_Node] = []
        for s in stmts:
            line = self.owner.get(s.loc.line, s.loc.line)
            inside = span is not None and line and span[0] < line <= span[1]
            here = line if inside else (row or (out[-1].row if out else 0))
            sub_span = _span(s) if inside else None
            out.extend(self.stmt(s, here, sub_span, depth))
        return out

    def stmt(self, s: ir.Stmt, row: int, span, depth: int) -> list[_Node]:
        p = self.printer
        if isinstance(s, (ir.For, ir.While)):
            return [_Node(f"{p.header(s)}:", row, depth,
                          children=self.body(s.body, row, span, depth + 1))]
        if isinstance(s, ir.If):
            return [self.if_(s, row, span, depth, "if")]
        if isinstance(s, ir.Block):
            return self.block(s, s.body, row, span, depth, undo=False)
        if isinstance(s, ir.Inverted):
            # an Inverted block runs its body's inverse: show what runs
            return self.block(s, invert_body(s.body), row, span, depth, undo=True)
        if isinstance(s, ir.Call) and s.backward:
            return [_Node(self.backward_call(s), row, depth, adjoint=True)]
        return [_Node(p.simple(s), row, depth, adjoint=self.sweep and _on_adjoints(s))]

    def if_(self, s: ir.If, row: int, span, depth: int, keyword: str) -> _Node:
        p = self.printer
        node = _Node(f"{keyword} {p.condition(s.pre, s.post)}:", row, depth,
                     children=self.body(s.then, row, span, depth + 1))
        if not s.orelse:
            return node
        elif_line = self._elif_line(s, span)
        if elif_line is not None:  # `elif`: the inner `if` on its own line, not nested
            node.children.append(self.if_(s.orelse[0], elif_line, _span(s.orelse[0]), depth, "elif"))
            return node
        else_row = self._else_line(s, span) or row
        node.children.append(_Node("else:", else_row, depth,
                                   children=self.body(s.orelse, row, span, depth + 1)))
        return node

    def block(self, s, body, row: int, span, depth: int, undo: bool) -> list[_Node]:
        if self.sweep or not s.label.lstrip("~").startswith("routine"):
            # a `with inverted:` block, or any block of the sweep: its statements in their
            # rows (the sweep's blocks run forward or undone whatever their labels say)
            note = [] if self.sweep or not s.label else [
                _Node("# the block, undone:" if undo else "# the block, as written:", row, depth)]
            return note + self.body(body, row, span, depth)
        name = routine_name(s.label)
        header = ("~" + name) if undo else ("with routine:" if name == "routine"
                                            else f"with routine as {name}:")
        return [_Node(header, row, depth, children=self.body(body, row, span, depth + 1))]

    def backward_call(self, s: ir.Call) -> str:
        p = self.printer
        call = f"{'~' if s.inverted else ''}{s.func}({', '.join(p.target(a) for a in s.args)})"
        carried = [p.target(a) for a in s.adj_args if a is not None]
        return f"reverse sweep of {call}" + (f" with {', '.join(carried)}" if carried else "")

    # -- the lines of `else:` and `elif` (they hold no statement of their own) ------------
    def _else_line(self, s: ir.If, span) -> int | None:
        if span is None:
            return None
        lines = [x.loc.line for x in s.orelse if x.loc.line]
        first = min(lines) if lines else 0
        ends = [_span(x)[1] for x in s.then if x.loc.line]
        for line in range(first - 1, max(ends, default=s.loc.line), -1):
            if self.source.line_text(line).strip().startswith("else"):
                return line
        return None

    def _elif_line(self, s: ir.If, span) -> int | None:
        if span is None or len(s.orelse) != 1 or not isinstance(s.orelse[0], ir.If):
            return None
        line = s.orelse[0].loc.line
        return line if self.source.line_text(line).strip().startswith("elif") else None


def _span(s: ir.Stmt) -> tuple[int, int]:
    return s.loc.line, s.loc.end_line or s.loc.line


def _line_owners(body) -> dict[int, int]:
    """Each continuation line of a statement written over several lines -> its first line
    (a formula's parts carry their own lines; they belong to the statement's row)."""
    owners: dict[int, int] = {}
    for s in ir.walk_stmts(body):
        if not ir.child_blocks(s) and s.loc.line:
            a, b = _span(s)
            for line in range(a + 1, b + 1):
                owners.setdefault(line, a)
    return owners


def _shown_as_adjoint(name: str) -> bool:
    """An adjoint variable, or a helper ancilla of the adjoint of ``np.max``/``np.min``."""
    return ir.is_adjoint(name) or (
        name.startswith(_ADJOINT_HELPERS) and name[len("_rb_m"):].isdigit())


def _on_adjoints(s: ir.Stmt) -> bool:
    """Is this statement of the reverse sweep about adjoints (not the primal's inverse)?"""
    names = ir.simple_writes(s)
    return bool(names) and all(_shown_as_adjoint(n) for n in names)


def _rows_of(nodes: list[_Node], only_adjoint: bool) -> tuple[list[Step], dict[int, list[str]]]:
    steps = [s for n in nodes for s in n.flatten(only_adjoint)]
    by_row: dict[int, list[Step]] = {}
    for s in steps:
        by_row.setdefault(s.row, []).append(s)
    cells = {}
    for row, items in by_row.items():
        base = min(s.depth for s in items)
        cells[row] = ["    " * (s.depth - base) + s.text for s in items]
    return steps, cells


# --------------------------------------------------------------------------- #
# The explanation
# --------------------------------------------------------------------------- #


@dataclass
class Explanation:
    """A reversible program's lines beside its inverse and its adjoint.

    ``str()`` (and the notebook's plain-text view) is a text table; a notebook shows
    an HTML table that follows JupyterLab's light or dark theme.  ``rows`` hold the
    same content for programs to read.
    """

    name: str
    params: tuple[str, ...]
    signature: tuple[VarType, ...]
    rows: tuple[Row, ...]
    inverse_steps: tuple[Step, ...]
    adjoint_steps: tuple[Step, ...]
    loss: str | None = None
    #: why the adjoint column is empty (no float variable, a type error), else ""
    adjoint_note: str = ""
    #: False for ``check=False`` code: the work only a check reads is left out, as there
    checked: bool = True

    # -- headings --------------------------------------------------------------------------
    @property
    def inverse_heading(self) -> str:
        return f"~{self.name} runs (bottom to top)"

    @property
    def adjoint_heading(self) -> str:
        if self.loss:
            return f"reverse sweep: ∂{self.loss}/∂·"
        return "reverse sweep: adjoints"

    def legend(self) -> str:
        """The sentence under the table: how to read it."""
        types = ", ".join(f"{n}: {t}" for n, t in zip(self.params, self.signature))
        bar = readable_name(ADJOINT_PREFIX + "x")
        if self.loss:
            name, bracket, index = self.loss.partition("[")  # a loss may be one element: r[3]
            seed = readable_name(ADJOINT_PREFIX + name) + bracket + index
            what = (f"{bar} is ∂{self.loss}/∂x, the gradient of {self.loss} with respect to x "
                    f"(the sweep starts from {seed} = 1, every other adjoint 0)")
        else:
            what = (f"{bar} is the adjoint of x, ∂L/∂x for the loss L whose adjoint the sweep "
                    "starts from")
        text = (f"{self.name}({', '.join(self.params)}) with {types or 'no arguments'}. "
                f"~{self.name} runs the lines from the last to the first, each line's "
                f"statements top to bottom. The reverse sweep of AD walks the lines in the same "
                f"order, running for each line its inverse together with the adjoint statements "
                f"shown. {what}.")
        if not self.checked:
            text += (" Unchecked code: the work only a runtime check would read (such as "
                     "uncomputing an ancilla) is left out, as the compiled code leaves it out.")
        if self.adjoint_note:
            text += f" No adjoint column: {self.adjoint_note}."
        return text

    # -- text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        heads = ("line", "source", self.inverse_heading, self.adjoint_heading)
        table = [(str(r.line), r.source.split("\n"), list(r.inverse), list(r.adjoint))
                 for r in self.rows]
        widths = [max([display_width(heads[0])] + [display_width(t[0]) for t in table])]
        for k in (1, 2, 3):
            widths.append(max([display_width(heads[k])]
                              + [display_width(x) for t in table for x in t[k]]))

        def pad(text: str, width: int) -> str:
            return text + " " * (width - display_width(text))

        out = ["  ".join(pad(h, w) for h, w in zip(heads, widths)).rstrip(),
               "  ".join("-" * w for w in widths)]
        for number, source, inverse, adjoint in table:
            height = max(len(source), len(inverse), len(adjoint), 1)
            for i in range(height):
                cells = (number.rjust(widths[0]) if i == 0 else " " * widths[0],
                         *(pad(col[i] if i < len(col) else "", w)
                           for col, w in zip((source, inverse, adjoint), widths[1:])))
                out.append("  ".join(cells).rstrip())
        return "\n".join(out) + "\n\n" + textwrap.fill(self.legend(), 100)

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))

    # -- html ------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        def cell(lines, cls: str) -> str:
            text = html.escape("\n".join(lines))
            return f'<td class="{cls}"><pre>{text}</pre></td>'

        body = "".join(
            f'<tr><td class="rb-x-line">{r.line}</td>{cell([r.source], "rb-x-src")}'
            f'{cell(r.inverse, "rb-x-inv")}{cell(r.adjoint, "rb-x-adj")}</tr>'
            for r in self.rows)
        heads = ("line", "source", self.inverse_heading, self.adjoint_heading)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
        return (f"<div class=\"rb-explain\"><style>{CSS}</style><table class=\"rb-x\">"
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<p class=\"rb-x-legend\">{html.escape(self.legend())}</p></div>")


#: Colours from JupyterLab's theme variables, so the table reads in the light and the dark
#: theme alike; each fallback (outside JupyterLab) is a translucent grey or `inherit`,
#: which also reads on either background.
CSS = """
div.rb-explain table.rb-x { border-collapse: collapse; table-layout: auto; margin: 0;
  color: var(--jp-content-font-color1, inherit); background: transparent;
  font-size: var(--jp-code-font-size, 13px); }
div.rb-explain table.rb-x th { text-align: left; padding: 2px 10px; font-weight: 600;
  background: var(--jp-layout-color2, rgba(127, 127, 127, 0.15));
  border-bottom: 1px solid var(--jp-border-color1, rgba(127, 127, 127, 0.5)); }
div.rb-explain table.rb-x td { vertical-align: top; padding: 1px 10px; text-align: left;
  border-bottom: 1px solid var(--jp-border-color3, rgba(127, 127, 127, 0.2)); }
div.rb-explain table.rb-x pre { margin: 0; padding: 0; border: none; background: transparent;
  color: inherit; font-family: var(--jp-code-font-family, monospace); white-space: pre; }
div.rb-explain table.rb-x td.rb-x-line { color: var(--jp-content-font-color2, inherit);
  text-align: right; font-family: var(--jp-code-font-family, monospace); }
div.rb-explain table.rb-x td.rb-x-inv {
  border-left: 2px solid var(--jp-brand-color1, rgba(33, 150, 243, 0.7)); }
div.rb-explain table.rb-x td.rb-x-adj {
  border-left: 2px solid var(--jp-warn-color1, rgba(245, 124, 0, 0.7)); }
div.rb-explain p.rb-x-legend { color: var(--jp-content-font-color2, inherit); max-width: 60em;
  margin: 4px 0; }
"""


def explain(f: Any, *example_args: Any, loss: str | None = None) -> Explanation:
    """``f.explain(*example_args, loss=loss)`` for a reversible function ``f``
    (:meth:`revbench.ReversibleFunction.explain`, which picks the argument types and
    calls :func:`explain_program`)."""
    return f.explain(*example_args, loss=loss)


def explain_program(program: Program, signature: tuple[VarType, ...],
                    loss: str | None = None) -> Explanation:
    """:func:`explain` for a compiler :class:`~revbench.compiler.Program` and a signature."""
    source = program.ir
    inverse = _Layout(source, Printer(), sweep=False)
    inv_nodes = inverse.body(_as_compiled(program, program.ir_for(INVERSE)).body, 0,
                             (0, 1 << 30), 0)
    inv_steps, inv_cells = _rows_of(inv_nodes, only_adjoint=False)

    adj_steps: list[Step] = []
    adj_cells: dict[int, list[str]] = {}
    note = ""
    rule = program.custom_adjoint()
    if program.opaque:  # an external function: no lines of revbench's own
        out, *inputs = source.params
        how = (f"its custom adjoint {rule.label}" if rule is not None else
               "none: it has no adjoint yet (revbench.custom_adjoint)")
        note = (f"{source.name} is an external function: {out} += {source.name}"
                f"({', '.join(inputs)}); ~{source.name} subtracts it again; reverse sweep: {how}")
    elif rule is not None:
        note = (f"{source.name} has a custom adjoint, {rule.label}: its reverse sweep runs it on "
                f"the values at exit, then ~{source.name} (the sweep derived from these lines "
                "is not used)")
    elif not any(t.dtype in ("float", "complex") for t in signature):
        note = "no argument is a float or complex number, so nothing has a gradient"
    else:
        try:
            sweep = program.typed(BACKWARD, signature).func
            try:
                sweep = drop_zero_adjoint_updates(sweep, program.callee_writes)
            except ReversibilityError:  # a callee not defined yet: its calls stay as they are
                sweep = drop_zero_adjoint_updates(sweep)
            sweep = _as_compiled(program, sweep)
            layout = _Layout(source, Printer(times="·"), sweep=True)
            adj_steps, adj_cells = _rows_of(layout.body(sweep.body, 0, (0, 1 << 30), 0),
                                            only_adjoint=True)
        except (ReversibilityError, NotImplementedError) as exc:
            note = str(exc).splitlines()[0]

    first, end = _body_lines(source)
    while first > 1 and source.line_text(first - 1).strip().startswith("#"):
        first -= 1  # comments just above the first statement belong to the body
    lines = list(range(first, end))
    texts = {ln: source.line_text(ln) for ln in lines}
    while lines and not texts[lines[-1]].strip():
        lines.pop()
    shift = _common_indent([texts[ln] for ln in lines if texts[ln].strip()])
    rows = tuple(Row(ln, texts[ln][shift:].rstrip(), tuple(inv_cells.get(ln, ())),
                     tuple(adj_cells.get(ln, ()))) for ln in lines)
    return Explanation(source.name, source.params, tuple(signature), rows, tuple(inv_steps),
                       tuple(adj_steps), loss, note, program.check)


def _as_compiled(program: Program, func: ir.Function) -> ir.Function:
    """``func`` as code generation compiles it: without runtime checks
    (``check=False``), without the work that only a check would have read (pruned)."""
    if program.check:
        return func
    try:
        return prune(func, program.callee_writes_only, program.callee_writes_mirrored)
    except ReversibilityError:  # a callee not defined yet: shown unpruned
        return func


def _body_lines(func: ir.Function) -> tuple[int, int]:
    """``range(first, last + 1)`` of the lines the body's statements cover."""
    spans = [_span(s) for s in func.body if s.loc.line]
    if not spans:
        return 0, 0
    return min(a for a, _ in spans), max(b for _, b in spans) + 1


def _common_indent(lines: list[str]) -> int:
    return min((len(x) - len(x.lstrip()) for x in lines), default=0)


__all__ = ["CSS", "Explanation", "Row", "Step", "explain", "explain_program"]

"""Stage 2, *check*: static reversibility checks on parsed IR.

Refuses, with a :class:`ReversibilitySyntaxError` pointing at the user's
line, everything the language contract calls a static error:

* a plain assignment to an existing name, or an allocation over an argument;
* an ancilla not deallocated in the block that allocated it (on every path);
* ``del`` of something that is not a live ancilla of this block;
* an update of a ``for`` loop variable (read-only);
* aliasing visible in the names: ``y += y``, ``x[i] -= x[i] * 2``, the same
  variable passed twice to a call;
* a ``~routine`` with no matching open routine, or a routine never undone.

It also *resolves* what the parser could not know: the allocation expression
each ``del`` must compare against, and the body each ``~routine`` undoes
(it becomes an :class:`ir.Inverted` block).  It records index pairs that
might alias at run time (``x[i] += x[j]``) for the backend's runtime checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any

from revbench.lang import ir, ranges, suggest
from revbench.lang.errors import ReversibilitySyntaxError
from revbench.lang.text import expr_text
from revbench.rules.instructions import MUL, UPDATES
from revbench.rules.inverse import invert_body


@dataclass
class _Ancilla:
    alloc: ir.Alloc
    block: int  # id of the block that allocated it


@dataclass
class _Scope:
    params: frozenset[str]
    ancillas: dict[str, _Ancilla] = field(default_factory=dict)
    loop_vars: dict[str, ir.Loc] = field(default_factory=dict)
    #: what each loop variable's range proves (:mod:`revbench.lang.ranges`)
    loop_ranges: dict[str, ranges.LoopRange] = field(default_factory=dict)
    #: ancillas a routine's uncompute freed: name -> (`~routine`, its line)
    freed_by: dict[str, tuple[str, int]] = field(default_factory=dict)

    def child(self) -> _Scope:
        return _Scope(self.params, dict(self.ancillas), dict(self.loop_vars),
                      dict(self.loop_ranges), dict(self.freed_by))

    def defined(self, name: str) -> bool:
        return name in self.params or name in self.ancillas or name in self.loop_vars


class Checker:
    def __init__(self, func: ir.Function):
        self.func = func
        self._ids = count(1)
        self._open: list[list[tuple[str | None, ir.Block]]] = []  # open routines, per body

    def error(self, loc: ir.Loc, message: str) -> ReversibilitySyntaxError:
        return ReversibilitySyntaxError(
            f"{message} (in reversible function {ir.shown_name(self.func.name)})", self.func.filename,
            loc.line, loc.col, self.func.line_text(loc.line), loc.end_line, loc.end_col,
            stage="check")

    def run(self) -> ir.Function:
        scope = _Scope(frozenset(self.func.params))
        body = self.block(self.func.body, scope, new_block=True)
        # each checkpointed loop's body is a function of its own (its step)
        loops = tuple(replace(d, step=Checker(d.step).run(),
                              cond=d.cond and Checker(d.cond).run()) for d in self.func.loops)
        return replace(self.func, body=body, loops=loops)

    # -- blocks ---------------------------------------------------------------
    def block(self, body, scope: _Scope, new_block: bool, block_id: int | None = None):
        """Check a statement list.  A routine body shares its parent's block id."""
        bid = next(self._ids) if new_block else block_id
        routines: list[tuple[str | None, ir.Block]] = []
        out = []
        self._open.append(routines)  # routines open in this statement list (for `del`)
        try:
            for s in body:
                out.append(self.stmt(s, scope, bid, routines))
        finally:
            self._open.pop()
        for name, blk in routines:
            what = "routine" if name is None else f"routine {name}"
            undo = "~routine" if name is None else f"~{name}"
            raise self.error(blk.loc, f"this {what} is never undone: add `{undo}` later in the "
                                      "same block (routines are undone last opened, first undone)")
        if new_block:
            left = [(name, anc) for name, anc in scope.ancillas.items() if anc.block == bid]
            changed, called = _changed_names(out)
            # names whose value is fixed in this block: loop variables, and the ancillas
            # (themselves names for shapes) it neither updates, swaps nor passes to a call
            fixed = set(scope.loop_vars)
            for n, a in scope.ancillas.items():  # in allocation order: earlier names first
                if n not in changed and n not in called and _is_int_name(a.alloc.init, fixed):
                    fixed.add(n)
            for name, anc in reversed(left):  # freed last allocated, first freed
                init = anc.alloc.init
                # a float scratch passed to a call is likely accumulated into: it needs a `del`
                scratch = name in called and any(isinstance(n, ir.Const) and type(n.value) is not int
                                                 for n in ir.walk_expr(init))
                if name in changed or scratch or not _is_shape_name(init, fixed) or \
                        not all(scope.defined(n) for n in ir.names_used(init)):
                    raise self.error(anc.alloc.loc, f"ancilla `{name}` is allocated here but not "
                                                    f"deallocated in the same block: add `del {name}` "
                                                    "before the block ends (on every path)")
                # a name for a shape or a constant, never changed: freed here implicitly (a
                # real deallocation, checked at run time like a written `del`)
                out.append(ir.Dealloc(name, init, anc.alloc.loc))
                del scope.ancillas[name]
        return tuple(out)

    def stmt(self, s: ir.Stmt, scope: _Scope, bid: int, routines) -> ir.Stmt:
        """Check one statement: its kind's ``s_<Kind>`` rule (``tests/test_rules_tables.py``
        checks that every kind has one); returns it resolved."""
        rule = getattr(self, "s_" + type(s).__name__, None)
        if rule is None:  # pragma: no cover - the completeness test keeps this unreachable
            raise self.error(s.loc, f"unexpected statement {type(s).__name__}")
        return rule(s, scope, bid, routines)

    def s_Alloc(self, s: ir.Alloc, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.alloc(s, scope, bid)

    def s_Dealloc(self, s: ir.Dealloc, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.dealloc(s, scope, bid)

    def s_Update(self, s: ir.Update, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.update(s, scope)

    def s_Swap(self, s: ir.Swap, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.swap(s, scope)

    def s_Call(self, s: ir.Call, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.call(s, scope)

    def s_Block(self, s: ir.Block, scope: _Scope, bid: int, routines) -> ir.Stmt:
        name = s.label.partition(":")[2] or None
        body = self.block(s.body, scope, new_block=False, block_id=bid)
        resolved = replace(s, body=body)
        routines.append((name, resolved))
        return resolved

    def s_Uncompute(self, s: ir.Uncompute, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return self.uncompute(s, scope, bid, routines)

    def s_Inverted(self, s: ir.Inverted, scope: _Scope, bid: int, routines) -> ir.Stmt:
        return replace(s, body=self.block(s.body, scope.child(), new_block=True))

    def s_If(self, s: ir.If, scope: _Scope, bid: int, routines) -> ir.Stmt:
        self.reads(s.pre, scope)
        self.reads(s.post, scope)
        then = self.block(s.then, scope.child(), new_block=True)
        orelse = self.block(s.orelse, scope.child(), new_block=True)
        return replace(s, then=then, orelse=orelse)

    def s_While(self, s: ir.While, scope: _Scope, bid: int, routines) -> ir.Stmt:
        self.reads(s.cond, scope)
        self.reads(s.post, scope)
        return replace(s, body=self.block(s.body, scope.child(), new_block=True))

    def s_For(self, s: ir.For, scope: _Scope, bid: int, routines) -> ir.Stmt:
        for e in (s.start, s.stop, s.step):
            self.reads(e, scope)
        if scope.defined(s.var):
            raise self.error(s.loc, f"loop variable `{s.var}` is already a variable here; "
                                    "choose a new name")
        inner = scope.child()
        inner.loop_vars[s.var] = s.loc
        inner.loop_ranges[s.var] = ranges.loop_range(s)
        return replace(s, body=self.block(s.body, inner, new_block=True))

    def s_Print(self, s: ir.Print, scope: _Scope, bid: int, routines) -> ir.Stmt:
        for a in s.args:
            if not isinstance(a, str):
                self.reads(a, scope)
        return s

    def s_Assert(self, s: ir.Assert, scope: _Scope, bid: int, routines) -> ir.Stmt:
        self.reads(s.cond, scope)
        return s

    # -- allocation -----------------------------------------------------------
    def alloc(self, s: ir.Alloc, scope: _Scope, bid: int) -> ir.Stmt:
        name = s.name
        assign = "plain assignment `{0} = ...` is not reversible: `{0}` {1}. Update it with " \
                 "`{0} += ...`, `{0} -= ...` or `{0} ^= ...`, or swap it (`{0}, t = t, {0}`)"
        if name in scope.params:
            raise self.error(s.loc, assign.format(name, "is an argument, and allocating over an "
                                                        "argument would lose its value"))
        if name in scope.loop_vars:
            raise self.error(s.loc, f"`{name}` is the loop variable, which is read-only")
        if name in scope.ancillas:
            line = scope.ancillas[name].alloc.loc.line
            raise self.error(s.loc, f"plain assignment `{name} = ...` is not reversible: ancilla "
                                    f"`{name}` is already allocated (line {line}). Update it with "
                                    f"`{name} += ...` or `{name} -= ...`, swap it with another "
                                    f"variable (`{name}, t = t, {name}`), or `del {name}` first to "
                                    "reuse the name")
        self.reads(s.init, scope)
        scope.ancillas[name] = _Ancilla(s, bid)
        scope.freed_by.pop(name, None)
        return s

    def dealloc(self, s: ir.Dealloc, scope: _Scope, bid: int) -> ir.Stmt:
        name = s.name
        if name in scope.params:
            raise self.error(s.loc, f"`{name}` is an argument; only ancillas (locals allocated "
                                    "in this function) can be deallocated")
        if name in scope.loop_vars:
            raise self.error(s.loc, f"`{name}` is the loop variable and cannot be deallocated")
        anc = scope.ancillas.get(name)
        if anc is None and name in scope.freed_by:
            undo, line = scope.freed_by[name]
            raise self.error(s.loc, f"`del {name}`: `{name}` was already deallocated by `{undo}` "
                                    f"(line {line}), which undoes the routine that allocated it: "
                                    f"remove this `del {name}`")
        if anc is None:
            raise self.error(s.loc, f"`del {name}`: `{name}` is not an allocated ancilla here")
        if anc.block != bid:
            raise self.error(anc.alloc.loc, f"ancilla `{name}` is allocated here but deallocated "
                                            f"inside a nested block (line {s.loc.line}), so not "
                                            "on every path: deallocate it in the block that "
                                            "allocated it")
        # a routine still open in this statement list deallocates its ancillas itself, at its
        # `~routine` (a nested routine's body may: that routine is undone before this one)
        for rname, blk in self._open[-1]:
            if any(a is anc.alloc for a in _left_allocated(blk.body)):
                undo = "~routine" if rname is None else f"~{rname}"
                raise self.error(s.loc, f"`{name}` was allocated by the routine at line "
                                        f"{blk.loc.line}, which is still open: its `{undo}` "
                                        f"deallocates `{name}`, so remove this `del {name}` (or "
                                        "allocate it outside the routine)")
        # Run backwards, this `del` allocates `name` again from its expression: everything
        # that expression reads must still be there (ancillas are freed last allocated first).
        gone = sorted({n for n in ir.names_used(anc.alloc.init) if not scope.defined(n)})
        if gone:
            what = " and ".join(f"`{g}`" for g in gone)
            text = _text(anc.alloc.init)
            raise self.error(s.loc, f"`del {name}` comes after {what} {'was' if len(gone) == 1 else 'were'} "
                                    f"deallocated, but `{name}` was allocated from `{text}` "
                                    f"(line {anc.alloc.loc.line}), which reads {what}: run "
                                    f"backwards, this `del` recomputes `{name}` from it. "
                                    f"Deallocate `{name}` before {what} (free ancillas in the "
                                    "reverse order of their allocation)")
        del scope.ancillas[name]
        return replace(s, init=anc.alloc.init)

    def uncompute(self, s: ir.Uncompute, scope: _Scope, bid: int, routines) -> ir.Stmt:
        if not routines:
            what = "a routine" if s.name is None else f"a routine named `{s.name}`"
            raise self.error(s.loc, f"`~{s.name or 'routine'}` undoes {what}, but none is open in "
                                    "this block (open one with `with routine:` earlier in the "
                                    "same block)")
        name, blk = routines[-1]
        if s.name is not None and s.name != name:
            open_names = [n or "routine" for n, _ in routines]
            if s.name not in open_names:
                raise self.error(s.loc, f"no routine named `{s.name}` is open in this block")
            raise self.error(s.loc, f"`~{s.name}` is not the last opened routine (that is "
                                    f"`{name or 'routine'}`, line {blk.loc.line}); routines are "
                                    "undone last opened, first undone")
        routines.pop()
        # The uncompute runs the routine's inverse in this same block: apply its
        # effect on the scope, so ancillas the routine allocated are freed here
        # (and those it freed are allocated again, which needs their names free).
        undo = f"~{s.name or 'routine'}"

        def check(st: ir.Alloc | ir.Dealloc, now: _Scope) -> None:
            if isinstance(st, ir.Alloc) and st.name in now.ancillas:
                line = now.ancillas[st.name].alloc.loc.line
                raise self.error(s.loc, f"`{undo}` allocates `{st.name}` again (the routine at "
                                        f"line {blk.loc.line} deallocated it), but `{st.name}` "
                                        f"is allocated now (line {line}): deallocate it before "
                                        f"`{undo}`")
            gone = sorted({n for n in ir.names_used(st.init) if not now.defined(n)})
            if gone:
                what = " and ".join(f"`{g}`" for g in gone)
                did = (f"allocates `{st.name}` again, from" if isinstance(st, ir.Alloc)
                       else f"deallocates `{st.name}`, allocated from")
                raise self.error(s.loc, f"`{undo}` {did} `{_text(st.init)}`, which reads {what}, "
                                        f"deallocated since: deallocate {what} after `{undo}`")

        before = set(scope.ancillas)
        _scope_effect(invert_body(blk.body), scope, bid, check)
        for name in before - set(scope.ancillas):  # for a `del` of one of them later
            scope.freed_by[name] = (undo, s.loc.line)
        return ir.Inverted(blk.body, "~" + blk.label, s.loc)

    # -- updates -------------------------------------------------------------
    def writable(self, t: ir.Target, scope: _Scope, what: str) -> None:
        if what == "pass" and isinstance(t, ir.Var) and t.name in scope.loop_vars:
            return  # read-only unless the callee changes it: the compiler asks the callee
        if t.name in scope.loop_vars:
            raise self.error(t.loc, f"`{t.name}` is a for-loop variable, which is read-only; "
                                    f"copy it into an ancilla to {what} it")
        if not scope.defined(t.name):
            live = {*scope.params, *scope.ancillas, *scope.loop_vars}
            raise self.error(t.loc, f"`{t.name}` is not allocated here (allocate it first, "
                                    f"e.g. `{t.name} = 0.0`)." + suggest.did_you_mean(t.name, live))
        if isinstance(t, ir.Elem):
            for idx in t.indices:
                self.reads(idx, scope)
                if t.name in ir.names_read(idx):
                    raise self.error(t.loc, f"the index of `{t.name}[...]` reads `{t.name}` itself, "
                                            "so the element updated could move: copy the index "
                                            "into an ancilla first")

    def update(self, s: ir.Update, scope: _Scope) -> ir.Stmt:
        t = s.target
        self.writable(t, scope, "update")
        self.reads(s.value, scope)
        if UPDATES[s.op].nonzero_operand and _literal_zero(s.value):  # visible here: no need to run it
            text = self.func.line_text(s.loc.line).strip()
            raise self.error(s.value.loc, (
                f"multiplying by zero cannot be undone: `{text}` would lose the value of "
                f"`{_text(t)}`" if s.op == MUL else
                f"dividing by zero cannot be undone: `{text}` has no finite result"))
        checks = []
        for e in ir.walk_expr(s.value):
            if isinstance(e, (ir.Var, ir.Elem)) and e.name == t.name:
                same = isinstance(t, ir.Var) or isinstance(e, ir.Var) or e.indices == t.indices
                if same:
                    text = self.func.line_text(s.loc.line).strip()
                    if any(isinstance(d, ir.Derivative) and any(
                            n is e for a in d.args for n in ir.walk_expr(a))
                            for d in ir.walk_expr(s.value)):
                        raise self.error(e.loc, _IN_PLACE_STEP.format(x=_text(t), text=text))
                    raise self.error(e.loc, f"`{_text(t)}` is read on its own right-hand side "
                                            f"(`{text}`): the update could not be undone. Compute "
                                            "the right-hand side into an ancilla first")
                if not ranges.provably_distinct(t, e, scope.loop_ranges):
                    checks.append(e)
        return replace(s, alias_checks=tuple(checks))

    def swap(self, s: ir.Swap, scope: _Scope) -> ir.Stmt:
        for t in (s.a, s.b):
            self.writable(t, scope, "swap")
        if s.a.name == s.b.name and (isinstance(s.a, ir.Var) or isinstance(s.b, ir.Var)
                                     or s.a.indices == s.b.indices):
            raise self.error(s.loc, f"a swap needs two different targets, got `{_text(s.a)}` and "
                                    f"`{_text(s.b)}`")
        return s

    def call(self, s: ir.Call, scope: _Scope) -> ir.Stmt:
        for t in s.args:
            self.writable(t, scope, "pass")
        pairs = []
        passed = {t.name for t in s.args}  # everything the call may update
        for i, a in enumerate(s.args):
            if isinstance(a, ir.Elem):
                for idx in a.indices:
                    hit = ir.names_read(idx) & passed
                    if hit:
                        raise self.error(a.loc, f"the index of argument `{_text(a)}` reads `{hit.pop()}`, "
                                                "which the same call may change")
            for b in s.args[i + 1:]:
                if a.name != b.name:
                    continue
                if isinstance(a, ir.Elem) and isinstance(b, ir.Elem) and a.indices != b.indices:
                    if not ranges.provably_distinct(a, b, scope.loop_ranges):
                        pairs.append((a, b))
                    continue
                raise self.error(b.loc, f"`{_text(b)}` is passed twice to `{s.func}` (as "
                                        f"`{_text(a)}` too): arguments of one call must not alias")
        return replace(s, alias_checks=tuple(pairs))

    def reads(self, e: ir.Expr, scope: _Scope) -> None:
        for n in ir.walk_expr(e):
            name = getattr(n, "name", None) if isinstance(n, (ir.Var, ir.Elem, ir.Len, ir.Shape)) \
                else getattr(n, "source", None)
            if name is not None and not scope.defined(name):
                live = {*scope.params, *scope.ancillas, *scope.loop_vars}
                raise self.error(n.loc, f"`{name}` is not defined here (not an argument, a live "
                                        "ancilla or a loop variable of this block)."
                                        + suggest.did_you_mean(name, live))


def _is_shape_name(e: ir.Expr, fixed: set[str]) -> bool:
    """Is ``e`` a name for a shape or a constant: a numeric literal (``0.5``, ``-1``), or
    integer arithmetic (``+ - * //``) of integer literals, ``len(x)``, ``x.shape[k]`` and
    the ``fixed`` names (loop variables, other such names)?  An ancilla set from one and
    never changed needs no ``del``: its value can be recomputed at the end of its block,
    so the language frees it there.  (Float arithmetic, ``t = 1.0 * i``, is a computed
    value and keeps its ``del``.)"""
    if isinstance(e, ir.UnaryOp) and e.op == "-" and isinstance(e.operand, ir.Const):
        e = e.operand
    if isinstance(e, ir.Const):
        return not isinstance(e.value, complex)
    return _is_int_name(e, fixed)


def _is_int_name(e: ir.Expr, fixed: set[str]) -> bool:
    if isinstance(e, (ir.Len, ir.Shape)):
        return True
    if isinstance(e, ir.Var):
        return e.name in fixed
    if isinstance(e, ir.Const):
        return type(e.value) is int
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*", "//"):
        return _is_int_name(e.left, fixed) and _is_int_name(e.right, fixed)
    if isinstance(e, ir.UnaryOp) and e.op in ("-", "+"):
        return _is_int_name(e.operand, fixed)
    return False


def _changed_names(body) -> tuple[set[str], set[str]]:
    """The variables a checked statement list updates or swaps, and those it passes to
    calls (which may change them too: an ancilla a callee changes fails its
    deallocation check at run time)."""
    changed: set[str] = set()
    called: set[str] = set()
    for st in ir.walk_stmts(body):
        if isinstance(st, ir.Update):
            changed.add(st.target.name)
        elif isinstance(st, ir.Swap):
            changed.update((st.a.name, st.b.name))
        elif isinstance(st, ir.Call):
            called.update(a.name for a in st.args)
    return changed, called


#: a gradient step written in place, ``y += lr * revbench.grad(f, ...)(..., y)``
_IN_PLACE_STEP = (
    "`{text}`: a gradient step in place cannot be undone -- the step depends on the `{x}` it "
    "changes, so running it backwards would need the new `{x}` to find the old one. Write the "
    "step out of place, into a new array (`{x}1 += {x}; {x}1 += lr * revbench.grad(...)"
    "(..., {x})`), and a loop of such steps as a checkpointed loop, which keeps states instead "
    "of undoing steps (`for t in checkpointed(range(n), Revolve(snapshots=10), new={x}1, "
    "old={x}):`, docs/checkpointing.md)")


def _literal_zero(e: ir.Expr) -> bool:
    """Is ``e`` a literal zero (``0``, ``0.0``, ``-0.0``, ``False``, ``0j``), as written?"""
    while isinstance(e, ir.UnaryOp) and e.op in ("-", "+"):
        e = e.operand
    return isinstance(e, ir.Const) and e.value == 0


def _scope_effect(body, scope: _Scope, bid: int,
                  check: Callable[[ir.Alloc | ir.Dealloc, _Scope], None] | None = None) -> None:
    """Apply what an already-checked statement list allocates and frees to ``scope``.

    Routine bodies and their uncomputes share their block's scope, so they are
    entered; every other nested block is balanced on its own and has no effect.
    ``check(statement, scope)`` is called before each allocation and deallocation.
    """
    for s in body:
        if isinstance(s, (ir.Alloc, ir.Dealloc)) and check is not None:
            check(s, scope)
        if isinstance(s, ir.Alloc):
            scope.ancillas[s.name] = _Ancilla(s, bid)
        elif isinstance(s, ir.Dealloc):
            scope.ancillas.pop(s.name, None)
        elif isinstance(s, ir.Block) and s.label != "inverted":
            _scope_effect(s.body, scope, bid, check)
        elif isinstance(s, ir.Inverted) and s.label != "inverted":
            _scope_effect(invert_body(s.body), scope, bid, check)


def _left_allocated(body) -> list[ir.Alloc]:
    """The allocations of an already-checked routine body still live after it."""
    tmp = _Scope(frozenset())
    _scope_effect(body, tmp, 0)
    return [a.alloc for a in tmp.ancillas.values()]


def _text(t: ir.Target) -> str:
    return expr_text(t)


def check_function(func: ir.Function) -> ir.Function:
    """Run the static checks (stage ``check``) and return the resolved IR."""
    return Checker(func).run()


def check_calls(func: ir.Function, lookup: Callable[[str], Any]) -> None:
    """Refuse a call whose number of arguments does not match its callee's parameters,
    where ``lookup(name)`` already finds the callee (a reversible function); the error
    points at the call.  A callee not defined yet is checked at the first call instead
    (:meth:`revbench.compiler.Program.callee`)."""
    def visit(body, loop_vars: frozenset[str]) -> None:
        for s in body:
            for child in ir.child_blocks(s):
                visit(child, loop_vars | {s.var} if isinstance(s, ir.For) else loop_vars)
            if not isinstance(s, ir.Call) or s.func == func.name:
                continue  # (its own name is about to mean this very function)
            callee = lookup(s.func)
            if type(callee).__name__ != "ReversibleFunction":
                continue
            params = callee.params
            if len(params) != len(s.args):
                raise Checker(func).error(s.loc, arity_message(s, params))
            written = callee._program.written_params()
            for a, p in zip(s.args, params):
                if isinstance(a, ir.Var) and a.name in loop_vars and p in written:
                    raise Checker(func).error(a.loc, loop_var_message(a.name, s.func, p))
                if isinstance(a, ir.Var) and is_passed_value(a.name) and p in written:
                    raise Checker(func).error(a.loc, passed_value_message(s.func, p))

    visit(func.body, frozenset())


def is_passed_value(name: str) -> bool:
    """The ancilla that carries a value passed to a call (``f(y, 2.0 * h)``)."""
    return name.startswith(ir.PASSED_VALUE_PREFIX)


def passed_value_message(callee: str, param: str) -> str:
    """A value (not a variable) passed to a parameter the callee may change."""
    return (f"`{callee}` may change its parameter `{param}`, so it must be passed a variable or "
            f"an element that takes the change, not a value: allocate an ancilla for it "
            f"(`t = ...`, then `del t` after the call), or pass an argument of this function")


def loop_var_message(var: str, callee: str, param: str) -> str:
    """A loop variable passed to a call that may change it."""
    return (f"`{var}` is a for-loop variable, which is read-only, and `{callee}` may change its "
            f"parameter `{param}`: copy `{var}` into an ancilla to pass it (`j = {var}`, then "
            "`del j` after the call)")


def arity_message(call: ir.Call, params: tuple[str, ...]) -> str:
    """What to say about ``call`` passing a number of arguments ``params`` does not take."""
    n = len(params)
    first = call.args[0] if call.args else None
    if isinstance(first, ir.Var) and first.name.startswith("_rb_v"):
        # a call in an expression (lang.parse): its result goes into the first parameter,
        # an ancilla revbench adds; the user wrote the others
        rest = params[1:]
        return (f"`{call.func}` in an expression takes {len(rest)} argument"
                f"{'' if len(rest) == 1 else 's'} ({', '.join(rest)}; its result is its first "
                f"parameter, `{params[0]}`, which revbench provides) but this call passes "
                f"{len(call.args) - 1}" if params else
                f"`{call.func}` takes no arguments, so it cannot give a value in an expression")
    return (f"`{call.func}` takes {n} argument{'' if n == 1 else 's'} ({', '.join(params)}) but "
            f"this call passes {len(call.args)}: pass one variable or element per parameter")

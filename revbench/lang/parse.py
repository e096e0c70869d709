"""Stage 1, *parse*: Python source -> revbench IR.

The parser accepts exactly the language of ``docs/language.md`` and turns it
into :mod:`revbench.lang.ir` nodes that keep the user's line and column.
It also *freezes* module-level numeric constants (so the forward and inverse
programs always agree) and resolves pure-function spellings (``np.sin``,
``math.sin``, ``sin``) to their canonical rule-table names.

Scope questions (is this name allocated? is it deallocated in the same block?)
belong to the next stage, :mod:`revbench.lang.check`.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import numbers
import operator
import sys
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from revbench.lang import ir, markers, suggest
from revbench.lang.errors import ReversibilitySyntaxError
from revbench.lang.ir import CONDITION_FLAG as GO
from revbench.lang.ir import DEFAULT_MAX_STEPS
from revbench.rules import functions as fn_rules
from revbench.rules.instructions import ADD, DIV, MUL, REFUSED_UPDATES, SUB, UPDATES, XOR

_AUG_OPS = {
    ast.Add: ADD, ast.Sub: SUB, ast.Mult: MUL, ast.Div: DIV, ast.BitXor: XOR,
    ast.FloorDiv: "//=", ast.Mod: "%=", ast.Pow: "**=", ast.MatMult: "@=",
    ast.LShift: "<<=", ast.RShift: ">>=", ast.BitOr: "|=", ast.BitAnd: "&=",
}
_BIN_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**",
            ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@"}
_CMP_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!="}
_DTYPES = {"float64": "float", "float": "float", "double": "float", "int64": "int",
           "int": "int", "bool": "bool", "bool_": "bool", "complex128": "complex",
           "complex": "complex"}
#: the names of the two magic context managers of the language
ROUTINE, INVERTED = "routine", "inverted"
#: the strategies a checkpointed loop statement runs with an out-of-place step, as messages
#: list them (``tests/test_strategy_registry.py`` holds it to the registry)
STATEMENT_STRATEGIES = ("StoreAll(), Periodic(every=k), Revolve(snapshots=c), Online(snapshots=c), "
                        "Bennett(k), TwoLevel(period=k, snapshots=c) or "
                        "Multistage(disk=d, snapshots=c)")


@dataclass
class SourceInfo:
    """Where a function's source lives, to turn AST positions into user positions."""

    filename: str
    lines: list[str]  # the original (not dedented) source lines
    line_offset: int  # add to an AST line number to get the file's line number
    col_offset: int  # columns removed by dedenting

    def text(self, lineno: int) -> str:
        i = lineno - self.line_offset - 1
        return self.lines[i].rstrip("\n") if 0 <= i < len(self.lines) else ""


#: How deep a function may nest.  Generated code nests like the user's code (a whole-array
#: statement adds one loop per axis), and must stay within what Python compiles: 20 nested
#: loop or `with` blocks, 100 indentation levels (a chain of `elif`s is generated as nested
#: `else: if`), 200 nested brackets; revbench's own passes recurse over the same depth.
#: Deeper code is refused here, at its line, rather than failing inside the compiler.
MAX_LOOP_DEPTH = 16
#: Python built-ins that revbench expressions spell (``abs``, ``min``, ``max``) or that the
#: generated code and the debugger's evaluation call by their bare names; a variable of
#: that name would be local to the whole generated function and hide the built-in there
RESERVED_BUILTINS = frozenset({"abs", "min", "max", "float", "int", "complex", "bool", "len",
                               "range", "round", "pow", "divmod", "sum", "any", "all", "print",
                               "isinstance", "tuple", "zip", "enumerate"})
MAX_BLOCK_DEPTH = 80
MAX_EXPR_DEPTH = 100
_LOOPS = (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)
_BLOCKS = _LOOPS + (ast.If, ast.Try)


class Parser:
    """Turns one ``ast.FunctionDef`` into an :class:`ir.Function`."""

    def __init__(self, src: SourceInfo, namespace: Mapping[str, Any]):
        self.src = src
        self.namespace = namespace
        self.local_names: set[str] = set()
        self.function_name = "<reversible>"

    # -- errors -------------------------------------------------------------
    def loc(self, node: ast.AST) -> ir.Loc:
        line = getattr(node, "lineno", 1) + self.src.line_offset
        end = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        return ir.Loc(
            line, getattr(node, "col_offset", 0) + self.src.col_offset,
            None if end is None else end + self.src.line_offset,
            None if end_col is None else end_col + self.src.col_offset)

    def error(self, node: ast.AST, message: str) -> ReversibilitySyntaxError:
        loc = self.loc(node)
        return ReversibilitySyntaxError(
            f"{message} (in reversible function {self.function_name})",
            self.src.filename, loc.line, loc.col, self.src.text(loc.line),
            loc.end_line, loc.end_col, stage="parse")

    # -- functions ----------------------------------------------------------
    def function(self, node: ast.FunctionDef) -> ir.Function:
        self.function_name = node.name
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
            raise self.error(node, "a reversible function takes plain positional arguments only "
                                   "(no defaults, *args, **kwargs or keyword-only arguments)")
        if isinstance(node, ast.AsyncFunctionDef):
            raise self.error(node, "a reversible function cannot be async")
        params = tuple(x.arg for x in a.args)
        for p in a.args:
            self._check_user_name(p, p.arg)
        if len(set(params)) != len(params):
            raise self.error(node, "duplicate argument names")
        self._check_nesting(node)
        self.local_names = set(params) | _bound_names(node.body)
        self._loop_defs: list[list[ir.LoopDef]] = [[]]  # checkpointed loops, per body outlined
        self._values = 0  # ancillas holding the value of a reversible call in an expression
        self._from_call: dict[str, ir.Call] = {}  # ancillas allocated as `t = f(x)`
        body = list(node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # docstring
        stmts = self.block(body)
        return ir.Function(
            node.name, params, stmts, self.src.filename,
            self.src.line_offset + 1, tuple(self.src.lines), loops=tuple(self._loop_defs[0]))

    def _check_nesting(self, node: ast.FunctionDef) -> None:
        """Refuse statements or expressions nested deeper than the MAX_*_DEPTH limits
        (walked without recursion, so the check itself cannot overflow the stack)."""
        stack: list[tuple[ast.AST, int, int, int]] = [(s, 0, 0, 0) for s in node.body]
        while stack:
            n, blocks, loops, exprs = stack.pop()
            if isinstance(n, ast.expr):
                exprs += 1
                if exprs > MAX_EXPR_DEPTH:
                    raise self.error(n, f"this expression is nested more than {MAX_EXPR_DEPTH} "
                                        "levels deep (operators, calls, brackets): split it, "
                                        "computing part of it into an ancilla first")
            elif isinstance(n, ast.stmt):
                exprs = 0
                if isinstance(n, _BLOCKS):
                    blocks += 1
                    loops += isinstance(n, _LOOPS)
                    if loops > MAX_LOOP_DEPTH:
                        raise self.error(n, f"more than {MAX_LOOP_DEPTH} nested `for`, `while` and "
                                            "`with` blocks: move the inner ones into another "
                                            "reversible function and call it")
                    if blocks > MAX_BLOCK_DEPTH:
                        raise self.error(n, f"statements nested more than {MAX_BLOCK_DEPTH} levels "
                                            "deep (each `elif` is one more level): move the inner "
                                            "ones into another reversible function and call it")
            stack.extend((child, blocks, loops, exprs) for child in ast.iter_child_nodes(n))

    def _check_user_name(self, node: ast.AST, name: str) -> None:
        if name.lower().startswith("_rb"):  # (_RB_MODULE too)
            raise self.error(node, f"names starting with '_rb' are reserved for generated code: {name!r}")
        if name in RESERVED_BUILTINS:
            raise self.error(node, f"`{name}` is a Python built-in that expressions and the "
                                   f"generated code call, so it cannot name a variable here "
                                   f"(a variable would hide it in the whole function): rename it, "
                                   f"e.g. `{name}_`")

    # -- statements ---------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            r = self.stmt(s)
            if isinstance(r, list):  # a call in an expression: compute, use, uncompute
                out.extend(r)
            elif r is not None:
                out.append(r)
        return tuple(out)

    def stmt(self, s: ast.stmt) -> ir.Stmt | list[ir.Stmt] | None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise self.error(s, _REFUSED_STATEMENTS.get(
                type(s).__name__, f"`{type(s).__name__}` statements are not part of the "
                                  "reversible language"))
        r = method(s)
        for one in (r if isinstance(r, list) else [r] if r is not None else []):
            self._check_int_constants(one)
        return r

    def _check_int_constants(self, s: ir.Stmt) -> None:
        """Refuse integer constants outside int64 (constant arithmetic is folded first, so
        ``-2**63`` is fine and ``2**70`` is not): integers are 64-bit and never wrap."""
        for e in _own_expressions(s):
            for n in ir.walk_expr(e):
                if isinstance(n, ir.Const) and type(n.value) is int \
                        and not -(2**63) <= n.value < 2**63:
                    v = n.value
                    shown = str(v) if v.bit_length() < 128 else f"of {v.bit_length()} bits"
                    raise ReversibilitySyntaxError(
                        f"the integer constant {shown} does not fit in int64 (-2**63 to "
                        "2**63 - 1): revbench integers are 64-bit and never wrap around; use a "
                        "float if you need a larger number (in reversible function "
                        f"{self.function_name})", self.src.filename, n.loc.line, n.loc.col,
                        self.src.text(n.loc.line), n.loc.end_line, n.loc.end_col, stage="parse")

    def _fold_int(self, node: ast.BinOp, op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr | None:
        """``a op b`` computed exactly when both are integer constants (``None`` otherwise)."""
        if not (isinstance(a, ir.Const) and isinstance(b, ir.Const)
                and type(a.value) is int and type(b.value) is int):
            return None
        x, y = a.value, b.value
        if op == "/" or (op in ("//", "%") and y == 0) or (op == "**" and y < 0):
            return None  # a float, or an error the program raises when it runs
        if max(abs(x), abs(y)).bit_length() > 256 or (op == "**" and abs(x) > 1 and y > 256):
            return ir.Const(2**300, self.loc(node))  # far outside int64: refused as such
        v = {"+": operator.add, "-": operator.sub, "*": operator.mul, "**": operator.pow,
             "//": operator.floordiv, "%": operator.mod}[op](x, y)
        return ir.Const(v, self.loc(node))

    def stmt_Pass(self, s: ast.Pass) -> None:
        return None

    def stmt_AugAssign(self, s: ast.AugAssign) -> ir.Stmt:
        op = _AUG_OPS.get(type(s.op), "?=")
        if op not in UPDATES:
            why = REFUSED_UPDATES.get(op, "it is not reversible")
            raise self.error(s, f"`{op}` is not a reversible instruction: {why}. "
                                "Reversible updates are +=, -=, *=, /= and ^=")
        calls = self._reversible_calls(s.value)
        if not calls:
            return ir.Update(self.target(s.target), op, self.expr(s.value), self.loc(s))
        target = self.target(s.target)
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        names: dict[int, str] = {}
        for c in calls:
            v = self._value_name()
            names[id(c)] = v
            call = self._call_into(c, v, s, reads_not=target.name)
            loc = self.loc(c)
            pre += [ir.Alloc(v, ir.Const(0.0, loc), loc), call]
            post = [replace(call, inverted=not call.inverted), ir.Dealloc(v, None, loc), *post]
        value = _ReplaceCalls(names).visit(_copy_ast(s.value))
        return [*pre, ir.Update(target, op, self.expr(value), self.loc(s)), *post]

    # -- reversible functions inside expressions -------------------------------
    # ``y -= n * logsumexp(a)`` means: allocate an ancilla v = 0.0, call
    # ``logsumexp(v, a)`` (the callee accumulates its result into its first
    # argument), ``y -= n * v``, undo the call with ``~logsumexp(v, a)``, ``del v``
    # (compute, copy, uncompute).  It is plain IR afterwards: the inverse, the
    # adjoint and the checks follow from those of calls and ancillas.
    def _reversible_calls(self, e: ast.expr) -> list[ast.Call]:
        """The calls of reversible functions inside an expression."""
        out = []
        for node in ast.walk(e):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if name and name.split(".")[0] not in self.local_names \
                        and self._is_reversible_object(name):
                    out.append(node)
        return out

    def _value_name(self) -> str:
        self._values += 1
        name = f"_rb_v{self._values}"
        self.local_names.add(name)
        return name

    def _call_into(self, c: ast.Call, v: str, s: ast.stmt, reads_not: str | None) -> ir.Call:
        """``f(a, b)`` in an expression as the statement ``f(v, a, b)``."""
        name = _dotted(c.func)
        for a in c.args:
            if isinstance(a, ast.Call):
                raise self.error(a, f"the arguments of `{name}(...)` inside an expression must be "
                                    "variables or elements (the call runs as a statement)")
            if reads_not is not None and any(isinstance(n, ast.Name) and n.id == reads_not
                                             for n in ast.walk(a)):
                raise self.error(a, f"`{reads_not}` is read by `{ast.unparse(c)}` on its own "
                                    f"right-hand side: an update cannot read its own target "
                                    f"(copy `{reads_not}` into an ancilla first)")
        into = ast.copy_location(ast.Name(id=v, ctx=ast.Load()), c)
        call = ast.copy_location(ast.Call(func=c.func, args=[into, *c.args], keywords=c.keywords), c)
        out = self._call(call, s, inverted=False, values=False)
        assert isinstance(out, ir.Call)
        return out

    def stmt_Assign(self, s: ast.Assign) -> ir.Stmt:
        if len(s.targets) != 1:
            raise self.error(s, "chained assignment `a = b = ...` is not reversible; "
                                "allocate each ancilla on its own line")
        tgt = s.targets[0]
        if isinstance(tgt, ast.Tuple) and isinstance(s.value, ast.Attribute) \
                and s.value.attr == "shape":
            return self._shape_names(s, tgt, s.value)
        if isinstance(tgt, ast.Tuple):
            return self._swap(s, tgt)
        if isinstance(tgt, ast.Name):
            self._check_user_name(tgt, tgt.id)
            calls = self._reversible_calls(s.value)
            if calls:
                return self._alloc_from_call(tgt.id, s, calls)
            return ir.Alloc(tgt.id, self.alloc_init(s.value), self.loc(s))
        if isinstance(tgt, ast.Subscript):
            text = ast.unparse(tgt)
            raise self.error(s, f"plain assignment `{text} = ...` is not reversible: it would "
                                f"overwrite the old value. Write `{text} += ...`, `{text} -= ...` "
                                "or swap it with another variable")
        raise self.error(s, "only a new local name can be assigned (allocating an ancilla)")

    def _alloc_from_call(self, name: str, s: ast.stmt, calls: list[ast.Call]) -> list[ir.Stmt]:
        """``t = f(a)``: ``t = 0.0`` then ``f(t, a)``; its ``del t`` undoes the call first."""
        if len(calls) != 1 or calls[0] is not s.value:
            raise self.error(s, f"an ancilla can be allocated from a reversible function call on "
                                f"its own (`{name} = f(x)`), not from an expression holding one: "
                                f"allocate `{name} = f(x)` first, then compute with it")
        call = self._call_into(calls[0], name, s, reads_not=None)
        self._from_call[name] = call
        return [ir.Alloc(name, ir.Const(0.0, self.loc(s)), self.loc(s)), call]

    def stmt_AnnAssign(self, s: ast.AnnAssign) -> ir.Stmt:
        if not isinstance(s.target, ast.Name) or s.value is None:
            raise self.error(s, "an annotated assignment must allocate a new local: `t: float = 0.0`")
        self._check_user_name(s.target, s.target.id)
        return ir.Alloc(s.target.id, self.alloc_init(s.value), self.loc(s))

    def _shape_names(self, s: ast.Assign, tgt: ast.Tuple, shape: ast.Attribute) -> list[ir.Stmt]:
        """``m, n = x.shape``: one ancilla per axis (names for shapes need no ``del``).
        The number of names must be the array's number of axes (checked with the types)."""
        if not (isinstance(shape.value, ast.Name) and shape.value.id in self.local_names):
            raise self.error(shape, "`.shape` of a local array only: `m, n = x.shape`")
        out: list[ir.Stmt] = []
        for axis, t in enumerate(tgt.elts):
            if not isinstance(t, ast.Name):
                raise self.error(t, "unpack a shape into new names: `m, n = x.shape`")
            self._check_user_name(t, t.id)
            loc = self.loc(t)
            out.append(ir.Alloc(t.id, ir.Shape(shape.value.id, axis, loc, len(tgt.elts)),
                                self.loc(s)))
        return out

    def _swap(self, s: ast.Assign, tgt: ast.Tuple) -> ir.Stmt:
        val = s.value
        ok = (len(tgt.elts) == 2 and isinstance(val, ast.Tuple) and len(val.elts) == 2
              and ast.unparse(tgt.elts[0]) == ast.unparse(val.elts[1])
              and ast.unparse(tgt.elts[1]) == ast.unparse(val.elts[0]))
        if not ok:
            raise self.error(s, "the only tuple assignment is a swap of two targets: `a, b = b, a`")
        return ir.Swap(self.target(tgt.elts[0]), self.target(tgt.elts[1]), self.loc(s))

    def stmt_Delete(self, s: ast.Delete) -> ir.Stmt | list[ir.Stmt]:
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            raise self.error(s, "`del` takes one ancilla name per statement: `del t`")
        name = s.targets[0].id
        call = self._from_call.pop(name, None)
        if call is not None:  # allocated by `t = f(x)`: undo the call, then free t (it is 0.0)
            return [replace(call, inverted=not call.inverted, loc=self.loc(s)),
                    ir.Dealloc(name, None, self.loc(s))]
        return ir.Dealloc(name, None, self.loc(s))

    def stmt_Expr(self, s: ast.Expr) -> ir.Stmt | list[ir.Stmt]:
        v = s.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "print" \
                and v.func.id not in self.local_names:
            return self._print(v)
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Invert):
            inner = v.operand
            if isinstance(inner, ast.Name) and (inner.id == ROUTINE or inner.id in self._routine_names):
                return ir.Uncompute(None if inner.id == ROUTINE else inner.id, self.loc(s))
            if isinstance(inner, ast.Call):
                return self._call(inner, s, inverted=True)
        if isinstance(v, ast.Call):
            return self._call(v, s, inverted=False)
        raise self.error(s, "this expression statement has no effect; a statement must update a "
                            "variable (`y += e`), call a reversible function (`f(x, y)`) or "
                            "undo a routine (`~routine`)")

    _routine_names: set[str] = set()

    def _call(self, c: ast.Call, s: ast.stmt, inverted: bool,
              values: bool = True) -> ir.Stmt | list[ir.Stmt]:
        """The call statement ``f(a, b)``; with ``values``, an argument that is a value
        rather than a variable comes with the ancilla that carries it (a list of three)."""
        func = c.func
        # (~f)(x) and f.inverse(x) are both calls of f's inverse
        if isinstance(func, ast.UnaryOp) and isinstance(func.op, ast.Invert):
            func, inverted = func.operand, not inverted
        if isinstance(func, ast.Attribute) and func.attr == "inverse":
            func, inverted = func.value, not inverted
        name = _dotted(func)
        if name is None:
            raise self.error(c, "call a reversible function by name: `f(x, y)` or `~f(x, y)`")
        if name.split(".")[0] in self.local_names:
            raise self.error(c, f"`{name}` is a variable of this function, not a reversible function")
        if name == self.function_name:
            raise self.error(c, self._recursion_message(name))
        if c.keywords:
            raise self.error(c, "reversible calls take positional arguments only")
        if not self._is_reversible_object(name) and (
                fn_rules.canonical(self._resolve_callable_name(func) or name) or name == "len"):
            raise self.error(c, f"`{name}(...)` as a statement has no effect: a pure function's "
                                "result must be added to a variable, e.g. `y += "
                                f"{ast.unparse(c)}`")
        args: list[ir.Target] = []
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        for a in c.args:
            if isinstance(a, ast.Starred):
                raise self.error(a, "`*args` is not allowed in a reversible call")
            if isinstance(a, ast.Subscript) or (isinstance(a, ast.Name)
                                                and a.id in self.local_names):
                args.append(self.target(a))
                continue
            if not values:
                raise self.error(a, f"argument `{ast.unparse(a)}` of a reversible call inside an "
                                    "expression must be a variable, an element or a sub-array "
                                    "(`x`, `x[i]`, `A[i]`, `x[a:b]`)")
            # a value (`2.0 * h`, `6`, a module constant): passed through an ancilla that
            # holds it for the call, for a parameter the callee only reads (check_calls)
            v = self._passed_value_name()
            loc = self.loc(a)
            pre.append(ir.Alloc(v, self.expr(a), loc))
            post.insert(0, ir.Dealloc(v, None, loc))
            args.append(ir.Var(v, loc))
        call = ir.Call(name, tuple(args), inverted, self.loc(s))
        return [*pre, call, *post] if pre else call

    def _passed_value_name(self) -> str:
        self._values += 1
        name = f"{ir.PASSED_VALUE_PREFIX}{self._values}"
        self.local_names.add(name)
        return name

    def _print(self, c: ast.Call) -> ir.Stmt:
        if c.keywords:
            raise self.error(c, "print() in reversible code takes positional arguments only")
        args: list[ir.Expr | str] = []
        for a in c.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                args.append(a.value)
            else:
                args.append(self.expr(a))
        return ir.Print(tuple(args), self.loc(c))

    def stmt_Assert(self, s: ast.Assert) -> ir.Stmt:
        msg = None
        if s.msg is not None:
            if not (isinstance(s.msg, ast.Constant) and isinstance(s.msg.value, str)):
                raise self.error(s.msg, "an assert message must be a string literal")
            msg = s.msg.value
        return ir.Assert(self.expr(s.test), msg, self.loc(s))

    def stmt_With(self, s: ast.With) -> ir.Stmt:
        if len(s.items) != 1:
            raise self.error(s, "write one `with routine:` or `with inverted:` per statement")
        item = s.items[0]
        ctx = item.context_expr
        kind = ctx.id if isinstance(ctx, ast.Name) else None
        if kind not in (ROUTINE, INVERTED):
            raise self.error(s, "the only context managers are `with routine:` (compute, undone "
                                "later by `~routine`) and `with inverted:` (run a block backwards)")
        label = None
        if item.optional_vars is not None:
            if kind != ROUTINE or not isinstance(item.optional_vars, ast.Name):
                raise self.error(s, "only a routine can be named: `with routine as r:`")
            label = item.optional_vars.id
            self._routine_names = self._routine_names | {label}
        body = self.block(s.body)
        if kind == INVERTED:
            return ir.Inverted(body, "inverted", self.loc(s))
        return ir.Block(body, "routine" if label is None else "routine:" + label, self.loc(s))

    def stmt_If(self, s: ast.If) -> ir.Stmt:
        pre, post = self._pre_post(s.test, "if")
        return ir.If(pre, post, self.block(s.body), self.block(s.orelse), self.loc(s))

    def _pre_post(self, test: ast.expr, what: str) -> tuple[ir.Expr, ir.Expr]:
        if isinstance(test, ast.Tuple):
            if len(test.elts) == 1:
                c = self.expr(test.elts[0])
                return c, c
            if len(test.elts) != 2:
                raise self.error(test, f"`{what} (condition, postcondition):` takes exactly two "
                                       "conditions")
            return self.expr(test.elts[0]), self.expr(test.elts[1])
        c = self.expr(test)
        return c, c

    def stmt_While(self, s: ast.While) -> ir.Stmt | list[ir.Stmt]:
        if s.orelse:
            raise self.error(s, "`while ... else` is not supported")
        if isinstance(s.test, ast.Call) and self._names_checkpointed(s.test.func):
            return self._checkpointed_while(s, s.test)
        if not (isinstance(s.test, ast.Tuple) and len(s.test.elts) == 2):
            raise self.error(s.test, "a reversible while loop needs a postcondition: write "
                                     "`while (condition, postcondition):`, where the postcondition "
                                     "is false on entry and true after every iteration "
                                     "(for example a counter: `while (x < 10, k > 0):`)")
        cond, post = self._pre_post(s.test, "while")
        return ir.While(cond, post, self.block(s.body), self.loc(s))

    def stmt_For(self, s: ast.For) -> ir.Stmt:
        if s.orelse:
            raise self.error(s, "`for ... else` is not supported")
        if not isinstance(s.target, ast.Name):
            raise self.error(s.target, "the loop variable must be a single name: `for i in range(n):`")
        self._check_user_name(s.target, s.target.id)
        it = s.iter
        if isinstance(it, ast.Call) and self._names_checkpointed(it.func):
            return self._checkpointed_loop(s, it)
        start, stop, step = self._range(it)
        return ir.For(s.target.id, start, stop, step, self.block(s.body), False, self.loc(s))

    def _range(self, it: ast.expr) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 3 and not it.keywords):
            raise self.error(it, "a reversible for loop walks a range: `for i in range(a, b, s):`")
        args = [self.expr(a) for a in it.args]
        if len(args) == 1:
            start, stop, step = ir.Const(0), args[0], ir.Const(1)
        elif len(args) == 2:
            start, stop, step = args[0], args[1], ir.Const(1)
        else:
            start, stop, step = args
        if isinstance(step, ir.Const) and step.value == 0:
            raise self.error(it, "range() step must not be zero")
        return start, stop, step

    def _resolved(self, func: ast.expr) -> tuple[str | None, Any]:
        """``(dotted name, the object it names in the function's namespace)`` of a called
        name (``revbench.grad``, ``ckpt``); ``(None, None)`` for another expression."""
        dotted = _dotted(func)
        if dotted is None:
            return None, None
        head, *rest = dotted.split(".")
        obj = self._lookup_global(head)
        for attr in rest:
            obj = getattr(obj, attr, None)
        return dotted, obj

    def _names_checkpointed(self, func: ast.expr) -> bool:
        """Whether a loop's iterator calls ``checkpointed`` (``revbench.checkpoint``'s), by
        that name or another (``from revbench.checkpoint import checkpointed as ckpt``)."""
        if (isinstance(func, ast.Name) and func.id == "checkpointed") or (
                isinstance(func, ast.Attribute) and func.attr == "checkpointed"):
            return True
        return self._resolved(func)[1] is markers.checkpointed

    def _checkpointed_header(self, it: ast.Call, first: str, keywords_allowed: set[str],
                             usage: str) -> tuple[Any, Any, dict[str, ast.expr]]:
        """What ``checkpointed(over, strategy, **keywords)`` says, checked: the strategy,
        its loop schedule (None for ``Reverse()``) and the keywords."""
        keywords = {kw.arg: kw.value for kw in it.keywords}
        args = list(it.args)
        if len(args) == 1 and "strategy" in keywords:  # checkpointed(range(n), strategy=...)
            args.append(keywords.pop("strategy"))
        if len(args) != 2 or any(isinstance(a, ast.Starred) for a in args):
            raise self.error(it, f"checkpointed() takes {first} and a strategy: {usage}")
        unknown = sorted(set(map(str, keywords)) - keywords_allowed)
        if unknown:
            raise self.error(it, f"checkpointed() has no keyword `{unknown[0]}` here: {usage}")
        if ("new" in keywords) != ("old" in keywords):
            raise self.error(it, "checkpointed() names the state twice, `new=` (after each step) "
                                 f"and `old=` (before it), or neither: {usage}")
        strategy = self._strategy(args[1], usage)
        label = getattr(strategy, "label", repr(strategy))
        try:
            schedule = strategy.loop_schedule()
        except NotImplementedError as exc:
            raise self.error(args[1], f"{exc}: use {STATEMENT_STRATEGIES} in reversible code "
                                      f"(or a TimeLoop for {label})") from None
        if "new" not in keywords and schedule is not None:
            raise self.error(it, f"{label} keeps states of an out-of-place step, so the loop "
                                 "must say which variables hold the state: add `new=` and "
                                 f"`old=`; {usage}")
        if "new" in keywords and schedule is None:
            raise self.error(it, f"{label} runs an in-place step backwards, but this loop names "
                                 "a new and an old state (an out-of-place step): drop `new=` and "
                                 f"`old=`, or choose {STATEMENT_STRATEGIES}")
        return strategy, schedule, keywords

    def _checkpointed_loop(self, s: ast.For, it: ast.Call) -> ir.Stmt | list[ir.Stmt]:
        """``for t in checkpointed(range(...), strategy, new=..., old=...)``: the body is
        outlined as a step function (:class:`ir.LoopDef`) and the loop becomes a call of
        it; without ``new``/``old`` (an in-place step, ``Reverse()``) a plain loop."""
        usage = ("write `for t in checkpointed(range(n), Revolve(snapshots=20), new=y_new, "
                 "old=y):` (an out-of-place step: the body adds the state after step t into "
                 "`y_new` from the state before it, `y`), or `for t in checkpointed(range(n), "
                 "Reverse()):` for a body that updates its state in place")
        strategy, schedule, keywords = self._checkpointed_header(it, "a range", {"new", "old"}, usage)
        var = s.target.id
        start, stop, step = self._range(it.args[0])
        if schedule is None:
            return ir.For(var, start, stop, step, self.block(s.body), False, self.loc(s))
        return self._outline(s, it, var, strategy, keywords, (start, stop, step), None)

    def _checkpointed_while(self, s: ast.While, it: ast.Call) -> ir.Stmt | list[ir.Stmt]:
        """``while checkpointed(condition, Online(snapshots=c), new=..., old=...,
        max_steps=...)``: a loop of out-of-place steps while the condition holds on the
        state before each step, outlined as for a ``for`` loop (its range is
        ``range(max_steps)``: the step limit); with ``Reverse()``, ``while
        checkpointed((condition, postcondition), Reverse())`` is the language's own
        reversible ``while``."""
        usage = ("write `while checkpointed(y[0] > 0.0, Online(snapshots=20), new=y_new, "
                 "old=y):` (an out-of-place step while the condition holds on the state "
                 "before it, `y`; at most `max_steps=` steps, default "
                 f"{DEFAULT_MAX_STEPS:_}), or `while checkpointed((condition, postcondition), "
                 "Reverse()):` for a body that updates its state in place")
        strategy, schedule, keywords = self._checkpointed_header(
            it, "a condition", {"new", "old", "max_steps"}, usage)
        label = getattr(strategy, "label", repr(strategy))
        if schedule is None:
            if "max_steps" in keywords:
                raise self.error(keywords["max_steps"], "a reversible `while` that runs its step "
                                 "backwards ends by its postcondition: drop `max_steps=`")
            test = it.args[0]
            if not (isinstance(test, ast.Tuple) and len(test.elts) == 2):
                raise self.error(test, "under Reverse() a while loop runs backwards, so it needs a "
                                       "postcondition: write `while checkpointed((condition, "
                                       "postcondition), Reverse()):`, where the postcondition is "
                                       "false on entry and true after every iteration")
            cond, post = self._pre_post(test, "while")
            return ir.While(cond, post, self.block(s.body), self.loc(s))
        if schedule.online is None:
            raise self.error(it.args[1], f"{label} plans for a number of steps known ahead, and a "
                                         "while loop's is known only when it ends: use "
                                         "Online(snapshots=c), which places its snapshots as the "
                                         "loop runs")
        if isinstance(it.args[0], ast.Tuple):
            raise self.error(it.args[0], "an out-of-place while loop needs no postcondition (its "
                                         "old state is kept): write the condition alone")
        cond = self.expr(it.args[0])
        limit_node = keywords.get("max_steps")
        limit = self.expr(limit_node) if limit_node is not None else ir.Const(DEFAULT_MAX_STEPS)
        if isinstance(limit, ir.Const) and (not isinstance(limit.value, int)
                                            or isinstance(limit.value, bool) or limit.value < 0):
            raise self.error(limit_node, f"max_steps must be an int >= 0, got {limit.value!r}")
        var = f"_rb_t{self.loc(s).line}"
        return self._outline(s, it, var, strategy, keywords, (ir.Const(0), limit, ir.Const(1)),
                             cond)

    def _outline(self, s: ast.For | ast.While, it: ast.Call, var: str, strategy: Any,
                 keywords: dict[str, ast.expr], bounds_exprs: tuple[ir.Expr, ...],
                 cond: ir.Expr | None) -> list[ir.Stmt]:
        """The body of a checkpointed loop as its step function (and its condition as a
        function of the old state, for a ``while``); the loop as a call of both."""
        new = self._state_names(keywords["new"], "new")
        old = self._state_names(keywords["old"], "old")
        if len(new) != len(old):
            raise self.error(it, f"`new=` names {len(new)} state variable(s) and `old=` "
                                 f"{len(old)}: they pair up, the state after a step with the "
                                 "state before it")
        both = sorted(set(new) & set(old)) or sorted(n for n in set(new + old)
                                                     if (new + old).count(n) > 1)
        if both or var in new + old:
            raise self.error(it, f"`{(both or [var])[0]}` is named twice: the new state, the old "
                                 "state and the loop variable are different variables")
        self._loop_defs.append([])
        try:
            body = self.block(s.body)
        finally:
            inner = tuple(self._loop_defs.pop())
        loc = self.loc(s)
        for st in ir.walk_stmts(body):
            if isinstance(st, ir.Call):
                continue  # what a callee changes is known when it is compiled
            changed = sorted(ir.written_names(st) & (set(old) | {var}))
            if changed:
                role = "the loop variable" if changed[0] == var else "the old state"
                raise ReversibilitySyntaxError(
                    f"the body of a checkpointed loop changes `{changed[0]}`, {role}: a step "
                    f"adds the state after it into the new state ({', '.join(new)}) and only "
                    f"reads the state before it ({', '.join(old)}) (in reversible function "
                    f"{self.function_name})", self.src.filename, st.loc.line, st.loc.col,
                    self.src.text(st.loc.line), st.loc.end_line, st.loc.end_col, stage="parse")
        test: tuple[ir.Stmt, ...] = ()
        if cond is not None:
            reads_new = sorted(ir.names_used(cond) & set(new))
            if reads_new:
                raise self.error(it.args[0], f"the condition reads `{reads_new[0]}`, the new "
                                             "state: it is tested on the state before each step, "
                                             f"named by `old=` ({', '.join(old)})")
            test = (ir.Update(ir.Var(GO, loc), "^=", cond, loc),)
        free = self._free_names(body + test, {var, *new, *old})
        name = f"{self.function_name}_loop{loc.line}"
        for part in (name, f"{name}_step", f"{name}_cond"):
            ir.OUTLINED[part] = (self.function_name, loc.line)
        lines = (self.src.filename, self.src.line_offset + 1, tuple(self.src.lines))
        step_fn = ir.Function(f"{name}_step", (*new, *old, var, *free), body, *lines,
                              loops=inner)
        cond_fn = ir.Function(f"{name}_cond", (GO, *old, *free), test, *lines) if test else None
        self._loop_defs[-1].append(ir.LoopDef(name, step_fn, strategy, len(new), loc, cond_fn))
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        bounds: list[ir.Target] = []
        for what, e in zip(("start", "stop", "step"), bounds_exprs):
            # a bound read in the body too (or used twice) goes as a copy: one variable
            # passed twice to a call would alias
            if isinstance(e, ir.Var) and e.name not in free and e not in bounds:
                bounds.append(e)
                continue
            anc = f"_rb_{what}{loc.line}_{len(self._loop_defs[-1])}"
            pre.append(ir.Alloc(anc, e, loc))
            post.insert(0, ir.Dealloc(anc, None, loc))
            bounds.append(ir.Var(anc, loc))
        args = (*(ir.Var(n, loc) for n in new + old), *bounds, *(ir.Var(n, loc) for n in free))
        return [*pre, ir.Call(name, args, False, loc), *post]

    def _strategy(self, node: ast.expr, usage: str) -> Any:
        """The strategy object, evaluated once, in the function's namespace, as the loop is
        defined: its settings are constants (a strategy is part of the program)."""
        try:
            value = eval(compile(ast.Expression(node), self.src.filename, "eval"),
                         dict(self.namespace))
        except ValueError as exc:  # its own check of its settings
            raise self.error(node, f"the strategy `{ast.unparse(node)}` is not valid: {exc}") \
                from None
        except Exception as exc:
            raise self.error(node, f"the strategy `{ast.unparse(node)}` could not be made when "
                                   f"the function was defined ({type(exc).__name__}: {exc}): its "
                                   "settings must be constants or names defined before the "
                                   "function (import it: `from revbench.checkpoint import "
                                   "Revolve`)") from None
        if isinstance(value, type) and hasattr(value, "loop_schedule"):
            raise self.error(node, f"pass a strategy object, `{value.__name__}()`, not the class")
        if not callable(getattr(value, "loop_schedule", None)):
            raise self.error(node, f"`{ast.unparse(node)}` is a {type(value).__name__}, not a "
                                   "checkpointing strategy: use one of revbench.checkpoint's "
                                   f"{STATEMENT_STRATEGIES}, or Reverse() for an in-place step; "
                                   f"{usage}")
        return value

    def _state_names(self, node: ast.expr, what: str) -> tuple[str, ...]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
        names = []
        for x in items:
            if not isinstance(x, ast.Name) or x.id not in self.local_names:
                raise self.error(x, f"`{what}=` names the loop's state: an array argument or "
                                    f"ancilla of this function, or a tuple of them; got "
                                    f"`{ast.unparse(x)}`")
            names.append(x.id)
        if not names:
            raise self.error(node, f"`{what}=` names no variable")
        return tuple(names)

    def _free_names(self, body: tuple[ir.Stmt, ...], bound: set[str]) -> tuple[str, ...]:
        """The variables of the function that a loop's body uses (in order of first use),
        other than its state, its loop variable and the ancillas it allocates itself."""
        inside = {st.name for st in ir.walk_stmts(body) if isinstance(st, ir.Alloc)}
        order: list[str] = []
        for st in ir.walk_stmts(body):
            found: list[str] = []
            for e in ir.statement_expressions(st, True):
                found.extend(sorted(ir.names_used(e)))
            found.extend(t.name for t in ir.statement_kind(st).targets(st))
            if isinstance(st, ir.For):
                inside.add(st.var)
            for n in found:
                if n in self.local_names and n not in bound and n not in inside \
                        and n not in order:
                    order.append(n)
        return tuple(order)

    # -- targets and expressions -------------------------------------------
    def target(self, t: ast.expr) -> ir.Target:
        if isinstance(t, ast.Name):
            if t.id not in self.local_names:
                raise self.error(t, f"`{t.id}` is not an argument or ancilla of this function; "
                                    "only local variables can be updated (allocate one with "
                                    f"`{t.id} = 0.0`)." + suggest.did_you_mean(t.id, self.local_names))
            return ir.Var(t.id, self.loc(t))
        if isinstance(t, ast.Subscript):
            e = self.expr(t)
            if isinstance(e, ir.Elem):
                return e
        raise self.error(t, f"`{ast.unparse(t)}` cannot be updated: a target is a variable, an "
                            "element `x[i]` / `A[i, j]` or a sub-array `A[i]` / `x[a:b]`")

    def alloc_init(self, v: ast.expr) -> ir.Expr:
        """The initial value of an ancilla: an expression or an array allocation."""
        if isinstance(v, ast.Call):
            name = self._resolve_callable_name(v.func)
            if name in ("np.zeros", "np.zeros_like", "np.copy", "np.empty", "np.ones", "np.array",
                        "np.empty_like") or (isinstance(v.func, ast.Attribute)
                                             and v.func.attr == "copy"):
                return self._array_alloc(v, name)
        return self.expr(v)

    def _array_alloc(self, v: ast.Call, name: str | None) -> ir.ArrayAlloc:
        dtype = None
        for kw in v.keywords:
            if kw.arg != "dtype":
                raise self.error(kw, f"unsupported keyword `{kw.arg}` in an array allocation")
            dtype = self._dtype(kw.value)
        if name in ("np.empty", "np.empty_like"):
            raise self.error(v, "an uninitialised array cannot be deallocated reliably; use "
                                "np.zeros(...) or np.zeros_like(...)")
        if name in ("np.ones", "np.array"):
            raise self.error(v, "array ancillas are allocated with np.zeros(n), np.zeros((m, n)), "
                                "np.zeros_like(x) or x.copy()")
        if name == "np.zeros":
            if len(v.args) != 1:
                raise self.error(v, "np.zeros takes one shape argument: np.zeros(n) or np.zeros((m, n))")
            shp = v.args[0]
            dims = shp.elts if isinstance(shp, ast.Tuple) else [shp]
            if not 1 <= len(dims) <= 8:
                raise self.error(v, "np.zeros needs a shape of 1 to 8 dimensions")
            return ir.ArrayAlloc("zeros", tuple(self.expr(d) for d in dims), None, dtype, self.loc(v))
        if name in ("np.zeros_like", "np.copy"):
            src = v.args[0] if len(v.args) == 1 else None
        else:  # x.copy()
            if v.args or dtype:
                raise self.error(v, "x.copy() takes no arguments")
            src = v.func.value  # type: ignore[union-attr]
        if not isinstance(src, ast.Name) or src.id not in self.local_names:
            raise self.error(v, "the array copied or mimicked must be a variable of this function")
        kind = "zeros_like" if name == "np.zeros_like" else "copy"
        return ir.ArrayAlloc(kind, (), src.id, dtype, self.loc(v))

    def _dtype(self, node: ast.expr) -> str:
        text = ast.unparse(node).split(".")[-1].strip("'\"")
        if text in _DTYPES:
            return _DTYPES[text]
        raise self.error(node, "dtype must be one of np.float64, np.int64, np.bool_, np.complex128")

    def _resolve_callable_name(self, func: ast.expr) -> str | None:
        """``np.sin`` / ``numpy.sin`` / ``math.sin`` / ``sin``, with the module aliases resolved."""
        dotted = _dotted(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.local_names:
            return dotted
        if rest:
            mod = self._lookup_global(head)
            if mod is np:
                return "np." + rest
            if mod is math:
                return "math." + rest
            if getattr(mod, "__name__", None) == "scipy.special":
                return "scipy.special." + rest  # import scipy.special as sc; sc.gammaln
            return dotted
        obj = self._lookup_global(head)
        if obj is not None and not isinstance(obj, type):
            known = _known_function_objects().get(id(obj))
            if known:
                return known
        return dotted

    def _is_reversible_object(self, dotted: str) -> bool:
        """Does ``dotted`` name a reversible function in the namespace (it wins over
        a registered pure function of the same name)?"""
        head, *rest = dotted.split(".")
        obj = self._lookup_global(head)
        for a in rest:
            if a == "inverse":
                break
            obj = getattr(obj, a, None)
        return type(obj).__name__ == "ReversibleFunction"

    def _lookup_global(self, name: str) -> Any:
        if name in self.namespace:
            return self.namespace[name]
        return getattr(builtins, name, None)

    def expr(self, e: ast.expr) -> ir.Expr:
        loc = self.loc(e)
        if isinstance(e, ast.Constant):
            v = e.value
            if isinstance(v, (bool, int, float, complex)):
                return ir.Const(v, loc)
            raise self.error(e, f"constant {v!r} is not a number")
        if isinstance(e, ast.Name):
            if e.id in self.local_names:
                return ir.Var(e.id, loc)
            return self._frozen_constant(e, e.id)
        if isinstance(e, ast.Attribute):
            dotted = _dotted(e)
            if dotted and dotted.split(".")[0] not in self.local_names:
                return self._frozen_constant(e, dotted)
            if e.attr in ("real", "imag"):  # z.real is the pure function real(z)
                return ir.Func(e.attr, (self.expr(e.value),), loc)
            if e.attr == "T":  # a transpose, lowered with products once types are known
                return ir.UnaryOp("T", self.expr(e.value), loc)
            raise self.error(e, f"`{ast.unparse(e)}` is not supported in an expression; arrays "
                                "offer len(x), x.shape[k] and A.T (a transpose), and complex "
                                "numbers z.real and z.imag")
        if isinstance(e, ast.Subscript):
            return self._subscript(e)
        if isinstance(e, ast.BinOp):
            op = _BIN_OPS.get(type(e.op))
            if op is None:
                raise self.error(e, f"operator in `{ast.unparse(e)}` is not supported; use "
                                    "+ - * / ** // % @")
            left, right = self.expr(e.left), self.expr(e.right)
            return self._fold_int(e, op, left, right) or ir.BinOp(op, left, right, loc)
        if isinstance(e, ast.UnaryOp):
            if isinstance(e.op, ast.USub):
                inner = self.expr(e.operand)
                if isinstance(inner, ir.Const) and not isinstance(inner.value, bool):
                    return ir.Const(-inner.value, loc)
                return ir.UnaryOp("-", inner, loc)
            if isinstance(e.op, ast.UAdd):
                return self.expr(e.operand)
            if isinstance(e.op, ast.Not):
                return ir.UnaryOp("not", self.expr(e.operand), loc)
            raise self.error(e, "`~` inside an expression is not supported; `~f(x)` is a statement")
        if isinstance(e, ast.Call):
            return self._pure_call(e)
        if isinstance(e, ast.IfExp):
            return ir.IfExp(self.expr(e.test), self.expr(e.body), self.expr(e.orelse), loc)
        if isinstance(e, ast.Compare):
            ops = []
            for o in e.ops:
                if type(o) not in _CMP_OPS:
                    raise self.error(e, "only < <= > >= == != comparisons are supported")
                ops.append(_CMP_OPS[type(o)])
            return ir.Compare(tuple(ops), (self.expr(e.left), *[self.expr(c) for c in e.comparators]),
                              loc)
        if isinstance(e, ast.BoolOp):
            return ir.BoolOp("and" if isinstance(e.op, ast.And) else "or",
                             tuple(self.expr(v) for v in e.values), loc)
        raise self.error(e, f"`{ast.unparse(e)}` is not a supported expression")

    def _subscript(self, e: ast.Subscript) -> ir.Expr:
        loc = self.loc(e)
        base = e.value
        if isinstance(base, ast.Attribute) and base.attr == "shape" and isinstance(base.value, ast.Name) \
                and base.value.id in self.local_names:
            k, sign = e.slice, 1
            if isinstance(k, ast.UnaryOp) and isinstance(k.op, ast.USub):  # x.shape[-1]
                k, sign = k.operand, -1
            if isinstance(k, ast.Constant) and isinstance(k.value, int) and not isinstance(k.value, bool):
                return ir.Shape(base.value.id, sign * k.value, loc)
            raise self.error(e, "x.shape[k] needs a constant axis k")
        if not (isinstance(base, ast.Name) and base.id in self.local_names):
            raise self.error(e, self._not_indexable(e))
        idx = e.slice
        parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        steps = [self._slice_step(p, e) if isinstance(p, ast.Slice) else 1 for p in parts]
        for p in parts:
            if isinstance(p, ast.Starred) or (isinstance(p, ast.Constant) and p.value is Ellipsis):
                raise self.error(p, f"`{ast.unparse(p)}` is not supported in an index")
        indices = tuple(ir.Slice(None if p.lower is None else self.expr(p.lower),
                                 None if p.upper is None else self.expr(p.upper), self.loc(p),
                                 step)
                        if isinstance(p, ast.Slice) else self.expr(p)
                        for p, step in zip(parts, steps))
        for p, i in zip(parts, indices):
            if isinstance(i, ir.Const) and isinstance(i.value, bool):
                # NumPy would read a bool as a mask, not as the element 0 or 1
                raise self.error(p, f"`{ast.unparse(p)}` is a bool, and an index must be an "
                                    f"integer: write `{base.id}[{int(i.value)}]`")
        return ir.Elem(base.id, indices, loc)

    def _slice_step(self, p: ast.Slice, whole: ast.expr) -> int:
        """A slice's step: a constant positive integer (``x[::2]``, ``x[1:n:3]``)."""
        if p.step is None:
            return 1
        step = self.expr(p.step)
        if isinstance(step, ir.Const) and type(step.value) is int and step.value > 0:
            return step.value
        if isinstance(step, ir.Const) and type(step.value) is int and step.value < 0:
            raise self.error(p, f"`{ast.unparse(whole)}`: a negative step (a reversed view) is not "
                                "supported; loop over the indices backwards instead "
                                "(`for i in range(n - 1, -1, -1)`)")
        raise self.error(p, f"`{ast.unparse(whole)}`: a slice's step must be a constant positive "
                            f"integer (`x[::2]`), got `{ast.unparse(p.step)}`")

    @staticmethod
    def _recursion_message(name: str) -> str:
        return (f"`{name}` calls itself: recursion is not supported. A reversible function's "
                "inverse and derivative are generated, and compiled, as whole loops; write the "
                "recursion as a loop (an explicit stack array if needed), or a fixed depth of "
                "separate functions")

    def _not_indexable(self, e: ast.Subscript) -> str:
        """Why ``e`` cannot be indexed: a name that is not defined, an array of the
        module, a derivative taken inside reversible code, or some other expression."""
        base, text = e.value, ast.unparse(e)
        if isinstance(base, ast.Name):
            obj = self._lookup_global(base.id)
            if obj is None:
                return (f"`{base.id}` is not defined here (not an argument, a live ancilla or a "
                        f"loop variable of this block).{suggest.did_you_mean(base.id, self.local_names)}")
            if isinstance(obj, np.ndarray):
                return (f"`{base.id}` is an array of the module, not of this function: a reversible "
                        f"function reads arrays only through its arguments. Pass `{base.id}` in as "
                        "an argument")
        for node in ast.walk(base):  # revbench.grad(f, ...)(x)[1][0]
            if isinstance(node, ast.Call) and self._derivative_name(node.func) is not None:
                return (f"`{text}`: the result of a derivative taken inside reversible code "
                        "cannot be indexed: it is the derivative with respect to the one "
                        "argument `wrt=` names, already (`g += revbench.grad(f, loss=\"out\", "
                        "wrt=\"x\")(a, b, ...)`). For one element of an array's gradient, "
                        "compute the gradient into an ancilla array first (`t = np.zeros(n)`, "
                        "`t += revbench.grad(...)(...)`), read `t[i]`, then uncompute `t`")
        if isinstance(base, (ast.Call, ast.Subscript)):
            return (f"`{text}`: the result of a call cannot be indexed. Compute it into an "
                    "ancilla first (`t = f(x)`, or a reversible call that fills an array)")
        return f"`{text}`: only the function's own arrays can be indexed (arguments and ancillas)"

    def _derivative_name(self, func: ast.expr) -> str | None:
        """``revbench.grad`` (or ``grad``, ``jacobian``, ... imported from revbench) when
        ``func`` names one of revbench's derivative functions; otherwise None."""
        dotted, obj = self._resolved(func)
        if dotted is None:
            return None
        name = getattr(obj, "__name__", "")
        module = getattr(obj, "__module__", "") or ""
        return dotted if module.startswith("revbench") and name in _DERIVATIVES else None

    @staticmethod
    def _derivative_message(what: str) -> str:
        return (f"`{what}` inside a reversible function: the derivatives taken inside "
                "reversible code are a gradient, spelt `revbench.grad(f, loss=\"out\", "
                "wrt=\"x\")(a, b, ...)`, and a Jacobian-vector product, spelt `revbench.jvp(f, "
                "a, b, ..., tangents={\"x\": v}, outputs=\"r\")` (the tangent of `r`), in the "
                "value of an update (`g += revbench.grad(f, loss=..., wrt=...)(...)`) or of an "
                "ancilla. For other derivatives, take them outside and pass the result in as an "
                "argument")

    def _derivative(self, e: ast.Call) -> ir.Derivative | None:
        """``revbench.grad(f, loss="out", wrt="y")(a, b, c)`` -- or ``dfdy(a, b, c)`` with
        ``dfdy = revbench.grad(f, ...)`` of the module -- as a :class:`ir.Derivative`;
        None for any other call.  ``f`` is resolved now, to number ``loss`` and ``wrt``:
        it must be defined before the function that differentiates it."""
        inner = e.func
        which = self._derivative_name(inner)
        if which is not None and which.rpartition(".")[2] == "jvp":
            return self._jvp(e)
        if isinstance(inner, ast.Call):
            which = self._derivative_name(inner.func)
            if which is None:
                return None
            if which.rpartition(".")[2] != "grad":
                raise self.error(e, self._derivative_message(f"{which}(...)"))
            named = {k.arg: k.value for k in inner.keywords}
            extra = sorted(set(named) - {"loss", "wrt"} - {None})
            if extra or len(inner.args) > 3 or not inner.args:
                raise self.error(inner, "inside reversible code, a gradient is "
                                        "`revbench.grad(f, loss=\"out\", wrt=\"x\")(...)`: the "
                                        "function, its loss and one argument to differentiate "
                                        "by" + (f" (`{extra[0]}=` is not supported here)"
                                                if extra else ""))
            spec = list(inner.args[1:]) + [None] * (3 - len(inner.args))
            loss_node = named.get("loss", spec[0])
            wrt_node = named.get("wrt", spec[1])
            dotted, f = self._derivative_target(inner.args[0], ast.unparse(inner))
            loss = self._derivative_param(inner, f, loss_node, "loss")
            wrt = self._derivative_param(inner, f, wrt_node, "wrt")
            spelt = dotted
        elif isinstance(inner, ast.Name) and inner.id not in self.local_names:
            spec = getattr(self._lookup_global(inner.id), "revbench_derivative", None)
            if spec is None:
                return None
            f, loss_spec, wrt_spec = spec
            loss = self._derivative_param(e, f, loss_spec, "loss")
            wrt = self._derivative_param(e, f, wrt_spec, "wrt")
            spelt = inner.id
        else:
            return None
        if e.keywords:
            raise self.error(e, "the arguments of a gradient inside reversible code are "
                                f"positional: those of `{f.__name__}`")
        if len(e.args) != len(f.params):
            raise self.error(e, f"`{ast.unparse(e.func)}` takes the {len(f.params)} argument(s) "
                                f"of {f.__name__}{f.params}, got {len(e.args)}")
        args = tuple(self.expr(a) for a in e.args)
        return ir.Derivative(spelt, tuple(f.params), loss, wrt, args, self.loc(e))

    def _derivative_target(self, target: ast.expr, spelt: str) -> tuple[str, Any]:
        """``(dotted name, function)`` of the function a derivative differentiates: a
        reversible function of the module, defined before this one."""
        dotted = _dotted(target)
        f = self._lookup_global(dotted.split(".")[0]) if dotted else None
        for attr in (dotted or "").split(".")[1:]:
            f = getattr(f, attr, None)
        if type(f).__name__ != "ReversibleFunction" or getattr(f, "is_inverse", False):
            raise self.error(target, f"`{ast.unparse(target)}` in `{spelt}` must name a "
                                     "reversible function defined before this one (not its inverse)")
        return dotted, f

    def _jvp(self, e: ast.Call) -> ir.Derivative:
        """``revbench.jvp(f, a, b, c, tangents={"x": v}, outputs="r")`` inside reversible code:
        the tangent of the one output ``r`` (what ``[1][0]`` of its value is outside)."""
        named = {k.arg: k.value for k in e.keywords}
        extra = sorted(set(named) - {"tangents", "outputs"} - {None})
        if extra or not e.args or "tangents" not in named or "outputs" not in named:
            raise self.error(e, "inside reversible code, a Jacobian-vector product is "
                                "`revbench.jvp(f, a, b, ..., tangents={\"x\": v}, outputs=\"r\")`, "
                                "the tangent of the one output `r`" + (
                                    f" (`{extra[0]}=` is not supported here)" if extra else ""))
        dotted, f = self._derivative_target(e.args[0], "revbench.jvp(...)")
        out = self._derivative_param(e, f, named["outputs"], "outputs")
        tangents = named["tangents"]
        if not isinstance(tangents, ast.Dict) or not tangents.keys or None in tangents.keys:
            raise self.error(tangents, "`tangents=` of `revbench.jvp` inside reversible code is a "
                                       "dict written out, from argument names to their tangents: "
                                       "`tangents={\"x\": v}`")
        along = [self._derivative_param(e, f, k, "tangents") for k in tangents.keys]
        if len(set(along)) != len(along):
            raise self.error(tangents, "`tangents=` names an argument twice")
        if len(e.args) - 1 != len(f.params):
            raise self.error(e, f"`revbench.jvp({f.__name__}, ...)` takes the {len(f.params)} "
                                f"argument(s) of {f.__name__}{f.params} after the function, got "
                                f"{len(e.args) - 1}")
        order = sorted(range(len(along)), key=lambda k: along[k])
        return ir.Derivative(dotted, tuple(f.params), out, -1,
                             tuple(self.expr(a) for a in e.args[1:]), self.loc(e), kind="jvp",
                             along=tuple(along[k] for k in order),
                             directions=tuple(self.expr(tangents.values[k]) for k in order))

    def _derivative_param(self, at: ast.AST, f: Any, which: Any, what: str) -> int:
        """The position of ``f``'s argument named (or numbered) by ``which`` -- a constant
        node or a value -- for a gradient's ``loss`` or ``wrt``."""
        value = which.value if isinstance(which, ast.Constant) else which
        if which is None or (isinstance(which, ast.AST) and not isinstance(which, ast.Constant)):
            text = "nothing" if which is None else f"`{ast.unparse(which)}`"
            raise self.error(at, f"`{what}=` of a gradient inside reversible code must name one "
                                 f"argument of {f.__name__}{f.params} (a string or a position), "
                                 f"got {text}")
        params = f.params
        if isinstance(value, str) and value in params:
            return params.index(value)
        if type(value) is int and -len(params) <= value < len(params):
            return value % len(params)
        raise self.error(at, f"`{what}={value!r}` is not an argument of {f.__name__}{params}"
                             + (": inside reversible code a gradient is taken with respect to "
                                "one argument" if isinstance(value, (tuple, list)) else ""))

    def _pure_call(self, e: ast.Call) -> ir.Expr:
        loc = self.loc(e)
        derivative = self._derivative(e)
        if derivative is not None:
            return derivative
        name = self._resolve_callable_name(e.func)
        if self._derivative_name(e.func) is not None:
            raise self.error(e, self._derivative_message(_dotted(e.func) or ""))
        if name == self.function_name:
            raise self.error(e, self._recursion_message(name))
        axis = self._axis_keyword(e, name)
        keywords = [k for k in e.keywords if axis is None or k.arg != "axis"]
        if keywords:
            kw = keywords[0].arg
            if name in _SUMS or name in _EXTREMES or name in _DOTS:
                raise self.error(e, (
                    f"`axis=` is not an argument of `{name}`: it reduces a whole array "
                    "expression. Along an axis, write `np.sum(A, axis=k)` (or np.max, np.min)"
                    if kw == "axis" else
                    f"`{kw}=` is not supported in `{name}`: it takes one array expression, "
                    f"`{name}(a * b)`"))
            if name in _SCANS:
                raise self.error(e, f"`{kw}=` is not supported in `{name}`: it takes a 1-D array "
                                    "expression. Along an axis of a 2-D array, loop over the other "
                                    f"one: `for i in range(n): Y[i] += {name}(A[i])`")
            raise self.error(e, f"`{kw}=`: functions in expressions take positional arguments "
                                f"only (in `{ast.unparse(e)}`)")
        if name in _OUTERS or name in _TRANSPOSES:
            if len(e.args) != (2 if name in _OUTERS else 1):
                raise self.error(e, f"{name}() takes " + ("two 1-D array expressions: "
                                    f"`{name}(u, v)`" if name in _OUTERS else
                                    f"one 2-D array expression: `{name}(A)` (no axes)"))
            args = tuple(self.expr(a) for a in e.args)
            return (ir.BinOp("outer", *args, loc) if name in _OUTERS
                    else ir.UnaryOp("T", args[0], loc))
        if name in _SCANS:
            if len(e.args) != 1:
                raise self.error(e, f"{name}() takes one 1-D array expression here: "
                                    f"`{name}(x)` (no axis or dtype)")
            return ir.Scan(_SCANS[name], self.expr(e.args[0]), loc)
        if name == "len":
            if len(e.args) == 1 and isinstance(e.args[0], ast.Name) and e.args[0].id in self.local_names:
                return ir.Len(e.args[0].id, loc)
            raise self.error(e, "len() takes one array variable")
        if name in _SUMS or name in _DOTS or name in _EXTREMES \
                or (name in ("max", "min") and len(e.args) == 1):
            r = self._reduction(e, name)
            return r if axis is None else replace(r, axis=axis)
        canon = fn_rules.canonical(name) if name else None
        if canon is None and name and name.startswith("math.") and name[5:] in ("fabs",):
            canon = "abs"
        if canon is None:
            what = name or ast.unparse(e.func)
            obj = self._lookup_global(what.split(".")[0]) if name else None
            if obj is not None and type(obj).__name__ == "ReversibleFunction":
                raise self.error(e, f"`{what}` is a reversible function: it can be called as a "
                                    f"statement (`{what}(y, x)`), in the value of an update "
                                    f"(`y += 2.0 * {what}(x)`, computed into an ancilla and "
                                    f"uncomputed) or to allocate an ancilla (`t = {what}(x)`), "
                                    "not in a condition, an index or a bound")
            later = (" If it is a reversible function defined further down: one called "
                     "inside an expression must be defined before the function that calls it "
                     "(a call as a statement may come later)." if name and obj is None else "")
            raise self.error(e, f"`{what}` is not a revbench function."
                                f"{self._function_hint(what, len(e.args))}{later} The built-ins are "
                                f"{', '.join(sorted(fn_rules.BUILTIN_FUNCTIONS))}, and "
                                "revbench.register(fn, partials=...) adds your own")
        rule = fn_rules.lookup(canon)
        if rule is not None and len(e.args) != rule.nargs:
            raise self.error(e, f"{canon}() takes {rule.nargs} argument(s), got {len(e.args)}")
        return ir.Func(canon, tuple(self.expr(a) for a in e.args), loc)

    def _axis_keyword(self, e: ast.Call, name: str | None) -> int | None:
        """``np.sum(x, axis=k)`` (or ``np.max``, ``np.min``): the constant axis (``None``
        when there is none)."""
        if name not in _SUMS - {"sum"} and name not in _EXTREMES:
            return None
        axis = [k for k in e.keywords if k.arg == "axis"]
        if not axis:
            return None
        value = axis[0].value
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) \
                and isinstance(value.operand, ast.Constant):
            k = -value.operand.value
        elif isinstance(value, ast.Constant):
            k = value.value
        else:
            k = None
        if type(k) is not int:
            raise self.error(e, f"`axis=` of `{name}` must be a constant integer (one axis), got "
                                f"`{ast.unparse(value)}`")
        return k

    def _reduction(self, e: ast.Call, name: str) -> ir.Reduce:
        """``sum(e)`` / ``np.sum(e)`` of a whole-array expression, ``np.dot(a, b)``."""
        loc = self.loc(e)
        if name in _DOTS:
            if len(e.args) != 2:
                raise self.error(e, f"{name}() takes two arrays: `{name}(a, b)`")
            a, b = (self.expr(x) for x in e.args)
            return ir.Reduce("dot", ir.BinOp("*", a, b, loc), loc)
        if len(e.args) != 1:
            raise self.error(e, f"{name}() takes one array expression here: `{name}(a * b)` "
                                "(no start value, axis or dtype)")
        if name in _EXTREMES or name in ("max", "min"):
            # the largest (smallest) element: max(x) of one array, np.max(e) of any
            return ir.Reduce(name.rpartition(".")[2].lstrip("a"), self.expr(e.args[0]), loc)
        # Python's sum() of a 2-D array would be a row, NumPy's np.sum() every element
        return ir.Reduce("sum" if name != "sum" else "sum1", self.expr(e.args[0]), loc)

    def _function_hint(self, what: str, nargs: int) -> str:
        """" Did you mean `sin`?" for a misspelt pure function (or reversible function);
        for a function that exists (``np.sign``, ``math.lgamma``), that it is not supported
        yet: a name close in spelling is then no suggestion (``sign`` is not ``sin``)."""
        head, *rest = what.split(".")
        obj = self._lookup_global(head)
        for attr in rest:
            obj = getattr(obj, attr, None)
        if callable(obj) and not type(obj).__name__ == "ReversibleFunction":
            owner = {"np": "a NumPy", "numpy": "a NumPy", "math": "a `math`", "scipy": "a SciPy"}
            return (f" It is {owner.get(head, 'a Python') if rest else 'a Python'} function that "
                    "revbench does not "
                    "support (yet): write it with the built-ins, or register it with its "
                    "derivatives, `revbench.register(fn, partials=...)` (docs/language.md).")
        near = suggest.close_function(what)
        rule = fn_rules.lookup(fn_rules.canonical(near)) if near is not None else None
        if near is not None and (rule is None or rule.nargs == nargs):
            return f" Did you mean `{near}`?"
        rev = suggest.close_reversible(what, self.namespace)
        if rev is not None:
            return (f" Did you mean the reversible function `{rev}`? (It is called as a "
                    f"statement, `{rev}(x, y)`, not inside an expression.)")
        return ""

    def _frozen_constant(self, node: ast.expr, dotted: str) -> ir.Expr:
        head, *rest = dotted.split(".")
        obj: Any = self.namespace[head] if head in self.namespace else getattr(builtins, head, _MISSING)
        owner: Any = _MISSING
        for attr in rest:
            owner = obj
            obj = getattr(obj, attr, _MISSING) if obj is not _MISSING else _MISSING
        if obj is _MISSING:
            raise self.error(node, f"`{dotted}` is not defined: it is not an argument, ancilla or "
                                   "loop variable here, nor a module-level constant."
                                   + self._name_hint(dotted, owner))
        if isinstance(obj, (bool, np.bool_)):
            return ir.Const(bool(obj), self.loc(node))
        if isinstance(obj, numbers.Number) and not isinstance(obj, np.ndarray):
            v = obj.item() if isinstance(obj, np.generic) else obj
            if isinstance(v, (int, float, complex)):
                return ir.Const(v, self.loc(node))
        raise self.error(node, f"`{dotted}` is a {type(obj).__name__}, not a number: a reversible "
                               "function can read only its arguments, its ancillas and numeric "
                               "module-level constants (pass arrays as arguments)")

    def _name_hint(self, dotted: str, owner: Any = None) -> str:
        """" Did you mean `x`?" for a misspelt variable or numeric constant."""
        head, _, last = dotted.rpartition(".")
        if head:  # np.pii: the numeric attributes of what the prefix names
            if owner is None or owner is _MISSING:
                return ""
            pool = []
            with warnings.catch_warnings():  # some module attributes warn when read
                warnings.simplefilter("ignore")
                for a in dir(owner):
                    try:
                        if not a.startswith("_") and _is_number(getattr(owner, a, None)):
                            pool.append(a)
                    except Exception:  # an attribute that cannot be read is no suggestion
                        continue
            return suggest.did_you_mean(last, pool, prefix=head + ".")
        pool = set(self.local_names)
        pool.update(k for k, v in list(self.namespace.items())
                    if isinstance(k, str) and _is_number(v))
        return suggest.did_you_mean(dotted, pool)


_MISSING = object()


def _is_number(v: Any) -> bool:
    return isinstance(v, (numbers.Number, np.bool_)) and not isinstance(v, np.ndarray)


_REFUSED_STATEMENTS = {
    "Return": "`return` is not used in reversible functions: every argument is in-out, and "
              "calling the function returns all of them",
    "Global": "`global` is not allowed: a reversible function changes only its arguments",
    "Nonlocal": "`nonlocal` is not allowed: a reversible function changes only its arguments",
    "Import": "imports belong at module level, outside the reversible function",
    "ImportFrom": "imports belong at module level, outside the reversible function",
    "Try": "`try` is not reversible: an exception jumps out of a block half-done",
    "Raise": "`raise` is not allowed; use `assert` to check a condition",
    "FunctionDef": "nested function definitions are not allowed; define reversible functions at "
                   "module level and call them",
    "ClassDef": "class definitions are not allowed inside a reversible function",
    "Break": "`break` is not reversible: the inverse could not know where the loop stopped; "
             "use `while (condition, postcondition):`",
    "Continue": "`continue` is not supported; use an if statement in the loop body",
    "Match": "`match` is not supported; use if/elif/else",
}


_EXPRESSION_TYPES = typing.get_args(ir.Expr)


def _own_expressions(s: ir.Stmt):
    """The expressions of a statement itself (not of the statements nested in it)."""
    for f in fields(s):
        v = getattr(s, f.name)
        for item in v if isinstance(v, tuple) else (v,):
            if isinstance(item, _EXPRESSION_TYPES):
                yield item


#: revbench's derivative functions: they cannot be called inside reversible code (yet)
_DERIVATIVES = frozenset({"grad", "value_and_grad", "vjp", "jvp", "jacobian", "hvp", "hessian",
                          "check_grad"})


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else base + "." + node.attr
    return None


#: the spellings of a sum of every element, and of a dot product (of two 1-D arrays)
_SUMS = frozenset({"sum", "np.sum", "numpy.sum"})
_DOTS = frozenset({"np.dot", "numpy.dot", "np.inner", "numpy.inner"})
#: the largest or smallest element of an array expression (one argument: two are the
#: elementwise pure functions max(a, b) and min(a, b))
#: running sums and products: np.cumsum(x), np.cumprod(x) (1-D)
_SCANS = {f"{m}.{f}": f for m in ("np", "numpy") for f in ("cumsum", "cumprod")}
#: ``np.outer(u, v)``: the 2-D array ``u[i] * v[j]`` (lowered with products)
_OUTERS = frozenset({"np.outer", "numpy.outer"})
#: ``np.transpose(A)``: ``A.T``
_TRANSPOSES = frozenset({"np.transpose", "numpy.transpose"})
_EXTREMES = frozenset({f"{m}.{f}" for m in ("np", "numpy") for f in ("max", "min", "amax", "amin")})


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """Names a function body binds: ancillas and loop variables (Python's scoping rule)."""
    out: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out.add(t.id)
                elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Attribute) \
                        and node.value.attr == "shape":  # m, n = x.shape
                    out.update(e.id for e in t.elts if isinstance(e, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


_KNOWN_OBJECTS: dict[int, str] = {}
_KNOWN_WITH_SCIPY: list[bool] = []  # (a True once built after SciPy's special was imported)


def _known_function_objects() -> dict[int, str]:
    """Map ids of numpy/math function objects to canonical names (``from math import sin``)."""
    with_scipy = "scipy.special" in sys.modules
    if not _KNOWN_OBJECTS or (with_scipy and not any(_KNOWN_WITH_SCIPY)):
        _KNOWN_WITH_SCIPY.append(with_scipy)
        for spelling, canon in fn_rules.SPELLINGS.items():
            mod_name, _, attr = spelling.rpartition(".")
            mod = {"np": np, "numpy": np, "math": math,  # (SciPy only if the user imported it)
                   "scipy.special": sys.modules.get("scipy.special")}.get(mod_name)
            obj = getattr(mod, attr, None) if mod is not None else None
            if obj is not None:
                _KNOWN_OBJECTS[id(obj)] = canon
        _KNOWN_OBJECTS[id(builtins.abs)] = "abs"
        _KNOWN_OBJECTS[id(builtins.min)] = "min"
        _KNOWN_OBJECTS[id(builtins.max)] = "max"
    return _KNOWN_OBJECTS


def source_of(pyfunc) -> tuple[ast.FunctionDef, SourceInfo]:
    """Find and parse the source of a Python function, keeping file positions."""
    try:
        lines, start = inspect.getsourcelines(pyfunc)
    except (OSError, TypeError) as exc:
        raise ReversibilitySyntaxError(
            f"cannot read the source of {getattr(pyfunc, '__name__', pyfunc)!r} ({exc}); "
            "reversible functions must be defined in a file, a notebook cell, or through "
            "revbench.define(source)", stage="parse") from None
    filename = inspect.getsourcefile(pyfunc) or getattr(pyfunc.__code__, "co_filename", "<unknown>")
    indent = len(lines[0]) - len(lines[0].lstrip())
    dedented = [ln[indent:] if ln[:indent].strip() == "" else ln.lstrip() for ln in lines]
    tree = ast.parse("".join(dedented))
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ReversibilitySyntaxError("@reversible decorates a function definition", stage="parse")
    return node, SourceInfo(filename, lines, max(start, 1) - 1, indent)





def parse_function(pyfunc, namespace: Mapping[str, Any] | None = None) -> ir.Function:
    """Parse a Python function object into IR (stage ``parse``)."""
    node, info = source_of(pyfunc)
    ns = dict(getattr(pyfunc, "__globals__", {}))
    closure = getattr(pyfunc, "__closure__", None) or ()
    for name, cell in zip(pyfunc.__code__.co_freevars, closure):
        try:
            ns[name] = cell.cell_contents
        except ValueError:  # cell not yet filled
            pass
    if namespace:
        ns.update(namespace)
    return Parser(info, ns).function(node)


def parse_definition(node: ast.FunctionDef, info: SourceInfo, namespace: Mapping[str, Any]) -> ir.Function:
    """Parse an already-parsed ``def`` (used for source strings and notebook cells)."""
    return Parser(info, namespace).function(node)


class _ReplaceCalls(ast.NodeTransformer):
    """Replace the calls ``names`` maps (by ``id`` of the original node) by their ancilla."""

    def __init__(self, names: dict[int, str]):
        self.names = names

    def visit_Call(self, node: ast.Call) -> ast.AST:
        name = self.names.get(getattr(node, "_rb_origin", None))
        if name is not None:
            return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)
        return self.generic_visit(node)


def _copy_ast(e: ast.expr) -> ast.expr:
    """A deep copy of ``e`` whose call nodes remember the original's ``id``."""
    import copy

    for node in ast.walk(e):
        if isinstance(node, ast.Call):
            node._rb_origin = id(node)  # type: ignore[attr-defined]
    return copy.deepcopy(e)

"""Gradients inside reversible code, lowered to calls of their own program.

``g += revbench.grad(f, loss="out", wrt="y")(0.0, x, y)`` is what a user writes to put a
derivative inside a differentiated program (a saddle point, an inner optimisation, a
force computed from a potential).  Whether the gradient is a number or an array depends
on the argument types, so -- like matrix products (:mod:`revbench.lang.products`) -- it
is lowered right after type inference (:func:`revbench.lang.types.infer` calls
:func:`lower`), into the core language::

    g += lr * revbench.grad(f, loss="out", wrt="y")(0.0, x, y)

    ->  _rb_grad0 = np.zeros(y.shape[0])
        grad(f, loss=out, wrt=y)(_rb_grad0, _rb_darg1, x, y)     # _rb_grad0 += gradient
        g += lr * _rb_grad0
        ~grad(f, loss=out, wrt=y)(_rb_grad0, _rb_darg1, x, y)    # _rb_grad0 -= gradient
        del _rb_grad0

The callee ``grad(f, loss=out, wrt=y)`` is a reversible function of its own
(:class:`revbench.compiler.DerivativeProgram`): it adds the gradient into its first
argument and changes nothing else, so its inverse subtracts it, and the ancilla that
received it is exactly zero again.  Its reverse sweep carries the outer adjoint through
``f``'s Hessian (:mod:`revbench.transforms.derivative`).  ``g += grad(...)(...)`` alone
(or ``-=``) is the call itself, on ``g``, with no ancilla.  A value passed as an argument
(``0.0`` for the loss) is held by an ancilla for the call.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import replace
from typing import Any

from revbench.lang import ir
from revbench.lang.elementwise import extent
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.lowering import Lowering
from revbench.lang.text import expr_text

#: the ancillas that receive a gradient, and those that hold a value passed to it
GRADIENT_PREFIX, VALUE_PREFIX = "_rb_grad", "_rb_darg"


def present(func: ir.Function) -> bool:
    """Does ``func`` take a gradient anywhere?"""
    return any(isinstance(n, ir.Derivative) for s in ir.walk_stmts(func.body)
               for e in ir.statement_expressions(s) for n in ir.walk_expr(e))


def lower(func: ir.Function, env: MutableMapping[str, Any],
          type_of: Callable[[ir.Expr], Any]) -> ir.Function:
    """``func`` with every gradient computed by a call into an ancilla (or into the target
    of ``g += grad(...)(...)``); ``env`` (the variables' types) receives the ancillas."""
    return replace(func, body=_Lowering(func, env, type_of).block(func.body))


def _derivatives_in(e: ir.Expr | None) -> list[ir.Derivative]:
    return [] if e is None else [n for n in ir.walk_expr(e) if isinstance(n, ir.Derivative)]


class _Lowering(Lowering):

    def error(self, loc: ir.Loc, message: str) -> ReversibilityTypeError:
        f, text = self.func, self.line(loc)
        return ReversibilityTypeError(
            f"{message}\n  in reversible function {ir.shown_name(f.name)}, {ir.shown_file(f.filename)}, "
            f"line {loc.line}: {text}",
            function=f.name, filename=f.filename, lineno=loc.line, stage="types")

    def block(self, body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            out += self.stmt(s)
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        children = ir.child_blocks(s)
        if isinstance(s, ir.Update):
            return self.update(s)
        if isinstance(s, ir.Alloc) and not isinstance(s.init, ir.ArrayAlloc):
            return self.alloc(s)
        if isinstance(s, ir.Dealloc) and s.init is not None \
                and not isinstance(s.init, ir.ArrayAlloc):
            return self.dealloc(s)
        for e in ir.statement_expressions(s):
            for d in _derivatives_in(e):
                raise self.error(s.loc, f"`{expr_text(d)}` cannot be used here: a gradient inside "
                                        "reversible code is the value of an update (`g += "
                                        "revbench.grad(...)(...)`) or of an ancilla; compute it "
                                        "into an ancilla first")
        if not children:
            return [s]
        if isinstance(s, ir.If):
            return [replace(s, then=self.block(s.then), orelse=self.block(s.orelse))]
        return [replace(s, body=self.block(s.body))]

    # -- statements ---------------------------------------------------------------------
    def update(self, s: ir.Update) -> list[ir.Stmt]:
        found = _derivatives_in(s.value)
        if not found:
            return [s]
        d = s.value
        if (isinstance(d, ir.Derivative) and s.op in ("+=", "-=") and isinstance(s.target, ir.Var)
                and s.target.name not in {n for a in (*d.args, *d.directions)
                                          for n in ir.names_used(a)}
                and self.type_of(s.target) == self.type_of(d)):
            # g += grad(...)(...): the call adds into g itself
            pre, args, post = self.arguments(d)
            return [*pre, self.call(d, s.target, args, s.op == "-="), *post]
        pre, values, post = self.into_ancillas(found, s.loc)
        return [*pre, replace(s, value=_substitute(s.value, values)), *post]

    def alloc(self, s: ir.Alloc) -> list[ir.Stmt]:
        return self.ancilla(s)

    def dealloc(self, s: ir.Dealloc) -> list[ir.Stmt]:
        return self.ancilla(s)

    def ancilla(self, s: ir.Alloc | ir.Dealloc) -> list[ir.Stmt]:
        """``t = grad(...)(...)``: ``t`` allocated at zero, then filled by the call; its
        ``del t``: the call undone, then ``t`` is zero.  A derivative inside a larger
        initial value goes through an ancilla of its own."""
        found = _derivatives_in(s.init)
        if not found:
            return [s]
        d, release = s.init, isinstance(s, ir.Dealloc)
        if isinstance(d, ir.Derivative):
            pre, args, post = self.arguments(d)
            call = self.call(d, ir.Var(s.name, s.loc), args, release)
            if release:
                return [*pre, call, *post, ir.Dealloc(s.name, self.zero(d), s.loc)]
            return [ir.Alloc(s.name, self.zero(d), s.loc), *pre, call, *post]
        pre, values, post = self.into_ancillas(found, s.loc)
        return [*pre, replace(s, init=_substitute(s.init, values)), *post]

    # -- the pieces ---------------------------------------------------------------------
    def into_ancillas(self, found: list[ir.Derivative],
                      loc: ir.Loc) -> tuple[list[ir.Stmt], dict[int, ir.Expr], list[ir.Stmt]]:
        """Each gradient computed into an ancilla before the statement and uncomputed after
        it (the same values subtracted from the values they made: exactly zero again)."""
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        values: dict[int, ir.Expr] = {}
        for d in found:
            for inner in ir.walk_expr(d):
                if inner is not d and isinstance(inner, ir.Derivative):
                    raise self.error(loc, f"`{expr_text(inner)}` inside the arguments of another "
                                          "gradient: compute it into an ancilla first")
            name = f"{GRADIENT_PREFIX}{next(self._names)}"
            self.env[name] = self.type_of(d)
            zero = self.zero(d)
            held = ir.Var(name, d.loc)
            before, args, after = self.arguments(d)  # (held until the ancilla is zero again)
            pre += [ir.Alloc(name, zero, d.loc), *before, self.call(d, held, args, False)]
            post[:0] = [self.call(d, held, args, True), *after, ir.Dealloc(name, zero, d.loc)]
            values[id(d)] = held
        return pre, values, post

    def arguments(self, d: ir.Derivative) -> tuple[list[ir.Stmt], tuple[ir.Target, ...],
                                                   list[ir.Stmt]]:
        """The call's arguments: variables and elements as they are, a value (``0.0`` for
        the loss, ``2.0 * h``) held by an ancilla for the call."""
        pre: list[ir.Stmt] = []
        post: list[ir.Stmt] = []
        args: list[ir.Target] = []
        roles = [f"argument `{p}`" for p in d.params] + [f"the tangent of `{d.params[k]}`"
                                                          for k in d.along]
        for role, a in zip(roles, (*d.args, *d.directions)):
            if isinstance(a, (ir.Var, ir.Elem)):
                args.append(a)
                continue
            t = self.type_of(a)
            if t.is_array:
                raise self.error(d.loc, f"{role} of `{expr_text(d)}` is the array expression "
                                        f"`{expr_text(a)}`: pass an array variable (compute the "
                                        "expression into an ancilla array first)")
            name = f"{VALUE_PREFIX}{next(self._names)}"
            self.env[name] = t
            pre.append(ir.Alloc(name, a, d.loc))
            post.insert(0, ir.Dealloc(name, a, d.loc))
            args.append(ir.Var(name, d.loc))
        return pre, tuple(args), post

    def call(self, d: ir.Derivative, into: ir.Target, args: tuple[ir.Target, ...],
             inverted: bool) -> ir.Call:
        return ir.Call(ir.derivative_callee(d), (into, *args), inverted, d.loc)

    def zero(self, d: ir.Derivative) -> ir.Expr:
        """A zero of the gradient's type: ``0.0``, or zeros of the shape of ``args[wrt]``."""
        t = self.type_of(d)
        if not t.is_array:
            return ir.Const(0.0, d.loc)
        arg = d.args[d.wrt if d.kind == "grad" else d.loss]
        return ir.ArrayAlloc("zeros", tuple(extent(arg, ax, self.env) for ax in range(t.ndim)),
                             None, "float", d.loc)


def _substitute(e: ir.Expr, values: dict[int, ir.Expr]) -> ir.Expr:
    """``e`` with the gradients ``values`` maps (by ``id``) replaced by their ancillas."""
    if id(e) in values:
        return values[id(e)]
    return ir.map_children(e, lambda c: _substitute(c, values))

"""revbench's own Python functions, prepared to be lowered inline into a kernel.

A checkpointed loop's kernel runs its schedule (:mod:`revbench.checkpoint.actions`):
generators of actions and the small functions they call; ``lgamma``'s derivatives are
Python functions too (:mod:`revbench.rules.special`).  Numba compiles those as
functions of their own; the native lowering instead writes each call *into* the kernel
that makes it -- a generator's ``yield`` jumps to the loop body that consumes it and
comes back (:meth:`.lower.FunctionLowering.for_generator`), a function's ``return``
jumps to the end of its copy -- so a schedule costs no call and no generator object, and
the kernel needs nothing but its own code.

:func:`prepared` gives a function's syntax tree with every local renamed apart (each
inlined copy has names of its own), module constants written in as literals, and the
functions it calls named by symbols the lowering looks up.  Only functions of the
modules in :data:`INLINED_MODULES` are taken: revbench's code, written in the subset
the lowering covers, never a user's (that is Numba's to compile).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the modules whose functions generated code may have lowered inline
INLINED_MODULES = ("revbench.checkpoint.actions", "revbench.rules.special")
#: functions of the libraries revbench builds on that its own inlined code calls, by module
#: and name: checkpoint_schedules' ``n_advance`` (how far Multistage's binomial schedule
#: advances), integer arithmetic and a keyword-only choice of trajectory that
#: :func:`prepared` specialises away
INLINED_FUNCTIONS = {("checkpoint_schedules.multistage", "n_advance")}

#: names the lowering knows by themselves (builtins and the NumPy module)
_KNOWN = {"range", "len", "min", "max", "abs", "int", "float", "bool", "complex", "np", "math",
          "ValueError"}

_counter = itertools.count()


class NotInlinable(Exception):
    """The function is outside what can be inlined (the kernel then goes to Numba)."""


def python_function(obj: object) -> Callable | None:
    """The Python function behind ``obj`` (a Numba dispatcher's ``py_func``, a stand-in's
    ``__wrapped__``, or ``obj``)
    when it is one of :data:`INLINED_MODULES`' functions, else None."""
    fn = getattr(obj, "py_func", None) or getattr(obj, "__wrapped__", obj)
    if inspect.isfunction(fn) and (fn.__module__ in INLINED_MODULES
                                   or (fn.__module__, fn.__name__) in INLINED_FUNCTIONS):
        return fn
    return None


@functools.cache
def _parsed(code: object, fn: Callable) -> tuple[ast.FunctionDef, frozenset[str], bool]:
    """``fn``'s definition, its local names and whether it is a generator."""
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise NotInlinable(f"no source for {fn.__qualname__}") from exc
    tree = ast.parse(text).body[0]
    if not isinstance(tree, ast.FunctionDef):
        raise NotInlinable(fn.__qualname__)
    local = {a.arg for a in tree.args.args}
    generator = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            generator = True
        elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.Global, ast.Nonlocal)) \
                and node is not tree:
            raise NotInlinable(f"{fn.__qualname__}: nested scopes")
    return tree, frozenset(local), generator


def is_generator(fn: Callable) -> bool:
    return _parsed(fn.__code__, fn)[2]


@dataclass
class Prepared:
    """One inlined copy of a function: its parameters and body (locals renamed), and the
    symbols of the functions it calls."""

    params: list[str]
    body: list[ast.stmt]
    calls: dict[str, Callable]
    generator: bool


def prepared(fn: Callable) -> Prepared:
    """A fresh copy of ``fn``'s body to lower inline (see the module's docstring)."""
    tree, local, generator = _parsed(fn.__code__, fn)
    a = tree.args
    if a.vararg or a.kwarg or a.defaults or a.posonlyargs:
        raise NotInlinable(f"{fn.__qualname__}: parameters")
    fixed = _constant_keywords(fn, a)
    prefix = f"_rbi{next(_counter)}_"
    calls: dict[str, Callable] = {}
    glob = fn.__globals__

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in local:
                return ast.copy_location(ast.Name(prefix + node.id, node.ctx), node)
            if node.id in ("np", "math"):  # (the names generated code gives the modules)
                return ast.copy_location(ast.Name(f"_rb_{node.id}", node.ctx), node)
            if node.id in _KNOWN and node.id not in glob:
                return node
            value = glob.get(node.id)
            if isinstance(value, (bool, int, float, np.integer, np.floating)):
                return ast.copy_location(ast.Constant(value.item() if isinstance(
                    value, np.generic) else value), node)
            callee = python_function(value)
            if callee is None:
                raise NotInlinable(f"{fn.__qualname__}: the name {node.id}")
            symbol = f"_rbf{id(callee)}_{node.id}"
            calls[symbol] = callee
            return ast.copy_location(ast.Name(symbol, node.ctx), node)

    body = [Rename().visit(s) for s in _folded(_copy(tree).body, fixed)]
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]  # (the docstring)
    return Prepared([prefix + p.arg for p in a.args], body, calls, generator)


def _constant_keywords(fn: Callable, a: ast.arguments) -> dict[str, object]:
    """The keyword-only parameters of ``fn``, each bound to its default (a constant): a
    call from generated code never passes them.  Each is then a constant of the copy,
    and the branches it decides are folded away (:func:`_folded`)."""
    if not a.kwonlyargs:
        return {}
    defaults = fn.__kwdefaults__ or {}
    if fn.__defaults__ and fn.__code__.co_argcount > len(a.args):
        # (a copy that takes them by position too: actions._positional)
        names = fn.__code__.co_varnames[len(a.args):fn.__code__.co_argcount]
        defaults = {**dict(zip(names, fn.__defaults__[-len(names):])), **defaults}
    fixed = {}
    for arg in a.kwonlyargs:
        value = defaults.get(arg.arg, inspect.Parameter.empty)
        if not isinstance(value, (bool, int, float, str)):
            raise NotInlinable(f"{fn.__qualname__}: parameters")
        fixed[arg.arg] = value
    return fixed


def _folded(body: list[ast.stmt], fixed: dict[str, object]) -> list[ast.stmt]:
    """``body`` with the names of ``fixed`` replaced by their constants, comparisons of
    constants worked out, and each ``if`` on a constant condition replaced by the branch
    taken (before any name is looked up: a branch not taken may name what cannot be
    inlined, a ``print`` of a bad argument)."""
    if not fixed:
        return body

    class Fold(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in fixed and isinstance(node.ctx, ast.Load):
                return ast.copy_location(ast.Constant(fixed[node.id]), node)
            return node

        def visit_Compare(self, node: ast.Compare) -> ast.expr:
            self.generic_visit(node)
            ops = {ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y}
            if (len(node.ops) == 1 and type(node.ops[0]) in ops
                    and isinstance(node.left, ast.Constant)
                    and isinstance(node.comparators[0], ast.Constant)):
                value = ops[type(node.ops[0])](node.left.value, node.comparators[0].value)
                return ast.copy_location(ast.Constant(bool(value)), node)
            return node

        def visit_If(self, node: ast.If):
            self.generic_visit(node)
            if isinstance(node.test, ast.Constant):
                return (node.body if node.test.value else node.orelse) or [ast.Pass()]
            return node

    out = []
    for st in body:
        new = Fold().visit(st)
        out += new if isinstance(new, list) else [new]
    return out


def _copy(tree: ast.FunctionDef) -> ast.FunctionDef:
    return ast.parse(ast.unparse(tree)).body[0]  # type: ignore[return-value]

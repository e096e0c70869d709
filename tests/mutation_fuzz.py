"""A mutation fuzzer for issue 9 ("nothing silently wrong"), used by ``test_fuzz_mutations.py``.

A *corpus* of small valid reversible programs (``CORPUS``) is mutated, at the AST level
(``SOURCE_MUTATIONS``: operators, constants, names, statements, indices, call arity, ...)
and in its arguments (``ARG_MUTATIONS``: edge values, wrong types, odd arrays, arity), and
every mutated program is run through an *oracle* (``run_case``) on one or both backends:

1. decoration succeeds, or raises ``ReversibilitySyntaxError`` at a line of the source;
2. a call returns, or raises a revbench error, or a user-level ``TypeError`` /
   ``ValueError`` / ``ArithmeticError`` / ``IndexError`` whose message (or a note)
   names the reversible function;
3. a call that raises leaves the caller's arrays as they were;
4. a call that returns keeps every argument's kind (bool/int/float/complex, array dtype
   and shape, the same array objects), its inverse gives the inputs back (or raises a
   revbench error), and the two backends agree;
5. no integer outside int64 comes back.

A violation raises :class:`Bug` with a short, stable ``kind`` (Hypothesis tells failures
apart by their message and place, so the kind names the class of hole, not the values)
and the details in ``Bug.details``.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import math
import signal
import sys
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import revbench
from revbench import ReversibilityError, ReversibilitySyntaxError

# ---------------------------------------------------------------------------------------------
# The corpus: (name of the main function, source, argument factory).  Helpers a program calls
# are defined in the same source.  Main functions are named `fz_*` so an error message that
# names the function is told apart from one that does not.


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    args: Callable[[], list]


def _p(name: str, source: str, args: Callable[[], list]) -> Program:
    return Program(name, textwrap.dedent(source).strip() + "\n", args)


def _a(*xs):
    return np.array(xs, dtype=float)


CORPUS: list[Program] = [
    _p("fz_poly", """
        def fz_poly(y, x):
            t = 0.0
            t += x * x
            y += 3.0 * t + x
            t -= x * x
            del t
    """, lambda: [0.5, 2.0]),
    _p("fz_axpy", """
        def fz_axpy(y, a, x):
            for i in range(len(x)):
                y[i] += a * x[i]
    """, lambda: [np.zeros(4), 2.0, _a(1, 2, 3, 4)]),
    _p("fz_intscale", """
        def fz_intscale(n, k):
            n *= k
            n /= 2
            n -= 3
    """, lambda: [6, 4]),
    _p("fz_toggle", """
        def fz_toggle(flag, bits, mask, x):
            bits ^= mask
            flag ^= x > 0.0
    """, lambda: [False, 10, 6, 1.5]),
    _p("fz_swap", """
        def fz_swap(a, b, x):
            a, b = b, a
            x[0], x[2] = x[2], x[0]
    """, lambda: [1.0, 2.0, _a(1, 2, 3)]),
    _p("fz_norm", """
        def fz_norm(r, x):
            with routine:
                s = 0.0
                for i in range(len(x)):
                    s += x[i] * x[i]
            r += math.sqrt(s)
            ~routine
    """, lambda: [1.0, _a(3, 4)]),
    _p("fz_reduce", """
        def fz_reduce(x, wrapped):
            if (x >= 1.0, wrapped):
                x -= 1.0
                wrapped ^= True
    """, lambda: [1.25, False]),
    _p("fz_sign", """
        def fz_sign(n, x):
            if x > 0.0:
                n += 1
            elif x < 0.0:
                n -= 1
            else:
                pass
    """, lambda: [0, -2.5]),
    _p("fz_halve", """
        def fz_halve(x, n):
            while (x > 1.0, n > 0):
                x /= 2.0
                n += 1
    """, lambda: [10.0, 0]),
    _p("fz_sumsq", """
        def fz_sq(y, x):
            y += x * x

        def fz_sumsq(s, x):
            for i in range(len(x)):
                fz_sq(s, x[i])
            ~fz_sq(s, x[0])
    """, lambda: [0.0, _a(1, 2, 3)]),
    _p("fz_unscale", """
        def fz_unscale(x, a):
            with inverted:
                x *= a
                x += 1.0
    """, lambda: [7.0, 2.0]),
    _p("fz_mix", """
        def fz_mix(y, x, k):
            y += np.sin(x) + math.cos(x) + tanh(x) + np.arctan2(x, 1.0)
            y += np.minimum(x, 0.5) + max(x, k) + abs(-x) + math.hypot(x, 1.0) + x ** 0.5
            y -= exp(x) * log(x + 2.0) - sqrt(x) + log1p(x) * expm1(x) / cosh(x)
    """, lambda: [0.0, 2.0, 3]),
    _p("fz_phase", """
        def fz_phase(z, w, theta):
            w += z * (math.cos(theta) + 1j * math.sin(theta))
            z *= 2.0 + 1j
    """, lambda: [1 + 0j, 0j, 0.7]),
    _p("fz_count", """
        def fz_count(n, A):
            seen = np.zeros((A.shape[0], A.shape[1]), dtype=np.int64)
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    seen[i, j] += 1 if A[i, j] > 0.0 else 0
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    n += seen[i, j]
            for i in range(A.shape[0]):
                for j in range(A.shape[1]):
                    seen[i, j] -= 1 if A[i, j] > 0.0 else 0
            del seen
    """, lambda: [0, np.array([[1.0, -2.0], [3.0, 0.0]])]),
    _p("fz_prefix", """
        def fz_prefix(x):
            for i in range(1, len(x)):
                x[i] += x[i - 1]
    """, lambda: [_a(1, 2, 3, 4)]),
    _p("fz_snapshot", """
        def fz_snapshot(y, x, a):
            before = x.copy()
            x *= a
            y += before
            x /= a
            del before
    """, lambda: [np.zeros(3), _a(1, 2, 3), 2.0]),
    _p("fz_bits", """
        def fz_bits(m, b, k):
            for i in range(len(b)):
                b[i] ^= m[i] > k
            m[0] += k * 2
    """, lambda: [np.array([1, 5, 9], dtype=np.int64), np.zeros(3, dtype=bool), 4]),
    _p("fz_blur", """
        def fz_blur(y, x):
            tmp = np.zeros_like(x)
            for i in range(1, len(x) - 1):
                tmp[i] += x[i - 1] + x[i + 1]
            y += 0.5 * tmp
            for i in range(1, len(x) - 1):
                tmp[i] -= x[i - 1] + x[i + 1]
            del tmp
    """, lambda: [np.zeros(4), _a(1, 2, 4, 8)]),
    _p("fz_fold", """
        def fz_fold(x, s):
            for i in range(len(x) - 1, 0, -2):
                x[i] += x[i - 1] * s
    """, lambda: [_a(0, 1, 2, 3, 4), 0.5]),
    _p("fz_intexpr", """
        def fz_intexpr(n, a, b):
            n += a // 3 + b % 5 + a ** 2 - abs(b)
            n ^= a * b
    """, lambda: [0, 7, -4]),
    _p("fz_quartic", """
        def fz_quartic(y, x):
            with routine as sq:
                s = 0.0
                s += x * x
            with routine as q:
                u = 0.0
                u += s * s
            y += u
            ~q
            ~sq
    """, lambda: [0.0, 2.0]),
    _p("fz_elem", """
        def fz_elem(x, i, j):
            x[i] += x[j] * 2.0
            t = x[i] + 1.0
            x[j] -= t
            del t
    """, lambda: [_a(1, 2, 3), 0, 2]),
    _p("fz_calls", """
        def fz_addmul(a, b):
            a += b * 1.5

        def fz_calls(x, y, k):
            fz_addmul(x[0], y)
            (~fz_addmul)(x[1], x[0])
            fz_addmul.inverse(y, x[k])
    """, lambda: [_a(1, 2, 3), 0.5, 2]),
    _p("fz_cplx_arr", """
        def fz_cplx_arr(z, w, c):
            for i in range(len(z)):
                z[i] += c * w[i]
            w -= 2.0 * z
            c /= 1j
    """, lambda: [np.zeros(2, dtype=complex), np.array([1 + 1j, 2 - 1j]), 1.5 + 0.5j]),
]

BY_NAME = {p.name: p for p in CORPUS}

# ---------------------------------------------------------------------------------------------
# Source mutations.  Each takes the parsed module, a position (which candidate node) and a
# choice (which replacement), and mutates the tree in place; it returns a short description,
# or None when there is nothing to mutate.

EDGE_CONSTANTS = [0, -1, 1, 0.0, -0.0, 1e-200, 1e308, 2**62, 2**63, 2**70, True, False,
                  -(2**63), 2.5, 1j, 3]
EDGE_EXPRS = ["math.inf", "-math.inf", "math.nan", "np.inf"]
AUG_OPS = [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.BitXor, ast.FloorDiv, ast.Mod, ast.Pow,
           ast.BitOr, ast.MatMult]
BIN_OPS = [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitXor,
           ast.BitAnd]
CMP_OPS = [ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Is, ast.In]
INDEX_EXPRS = ["100", "-1", "-100", "True", "1.5", "2 ** 63", "i + 1", "0, 0", "-4", "k",
               "len(x)", "x", "0:1", "None"]
EXTRA_NAMES = ["np", "math", "len", "range", "routine", "inverted", "print", "sin", "_rb_x",
               "True", "None"]


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def _nodes(tree: ast.Module, kind) -> list[ast.AST]:
    out = []
    for fn in _functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, kind) and node is not fn:
                out.append(node)
    return out


def _stmt_lists(tree: ast.Module) -> list[list[ast.stmt]]:
    out = []
    for fn in _functions(tree):
        for node in ast.walk(fn):
            for fld in ("body", "orelse"):
                body = getattr(node, fld, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    out.append(body)
    return out


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _line(node) -> str:
    return str(getattr(node, "lineno", "?"))


def _pick(seq, k):
    return seq[k % len(seq)] if seq else None


def _swap_operator(tree, pos, choice, kind, ops, label, get, put):
    """Replace the operator of one ``kind`` node by one of ``ops`` (the three operator
    mutations differ only in where the operator lives)."""
    node = _pick(_nodes(tree, kind), pos)
    if node is None:
        return None
    op = ops[choice % len(ops)]
    old = type(get(node)).__name__
    put(node, op())
    return f"{label} {old}->{op.__name__} at line {_line(node)}"


def m_augop(tree, pos, choice):
    return _swap_operator(tree, pos, choice, ast.AugAssign, AUG_OPS, "augop",
                          lambda n: n.op, lambda n, o: setattr(n, "op", o))


def m_binop(tree, pos, choice):
    return _swap_operator(tree, pos, choice, ast.BinOp, BIN_OPS, "binop",
                          lambda n: n.op, lambda n, o: setattr(n, "op", o))


def m_cmpop(tree, pos, choice):
    return _swap_operator(tree, pos, choice, ast.Compare, CMP_OPS, "cmpop",
                          lambda n: n.ops[0], lambda n, o: n.ops.__setitem__(0, o))


def m_constant(tree, pos, choice):
    consts = [n for n in _nodes(tree, ast.Constant) if not isinstance(n.value, str)]
    node = _pick(consts, pos)
    if node is None:
        return None
    options = EDGE_CONSTANTS + EDGE_EXPRS
    new = options[choice % len(options)]
    if isinstance(new, str):
        repl = _expr(new)
        _replace(tree, node, repl)
    else:
        node.value = new
    return f"constant {new!r} at line {_line(node)}"


def _replace(tree, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for fld, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, fld, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return


def m_name(tree, pos, choice):
    names = _nodes(tree, ast.Name)
    node = _pick(names, pos)
    if node is None:
        return None
    in_scope = sorted({n.id for n in names} | {a.arg for fn in _functions(tree) for a in fn.args.args})
    typos = [node.id + "x", node.id[:-1] or "q", node.id.upper()]
    options = [n for n in in_scope if n != node.id] + typos + EXTRA_NAMES
    new = options[choice % len(options)]
    old = node.id
    if new in ("True", "None"):
        _replace(tree, node, ast.Constant(True if new == "True" else None))
    else:
        node.id = new
    return f"name {old}->{new} at line {_line(node)}"


def m_delete(tree, pos, choice):
    bodies = _stmt_lists(tree)
    stmts = [(b, i) for b in bodies for i in range(len(b))]
    # prefer `del` statements and `~routine` half the time: they are what checks rely on
    if choice % 2:
        dels = [(b, i) for b, i in stmts if isinstance(b[i], ast.Delete)
                or (isinstance(b[i], ast.Expr) and isinstance(b[i].value, ast.UnaryOp))]
        stmts = dels or stmts
    hit = _pick(stmts, pos)
    if hit is None:
        return None
    body, i = hit
    line = _line(body[i])
    del body[i]
    if not body:
        body.append(ast.Pass())
    return f"delete statement at line {line}"


def m_duplicate(tree, pos, choice):
    stmts = [(b, i) for b in _stmt_lists(tree) for i in range(len(b))]
    hit = _pick(stmts, pos)
    if hit is None:
        return None
    body, i = hit
    body.insert(i, copy.deepcopy(body[i]))
    return f"duplicate statement at line {_line(body[i])}"


def m_swap_stmts(tree, pos, choice):
    pairs = [(b, i) for b in _stmt_lists(tree) for i in range(len(b) - 1)]
    hit = _pick(pairs, pos)
    if hit is None:
        return None
    body, i = hit
    j = i + 1 + (choice % (len(body) - i - 1))
    body[i], body[j] = body[j], body[i]
    return f"swap statements at lines {_line(body[j])} and {_line(body[i])}"


def m_index(tree, pos, choice):
    node = _pick(_nodes(tree, ast.Subscript), pos)
    if node is None:
        return None
    new = INDEX_EXPRS[choice % len(INDEX_EXPRS)]
    node.slice = _expr(f"x[{new}]").slice
    return f"index [{new}] at line {_line(node)}"


def m_call_arity(tree, pos, choice):
    node = _pick(_nodes(tree, ast.Call), pos)
    if node is None:
        return None
    if choice % 3 == 0 and node.args:
        node.args.pop()
        return f"call with one argument fewer at line {_line(node)}"
    if choice % 3 == 1 and node.args:
        node.args.append(copy.deepcopy(node.args[0]))
        return f"call with its first argument repeated at line {_line(node)}"
    node.args.append(_expr("x"))
    return f"call with an extra argument x at line {_line(node)}"


def m_invert_call(tree, pos, choice):
    """`f(...)` <-> `~f(...)`, `~routine` -> `routine`, `with inverted:` -> `with routine:`."""
    cands = [n for n in _nodes(tree, (ast.UnaryOp, ast.Call, ast.withitem))
             if (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Invert))
             or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id.startswith("fz_"))
             or isinstance(n, ast.withitem)]
    node = _pick(cands, pos)
    if node is None:
        return None
    if isinstance(node, ast.UnaryOp):
        node.op = ast.USub() if choice % 2 else ast.Not()
        return "~ replaced"
    if isinstance(node, ast.withitem):
        ctx = node.context_expr
        if isinstance(ctx, ast.Name):
            ctx.id = "inverted" if ctx.id == "routine" else "routine"
        return "with item swapped"
    node.func = ast.UnaryOp(ast.Invert(), node.func)
    return "call inverted"


def m_wrap_expr(tree, pos, choice):
    """Replace an expression on a right-hand side by an odd one."""
    rhs = [n.value for n in _nodes(tree, ast.AugAssign)] + \
          [n.value for n in _nodes(tree, ast.Assign) if len(n.targets) == 1]
    node = _pick(rhs, pos)
    if node is None:
        return None
    text = ast.unparse(node)
    options = [f"({text}) / 0.0", f"({text}) // 0", f"({text}) ** -1", f"math.log(-1.0 + 0.0 * ({text}))",
               f"math.sqrt(-1.0) + ({text})", f"({text}) * 1e308 * 10.0", f"-({text})",
               f"({text}) if True else 0", f"[{text}]", f"({text}).real", f"({text}, 1)",
               f"x.sum() + ({text})", "x[0:2]", f"np.exp(710.0) * ({text})", f"abs({text})",
               f"({text}) % 0", f"int({text})", f"float({text})", f"({text}) ** 0.5",
               f"({text}) ** 64", f"({text}) ** 2.0", f"math.exp({text})"]
    new = options[choice % len(options)]
    _replace(tree, node, _expr(new))
    return f"rhs -> {new}"


#: statements inserted by m_insert: {a} and {b} are names in scope, {f} the function itself,
#: {params} its parameters
INSERT_TEMPLATES = [
    "{a}, {b} = {b}, {a}",
    "{a}[0], {a}[0] = {a}[0], {a}[0]",
    "{a}, {a} = {a}, {a}",
    "{a}, {b} = {a}, {b}",
    "{a} += {b}[0]",
    "del {a}",
    "{a} = {b}",
    "q9 = {a}\ndel q9",
    "q9 = {a} + {b}\ndel q9",
    "q9 = {a}.copy()\n{a} += 1.0\ndel q9",
    "q9 = np.zeros({a})\ndel q9",
    "q9 = np.zeros_like({a})\ndel q9",
    "q9 = np.zeros(({a}, 2), dtype=np.int64)\ndel q9",
    "q9 = 0\nq9 ^= {a}\ndel q9",
    "q9 = 0.0\nq9 += {a}\ndel q9",
    "{a} ^= {b}",
    "{a} += {a}",
    "{a}[{b}] += 1",
    "{a} += {b} if {a} else {b}",
    "{a} += 1 if {b} else 2.0",
    "for q9 in range({a}):\n    {b} += q9",
    "for q9 in range({a}, {b}, 0):\n    pass",
    "for q9 in range(10 ** 20):\n    pass",
    "for q9 in range(3):\n    q9 += 1",
    "for {a} in range(3):\n    pass",
    "while ({a} > 0, {b} > 0):\n    {b} += 1",
    "while ({a} < 3, {a} >= 3):\n    {a} += 1",
    "if ({a} > 0, {b}):\n    pass",
    "if {a}:\n    pass\nelse:\n    {b} += 1",
    "with routine:\n    {a} += 1.0",
    "~routine",
    "with routine as {a}:\n    pass\n~{a}",
    "with inverted:\n    del {a}",
    "with inverted:\n    q9 = {a}",
    "print({a}, 'x')",
    "{a} += np.zeros(3)",
    "{a} += len({b})",
    "{a} += {b}.shape[1]",
    "{a} += {b}.shape[{a}]",
    "{a} *= 0",
    "{a} /= {b} - {b}",
    "{a} += 1 // {b}",
    "{a} += 1 % {b}",
    "{a} += math.factorial(3)",
    "{a} += {b}.T",
    "{a} += {b}.real",
    "{a} += (lambda: 1)()",
    "{a} += [q for q in range(3)][0]",
    "{a} += {b} @ {b}",
    "{a} += {b} is None",
    "{a}: float = 0.0",
    "q9: float = 0.0\ndel q9",
    "{a} += f'{{{b}}}'",
    "{a} += -{b} ** 0.5",
    "{a} += {b} ** -2",
    "{a} += 2 ** {b}",
    "{a} += {b} ** {b}",
    "{a} += np.sum({b})",
    "{a} += max({a}, {b})",
    "{a} += min({b}, {b}, {b})",
    "{a} += abs()",
    "{a} += {b} < {a} < {b}",
    "{a} += True + True",
    "{a} += 1j * 0",
    "{a} += {b}[::2][0]",
    "{a}[0, 0] += {b}",
    "{a}[{a}] += 1",
    "{a}[...] += 1.0",
    "{a} += {b}.shape",
    "{a} += not {b}",
    "{a} += {b} and {a}",
    "{a} += ~{b}",
    "{a} += {b} << 2",
    "{a}.inverse({b})",
    "~{a}",
    "~{a}({b})",
    "{a}({b})",
    "(~~{f})({params})",
    "{f}({params})",
    "~{f}({params})",
    "{f}({a})",
    "fz_nothere({a}, {b})",
    "global {a}",
    "del {a}[0]",
    "del {a}, {b}",
    "{a} += {b} if {b} > 0 else {a}",
    "{a} -= {b} * 1e308 * 1e308",
    "{a} *= 1e-320",
    "{a} /= 1e-320",
    "{a} *= -0.0",
    "{a} += -(-9223372036854775807 - 1)",
    "{a} += 9223372036854775807 + 1",
    "{a} += 9223372036854775807 + {b}",
    "{a} -= -9223372036854775807 - 1",
    "{a} *= 2 ** 62",
    "{a} += abs(-9223372036854775807 - 1)",
    "{a} //= 2",
    "{a} **= 2",
    "{a} %= 2",
    "{a} |= 1",
    "{a} += 1\n{a} -= 1",
    "assert {a} == {a}",
    "pass",
    "'doc'",
    "{a}",
    "{a} + 1",
    "return",
    "raise ValueError",
    "try:\n    pass\nexcept Exception:\n    pass",
    "x9 = yield",
    "import math",
    "{a} = {a} + 1",
    "{a} += {b} if {b} else {b}[0]",
    "{a} += 0.1 + 0.2 - 0.3",
    "{a} += np.exp(800.0)",
    "{a} += math.exp(800.0)",
    "{a} += math.log(0.0)",
    "{a} += np.log(0.0)",
    "{a} += math.sqrt(-1.0)",
    "{a} += np.sqrt(-1.0)",
    "{a} += np.arccos(2.0)",
    "{a} += math.acos(2.0)",
    "{a} += 1.0 / 0.0",
    "{a} += 1 / 0",
    "{a} += 0 ** -1",
    "{a} += 0.0 ** -1",
    "{a} += (-8.0) ** (1.0 / 3.0)",
    "{a} += np.hypot(1e308, 1e308)",
    "{a} += atan2(0.0, -0.0)",
    "{a} += conj({b})",
    "{a} += abs({b} + 1j)",
    "{a} += {b} == 1j",
    "{a} += {b} < 1j",
]


def _names_in_scope(tree) -> list[str]:
    names = {n.id for n in _nodes(tree, ast.Name)}
    names |= {a.arg for fn in _functions(tree) for a in fn.args.args}
    return sorted(names - {"np", "math", "range", "len", "routine", "inverted"})


def m_insert(tree, pos, choice):
    """Insert an odd statement (INSERT_TEMPLATES) somewhere in a function body."""
    spots = [(b, i) for b in _stmt_lists(tree) for i in range(len(b) + 1)]
    hit = _pick(spots, pos)
    if hit is None:
        return None
    body, i = hit
    names = _names_in_scope(tree) or ["x"]
    fn = _functions(tree)[-1]
    template = INSERT_TEMPLATES[choice % len(INSERT_TEMPLATES)]
    a = names[(choice // len(INSERT_TEMPLATES)) % len(names)]
    b = names[(choice // (7 * len(INSERT_TEMPLATES)) + 1) % len(names)]
    text = template.format(a=a, b=b, f=fn.name, params=", ".join(x.arg for x in fn.args.args))
    try:
        new = ast.parse(text).body
    except SyntaxError:
        return None
    body[i:i] = new
    return f"insert {text!r}"


DEPTHS = [30, 90, 110, 150, 300]


def m_deepen(tree, pos, choice):
    """Nest deeply: a long chain of operators or unary minuses on a right-hand side, a
    statement inside many loops / ifs / `with inverted:`, or a long `elif` chain."""
    depth = DEPTHS[choice % len(DEPTHS)]
    how = (choice // len(DEPTHS)) % 5
    if how < 2:
        rhs = [n for n in _nodes(tree, ast.AugAssign)]
        node = _pick(rhs, pos)
        if node is None:
            return None
        text = ast.unparse(node.value)
        new = f"{text}" + " + 0" * depth if how == 0 else "-" * (2 * (depth // 2)) + f"({text})"
        node.value = _expr(new)
        return f"rhs nested {depth} deep ({'chain' if how == 0 else 'unary'})"
    stmts = [(b, i) for b in _stmt_lists(tree) for i in range(len(b))]
    hit = _pick(stmts, pos)
    if hit is None:
        return None
    body, i = hit
    inner = body[i]
    if how == 4:  # an elif chain around it
        chain = ast.parse("if 1 > 2:\n    pass\n" + "".join(
            f"elif {k} > {k + 1}:\n    pass\n" for k in range(depth)) + "else:\n    pass\n").body[0]
        last = chain
        while last.orelse and isinstance(last.orelse[0], ast.If):
            last = last.orelse[0]
        last.orelse = [inner]
        body[i] = chain
        return f"statement at the end of an elif chain of {depth}"
    header = ["for q{k} in range(1):", "if 1 > 0:", "with inverted:\n    with inverted:"][how - 2]
    wrapped = inner
    for k in range(depth):
        outer = ast.parse(header.format(k=k) + "\n    pass").body[0]
        target = outer
        while target.body and isinstance(target.body[0], ast.With):
            target = target.body[0]
        target.body = [wrapped]
        wrapped = outer
    body[i] = wrapped
    return f"statement nested in {depth} levels of {header!r}"


SOURCE_MUTATIONS = [m_augop, m_binop, m_cmpop, m_constant, m_name, m_delete, m_duplicate,
                    m_swap_stmts, m_index, m_call_arity, m_invert_call, m_wrap_expr,
                    m_insert, m_insert, m_insert, m_deepen]


def mutate_source(source: str, mutations: list[tuple[int, int, int]]) -> tuple[str, list[str]]:
    """Apply ``(kind, position, choice)`` mutations; returns the new source and what was done."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # ast's helpers recurse over deep nesting
    try:
        tree = ast.parse(source)
        done = []
        for kind, pos, choice in mutations:
            what = SOURCE_MUTATIONS[kind % len(SOURCE_MUTATIONS)](tree, pos, choice)
            if what:
                done.append(what)
        ast.fix_missing_locations(tree)
        return ast.unparse(tree) + "\n", done
    finally:
        sys.setrecursionlimit(limit)


# ---------------------------------------------------------------------------------------------
# Argument mutations: applied to a freshly built argument list (so aliasing survives).

EDGE_SCALARS = [0, -1, 0.0, -0.0, 1e-200, 1e308, math.inf, -math.inf, math.nan, 2**62,
                2**63 - 1, 2**63, 2**70, -(2**63), True, False, 1j, np.float64(2.5),
                np.int64(3), np.bool_(True), np.uint64(2**63), np.float32(1.5), np.int32(7),
                np.complex64(1 + 1j), 5e-324]


def _arr_like(a):
    return a if isinstance(a, np.ndarray) else np.array([a, a, a])


def _noncontig(a):
    a = _arr_like(a)
    big = np.zeros((a.shape[0] * 2,) + a.shape[1:], dtype=a.dtype)
    view = big[::2]
    view[...] = a
    return view


def _readonly(a):
    a = _arr_like(a).copy()
    a.flags.writeable = False
    return a


ARG_TRANSFORMS: list[tuple[str, Callable]] = [
    ("to int", lambda a: a.astype(np.int64) if isinstance(a, np.ndarray) else int(a.real)
     if isinstance(a, complex) else int(a) if isinstance(a, float) and math.isfinite(a) else 1),
    ("to float", lambda a: a.astype(float) if isinstance(a, np.ndarray) else float(abs(a))),
    ("to bool", lambda a: a.astype(bool) if isinstance(a, np.ndarray) else bool(a)),
    ("to complex", lambda a: a.astype(complex) if isinstance(a, np.ndarray) else complex(abs(a))),
    ("0-d array", lambda a: np.array(a.flat[0] if isinstance(a, np.ndarray) else a)),
    ("float32 array", lambda a: _arr_like(a).astype(np.float32)),
    ("int32 array", lambda a: _arr_like(a).astype(np.int32)),
    ("read-only array", _readonly),
    ("empty array", lambda a: _arr_like(a)[:0].copy()),
    ("non-contiguous view", _noncontig),
    ("fortran 2-D", lambda a: np.asfortranarray(np.tile(_arr_like(a), (2, 1)).T)),
    ("2-D array", lambda a: np.tile(_arr_like(a), (2, 1))),
    ("scalar from array", lambda a: float(a.flat[0]) if isinstance(a, np.ndarray) and a.size else 1.0),
    ("list", lambda a: list(_arr_like(a))),
    ("None", lambda a: None),
    ("string", lambda a: "1.0"),
    ("longer array", lambda a: np.concatenate([_arr_like(a)] * 3)),
    ("shorter array", lambda a: _arr_like(a)[:1].copy()),
    ("object array", lambda a: _arr_like(a).astype(object)),
    ("nan-filled", lambda a: np.full_like(a, np.nan) if isinstance(a, np.ndarray)
     and a.dtype.kind in "fc" else a),
    ("huge-filled", lambda a: np.full_like(a, 1e308) if isinstance(a, np.ndarray)
     and a.dtype.kind in "fc" else a),
    ("int64 extremes", lambda a: np.full_like(a, 2**63 - 1) if isinstance(a, np.ndarray)
     and a.dtype.kind == "i" else a),
]


def mutate_args(args: list, mutations: list[tuple[int, int, int]]) -> tuple[list, list[str]]:
    """``(kind, position, choice)``: kind 0 an edge scalar, 1 a transform, 2 aliasing,
    3 arity."""
    args = list(args)
    done = []
    for kind, pos, choice in mutations:
        kind %= 4
        if not args:
            break
        p = pos % len(args)
        if kind == 0:
            v = EDGE_SCALARS[choice % len(EDGE_SCALARS)]
            args[p] = v
            done.append(f"arg {p} = {v!r}")
        elif kind == 1:
            name, fn = ARG_TRANSFORMS[choice % len(ARG_TRANSFORMS)]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    args[p] = fn(args[p])
            except Exception:  # not applicable to this value
                continue
            done.append(f"arg {p}: {name}")
        elif kind == 2:
            arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
            if not arrays:
                continue
            src = arrays[choice % len(arrays)]
            if choice % 3 == 0:
                args[p] = args[src]  # the very same object
                done.append(f"arg {p} is arg {src}")
            elif choice % 3 == 1 and args[src].size > 1:
                args[p] = args[src][1:]  # an overlapping view
                done.append(f"arg {p} is a view of arg {src}")
            else:
                first = args[src].flat[0] if args[src].size else 0
                args[p] = first.item() if isinstance(first, np.generic) else first
                done.append(f"arg {p} = first element of arg {src}")
        else:
            if choice % 2:
                args.pop()
                done.append("one argument fewer")
            else:
                args.append(args[p])
                done.append("one argument more")
    return args, done


# ---------------------------------------------------------------------------------------------
# The oracle


class Bug(AssertionError):
    """A violation of the oracle: ``kind`` names the class of hole, ``details`` the case."""

    def __init__(self, kind: str, details: str = ""):
        super().__init__(kind)
        self.kind = kind
        self.details = details


class Timeout(BaseException):
    """The Python backend ran too long (a mutated `while` may never end)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def handler(signum, frame):
        raise Timeout()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


REVBENCH_ERRORS = (ReversibilityError, ReversibilitySyntaxError)
#: user-level errors Python itself would raise for the same mistake; accepted when their
#: message or notes name the reversible function.  (A user's own ``assert`` that fails
#: raises ``AssertionError`` by the contract, language.md §2 -- the mutations insert
#: ``assert a == a`` and then change its operator; an internal assertion names no ``fz_``
#: function, so it is still a bug.)
USER_ERRORS = (TypeError, ValueError, ArithmeticError, IndexError, MemoryError, AssertionError)


def kind_of(v) -> tuple:
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape)
    if isinstance(v, (bool, np.bool_)):
        return ("bool",)
    if isinstance(v, (int, np.integer)):
        return ("int",)
    if isinstance(v, (float, np.floating)):
        return ("float",)
    if isinstance(v, (complex, np.complexfloating)):
        return ("complex",)
    return (type(v).__name__,)


def snapshot(values) -> list:
    return [v.copy() if isinstance(v, np.ndarray) else v for v in values]


def _flat(v) -> list:
    if isinstance(v, np.ndarray):
        return [complex(x) for x in v.ravel()] if v.dtype.kind in "biufc" else []
    if isinstance(v, (bool, int, float, complex, np.number, np.bool_)):
        return [complex(v)]
    return []


def _magnitude(x: complex) -> float:
    """max(|re|, |im|): unlike abs(), it cannot overflow for finite parts."""
    return max(abs(x.real), abs(x.imag))


def scale_of(*groups) -> float:
    s = 1.0
    for g in groups:
        for v in g:
            for x in _flat(v):
                if math.isfinite(_magnitude(x)):
                    s = max(s, _magnitude(x))
    return s


def dynamic_range(*groups) -> float:
    """max / min of the finite non-zero magnitudes of the float and complex values."""
    mags = [_magnitude(x) for g in groups for v in g
            if isinstance(v, (float, complex, np.floating, np.complexfloating))
            or (isinstance(v, np.ndarray) and v.dtype.kind in "fc")
            for x in _flat(v) if x != 0 and math.isfinite(_magnitude(x))]
    return max(mags) / min(mags) if mags else 1.0


#: a float round trip is only compared when the float values in and out span at most this
#: many orders: (~f)(f(x)) is exact up to the rounding of the operations, and a 1e-19 added
#: to 7.5 and then scaled by 2**62 is legitimately lost (absorption), which no tolerance on
#: the inputs and outputs alone can tell from a wrong inverse
MAX_DYNAMIC_RANGE = 1e6


def _same_value(a, b, tol: float, exact: bool) -> bool:
    if exact:
        return a == b
    a, b = complex(a), complex(b)
    for x, y in ((a.real, b.real), (a.imag, b.imag)):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif math.isinf(x) or math.isinf(y):
            if x != y:
                return False
        elif abs(x - y) > tol:
            return False
    return True


def same(a, b, tol: float) -> bool:
    """``a`` equals ``b``: ints and bools exactly, floats within ``tol`` (nan == nan).

    ``tol`` infinite (a float absorbed, see :func:`roundtrip_tolerance`): kinds only, for
    ints and bools too -- a comparison of the absorbed float (``flag ^= x > 0.0``) or an
    int computed from it legitimately comes back different."""
    ka, kb = kind_of(a), kind_of(b)
    if ka != kb:
        return False
    if isinstance(a, np.ndarray):
        exact = a.dtype.kind in "biu"
        if exact and tol == math.inf:
            return True
        return all(_same_value(x, y, tol, exact) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    if ka[0] in ("bool", "int"):
        return a == b or tol == math.inf
    if ka[0] in ("float", "complex"):
        return _same_value(a, b, tol, False)
    return a is b or a == b


def build(source: str, name: str, backend: str, filename: str, check: bool = True):
    """Decorate (define) the program; ``None`` when it is refused as it should be."""
    try:
        fns = revbench.define(source, {"np": np, "math": math}, backend=backend, filename=filename,
                              check=check)
    except ReversibilitySyntaxError as exc:
        nlines = len(source.splitlines())
        if exc.lineno is None or not 1 <= exc.lineno <= nlines:
            raise Bug("ReversibilitySyntaxError without a line of the source",
                      f"lineno={exc.lineno}: {exc}") from None
        return None, exc
    except Exception as exc:
        raise Bug(f"decoration raised {type(exc).__name__}", _fmt_exc(exc)) from None
    if name not in fns:
        return None, None  # the mutation renamed it away
    return fns[name], None


def _fmt_exc(exc: BaseException) -> str:
    notes = "".join(f"\n  note: {n}" for n in getattr(exc, "__notes__", []))
    return f"{type(exc).__name__}: {exc}{notes}"


def _names_function(exc: BaseException, fname: str) -> bool:
    text = str(exc) + " ".join(getattr(exc, "__notes__", []))
    return "reversible function" in text or f"{fname}(" in text or f"{fname} " in text \
        or f"{fname}," in text or f"`{fname}`" in text


@dataclass
class Outcome:
    kind: str  # "ok", "revbench", "user", "static", "timeout"
    error: BaseException | None = None
    outputs: list = field(default_factory=list)
    inverse: str = ""  # "ok", "revbench", "user", "timeout" or ""

    def describe(self) -> str:
        if self.kind == "ok":
            return "returned"
        return f"{self.kind} {_fmt_exc(self.error) if self.error else ''}"


def _call(fn, args, where: str, timeout: float | None):
    """Run ``fn(*args)``: ``("ok", outputs)`` or ``(kind, exception)``; a bug raises."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if timeout is None:
                out = fn(*args)
            else:
                with time_limit(timeout):
                    out = fn(*args)
    except Timeout:
        return "timeout", None
    except REVBENCH_ERRORS as exc:
        return "revbench", exc
    except USER_ERRORS as exc:
        if isinstance(exc, SyntaxError):
            raise Bug(f"{where} raised a plain SyntaxError", _fmt_exc(exc)) from None
        if not _names_function(exc, fn.name):
            raise Bug(f"{where} raised {type(exc).__name__} that does not name the function",
                      _fmt_exc(exc)) from None
        return "user", exc
    except Exception as exc:
        raise Bug(f"{where} raised internal {type(exc).__name__}", _fmt_exc(exc)) from None
    return "ok", out


def _magnitudes(v, out: list) -> None:
    stack = [v]
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, np.ndarray) and v.dtype.kind in "fc" and v.size:
            a = np.abs(v[np.isfinite(v)])
            if a.size:
                out.append(float(a.max()))
        elif isinstance(v, (float, complex, np.floating, np.complexfloating)) \
                and math.isfinite(abs(v)):
            out.append(abs(v))


def roundtrip_tolerance(fn, make_args, original, outputs, back) -> float:
    """The float tolerance of a round trip ``fn`` then ``~fn``: relative to the largest
    magnitude any float takes, in and out and, when that is not enough, in between.

    ``(~f)(f(x))`` is exact up to the rounding of the operations: a value added to one
    1e20 times larger is lost (absorption) and cannot come back.  Where the inputs and
    outputs alone do not explain a difference, the run is traced (``revbench.trace``,
    which records every intermediate value) and the largest of those is the scale."""
    tol = 1e-9 + 1e-7 * scale_of(original, outputs)
    if all(same(o, b, tol) for b, o in zip(original, back)):
        return tol
    if dynamic_range(original, outputs) > MAX_DYNAMIC_RANGE:
        return math.inf  # floats: only their kind, nan-ness and infinities are compared
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            tr = revbench.trace(fn, *make_args())
            mags: list[float] = []
            for i in range(len(tr)):
                _magnitudes(tr[i]._raw, mags)
    except Exception:
        return tol
    small = [m for m in mags if m > 0.0]
    if small and max(small) / min(small) > MAX_DYNAMIC_RANGE:
        # an intermediate far smaller than the rest (``r *= 1e-320`` then ``r += 5.0``) is
        # absorbed as legitimately as an input would be: only kinds, nans and infinities
        return math.inf
    return max(tol, 1e-9 + 1e-7 * max(mags, default=0.0))


def run_one(prog_source: str, name: str, make_args: Callable[[], list], backend: str,
            filename: str, timeout: float | None) -> Outcome:
    """Oracle points 1-5 on one backend."""
    fn, static = build(prog_source, name, backend, filename)
    if fn is None:
        return Outcome("static", static)
    args = make_args()
    before = snapshot(args)
    kind, got = _call(fn, args, f"call ({backend})", timeout)
    if kind == "timeout":
        return Outcome("timeout")
    if kind != "ok":
        for i, (a, b) in enumerate(zip(args, before)):
            if isinstance(a, np.ndarray) and a.dtype != object and not same(a, b, 0.0):
                raise Bug(f"a failed call ({backend}) changed the caller's array",
                          f"arg {i}: before {b!r}, after {a!r}; error {_fmt_exc(got)}")
        return Outcome(kind, got)
    out = list(got)
    if not isinstance(got, tuple) or len(out) != len(args):
        raise Bug(f"call ({backend}) did not return a tuple of all arguments", repr(got))
    for i, (a, b, o) in enumerate(zip(args, before, out)):
        if isinstance(a, np.ndarray):
            if o is not a:
                raise Bug(f"call ({backend}) returned a different object for an array", f"arg {i}")
        if kind_of(o) != kind_of(b):
            raise Bug(f"call ({backend}) changed an argument's kind",
                      f"arg {i}: {kind_of(b)} -> {kind_of(o)} ({o!r})")
        if kind_of(o)[0] == "int" and not -(2**63) <= o < 2**63:
            raise Bug(f"call ({backend}) returned an int outside int64", f"arg {i}: {o}")
        if isinstance(o, np.ndarray) and o.dtype.kind == "c" and b.dtype.kind != "c":
            raise Bug(f"call ({backend}) made a complex array", f"arg {i}")
    outputs = snapshot(out)
    # the inverse, on copies of the outputs
    ikind, back = _call(fn.inverse, snapshot(outputs), f"inverse ({backend})", timeout)
    result = Outcome("ok", None, outputs, ikind)
    if ikind == "ok":
        original = make_args()
        tol = roundtrip_tolerance(fn, make_args, original, outputs, back)
        for i, (b, o) in enumerate(zip(original, back)):
            if not same(o, b, tol):
                raise Bug(f"(~f)(*f(args)) does not give args back ({backend})",
                          f"arg {i}: went in as {b!r}, forward gave {outputs[i]!r}, "
                          f"inverse gave {o!r}")
    # check=False only removes checks: where the checked call returned, the unchecked one
    # must give the same values (Python backend only: Numba would compile it all again)
    if backend == "python":
        unchecked, _ = build(prog_source, name, backend, filename, check=False)
        if unchecked is not None:
            ukind, uout = _call(unchecked, make_args(), "unchecked call (python)", timeout)
            if ukind == "timeout":
                return result
            if ukind != "ok":
                raise Bug("check=False raises where the checked call returned",
                          _fmt_exc(uout))
            tol = 1e-12 * scale_of(outputs, uout)
            for i, (a, b) in enumerate(zip(outputs, uout)):
                if not same(a, b, tol):
                    raise Bug("check=False gives other results than the checked call",
                              f"arg {i}: checked {a!r}, unchecked {b!r}")
    return result


def run_inverse_first(prog_source: str, name: str, make_args: Callable[[], list], backend: str,
                      filename: str, timeout: float | None) -> Outcome:
    """The other roundtrip: ``f(*(~f)(args)) == args`` where ``~f`` returns."""
    fn, static = build(prog_source, name, backend, filename)
    if fn is None:
        return Outcome("static", static)
    args = make_args()
    before = snapshot(args)
    kind, got = _call(fn.inverse, args, f"inverse call ({backend})", timeout)
    if kind == "timeout":
        return Outcome("timeout")
    if kind != "ok":
        for i, (a, b) in enumerate(zip(args, before)):
            if isinstance(a, np.ndarray) and a.dtype != object and not same(a, b, 0.0):
                raise Bug(f"a failed call ({backend}) changed the caller's array",
                          f"arg {i}: before {b!r}, after {a!r}; error {_fmt_exc(got)}")
        return Outcome(kind, got)
    outputs = snapshot(got)
    for i, (b, o) in enumerate(zip(before, outputs)):
        if kind_of(o) != kind_of(b):
            raise Bug(f"inverse call ({backend}) changed an argument's kind",
                      f"arg {i}: {kind_of(b)} -> {kind_of(o)} ({o!r})")
    fkind, back = _call(fn, snapshot(outputs), f"call after the inverse ({backend})", timeout)
    if fkind == "ok":
        original = make_args()
        tol = roundtrip_tolerance(fn.inverse, make_args, original, outputs, back)
        for i, (b, o) in enumerate(zip(original, back)):
            if not same(o, b, tol):
                raise Bug(f"f(*(~f)(args)) does not give args back ({backend})",
                          f"arg {i}: went in as {b!r}, inverse gave {outputs[i]!r}, "
                          f"forward gave {o!r}")
    return Outcome("ok", None, outputs, fkind)


def run_case(source: str, name: str, make_args: Callable[[], list], backends: tuple[str, ...],
             filename: str, timeout: float = 0.5) -> dict[str, Outcome]:
    """Run the oracle on each backend (python first, with a time limit; a program that
    times out there is not run on numba, whose compiled code cannot be interrupted), then
    check that the backends agree.  The mutants are a few lines run on scalars and
    three-element arrays, done in milliseconds; the ones that time out loop forever (a
    mutated ``while``), so a longer limit only waits longer for them."""
    results: dict[str, Outcome] = {}
    for backend in sorted(backends, key=lambda b: b != "python"):
        results[backend] = run_one(source, name, make_args, backend, filename,
                                   timeout if backend == "python" else None)
        if results[backend].kind == "timeout":
            return results
        inv = run_inverse_first(source, name, make_args, backend, filename,
                                timeout if backend == "python" else None)
        if inv.kind == "timeout":
            return results
        results[f"{backend}-inverse"] = inv
    for suffix in ("", "-inverse"):
        if f"python{suffix}" not in results or f"numba{suffix}" not in results:
            continue
        py, nb = results[f"python{suffix}"], results[f"numba{suffix}"]
        if (py.kind == "ok") != (nb.kind == "ok"):
            raise Bug(f"the backends disagree{suffix}: one returns, the other raises",
                      f"python: {py.describe()}\nnumba: {nb.describe()}")
        if py.kind == "ok":
            if (py.inverse == "ok") != (nb.inverse == "ok"):
                raise Bug(f"the backends disagree{suffix} on the way back: one returns, the other "
                          "raises",
                          f"python inverse: {py.inverse}, numba inverse: {nb.inverse}")
            tol = 1e-9 * scale_of(py.outputs, nb.outputs)
            for i, (a, b) in enumerate(zip(py.outputs, nb.outputs)):
                if not same(a, b, tol):
                    raise Bug(f"the backends give different outputs{suffix}",
                              f"arg {i}: python {a!r}, numba {b!r}")
    return results

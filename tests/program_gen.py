"""Random programs in revbench's reversible language, for property-based tests.

``programs()`` is a Hypothesis strategy that draws a whole program as source
text: an optional helper ``h`` and a main function ``f``, plus arguments for
``f``.  Every program is valid per the language contract
(``/work/shared/design/language.md`` §1-3, 5), so ``(~f)(*f(*args))`` must
give ``args`` back: exactly for integer programs, within a tolerance for
float programs.

How validity is guaranteed
--------------------------
* An *environment* (``Env``) tracks the variables in scope: their kind
  (scalar, array, read-only index variable), dtype, whether they are
  read-only here, and whether their value is *exact* (reproduced bit for bit
  by the inverse: ints, loop variables, counters, and float arguments that
  are never written).  Conditions only read exact values, so forward and
  inverse always take the same branch.
* A statement never reads its own target; ``x[i] += x[j]`` is only drawn
  when ``i != j`` is guaranteed (same index variable with different
  offsets, or different constants).  Indices are kept in bounds by the value
  range of each index variable.
* Constructs that must restore state (``t = e ... del t``, routines, while
  counters, conditions) make everything they depend on read-only in the
  statements they enclose.
* An integer ``y *= c`` only appears where it runs forwards first (its
  inverse ``y /= c`` needs ``y`` divisible by ``c``): not under an odd number
  of ``with inverted:``, and not in the helper (``~h(...)`` runs it backwards).
* Float functions are used in Lipschitz, bounded forms (``sin``, ``tanh``,
  ``exp(c * sin(e))``, ``log1p(abs(e))``, ``sqrt(1 + e ** 2)``,
  ``atan2(e, c > 0)``, ...) so round-off in the inverse is not amplified.
* Values are kept bounded (no int64 overflow, no float blow-up) by a static
  *bound interpretation* run after generation: it walks the program (loops
  as many times as they iterate, both branches of an ``if``) tracking an
  upper bound on ``|value|`` of each variable, and when a statement would
  exceed the limits it is tamed in place: its right-hand side is clamped
  (``max(-C, min(C, e))``), leaves are clamped, or a ``*= c`` becomes
  ``*= -1``.  Taming only ever lowers bounds, so the single pass is sound.

Arguments: 1-3 scalars, 0-2 arrays of length n, sometimes a 2-D array (n, m);
float programs may also get a read-only float (usable in conditions) and an
int scalar.

Shrinking: every choice is a small integer/boolean draw whose simplest value
(0 / False) picks the simplest construct; a block is one statement followed by
"another one?" draws (as ``st.lists`` does), so the shrinker deletes statements
cleanly; the nesting depth is an explicit parameter.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

import numpy as np
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------
# Switches that steer the generator away from constructs exposing bugs in revbench itself.
# Each guarded a core bug this generator found; all three are fixed (commit 0c2eb77).  If one
# regresses, set its switch to False (with a `# TODO core bug:` note) so the rest still runs.

# Was a core bug: every swap `a, b = b, a` was refused ("the only tuple assignment is a swap of
#   two targets"): Parser._swap compared ast.dump() of the targets (ctx=Store()) with that of the
#   values (ctx=Load()), which never match.
ENABLE_SWAPS = True
# Was a core bug: a call inside `with routine:` (undone by `~routine`) or inside `with inverted:`
#   crashed code generation with KeyError in codegen.s_Call (`self.t.calls[id(s)]`: the inverted
#   call statement is a new object the type table does not know).
ENABLE_CALLS_IN_UNDONE_BLOCKS = True
# Was a core bug: `with inverted:` or a nested `with routine:` ... `~routine` anywhere inside a
#   routine's body (also inside a for/if/while there) was refused with "this routine is never
#   undone": check.uncompute replays invert_body(routine body) through Checker.block, and the
#   inverted `with inverted:` came back as an ir.Block, taken for a new open routine.
ENABLE_BLOCKS_IN_ROUTINE_BODY = True

# ---------------------------------------------------------------------------------------------
# Limits of the bound interpretation.

LIMITS = {
    #        target bound, intermediate bound, rhs clamp, leaf clamp
    "int": dict(limit=1e9, hard=1e15, clamp=1000, leaf=1000),
    "float": dict(limit=1e3, hard=1e6, clamp=2.0, leaf=10.0),
}
INT_INPUT = 30      # |int arguments| <= INT_INPUT
FLOAT_INPUT = 2.0   # |float arguments| <= FLOAT_INPUT
INT_CONSTS = st.integers(-5, 5)
# No float is tiny (|v| < 1e-12 becomes 0): scaling a number near the subnormal range
# loses digits, and a checked `*=` / `/=` then rightly refuses to run; and a tiny value
# added to a constant (`a += 0.25`) is absorbed, so the reverse sweep recovers it as 0.0 --
# equal to within rounding, as float `+=` promises, but on the other side of a kink such as
# `min(a, 0.0)`, whose derivative then differs (hypothesis found 1.4e-45).
def _not_tiny(v: float) -> float:
    return v if abs(v) >= 1e-12 else 0.0


FLOAT_CONSTS = st.one_of(st.sampled_from([0.5, 1.0, 2.0, -0.5, 1.5, 0.25, -1.25, 3.0]),
                         st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False).map(_not_tiny))
INT_FACTORS = [2, -1, 3, -2, -3]
FLOAT_FACTORS = [0.5, 2.0, -1.0, 0.75, 1.25, 1.5, -0.5, -2.0]


# =============================================================================================
# Expressions

PREC_ADD, PREC_MUL, PREC_NEG, PREC_POW, PREC_ATOM = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class Index:
    """An index: ``var + off`` (``var`` a loop variable or counter) or the constant ``off``."""

    var: str | None
    off: int

    def render(self) -> str:
        if self.var is None:
            return str(self.off)
        if self.off == 0:
            return self.var
        return f"{self.var} + {self.off}" if self.off > 0 else f"{self.var} - {-self.off}"

    def names(self) -> set[str]:
        return set() if self.var is None else {self.var}


def distinct(a: Index, b: Index) -> bool:
    """True when the two indices can never be equal."""
    return a.var == b.var and a.off != b.off


def distinct_at(a: tuple, b: tuple) -> bool:
    """True when two elements of one array (index tuples) can never be the same."""
    return any(distinct(i, j) for i, j in zip(a, b))


def render_index(idx: tuple) -> str:
    return ", ".join(i.render() for i in idx)


def index_names(idx: tuple) -> set[str]:
    return set().union(*(i.names() for i in idx))


class Expr:
    dtype: str
    prec: int = PREC_ATOM

    def render(self) -> str:
        raise NotImplementedError

    def names(self) -> set[str]:
        return set()

    def bound(self, B: dict) -> tuple[float, float]:
        """(bound on |value|, bound on |every intermediate|)."""
        raise NotImplementedError

    def wrap(self, prec: int) -> str:
        s = self.render()
        return f"({s})" if self.prec < prec else s


@dataclass
class Const(Expr):
    value: int | float
    dtype: str

    @property
    def prec(self):
        return PREC_NEG if math.copysign(1, self.value) < 0 else PREC_ATOM

    def render(self):
        return repr(self.value)

    def bound(self, B):
        return abs(self.value), abs(self.value)


@dataclass
class Name(Expr):
    name: str
    dtype: str

    def render(self):
        return self.name

    def names(self):
        return {self.name}

    def bound(self, B):
        return B[self.name], B[self.name]


@dataclass
class Elem(Expr):
    arr: str
    idx: tuple  # of Index, one per dimension
    dtype: str

    def render(self):
        return f"{self.arr}[{render_index(self.idx)}]"

    def names(self):
        return {self.arr} | index_names(self.idx)

    def bound(self, B):
        return B[self.arr], B[self.arr]


@dataclass
class Len(Expr):
    arr: str
    n: int
    how: int = 0  # len(x), x.shape[0], x.shape[1]
    dtype: str = "int"

    def render(self):
        return ["len({})", "{}.shape[0]", "{}.shape[1]"][self.how].format(self.arr)

    def names(self):
        return {self.arr}

    def bound(self, B):
        return self.n, self.n


@dataclass
class Bin(Expr):
    op: str
    left: Expr
    right: Expr
    dtype: str

    @property
    def prec(self):
        return {"+": PREC_ADD, "-": PREC_ADD, "*": PREC_MUL, "/": PREC_MUL, "//": PREC_MUL,
                "**": PREC_POW}[self.op]

    def render(self):
        p = self.prec
        if self.op == "**":  # right-associative; the base needs more than PREC_POW
            return f"{self.left.wrap(p + 1)} ** {self.right.wrap(p)}"
        return f"{self.left.wrap(p)} {self.op} {self.right.wrap(p + 1)}"

    def names(self):
        return self.left.names() | self.right.names()

    def bound(self, B):
        (a, ma), (b, mb) = self.left.bound(B), self.right.bound(B)
        if self.op in "+-":
            v = a + b
        elif self.op == "*":
            v = a * b
        elif self.op == "/":
            v = a / abs(self.right.value)
        elif self.op == "//":
            v = a + 1
        else:
            v = a ** self.right.value
        return v, max(v, ma, mb)


@dataclass
class Neg(Expr):
    operand: Expr
    dtype: str
    prec: int = PREC_NEG

    def render(self):
        return "-" + self.operand.wrap(PREC_NEG)

    def names(self):
        return self.operand.names()

    def bound(self, B):
        return self.operand.bound(B)


# bound on |f(args)| from the bounds of the arguments
FUNC_BOUNDS = {
    "sin": lambda b: 1.0, "cos": lambda b: 1.0, "tanh": lambda b: 1.0, "atan": lambda b: 1.6,
    "atan2": lambda a, b: 3.2, "exp": lambda b: math.exp(min(b, 700)), "log1p": lambda b: math.log1p(b),
    "sqrt": lambda b: math.sqrt(b), "abs": lambda b: b, "hypot": lambda a, b: a + b,
    "min": max, "max": max,
}
SPELLINGS = {  # name -> (spellings for scalars, spellings usable on whole arrays)
    "sin": (["sin", "np.sin", "math.sin"], ["sin", "np.sin"]),
    "cos": (["cos", "np.cos", "math.cos"], ["cos", "np.cos"]),
    "tanh": (["tanh", "np.tanh", "math.tanh"], ["tanh", "np.tanh"]),
    "atan": (["atan", "np.arctan", "math.atan"], ["np.arctan"]),
    "atan2": (["atan2", "np.arctan2", "math.atan2"], ["np.arctan2"]),
    "exp": (["exp", "np.exp", "math.exp"], ["exp", "np.exp"]),
    "log1p": (["log1p", "np.log1p", "math.log1p"], ["np.log1p"]),
    "sqrt": (["sqrt", "np.sqrt", "math.sqrt"], ["np.sqrt"]),
    "abs": (["abs", "np.abs"], ["abs", "np.abs"]),
    "hypot": (["hypot", "np.hypot", "math.hypot"], ["np.hypot"]),
    "min": (["min", "np.minimum"], ["np.minimum"]),
    "max": (["max", "np.maximum"], ["np.maximum"]),
}


@dataclass
class Func(Expr):
    fname: str
    spelling: str
    args: list
    dtype: str

    def render(self):
        return f"{self.spelling}({', '.join(a.render() for a in self.args)})"

    def names(self):
        return set().union(*(a.names() for a in self.args))

    def bound(self, B):
        bs = [a.bound(B) for a in self.args]
        v = FUNC_BOUNDS[self.fname](*(b for b, _ in bs))
        return v, max([v] + [m for _, m in bs])


@dataclass
class Clamp(Expr):
    """``max(-C, min(C, e))``: added by the bound interpretation to keep values bounded."""

    operand: Expr
    c: int | float
    arrays: bool  # np.maximum / np.minimum (whole-array statements)
    dtype: str

    def render(self):
        mx, mn = ("np.maximum", "np.minimum") if self.arrays else ("max", "min")
        return f"{mx}({-self.c!r}, {mn}({self.c!r}, {self.operand.render()}))"

    def names(self):
        return self.operand.names()

    def bound(self, B):
        b, m = self.operand.bound(B)
        return min(b, self.c), m


@dataclass
class IfExp(Expr):
    body: Expr
    cond: Cond
    orelse: Expr
    dtype: str
    prec: int = 0

    def render(self):
        return f"{self.body.wrap(1)} if {self.cond.render()} else {self.orelse.wrap(1)}"

    def names(self):
        return self.body.names() | self.cond.names() | self.orelse.names()

    def bound(self, B):
        (a, ma), (b, mb) = self.body.bound(B), self.orelse.bound(B)
        return max(a, b), max(ma, mb, self.cond.bound(B))


def clamp_leaves(e: Expr, c, arrays: bool) -> Expr:
    """Clamp every variable read of ``e`` (used when an intermediate could overflow)."""
    if isinstance(e, (Name, Elem)):
        return Clamp(e, c, arrays, e.dtype)
    if isinstance(e, Bin):
        return replace(e, left=clamp_leaves(e.left, c, arrays), right=clamp_leaves(e.right, c, arrays))
    if isinstance(e, Neg):
        return replace(e, operand=clamp_leaves(e.operand, c, arrays))
    if isinstance(e, Func):
        return replace(e, args=[clamp_leaves(a, c, arrays) for a in e.args])
    if isinstance(e, Clamp):
        return replace(e, operand=clamp_leaves(e.operand, c, arrays))
    if isinstance(e, IfExp):
        return replace(e, body=clamp_leaves(e.body, c, arrays), orelse=clamp_leaves(e.orelse, c, arrays))
    return e


# ---------------------------------------------------------------------------------------------
# Conditions (they only ever read exact values)

class Cond:
    def render(self) -> str:
        raise NotImplementedError

    def names(self) -> set[str]:
        raise NotImplementedError

    def bound(self, B) -> float:
        raise NotImplementedError


@dataclass
class Cmp(Cond):
    left: Expr
    op: str
    right: Expr

    def render(self):
        return f"{self.left.wrap(PREC_ADD)} {self.op} {self.right.wrap(PREC_ADD)}"

    def names(self):
        return self.left.names() | self.right.names()

    def bound(self, B):
        return max(self.left.bound(B)[1], self.right.bound(B)[1])


@dataclass
class BoolOp(Cond):
    op: str  # "and" | "or"
    values: list

    def render(self):
        return f" {self.op} ".join(f"({v.render()})" if isinstance(v, BoolOp) else v.render()
                                   for v in self.values)

    def names(self):
        return set().union(*(v.names() for v in self.values))

    def bound(self, B):
        return max(v.bound(B) for v in self.values)


@dataclass
class Not(Cond):
    operand: Cond

    def render(self):
        inner = self.operand.render()
        return f"not ({inner})" if isinstance(self.operand, (BoolOp, Cmp)) else f"not {inner}"

    def names(self):
        return self.operand.names()

    def bound(self, B):
        return self.operand.bound(B)


FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
NEGATE = {"<": ">=", ">": "<=", "<=": ">", ">=": "<", "==": "!=", "!=": "=="}


def equivalent(c: Cond, how: int) -> Cond:
    """A different spelling of the same condition (an if's postcondition)."""
    if isinstance(c, Cmp):
        if how == 0:
            return Cmp(c.right, FLIP[c.op], c.left)
        if how == 1:
            return Not(Cmp(c.left, NEGATE[c.op], c.right))
        if (c.op in ("<", ">") and isinstance(c.right, Const) and c.right.dtype == "int"
                and c.left.dtype == "int"):
            # int: a < k  <=>  a <= k - 1 ;  a > k  <=>  a >= k + 1
            d = -1 if c.op == "<" else 1
            return Cmp(c.left, c.op + "=", Const(c.right.value + d, "int"))
        return Cmp(c.right, FLIP[c.op], c.left)
    if isinstance(c, BoolOp):  # De Morgan
        other = "or" if c.op == "and" else "and"
        return Not(BoolOp(other, [Not(v) for v in c.values]))
    if isinstance(c, Not):
        return c.operand if isinstance(c.operand, Not) else Not(equivalent(c.operand, how))
    raise TypeError(c)


# =============================================================================================
# Targets and call arguments

@dataclass
class TScalar:
    name: str
    dtype: str

    def render(self):
        return self.name

    @property
    def base(self):
        return self.name

    def names(self):
        return {self.name}


@dataclass
class TElem:
    arr: str
    idx: tuple  # of Index
    dtype: str

    def render(self):
        return f"{self.arr}[{render_index(self.idx)}]"

    @property
    def base(self):
        return self.arr

    def names(self):
        return {self.arr} | index_names(self.idx)


@dataclass
class TArray:
    name: str
    dtype: str
    shape: tuple = ()

    def render(self):
        return self.name

    @property
    def base(self):
        return self.name

    def names(self):
        return {self.name}


# =============================================================================================
# Statements

INVERSE_OP = {"+=": "-=", "-=": "+=", "^=": "^=", "*=": "/=", "/=": "*="}


class Interp:
    """Bound interpretation state: the limits and the helper functions."""

    def __init__(self, mode: str, funcs: dict):
        self.mode = mode
        self.lim = LIMITS[mode]
        self.funcs = funcs

    def tame_expr(self, e: Expr, B, dtype: str, arrays: bool) -> Expr:
        """Clamp the leaves of ``e`` if an intermediate could get too large."""
        lim = LIMITS[dtype]
        if e.bound(B)[1] > lim["hard"]:
            e = clamp_leaves(e, lim["leaf"], arrays)
            if e.bound(B)[1] > lim["hard"]:
                e = Const(1 if dtype == "int" else 0.5, dtype)
        return e


class Stmt:
    def lines(self, ind: str) -> list[str]:
        raise NotImplementedError

    def reads(self) -> set[str]:
        raise NotImplementedError

    def writes(self) -> set[str]:
        raise NotImplementedError

    def interp(self, B: dict, ip: Interp, inv: bool) -> None:
        raise NotImplementedError


def block_lines(stmts, ind):
    out = []
    for s in stmts:
        out += s.lines(ind)
    return out or [ind + "pass"]


def block_reads(stmts):
    return set().union(*(s.reads() for s in stmts)) if stmts else set()


def block_writes(stmts):
    return set().union(*(s.writes() for s in stmts)) if stmts else set()


def block_interp(stmts, B, ip, inv):
    for s in (reversed(stmts) if inv else stmts):
        s.interp(B, ip, inv)


@dataclass
class Update(Stmt):
    target: TScalar | TElem | TArray
    op: str
    expr: Expr

    def lines(self, ind):
        return [f"{ind}{self.target.render()} {self.op} {self.expr.render()}"]

    def inverse(self) -> Update:
        return Update(self.target, INVERSE_OP[self.op], self.expr)

    def reads(self):
        return self.target.names() | self.expr.names()

    def writes(self):
        return {self.target.base}

    def interp(self, B, ip, inv):
        dt = self.target.dtype
        lim = LIMITS[dt]
        arrays = isinstance(self.target, TArray)
        base = self.target.base
        bt = B[base]
        if self.op in ("*=", "/="):
            c = abs(self.expr.value)
            new = bt * max(c, 1 / c)
            if new > lim["limit"]:
                self.expr = Const(-1 if dt == "int" else -1.0, dt)
                new = bt
        else:
            self.expr = ip.tame_expr(self.expr, B, dt, arrays)
            be = self.expr.bound(B)[0]
            new = bt + be if self.op != "^=" else 2 * max(bt, be) + 1
            if new > lim["limit"] and be > lim["clamp"]:
                self.expr = Clamp(self.expr, lim["clamp"], arrays, dt)
                be = lim["clamp"]
                new = bt + be if self.op != "^=" else 2 * max(bt, be) + 1
            if new > lim["limit"] and self.op == "^=":
                self.op = "+="  # xor bounds double each time; keep the growth additive
                new = bt + be
        B[base] = new if not isinstance(self.target, TElem) else max(bt, new)


@dataclass
class Swap(Stmt):
    a: TScalar | TElem | TArray
    b: TScalar | TElem | TArray

    def lines(self, ind):
        a, b = self.a.render(), self.b.render()
        return [f"{ind}{a}, {b} = {b}, {a}"]

    def reads(self):
        return self.a.names() | self.b.names()

    def writes(self):
        return {self.a.base, self.b.base}

    def interp(self, B, ip, inv):
        m = max(B[self.a.base], B[self.b.base])
        B[self.a.base] = B[self.b.base] = m


@dataclass
class Alloc(Stmt):
    """``t = init`` with ``t`` left live (inside a routine; ``~routine`` deallocates it)."""

    name: str
    init: Expr
    dtype: str

    def lines(self, ind):
        return [f"{ind}{self.name} = {self.init.render()}"]

    def reads(self):
        return self.init.names()

    def writes(self):
        return {self.name}

    def interp(self, B, ip, inv):
        lim = LIMITS[self.dtype]
        self.init = ip.tame_expr(self.init, B, self.dtype, False)
        if self.init.bound(B)[0] > lim["limit"]:
            self.init = Clamp(self.init, lim["clamp"], False, self.dtype)
        B[self.name] = self.init.bound(B)[0]


@dataclass
class ArrayInit:
    """``np.zeros(n)``, ``np.zeros(len(x))``, ``np.zeros_like(x)`` or ``x.copy()``."""

    text: str
    src: str | None  # the array read (x.copy() / zeros_like / len)
    copy: bool
    dtype: str

    def render(self):
        return self.text

    def names(self):
        return {self.src} if self.src else set()

    def bound(self, B):
        v = B[self.src] if self.copy else 0.0
        return v, v


@dataclass
class AllocBlock(Stmt):
    """``t = init; pre...; middle...; inverse(pre) reversed; del t``."""

    name: str
    init: Expr | ArrayInit
    dtype: str
    pre: list  # Update / ForEach statements on t (their inverses are rendered after middle)
    middle: list

    def lines(self, ind):
        out = [f"{ind}{self.name} = {self.init.render()}"]
        for s in self.pre:
            out += s.lines(ind)
        out += [ln for s in self.middle for ln in s.lines(ind)]
        for s in reversed(self.pre):
            out += s.inverse().lines(ind)
        return [*out, f"{ind}del {self.name}"]

    def reads(self):
        return self.init.names() | block_reads(self.pre) | block_reads(self.middle)

    def writes(self):
        return block_writes(self.middle) - {self.name}

    def interp(self, B, ip, inv):
        if isinstance(self.init, ArrayInit):
            B[self.name] = self.init.bound(B)[0]
        else:
            lim = LIMITS[self.dtype]
            self.init = ip.tame_expr(self.init, B, self.dtype, False)
            if self.init.bound(B)[0] > lim["limit"]:
                self.init = Clamp(self.init, lim["clamp"], False, self.dtype)
            B[self.name] = self.init.bound(B)[0]
        block_interp(self.pre, B, ip, False)
        block_interp(self.middle, B, ip, inv)
        del B[self.name]  # restored by the inverse of pre, then deallocated


@dataclass
class ForEach(Stmt):
    """``for i in range(len(w)): w[i] op e``: iterations commute, so the inverse loop
    walks the same range."""

    var: str
    rng: str
    n: int
    update: Update

    def lines(self, ind):
        return [f"{ind}for {self.var} in {self.rng}:", *self.update.lines(ind + "    ")]

    def inverse(self):
        return ForEach(self.var, self.rng, self.n, self.update.inverse())

    def reads(self):
        return self.update.reads() - {self.var}

    def writes(self):
        return self.update.writes()

    def interp(self, B, ip, inv):
        B[self.var] = self.n
        for _ in range(self.n):
            self.update.interp(B, ip, inv)


@dataclass
class For(Stmt):
    var: str
    rng: str          # rendered range(...)
    iters: int
    absmax: int       # max |loop variable|
    body: list
    rng_names: frozenset = frozenset()

    def lines(self, ind):
        return [f"{ind}for {self.var} in {self.rng}:", *block_lines(self.body, ind + "    ")]

    def reads(self):
        return block_reads(self.body) | set(self.rng_names)

    def writes(self):
        return block_writes(self.body)

    def interp(self, B, ip, inv):
        B[self.var] = self.absmax
        for _ in range(self.iters):
            block_interp(self.body, B, ip, inv)


@dataclass
class If(Stmt):
    branches: list  # [(pre: Cond, post: Cond | None (default) | "same", body)]
    orelse: list | None

    def lines(self, ind):
        out = []
        for k, (pre, post, body) in enumerate(self.branches):
            kw = "if" if k == 0 else "elif"
            if post is None:
                head = pre.render()
            else:
                head = f"({pre.render()}, {(pre if post == 'same' else post).render()})"
            out += [f"{ind}{kw} {head}:", *block_lines(body, ind + "    ")]
        if self.orelse is not None:
            out += [f"{ind}else:", *block_lines(self.orelse, ind + "    ")]
        return out

    def reads(self):
        out = set()
        for pre, post, body in self.branches:
            out |= pre.names() | block_reads(body)
            if isinstance(post, Cond):
                out |= post.names()
        return out | block_reads(self.orelse or [])

    def writes(self):
        return block_writes([s for _, _, b in self.branches for s in b] + (self.orelse or []))

    def interp(self, B, ip, inv):
        results = []
        for _, _, body in self.branches:
            b = dict(B)
            block_interp(body, b, ip, inv)
            results.append(b)
        b = dict(B)
        block_interp(self.orelse or [], b, ip, inv)
        results.append(b)
        for k in B:
            B[k] = max(r.get(k, 0.0) for r in results)


@dataclass
class While(Stmt):
    """A counter loop; ``k`` is allocated before, brought back by a second loop, and
    deallocated (``own=True``), or allocated and left live inside a routine."""

    k: str
    up: bool
    step: int
    m: Expr            # the bound: a constant or len(x)
    mval: int
    body: list
    own: bool = True

    def _iters(self):
        return -(-self.mval // self.step)

    def lines(self, ind):
        k, s, m = self.k, self.step, self.m.render()
        i2 = ind + "    "
        if self.up:
            out = [f"{ind}{k} = 0", f"{ind}while ({k} < {m}, {k} > 0):", f"{i2}{k} += {s}"]
            back = [f"{ind}while ({k} > 0, {k} < {m}):", f"{i2}{k} -= {s}"]
        else:
            out = [f"{ind}{k} = {m}", f"{ind}while ({k} > 0, {k} < {m}):", f"{i2}{k} -= {s}"]
            back = [f"{ind}while ({k} < {m}, {k} > 0):", f"{i2}{k} += {s}"]
        out += [ln for st_ in self.body for ln in st_.lines(i2)]
        if self.own:
            out += [*back, f"{ind}del {k}"]
        return out

    def reads(self):
        return block_reads(self.body) | self.m.names() | {self.k}

    def writes(self):
        return block_writes(self.body) | {self.k}

    def interp(self, B, ip, inv):
        B[self.k] = self.step * self._iters() + self.mval
        for _ in range(self._iters()):
            block_interp(self.body, B, ip, inv)
        if self.own:
            del B[self.k]


@dataclass
class Routine(Stmt):
    label: str | None
    body: list
    middle: list

    def lines(self, ind):
        head = "with routine:" if self.label is None else f"with routine as {self.label}:"
        out = [ind + head, *block_lines(self.body, ind + "    ")]
        out += [ln for s in self.middle for ln in s.lines(ind)]
        return [*out, f"{ind}~{self.label or 'routine'}"]

    def reads(self):
        return block_reads(self.body) | block_reads(self.middle)

    def writes(self):
        return block_writes(self.middle)  # what the body writes, `~routine` restores

    def interp(self, B, ip, inv):
        before = dict(B)
        block_interp(self.body, B, ip, False)  # the inverse of compute/use/uncompute recomputes
        block_interp(self.middle, B, ip, inv)
        for name in list(B):
            if name not in before:
                del B[name]
        for name in block_writes(self.body):
            if name in before:
                B[name] = before[name]


@dataclass
class Inverted(Stmt):
    body: list

    def lines(self, ind):
        return [f"{ind}with inverted:", *block_lines(self.body, ind + "    ")]

    def reads(self):
        return block_reads(self.body)

    def writes(self):
        return block_writes(self.body)

    def interp(self, B, ip, inv):
        block_interp(self.body, B, ip, not inv)


@dataclass
class Assert(Stmt):
    text: str
    names_read: frozenset

    def lines(self, ind):
        return [f"{ind}assert {self.text}"]

    def reads(self):
        return set(self.names_read)

    def writes(self):
        return set()

    def interp(self, B, ip, inv):
        pass


@dataclass
class Call(Stmt):
    fname: str
    args: list  # TScalar / TElem / TArray
    inverted: bool
    spelling: int = 0

    def lines(self, ind):
        a = ", ".join(t.render() for t in self.args)
        if not self.inverted:
            return [f"{ind}{self.fname}({a})"]
        form = ["~{f}({a})", "(~{f})({a})", "{f}.inverse({a})"][self.spelling]
        return [ind + form.format(f=self.fname, a=a)]

    def reads(self):
        return set().union(*(t.names() for t in self.args))

    def writes(self):
        return {t.base for t in self.args}

    def interp(self, B, ip, inv):
        fd = ip.funcs[self.fname]
        fb = {p.name: B[t.base] for p, t in zip(fd.params, self.args)}
        block_interp(fd.body, fb, ip, self.inverted != inv)
        for p, t in zip(fd.params, self.args):
            B[t.base] = max(B[t.base], fb[p.name]) if isinstance(t, TElem) else fb[p.name]


# =============================================================================================
# Environments

@dataclass(frozen=True)
class V:
    name: str
    kind: str          # "scalar" | "array" | "index" (read-only int loop variable / counter)
    dtype: str         # "int" | "float"
    ro: bool = False
    exact: bool = True
    rng: tuple | None = None  # value range of an index variable
    shape: tuple = ()         # of an array

    @property
    def writable(self):
        return not self.ro and self.kind != "index"


@dataclass
class Env:
    vars: dict = field(default_factory=dict)
    n: int = 4                 # every array has this length
    loops: int = 0             # nesting of for loops (names the loop variable)
    inv: bool = False          # inside an odd number of `with inverted:` (runs backwards)
    routine_body: bool = False  # inside the body of a `with routine:`

    def add(self, v: V) -> Env:
        e = copy.copy(self)
        e.vars = {**self.vars, v.name: v}
        return e

    def with_ro(self, names) -> Env:
        e = copy.copy(self)
        e.vars = {k: (replace(v, ro=True) if k in names else v) for k, v in self.vars.items()}
        return e

    def of(self, kind=None, dtype=None, writable=None, exact=None):
        return [v for v in self.vars.values()
                if (kind is None or v.kind == kind) and (dtype is None or v.dtype == dtype)
                and (writable is None or v.writable == writable)
                and (exact is None or v.exact == exact)]


@dataclass
class FuncDef:
    name: str
    params: list  # [V]
    body: list

    def render(self) -> str:
        head = f"def {self.name}({', '.join(p.name for p in self.params)}):"
        return "\n".join([head, *block_lines(self.body, "    ")])


# =============================================================================================
# The generator

class Gen:
    def __init__(self, draw, mode: str, n: int, helper: FuncDef | None = None, int_mul: bool = True,
                 m: int = 3):
        self.draw = draw
        self.m = m  # second dimension of 2-D arrays
        # int `y *= c` is only valid where it runs forwards first (its inverse `y /= c` needs
        # y divisible by c): not in `with inverted:`, and not in a helper that `~h` may run
        self.int_mul = int_mul
        self.mode = mode
        self.n = n
        self.helper = helper
        self.counter = 0

    # -- draws -----------------------------------------------------------------------------------
    def pick(self, seq):
        return seq[self.draw(st.integers(0, len(seq) - 1))]

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, dtype: str) -> Const:
        return Const(self.draw(INT_CONSTS if dtype == "int" else FLOAT_CONSTS), dtype)

    # -- indices ----------------------------------------------------------------------------------
    def indices(self, env: Env, size: int) -> list[Index]:
        out = [Index(None, c) for c in range(size)]
        for v in env.of(kind="index"):
            if v.rng is None:
                continue
            lo, hi = v.rng
            out += [Index(v.name, d) for d in range(-2, 3) if lo + d >= 0 and hi + d < size]
        return out

    def index_tuples(self, env: Env, shape: tuple, avoid: tuple | None = None) -> list[tuple]:
        """In-bounds index tuples for an array of ``shape`` (distinct from ``avoid``)."""
        out = [()]
        for size in shape:
            out = [t + (i,) for t in out for i in self.indices(env, size)]
        return out if avoid is None else [t for t in out if distinct_at(t, avoid)]

    # -- expressions ------------------------------------------------------------------------------
    def leaves(self, env: Env, dtype: str, tgt=None, arrays=False, exact=False) -> list:
        """Functions drawing a leaf expression of ``dtype`` that ``tgt`` may read."""
        out = [lambda: self.const(dtype)]
        for v in env.vars.values():
            if v.kind == "array":
                out.append(lambda v=v: Len(v.name, self.n, int(self.flag())))
                if len(v.shape) == 2:
                    out.append(lambda v=v: Len(v.name, self.m, 2))
            if exact and not v.exact:
                continue
            if dtype == "int" and v.dtype != "int":
                continue
            if v.kind in ("scalar", "index"):
                if isinstance(tgt, TScalar) and tgt.name == v.name:
                    continue
                out.append(lambda v=v: Name(v.name, v.dtype))
            elif v.kind == "array":
                if tgt is not None and tgt.base == v.name and not isinstance(tgt, TElem):
                    continue
                if arrays and v.shape == tgt.shape:
                    out.append(lambda v=v: Name(v.name, v.dtype))
                same = isinstance(tgt, TElem) and tgt.arr == v.name
                idx = self.index_tuples(env, v.shape, tgt.idx if same else None)
                if idx:
                    out.append(lambda v=v, idx=idx: Elem(v.name, self.pick(idx), v.dtype))
        return out

    def expr(self, env: Env, dtype: str, depth: int = 2, tgt=None, arrays=False, exact=False) -> Expr:
        leaves = self.leaves(env, dtype, tgt, arrays, exact)
        kinds = ["leaf"]
        if depth > 0:
            kinds += ["bin", "bin", "leaf", "neg", "func", "bin", "func", "ifexp"]
        kind = self.pick(kinds)
        sub = lambda: self.expr(env, dtype, depth - 1, tgt, arrays, exact)

        def fsub():  # a float-typed sub-expression where mixing int and float would vary the type
            e = sub()
            return e if e.dtype == dtype else Bin("*", Const(0.5, "float"), e, "float")
        if kind == "leaf":
            e = self.pick(leaves)()
            if dtype == "float" and e.dtype == "int" and isinstance(e, Const):
                e = Const(float(e.value), "float")
            return e
        if kind == "bin":
            ops = ["+", "-", "*"] + (["//", "**"] if dtype == "int" else ["/", "**"])
            op = self.pick(ops)
            if op in ("//", "/"):
                c = self.draw(st.sampled_from([2, 3, 5]) if op == "//" else st.sampled_from(FLOAT_FACTORS))
                return Bin(op, sub(), Const(c, dtype), dtype)
            if op == "**":
                base = sub()
                return Bin(op, base, Const(self.draw(st.sampled_from([2, 3])), "int"), base.dtype)
            left, right = sub(), sub()
            return Bin(op, left, right, _join(left, right))
        if kind == "neg":
            e = sub()
            return Neg(e, e.dtype)
        if kind == "ifexp":
            cond = self.cond(env, tgt)
            if cond is None:
                return sub()
            a, b = fsub(), fsub()
            return IfExp(a, cond, b, dtype)
        # functions
        if dtype == "int":
            fname = self.pick(["abs", "min", "max"])
        else:
            fname = self.pick(["sin", "cos", "tanh", "exp", "atan", "abs", "min", "max", "log1p",
                               "sqrt", "hypot", "atan2"])
        spelling = self.pick(SPELLINGS[fname][1 if arrays else 0])
        if fname == "exp":  # exp of a bounded argument: exp(c * sin(e))
            inner = self.pick(["sin", "cos", "tanh"])
            isp = self.pick(SPELLINGS[inner][1 if arrays else 0])
            c = Const(self.draw(st.sampled_from([1.0, 0.5, -1.0])), "float")
            arg = Bin("*", c, Func(inner, isp, [sub()], "float"), "float")
            return Func(fname, spelling, [arg], "float")
        if fname == "log1p":  # log1p(|e|)
            a = self.pick(SPELLINGS["abs"][1 if arrays else 0])
            return Func(fname, spelling, [Func("abs", a, [sub()], "float")], "float")
        if fname == "sqrt":  # sqrt(1 + e**2): Lipschitz, so round-off is not amplified
            e = Bin("+", Const(1.0, "float"), Bin("**", sub(), Const(2, "int"), "float"), "float")
            return Func(fname, spelling, [e], "float")
        if fname == "atan2":  # atan2(e, c) with c > 0: continuous
            c = Const(self.draw(st.sampled_from([1.0, 2.0, 0.5])), "float")
            return Func(fname, spelling, [sub(), c], "float")
        if fname in ("min", "max", "hypot"):
            a, b = fsub(), fsub()
            return Func(fname, spelling, [a, b], dtype)
        a = sub()
        return Func(fname, spelling, [a], a.dtype if fname == "abs" else "float")

    def float_expr(self, env, **kw) -> Expr:
        """A float-typed expression (an int-valued one is scaled by 0.5)."""
        e = self.expr(env, "float", **kw)
        return e if e.dtype == "float" else Bin("*", Const(0.5, "float"), e, "float")

    def cond(self, env: Env, tgt=None, depth: int = 1) -> Cond | None:
        exact = [v for v in env.vars.values() if v.exact and v.kind != "array"]
        if not exact:
            return None
        kind = self.pick(["cmp", "cmp", "not", "and", "or"] if depth > 0 else ["cmp"])
        if kind == "cmp":
            v = self.pick(exact)
            if isinstance(tgt, TScalar) and tgt.name == v.name:
                return None
            sub_env = Env({k: w for k, w in env.vars.items() if w.exact}, env.n)
            left = Name(v.name, v.dtype)
            if self.flag():
                left = self.expr(sub_env.add(v), v.dtype, 1, tgt=tgt, exact=True)
                if not left.names():
                    left = Name(v.name, v.dtype)
            op = self.pick(["<", ">", "<=", ">=", "==", "!="] if v.dtype == "int" else ["<", ">"])
            return Cmp(left, op, self.const(v.dtype))
        if kind == "not":
            c = self.cond(env, tgt, depth - 1)
            return None if c is None else Not(c)
        a, b = self.cond(env, tgt, depth - 1), self.cond(env, tgt, depth - 1)
        if a is None or b is None:
            return a or b
        return BoolOp(kind, [a, b])

    # -- targets ----------------------------------------------------------------------------------
    def targets(self, env: Env, whole_arrays=True) -> list:
        out = []
        for v in env.of(writable=True):
            if v.kind == "scalar":
                out.append(lambda v=v: TScalar(v.name, v.dtype))
            elif v.kind == "array":
                idx = self.index_tuples(env, v.shape)
                out.append(lambda v=v, idx=idx: TElem(v.name, self.pick(idx), v.dtype))
                if whole_arrays:
                    out.append(lambda v=v: TArray(v.name, v.dtype, v.shape))
        return out

    # -- statements -------------------------------------------------------------------------------
    def block(self, env: Env, depth: int, max_len: int = 4, calls=True) -> list:
        # one statement, then "another one?" flags (as st.lists draws): the shrinker deletes
        # a statement together with its flag
        out = self.stmt(env, depth, calls)
        for _ in range(max_len - 1):
            if self.draw(st.integers(0, 3)) == 0:  # go on 3 times in 4; shrinks to stopping
                break
            out += self.stmt(env, depth, calls)
        return out

    def stmt(self, env: Env, depth: int, calls=True) -> list:
        kinds = ["update", "mul", "update", "assert"]
        if any(v.rng is not None for v in env.of(kind="index")):
            kinds += ["carried", "carried"]  # inside a loop: make the iteration order matter
        if depth > 0:
            kinds += ["alloc", "for", "if", "while", "array_ancilla"]
            if ENABLE_BLOCKS_IN_ROUTINE_BODY or not env.routine_body:
                kinds += ["routine", "inverted"]
            if self.helper is not None and calls:
                kinds.append("call")
        if ENABLE_SWAPS:
            kinds.append("swap")
        kind = self.pick(kinds)
        return getattr(self, "s_" + kind)(env, depth, calls)

    def s_update(self, env, depth, calls):
        targets = self.targets(env)
        if not targets:
            return self.s_alloc(env, 0, calls)
        tgt = self.pick(targets)()
        ops = ["+=", "-="] + (["^="] if tgt.dtype == "int" else [])
        op = self.pick(ops)
        e = self.expr(env, tgt.dtype, 2, tgt=tgt, arrays=isinstance(tgt, TArray))
        return [Update(tgt, op, e)]

    def s_mul(self, env, depth, calls):
        targets = self.targets(env)
        if not targets:
            return self.s_alloc(env, 0, calls)
        tgt = self.pick(targets)()
        if tgt.dtype == "int":
            if env.inv or not self.int_mul:
                return [Update(tgt, "-=", Const(self.draw(st.sampled_from(INT_FACTORS)), "int"))]
            return [Update(tgt, "*=", Const(self.draw(st.sampled_from(INT_FACTORS)), "int"))]
        op = self.pick(["*=", "/="])
        return [Update(tgt, op, Const(self.draw(st.sampled_from(FLOAT_FACTORS)), "float"))]

    def s_carried(self, env, depth, calls):
        """A loop-carried dependence: ``s op= e`` then an update reading ``s``, e.g.
        ``s += x[i]; y += s * c`` or ``s *= 2; s += i`` (running the iterations of the
        loop in another order gives another result)."""
        scalars = env.of(kind="scalar", writable=True)
        if not scalars:
            return self.s_update(env, depth, calls)
        v = self.pick(scalars)
        tgt = TScalar(v.name, v.dtype)
        index = self.pick([w for w in env.of(kind="index") if w.rng is not None])
        # s op= (something that depends on the iteration)
        arrays = [a for a in env.of(kind="array") if len(a.shape) == 1
                  and (v.dtype == "float" or a.dtype == "int")]
        lo, hi = index.rng
        if arrays and 0 <= lo and hi < self.n and self.flag():
            step = Elem(self.pick(arrays).name, (Index(index.name, 0),), self.pick(arrays).dtype)
        else:
            step = Name(index.name, "int")
        if v.dtype == "float" and step.dtype == "int":
            step = Bin("*", Const(0.5, "float"), step, "float")
        out = []
        if self.flag() and (v.dtype == "float" or (self.int_mul and not env.inv)):
            out.append(Update(tgt, "*=", Const(self.draw(st.sampled_from(
                INT_FACTORS if v.dtype == "int" else FLOAT_FACTORS)), v.dtype)))
        out.append(Update(tgt, self.pick(["+=", "-="] + (["^="] if v.dtype == "int" else [])), step))
        # then another target reads s
        others = [t for t in self.targets(env, whole_arrays=False)]
        for _ in range(3):
            if not others:
                break
            t2 = self.pick(others)()
            if t2.base == v.name or (t2.dtype == "int" and v.dtype != "int"):
                continue
            e = Bin(self.pick(["*", "+"]), Name(v.name, v.dtype),
                    self.expr(env, t2.dtype, 1, tgt=t2), _join(Name(v.name, v.dtype), Const(1, t2.dtype)))
            if t2.dtype == "int" and e.dtype != "int":
                continue
            ops = ["+=", "-="] + (["^="] if t2.dtype == "int" else [])
            out.append(Update(t2, self.pick(ops), e))
            break
        return out

    def s_swap(self, env, depth, calls):
        cands = [(a, b) for a in self.targets(env) for b in self.targets(env)]
        for _ in range(3):
            if not cands:
                break
            a, b = self.pick(cands)
            a, b = a(), b()
            if isinstance(a, TArray) != isinstance(b, TArray):
                continue
            if isinstance(a, TArray) and a.shape != b.shape:
                continue
            if a.dtype != b.dtype:
                continue
            if a.base == b.base and not (isinstance(a, TElem) and isinstance(b, TElem)
                                         and distinct_at(a.idx, b.idx)):
                continue
            return [Swap(a, b)]
        return self.s_update(env, depth, calls)

    def s_alloc(self, env, depth, calls):
        """``t = e; [t op= e2 ...]; middle; [undo]; del t``."""
        dtype = self.pick([self.mode, "int"]) if self.mode == "float" else "int"
        name = self.fresh("t")
        init = self.expr(env, dtype, 1) if dtype == "int" else self.float_expr(env, depth=1)
        inner = env.add(V(name, "scalar", dtype))
        pre = []
        if depth > 0:
            for _ in range(self.draw(st.integers(0, 2))):
                tgt = TScalar(name, dtype)
                op = self.pick(["+=", "-="] + (["^="] if dtype == "int" else []))
                pre.append(Update(tgt, op, self.expr(inner, dtype, 2, tgt=tgt)))
        deps = init.names() | block_reads(pre)
        mid_env = env.with_ro(deps).add(V(name, "scalar", dtype, ro=True, exact=dtype == "int"))
        middle = self.block(mid_env, depth - 1, 3, calls) if depth > 0 else []
        return [AllocBlock(name, init, dtype, pre, middle)]

    def s_array_ancilla(self, env, depth, calls):
        """``w = np.zeros_like(x)`` (or ...); fill it; use it; unfill; ``del w``."""
        arrays = env.of(kind="array", dtype=self.mode)
        name = self.fresh("w")
        n, m = self.n, self.m
        kinds = ["zeros_n", "zeros_nm"] + (["zeros_len", "zeros_like", "copy"] if arrays else [])
        kind = self.pick(kinds)
        srcv = self.pick(arrays) if arrays else None
        src = srcv.name if srcv else None
        if self.mode == "int" and kind in ("zeros_n", "zeros_nm", "zeros_len"):
            kind = "zeros_like" if arrays else "none"  # np.zeros(...) is a float array
        if kind == "none":
            return self.s_update(env, depth, calls)
        shape = {"zeros_n": (n,), "zeros_nm": (n, m)}.get(kind, srcv.shape if srcv else None)
        if kind == "zeros_len":
            shape = (n,)
        text = {"zeros_n": f"np.zeros({n})", "zeros_nm": f"np.zeros(({n}, {m}))",
                "zeros_len": f"np.zeros(len({src}))",
                "zeros_like": f"np.zeros_like({src})", "copy": f"{src}.copy()"}[kind]
        init = ArrayInit(text, src, kind == "copy", self.mode)
        op = self.pick(["+=", "-="])
        if len(shape) == 1:  # fill every element in a loop
            var = f"i{env.loops}" if env.loops else "i"
            loop_env = env.add(V(var, "index", "int", ro=True, rng=(0, n - 1)))
            loop_env.loops = env.loops + 1
            tgt = TElem(name, (Index(var, 0),), self.mode)
            fill = ForEach(var, f"range(len({name}))" if self.flag() else f"range({n})", n,
                           Update(tgt, op, self.expr(loop_env, self.mode, 2, tgt=tgt)))
        else:  # fill one element
            tgt = TElem(name, self.pick(self.index_tuples(env, shape)), self.mode)
            fill = Update(tgt, op, self.expr(env, self.mode, 2, tgt=tgt))
        deps = init.names() | fill.reads()
        w = V(name, "array", self.mode, ro=True, exact=self.mode == "int", shape=shape)
        middle = self.block(env.with_ro(deps).add(w), depth - 1, 3, calls)
        return [AllocBlock(name, init, self.mode, [fill], middle)]

    def s_for(self, env, depth, calls):
        arrays = env.of(kind="array")
        # the loop runs over the first dimension (n) or the second one of a 2-D array (m)
        second = [v.name for v in arrays if len(v.shape) == 2]
        size = self.m if second and self.flag() else self.n
        var = ["i", "j", "l", "m"][env.loops] if env.loops < 4 else self.fresh("ii")
        step = self.pick([1, 2, -1, 3, -2])
        if not self.flag():  # the whole range (half of the time: loops that really iterate)
            start, stop = (0, size) if step > 0 else (size - 1, -1)
        elif step > 0:
            start = self.draw(st.integers(0, size - 1))
            stop = self.draw(st.integers(start + 1, size))
        else:
            start = self.draw(st.integers(0, size - 1))
            stop = self.draw(st.integers(-1, start - 1))
        values = list(range(start, stop, step))
        lens = second if size == self.m and size != self.n else [v.name for v in arrays]
        used: set[str] = set()

        def bound(v: int) -> str:
            if lens and v > 0 and self.flag():
                a = self.pick(lens)
                used.add(a)
                d = size - v
                if size == self.m and size != self.n:
                    base = f"{a}.shape[1]"
                else:
                    base = f"{a}.shape[0]" if self.flag() else f"len({a})"
                return base if d == 0 else (f"{base} - {d}" if d > 0 else f"{base} + {-d}")
            return str(v)

        if step == 1 and start == 0 and self.flag():
            rng = f"range({bound(stop)})"
        elif step == 1 and self.flag():
            rng = f"range({bound(start)}, {bound(stop)})"
        else:
            rng = f"range({bound(start)}, {bound(stop)}, {step})"
        inner = env.add(V(var, "index", "int", ro=True, rng=(min(values), max(values))))
        inner.loops = env.loops + 1
        body = self.block(inner, depth - 1, 3, calls)
        return [For(var, rng, len(values), max(abs(v) for v in values), body, frozenset(used))]

    def s_assert(self, env, depth, calls):
        """An assertion that always holds: a loop variable's range, or an array's length."""
        cands = [v for v in env.of(kind="index") if v.rng is not None]
        arrays = env.of(kind="array")
        if cands and (not arrays or self.flag()):
            v = self.pick(cands)
            lo, hi = v.rng
            text = self.pick([f"{v.name} >= {lo}", f"{v.name} <= {hi}",
                              f"{v.name} >= {lo} and not ({v.name} > {hi})"])
            names = {v.name}
        elif arrays:
            a = self.pick(arrays)
            text = self.pick([f"len({a.name}) == {self.n}", f"{a.name}.shape[0] > {self.n - 1}"])
            names = {a.name}
        else:
            return self.s_update(env, depth, calls)
        msg = f', "{text}"' if self.flag() else ""
        return [Assert(text + msg, frozenset(names))]

    def s_if(self, env, depth, calls):
        conds = []
        for _ in range(self.draw(st.integers(1, 3))):
            c = self.cond(env)
            if c is not None:
                conds.append(c)
        if not conds:
            return self.s_update(env, depth, calls)
        ro = set().union(*(c.names() for c in conds))
        inner = env.with_ro(ro)
        branches = []
        for c in conds:
            how = self.draw(st.integers(0, 4))
            post = None if how == 0 else "same" if how == 1 else equivalent(c, how - 2)
            branches.append((c, post, self.block(inner, depth - 1, 3, calls)))
        orelse = self.block(inner, depth - 1, 3, calls) if self.flag() else None
        return [If(branches, orelse)]

    def s_while(self, env, depth, calls):
        k = self.fresh("k")
        up = not self.flag()
        step = self.pick([1, 2])
        arrays = env.of(kind="array")
        if arrays and self.flag():
            m, mval = Len(self.pick(arrays).name, self.n), self.n
        else:
            mval = self.draw(st.integers(1, 4))
            m = Const(mval, "int")
        iters = -(-mval // step)
        rng = (step, step * iters) if up else (mval - step * iters, mval - step)
        inner = env.add(V(k, "index", "int", ro=True, rng=rng))
        body = self.block(inner, depth - 1, 3, calls)
        return [While(k, up, step, m, mval, body)]

    def s_routine(self, env, depth, calls):
        label = self.fresh("r") if self.flag() else None
        r_env = copy.copy(env)
        r_env.routine_body = True
        # the body runs forwards first even inside `with inverted:` (the inverse of compute;
        # use; uncompute is compute; ~use; uncompute); the middle keeps the parity around it
        r_env.inv = False
        body: list = []
        new: list[V] = []
        body_calls = calls and ENABLE_CALLS_IN_UNDONE_BLOCKS
        for _ in range(self.draw(st.integers(1, 3))):
            kinds = ["alloc", "update", "counter", "flag", "stmt", "stmt"]
            if ENABLE_BLOCKS_IN_ROUTINE_BODY:
                kinds += ["inverted"] + (["routine"] if depth >= 2 else [])
            kind = self.pick(kinds)
            if kind == "alloc":
                dtype = self.pick([self.mode, "int"])
                name = self.fresh("u")
                init = self.expr(r_env, dtype, 1) if dtype == "int" else self.float_expr(r_env, depth=1)
                body.append(Alloc(name, init, dtype))
                v = V(name, "scalar", dtype, exact=dtype == "int")
                r_env = r_env.add(v)
                new.append(v)
            elif kind == "update":
                body += self.s_update(r_env, 0, body_calls)
            elif kind == "counter":
                k = self.fresh("k")
                step = self.pick([1, 2])
                mval = self.draw(st.integers(1, 4))
                final = step * -(-mval // step)
                body.append(While(k, True, step, Const(mval, "int"), mval, [], own=False))
                v = V(k, "index", "int", ro=True, rng=(final, final))
                r_env = r_env.add(v)
                new.append(v)
            elif kind == "flag":
                c = self.cond(r_env)
                if c is None:
                    continue
                name = self.fresh("fl")
                post = Cmp(Name(name, "int"), "==", Const(1, "int"))
                body += [Alloc(name, Const(0, "int"), "int"),
                         If([(c, post, [Update(TScalar(name, "int"), "+=", Const(1, "int"))])], None)]
                v = V(name, "scalar", "int")
                r_env = r_env.add(v)
                new.append(v)
            elif kind == "inverted":  # a `with inverted:` block in the routine's body
                body += self.s_inverted(r_env, max(depth - 1, 1), body_calls)
            elif kind == "routine":  # a routine opened and undone inside the routine's body
                body += self.s_routine(r_env, depth - 1, body_calls)
            else:
                body += self.stmt(r_env, depth - 1, body_calls)
        deps = block_reads(body) | block_writes(body)
        mid_env = r_env.with_ro(deps | {v.name for v in new})
        mid_env.routine_body = env.routine_body
        mid_env.inv = env.inv
        middle = self.block(mid_env, depth - 1, 3, calls)
        return [Routine(label, body, middle)]

    def s_inverted(self, env, depth, calls):
        inner = copy.copy(env)
        inner.inv = not env.inv
        return [Inverted(self.block(inner, depth - 1, 3, calls and ENABLE_CALLS_IN_UNDONE_BLOCKS))]

    def s_call(self, env, depth, calls):
        fd = self.helper
        used: set[str] = set()
        args = []
        for p in fd.params:
            cands = []
            for v in env.of(writable=True, dtype=p.dtype):
                if v.name in used:
                    continue
                if p.kind == "array" and v.kind == "array" and v.shape == p.shape:
                    cands.append(lambda v=v: TArray(v.name, v.dtype, v.shape))
                elif p.kind == "scalar" and v.kind == "scalar":
                    cands.append(lambda v=v: TScalar(v.name, v.dtype))
                elif p.kind == "scalar" and v.kind == "array":
                    idx = self.index_tuples(env, v.shape)
                    cands.append(lambda v=v, idx=idx: TElem(v.name, self.pick(idx), v.dtype))
            if not cands:
                return self.s_update(env, depth, calls)
            t = self.pick(cands)()
            used.add(t.base)
            args.append(t)
        inverted = self.flag()
        return [Call(fd.name, args, inverted, self.draw(st.integers(0, 2)) if inverted else 0)]


def _join(a: Expr, b: Expr) -> str:
    return "float" if "float" in (a.dtype, b.dtype) else "int"


# =============================================================================================
# Whole programs

@dataclass
class GeneratedProgram:
    source: str
    name: str       # the main function
    mode: str       # "int" | "float"
    args: tuple     # arguments for the main function (copy before use: arrays are updated)

    def fresh_args(self) -> tuple:
        return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in self.args)


def _scalar_values(mode: str):
    if mode == "int":
        return st.integers(-INT_INPUT, INT_INPUT)
    return st.floats(-FLOAT_INPUT, FLOAT_INPUT, allow_nan=False, allow_infinity=False).map(_not_tiny)


@st.composite
def programs(draw, mode: str | None = None, depth: int = 2, helper: bool | None = None,
             max_len: int = 5) -> GeneratedProgram:
    """A random valid program (helper ``h`` optional, main ``f``) and arguments for ``f``."""
    if mode is None:
        mode = draw(st.sampled_from(["int", "float"]))
    n = draw(st.integers(2, 5))
    m = draw(st.integers(2, 4))
    params = [V(f"a{k}", "scalar", mode, exact=mode == "int") for k in range(draw(st.integers(1, 3)))]
    params += [V(f"x{k}", "array", mode, exact=mode == "int", shape=(n,))
               for k in range(draw(st.integers(0, 2)))]
    params += [V(f"A{k}", "array", mode, exact=mode == "int", shape=(n, m))
               for k in range(draw(st.integers(0, 2)) // 2)]  # a 2-D array a quarter of the time
    n_int = 0
    if mode == "float":
        # read-only float arguments (exact: usable in conditions) and an int argument
        params += [V(f"c{k}", "scalar", "float", ro=True) for k in range(draw(st.integers(0, 1)))]
        n_int = draw(st.integers(0, 1))
        params += [V(f"n{k}", "scalar", "int") for k in range(n_int)]
    n_arrays = sum(v.kind == "array" and len(v.shape) == 1 for v in params)
    # helper h, with a signature f can call
    hdef = None
    if helper is None:
        helper = draw(st.booleans())
    if helper:
        hp = [V(f"p{k}", "scalar", mode, exact=mode == "int") for k in range(draw(st.integers(1, 2)))]
        hp += [V(f"q{k}", "array", mode, exact=mode == "int", shape=(n,))
               for k in range(draw(st.integers(0, min(1, n_arrays))))]
        if n_int and draw(st.booleans()):
            hp.append(V("m0", "scalar", "int"))
        g = Gen(draw, mode, n, int_mul=False, m=m)
        henv = Env({v.name: v for v in hp}, n)
        hdef = FuncDef("h", hp, g.block(henv, max(depth - 1, 0), 3))
    # main f
    g = Gen(draw, mode, n, hdef, m=m)
    g.counter = 0
    env = Env({v.name: v for v in params}, n)
    body = g.block(env, depth, max_len)
    fdef = FuncDef("f", params, body)
    # tame the values: bound interpretation of f (and of h at each call)
    interp = Interp(mode, {"h": hdef} if hdef else {})
    B = {v.name: float(INT_INPUT if v.dtype == "int" else FLOAT_INPUT) for v in params}
    block_interp(body, B, interp, False)
    source = "\n\n".join(fd.render() for fd in ([hdef] if hdef else []) + [fdef]) + "\n"
    # arguments
    args = []
    for v in params:
        vals = _scalar_values(v.dtype)
        if v.kind == "array":
            dt = np.int64 if v.dtype == "int" else np.float64
            size = math.prod(v.shape)
            values = draw(st.lists(vals, min_size=size, max_size=size))
            args.append(np.array(values, dtype=dt).reshape(v.shape))
        else:
            args.append(draw(vals))
    return GeneratedProgram(source, "f", mode, tuple(args))

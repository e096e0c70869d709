"""The pure-function rule table.

Each entry says, once, how a function is spelled by users (``sin``,
``math.sin``, ``np.sin``), what the generated code calls, which argument types
it takes, what it returns, and its partial derivatives as IR expressions
(used by the adjoint transform).  Users add entries with :func:`register`.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from revbench.lang.ir import BinOp, Compare, Const, Expr, Func, IfExp, UnaryOp
from revbench.rules import special
from revbench.rules.digest import fingerprint

Partial = Callable[..., Expr]


@dataclass(frozen=True)
class FunctionRule:
    """One pure function.

    ``impl`` is the expression prefix used by generated code (``_rb_np.sin``);
    the same code runs under Numba and plain Python.  ``result`` is one of
    ``'float'`` (ints are promoted; complex stays complex), ``'real'``
    (always a real float: ``real`` and ``imag``), ``'promote'``
    (the common type of the arguments, e.g. ``min``), ``'same'``
    (``abs`` of an int is an int).
    """

    name: str
    impl: str
    nargs: int
    spellings: tuple[str, ...]
    result: str = "float"
    complex_ok: bool = True
    partials: tuple[Partial, ...] = ()
    #: for complex arguments of non-holomorphic functions (abs, conj): the
    #: contribution to each argument's adjoint, given the result's adjoint ``seed``
    complex_vjp: tuple[Callable[..., Expr], ...] = ()
    hidden: bool = False  # generated helpers (a user function's partials) users don't spell
    user_function: Callable | None = field(default=None, compare=False)
    user_partials: tuple[Callable, ...] = field(default=(), compare=False)
    fingerprint: str = ""


# -- tiny IR builders for derivative formulas --------------------------------
def _c(v: float) -> Const:
    return Const(v)


def _add(a: Expr, b: Expr) -> Expr:
    return BinOp("+", a, b)


def _sub(a: Expr, b: Expr) -> Expr:
    return BinOp("-", a, b)


def _mul(a: Expr, b: Expr) -> Expr:
    return BinOp("*", a, b)


def _div(a: Expr, b: Expr) -> Expr:
    return BinOp("/", a, b)


def _sq(a: Expr) -> Expr:
    return BinOp("*", a, a)


def _f(name: str, *args: Expr) -> Expr:
    return Func(name, tuple(args))


def _neg(a: Expr) -> Expr:
    return UnaryOp("-", a)


def _pick(a: Expr, b: Expr, op: str) -> Expr:
    """d min(a, b) / da (op '<') or d max(a, b) / da (op '>'): 1, 0, or 1/2 at a tie."""
    return IfExp(Compare((op,), (a, b)), _c(1.0),
                 IfExp(Compare(("==",), (a, b)), _c(0.5), _c(0.0)))


def _nonzero_or_0(d: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """``f(d)`` where ``d != 0``, else 0 (a subgradient at a kink instead of 0/0)."""
    return IfExp(Compare(("!=",), (d, _c(0.0))), f(d), _c(0.0))


_BUILTIN: list[FunctionRule] = [
    FunctionRule("sin", "_rb_np.sin", 1, ("sin",), partials=(lambda x: _f("cos", x),)),
    FunctionRule("cos", "_rb_np.cos", 1, ("cos",), partials=(lambda x: _neg(_f("sin", x)),)),
    FunctionRule("tan", "_rb_np.tan", 1, ("tan",),
                 partials=(lambda x: _add(_c(1.0), _sq(_f("tan", x))),)),
    FunctionRule("exp", "_rb_np.exp", 1, ("exp",), partials=(lambda x: _f("exp", x),)),
    FunctionRule("log", "_rb_np.log", 1, ("log",), partials=(lambda x: _div(_c(1.0), x),)),
    FunctionRule("log2", "_rb_np.log2", 1, ("log2",),
                 partials=(lambda x: _div(_c(1.0), _mul(x, _c(math.log(2.0)))),)),
    FunctionRule("log10", "_rb_np.log10", 1, ("log10",),
                 partials=(lambda x: _div(_c(1.0), _mul(x, _c(math.log(10.0)))),)),
    FunctionRule("log1p", "_rb_np.log1p", 1, ("log1p",), complex_ok=False,
                 partials=(lambda x: _div(_c(1.0), _add(_c(1.0), x)),)),
    FunctionRule("expm1", "_rb_np.expm1", 1, ("expm1",), complex_ok=False,
                 partials=(lambda x: _f("exp", x),)),
    # at 0 sqrt has no derivative (the one-sided limit is +inf): 0 there, like hypot at
    # (0, 0) and NiLang, so a norm sqrt(x*x + y*y) has the gradient 0 at 0, not nan
    FunctionRule("sqrt", "_rb_np.sqrt", 1, ("sqrt",),
                 partials=(lambda x: _nonzero_or_0(x, lambda d: _div(_c(0.5), _f("sqrt", d))),)),
    FunctionRule("tanh", "_rb_np.tanh", 1, ("tanh",),
                 partials=(lambda x: _sub(_c(1.0), _sq(_f("tanh", x))),)),
    FunctionRule("sinh", "_rb_np.sinh", 1, ("sinh",), partials=(lambda x: _f("cosh", x),)),
    FunctionRule("cosh", "_rb_np.cosh", 1, ("cosh",), partials=(lambda x: _f("sinh", x),)),
    # where the slope is infinite (asin and acos at +-1, acosh at 1, atanh at +-1): 0, as
    # for sqrt at 0 (docs/ad.md, section 5), not a division by zero
    FunctionRule("asin", "_rb_np.arcsin", 1, ("asin", "arcsin"), complex_ok=False,
                 partials=(lambda x: _nonzero_or_0(_f("sqrt", _sub(_c(1.0), _sq(x))),
                                                   lambda d: _div(_c(1.0), d)),)),
    FunctionRule("acos", "_rb_np.arccos", 1, ("acos", "arccos"), complex_ok=False,
                 partials=(lambda x: _nonzero_or_0(_f("sqrt", _sub(_c(1.0), _sq(x))),
                                                   lambda d: _div(_c(-1.0), d)),)),
    FunctionRule("atan", "_rb_np.arctan", 1, ("atan", "arctan"), complex_ok=False,
                 partials=(lambda x: _div(_c(1.0), _add(_c(1.0), _sq(x))),)),
    FunctionRule("asinh", "_rb_np.arcsinh", 1, ("asinh", "arcsinh"), complex_ok=False,
                 partials=(lambda x: _div(_c(1.0), _f("sqrt", _add(_sq(x), _c(1.0)))),)),
    FunctionRule("acosh", "_rb_np.arccosh", 1, ("acosh", "arccosh"), complex_ok=False,
                 partials=(lambda x: _nonzero_or_0(_f("sqrt", _sub(_sq(x), _c(1.0))),
                                                   lambda d: _div(_c(1.0), d)),)),
    FunctionRule("atanh", "_rb_np.arctanh", 1, ("atanh", "arctanh"), complex_ok=False,
                 partials=(lambda x: _nonzero_or_0(_sub(_c(1.0), _sq(x)),
                                                   lambda d: _div(_c(1.0), d)),)),
    # at (0, 0) atan2 has no derivative: 0, as hypot there
    FunctionRule("atan2", "_rb_math.atan2", 2, ("atan2", "arctan2"), complex_ok=False,
                 partials=(lambda y, x: _nonzero_or_0(_add(_sq(x), _sq(y)), lambda d: _div(x, d)),
                           lambda y, x: _nonzero_or_0(_add(_sq(x), _sq(y)),
                                                      lambda d: _neg(_div(y, d))))),
    # at (0, 0) hypot has no derivative; 0 is its smallest subgradient (and what
    # central differences give)
    FunctionRule("hypot", "_rb_math.hypot", 2, ("hypot",), complex_ok=False,
                 partials=(lambda x, y: _nonzero_or_0(_f("hypot", x, y), lambda h: _div(x, h)),
                           lambda x, y: _nonzero_or_0(_f("hypot", x, y), lambda h: _div(y, h)))),
    # sign(x): 0 at the kink, as central differences and NumPy's sign give
    FunctionRule("abs", "abs", 1, ("abs", "absolute", "fabs"), result="same",
                 partials=(lambda x: IfExp(Compare((">",), (x, _c(0))), _c(1.0),
                                           IfExp(Compare(("<",), (x, _c(0))), _c(-1.0), _c(0.0))),),
                 # (of a complex z: seed z / |z|, and 0 at z = 0, as for a real one)
                 complex_vjp=(lambda seed, z: _nonzero_or_0(
                     _f("abs", z), lambda h: _mul(seed, _div(z, h))),)),
    # log|Gamma(x)| (math.lgamma, scipy.special.gammaln) and its derivatives, digamma and
    # trigamma (revbench.rules.special: compiled from the same Python by both backends)
    FunctionRule("lgamma", "_rb_math.lgamma", 1, ("lgamma", "gammaln"), complex_ok=False,
                 partials=(lambda x: _f("digamma", x),)),
    FunctionRule("digamma", "_rb_digamma", 1, ("digamma", "psi"), complex_ok=False,
                 partials=(lambda x: _f("trigamma", x),), user_function=special.digamma,
                 fingerprint=fingerprint(special.digamma)),
    FunctionRule("trigamma", "_rb_trigamma", 1, ("trigamma",), complex_ok=False,
                 user_function=special.trigamma, fingerprint=fingerprint(special.trigamma)),
    # sign(x): -1, 0 or 1 (nan for nan); its derivative is 0 wherever it has one (everywhere
    # but 0, where the jump has none: 0 there too, as JAX gives)
    FunctionRule("sign", "_rb_sign", 1, ("sign",), result="same", complex_ok=False,
                 partials=(lambda x: _c(0.0),), user_function=special.sign,
                 fingerprint=fingerprint(special.sign)),
    FunctionRule("conj", "_rb_np.conj", 1, ("conj", "conjugate"), result="keep",
                 partials=(lambda x: _c(1.0),), complex_vjp=(lambda seed, z: _f("conj", seed),)),
    # the parts of a complex number; of a real number, the number and 0.  A real
    # seed flows back into a complex argument as d/dRe + i d/dIm: seed, i seed.
    FunctionRule("real", "_rb_np.real", 1, ("real",), result="real",
                 partials=(lambda x: _c(1.0),), complex_vjp=(lambda seed, z: seed,)),
    FunctionRule("imag", "_rb_np.imag", 1, ("imag",), result="real",
                 partials=(lambda x: _c(0.0),), complex_vjp=(lambda seed, z: _mul(seed, _c(1j)),)),
    # the extremes of two numbers: Python's min/max, and NumPy's, which treat nan as NumPy
    # does (revbench.rules.special); at a tie the gradient is split evenly (central
    # differences agree; so does JAX)
    *(FunctionRule(name, impl, 2, (name,), result="promote", complex_ok=False,
                   partials=(lambda a, b, op=op: _pick(a, b, op), lambda a, b, op=op: _pick(b, a, op)),
                   user_function=fn, fingerprint=fingerprint(fn) if fn is not None else "")
      for name, impl, op, fn in (
          ("min", "min", "<", None), ("max", "max", ">", None),
          ("minimum", "_rb_minimum", "<", special.minimum),
          ("maximum", "_rb_maximum", ">", special.maximum),
          ("fmin", "_rb_fmin", "<", special.fmin), ("fmax", "_rb_fmax", ">", special.fmax))),
]

BUILTIN_FUNCTIONS: dict[str, FunctionRule] = {r.name: r for r in _BUILTIN}

#: what compiled code calls for a function of a complex argument: the C library's function
#: (``special.COMPLEX_C``; Numba's own are other algorithms), by the function's name; the
#: Python backend calls NumPy's, which is the same C function
COMPILED_COMPLEX: dict[str, FunctionRule] = {
    name: FunctionRule(f"c{name}", f"_rb_c{name}", 1, (), hidden=True, user_function=fn,
                       fingerprint=hashlib.sha256(repr((name, fn.c_function)).encode())
                       .hexdigest()[:16])
    for name, fn in special.COMPLEX_FUNCTIONS.items()}

#: what every path calls for a function of a real argument where revbench has its own
#: (``special.tanh``: straight-line code a loop vectorises, the same bits everywhere),
#: by the function's name; a complex argument keeps the function's ``impl``
OWN_REAL: dict[str, FunctionRule] = {
    name: FunctionRule(f"{name}_real", f"_rb_{name}_real", 1, (), hidden=True, user_function=fn,
                       fingerprint=fingerprint(fn))
    for name, fn in (("tanh", special.tanh),)}

#: user spelling (bare name, ``math.x``, ``np.x``, ``numpy.x``) -> canonical name
SPELLINGS: dict[str, str] = {}
for _r in _BUILTIN:
    for _s in _r.spellings:
        SPELLINGS[_s] = _r.name
        SPELLINGS["np." + _s] = _r.name
        SPELLINGS["numpy." + _s] = _r.name
        SPELLINGS["math." + _s] = _r.name
for _builtin_only in ("min", "max", "abs", "minimum", "maximum", "fmin", "fmax"):  # not in math
    SPELLINGS.pop("math." + _builtin_only, None)
#: SciPy's spellings of the special functions
SPECIAL_SPELLINGS = {"gammaln": "lgamma", "digamma": "digamma", "psi": "digamma"}
for _s, _canon in SPECIAL_SPELLINGS.items():
    SPELLINGS["scipy.special." + _s] = _canon

#: functions added by users with :func:`register`, by name
USER_FUNCTIONS: dict[str, FunctionRule] = {}
#: bumped by every :func:`register`; compiled code remembers the version it saw
REGISTRY_VERSION = [0]


def register(fn: Callable, partials: Sequence[Callable] = ()) -> Callable:
    """Make a user's pure function usable in reversible expressions.

    ``fn`` must be a plain Python function Numba can compile (it is
    ``njit``-ed for the Numba backend); ``partials`` are its partial
    derivatives, one per argument, each taking the same arguments.
    Registering a name again replaces the old entry (notebooks re-run cells).
    Returns ``fn`` so it can be used as a decorator.
    """
    name = getattr(fn, "__name__", None)
    if not callable(fn) or not name or not name.isidentifier() or name == "<lambda>":
        raise TypeError(f"revbench.register needs a named function (def), got {fn!r}")
    if name in BUILTIN_FUNCTIONS or name in SPELLINGS:
        raise ValueError(f"{name!r} is a built-in revbench function and cannot be replaced")
    nargs = len(inspect.signature(fn).parameters)
    partials = tuple(partials)
    if partials and len(partials) != nargs:
        raise ValueError(
            f"{name} takes {nargs} argument(s) but {len(partials)} partial derivative(s) "
            "were given; give one per argument")
    for k, p in enumerate(partials):
        if not callable(p):
            raise TypeError(f"partial derivative {k} of {name} is not callable: {p!r}")
    fp = fingerprint(fn, partials)
    # Each partial becomes a hidden function of its own, so the adjoint can call it.
    dnames = []
    for k, p in enumerate(partials):
        dname = f"{name}__d{k}"
        USER_FUNCTIONS[dname] = FunctionRule(
            dname, f"_rb_user_{dname}", nargs, (), result="float", hidden=True,
            user_function=p, fingerprint=fingerprint(p))
        dnames.append(dname)
    USER_FUNCTIONS[name] = FunctionRule(
        name, f"_rb_user_{name}", nargs, (name,), result="float", complex_ok=True,
        partials=tuple(lambda *args, d=d: Func(d, tuple(args)) for d in dnames),
        user_function=fn, user_partials=partials, fingerprint=fp)
    REGISTRY_VERSION[0] += 1
    return fn


def lookup(name: str) -> FunctionRule | None:
    """The rule of a canonical or user function name, or ``None``."""
    return BUILTIN_FUNCTIONS.get(name) or USER_FUNCTIONS.get(name)


def canonical(spelling: str) -> str | None:
    """The canonical name of a user spelling (``np.arctan`` -> ``atan``)."""
    if spelling in SPELLINGS:
        return SPELLINGS[spelling]
    if spelling in USER_FUNCTIONS and not USER_FUNCTIONS[spelling].hidden:
        return spelling
    return None

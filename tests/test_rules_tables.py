"""The rule tables are complete, and they are the only place the AD transforms read.

* every operator the parser accepts inside an expression (``ir.BinOp``, ``ir.UnaryOp``)
  has an entry in the operator table, with a partial (or an explicit ``None``) per operand;
* every update operator the parser accepts has an ``UpdateRule`` with its inverse, its
  adjoint and its tangent, and every other one has the parser's advice;
* changing an operator's partial changes both the adjoint and the tangent program: the
  two transforms share the one table.

These tests only parse and transform IR: nothing is compiled.
"""

from __future__ import annotations

import ast
import dataclasses

import pytest

from revbench.lang import ir, products
from revbench.lang.check import check_function
from revbench.lang.errors import ReversibilitySyntaxError
from revbench.lang.parse import SourceInfo, parse_definition
from revbench.lang.types import VarType, infer
from revbench.rules import operators
from revbench.rules.instructions import ADD, DIV, MUL, REFUSED_UPDATES, SUB, UPDATES, XOR
from revbench.transforms.adjoint import adjoint
from revbench.transforms.tangent import tangent

FLOAT = VarType("float")


def _parse(source: str) -> ir.Function:
    node = ast.parse(source).body[0]
    return parse_definition(node, SourceInfo("<rules-test>", source.splitlines(True), 0, 0), {})


def _operators(func: ir.Function, kind: type) -> set[str]:
    """The operators of the ``kind`` nodes in the updates of ``func``."""
    return {n.op for s in ir.walk_stmts(func.body) if isinstance(s, ir.Update)
            for n in ir.walk_expr(s.value) if isinstance(n, kind)}


def _python_classes(base: type) -> list[type]:
    return [c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, base)
            and c is not base]


def _accepted(source: str) -> ir.Function | None:
    try:
        return _parse(source)
    except ReversibilitySyntaxError:
        return None


BINARY = _python_classes(ast.operator)
UNARY = _python_classes(ast.unaryop)


@pytest.mark.parametrize("cls", BINARY, ids=lambda c: c.__name__)
def test_every_binary_operator_the_parser_accepts_has_partials(cls):
    expr = ast.unparse(ast.BinOp(ast.Name("x"), cls(), ast.Name("y")))
    func = _accepted(f"def f(r, x, y):\n    r += {expr}\n")
    if func is None:
        return  # refused by the parser: nothing to differentiate
    ops = _operators(func, ir.BinOp)
    assert ops, expr
    if ops <= products.LOWERED_OPERATORS:  # (`@`) lowered to sums before any transform
        lowered = infer(func, (VarType("float", 1), VarType("float", 2), VarType("float", 1)))
        assert not _operators(lowered.func, ir.BinOp) & products.LOWERED_OPERATORS, expr
        return
    for op in ops:
        assert op in operators.BINARY_OPERATORS, f"`{op}` has no entry in BINARY_OPERATORS"
        rule = operators.BINARY_OPERATORS[op]
        assert len(rule.partials) == 2, f"`{op}` needs one partial (or None) per operand"
        for p in rule.partials:
            assert p is None or dataclasses.is_dataclass(p.expr(ir.Var("x"), ir.Var("y")))


@pytest.mark.parametrize("cls", UNARY, ids=lambda c: c.__name__)
def test_every_unary_operator_the_parser_accepts_has_partials(cls):
    expr = ast.unparse(ast.UnaryOp(cls(), ast.Name("x")))
    func = _accepted(f"def f(r, x, y):\n    r += y * ({expr})\n")
    if func is None:
        return
    for op in _operators(func, ir.UnaryOp):
        assert op in operators.UNARY_OPERATORS, f"`{op}` has no entry in UNARY_OPERATORS"
        assert len(operators.UNARY_OPERATORS[op].partials) == 1


def test_the_parser_accepts_the_operators_the_tables_name():
    # the other direction: a table entry for an operator the IR never holds is dead
    accepted = set()
    for cls in BINARY:
        expr = ast.unparse(ast.BinOp(ast.Name("x"), cls(), ast.Name("y")))
        func = _accepted(f"def f(r, x, y):\n    r += {expr}\n")
        if func is not None:
            accepted |= _operators(func, ir.BinOp)
    assert accepted - products.LOWERED_OPERATORS == set(operators.BINARY_OPERATORS)
    # unary '+' is dropped by the parser; the IR allows it (ir.UnaryOp), so it has a rule
    assert set(operators.UNARY_OPERATORS) == {"-", "+", "not"}


@pytest.mark.parametrize("cls", BINARY, ids=lambda c: c.__name__)
def test_every_update_operator_has_its_rules_or_its_advice(cls):
    line = ast.unparse(ast.AugAssign(ast.Name("r", ast.Store()), cls(), ast.Name("x")))
    func = _accepted(f"def f(r, x):\n    {line}\n")
    op = line.split()[1]
    if func is None:
        assert op in REFUSED_UPDATES, f"`{op}` is refused without advice in REFUSED_UPDATES"
        return
    (s,) = func.body
    assert isinstance(s, ir.Update) and s.op == op
    rule = UPDATES[op]
    assert rule.op == op and rule.inverse in UPDATES and UPDATES[rule.inverse].inverse == op
    assert callable(rule.adjoint), f"`{op}` has no adjoint rule"
    assert callable(rule.tangent), f"`{op}` has no tangent rule"


def test_update_operators_are_named_once():
    assert [ADD, SUB, MUL, DIV, XOR] == list(UPDATES)
    assert not set(UPDATES) & set(REFUSED_UPDATES)


def _programs(source: str) -> tuple[ir.Function, ir.Function]:
    typed = infer(check_function(_parse(source)), (FLOAT, FLOAT, FLOAT))
    return adjoint(typed)[0], tangent(typed)[0]


def _reads(func: ir.Function, name: str) -> bool:
    return any(isinstance(n, ir.Func) and n.name == name
               for s in ir.walk_stmts(func.body) if isinstance(s, (ir.Update, ir.Alloc))
               for n in ir.walk_expr(s.value if isinstance(s, ir.Update) else s.init))


@pytest.mark.parametrize("op", [op for op, r in operators.BINARY_OPERATORS.items()
                                if any(r.partials)])
def test_adjoint_and_tangent_read_the_one_operator_table(op, monkeypatch):
    """Give the operator a marked partial: both transforms must use it."""
    source = f"def f(r, x, y):\n    r += x {op} y\n"
    before = _programs(source)
    assert not any(_reads(p, "tan") for p in before)
    rule = operators.BINARY_OPERATORS[op]
    marked = operators.OperatorPartial(lambda a, b: ir.Func("tan", (a, b)))
    monkeypatch.setitem(operators.BINARY_OPERATORS, op,
                        dataclasses.replace(rule, partials=(marked, marked)))
    backward, forward = _programs(source)
    assert _reads(backward, "tan"), "the adjoint transform does not read BINARY_OPERATORS"
    assert _reads(forward, "tan"), "the tangent transform does not read BINARY_OPERATORS"


@pytest.mark.parametrize("op", [ADD, SUB, MUL, DIV])
def test_the_tangent_transform_reads_update_rule_tangent(op, monkeypatch):
    source = f"def f(r, x, y):\n    r {op} x * y\n"
    marker = ir.Update(ir.Var("_rb_tan_r"), ADD, ir.Func("tan", (ir.Var("x"),)))
    monkeypatch.setitem(UPDATES, op, dataclasses.replace(
        UPDATES[op], tangent=lambda s, ty, de: [marker]))
    _, forward = _programs(source)
    assert marker in forward.body


def test_the_power_partials_guard_a_zero_base_except_for_whole_exponents():
    x = ir.Var("x")
    assert operators.power_base_partial(x, ir.Const(1)) == ir.Const(1.0)
    two = operators.power_base_partial(x, ir.Const(2))
    assert two == ir.BinOp("*", ir.Const(2), x)  # 2 x, not 2 x ** (2 - 1)
    three = operators.power_base_partial(x, ir.Const(3))  # the exponent folded: a constant
    assert three == ir.BinOp("*", ir.Const(3), ir.BinOp("**", x, ir.Const(2)))
    # a reverse sweep's `x ** (3 - 1)`: the exponent is folded, no guard
    folded = operators.power_base_partial(x, ir.BinOp("-", ir.Const(3), ir.Const(1)))
    assert not isinstance(folded, ir.IfExp)
    for b in (ir.Const(0.5), ir.Var("y")):
        assert isinstance(operators.power_base_partial(x, b), ir.IfExp)
    assert isinstance(operators.power_exponent_partial(x, ir.Var("y")), ir.IfExp)


# -- the statement table (ir.STATEMENTS) ---------------------------------------------------


def _statement_classes() -> set[type]:
    return set(ir.Stmt.__args__)


def test_every_statement_class_has_a_table_entry():
    assert _statement_classes() == set(ir.STATEMENTS), (
        "statement classes without an entry in ir.STATEMENTS: "
        f"{sorted(c.__name__ for c in _statement_classes() - set(ir.STATEMENTS))}")
    with pytest.raises(TypeError, match="not a statement kind of the IR"):
        ir.statement_kind(ir.Var("x"))


def _sample_statements() -> dict[type, ir.Stmt]:
    """One statement of every kind, with every field filled."""
    x, y, i = ir.Var("x"), ir.Var("y"), ir.Var("i")
    body = (ir.Update(y, "+=", x),)
    return {
        ir.Update: ir.Update(ir.Elem("y", (i,)), "+=", x),
        ir.Swap: ir.Swap(x, y),
        ir.Alloc: ir.Alloc("t", ir.Const(0.0)),
        ir.Dealloc: ir.Dealloc("t", ir.Const(0.0)),
        ir.Call: ir.Call("g", (x, y), backward=True, adj_args=(ir.Var("ax"), None),
                         tangent=True, tan_args=(None, ir.Var("ty"))),
        ir.Block: ir.Block(body),
        ir.Inverted: ir.Inverted(body),
        ir.Uncompute: ir.Uncompute("routine"),
        ir.If: ir.If(x, y, body, body),
        ir.While: ir.While(x, y, body),
        ir.For: ir.For("i", ir.Const(0), x, ir.Const(1), body),
        ir.Print: ir.Print(("x is", x)),
        ir.Assert: ir.Assert(x, "message"),
    }


def _inside(e, exprs) -> bool:
    """Whether ``e`` is one of ``exprs`` or inside one (an index of a target)."""
    for top in exprs:
        stack = [top]
        while stack:
            c = stack.pop()
            if c is e:
                return True
            stack += list(ir.sub_expressions(c)) + list(getattr(c, "indices", ()))
    return False


def test_the_statement_table_matches_the_fields_of_each_class():
    """Every field of a statement holding statements is one of its blocks, and every field
    holding expressions is among its expressions: a field added to a class and not to the
    table fails here."""
    samples = _sample_statements()
    assert set(samples) == _statement_classes()
    for cls, s in samples.items():
        kind = ir.statement_kind(s)
        blocks = kind.blocks(s)
        exprs = kind.expressions(s)
        for f in dataclasses.fields(s):
            value = getattr(s, f.name)
            items = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, tuple(_statement_classes())) for v in items):
                assert any(value is b for b in blocks), (cls.__name__, f.name)
            for v in items:
                if isinstance(v, (ir.Var, ir.Elem, ir.Const, ir.BinOp)):
                    assert any(v is e for e in exprs), (cls.__name__, f.name)


def test_what_codegen_evaluates_first_and_what_prune_keeps_come_from_the_table():
    """``before`` and ``subarrays`` (what generated code evaluates first, where sub-arrays
    may stand) name only expressions the statement holds; a statement with effects is kept
    by ``prune`` even when nothing reads it; and the printer has a line for every kind."""
    from revbench.lang.pretty import Printer
    from revbench.transforms.prune import prune_body

    for cls, s in _sample_statements().items():
        kind = ir.statement_kind(s)
        held = kind.expressions(s)
        for e in (*kind.before(s, True), *kind.subarrays(s)):
            assert _inside(e, held), (cls.__name__, e)
        assert set(kind.before(s, False)) <= set(kind.before(s, True)) or cls is ir.Dealloc
        assert Printer().stmt(s), cls.__name__
    assert ir.statement_kind(ir.Dealloc("t", ir.Const(0.0))).before(
        ir.Dealloc("t", ir.Const(0.0)), False) == ()  # (only a check reads it)
    effects = {cls for cls, k in ir.STATEMENTS.items() if k.effects}
    assert effects == {ir.Call, ir.Print, ir.Assert}
    for cls in (ir.Print, ir.Assert):  # (nothing reads what they touch: kept all the same)
        s = _sample_statements()[cls]
        kept, live = prune_body((s,), set())
        assert kept == (s,) and "x" in live, cls.__name__


def test_what_a_statement_writes_and_what_code_without_checks_reads():
    t = ir.Var("t")
    assert ir.written_names(ir.Update(ir.Elem("y", (t,)), "+=", ir.Var("x"))) == {"y"}
    assert ir.written_names(ir.Swap(ir.Var("a"), ir.Var("b"))) == {"a", "b"}
    assert ir.written_names(ir.Alloc("t", ir.Const(0.0))) == {"t"}
    call = ir.Call("g", (ir.Var("x"),), backward=True, adj_args=(ir.Var("ax"),))
    assert ir.written_names(call) == {"x", "ax"}
    assert ir.written_names(ir.Print(("x", ir.Var("x")))) == set()
    dealloc = ir.Dealloc("t", ir.BinOp("*", ir.Var("x"), ir.Var("x")))
    assert ir.statement_expressions(dealloc) == (dealloc.init,)
    assert ir.statement_expressions(dealloc, checked=False) == ()  # only a check reads it


def test_every_statement_kind_has_its_inverse_and_inverting_twice_gives_it_back():
    from revbench.rules.inverse import INVERSES, invert_stmt

    assert set(INVERSES) == _statement_classes() - {ir.Uncompute}
    x, y = ir.Var("x"), ir.Var("y")
    body = (ir.Update(y, "+=", x), ir.Alloc("t", ir.Const(0.0)))
    for s in (ir.Update(y, "*=", x), ir.Swap(x, y), ir.Print(("x", x)), ir.Assert(x),
              ir.Alloc("t", x), ir.Dealloc("t", x), ir.Call("g", (x,)), ir.Block(body),
              ir.Inverted(body), ir.If(x, y, body, ()), ir.While(x, y, body),
              ir.For("i", ir.Const(0), x, ir.Const(1), body)):
        assert invert_stmt(invert_stmt(s)) == s, s
    with pytest.raises(TypeError, match="cannot invert Uncompute"):
        invert_stmt(ir.Uncompute(None))


# -- the runtime-check table (rules/checks.py) ------------------------------------------------


def test_every_check_the_code_generators_make_has_an_entry_and_every_entry_is_made():
    """A check kind written in a generator (``check("kind", ...)``, ``CheckInfo("kind", ...)``,
    ``alias_check(..., "kind", ...)``) without its entry in ``CHECKS`` would fail with a
    KeyError instead of its message; an entry no generator makes is dead."""
    import re
    from pathlib import Path

    from revbench.rules.checks import CHECKS

    backends = Path(__file__).resolve().parents[1] / "revbench" / "backends"
    made: set[str] = set()
    for path in backends.glob("*.py"):
        text = path.read_text()
        made |= set(re.findall(r'(?:check|CheckInfo)\(\s*"([a-z-]+)"', text))
        made |= set(re.findall(r'alias_check\([^)]*"([a-z-]+)"', text))
        # (a sub-array's alias check is named by the element check's kind)
        made |= {k for k in ("overlap", "call-overlap") if f'"{k}"' in text}
    assert made - set(CHECKS) == set(), "check kinds without an entry in rules/checks.CHECKS"
    assert set(CHECKS) - made == set(), "entries of CHECKS that no code generator makes"
    for kind, entry in CHECKS.items():
        assert entry.condition and entry.message, kind


def test_a_check_message_is_its_entry_worded_with_the_values():
    from revbench.backends.runtime import CheckFailed, CheckInfo, CheckTable, to_user_error

    table = CheckTable("f", "f.py", "forward",
                       [CheckInfo("zero", "a", 3, "*="), CheckInfo("overflow", "n", 4, "*\tn *= m"),
                        CheckInfo("ancilla", "t", 5)], {}, {3: "    y *= a", 4: "    n *= m"})
    err = to_user_error(CheckFailed(-7, 0, 0.0, 0.0), {-7: table})
    assert str(err).startswith("`*=` by `a`: the operand is zero, which cannot be undone: got 0.0")
    err = to_user_error(CheckFailed(-7, 1, 2**62, 4), {-7: table})
    assert "integer overflow in `n *= m`" in str(err)
    assert "the exact result of 4611686018427387904 * 4 does not fit in int64" in str(err)
    err = to_user_error(CheckFailed(-7, 2, 0.0, 1.5, 2), {-7: table})
    assert str(err).startswith("ancilla `t[2]` is not back at its allocated value when "
                               "deallocated: expected 0.0, got 1.5")


# -- each stage's rule per statement kind ----------------------------------------------------


@pytest.mark.parametrize("stage", ["check", "types", "adjoint", "tangent", "codegen", "cuda",
                                   "tracer"])
def test_every_stage_has_a_rule_for_every_statement_kind(stage):
    """The stages that dispatch on a statement's kind (``s_<Kind>`` methods) have one for
    every kind the checked IR holds: a new kind without its rule in a stage fails here, not
    at the first program that uses it."""
    if stage == "check":
        from revbench.lang.check import Checker as visitor
    elif stage == "codegen":
        from revbench.backends.codegen import Emitter as visitor
    elif stage == "cuda":
        from revbench.backends.cuda_codegen import CudaEmitter as visitor
    elif stage == "tracer":
        from revbench.backends.tracer import Tracer as visitor
    elif stage == "adjoint":
        from revbench.transforms.adjoint import Adjoint as visitor
    elif stage == "tangent":
        from revbench.transforms.tangent import Tangent as visitor
    else:
        from revbench.lang.types import TypeInference as visitor
    kinds = _statement_classes() - {ir.Uncompute}  # (the checker resolves it first)
    missing = sorted(k.__name__ for k in kinds if not callable(getattr(visitor, f"s_{k.__name__}",
                                                                       None)))
    assert not missing, f"{visitor.__name__} has no rule for {missing}"

"""The ``prune`` transform: drop statements whose results nothing reads.

A reverse sweep (:mod:`revbench.transforms.adjoint`) runs the inverse program
beside the adjoint updates.  Much of that inverse work exists only to bring
ancillas back to their allocated values so that ``del`` can check them: in

    t -= a * b          # uncompute t (the inverse of t += a * b)
    _rb_adj_a += _rb_adj_t * b
    ...
    del t               # with check=False: nothing is read here

the uncomputation of ``t`` is needed by nothing once the runtime checks are
off, and it is most of the primal work of a sweep whose intermediates are
ancillas (bundle adjustment's reprojection: every intermediate is uncomputed
after its adjoint was taken).  This pass is a classic backward liveness
analysis over the IR, with the function's parameters (primal and adjoint)
live at its end, so every result the caller can see is kept; it runs only
where no runtime check reads values (``check=False``).

What counts as a read is deliberately conservative: a statement that writes
one element of an array keeps the whole array live, calls keep all their
arguments and are never removed, ``print``/``assert`` are never removed, and
conditions and postconditions are reads.  Loops are iterated to a fixed point.
"""

from __future__ import annotations

from dataclasses import replace

from revbench.lang import ir
from revbench.transforms.invert import invert_body


def uses(e: ir.Expr) -> set[str]:
    """Every variable an expression needs to exist: values read, and ``len``/``shape``."""
    out = ir.names_read(e)
    for n in ir.walk_expr(e):
        if isinstance(n, (ir.Len, ir.Shape)):
            out.add(n.name)
        elif isinstance(n, ir.ArrayAlloc) and n.source:
            out.add(n.source)
    return out


def target_uses(t: ir.Target) -> set[str]:
    """A target is read as well as written (``y op= e`` reads ``y``), with its indices."""
    out = {t.name}
    if isinstance(t, ir.Elem):
        for i in t.indices:
            out |= uses(i)
    return out


def _all_names(body: tuple[ir.Stmt, ...]) -> set[str]:
    """Everything a body reads or writes (for statements kept whole)."""
    out = ir.names_written(body)
    for s in ir.walk_stmts(body):
        out |= _stmt_reads(s)
    return out


def _stmt_reads(s: ir.Stmt) -> set[str]:
    if isinstance(s, ir.Update):
        return target_uses(s.target) | uses(s.value)
    if isinstance(s, ir.Swap):
        return target_uses(s.a) | target_uses(s.b)
    if isinstance(s, ir.Alloc):
        return uses(s.init)
    if isinstance(s, ir.Call):
        out: set[str] = set()
        for a in s.args + tuple(a for a in s.adj_args if a is not None):
            out |= target_uses(a)
        return out
    if isinstance(s, ir.Print):
        out = set()
        for a in s.args:
            if not isinstance(a, str):
                out |= uses(a)
        return out
    if isinstance(s, ir.Assert):
        return uses(s.cond)
    if isinstance(s, ir.If):
        return uses(s.pre) | uses(s.post)
    if isinstance(s, ir.While):
        return uses(s.cond) | uses(s.post)
    if isinstance(s, ir.For):
        return uses(s.start) | uses(s.stop) | uses(s.step)
    return set()


def _may_raise(init: ir.Expr) -> bool:
    """An allocation that can fail (``np.zeros(n)`` with a negative ``n``, a division by
    a variable that may be zero) is kept even where nothing reads it: pruning removes
    work, never an error the program raises."""
    if isinstance(init, ir.ArrayAlloc):
        return init.kind == "zeros" and not all(
            isinstance(d, ir.Const) and type(d.value) is int and d.value >= 0 for d in init.shape)
    return any(isinstance(n, ir.BinOp) and n.op in ("/", "//", "%")
               and not (isinstance(n.right, ir.Const) and n.right.value != 0)
               for n in ir.walk_expr(init))


def prune_body(body: tuple[ir.Stmt, ...], live: set[str]) -> tuple[tuple[ir.Stmt, ...], set[str]]:
    """``(kept statements, names live before body)`` given the names live after it."""
    kept: list[ir.Stmt] = []
    live = set(live)
    for s in reversed(body):
        s, live = _prune_stmt(s, live)
        if s is not None:
            kept.append(s)
    kept.reverse()
    return tuple(kept), live


def _prune_stmt(s: ir.Stmt, live: set[str]) -> tuple[ir.Stmt | None, set[str]]:
    if isinstance(s, ir.Update):
        if s.target.name not in live:
            return None, live
        return s, live | _stmt_reads(s)
    if isinstance(s, ir.Swap):
        if s.a.name not in live and s.b.name not in live:
            return None, live
        return s, live | _stmt_reads(s)
    if isinstance(s, ir.Alloc):
        if s.name not in live and not _may_raise(s.init):
            return None, live
        return s, (live - {s.name}) | uses(s.init)
    if isinstance(s, ir.Dealloc):
        # without checks ``del t`` reads nothing, and nothing reads t after it
        return s, live - {s.name}
    if isinstance(s, ir.Block):
        body, live = prune_body(s.body, live)
        return replace(s, body=body), live
    if isinstance(s, ir.Inverted):
        # run as the inverse of its body: prune that (the block keeps its label)
        body, live = prune_body(invert_body(s.body), live)
        return ir.Block(body, s.label, s.loc), live
    if isinstance(s, ir.If):
        then, live_then = prune_body(s.then, live)
        orelse, live_else = prune_body(s.orelse, live)
        return replace(s, then=then, orelse=orelse), live_then | live_else | _stmt_reads(s)
    if isinstance(s, ir.While):
        head = set(live) | _stmt_reads(s)
        while True:
            body, body_in = prune_body(s.body, head)
            new = head | body_in
            if new == head:
                return replace(s, body=body), head
            head = new
    if isinstance(s, ir.For):
        head = set(live)
        while True:
            body, body_in = prune_body(s.body, head)
            new = head | (body_in - {s.var})
            if new == head:
                if not body:  # nothing left to do in it: no loop (its bounds have no effect)
                    return None, live
                return replace(s, body=body), head | _stmt_reads(s)
            head = new
    if isinstance(s, ir.Call | ir.Print | ir.Assert):
        return s, live | _stmt_reads(s)
    # anything else is kept whole, with everything it touches live
    return s, live | _all_names((s,))


def prune(func: ir.Function) -> ir.Function:
    """``func`` without the statements whose results neither a parameter nor a kept
    statement reads.  Only for code without runtime checks (checks read values)."""
    body, _ = prune_body(func.body, set(func.params))
    return replace(func, body=_drop_deallocs(body, set()))


def _drop_deallocs(body: tuple[ir.Stmt, ...], allocated: set[str]) -> tuple[ir.Stmt, ...]:
    """Without the ``del`` of each ancilla whose allocation was pruned.

    Walks the code in execution order with the ancillas allocated at each point
    (``allocated``, updated in place): a ``del`` is kept only where its ancilla is
    allocated.  The same name may be allocated in one block and pruned in another
    (the replay of a routine and its uncompute), so a name allocated *somewhere*
    is not enough.  Routine blocks share their enclosing scope; the bodies of
    branches and loops allocate and free their own ancillas.  (No ``Inverted``
    is left here: :func:`prune_body` turned them into blocks in execution order.)
    """
    out = []
    for s in body:
        if isinstance(s, ir.Alloc):
            allocated.add(s.name)
        elif isinstance(s, ir.Dealloc):
            if s.name not in allocated:
                continue
            allocated.discard(s.name)
        elif isinstance(s, ir.If):
            s = replace(s, then=_drop_deallocs(s.then, set(allocated)),
                        orelse=_drop_deallocs(s.orelse, set(allocated)))
        elif isinstance(s, ir.Block):
            s = replace(s, body=_drop_deallocs(s.body, allocated))
        elif isinstance(s, (ir.While, ir.For)):
            s = replace(s, body=_drop_deallocs(s.body, set(allocated)))
        out.append(s)
    return tuple(out)


# -- adjoints known to be zero -------------------------------------------------------------
#
# A reverse sweep replays computed blocks (``~routine`` read backwards is the routine
# run forwards) with the adjoints of their ancillas freshly allocated at zero, so every
# adjoint update in the replay adds ``0 * something``.  IEEE arithmetic forbids the
# compiler from folding those away (``0 * inf`` is NaN), but mathematically they are
# zero, and they are most of a replay's adjoint work: a forward data-flow pass tracks the
# scalar adjoints that are exactly zero and drops the updates whose value is a product
# with one of them.


def _is_adjoint(name: str) -> bool:
    return name.startswith("_rb_adj")


def is_zero(e: ir.Expr, zeros: frozenset[str]) -> bool:
    """Whether ``e`` is a product (or sum) of which a factor is known to be zero."""
    if isinstance(e, ir.Var):
        return e.name in zeros
    if isinstance(e, ir.Const):
        return e.value == 0 and not isinstance(e.value, bool)
    if isinstance(e, ir.UnaryOp):
        return e.op == "-" and is_zero(e.operand, zeros)
    if isinstance(e, ir.BinOp):
        if e.op == "*":
            return is_zero(e.left, zeros) or is_zero(e.right, zeros)
        if e.op == "/":
            return is_zero(e.left, zeros)
        if e.op in ("+", "-"):
            return is_zero(e.left, zeros) and is_zero(e.right, zeros)
    return False


def drop_zero_body(body: tuple[ir.Stmt, ...], zeros: frozenset[str]
                   ) -> tuple[tuple[ir.Stmt, ...], frozenset[str]]:
    """``(body without updates that add zero, adjoints known zero after it)``."""
    out: list[ir.Stmt] = []
    for s in body:
        s, zeros = _drop_zero_stmt(s, zeros)
        if s is not None:
            out.append(s)
    return tuple(out), zeros


def _drop_zero_stmt(s: ir.Stmt, zeros: frozenset[str]) -> tuple[ir.Stmt | None, frozenset[str]]:
    if isinstance(s, ir.Update):
        name = s.target.name
        if _is_adjoint(name) and s.op in ("+=", "-=") and is_zero(s.value, zeros):
            return None, zeros
        return s, zeros - {name}
    if isinstance(s, ir.Alloc):
        if _is_adjoint(s.name) and is_zero(s.init, frozenset()):
            return s, zeros | {s.name}
        return s, zeros - {s.name}
    if isinstance(s, (ir.Block, ir.Inverted)):
        body = s.body if isinstance(s, ir.Block) else invert_body(s.body)
        body, zeros = drop_zero_body(body, zeros)
        return ir.Block(body, s.label, s.loc), zeros
    if isinstance(s, ir.If):
        then, z1 = drop_zero_body(s.then, zeros)
        orelse, z2 = drop_zero_body(s.orelse, zeros)
        return replace(s, then=then, orelse=orelse), z1 & z2
    if isinstance(s, (ir.While, ir.For)):
        head = zeros
        while True:
            _, after = drop_zero_body(s.body, head)
            new = head & after
            if new == head:
                break
            head = new
        body, _ = drop_zero_body(s.body, head)
        return replace(s, body=body), head
    if isinstance(s, ir.Call):  # a reverse sweep of a callee writes its adjoint arguments
        return s, zeros - ir.names_written((s,)) - {a.name for a in s.adj_args if a is not None}
    # swaps, deallocations: whatever they write is no longer known zero
    return s, zeros - ir.names_written((s,))


def drop_zero_adjoint_updates(func: ir.Function) -> ir.Function:
    """``func`` without the adjoint updates that add a product with a zero adjoint."""
    body, _ = drop_zero_body(func.body, frozenset())
    return replace(func, body=body)

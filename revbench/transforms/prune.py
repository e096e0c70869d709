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
one element of an array keeps the whole array live, a call whose callee prints
or asserts is never removed (but see :func:`_mirrors`), ``print``/``assert`` are
never removed, and conditions and postconditions are reads.  Loops are iterated to a fixed point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from revbench.lang import ir
from revbench.rules.instructions import ADD, SUB
from revbench.transforms.invert import invert_body

#: which parameters of a call's callee the callee changes (one flag per argument); None
#: for a call that does more than that (its callee prints or asserts)
Writes = Callable[[ir.Call], "tuple[bool, ...] | None"]


def shape_of(name: str) -> str:
    """The live-set entry for "the array ``name`` must exist" (its shape is read, its
    values need not be current): a loop over ``qx.shape[0]`` after ``qx`` was last read
    must not keep alive the updates that uncompute ``qx``."""
    return _SHAPE + name


_SHAPE = "#shape:"


def uses(e: ir.Expr) -> set[str]:
    """Every variable an expression needs: the values it reads, and (as
    :func:`shape_of` entries) the arrays whose ``len``/``shape`` it reads."""
    out = ir.names_read(e)
    for n in ir.walk_expr(e):
        if isinstance(n, (ir.Len, ir.Shape)):
            out.add(shape_of(n.name))
        elif isinstance(n, ir.ArrayAlloc) and n.source:
            out.add(n.source if n.kind == "copy" else shape_of(n.source))
    return out


def reads_only_shapes(e: ir.Expr, sizes: frozenset[str]) -> bool:
    """Whether ``e`` reads nothing but arrays' lengths and shapes and the ``sizes``
    (:func:`size_names`): its value is the same wherever the same arrays are passed."""
    return all(n.startswith(_SHAPE) or n in sizes for n in uses(e))


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
    """What ``s`` itself reads in code without runtime checks (the pass runs only there):
    its expressions (``ir.STATEMENTS``), a target both read and written."""
    targets = ir.statement_kind(s).targets(s)
    out: set[str] = set()
    for e in ir.statement_expressions(s, checked=False):
        out |= target_uses(e) if any(e is t for t in targets) else uses(e)
    return out


def _may_raise(init: ir.Expr, sizes: frozenset[str] = frozenset()) -> bool:
    """An allocation that can fail (``np.zeros(n)`` with a negative ``n``, a division by
    a variable that may be zero) is kept even where nothing reads it: pruning removes
    work, never an error the program raises.  ``sizes`` are names known never to be
    negative (:func:`size_names`)."""
    if isinstance(init, ir.ArrayAlloc):
        return init.kind == "zeros" and not all(_never_negative(d, sizes) for d in init.shape)
    return any(isinstance(n, ir.BinOp) and n.op in ("/", "//", "%")
               and not (isinstance(n.right, ir.Const) and n.right.value != 0)
               for n in ir.walk_expr(init))


def _never_negative(e: ir.Expr, sizes: frozenset[str]) -> bool:
    """``e`` is an int that cannot be negative: a length or an axis of an array, a
    constant >= 0, a name in ``sizes``, or a sum of those (array axes are far below
    2**62, so such a sum cannot overflow)."""
    if isinstance(e, (ir.Len, ir.Shape)):
        return True
    if isinstance(e, ir.Const):
        return type(e.value) is int and e.value >= 0
    if isinstance(e, ir.Var):
        return e.name in sizes
    if isinstance(e, ir.BinOp) and e.op == "+":
        return _never_negative(e.left, sizes) and _never_negative(e.right, sizes)
    return False


def size_names(func: ir.Function) -> frozenset[str]:
    """The ancillas that hold sizes: allocated only from lengths, axes and constants
    >= 0 (``n, d = x.shape``) and never changed -- an ``np.zeros(d)`` cannot fail."""
    allocs: dict[str, list[ir.Expr]] = {}
    changed: set[str] = set(func.params)
    for s in ir.walk_stmts(func.body):
        if isinstance(s, ir.Alloc):
            allocs.setdefault(s.name, []).append(s.init)
        elif isinstance(s, (ir.Update, ir.Swap, ir.Call)):
            changed |= ir.names_written((s,))
    sizes: frozenset[str] = frozenset()
    while True:  # names defined from other sizes (m = n + 1)
        new = frozenset(n for n, inits in allocs.items() if n not in changed
                        and all(_never_negative(e, sizes) for e in inits))
        if new == sizes:
            return sizes
        sizes = new


@dataclass(frozen=True)
class _Known:
    """What pruning knows beyond the body: the names that hold sizes (:func:`size_names`)
    and which parameters each call's callee changes; ``checked``: the code keeps its
    runtime checks, so a ``del`` reads its ancilla and only statements where
    ``removable`` holds (in a replay, :func:`prune_replays`) may go."""

    sizes: frozenset[str] = frozenset()
    writes: Writes | None = None
    checked: bool = False
    removable: bool = True
    #: ``writes`` for the calls of a mirror (:func:`_mirrors`): a callee whose only
    #: effects are asserts on shapes counts as changing only its arguments
    mirrored_writes: Writes | None = None
    #: inside a mirror: an ``assert`` on shapes and sizes only repeats one already made
    in_mirror: bool = False


def prune_body(body: tuple[ir.Stmt, ...], live: set[str], known: _Known = _Known()
               ) -> tuple[tuple[ir.Stmt, ...], set[str]]:
    """``(kept statements, names live before body)`` given the names live after it."""
    kept: list[ir.Stmt] = []
    live = set(live)
    mirror = _in_mirror(known)
    for k in range(len(body) - 1, -1, -1):
        s = body[k]
        inner = mirror if mirror is not known and _mirrors(s, body[:k]) else known
        s, live = _prune_stmt(s, live, inner)
        if s is not None:
            kept.append(s)
    kept.reverse()
    return tuple(kept), live


def _in_mirror(known: _Known) -> _Known:
    """What pruning knows inside a mirror (``known`` itself where it knows no
    ``mirrored_writes``)."""
    if known.mirrored_writes is None or known.in_mirror:
        return known
    return replace(known, writes=known.mirrored_writes, in_mirror=True)


def _mirrors(s: ir.Stmt, before: tuple[ir.Stmt, ...]) -> bool:
    """Whether ``s`` runs backwards a block run forwards earlier in the same body -- a
    routine's uncompute (``~routine``), or its image in an inverse -- so every call and
    ``assert`` in it meets arrays of the shapes the forward run's did: whole arrays keep
    their shapes between the two (an ancilla is allocated by the one and freed by the
    other)."""
    return isinstance(s, ir.Inverted) and any(
        isinstance(b, ir.Block) and b.body == s.body for b in before)


def _prune_stmt(s: ir.Stmt, live: set[str], known: _Known) -> tuple[ir.Stmt | None, set[str]]:
    dead_goes = known.removable
    if isinstance(s, ir.Assert) and known.in_mirror and dead_goes \
            and reads_only_shapes(s.cond, known.sizes):
        return None, live  # the mirrored block checked the same condition
    if isinstance(s, ir.Update):
        if s.target.name not in live and dead_goes:
            return None, live
        if s.restores_zero and not known.checked:
            # an undo back to an exact zero (a fresh ancilla's): t -= t, without computing
            # the value again (only a check would tell the two apart)
            s = replace(s, value=s.target, restores_zero=False)
        return s, live | _stmt_reads(s)
    if isinstance(s, ir.Swap):
        if s.a.name not in live and s.b.name not in live and dead_goes:
            return None, live
        return s, live | _stmt_reads(s)
    if isinstance(s, ir.Alloc):
        gone = {s.name, shape_of(s.name)}
        # an adjoint is the sweep's own arithmetic, not the program's: where nothing reads it,
        # nothing the program would raise is lost with it (a seed `adj / c if c > 0 else 0`)
        if not (gone & live) and dead_goes and (ir.is_adjoint(s.name)
                                                or not _may_raise(s.init, known.sizes)):
            return None, live
        return s, (live - gone) | uses(s.init)
    if isinstance(s, ir.Dealloc):
        if known.checked and not known.removable and not s.discard:
            # checked: ``del t`` compares t with its allocated value
            return s, live | {s.name} | (uses(s.init) if s.init is not None else set())
        # without checks ``del t`` reads nothing, and nothing reads t after it (in a
        # checked replay the sweep checks t again later: :func:`prune_replays`)
        if known.checked:
            s = replace(s, discard=True)
        return s, live - {s.name, shape_of(s.name)}
    if isinstance(s, ir.Block):
        inner = replace(known, removable=True) if known.checked and s.replay else known
        body, live = prune_body(s.body, live, inner)
        return (replace(s, body=body) if body or not dead_goes else None), live
    if isinstance(s, ir.Inverted):
        # run as the inverse of its body: prune that (the block keeps its label)
        body, live = prune_body(invert_body(s.body), live, known)
        return (ir.Block(body, s.label, s.loc) if body else None), live
    if isinstance(s, ir.If):
        then, live_then = prune_body(s.then, live, known)
        orelse, live_else = prune_body(s.orelse, live, known)
        return replace(s, then=then, orelse=orelse), live_then | live_else | _stmt_reads(s)
    if isinstance(s, ir.While):
        head = set(live) | _stmt_reads(s)
        while True:
            body, body_in = prune_body(s.body, head, known)
            new = head | body_in
            if new == head:
                return replace(s, body=body), head
            head = new
    if isinstance(s, ir.For):
        head = set(live)
        while True:
            body, body_in = prune_body(s.body, head, known)
            new = head | (body_in - {s.var})
            if new == head:
                if not body and dead_goes:  # nothing left to do in it: no loop (its bounds
                    return None, live       # have no effect)
                return replace(s, body=body), head | _stmt_reads(s)
            head = new
    if isinstance(s, ir.Call) and known.writes is not None and dead_goes \
            and not _call_live(s, live, known):
        return None, live
    if ir.statement_kind(s).effects:  # (it prints, fails or calls: kept)
        return s, live | _stmt_reads(s)
    # anything else is kept whole, with everything it touches live
    return s, live | _all_names((s,))


def _call_live(call: ir.Call, live: set[str], known: _Known) -> bool:
    """Whether anything reads what a call changes: the arguments its callee writes (an
    uncompute of a call in an expression, ``~f(t, x)``, changes only the dead ``t``), and
    in a reverse sweep its adjoint arguments."""
    written = known.writes(call)
    if written is None:  # the callee prints or asserts: never dropped
        return True
    n = len(call.args)
    if any(w and a.name in live for a, w in zip(call.args, written)):
        return True
    if call.tangent and not call.backward:
        # (a tangent run's tangents follow its arguments: the callee changes the tangent
        # of an argument it changes, and only that)
        return any(t is not None and w and t.name in live
                   for t, w in zip(call.tan_args, written))
    if call.tangent and any(a is not None and a.name in live for a in call.tan_args):
        return True  # (a tangent call changes tangents: a gradient's Hessian product)
    return any(a is not None and a.name in live for k, a in enumerate(call.adj_args)
               if written[k % n] or call.backward)


def prune(func: ir.Function, writes: Writes | None = None,
          mirrored_writes: Writes | None = None, live: set[str] | None = None) -> ir.Function:
    """``func`` without the statements whose results neither a parameter nor a kept
    statement reads.  Only for code without runtime checks (checks read values).
    ``writes`` tells which parameters each call's callee changes; without it every call
    is kept.  ``mirrored_writes``: the same for a call in a routine's uncompute, which
    repeats the checks of shapes its compute made (``csr_matvec``'s ``assert``s of
    lengths need not keep the uncompute of a ``lu`` about to be freed).  ``live``: the
    parameters whose final values the caller reads (default: all of them)."""
    known = _Known(size_names(func), writes, mirrored_writes=mirrored_writes)
    body, _ = prune_body(func.body, set(func.params) if live is None else set(live), known)
    return replace(func, body=_drop_deallocs(body, set()))


def prune_replays(func: ir.Function, writes: Writes | None = None) -> ir.Function:
    """A checked reverse sweep without the work in its replays that only a ``del``'s check
    reads, and without those checks.

    A replay (``ir.Block.replay``) runs a routine again where the program had uncomputed
    it; inside it the routine's nested ``~routine``s uncompute their ancillas only to
    check them.  The sweep's adjoint of that same routine comes later and runs those
    uncomputations once more -- from the same values, with their checks -- so in the
    replay they are dead: the reasoning of :func:`prune_before_sweep`, for the replay as
    a run its sweep follows.  Outside replays everything stays, checks included."""
    body, _ = prune_body(func.body, set(func.params),
                         _Known(size_names(func), writes, checked=True, removable=False))
    return replace(func, body=_drop_deallocs(body, set()))


def prune_before_sweep(func: ir.Function, writes: Writes | None = None,
                       mirrored_writes: Writes | None = None) -> ir.Function:
    """A checked run that a reverse sweep follows at once, in the same call, without the
    work that only a ``del``'s check reads -- a forward run's ``~routine``, the
    uncomputation of its ancillas -- and without those checks.

    Why nothing is lost: the sweep runs the inverse of every statement of the run from its
    end, and where the run would check ``del t`` (``t`` must equal its allocated value
    again), the sweep allocates ``t`` at that value, undoes its updates, and checks at
    ``t``'s allocation that it is back where it started -- the same condition, read
    backwards: ``t``'s updates are invertible, so one holds where the other does.  The
    checks the run keeps (overflow, shapes, a postcondition, an ``assert``) read only what
    is live.  Used only where the sweep surely follows (not by ``vjp``, whose pullback
    the caller may never call); the sweep reports a failed check at its line as the run
    would."""
    pruned = prune(func, writes, mirrored_writes)
    return replace(pruned, body=_unchecked_deallocs(pruned.body))


def _unchecked_deallocs(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """Every ``del`` in ``body`` releasing its ancilla without the check (nested too)."""
    out = []
    for s in body:
        if isinstance(s, ir.Dealloc):
            s = replace(s, discard=True)
        elif isinstance(s, ir.If):
            s = replace(s, then=_unchecked_deallocs(s.then), orelse=_unchecked_deallocs(s.orelse))
        elif isinstance(s, (ir.Block, ir.Inverted, ir.While, ir.For)):
            s = replace(s, body=_unchecked_deallocs(s.body))
        out.append(s)
    return tuple(out)


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
            if not s.body:
                continue
        elif isinstance(s, (ir.While, ir.For)):
            s = replace(s, body=_drop_deallocs(s.body, set(allocated)))
            if not s.body and isinstance(s, ir.For):  # as prune_body drops emptied loops
                continue
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


def is_zero(e: ir.Expr, zeros: frozenset[str]) -> bool:
    """Whether ``e`` is a product (or sum) of which a factor is known to be zero: a
    variable, an element or a sub-array of an array known zero, a fresh ``np.zeros``."""
    if isinstance(e, (ir.Var, ir.Elem)):
        return e.name in zeros
    if isinstance(e, ir.ArrayAlloc):
        return e.kind in ("zeros", "zeros_like")
    if isinstance(e, ir.Reduce):  # a sum (or an extreme) of zeros
        return is_zero(e.arg, zeros)
    if isinstance(e, ir.MatMul):  # a matrix product with a zero factor
        return is_zero(e.a, zeros) or is_zero(e.b, zeros)
    if isinstance(e, ir.IfExp):
        return is_zero(e.then, zeros) and is_zero(e.orelse, zeros)
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


def drop_zero_body(body: tuple[ir.Stmt, ...], zeros: frozenset[str], writes: Writes | None = None
                   ) -> tuple[tuple[ir.Stmt, ...], frozenset[str]]:
    """``(body without updates that add zero, adjoints known zero after it)``; ``writes``
    tells which parameters a call's callee changes (None: calls are left as they are)."""
    out: list[ir.Stmt] = []
    for s in body:
        s, zeros = _drop_zero_stmt(s, zeros, writes)
        if s is not None:
            out.append(s)
    return tuple(out), zeros


def _drop_zero_stmt(s: ir.Stmt, zeros: frozenset[str], writes: Writes | None
                    ) -> tuple[ir.Stmt | None, frozenset[str]]:
    if isinstance(s, ir.Update):
        name = s.target.name
        if ir.is_adjoint(name) and s.op in (ADD, SUB) and is_zero(s.value, zeros):
            return None, zeros
        return s, zeros - {name}
    if isinstance(s, ir.Alloc):
        # an adjoint allocated at zero, or a temporary that holds a zero adjoint's value
        if is_zero(s.init, zeros):
            return s, zeros | {s.name}
        return s, zeros - {s.name}
    if isinstance(s, (ir.Block, ir.Inverted)):
        body = s.body if isinstance(s, ir.Block) else invert_body(s.body)
        body, zeros = drop_zero_body(body, zeros, writes)
        return ir.Block(body, s.label, s.loc, getattr(s, "replay", False)), zeros
    if isinstance(s, ir.If):
        then, z1 = drop_zero_body(s.then, zeros, writes)
        orelse, z2 = drop_zero_body(s.orelse, zeros, writes)
        return replace(s, then=then, orelse=orelse), z1 & z2
    if isinstance(s, (ir.While, ir.For)):
        head = zeros
        while True:
            _, after = drop_zero_body(s.body, head, writes)
            new = head & after
            if new == head:
                break
            head = new
        body, _ = drop_zero_body(s.body, head, writes)
        return replace(s, body=body), head
    if isinstance(s, ir.Call):
        # (a tangent sweep also carries the tangents of its adjoints: never replaced)
        written = writes(s) if s.backward and not s.tangent and writes is not None else None
        if written is not None and _seeds_zero(s, written, zeros):
            # the callee's reverse sweep would only carry zeros: run its primal effect,
            # which is the call undone (a reverse sweep gives back the call's inputs)
            plain = replace(s, inverted=not s.inverted, backward=False, adj_args=(), lanes=1,
                            inactive=())
            return plain, zeros - ir.names_written((s,))
        # a reverse sweep of a callee writes its adjoint arguments
        return s, zeros - ir.names_written((s,)) - {a.name for a in s.adj_args if a is not None}
    # swaps, deallocations: whatever they write is no longer known zero
    return s, zeros - ir.names_written((s,))


def _seeds_zero(call: ir.Call, written: tuple[bool, ...], zeros: frozenset[str]) -> bool:
    """Whether every adjoint the callee's reverse sweep starts from is zero: those of the
    arguments it changes (a read-only argument's adjoint is only added to, by amounts
    proportional to those seeds)."""
    n = len(call.args)
    for k, adj in enumerate(call.adj_args):
        if adj is not None and written[k % n] and not is_zero(adj, zeros):
            return False
    return True


def drop_zero_adjoint_updates(func: ir.Function, writes: Writes | None = None) -> ir.Function:
    """``func`` without the adjoint updates that add a product with a zero adjoint, and
    with the reverse sweeps of calls whose seeds are all zero replaced by plain calls
    (``writes``: which parameters each call's callee changes)."""
    body, _ = drop_zero_body(func.body, frozenset(), writes)
    return replace(func, body=body)

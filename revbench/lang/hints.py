"""Why an ancilla did not come back: the statement that changed what its uncompute reads.

``k1 += f(y); y += h * k1; k1 -= f(y)`` computes ``k1`` from ``y``, changes ``y``, then
"uncomputes" ``k1`` from the *new* ``y``: the runtime check at ``del k1`` fails, and a
message that names only the allocation (or advises adding an uncompute that is already
there) sends the user to the wrong line.  :func:`ancilla_culprit` finds, in the function's
IR, the statement between an ancilla's compute and its uncompute that writes a variable
they read -- the real cause -- for the message of the failed check.
"""

from __future__ import annotations

from revbench.lang import ir


def _blocks(body: tuple[ir.Stmt, ...]):
    yield body
    for s in body:
        for child in ir.child_blocks(s):
            yield from _blocks(child)


def _leaves(body) -> list[ir.Stmt]:
    """The statements of ``body`` that act themselves (not loops, branches or blocks), in
    source order (a routine's ``~`` undo lists its routine's statements again)."""
    out = []
    for s in body:
        children = ir.child_blocks(s)
        if children:
            for c in children:
                out.extend(_leaves(c))
        else:
            out.append(s)
    return out


def _reads(s: ir.Stmt) -> set[str]:
    out: set[str] = set()
    for e in ir.statement_kind(s).expressions(s):
        out |= ir.names_read(e)
    return out


def ancilla_culprit(func: ir.Function, name: str, line: int) -> str:
    """A sentence naming the statement that changed, between ``name``'s compute and its
    uncompute, a variable both read -- for the ancilla check of ``del name`` at ``line``;
    "" when there is no such statement (the cause is elsewhere)."""
    for body in _blocks(func.body):
        dels = [k for k, s in enumerate(body) if isinstance(s, ir.Dealloc) and s.name == name
                and s.loc.line == line]
        if not dels:
            continue
        d = dels[0]
        allocs = [k for k, s in enumerate(body[:d]) if isinstance(s, ir.Alloc) and s.name == name]
        if not allocs:
            return ""
        leaves = _leaves(body[allocs[-1] + 1:d])
        own = [k for k, s in enumerate(leaves) if name in ir.written_names(s)]
        if len(own) < 2:
            return ""
        read = set().union(*(_reads(leaves[k]) for k in own)) - {name}
        for k in range(own[0] + 1, own[-1]):
            s = leaves[k]
            if k in own:
                continue
            # (revbench's own variables -- a checkpointed loop's bounds -- are no culprit
            # a user can act on)
            changed = sorted(n for n in ir.written_names(s) & read if not n.startswith("_rb_"))
            if not changed:
                continue
            var = changed[0]
            compute = max(j for j in own if j < k)
            undo = min(j for j in own if j > k)
            text = func.line_text(s.loc.line).strip()
            return (f"`{var}` changes at line {s.loc.line} (`{text}`), after `{name}` was computed "
                    f"from it (line {leaves[compute].loc.line}) and before `{name}` is uncomputed "
                    f"(line {leaves[undo].loc.line}): the uncompute reads the new `{var}`, so "
                    f"`{name}` does not come back. Uncompute `{name}` before changing `{var}`; for "
                    "a time step, write the step out of place (`y_new += ...`, reading only the "
                    "old state) and loop with `checkpointed(...)` (docs/checkpointing.md)")
        return ""
    return ""

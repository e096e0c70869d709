"""The programs of a gradient taken inside reversible code, as IR.

``revbench.grad(f, loss="out", wrt="y")(...)`` inside reversible code is lowered to calls
of a reversible function of its own (:mod:`revbench.lang.derivatives`), whose parameters
are ``(ACCUMULATOR, *f's parameters)``.  Its meaning: ``ACCUMULATOR += dL/dy`` where
``L`` is ``out`` after ``f`` runs; nothing else changes.  This module writes each of its
directions as IR made of calls of ``f`` -- no new statement kind -- so type inference,
both code generators, the cache and the checks treat it like any function:

``FORWARD`` (``INVERSE`` subtracts)
    copy the arguments ``f`` changes; run ``f``; run its reverse sweep seeded with 1 on
    the loss; add the adjoint of ``y`` into the accumulator.  The copies are released
    with their check: with checks on, a sweep that did not recover them (round-off
    amplified) is an error, not a wrong gradient.

``BACKWARD`` (the reverse sweep of the above, for the gradient of an outer loss)
    restore the accumulator (subtract the gradient again), then carry its adjoint ``a``
    back: the adjoint of every argument ``p`` gains ``d(a . dL/dy)/dp``, which is the
    Hessian of ``L`` times ``a`` placed at ``y`` -- by its symmetry, a Hessian-vector
    product, taken forward-over-reverse: ``f``'s tangent run then its tangent reverse
    sweep (the programs ``hvp`` runs), seeded with ``a`` on ``y``'s tangent.

``tangent-FORWARD`` (``jvp`` of an outer program)
    the same product with the caller's tangents as the seed: the tangent of
    ``dL/dy`` is row ``y`` of the Hessian times the tangents.

A ``jvp`` inside has the same three (:meth:`GradientIR.jvp_run`, ``jvp_sweep``,
``jvp_tangent``).  Taking these again (an ``hvp`` of a program holding a gradient) would
need third derivatives of ``f``: refused by the compiler with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from revbench.lang import ir
from revbench.lang.types import VarType
from revbench.transforms.adjoint import adj_name, lane_name
from revbench.transforms.tangent import tan_name

#: the first parameter of a gradient's program: what the gradient is added into
ACCUMULATOR = "_rb_gradient"


def _zero(p: str, t: VarType) -> ir.Expr:
    return ir.ArrayAlloc("zeros_like", (), p, "float") if t.is_array else ir.Const(0.0)


def _copy(p: str, t: VarType) -> ir.Expr:
    return ir.ArrayAlloc("copy", (), p, t.dtype) if t.is_array else ir.Var(p)


@dataclass
class GradientIR:
    """What the programs are made of: ``f``'s name as the programs call it, its parameters
    and their types, which of them are the loss and ``wrt``, and which ``f`` changes."""

    callee: str
    params: tuple[str, ...]
    types: tuple[VarType, ...]
    loss: int
    wrt: int
    written: frozenset[str]
    loc: ir.Loc = ir.NO_LOC
    #: a Jacobian-vector product (``jvp`` inside reversible code): the arguments given a
    #: tangent, which the program receives after f's own (:func:`along_param`); ``loss``
    #: is then the output
    along: tuple[str, ...] = ()

    def floats(self) -> list[str]:
        return [p for p, t in zip(self.params, self.types) if t.dtype == "float"]

    def type_of(self, p: str) -> VarType:
        return self.types[self.params.index(p)]

    # -- the pieces -----------------------------------------------------------------------
    def _ancillas(self, names: dict[str, str], init) -> tuple[list[ir.Stmt], list[ir.Stmt]]:
        """``name = init(p)`` for each ``p -> name``, and their release (discarded: their
        values are derivatives, recomputable, not the program's state)."""
        make = [ir.Alloc(n, init(p), self.loc) for p, n in names.items()]
        free = [ir.Dealloc(n, None, self.loc, discard=True) for n in reversed(names.values())]
        return make, free

    def _copies(self, restored: bool = True) -> tuple[list[ir.Stmt], tuple[ir.Target, ...],
                                                      list[ir.Stmt]]:
        """The arguments ``f`` is called with: copies of those it changes, the caller's
        own of the rest.  The copies' release checks that ``f``'s sweep ``restored`` them
        (else, after a run with no sweep, they are discarded)."""
        make, args, free = [], [], []
        for p, t in zip(self.params, self.types):
            if p not in self.written:
                args.append(ir.Var(p, self.loc))
                continue
            # (named for the check that fails when f's sweep does not give it back)
            c = f"{p}_recovered_by_{self.callee}_sweep".replace(".", "_")
            c = f"_rb_copy_{p}" if c in self.params else c
            make.append(ir.Alloc(c, _copy(p, t), self.loc))
            free.insert(0, ir.Dealloc(c, _copy(p, t), self.loc) if restored else
                        ir.Dealloc(c, None, self.loc, discard=True))
            args.append(ir.Var(c, self.loc))
        return make, tuple(args), free

    def _adjoints(self, wanted: set[str]) -> tuple[dict[str, str], tuple, tuple]:
        """Adjoint ancillas for the loss, the arguments ``f`` changes and ``wanted``; the
        call's ``adj_args`` and ``inactive`` (no adjoint for the other read-only ones)."""
        need = {self.params[self.loss], *wanted, *(p for p in self.floats() if p in self.written)}
        names = {p: self._adjoint_name(p) for p in self.floats() if p in need}
        adj = tuple(ir.Var(names[p], self.loc) if p in names else None for p in self.params)
        return names, adj, tuple(a is None for a in adj)

    def _adjoint_name(self, p: str) -> str:
        """``dL_dy``: the adjoint of ``p`` is the derivative of the loss by it, and a check
        that fails on it names it so (unless ``f`` has an argument of that name)."""
        name = f"d{self.params[self.loss]}_d{p}"
        return f"_rb_seed_{p}" if name in self.params else name

    def _adjoint_init(self, p: str) -> ir.Expr:
        return ir.Const(1.0) if p == self.params[self.loss] else _zero(p, self.type_of(p))

    def _call(self, args, **kw) -> ir.Call:
        return ir.Call(self.callee, args, False, self.loc, **kw)

    # -- the gradient itself ----------------------------------------------------------------
    def gradient(self, into: ir.Target, op: str) -> list[ir.Stmt]:
        """``into op= dL/dy``: ``f``, then its reverse sweep seeded on the loss."""
        copies, args, release = self._copies()
        names, adj, inactive = self._adjoints({self.params[self.wrt]})
        seeds, free = self._ancillas(names, self._adjoint_init)
        return [*copies, self._call(args), *seeds,
                self._call(args, backward=True, adj_args=adj, inactive=inactive),
                ir.Update(into, op, ir.Var(names[self.params[self.wrt]], self.loc), self.loc),
                *free, *release]

    def _tangent_run(self, seed_of, swept: bool = True) -> tuple[list[ir.Stmt], tuple,
                                                                 dict[str, str], list[ir.Stmt]]:
        """Copies, tangents ``seed_of(p)`` on f's float arguments, and ``f``'s tangent run:
        ``(statements, the arguments, the tangents' names, the release)``; ``swept``: a
        reverse sweep will have restored the copies before their release."""
        copies, args, release = self._copies(swept)
        tangents = {p: f"_rb_dir_{p}" for p in self.floats()}
        make_t, free_t = self._ancillas(tangents, seed_of)
        tan_args = tuple(ir.Var(tangents[p], self.loc) if p in tangents else None
                         for p in self.params)
        run = [*copies, *make_t, self._call(args, tangent=True, tan_args=tan_args)]
        return run, args, tangents, [*free_t, *release]

    def hessian_product(self, seed_of, wanted: list[str], add,
                        adjoint_init=None) -> list[ir.Stmt]:
        """Forward-over-reverse: ``f``'s tangent run, then its tangent reverse sweep, with
        tangents ``seed_of(p)`` on its arguments and adjoints ``adjoint_init(p)`` (1 on the
        loss); then ``add(p, t, a)`` for each ``p`` of ``wanted``, ``t`` naming the tangent
        of ``p``'s adjoint (``H . seed`` at ``p``) and ``a`` the adjoint itself."""
        run, args, tangents, release = self._tangent_run(seed_of)
        tan_args = tuple(ir.Var(tangents[p], self.loc) if p in tangents else None
                         for p in self.params)
        names, adj, inactive = self._adjoints(set(wanted))
        seeds, free_s = self._ancillas(names, adjoint_init or self._adjoint_init)
        adj_tans = {p: f"_rb_hvp_{p}" for p in names}
        make_a, free_a = self._ancillas(adj_tans, lambda p: _zero(p, self.type_of(p)))
        sweep_tans = tan_args + tuple(ir.Var(adj_tans[p], self.loc) for p in self.params
                                      if p in names)
        return [*run, *seeds, *make_a,
                self._call(args, backward=True, adj_args=adj, inactive=inactive, tangent=True,
                           tan_args=sweep_tans),
                *(s for p in wanted for s in add(p, ir.Var(adj_tans[p], self.loc),
                                                 ir.Var(names[p], self.loc))),
                *free_a, *free_s, *release]

    # -- the directions -----------------------------------------------------------------------
    def run(self, inverse: bool) -> tuple[ir.Stmt, ...]:
        """``FORWARD`` (``INVERSE``): the accumulator gains (loses) the gradient."""
        return tuple(self.gradient(ir.Var(ACCUMULATOR, self.loc), "-=" if inverse else "+="))

    def sweep(self, inverse: bool, lanes: int, active: list[str]) -> tuple[ir.Stmt, ...]:
        """The reverse sweep of :meth:`run`: the accumulator restored, then each lane's
        adjoint of it carried to the adjoints of ``active`` (f's arguments with one)."""
        body = self.gradient(ir.Var(ACCUMULATOR, self.loc), "+=" if inverse else "-=")
        wrt = self.params[self.wrt]
        op = "-=" if inverse else "+="
        for k in range(lanes):
            def lane(name: str, k: int = k) -> str:
                return name if lanes == 1 else lane_name(name, k)

            seed = lane(adj_name(ACCUMULATOR))

            def seed_of(p: str, seed=seed) -> ir.Expr:
                if p != wrt:
                    return _zero(p, self.type_of(p))
                return _copy(seed, self.type_of(p))

            def add(p: str, t: ir.Var, a: ir.Var, lane=lane) -> list[ir.Stmt]:
                return [ir.Update(ir.Var(lane(adj_name(p)), self.loc), op, t, self.loc)]

            body += self.hessian_product(seed_of, active, add)
        return tuple(body)

    def tangent(self, inverse: bool) -> tuple[ir.Stmt, ...]:
        """The tangent program of :meth:`run`: the accumulator's tangent gains row ``wrt``
        of the Hessian times the arguments' tangents."""
        wrt = self.params[self.wrt]
        op = "-=" if inverse else "+="

        def seed_of(p: str) -> ir.Expr:
            return _copy(tan_name(p), self.type_of(p))

        def add(p: str, t: ir.Var, a: ir.Var) -> list[ir.Stmt]:
            return [ir.Update(ir.Var(tan_name(ACCUMULATOR), self.loc), op, t, self.loc)]

        return self.run(inverse) + tuple(self.hessian_product(seed_of, [wrt], add))

    # -- a Jacobian-vector product (jvp inside reversible code) ---------------------------------
    def _along_seed(self, p: str) -> ir.Expr:
        t = self.type_of(p)
        return _copy(along_param(p), t) if p in self.along else _zero(p, t)

    def jvp_run(self, inverse: bool) -> tuple[ir.Stmt, ...]:
        """``FORWARD`` (``INVERSE``): the accumulator gains (loses) the tangent of the
        output along the given tangents, by ``f``'s tangent run on copies.  A tangent must
        have its argument's shape: checked first, with checks on or off."""
        shapes = [ir.Assert(ir.Compare(("==",), (ir.Shape(along_param(p), ax),
                                                   ir.Shape(p, ax))),
                            f"the tangent of `{p}` must have the shape of `{p}` (axis {ax})",
                            self.loc)
                  for p in self.along for ax in range(self.type_of(p).ndim)]
        run, _, tangents, release = self._tangent_run(self._along_seed, swept=False)
        out = tangents[self.params[self.loss]]
        return tuple([*shapes, *run, ir.Update(ir.Var(ACCUMULATOR, self.loc),
                                               "-=" if inverse else "+=",
                                               ir.Var(out, self.loc), self.loc), *release])

    def jvp_sweep(self, inverse: bool, lanes: int, active: list[str]) -> tuple[ir.Stmt, ...]:
        """The reverse sweep of :meth:`jvp_run`: the accumulator restored, then each lane's
        adjoint ``a`` of it carried back.  The tangent is ``J v``: its derivative by ``v`` is
        ``J^T a`` (``f``'s adjoints seeded with ``a`` on the output), by f's arguments the
        tangent of those adjoints along ``v`` (forward over reverse)."""
        body = list(self.jvp_run(not inverse))
        out = self.params[self.loss]
        op = "-=" if inverse else "+="
        mine = [p for p in active if p in self.params]
        wanted = list(dict.fromkeys([*mine, *(p for p in self.along
                                              if along_param(p) in active)]))
        for k in range(lanes):
            def lane(name: str, k: int = k) -> str:
                return name if lanes == 1 else lane_name(name, k)

            def seed(p: str, lane=lane) -> ir.Expr:
                t = self.type_of(p)
                return _copy(lane(adj_name(ACCUMULATOR)), t) if p == out else _zero(p, t)

            def add(p: str, t: ir.Var, a: ir.Var, lane=lane) -> list[ir.Stmt]:
                out_: list[ir.Stmt] = []
                if p in mine:
                    out_.append(ir.Update(ir.Var(lane(adj_name(p)), self.loc), op, t, self.loc))
                if p in self.along and along_param(p) in active:
                    out_.append(ir.Update(ir.Var(lane(adj_name(along_param(p))), self.loc), op,
                                          a, self.loc))
                return out_

            body += self.hessian_product(self._along_seed, wanted, add, seed)
        return tuple(body)


    def jvp_tangent(self, inverse: bool) -> tuple[ir.Stmt, ...]:
        """The tangent program of :meth:`jvp_run` (``jvp`` of a program holding a ``jvp``):
        along the caller's tangents ``dx`` of f's arguments and ``dv`` of the directions,
        ``J v`` moves by ``J dv + H[dx, v]``.  The first is f's tangent run seeded with
        ``dv``; the second, for a float scalar output (the compiler refuses others), is
        ``v . (H dx)``: the Hessian product forward over reverse, seeded with ``dx``,
        read at the arguments given a direction and dotted with it."""
        op = "-=" if inverse else "+="
        acc = ir.Var(tan_name(ACCUMULATOR), self.loc)
        out = self.params[self.loss]

        def seed_dv(p: str) -> ir.Expr:
            t = self.type_of(p)
            return _copy(tan_name(along_param(p)), t) if p in self.along else _zero(p, t)

        run, _, tangents, release = self._tangent_run(seed_dv, swept=False)
        body = [*self.jvp_run(inverse), *run,
                ir.Update(acc, op, ir.Var(tangents[out], self.loc), self.loc), *release]

        def add(p: str, t: ir.Var, a: ir.Var) -> list[ir.Stmt]:
            return [self._dot_into(acc, op, along_param(p), t.name, self.type_of(p).ndim)]

        return tuple(body + self.hessian_product(
            lambda p: _copy(tan_name(p), self.type_of(p)), list(self.along), add))

    def _dot_into(self, into: ir.Var, op: str, a: str, b: str, ndim: int) -> ir.Stmt:
        """``into op= sum(a * b)`` over every element of two arrays of one shape (or
        ``a * b`` of two scalars), as loops."""
        idx = tuple(ir.Var(f"_rb_dot{k}", self.loc) for k in range(ndim))
        if ndim == 0:
            prod: ir.Expr = ir.BinOp("*", ir.Var(a, self.loc), ir.Var(b, self.loc), self.loc)
        else:
            prod = ir.BinOp("*", ir.Elem(a, idx, self.loc), ir.Elem(b, idx, self.loc), self.loc)
        stmt: ir.Stmt = ir.Update(into, op, prod, self.loc)
        for k in reversed(range(ndim)):
            stmt = ir.For(idx[k].name, ir.Const(0), ir.Shape(a, k), ir.Const(1), (stmt,),
                          loc=self.loc)
        return stmt


def along_param(p: str) -> str:
    """The parameter of a ``jvp`` program that holds the tangent of ``f``'s argument ``p``."""
    return f"_rb_along_{p}"

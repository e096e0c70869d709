"""The pipeline driver: source -> parse -> check -> transform -> types -> backend.

A :class:`Program` holds one reversible function's checked IR and compiles
it lazily, once per (direction, backend, checks, signature).  Nothing is
compiled at decoration time; calling a function compiles what that call
needs (its callees included) and caches it, in memory and -- through the
content-hashed generated files -- on disk.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from revbench.backends import codegen, custom_sweep, loop_code, targets
from revbench.backends.loader import LOCK, hold, hold_module
from revbench.backends.runtime import TABLES, CheckTable
from revbench.lang import hints, ir, suggest
from revbench.lang.check import arity_message, is_passed_value, loop_var_message, passed_value_message
from revbench.lang.errors import ReversibilityTypeError
from revbench.lang.types import VarType, infer
from revbench.rules import adjoints as adjoint_rules
from revbench.rules import functions as fn_rules
from revbench.transforms import pipeline
from revbench.transforms.adjoint import adj_name, adjoint_params, lane_name
from revbench.transforms.derivative import ACCUMULATOR, GradientIR, along_param
from revbench.transforms.invert import invert
from revbench.transforms.pipeline import BACKWARD, FORWARD, INVERSE, Direction
from revbench.transforms.tangent import tan_name

BACKENDS = targets.USER_BACKENDS
@dataclass
class Compiled:
    """One specialisation, ready to run."""

    run: Any  # callable(*args, atol, rtol) -> tuple
    generated: codegen.Generated
    table: CheckTable
    #: the callees compiled into it: (name looked up, its Program, compile key, Compiled)
    deps: tuple = ()
    #: the value of the program generation when ``deps`` were last known to be current
    generation: int = 0
    #: tiered execution (:mod:`revbench.tiering`): "" not yet asked, "tier" calls may run
    #: interpreted while it compiles, "done" it is compiled (or must never be tiered)
    tier_state: str = ""
    #: what it was compiled for: ``(direction, check, signature, lanes, inactive)`` (a failed
    #: call is replayed on the Python backend with the same, to find the line)
    request: tuple = ()


#: Bumped whenever a reversible function is created: from then on a callee's name may
#: mean another function (a notebook re-running a def-cell), so cached callers recheck.
_GENERATION = [0]


class ProgramView:
    """A :class:`Program` seen in one direction: what a call statement may call.

    :class:`revbench.function.ReversibleFunction`, the object users hold, is one.  The
    compiler recognises callees by this base class, so it imports nothing from the layer
    above it (``function``)."""

    _program: Program
    _direction: Direction

    @property
    def params(self) -> tuple[str, ...]:
        return self._program.ir.params


@dataclass
class Program:
    """A checked reversible function, with its lazily built compilations."""

    #: its code is not revbench's to step through (an external function: one step)
    opaque = False

    ir: ir.Function
    check: bool = True
    backend: str = "numba"
    #: let Numba reassociate float arithmetic and fuse multiply-adds (this function's loops)
    fastmath: bool = False
    atol: float | None = None
    rtol: float | None = None
    namespace: Mapping[str, Any] = field(default_factory=dict)
    closure: Mapping[str, Any] = field(default_factory=dict)
    #: a compiled call that fails without a line is run again on the Python backend to
    #: find it (:meth:`ReversibleFunction._replay_on_python`); cell programs replay
    #: themselves, with the cell's calling lines
    replay_errors: bool = True
    _inverse_ir: ir.Function | None = None
    _written: frozenset[str] | None = None
    _effects: dict = field(default_factory=dict)  # mirrored -> has_effects
    _loop_args_checked: bool = False
    _cache: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)  # direction -> ReversibleFunction
    _loop_views: dict = field(default_factory=dict)  # its checkpointed loops' programs

    def __post_init__(self) -> None:
        _GENERATION[0] += 1

    @property
    def module(self) -> str:
        """The module the function was defined in (``__main__`` in a notebook): with its
        name, the key of its custom adjoint (:mod:`revbench.rules.adjoints`)."""
        return str(self.namespace.get("__name__", "__main__"))

    def opaque_text(self, direction: Direction) -> str | None:
        """What the debugger's one step says an opaque function did (None: its default)."""
        return None

    def custom_adjoint(self) -> adjoint_rules.AdjointRule | None:
        return adjoint_rules.lookup(self.module, self.ir.name)

    def custom_adjoints_used(self) -> tuple[str, ...]:
        """``adjoint (of f)`` for this function and every function it calls (through
        their calls too) that has a custom adjoint: what its gradient trusts."""
        found: list[str] = []
        seen: set[int] = set()

        def visit(prog: Program) -> None:
            if id(prog) in seen:
                return
            seen.add(id(prog))
            rule = prog.custom_adjoint()
            if rule is not None:
                found.append(f"{rule.label} (of {prog.ir.name})")
                return  # its own code is not differentiated
            for st in ir.walk_stmts(prog.ir.body):
                if isinstance(st, ir.Call):
                    try:
                        visit(prog.callee(st)[0])
                    except ReversibilityTypeError:
                        pass

        visit(self)
        return tuple(found)

    def code_size(self) -> int:
        """The statements of this function and of every function it calls, each counted
        once (as each is compiled once): about how long its compiled sweep is.  (Counted
        again only after a definition changed what a name means: ``_GENERATION``.)"""
        memo = self.__dict__.get("_code_size")
        if memo is not None and memo[0] == _GENERATION[0]:
            return memo[1]
        seen: set[int] = set()

        def visit(prog: Program) -> int:
            if id(prog) in seen:
                return 0
            seen.add(id(prog))
            n = 0
            for st in ir.walk_stmts(prog.ir.body):
                n += 1
                if isinstance(st, ir.Call):
                    try:
                        n += visit(prog.callee(st)[0])
                    except ReversibilityTypeError:
                        pass
            return n

        n = visit(self)
        self._code_size = (_GENERATION[0], n)
        return n

    def written_params(self) -> frozenset[str]:
        """The parameters this function may change, through its calls too.

        A call argument counts as changed only if the callee changes that
        parameter (so data passed down read-only stays read-only); a callee
        that cannot be resolved yet, or a recursive one, counts as changing all.
        """
        if self._written is None:
            self._written = frozenset(self.ir.params)  # conservative while computing (recursion)
            written: set[str] = set()
            for st in ir.walk_stmts(self.ir.body):
                if isinstance(st, ir.Call):
                    try:
                        callee, _ = self.callee(st)
                        changed = callee.written_params()
                        written.update(a.name for a, p in zip(st.args, callee.ir.params)
                                       if p in changed)
                    except ReversibilityTypeError:
                        written.update(a.name for a in st.args)
                else:
                    written |= ir.written_names(st)
            self._written = frozenset(written) & frozenset(self.ir.params)
        return self._written

    def ir_for(self, program: Direction) -> ir.Function:
        """The IR of a base program (``FORWARD`` or ``INVERSE``: :attr:`Direction.program`)."""
        if not program.inverse:
            return self.ir
        if self._inverse_ir is None:
            self._inverse_ir = invert(self.ir)
        return self._inverse_ir

    # -- resolving callees -----------------------------------------------------
    def lookup(self, dotted: str) -> Any:
        for loop in self.ir.loops:  # a checkpointed loop of its body, outlined
            if loop.name == dotted:
                view = self._loop_views.get(loop.name)
                if view is None:
                    view = self._loop_views[loop.name] = InnerView(LoopProgram.of(self, loop))
                return view
        if ir.parse_derivative_callee(dotted) is not None:  # (lang.derivatives)
            view = self._loop_views.get(dotted)
            if view is None:
                view = self._loop_views[dotted] = InnerView(DerivativeProgram.of(self, dotted))
            return view
        return lookup_name(dotted, self.namespace, self.closure)

    def callee(self, call: ir.Call) -> tuple[Program, str]:
        obj = self.lookup(call.func)
        where = "\n  " + ir.where(self.ir.name, self.ir.filename, call.loc.line,
                                   self.ir.line_text(call.loc.line).strip())
        if obj is _MISSING and call.func == self.ir.name:
            # a function defined inside another sees no binding of its own name yet
            raise ReversibilityTypeError(
                f"{self.ir.name} calls itself; recursive reversible functions are not "
                f"supported{where}", function=self.ir.name, filename=self.ir.filename,
                lineno=call.loc.line, stage="types")
        if not isinstance(obj, ProgramView):
            what = "not defined" if obj is _MISSING else f"a {_kind_of(obj)}"
            raise ReversibilityTypeError(
                f"`{call.func}` is {what}, not a reversible function"
                f"{self._callee_hint(call.func, obj)}{where}",
                function=self.ir.name, filename=self.ir.filename, lineno=call.loc.line,
                stage="types")
        if len(obj.params) != len(call.args):
            # the callee is known only now (defined after the caller, or redefined since)
            raise ReversibilityTypeError(
                arity_message(call, obj.params) + where, function=self.ir.name,
                filename=self.ir.filename, lineno=call.loc.line, stage="types")
        direction = obj._direction
        if call.inverted:
            direction = direction.flipped()
        if call.backward:
            direction = direction.backward()
        if call.tangent:
            direction = direction.with_tangent()
        return obj._program, direction

    def callee_writes(self, call: ir.Call) -> tuple[bool, ...]:
        """Per argument of ``call``: whether the callee may change it."""
        prog, _ = self.callee(call)
        written = prog.written_params()
        return tuple(p in written for p in prog.ir.params)

    def callee_writes_only(self, call: ir.Call) -> tuple[bool, ...] | None:
        """:meth:`callee_writes`, or None when the call does more than change its
        arguments (its callee prints or asserts, itself or through its own calls): such a
        call is never dropped as dead."""
        return None if self.callee(call)[0].has_effects() else self.callee_writes(call)

    def callee_writes_mirrored(self, call: ir.Call) -> tuple[bool, ...] | None:
        """:meth:`callee_writes_only` for a call that mirrors one already run with
        arguments of the same shapes (in a routine's uncompute, ``~routine``): there an
        ``assert`` that reads only shapes and sizes (``csr_matvec``'s ``len(indptr) ==
        len(y) + 1``) was checked by the mirrored call and does not keep it."""
        return (None if self.callee(call)[0].has_effects(mirrored=True)
                else self.callee_writes(call))

    def has_effects(self, mirrored: bool = False) -> bool:
        """Whether running this function does anything besides changing its arguments:
        a ``print`` or an ``assert`` in it or in a function it calls.  ``mirrored``: run
        again on arguments of the shapes it ran on (:meth:`callee_writes_mirrored`), where
        an ``assert`` reading only shapes and sizes repeats a check already made."""
        from revbench.transforms.prune import reads_only_shapes, size_names

        known = self._effects.get(mirrored)
        if known is not None:
            return known
        self._effects[mirrored] = True  # while computing (a recursive call is refused later)
        sizes = size_names(self.ir) if mirrored else frozenset()
        found = False
        for st in ir.walk_stmts(self.ir.body):
            if isinstance(st, ir.Print):
                found = True
            elif isinstance(st, ir.Assert):
                found = not (mirrored and reads_only_shapes(st.cond, sizes))
            elif isinstance(st, ir.Call):
                try:
                    found = self.callee(st)[0].has_effects(mirrored)
                except ReversibilityTypeError:
                    found = True
            if found:
                break
        self._effects[mirrored] = found
        return found

    def _called_from(self, exc: ReversibilityTypeError, call: ir.Call) -> ReversibilityTypeError:
        """``exc`` (found while compiling a callee for this call's argument types), with
        the calling line added: the mistake may be the call's as well as the callee's."""
        text = self.ir.line_text(call.loc.line).strip()
        where = f"{ir.shown_file(self.ir.filename)}, line {call.loc.line}: {text}"
        if where in str(exc):
            return exc
        error = type(exc)(  # (its kind kept: callers catch some, OneSeedAtATime)
            f"{exc}\n  called from reversible function {ir.shown_name(self.ir.name)}, {where}",
            variable=exc.variable, function=exc.function, filename=exc.filename,
            lineno=exc.lineno, stage=exc.stage)
        error.call_sites = [*getattr(exc, "call_sites", []),
                            (self.ir.name, self.ir.filename, call.loc.line)]
        return error

    def _callee_hint(self, name: str, obj: Any) -> str:
        """How to fix a call of something that is not a reversible function: a close
        reversible function's name, or the pure function the user probably meant."""
        scope = {**self.namespace, **self.closure}
        rev = suggest.close_reversible(name, scope)
        if rev is not None and isinstance(self.lookup(rev), ProgramView):
            return f". Did you mean `{rev}`?"
        # (a close name only for a name that is not defined: `np.sort` is not a typo of
        # `np.sqrt`)
        pure = fn_rules.canonical(name) or (suggest.close_function(name) if obj is _MISSING
                                             else None)
        if pure is not None:
            return (f": `{pure}` is a pure function, whose result is added to a variable "
                    f"(`y += {pure}(x)`), not called as a statement")
        if name.split(".")[0] in ("np", "numpy", "math", "scipy"):
            return (f": `{name}` is not one of revbench's pure functions (docs/language.md, "
                    "section 7), and a statement can only call a reversible function")
        if obj is _MISSING:
            return " (define it with @reversible before calling it)"
        return " (decorate it with @reversible)"

    # -- compiling ---------------------------------------------------------------
    def compile(self, direction: Direction, backend: str, check: bool,
                signature: tuple[VarType, ...], lanes: int = 1,
                inactive: frozenset[str] = frozenset(), shapes: tuple | None = None) -> Compiled:
        """The code of one specialisation (``shapes``: the arguments' shapes, which the
        ``cuda`` backend's local arrays are sized by; None elsewhere)."""
        key = self.compile_key(direction, backend, check, signature, lanes, inactive, shapes)
        direction, inactive = key[0], key[6]
        hit = self._cache.get(key)
        if hit is not None and hit.generation == _GENERATION[0]:
            return hit
        with LOCK:  # one compilation at a time: the tables and modules it fills are shared
            return self._compile_locked(key, direction, backend, check, signature, lanes,
                                        inactive, shapes)

    def restores_only_for_checks(self, check: bool) -> bool:
        """Whether this program's reverse sweep can leave the arguments unrestored where
        its caller reads only the adjoints (:attr:`Direction.adjoints_only`): without
        checks (which compare the restored arguments with their values at entry), and where
        the sweep is the derived one (a custom adjoint's is the user's code)."""
        return not check and self.custom_adjoint() is None

    def compile_key(self, direction: Direction, backend: str, check: bool,
                    signature: tuple[VarType, ...], lanes: int = 1,
                    inactive: frozenset[str] = frozenset(), shapes: tuple | None = None) -> tuple:
        """What one specialisation's code is found under, for :meth:`compile` and
        :meth:`has_compiled` alike: the direction as it compiles (an adjoints-only sweep
        that this program cannot take is the restoring one), the backend, checks, types,
        lanes, inactive arguments, shapes -- and the registry's version: re-registering a
        user function (a notebook cell run again) must reach code compiled before."""
        if direction.adjoints_only and not self.restores_only_for_checks(check):
            direction = direction.restoring()
        key = (direction, backend, check, signature, fn_rules.REGISTRY_VERSION[0], lanes,
               frozenset(inactive))
        return key if shapes is None else key + (shapes,)

    def has_compiled(self, direction: Direction, signature: tuple[VarType, ...]) -> bool:
        """Whether this process holds ``direction``'s code for ``signature`` ready to run
        (compiled, not merely generated), so a call costs no compilation."""
        hit = self._cache.get(self.compile_key(direction, self.backend, self.check, signature))
        if hit is None:
            return False
        return targets.target(self.backend).ready(hit.run)

    def _compile_locked(self, key, direction, backend, check, signature, lanes,
                        inactive, shapes=None) -> Compiled:
        hit = self._cache.get(key)
        if hit is not None:
            if hit.generation == _GENERATION[0] or self._callees_current(hit):
                return hit
            # a callee was redefined since: compile again against the new one
            del self._cache[key]
            self._written = None
            self._loop_args_checked = False
        guard = _in_progress()
        token = (id(self), key)
        if token in guard:
            raise ReversibilityTypeError(
                f"{self.ir.name} calls itself (directly or through other functions); recursive "
                "reversible functions are not supported", function=self.ir.name, stage="types")
        guard.add(token)
        try:
            compiled = self._compile(direction, backend, check, signature, lanes, inactive,
                                     shapes)
        finally:
            guard.discard(token)
        compiled.generation = _GENERATION[0]
        self._cache[key] = compiled
        return compiled

    def _callees_current(self, compiled: Compiled) -> bool:
        """Whether every callee compiled into ``compiled`` is still what its name means
        (recursively: the callee's own compiled code must be current too)."""
        for name, prog, key, sub in compiled.deps:
            obj = self.lookup(name) if name is not None else None  # None: its own inverse
            if name is not None and (not isinstance(obj, ProgramView)
                                     or obj._program is not prog):
                return False
            if prog.compile(*key) is not sub:  # (a key: compile()'s arguments)
                return False
        compiled.generation = _GENERATION[0]
        return True

    def generate(self, direction: Direction, backend: str, check: bool,
                 signature: tuple[VarType, ...], compile_callees: bool = True, lanes: int = 1,
                 inactive: frozenset[str] = frozenset(), deps: list | None = None,
                 shapes: tuple | None = None):
        """Stages types + codegen: the generated module and the globals it needs
        (``deps`` collects the callees compiled on the way)."""
        self.refuse_written_loop_vars()
        rule = self.custom_adjoint() if direction == BACKWARD else None
        if backend == "cuda":
            self._refuse_on_gpu(rule)
        if rule is not None:
            return self._generate_custom(rule, backend, check, signature, lanes, inactive,
                                         compile_callees, deps)
        request = pipeline.Request(signature, lanes, frozenset(inactive))
        typed = pipeline.optimise(self.typed(direction, signature, lanes, inactive), direction,
                                  check, self, request)
        injected: dict[str, object] = {}

        def callee_symbol(call: ir.Call, types: tuple[VarType, ...],
                          arg_shapes: tuple | None = None) -> str:
            prog, cdir = self.callee(call)
            eff_check = check and prog.check
            if direction.before_sweep and eff_check:
                cdir = _lean_callee(prog, cdir, types)
            if compile_callees:
                # a callee argument the caller keeps no adjoint for, and that the callee
                # only reads, needs no adjoint code in the callee either
                written = prog.written_params()
                # (of a tangent call: the read-only arguments whose tangent is zero)
                off = frozenset(p for p, off in zip(prog.ir.params, call.inactive)
                                if off and p not in written) if (call.backward or call.tangent
                                                                 ) else frozenset()
                sub_key = (cdir, backend, eff_check, types, call.lanes, off)
                if backend == "cuda":
                    sub_key += (arg_shapes,)
                try:
                    sub = prog.compile(*sub_key)
                except ReversibilityTypeError as exc:
                    raise self._called_from(exc, call) from None
                if deps is not None:
                    deps.append((call.func, prog, sub_key, sub))
                symbol = f"_rb_call_{prog.ir.name}_{sub.generated.key[:12]}"
                injected[symbol] = sub.run
            else:
                symbol = f"_rb_call_{prog.ir.name}_{cdir}"
            return symbol

        opts = codegen.Options(check=check, atol=self.atol, rtol=self.rtol, backend=backend,
                               fastmath=self.fastmath and backend == "numba")
        if backend == "cuda":
            from revbench.backends import cuda_codegen

            full = typed.func.params
            known = dict(zip(full, shapes or ()))
            gen = cuda_codegen.generate(typed, direction, opts, callee_symbol,
                                        self.callee_writes, known)
        else:
            gen = codegen.generate(typed, direction, opts, callee_symbol, self.callee_writes)
        target = targets.target(backend)
        for symbol, rule in gen.globals_needed.items():
            injected[symbol] = target.user_impl(rule)
        return gen, injected

    def _generate_custom(self, rule: adjoint_rules.AdjointRule, backend: str, check: bool,
                         signature: tuple[VarType, ...], lanes: int, inactive: frozenset[str],
                         compile_callees: bool, deps: list | None,
                         direction: Direction = BACKWARD,
                         through: str | None = None):
        """The reverse sweep of a function with a custom adjoint: the user's adjoint, then
        this function's inverse (:mod:`revbench.backends.custom_sweep`); with ``through``
        (an external function's inverse), its forward run, then the adjoint."""
        self.refuse_written_inactive(inactive)
        typed = infer(self.ir, signature)
        injected: dict[str, object] = {}
        inverse_key = "-"
        if compile_callees:
            key = (INVERSE if through is None else FORWARD, backend, check, signature)
            inverse = self.compile(*key)
            inverse_key = inverse.generated.key
            injected[custom_sweep.INVERSE_SYMBOL] = inverse.run
            if deps is not None:
                deps.append((None, self, key, inverse))
        target = targets.target(backend)
        # (under Numba the adjoint's stand-in returns a tuple, checked when typed)
        gen = custom_sweep.generate(typed, rule, direction, check, lanes, inactive, inverse_key,
                                    tuple_result=target.adjoint_returns_tuple, through=through)
        n = sum(1 for t in signature if t.dtype in custom_sweep.DIFFERENTIABLE)
        injected.update(target.adjoint(rule, self.ir.name, n))
        return gen, injected

    def _refuse_on_gpu(self, rule: adjoint_rules.AdjointRule | None) -> None:
        """What the CUDA code generator cannot run, refused before anything compiles."""
        what = ("is an external function (its code is Python's)" if self.opaque else
                f"has a custom adjoint ({rule.label})" if rule is not None else None)
        if what is not None:
            raise ReversibilityTypeError(
                f"on the GPU (device='cuda'): {self.ir.name} {what}, which the GPU cannot "
                "run; use the CPU for it", function=self.ir.name, filename=self.ir.filename,
                lineno=self.ir.firstlineno, stage="types")

    def refuse_written_loop_vars(self) -> None:
        """A loop variable passed straight to a call (``g(y, i)``) is read-only: the callee
        must not change that parameter.  Refused at definition where the callee is defined
        already (:func:`revbench.lang.check.check_calls`), else here, at the first call."""
        if self._loop_args_checked:
            return

        def visit(body, loop_vars: frozenset[str]) -> None:
            for st in body:
                if isinstance(st, ir.Call):
                    passed = [(k, a.name) for k, a in enumerate(st.args)
                              if isinstance(a, ir.Var) and (a.name in loop_vars
                                                            or is_passed_value(a.name))]
                    if passed:
                        writes = self.callee_writes(st)
                        prog, _ = self.callee(st)
                        for k, name in passed:
                            if writes[k]:
                                why = (passed_value_message(st.func, prog.ir.params[k])
                                       if is_passed_value(name) else
                                       loop_var_message(name, st.func, prog.ir.params[k]))
                                raise ReversibilityTypeError(
                                    why + "\n  in "
                                    f"reversible function {self.ir.name}, {ir.shown_file(self.ir.filename)}, "
                                    f"line {st.loc.line}: {self.ir.line_text(st.loc.line).strip()}",
                                    variable=None if is_passed_value(name) else name,
                                    function=self.ir.name, filename=self.ir.filename,
                                    lineno=st.loc.line, stage="types")
                inner = loop_vars | {st.var} if isinstance(st, ir.For) else loop_vars
                for child in ir.child_blocks(st):
                    visit(child, inner)

        visit(self.ir.body, frozenset())
        self._loop_args_checked = True

    def refuse_written_inactive(self, inactive: frozenset[str]) -> None:
        bad = sorted(inactive & self.written_params())
        if bad:
            raise ValueError(f"{', '.join(bad)} change(s) inside {self.ir.name}, so the "
                             "gradient flows through it: only read-only arguments can be "
                             "left without an adjoint")

    def typed(self, direction: Direction, signature: tuple[VarType, ...], lanes: int = 1,
              inactive: frozenset[str] = frozenset()):
        """The typed program of a direction: its base program through the passes that give
        it its meaning (:func:`revbench.transforms.pipeline.transform`: the adjoint
        transform for a reverse sweep, the tangent transform for second derivatives)."""
        rule = self.custom_adjoint()
        if rule is not None and direction in (pipeline.HVP, BACKWARD.with_tangent()):
            raise ReversibilityTypeError(
                f"{self.ir.name} has a custom adjoint ({rule.label}), which gives first "
                "derivatives only: second derivatives (hvp, hessian) cannot differentiate it "
                f"again. Remove it (revbench.remove_adjoint({self.ir.name})) to differentiate "
                "the derived reverse sweep instead", function=self.ir.name,
                filename=self.ir.filename, lineno=self.ir.firstlineno, stage="types")
        return pipeline.transform(direction, self,
                                  pipeline.Request(signature, lanes, frozenset(inactive)))

    def _compile(self, direction, backend, check, signature, lanes=1,
                 inactive=frozenset(), shapes=None) -> Compiled:
        deps: list = []
        gen, injected = self.generate(direction, backend, check, signature, lanes=lanes,
                                      inactive=inactive, deps=deps, shapes=shapes)
        func = self.ir  # (every direction's code runs these source lines)
        table = CheckTable(func.name, func.filename, direction.name, gen.checks, gen.linemap,
                           {ln: func.line_text(ln) for ln in set(gen.linemap.values())},
                           hint=_cause_finder(func) if direction == FORWARD else None)
        TABLES[gen.module_key] = table
        target = targets.target(backend)
        run = target.compile(gen, injected, check, fastmath=self.fastmath)
        compiled = Compiled(run, gen, table, tuple(deps),
                            request=(direction, check, signature, lanes, frozenset(inactive)))
        # released with the last function using them (both backends share a table's key)
        hold_module(compiled, f"rbgen_{gen.key}_{target.flavour}")
        key = gen.module_key
        hold(compiled, ("table", key), lambda: TABLES.pop(key, None))
        return compiled


class InnerView(ProgramView):
    """A program made from part of a function -- a checkpointed loop
    (:class:`LoopProgram`), a derivative taken inside it (:class:`DerivativeProgram`) --
    as that function's code calls it: forward."""

    def __init__(self, program: Program):
        self._program = program
        self._direction = FORWARD


class OneSeedAtATime(ReversibilityTypeError):
    """A reverse sweep of several seeds at once (lanes) through a checkpointed loop, which
    carries one: callers that can take their rows one by one catch this (the export's
    Jacobian, :mod:`revbench.interop`)."""


@dataclass
class LoopProgram(Program):
    """A checkpointed loop (:class:`ir.LoopDef`): kernels generated around its step's
    (:mod:`revbench.backends.loop_code`) instead of derived from IR.  The debugger shows
    it as one step."""

    opaque = True
    loop: ir.LoopDef | None = None
    step: Program | None = None
    cond: Program | None = None  # a while loop's condition

    def restores_only_for_checks(self, check: bool) -> bool:
        return False  # (its kernels are the schedule's, generated whole: loop_code)

    @classmethod
    def of(cls, parent: Program, loop: ir.LoopDef) -> LoopProgram:
        f = loop.step
        S = loop.n_state
        params = (*f.params[:2 * S], *loop_code.BOUNDS, *f.params[2 * S + 1:])
        func = ir.Function(loop.name, params, (), f.filename, f.firstlineno, f.source_lines)
        options = dict(check=parent.check, backend=parent.backend, fastmath=parent.fastmath,
                       atol=parent.atol, rtol=parent.rtol, namespace=parent.namespace,
                       closure=parent.closure)
        cond = Program(loop.cond, **options) if loop.cond is not None else None
        return cls(func, **options, loop=loop, step=Program(f, **options), cond=cond)

    @property
    def label(self) -> str:
        s = self.loop.strategy
        return getattr(s, "label", repr(s))

    def written_params(self) -> frozenset[str]:
        return frozenset(self.ir.params[:self.loop.n_state])

    def has_effects(self, mirrored: bool = False) -> bool:
        return self.step.has_effects(mirrored)

    def custom_adjoints_used(self) -> tuple[str, ...]:
        return self.step.custom_adjoints_used()

    def opaque_text(self, direction: Direction) -> str:
        S = self.loop.n_state
        f = self.loop.step
        op = "-=" if direction.inverse != direction.sweep else "+="
        what = (f"checkpointed loop under {self.label}: {', '.join(f.params[:S])} {op} the "
                f"state after its steps from {', '.join(f.params[S:2 * S])}")
        return what + (", with the adjoints carried back through every step"
                       if direction.sweep else "")

    def _error(self, message: str, variable: str | None = None,
               cls: type[ReversibilityTypeError] = ReversibilityTypeError) -> ReversibilityTypeError:
        line = self.loop.loc.line
        return cls(
            f"{message}\n  in the checkpointed loop at {ir.shown_file(self.ir.filename)}, line {line}: "
            f"{self.ir.line_text(line).strip()}", variable=variable, function=self.ir.name,
            filename=self.ir.filename, lineno=line, stage="types")

    def _step_signature(self, signature: tuple[VarType, ...]) -> tuple[VarType, ...]:
        """The step's argument types, after checking the loop's: float (or complex) array
        states, a pair of one type each, int bounds."""
        S = self.loop.n_state
        params = self.ir.params
        for k in range(S):
            for name, t in ((params[k], signature[k]), (params[S + k], signature[S + k])):
                if not t.is_array or t.dtype not in loop_code.DIFFERENTIABLE:
                    raise self._error(f"the state `{name}` of a checkpointed loop must be a "
                                      f"float (or complex) array, got {t} (wrap a scalar state "
                                      "in a 1-element array)", name)
            if signature[k] != signature[S + k]:
                raise self._error(f"the new state `{params[k]}` ({signature[k]}) and the old "
                                  f"state `{params[S + k]}` ({signature[S + k]}) of a "
                                  "checkpointed loop must have the same type", params[k])
        for t in signature[2 * S:2 * S + 3]:
            if t != VarType("int"):
                raise self._error(f"the max_steps of a checkpointed while loop takes an int, "
                                  f"got {t}" if self.cond is not None else
                                  f"the range of a checkpointed loop takes ints, got {t}")
        return (*signature[:2 * S], VarType("int"), *signature[2 * S + 3:])

    def _cond_signature(self, signature: tuple[VarType, ...]) -> tuple[VarType, ...]:
        """A while loop's condition's argument types: its flag, the old state, the free
        variables."""
        S = self.loop.n_state
        return (VarType("bool"), *signature[S:2 * S], *signature[2 * S + 3:])

    def _refuse_writes(self) -> None:
        S = self.loop.n_state
        f = self.loop.step
        read_only = set(f.params[S:])
        changed = sorted(self.step.written_params() & read_only)
        if changed:
            n = changed[0]
            role = ("the loop variable" if n == f.params[2 * S] else "the old state"
                    if n in f.params[S:2 * S] else "a variable read from around the loop")
            raise self._error(
                f"the body of this checkpointed loop changes `{n}`, {role}: its strategy runs "
                "the body many times and in its own order, so a step may change only the new "
                f"state ({', '.join(f.params[:S])}) and ancillas it releases itself (carry a "
                "running total as part of the state)", n)

    def _callees(self, direction: Direction, check: bool, backend: str,
                 step_sig: tuple[VarType, ...], step_off: frozenset[str],
                 schedule: Any, signature: tuple[VarType, ...]) -> dict[str, tuple[Program, tuple]]:
        """The kernels the loop's code calls: symbol -> (program, its compile key)."""
        step_check = check and self.step.check
        step_forward = FORWARD
        if ((direction.sweep or direction.before_sweep) and step_check
                and type(self.step) is Program and self.step.custom_adjoint() is None):
            # every forward step of the sweep's schedule is followed by that step's own
            # reverse sweep, from the same state, which checks what its run would: the
            # lean run (Direction.before_sweep), as TimeLoop's gradient drivers take it.
            # So are the steps of the loop's run before the caller's sweep: that sweep
            # runs the loop's, whose schedule steps again from the same first state
            step_forward = FORWARD.before_its_sweep()
        if direction.tangent:  # (jvp: each step's tangent kernel, one after the other)
            step_forward = FORWARD.with_tangent()
        out = {loop_code.FORWARD_SYMBOL: (self.step, (step_forward, backend, step_check, step_sig))}
        if direction.sweep and schedule.uncomputes:
            out[loop_code.INVERSE_SYMBOL] = (self.step, (INVERSE, backend, step_check, step_sig))
        if direction.sweep:
            out[loop_code.BACKWARD_SYMBOL] = (self.step, (BACKWARD, backend, step_check, step_sig,
                                                          1, step_off))
        if self.cond is not None:
            out[loop_code.COND_SYMBOL] = (self.cond, (FORWARD, backend, check and self.cond.check,
                                                      self._cond_signature(signature)))
        return out

    def generate(self, direction: Direction, backend: str, check: bool,
                 signature: tuple[VarType, ...], compile_callees: bool = True, lanes: int = 1,
                 inactive: frozenset[str] = frozenset(), deps: list | None = None,
                 shapes: tuple | None = None):
        if backend == "cuda":
            raise self._error("checkpointed loops do not run on the GPU yet (device='cuda'); "
                              "use the CPU for this function")
        tangent = direction in (FORWARD.with_tangent(), INVERSE.with_tangent())
        if not (direction.is_run or tangent
                or direction in (BACKWARD, pipeline.BACKWARD_INVERSE)):
            raise self._error("second derivatives (hvp, hessian) through a checkpointed loop "
                              "are not supported yet: differentiate the function once, in "
                              "reverse mode (grad, vjp) or forward mode (jvp)")
        if lanes != 1:
            raise self._error("a checkpointed loop carries one adjoint seed at a time: take a "
                              "Jacobian row by row (revbench.vjp) rather than all at once",
                              cls=OneSeedAtATime)
        step_sig = self._step_signature(signature)
        self._refuse_writes()
        S = self.loop.n_state
        f = self.loop.step
        step_off = frozenset(inactive) & set(f.params[2 * S + 1:])
        step_active = tuple(p for p, t in zip(f.params, step_sig)
                            if t.dtype in loop_code.DIFFERENTIABLE and p not in step_off)
        schedule = self.loop.strategy.loop_schedule()
        line = self.loop.loc.line
        # (a while loop runs the online schedule, which asks the condition before each step)
        actions = schedule.actions if self.cond is None else schedule.online
        condition = None if self.cond is None else self.ir.line_text(line).strip().rstrip(":")
        injected: dict[str, object] = {}
        calls: dict[str, str] = {}  # symbol -> the content key of the code it runs
        if compile_callees:
            injected.update(loop_code_runtime())
            for symbol, (prog, key) in self._callees(direction, check, backend, step_sig,
                                                     step_off, schedule, signature).items():
                sub = prog.compile(*key)
                injected[symbol] = sub.run
                calls[symbol] = sub.generated.key
                if deps is not None:
                    deps.append((None, prog, key, sub))
        gen = loop_code.generate(self.ir.name, self.ir.params, signature, S, direction, check,
                                 schedule.knob, frozenset(inactive), f.params, step_active,
                                 line, self.label, self.atol, self.rtol,
                                 schedule.uncomputes, schedule_name(actions), condition,
                                 None if schedule.disk is None
                                 else (getattr(self.loop.strategy, "directory", None),),
                                 calls=calls,
                                 tangents=tuple(tan_name(p) for p, t in zip(self.ir.params,
                                                                            signature)
                                                if t.dtype == "float") if tangent else ())
        if not compile_callees:
            return gen, injected
        target = targets.target(backend)
        injected[loop_code.ACTIONS_SYMBOL] = target.helper(actions)
        injected[loop_code.SLOTS_SYMBOL] = target.helper(schedule.slots)
        if schedule.disk is not None:
            injected[loop_code.DISK_SYMBOL] = target.helper(schedule.disk)
        if schedule.disk is not None:
            import numba

            injected[loop_code.DISK_STORE_SYMBOL] = schedule.disk_store
            injected[loop_code.OBJMODE_SYMBOL] = numba.objmode
        return gen, injected


@dataclass
class DerivativeProgram(Program):
    """A derivative taken inside reversible code (:class:`ir.Derivative`): a reversible
    function of ``(accumulator, *f's arguments[, *tangents])`` that adds the gradient
    (``revbench.grad``) or the tangent of an output (``revbench.jvp``) into the
    accumulator, and changes nothing else.  Its directions are written as IR of calls of
    ``f`` (:mod:`revbench.transforms.derivative`) instead of derived by the passes.  ``f``
    is looked up through the enclosing function each time (``target``), so a redefined
    ``f`` (a notebook cell run again) is what its next compilation uses.  The debugger
    shows it as one step."""

    opaque = True
    parent: Program | None = None
    kind: str = "grad"
    target: str = ""  # f (or the module's name for `revbench.grad(f, ...)`), as written
    loss: str = ""  # grad: the loss; jvp: the output
    wrt: tuple[str, ...] = ()  # grad: (wrt,); jvp: the arguments given a tangent
    site: ir.Loc = ir.NO_LOC

    def restores_only_for_checks(self, check: bool) -> bool:
        return False  # (its directions are written as IR of calls, not derived)

    @classmethod
    def of(cls, parent: Program, callee: str) -> DerivativeProgram:
        kind, target, loss, wrt = ir.parse_derivative_callee(callee)
        f = parent.ir
        # (its name is part of generated identifiers: `grad_f_by_y`, `jvp_f_along_x_y`)
        joined = "_".join(wrt)
        name = (f"grad_{target.replace('.', '_')}_by_{joined}" if kind == "grad" else
                f"jvp_{target.replace('.', '_')}_along_{joined}")
        func = ir.Function(name, (), (), f.filename, f.firstlineno, f.source_lines)
        prog = cls(func, check=parent.check, backend=parent.backend, atol=parent.atol,
                   rtol=parent.rtol, namespace=parent.namespace, closure=parent.closure,
                   parent=parent, kind=kind, target=target, loss=loss, wrt=wrt)
        along = tuple(along_param(p) for p in wrt) if kind == "jvp" else ()
        prog.ir = replace(func, params=(ACCUMULATOR, *prog.function().params, *along))
        # its statements carry the line of the derivative's first use: messages show it
        prog.site = next((d.loc for st in ir.walk_stmts(f.body)
                          for e in ir.statement_expressions(st) for d in ir.walk_expr(e)
                          if isinstance(d, ir.Derivative) and ir.derivative_callee(d) == callee),
                         ir.NO_LOC)
        return prog

    def function(self) -> ProgramView:
        """``f``'s view, as its name means now."""
        obj = self.parent.lookup(self.target)
        spec = getattr(obj, "revbench_derivative", None)  # dfdy = revbench.grad(f, ...)
        if spec is not None:
            obj = spec[0]
        if not isinstance(obj, ProgramView) or obj._direction != FORWARD:
            raise self._error(f"`{self.target}` is no longer a reversible function (it was one "
                              "when the function differentiating it was defined): define that "
                              "function again")
        missing = [p for p in (self.loss, *self.wrt) if p not in obj.params]
        if missing:
            raise self._error(f"`{self.target}` was redefined with the arguments {obj.params}, "
                              f"which have no `{missing[0]}`: define the function "
                              "differentiating it again")
        return obj

    def lookup(self, dotted: str) -> Any:
        return self.function() if dotted == self.target else super().lookup(dotted)

    def _error(self, message: str) -> ReversibilityTypeError:
        p, line = self.parent.ir, self.site.line
        return ReversibilityTypeError(f"{message}\n  " + ir.where(p.name, p.filename, line,
                                                                  p.line_text(line).strip()),
                                      function=p.name, filename=p.filename, lineno=line or None,
                                      stage="types")

    def written_params(self) -> frozenset[str]:
        return frozenset({ACCUMULATOR})

    def _refuse_on_gpu(self, rule: adjoint_rules.AdjointRule | None) -> None:
        raise self._error(f"on the GPU (device='cuda'): a derivative taken inside reversible "
                          f"code ({self.ir.name}) does not run there yet; use the CPU for it")

    def has_effects(self, mirrored: bool = False) -> bool:
        return self.function()._program.has_effects(mirrored)

    def custom_adjoint(self) -> adjoint_rules.AdjointRule | None:
        return None

    def custom_adjoints_used(self) -> tuple[str, ...]:
        return self.function()._program.custom_adjoints_used()

    def opaque_text(self, direction: Direction) -> str:
        op = "-=" if direction.inverse != direction.sweep else "+="
        if self.kind == "jvp":
            what = (f"the tangent of {self.target}'s `{self.loss}` along the tangents of "
                    + ", ".join(f"`{p}`" for p in self.wrt))
        else:
            what = f"the gradient of {self.target}'s `{self.loss}` with respect to `{self.wrt[0]}`"
        return f"{op} {what}" + (f", with the adjoints carried back through {self.target}'s "
                                 "second derivatives" if direction.sweep else "")

    def typed(self, direction: Direction, signature: tuple[VarType, ...], lanes: int = 1,
              inactive: frozenset[str] = frozenset()):
        f = self.function()
        prog = f._program
        what = "gradient" if self.kind == "grad" else "Jacobian-vector product"
        if prog.custom_adjoint() is not None and not direction.is_run:
            raise self._error(f"`{self.target}` has a custom adjoint, which gives first "
                              f"derivatives only: differentiating a program holding its {what} "
                              "needs its second derivatives")
        allowed = (FORWARD, INVERSE, BACKWARD, pipeline.BACKWARD_INVERSE,
                   FORWARD.with_tangent(), INVERSE.with_tangent())
        if direction not in allowed:
            once = "grad, vjp, jacobian, jvp"
            raise self._error(f"a {what} taken inside reversible code can be differentiated once "
                              f"more -- {once} of the function holding it -- but not twice: "
                              f"{direction.name} would need third derivatives of {self.target}")
        output = signature[1 + f.params.index(self.loss)] if self.kind == "jvp" else None
        if direction.tangent and output is not None and output.is_array:
            raise self._error(f"a Jacobian-vector product of an array (`{self.loss}` of "
                              f"{self.target}) taken inside reversible code cannot be "
                              "differentiated in forward mode (jvp, hvp): take the tangent of "
                              "one float output (a scalar), or differentiate the function "
                              "holding it by grad, vjp or jacobian")
        params = f.params
        loss = params.index(self.loss)
        build = GradientIR(self.target, params, signature[1:1 + len(params)], loss,
                           params.index(self.wrt[0]) if self.kind == "grad" else loss,
                           prog.written_params(), self.site,
                           self.wrt if self.kind == "jvp" else ())
        runs = build.run if self.kind == "grad" else build.jvp_run
        run = replace(self.ir, body=runs(direction.inverse))
        if direction.is_run:
            return infer(run, signature)
        if direction.tangent:
            extra = tuple((tan_name(p), t) for p, t in zip(self.ir.params, signature)
                          if t.dtype == "float")
            body = (build.tangent if self.kind == "grad" else build.jvp_tangent)(
                direction.inverse)
        else:
            self.refuse_written_inactive(inactive)
            extra = adjoint_params(infer(run, signature), lanes, frozenset(inactive))
            names = {n for n, _ in extra}
            active = [p for p in self.ir.params[1:] if adj_name(p) in names
                      or lane_name(adj_name(p), 0) in names]
            sweeps = build.sweep if self.kind == "grad" else build.jvp_sweep
            body = sweeps(direction.inverse, lanes, active)
        func = replace(self.ir, params=self.ir.params + tuple(n for n, _ in extra), body=body)
        return infer(func, signature + tuple(t for _, t in extra))


def loop_code_runtime() -> dict[str, object]:
    """What every loop kernel calls besides its step and schedule: Ctrl-C's test."""
    from revbench.backends.runtime import Interrupted, interrupted

    return {loop_code.INTERRUPTED_SYMBOL: interrupted, loop_code.INTERRUPT_SYMBOL: Interrupted}


def schedule_name(actions: Any) -> str:
    """How a loop kernel names its schedule: the generator, and a digest of its code (a
    kernel compiled with an older schedule is then another module)."""
    from revbench.backends.numba_backend import helper_fingerprint

    return f"{actions.__module__}.{actions.__qualname__} ({helper_fingerprint(actions)})"


def lookup_name(dotted: str, namespace: Mapping[str, Any], closure: Mapping[str, Any]) -> Any:
    """What ``dotted`` names for a function with this closure and namespace
    (then the builtins), or ``_MISSING``."""
    head, *rest = dotted.split(".")
    if head in closure:
        obj = closure[head]
    elif head in namespace:
        obj = namespace[head]
    else:
        obj = getattr(builtins, head, _MISSING)
    for a in rest:
        obj = getattr(obj, a, _MISSING) if obj is not _MISSING else _MISSING
    return obj


def _kind_of(obj: Any) -> str:
    """What a thing called like a reversible function is, in a user's words."""
    module = getattr(obj, "__module__", None) or type(obj).__module__ or ""
    if module.split(".")[0] == "numpy":
        return "NumPy function"
    return type(obj).__name__


_MISSING = object()
_local = threading.local()


def _in_progress() -> set:
    if not hasattr(_local, "guard"):
        _local.guard = set()
    return _local.guard


def _cause_finder(func: ir.Function):
    """What a failed check's message adds about its cause, from the forward program's IR
    (:mod:`revbench.lang.hints`): for a dirty ancilla, the statement that broke its
    uncompute."""
    def cause(kind: str, var: str, line: int) -> str:
        return hints.ancilla_culprit(func, var, line) if kind == "ancilla" else ""

    return cause


def _lean_callee(prog: Program, direction: Direction, types: tuple[VarType, ...]) -> Direction:
    """A callee's run inside a run that a reverse sweep follows (``before_sweep``), as the
    lean run too: the caller's sweep runs the callee's own sweep (or its checked inverse)
    for that call, from the same values, and checks there what the callee's ``del``s would
    have -- so a checkpointed loop's forward steps skip a ``~routine`` inside the step's
    callees as ``TimeLoop``'s do.  A checkpointed loop called in such a run runs its steps
    lean too (its sweep steps again from the same state and sweeps each step).  Not for an
    external function's or a custom adjoint's callee (their sweeps do not repeat the run's
    checks), nor where this process has compiled the callee's full run for these types
    already (reused: no second compile)."""
    if (not direction.is_run or type(prog) not in (Program, LoopProgram)
            or prog.custom_adjoint() is not None
            or prog.has_compiled(direction, types)):
        return direction
    return direction.before_its_sweep()

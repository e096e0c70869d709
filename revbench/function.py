"""``@reversible`` and the reversible function object users hold.

A :class:`ReversibleFunction` is a *view* of a :class:`~revbench.compiler.Program`
in one direction.  ``f.inverse`` (``~f``) is the other view of the same
program, so ``~~f is f``.  Calling a view checks the arguments, compiles the
specialisation it needs (once), runs it and returns all arguments' final
values.  With checks on, arrays are snapshotted first and restored if a
check fails, so a failed call loses none of the caller's data.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import io
import linecache
import re
import sys
from collections import ChainMap
from collections.abc import Callable
from itertools import combinations
from typing import Any, overload

import numpy as np

from revbench import tiering
from revbench.backends import targets
from revbench.backends.python_backend import Deadline, with_deadline
from revbench.backends.runtime import TABLES, CheckFailed, to_user_error
from revbench.compiler import BACKENDS, Program, ProgramView, lookup_name
from revbench.config import check_tolerance, get_tolerance
from revbench.debugging.explain import Explanation, explain_program
from revbench.lang import ir
from revbench.lang.check import check_calls, check_function
from revbench.lang.errors import (
    SHAPE_MESSAGE,
    ReversibilityError,
    ReversibilitySyntaxError,
    ReversibilityTypeError,
    ShapeMismatchError,
)
from revbench.lang.ir import Print, walk_stmts
from revbench.lang.parse import SourceInfo, parse_definition, parse_function
from revbench.lang.types import VarType, guess_signature, python_scalar, type_of_value
from revbench.transforms.pipeline import FORWARD, Direction

SOURCE_KINDS = ("forward", "inverse", "adjoint")
#: scalar types whose values may lie beyond int64 (checked on every call)
_WIDE_INTS = (int, np.uint64)
#: argument (type, dtype, ndim, writeable) key -> signature; skips re-deriving it per call
_FAST_SIGNATURES: dict[tuple, tuple[VarType, ...]] = {}


#: how long a failed compiled call may run again on the Python backend to find its line
REPLAY_SECONDS = 2.0
#: what compiled code raises without the user's line (an ``assert`` names its own line)
_UNLOCATED = (IndexError, ZeroDivisionError)


class ReversibleFunction(ProgramView):
    """A function written in the reversible language (see ``docs/language.md``).

    Call it to run forward; ``f.inverse`` / ``~f`` runs it backwards.
    """

    def __init__(self, program: Program, direction: Direction = FORWARD):
        self._program = program
        self._direction = direction
        program.views[direction] = self
        name = program.ir.name
        self.__name__ = f"~{name}" if direction.inverse else name
        self.__qualname__ = self.__name__

    # -- views -------------------------------------------------------------------
    @property
    def inverse(self) -> ReversibleFunction:
        """The function that undoes this one (``~f``)."""
        other = self._direction.flipped()
        view = self._program.views.get(other)
        return view if view is not None else ReversibleFunction(self._program, other)

    def __invert__(self) -> ReversibleFunction:
        return self.inverse

    def __reduce__(self):
        """Pickled by value (its IR, options and the values it reads), for another process
        to rebuild: :mod:`revbench.transport`."""
        from revbench.transport import rebuild, state_of

        return rebuild, (type(self), *state_of(self._program), self._direction)

    @property
    def name(self) -> str:
        return self._program.ir.name

    @property
    def is_inverse(self) -> bool:
        return self._direction.inverse

    @property
    def check(self) -> bool:
        return self._program.check

    @property
    def backend(self) -> str:
        return self._program.backend

    @property
    def fastmath(self) -> bool:
        return self._program.fastmath

    def __revbench_digest__(self) -> str:
        """What this function is, for the digest of code that uses it
        (:mod:`revbench.rules.digest`): its program, direction and options."""
        p = self._program
        return repr((p.ir, self._direction.name, p.check, p.backend, p.fastmath, p.atol, p.rtol))

    def __repr__(self) -> str:
        p = self._program
        extra = ("" if p.check else ", check=False") + (", fastmath=True" if p.fastmath else "")
        return f"<reversible function {self.__name__}({', '.join(p.ir.params)}) [{p.backend}{extra}]>"

    # -- running -------------------------------------------------------------------
    def signature_of(self, args: tuple, on_copies: bool = False) -> tuple[VarType, ...]:
        """The types of a call with ``args``, refusing what the call cannot take: a
        read-only array the function updates (unless ``on_copies``: the caller -- the
        derivatives' API -- runs on copies of the arrays it changes), arrays sharing memory."""
        p = self._program
        params = p.ir.params
        if len(args) != len(params):
            raise TypeError(f"{self.__name__}() takes {len(params)} argument(s) "
                            f"({', '.join(params)}) but {len(args)} were given")
        # (the dtype itself, not its number: a big-endian >f8 has float64's number)
        key = tuple((type(a), a.dtype, a.ndim, a.flags.writeable) if isinstance(a, np.ndarray)
                    else type(a) if type(a) not in _WIDE_INTS or -(2**63) <= a < 2**63
                    else a for a in args)  # an int beyond int64: the slow path refuses it
        sig = _FAST_SIGNATURES.get(key)
        if sig is None:
            sig = self._slow_signature(args)
            _FAST_SIGNATURES[key] = sig
        arrays = [(n, a) for n, a in zip(params, args) if isinstance(a, np.ndarray)]
        for n, a in arrays:  # (per function: the signature cache above is shared)
            if not on_copies and not a.flags.writeable and n in p.written_params():
                raise ReversibilityTypeError(
                    f"argument `{n}` of {self.__name__} is a read-only array, and "
                    f"{self.__name__} updates `{n}` in place (pass a copy)",
                    variable=n, function=self.name, stage="call")
        if len(arrays) > 1:
            for (n1, a1), (n2, a2) in combinations(arrays, 2):
                if np.may_share_memory(a1, a2):
                    raise ReversibilityError(
                        f"arguments `{n1}` and `{n2}` of {self.__name__} share memory: updating "
                        "one would change the other, which is not reversible (pass a copy)",
                        variable=n2, function=self.name, stage="call")
        return sig

    def _slow_signature(self, args: tuple) -> tuple[VarType, ...]:
        params = self._program.ir.params
        sig = []
        for name, a in zip(params, args):
            t = type_of_value(a)
            if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) \
                    and not -(2**63) <= int(a) < 2**63:
                shown = str(a) if int(a).bit_length() < 128 else f"of {int(a).bit_length()} bits"
                raise ReversibilityTypeError(
                    f"argument `{name}` of {self.__name__} is the integer {shown}, which does not "
                    "fit in int64 (-2**63 to 2**63 - 1): revbench integers are 64-bit and never "
                    "wrap around; pass a float for larger numbers",
                    variable=name, function=self.name, stage="call")
            if t is None:
                raise ReversibilityTypeError(
                    f"argument `{name}` of {self.__name__}: expected an int, float, bool or "
                    f"complex number, or a NumPy array of int64, float64, bool or complex128; "
                    f"got {_describe(a)}", variable=name, function=self.name, stage="call")
            if isinstance(a, np.ma.MaskedArray):
                raise ReversibilityTypeError(
                    f"argument `{name}` of {self.__name__} is a masked array, whose mask "
                    "compiled code would ignore: pass its data (`a.filled(value)` or "
                    "`a.data`) and handle the mask in your program",
                    variable=name, function=self.name, stage="call")
            sig.append(t)
        return tuple(sig)

    def compiled(self, signature: tuple[VarType, ...]):
        p = self._program
        return p.compile(self._direction, p.backend, p.check, signature)

    def _code_for_call(self, signature: tuple[VarType, ...], direction: Direction | None = None,
                       lanes: int = 1, inactive: frozenset[str] = frozenset()):
        """What a call runs: the compiled code, or -- with tiering on and the code not yet
        compiled -- a :class:`revbench.tiering.Tiered` choice made per call."""
        p = self._program
        direction = direction or self._direction
        compiled = p.compile(direction, p.backend, p.check, signature, lanes, inactive)
        if p.backend != "numba" or compiled.tier_state == "done" or not tiering.enabled():
            return compiled
        if not compiled.tier_state:
            compiled.tier_state = "tier" if _tierable(p, compiled) else "done"
            if compiled.tier_state == "done":
                return compiled
        return tiering.Tiered(compiled, lambda: p.compile(direction, "python", p.check,
                                                          signature, lanes, inactive),
                              f"{p.ir.name} ({direction})")

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        __tracebackhide__ = True  # pytest (and IPython, above the last frame) skip this frame
        if kwargs:
            raise positional_only(self.__name__, self.params, kwargs)
        return self._run(args)

    def _run(self, args: tuple, before_sweep: bool = False) -> tuple:
        """The call; ``before_sweep``: a reverse sweep follows at once (``grad``), which
        checks the ancillas' ``del`` again -- a checked run can leave those checks, and
        the uncomputation only they read, to it (:meth:`_run_direction`)."""
        __tracebackhide__ = True
        try:
            sig = self.signature_of(args)
            compiled = self._code_for_call(sig, self._run_direction(sig) if before_sweep else None)
        except (ReversibilityError, TypeError) as exc:
            # A user's mistake: show where they called, not the compiler's insides.
            raise exc.with_traceback(None) from None
        out = self._execute(compiled, args)
        return tuple(orig if isinstance(orig, np.ndarray) else python_scalar(v)
                     for orig, v in zip(args, out))

    def _run_direction(self, signature: tuple[VarType, ...]) -> Direction:
        """The run a reverse sweep follows: with checks on, the lean one
        (:attr:`Direction.before_sweep`) -- unless this process compiled the plain run
        already and not the lean one (a forward call, then ``grad``: one compilation)."""
        p = self._program
        lean = _lean(p, self._direction)
        if p.has_compiled(self._direction, signature) and not p.has_compiled(lean, signature):
            return self._direction
        return lean

    def _execute(self, compiled, args: tuple) -> tuple:
        """Run compiled code on ``args``; with checks on, arrays are restored if it fails."""
        __tracebackhide__ = True
        p = self._program
        atol, rtol = get_tolerance()
        call_args = [a.item() if isinstance(a, np.generic) else a for a in args]
        tiered, job = compiled, None
        if isinstance(compiled, tiering.Tiered):
            compiled, job = tiered.choose([*call_args, atol, rtol])
            if job is None:  # compiled: later calls need not ask
                compiled.tier_state = "done"
        snapshots = []
        if p.check or job is not None:
            # so a failed check (or an interpreted run stopped for the compiled code) loses
            # nothing: keep what the code may overwrite
            written = p.written_params()
            snapshots = [(a, a.copy()) for name, a in zip(p.ir.params, args)
                         if isinstance(a, np.ndarray) and name in written]
            if job is not None:  # a reverse sweep's adjoints, beyond the parameters
                snapshots += [(a, a.copy()) for a in args[len(p.ir.params):]
                              if isinstance(a, np.ndarray)]
        try:
            run = _callable(compiled, p.backend)
            if job is None and p.backend == "numba":  # compiled: no interpreted loop to watch
                return run(*call_args, atol, rtol)
            with tiering.watching(job):
                return run(*call_args, atol, rtol)
        except tiering.Promote:  # the compiled code is ready: it runs the call instead
            _restore(snapshots)
            return self._execute(tiered.compiled, args)
        except CheckFailed as exc:
            _restore(snapshots)
            error = to_user_error(exc, _tables_of(compiled))
        except KeyboardInterrupt:  # Ctrl-C, in Python or noticed by compiled code
            _restore(snapshots)
            raise KeyboardInterrupt from None
        except Exception as exc:
            _restore(snapshots)
            if _interrupted_on_return(exc):
                raise KeyboardInterrupt from None
            if p.backend == "numba":
                from revbench.backends.numba_backend import is_numba_error, translate_numba_error

                if is_numba_error(exc):
                    raise translate_numba_error(exc, self.__name__) from None
                replayed = (self._replay_on_python(args, type(exc), compiled)
                            if p.replay_errors and isinstance(exc, _UNLOCATED) else None)
                if replayed is not None:  # the same error, with its line, index and size
                    raise replayed.with_traceback(None) from None
            # (an assert's own message names its line: `... (in f, line 7)`)
            located = isinstance(exc, AssertionError) and re.search(r"\bline \d+\)", str(exc))
            if located and not isinstance(exc, ReversibilityError) and SHAPE_MESSAGE.match(str(exc)):
                # (a whole-array statement's sizes: an error of the program's arrays, as
                # every shape mismatch is, and still the AssertionError it was)
                raise ShapeMismatchError(str(exc), function=self.__name__) from None
            if not add_user_line_note(exc) and hasattr(exc, "add_note") and not located:
                # compiled code (an IndexError, a ZeroDivisionError, ...): no line to show,
                # but the message must still say where it came from
                exc.add_note(f"in reversible function {self.__name__}" + (
                    " (compiled code does not know its lines: run it with backend='python' to "
                    "see the line)" if p.backend == "numba" else ""))
            raise
        # raised outside the handler, so the generated code's CheckFailed is not its
        # __context__ (tools such as hypothesis tell failures apart by their context)
        raise error

    def python_twin(self) -> ReversibleFunction:
        """This function on the Python backend (itself, if it is there already), which
        knows the line of every error: what a compiled error is replayed on."""
        p = self._program
        if p.backend == "python":
            return self
        twin = self.__dict__.get("_python_twin")
        if twin is None:
            twin = ReversibleFunction(
                Program(p.ir, check=p.check, backend="python", fastmath=p.fastmath, atol=p.atol,
                        rtol=p.rtol, namespace=p.namespace, closure=p.closure), self._direction)
            self._python_twin = twin
        return twin

    def _replay_on_python(self, args: tuple, kind: type, failed=None) -> BaseException | None:
        """Compiled code raises an ``IndexError`` or a ``ZeroDivisionError`` without a line
        (Numba's says only "index is out of bounds"): run the same call again on the Python
        backend, on copies of ``args`` (restored already), and return its error of the same
        kind -- NumPy's full message, noted with the user's line -- or, for a float divided
        by zero, the checked error at the update that took the infinite result.  None if it
        does not fail the same way within ``REPLAY_SECONDS`` (then the compiled error is
        raised as it is).  ``failed``: the compiled code that raised, whose program (a
        ``jvp``'s tangents, a sweep's adjoints) is the one replayed; else this view's run."""
        twin = self.python_twin()
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        atol, rtol = get_tolerance()
        try:
            request = getattr(failed, "request", ())
            if request:
                direction, check, signature, lanes, inactive = request
                compiled = twin._program.compile(direction, "python", check, signature, lanes,
                                                 inactive)
            else:
                compiled = twin._code_for_call(twin.signature_of(copies))
            call_args = [a.item() if isinstance(a, np.generic) else a for a in copies]
            with contextlib.redirect_stdout(io.StringIO()):  # its prints were printed once
                with_deadline(lambda: compiled.run(*call_args, atol, rtol), REPLAY_SECONDS)
        except Deadline:
            return None
        except Exception as exc:
            if type(exc) is kind and add_user_line_note(exc):
                return exc
            if kind is ZeroDivisionError and isinstance(exc, CheckFailed):
                # NumPy's float division gives inf there, which the checks catch at the
                # line of the update that takes it: the error both backends then raise
                return to_user_error(exc, _tables_of(compiled))
        return None

    def inactive_for(self, wrt: Any) -> frozenset[str]:
        """The arguments a reverse sweep of ``wrt`` (names or positions; None: every
        argument) leaves without an adjoint: the read-only ones outside it (the gradient
        flows through every argument the function changes)."""
        if wrt is None:
            return frozenset()
        keep = {self.params[param_index(self, w, "wrt")] for w in as_names(wrt)}
        written = self._program.written_params()
        return frozenset(p for p in self.params if p not in keep and p not in written)

    def kernel(self, kind: str = "forward", *example_args: Any, lanes: int = 1,
               wrt: Any = None):
        """The compiled code itself, for calling from your own ``@numba.njit`` loops.

        ``kind`` is ``"forward"``, ``"inverse"`` or ``"backward"`` (the reverse
        sweep of AD), relative to this view.  The kernel takes the arguments (for
        ``"backward"``: the arguments *after* the forward run, then one adjoint per
        float or complex argument, in order), then ``atol, rtol``, and returns all
        of them as a tuple.  ``lanes=L`` (backward only) carries L adjoint seeds at
        once: the adjoints come lane by lane (all of lane 0, then lane 1, ...).
        ``wrt`` (backward only) names the arguments to differentiate with respect
        to: read-only float arguments outside it get no adjoint (and no adjoint code).
        Arrays are updated in place.  No argument checks, no
        data restoring on failure: that is the caller's job here.  Its runtime
        checks raise ``revbench.backends.runtime.CheckFailed``.
        """
        kinds = ("forward", "inverse", "backward")
        if kind not in kinds:
            raise ValueError(f"kind must be one of {kinds}, got {kind!r}")
        if not example_args:
            raise TypeError("kernel() needs example arguments to fix the argument types")
        sig = self.signature_of(example_args)
        if not (isinstance(lanes, int) and lanes >= 1) or (lanes > 1 and kind != "backward"):
            raise ValueError("lanes must be a positive int, and only the backward kernel has lanes")
        if wrt is not None and kind != "backward":
            raise ValueError("only the backward kernel takes wrt")
        run = self.compiled_kernel(kind, sig, lanes, self.inactive_for(wrt)).run
        return targets.target(self._program.backend).for_njit(run)

    def compiled_kernel(self, kind: str, signature: tuple[VarType, ...], lanes: int = 1,
                        inactive: frozenset[str] = frozenset(), backend: str | None = None,
                        shapes: tuple | None = None, before_sweep: bool = False,
                        adjoints_only: bool = False):
        """The :class:`~revbench.compiler.Compiled` behind :meth:`kernel` (its ``run`` and
        its generated code's content key), for drivers that generate code calling it
        (``backend="cuda"``: a device function, specialised on the arguments' ``shapes``).

        ``before_sweep``: a forward kernel whose every run the reverse sweep of the same
        step, from the same values, follows (a checkpointing driver's forward steps): with
        checks on it leaves the ancillas' ``del`` checks, and the uncomputation only they
        read, to that sweep (:attr:`Direction.before_sweep`), as ``grad``'s run does.
        ``adjoints_only``: a backward kernel whose caller reads only the adjoints it
        returns, not the arguments it restores (:attr:`Direction.adjoints_only`)."""
        p = self._program
        direction = self._direction.relative(kind)
        if before_sweep and kind == "forward":
            direction = _lean(p, direction)
        if adjoints_only and kind == "backward":
            direction = direction.backward(adjoints_only=True)
        return p.compile(direction, backend or p.backend, p.check, signature, lanes, inactive,
                         shapes)

    # -- introspection -----------------------------------------------------------------
    def source(self, kind: str = "forward", *example_args: Any, wrt: Any = None) -> str:
        """The generated Python source of this function's forward, inverse or adjoint.

        ``kind`` is relative to this view (``(~f).source("forward")`` is f's
        inverse code).  The code depends on the argument types: pass example
        arguments, or the types of the last call (or a guess from the body) are used.
        ``"adjoint"`` is the reverse sweep that ``grad(f, loss, wrt=wrt)`` runs: without an
        adjoint for the read-only arguments outside ``wrt``, and, with ``check=False``,
        without restoring the arguments (nothing reads them after it; ``f.kernel("backward")``
        restores them).
        """
        if kind not in SOURCE_KINDS:
            raise ValueError(f"kind must be one of {SOURCE_KINDS}, got {kind!r}")
        if wrt is not None and kind != "adjoint":
            raise ValueError("only the adjoint takes wrt")
        p = self._program
        direction = self._direction.relative(kind)
        if kind == "adjoint":
            direction = direction.backward(adjoints_only=p.restores_only_for_checks(p.check))
        if example_args:
            sig = self.signature_of(example_args)
        else:
            sigs = [k[3] for k in p._cache if k[1] == p.backend and k[2] == p.check]
            sig = sigs[-1] if sigs else guess_signature(p.ir)
        gen, _ = p.generate(direction, p.backend, p.check, sig, compile_callees=False,
                            inactive=self.inactive_for(wrt))
        return gen.source

    def explain(self, *example_args: Any, loss: str | None = None) -> Explanation:
        """Each source line beside what the inverse and the reverse sweep run for it.

        A table (text, or HTML in a notebook) printed from the compiler's own inverse and
        adjoint IR, without the generated code's checks and plumbing: see
        :mod:`revbench.debugging.explain`.  The adjoint depends on the argument types (integers
        carry no adjoint): pass example arguments, or the last call's types (else a guess
        from the body) are used.  ``loss`` names the adjoints in the headings (``∂y/∂·``).
        ``(~f).explain()`` explains the same program as ``f.explain()``: its source, its
        inverse, its sweep.
        """
        p = self._program
        guessed = False
        if example_args:
            signature = self.signature_of(example_args)
        else:
            sigs = [k[3] for k in p._cache if k[1] == p.backend]
            guessed = not sigs
            signature = sigs[-1] if sigs else guess_signature(p.ir)
        out = explain_program(p, signature, loss=loss)
        if guessed and out.adjoint_note:
            out.adjoint_note += (f" (the argument types were guessed from the body: pass example "
                                 f"arguments, {self.__name__}.explain(...), or call it once first)")
        return out


def _describe(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"a {a.ndim}-D array of {a.dtype}" if a.ndim else "a 0-d array"
    return f"{type(a).__name__} {a!r}" if not isinstance(a, (list, tuple, dict)) else type(a).__name__


def positional_only(name: str, params: tuple[str, ...], kwargs: dict) -> TypeError:
    """The error for keyword arguments: every argument of a reversible function is an
    in-out variable, passed by position."""
    return TypeError(f"{name}() takes its arguments by position ({', '.join(params)}); "
                     f"got keyword argument(s) {', '.join(kwargs)}")


def param_index(f: ReversibleFunction, which: Any, what: str) -> int:
    """The position of ``f``'s argument ``which`` (a name or a position); ``what``
    (``"loss"``, ``"wrt"``, ...) names it in the error."""
    params = f.params
    if isinstance(which, str):
        if which not in params:
            raise ValueError(f"{what} {which!r} is not an argument of {f.__name__}{params}")
        return params.index(which)
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        if not -len(params) <= which < len(params):
            raise ValueError(f"{what} position {which} is out of range for {f.__name__}{params}")
        return int(which) % len(params)
    raise TypeError(f"{what} must be an argument name or position, got {which!r}")


def as_names(which: Any) -> tuple:
    """``outputs=`` / ``wrt=`` as a tuple: one name or position, or a tuple or list of them.
    Anything else is one item, for :func:`param_index` to refuse by name (a float, a dict)."""
    return tuple(which) if isinstance(which, (tuple, list)) else (which,)


def copy_arg(a: Any) -> Any:
    """A copy of an argument that code could change (arrays); scalars as they are."""
    return a.copy() if isinstance(a, np.ndarray) else a


def _tables_of(compiled) -> dict:
    """The check tables of ``compiled`` and of the callees compiled into it, by module."""
    tables: dict = {}
    todo = [compiled]
    while todo:
        c = todo.pop()
        if c.generated.module_key not in tables:
            tables[c.generated.module_key] = c.table
            todo.extend(dep[3] for dep in c.deps)
    return tables


#: the modules of revbench's own functions that generated code calls (the checked
#: arithmetic, digamma, np.sign, ...): both backends run them from the same source
_OWN_HELPERS = frozenset({"revbench.backends.runtime", "revbench.rules.special"})


def _tierable(p: Program, compiled) -> bool:
    """Whether a call of ``compiled`` may run interpreted while it compiles: only code
    whose two backends agree bit for bit and that Numba compiles whenever Python runs it
    (no user function, external function or custom adjoint inside), with no output a
    stopped run would repeat (:mod:`revbench.tiering`)."""
    if p.fastmath:
        return False
    todo, seen = [(p, compiled)], set()
    while todo:
        prog, c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if prog.opaque or prog.custom_adjoint() is not None or any(
                isinstance(st, Print) for st in walk_stmts(prog.ir.body)):
            return False
        for rule in c.generated.globals_needed.values():
            fn = getattr(rule, "user_function", None)
            if fn is not None and getattr(fn, "__module__", "") not in _OWN_HELPERS:
                return False
        todo.extend((dep[1], dep[3]) for dep in c.deps)
    return True


def _interrupted_on_return(exc: BaseException) -> bool:
    """Ctrl-C that arrived while compiled code returned: CPython reports the pending
    ``KeyboardInterrupt`` as a ``SystemError`` ("returned a result with an exception
    set") caused by it."""
    return isinstance(exc, SystemError) and isinstance(
        exc.__cause__ or exc.__context__, KeyboardInterrupt)


def _lean(p: Program, direction: Direction) -> Direction:
    """``direction``'s run as the run a reverse sweep follows at once, where that saves
    work: with checks on (unchecked runs drop the uncomputation anyway), for a derived
    program (not an external function's, nor one with a custom adjoint, whose sweeps do not
    repeat the run's checks)."""
    if p.check and type(p) is Program and p.custom_adjoint() is None:
        return direction.before_its_sweep()
    return direction


def _callable(compiled, backend: str):
    """What runs ``compiled`` from Python: its target's runner (compiled code: the native
    path, :mod:`revbench.backends.native`, which compiles the generated code itself where
    it can and hands everything else to Numba's dispatcher)."""
    return targets.target(backend).runner(compiled.run)


def _restore(snapshots) -> None:
    for arr, saved in snapshots:
        arr[...] = saved


def add_user_line_note(exc: BaseException) -> bool:
    """Point a Python-backend exception at the user's line, not the generated one;
    False when its traceback has no line of generated code to point at."""
    tb = exc.__traceback__
    hit = None
    while tb is not None:
        fname = tb.tb_frame.f_code.co_filename
        if "rbgen_" in fname:
            key = int(fname.rsplit("rbgen_", 1)[1][:15], 16)
            table = TABLES.get(key)
            if table and tb.tb_lineno in table.linemap:
                hit = (table, table.linemap[tb.tb_lineno])
        tb = tb.tb_next
    if hit and hasattr(exc, "add_note"):
        table, line = hit
        exc.add_note(ir.where(table.function, table.filename, line,
                              table.source_lines.get(line, "").strip()))
        return True
    return False


def validate_options(check: Any, backend: Any, atol: Any, rtol: Any, fastmath: Any = False) -> None:
    """Refuse options of ``@reversible``, ``define`` and ``external`` that are not valid."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    for name, v in (("check", check), ("fastmath", fastmath)):
        if not isinstance(v, bool):
            raise TypeError(f"{name} must be True or False, got {v!r}")
    for name, v in (("atol", atol), ("rtol", rtol)):
        if v is not None:
            check_tolerance(name, v)


def _make(ir_func, *, check, backend, atol, rtol, namespace, closure, fastmath: bool = False,
          check_arity: bool = True) -> ReversibleFunction:
    if check_arity:  # calls of the reversible functions defined already (first: a call
        # with one argument too many is that, not the aliasing of its repeated argument)
        check_calls(ir_func, lambda name: lookup_name(name, namespace, closure))
    ir_func = check_function(ir_func)
    prog = Program(ir_func, check=check, backend=backend, fastmath=fastmath,
                   atol=None if atol is None else float(atol),
                   rtol=None if rtol is None else float(rtol),
                   namespace=namespace, closure=closure)
    view = ReversibleFunction(prog)
    return view


@overload
def reversible(fn: Callable) -> ReversibleFunction: ...
@overload
def reversible(*, check: bool = True, backend: str = "numba", atol: float | None = None,
               rtol: float | None = None, fastmath: bool = False
               ) -> Callable[[Callable], ReversibleFunction]: ...


def reversible(fn: Callable | None = None, *, check: bool = True, backend: str = "numba",
               atol: float | None = None, rtol: float | None = None, fastmath: bool = False):
    """Turn a function written in the reversible language into a :class:`ReversibleFunction`.

    ``check=False`` generates code without any runtime check (for speed);
    ``backend="python"`` runs the generated code without compiling it;
    ``atol``/``rtol`` set this function's float tolerance (default: the global one);
    ``fastmath=True`` lets Numba reassociate float sums and fuse multiply-adds in this
    function's own loops (they vectorise; results change in the last bits, so a run
    and its inverse agree to rounding, not exactly: see ``docs/performance.md``).
    Static errors raise :class:`ReversibilitySyntaxError` here, at decoration time.
    """
    validate_options(check, backend, atol, rtol, fastmath)
    if fn is None:
        return functools.partial(reversible, check=check, backend=backend, atol=atol, rtol=rtol,
                                 fastmath=fastmath)
    if isinstance(fn, ReversibleFunction):
        raise TypeError(f"{fn.__name__} is already a reversible function")
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise TypeError(f"@reversible decorates a Python function, got {fn!r}")
    closure = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            closure[name] = cell.cell_contents
        except ValueError:
            pass
    try:
        ir_func = parse_function(fn)
        view = _make(ir_func, check=check, backend=backend, atol=atol, rtol=rtol,
                     fastmath=fastmath, namespace=fn.__globals__, closure=closure)
    except ReversibilitySyntaxError as exc:
        # The error already points at the user's line; the compiler's frames are noise.
        raise exc.with_traceback(None) from None
    view.__doc__ = fn.__doc__
    view.__module__ = fn.__module__
    view.__wrapped__ = fn
    return view


_define_counter = [0]


def define(source: str, namespace: dict[str, Any] | None = None, *, filename: str | None = None,
           check: bool = True, backend: str = "numba", atol: float | None = None,
           rtol: float | None = None, first_line: int = 1, fastmath: bool = False
           ) -> dict[str, ReversibleFunction]:
    """Define reversible functions from source text (every ``def`` in it).

    The source is registered with :mod:`linecache` under ``filename`` so
    errors and tracebacks show its lines.  Each function is added to
    ``namespace`` (if given) and the new functions are returned by name.
    The ``@reversible`` decorator is optional in ``source``.
    """
    validate_options(check, backend, atol, rtol, fastmath)
    if filename is None:
        _define_counter[0] += 1
        filename = f"<revbench-define-{_define_counter[0]}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    ns: dict[str, Any] = namespace if namespace is not None else {}
    if namespace is None:
        ns.update({"np": np, "math": sys.modules["math"]})
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise ReversibilitySyntaxError(exc.msg, filename,
                                       None if exc.lineno is None else exc.lineno + first_line - 1,
                                       None if exc.offset is None else exc.offset - 1,
                                       exc.text, stage="parse") from None
    out: dict[str, ReversibleFunction] = {}
    info = SourceInfo(filename, lines, first_line - 1, 0)
    for node in tree.body:  # refuse what define() does not run before doing anything
        _check_top_level(node, filename, first_line, lines)
    # All or nothing: the functions (and imports) are staged, seen by the later
    # definitions through `view_ns`, and bound in `ns` only once every one is accepted.
    staged: dict[str, Any] = {}
    view_ns = ChainMap(staged, ns)
    defined_here = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    made: list[ReversibleFunction] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            staged.update(_run_import(node, filename, first_line, lines))
            continue
        if not isinstance(node, ast.FunctionDef):
            continue  # a docstring
        opts = dict(check=check, backend=backend, atol=atol, rtol=rtol, fastmath=fastmath)
        for dec in node.decorator_list:
            opts.update(_decorator_options(dec, filename, first_line, lines, opts))
        validate_options(**opts)
        try:
            parsed = parse_definition(node, info, view_ns)
            # (the calls of what is defined already, before the checker: a call with one
            # argument too many is that, not the aliasing of its repeated argument; a name
            # this source defines later is checked after the loop, against that definition)
            check_calls(parsed, lambda name: None if name in defined_here and name not in staged
                        else lookup_name(name, view_ns, {}))
            view = _make(parsed, namespace=ns, closure={}, check_arity=False, **opts)
        except ReversibilitySyntaxError as exc:
            raise exc.with_traceback(None) from None
        staged[node.name] = view
        out[node.name] = view
        made.append(view)
    for view in made:  # calls between them too: every callee of this source is known now
        try:
            check_calls(view._program.ir, lambda name: lookup_name(name, view_ns, {}))
        except ReversibilitySyntaxError as exc:
            raise exc.with_traceback(None) from None
    ns.update(staged)
    return out


#: top-level statements define() refuses, and why (it runs only `def`s and imports)
_TOP_LEVEL_ADVICE = {
    "AsyncFunctionDef": "a reversible function cannot be async: write a plain `def`",
    "ClassDef": "define() defines reversible functions only; define classes in Python itself",
    "Assign": "define() runs no top-level assignments: pass module-level constants in the "
              "namespace instead, e.g. define(source, {\"N\": 3, \"np\": np, \"math\": math})",
    "AnnAssign": "define() runs no top-level assignments: pass module-level constants in the "
                 "namespace instead, e.g. define(source, {\"N\": 3, \"np\": np, \"math\": math})",
    "AugAssign": "define() runs no top-level statements: it defines reversible functions (`def`), "
                 "and the statements belong inside one",
}


def _check_top_level(node: ast.stmt, filename: str, first_line: int, lines: list[str]) -> None:
    """Refuse a top-level statement of define()'s source that it would not run: only
    `def`s, imports (run, binding their names like the functions), docstrings (string
    literals on their own) and `pass` are allowed."""
    if isinstance(node, (ast.FunctionDef, ast.Pass)):
        return
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str):
        return
    if isinstance(node, ast.ImportFrom) and (node.level or any(a.name == "*" for a in node.names)):
        why = ("a relative import has no package to start from here" if node.level
               else "`import *` would bind unknown names")
        raise _top_level_error(node, f"define() cannot run this import: {why}; import names "
                                     "explicitly (`from math import pi`)",
                               filename, first_line, lines)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return
    kind = type(node).__name__
    if kind in _TOP_LEVEL_ADVICE:
        why = _TOP_LEVEL_ADVICE[kind]
    elif isinstance(node, ast.Expr):
        why = ("define() runs no top-level expressions: it defines reversible functions (`def`); "
               "call them after define() returns")
    else:
        why = (f"define() runs no top-level `{kind}` statements: its source holds `def`s of "
               "reversible functions (and imports)")
    raise _top_level_error(node, why, filename, first_line, lines)


def _top_level_error(node: ast.stmt, message: str, filename: str, first_line: int,
                     lines: list[str]) -> ReversibilitySyntaxError:
    line = node.lineno + first_line - 1
    text = lines[node.lineno - 1] if node.lineno <= len(lines) else None
    end = getattr(node, "end_lineno", None)
    return ReversibilitySyntaxError(
        message, filename, line, node.col_offset, text,
        None if end is None else end + first_line - 1, getattr(node, "end_col_offset", None),
        stage="parse")


def _run_import(node: ast.Import | ast.ImportFrom, filename: str, first_line: int,
                lines: list[str]) -> dict[str, Any]:
    """The names an import statement binds (as Python would bind them)."""
    out: dict[str, Any] = {}
    try:
        for alias in node.names:
            if isinstance(node, ast.Import):
                module = importlib.import_module(alias.name)
                if alias.asname:
                    out[alias.asname] = module
                else:
                    head = alias.name.partition(".")[0]
                    out[head] = sys.modules[head]
            else:
                module = importlib.import_module(node.module or "")
                try:
                    out[alias.asname or alias.name] = getattr(module, alias.name)
                except AttributeError:
                    out[alias.asname or alias.name] = importlib.import_module(
                        f"{node.module}.{alias.name}")
    except ImportError as exc:
        raise _top_level_error(node, f"cannot import: {exc}", filename, first_line,
                               lines) from None
    return out


def _decorator_options(dec: ast.expr, filename: str, first_line: int, lines: list[str],
                       defaults: dict[str, Any]) -> dict[str, Any]:
    """The options of a ``@reversible(...)`` decorator in source text; anything else is refused."""
    line = dec.lineno + first_line - 1
    text = lines[dec.lineno - 1] if dec.lineno <= len(lines) else None

    def error(msg: str, node: ast.AST | None = None) -> ReversibilitySyntaxError:
        if node is None or node.lineno == dec.lineno:
            return ReversibilitySyntaxError(msg, filename, line, (node or dec).col_offset, text,
                                            stage="parse")
        at = node.lineno + first_line - 1  # an option on a line of its own
        return ReversibilitySyntaxError(msg, filename, at, node.col_offset,
                                        lines[node.lineno - 1] if node.lineno <= len(lines) else None,
                                        stage="parse")

    target = dec.func if isinstance(dec, ast.Call) else dec
    if ast.unparse(target).rsplit(".", 1)[-1] != "reversible":
        raise error(f"only @reversible can decorate a reversible function, not @{ast.unparse(dec)}")
    opts: dict[str, Any] = {}
    if isinstance(dec, ast.Call) and dec.args:
        raise error("@reversible takes its options by name: "
                    f"@reversible({', '.join(f'{k}=...' for k in defaults)})", dec.args[0])
    for kw in dec.keywords if isinstance(dec, ast.Call) else ():
        if kw.arg not in defaults:
            raise error(f"unknown @reversible option {kw.arg!r}; the options are "
                        f"{', '.join(defaults)}", kw)
        try:
            opts[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise error(f"@reversible option {kw.arg}= must be a literal value", kw.value) from None
        try:
            validate_options(**{**defaults, kw.arg: opts[kw.arg]})
        except (ValueError, TypeError) as exc:
            raise error(f"@reversible({kw.arg}={ast.unparse(kw.value)}): {exc}", kw.value) from None
    return opts

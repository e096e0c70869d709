"""How a reversible function travels to another process (a Dask worker, a process pool).

A :class:`~revbench.function.ReversibleFunction` pickles *by value*: its checked IR (frozen
dataclasses), its options, and the values of the global and closure names its code reads
-- NumPy, ``math``, constants, the reversible functions it calls (each pickled the same
way), a function added with ``revbench.register``.  No source file is needed at the other
end, so a function defined in a notebook cell or a ``%%reversible`` cell travels as well as
one from a module.  The other process rebuilds the function from that and compiles it, or
loads its machine code from the compile cache (the cache is keyed by the generated code,
so a shared cache folder serves every worker).

Why by value: a worker cannot import ``__main__`` or a notebook's cells, and pickling the
live object would drag its compiled code, locks and caches along.  Why a digest: a process
receiving the same function for every task of a sweep rebuilds it once
(:data:`_RECEIVED`), while a *redefined* function -- new code, or a global it reads with a
new value -- has another digest, so a worker never runs the old definition.

The values go through cloudpickle where it is installed (it comes with Dask: it pickles a
helper defined in ``__main__`` by value too), else :mod:`pickle`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import fields, is_dataclass
from typing import Any

#: the programs this process has rebuilt, by digest (one per definition)
_RECEIVED: dict[str, Any] = {}

_NAME = re.compile(r"[A-Za-z_]\w*")

#: the programs being pickled now (a cycle is refused, not recursed into)
_SENDING: set[int] = set()


def _pickler():
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - Dask brings it
        import pickle

        return pickle
    return cloudpickle


def names_read(func: Any) -> set[str]:
    """Every identifier the IR ``func`` mentions (a dotted name's first part), its
    checkpointed loops' functions included: a superset of the globals its code reads."""
    found: set[str] = set()
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, str):
            found.update(m.group(0) for m in _NAME.finditer(node))
        elif isinstance(node, (tuple, list)):
            for item in node:
                visit(item)
        elif is_dataclass(node) and not isinstance(node, type):
            for f in fields(node):
                # (not a function's own name, its file, a message or a printed text)
                if f.name in ("source_lines", "loc", "filename", "message") or (
                        f.name == "name" and hasattr(node, "params")):
                    continue
                value = getattr(node, f.name)
                if f.name == "args" and type(node).__name__ == "Print":
                    value = tuple(a for a in value if not isinstance(a, str))
                visit(value)

    visit(func)
    return found


def state_of(program: Any) -> tuple[str, bytes]:
    """``(digest, payload)`` of a :class:`~revbench.compiler.Program`: what rebuilds it."""
    names = names_read(program.ir)
    namespace = {k: v for k, v in program.namespace.items() if k in names and k != "__builtins__"}
    closure = {k: v for k, v in program.closure.items() if k in names}
    options = {"check": program.check, "backend": program.backend,
               "fastmath": program.fastmath, "atol": program.atol, "rtol": program.rtol}
    if id(program) in _SENDING:  # (a cycle: the code names a function that names it)
        raise TypeError(f"the reversible function {program.ir.name} cannot be sent to another "
                        "process: it reads a function that reads it back")
    _SENDING.add(id(program))
    try:
        payload = _pickler().dumps((program.ir, options, namespace, closure))
    except Exception as exc:
        if isinstance(exc, TypeError) and "cannot be sent" in str(exc):
            raise  # (a function it reads cannot: that one's message says why)
        raise _unpicklable(program, exc) from exc
    finally:
        _SENDING.discard(id(program))
    # (computed at each send: a function's code never changes, the values it reads may)
    return hashlib.sha256(payload).hexdigest(), payload


def _unpicklable(program: Any, exc: Exception) -> TypeError:
    return TypeError(f"the reversible function {program.ir.name} cannot be sent to another "
                     f"process: a value its code reads does not pickle ({exc}); pass that "
                     "value as an argument instead")


def rebuild(cls: type, digest: str, payload: bytes, direction: Any) -> Any:
    """The function (a ``cls``, in ``direction``) that :func:`state_of` described: rebuilt
    once per process and definition."""
    from revbench.compiler import Program

    program = _RECEIVED.get(digest)
    if program is None:
        ir_func, options, namespace, closure = _pickler().loads(payload)
        program = _RECEIVED[digest] = Program(ir_func, namespace=namespace, closure=closure,
                                              **options)
    return program.views.get(direction) or cls(program, direction)

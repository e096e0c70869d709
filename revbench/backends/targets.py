"""What code runs on: one object per target, asked by the compiler and by a call.

A program compiles its generated module for one target, and everything that differs
between targets is a method here, decided in one place rather than by comparing the
backend's name wherever it matters:

* :data:`PYTHON` -- the generated module run by CPython (the debugging backend);
* :data:`COMPILED` -- machine code: revbench's own code generator
  (:mod:`revbench.backends.native`) for every call whose argument types it lowers, and
  Numba's dispatcher for the rest (user ``external`` functions, custom adjoints written in
  Python).  Which of the two runs is decided per call signature, by the native runner, the
  first time those types are called;
* :data:`CUDA` -- device functions for the batched drivers (``device="cuda"``), never
  called from Python.

Each holds: how a generated module is compiled (:meth:`Target.compile`), what generated
code calls for a registered function (:meth:`Target.user_impl`), for one of revbench's own
Python helpers (:meth:`Target.helper`: a checkpointing schedule) and for a custom adjoint
(:meth:`Target.adjoint`), what a call runs (:meth:`Target.runner`), whether compiled code
is in the process (:meth:`Target.ready`), and what a user's own ``@njit`` code can call
(:meth:`Target.for_njit`).  Lower layers only: this module imports the backends, never
the compiler.
"""

from __future__ import annotations

from collections.abc import Callable


class Target:
    """A target of compilation; the base is the Python backend's behaviour."""

    #: the name users give (``backend=``) and the compile key holds
    name: str = "python"
    #: the suffix of its generated modules' names (``rbgen_<key>_<flavour>``)
    flavour: str = "py"
    #: a custom adjoint's call returns a tuple, checked when the caller is typed (Numba)
    adjoint_returns_tuple: bool = False

    def compile(self, gen, injected: dict[str, object], check: bool,
                fastmath: bool = False) -> Callable:
        from revbench.backends.python_backend import compile_python

        return compile_python(gen, injected)

    def user_impl(self, rule) -> Callable:
        from revbench.backends.python_backend import user_function

        return user_function(rule)

    def helper(self, fn: Callable) -> Callable:
        return fn

    def adjoint(self, rule, function: str, n_adjoints: int) -> dict[str, object]:
        """The globals a custom adjoint's sweep (:mod:`.custom_sweep`) calls it through."""
        from revbench.backends import custom_sweep
        from revbench.backends.runtime import as_tuple

        return {custom_sweep.ADJOINT_SYMBOL: rule.fn, custom_sweep.AS_TUPLE_SYMBOL: as_tuple}

    def runner(self, run: Callable) -> Callable:
        """What a call from Python runs for the compiled ``run``."""
        return run

    def ready(self, run: Callable) -> bool:
        """Whether ``run`` holds code to run now (no compilation at the next call)."""
        return True

    def for_njit(self, run: Callable) -> Callable:
        """``run`` as a user's own jitted code calls it (``f.kernel``)."""
        return run

    def __repr__(self) -> str:
        return f"<revbench target {self.name}>"


class Compiled(Target):
    """Machine code: native where the generator lowers the call's types, else Numba."""

    name = "numba"
    flavour = "nb"
    adjoint_returns_tuple = True

    def compile(self, gen, injected, check, fastmath=False):
        from revbench.backends.numba_backend import compile_numba

        return compile_numba(gen, injected, check, fastmath=fastmath)

    def user_impl(self, rule):
        from revbench.backends.numba_backend import user_function

        return user_function(rule)

    def helper(self, fn):
        from revbench.backends.numba_backend import helper

        return helper(fn)

    def adjoint(self, rule, function, n_adjoints):
        from revbench.backends import custom_sweep, numba_backend

        return {custom_sweep.ADJOINT_SYMBOL: numba_backend.adjoint_callable(
            rule.fn, rule.label, function, rule.fingerprint, n_adjoints)}

    def runner(self, run):
        if not _NATIVE_RUNNER:  # (imported once: a call pays no import statement)
            from revbench.backends.native import engine

            _NATIVE_RUNNER.append(engine.runner)
        native = _NATIVE_RUNNER[0](run)  # (None: the native path is off)
        return run if native is None else native

    def ready(self, run):
        from revbench.backends.numba_backend import has_machine_code

        return has_machine_code(run)

    def for_njit(self, run):
        from revbench.backends.numba_backend import numba_callable

        return numba_callable(run)


_NATIVE_RUNNER: list[Callable] = []


class Cuda(Target):
    """Device functions of the batched drivers (never called from Python)."""

    name = "cuda"
    flavour = "cu"

    def compile(self, gen, injected, check, fastmath=False):
        from revbench.backends.cuda_backend import compile_device

        return compile_device(gen, injected)

    def user_impl(self, rule):
        # revbench's own helpers only (a user's functions are refused before this)
        from revbench.backends.cuda_helpers import CHECKED, SPECIAL

        return CHECKED[rule.name] if rule.name in CHECKED else SPECIAL[rule.name]


PYTHON, COMPILED, CUDA = Target(), Compiled(), Cuda()

#: every target by the name ``backend=`` gives it
TARGETS: dict[str, Target] = {t.name: t for t in (COMPILED, PYTHON, CUDA)}
#: the targets a function can be defined for (``cuda`` is reached through ``device=``)
USER_BACKENDS = (COMPILED.name, PYTHON.name)


def target(backend: str) -> Target:
    """The target named ``backend``."""
    return TARGETS[backend]


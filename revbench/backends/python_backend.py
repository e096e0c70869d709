"""The plain-Python backend: the generated source, run by the interpreter.

Slow, but every line can be stepped through with ``pdb`` and every error
comes with a normal traceback -- the backend for debugging.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from revbench.backends.codegen import Generated
from revbench.backends.loader import load_module


def compile_python(gen: Generated, injected: dict[str, object]) -> Callable:
    mod = load_module(gen.key, gen.source, "py", injected)
    func = getattr(mod, gen.function_name)

    @functools.wraps(func)
    def run(*args):
        # NumPy scalars warn on overflow where compiled code is silent; the checks
        # (when on) raise clear errors for those, so both backends report alike
        with np.errstate(all="ignore"):
            return func(*args)

    return run


def user_function(rule) -> Callable:
    return rule.user_function


class Deadline(BaseException):
    """Raised into a run of generated Python that ran out of time (:func:`with_deadline`)."""


def with_deadline(call: Callable[[], Any], seconds: float) -> Any:
    """``call()``, stopped with :class:`Deadline` after ``seconds``: the replay of a failed
    compiled call on this backend, to find its line, must not run for minutes."""
    end = time.perf_counter() + seconds

    def local(frame, event, arg):
        if time.perf_counter() > end:
            raise Deadline
        return local

    def calls(frame, event, arg):
        if time.perf_counter() > end:
            raise Deadline
        return local if "rbgen_" in frame.f_code.co_filename else None

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        return call()
    finally:
        sys.settrace(old)


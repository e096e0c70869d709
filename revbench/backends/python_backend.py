"""The plain-Python backend: the generated source, run by the interpreter.

Slow, but every line can be stepped through with ``pdb`` and every error
comes with a normal traceback -- the backend for debugging.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

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

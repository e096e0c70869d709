"""The plain-Python backend: the generated source, run by the interpreter.

Slow, but every line can be stepped through with ``pdb`` and every error
comes with a normal traceback -- the backend for debugging.
"""

from __future__ import annotations

from collections.abc import Callable

from revbench.backends.codegen import Generated
from revbench.backends.loader import load_module


def compile_python(gen: Generated, injected: dict[str, object]) -> Callable:
    mod = load_module(gen.key, gen.source, "py", injected)
    return getattr(mod, gen.function_name)


def user_function(rule) -> Callable:
    return rule.user_function

"""revbench: reversible programming and tape-free AD by reverse computing, in Python.

The public API only; see ``docs/language.md`` for the language.
"""

from typing import TYPE_CHECKING

from revbench._version import __version__
from revbench.ad import (
    check_grad,
    custom_adjoint,
    external,
    grad,
    hessian,
    hvp,
    jacobian,
    jvp,
    remove_adjoint,
    value_and_grad,
    vjp,
)
from revbench.backends.blas import set_threads, threads
from revbench.config import set_tolerance
from revbench.debugging.tracing import trace
from revbench.function import ReversibleFunction, define, reversible
from revbench.lang.errors import (
    ReversibilityError,
    ReversibilitySyntaxError,
    ReversibilityTypeError,
    ShapeMismatchError,
)
from revbench.lang.markers import inverted, routine
from revbench.rules.functions import register
from revbench.testing import check_inverse
from revbench.tiering import set_tiered

if TYPE_CHECKING:  # the widget module imports ipywidgets: only on demand
    import os

    from revbench.jupyter.debugger import Debugger

__all__ = [
    "ReversibilityError",
    "ReversibilitySyntaxError",
    "ReversibilityTypeError",
    "ReversibleFunction",
    "ShapeMismatchError",
    "__version__",
    "check_grad",
    "check_inverse",
    "custom_adjoint",
    "debug",
    "define",
    "external",
    "grad",
    "hessian",
    "hvp",
    "inverted",
    "jacobian",
    "jvp",
    "register",
    "remove_adjoint",
    "reversible",
    "routine",
    "set_threads",
    "set_tiered",
    "set_tolerance",
    "threads",
    "trace",
    "value_and_grad",
    "vjp",
]


def _show_background_compilation() -> None:
    """The notebook's "compiling ... in the background" line (:mod:`revbench.jupyter.status`;
    IPython itself is imported only when a compilation is queued inside it)."""
    from revbench.jupyter.status import install

    install()


_show_background_compilation()


def debug(f: ReversibleFunction, *args: object, loss: object = None,
          max_steps: int = 100_000, export: "str | os.PathLike[str] | None" = None) -> "Debugger":
    """The stepping debugger widget for ``f(*args)``: forward steps, then backward steps that
    really execute the inverse (with adjoints when a ``loss`` is given).  ``export=PATH``
    also writes its static HTML page (it steps without a kernel) to PATH.  See
    :mod:`revbench.jupyter.debugger`; ipywidgets is imported here, on demand.
    """
    from revbench.jupyter.debugger import debug as _debug

    return _debug(f, *args, loss=loss, max_steps=max_steps, export=export)


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext revbench`` registers the ``%%reversible`` cell magic.

    IPython is imported here, on demand, so that ``import revbench`` stays light.
    """
    from revbench.jupyter.magic import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext revbench`` (and ``%reload_ext``) removes the magic again."""
    from revbench.jupyter.magic import unload_ipython_extension as unload

    unload(ipython)

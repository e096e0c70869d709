"""revbench: reversible programming and tape-free AD by reverse computing, in Python.

The public API only; see ``docs/language.md`` for the language.
"""

from revbench._version import __version__
from revbench.ad import check_grad, grad, jacobian, value_and_grad
from revbench.config import set_tolerance
from revbench.function import ReversibleFunction, define, reversible
from revbench.lang.errors import ReversibilityError, ReversibilitySyntaxError, ReversibilityTypeError
from revbench.lang.markers import inverted, routine
from revbench.rules.functions import register
from revbench.testing import check_inverse

__all__ = [
    "ReversibilityError",
    "ReversibilitySyntaxError",
    "ReversibilityTypeError",
    "ReversibleFunction",
    "__version__",
    "check_grad",
    "check_inverse",
    "define",
    "grad",
    "inverted",
    "jacobian",
    "register",
    "reversible",
    "routine",
    "set_tolerance",
    "value_and_grad",
]

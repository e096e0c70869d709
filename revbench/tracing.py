"""Moved to :mod:`revbench.debugging.tracing`; this name stays for one release."""

import sys

from revbench.debugging import tracing as _moved

sys.modules[__name__] = _moved

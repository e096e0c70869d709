"""Moved to :mod:`revbench.debugging.explain`; this name stays for one release."""

import sys

from revbench.debugging import explain as _moved

sys.modules[__name__] = _moved

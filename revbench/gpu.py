"""Moved to :mod:`revbench.ad.gpu`; this name stays for one release."""

import sys

from revbench.ad import gpu as _moved

sys.modules[__name__] = _moved

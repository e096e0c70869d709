"""Moved to :mod:`revbench.ad.batch`; this name stays for one release."""

import sys

from revbench.ad import batch as _moved

sys.modules[__name__] = _moved

"""Moved to :mod:`revbench.ad.second_order`; this name stays for one release."""

import sys

from revbench.ad import second_order as _moved

sys.modules[__name__] = _moved

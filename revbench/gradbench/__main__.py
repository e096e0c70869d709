"""``python -m revbench.gradbench``: revbench as a GradBench tool (:mod:`.protocol`)."""

import sys

from revbench.gradbench.protocol import main

sys.exit(main())

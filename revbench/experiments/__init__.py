"""Built-in experiments: reverse computing against checkpointing, measured (``experiments.md`` §8).

```python
from revbench import experiments
experiments.WORKLOADS                       # name -> workload (description, kind, sizes)
r = experiments.compare("heat", n_steps=[100, 1000], repeats=3)
r.table; r.plot(); r.save("results/heat")
```

Command line: ``python -m revbench.experiments --list`` and
``python -m revbench.experiments heat --quick``.
"""

from revbench.experiments.compare import Result, compare, default_strategies
from revbench.experiments.workloads import WORKLOADS, Workload

__all__ = ["WORKLOADS", "Result", "Workload", "compare", "default_strategies"]

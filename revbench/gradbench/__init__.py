"""revbench in GradBench (github.com/gradbench/gradbench), the public comparison of AD tools.

* :mod:`.protocol` -- the tool: ``python -m revbench.gradbench`` answers GradBench's
  messages (JSON lines on standard input and output);
* :mod:`.evals` -- the evals' programs, in revbench's language;
* :mod:`.driver` -- the eval's side, for tests and benchmarks: GradBench's inputs, the
  messages, every answer checked against :mod:`.reference` (JAX).

``docs/gradbench.md`` says how to run it, and ``gradbench/revbench/`` is the folder
GradBench's ``tools/`` expects.
"""

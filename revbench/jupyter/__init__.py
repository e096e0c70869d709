"""The notebook workbench: the ``%%reversible`` magic (``%load_ext revbench``) and the debugger.

Everything that imports IPython or ipywidgets lives in this package, and nothing
outside it imports this package eagerly, so ``import revbench`` stays light.
"""

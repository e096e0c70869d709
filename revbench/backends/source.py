"""Generated source written line by line, and the check that a sweep gave its values back.

Code generated from IR is :mod:`revbench.backends.codegen`'s ``Emitter``.  The code
generated from a plan instead -- the reverse sweep of a custom adjoint
(:mod:`~revbench.backends.custom_sweep`), an external function's kernels
(:mod:`~revbench.backends.external_code`), the batch driver (:mod:`revbench.ad.batch`) and
its CUDA kernel (:mod:`revbench.ad.gpu`), a checkpointed loop's kernels
(:mod:`revbench.backends.loop_code`) -- is written through one :class:`SourceWriter`.

"Is this value back where it was?" is asked of generated code in several places: an
ancilla at its ``del`` and an ``if``'s condition (codegen), and, after a reverse sweep,
every argument it must give back (the batch driver, on the CPU and the GPU).
:func:`same_value` is that test, and :func:`emit_given_back` the check of one value,
scalar or array.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

INDENT = "    "


class SourceWriter:
    """Lines of Python source: ``emit`` writes at the current depth, ``block`` opens one
    level (``with w.block("for i in range(n):"):``), ``fresh`` invents a local name,
    ``text`` is the source."""

    def __init__(self, depth: int = 0):
        self.lines: list[str] = []
        self.depth = depth
        self._fresh = 0

    def emit(self, *lines: str) -> None:
        """Lines at the current depth."""
        self.lines.extend(INDENT * self.depth + line for line in lines)

    @contextmanager
    def block(self, header: str | None = None) -> Iterator[None]:
        """The ``header`` line (``if ...:``, ``for ...:``), then what is written inside the
        ``with``, one level deeper."""
        if header is not None:
            self.emit(header)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    @contextmanager
    def loops(self, shape: Sequence[int], stem: str) -> Iterator[list[str]]:
        """Nested loops over every index of a ``shape`` known here (``for q0 in range(3):``,
        ``for q1 in ...``): yields the index names; the ``with`` body is the innermost."""
        idx = [f"{stem}{ax}" for ax in range(len(shape))]
        with ExitStack() as stack:
            for i, n in zip(idx, shape):
                stack.enter_context(self.block(f"for {i} in range({n}):"))
            yield idx

    def fresh(self, stem: str) -> str:
        """A local name no other call gives (``_rb_<stem><n>``)."""
        self._fresh += 1
        return f"_rb_{stem}{self._fresh}"

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def same_value(got: str, want: str, exact: bool, atol: str, rtol: str) -> str:
    """Source of the test that ``got`` is back at ``want``: equal for integers and bools
    (``exact``), else within ``atol + rtol * |want|``.  Equal values first: an infinite
    value is back at inf (inf - inf is nan), and a nan one at nan (the inverse recomputes
    the same nan)."""
    if exact:
        return f"{got} == {want}"
    return (f"({got} == {want} or abs({got} - {want}) <= {atol} + {rtol} * abs({want}) "
            f"or ({got} != {got} and {want} != {want}))")


def emit_given_back(w: SourceWriter, got: str, want: str, exact: bool, fail: Sequence[str],
                    atol: str, rtol: str, shape: Sequence[int] | None = ()) -> None:
    """Write the check that a reverse sweep gave back a value: ``got`` (what it returned)
    must be ``want`` (the value before), by :func:`same_value`; else the lines ``fail`` run,
    at the first element that is not, with ``{got}`` and ``{want}`` in them that element.

    ``shape``: ``()``, a scalar; a tuple of sizes, an array of that shape, element by
    element in nested loops (the GPU's local arrays, which cannot be flattened); ``None``,
    an array of any shape, flattened (the CPU)."""
    if shape is None:
        g, e, q = w.fresh("got"), w.fresh("want"), w.fresh("q")
        w.emit(f"{g} = {got}.ravel()", f"{e} = {want}.ravel()")
        with w.block(f"for {q} in range({g}.size):"):
            _emit_test(w, f"{g}[{q}]", f"{e}[{q}]", exact, fail, atol, rtol)
        return
    with w.loops(shape, "c") as idx:
        ix = f"[{', '.join(idx)}]" if idx else ""
        _emit_test(w, got + ix, want + ix, exact, fail, atol, rtol)


def _emit_test(w: SourceWriter, got: str, want: str, exact: bool, fail: Sequence[str],
               atol: str, rtol: str) -> None:
    differs = f"{got} != {want}" if exact else f"not {same_value(got, want, False, atol, rtol)}"
    with w.block(f"if {differs}:"):
        w.emit(*(line.format(got=got, want=want) for line in fail))


__all__ = ["SourceWriter", "emit_given_back", "same_value"]

"""The steps that the batch driver writes alike on the CPU and the GPU.

The driver of ``batch=`` (:func:`revbench.ad.batch._driver_source`, a Numba function) and
its CUDA kernel (:func:`revbench.ad.gpu.kernel_source`, one thread per item) run the same
steps per item; they differ in how an array is zeroed, seeded or stored (NumPy calls on
the CPU, loops over a thread's local arrays on the GPU), which the callers pass in.
``lay`` is the driver's layout (:class:`revbench.ad.batch._Layout`).
"""

from __future__ import annotations

from collections.abc import Callable

from revbench.backends.source import SourceWriter


def seed_lanes(w: SourceWriter, lay, zero: Callable[[str, int], None],
               seed: Callable[[str, int], None],
               cotangent: Callable[[str, int], None] | None = None) -> list[str]:
    """The adjoints each lane of a reverse sweep starts from: zero, and one at the lane's
    row (``row = start + lane``) where it seeds this parameter.  ``zero(g, k)`` and
    ``seed(g, k)`` write those of the array parameter ``k`` into ``g``.  A pullback's
    sweep (``lay.cotangents``, one lane) starts every output's adjoint at the item's
    cotangent ``C<k>[i]`` instead: ``cotangent(g, k)`` copies an array's.  Returns the
    adjoints' names, in the order the reverse sweep takes them."""
    names: list[str] = []
    for lane in range(lay.lanes):
        w.emit(f"row = start + {lane}")
        for k, t in enumerate(lay.sig):
            if not lay.adjoint[k]:
                continue
            g = f"g{lane}_{k}"
            names.append(g)
            if k in lay.cotangents:
                if t.is_array:
                    assert cotangent is not None
                    cotangent(g, k)
                else:
                    w.emit(f"{g} = C{k}[i]")
                continue
            if t.is_array:
                zero(g, k)
                if k in lay.outputs:
                    with w.block(f"if row < m and seed_param[row] == {k}:"):
                        seed(g, k)
                continue
            z = "0j" if t.dtype == "complex" else "0.0"
            w.emit(f"{g} = 1.0 if row < m and seed_param[row] == {k} else {z}"
                   if k in lay.outputs else f"{g} = {z}")
    return names


def cotangent_names(lay) -> list[str]:
    """The drivers' parameters holding a pullback's cotangents, one per output (after the
    kept values)."""
    return [f"C{k}" for k in lay.cotangents]


def each_block(w: SourceWriter, lay, npar: int, put: Callable[[int, int, str], None]) -> None:
    """After a reverse sweep (its results ``res``): for each lane that seeded a row, and
    each parameter ``wr`` of ``wrt``, ``put(o, wr, adjoint)`` writes the adjoint into the
    block of output ``o`` (the one whose row it is)."""
    if not lay.wrt:  # (a forward run alone: nothing is read back)
        return
    per_lane = sum(lay.adjoint)
    slot = {k: sum(lay.adjoint[:k]) for k in range(npar)}
    for lane in range(lay.lanes):
        w.emit(f"row = start + {lane}")
        with w.block("if row < m:"):
            for o in lay.outputs:
                with w.block(f"if seed_param[row] == {o}:"):
                    for wr in lay.wrt:
                        put(o, wr, f"res[{npar + lane * per_lane + slot[wr]}]")


__all__ = ["cotangent_names", "each_block", "seed_lanes"]

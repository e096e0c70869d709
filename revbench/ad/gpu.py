"""``device="cuda"``: the batched derivatives as CUDA kernels, one GPU thread per item.

``jacobian(f, ..., batch=..., device="cuda")`` (and ``grad`` / ``value_and_grad``) run the
same generated code the CPU's ``batch=`` runs, compiled for the GPU from the same IR
(:mod:`revbench.backends.cuda_codegen`): the forward run of an item, then its reverse
sweeps, in one thread, items spread over the grid by a grid-stride loop.  No tape: each
thread holds its item's state in registers and local memory.

What a user gets that the CPU gives:

* the same results (to rounding: CUDA's ``exp``/``log`` may differ from the C library's
  in the last digit);
* the same errors.  With checks on, a thread cannot raise: a failing check records
  itself, the kernel marks the first failing item, and the host re-runs that item on the
  CPU, which raises the usual error with a note naming the item;
* the caller's arrays unchanged: every array the function writes is the thread's own
  copy in local memory.

Arrays may be NumPy arrays (copied to the GPU and the results back), Numba device arrays,
any object with ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA tensors) or JAX
arrays (through DLPack): GPU memory is read where it is, and the results come back as
arrays of the kind that came in (:mod:`revbench.backends.cuda_arrays`, one table).
"""

from __future__ import annotations

import hashlib
import math
import threading
from typing import Any

import numpy as np

from revbench.ad.sweep import block_rows, refuse_array_dtype
from revbench.backends import cuda_arrays, cuda_backend
from revbench.backends.batch_steps import cotangent_names, each_block, seed_lanes
from revbench.backends.runtime import MESSAGES, TABLES
from revbench.backends.source import SourceWriter, emit_given_back
from revbench.config import get_tolerance
from revbench.lang.errors import ReversibilityError
from revbench.lang.types import NUMPY_DTYPES, NUMPY_NAMES
from revbench.rules import checks

DEVICES = ("cpu", "cuda")
#: threads per block: enough warps to hide latency; local memory per thread is small
THREADS_PER_BLOCK = 128


def check_device(device: str, batch: Any, api: str, workers: int | None = None) -> None:
    """Refuse a device, or a ``workers=``, that cannot apply."""
    if device not in DEVICES:
        raise ValueError(f"{api}: device must be one of {DEVICES}, got {device!r}")
    if device == "cuda" and batch is None:
        raise ValueError(f"{api}: device='cuda' runs batched derivatives, one GPU thread per "
                         "item: name the arguments that carry the items with batch=")
    if workers is not None:
        if batch is None or device != "cpu":
            raise ValueError(f"{api}: workers= is the number of CPU threads of a batched call "
                             "(batch=, device='cpu')")
        if not isinstance(workers, (int, np.integer)) or isinstance(workers, bool) \
                or workers < 1:
            raise ValueError(f"{api}: workers must be a positive int, got {workers!r}")


# --------------------------------------------------------------------------- #
# Arrays: where they live, and back as the kind that came in
# --------------------------------------------------------------------------- #
class Arguments:
    """The call's arguments on the device, with what is needed to give results back."""

    def __init__(self, args: tuple, batch: tuple[int, ...], params: tuple[str, ...], api: str):
        cuda_backend.require_gpu()  # (before the first copy asks the driver for a context)
        self.host = list(args)  # NumPy arrays and scalars as given (for a CPU re-run)
        self.device: list[Any] = []
        self.kind, self.like = "numpy", None
        for k, a in enumerate(args):
            name = params[k]
            if k in batch and np.ndim(a) == 0:
                raise TypeError(f"{api}: batch argument `{name}` must be an array whose first "
                                f"axis runs over the items, got {_described(a)}")
            kind = cuda_arrays.kind_of(a)
            if kind:
                self.device.append(cuda_arrays.to_device(a))
                if kind != "numpy":
                    self.kind, self.like = kind, a
                    self.host[k] = None  # copied back only for a failing item
            elif isinstance(a, (list, tuple)) or (hasattr(a, "__array__") and np.ndim(a) > 0):
                raise TypeError(f"{api}: argument `{name}` is a {type(a).__name__}: pass a "
                                "NumPy array, a Numba device array, an array with "
                                "__cuda_array_interface__ (CuPy, PyTorch on the GPU) or a "
                                "JAX array")
            else:
                self.device.append(a)
            d = self.device[-1]
            if k in batch and (not hasattr(d, "shape") or len(d.shape) == 0):
                raise TypeError(f"{api}: batch argument `{name}` must be an array whose first "
                                f"axis runs over the items, got {type(a).__name__}")
        self.batch, self.params, self.api = batch, params, api
        ns = {d.shape[0] for k, d in enumerate(self.device) if k in batch}
        if len(ns) > 1:
            sizes = ", ".join(f"`{params[k]}` has {self.device[k].shape[0]}" for k in batch)
            raise ValueError(f"{api}: batch arguments disagree on the number of items: {sizes}")
        self.n = ns.pop()
        if self.n == 0:
            raise ValueError(f"{api}: the batch is empty (0 items)")
        _refuse_shared_memory(args, params, api)
        for k, d in enumerate(self.device):
            if hasattr(d, "dtype"):
                refuse_array_dtype(api, params[k], d.dtype, (
                    " JAX computes in float32 unless told otherwise: "
                    "jax.config.update('jax_enable_x64', True)" if cuda_arrays.is_jax(args[k])
                    else ""))

    def item_standins(self) -> tuple:
        """Item 0's types and shapes, as NumPy values (typing needs no data)."""
        out = []
        for k, d in enumerate(self.device):
            if not hasattr(d, "shape"):
                out.append(d)
                continue
            shape = tuple(d.shape[1:]) if k in self.batch else tuple(d.shape)
            if shape == ():
                out.append(np.dtype(d.dtype).type(0).item())
            else:
                out.append(np.zeros(shape, dtype=d.dtype))
        return tuple(out)

    def host_item(self, i: int) -> tuple:
        """Item ``i``'s arguments on the host (a CPU re-run of a failing item)."""
        out = []
        for k, (h, d) in enumerate(zip(self.host, self.device)):
            if h is None:  # a device array
                h = d[i:i + 1].copy_to_host()[0] if k in self.batch else d.copy_to_host()
                out.append(h.item() if np.ndim(h) == 0 else h)
            elif k in self.batch:
                v = h[i]
                out.append(v.item() if np.ndim(v) == 0 else v.copy())
            else:
                out.append(h)
        return tuple(out)

    def give_back(self, d: Any) -> Any:
        """A result on the device, as the kind of array that came in."""
        return cuda_arrays.give_back(d, self.kind, self.like)


def _described(a: Any) -> str:
    return f"a 0-d {type(a).__name__}" if hasattr(a, "shape") else type(a).__name__


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    bounds = getattr(np, "byte_bounds", None)  # NumPy 1.x; 2.x moved it
    return (bounds or np.lib.array_utils.byte_bounds)(a)


def _refuse_shared_memory(args: tuple, params: tuple[str, ...], api: str) -> None:
    """Two arguments in the same memory are refused, as on the CPU (an update of one would
    change the other): NumPy arrays by their buffers, GPU arrays by their address ranges."""
    spans = []
    for p, a in zip(params, args):
        if isinstance(a, np.ndarray):
            if a.size:
                spans.append((p, "host", *_byte_bounds(a)))
        elif (span := cuda_arrays.device_span(a)) is not None:
            spans.append((p, "device", *span))
    for i, (p1, w1, lo1, hi1) in enumerate(spans):
        for p2, w2, lo2, hi2 in spans[i + 1:]:
            if w1 == w2 and lo1 < hi2 and lo2 < hi1:
                raise ReversibilityError(
                    f"{api}: arguments `{p1}` and `{p2}` share memory: updating one would change "
                    "the other, which is not reversible (pass a copy)", variable=p2, stage="call")


# --------------------------------------------------------------------------- #
# The kernel: a driver over items, generated per layout and item shapes
# --------------------------------------------------------------------------- #
def _flat(idx: list[str], shape: tuple[int, ...]) -> str:
    """The C-order flat index of ``idx`` in an array of ``shape``."""
    if not idx:
        return "0"
    terms = []
    for ax, i in enumerate(idx):
        stride = math.prod(shape[ax + 1:])
        terms.append(i if stride == 1 else f"{i} * {stride}")
    return " + ".join(terms)


def _unravel(flat: str, shape: tuple[int, ...]) -> str:
    parts = []
    for ax in range(len(shape)):
        stride = math.prod(shape[ax + 1:])
        part = f"{flat} // {stride}" if stride != 1 else flat
        parts.append(f"({part}) % {shape[ax]}" if ax else part)
    return ", ".join(parts)


def kernel_source(lay, params: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]) -> str:
    """The driver kernel of :func:`revbench.ad.batch._driver_source`, for a GPU thread: the
    same steps per item, with the item's arrays in local memory and checks reported."""
    npar = len(params)
    P = [f"P{k}" for k in range(npar)]
    J = [f"J{o}_{w}" for o in lay.outputs for w in lay.wrt]
    V = [f"V{k}" for k in range(npar) if lay.keep[k]]
    summed = [w for w in lay.wrt if lay.summed and lay.summed[w]]
    inplace = accumulated_in_place(lay)
    R = [f"R{w}" for w in summed]  # partial sums per block or thread (deterministic=True)
    C = cotangent_names(lay)
    out = SourceWriter()
    # STAT: [0] the first failing item (an atomic min), [1:3] its status (module, check)
    with out.block(f"def kernel({', '.join([*P, 'seed_param', 'seed_flat', 'block_row', *J, *V, *C, *R])}, "
                   "STAT, lo, hi, rerun, atol, rtol, catol, crtol):"):
        out.emit("m = seed_param.shape[0]", "st = _rb_cuda.local.array(2, _rb_np.int64)")

        def local(name: str, k: int, dt: str | None = None) -> None:
            dims = ", ".join(str(max(d, 1)) for d in shapes[k]) or "1"
            dt = dt or NUMPY_NAMES[lay.sig[k].dtype]
            out.emit(f"{name} = _rb_cuda.local.array(({dims},), _rb_np.{dt})")

        for w in summed:  # this thread's share of a summed gradient, over its items
            local(f"acc{w}", w, "float64")
            with out.loops(shapes[w], "q") as idx:
                out.emit(f"acc{w}[{', '.join(idx) or '0'}] = 0.0")
        written_arrays = [k for k, t in enumerate(lay.sig) if t.is_array and lay.written[k]]
        for k in written_arrays:
            local(f"a{k}", k)
            if not lay.one_sweep:
                local(f"t{k}", k)
        for lane in range(lay.lanes):
            for k, t in enumerate(lay.sig):
                if lay.adjoint[k] and t.is_array:
                    if k in inplace:  # the sweep adds each item's adjoint into the sum
                        out.emit(f"g{lane}_{k} = acc{k}")
                    else:
                        local(f"g{lane}_{k}", k)
        with out.block("for i in range(lo + _rb_cuda.grid(1), hi, _rb_cuda.gridsize(1)):"):
            _kernel_item(out, lay, npar, shapes, written_arrays, summed, inplace)
            with out.block("if rerun == 1:  # a failing item, run again to learn its check"):
                out.emit("STAT[1] = st[0]", "STAT[2] = st[1]")
        if summed:  # (a rerun adds nothing: the call raises; a batch of one item does)
            with out.block("if rerun == 1:"):
                out.emit("return")
        _kernel_sums(out, lay, shapes, summed)
    return out.text()


def accumulated_in_place(lay) -> set[int]:
    """The summed gradients that a reverse sweep adds into directly, item after item.

    The adjoint of an argument the function only reads starts at zero and the sweep only
    adds to it; started at the sum of the items before, it ends at the sum with this item
    -- no zeroing and no copy per item, which for a wide parameter (a GMM's 330 numbers)
    were most of a thread's memory traffic.  (One lane only: ``grad`` and
    ``value_and_grad``, the APIs that sum.)"""
    if not lay.summed or lay.lanes != 1:
        return set()
    return {w for w in lay.wrt
            if lay.summed[w] and lay.sig[w].is_array and not lay.written[w]}


def _kernel_item(out: SourceWriter, lay, npar: int, shapes: tuple[tuple[int, ...], ...],
                 written_arrays: list[int], summed: list[int], inplace: set[int]) -> None:
    """The kernel's steps for item ``i``: those of the CPU's driver."""
    out.emit("st[0] = 0", "st[1] = 0")

    def src_of(k: int) -> str:
        return f"P{k}[i]" if lay.batched[k] else f"P{k}"

    def copy(dst: str, src: str, k: int) -> None:
        with out.loops(shapes[k], "q") as idx:
            ix = ", ".join(idx)
            out.emit(f"{dst}[{ix}] = {src}[{ix}]")

    def give_up(leave: str) -> None:
        """After a kernel call: a failed item marks itself and leaves (``leave``)."""
        with out.block("if st[1] != 0:"):
            out.emit("_rb_cuda.atomic.min(STAT, 0, i)")
            with out.block("if rerun == 1:"):  # (its check, before it leaves the loop)
                out.emit("STAT[1] = st[0]", "STAT[2] = st[1]")
            out.emit(leave)

    for k in range(npar):
        if k in written_arrays:
            copy(f"a{k}", src_of(k), k)
        else:
            out.emit(f"a{k} = {src_of(k)}")
    call = ", ".join(f"a{k}" for k in range(npar))
    out.emit(f"r = _rb_fwd({call}, atol, rtol, st)")
    give_up("continue")
    for k, t in enumerate(lay.sig):
        out.emit(f"s{k} = r[{k}]")
        if lay.keep[k]:
            if t.is_array:
                with out.loops(shapes[k], "q") as idx:
                    out.emit(f"V{k}[i, {', '.join(idx)}] = s{k}[{', '.join(idx)}]")
            else:
                out.emit(f"V{k}[i] = s{k}")
    with out.block(f"for start in range(0, m, {lay.lanes}):"):
        for k, t in enumerate(lay.sig):
            if t.is_array and lay.written[k] and not lay.one_sweep:
                copy(f"t{k}", f"s{k}", k)
            elif t.is_array and not lay.written[k]:
                out.emit(f"t{k} = a{k}")
            else:
                out.emit(f"t{k} = s{k}")

        def zero(g: str, k: int) -> None:
            if k in inplace:  # (holds the sum so far)
                return
            with out.loops(shapes[k], "z") as idx:
                out.emit(f"{g}[{', '.join(idx)}] = 0.0")

        def cotangent(g: str, k: int) -> None:
            with out.loops(shapes[k], "z") as idx:
                out.emit(f"{g}[{', '.join(idx)}] = C{k}[i, {', '.join(idx)}]")

        adj_names = seed_lanes(out, lay, zero, lambda g, k: out.emit(
            f"{g}[{_unravel('seed_flat[row]', shapes[k])}] = 1.0"), cotangent)
        tcall = ", ".join(f"t{k}" for k in range(npar))
        out.emit(f"res = _rb_bwd({tcall}, {', '.join(adj_names)}, atol, rtol, st)")
        give_up("break")
        if lay.check:  # the sweep gave back the item's arguments (as grad checks)
            out.emit("ok = True")
            for k, t in enumerate(lay.sig):
                if lay.written[k]:
                    emit_given_back(out, f"res[{k}]", src_of(k), t.dtype in ("int", "bool"),
                                    ["ok = False"], "catol", "crtol",
                                    shapes[k] if t.is_array else ())
            with out.block("if not ok:"):
                out.emit("st[1] = -1", "_rb_cuda.atomic.min(STAT, 0, i)", "break")

        def put(o: int, w: int, src: str) -> None:
            if w in inplace:  # (the sweep added it)
                out.emit("pass")
                return
            with out.loops(shapes[w], "u") as idx:
                value = f"{src}[{', '.join(idx)}]" if idx else src
                if w in summed:
                    out.emit(f"acc{w}[{', '.join(idx) or '0'}] += {value}")
                else:
                    out.emit(f"J{o}_{w}[i, block_row[row], {_flat(idx, shapes[w])}] = {value}")

        each_block(out, lay, npar, put)


#: a block's warp sums of a summed gradient are combined this many entries at a time (its
#: shared memory: warps x CHUNK doubles, 16 KB at 128 threads)
CHUNK = 512


def _kernel_sums(out: SourceWriter, lay, shapes: tuple[tuple[int, ...], ...],
                 summed: list[int]) -> None:
    """Each thread's share of the summed gradients, after its items, added up per block:
    within each warp by shuffles, then across the block's warps through shared memory,
    always in the same order; then one atomic add per block and entry, or
    (``deterministic=True``) the block's sum into its row of partial sums, which
    :func:`column_sums` adds in a fixed order.  One barrier per ``CHUNK`` entries, not a
    tree of barriers per entry (a GMM's 330 entries took 2,300 barriers per block)."""
    if not summed:
        return
    if cuda_backend.simulated():
        # Numba's simulator runs a block's threads as Python threads, has no shuffles, and
        # its barriers (syncthreads) can hang when the threads are many: there, each
        # thread adds its own sum atomically, or writes it into its own row (the block sums
        # below are compiled to PTX by the tests and run on a real GPU by bench_gpu.py)
        for w in summed:
            with out.loops(shapes[w], "q") as idx:
                el, q = f"acc{w}[{', '.join(idx) or '0'}]", _flat(idx, shapes[w])
                if lay.deterministic:
                    out.emit(f"R{w}[_rb_cuda.grid(1), {q}] = {el}")
                else:
                    out.emit(f"_rb_cuda.atomic.add(J{lay.outputs[0]}_{w}, (0, 0, {q}), {el})")
        return
    warps = THREADS_PER_BLOCK // 32
    out.emit(f"sh = _rb_cuda.shared.array(({warps}, {CHUNK}), _rb_np.float64)",
             "tid = _rb_cuda.threadIdx.x", "lane = tid % 32", "warp = tid // 32")
    for w in summed:
        size = max(1, math.prod(shapes[w]))
        with out.loops(shapes[w], "q") as idx:
            out.emit(f"q = {_flat(idx, shapes[w])}", f"v = acc{w}[{', '.join(idx) or '0'}]")
            for delta in (16, 8, 4, 2, 1):
                out.emit(f"v += _rb_cuda.shfl_down_sync(0xFFFFFFFF, v, {delta})")
            with out.block("if lane == 0:"):
                out.emit(f"sh[warp, q % {CHUNK}] = v")
            with out.block(f"if q % {CHUNK} == {CHUNK - 1} or q == {size - 1}:"):
                out.emit("_rb_cuda.syncthreads()", f"base = q - q % {CHUNK}")
                with out.block(f"for c in range(tid, q - base + 1, {THREADS_PER_BLOCK}):"):
                    out.emit("total = sh[0, c]")
                    for k in range(1, warps):
                        out.emit(f"total += sh[{k}, c]")
                    if lay.deterministic:
                        out.emit(f"R{w}[_rb_cuda.blockIdx.x, base + c] = total")
                    else:
                        out.emit(f"_rb_cuda.atomic.add(J{lay.outputs[0]}_{w}, (0, 0, base + c), "
                                 "total)")
                out.emit("_rb_cuda.syncthreads()")


def _cuda() -> Any:
    return cuda_backend.cuda_module()


def column_sums(part, out) -> None:
    """The fixed-order sum of the rows of partial sums (``deterministic=True``): one warp
    per entry on a GPU, one thread per entry in the simulator (which has no shuffles)."""
    _cuda()
    from revbench.backends import cuda_helpers

    size = part.shape[1]
    if cuda_backend.simulated():
        cuda_helpers.column_sums[math.ceil(size / 64), 64](part, out)
    else:
        cuda_helpers.column_sums_by_warps[math.ceil(size / 4), 128](part, out)


class Driver:
    """A compiled kernel for one layout and item shapes, and how to launch it.

    What does not change from call to call lives on the GPU with it: the seeds of the
    reverse sweeps and the status the kernel reports in.  A call of a small batch is then
    one launch, one copy of three numbers in and out (no allocations of its own); the
    status is reused under a lock, so threads calling the same function take turns."""

    def __init__(self, bat, lay, shapes: tuple[tuple[int, ...], ...]):
        f, b = bat.f, bat.b
        cuda_backend.require_gpu()
        adj_shapes = tuple(shapes[k] for _ in range(lay.lanes)
                           for k in range(len(shapes)) if lay.adjoint[k])
        fwd = f.compiled_kernel("forward", lay.sig, backend="cuda", shapes=shapes)
        bwd = f.compiled_kernel("backward", lay.sig, lay.lanes, b.inactive, backend="cuda",
                                shapes=shapes + adj_shapes)
        self.threads = THREADS_PER_BLOCK  # (the block sums are written for it)
        source = kernel_source(lay, f.params, shapes)
        header = (f"# revbench CUDA batched driver for {f.__name__}\n"
                  f"# device functions: {fwd.generated.key} {bwd.generated.key}\n"
                  "import numpy as _rb_np\nfrom numba import cuda as _rb_cuda\n\n")
        source = header + source
        key = hashlib.sha256(source.encode()).hexdigest()[:32]
        self.kernel = cuda_backend.compile_kernel(key, source, "kernel",
                                                  {"_rb_fwd": fwd.run, "_rb_bwd": bwd.run})
        self.tables = (fwd.table, bwd.table)
        self.lock = threading.Lock()
        self.status_host = np.zeros(3, dtype=np.int64)
        self._status: Any = None
        self._sms = 0
        self._seeds: dict[tuple, tuple] = {}

    @property
    def status(self) -> Any:
        """[first failing item, module, check]: on the GPU, made at the first launch, with
        a page-locked copy on the host (a copy from pageable memory is staged: measured
        0.15 ms for the three numbers in and out on an H200)."""
        if self._status is None:
            cuda = _cuda()
            self.status_host = cuda.pinned_array(3, dtype=np.int64)
            self._status = cuda.to_device(self.status_host)
        return self._status

    @property
    def sms(self) -> int:
        if not self._sms:
            self._sms = _cuda().get_current_device().MULTIPROCESSOR_COUNT
        return self._sms

    def seeds(self, rows: list[tuple[int, int]]) -> tuple:
        """The rows the sweeps seed, on the GPU (made once per set of rows)."""
        key = tuple(rows)
        hit = self._seeds.get(key)
        if hit is None:
            cuda = _cuda()
            hit = self._seeds[key] = tuple(cuda.to_device(np.array(v, dtype=np.int64)) for v in (
                [k for k, _ in rows], [r for _, r in rows], block_rows(rows)))
        return hit

    def shape_of_launch(self, items: int) -> tuple[int, int]:
        """(blocks, threads per block): enough blocks to fill the GPU, each thread then
        striding over items; whole warps (the block sums shuffle within warps)."""
        if items == 1:
            return 1, 1
        if cuda_backend.simulated():  # Python threads: few of them
            return min(math.ceil(items / 32), 4), 32
        return min(math.ceil(items / self.threads), 16 * self.sms), self.threads

    def partial_rows(self, items: int) -> int:
        """Rows of partial sums ``deterministic=True`` needs: one per block (one per thread
        in the simulator, which sums no blocks)."""
        grid, tpb = self.shape_of_launch(items)
        return grid * tpb if cuda_backend.simulated() else grid

    def launch(self, n: int, args: list, seeds: tuple, blocks: list, values: list,
               partials: list, lo: int = 0, hi: int | None = None,
               rerun: bool = False) -> tuple[int, tuple[int, int]]:
        """Run items ``lo:hi``; returns (the first failing item or n, its status).
        ``rerun``: item ``lo`` failed, run it alone again to learn which check."""
        hi = n if hi is None else hi
        atol, rtol = get_tolerance()
        catol, crtol = self.tolerance
        grid, tpb = self.shape_of_launch(hi - lo)
        with self.lock:
            status = self.status
            self.status_host[:] = (n, 0, 0)
            status.copy_to_device(self.status_host)
            self.kernel[grid, tpb](*args, *seeds, *blocks, *values, *partials, status, lo, hi,
                                   int(rerun), atol, rtol, catol, crtol)
            status.copy_to_host(self.status_host)  # (waits for the kernel)
            first, module, code = (int(v) for v in self.status_host)
        return first, (module, code)


def run(bat, lay, args: Arguments, item: tuple, rows: list[tuple[int, int]],
        block_shapes: list[tuple], value_shapes: list[tuple], tolerance,
        cotangents: tuple = ()) -> tuple[list, list]:
    """Run the batched derivative on the GPU: (blocks, values), as the input kind.
    ``cotangents``: a pullback's, per output, on the GPU."""
    cuda = cuda_backend.cuda_module()
    shapes = tuple(tuple(np.shape(a)) for a in item)
    key = ("cuda", lay, shapes)
    driver = bat._drivers.get(key)
    if driver is None:
        driver = bat._drivers[key] = Driver(bat, lay, shapes)
    driver.tolerance = tolerance
    seeds = driver.seeds(rows)
    summed = [w for w in lay.wrt if lay.summed and lay.summed[w]]
    # summed gradients are added into: they start at zero; the others are written whole,
    # views of one allocation (each allocation is a driver call, a few on a small batch)
    # (one block per output and wrt, as the kernel's J{o}_{w})
    whole = [not (lay.summed and lay.summed[w]) for _ in lay.outputs for w in lay.wrt]
    sizes = [math.prod(s) if wh else 0 for s, wh in zip(block_shapes, whole)]
    buffer = cuda.device_array(max(1, sum(sizes)), dtype=np.float64)
    offsets = np.cumsum([0, *sizes])
    blocks = [buffer[offsets[j]:offsets[j + 1]].reshape(s) if wh else cuda.to_device(np.zeros(s))
              for j, (s, wh) in enumerate(zip(block_shapes, whole))]
    values = [cuda.device_array(s, dtype=dt) for s, dt in value_shapes]
    n = args.n
    rows_of_partials = driver.partial_rows(n) if lay.deterministic else 1
    partials = [cuda.device_array((rows_of_partials, max(1, math.prod(shapes[w]))))
                for w in summed]
    inputs = [*values, *cotangents]
    try:
        bad, _ = driver.launch(n, args.device, seeds, blocks, inputs, partials)
    except Exception as exc:
        if not cuda_backend.simulated():
            raise
        raise_for_simulated(bat, args, exc)
    if bad < n:
        _, status = driver.launch(n, args.device, seeds, blocks, inputs, partials, bad, bad + 1,
                                  rerun=True)
        raise_for_item(bat, args, bad, status, driver)
    if lay.deterministic:
        for w, part in zip(summed, partials):
            column_sums(part, blocks[lay.wrt.index(w)])
    return [args.give_back(b) for b in blocks], [args.give_back(v) for v in values]


def raise_for_simulated(bat, args: Arguments, exc: Exception):
    """The CUDA simulator runs a kernel in Python, whose ``math`` raises (a domain or range
    error) where a GPU gives nan or inf: find the first item the CPU fails on and raise its
    error, as for a failing check; if the CPU runs every item, say what happened."""
    check = bat.unbatched()
    for i in range(args.n):
        try:
            check(*args.host_item(i), *bat.item_extra(i))
        except Exception as err:
            if hasattr(err, "add_note"):
                err.add_note(f"(in batch item {i} of {bat.api}, which failed in the CUDA "
                             "simulator)")
            raise err.with_traceback(None) from None
    raise RuntimeError(
        f"{bat.api}: the CUDA simulator stopped ({type(exc).__name__}: "
        f"{str(exc).split(': ', 1)[-1]}). It runs Python's math, which raises where a GPU "
        "gives nan or inf; the CPU ran every item without an error (with check=False it "
        "gives nan or inf there too)") from None


def raise_for_item(bat, args: Arguments, i: int, status: tuple[int, int], driver: Driver):
    """Item ``i`` failed on the GPU: run it on the CPU, which raises the full error (with a
    note naming the item); if the CPU does not fail, say what the GPU's check found."""
    check = bat.unbatched()
    try:
        check(*args.host_item(i), *bat.item_extra(i))
    except Exception as err:
        if hasattr(err, "add_note"):
            err.add_note(f"(in batch item {i} of {bat.api}, which failed on the GPU)")
        raise err.with_traceback(None) from None
    module, code = status
    if code == -1:
        raise ReversibilityError(f"{bat.api}: the reverse sweep of item {i} did not recover "
                                 "its arguments on the GPU")
    table = TABLES.get(module)
    info = table.checks[code - 1] if table is not None and 0 < code <= len(table.checks) else None
    if info is None:
        raise ReversibilityError(f"{bat.api}: item {i} failed a runtime check on the GPU")
    what = MESSAGES.get(info.kind, "check `{var}` failed").format(
        var=info.variable, detail=info.detail, axis="?", why="is not exact")
    why = ("" if info.kind in checks.GPU_ONLY else " (the CPU ran it without error: the "
           "GPU's arithmetic differs in the last digits here)")
    raise ReversibilityError(
        f"{bat.api}: item {i} failed on the GPU{why}: {what}\n  in reversible function "
        f"{table.function}, line {info.line}: {table.source_lines.get(info.line, '').strip()}",
        variable=info.variable, function=table.function, stage="call")


def empty_values(item: tuple, sig, keep: tuple[bool, ...], n: int) -> list[tuple]:
    """(shape, dtype) of each kept output's array of items."""
    return [((n, *np.shape(a)), NUMPY_DTYPES[t.dtype]) for a, t, k in zip(item, sig, keep) if k]

"""How compiled kernels call each other: each kernel's machine code made once.

Numba compiles a call of one jitted function from another by *linking the callee's whole
LLVM module into the caller*: the caller's module is optimised again with every callee in
it, and machine code is emitted again for all of them.  A call tree of depth three has its
leaves compiled three times over -- for the hand-tracking model, LLVM's final optimisation
and code emission took 19.5 s of a 36 s first call, most of it on code compiled before.

Here a kernel that calls another generated kernel of some size calls it through a *slot*
instead: a pointer-sized global, one per callee kernel and argument types, named
``revbench.kernel$<module>$<types>`` (the generated module's name is a digest of its code,
so a name always means the same code).  The caller's module declares the global and calls
what it holds; the slot is registered with LLVM's symbol table (``llvmlite.binding.
add_symbol``), so the JIT links the caller to it whether the caller was just compiled or
loaded from Numba's disk cache.  A callee fills its slot when it is compiled or loaded.
Until then the slot holds Numba's ``nrt_unresolved_abort``, which raises a RuntimeError
rather than jump anywhere -- and a caller loaded from the cache loads its callees first
(:func:`load_callees`), so no call finds a slot empty.

Small callees are linked as before: LLVM inlines them, and a call of a function it would
not inline anyway costs the same through a slot.  This is Numba's own device for mutual
recursion (``BaseContext.call_unresolved``), with a name and a table of our own so that
cached callers can be linked in another process.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
import weakref

#: the prefix of a slot's symbol
PREFIX = "revbench.kernel$"

#: lines of LLVM code (about instructions) from which a callee is called through its slot,
#: not linked into each caller: LLVM would not inline a function of this size anyway (its
#: threshold at -O3 is a cost of 250, about as many instructions)
LINK_BELOW = 300

#: generated module name -> its kernel's dispatcher, while something uses it: what a cached
#: caller's callees are loaded from.  Not an attribute of the module: Numba keeps a
#: dispatcher's compiled code (and so the module's globals) until the dispatcher dies, so a
#: dispatcher among those globals would never die.
KERNELS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

_lock = threading.Lock()
#: slot symbol -> the ctypes cell LLVM's symbol table points at (kept alive)
_slots: dict[str, ctypes.c_void_p] = {}
#: slot symbol -> (generated module name, argument types): what to load to fill it
_owners: dict[str, tuple[str, tuple]] = {}


def slot_symbol(module_name: str, args: tuple) -> str:
    """The slot of the kernel of generated module ``module_name`` for Numba argument types
    ``args``: the same name in every process."""
    digest = hashlib.sha256(repr(tuple(str(a) for a in args)).encode()).hexdigest()[:16]
    return f"{PREFIX}{module_name}${digest}"


def _slot(symbol: str) -> ctypes.c_void_p:
    """The cell of ``symbol``, registered with LLVM on first use (holding the abort
    function until its kernel is compiled)."""
    with _lock:
        cell = _slots.get(symbol)
        if cell is None:
            import llvmlite.binding as llvm
            from numba.core.runtime import rtsys

            rtsys.initialize(None) if not rtsys._init else None
            abort = rtsys.library.get_pointer_to_function("nrt_unresolved_abort")
            cell = _slots[symbol] = ctypes.c_void_p(abort)
            llvm.add_symbol(symbol, ctypes.addressof(cell))
        return cell


def publish(dispatcher, cres) -> None:
    """A kernel compiled or loaded: fill its slot and, where it is large, make callers
    call it through the slot rather than link it in (replacing the implementation Numba
    registered for it)."""
    if cres.objectmode or _llvm_size(cres) < LINK_BELOW:
        return
    module_name = dispatcher.py_func.__module__
    args = tuple(cres.signature.args)
    symbol = slot_symbol(module_name, args)
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    if not address:
        return  # (not a function of its own: keep Numba's linking)
    _slot(symbol).value = address
    _owners[symbol] = (module_name, args)
    context = dispatcher.targetctx
    context.remove_user_function(cres.entry_point)
    impl = _call_through(symbol, cres)
    context._defns[cres.entry_point].append(impl, impl.signature)


def _llvm_size(cres) -> int:
    """The number of lines of LLVM code of the compiled kernel ``cres`` (about its number of
    instructions), the same whether it was just compiled or loaded from the cache."""
    library = cres.library
    module = library._final_module if library._shared_module is None else library._shared_module
    try:
        return str(module.get_function(cres.fndesc.llvm_func_name)).count("\n")
    except NameError:
        return 0


#: the generated modules whose code calls kernels through their slots: the kernels, not
#: the drivers (:func:`revbench.backends.numba_backend.compile_numba` adds them)
SLOT_CALLERS: set[str] = set()

#: the mangled name of a function of a generated module (``rbgen_<key>_nb``)
_GENERATED = re.compile(r"rbgen_[0-9a-f]{32}_nb")


def _call_through(symbol: str, cres):
    """Numba's lowering of a call of the kernel ``cres``: load the slot, call it (the
    same calling convention as a direct call), pass on an exception it raised.

    Only kernels call through slots: their cache (:mod:`kernel_cache`) knows to load the
    callees first.  A user's own ``@njit(cache=True)`` driver of a kernel
    (``f.kernel``) is cached by Numba alone, which would load it with nothing filling its
    slots; it links the kernel in, as Numba does (and a stale one then fails to load with
    :class:`revbench.backends.loader.StaleKernelError`, which says what to do)."""
    from llvmlite import ir as lir
    from numba.core import cgutils
    from numba.core.imputils import fix_returning_optional, impl_ret_new_ref, user_function

    fndesc = cres.fndesc
    linked = user_function(fndesc, [cres.library])

    def imp(context, builder, sig, args):
        caller = _GENERATED.search(builder.function.name)
        if caller is None or caller.group() not in SLOT_CALLERS:
            # a driver runs a kernel per item or step: linked in, LLVM can inline it and
            # drop the reference counting of its arrays at each call (6-17% of a batched
            # Jacobian); Numba compiles it once per driver
            context.active_code_library.add_linking_library(cres.library)
            if caller is None and _calls_slots(cres.library):
                _not_cachable(builder)
            return linked(context, builder, sig, args)
        module = builder.module
        slot = module.globals.get(symbol)
        if slot is None:
            slot = lir.GlobalVariable(module, lir.IntType(8).as_pointer(), name=symbol)
            slot.linkage = "external"
        fnty = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
        fn = builder.bitcast(builder.load(slot), fnty.as_pointer())
        status, retval = context.call_conv.call_function(builder, fn, fndesc.restype,
                                                         fndesc.argtypes, args)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        retval = fix_returning_optional(context, builder, sig, status, retval)
        return impl_ret_new_ref(context, builder, fndesc.restype, retval)

    imp.signature = fndesc.argtypes
    imp.libs = ()
    return imp


def _calls_slots(library) -> bool:
    """Whether the compiled ``library`` calls kernels through their slots."""
    module = library._final_module if library._shared_module is None else library._shared_module
    return any(gv.name.startswith(PREFIX) for gv in module.global_variables)


def _not_cachable(builder) -> None:
    """Keep Numba from caching the function being compiled: it links in a kernel that
    calls others through their slots, and Numba's cache would load it in another process
    with nothing to fill them (LLVM cannot link a symbol it does not know, and ends the
    process).  Numba refuses to cache code with a "dynamic global" and warns (the slots
    are such globals: addresses of this process).  The function is compiled again in each
    process instead."""
    from llvmlite import ir as lir

    name = f"numba.dynamic.globals.revbench_slots.{builder.function.name}"
    if name not in builder.module.globals:
        marker = lir.GlobalVariable(builder.module, lir.IntType(8), name=name)
        marker.initializer = lir.Constant(lir.IntType(8), 0)


def callees_of(library) -> tuple[tuple[str, str, tuple], ...]:
    """The slots a just-compiled library calls through, with what fills each: saved with
    its cached machine code, so that a process loading it can load its callees too."""
    names = sorted(gv.name for gv in library._final_module.global_variables
                   if gv.name.startswith(PREFIX))
    return tuple((name, *_owners[name]) for name in names)


class CalleeMissing(Exception):
    """A cached kernel's callee cannot be loaded in this process (its generated module is
    gone): the kernel is compiled again rather than loaded."""


def prepare(callees: tuple) -> None:
    """Before a cached kernel is loaded: register the slots it calls through (LLVM must
    find every symbol when it links the machine code), checking that what fills them can
    be found."""
    for symbol, module_name, _ in callees:
        if KERNELS.get(module_name) is None:
            raise CalleeMissing(module_name)
        _slot(symbol)


def load_callees(callees: tuple) -> None:
    """After a cached kernel is loaded: compile or load the kernels it calls (each fills
    its slot, and loads its own callees in turn)."""
    for _, module_name, args in callees:
        dispatcher = KERNELS.get(module_name)
        if dispatcher is None:
            raise CalleeMissing(module_name)
        if tuple(args) not in dispatcher.overloads:
            dispatcher.compile(tuple(args))

"""A kernel's call from Python in compiled code: its arguments unpacked, its results boxed.

Through ctypes, a call costs about 2 us before the kernel runs: Python fills argument
buffers, ctypes converts them, and Python builds the returned tuple -- ten times what
Numba's dispatcher takes (0.2 us), which a loop of small calls from Python feels.  This
module writes, beside each module's entry (``lower.entry_point``), ``@rb_call``: a
CPython ``METH_FASTCALL`` function that checks each argument's type against the one
the module was compiled for (exact ``float``, ``int`` or ``bool``; an ``ndarray`` of
the same dtype object, rank and layout, aligned and writeable), fills the entry's
buffers on its stack, calls it, and builds the result tuple with CPython's own API.
Where an argument does not match it returns ``NotImplemented`` and changes nothing;
the engine then takes the ctypes path, which dispatches on types.  A failure comes back
as bytes (the entry's ``err`` record, the status in its first slot), from which the
engine raises the same exception as before.

Addresses of Python objects differ from process to process, and the machine code is
cached on disk: the wrapper reads them from a table in the module (``@rb_py``), which
the engine fills when it loads the module (:data:`TABLE`).  CPython's functions are
called by name, as Numba's compiled code calls them.
"""

from __future__ import annotations

from revbench.backends.native.lower import (
    BOOL,
    C128,
    ERR_SLOTS,
    F64,
    I32,
    I64,
    RESULT_SLOT,
    Arr,
    complex_slot,
)

#: what ``@rb_py`` holds, in order (the engine writes their addresses)
TABLE = ("float", "int", "True", "False", "ndarray", "NotImplemented",
         "dtype:float64", "dtype:int64", "dtype:int32", "dtype:bool", "complex",
         "dtype:complex128")
_DTYPE_ROW = {F64: 6, I64: 7, I32: 8, BOOL: 9, C128: 11}
_COMPLEX_ROW = 10

#: offsets in NumPy's array object (checked against a real array by the engine, which
#: leaves this path off where they differ): rank, dtype, flags
ARRAY_NDIM, ARRAY_DESCR, ARRAY_FLAGS = 24, 56, 64
#: NumPy's flag bits
C_CONTIGUOUS, ALIGNED, WRITEABLE = 0x1, 0x100, 0x400
#: where a float object keeps its value (a complex object its real part, its imaginary
#: part after it), and an object its type
FLOAT_VALUE, OB_TYPE = 16, 8

_DECLARE = """
declare ptr @PyTuple_New(i64)
declare i32 @PyTuple_SetItem(ptr, i64, ptr)
declare ptr @PyBytes_FromStringAndSize(ptr, i64)
declare ptr @PyFloat_FromDouble(double)
declare ptr @PyComplex_FromDoubles(double, double)
declare ptr @PyLong_FromLongLong(i64)
declare i64 @PyLong_AsLongLong(ptr)
declare ptr @PyErr_Occurred()
declare void @PyErr_Clear()
declare void @Py_IncRef(ptr)
declare void @Py_DecRef(ptr)
"""


def supported(types: tuple) -> bool:
    """Whether the wrapper can take these argument types (tuples of ints cannot: those
    calls take the engine's ctypes path)."""
    return all((isinstance(t, Arr) and t.dtype in _DTYPE_ROW) or t in (F64, I64, BOOL, C128)
               for t in types)


def fast_call(types: tuple, returns: tuple | str) -> str:
    """``ptr @rb_call(ptr self, ptr args, i64 nargs)`` for a module whose entry takes
    ``types`` and returns ``returns`` (argument numbers, or ``"value"``: one int)."""
    n = len(types)
    L = [f"@rb_py = global [{len(TABLE)} x i64] zeroinitializer", _DECLARE,
         "define ptr @rb_call(ptr %self, ptr %args, i64 %nargs) {", "entry:",
         f"  %ints = alloca [{max(n, 1)} x i64]", f"  %floats = alloca [{3 * max(n, 1)} x double]",
         f"  %err = alloca [{ERR_SLOTS} x i64]"]
    for i in range(len(TABLE)):
        L += [f"  %T{i}.p = getelementptr i64, ptr @rb_py, i64 {i}", f"  %T{i} = load ptr, ptr %T{i}.p"]
    L += [f"  %nok = icmp eq i64 %nargs, {n}", f"  br i1 %nok, label %{_arg(0, n)}, label %fallback"]
    for k, t in enumerate(types):
        L += _unpack(k, t, _arg(k + 1, n), types)
    L += ["call:", "  %st = call i32 @rb_entry(ptr %ints, ptr %floats, ptr %err)",
          "  %bad = icmp ne i32 %st, 0", "  br i1 %bad, label %failed, label %done", "done:"]
    L += _box(types, returns)
    L += _failure()
    L += ["fallback:", "  call void @Py_IncRef(ptr %T5)", "  ret ptr %T5", "nomem:", "  ret ptr null",
          "}"]
    return "\n".join(L) + "\n"


def _load(dst: str, ty: str, base: str, offset: int) -> list[str]:
    """``dst = *(ty *)((char *)base + offset)``."""
    return [f"  {dst}.at = getelementptr i8, ptr {base}, i64 {offset}",
            f"  {dst} = load {ty}, ptr {dst}.at"]


def _arg(k: int, n: int) -> str:
    return f"a{k}" if k < n else "call"


def _unpack(k: int, t, nxt: str, types: tuple) -> list[str]:
    """Argument ``k``: checked against ``t``, stored in the entry's buffers."""
    x = f"%x{k}"
    L = [f"a{k}:", *_load(x, "ptr", "%args", 8 * k), *_load(f"{x}.ty", "ptr", x, OB_TYPE),
         f"  %slot{k} = getelementptr i64, ptr %ints, i64 {k}"]
    if isinstance(t, Arr):
        want = ALIGNED | (WRITEABLE if t.writeable else 0) | (C_CONTIGUOUS if t.contiguous else 0)
        L += [f"  {x}.isarr = icmp eq ptr {x}.ty, %T4",
              f"  br i1 {x}.isarr, label %a{k}.arr, label %fallback",
              f"a{k}.arr:",
              *_load(f"{x}.d", "ptr", x, ARRAY_DESCR), *_load(f"{x}.nd", "i32", x, ARRAY_NDIM),
              *_load(f"{x}.fl", "i32", x, ARRAY_FLAGS),
              f"  {x}.c1 = icmp eq ptr {x}.d, %T{_DTYPE_ROW[t.dtype]}",
              f"  {x}.c2 = icmp eq i32 {x}.nd, {t.ndim}",
              f"  {x}.m = and i32 {x}.fl, {ALIGNED | WRITEABLE | C_CONTIGUOUS}",
              # (a strided kernel takes only arrays that are not C-contiguous: the ones the
              # type dispatch would give it, so both paths run the same code)
              f"  {x}.c3 = icmp eq i32 {x}.m, {want}",
              f"  {x}.c12 = and i1 {x}.c1, {x}.c2", f"  {x}.ok = and i1 {x}.c12, {x}.c3",
              f"  {x}.i = ptrtoint ptr {x} to i64", f"  store i64 {x}.i, ptr %slot{k}",
              f"  br i1 {x}.ok, label %{nxt}, label %fallback"]
    elif t == F64:
        L += [f"  {x}.isf = icmp eq ptr {x}.ty, %T0", f"  br i1 {x}.isf, label %a{k}.f, label %fallback",
              f"a{k}.f:", *_load(f"{x}.v", "double", x, FLOAT_VALUE),
              f"  %fslot{k} = getelementptr double, ptr %floats, i64 {k}",
              f"  store double {x}.v, ptr %fslot{k}", f"  br label %{nxt}"]
    elif t == C128:  # (an exact complex: its two parts, where the entry reads them)
        j = complex_slot(types, k)
        L += [f"  {x}.isc = icmp eq ptr {x}.ty, %T{_COMPLEX_ROW}",
              f"  br i1 {x}.isc, label %a{k}.c, label %fallback",
              f"a{k}.c:", *_load(f"{x}.re", "double", x, FLOAT_VALUE),
              *_load(f"{x}.im", "double", x, FLOAT_VALUE + 8),
              f"  %cre{k} = getelementptr double, ptr %floats, i64 {j}",
              f"  store double {x}.re, ptr %cre{k}",
              f"  %cim{k} = getelementptr double, ptr %floats, i64 {j + 1}",
              f"  store double {x}.im, ptr %cim{k}", f"  br label %{nxt}"]
    elif t == I64:
        L += [f"  {x}.isi = icmp eq ptr {x}.ty, %T1", f"  br i1 {x}.isi, label %a{k}.i, label %fallback",
              f"a{k}.i:", f"  {x}.v = call i64 @PyLong_AsLongLong(ptr {x})",
              f"  store i64 {x}.v, ptr %slot{k}", f"  {x}.m1 = icmp eq i64 {x}.v, -1",
              f"  br i1 {x}.m1, label %a{k}.e, label %{nxt}",
              f"a{k}.e:", f"  {x}.exc = call ptr @PyErr_Occurred()",
              f"  {x}.none = icmp eq ptr {x}.exc, null", f"  br i1 {x}.none, label %{nxt}, label %a{k}.clr",
              f"a{k}.clr:", "  call void @PyErr_Clear()", "  br label %fallback"]
    else:  # BOOL: the objects True and False themselves
        L += [f"  {x}.t = icmp eq ptr {x}, %T2", f"  {x}.f = icmp eq ptr {x}, %T3",
              f"  {x}.tf = or i1 {x}.t, {x}.f", f"  {x}.v = zext i1 {x}.t to i64",
              f"  store i64 {x}.v, ptr %slot{k}", f"  br i1 {x}.tf, label %{nxt}, label %fallback"]
    return L


def _box(types: tuple, returns: tuple | str) -> list[str]:
    """The results: one int, or a tuple of the returned arguments (arrays as passed)."""
    if returns == "value":
        return [f"  %rp = getelementptr i64, ptr %err, i64 {RESULT_SLOT}", "  %rv = load i64, ptr %rp",
                "  %ro = call ptr @PyLong_FromLongLong(i64 %rv)", "  ret ptr %ro"]
    L = [f"  %tup = call ptr @PyTuple_New(i64 {len(returns)})", "  %tnull = icmp eq ptr %tup, null",
         "  br i1 %tnull, label %nomem, label %r0"]
    for i, j in enumerate(returns):
        t = types[j]
        L.append(f"r{i}:")
        y = f"%y{i}"
        if isinstance(t, Arr):
            L += [f"  call void @Py_IncRef(ptr %x{j})", f"  {y}.o = bitcast ptr %x{j} to ptr"]
        elif t == F64:
            L += [*_load(f"{y}.v", "double", "%floats", 8 * j),
                  f"  {y}.o = call ptr @PyFloat_FromDouble(double {y}.v)"]
        elif t == I64:
            L += [*_load(f"{y}.v", "i64", "%ints", 8 * j),
                  f"  {y}.o = call ptr @PyLong_FromLongLong(i64 {y}.v)"]
        elif t == C128:
            c = complex_slot(types, j)
            L += [*_load(f"{y}.re", "double", "%floats", 8 * c),
                  *_load(f"{y}.im", "double", "%floats", 8 * (c + 1)),
                  f"  {y}.o = call ptr @PyComplex_FromDoubles(double {y}.re, double {y}.im)"]
        else:
            L += [*_load(f"{y}.v", "i64", "%ints", 8 * j), f"  {y}.b = icmp ne i64 {y}.v, 0",
                  f"  {y}.o = select i1 {y}.b, ptr %T2, ptr %T3",
                  f"  call void @Py_IncRef(ptr {y}.o)"]
        L += [f"  {y}.null = icmp eq ptr {y}.o, null", f"  br i1 {y}.null, label %tdrop, label %r{i}.set",
              f"r{i}.set:", f"  call i32 @PyTuple_SetItem(ptr %tup, i64 {i}, ptr {y}.o)",
              f"  br label %r{i + 1}"]
    L += [f"r{len(returns)}:", "  ret ptr %tup", "tdrop:", "  call void @Py_DecRef(ptr %tup)",
          "  ret ptr null"]
    return L


def _failure() -> list[str]:
    """A failed check or error: the entry's ``err`` record as bytes (its first slot the
    status), which the engine reads as the ctypes path reads the record itself."""
    return ["failed:", "  %s64 = sext i32 %st to i64", "  store i64 %s64, ptr %err",
            f"  %blob = call ptr @PyBytes_FromStringAndSize(ptr %err, i64 {8 * ERR_SLOTS})",
            "  ret ptr %blob"]

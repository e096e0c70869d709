"""LLVM IR of the small functions lowered kernels call: the allocation arena, Python's
integer division, power by squaring, ``len(range(...))``, checked integer power and the
Ctrl-C poll -- each written once as LLVM text, declared into a module when first used
(:meth:`revbench.backends.native.lower.ModuleBuilder.declare`)."""


def _to_floor(ty: str, fix: str, q0: str, r0: str, q: str, r: str) -> str:
    """Python's floor rule, written once for ints and floats: where ``%fix`` (a nonzero
    remainder whose sign differs from the divisor ``%y``'s), the truncated quotient goes
    down by one and the remainder up by the divisor."""
    sub, add, one = ("fsub", "fadd", "1.0") if ty == "double" else ("sub", "add", "1")
    return (f"  %{q}.m1 = {sub} {ty} %{q0}, {one}\n"
            f"  %{r}.py = {add} {ty} %{r0}, %y\n"
            f"  %{q} = select i1 %{fix}, {ty} %{q}.m1, {ty} %{q0}\n"
            f"  %{r} = select i1 %{fix}, {ty} %{r}.py, {ty} %{r0}\n")


#: the smallest block a module keeps for its next call, and the most it keeps in all
CACHED_BLOCK_BYTES = 1 << 16
CACHE_LIMIT_BYTES = 64 << 20

#: the arena every kernel allocates from: a linked list of malloc'ed blocks (a 16-byte
#: header: the next block, the block's size), released on return.  A block of 64 KiB or
#: more is kept in its module's cache (up to 64 MiB in all) for the next call instead of
#: freed: the C library returns a freed large block to the system (``mmap``, or a trim of
#: the heap's top), so every call of a kernel whose arrays are megabytes would fault their
#: pages in again -- a third of the matrix MLP's ``value_and_grad`` (2.7 ms against 1.5 ms
#: with the blocks kept).  The cache is taken with a try-lock: a thread that finds it
#: held (batched runs on several threads) allocates and frees as before, never waits.
#: A block is reused for a request of at least half its size.
RUNTIME = f"""
declare ptr @malloc(i64)
declare void @free(ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
@rb_cache = internal global ptr null
@rb_cached = internal global i64 0
@rb_cache_lock = internal global i32 0
define internal ptr @rb_alloc(ptr %arena, i64 %bytes) {{
entry:
  %n = add i64 %bytes, 16
  %big = icmp uge i64 %n, {CACHED_BLOCK_BYTES}
  br i1 %big, label %try, label %fresh
try:
  %cx = cmpxchg ptr @rb_cache_lock, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %got, label %scan, label %fresh
scan:
  br label %loop
loop:
  %slot = phi ptr [@rb_cache, %scan], [%cur, %next]
  %cur = load ptr, ptr %slot
  %end = icmp eq ptr %cur, null
  br i1 %end, label %miss, label %check
check:
  %capp = getelementptr i8, ptr %cur, i64 8
  %cap = load i64, ptr %capp
  %fits = icmp uge i64 %cap, %n
  %twice = shl i64 %n, 1
  %small = icmp ule i64 %cap, %twice
  %ok = and i1 %fits, %small
  br i1 %ok, label %take, label %next
next:
  br label %loop
take:
  %after = load ptr, ptr %cur
  store ptr %after, ptr %slot
  %was = load i64, ptr @rb_cached
  %less = sub i64 %was, %cap
  store i64 %less, ptr @rb_cached
  store atomic i32 0, ptr @rb_cache_lock release, align 4
  br label %link
miss:
  store atomic i32 0, ptr @rb_cache_lock release, align 4
  br label %fresh
fresh:
  %m = call ptr @malloc(i64 %n)
  %isnull = icmp eq ptr %m, null
  br i1 %isnull, label %oom, label %made
oom:
  ret ptr null
made:
  %mcap = getelementptr i8, ptr %m, i64 8
  store i64 %n, ptr %mcap
  br label %link
link:
  %b = phi ptr [%cur, %take], [%m, %made]
  %head = load ptr, ptr %arena
  store ptr %head, ptr %b
  store ptr %b, ptr %arena
  %data = getelementptr i8, ptr %b, i64 16
  ret ptr %data
}}
define internal void @rb_free_all(ptr %arena) {{
entry:
  %h0 = load ptr, ptr %arena
  %none = icmp eq ptr %h0, null
  br i1 %none, label %out, label %lock
lock:
  %cx = cmpxchg ptr @rb_cache_lock, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br label %loop
loop:
  %h = phi ptr [%h0, %lock], [%nxt, %drop], [%nxt, %keep]
  %done = icmp eq ptr %h, null
  br i1 %done, label %unlock, label %body
body:
  %nxt = load ptr, ptr %h
  br i1 %got, label %consider, label %drop
consider:
  %capp = getelementptr i8, ptr %h, i64 8
  %cap = load i64, ptr %capp
  %big = icmp uge i64 %cap, {CACHED_BLOCK_BYTES}
  %was = load i64, ptr @rb_cached
  %tot = add i64 %was, %cap
  %room = icmp ule i64 %tot, {CACHE_LIMIT_BYTES}
  %kept = and i1 %big, %room
  br i1 %kept, label %keep, label %drop
keep:
  %first = load ptr, ptr @rb_cache
  store ptr %first, ptr %h
  store ptr %h, ptr @rb_cache
  store i64 %tot, ptr @rb_cached
  br label %loop
drop:
  call void @free(ptr %h)
  br label %loop
unlock:
  br i1 %got, label %release, label %out
release:
  store atomic i32 0, ptr @rb_cache_lock release, align 4
  br label %out
out:
  ret void
}}
"""

#: Python's floor division / modulo of int64, as Numba's ``int_divmod_signed``
INT_DIVMOD = """
define internal i64 @rb_fn(i64 %x, i64 %y) alwaysinline {
entry:
  %xmin = icmp eq i64 %x, -9223372036854775808
  %ym1 = icmp eq i64 %y, -1
  %ovf = and i1 %xmin, %ym1
  br i1 %ovf, label %zero, label %div
zero:
  ret i64 0
div:
  %q0 = sdiv i64 %x, %y
  %r0 = srem i64 %x, %y
  %rnz = icmp ne i64 %r0, 0
  %xr = xor i64 %y, %r0
  %sd = icmp slt i64 %xr, 0
  %fix = and i1 %rnz, %sd
""" + _to_floor("i64", "fix", "q0", "r0", "q", "r") + """  ret i64 RESULT
}"""

#: len(range(start, stop, step)) for step != 0
RANGE_LEN = """
define internal i64 @rb_range_len(i64 %a, i64 %b, i64 %s) {
entry:
  %up = icmp sgt i64 %s, 0
  %lo = select i1 %up, i64 %a, i64 %b
  %hi = select i1 %up, i64 %b, i64 %a
  %ms = sub i64 0, %s
  %step = select i1 %up, i64 %s, i64 %ms
  %empty = icmp sle i64 %hi, %lo
  %d = sub i64 %hi, %lo
  %d1 = sub i64 %d, 1
  %q = udiv i64 %d1, %step
  %n = add i64 %q, 1
  %r = select i1 %empty, i64 0, i64 %n
  ret i64 %r
}"""

#: a float to a (non-literal) int power: ``runtime.float_int_power`` (the products of
#: Numba's ``int_power_impl``; ``|b| > 65536``, -2**63 included, is the C library's pow)
FLOAT_INT_POWER = """
define internal double @rb_fpowi(double %a, i64 %b) {
entry:
  %neg = icmp slt i64 %b, 0
  %nb = sub i64 0, %b
  %e0 = select i1 %neg, i64 %nb, i64 %b
  %big = icmp ugt i64 %e0, 65536
  br i1 %big, label %generic, label %loop
generic:
  %fb = sitofp i64 %b to double
  %p = call double @llvm.pow.f64(double %a, double %fb)
  ret double %p
loop:
  %r = phi double [1.0, %entry], [%r2, %next]
  %x = phi double [%a, %entry], [%x2, %next]
  %e = phi i64 [%e0, %entry], [%e2, %next]
  %more = icmp ne i64 %e, 0
  br i1 %more, label %step, label %done
step:
  %bit = and i64 %e, 1
  %odd = icmp ne i64 %bit, 0
  %rm = fmul double %r, %x
  %r2 = select i1 %odd, double %rm, double %r
  %e2 = lshr i64 %e, 1
  %x2 = fmul double %x, %x
  br label %next
next:
  br label %loop
done:
  br i1 %neg, label %inv, label %plain
inv:
  %ri = fdiv double 1.0, %r
  ret double %ri
plain:
  ret double %r
}"""

#: ``runtime.int_pow``: a ** n for n >= 0 (codegen checks the sign), every product
#: checked; sets *bad on overflow
CHECKED_INT_POWER = """
define internal i64 @rb_ipow(i64 %a, i64 %n, ptr %bad) {
entry:
  store i1 false, ptr %bad
  %n0 = icmp eq i64 %n, 0
  %a1 = icmp eq i64 %a, 1
  %one = or i1 %n0, %a1
  br i1 %one, label %ret1, label %t0
ret1:
  ret i64 1
t0:
  %az = icmp eq i64 %a, 0
  br i1 %az, label %ret0, label %tm1
ret0:
  ret i64 0
tm1:
  %am1 = icmp eq i64 %a, -1
  br i1 %am1, label %sign, label %tbig
sign:
  %odd = and i64 %n, 1
  %isodd = icmp ne i64 %odd, 0
  %s = select i1 %isodd, i64 -1, i64 1
  ret i64 %s
tbig:
  %big = icmp sge i64 %n, 64
  br i1 %big, label %fail, label %loop
fail:
  store i1 true, ptr %bad
  ret i64 0
loop:
  %r = phi i64 [1, %tbig], [%r2, %ok]
  %i = phi i64 [0, %tbig], [%i2, %ok]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %mul, label %done
mul:
  %pr = call {i64, i1} @llvm.smul.with.overflow.i64(i64 %r, i64 %a)
  %r2 = extractvalue {i64, i1} %pr, 0
  %o = extractvalue {i64, i1} %pr, 1
  %i2 = add i64 %i, 1
  br i1 %o, label %fail, label %ok
ok:
  br label %loop
done:
  ret i64 %r
}"""

#: Ctrl-C polling: a countdown, then CPython's signal check where this thread holds the GIL
POLL = """
@rb_poll_countdown = internal global i32 0
declare i32 @PyGILState_Check()
declare i32 @PyErr_CheckSignals()
define internal i1 @rb_poll() alwaysinline {
entry:
  %left = load atomic i32, ptr @rb_poll_countdown monotonic, align 4
  %due = icmp sle i32 %left, 0
  br i1 %due, label %ask, label %count, !prof !{!"branch_weights", i32 1, i32 65535}
count:
  %l1 = sub i32 %left, 1
  store atomic i32 %l1, ptr @rb_poll_countdown monotonic, align 4
  ret i1 false
ask:
  %hit = call i1 @rb_poll_ask()
  ret i1 %hit
}
define internal i1 @rb_poll_ask() noinline cold {
entry:
  store atomic i32 EVERY, ptr @rb_poll_countdown monotonic, align 4
  %held = call i32 @PyGILState_Check()
  %has = icmp ne i32 %held, 0
  br i1 %has, label %check, label %no
check:
  %r = call i32 @PyErr_CheckSignals()
  %hit = icmp ne i32 %r, 0
  ret i1 %hit
no:
  ret i1 false
}"""

#: Python's float floor division and modulo (``y != 0``), as Numba's ``real_divmod``:
#: returns the floor quotient, stores the modulo (the sign of ``y``) in ``*pmod``
FLOAT_DIVMOD = """
define internal double @rb_fdivmod(double %x, double %y, ptr %pmod) {
entry:
  %m0 = frem double %x, %y
  %d0a = fsub double %x, %m0
  %d0 = fdiv double %d0a, %y
  %mnz = fcmp une double %m0, 0.0
  br i1 %mnz, label %nonzero, label %zero
nonzero:
  %yneg = fcmp olt double %y, 0.0
  %mneg = fcmp olt double %m0, 0.0
  %diff = xor i1 %yneg, %mneg
""" + _to_floor("double", "diff", "d0", "m0", "d", "m") + """  br label %join
zero:
  %yneg2 = fcmp olt double %y, 0.0
  %mz = select i1 %yneg2, double -0.0, double 0.0
  br label %join
join:
  %dd = phi double [%d, %nonzero], [%d0, %zero]
  %mm = phi double [%m, %nonzero], [%mz, %zero]
  store double %mm, ptr %pmod
  %dnz = fcmp one double %dd, 0.0
  br i1 %dnz, label %floor, label %dzero
floor:
  %fl = call double @llvm.floor.f64(double %dd)
  %fr = fsub double %dd, %fl
  %up = fcmp ogt double %fr, 0.5
  %fl1 = fadd double %fl, 1.0
  %r = select i1 %up, double %fl1, double %fl
  ret double %r
dzero:
  %sq = fmul double %dd, %dd
  %t = fmul double %sq, %x
  %r2 = fdiv double %t, %y
  ret double %r2
}"""

def _quotient(k: str, big: str, small: str, u: str, v: str, imag_first: bool) -> str:
    """One branch of ``_Py_c_quot``: ``q = small / big``, the denominator ``big + small*q``
    (written in CPython's operand order: IEEE addition commutes, subtraction does not),
    the real part ``(u + v*q) / d``, the imaginary part ``(v - u*q) / d`` or, dividing by
    the imaginary part (``imag_first``), ``(u*q - v) / d``."""
    d = (f"%bq{k}, %{big}" if imag_first else f"%{big}, %bq{k}")
    nr = (f"%vq{k}, %{u}" if imag_first else f"%{u}, %vq{k}")
    ni = (f"%uq{k}, %{v}" if imag_first else f"%{v}, %uq{k}")
    return (f"  %q{k} = fdiv double %{small}, %{big}\n  %bq{k} = fmul double %{small}, %q{k}\n"
            f"  %d{k} = fadd double {d}\n  %vq{k} = fmul double %{v}, %q{k}\n"
            f"  %nr{k} = fadd double {nr}\n  %rr{k} = fdiv double %nr{k}, %d{k}\n"
            f"  %uq{k} = fmul double %{u}, %q{k}\n  %ni{k} = fsub double {ni}\n"
            f"  %ri{k} = fdiv double %ni{k}, %d{k}\n  br label %done\n")


#: Python's complex division (CPython's ``_Py_c_quot``, which Numba copies) of ``a`` by a
#: ``b`` that is not zero (the caller raises for that): numerator and denominator divided by
#: the larger part of ``b``; a nan part of ``b`` gives nan
COMPLEX_DIVIDE = """
define internal { double, double } @rb_cdiv(double %ar, double %ai, double %br, double %bi) {
entry:
  %abr = call double @llvm.fabs.f64(double %br)
  %abi = call double @llvm.fabs.f64(double %bi)
  %byreal = fcmp oge double %abr, %abi
  br i1 %byreal, label %real, label %other
real:
""" + _quotient("1", "br", "bi", "ar", "ai", False) + """other:
  %byimag = fcmp oge double %abi, %abr
  br i1 %byimag, label %imag, label %done
imag:
""" + _quotient("2", "bi", "br", "ai", "ar", True) + """done:
  %re = phi double [%rr1, %real], [%rr2, %imag], [0x7FF8000000000000, %other]
  %im = phi double [%ri1, %real], [%ri2, %imag], [0x7FF8000000000000, %other]
  %z0 = insertvalue { double, double } undef, double %re, 0
  %z = insertvalue { double, double } %z0, double %im, 1
  ret { double, double } %z
}"""

#: a Python object a kernel held (a disk store's array) let go on its return, the
#: interpreter lock taken for it (``rb_release``), or already held (``rb_release_held``)
RELEASE = """
define internal void @rb_release(ptr %obj) {
entry:
  %none = icmp eq ptr %obj, null
  br i1 %none, label %done, label %drop
drop:
  %gil = call i32 @PyGILState_Ensure()
  call void @Py_DecRef(ptr %obj)
  call void @PyGILState_Release(i32 %gil)
  br label %done
done:
  ret void
}

define internal void @rb_release_held(ptr %obj) {
entry:
  %none = icmp eq ptr %obj, null
  br i1 %none, label %done, label %drop
drop:
  call void @Py_DecRef(ptr %obj)
  br label %done
done:
  ret void
}"""

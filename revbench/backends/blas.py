"""One matrix-product update, ``C += op(A) @ op(B)`` (or ``-=``), for every backend.

The update is one routine, ``rb_matmul``, written once in LLVM IR (:data:`MATMUL_IR`)
and compiled by revbench's own JIT (:func:`revbench.backends.native.engine.build_runtime`,
cached on disk like native kernels).  Every execution of generated code calls that same
machine code, so they agree bit for bit by construction, and the uncomputing ``-=`` of a
product takes away exactly what its ``+=`` added:

* the Python backend calls :func:`matmul_update`, through ctypes;
* Numba-compiled code calls :func:`numba_helper`'s implementation of it, which calls the
  external symbol ``rb_matmul`` (a name, not an address: Numba's disk cache stays valid);
* native kernels ``declare`` ``rb_matmul`` and call it by name.

The symbol resolves once :func:`matmul_symbol` has run in the process: call it before
any module that references ``rb_matmul`` is linked (a native kernel: before
``engine._build``; Numba code: before it is compiled or loaded from Numba's cache --
:func:`numba_helper`, through which generated code gets the Numba implementation, and
the module attribute ``numba_matmul_update`` call it).

The routine::

    i64 rb_matmul(ptr C, i64 cs0, i64 cs1, ptr A, i64 as0, i64 as1, ptr B, i64 bs0, i64 bs1,
                  i64 m, i64 n, i64 k, i64 subtract, i64 check)

A is m x k, B is k x n, C is m x n, float64, strides in bytes (any: negative, zero, not a
multiple of 8).  ``S = A @ B``; then for each row ``i``, each column ``j``:
``new = C[i,j] - S[i,j]`` if ``subtract`` else ``C[i,j] + S[i,j]``; where ``check`` and
``new`` is not finite the routine returns the flat index ``i*n + j`` without writing
that element (the earlier ones are written); else it stores ``new``.  It returns -1 when
all were written, -2 when it could not allocate its scratch memory (nothing written).
C must not overlap A or B.

``S`` is computed by a plain loop (``s = 0.0; s = s + A[i,p]*B[p,j]`` for ``p`` in order,
no fused multiply-add) where ``m*n*k < MATMUL_THRESHOLD``, else by BLAS -- SciPy's
``dgemm`` (``dgemv`` where ``n`` is 1), the library Numba's ``np.dot`` calls --
into a contiguous scratch matrix, by tiles (:data:`TILE_M` ...); operands whose strides
BLAS cannot take (no unit stride on either axis, a negative or zero stride, a stride not
of whole elements) are copied first.  Loop or BLAS depends on ``(m, n, k)`` alone, never
on strides or threads; BLAS's bits depend on the sizes, the values and how each operand
is handed to it (its rows or its columns of unit stride, or a copy): the same arrays
give the same bits, whatever the caller.  Each tile is small enough that OpenBLAS runs it
on the calling thread, so the bits do not depend on OpenBLAS's thread count either
(:func:`blas_threads` sets it; ``tests/test_blas.py`` compares 1 and 2) -- and the
routine uses one core.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from revbench.backends import runtime

#: ``m*n*k`` from which the product is computed by BLAS, not by the plain loop.
#: Measured (benchmarks/bench_blas_threshold.py: one thread, called from Numba code, each
#: path forced; 2-core Xeon (SkylakeX), SciPy's OpenBLAS 0.3.30), median time per
#: update, loop / BLAS, in two runs: 1^3 0.02 / 0.10 us, 4^3 0.07-0.13 / 0.11-0.22,
#: 6^3 0.17-0.33 / 0.13-0.27, 8^3 0.26-0.48 / 0.13-0.27, 12^3 1.2-1.4 / 0.51, 16^3
#: 2.5-3.0 / 0.65-0.70, 64^3 121-130 / 17-19, 256^3 7900-9500 / 940-1200; one row or
#: column: 1x64x16 0.35-0.66 / 0.39-0.39, 32x1x32 1.0-1.1 / 0.54-0.59.  BLAS wins from
#: about 216 for cubes, and in both runs for every shape measured from 1728 (12^3) on
#: (results/bench_blas_threshold.json holds the last run)
MATMUL_THRESHOLD = 1728

#: which products with one column or row call ``dgemv`` rather than ``dgemm``: 1, those
#: with one column.  Measured as above, ``dgemv`` / ``dgemm``: one column 512x1x512 51 /
#: 94 and 78 / 79 us, 128x1x128 3.5 / 4.6, 1024x1x1024 431-487 / 469-533 (64x1x64 1.25 /
#: 1.1); one row ``dgemm`` is faster: 1x64x64 0.96 / 0.66, 1x256x256 11.5 / 7.8,
#: 1x4096x1024 5200-6800 / 4100-5300
GEMV = 1

#: BLAS computes S by tiles: each ``dgemm`` call a block of at most TILE_M rows, TILE_N
#: columns and TILE_K of the sum (the blocks of the sum added in order, beta 0 then 1),
#: each ``dgemv`` call at most TILE_OUT outputs and TILE_RED of the sum -- small enough
#: that OpenBLAS runs every call on one thread, whatever its thread count: it does for
#: ``m*n*k <= 65536 * GEMM_MULTITHREAD_THRESHOLD`` (4 by default) in ``dgemm`` and for
#: ``m*n < 2304 * GEMM_MULTITHREAD_THRESHOLD`` in ``dgemv`` (interface/gemm.c, gemv.c).
#: Split among threads, OpenBLAS's results depend on their count: the split moves the
#: edge tiles of its kernels (other code, other roundings) and how it blocks ``k`` --
#: products of 100 x 500 x 50, 300 x 200 x 500, 1 x 500 x 1500 gave other bits with 2
#: threads than with 1 (SciPy's OpenBLAS 0.3.30, SkylakeX).  The tiles are fixed, so the
#: bits depend on (m, n, k) and the operands' layout alone (tests/test_blas.py)
TILE_M, TILE_N, TILE_K = 64, 64, 64
TILE_OUT, TILE_RED = 64, 128

#: the fewest multiply-adds a product gives each thread it runs on (smaller products stay
#: on the calling thread).  Measured (benchmarks/bench_product_threads.py: every product
#: threaded, 1 thread against 2, medians, the 2-core machine above): 128^3 (2.1 M) 0.80x,
#: 2000x64x32 (4.1 M) 1.12x, 192^3 1.08x, 256^3 1.55x, 384^3 1.64x; the threads win for
#: every shape from about 2 M multiply-adds a thread (waking the pool's threads costs tens
#: of microseconds)
THREAD_WORK = 1 << 21

#: the results of :data:`MATMUL_IR`'s routine besides a flat index
ALL_WRITTEN = -1
OUT_OF_MEMORY = -2

MATMUL_IR = r"""
@rb_matmul_threshold = global i64 @THRESHOLD@
@rb_matmul_gemv = global i64 @GEMV@
@rb_matmul_tile_m = global i64 @TILE_M@
@rb_matmul_tile_n = global i64 @TILE_N@
@rb_matmul_tile_k = global i64 @TILE_K@
@rb_matmul_tile_out = global i64 @TILE_OUT@
@rb_matmul_tile_red = global i64 @TILE_RED@
@rb_matmul_threads = global i64 1
@rb_matmul_thread_work = global i64 @THREAD_WORK@

declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare void @free(ptr)
declare double @llvm.fabs.f64(double)
declare <4 x double> @llvm.fabs.v4f64(<4 x double>)
declare i1 @llvm.vector.reduce.and.v4i1(<4 x i1>)
declare {i64, i1} @llvm.umul.with.overflow.i64(i64, i64)
; SciPy's cython_blas dgemm and dgemv: Fortran's arguments, all by pointer
declare void @rb_blas_dgemm(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)
declare void @rb_blas_dgemv(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)
; the C library's threads (their addresses registered by _addresses, from ctypes)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_trylock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @getpid()
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

; a tile's size along a dimension of %d: the setting at %g, or all of it where that is <= 0
define internal i64 @rb_mm_tile(ptr %g, i64 %d) alwaysinline {
entry:
  %t = load i64, ptr %g
  %pos = icmp sgt i64 %t, 0
  %r = select i1 %pos, i64 %t, i64 %d
  ret i64 %r
}

define internal i64 @rb_mm_min(i64 %a, i64 %b) alwaysinline {
entry:
  %lt = icmp slt i64 %a, %b
  %r = select i1 %lt, i64 %a, i64 %b
  ret i64 %r
}

; the r x c matrix at %src (byte strides %s0, %s1) copied into %dst, row-major
define internal void @rb_mm_pack(ptr %dst, ptr %src, i64 %s0, i64 %s1, i64 %r, i64 %c) {
entry:
  br label %rows
rows:
  %i = phi i64 [0, %entry], [%i1, %rowend]
  %rmore = icmp slt i64 %i, %r
  br i1 %rmore, label %rowstart, label %done
rowstart:
  %ro = mul i64 %i, %s0
  %rp = getelementptr i8, ptr %src, i64 %ro
  %dbase = mul i64 %i, %c
  br label %cols
cols:
  %j = phi i64 [0, %rowstart], [%j1, %col]
  %cmore = icmp slt i64 %j, %c
  br i1 %cmore, label %col, label %rowend
col:
  %co = mul i64 %j, %s1
  %sp = getelementptr i8, ptr %rp, i64 %co
  %v = load double, ptr %sp, align 1
  %di = add i64 %dbase, %j
  %dp = getelementptr double, ptr %dst, i64 %di
  store double %v, ptr %dp, align 8
  %j1 = add i64 %j, 1
  br label %cols
rowend:
  %i1 = add i64 %i, 1
  br label %rows
done:
  ret void
}

; the r x c operand at %x (byte strides %s0, %s1; r, c >= 1) as BLAS reads it: the
; transpose of a column-major matrix.  'N' where its columns have unit stride (the
; leading dimension: the row stride, >= c), 'T' where its rows have (the column stride,
; >= r), else a row-major copy ('N'), returned to be freed; *%data is null when that copy
; could not be allocated.
define internal ptr @rb_mm_operand(ptr %x, i64 %s0, i64 %s1, i64 %r, i64 %c, ptr %trans,
                                   ptr %ld, ptr %data) {
entry:
  %r1 = icmp eq i64 %r, 1
  %c1 = icmp eq i64 %c, 1
  %lo0 = and i64 %s0, 7
  %al0 = icmp eq i64 %lo0, 0
  %lo1 = and i64 %s1, 7
  %al1 = icmp eq i64 %lo1, 0
  %e0 = ashr i64 %s0, 3
  %e1 = ashr i64 %s1, 3
  %u0 = icmp eq i64 %s0, 8
  %u1 = icmp eq i64 %s1, 8
  ; 'N': unit column stride (or one column), row stride >= c (or one row)
  %g0 = icmp sge i64 %e0, %c
  %f0 = icmp sle i64 %e0, 2147483647
  %ok0a = and i1 %al0, %g0
  %ok0 = and i1 %ok0a, %f0
  %nc = or i1 %c1, %u1
  %nr = or i1 %r1, %ok0
  %nok = and i1 %nc, %nr
  %ldn = select i1 %r1, i64 %c, i64 %e0
  ; 'T': unit row stride (or one row), column stride >= r (or one column)
  %g1 = icmp sge i64 %e1, %r
  %f1 = icmp sle i64 %e1, 2147483647
  %ok1a = and i1 %al1, %g1
  %ok1 = and i1 %ok1a, %f1
  %tr = or i1 %r1, %u0
  %tc = or i1 %c1, %ok1
  %tok = and i1 %tr, %tc
  %ldt = select i1 %c1, i64 %r, i64 %e1
  br i1 %nok, label %asn, label %nott
asn:
  store i8 78, ptr %trans
  %ldn32 = trunc i64 %ldn to i32
  store i32 %ldn32, ptr %ld
  store ptr %x, ptr %data
  ret ptr null
nott:
  br i1 %tok, label %ast, label %pack
ast:
  store i8 84, ptr %trans
  %ldt32 = trunc i64 %ldt to i32
  store i32 %ldt32, ptr %ld
  store ptr %x, ptr %data
  ret ptr null
pack:
  %rc = mul i64 %r, %c
  %bytes = shl i64 %rc, 3
  %buf = call ptr @malloc(i64 %bytes)
  store ptr %buf, ptr %data
  %null = icmp eq ptr %buf, null
  br i1 %null, label %oom, label %copy
oom:
  ret ptr null
copy:
  call void @rb_mm_pack(ptr %buf, ptr %x, i64 %s0, i64 %s1, i64 %r, i64 %c)
  store i8 78, ptr %trans
  %c32 = trunc i64 %c to i32
  store i32 %c32, ptr %ld
  ret ptr %buf
}

; the vector of %len (>= 1) doubles at %x, byte stride %s, as BLAS reads it: a positive
; stride of whole elements, else a contiguous copy, returned to be freed (*%data null
; when it could not be allocated)
define internal ptr @rb_mm_vector(ptr %x, i64 %s, i64 %len, ptr %inc, ptr %data) {
entry:
  %lo = and i64 %s, 7
  %al = icmp eq i64 %lo, 0
  %e = ashr i64 %s, 3
  %pos = icmp sge i64 %e, 1
  %fit = icmp sle i64 %e, 2147483647
  %one = icmp eq i64 %len, 1
  %oka = and i1 %al, %pos
  %okb = and i1 %oka, %fit
  %ok = or i1 %one, %okb
  br i1 %ok, label %direct, label %pack
direct:
  %ei = select i1 %one, i64 1, i64 %e
  %e32 = trunc i64 %ei to i32
  store i32 %e32, ptr %inc
  store ptr %x, ptr %data
  ret ptr null
pack:
  %bytes = shl i64 %len, 3
  %buf = call ptr @malloc(i64 %bytes)
  store ptr %buf, ptr %data
  %null = icmp eq ptr %buf, null
  br i1 %null, label %oom, label %copy
oom:
  ret ptr null
copy:
  call void @rb_mm_pack(ptr %buf, ptr %x, i64 %s, i64 0, i64 %len, i64 1)
  store i32 1, ptr %inc
  ret ptr %buf
}

; --- the blocks of S, on the calling thread and on up to @rb_matmul_threads - 1 more ---
; A block is computed whole by one thread, its tiles of the sum in order: which thread
; computes it, and how many threads there are, changes no bit.  The context (%ctx, i64
; slots): 0 kind (0 dgemm, 1 dgemv), 1-2 the operands' 'N'/'T', 3-4 their data, 5-6
; their leading dimensions (dgemv: X's, the vector's increment), 7 S, 8 m (dgemv: the
; outputs), 9 n, 10 k, 11-13 the tiles (dgemv: outputs, sum, then whether X is held 'N'),
; 14 blocks along a row of S (dgemv: whether n is 1), 15 the blocks, 16 the next block.
define internal void @rb_mm_set(ptr %ctx, i64 %slot, i64 %v) alwaysinline {
entry:
  %p = getelementptr i64, ptr %ctx, i64 %slot
  store i64 %v, ptr %p
  ret void
}

define internal i64 @rb_mm_get(ptr %ctx, i64 %slot) alwaysinline {
entry:
  %p = getelementptr i64, ptr %ctx, i64 %slot
  %v = load i64, ptr %p
  ret i64 %v
}

; dgemm block %b: rows i0.. of S (at most tm), columns j0.. (at most tn), the sum by tiles
define internal void @rb_mm_gemm_block(ptr %ctx, i64 %b) {
entry:
  %ta = alloca i8
  %tb = alloca i8
  %la = alloca i32
  %lb = alloca i32
  %im = alloca i32
  %in = alloca i32
  %ik = alloca i32
  %ldc = alloca i32
  %alpha = alloca double
  %beta = alloca double
  %tac64 = call i64 @rb_mm_get(ptr %ctx, i64 1)
  %tbc64 = call i64 @rb_mm_get(ptr %ctx, i64 2)
  %tac = trunc i64 %tac64 to i8
  %tbc = trunc i64 %tbc64 to i8
  store i8 %tac, ptr %ta
  store i8 %tbc, ptr %tb
  %aN = icmp eq i8 %tac, 78
  %bN = icmp eq i8 %tbc, 78
  %dai = call i64 @rb_mm_get(ptr %ctx, i64 3)
  %dbi = call i64 @rb_mm_get(ptr %ctx, i64 4)
  %da = inttoptr i64 %dai to ptr
  %db = inttoptr i64 %dbi to ptr
  %lda64 = call i64 @rb_mm_get(ptr %ctx, i64 5)
  %ldb64 = call i64 @rb_mm_get(ptr %ctx, i64 6)
  %lda32 = trunc i64 %lda64 to i32
  %ldb32 = trunc i64 %ldb64 to i32
  store i32 %lda32, ptr %la
  store i32 %ldb32, ptr %lb
  %Si = call i64 @rb_mm_get(ptr %ctx, i64 7)
  %S = inttoptr i64 %Si to ptr
  %m = call i64 @rb_mm_get(ptr %ctx, i64 8)
  %n = call i64 @rb_mm_get(ptr %ctx, i64 9)
  %k = call i64 @rb_mm_get(ptr %ctx, i64 10)
  %tm = call i64 @rb_mm_get(ptr %ctx, i64 11)
  %tn = call i64 @rb_mm_get(ptr %ctx, i64 12)
  %tk = call i64 @rb_mm_get(ptr %ctx, i64 13)
  %bn = call i64 @rb_mm_get(ptr %ctx, i64 14)
  store double 1.0, ptr %alpha
  %n32 = trunc i64 %n to i32
  store i32 %n32, ptr %ldc
  %bi = udiv i64 %b, %bn
  %bj = urem i64 %b, %bn
  %i0 = mul i64 %bi, %tm
  %j0 = mul i64 %bj, %tn
  %ri = sub i64 %m, %i0
  %mb = call i64 @rb_mm_min(i64 %ri, i64 %tm)
  %mb32 = trunc i64 %mb to i32
  store i32 %mb32, ptr %im
  %rj = sub i64 %n, %j0
  %nb = call i64 @rb_mm_min(i64 %rj, i64 %tn)
  %nb32 = trunc i64 %nb to i32
  store i32 %nb32, ptr %in
  %sio = mul i64 %i0, %n
  %soff = add i64 %sio, %j0
  %Sblk = getelementptr double, ptr %S, i64 %soff
  br label %tp
tp:
  %p0 = phi i64 [0, %entry], [%p0n, %tp]
  %rp = sub i64 %k, %p0
  %kb = call i64 @rb_mm_min(i64 %rp, i64 %tk)
  %kb32 = trunc i64 %kb to i32
  store i32 %kb32, ptr %ik
  %first = icmp eq i64 %p0, 0
  %bval = select i1 %first, double 0.0, double 1.0
  store double %bval, ptr %beta
  ; A's block (rows i0.., columns p0..): 'N' (A^T held) i0*lda + p0, 'T' i0 + p0*lda
  %aN1 = mul i64 %i0, %lda64
  %aN2 = add i64 %aN1, %p0
  %aT1 = mul i64 %p0, %lda64
  %aT2 = add i64 %aT1, %i0
  %aoff = select i1 %aN, i64 %aN2, i64 %aT2
  %dac = getelementptr double, ptr %da, i64 %aoff
  ; B's block (rows p0.., columns j0..): 'N' (B^T held) p0*ldb + j0, 'T' p0 + j0*ldb
  %bN1 = mul i64 %p0, %ldb64
  %bN2 = add i64 %bN1, %j0
  %bT1 = mul i64 %j0, %ldb64
  %bT2 = add i64 %bT1, %p0
  %boff = select i1 %bN, i64 %bN2, i64 %bT2
  %dbc = getelementptr double, ptr %db, i64 %boff
  call void @rb_blas_dgemm(ptr %tb, ptr %ta, ptr %in, ptr %im, ptr %ik, ptr %alpha,
                           ptr %dbc, ptr %lb, ptr %dac, ptr %la, ptr %beta, ptr %Sblk,
                           ptr %ldc)
  %p0n = add i64 %p0, %kb
  %pm = icmp slt i64 %p0n, %k
  br i1 %pm, label %tp, label %done
done:
  ret void
}

; dgemv block %b: outputs o0.. (at most `to` of them), the sum by tiles in order
define internal void @rb_mm_gemv_block(ptr %ctx, i64 %b) {
entry:
  %tg = alloca i8
  %la = alloca i32
  %iv = alloca i32
  %im = alloca i32
  %in = alloca i32
  %one = alloca i32
  %alpha = alloca double
  %beta = alloca double
  %gt64 = call i64 @rb_mm_get(ptr %ctx, i64 1)
  %gt = trunc i64 %gt64 to i8
  store i8 %gt, ptr %tg
  %dxi = call i64 @rb_mm_get(ptr %ctx, i64 3)
  %dvi = call i64 @rb_mm_get(ptr %ctx, i64 4)
  %dx = inttoptr i64 %dxi to ptr
  %dv = inttoptr i64 %dvi to ptr
  %ldx = call i64 @rb_mm_get(ptr %ctx, i64 5)
  %inc = call i64 @rb_mm_get(ptr %ctx, i64 6)
  %ldx32 = trunc i64 %ldx to i32
  %inc32 = trunc i64 %inc to i32
  store i32 %ldx32, ptr %la
  store i32 %inc32, ptr %iv
  %Si = call i64 @rb_mm_get(ptr %ctx, i64 7)
  %S = inttoptr i64 %Si to ptr
  %olen = call i64 @rb_mm_get(ptr %ctx, i64 8)
  %k = call i64 @rb_mm_get(ptr %ctx, i64 10)
  %to = call i64 @rb_mm_get(ptr %ctx, i64 11)
  %tr = call i64 @rb_mm_get(ptr %ctx, i64 12)
  %isN64 = call i64 @rb_mm_get(ptr %ctx, i64 13)
  %n164 = call i64 @rb_mm_get(ptr %ctx, i64 14)
  %isN = icmp ne i64 %isN64, 0
  %n1 = icmp ne i64 %n164, 0
  store double 1.0, ptr %alpha
  store i32 1, ptr %one
  %o0 = mul i64 %b, %to
  %ro = sub i64 %olen, %o0
  %ob = call i64 @rb_mm_min(i64 %ro, i64 %to)
  %Sv0 = getelementptr double, ptr %S, i64 %o0
  br label %vr
vr:
  %q0 = phi i64 [0, %entry], [%q0n, %vr]
  %rq = sub i64 %k, %q0
  %qb = call i64 @rb_mm_min(i64 %rq, i64 %tr)
  %vfirst = icmp eq i64 %q0, 0
  %vbval = select i1 %vfirst, double 0.0, double 1.0
  store double %vbval, ptr %beta
  ; X's block: rows r0 (rsz of them), columns c0 (csz)
  %r0 = select i1 %n1, i64 %o0, i64 %q0
  %c0 = select i1 %n1, i64 %q0, i64 %o0
  %rsz = select i1 %n1, i64 %ob, i64 %qb
  %csz = select i1 %n1, i64 %qb, i64 %ob
  %xN1 = mul i64 %r0, %ldx
  %xN2 = add i64 %xN1, %c0
  %xT1 = mul i64 %c0, %ldx
  %xT2 = add i64 %xT1, %r0
  %xoff = select i1 %isN, i64 %xN2, i64 %xT2
  %dxc = getelementptr double, ptr %dx, i64 %xoff
  %gm = select i1 %isN, i64 %csz, i64 %rsz
  %gn = select i1 %isN, i64 %rsz, i64 %csz
  %gm32 = trunc i64 %gm to i32
  %gn32 = trunc i64 %gn to i32
  store i32 %gm32, ptr %im
  store i32 %gn32, ptr %in
  %voff = mul i64 %q0, %inc
  %dvc = getelementptr double, ptr %dv, i64 %voff
  call void @rb_blas_dgemv(ptr %tg, ptr %im, ptr %in, ptr %alpha, ptr %dxc, ptr %la,
                           ptr %dvc, ptr %iv, ptr %beta, ptr %Sv0, ptr %one)
  %q0n = add i64 %q0, %qb
  %qm = icmp slt i64 %q0n, %k
  br i1 %qm, label %vr, label %done
done:
  ret void
}

; a thread's work: the next block not taken, until none is left (pthread's start routine)
define internal ptr @rb_mm_worker(ptr %ctx) {
entry:
  %kind = call i64 @rb_mm_get(ptr %ctx, i64 0)
  %gemv = icmp ne i64 %kind, 0
  %total = call i64 @rb_mm_get(ptr %ctx, i64 15)
  %nextp = getelementptr i64, ptr %ctx, i64 16
  br label %take
take:
  %b = atomicrmw add ptr %nextp, i64 1 monotonic
  %more = icmp ult i64 %b, %total
  br i1 %more, label %run, label %done
run:
  br i1 %gemv, label %v, label %g
v:
  call void @rb_mm_gemv_block(ptr %ctx, i64 %b)
  br label %take
g:
  call void @rb_mm_gemm_block(ptr %ctx, i64 %b)
  br label %take
done:
  ret ptr null
}

; --- the pool: threads started once, by the first product that wants them, then woken ---
; for each product (a thread started per product costs OpenBLAS a new buffer each time).
; One product uses the pool at a time (@rb_pool_job); another, meanwhile, runs alone.
; The pthread objects are zeroed memory, which is their static initializer in glibc,
; larger than any of them; a process forked from this one starts with a pool of none.
@rb_pool_lock = internal global [128 x i8] zeroinitializer, align 16
@rb_pool_work = internal global [128 x i8] zeroinitializer, align 16
@rb_pool_done = internal global [128 x i8] zeroinitializer, align 16
@rb_pool_job = internal global [128 x i8] zeroinitializer, align 16
@rb_pool_threads = internal global i64 0
@rb_pool_gen = internal global i64 0
@rb_pool_want = internal global i64 0
@rb_pool_finished = internal global i64 0
@rb_pool_ctx = internal global ptr null
@rb_pool_pid = internal global i32 0

; a pool thread: %arg is {its index, the generation when it was started} (malloc'ed);
; it takes part in each product whose number of helpers is above its index
define internal ptr @rb_pool_main(ptr %arg) {
entry:
  %me = load i64, ptr %arg
  %bornp = getelementptr i64, ptr %arg, i64 1
  %born = load i64, ptr %bornp
  call void @free(ptr %arg)
  %seen = alloca i64
  store i64 %born, ptr %seen
  %l0 = call i32 @pthread_mutex_lock(ptr @rb_pool_lock)
  br label %wait
wait:
  %g = load i64, ptr @rb_pool_gen
  %s = load i64, ptr %seen
  %same = icmp eq i64 %g, %s
  br i1 %same, label %sleep, label %woke
sleep:
  %w = call i32 @pthread_cond_wait(ptr @rb_pool_work, ptr @rb_pool_lock)
  br label %wait
woke:
  store i64 %g, ptr %seen
  %want = load i64, ptr @rb_pool_want
  %mine = icmp ult i64 %me, %want
  br i1 %mine, label %work, label %wait
work:
  %ctx = load ptr, ptr @rb_pool_ctx
  %u0 = call i32 @pthread_mutex_unlock(ptr @rb_pool_lock)
  %r = call ptr @rb_mm_worker(ptr %ctx)
  %l1 = call i32 @pthread_mutex_lock(ptr @rb_pool_lock)
  %f = load i64, ptr @rb_pool_finished
  %f1 = add i64 %f, 1
  store i64 %f1, ptr @rb_pool_finished
  %sg = call i32 @pthread_cond_signal(ptr @rb_pool_done)
  br label %wait
}

; the %blocks blocks of a product of %work multiply-adds: on min(@rb_matmul_threads,
; %blocks, %work / @rb_matmul_thread_work) threads, this one among them (the pool's
; threads; where one cannot be started, or the pool is busy with another product, the
; threads there are do it all); back when every block is done
define internal void @rb_mm_run(ptr %ctx, i64 %blocks, i64 %work) {
entry:
  %cap = load i64, ptr @rb_matmul_threads
  %per0 = load i64, ptr @rb_matmul_thread_work
  %perpos = icmp sgt i64 %per0, 0
  %per = select i1 %perpos, i64 %per0, i64 1
  %want0 = udiv i64 %work, %per
  %t0 = call i64 @rb_mm_min(i64 %cap, i64 %blocks)
  %t1 = call i64 @rb_mm_min(i64 %t0, i64 %want0)
  %t2 = call i64 @rb_mm_min(i64 %t1, i64 256)
  %many = icmp sgt i64 %t2, 1
  br i1 %many, label %forked, label %alone
alone:
  %r0 = call ptr @rb_mm_worker(ptr %ctx)
  ret void
forked:
  %pid = call i32 @getpid()
  %was = load i32, ptr @rb_pool_pid
  %samepid = icmp eq i32 %pid, %was
  br i1 %samepid, label %take, label %reset
reset:
  ; (a new process: none of the pool's threads exist here)
  call void @llvm.memset.p0.i64(ptr @rb_pool_lock, i8 0, i64 128, i1 false)
  call void @llvm.memset.p0.i64(ptr @rb_pool_work, i8 0, i64 128, i1 false)
  call void @llvm.memset.p0.i64(ptr @rb_pool_done, i8 0, i64 128, i1 false)
  call void @llvm.memset.p0.i64(ptr @rb_pool_job, i8 0, i64 128, i1 false)
  store i64 0, ptr @rb_pool_threads
  store i64 0, ptr @rb_pool_gen
  store i32 %pid, ptr @rb_pool_pid
  br label %take
take:
  %busy = call i32 @pthread_mutex_trylock(ptr @rb_pool_job)
  %isbusy = icmp ne i32 %busy, 0
  br i1 %isbusy, label %alone, label %locked
locked:
  %l0 = call i32 @pthread_mutex_lock(ptr @rb_pool_lock)
  %need = sub i64 %t2, 1
  %tid = alloca i64
  br label %grow
grow:
  %have = load i64, ptr @rb_pool_threads
  %short = icmp ult i64 %have, %need
  br i1 %short, label %start, label %publish
start:
  %arg = call ptr @malloc(i64 16)
  %argnull = icmp eq ptr %arg, null
  br i1 %argnull, label %publish, label %fill
fill:
  store i64 %have, ptr %arg
  %gen0 = load i64, ptr @rb_pool_gen
  %genp = getelementptr i64, ptr %arg, i64 1
  store i64 %gen0, ptr %genp
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @rb_pool_main, ptr %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %nostart
nostart:
  call void @free(ptr %arg)
  br label %publish
started:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  %have1 = add i64 %have, 1
  store i64 %have1, ptr @rb_pool_threads
  br label %grow
publish:
  %have2 = load i64, ptr @rb_pool_threads
  %helpers = call i64 @rb_mm_min(i64 %need, i64 %have2)
  store ptr %ctx, ptr @rb_pool_ctx
  store i64 %helpers, ptr @rb_pool_want
  store i64 0, ptr @rb_pool_finished
  %g = load i64, ptr @rb_pool_gen
  %g1 = add i64 %g, 1
  store i64 %g1, ptr @rb_pool_gen
  %b = call i32 @pthread_cond_broadcast(ptr @rb_pool_work)
  %u0 = call i32 @pthread_mutex_unlock(ptr @rb_pool_lock)
  %r1 = call ptr @rb_mm_worker(ptr %ctx)
  %l1 = call i32 @pthread_mutex_lock(ptr @rb_pool_lock)
  br label %join
join:
  %fin = load i64, ptr @rb_pool_finished
  %all = icmp uge i64 %fin, %helpers
  br i1 %all, label %out, label %sleep
sleep:
  %w = call i32 @pthread_cond_wait(ptr @rb_pool_done, ptr @rb_pool_lock)
  br label %join
out:
  %u1 = call i32 @pthread_mutex_unlock(ptr @rb_pool_lock)
  %u2 = call i32 @pthread_mutex_unlock(ptr @rb_pool_job)
  ret void
}

define i64 @rb_matmul(ptr %C, i64 %cs0, i64 %cs1, ptr %A, i64 %as0, i64 %as1, ptr %B,
                      i64 %bs0, i64 %bs1, i64 %m, i64 %n, i64 %k, i64 %subtract,
                      i64 %check) {
entry:
  %ta = alloca i8
  %tb = alloca i8
  %la = alloca i32
  %lb = alloca i32
  %iv = alloca i32
  %pa = alloca ptr
  %pb = alloca ptr
  %Sp = alloca ptr
  %scr1 = alloca ptr
  %scr2 = alloca ptr
  %ctx = alloca [18 x i64]
  store ptr null, ptr %Sp
  store ptr null, ptr %scr1
  store ptr null, ptr %scr2
  %sub = icmp ne i64 %subtract, 0
  %chk = icmp ne i64 %check, 0
  %signmask = select i1 %sub, i64 -9223372036854775808, i64 0
  %sm0 = insertelement <4 x i64> poison, i64 %signmask, i64 0
  %signvec = shufflevector <4 x i64> %sm0, <4 x i64> poison, <4 x i32> zeroinitializer
  %nochk = xor i1 %chk, true
  %cunit = icmp eq i64 %cs1, 8
  %bs1x2 = shl i64 %bs1, 1
  %bs1x3 = mul i64 %bs1, 3
  %mpos = icmp sgt i64 %m, 0
  %npos = icmp sgt i64 %n, 0
  %some = and i1 %mpos, %npos
  br i1 %some, label %size, label %empty
empty:
  ret i64 -1
size:
  ; BLAS from m*n*k >= the threshold, where every size fits its int32 and S's bytes an i64
  %kpos = icmp sgt i64 %k, 0
  %k0 = select i1 %kpos, i64 %k, i64 0
  %mn.o = call {i64, i1} @llvm.umul.with.overflow.i64(i64 %m, i64 %n)
  %mn = extractvalue {i64, i1} %mn.o, 0
  %mnk.o = call {i64, i1} @llvm.umul.with.overflow.i64(i64 %mn, i64 %k0)
  %mnk = extractvalue {i64, i1} %mnk.o, 0
  %ovf = extractvalue {i64, i1} %mnk.o, 1
  %T = load i64, ptr @rb_matmul_threshold
  %atT = icmp uge i64 %mnk, %T
  %big0 = or i1 %atT, %ovf
  %big = and i1 %big0, %kpos
  %mf = icmp sle i64 %m, 2147483647
  %nf = icmp sle i64 %n, 2147483647
  %kf = icmp sle i64 %k, 2147483647
  %sf = icmp ult i64 %mn, 576460752303423488
  %f1 = and i1 %mf, %nf
  %f2 = and i1 %kf, %sf
  %fits = and i1 %f1, %f2
  %blas = and i1 %big, %fits
  br i1 %blas, label %blas.start, label %update.start
blas.start:
  %S = call ptr @calloc(i64 %mn, i64 8)
  %snull = icmp eq ptr %S, null
  br i1 %snull, label %oom.early, label %blas.kind
oom.early:
  ret i64 -2
blas.kind:
  store ptr %S, ptr %Sp
  ; dgemv for one column (@rb_matmul_gemv 1), or one row or column (2); else dgemm
  %gemvon = load i64, ptr @rb_matmul_gemv
  %gv1 = icmp sge i64 %gemvon, 1
  %gv2 = icmp sge i64 %gemvon, 2
  %n1 = icmp eq i64 %n, 1
  %m1 = icmp eq i64 %m, 1
  %col = and i1 %gv1, %n1
  %rowv = and i1 %gv2, %m1
  %usegemv = or i1 %col, %rowv
  br i1 %usegemv, label %gemv.start, label %gemm.start
gemm.start:
  ; S row-major is S^T column-major: S^T = B^T A^T, dgemm(op(B'), op(A')) by tiles
  %xa = call ptr @rb_mm_operand(ptr %A, i64 %as0, i64 %as1, i64 %m, i64 %k, ptr %ta,
                                ptr %la, ptr %pa)
  store ptr %xa, ptr %scr1
  %xb = call ptr @rb_mm_operand(ptr %B, i64 %bs0, i64 %bs1, i64 %k, i64 %n, ptr %tb,
                                ptr %lb, ptr %pb)
  store ptr %xb, ptr %scr2
  %da = load ptr, ptr %pa
  %db = load ptr, ptr %pb
  %nulla = icmp eq ptr %da, null
  %nullb = icmp eq ptr %db, null
  %anynull = or i1 %nulla, %nullb
  br i1 %anynull, label %oom, label %gemm.tiles
gemm.tiles:
  %tac = load i8, ptr %ta
  %tbc = load i8, ptr %tb
  %lda32 = load i32, ptr %la
  %lda64 = sext i32 %lda32 to i64
  %ldb32 = load i32, ptr %lb
  %ldb64 = sext i32 %ldb32 to i64
  %tm = call i64 @rb_mm_tile(ptr @rb_matmul_tile_m, i64 %m)
  %tn = call i64 @rb_mm_tile(ptr @rb_matmul_tile_n, i64 %n)
  %tk = call i64 @rb_mm_tile(ptr @rb_matmul_tile_k, i64 %k)
  ; the blocks of S: ceil(m / tm) rows of them, ceil(n / tn) in each
  %tm1 = sub i64 %tm, 1
  %mceil = add i64 %m, %tm1
  %bm = udiv i64 %mceil, %tm
  %tn1 = sub i64 %tn, 1
  %nceil = add i64 %n, %tn1
  %bn = udiv i64 %nceil, %tn
  %gblocks = mul i64 %bm, %bn
  %tac64 = zext i8 %tac to i64
  %tbc64 = zext i8 %tbc to i64
  %dai = ptrtoint ptr %da to i64
  %dbi = ptrtoint ptr %db to i64
  %Si = ptrtoint ptr %S to i64
  call void @rb_mm_set(ptr %ctx, i64 0, i64 0)
  call void @rb_mm_set(ptr %ctx, i64 1, i64 %tac64)
  call void @rb_mm_set(ptr %ctx, i64 2, i64 %tbc64)
  call void @rb_mm_set(ptr %ctx, i64 3, i64 %dai)
  call void @rb_mm_set(ptr %ctx, i64 4, i64 %dbi)
  call void @rb_mm_set(ptr %ctx, i64 5, i64 %lda64)
  call void @rb_mm_set(ptr %ctx, i64 6, i64 %ldb64)
  call void @rb_mm_set(ptr %ctx, i64 7, i64 %Si)
  call void @rb_mm_set(ptr %ctx, i64 8, i64 %m)
  call void @rb_mm_set(ptr %ctx, i64 9, i64 %n)
  call void @rb_mm_set(ptr %ctx, i64 10, i64 %k)
  call void @rb_mm_set(ptr %ctx, i64 11, i64 %tm)
  call void @rb_mm_set(ptr %ctx, i64 12, i64 %tn)
  call void @rb_mm_set(ptr %ctx, i64 13, i64 %tk)
  call void @rb_mm_set(ptr %ctx, i64 14, i64 %bn)
  call void @rb_mm_set(ptr %ctx, i64 15, i64 %gblocks)
  call void @rb_mm_set(ptr %ctx, i64 16, i64 0)
  %gwork = select i1 %ovf, i64 9223372036854775807, i64 %mnk
  call void @rb_mm_run(ptr %ctx, i64 %gblocks, i64 %gwork)
  br label %update.start
gemv.start:
  ; n == 1: S = A b (the matrix X is A, the vector B's column); else S^T = B^T a (X is
  ; B, the vector A's row).  X is r x c; the output runs along r (A) or c (B)
  %X = select i1 %n1, ptr %A, ptr %B
  %xs0 = select i1 %n1, i64 %as0, i64 %bs0
  %xs1 = select i1 %n1, i64 %as1, i64 %bs1
  %xr = select i1 %n1, i64 %m, i64 %k
  %xc = select i1 %n1, i64 %k, i64 %n
  %V = select i1 %n1, ptr %B, ptr %A
  %vs = select i1 %n1, i64 %bs0, i64 %as1
  %xm = call ptr @rb_mm_operand(ptr %X, i64 %xs0, i64 %xs1, i64 %xr, i64 %xc, ptr %ta,
                                ptr %la, ptr %pa)
  store ptr %xm, ptr %scr1
  %xv = call ptr @rb_mm_vector(ptr %V, i64 %vs, i64 %k, ptr %iv, ptr %pb)
  store ptr %xv, ptr %scr2
  %dx = load ptr, ptr %pa
  %dv = load ptr, ptr %pb
  %nullx = icmp eq ptr %dx, null
  %nullv = icmp eq ptr %dv, null
  %anynullv = or i1 %nullx, %nullv
  br i1 %anynullv, label %oom, label %gemv.tiles
gemv.tiles:
  ; what BLAS holds: 'N' is X^T (c x r column-major), 'T' is X (r x c)
  %t = load i8, ptr %ta
  %isN = icmp eq i8 %t, 78
  %flip = select i1 %isN, i8 84, i8 78
  %gt = select i1 %n1, i8 %flip, i8 %t
  %ldx32 = load i32, ptr %la
  %ldx = sext i32 %ldx32 to i64
  %inc32 = load i32, ptr %iv
  %inc = sext i32 %inc32 to i64
  %olen = select i1 %n1, i64 %xr, i64 %xc
  %to = call i64 @rb_mm_tile(ptr @rb_matmul_tile_out, i64 %olen)
  %tr = call i64 @rb_mm_tile(ptr @rb_matmul_tile_red, i64 %k)
  ; the blocks of S: ceil(olen / to) runs of outputs
  %to1 = sub i64 %to, 1
  %oceil = add i64 %olen, %to1
  %vblocks = udiv i64 %oceil, %to
  %gt64 = zext i8 %gt to i64
  %dxi = ptrtoint ptr %dx to i64
  %dvi = ptrtoint ptr %dv to i64
  %Svi = ptrtoint ptr %S to i64
  %isN64 = zext i1 %isN to i64
  %n164 = zext i1 %n1 to i64
  call void @rb_mm_set(ptr %ctx, i64 0, i64 1)
  call void @rb_mm_set(ptr %ctx, i64 1, i64 %gt64)
  call void @rb_mm_set(ptr %ctx, i64 3, i64 %dxi)
  call void @rb_mm_set(ptr %ctx, i64 4, i64 %dvi)
  call void @rb_mm_set(ptr %ctx, i64 5, i64 %ldx)
  call void @rb_mm_set(ptr %ctx, i64 6, i64 %inc)
  call void @rb_mm_set(ptr %ctx, i64 7, i64 %Svi)
  call void @rb_mm_set(ptr %ctx, i64 8, i64 %olen)
  call void @rb_mm_set(ptr %ctx, i64 10, i64 %k)
  call void @rb_mm_set(ptr %ctx, i64 11, i64 %to)
  call void @rb_mm_set(ptr %ctx, i64 12, i64 %tr)
  call void @rb_mm_set(ptr %ctx, i64 13, i64 %isN64)
  call void @rb_mm_set(ptr %ctx, i64 14, i64 %n164)
  call void @rb_mm_set(ptr %ctx, i64 15, i64 %vblocks)
  call void @rb_mm_set(ptr %ctx, i64 16, i64 0)
  %vwork0 = mul i64 %olen, %k
  call void @rb_mm_run(ptr %ctx, i64 %vblocks, i64 %vwork0)
  br label %update.start
oom:
  %o1 = load ptr, ptr %scr1
  call void @free(ptr %o1)
  %o2 = load ptr, ptr %scr2
  call void @free(ptr %o2)
  call void @free(ptr %S)
  ret i64 -2
update.start:
  ; new = old + S (old + -S: the sign flipped, which is old - S bit for bit)
  %Sv = load ptr, ptr %Sp
  %fromblas = icmp ne ptr %Sv, null
  br i1 %fromblas, label %srows, label %rows
srows:
  %si = phi i64 [0, %update.start], [%si1, %srownext]
  %srmore = icmp slt i64 %si, %m
  br i1 %srmore, label %srow, label %finish
srow:
  %scro = mul i64 %si, %cs0
  %scrow = getelementptr i8, ptr %C, i64 %scro
  %ssro = mul i64 %si, %n
  %sprow = getelementptr double, ptr %Sv, i64 %ssro
  br i1 %cunit, label %vloop, label %sscalar
vloop:
  ; C's row contiguous: four elements at a time, stored where all four are finite (or
  ; unchecked); else the elements one by one from the first of the four
  %vj = phi i64 [0, %srow], [%vj4, %vstore]
  %vj4 = add i64 %vj, 4
  %vfits = icmp sle i64 %vj4, %n
  br i1 %vfits, label %vbody, label %sscalar
vbody:
  %vsp = getelementptr double, ptr %sprow, i64 %vj
  %vsv = load <4 x double>, ptr %vsp, align 8
  %vcp = getelementptr double, ptr %scrow, i64 %vj
  %vc = load <4 x double>, ptr %vcp, align 1
  %vsb = bitcast <4 x double> %vsv to <4 x i64>
  %vsx = xor <4 x i64> %vsb, %signvec
  %vsf = bitcast <4 x i64> %vsx to <4 x double>
  %vn = fadd <4 x double> %vc, %vsf
  %vmag = call <4 x double> @llvm.fabs.v4f64(<4 x double> %vn)
  %vfin = fcmp olt <4 x double> %vmag, <double 0x7FF0000000000000, double 0x7FF0000000000000,
                                          double 0x7FF0000000000000, double 0x7FF0000000000000>
  %vall = call i1 @llvm.vector.reduce.and.v4i1(<4 x i1> %vfin)
  %vok = or i1 %vall, %nochk
  br i1 %vok, label %vstore, label %sscalar
vstore:
  store <4 x double> %vn, ptr %vcp, align 1
  br label %vloop
sscalar:
  %sj0 = phi i64 [0, %srow], [%vj, %vloop], [%vj, %vbody]
  br label %scols
scols:
  %sj = phi i64 [%sj0, %sscalar], [%sj1, %sstore]
  %scmore = icmp slt i64 %sj, %n
  br i1 %scmore, label %selem, label %srownext
selem:
  %spp = getelementptr double, ptr %sprow, i64 %sj
  %sval = load double, ptr %spp, align 8
  %sco = mul i64 %sj, %cs1
  %scp = getelementptr i8, ptr %scrow, i64 %sco
  %sold = load double, ptr %scp, align 1
  %svb = bitcast double %sval to i64
  %svx = xor i64 %svb, %signmask
  %svf = bitcast i64 %svx to double
  %snew = fadd double %sold, %svf
  %smag = call double @llvm.fabs.f64(double %snew)
  %sfin = fcmp olt double %smag, 0x7FF0000000000000
  %snfin = xor i1 %sfin, true
  %sbad = and i1 %chk, %snfin
  br i1 %sbad, label %sfail, label %sstore
sstore:
  store double %snew, ptr %scp, align 1
  %sj1 = add i64 %sj, 1
  br label %scols
srownext:
  %si1 = add i64 %si, 1
  br label %srows
sfail:
  %sfi = add i64 %ssro, %sj
  br label %finish
rows:
  %i = phi i64 [0, %update.start], [%i1, %rownext]
  %rmore = icmp slt i64 %i, %m
  br i1 %rmore, label %row, label %finish
row:
  %cro = mul i64 %i, %cs0
  %crow = getelementptr i8, ptr %C, i64 %cro
  %aro = mul i64 %i, %as0
  %arow = getelementptr i8, ptr %A, i64 %aro
  %sro = mul i64 %i, %n
  br label %cols4
cols4:
  ; four columns at a time: four sums side by side (each its own sum, in order), then
  ; the four updates one after the other
  %q = phi i64 [0, %row], [%q4, %apply4.3.store]
  %q4 = add i64 %q, 4
  %fits4 = icmp sle i64 %q4, %n
  br i1 %fits4, label %dot4, label %cols
dot4:
  %bq = mul i64 %q, %bs1
  %bcol4 = getelementptr i8, ptr %B, i64 %bq
  br label %dloop4
dloop4:
  %p4 = phi i64 [0, %dot4], [%p41, %dbody4]
  %acc = phi <4 x double> [zeroinitializer, %dot4], [%acc1, %dbody4]
  %dmore4 = icmp slt i64 %p4, %k
  br i1 %dmore4, label %dbody4, label %apply4
dbody4:
  %apo4 = mul i64 %p4, %as1
  %app4 = getelementptr i8, ptr %arow, i64 %apo4
  %av4 = load double, ptr %app4, align 1
  %bpo4 = mul i64 %p4, %bs0
  %bp0 = getelementptr i8, ptr %bcol4, i64 %bpo4
  %bp1 = getelementptr i8, ptr %bp0, i64 %bs1
  %bp2 = getelementptr i8, ptr %bp0, i64 %bs1x2
  %bp3 = getelementptr i8, ptr %bp0, i64 %bs1x3
  %b0 = load double, ptr %bp0, align 1
  %b1 = load double, ptr %bp1, align 1
  %b2 = load double, ptr %bp2, align 1
  %b3 = load double, ptr %bp3, align 1
  %bv0 = insertelement <4 x double> poison, double %b0, i64 0
  %bv1 = insertelement <4 x double> %bv0, double %b1, i64 1
  %bv2 = insertelement <4 x double> %bv1, double %b2, i64 2
  %bv3 = insertelement <4 x double> %bv2, double %b3, i64 3
  %as0v = insertelement <4 x double> poison, double %av4, i64 0
  %asv = shufflevector <4 x double> %as0v, <4 x double> poison, <4 x i32> zeroinitializer
  %prod4 = fmul <4 x double> %asv, %bv3
  %acc1 = fadd <4 x double> %acc, %prod4
  %p41 = add i64 %p4, 1
  br label %dloop4
apply4:
  br label %apply4.0
@APPLY4@
cols:
  %j = phi i64 [%q, %cols4], [%j1, %store]
  %cmore = icmp slt i64 %j, %n
  br i1 %cmore, label %dot, label %rownext
dot:
  ; s = 0.0; s = s + A[i,p] * B[p,j], p in order: no fused multiply-add, no reordering
  %bco = mul i64 %j, %bs1
  %bcol = getelementptr i8, ptr %B, i64 %bco
  br label %dloop
dloop:
  %p = phi i64 [0, %dot], [%p1, %dbody]
  %s = phi double [0.0, %dot], [%s1, %dbody]
  %dmore = icmp slt i64 %p, %k
  br i1 %dmore, label %dbody, label %apply
dbody:
  %apo = mul i64 %p, %as1
  %app = getelementptr i8, ptr %arow, i64 %apo
  %av = load double, ptr %app, align 1
  %bpo = mul i64 %p, %bs0
  %bpp = getelementptr i8, ptr %bcol, i64 %bpo
  %bv = load double, ptr %bpp, align 1
  %prod = fmul double %av, %bv
  %s1 = fadd double %s, %prod
  %p1 = add i64 %p, 1
  br label %dloop
apply:
  %cco = mul i64 %j, %cs1
  %cp = getelementptr i8, ptr %crow, i64 %cco
  %old = load double, ptr %cp, align 1
  %vb = bitcast double %s to i64
  %vx = xor i64 %vb, %signmask
  %vf = bitcast i64 %vx to double
  %new = fadd double %old, %vf
  %mag = call double @llvm.fabs.f64(double %new)
  %fin = fcmp olt double %mag, 0x7FF0000000000000
  %nfin = xor i1 %fin, true
  %bad = and i1 %chk, %nfin
  br i1 %bad, label %fail, label %store
store:
  store double %new, ptr %cp, align 1
  %j1 = add i64 %j, 1
  br label %cols
rownext:
  %i1 = add i64 %i, 1
  br label %rows
fail:
  %fj = phi i64 [%j, %apply], @FAIL4@
  %fi = add i64 %sro, %fj
  br label %finish
finish:
  %res = phi i64 [-1, %srows], [%sfi, %sfail], [-1, %rows], [%fi, %fail]
  %q1 = load ptr, ptr %scr1
  call void @free(ptr %q1)
  %q2 = load ptr, ptr %scr2
  call void @free(ptr %q2)
  call void @free(ptr %Sv)
  ret i64 %res
}
"""


def _apply4() -> tuple[str, str]:
    """The loop's four updates from its four sums (``%acc``), in order, and where each
    fails (the phi entries of ``%fail``'s column)."""
    blocks, fails = [], []
    for q in range(4):
        nxt = f"%apply4.{q + 1}" if q < 3 else "%cols4"
        blocks.append(
            f"apply4.{q}:\n"
            f"  %s.{q} = extractelement <4 x double> %acc, i64 {q}\n"
            f"  %j.{q} = add i64 %q, {q}\n"
            f"  %cco.{q} = mul i64 %j.{q}, %cs1\n"
            f"  %cp.{q} = getelementptr i8, ptr %crow, i64 %cco.{q}\n"
            f"  %old.{q} = load double, ptr %cp.{q}, align 1\n"
            f"  %vb.{q} = bitcast double %s.{q} to i64\n"
            f"  %vx.{q} = xor i64 %vb.{q}, %signmask\n"
            f"  %vf.{q} = bitcast i64 %vx.{q} to double\n"
            f"  %new.{q} = fadd double %old.{q}, %vf.{q}\n"
            f"  %mag.{q} = call double @llvm.fabs.f64(double %new.{q})\n"
            f"  %fin.{q} = fcmp olt double %mag.{q}, 0x7FF0000000000000\n"
            f"  %nfin.{q} = xor i1 %fin.{q}, true\n"
            f"  %bad.{q} = and i1 %chk, %nfin.{q}\n"
            f"  br i1 %bad.{q}, label %fail, label %apply4.{q}.store\n"
            f"apply4.{q}.store:\n"
            f"  store double %new.{q}, ptr %cp.{q}, align 1\n"
            f"  br label {nxt}\n")
        fails.append(f"[%j.{q}, %apply4.{q}]")
    return "".join(blocks), ", ".join(fails)


def matmul_ir(threshold: int = MATMUL_THRESHOLD) -> str:
    """The routine's module, its threshold written in."""
    apply4, fail4 = _apply4()
    return (MATMUL_IR.replace("@APPLY4@", apply4.rstrip("\n")).replace("@FAIL4@", fail4)
            .replace("@THRESHOLD@", str(int(threshold))).replace("@GEMV@", str(GEMV))
            .replace("@TILE_M@", str(TILE_M)).replace("@TILE_N@", str(TILE_N))
            .replace("@TILE_K@", str(TILE_K)).replace("@TILE_OUT@", str(TILE_OUT))
            .replace("@TILE_RED@", str(TILE_RED))
            .replace("@THREAD_WORK@", str(THREAD_WORK)))


# --------------------------------------------------------------------------- #
# SciPy's BLAS, and the routine in this process
# --------------------------------------------------------------------------- #
def _capsule_pointer(capsule: Any) -> int:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get_pointer(capsule, get_name(capsule)))


#: the C library's functions the routine's thread pool calls
_PTHREAD = ("pthread_create", "pthread_detach", "pthread_mutex_lock", "pthread_mutex_trylock",
            "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_broadcast",
            "pthread_cond_signal", "getpid")


def _pthread_pointers() -> dict[str, int]:
    """The C library's threads, locks and conditions, for the routine's pool of threads
    (registered by address, as the BLAS is)."""
    libc = ctypes.CDLL(None)
    return {name: ctypes.cast(getattr(libc, name), ctypes.c_void_p).value for name in _PTHREAD}


def _cython_blas() -> Any:
    """SciPy's ``scipy.linalg.cython_blas``, the extension module itself: where SciPy's
    layout is the usual one, loaded from its file without running ``scipy.linalg``'s
    ``__init__`` (a quarter of a second: most of a warm first call's time), else imported.
    Its functions are the same either way: the library is loaded once per process."""
    import importlib.util
    import os
    import sys

    module = sys.modules.get("scipy.linalg.cython_blas")
    if module is not None:
        return module
    try:
        import scipy

        folder = os.path.join(os.path.dirname(scipy.__file__), "linalg")
        name = next(f for f in sorted(os.listdir(folder))
                    if f.startswith("cython_blas.") and f.endswith((".so", ".pyd")))
        spec = importlib.util.spec_from_file_location("scipy.linalg.cython_blas",
                                                      os.path.join(folder, name))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not {"dgemm", "dgemv"} <= set(module.__pyx_capi__):
            raise ImportError("cython_blas without dgemm and dgemv")
        return module
    except Exception:  # (another layout: the plain import)
        from scipy.linalg import cython_blas

        return cython_blas


def blas_pointers() -> dict[str, int]:
    """The addresses of SciPy's ``dgemm`` and ``dgemv`` (``scipy.linalg.cython_blas``:
    the BLAS Numba's ``np.dot`` calls), by the names the routine declares them with."""
    capi = _cython_blas().__pyx_capi__
    return {"rb_blas_dgemm": _capsule_pointer(capi["dgemm"]),
            "rb_blas_dgemv": _capsule_pointer(capi["dgemv"])}


#: the routine's symbols: the function, then the settings (:class:`_Knobs`)
_NAMES = ("rb_matmul", "rb_matmul_threshold", "rb_matmul_gemv", "rb_matmul_tile_m",
          "rb_matmul_tile_n", "rb_matmul_tile_k", "rb_matmul_tile_out", "rb_matmul_tile_red",
          "rb_matmul_threads", "rb_matmul_thread_work")
#: their addresses, once made
_SYMBOLS: list[tuple[int, ...]] = []


def _addresses() -> tuple[int, ...]:
    if not _SYMBOLS:
        import llvmlite.binding as llvm

        from revbench.backends.native import engine

        for name, address in {**blas_pointers(), **_pthread_pointers()}.items():
            llvm.add_symbol(name, address)
        # (engine.build_runtime holds the JIT's lock: a second thread here gets the same
        # addresses, and registering a symbol again with its own address changes nothing)
        found = engine.build_runtime(matmul_ir(), _NAMES)
        llvm.add_symbol("rb_matmul", found[0])
        if not _SYMBOLS:
            ctypes.c_int64.from_address(found[_NAMES.index("rb_matmul_threads")]).value = (
                _effective_threads())
            _SYMBOLS.append(found)
    return _SYMBOLS[0]


def matmul_symbol() -> int:
    """The address of ``rb_matmul``, compiled (or loaded from the disk cache) once per
    process and registered under that name with llvmlite (``add_symbol``): the JIT of
    native kernels and Numba's resolve the symbol from then on.  Call it before linking
    any module that references ``rb_matmul``.  Idempotent and thread-safe."""
    return (_SYMBOLS[0] if _SYMBOLS else _addresses())[0]


class _Knobs:
    """The routine's settings in this process, for benchmarks only (a process that
    changes them computes other bits than every other process): ``threshold`` (the
    ``m*n*k`` from which BLAS computes the product: 0 forces BLAS, ``2**63 - 1`` the loop),
    ``gemv`` (:data:`GEMV`: 0 every product calls ``dgemm``, 1 one with one column calls
    ``dgemv``, 2 one with one row too), the tiles (``tile_m`` ... :data:`TILE_M`; 0: the
    whole dimension in one call) and ``thread_work`` (:data:`THREAD_WORK`).  The thread
    count, ``threads``, is :func:`set_threads`'s (it changes no bit)."""

    def _cell(self, name: str) -> ctypes.c_int64:
        return ctypes.c_int64.from_address(_addresses()[_NAMES.index(f"rb_matmul_{name}")])

    def __getattr__(self, name: str) -> int:
        if f"rb_matmul_{name}" not in _NAMES[1:]:
            raise AttributeError(name)
        return self._cell(name).value

    def __setattr__(self, name: str, value: int) -> None:
        if f"rb_matmul_{name}" not in _NAMES[1:]:
            raise AttributeError(name)
        self._cell(name).value = int(value)

    def settings(self) -> dict[str, int]:
        return {name[len("rb_matmul_"):]: getattr(self, name[len("rb_matmul_"):])
                for name in _NAMES[1:]}


knobs = _Knobs()


_ROUTINE: list = []

_ARGTYPES = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64) * 3 + (ctypes.c_int64,) * 5


def _routine():
    """The routine as ctypes calls it (releasing the GIL while it runs)."""
    if not _ROUTINE:
        _ROUTINE.append(ctypes.CFUNCTYPE(ctypes.c_int64, *_ARGTYPES)(matmul_symbol()))
    return _ROUTINE[0]


# --------------------------------------------------------------------------- #
# The Python backend's entry
# --------------------------------------------------------------------------- #
def _shapes(C, A, B) -> str:
    return (f"C {getattr(C, 'shape', None)}, A {getattr(A, 'shape', None)}, "
            f"B {getattr(B, 'shape', None)}")


def geometry(C, A, B, trans_a, trans_b) -> tuple[int, ...]:
    """``(m, n, k, cs0, cs1, as0, as1, bs0, bs1)`` of ``C op= op(A) @ op(B)`` (NumPy's
    rules for 1-D and 2-D operands: a 1-D A is a row, a 1-D B a column, C what the
    product is; a 2-D C and two 1-D operands: ``np.outer(A, B)``, k = 1); ValueError
    naming the shapes where they do not agree, where an array is not float64 or C is
    read-only."""
    arrays = (C, A, B)
    if not all(isinstance(x, np.ndarray) and x.dtype == np.float64 for x in arrays):
        raise ValueError(f"matmul_update takes float64 arrays: {_shapes(C, A, B)}")
    if (C.ndim, A.ndim, B.ndim) == (2, 1, 1):  # np.outer(A, B): a column times a row
        if C.shape != (A.shape[0], B.shape[0]):
            raise ValueError(f"matmul_update: the shapes do not make C op= np.outer(A, B): "
                             f"{_shapes(C, A, B)}")
        if not C.flags.writeable:
            raise ValueError(f"matmul_update: C is read-only: {_shapes(C, A, B)}")
        return (A.shape[0], B.shape[0], 1, *C.strides, A.strides[0], 0, 0, B.strides[0])
    if A.ndim == 2:
        (m, k), (as0, as1) = A.shape, A.strides
        if trans_a:
            m, k, as0, as1 = k, m, as1, as0
    elif A.ndim == 1:
        m, k, as0, as1 = 1, A.shape[0], 0, A.strides[0]
    else:
        m = k = as0 = as1 = -1
    if B.ndim == 2:
        (kb, n), (bs0, bs1) = B.shape, B.strides
        if trans_b:
            kb, n, bs0, bs1 = n, kb, bs1, bs0
    elif B.ndim == 1:
        kb, n, bs0, bs1 = B.shape[0], 1, B.strides[0], 0
    else:
        kb = n = bs0 = bs1 = -1
    if A.ndim == 2 and B.ndim == 2:
        expect, cs = (m, n), C.strides if C.ndim == 2 else None
    elif A.ndim == 2 and B.ndim == 1:
        expect, cs = (m,), (C.strides[0], 0) if C.ndim == 1 else None
    elif A.ndim == 1 and B.ndim == 2:
        expect, cs = (n,), (0, C.strides[0]) if C.ndim == 1 else None
    else:
        expect, cs = None, None
    if expect is None or m < 0 or kb != k or C.shape != expect or cs is None:
        raise ValueError(f"matmul_update: the shapes do not make C op= A @ B "
                         f"(trans_a={int(bool(trans_a))}, trans_b={int(bool(trans_b))}): "
                         f"{_shapes(C, A, B)}")
    if not C.flags.writeable:
        raise ValueError(f"matmul_update: C is read-only: {_shapes(C, A, B)}")
    return m, n, k, cs[0], cs[1], as0, as1, bs0, bs1


def _call(C, A, B, g: tuple[int, ...], subtract, check) -> int:
    m, n, k, cs0, cs1, as0, as1, bs0, bs1 = g
    r = _routine()(C.ctypes.data, cs0, cs1, A.ctypes.data, as0, as1, B.ctypes.data, bs0, bs1,
                   m, n, k, 1 if subtract else 0, 1 if check else 0)
    if r == OUT_OF_MEMORY:
        raise MemoryError(f"matmul_update: no memory for a product of {m} x {k} and {k} x {n}")
    return r


def matmul_update(C, A, B, trans_a, trans_b, subtract, check) -> int:
    """``C += op(A) @ op(B)`` (``-=`` where ``subtract``), ``op`` the transpose where
    ``trans_a`` / ``trans_b`` (2-D operands).  With ``check``, stops at the first element
    the update makes infinite or nan and returns its flat index (row-major in C's m x n),
    leaving it and the later ones unwritten; else -1.  (:func:`matmul_failed` finishes
    the update the way a failed checked float update does.)"""
    return _call(C, A, B, geometry(C, A, B, trans_a, trans_b), subtract, check)


def _product(A, B, g: tuple[int, ...]) -> np.ndarray:
    """The product the routine adds, in a new m x n array, bit for bit: -0.0 + s is s for
    every s (0.0 + -0.0 would be +0.0)."""
    m, n, k, _, _, as0, as1, bs0, bs1 = g
    P = np.full((m, n), -0.0)
    _call(P, A, B, (m, n, k, P.strides[0], P.strides[1], as0, as1, bs0, bs1), False, False)
    return P


def _as_matrix(C, m: int, n: int) -> np.ndarray:
    return C if C.ndim == 2 else C.reshape(m, n) if C.flags.c_contiguous else (
        C[:, None] if n == 1 else C[None, :])


def matmul_failed(C, A, B, trans_a, trans_b, subtract, index, module, k) -> None:
    """What a checked update does when :func:`matmul_update` returned ``index``: what a
    checked float ``y += value`` (``-=``) does at each element from ``index`` on, in
    order -- :func:`runtime.shift_failed` raises check ``k`` or ``k + 1`` of ``module``
    (``CheckFailed``); an element that was infinite or nan already is updated, and the
    update goes on."""
    g = geometry(C, A, B, trans_a, trans_b)
    m, n = g[0], g[1]
    P = _product(A, B, g)
    M = _as_matrix(C, m, n)
    for f in range(int(index), m * n):
        i, j = divmod(f, n)
        old, value = float(M[i, j]), float(P[i, j])
        new = old - value if subtract else old + value
        if not abs(new) < math.inf:
            runtime.shift_failed(old, new, value, module, k)
        M[i, j] = new


# --------------------------------------------------------------------------- #
# Threads
# --------------------------------------------------------------------------- #
_THREADS: list[int] = []
_ENV_THREADS = ("REVBENCH_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def default_threads() -> int:
    """The threads a matrix product runs on when :func:`set_threads` has not said: the
    first of ``REVBENCH_THREADS``, ``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` that
    is set (a positive integer; the first entry of a list such as ``"4,2"``), else every
    core this process may run on."""
    import os

    for name in _ENV_THREADS:
        raw = os.environ.get(name, "").split(",")[0].strip()
        if raw:
            try:
                n = int(raw)
            except ValueError:
                raise ValueError(f"{name}={os.environ[name]!r}: the number of threads must "
                                 "be a positive integer") from None
            if n >= 1:
                return n
            raise ValueError(f"{name}={os.environ[name]!r}: the number of threads must be a "
                             "positive integer")
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        return os.cpu_count() or 1


def get_threads() -> int:
    """The threads a large matrix product runs on now (:func:`set_threads`)."""
    return _THREADS[-1] if _THREADS else default_threads()


def set_threads(threads: int | None) -> None:
    """Run each large matrix product of generated code (``C += A @ B``, its inverse and
    adjoints) on up to ``threads`` threads, from now on, in this process; ``None``: the
    default again (:func:`default_threads`: the environment, else every core).

    The product's blocks are computed whole, each by one thread, by the same calls: the
    results are the same bits on 1 thread or 64 (``tests/test_blas.py``).  A product
    takes one more thread for every :data:`THREAD_WORK` multiply-adds, so small ones
    stay on the calling thread.  Everything else -- elementwise loops, sums -- runs on the
    calling thread, unless ``batch=``/``workers=`` spread the items over threads."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    _THREADS.clear()
    if threads is not None:
        _THREADS.append(threads)
    if _SYMBOLS:
        _cell_of("rb_matmul_threads").value = _effective_threads()


#: how many batched runs (``batch=``/``workers=``, several workers) are going on
_BATCHED = [0]
_BATCHED_LOCK = threading.Lock()


def _effective_threads() -> int:
    return 1 if _BATCHED[0] else get_threads()


@contextlib.contextmanager
def batched_items() -> Iterator[None]:
    """While a batched run spreads its items over worker threads, products run on each
    worker's own thread (every core is busy already: more threads would only queue).
    Process-wide while it lasts: another call's products meanwhile run on one thread as
    well -- slower, never other bits."""
    with _BATCHED_LOCK:
        _BATCHED[0] += 1
        if _SYMBOLS:
            _cell_of("rb_matmul_threads").value = 1
    try:
        yield
    finally:
        with _BATCHED_LOCK:
            _BATCHED[0] -= 1
            if _SYMBOLS:
                _cell_of("rb_matmul_threads").value = _effective_threads()


@contextlib.contextmanager
def threads(threads: int | None) -> Iterator[None]:
    """``with revbench.threads(n): ...`` -- :func:`set_threads` ``(n)`` for the block,
    the setting before it restored after."""
    before = _THREADS[-1] if _THREADS else None
    set_threads(threads)
    try:
        yield
    finally:
        set_threads(before)


def _cell_of(name: str) -> ctypes.c_int64:
    return ctypes.c_int64.from_address(_addresses()[_NAMES.index(name)])


def _blas_controllers():
    """threadpoolctl's controllers of the BLAS this routine calls: SciPy's (its wheels
    bundle an OpenBLAS of their own), else every BLAS threadpoolctl finds (a SciPy built
    against a system BLAS)."""
    import os

    import scipy
    from scipy.linalg import cython_blas  # noqa: F401 (loads SciPy's BLAS)
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    blas = controller.select(user_api="blas")
    root = os.path.dirname(os.path.dirname(os.path.realpath(scipy.__file__)))
    own = [os.path.join(root, "scipy.libs"), os.path.join(root, "scipy")]
    mine = [lib.filepath for lib in blas.lib_controllers
            if any(os.path.realpath(lib.filepath).startswith(p + os.sep) for p in own)]
    return controller.select(filepath=mine) if mine else blas


def blas_threads(n: int):
    """Limit the BLAS this routine calls to ``n`` threads, from now on: a context manager
    that restores the limits on exit, or call ``restore_original_limits()`` on what it
    returns (threadpoolctl's limiter).  The routine's results do not depend on it."""
    return _blas_controllers().limit(limits=int(n))


def blas_thread_info() -> list[dict]:
    """threadpoolctl's description of the BLAS this routine calls (``num_threads`` ...)."""
    return _blas_controllers().info()


# --------------------------------------------------------------------------- #
# Numba
# --------------------------------------------------------------------------- #
@functools.cache
def _numba_functions() -> dict[str, Any]:
    """The routine's Numba callers (compiled in callers, which keep ``rb_matmul`` as an
    external symbol: cacheable), made once per process, the symbol registered first."""
    matmul_symbol()
    import numba
    from numba.core import cgutils
    from numba.core import types as nb
    from numba.extending import intrinsic, overload

    i64 = nb.int64
    routine = nb.ExternalFunction(
        "rb_matmul", i64(nb.voidptr, i64, i64, nb.voidptr, i64, i64, nb.voidptr, i64, i64,
                         i64, i64, i64, i64, i64))

    @intrinsic
    def data_pointer(typingctx, arr):
        if not isinstance(arr, nb.Array):
            return None

        def codegen(context, builder, sig, args):
            a = context.make_array(sig.args[0])(context, builder, args[0])
            return builder.bitcast(a.data, context.get_value_type(nb.voidptr))

        return nb.voidptr(arr), codegen

    def shapes(C, A, B, trans_a, trans_b):
        raise NotImplementedError  # (compiled code only)

    @overload(shapes, jit_options={"nogil": True})
    def shapes_impl(C, A, B, trans_a, trans_b):
        """(m, n, k, cs0, cs1, as0, as1, bs0, bs1), each operand's rank known."""
        if not all(isinstance(x, nb.Array) and x.dtype == nb.float64 for x in (C, A, B)):
            return None
        dims = (C.ndim, A.ndim, B.ndim)
        if dims not in ((2, 2, 2), (1, 2, 1), (1, 1, 2), (2, 1, 1)):
            return None
        if dims == (2, 1, 1):
            def outer(C, A, B, trans_a, trans_b):
                if C.shape[0] != A.shape[0] or C.shape[1] != B.shape[0]:
                    raise ValueError("matmul_update: the shapes do not make C op= np.outer(A, B)")
                return (A.shape[0], B.shape[0], 1, C.strides[0], C.strides[1], A.strides[0], 0,
                        0, B.strides[0])
            return outer

        if A.ndim == 2:
            def a_of(A, t):
                if t:
                    return A.shape[1], A.shape[0], A.strides[1], A.strides[0]
                return A.shape[0], A.shape[1], A.strides[0], A.strides[1]
        else:
            def a_of(A, t):
                return 1, A.shape[0], 0, A.strides[0]
        if B.ndim == 2:
            def b_of(B, t):
                if t:
                    return B.shape[1], B.shape[0], B.strides[1], B.strides[0]
                return B.shape[0], B.shape[1], B.strides[0], B.strides[1]
        else:
            def b_of(B, t):
                return B.shape[0], 1, B.strides[0], 0
        a_of, b_of = numba.njit(a_of), numba.njit(b_of)

        if dims == (2, 2, 2):
            def impl(C, A, B, trans_a, trans_b):
                m, k, as0, as1 = a_of(A, trans_a)
                kb, n, bs0, bs1 = b_of(B, trans_b)
                if kb != k or C.shape[0] != m or C.shape[1] != n:
                    raise ValueError("matmul_update: the shapes do not make C op= A @ B")
                return m, n, k, C.strides[0], C.strides[1], as0, as1, bs0, bs1
        elif dims == (1, 2, 1):
            def impl(C, A, B, trans_a, trans_b):
                m, k, as0, as1 = a_of(A, trans_a)
                kb, n, bs0, bs1 = b_of(B, trans_b)
                if kb != k or C.shape[0] != m:
                    raise ValueError("matmul_update: the shapes do not make C op= A @ B")
                return m, n, k, C.strides[0], 0, as0, as1, bs0, bs1
        else:
            def impl(C, A, B, trans_a, trans_b):
                m, k, as0, as1 = a_of(A, trans_a)
                kb, n, bs0, bs1 = b_of(B, trans_b)
                if kb != k or C.shape[0] != n:
                    raise ValueError("matmul_update: the shapes do not make C op= A @ B")
                return m, n, k, 0, C.strides[0], as0, as1, bs0, bs1
        return impl

    @numba.njit(nogil=True)
    def rb_matmul_update(C, A, B, trans_a, trans_b, subtract, check):
        m, n, k, cs0, cs1, as0, as1, bs0, bs1 = shapes(C, A, B, trans_a, trans_b)
        r = routine(data_pointer(C), cs0, cs1, data_pointer(A), as0, as1, data_pointer(B),
                    bs0, bs1, m, n, k, 1 if subtract else 0, 1 if check else 0)
        if r == -2:
            raise MemoryError("matmul_update: no memory for the product")
        return r

    @intrinsic
    def load_at(typingctx, ptr, offset):
        """The double at ``ptr + offset`` bytes."""
        def codegen(context, builder, sig, args):
            p = cgutils.pointer_add(builder, args[0], args[1],
                                    context.get_value_type(nb.CPointer(nb.float64)))
            return builder.load(p, align=1)

        return nb.float64(nb.voidptr, nb.intp), codegen

    @intrinsic
    def store_at(typingctx, ptr, offset, value):
        """``value`` stored at ``ptr + offset`` bytes."""
        def codegen(context, builder, sig, args):
            p = cgutils.pointer_add(builder, args[0], args[1],
                                    context.get_value_type(nb.CPointer(nb.float64)))
            builder.store(args[2], p, align=1)
            return context.get_dummy_value()

        return nb.none(nb.voidptr, nb.intp, nb.float64), codegen

    shift_failed = numba.njit(runtime.copy_function(runtime.shift_failed, "rb_shift_failed"))

    @numba.njit
    def rb_matmul_failed(C, A, B, trans_a, trans_b, subtract, index, module, k):
        m, n, kk, cs0, cs1, as0, as1, bs0, bs1 = shapes(C, A, B, trans_a, trans_b)
        P = np.full((m, n), -0.0)
        r = routine(data_pointer(P), n * 8, 8, data_pointer(A), as0, as1, data_pointer(B),
                    bs0, bs1, m, n, kk, 0, 0)
        if r == -2:
            raise MemoryError("matmul_update: no memory for the product")
        c = data_pointer(C)
        for f in range(index, m * n):
            i, j = f // n, f % n
            old = load_at(c, i * cs0 + j * cs1)
            value = P[i, j]
            new = old - value if subtract else old + value
            if not abs(new) < math.inf:
                shift_failed(old, new, value, module, k)
            store_at(c, i * cs0 + j * cs1, new)

    return {"update": rb_matmul_update, "failed": rb_matmul_failed}


def numba_helper(fn: Any) -> Any:
    """The Numba implementation of :func:`matmul_update` or :func:`matmul_failed` (the
    same arguments), or None for any other function; ``rb_matmul`` is registered first
    (generated code gets these through ``numba_checks.inline_helper``, also when its
    caller is loaded from Numba's cache)."""
    if fn is matmul_update:
        return _numba_functions()["update"]
    if fn is matmul_failed:
        return _numba_functions()["failed"]
    return None


def _provide_symbol() -> None:
    """Tell the native engine how to register ``rb_matmul`` before it links a kernel that
    calls it (the engine does not import this module: it sits below it)."""
    from revbench.backends.native import engine

    engine.SYMBOL_PROVIDERS["rb_matmul"] = matmul_symbol


_provide_symbol()


def __getattr__(name: str) -> Any:
    # ``numba_matmul_update`` / ``numba_matmul_failed``: the Numba implementations, made
    # (and the symbol registered) when first asked for -- importing the module compiles
    # nothing
    if name == "numba_matmul_update":
        return _numba_functions()["update"]
    if name == "numba_matmul_failed":
        return _numba_functions()["failed"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Helpers of the compiled runtimes' kernels: a state in one int64 buffer
(the belady kernels'), and ``prefetch`` (the frequency and belady kernels').

**One buffer.** A numba call unboxes every array argument (a fraction of a
microsecond each, more with cold caches), and an event's kernel read a dozen
state arrays. :func:`pack` lays a state's arrays out in one int64 buffer
``S`` (each region 64-byte aligned) and makes them views of it, so a kernel
takes ``S`` alone and cuts the regions out (:func:`region`, :func:`rows`):
the Python side keeps reading and writing the same memory through the views.
``S``'s header: region ``x`` starts at ``S[2 * x]`` and holds ``S[2 * x + 1]``
elements (8-byte ones: int64, uint64 or float64, viewed as such).

**prefetch(a, i, j)** asks the CPU for the cache line of ``a[i, j]`` (a 2-D
array) without waiting for it (x86 ``prefetcht0``). The engine's kernels run
with cold caches (the model's work between engine steps evicts them), and
their per-block rows are scattered: a loop that reads them one by one waits
for one miss after another where a miss depends on the row before it (a hash
table's slot, then its key row). A pass that prefetches every block's line
first overlaps those misses. A prefetch never faults and changes no value;
its index must still lie inside the array (nothing checks bounds).
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: LLVM's name of the intrinsic: opaque pointers (LLVM 15 on) or typed ``i8*``.
_NAME = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch(typingctx, a, i, j):
    """Prefetch the line of ``a[i, j]`` for reading, into every cache level."""
    def codegen(context, builder, signature, args):
        aty = signature.args[0]
        arr = context.make_array(aty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aty, arr, [args[1], args[2]])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _NAME)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, high locality, data
        return context.get_dummy_value()

    return types.void(a, i, j), codegen


@numba.njit(cache=True, nogil=True)
def region(S, x):
    """Region ``x`` of buffer ``S``: a 1-D int64 view (``.view`` it for another dtype)."""
    a = S[2 * x]
    return S[a:a + S[2 * x + 1]]


@numba.njit(cache=True, nogil=True)
def rows(S, x, w):
    """Region ``x`` of buffer ``S`` as ``(n, w)`` int64 rows."""
    a = region(S, x)
    return a.reshape((a.shape[0] // w, w))


def pack(s: dict, names: tuple[str, ...]) -> np.ndarray:
    """Lay the arrays ``s[name]`` (8-byte dtypes, C order) out in one new
    int64 buffer as regions ``0, 1, ...`` in ``names`` order; each ``s[name]``
    becomes its view there (same shape, dtype and contents: all-zero arrays are
    not copied, so their pages are committed only as used). Returns the buffer."""
    p = (2 * len(names) + 7) // 8 * 8
    starts = []
    for name in names:
        if s[name].dtype.itemsize != 8:
            raise TypeError(f"{name}: {s[name].dtype} (8-byte elements only)")
        starts.append(p)
        p += (s[name].size + 7) // 8 * 8
    buf = np.zeros(p + 8, np.int64)
    skip = (-buf.ctypes.data % 64) // 8  # (regions on 64-byte boundaries: rows of 4 or 8 on cache lines)
    S = buf[skip:skip + p]
    for x, name in enumerate(names):
        a = s[name]
        S[2 * x], S[2 * x + 1] = starts[x], a.size
        v = S[starts[x]:starts[x] + a.size].view(a.dtype).reshape(a.shape)
        if a.any():
            v[...] = a
        s[name] = v
    return S

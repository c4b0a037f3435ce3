"""``prefetch(a, i, j)``: a numba intrinsic asking the CPU for the cache line
of ``a[i, j]`` (a 2-D array) without waiting for it (x86 ``prefetcht0``).

The engine's kernels run with cold caches (the model's work between engine
steps evicts them), and their per-block rows are scattered: a loop that
reads them one by one waits for one miss after another where a miss depends
on the row before it (a hash table's slot, then its key row). A pass that
prefetches every block's line first overlaps those misses; the loop after
it finds the lines in cache. A prefetch never faults and changes no value,
so a prefetched index need not be valid in bounds of the logic (it must lie
inside the array: numba checks no bounds, nor does this).
"""

from __future__ import annotations

import llvmlite.binding as llvm
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

"""Software prefetch for the numba kernels (``llvm.prefetch``); needs numba.

``prefetch_read(array, i)`` and ``prefetch_write(array, i)`` hint the CPU to load the
cache line of ``array[i]`` into every cache level, for reading or for writing. They
never fault and never wait: kernels issue them ahead of random accesses (the lines
of a random sample, the swap targets of a shuffle) so that those loads overlap.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["prefetch_read", "prefetch_write"]


def _prefetch_intrinsic(write: int) -> Any:
    """An intrinsic ``(array, index) -> None`` prefetching for reading (0) or writing (1)."""

    def prefetch(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
                context, builder, array_type, view, [args[1]], wraparound=False
            )
            i32 = ir.IntType(32)
            function_type = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
            declared = builder.module.declare_intrinsic(
                "llvm.prefetch", [cgutils.voidptr_t], function_type
            )
            # access kind, highest temporal locality (every cache level), data cache
            builder.call(
                declared,
                [
                    builder.bitcast(pointer, cgutils.voidptr_t),
                    ir.Constant(i32, write),
                    ir.Constant(i32, 3),
                    ir.Constant(i32, 1),
                ],
            )
            return context.get_dummy_value()

        return types.void(array, index), codegen

    prefetch.__name__ = "prefetch_write" if write else "prefetch_read"
    return intrinsic(prefetch)


prefetch_read = _prefetch_intrinsic(0)
prefetch_write = _prefetch_intrinsic(1)

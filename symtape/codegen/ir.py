"""The shell every generated LLVM module shares: types and fast-math flags, names, the
exported entry points and the ``body`` they call, declarations, attributes, the module text.

Straight-line kernels (:mod:`~symtape.codegen.kernel`) and loop nests
(:mod:`~symtape.codegen.loops`) differ only in what ``body`` does between its head and its
tail. Both modules are written as ``header``, declarations and definitions, then
:func:`entries` and the attributes (:func:`module`). The two exported entry points call
``body``, both ``i32 (i64 n, ptr ptrs, ...)`` with ``ptrs`` the array of input then output
pointers; they return ``body``'s status: 0, or 1 when memory it asked the heap for was not
there.
"""

from __future__ import annotations

import math
import re

import numpy as np

from symtape.base.lazy import LazyModule

vecmath = LazyModule("vecmath", globals(), "symtape.codegen.vecmath")

__all__ = ["FASTMATH_FLAGS", "TYPES", "ATTRIBUTES", "MALLOC", "MEMSET", "MEMCPY", "entry_symbol",
           "symbol_names", "formats", "float_literal", "header", "entries", "body_head",
           "body_tail", "no_memory", "module"]

# The LLVM fast-math flags ``fastmath=True`` puts on float arithmetic and calls. Each is a
# licence to round differently from the IEEE reference, taken only on request:
FASTMATH_FLAGS = (
    "contract",  # fuse a*b+c into one FMA: fewer instructions, one rounding instead of two
    "reassoc",  # reorder sums and products: lets LLVM rebalance long chains and share terms
    "nsz",  # ignore the sign of zero: x+0 -> x and x*0 -> 0 style folds become legal
    "arcp",  # x/y -> x*(1/y): a hoisted reciprocal is cheaper than repeated divisions
    "afn",  # approximate libm functions where LLVM knows a faster expansion (pow -> sqrt)
)
# ``nnan`` and ``ninf`` are left out on purpose: nan and inf are values here (comparisons,
# Max/Min and Piecewise select on them), and those flags would make their results undefined.

# dtype name -> (LLVM type, intrinsic suffix, libm suffix, size in bytes)
TYPES = {
    "float64": ("double", "f64", "", 8),
    "float32": ("float", "f32", "f", 4),
}

# the attribute group of the IR functions the op templates define (exp, log, tanh, ...)
ATTRIBUTES = "attributes #0 = { nounwind willreturn memory(none) }"

# Declarations of the C and LLVM functions the shell's arenas and copies call.
MALLOC = ("declare ptr @malloc(i64)", "declare void @free(ptr)")
MEMSET = "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)"
MEMCPY = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"


def entry_symbol(name: str | None) -> str:
    """The symbol of a compiled function called ``name`` (its strided entry point).

    >>> entry_symbol("loss(x)"), entry_symbol(None)
    ('st_loss_x_', 'st_fn')
    """
    # ASCII only: LLVM identifiers and C symbols take no other letters
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name or "fn")
    return f"st_{ident}"


def symbol_names(name: str) -> tuple[str, str]:
    """The exported symbols ``(strided, dense)`` of the kernel called ``name``.

    >>> symbol_names("st_f")
    ('st_f', 'st_f_dense')
    """
    return name, f"{name}_dense"


def formats(dtype: str, fastmath: bool) -> tuple:
    """``(fmt, size)``: the names op templates are formatted with (float type, intrinsic and
    libm suffixes, fast-math flags) and the float size in bytes.

    >>> formats("float32", False)
    ({'t': 'float', 'sfx': 'f32', 'm': 'f', 'fm': ''}, 4)
    """
    t, sfx, m, size = TYPES[dtype]
    fm = " ".join(FASTMATH_FLAGS) + " " if fastmath else ""
    return {"t": t, "sfx": sfx, "m": m, "fm": fm}, size


def float_literal(value: float, dtype: str) -> str:
    """An IR float constant: the exact double (rounded to float first for float32), in hex.

    >>> float_literal(1.0, "float64"), float_literal(0.1, "float32")
    ('0x3FF0000000000000', '0x3FB99999A0000000')
    """
    if dtype == "float32":
        with np.errstate(over="ignore"):
            value = float(np.float32(value))
    return vecmath.double_literal(value)


def header(kind: str, name: str, plan, extra: str = "") -> str:
    """The module's first line, a comment saying what it computes.

    >>> from symtape.codegen.plan import Plan
    >>> header("kernel", "f", Plan((), (), ()))
    '; symtape kernel f: 0 inputs, 0 outputs'
    """
    return (f"; symtape {kind} {name}: {len(plan.inputs)} inputs, {len(plan.outputs)} "
            f"outputs{extra}")


def entries(plan, name: str) -> list[str]:
    """The exported entry points of the kernel called ``name``, both calling ``body``:

    * ``<name>(n, ptrs, strides)`` reads the strides from an array: broadcasting (stride 0),
      strided views and caller-chosen output strides;
    * ``<name>_dense(n, ptrs)`` fixes every stride to its core size, the layout of contiguous
      arrays; constant strides let LLVM see the exact access pattern when it vectorises.

    >>> from symtape.codegen.plan import Plan
    >>> entries(Plan((), (), ()), "f")[0]
    'define i32 @f(i64 %n, ptr %ptrs, ptr %strides) nounwind {'
    """
    n_ptr = len(plan.inputs) + len(plan.outputs)
    strided, dense = symbol_names(name)
    loads = [f"  %p{i}.a = getelementptr ptr, ptr %ptrs, i64 {i}\n"
             f"  %p{i} = load ptr, ptr %p{i}.a" for i in range(n_ptr)]
    strides = [f"  %s{i}.a = getelementptr i64, ptr %strides, i64 {i}\n"
               f"  %s{i} = load i64, ptr %s{i}.a" for i in range(n_ptr)]
    ptr_args = ", ".join(f"ptr %p{i}" for i in range(n_ptr))
    sizes = [math.prod(a.shape) for a in plan.inputs] + [math.prod(o.shape) for o in plan.outputs]
    dense_strides = "".join(f", i64 {s}" for s in sizes)
    runtime_strides = "".join(f", i64 %s{i}" for i in range(n_ptr))
    sep = ", " if n_ptr else ""
    return [
        f"define i32 @{strided}(i64 %n, ptr %ptrs, ptr %strides) nounwind {{",
        "entry:", *loads, *strides,
        f"  %status = call i32 @body(i64 %n{sep}{ptr_args}{runtime_strides})",
        "  ret i32 %status", "}", "",
        f"define i32 @{dense}(i64 %n, ptr %ptrs) nounwind {{",
        "entry:", *loads,
        f"  %status = call i32 @body(i64 %n{sep}{ptr_args}{dense_strides})",
        "  ret i32 %status", "}", "",
    ]


def body_head(n_bufs: int, first: str) -> list[str]:
    """The opening of ``body(n, buffers..., strides...)``: nothing to do unless ``n > 0``,
    else on to block ``first`` (the block ``%done`` of :func:`body_tail` returns).

    >>> body_head(1, "loop")[-2:]
    ['  br i1 %go, label %loop, label %done', 'loop:']
    """
    params = ["i64 %n"] + [f"ptr noalias %b{i}" for i in range(n_bufs)]
    params += [f"i64 %s{i}" for i in range(n_bufs)]
    return [
        f"define internal i32 @body({', '.join(params)}) alwaysinline nounwind {{",
        "entry:",
        "  %go = icmp sgt i64 %n, 0",
        f"  br i1 %go, label %{first}, label %done",
        f"{first}:",
    ]


def body_tail() -> list[str]:
    """The close of ``body``: block ``%done`` returns status 0.

    >>> body_tail()[:2]
    ['done:', '  ret i32 0']
    """
    return ["done:", "  ret i32 0", "}", ""]


def no_memory(label: str) -> list[str]:
    """Block ``label`` of ``body``, where a ``malloc`` came back empty: status 1.

    >>> no_memory("fail")
    ['fail:', '  ret i32 1']
    """
    return [f"{label}:", "  ret i32 1"]


def module(head: list[str], parts: list[str], plan, name: str, after: list[str] = (),
           metadata: list[str] = ()) -> str:
    """The module text: ``head`` (the :func:`header` and what belongs before the
    definitions), ``parts``, the :func:`entries`, ``after`` (more exported functions),
    the attributes and ``metadata``.

    >>> from symtape.codegen.plan import Plan
    >>> text = module([header("kernel", "f", Plan((), (), ()))], [], Plan((), (), ()), "f")
    >>> text.splitlines()[-1] == ATTRIBUTES
    True
    """
    return "\n".join(list(head) + list(parts) + entries(plan, name) + list(after)
                     + [ATTRIBUTES] + list(metadata) + [""])

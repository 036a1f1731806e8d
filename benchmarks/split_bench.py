"""Optimisation time of large kernels, cut into functions (``kernel.SPLIT_OPS``) against
whole, in the same run.

The kernel is ``(C @ (x*x + 1))**2`` for ``x`` of n elements and a constant n x n ``C``
(about 2 n**2 operations, unrolled). For each n: LLVM's optimise-and-emit time of the kernel
as generated (cut every 2,000 operations) and of the same plan as one function, and that
both give the same values.

    python benchmarks/split_bench.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from symtape.codegen import jit, kernel  # noqa: E402


def llvm_seconds(ir: str) -> float:
    t = time.perf_counter()
    jit.compile_object(ir)
    return time.perf_counter() - t


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'n':>4s} {'ops':>7s} {'cut (s)':>8s} {'whole (s)':>10s} {'whole / cut':>12s}")
    for n in (40, 80, 120):
        x = st.symbol("x", shape=(n,))
        c = st.constant(rng.normal(size=(n, n)))
        y = st.matmul(c, st.reshape(x * x + 1.0, (n, 1))) ** 2
        cut = st.compile(y, [x], name=f"cut{n}")
        limit, kernel.SPLIT_OPS = kernel.SPLIT_OPS, 10 ** 9
        try:
            whole = st.compile(y, [x], name=f"whole{n}")
        finally:
            kernel.SPLIT_OPS = limit
        xs = rng.normal(size=(10, n))
        assert np.array_equal(cut(xs), whole(xs))
        t_cut, t_whole = llvm_seconds(cut.llvm_ir), llvm_seconds(whole.llvm_ir)
        print(f"{n:4d} {cut.plan.n_ops:7d} {t_cut:8.2f} {t_whole:10.2f} "
              f"{t_whole / t_cut:11.2f}x")


if __name__ == "__main__":
    main()

"""Higher derivatives by Taylor mode: ``st.derivative(f, order=k)`` for k = 1 .. 12.

``f(x) = exp(sin(x)) * tanh(x) / (1 + x**2)`` (8 ops). For each order: trace + compile time
(empty object cache), the nodes of the k-th derivative's DAG (it grows quadratically in k:
every op's Taylor recurrence is O(k^2)), and the largest error at 100 points against
``sympy.diff`` evaluated with mpmath at 40 digits (relative to the largest value). Order 1
is one reverse sweep; orders 2 and up are Taylor mode. Targets (k = 10): trace + compile
<= 0.3 s, values within 1e-12 relative of ``sympy.diff``.

    python benchmarks/taylor.py [--orders 12]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import mpmath  # noqa: E402
import sympy as sp  # noqa: E402

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from symtape import graph as G  # noqa: E402
from symtape import taylor  # noqa: E402


def f(x):
    return st.exp(st.sin(x)) * st.tanh(x) / (1 + x ** 2)


def dag_nodes(order: int) -> int:
    x = st.symbol("x")
    (c,) = taylor.coefficients([f(x)._atoms.flat[0]], [x._atoms.flat[0]], [G.ONE], order)
    return len(G.reachable([c[-1]]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=12)
    args = ap.parse_args()
    x = sp.Symbol("x", real=True)
    expr = sp.exp(sp.sin(x)) * sp.tanh(x) / (1 + x ** 2)
    points = np.linspace(-3.0, 3.0, 100)
    print(f"{'k':>3} {'trace+compile':>14} {'nodes':>7} {'rel. error':>11}")
    for k in range(1, args.orders + 1):
        t = time.perf_counter()
        dk = st.derivative(f, order=k, input_signature=[st.TensorSpec(())])
        got = dk(points)
        setup = time.perf_counter() - t
        ref = sp.lambdify(x, sp.diff(expr, x, k), "mpmath")
        with mpmath.workdps(40):
            want = np.array([float(ref(mpmath.mpf(float(p)))) for p in points])
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        print(f"{k:>3} {setup * 1e3:>11.1f} ms {dag_nodes(k):>7} {err:>11.1e}")


if __name__ == "__main__":
    main()

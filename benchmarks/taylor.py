"""Higher derivatives by Taylor mode: ``st.derivative(f, order=k)`` for k = 1 .. 12.

``f(x) = exp(sin(x)) * tanh(x) / (1 + x**2)`` (8 ops). For each order: trace + compile time
(empty object cache), the nodes of the k-th derivative's DAG (it grows quadratically in k:
every op's Taylor recurrence is O(k^2)), and the largest error at 100 points against
``sympy.diff`` evaluated with mpmath at 40 digits (relative to the largest value). Order 1
is one reverse sweep; orders 2 and up are Taylor mode. Targets (k = 10): trace + compile
<= 0.3 s, values within 1e-12 relative of ``sympy.diff``.

    python benchmarks/taylor.py [--orders 12]

``--mixed``: every partial of order k of ``g(x) = exp(sin(x0)) * tanh(|x|^2) / (1 +
x[-1]**2)`` in n = 2..5 inputs, by interpolating the Taylor series along C(n + k - 1, k)
directions (Griewank, Utke and Walther) and by k nested batched sweeps: trace + compile
time, evaluation per point over 2,000 points, and the largest difference of the two
(relative). ``st.derivative`` picks between them by ``strategy.mixed_worth``.

    python benchmarks/taylor.py --mixed
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import mpmath  # noqa: E402
import sympy as sp  # noqa: E402

import importlib  # noqa: E402

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from symtape.element import graph as G  # noqa: E402
from symtape.derivatives import taylor as taylor  # noqa: E402


def f(x):
    return st.exp(st.sin(x)) * st.tanh(x) / (1 + x ** 2)


def dag_nodes(order: int) -> int:
    x = st.symbol("x")
    (c,) = taylor.coefficients([f(x)._atoms.flat[0]], [x._atoms.flat[0]], [G.ONE], order)
    return len(G.reachable([c[-1]]))


def g(x):
    return st.exp(st.sin(x[0])) * st.tanh(st.reduce_sum(x * x)) / (1 + x[-1] ** 2)


MIXED_CASES = ((2, 2), (2, 4), (2, 6), (3, 3), (3, 4), (3, 5), (4, 3), (4, 4), (4, 5),
               (5, 4))


def _timed(build, n: int):
    t = time.perf_counter()
    fn = build()
    setup = time.perf_counter() - t
    points = 0.5 * np.random.default_rng(0).standard_normal((2000, n))
    fn(points)
    run = min(_once(fn, points) for _ in range(5))
    return setup, run / len(points) * 1e9, fn(points[:10])


def _once(fn, points) -> float:
    t = time.perf_counter()
    fn(points)
    return time.perf_counter() - t


def mixed() -> None:
    function = importlib.import_module("symtape.compile.transforms")
    placeholders = importlib.import_module("symtape.compile.function").placeholders
    strategy = importlib.import_module("symtape.compile.strategy")
    print(f"{'n':>2} {'k':>2} {'dirs':>5} {'interpolated: setup':>20} {'eval':>9} "
          f"{'nested: setup':>14} {'eval':>9} {'rel. diff':>10} picked")
    for n, k in MIXED_CASES:
        spec = [st.TensorSpec((n,))]
        xs = placeholders(g, spec)
        a = _timed(lambda: function._taylor_derivative(g, xs, 0, k, "st.derivative", {}), n)
        saved = strategy.MIXED_MIN_ORDER
        strategy.MIXED_MIN_ORDER = k + 1  # nested sweeps
        try:
            b = _timed(lambda: st.derivative(g, order=k, input_signature=spec), n)
        finally:
            strategy.MIXED_MIN_ORDER = saved
        diff = np.max(np.abs(a[2] - b[2])) / np.max(np.abs(b[2]))
        picked = "interpolated" if strategy.mixed_worth(n, k) else "nested"
        print(f"{n:>2} {k:>2} {math.comb(n + k - 1, k):>5} {a[0]:>18.3f} s {a[1]:>6.0f} ns "
              f"{b[0]:>12.3f} s {b[1]:>6.0f} ns {diff:>10.1e} {picked}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=12)
    ap.add_argument("--mixed", action="store_true")
    args = ap.parse_args()
    if args.mixed:
        mixed()
        return
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

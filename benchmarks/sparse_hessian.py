"""Sparse Hessians: the Rosenbrock Hessian with ``sparse=True`` against CasADi's sparse one.

symtape reads the pattern off the gradient's DAG, colours its rows (3 colours: the Hessian
is tridiagonal), and compiles one batched sweep with a seed per colour; CasADi builds its
SX Hessian with its own sparsity and colouring. Setup: from the function to the first
result (symtape with an empty object cache). Evaluation: the best of several calls over
the same points, in us per point (CasADi's virtual machine and, with a C compiler, its
generated C, both mapped over the points through its buffer interface; symtape writes
into a preallocated array as well). One thread each, then (``-Nt`` rows) all cores: symtape
splits the points across threads, CasADi maps them with its ``thread`` map. The tools'
values are checked against each other. Targets: setup <= 0.3 s at n = 500 and <= 1 s at
n = 5,000, linear in n; evaluation at most CasADi's per point.

    pip install -e ".[bench]" && python benchmarks/sparse_hessian.py [--sizes 500,5000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from _timing import best  # noqa: E402 - benchmarks/ is the script's directory
from peers import casadi_c  # noqa: E402


def rosen(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def symtape_tool(n: int, points: np.ndarray, threads: int | None = None):
    t = time.perf_counter()
    h = st.hessian(rosen, sparse=True, input_signature=[st.TensorSpec((n,))], threads=threads)
    first = h(points[:1])
    setup = time.perf_counter() - t
    rows, cols = first.indices.T
    out = np.empty((len(points), len(rows)))  # values written in place, as CasADi's buffer
    return setup, lambda p: h(p, out=out).values, (rows, cols)


def _casadi(n: int, generate_c: bool):
    import casadi as ca

    x = ca.SX.sym("x", n)
    f = sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(n - 1))
    hess, _ = ca.hessian(f, x)
    fn = ca.Function("h", [x], [hess])
    if generate_c:
        fn = casadi_c(fn)
    sp = hess.sparsity()
    return fn, (np.array(sp.get_triplet()[0]), np.array(sp.get_triplet()[1])), hess.nnz()


def casadi_tool(n: int, points: np.ndarray, generate_c: bool = False, threads: int = 1):
    t = time.perf_counter()
    fn, (rows, cols), nnz = _casadi(n, generate_c)
    mapped = fn.map(len(points), "serial") if threads == 1 else \
        fn.map(len(points), "thread", threads)
    buf, trigger = mapped.buffer()
    out = np.empty((len(points), nnz))
    buf.set_res(0, memoryview(out))
    arr = np.ascontiguousarray(points)
    buf.set_arg(0, memoryview(arr))
    trigger()
    setup = time.perf_counter() - t

    def run(p):
        buf.set_arg(0, memoryview(np.ascontiguousarray(p)))
        trigger()
        return out

    return setup, run, (rows, cols)


def _dense(values, pattern, n):
    out = np.zeros((len(values), n, n))
    out[:, pattern[0], pattern[1]] = values
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="500,5000")
    ap.add_argument("--points", type=int, default=1000)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    tools = {"symtape": lambda n, p: symtape_tool(n, p, 1), "CasADi": casadi_tool,
             "CasADi-C": lambda n, p: casadi_tool(n, p, True),
             f"symtape-{cores}t": lambda n, p: symtape_tool(n, p, cores),
             f"CasADi-C-{cores}t": lambda n, p: casadi_tool(n, p, True, cores)}
    for n in (int(s) for s in args.sizes.split(",")):
        points = 1.0 + 0.5 * np.random.default_rng(0).standard_normal((args.points, n))
        print(f"Rosenbrock n={n}, sparse Hessian, {args.points} points")
        results = {}
        for name, tool in tools.items():
            try:
                setup, run, pattern = tool(n, points)
            except Exception as e:  # noqa: BLE001 - a peer that does not install or build
                print(f"  {name:<12} unavailable: {e}")
                continue
            run(points)
            per_point = best(lambda: run(points), 5) / len(points) * 1e6
            first = np.array(run(points)[:4])
            results[name] = (setup, per_point, _dense(first, pattern, n))
            print(f"  {name:<12} setup {setup:7.3f} s   eval {per_point:8.2f} us/point   "
                  f"nnz {len(pattern[0])}")
        for mine, theirs in (("symtape", "CasADi"), ("symtape", "CasADi-C"),
                             (f"symtape-{cores}t", f"CasADi-C-{cores}t")):
            if mine in results and theirs in results:
                ours, (_, per_point, dense) = results[mine], results[theirs]
                err = np.max(np.abs(dense - ours[2])) / max(1.0, np.max(np.abs(dense)))
                print(f"  {mine} / {theirs}: eval {ours[1] / per_point:.2f}x, "
                      f"values agree to {err:.1e}")


if __name__ == "__main__":
    main()

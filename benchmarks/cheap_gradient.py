"""Cheap gradient: nodes added by ``tape.gradient`` vs nodes of the function, and time.

Baur-Strassen: reverse accumulation costs a small constant times the function, whatever the
number of inputs. This prints, for Rosenbrock in n dimensions and a 2-layer tanh MLP, the
tensor-level nodes the function created and those ``tape.gradient`` added, the same for the
element DAG when the element views are built, their ratios, and the seconds for tracing plus
gradient (tensor level only).

    python benchmarks/cheap_gradient.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import symtape as st
from symtape.element import graph as G
from symtape.core import node as N


def rosenbrock(x):
    return st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def measure(build_inputs, fn, repeats: int = 3):
    """(function nodes, gradient nodes, best seconds for trace + gradient) at the tensor
    level, then (function, gradient) element-DAG nodes of the element views built after."""
    best = None
    for _ in range(repeats):
        sources = build_inputs()
        t0 = time.perf_counter()
        n0 = N.created()
        with st.GradientTape() as tape:
            y = fn(*sources)
        n1 = N.created()
        grads = tape.gradient(y, list(sources))
        n2 = N.created()
        elapsed = time.perf_counter() - t0
        c0 = G.GRAPH.created
        y._atoms  # noqa: B018 - build the element views: the function's, then the gradient's
        c1 = G.GRAPH.created
        for g in grads:
            g._atoms  # noqa: B018
        c2 = G.GRAPH.created
        row = (n1 - n0, n2 - n1, elapsed, c1 - c0, c2 - c1)
        best = row if best is None or elapsed < best[2] else best
    return best


def mlp_case(batch: int, n_in: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = st.constant(rng.normal(size=(batch, n_in)))
    target = st.constant(rng.normal(size=(batch, 1)))

    def inputs():
        return (st.Variable(rng.normal(size=(n_in, hidden)) * 0.5, name="W1"),
                st.Variable(np.zeros(hidden), name="b1"),
                st.Variable(rng.normal(size=(hidden, 1)) * 0.5, name="W2"),
                st.Variable(np.zeros(1), name="b2"))

    def loss(w1, b1, w2, b2):
        h = st.tanh(st.matmul(x, w1) + b1)
        out = st.tanh(st.matmul(h, w2) + b2)
        return st.reduce_mean((out - target) ** 2)

    return inputs, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 1000])
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        x0 = np.linspace(-1.2, 1.2, n)
        rows.append((f"Rosenbrock n={n}",
                     *measure(lambda: (st.Variable(x0, name="x"),), rosenbrock)))
    for batch, n_in, hidden in ((8, 4, 16), (16, 8, 32)):
        inputs, loss = mlp_case(batch, n_in, hidden)
        rows.append((f"tanh MLP {batch}x{n_in}-{hidden}-1", *measure(inputs, loss)))
    print("| function | tensor nodes f / grad | ratio | element nodes f / grad | ratio "
          "| trace + gradient (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, f, g, s, ef, eg in rows:
        print(f"| {name} | {f} / {g} | {g / f:.2f} | {ef} / {eg} | {eg / max(ef, 1):.2f} "
              f"| {s:.4f} |")
    worst = max(max(g / f, eg / max(ef, 1)) for _, f, g, _, ef, eg in rows)
    print(f"\nlargest ratio {worst:.2f} (target <= 4)")


if __name__ == "__main__":
    main()

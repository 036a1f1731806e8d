"""Eager programs of small tensors: where values are the element view (``core/view_values``).

Nodes of at most 256 elements that fold beyond their template take their element view's
value (README, "One rule for values"). These loops are made of such nodes:

1. the seed tutorial's linear regression (11 points, a constant holding a zero), a step;
2. an eager Jacobian and a Hessian (nested tapes) of ``tanh(W x) * sin(x) + x**2`` at 8
   inputs (one-hot seeds);
3. a masked loss on fresh data every step (a new zero pattern each call), with its gradient.

Each prints the best of five rounds in ms per call. Compare two revisions with
``benchmarks/versus.py``:

    python benchmarks/eager_small.py
    python benchmarks/versus.py --baseline 892871e --repeat 3 -- benchmarks/eager_small.py
"""

from __future__ import annotations

import time

import numpy as np

import symtape as st


def best_ms(fn, calls: int) -> float:
    """Best of five rounds of ``calls`` calls, ms per call (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e3


def regression():
    x = np.arange(11.0)
    y = 10.0 * x + 5.0
    a, b = st.Variable(0.3), st.Variable(0.7)

    def step():
        with st.GradientTape() as tape:
            loss = st.reduce_mean(st.square(y - (a * x + b)))
        ga, gb = tape.gradient(loss, (a, b))
        a.assign_sub(ga * 0.001)
        b.assign_sub(gb * 0.001)

    return step


def derivatives():
    rng = np.random.default_rng(0)
    w = st.constant(rng.normal(size=(8, 8)))
    x = st.Variable(rng.normal(size=8))

    def f(v):
        h = st.tanh(st.reshape(st.matmul(w, st.reshape(v, (-1, 1))), (-1,)))
        return h * st.sin(v) + v ** 2

    def jacobian():
        with st.GradientTape() as t:
            y = f(x)
        return t.jacobian(y, x)

    def hessian():
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                y = st.reduce_sum(f(x))
            g = t1.gradient(y, x)
        return t2.jacobian(g, x)

    return jacobian, hessian


def masked():
    rng = np.random.default_rng(1)
    x = st.Variable(rng.normal(size=8))

    def step():
        d = rng.random(8)
        d[d < 0.4] = 0.0
        c = st.constant(d)
        with st.GradientTape() as t:
            y = st.reduce_sum(st.where(c > 0, x * c, 0.0) ** 2 + st.exp(x * c))
        return t.gradient(y, x)

    return step


def main() -> None:
    jacobian, hessian = derivatives()
    print("eager programs of small tensors (best of 5 rounds)")
    print(f"   linear regression step (11 points): {best_ms(regression(), 300):.3f} ms")
    print(f"   Jacobian, 8 inputs:                 {best_ms(jacobian, 30):.3f} ms")
    print(f"   Hessian, 8 inputs (nested tapes):   {best_ms(hessian, 30):.3f} ms")
    print(f"   masked loss, fresh data each step:  {best_ms(masked(), 30):.3f} ms")


if __name__ == "__main__":
    main()

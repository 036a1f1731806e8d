"""Dense Jacobians: one batched sweep against one gradient.

A Jacobian of ``f: R^n -> R^n`` is one reverse sweep with the n one-hot seeds stacked (the
vmap of the vjp), so deriving it should cost a small multiple of one gradient, not n of
them. This times, for ``f(x) = tanh(W x) * sin(x) + x**2`` with a dense ``W`` at n = 50, 100,
200, 400: the tape's gradient of ``sum(f(x))`` and its Jacobian of ``f(x)``, eagerly on
values (trace + sweep + numpy) and symbolically on ``st.symbol`` inputs (derivation only,
the tensor-level graph), and prints the ratio. Target (n = 200): the Jacobian's derivation
at most 10x the gradient's; the row-by-row sweeps of 0.1 took n sweeps.

    python benchmarks/jacobian.py [--sizes 50,100,200,400]
"""

from __future__ import annotations

import argparse

import numpy as np

import symtape as st
from _timing import best


def function(weights):
    def f(x):
        h = st.tanh(st.reshape(st.matmul(weights, st.reshape(x, (-1, 1))), (-1,)))
        return h * st.sin(x) + x ** 2

    return f


def derive(f, x, jacobian: bool):
    with st.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
        if not jacobian:
            y = st.reduce_sum(y)
    return tape.jacobian(y, x) if jacobian else tape.gradient(y, x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="50,100,200,400")
    args = ap.parse_args()
    print(f"{'n':>5} {'mode':>9} {'gradient':>11} {'jacobian':>11} {'ratio':>7}")
    for n in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        f = function(st.constant(rng.standard_normal((n, n)) / np.sqrt(n)))
        value = rng.standard_normal(n)
        for mode, make in (("eager", lambda: st.Variable(value, name="x")),
                           ("symbolic", lambda: st.symbol("x", shape=(n,)))):
            x = make()
            jac = derive(f, x, True)
            if mode == "eager":  # the batched Jacobian against the gradients' rows
                ref = np.stack([np.asarray(derive(lambda v, i=i: f(v)[i], x, False))
                                for i in range(0, n, max(1, n // 8))])
                assert np.allclose(jac.numpy()[::max(1, n // 8)], ref, rtol=1e-12)
            g = best(lambda: derive(f, x, False), 9)
            j = best(lambda: derive(f, x, True), 5)
            print(f"{n:>5} {mode:>9} {g * 1e3:>8.2f} ms {j * 1e3:>8.2f} ms {j / g:>6.1f}x")


if __name__ == "__main__":
    main()

"""Input gradient of the 8-64-64-1 tanh MLP over many points: symtape against JAX.

symtape traces ``st.grad`` of the network at one point (weights are constants of the
function; a loop plan over chunks of points) and evaluates the compiled gradient over
10^5 points; JAX runs ``jit(vmap(grad(f)))`` on the same points in float64 (when
installed: ``pip install -e ".[bench]"``). Setup is the first call (trace, derivative,
compile; symtape with an empty object cache), evaluation the best of several later calls,
in rounds alternating between the tools. The results are checked against each other and
against the gradient written by hand with numpy.

Targets: setup <= 1 s; evaluation <= 1.0x JAX.

    python benchmarks/mlp_grad.py [--points N]
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

SIZES = (8, 64, 64, 1)


def weights(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b)) / np.sqrt(a), rng.standard_normal(b) * 0.1)
            for a, b in zip(SIZES[:-1], SIZES[1:])]


def by_hand(layers, x: np.ndarray) -> np.ndarray:
    """The gradient by the chain rule, written out with numpy."""
    hs, h = [], x
    for w, b in layers[:-1]:
        h = np.tanh(h @ w + b)
        hs.append(h)
    g = np.ones((x.shape[0], 1))
    for (w, _), h in zip(reversed(layers[1:]), reversed(hs)):
        g = (g @ w.T) * (1.0 - h * h)
    return g @ layers[0][0].T


def symtape_case(layers, xs):
    ws = [(st.constant(w), st.constant(b)) for w, b in layers]

    def f(x):
        h = x
        for i, (w, b) in enumerate(ws):
            h = st.matmul(h[None, :], w)[0] + b
            if i < len(ws) - 1:
                h = st.tanh(h)
        return st.reduce_sum(h)

    t = time.perf_counter()
    g = st.grad(f, input_signature=[st.TensorSpec((SIZES[0],))])
    g(xs[:1])
    setup = time.perf_counter() - t
    return setup, lambda: g(xs), g(xs)


def jax_case(layers, xs):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in layers]

    def f(x):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jnp.tanh(h)
        return jnp.sum(h)

    g = jax.jit(jax.vmap(jax.grad(f)))
    t = time.perf_counter()
    g(xs).block_until_ready()
    setup = time.perf_counter() - t
    return setup, lambda: g(xs).block_until_ready(), np.asarray(g(xs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    n = parser.parse_args().points
    layers = weights()
    xs = np.random.default_rng(1).standard_normal((n, SIZES[0]))
    reference = by_hand(layers, xs)
    rows = [["symtape st.grad", *symtape_case(layers, xs)]]
    peer = jax_case(layers, xs)
    if peer is not None:
        rows.append(["JAX jit(vmap(grad))", *peer])
    # rounds alternate between the tools (this machine's speed drifts); each keeps its best
    times = [float("inf")] * len(rows)
    for _ in range(4):
        for i, row in enumerate(rows):
            times[i] = min(times[i], best(row[2], repeat=3))
    for row, t in zip(rows, times):
        row[2] = t
    if peer is not None:
        peer = rows[1][1:3]
    print(f"input gradient of the {'-'.join(map(str, SIZES))} tanh MLP over {n} points")
    print(f"{'tool':<22}{'setup s':>10}{'eval ms':>10}{'max |err|':>12}")
    for name, setup, ev, got in rows:
        err = float(np.max(np.abs(got - reference))) if n else 0.0
        print(f"{name:<22}{setup:>10.3f}{ev * 1e3:>10.1f}{err:>12.1e}")
    setup, ev = rows[0][1], rows[0][2]
    print(f"symtape setup {setup:.2f} s (target <= 1 s): {'PASS' if setup <= 1.0 else 'FAIL'}")
    if peer is not None:
        ratio = ev / peer[1]
        print(f"symtape / JAX evaluation: {ratio:.2f}x (target <= 1.0x): "
              f"{'PASS' if ratio <= 1.0 else 'FAIL'}")
    else:
        print("JAX is not installed: pip install -e '.[bench]'")


if __name__ == "__main__":
    main()

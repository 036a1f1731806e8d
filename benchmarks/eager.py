"""Eager speed and memory: symtape's numpy-per-node evaluation beside numpy in the same run.

1. An elementwise op (``a * b``) on float64 tensors of 1 to 10^5 elements: microseconds per
   op for symtape and numpy, and symtape's cost per element (linear in size).
2. One training step of an MLP 784-128-10 (relu, softmax cross-entropy) on a batch of 128:
   forward, ``tape.gradient`` and an SGD update, against the same step written by hand in
   numpy (forward and backward), and the ratio.
3. Tracing that step (leaves without values: only the tensor-level graph is built) for
   batches of 128 and 1024.
4. Memory: resident set size after 1,000 and after 10,000 eager steps of a small MLP.

    python benchmarks/eager.py            # everything
    python benchmarks/eager.py --quick    # fewer repeats, 2,000 memory steps
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

import numpy as np

import symtape as st


def per_call(fn, seconds: float) -> float:
    """Best-of-5 mean seconds per call of ``fn``, each round running about ``seconds/5``."""
    fn()
    best = float("inf")
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed > seconds / 5:
                break
        best = min(best, elapsed / n)
    return best


# --------------------------------------------------------------------------------------------
# 1. Elementwise ops
# --------------------------------------------------------------------------------------------


def elementwise(seconds: float) -> None:
    print("1. elementwise a * b (float64)")
    print(f"{'elements':>10} {'symtape us':>11} {'numpy us':>9} {'ratio':>6} {'ns/elem':>8}")
    rng = np.random.default_rng(0)
    for n in (1, 100, 1_000, 10_000, 100_000):
        an, bn = rng.random(n), rng.random(n)
        if n == 1:
            an, bn = an[0], bn[0]
        a, b = st.constant(an), st.constant(bn)
        ts = per_call(lambda: a * b, seconds)
        tn = per_call(lambda: an * bn, seconds)
        print(f"{n:>10} {ts * 1e6:>11.1f} {tn * 1e6:>9.1f} {ts / tn:>6.1f} "
              f"{ts / n * 1e9:>8.2f}")


# --------------------------------------------------------------------------------------------
# 2-3. An MLP training step
# --------------------------------------------------------------------------------------------


def mlp_params(rng, sizes):
    return [(rng.normal(scale=1 / np.sqrt(m), size=(m, n)), np.zeros(n))
            for m, n in zip(sizes[:-1], sizes[1:])]


def symtape_step(variables, x, labels, lr):
    (w1, b1), (w2, b2) = variables
    with st.GradientTape() as tape:
        h = st.nn.relu(st.matmul(x, w1) + b1)
        logits = st.matmul(h, w2) + b2
        loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(labels, logits))
    flat = [w1, b1, w2, b2]
    for v, g in zip(flat, tape.gradient(loss, flat)):
        v.assign_sub(lr * g)
    return loss


def numpy_step(params, x, labels, lr):
    (w1, b1), (w2, b2) = params
    z1 = x @ w1 + b1
    h = np.maximum(z1, 0)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(shifted)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.mean(np.sum(labels * (shifted - np.log(np.sum(np.exp(shifted), axis=1,
                                                               keepdims=True))), axis=1))
    g_logits = (p - labels) / x.shape[0]
    g_w2, g_b2 = h.T @ g_logits, g_logits.sum(axis=0)
    g_z1 = (g_logits @ w2.T) * (z1 > 0)
    g_w1, g_b1 = x.T @ g_z1, g_z1.sum(axis=0)
    params[0] = (w1 - lr * g_w1, b1 - lr * g_b1)
    params[1] = (w2 - lr * g_w2, b2 - lr * g_b2)
    return loss


def training_step(seconds: float) -> None:
    print("\n2. training step, MLP 784-128-10, batch 128")
    rng = np.random.default_rng(1)
    init = mlp_params(rng, [784, 128, 10])
    x = rng.random((128, 784))
    labels = np.eye(10)[rng.integers(0, 10, 128)]
    variables = [(st.Variable(w), st.Variable(b)) for w, b in init]
    xs, ls = st.constant(x), st.constant(labels)
    params = list(init)
    l_st = float(symtape_step(variables, xs, ls, 0.0))
    l_np = numpy_step(list(init), x, labels, 0.0)
    print(f"   loss: symtape {l_st:.12f}, numpy {l_np:.12f}")
    ts = per_call(lambda: symtape_step(variables, xs, ls, 1e-3), seconds)
    tn = per_call(lambda: numpy_step(params, x, labels, 1e-3), seconds)
    print(f"   symtape {ts * 1e3:.2f} ms, numpy by hand {tn * 1e3:.2f} ms, ratio "
          f"{ts / tn:.2f} (target <= 3)")


def tracing(seconds: float) -> None:
    print("\n3. tracing the step (no values: the tensor-level graph only)")
    rng = np.random.default_rng(2)
    for batch in (128, 1024):
        def trace():
            w1, b1 = st.symbol("w1", shape=(784, 128)), st.symbol("b1", shape=(128,))
            w2, b2 = st.symbol("w2", shape=(128, 10)), st.symbol("b2", shape=(10,))
            x = st.symbol("x", shape=(batch, 784))
            labels = st.constant(np.eye(10)[rng.integers(0, 10, batch)])
            with st.GradientTape() as tape:
                h = st.nn.relu(st.matmul(x, w1) + b1)
                loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(
                    labels, st.matmul(h, w2) + b2))
            return tape.gradient(loss, [w1, b1, w2, b2])

        t = per_call(trace, seconds)
        print(f"   batch {batch:>5}: {t * 1e3:.2f} ms (target <= 20)")


# --------------------------------------------------------------------------------------------
# 4. Memory
# --------------------------------------------------------------------------------------------


def rss_mb() -> float:
    """Current resident set size in MiB (Linux /proc; the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(steps: int) -> None:
    print(f"\n4. memory over {steps} eager steps of an MLP 8-32-1 (batch 16)")
    rng = np.random.default_rng(3)
    variables = [(st.Variable(w), st.Variable(b)) for w, b in mlp_params(rng, [8, 32, 1])]
    x, y = st.constant(rng.random((16, 8))), st.constant(rng.random((16, 1)))
    flat = [v for pair in variables for v in pair]

    def step():
        (w1, b1), (w2, b2) = variables
        with st.GradientTape() as tape:
            out = st.matmul(st.tanh(st.matmul(x, w1) + b1), w2) + b2
            loss = st.reduce_mean((out - y) ** 2)
        for v, g in zip(flat, tape.gradient(loss, flat)):
            v.assign_sub(0.01 * g)

    marks = {}
    for k in range(1, steps + 1):
        step()
        if k in (steps // 10, steps):
            gc.collect()
            marks[k] = rss_mb()
    first, last = marks[steps // 10], marks[steps]
    print(f"   RSS after {steps // 10}: {first:.1f} MiB, after {steps}: {last:.1f} MiB "
          f"({(last / first - 1) * 100:+.1f}%, target within 10%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else 2.0
    elementwise(seconds)
    training_step(seconds)
    tracing(seconds)
    memory(2_000 if args.quick else 10_000)


if __name__ == "__main__":
    main()

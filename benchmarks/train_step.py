"""Training step of a 784-128-10 ReLU MLP (softmax cross-entropy, gradient, Adam): symtape's
``st.function`` against JAX ``jit`` and eager numpy-backed symtape.

The step is traced once for a batch of 128 and compiled as loop nests over the tensors
(``symtape.compile.planner``), and once with ``input_signature`` of a ``None`` batch (one compile
for every batch size: passes over the examples whose gradients accumulate in the kernel,
then the update; ``symtape.compile.batching``); JAX jits the same step in float64 (when installed:
``pip install -e ".[bench]"``). Compile time is the first call (trace, gradient, plan,
LLVM; symtape with an empty object cache); step time is the best and the median of repeated
calls (in rounds alternating between the tools), each updating the weights and Adam moments
in place. Loss and weights after the steps are checked against each other and against
eager symtape.

Targets: compile <= 3 s; step <= 1.5x JAX.

``--dtype float32`` runs everything in float32: the data and weights are float32, the
steps are compiled with float32 specs (``st.function(dtype=...)`` and float32
``TensorSpec``), JAX jits the float32 step, and values agree to float32 rounding.

The forward pass of the same network (softmax probabilities) is also timed three ways:
``st.function`` traced at the batch's size, with ``input_signature=[TensorSpec((None,
784))]`` (one trace for every batch size: the batch-1 program over chunks of examples),
and JAX ``jit``; each compiled once, values checked against each other.

    python benchmarks/train_step.py [--batch N] [--steps K] [--dtype float64|float32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first

SIZES = (784, 128, 10)
LR = 1e-3
#: the dtype of the run (--dtype) and its tolerances: (value rtol, weight rtol, weight atol)
DTYPE = ["float64"]
TOL = {"float64": (1e-12, 1e-9, 1e-15), "float32": (1e-5, 1e-4, 1e-6)}


def initial(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        out += [rng.standard_normal((a, b)) / np.sqrt(a), np.zeros(b)]
    return [a.astype(DTYPE[0]) for a in out]


def data(batch: int, seed: int = 1) -> tuple:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, SIZES[0])).astype(DTYPE[0]), np.eye(
        SIZES[-1], dtype=DTYPE[0])[rng.integers(0, SIZES[-1], batch)]


def symtape_step(params: list):
    vs = [st.Variable(p) for p in params]
    opt = st.optimizers.Adam(LR)

    def step(x, y):
        with st.GradientTape() as tape:
            h = st.nn.relu(st.matmul(x, vs[0]) + vs[1])
            logits = st.matmul(h, vs[2]) + vs[3]
            loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(labels=y,
                                                                          logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    return step, vs


def jax_step():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p[0] + p[1])
        logits = h @ p[2] + p[3]
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=1))

    @jax.jit
    def step(p, m, s, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        t = t + 1.0
        lr = LR * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        m = [0.9 * a + 0.1 * b for a, b in zip(m, g)]
        s = [0.999 * a + 0.001 * b * b for a, b in zip(s, g)]
        p = [a - lr * mm / (jnp.sqrt(ss) + 1e-7) for a, mm, ss in zip(p, m, s)]
        return loss, p, m, s, t

    return step, jax


ROUNDS = 5


def step_times(fn, steps: int) -> list:
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def timings(fn, steps: int) -> tuple:
    out = step_times(fn, steps)
    return min(out), float(np.median(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args()
    DTYPE[0] = args.dtype
    rtol, wrtol, watol = TOL[args.dtype]
    x, y = data(args.batch)

    step, vs = symtape_step(initial())
    t = time.perf_counter()
    eager_loss = float(step(x, y))
    eager_s = time.perf_counter() - t
    eager_w = vs[0].numpy().copy()

    step, vs = symtape_step(initial())
    fn = st.function(step, dtype=args.dtype)
    t = time.perf_counter()
    out = fn(x, y)
    compile_s = time.perf_counter() - t
    plan = fn.get_concrete_function(x, y).plan
    assert vs[0].dtype == args.dtype and out.dtype == args.dtype
    np.testing.assert_allclose(float(out), eager_loss, rtol=rtol)
    np.testing.assert_allclose(vs[0].numpy(), eager_w, rtol=wrtol, atol=watol)
    kind = type(plan).__name__
    print(f"MLP {'-'.join(map(str, SIZES))} training step, batch {args.batch} ({args.dtype})")
    print(f"  symtape eager step          {eager_s * 1e3:9.2f} ms")
    print(f"  symtape st.function compile {compile_s:9.3f} s   ({kind}, "
          f"{len(getattr(plan, 'blocks', ()))} blocks)")

    # the same step with a None batch: one trace and compile for every batch size
    step, pvs = symtape_step(initial())
    poly = st.function(step, input_signature=[st.TensorSpec((None, SIZES[0]), args.dtype),
                                              st.TensorSpec((None, SIZES[-1]), args.dtype)])
    t = time.perf_counter()
    loss = float(poly(x, y))
    poly_s = time.perf_counter() - t
    np.testing.assert_allclose(loss, eager_loss, rtol=rtol)
    np.testing.assert_allclose(pvs[0].numpy(), eager_w, rtol=wrtol, atol=watol)
    sizes = (1, 3, 64, 1001)
    t = time.perf_counter()
    for b in sizes:  # other sizes: no new trace
        poly(*data(b, seed=b))
    other_s = time.perf_counter() - t
    assert poly.traced_signatures == [((None, SIZES[0]), (None, SIZES[-1]))]
    print(f"  symtape None batch compile  {poly_s:9.3f} s   (one trace for every batch size; "
          f"sizes {', '.join(map(str, sizes))} then took {other_s * 1e3:.1f} ms in all)"
          "   target <= 3 s")

    peer = jax_step()
    if peer is None:
        best, median = timings(lambda: fn(x, y), args.steps)
        print(f"  symtape st.function step    {best * 1e3:9.3f} ms best, "
              f"{median * 1e3:.3f} median")
        print("  JAX not installed: pip install -e \".[bench]\"")
        return
    jstep, jax = peer
    p = initial()
    m = [np.zeros_like(a) for a in p]
    s = [np.zeros_like(a) for a in p]
    t = time.perf_counter()
    out = jax.block_until_ready(jstep(p, m, s, np.zeros((), args.dtype), x, y))
    jax_compile = time.perf_counter() - t
    assert np.asarray(out[1][0]).dtype == args.dtype
    np.testing.assert_allclose(float(out[0]), eager_loss, rtol=rtol)
    np.testing.assert_allclose(np.asarray(out[1][0]), eager_w, rtol=wrtol, atol=watol)
    state = list(out[1:])

    def jax_call():
        nonlocal state
        res = jax.block_until_ready(jstep(*state, x, y))
        state = list(res[1:])

    # rounds alternate between the tools (this machine's speed drifts); steps pooled
    ours, polys, theirs = [], [], []
    for _ in range(ROUNDS):
        ours += step_times(lambda: fn(x, y), args.steps // ROUNDS)
        polys += step_times(lambda: poly(x, y), args.steps // ROUNDS)
        theirs += step_times(jax_call, args.steps // ROUNDS)
    jbest, jmedian = min(theirs), float(np.median(theirs))
    print(f"  JAX jit compile             {jax_compile:9.3f} s")
    print(f"  JAX jit step                {jbest * 1e3:9.3f} ms best, {jmedian * 1e3:.3f} median")
    for name, times in (("traced at this size", ours), ("None batch", polys)):
        best, median = min(times), float(np.median(times))
        print(f"  symtape {name:<19} {best * 1e3:9.3f} ms best, {median * 1e3:.3f} median:"
              f" {best / jbest:.2f}x JAX best, {median / jmedian:.2f}x median"
              "   target <= 1.5x")


def forward(params: list):
    vs = [st.Variable(p) for p in params]

    def model(x):
        h = st.nn.relu(st.matmul(x, vs[0]) + vs[1])
        return st.nn.softmax(st.matmul(h, vs[2]) + vs[3])

    return model


def forward_times(x: np.ndarray, steps: int) -> None:
    params = initial()
    print(f"MLP {'-'.join(map(str, SIZES))} forward pass, batch {len(x)} ({DTYPE[0]})")
    fixed = st.function(forward(params), dtype=DTYPE[0])
    poly = st.function(forward(params), input_signature=[st.TensorSpec((None, SIZES[0]),
                                                                       DTYPE[0])])
    rtol, _, atol = TOL[DTYPE[0]]
    want = None
    for name, fn in (("traced at this size", fixed), ("None batch (one trace)", poly)):
        t = time.perf_counter()
        got = fn(x).numpy()
        compile_s = time.perf_counter() - t
        want = got if want is None else want
        assert got.dtype == DTYPE[0]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        best, median = timings(lambda: fn(x), steps)
        print(f"  symtape {name:<24} compile {compile_s:6.3f} s   {best * 1e3:7.3f} ms best, "
              f"{median * 1e3:.3f} median   {fn.traced_signatures}")
    try:
        import jax
    except ImportError:
        return
    jax.config.update("jax_enable_x64", True)

    @jax.jit
    def jforward(p, x):
        h = jax.nn.relu(x @ p[0] + p[1])
        return jax.nn.softmax(h @ p[2] + p[3])

    t = time.perf_counter()
    got = np.asarray(jax.block_until_ready(jforward(params, x)))
    compile_s = time.perf_counter() - t
    assert got.dtype == DTYPE[0]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    best, median = timings(lambda: jax.block_until_ready(jforward(params, x)), steps)
    print(f"  JAX jit {'':<24} compile {compile_s:6.3f} s   {best * 1e3:7.3f} ms best, "
          f"{median * 1e3:.3f} median")


if __name__ == "__main__":
    main()
    forward_times(data(128)[0], 300)

"""Training steps of the seeds' models: symtape against TensorFlow (when importable) or JAX.

1. The custom-training tutorial's Sequential CNN (six 3x3 convolutions of 16-64 filters
   with ReLU, BatchNormalization and 2x2 max pooling, Dense 256, softmax) on 28x28x1
   images, batch 64, categorical cross-entropy and Adam: ``st.function`` compiled step
   against ``tf.function`` (or JAX ``jit`` of the same network in float64).
2. The MNIST MLP with gradient clipping and Adam (784-128-10, batch 128), eager: symtape's
   eager step against TensorFlow eager (or JAX without ``jit``, op by op).

Data are random images (no download). Compile time is the first call; step times are the
best and median of repeated calls; after them both tools' first convolution kernels are
checked to agree. Targets (issue): compiled CNN step <= 2x TensorFlow's
``tf.function`` step; MLP eager step <= 2x TensorFlow eager.

``--dtype float32`` runs both in float32 (``st.keras.backend.set_floatx``, float32 data and
weights, the step compiled with ``st.function(dtype="float32")``; the peers in float32 too);
the default is float64.

    pip install -e ".[bench]" && python benchmarks/train.py [--steps K] [--batch B]
        [--dtype float64|float32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from symtape.keras.layers import (  # noqa: E402
    Activation,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    MaxPooling2D,
)
from symtape.keras.losses import categorical_crossentropy  # noqa: E402
from symtape.keras.models import Sequential  # noqa: E402
from symtape.keras.optimizers import Adam  # noqa: E402

FILTERS = (16, 32, 32, 64, 64, 64)
POOL_AFTER = (0, 2, 5)
#: the dtype of the run (--dtype)
DTYPE = ["float64"]


def build_model(width, height, depth, classes):
    """The tutorial's model, as it writes it (its layer sets in one list)."""
    layers = []
    for i, f in enumerate(FILTERS):
        kw = {"input_shape": (height, width, depth)} if i == 0 else {}
        layers += [Conv2D(f, (3, 3), padding="same", **kw), Activation("relu"),
                   BatchNormalization(axis=-1)]
        if i in POOL_AFTER:
            layers.append(MaxPooling2D(pool_size=(2, 2)))
    layers += [Flatten(), Dense(256), Activation("relu"), BatchNormalization(), Dropout(0.5),
               Dense(classes), Activation("softmax")]
    return Sequential(layers)


def timed(fn, steps: int) -> tuple:
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out), float(np.median(out))


def peers() -> dict:
    """The peers importable here: ``{'TensorFlow': tf, 'JAX': jax}`` (either may be absent)."""
    out = {}
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        tf.keras.backend.set_floatx(DTYPE[0])
        out["TensorFlow"] = tf
    except ImportError:
        pass
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        out["JAX"] = jax
    except ImportError:
        pass
    return out


def tf_cnn(tf, model, x, y):
    """The tutorial's model in tf.keras (in the run's dtype) with symtape's initial weights,
    its step under ``tf.function``."""
    L = tf.keras.layers
    layers = []
    for i, f in enumerate(FILTERS):
        layers += [L.Conv2D(f, (3, 3), padding="same"), L.Activation("relu"),
                   L.BatchNormalization(axis=-1)]
        if i in POOL_AFTER:
            layers.append(L.MaxPooling2D(pool_size=(2, 2)))
    layers += [L.Flatten(), L.Dense(256), L.Activation("relu"), L.BatchNormalization(),
               L.Dropout(0.5), L.Dense(10), L.Activation("softmax")]
    tmodel = tf.keras.Sequential([tf.keras.Input((28, 28, 1))] + layers)
    ours = [layer for layer in model.layers if layer.variables]
    theirs = [layer for layer in tmodel.layers if layer.weights]
    for a, b in zip(ours, theirs):
        b.set_weights([v.numpy() for v in a.variables])
    opt = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def step(X, y):
        with tf.GradientTape() as tape:
            pred = tmodel(X)
            loss = tf.keras.losses.categorical_crossentropy(y, pred)
        grads = tape.gradient(loss, tmodel.trainable_variables)
        opt.apply_gradients(zip(grads, tmodel.trainable_variables))

    xt, yt = tf.constant(x), tf.constant(y)
    t0 = time.perf_counter()
    step(xt, yt)
    compile_s = time.perf_counter() - t0
    return compile_s, lambda: step(xt, yt), lambda: theirs[0].kernel.numpy()


def jax_cnn(jax, params_of, x, y):
    """The same CNN step (inference-mode BatchNormalization, as the tutorial's
    ``model(X)`` runs it; Adam) jitted in the run's dtype over symtape's initial weights."""
    import jax.numpy as jnp

    def forward(p, x):
        h, k = x, 0
        for i in range(len(FILTERS)):
            w, b, g, be, mm, mv = p[k:k + 6]
            k += 6
            h = jax.lax.conv_general_dilated(h, w, (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
            h = jnp.maximum(h, 0.0)
            h = (h - mm) / jnp.sqrt(mv + 1e-3) * g + be
            if i in POOL_AFTER:
                h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                          "VALID")
        h = h.reshape(h.shape[0], -1)
        w, b, g, be, mm, mv, w2, b2 = p[k:k + 8]
        h = jnp.maximum(h @ w + b, 0.0)
        h = (h - mm) / jnp.sqrt(mv + 1e-3) * g + be
        return jax.nn.softmax(h @ w2 + b2)

    def loss(p, x, y):
        pred = forward(p, x)
        pred = jnp.clip(pred / pred.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
        return jnp.sum(-jnp.sum(y * jnp.log(pred), -1))

    trainable = [i for i, (_, t) in enumerate(params_of) if t]

    @jax.jit
    def step(p, m, s, t, x, y):
        g = jax.grad(lambda q: loss([*q], x, y))(p)
        t = t + 1.0
        lr = 1e-3 * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        out_p, out_m, out_s = list(p), list(m), list(s)
        for i in trainable:
            out_m[i] = 0.9 * m[i] + 0.1 * g[i]
            out_s[i] = 0.999 * s[i] + 0.001 * g[i] * g[i]
            out_p[i] = p[i] - lr * out_m[i] / (jnp.sqrt(out_s[i]) + 1e-7)
        return out_p, out_m, out_s, t

    p = [jnp.asarray(v) for v, _ in params_of]
    state = [p, [jnp.zeros_like(a) for a in p], [jnp.zeros_like(a) for a in p],
             np.zeros((), DTYPE[0])]
    t0 = time.perf_counter()
    state = list(jax.block_until_ready(step(*state, x, y)))
    compile_s = time.perf_counter() - t0

    def call():
        nonlocal state
        state = list(jax.block_until_ready(step(*state, x, y)))

    return compile_s, call, lambda: np.asarray(state[0][0])


def cnn(args) -> None:
    rng = np.random.default_rng(0)
    x = rng.random((args.batch, 28, 28, 1)).astype(DTYPE[0])
    y = np.eye(10, dtype=DTYPE[0])[rng.integers(0, 10, args.batch)]
    st.random.set_seed(0)
    model = build_model(28, 28, 1, 10)
    opt = Adam(lr=1e-3)
    order = [(v.numpy(), v.trainable) for layer in model.layers for v in layer.variables]

    def step(X, y):
        with st.GradientTape() as tape:
            pred = model(X)
            loss = categorical_crossentropy(y, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    st.random.set_seed(0)
    model_at_start = build_model(28, 28, 1, 10)  # the same initial weights, untouched
    fn = st.function(step, dtype=DTYPE[0])
    t = time.perf_counter()
    fn(x, y)
    compile_s = time.perf_counter() - t
    best, median = timed(lambda: fn(x, y), args.steps)
    assert all(v.dtype == DTYPE[0] for v in model.variables)
    print(f"Sequential CNN (6 conv, BN, pool; Dense 256), 28x28x1, batch {args.batch}, "
          f"{DTYPE[0]}")
    print(f"  symtape st.function compile {compile_s:8.2f} s   step {best * 1e3:8.2f} ms best, "
          f"{median * 1e3:.2f} median")
    for name, mod in peers().items():
        run = tf_cnn(mod, model_at_start, x, y) if name == "TensorFlow" else \
            jax_cnn(mod, order, x, y)
        pcompile, call, first_kernel = run
        pbest, pmedian = timed(call, args.steps)
        if name == "JAX":  # (TensorFlow's Keras Adam rounds its steps differently: not
            # compared)  the same number of steps from the same weights: the same kernel
            # float32: Adam moves a weight by about lr a step whatever its gradient's size, so
            # rounding flips of near-zero gradients add up (JAX's float32 kernel is 2.4e-3
            # from its float64 one after 11 steps): half the furthest the steps can go
            rtol, atol = (1e-6, 1e-9) if DTYPE[0] == "float64" else (0.0, 5e-4 * (args.steps + 1))
            np.testing.assert_allclose(model.layers[0].kernel.numpy(), first_kernel(),
                                       rtol=rtol, atol=atol)
        what = "tf.function" if name == "TensorFlow" else "jit"
        print(f"  {name + ' ' + what:<27} compile {pcompile:8.2f} s   step {pbest * 1e3:8.2f} "
              f"ms best, {pmedian * 1e3:.2f} median")
        print(f"  symtape / {name}: {best / pbest:.2f}x best, {median / pmedian:.2f}x median"
              "   target <= 2x TensorFlow tf.function")


def mlp_eager(args) -> None:
    rng = np.random.default_rng(1)
    x = rng.random((128, 784)).astype(DTYPE[0])
    y = np.eye(10, dtype=DTYPE[0])[rng.integers(0, 10, 128)]
    init = [a.astype(DTYPE[0]) for a in (rng.normal(size=(784, 128)) * 0.05, np.zeros(128),
                                         rng.normal(size=(128, 10)) * 0.1, np.zeros(10))]

    class MLP(st.Module):
        def __init__(self):
            self.w1, self.b1, self.w2, self.b2 = (st.Variable(a) for a in init)

        def __call__(self, x):
            h1 = st.nn.relu(st.matmul(x, self.w1) + self.b1)
            return st.matmul(h1, self.w2) + self.b2

    model, optimizer = MLP(), st.optimizers.Adam(0.001)

    def train_step():
        with st.GradientTape() as tape:
            loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(y, model(x)))
        vars = [model.w1, model.b1, model.w2, model.b2]
        grads = [st.clip_by_norm(g, 1.0) for g in tape.gradient(loss, vars)]
        optimizer.apply_gradients(zip(grads, vars))
        return loss

    train_step()
    best, median = timed(train_step, args.steps)
    assert train_step().dtype == DTYPE[0]
    print(f"MNIST MLP 784-128-10 (clipping, Adam), batch 128, eager, {DTYPE[0]}")
    print(f"  symtape eager step          {best * 1e3:8.2f} ms best, {median * 1e3:.2f} median")
    found = peers()
    if "TensorFlow" in found:
        tf_eager(found["TensorFlow"], init, x, y, best, args.steps)
    if "JAX" not in found:
        return
    mod = found["JAX"]
    import jax.numpy as jnp

    def loss_fn(p):
        h = jnp.maximum(x @ p[0] + p[1], 0.0)
        z = h @ p[2] + p[3]
        z = z - z.max(-1, keepdims=True)
        return jnp.mean(-jnp.sum(y * (z - jnp.log(jnp.exp(z).sum(-1, keepdims=True))), -1))

    p = [jnp.asarray(a) for a in init]
    m = [jnp.zeros_like(a) for a in p]
    s = [jnp.zeros_like(a) for a in p]
    t = [0.0]
    grad = mod.value_and_grad(loss_fn)

    def jax_step():  # op by op, no jit: the eager peer
        _, g = grad(p)
        g = [gi * jnp.minimum(1.0, 1.0 / jnp.sqrt(jnp.sum(gi * gi))) for gi in g]
        t[0] += 1
        lr = float(1e-3 * np.sqrt(1 - 0.999 ** t[0]) / (1 - 0.9 ** t[0]))  # (weak: any dtype)
        for i in range(4):
            m[i] = 0.9 * m[i] + 0.1 * g[i]
            s[i] = 0.999 * s[i] + 0.001 * g[i] * g[i]
            p[i] = p[i] - lr * m[i] / (jnp.sqrt(s[i]) + 1e-7)
        mod.block_until_ready(p)

    jax_step()
    pbest, pmedian = timed(jax_step, args.steps)
    print(f"  JAX eager (no jit) step     {pbest * 1e3:8.2f} ms best, {pmedian * 1e3:.2f} median")
    print(f"  symtape / JAX eager: {best / pbest:.2f}x best")


def tf_eager(tf, init, x, y, best, steps) -> None:
    """The tutorial's MLP step in TensorFlow eager (tf.Module, in the run's dtype)."""
    class MLP(tf.Module):
        def __init__(self):
            self.w1, self.b1, self.w2, self.b2 = (tf.Variable(a) for a in init)

        def __call__(self, x):
            h1 = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
            return tf.matmul(h1, self.w2) + self.b2

    model, optimizer = MLP(), tf.keras.optimizers.Adam(0.001)
    xt, yt = tf.constant(x), tf.constant(y)

    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(yt, model(xt)))
        vars = [model.w1, model.b1, model.w2, model.b2]
        grads = [tf.clip_by_norm(g, 1.0) for g in tape.gradient(loss, vars)]
        optimizer.apply_gradients(zip(grads, vars))
        return loss

    train_step()
    pbest, pmedian = timed(train_step, steps)
    print(f"  TensorFlow eager step       {pbest * 1e3:8.2f} ms best, {pmedian * 1e3:.2f} median")
    print(f"  symtape / TensorFlow eager: {best / pbest:.2f}x best   target <= 2x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args()
    DTYPE[0] = args.dtype
    st.keras.backend.set_floatx(args.dtype)  # the CNN's layers
    mlp_eager(args)
    cnn(args)


if __name__ == "__main__":
    main()

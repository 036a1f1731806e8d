"""The tutorial's MNIST MLP (st.Module, L2 penalty, gradient clipping, Adam), its training
step compiled once with st.function for every batch size, with a line per epoch.

MNIST is read from TensorFlow's cache (~/.keras/datasets/mnist.npz) when it is there;
otherwise (no network here) a generated stand-in of 28x28 images of ten classes is used.
By default it trains on 6,000 examples for 4 epochs; ``--full`` on all 60,000 for 10
(``--epochs``), with progress within each epoch.

    python -m symtape examples train_mnist_mlp [--full] [--epochs N]
"""

import argparse
import time

import numpy as np

import symtape as st


def load(full: bool):
    n = 60000 if full else 6000
    try:
        (x, y), _ = st.keras.datasets.mnist.load_data()
        return x[:n], y[:n], f"MNIST (first {min(n, len(x)):,})"
    except FileNotFoundError:
        n = 60000 if full else 2048
        rng = np.random.default_rng(0)
        y = rng.integers(0, 10, n)
        strokes = rng.random((10, 28, 28)) < 0.15  # one random stroke pattern per class
        x = (strokes[y] * 200 + rng.integers(0, 55, (n, 28, 28))).astype(np.uint8)
        return x, y, "generated 28x28 digits (no cached MNIST)"


args = argparse.ArgumentParser()
args.add_argument("--full", action="store_true", help="all 60,000 examples")
args.add_argument("--epochs", type=int, default=None)
args = args.parse_args()
epochs = args.epochs or (10 if args.full else 4)

x_train, labels, source = load(args.full)
x_train = x_train.reshape(-1, 784).astype("float64") / 255.0
y_train = st.keras.utils.to_categorical(labels, 10)


class MLP(st.Module):
    def __init__(self):
        super().__init__()
        self.w1 = st.Variable(st.random.normal([784, 128], stddev=0.05))
        self.b1 = st.Variable(st.zeros([128]))
        self.w2 = st.Variable(st.random.normal([128, 10], stddev=0.05))
        self.b2 = st.Variable(st.zeros([10]))

    def __call__(self, x):
        h1 = st.nn.relu(st.matmul(x, self.w1) + self.b1)
        return st.matmul(h1, self.w2) + self.b2


st.random.set_seed(0)
model = MLP()
optimizer = st.optimizers.Adam(0.001)


@st.function(input_signature=[st.TensorSpec((None, 784)), st.TensorSpec((None, 10))])
def train_step(x, y):
    with st.GradientTape() as tape:
        loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(y, model(x)))
        total_loss = loss + 0.001 * (st.reduce_sum(st.square(model.w1))
                                     + st.reduce_sum(st.square(model.w2)))
    vars = [model.w1, model.b1, model.w2, model.b2]
    grads = tape.gradient(total_loss, vars)
    optimizer.apply_gradients(zip([st.clip_by_norm(g, 1.0) for g in grads], vars))
    return loss


print(f"training on {source}: {len(x_train)} examples")
batch_size, history = 128, []
for epoch in range(epochs):
    start, losses = time.perf_counter(), []
    print(f"epoch {epoch + 1}/{epochs}:", end="", flush=True)
    for i in range(0, len(x_train), batch_size):  # the last batch is shorter: same trace
        losses.append(float(train_step(x_train[i:i + batch_size], y_train[i:i + batch_size])))
        if args.full and len(losses) % 100 == 0:  # progress within a long epoch
            print(f" {len(losses) * batch_size}", end="", flush=True)
    history.append(np.mean(losses))
    print(f" loss {history[-1]:.4f}  ({time.perf_counter() - start:.2f} s)")
accuracy = np.mean(np.argmax(model(x_train).numpy(), -1) == labels)
print(f"training accuracy {accuracy:.3f}; traces: {train_step.traced_signatures}")
assert history[-1] < 0.6 * history[0] and accuracy > 0.8
assert len(train_step.traced_signatures) == 1

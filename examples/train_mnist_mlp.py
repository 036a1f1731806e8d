"""The tutorial's MNIST MLP (st.Module, L2 penalty, gradient clipping, Adam), its training
step compiled once with st.function for every batch size, with a line per epoch.

MNIST is read from TensorFlow's cache (~/.keras/datasets/mnist.npz) when it is there;
otherwise (no network here) a generated stand-in of 28x28 images of ten classes is used.
"""

import time

import numpy as np

import symtape as st


def load():
    try:
        (x, y), _ = st.keras.datasets.mnist.load_data()
        return x[:6000], y[:6000], "MNIST (first 6,000)"
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        y = rng.integers(0, 10, 2048)
        strokes = rng.random((10, 28, 28)) < 0.15  # one random stroke pattern per class
        x = (strokes[y] * 200 + rng.integers(0, 55, (2048, 28, 28))).astype(np.uint8)
        return x, y, "generated 28x28 digits (no cached MNIST)"


x_train, labels, source = load()
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
for epoch in range(4):
    start, losses = time.perf_counter(), []
    for i in range(0, len(x_train), batch_size):  # the last batch is shorter: same trace
        losses.append(float(train_step(x_train[i:i + batch_size], y_train[i:i + batch_size])))
    history.append(np.mean(losses))
    print(f"epoch {epoch + 1}: loss {history[-1]:.4f}  ({time.perf_counter() - start:.2f} s)")
accuracy = np.mean(np.argmax(model(x_train).numpy(), -1) == labels)
print(f"training accuracy {accuracy:.3f}; traces: {train_step.traced_signatures}")
assert history[-1] < 0.6 * history[0] and accuracy > 0.8
assert len(train_step.traced_signatures) == 1

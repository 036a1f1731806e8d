"""A training step compiled once with st.function: variables in, updates written back."""

import numpy as np

import symtape as st

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 3))
y = x @ np.array([1.5, -2.0, 0.5]) + 0.3

w = st.Variable(np.zeros(3), name="w")
b = st.Variable(0.0, name="b")


@st.function
def step(x, y):
    with st.GradientTape() as tape:
        loss = st.reduce_mean((st.reduce_sum(w * x, axis=1) + b - y) ** 2)
    gw, gb = tape.gradient(loss, [w, b])
    w.assign_sub(0.1 * gw)
    b.assign_sub(0.1 * gb)
    return loss


for _ in range(300):
    loss = step(x, y)
print("loss", float(loss), "w", w.numpy(), "b", float(b))
assert np.allclose(w.numpy(), [1.5, -2.0, 0.5], atol=1e-6) and abs(float(b) - 0.3) < 1e-6

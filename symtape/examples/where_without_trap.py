"""Derivatives through `where` are exact: the branch that is not taken contributes nothing,
even where its own derivative is infinite (TensorFlow and JAX give nan there)."""

import numpy as np

import symtape as st

x = st.Variable([-1.0, 0.0, 0.25, 4.0], name="x")
with st.GradientTape() as t2:
    with st.GradientTape() as t1:
        y = st.where(x > 0, st.sqrt(x), 0.0)
    g = t1.gradient(y, x)
h = t2.gradient(g, x)
print("f'  =", g.numpy())
print("f'' =", h.numpy())
print(g.formula()[3])

compiled = st.derivative(lambda v: st.where(v > 0, st.sqrt(v), 0.0), order=2,
                         input_signature=[st.TensorSpec(())])
assert np.array_equal(g.numpy(), [0.0, 0.0, 1.0, 0.25])
assert np.array_equal(h.numpy(), [0.0, 0.0, -2.0, -1 / 32])
assert np.array_equal(compiled(x.numpy()), h.numpy())

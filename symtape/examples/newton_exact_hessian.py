"""Newton's method on the Rosenbrock function with the exact gradient and Hessian."""

import numpy as np

import symtape as st


def rosen(x):
    return st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


spec = [st.TensorSpec((4,))]
grad, hess = st.grad(rosen, input_signature=spec), st.hessian(rosen, input_signature=spec)

x = np.array([0.9, 0.8, 0.7, 0.6])
for step in range(30):
    g = grad(x)
    if np.linalg.norm(g) < 1e-12:
        break
    x = x - np.linalg.solve(hess(x), g)
print(f"minimum after {step} Newton steps: {x}")
assert np.allclose(x, 1.0)

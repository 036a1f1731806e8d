"""Linearise a damped pendulum about an operating point: A = df/dx, exactly.

The Jacobian of the dynamics is a formula (printable, typesettable) and a fast function.
"""

import numpy as np

import symtape as st

theta, omega = st.symbol("theta", 0.3), st.symbol("omega", 0.1)
g_over_l, damping = 9.81, 0.2

with st.GradientTape(persistent=True) as tape:
    f = st.stack([omega, -g_over_l * st.sin(theta) - damping * omega])
A = st.stack([tape.jacobian(f, theta), tape.jacobian(f, omega)], axis=1)

print("A(theta, omega) =", A.formula())
print(A.latex())
expected = np.array([[0.0, 1.0], [-g_over_l * np.cos(0.3), -damping]])
assert np.allclose(A.numpy(), expected)

# the same Jacobian compiled, evaluated along a whole trajectory at once
jac = st.compile(A, [theta, omega])
thetas, omegas = np.linspace(-1, 1, 5), np.zeros(5)
assert np.allclose(jac(thetas, omegas)[:, 1, 0], -g_over_l * np.cos(thetas))

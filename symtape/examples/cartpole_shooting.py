"""Single shooting of a cart-pole swing-up: the control sequence is the only unknown.

The cart-pole of ``cartpole_model.py`` (state ``(x, theta, xdot, thetadot)``, ``theta = 0``
hanging down and ``theta = pi`` upright, control ``u`` a horizontal force on the cart) is
integrated by its RK4 step written once as the body of ``st.scan`` over the control sequence.
The cost, an effort term plus a terminal penalty on the distance from upright at rest, is a
function of the ``N`` controls alone; ``st.scipy.minimize`` hands L-BFGS-B its exact compiled
gradient (the reverse sweep of the scan is a loop again, compiled with the forward loop into
one native function).

    python -m symtape examples cartpole_shooting
"""

import time

import numpy as np

import symtape as st
from symtape.examples.cartpole_model import UPRIGHT, h, rk4_step, rk4_step_np

N = 64                              # steps of RK4 over a 2.56 s horizon
EFFORT = 1e-3                       # weight of h * sum(u^2)
TERMINAL = np.array([10.0, 100.0, 10.0, 10.0])  # weights of (x, theta - pi, xdot, thetadot)
START = np.zeros(4)                 # at rest, hanging down


def terminal_error(s):
    return s - st.constant(UPRIGHT)


def cost(u):
    states = st.scan(rk4_step, u, initializer=st.constant(START))   # (N, 4)
    e = terminal_error(states[-1])
    return EFFORT * h * st.reduce_sum(u * u) + st.reduce_sum(TERMINAL * e * e)


# The reference in plain numpy: a Python loop of RK4 steps of the cart-pole's mass-matrix form
# (cartpole_model.f_np), solved by np.linalg.solve at every stage.
def trajectory_np(u):
    s, out = START.copy(), []
    for uk in u:
        s = rk4_step_np(s, uk)
        out.append(s)
    return np.array(out)


def cost_np(u):
    e = trajectory_np(u)[-1] - UPRIGHT
    return EFFORT * h * np.sum(u * u) + np.sum(TERMINAL * e * e)


# 1. At the initial guess: the scan's trajectory (run eagerly) against the numpy one, and the
#    exact compiled gradient against central differences of the numpy cost.
u0 = 2.0 * np.sin(np.linspace(0.0, 2.0 * np.pi, N))
states = st.scan(rk4_step, st.constant(u0), initializer=st.constant(START))
assert np.allclose(states.numpy(), trajectory_np(u0), rtol=1e-12, atol=1e-12)
grad = st.grad(cost, input_signature=[st.TensorSpec((N,))])
g0 = grad(u0)
eps, worst = 1e-5, 0.0
for k in (0, 7, N // 2, N - 3, N - 1):
    du = np.zeros(N)
    du[k] = eps
    fd = (cost_np(u0 + du) - cost_np(u0 - du)) / (2.0 * eps)
    assert np.isclose(g0[k], fd, rtol=1e-6, atol=1e-8), (k, g0[k], fd)
    worst = max(worst, abs(g0[k] - fd) / abs(fd))
print(f"dJ/du at u0 (|dJ/du| = {np.linalg.norm(g0):.3g}) against central differences of a "
      f"numpy RK4: largest relative difference {worst:.1e}")

# 2. Optimise the N controls: L-BFGS-B with the exact gradient. ftol = 1e-5 stops when a step
#    gains under a 1e-5 fraction of the cost: the pole is up long before SciPy's default
#    (2.2e-9, some 2,000 iterations on this badly scaled problem) would stop.
t = time.perf_counter()
res = st.scipy.minimize(cost, u0, method="L-BFGS-B", options={"ftol": 1e-5})
took = time.perf_counter() - t
final = trajectory_np(res.x)[-1]
J0 = cost_np(u0)
print(f"L-BFGS-B: {res.nit} iterations, {res.nfev} cost+gradient calls, {took:.2f} s "
      f"(setup included)")
print(f"cost {J0:.4g} -> {res.fun:.4g}; final state x = {final[0]:+.4f}, "
      f"theta = {final[1]:.4f} (pi = {np.pi:.4f}), xdot = {final[2]:+.4f}, "
      f"thetadot = {final[3]:+.4f}; max |u| = {np.abs(res.x).max():.2f} N")
assert res.success and np.isclose(res.fun, cost_np(res.x), rtol=1e-10)
assert abs(final[1] - np.pi) < 0.05 and np.abs(final[[0, 2, 3]]).max() < 0.1
assert res.fun < J0 / 100

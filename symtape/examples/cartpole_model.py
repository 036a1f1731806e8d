"""The cart-pole of the ``cartpole_*`` examples: its dynamics in symtape and in numpy, and one
RK4 step of either; run as a script, it checks both against the cart-pole's energy.

A cart of mass ``M`` carries a point mass ``m`` on a massless pole of length ``l``; the state
is ``(x, theta, xdot, thetadot)`` with ``theta = 0`` hanging down and ``theta = pi`` upright,
the control ``u`` a horizontal force on the cart. ``f_st`` is Lagrange's equations solved for
the two accelerations, written with symtape's ops (so it traces, differentiates and
compiles); ``f_np``, an independent reference, leaves them in mass-matrix form

    [M + m,   m l cos][xddot    ]   [u + m l thetadot^2 sin]
    [m l cos, m l^2  ][thetaddot] = [-m g l sin            ]

and solves that with ``np.linalg.solve``. ``rk4`` is one step of length ``h`` of either.

    python -m symtape examples cartpole_model
"""

import numpy as np

import symtape as st

M, m, l, g = 1.0, 0.3, 0.5, 9.81    # cart mass, pole mass, pole length, gravity
h = 0.04                            # the RK4 step
UPRIGHT = np.array([0.0, np.pi, 0.0, 0.0])


def f_st(s, u):
    """ds/dt of the cart-pole: Lagrange's equations solved for the two accelerations."""
    theta, xdot, thetadot = s[1], s[2], s[3]
    sn, cs = st.sin(theta), st.cos(theta)
    den = M + m * sn ** 2
    xddot = (u + m * sn * (l * thetadot ** 2 + g * cs)) / den
    thetaddot = -(u * cs + m * l * thetadot ** 2 * cs * sn + (M + m) * g * sn) / (l * den)
    return st.stack([xdot, thetadot, xddot, thetaddot])


def f_np(s, u):
    """ds/dt in numpy: the mass-matrix form solved by np.linalg.solve."""
    sn, cs = np.sin(s[1]), np.cos(s[1])
    mass = np.array([[M + m, m * l * cs], [m * l * cs, m * l * l]])
    force = np.array([u + m * l * s[3] ** 2 * sn, -m * g * l * sn])
    return np.concatenate([s[2:], np.linalg.solve(mass, force)])


def rk4(f, s, u):
    """One RK4 step of length h of ds/dt = f(s, u), u held (symtape tensors or numpy arrays)."""
    k1 = f(s, u)
    k2 = f(s + 0.5 * h * k1, u)
    k3 = f(s + 0.5 * h * k2, u)
    k4 = f(s + h * k3, u)
    return s + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def rk4_step(s, u):
    """One RK4 step of the symtape dynamics (a scan's body, a function to compile)."""
    return rk4(f_st, s, u)


def rk4_step_np(s, u):
    """One RK4 step of the numpy dynamics."""
    return rk4(f_np, s, u)


def energy(s):
    """Kinetic plus potential energy, from the positions and velocities of cart and mass."""
    _, theta, xdot, thetadot = s
    vx, vy = xdot + l * np.cos(theta) * thetadot, l * np.sin(theta) * thetadot
    return 0.5 * M * xdot ** 2 + 0.5 * m * (vx ** 2 + vy ** 2) - m * g * l * np.cos(theta)


if __name__ == "__main__":
    # The two forms agree at random states and forces. Unforced, 500 RK4 steps (20 s) of the
    # compiled symtape step and of the numpy one keep the energy, written from the positions
    # and velocities (not from the equations), to RK4's accuracy: a wrong term in either
    # form drifts by a large part of it.
    rng = np.random.default_rng(0)
    for s, u in zip(rng.uniform(-3.0, 3.0, (5, 4)), rng.uniform(-5.0, 5.0, 5)):
        assert np.allclose(f_st(st.constant(s), u).numpy(), f_np(s, u), rtol=1e-12, atol=1e-12)
    step = st.function(rk4_step, input_signature=[st.TensorSpec((4,)), st.TensorSpec(())])
    start = np.array([0.0, 2.0, 0.5, 0.0])
    s_st, s_np, drift = start, start, 0.0
    for _ in range(500):
        s_st, s_np = step(s_st, 0.0).numpy(), rk4_step_np(s_np, 0.0)
        drift = max(drift, abs(energy(s_st) - energy(start)), abs(energy(s_np) - energy(start)))
    gap = np.abs(s_st - s_np).max()
    print(f"cart-pole: compiled symtape RK4 against numpy's after 500 steps: {gap:.1e}; energy "
          f"{energy(start):.4f}, largest drift over 20 s unforced {drift:.1e}")
    assert gap < 1e-10 and drift < 5e-3

"""A double pendulum modelled with SymPy's ``KanesMethod``; its mass matrix and forcing are
brought into symtape with ``st.from_sympy`` (no ``lambdify`` in between), and the
accelerations ``M^-1 F`` and their Jacobian (the linearisation a controller designer
needs) are compiled. Checked against SymPy's own Jacobian of ``M^-1 F``, and timed beside
``lambdify`` of it over 100,000 states.

    python -m symtape examples double_pendulum_kane
"""

import time

import numpy as np
import sympy as sp
from sympy.physics import mechanics as me

import symtape as st

q1, q2, u1, u2 = me.dynamicsymbols("q1 q2 u1 u2")
length, mass, g = sp.symbols("l m g", positive=True)
N = me.ReferenceFrame("N")
A = N.orientnew("A", "Axis", [q1, N.z])
B = N.orientnew("B", "Axis", [q2, N.z])
A.set_ang_vel(N, u1 * N.z)
B.set_ang_vel(N, u2 * N.z)
pivot = me.Point("O")
pivot.set_vel(N, 0)
P = pivot.locatenew("P", length * A.x)
P.v2pt_theory(pivot, N, A)
R = P.locatenew("R", length * B.x)
R.v2pt_theory(P, N, B)
kane = me.KanesMethod(N, q_ind=[q1, q2], u_ind=[u1, u2],
                      kd_eqs=[q1.diff() - u1, q2.diff() - u2])
kane.kanes_equations([me.Particle("a", P, mass), me.Particle("b", R, mass)],
                     [(P, -mass * g * N.y), (R, -mass * g * N.y)])
M, F = kane.mass_matrix, kane.forcing
params = {length: 1.0, mass: 1.0, g: 9.81}


def accelerations(x):
    values = {q1: x[0], q2: x[1], u1: x[2], u2: x[3], **params}
    return st.linalg.solve(st.from_sympy(M, values), st.from_sympy(F, values))[:, 0]


t = time.perf_counter()
J = st.jacobian(accelerations, input_signature=[st.TensorSpec((4,))])
print(f"symtape: from_sympy + Jacobian + compile {time.perf_counter() - t:.2f} s")

# SymPy's own Jacobian of M^-1 F, for reference
state = [q1, q2, u1, u2]
xs = sp.symbols("x0:4")
acc = (M.LUsolve(F)).subs(params).subs(dict(zip(state, xs)))
t = time.perf_counter()
J_sympy = sp.lambdify([xs], acc.jacobian(xs), cse=True)
print(f"SymPy:   jacobian + lambdify(cse=True)      {time.perf_counter() - t:.2f} s")

rng = np.random.default_rng(0)
points = rng.uniform(-1, 1, (100_000, 4))
t = time.perf_counter()
ours = J(points)
took = time.perf_counter() - t
t = time.perf_counter()
theirs = np.stack([np.asarray(J_sympy(p), dtype=float) for p in points[:2000]])
took_sympy = (time.perf_counter() - t) * len(points) / 2000
err = np.max(np.abs(ours[:2000] - theirs)) / np.max(np.abs(theirs))
print(f"Jacobian at 100,000 states: symtape {took * 1e3:.1f} ms, lambdify about "
      f"{took_sympy * 1e3:.0f} ms ({took_sympy / took:.0f}x); values agree to {err:.1e}")
print("linearisation at the hanging rest state (q = -pi/2, u = 0):")
print(np.array2string(J(np.array([-np.pi / 2, -np.pi / 2, 0.0, 0.0])), precision=4))
assert err < 1e-12

"""The cart-pole's dynamics and their Jacobians exported as C with CasADi's ABI: an NLP in
CasADi, and a discrete-time LQR whose closed loop is a plain C program.

The cart-pole of ``cartpole_model.py`` (state ``(x, theta, xdot, thetadot)``, ``theta = 0``
hanging down, ``theta = pi`` upright; force ``u`` on the cart) is discretised by one RK4 step,
``s_{k+1} = F(s_k, u_k)``. symtape writes ``F`` and its Jacobians ``A = dF/ds``,
``B = dF/du`` exactly:

1. ``st.export_c({"F": F, "jac_F": jac_F}, ..., abi="casadi")``, built with
   ``gcc -O2 -std=c99 -shared -fPIC -lm`` and loaded with ``casadi.external("F", lib)``.
   ``jac_F`` follows CasADi's naming convention for an external's Jacobian: CasADi looks up
   ``jac_<name>`` in the same library, with the inputs ``(s, u, out_o0)`` (the nominal inputs
   and output) and one output per input, ``dF/ds`` (4x4) and ``dF/du`` (4x1). The values are
   checked against symtape's JIT and central differences.
2. A multiple-shooting swing-up in ``casadi.Opti`` with IPOPT (it ships in CasADi's wheel):
   the ``N`` steps' states and controls are unknowns, ``X[k+1] = F(X[k], U[k])`` equality
   constraints. The constraint Jacobian is assembled by CasADi from the external's ``jac_F``
   (CasADi does not see ``F``'s formula and, by default, does not finite-difference an
   external: without ``jac_F`` building the solver fails); the Lagrangian's Hessian is
   IPOPT's limited-memory approximation, as no second derivatives are exported.
3. A discrete-time LQR at the upright equilibrium: ``A``, ``B`` from the exported C, the
   Riccati equation iterated in numpy, and the closed loop ``s_{k+1} = F(s_k, -K e_k)``
   (``e_k = s_k - (0, pi, 0, 0)``, the offset from upright) as a
   C program calling the plain-C export of ``F`` (``abi="batched"``), built with gcc and run
   as a subprocess; its trajectory matches the same loop run in Python.

CasADi is the optional extra ``[bench]``: without it, or without gcc, the example says so and
stops.

    python -m symtape examples cartpole_casadi
"""

import atexit
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import symtape as st
from symtape.examples.cartpole_model import UPRIGHT, h, rk4_step, rk4_step_np

try:
    import casadi
except ImportError:
    casadi = None
GCC = shutil.which("gcc")
if casadi is None or GCC is None:
    print("cartpole_casadi: skipped (needs " + ("casadi (pip install casadi)" if casadi is None
                                               else "gcc") + ")")
    sys.exit(0)

def rk4_jacobian(s, u, out_o0):
    """CasADi's Jacobian signature: the nominal output ``out_o0`` is an input (unused here)."""
    with st.GradientTape() as tape:
        tape.watch(s)
        tape.watch(u)
        y = rk4_step(s, u)
    ds, du = tape.jacobian(y, [s, u])
    return ds, du


SIG = [st.TensorSpec((4,), name="s"), st.TensorSpec((), name="u")]
F = st.function(rk4_step, input_signature=SIG)
jac_F = st.function(rk4_jacobian, input_signature=SIG + [st.TensorSpec((4,), name="out_o0")])


def gcc(args):
    done = subprocess.run([GCC, "-O2", "-std=c99", *args, "-lm"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


folder = Path(tempfile.mkdtemp(prefix="symtape_cartpole_"))
atexit.register(shutil.rmtree, folder, ignore_errors=True)  # also when a check fails

# 1. Export F and jac_F with CasADi's ABI, build, load, compare.
t = time.perf_counter()
_, source = st.export_c({"F": F, "jac_F": jac_F}, folder / "cartpole", abi="casadi")
lib = folder / "cartpole.so"
gcc(["-shared", "-fPIC", str(source), "-o", str(lib)])
F_ext = casadi.external("F", str(lib))
J_ext = F_ext.jacobian()            # CasADi found jac_F in the library
assert J_ext.class_name() == "External" and J_ext.name() == "jac_F", J_ext
print(f"exported F and jac_F with abi='casadi', built and loaded in "
      f"{time.perf_counter() - t:.2f} s: {F_ext}; its Jacobian {J_ext}")

rng = np.random.default_rng(0)
worst_jit, worst_fd = 0.0, 0.0
for _ in range(5):
    s = rng.uniform(-2.0, 2.0, 4)
    u = float(rng.uniform(-5.0, 5.0))
    y = np.array(F_ext(s, u)).ravel()
    A_c, B_c = (np.array(v) for v in J_ext(s, u, y))
    A_j, B_j = (np.asarray(v) for v in jac_F(s, u, y))
    assert np.allclose(y, F(s, u).numpy(), rtol=1e-14, atol=1e-14)
    assert np.allclose(y, rk4_step_np(s, u), rtol=1e-12, atol=1e-12)
    worst_jit = max(worst_jit, np.abs(A_c - A_j).max(), np.abs(B_c.ravel() - B_j).max())
    eps = 1e-6
    fd = np.column_stack([(rk4_step_np(s + eps * e, u) - rk4_step_np(s - eps * e, u)) / (2 * eps)
                          for e in np.eye(4)]
                         + [(rk4_step_np(s, u + eps) - rk4_step_np(s, u - eps)) / (2 * eps)])
    worst_fd = max(worst_fd, np.abs(np.column_stack([A_c, B_c]) - fd).max())
assert worst_jit < 1e-13 and worst_fd < 1e-8, (worst_jit, worst_fd)
print(f"external F, dF/ds, dF/du at 5 random points: against symtape's JIT largest difference "
      f"{worst_jit:.1e}, against central differences of numpy RK4 {worst_fd:.1e}")

# 2. Multiple-shooting swing-up: from hanging at rest to upright at rest in N steps.
N, U_MAX, X_MAX = 60, 15.0, 1.0
opti = casadi.Opti()
X = opti.variable(4, N + 1)
U = opti.variable(1, N)
opti.minimize(h * casadi.sumsqr(U))
for k in range(N):
    opti.subject_to(X[:, k + 1] == F_ext(X[:, k], U[0, k]))
opti.subject_to(X[:, 0] == np.zeros(4))
opti.subject_to(X[:, N] == UPRIGHT)
opti.subject_to(opti.bounded(-U_MAX, U, U_MAX))
opti.subject_to(opti.bounded(-X_MAX, X[0, :], X_MAX))
opti.set_initial(X[1, :], np.linspace(0.0, np.pi, N + 1))
opti.solver("ipopt", {"print_time": False},
            {"print_level": 0, "sb": "yes", "hessian_approximation": "limited-memory", "tol": 1e-8,
             "max_iter": 1000})
t = time.perf_counter()
sol = opti.solve()
took = time.perf_counter() - t
stats = sol.stats()
Xs, Us = np.array(sol.value(X)), np.array(sol.value(U)).ravel()
# Replay the optimal controls in numpy, independently of CasADi and the C code.
s, defect = np.zeros(4), 0.0
for k in range(N):
    defect = max(defect, np.abs(rk4_step_np(Xs[:, k], Us[k]) - Xs[:, k + 1]).max())
    s = rk4_step_np(s, Us[k])
print(f"IPOPT swing-up over {N * h:.2f} s: {stats['iter_count']} iterations, {took:.2f} s; "
      f"largest shooting defect (numpy RK4) {defect:.1e}; replayed final state "
      f"x = {s[0]:+.2e}, theta - pi = {s[1] - np.pi:+.2e}, xdot = {s[2]:+.2e}, "
      f"thetadot = {s[3]:+.2e}; max |u| = {np.abs(Us).max():.2f} N")
assert stats["success"] and defect < 1e-7
assert np.abs(s - UPRIGHT).max() < 1e-5
assert np.abs(Us).max() <= U_MAX + 1e-6 and np.abs(Xs[0]).max() <= X_MAX + 1e-6

# 3. Discrete-time LQR at the upright equilibrium, from the exported Jacobians.
A, B = (np.array(v) for v in J_ext(UPRIGHT, 0.0, UPRIGHT))
B = B.reshape(4, 1)
assert np.allclose(np.array(F_ext(UPRIGHT, 0.0)).ravel(), UPRIGHT, atol=1e-14)
Q, R = np.diag([1.0, 10.0, 1.0, 1.0]), np.array([[0.1]])
P, converged = Q.copy(), False
for it in range(10_000):
    K = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
    P_next = Q + A.T @ P @ (A - B @ K)
    converged = np.abs(P_next - P).max() < 1e-12 * np.abs(P).max()
    P = P_next
    if converged:
        break
assert converged
# P solves the discrete algebraic Riccati equation: its residual, written out once more.
dare = A.T @ P @ A - P + Q - A.T @ P @ B @ np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
assert np.abs(dare).max() < 1e-8 * np.abs(P).max()
K = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A).ravel()
rho = np.abs(np.linalg.eigvals(A - B @ K[None, :])).max()
assert rho < 1.0
print(f"LQR: Riccati iteration converged in {it + 1} steps; K = {np.round(K, 3)}, "
      f"closed-loop spectral radius {rho:.4f}")

header, plain = st.export_c({"F": F}, folder / "cartpole_plain")   # the plain batched ABI
STEPS, S0 = 250, np.array([0.1, np.pi + 0.2, 0.0, 0.0])
k_init = ", ".join(f"{v:.17g}" for v in K)
s_init = ", ".join(f"{v:.17g}" for v in S0)
driver = folder / "lqr_loop.c"
driver.write_text(f"""#include <stdio.h>
#include "{header.name}"

int main(void)
{{
    const double K[4] = {{{k_init}}};
    double s[4] = {{{s_init}}}, next[4], u;
    for (int k = 0; k < {STEPS}; ++k) {{
        /* u = -K (s - upright): the upright state is theta = pi */
        u = -(K[0] * s[0] + K[1] * (s[1] - 3.14159265358979323846) + K[2] * s[2]
              + K[3] * s[3]);
        F(1, s, &u, next);
        for (int i = 0; i < 4; ++i)
            s[i] = next[i];
        printf("%.17g %.17g %.17g %.17g %.17g\\n", u, s[0], s[1], s[2], s[3]);
    }}
    return 0;
}}
""")
exe = folder / "lqr_loop"
gcc([f"-I{folder}", str(driver), str(plain), "-o", str(exe)])
out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
c_run = np.array([[float(v) for v in line.split()] for line in out.splitlines()])

s, py_run = S0.copy(), []
for _ in range(STEPS):
    u = -K @ (s - UPRIGHT)
    s = rk4_step_np(s, u)
    py_run.append([u, *s])
py_run = np.array(py_run)
gap = np.abs(c_run - py_run).max()
final = c_run[-1, 1:]
print(f"closed loop in C ({STEPS} steps, {STEPS * h:.0f} s) from x = 0.1, theta = pi + 0.2: "
      f"final |s - upright| = {np.abs(final - UPRIGHT).max():.1e}, max |u| = "
      f"{np.abs(c_run[:, 0]).max():.2f} N; against the same loop in numpy: {gap:.1e}")
assert c_run.shape == (STEPS, 5) and gap < 1e-10
assert np.abs(final - UPRIGHT).max() < 1e-4

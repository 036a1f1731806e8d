"""Robertson's stiff chemical kinetics (three species, rate constants from 0.04 to 3e7)
integrated to t = 1e5 with SciPy's BDF, given symtape's compiled right-hand side and exact
Jacobian (``st.scipy.solve_ivp_jac``), beside BDF's default finite-difference Jacobian.

    pip install -e ".[scipy]" && python -m symtape examples stiff_robertson
"""

import time

import numpy as np
from scipy.integrate import solve_ivp

import symtape as st


def robertson(t, y):
    return st.stack([-0.04 * y[0] + 1e4 * y[1] * y[2],
                     0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                     3e7 * y[1] ** 2])


def robertson_numpy(t, y):
    return np.array([-0.04 * y[0] + 1e4 * y[1] * y[2],
                     0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                     3e7 * y[1] ** 2])


y0, span, tol = [1.0, 0.0, 0.0], (0.0, 1e5), dict(rtol=1e-8, atol=1e-12)
t = time.perf_counter()
fun, jac, pattern = st.scipy.solve_ivp_jac(robertson, y0)
setup = time.perf_counter() - t
print(f"symtape set-up (trace, Jacobian, compile): {setup:.2f} s; Jacobian pattern:")
print(pattern.toarray())
for name, kw in (("symtape RHS + exact Jacobian", dict(fun=fun, jac=jac)),
                 ("numpy RHS, finite-difference Jacobian", dict(fun=robertson_numpy))):
    t = time.perf_counter()
    sol = solve_ivp(t_span=span, y0=y0, method="BDF", **kw, **tol)
    took = time.perf_counter() - t
    print(f"  {name:<40} {took * 1e3:7.1f} ms  steps {len(sol.t):4d}  RHS calls {sol.nfev:5d}"
          f"  Jacobians {sol.njev:3d}  y(1e5) = {np.array2string(sol.y[:, -1], precision=6)}")
    assert sol.success and abs(sol.y[:, -1].sum() - 1.0) < 1e-8

"""Newton and trust-region methods on the 1,000-dimensional Rosenbrock function with
symtape's compiled derivatives handed to SciPy (``st.scipy.minimize``): the exact gradient,
Hessian-vector products and the coloured sparse Hessian (3 Hessian-vector products, not
1,000), beside SciPy's defaults with finite-difference gradients.

    pip install -e ".[scipy]" && python -m symtape examples scipy_rosenbrock
"""

import time

import numpy as np
from scipy.optimize import minimize, rosen

import symtape as st


def rosenbrock(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


n = 1000
x0 = np.full(n, -0.5)
x0[::2] = 1.2
print(f"Rosenbrock, n = {n}, from f(x0) = {rosen(x0):.1f}")
runs = [("Newton-CG", "hessp"), ("Newton-CG", "sparse"), ("trust-ncg", "hessp"),
        ("L-BFGS-B", None)]
for method, hess in runs:
    t = time.perf_counter()
    res = st.scipy.minimize(rosenbrock, x0, method=method, hess=hess, tol=1e-10)
    took = time.perf_counter() - t
    print(f"  symtape {method:<10} hess={str(hess):<7} {took:6.2f} s (setup included)  "
          f"f = {res.fun:.2e}  |x - 1| = {np.abs(res.x - 1).max():.1e}  "
          f"iterations {res.nit}")
    assert res.success and np.abs(res.x - 1).max() < 1e-4

# SciPy's default: L-BFGS-B with a finite-difference gradient (n + 1 calls of f each)
t = time.perf_counter()
fd = minimize(rosen, x0, method="L-BFGS-B", options={"maxfun": 200_000})
took = time.perf_counter() - t
print(f"  SciPy   L-BFGS-B   finite differences {took:6.2f} s  f = {fd.fun:.2e}  "
      f"|x - 1| = {np.abs(fd.x - 1).max():.1e}  calls of f {fd.nfev}")

"""``st.scipy``: minimize with compiled derivatives, and stiff ODE right-hand sides with
their compiled (sparse) Jacobians, against SciPy's own references."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st

scipy = pytest.importorskip("scipy")
from scipy.integrate import solve_ivp  # noqa: E402
from scipy.optimize import rosen, rosen_der, rosen_hess  # noqa: E402


def rosen_st(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("method,hess,n", [("BFGS", None, 20), ("Newton-CG", None, 50),
                                           ("trust-exact", None, 30),
                                           ("trust-ncg", None, 300),
                                           ("Newton-CG", "sparse", 300),
                                           ("trust-constr", "dense", 20)])
def test_minimize_converges_with_exact_derivatives(method, hess, n):
    x0 = np.full(n, -0.5)
    x0[::2] = 1.2
    res = st.scipy.minimize(rosen_st, x0, method=method, hess=hess, tol=1e-12,
                            options={"maxiter": 5000})
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(n), atol=1e-4)
    np.testing.assert_allclose(res.fun, rosen(res.x), rtol=1e-12, atol=1e-16)
    grad = res.grad if method == "trust-constr" else res.jac  # (trust-constr's own name)
    np.testing.assert_allclose(grad, rosen_der(res.x), rtol=1e-10, atol=1e-12)


def test_sparse_hessian_handed_over_as_scipy_sparse(monkeypatch):
    seen = []
    real = scipy.optimize.minimize

    def spy(fun, x0, **kw):
        seen.append(kw["hess"](x0))
        return real(fun, x0, **kw)

    monkeypatch.setattr(scipy.optimize, "minimize", spy)
    st.scipy.minimize(rosen_st, np.zeros(400), method="Newton-CG")
    (h,) = seen
    assert scipy.sparse.issparse(h) and h.shape == (400, 400) and h.nnz == 3 * 400 - 2
    np.testing.assert_array_equal(h.toarray(), rosen_hess(np.zeros(400)))


def robertson(t, y):
    return st.stack([-0.04 * y[0] + 1e4 * y[1] * y[2],
                     0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                     3e7 * y[1] ** 2])


def test_robertson_with_the_compiled_jacobian_matches_scipys_finite_differences():
    fun, jac, pattern = st.scipy.solve_ivp_jac(robertson, [1.0, 0.0, 0.0])
    y = np.array([0.9, 1e-5, 0.1])
    np.testing.assert_allclose(jac(0.0, y), [[-0.04, 1e4 * y[2], 1e4 * y[1]],
                                             [0.04, -1e4 * y[2] - 6e7 * y[1], -1e4 * y[1]],
                                             [0.0, 6e7 * y[1], 0.0]], rtol=1e-15)
    assert pattern.toarray().tolist() == [[1, 1, 1], [1, 1, 1], [0, 1, 0]]
    span, y0 = (0.0, 1e5), [1.0, 0.0, 0.0]
    ours = solve_ivp(fun, span, y0, method="BDF", jac=jac, rtol=1e-8, atol=1e-12)

    def numpy_rhs(t, y):
        return [-0.04 * y[0] + 1e4 * y[1] * y[2],
                0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2, 3e7 * y[1] ** 2]

    fd = solve_ivp(numpy_rhs, span, y0, method="BDF", rtol=1e-8, atol=1e-12)
    assert ours.success and fd.success
    np.testing.assert_allclose(ours.y[:, -1], fd.y[:, -1], rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(ours.y[:, -1].sum(), 1.0, rtol=1e-9)  # mass is conserved


def test_a_large_stiff_system_gets_a_sparse_jacobian():
    n = 300

    def diffusion(t, y):
        lap = st.concat([y[1:2] - y[:1], y[2:] - 2 * y[1:-1] + y[:-2], y[-2:-1] - y[-1:]], 0)
        return 1e3 * lap - y ** 3

    y0 = np.sin(np.linspace(0, np.pi, n))
    fun, jac, pattern = st.scipy.solve_ivp_jac(diffusion, y0)
    j = jac(0.0, y0)
    assert scipy.sparse.issparse(j) and pattern.nnz == 3 * n - 2
    dense = st.jacobian(diffusion, argnums=1, input_signature=[
        st.TensorSpec(()), st.TensorSpec((n,))])(0.0, y0)
    np.testing.assert_allclose(j.toarray(), dense, rtol=1e-15)
    sol = solve_ivp(fun, (0, 0.01), y0, method="BDF", jac=jac, rtol=1e-6, atol=1e-9)
    ref = solve_ivp(fun, (0, 0.01), y0, method="BDF", jac_sparsity=pattern, rtol=1e-6,
                    atol=1e-9)
    np.testing.assert_allclose(sol.y[:, -1], ref.y[:, -1], rtol=1e-4, atol=1e-7)


def test_hooks_refuse_bad_input():
    with pytest.raises(st.errors.InvalidArgumentError, match="1-D array"):
        st.scipy.minimize(rosen_st, np.zeros((2, 2)))
    with pytest.raises(st.errors.InvalidArgumentError, match="do not pass it"):
        st.scipy.minimize(rosen_st, np.zeros(3), jac=True)
    with pytest.raises(st.errors.InvalidArgumentError, match="uses no Hessian"):
        st.scipy.minimize(rosen_st, np.zeros(3), method="BFGS", hess="dense")
    with pytest.raises(st.errors.InvalidArgumentError, match="hess must be"):
        st.scipy.minimize(rosen_st, np.zeros(3), method="Newton-CG", hess="exact")
    with pytest.raises(st.errors.InvalidArgumentError, match="NaN or infinity"):
        st.scipy.minimize(rosen_st, np.array([0.0, np.nan]))
    with pytest.raises(st.errors.InvalidArgumentError, match="vector of 2 elements"):
        st.scipy.solve_ivp_jac(lambda t, y: st.reduce_sum(y), [1.0, 2.0])

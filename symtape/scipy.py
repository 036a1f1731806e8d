"""SciPy hooks (SciPy is the optional extra ``[scipy]``): :func:`minimize` hands
``scipy.optimize.minimize`` the compiled value and gradient of a function written with
``st`` ops, and its Hessian (dense, sparse when it is, or Hessian-vector products) where the
method uses one; :func:`solve_ivp_jac` gives ``scipy.integrate.solve_ivp`` a compiled
right-hand side, its Jacobian (sparse when it is) and the Jacobian's sparsity, for stiff
solvers.

>>> import symtape as st
>>> def rosen(x):
...     return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
>>> res = st.scipy.minimize(rosen, np.zeros(5), method="trust-exact")
>>> bool(res.success), np.round(res.x, 6).tolist()
(True, [1.0, 1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from symtape.codegen import TensorSpec
from symtape.base.errors import InvalidArgumentError, MissingDependencyError
from symtape.compile.function import compile, placeholders, traced_code
from symtape.compile.transforms import checked_result, hessian, hvp, jacobian
from symtape.derivatives.tape import GradientTape

__all__ = ["minimize", "solve_ivp_jac", "IVPFunctions", "SPARSE_FROM"]

#: Hessians and Jacobians of at least this many rows are handed over sparse (when they
#: are sparse enough: at most a tenth non-zero).
SPARSE_FROM = 200

_HESSP = {"newton-cg", "trust-ncg", "trust-krylov", "trust-constr"}
_HESS = {"trust-exact", "dogleg"}


def _scipy(what: str):
    try:
        import scipy.integrate
        import scipy.optimize
        import scipy.sparse  # noqa: F401 - used through the package
    except ImportError:
        raise MissingDependencyError(f"{what} needs SciPy: pip install \"symtape[scipy]\"",
                                     name="scipy") from None
    return scipy


def _vector(x0, what: str) -> np.ndarray:
    x = np.asarray(x0, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise InvalidArgumentError(f"{what}: x0 must be a non-empty 1-D array, got shape "
                                   f"{x.shape}")
    if not np.all(np.isfinite(x)):
        raise InvalidArgumentError(f"{what}: x0 holds NaN or infinity")
    return x


def _value_and_grad(f: Callable, n: int, what: str):
    (x,) = placeholders(f, [TensorSpec((n,))])
    with traced_code(what), GradientTape() as tape:
        tape.watch(x)
        y = checked_result(f(x), what, scalar=True)
    g = tape.gradient(y, x, unconnected_gradients="zero")
    return compile([y, g], [x], name=f"{getattr(f, '__name__', 'f')}_value_and_grad")


def minimize(f: Callable, x0, method: str = "BFGS", hess: str | None = None, **kwargs):
    """``scipy.optimize.minimize`` of the scalar function ``f`` (of one 1-D tensor) from
    ``x0``, with its compiled value and gradient (``jac=True``) and, for the methods that
    use one, its Hessian: ``hess="hessp"`` (Hessian-vector products, the default of
    Newton-CG, trust-ncg, trust-krylov and trust-constr), ``"sparse"`` (a
    ``scipy.sparse`` matrix from the coloured sparse Hessian, the default of those when
    ``x0`` has at least :data:`SPARSE_FROM` elements and the Hessian is sparse) or
    ``"dense"`` (the default of trust-exact and dogleg). Other keyword arguments go to
    SciPy. Returns SciPy's ``OptimizeResult``."""
    what = "st.scipy.minimize"
    scipy = _scipy(what)
    x = _vector(x0, what)
    n = x.size
    m = str(method).lower()
    for key in ("jac", "hess", "hessp"):
        if key in kwargs:
            raise InvalidArgumentError(f"{what}: {key} is computed from f; do not pass it")
    fg = _value_and_grad(f, n, what)

    def value_and_grad(v, *args):
        value, grad = fg(np.ascontiguousarray(v, dtype=np.float64))
        return float(value), grad

    extra: dict = {}
    wants = hess
    if wants is None:
        wants = "dense" if m in _HESS else "hessp" if m in _HESSP else None
        if m in _HESSP - {"trust-ncg", "trust-krylov"} and n >= SPARSE_FROM:
            wants = "sparse"
    if wants not in (None, "dense", "sparse", "hessp"):
        raise InvalidArgumentError(f"{what}: hess must be 'dense', 'sparse' or 'hessp', got "
                                   f"{hess!r}")
    if wants is not None and m not in _HESS | _HESSP:
        raise InvalidArgumentError(f"{what}: method {method!r} uses no Hessian")
    if wants == "hessp":
        hv = hvp(f, input_signature=[TensorSpec((n,)), TensorSpec((n,))])
        extra["hessp"] = lambda v, p, *args: hv(np.ascontiguousarray(v, dtype=np.float64),
                                                 np.ascontiguousarray(p, dtype=np.float64))
    elif wants == "sparse":
        h = hessian(f, input_signature=[TensorSpec((n,))], sparse=True)
        if m in _HESS:
            extra["hess"] = lambda v, *args: h(np.asarray(v, dtype=np.float64)).to_dense()
        else:
            extra["hess"] = lambda v, *args: h(np.asarray(v, dtype=np.float64)).to_scipy()
    elif wants == "dense":
        h = hessian(f, input_signature=[TensorSpec((n,))])
        extra["hess"] = lambda v, *args: h(np.asarray(v, dtype=np.float64))
    return scipy.optimize.minimize(value_and_grad, x, method=method, jac=True, **extra,
                                   **kwargs)


class IVPFunctions(NamedTuple):
    """What :func:`solve_ivp_jac` returns: ``fun(t, y)``, ``jac(t, y)`` (a dense array, or
    a ``scipy.sparse`` matrix when sparse) and ``jac_sparsity`` (a ``scipy.sparse`` matrix
    of the structural non-zeros)."""

    fun: Callable
    jac: Callable
    jac_sparsity: object


def solve_ivp_jac(f: Callable, y0, sparse: bool | None = None) -> IVPFunctions:
    """The compiled right-hand side ``f(t, y)`` of ``y' = f(t, y)`` (``f`` written with
    ``st`` ops, ``t`` a scalar tensor, ``y`` a 1-D tensor shaped like ``y0``), its Jacobian
    in ``y`` and that Jacobian's sparsity, for ``scipy.integrate.solve_ivp(fun, span, y0,
    method="BDF", jac=jac)``. ``sparse``: the Jacobian as a ``scipy.sparse`` matrix (default:
    from :data:`SPARSE_FROM` equations on, when at most a tenth of it is non-zero).

    >>> import symtape as st
    >>> from scipy.integrate import solve_ivp
    >>> fun, jac, pattern = st.scipy.solve_ivp_jac(lambda t, y: -50.0 * (y - st.cos(t)),
    ...                                            [0.0])
    >>> sol = solve_ivp(fun, (0, 1), [0.0], method="BDF", jac=jac, rtol=1e-8, atol=1e-10)
    >>> exact = (2500 * np.cos(1) + 50 * np.sin(1) - 2500 * np.exp(-50)) / 2501
    >>> bool(abs(sol.y[0, -1] - exact) < 1e-6), pattern.toarray().tolist()
    (True, [[1]])
    """
    what = "st.scipy.solve_ivp_jac"
    scipy = _scipy(what)
    y = _vector(y0, what)
    n = y.size
    sig = [TensorSpec(()), TensorSpec((n,))]

    def rhs(t, v):
        out = f(t, v)
        if tuple(getattr(out, "shape", ())) != (n,):
            raise InvalidArgumentError(f"{what}: f(t, y) must return a vector of {n} "
                                       f"elements, got shape {getattr(out, 'shape', None)}")
        return out

    (t_sym, y_sym) = placeholders(rhs, sig)
    with traced_code(what):
        out = rhs(t_sym, y_sym)
    f_c = compile(out, [t_sym, y_sym], name=f"{getattr(f, '__name__', 'f')}_rhs")
    j_sparse = jacobian(rhs, argnums=1, input_signature=sig, sparse=True)
    first = j_sparse(0.0, y)
    rows, cols = first.indices.T
    pattern = scipy.sparse.csr_array((np.ones(len(rows), dtype=np.int8), (rows, cols)),
                                     shape=(n, n))
    if sparse is None:
        sparse = n >= SPARSE_FROM and len(rows) <= n * n / 10
    if sparse:
        def jac(t, v):
            return j_sparse(float(t), np.asarray(v, dtype=np.float64)).to_scipy().tocsc()
    else:
        j_dense = jacobian(rhs, argnums=1, input_signature=sig)

        def jac(t, v):
            return j_dense(float(t), np.asarray(v, dtype=np.float64))

    def fun(t, v):
        return f_c(float(t), np.asarray(v, dtype=np.float64))

    return IVPFunctions(fun, jac, pattern)

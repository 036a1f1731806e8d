"""cholesky, triangular_solve, cholesky_solve and logdet: values against numpy/scipy,
derivatives against central finite differences (to order 2), batching, element formulas
against sympy, bad shapes, and the loop rule (unrolled while small)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import sympy

import symtape as st
from symtape.compile import planner as loopnest
from symtape.codegen import compile_plan


def _spd(n, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def _tri(n, batch=(), lower=True, seed=1):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=batch + (n, n)) + 3 * np.eye(n)
    return m  # the op reads one triangle; the other is noise it must ignore


def _sym(x):
    return (x + st.linalg.matrix_transpose(x)) * 0.5


# -- values -----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_cholesky_matches_numpy_and_reads_the_lower_triangle(batch):
    a = _spd(4, batch)
    noisy = a + np.triu(np.full((4, 4), 7.0), 1)  # the upper triangle is not read
    got = st.linalg.cholesky(st.constant(noisy)).numpy()
    np.testing.assert_allclose(got, np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lower, adjoint", [(True, False), (True, True), (False, False),
                                            (False, True)])
def test_triangular_solve_matches_scipy(lower, adjoint):
    m, b = _tri(5, (2,)), np.random.default_rng(3).normal(size=(2, 5, 3))
    got = st.linalg.triangular_solve(st.constant(m), st.constant(b), lower=lower,
                                     adjoint=adjoint).numpy()
    for k in range(2):
        want = scipy.linalg.solve_triangular(m[k], b[k], lower=lower, trans=1 if adjoint else 0)
        np.testing.assert_allclose(got[k], want, rtol=1e-12, atol=1e-12)


def test_triangular_solve_defaults_are_tensorflows():
    m, b = _tri(3), np.ones((3, 1))
    got = st.linalg.triangular_solve(m, b).numpy()
    np.testing.assert_allclose(got, scipy.linalg.solve_triangular(m, b, lower=True))


def test_cholesky_solve_and_logdet_match_scipy():
    a, b = _spd(4, (3,)), np.random.default_rng(4).normal(size=(3, 4, 2))
    chol = st.linalg.cholesky(a)
    got = st.linalg.cholesky_solve(chol, b).numpy()
    for k in range(3):
        want = scipy.linalg.cho_solve((np.linalg.cholesky(a[k]), True), b[k])
        np.testing.assert_allclose(got[k], want, rtol=1e-11)
    np.testing.assert_allclose(st.linalg.logdet(a).numpy(), np.linalg.slogdet(a)[1], rtol=1e-12)


def test_not_positive_definite_is_a_clear_error():
    with pytest.raises(st.errors.InvalidArgumentError, match="cholesky.*positive definite"):
        st.linalg.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]]))


def test_zero_pivot_gives_inf_as_tensorflow():
    got = st.linalg.triangular_solve(np.array([[0.0, 0.0], [1.0, 1.0]]), np.ones((2, 1)))
    assert np.isinf(got.numpy()[0, 0])


@pytest.mark.parametrize("fn, shapes, match", [
    (st.linalg.cholesky, [(3, 4)], "cholesky: input must be a .*square"),
    (st.linalg.cholesky, [(4,)], "cholesky: input must be"),
    (st.linalg.triangular_solve, [(3, 4), (3, 1)], "triangular_solve: matrix must be"),
    (st.linalg.triangular_solve, [(3, 3), (4, 1)], "triangular_solve: rhs of shape"),
    (st.linalg.triangular_solve, [(2, 3, 3), (3, 3, 1)], "triangular_solve: rhs of shape"),
])
def test_bad_shapes_name_the_argument(fn, shapes, match):
    with pytest.raises(st.errors.ShapeError, match=match):
        fn(*[np.ones(s) for s in shapes])


def test_integer_input_is_a_dtype_error():
    with pytest.raises(st.errors.DTypeError, match="cholesky"):
        st.linalg.cholesky(np.eye(2, dtype=np.int32))


# -- derivatives ------------------------------------------------------------------------------


def test_cholesky_derivatives_to_order_2():
    st.testing.check_grads(lambda x: st.linalg.cholesky(_sym(x)), [_spd(3)], order=2,
                           rtol=1e-5, atol=1e-6)


def test_cholesky_gradient_is_tensorflows_symmetric_one():
    """TF's gradient is symmetric (a perturbation of A is taken symmetric)."""
    a = st.Variable(_spd(3))
    w = np.random.default_rng(5).normal(size=(3, 3))
    with st.GradientTape() as t:
        y = st.reduce_sum(st.linalg.cholesky(a) * w)
    g = t.gradient(y, a).numpy()
    np.testing.assert_allclose(g, g.T, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("lower, adjoint", [(True, False), (False, True), (True, True)])
def test_triangular_solve_derivatives_to_order_2(lower, adjoint):
    m, b = _tri(3), np.random.default_rng(6).normal(size=(3, 2))
    st.testing.check_grads(lambda x, y: st.linalg.triangular_solve(x, y, lower, adjoint), [m, b],
                           order=2)


def test_cholesky_solve_and_logdet_derivatives():
    a, b = _spd(3), np.random.default_rng(7).normal(size=(3, 2))
    st.testing.check_grads(lambda x, y: st.linalg.cholesky_solve(st.linalg.cholesky(_sym(x)), y),
                           [a, b], order=2)
    st.testing.check_grads(lambda x: st.linalg.logdet(_sym(x)), [a], order=2)


def test_logdet_gradient_is_the_inverse():
    a = st.Variable(_spd(4))
    with st.GradientTape() as t:
        y = st.linalg.logdet(a)
    np.testing.assert_allclose(t.gradient(y, a).numpy(), np.linalg.inv(a.numpy()), rtol=1e-10)


# -- batching, element view, loop rule --------------------------------------------------------


def test_batched_jacobian_matches_per_matrix():
    a = _spd(3, (4,))
    jac = st.jacobian(lambda x: st.linalg.cholesky(_sym(x)))
    got = jac(a)
    for k in range(4):
        want = st.jacobian(lambda x: st.linalg.cholesky(_sym(x)))(a[k])
        np.testing.assert_allclose(np.asarray(got)[k, :, :, k], np.asarray(want), rtol=1e-10)


def test_two_by_two_cholesky_prints_its_formula():
    a, b, c = sympy.symbols("a b c", positive=True)
    x = [[st.symbol("a"), st.symbol("b")], [st.symbol("b"), st.symbol("c")]]
    low = st.linalg.cholesky(st.stack([st.stack(r) for r in x]))
    want = sympy.Matrix([[a, b], [b, c]]).cholesky(hermitian=False)
    for i in range(2):
        for j in range(2):
            got = sympy.sympify(str(low[i, j].formula()), locals={"a": a, "b": b, "c": c})
            assert sympy.simplify(got - want[i, j]) == 0


def test_triangular_solve_formula_matches_sympy():
    names = sympy.symbols("m0:9")
    rhs = sympy.symbols("r0:3")
    mat = sympy.Matrix(3, 3, names)
    low = st.reshape(st.stack([st.symbol(str(s)) for s in names]), (3, 3))
    r = st.reshape(st.stack([st.symbol(str(s)) for s in rhs]), (3, 1))
    for lower, adjoint in [(True, False), (False, True)]:
        t = mat.lower_triangular() if lower else mat.upper_triangular()
        want = (t.T if adjoint else t).LUsolve(sympy.Matrix(rhs))
        x = st.linalg.triangular_solve(low, r, lower=lower, adjoint=adjoint)
        for i in range(3):
            got = sympy.sympify(str(x[i, 0].formula()), locals=dict(zip(map(str, names + rhs),
                                                                        names + rhs)))
            assert sympy.simplify(got - want[i]) == 0


def test_compiled_small_cholesky_and_solve_match_eager():
    a, b = _spd(3), np.random.default_rng(8).normal(size=(3, 2))

    def f(x, y):
        return st.linalg.cholesky_solve(st.linalg.cholesky(x), y) + st.linalg.logdet(x)

    x, y = st.symbol("x", shape=(3, 3)), st.symbol("y", shape=(3, 2))
    fn = st.compile(f(x, y), [x, y])
    np.testing.assert_allclose(np.asarray(fn(a, b)), f(st.constant(a), st.constant(b)).numpy(),
                               rtol=1e-12)


def test_large_batches_plan_one_routine_block():
    """300 Cholesky factors and triangular solves of 5x5 matrices: one block each over the
    batch (a native routine per matrix), equal to numpy's factor and solve to rounding."""
    rng = np.random.default_rng(12)
    c = rng.standard_normal((300, 5, 5))
    spd = c @ np.swapaxes(c, -1, -2) + 5 * np.eye(5)
    rhs = rng.standard_normal((300, 5, 3))
    m, r = st.symbol("m", spd), st.symbol("r", rhs)
    outs = [st.linalg.cholesky(m), st.linalg.triangular_solve(m, r, lower=False)]
    plan = loopnest.plan_loops([o._node for o in outs], [m._node, r._node])
    assert [b.space for b in plan.blocks] == [(300,), (300,)]
    low, x = compile_plan(plan)(spd[None], rhs[None])
    np.testing.assert_allclose(low[0], np.linalg.cholesky(spd), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x[0], np.linalg.solve(np.triu(spd), rhs), rtol=1e-10,
                               atol=1e-12)

"""st.linalg decompositions (eigh, eigvalsh, svd, qr, lu, slogdet, lstsq, pinv, expm): values
against numpy and scipy, TensorFlow's return conventions, derivatives against central finite
differences (to order 2, order 3 for eigvalsh and slogdet), batching over leading axes,
degenerate spectra, bad input, and compiled code (expm compiles; the factorizations refuse
naming the op)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

import symtape as st
from symtape.base.errors import LoweringError, NonDifferentiableError, ShapeError, SymtapeError
from symtape.compile import planner as loopnest
from symtape.core.primitive import Unplannable
from symtape.testing import check_grads

RNG = np.random.default_rng(20261127)


def _normal(*shape):
    return RNG.normal(size=shape)


def _sym(a):
    return (a + np.swapaxes(a, -1, -2)) / 2


def _signed(v, ref):
    """Columns of ``v`` with the sign making ``ref``'s first row non-negative (a column of
    eigen/singular vectors is defined up to its sign)."""
    return v * st.sign(ref[..., :1, :])


def _flat(*ts):
    return st.concat([st.reshape(t, [-1]) for t in ts], 0)


# -- values and conventions -------------------------------------------------------------------


def test_eigh_values_conventions_and_batch():
    a = _sym(_normal(2, 3, 5, 5))
    e, v = st.linalg.eigh(a)
    we, wv = np.linalg.eigh(a)
    assert e.shape == (2, 3, 5) and v.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(e.numpy(), we, rtol=1e-13, atol=1e-13)
    assert np.all(np.diff(e.numpy(), axis=-1) >= 0)  # ascending
    vv = v.numpy()
    np.testing.assert_allclose(vv @ (e.numpy()[..., None] * np.swapaxes(vv, -1, -2)), a,
                               atol=1e-12)
    np.testing.assert_allclose(np.abs(vv), np.abs(wv), atol=1e-12)


def test_eigh_reads_the_lower_triangle_only():
    a = _sym(_normal(4, 4))
    junk = a + np.triu(_normal(4, 4), 1)
    np.testing.assert_allclose(st.linalg.eigvalsh(junk).numpy(), np.linalg.eigvalsh(a),
                               rtol=1e-13, atol=1e-13)


def test_svd_returns_s_u_v_as_tensorflow():
    for shape, full in [((5, 3), False), ((3, 5), False), ((2, 4, 3), True), ((4, 4), False)]:
        a = _normal(*shape)
        s, u, v = st.linalg.svd(a, full_matrices=full)
        wu, ws, wvh = np.linalg.svd(a, full_matrices=full)
        np.testing.assert_allclose(s.numpy(), ws, rtol=1e-13, atol=1e-13)
        assert u.shape == wu.shape and v.shape == np.swapaxes(wvh, -1, -2).shape
        k = ws.shape[-1]
        rebuilt = (u.numpy()[..., :, :k] * s.numpy()[..., None, :]) @ \
            np.swapaxes(v.numpy()[..., :, :k], -1, -2)  # v, not v^T
        np.testing.assert_allclose(rebuilt, a, atol=1e-12)
    only = st.linalg.svd(_normal(3, 2), compute_uv=False, full_matrices=True)
    assert isinstance(only, st.Tensor) and only.shape == (2,)


def test_qr_values_and_shapes():
    for shape, full in [((5, 3), False), ((5, 3), True), ((3, 5), False), ((2, 4, 4), False)]:
        a = _normal(*shape)
        q, r = st.linalg.qr(a, full_matrices=full)
        wq, wr = np.linalg.qr(a, mode="complete" if full else "reduced")
        assert q.shape == wq.shape and r.shape == wr.shape
        np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-12)
        np.testing.assert_allclose(np.abs(r.numpy()), np.abs(wr), atol=1e-12)
        np.testing.assert_allclose(np.tril(r.numpy(), -1), 0.0)


def test_lu_matches_lapack_and_tensorflow_permutation():
    a = _normal(3, 5, 5)
    lu, p = st.linalg.lu(a)
    assert p.dtype == np.int32 and p.shape == (3, 5)
    for i in range(3):
        want_lu, piv = sl.lu_factor(a[i])
        np.testing.assert_allclose(lu.numpy()[i], want_lu, rtol=1e-12, atol=1e-13)
        perm = np.arange(5)
        for k, j in enumerate(piv):  # LAPACK's swaps as a permutation
            perm[[k, j]] = perm[[j, k]]
        np.testing.assert_array_equal(p.numpy()[i], perm)
        low = np.tril(lu.numpy()[i], -1) + np.eye(5)
        np.testing.assert_allclose(a[i][p.numpy()[i]], low @ np.triu(lu.numpy()[i]), atol=1e-12)
    assert st.linalg.lu(np.eye(2, dtype=np.float32), output_idx_type="int64")[1].dtype == np.int64


def test_slogdet_values_sign_and_singular():
    a = _normal(4, 5, 5)
    sign, logabs = st.linalg.slogdet(a)
    ws, wl = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign.numpy(), ws)
    np.testing.assert_allclose(logabs.numpy(), wl, rtol=1e-13)
    sing = np.array([[1.0, 2.0], [2.0, 4.0]])
    s, la = st.linalg.slogdet(sing)
    assert float(s) == 0.0 and float(la) == -np.inf
    big = 1e3 * np.eye(200)  # det overflows; its logarithm does not
    assert float(st.linalg.slogdet(big)[1]) == pytest.approx(200 * np.log(1e3), rel=1e-14)


def test_lstsq_fast_and_robust():
    a, b = _normal(6, 3), _normal(6, 2)
    np.testing.assert_allclose(st.linalg.lstsq(a, b).numpy(), np.linalg.lstsq(a, b)[0],
                               rtol=1e-10)
    lam = 0.3
    want = np.linalg.solve(a.T @ a + lam * np.eye(3), a.T @ b)
    np.testing.assert_allclose(st.linalg.lstsq(a, b, l2_regularizer=lam).numpy(), want,
                               rtol=1e-12)
    w, c = _normal(2, 4), _normal(2, 1)  # underdetermined: the minimum-norm solution
    np.testing.assert_allclose(st.linalg.lstsq(w, c).numpy(), np.linalg.pinv(w) @ c,
                               rtol=1e-10)
    deficient = np.column_stack([a[:, 0], a[:, 0], a[:, 1]])  # rank 2: fast=False copes
    np.testing.assert_allclose(st.linalg.lstsq(deficient, b, fast=False).numpy(),
                               np.linalg.lstsq(deficient, b, rcond=None)[0], rtol=1e-9)
    batch = st.linalg.lstsq(_normal(2, 5, 3), _normal(2, 5, 1))
    assert batch.shape == (2, 3, 1)


def test_pinv_matches_numpy_including_rank_deficient():
    for a in (_normal(4, 3), _normal(3, 5), np.outer(_normal(4), _normal(3)), np.zeros((2, 2))):
        np.testing.assert_allclose(st.linalg.pinv(a).numpy(), np.linalg.pinv(a), atol=1e-12)
    a = np.diag([1.0, 1e-3])
    np.testing.assert_allclose(st.linalg.pinv(a, rcond=1e-2).numpy(), np.diag([1.0, 0.0]))


@pytest.mark.parametrize("scale", [0.0, 1e-3, 1.0, 7.0, 60.0])
def test_expm_matches_scipy(scale):
    a = scale * _normal(2, 4, 4)
    got = st.linalg.expm(a).numpy()
    for i in range(2):
        want = sl.expm(a[i])
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-13 * np.abs(want).max())


def test_expm_of_a_rotation_generator():
    t = 2.5
    got = st.linalg.expm([[0.0, -t], [t, 0.0]]).numpy()
    np.testing.assert_allclose(got, [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]],
                               atol=1e-14)


# -- derivatives ------------------------------------------------------------------------------


def _eigh_all(a):
    e, v = st.linalg.eigh(a)
    return _flat(e, _signed(v, v))


def _svd_all(a):
    s, u, v = st.linalg.svd(a)
    c = st.sign(u[..., :1, :])
    return _flat(s, u * c, v * c)


def _qr_all(a):
    return _flat(*st.linalg.qr(a))


CASES = {
    "eigvalsh": (st.linalg.eigvalsh, [(4, 4)], 3),
    "eigh": (_eigh_all, [(4, 4)], 2),
    "eigh_batch": (_eigh_all, [(2, 3, 3)], 2),
    "eigh_2x2": (_eigh_all, [(3, 2, 2)], 2),
    "eigvalsh_2x2": (st.linalg.eigvalsh, [(2, 2)], 3),
    "slogdet": (lambda a: st.linalg.slogdet(a)[1], [(4, 4)], 3),
    "lu": (lambda a: st.linalg.lu(a)[0], [(4, 4)], 2),
    "qr_square": (_qr_all, [(3, 3)], 2),
    "qr_tall": (_qr_all, [(5, 3)], 2),
    "qr_wide": (_qr_all, [(3, 5)], 2),
    "svd_tall": (_svd_all, [(5, 3)], 2),
    "svd_wide": (_svd_all, [(3, 4)], 2),
    "svd_values": (lambda a: st.linalg.svd(a, compute_uv=False), [(2, 4, 3)], 2),
    "pinv": (st.linalg.pinv, [(4, 3)], 2),
    "lstsq": (lambda a, b: st.linalg.lstsq(a, b), [(5, 3), (5, 2)], 2),
    "lstsq_under_l2": (lambda a, b: st.linalg.lstsq(a, b, l2_regularizer=0.2),
                       [(2, 3), (2, 1)], 2),
    "lstsq_robust": (lambda a, b: st.linalg.lstsq(a, b, fast=False), [(4, 3), (4, 1)], 2),
    "lstsq_l2_argument": (lambda a, b, lam: st.linalg.lstsq(a, b,
                                                            l2_regularizer=lam[0] ** 2),
                          [(4, 3), (4, 1), (1,)], 2),
    "expm": (st.linalg.expm, [(3, 3)], 2),
    "expm_squared": (lambda a: st.linalg.expm(4.0 * a), [(3, 3)], 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_match_central_differences(name):
    fn, shapes, order = CASES[name]
    check_grads(fn, [_normal(*s) for s in shapes], order=order)


def test_eigvalsh_gradient_is_the_eigenvector_outer_product():
    a = _sym(_normal(4, 4))
    x = st.Variable(a)
    with st.GradientTape() as tape:
        y = st.linalg.eigvalsh(x)[2]
    _, wv = np.linalg.eigh(a)
    outer = np.outer(wv[:, 2], wv[:, 2])
    want = np.tril(2 * outer) - np.diag(np.diag(outer))  # folded onto the lower triangle
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, atol=1e-13)


def test_slogdet_gradient_is_the_inverse_transpose():
    a = _normal(5, 5)
    x = st.Variable(a)
    with st.GradientTape() as tape:
        _, logabs = st.linalg.slogdet(x)
    np.testing.assert_allclose(tape.gradient(logabs, x).numpy(), np.linalg.inv(a).T,
                               rtol=1e-11, atol=1e-12)


def test_expm_derivative_is_the_frechet_derivative():
    a, d, w = _normal(4, 4), _normal(4, 4), _normal(4, 4)
    x = st.Variable(a)
    with st.GradientTape() as tape:
        y = st.reduce_sum(st.linalg.expm(x) * w)
    got = float(np.sum(tape.gradient(y, x).numpy() * d))
    want = float(np.sum(sl.expm_frechet(a, d, compute_expm=False) * w))
    assert got == pytest.approx(want, rel=1e-11)


def test_eigvalsh_hessian_batched_equals_row_by_row():
    a = _normal(3, 3)
    x = st.Variable(a)
    with st.GradientTape(persistent=True) as outer:
        with st.GradientTape() as inner:
            y = st.reduce_sum(st.linalg.eigvalsh(x) ** 3)
        g = inner.gradient(y, x)
    fast = outer.jacobian(g, x).numpy()
    slow = outer.jacobian(g, x, experimental_use_pfor=False).numpy()
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)


# -- degenerate spectra (the convention of docs/limits.md) -------------------------------------


def test_repeated_eigenvalues_give_finite_gradients():
    x = st.Variable(np.diag([1.0, 1.0, 2.0]))
    with st.GradientTape(persistent=True) as tape:
        e, v = st.linalg.eigh(x)
        total = st.reduce_sum(e)
        spread = st.reduce_sum(v ** 4)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), np.eye(3), atol=1e-15)
    g = tape.gradient(spread, x).numpy()
    assert np.all(np.isfinite(g))  # the repeated pair contributes 0, not inf/nan


def test_zero_singular_values_give_finite_pinv_gradients():
    a = np.outer([1.0, 2.0, 0.5], [1.0, -1.0])  # rank 1
    x = st.Variable(a)
    with st.GradientTape() as tape:
        y = st.reduce_sum(st.linalg.pinv(x))
    assert np.all(np.isfinite(tape.gradient(y, x).numpy()))


# -- refusals and bad input -------------------------------------------------------------------


@pytest.mark.parametrize("fn, arg, match", [
    (st.linalg.eigh, np.ones((2, 3)), "eigh: input must be a \\(batch of\\) square matrix"),
    (st.linalg.lu, np.ones((3,)), "lu: input must be"),
    (st.linalg.slogdet, np.ones((2, 3)), "lu: input must be"),
    (st.linalg.qr, np.ones((3,)), "qr: input must be a \\(batch of\\) matrix"),
    (st.linalg.expm, np.ones((2, 3)), "expm: input must be"),
    (st.linalg.pinv, np.ones((3,)), "pinv: a must be"),
])
def test_bad_shapes_name_the_op(fn, arg, match):
    with pytest.raises(ShapeError, match=match):
        fn(arg)


def test_bad_dtype_and_lstsq_shapes():
    with pytest.raises(SymtapeError, match="eigh"):
        st.linalg.eigh(np.eye(2, dtype=np.int32))
    with pytest.raises(ShapeError, match="lstsq: rhs of shape"):
        st.linalg.lstsq(np.ones((3, 2)), np.ones((2, 1)))


def test_nan_input_gives_nan_factors():
    a = np.stack([np.eye(2), np.full((2, 2), np.nan)])
    e = st.linalg.eigvalsh(a).numpy()
    np.testing.assert_array_equal(e[0], [1.0, 1.0])
    assert np.all(np.isnan(e[1]))
    assert np.all(np.isnan(st.linalg.svd(a, compute_uv=False).numpy()[1]))


def test_float32_stays_float32():
    a = _sym(_normal(3, 3)).astype(np.float32)
    e, v = st.linalg.eigh(a)
    assert e.dtype == np.float32 and v.dtype == np.float32
    np.testing.assert_allclose(e.numpy(), np.linalg.eigvalsh(a), rtol=1e-5)


def test_full_matrices_gradient_of_a_non_square_svd_is_refused():
    x = st.Variable(_normal(4, 2))
    with st.GradientTape() as tape:
        _, u, _ = st.linalg.svd(x, full_matrices=True)
        y = st.reduce_sum(u)
    with pytest.raises(NonDifferentiableError, match="full_matrices=True"):
        tape.gradient(y, x)


# -- compiled code ----------------------------------------------------------------------------


def test_expm_compiles_and_matches_scipy():
    a = st.symbol("a", shape=(3, 3))
    fn = st.compile(st.linalg.expm(a), [a])
    for scale in (0.1, 3.0, 40.0):
        x = scale * _normal(3, 3)
        np.testing.assert_allclose(np.asarray(fn(x)), sl.expm(x), rtol=1e-12,
                                   atol=1e-13 * np.abs(sl.expm(x)).max())


def test_compiling_a_full_svd_of_a_non_square_matrix_is_refused_naming_it():
    """Its completing columns are any basis of a complement: no loop form."""
    a = st.symbol("a", shape=(6, 4))
    with pytest.raises(LoweringError, match=r"st\.linalg\.svd"):
        st.compile(st.linalg.svd(a, full_matrices=True)[1], [a])


@pytest.mark.parametrize("shape", [(3, 3), (6, 4), (4, 6), (40, 30)])
def test_svd_compiles_to_one_sided_jacobi_signed_as_eager_vectors(shape):
    """Compiled ``svd`` is the native routine ``svd`` (one-sided Jacobi rotations of the
    columns, of ``a^T``'s when ``a`` is wide): singular values within rounding of LAPACK's
    (eager values) and singular vectors equal to eager ones, each pair signed so that
    ``v``'s first component of largest magnitude is positive -- random matrices, a zero
    one, one scaled by 1e200; nan for a matrix with a nan; for a rank-deficient one the
    values and ``u diag(s) v^T`` agree (the null vectors are any basis); the gradient of a
    function of the three matches eager's."""
    from symtape.codegen.routines import Routine
    m, n = shape
    rng = np.random.default_rng(m * 7 + n)
    a = rng.normal(size=(5, m, n))
    a[1] = 0.0
    a[2, 0, 0] = np.nan
    a[3] *= 1e200
    a[4, :, :2] = 0.0
    f = st.function(lambda x: st.linalg.svd(x))
    s, u, v = (np.asarray(t) for t in f(a))
    es, eu, ev = (t.numpy() for t in st.linalg.svd(st.constant(a)))
    assert any(isinstance(b.body, Routine) and b.body.kind == "svd"
               for b in f.get_concrete_function(a).plan.blocks)
    for b in (0, 1, 3):
        scale = max(np.abs(es[b]).max(), 1e-300)
        np.testing.assert_allclose(s[b], es[b], rtol=0, atol=1e-13 * scale)
        np.testing.assert_allclose(u[b], eu[b], atol=1e-10)
        np.testing.assert_allclose(v[b], ev[b], atol=1e-10)
    assert np.isnan(s[2]).all() and np.isnan(u[2]).all() and np.isnan(v[2]).all()
    np.testing.assert_allclose(s[4], es[4], atol=1e-13 * es[4].max())
    np.testing.assert_allclose((u[4] * s[4][None]) @ v[4].T, a[4], atol=1e-12)
    loss = lambda x: st.reduce_sum(st.linalg.svd(x, compute_uv=False) ** 3) + \
        st.reduce_sum(st.abs(st.linalg.svd(x)[2][:, 0]))
    _compiled_gradient_is_eagers(loss, rng.normal(size=(2, m, n)))


def test_small_lu_and_slogdet_compile_and_print_exactly():
    """Up to 4x4 the LU's element view is the eager elimination on atoms (selects pick the
    pivots per evaluation): compiled values equal eager ones, pivoting and singular cases
    included, and the formula is the elimination's."""
    a = st.symbol("a", shape=(4, 4))
    sign, logabs = st.linalg.slogdet(a)
    lu, p = st.linalg.lu(a)
    fn = st.compile([sign, logabs, lu, st.cast(p, st.float64)], [a])
    cases = [_normal(4, 4), np.array([[0.0, 1, 2, 3], [4, 5, 6, 7], [1, 1, 0, 2], [2, 0, 1, 1]]),
             np.array([[1.0, 2, 3, 4], [2, 4, 6, 8], [0, 1, 1, 0], [3, 0, 1, 1]])]
    for x in cases:
        got = fn(x)
        ws, wl = np.linalg.slogdet(x)
        assert float(got[0]) == ws
        assert float(got[1]) == pytest.approx(wl, rel=1e-12, abs=1e-12)
        eager_lu, eager_p = st.linalg.lu(x)
        np.testing.assert_allclose(got[2], eager_lu.numpy(), rtol=1e-14, atol=1e-15)
        np.testing.assert_array_equal(got[3], eager_p.numpy())
    b, c = st.symbol("b", real=True), st.symbol("c", real=True)
    m = st.stack([st.stack([b, c]), st.stack([c, b])])
    assert "log(Abs(" in str(st.linalg.slogdet(m)[1].formula())


@pytest.mark.parametrize("n", [5, 12, 40])
def test_lu_beyond_4x4_compiles_to_the_native_routine_bit_equal_to_eager(n):
    """Beyond 4x4 the LU is the native routine ``lu`` (``lu_factor``'s steps in loops): the
    packed factors, the permutation and ``slogdet`` equal eager values bit for bit over a
    batch with a singular matrix, a zero column, two equal rows, a term that overflows and
    a nan (all nan factors, as eager); ``slogdet``'s gradient is ``a^-T``."""
    from symtape.codegen.routines import Routine
    rng = np.random.default_rng(n)
    a = rng.normal(size=(6, n, n))
    a[1] = 0.0
    a[2, 0, 0] = np.nan
    a[3, :, 2] = 0.0
    a[4, 3] = a[4, 1]
    a[5, 0, 1], a[5, 1, 1] = 1e308, -1e308
    f = st.function(lambda x: st.linalg.lu(x)[0])
    np.testing.assert_array_equal(np.asarray(f(a)), st.linalg.lu(st.constant(a))[0].numpy())
    perm = st.function(lambda x: st.linalg.lu(x)[1])
    np.testing.assert_array_equal(np.asarray(perm(a))[[0, 1, 3, 4, 5]],
                                  st.linalg.lu(st.constant(a))[1].numpy()[[0, 1, 3, 4, 5]])
    assert any(isinstance(b.body, Routine) and b.body.kind == "lu"
               for b in f.get_concrete_function(a).plan.blocks)
    logdet = st.function(lambda x: st.linalg.slogdet(x))
    for got, want in zip(logdet(a), st.linalg.slogdet(st.constant(a))):
        np.testing.assert_array_equal(np.asarray(got), want.numpy())
    grad = st.grad(lambda x: st.linalg.slogdet(x)[1], input_signature=[st.TensorSpec((n, n))])
    x = rng.normal(size=(3, n, n))
    np.testing.assert_allclose(np.asarray(grad(x)), np.linalg.inv(x).transpose(0, 2, 1),
                               rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("shape", [(3, 3), (6, 4), (4, 6), (40, 30)])
@pytest.mark.parametrize("full", [False, True])
def test_qr_compiles_to_lapacks_householder_steps(shape, full):
    """Compiled ``qr`` is the native routine ``qr`` (LAPACK's unblocked Householder steps,
    its signs): within rounding of eager (LAPACK) values for full-rank matrices, a zero
    matrix and a zero column; nan factors for a matrix with a nan, as eager. For a
    rank-deficient matrix ``r`` agrees and ``q r`` is the matrix (``q``'s columns past the
    rank are rounding noise in either); its gradient matches eager's."""
    from symtape.codegen.routines import Routine
    m, n = shape
    rng = np.random.default_rng(m * 100 + n)
    a = rng.normal(size=(5, m, n))
    a[1] = 0.0
    a[2, 0, 0] = np.nan
    a[3, :, 1] = 0.0
    a[4, 2:] = a[4, :1]  # rank 2
    f = st.function(lambda x: st.linalg.qr(x, full_matrices=full))
    q, r = (np.asarray(t) for t in f(a))
    eq, er = (t.numpy() for t in st.linalg.qr(st.constant(a), full_matrices=full))
    assert any(isinstance(b.body, Routine) and b.body.kind == "qr"
               for b in f.get_concrete_function(a).plan.blocks)
    np.testing.assert_allclose(q[:4], eq[:4], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r, er, rtol=1e-12, atol=1e-13)
    assert np.isnan(q[2]).all() and np.isnan(r[2]).all()
    np.testing.assert_allclose(q[4] @ r[4], a[4], atol=1e-13)
    if full and m > n:
        return  # (no gradient: the completing columns are not unique)
    loss = lambda x: st.reduce_sum(st.linalg.qr(x, full_matrices=full)[0] * np.arange(
        q.shape[-1], dtype=float)) + st.reduce_sum(st.linalg.qr(x, full_matrices=full)[1] ** 2)
    _compiled_gradient_is_eagers(loss, rng.normal(size=(2, m, n)))


@pytest.mark.parametrize("n", [3, 5, 12, 40])
def test_eigh_compiles_to_jacobi_rotations_signed_as_eager_vectors(n):
    """Beyond 2x2 compiled ``eigh`` is the native routine ``eigh`` (cyclic Jacobi
    rotations): eigenvalues within rounding of LAPACK's (eager values) and eigenvectors
    equal to eager ones, both signed so that each vector's first component of largest
    magnitude is positive -- for random symmetric matrices, a diagonal one in descending
    order, a tiny one (1e-200); nan for a matrix with a nan; the gradient of a function of
    both matches eager's."""
    from symtape.codegen.routines import Routine
    rng = np.random.default_rng(n)
    a = _sym(rng.normal(size=(4, n, n)))
    a[1] = np.diag(np.arange(n, 0, -1.0))
    a[2, 1, 0] = np.nan
    a[3] *= 1e-200
    f = st.function(lambda x: st.linalg.eigh(x))
    e, v = (np.asarray(t) for t in f(a))
    ee, ev = (t.numpy() for t in st.linalg.eigh(st.constant(a)))
    assert any(isinstance(b.body, Routine) and b.body.kind == "eigh"
               for b in f.get_concrete_function(a).plan.blocks)
    for b in (0, 1, 3):
        scale = np.abs(ee[b]).max()
        np.testing.assert_allclose(e[b], ee[b], rtol=0, atol=1e-13 * scale)
        np.testing.assert_allclose(v[b], ev[b], atol=1e-11)
        lead = np.take_along_axis(v[b], np.argmax(np.abs(v[b]), axis=0)[None], axis=0)
        assert (lead > 0).all()
    assert np.isnan(e[2]).all() and np.isnan(v[2]).all()
    loss = lambda x: st.reduce_sum(st.linalg.eigvalsh(x) ** 2) + \
        st.reduce_sum(st.abs(st.linalg.eigh(x)[1][0]))
    _compiled_gradient_is_eagers(loss, _sym(rng.normal(size=(2, n, n))))


def _compiled_gradient_is_eagers(loss, x: np.ndarray) -> None:
    """``st.grad(loss)`` over the points ``x`` equals each point's eager tape gradient."""
    grad = st.grad(loss, input_signature=[st.TensorSpec(x.shape[1:])])
    got = np.asarray(grad(x))
    for k in range(len(x)):
        v = st.constant(x[k])
        with st.GradientTape() as t:
            t.watch(v)
            y = loss(v)
        np.testing.assert_allclose(got[k], t.gradient(y, v).numpy(), rtol=1e-8, atol=1e-9)


def test_compiling_factors_computed_eagerly_is_refused_not_baked_in():
    """Small eager values settle through opaque atoms; compiling them later finds no value
    to bake in (an error naming the factor's atoms, never the old numbers)."""
    x0 = _normal(3, 3)
    x = st.Variable(x0)
    y = st.linalg.eigvalsh(x) * np.array([0.0, 1.0, 2.0])
    with pytest.raises(SymtapeError, match=r"eigh\[.*computed eagerly.*pass the factors"):
        st.compile(y, [x])


def test_large_factorizations_are_unplannable_at_once():
    b = st.symbol("b", shape=(64, 40))
    with pytest.raises(Unplannable, match=r"st\.linalg\.svd with full_matrices=True of a "
                                          r"64x40"):
        loopnest.plan_loops([st.linalg.svd(b, full_matrices=True)[1]._node], [b._node])


def test_symbolic_formulas_print_the_factorization_in_tensor_notation():
    a = st.symbol("a", shape=(3, 3))  # beyond the 2x2 closed form
    assert "eigh(a)" in str(st.linalg.eigvalsh(a).formula())


def test_empty_matrices_and_batches():
    sign, logabs = st.linalg.slogdet(np.zeros((2, 0, 0)))
    np.testing.assert_array_equal(sign.numpy(), [1.0, 1.0])  # det of a 0x0 matrix is 1
    np.testing.assert_array_equal(logabs.numpy(), [0.0, 0.0])
    e, v = st.linalg.eigh(np.zeros((0, 3, 3)))
    assert e.shape == (0, 3) and v.shape == (0, 3, 3)
    s, u, w = st.linalg.svd(np.zeros((2, 3, 0)))
    assert s.shape == (2, 0) and u.shape == (2, 3, 0) and w.shape == (2, 0, 0)
    assert st.linalg.expm(np.zeros((0, 0))).shape == (0, 0)


def test_2x2_eigh_is_one_closed_form_eager_printed_and_compiled():
    """``e = m -+ sqrt(h**2 + b**2)`` and the eigenvectors at ``atan2(b, h)/2``: the eager
    value of one matrix, of a batch too large to settle element by element, and the
    compiled one are the same numbers."""
    a = _sym(_normal(600, 2, 2))
    e, v = st.linalg.eigh(a)
    we, wv = np.linalg.eigh(a)
    np.testing.assert_allclose(e.numpy(), we, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(np.abs(v.numpy()), np.abs(wv), atol=1e-13)
    s = st.symbol("s", shape=(2, 2))
    fn = st.compile(list(st.linalg.eigh(s)), [s])
    for i in (0, 1, 599):
        one_e, one_v = st.linalg.eigh(st.Variable(a[i]))
        got_e, got_v = fn(a[i])
        np.testing.assert_array_equal(one_e.numpy(), e.numpy()[i])
        np.testing.assert_array_equal(one_v.numpy(), v.numpy()[i])
        np.testing.assert_allclose(got_e, e.numpy()[i], rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(got_v, v.numpy()[i], rtol=1e-15, atol=1e-15)
    x, y, z = (st.symbol(n, real=True) for n in "xyz")
    low = st.linalg.eigvalsh(st.stack([st.stack([x, y]), st.stack([y, z])]))[0]
    assert str(low.formula()) == "x/2 + z/2 - sqrt(y**2 + (x/2 - z/2)**2)"

"""det, inv and solve beyond the closed forms: eager values from LAPACK through numpy against
numpy itself, over batches, at singular matrices and with bad shapes."""

import numpy as np
import pytest

import symtape as st
from symtape import errors


def _well(shape, seed=0):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    return rng.standard_normal(shape) + n * np.eye(n)


@pytest.mark.parametrize("n", [4, 7, 60])
def test_eager_values_match_numpy(n):
    a = _well((n, n), n)
    b = np.random.default_rng(n + 1).standard_normal((n, 3))
    np.testing.assert_allclose(st.linalg.det(st.constant(a)).numpy(), np.linalg.det(a),
                               rtol=1e-12)
    np.testing.assert_allclose(st.linalg.inv(st.constant(a)).numpy(), np.linalg.inv(a),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(st.linalg.solve(st.constant(a), st.constant(b)).numpy(),
                               np.linalg.solve(a, b), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        st.linalg.solve(st.constant(a), st.constant(b), adjoint=True).numpy(),
        np.linalg.solve(a.T, b), rtol=1e-12, atol=1e-14)


def test_eager_batches_over_leading_dims():
    a = _well((2, 3, 5, 5), 3)
    b = np.random.default_rng(4).standard_normal((2, 3, 5, 2))
    np.testing.assert_allclose(st.linalg.det(st.constant(a)).numpy(), np.linalg.det(a),
                               rtol=1e-12)
    np.testing.assert_allclose(st.linalg.inv(st.constant(a)).numpy(), np.linalg.inv(a),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(st.linalg.solve(st.constant(a), st.constant(b)).numpy(),
                               np.linalg.solve(a, b), rtol=1e-12, atol=1e-14)
    assert st.linalg.inv(st.constant(np.zeros((0, 4, 4)))).shape == (0, 4, 4)


def test_small_matrices_keep_their_formulas():
    a, b, c, d = (st.symbol(s) for s in "abcd")
    m = st.stack([st.stack([a, b]), st.stack([c, d])])
    assert str(st.linalg.inv(m)[0, 0].formula()) == "d/(a*d - b*c)"


def test_singular_matrices_give_the_eliminations_values_eager_and_compiled():
    # documented: never an exception; at an exact zero pivot eager values are the
    # elimination's, the same as the compiled code's (inv and solve inf/nan)
    s = np.ones((5, 5))
    f = st.function(st.linalg.det, input_signature=[st.TensorSpec((5, 5))])
    np.testing.assert_equal(st.linalg.det(st.constant(s)).numpy(), np.asarray(f(s)))
    last = np.diag([1.0, 2.0, 3.0, 4.0, 0.0])  # the zero pivot comes last: det is exactly 0
    assert st.linalg.det(st.constant(last)).numpy() == 0.0
    assert not np.isfinite(st.linalg.inv(st.constant(s)).numpy()).all()
    x = st.linalg.solve(st.constant(s), st.constant(np.ones((5, 1)))).numpy()
    assert not np.isfinite(x).all()
    # one singular matrix in a batch leaves the others exact
    batch = np.stack([_well((5, 5)), s])
    out = st.linalg.inv(st.constant(batch)).numpy()
    np.testing.assert_allclose(out[0], np.linalg.inv(batch[0]), rtol=1e-12, atol=1e-14)
    assert not np.isfinite(out[1]).all()


@pytest.mark.parametrize("call, match", [
    (lambda: st.linalg.inv(st.zeros([4, 5])), "square"),
    (lambda: st.linalg.det(st.zeros([6])), "square"),
    (lambda: st.linalg.solve(st.eye(5), st.zeros([4, 1])), "rhs"),
    (lambda: st.linalg.solve(st.zeros([5, 4]), st.zeros([5, 1])), "square"),
])
def test_bad_shapes_name_the_argument(call, match):
    with pytest.raises(errors.ShapeError, match=match):
        call()


def test_eager_gradient_of_solve_matches_central_differences():
    a0 = _well((5, 5), 9)
    b = np.random.default_rng(10).standard_normal((5, 1))
    a = st.Variable(a0)
    with st.GradientTape() as tape:
        y = st.reduce_sum(st.linalg.solve(a, st.constant(b)) ** 2)
    g = tape.gradient(y, a).numpy()

    def f(m):
        return float(np.sum(np.linalg.solve(m, b) ** 2))

    h = 1e-6
    fd = np.zeros_like(a0)
    for i in range(5):
        for j in range(5):
            e = np.zeros_like(a0)
            e[i, j] = h
            fd[i, j] = (f(a0 + e) - f(a0 - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_compiled_solve_over_a_batch_matches_numpy():
    a = _well((4, 6, 6), 11)
    b = np.random.default_rng(12).standard_normal((4, 6, 2))
    f = st.function(st.linalg.solve,
                    input_signature=[st.TensorSpec((None, 6, 6)),
                                     st.TensorSpec((None, 6, 2))])
    np.testing.assert_allclose(np.asarray(f(a, b)), np.linalg.solve(a, b), rtol=1e-10,
                               atol=1e-12)


def test_compiled_gradient_of_solve_wrt_the_matrix_matches_central_differences():
    a0 = _well((5, 5), 13)
    b = np.random.default_rng(14).standard_normal((5, 1))

    def loss(m):
        return st.reduce_sum(st.sin(st.linalg.solve(m, st.constant(b))))

    g = np.asarray(st.grad(loss, input_signature=[st.TensorSpec((5, 5))])(a0))

    def f(m):
        return float(np.sum(np.sin(np.linalg.solve(m, b))))

    h = 1e-6
    fd = np.zeros_like(a0)
    for i in range(5):
        for j in range(5):
            e = np.zeros_like(a0)
            e[i, j] = h
            fd[i, j] = (f(a0 + e) - f(a0 - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_c_export_of_a_solve_compiles_and_agrees(tmp_path):
    import ctypes
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    am, bm = st.symbol("a", shape=(5, 5)), st.symbol("b", shape=(5, 1))
    f = st.compile(st.linalg.solve(am, bm), [am, bm], name="solve5")
    a = _well((3, 5, 5), 15)
    b = np.random.default_rng(16).standard_normal((3, 5, 1))
    np.testing.assert_allclose(np.asarray(f(a, b)), np.linalg.solve(a, b), rtol=1e-12,
                               atol=1e-14)
    _, source = st.export_c({"solve5": f}, tmp_path / "solve5.c")
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "solve5.so"
    done = subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                           "-shared", "-fPIC", str(source), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = np.empty((3, 5, 1))
    ctypes.CDLL(str(lib)).solve5(ctypes.c_int64(3), *[ctypes.c_void_p(x.ctypes.data)
                                                      for x in (a, b, out)])
    np.testing.assert_allclose(out, np.linalg.solve(a, b), rtol=1e-12, atol=1e-14)

"""TensorFlow's everyday functions (st.math, st.nn, st.linalg) against numpy and mpmath: ordinary
and edge points (0, negatives, inf, nan, empty tensors), gradients against hand formulas and
finite differences, TensorFlow's conventions, compiled values equal to eager ones, and errors
that name the argument."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import symtape as st
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError

INF, NAN = np.inf, np.nan
EDGE = np.array([0.0, -0.0, 1.5, -2.5, 30.0, -30.0, INF, -INF, NAN])


def grads(fn, *xs):
    """The gradients of ``sum(fn(*xs))`` in every argument."""
    xs = [st.constant(np.asarray(x, dtype=np.float64)) for x in xs]
    with st.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = st.reduce_sum(fn(*xs))
    return [None if g is None else np.asarray(g.numpy()) for g in tape.gradient(y, xs)]


def fd(fn, x, h=1e-6):
    """Central differences of the elementwise ``fn`` (numpy) at ``x``."""
    return (fn(x + h) - fn(x - h)) / (2 * h)


def compiled_equals_eager(fn, *xs, atol=0.0):
    """``fn``'s eager value, checked against ``st.function(fn)``'s (float arguments: compiled
    functions take floats; ``atol``: erf's compiled and eager values differ in the last bit)."""
    eager = np.asarray(fn(*[st.constant(x) for x in xs]).numpy())
    compiled = np.asarray(st.function(fn)(*[st.constant(x) for x in xs]).numpy())
    if atol:
        np.testing.assert_allclose(compiled, eager, rtol=0, atol=atol)
    else:
        np.testing.assert_array_equal(compiled, eager)
    return eager


# ---- st.math: sums, reciprocals ---------------------------------------------------------------


def test_add_n_sums_lists_and_passes_one_tensor_through():
    a, b, c = (np.arange(6.0).reshape(2, 3) * k for k in (1.0, -2.0, 0.5))
    np.testing.assert_array_equal(st.add_n([a, b, c]).numpy(), a + b + c)
    np.testing.assert_array_equal(st.add_n([a]).numpy(), a)
    assert st.add_n([np.zeros((0, 2)), np.zeros((0, 2))]).shape == (0, 2)
    ga, gb = grads(lambda x, y: st.add_n([x, y, x]), a, b)
    np.testing.assert_array_equal(ga, 2 * np.ones_like(a))
    np.testing.assert_array_equal(gb, np.ones_like(b))
    compiled_equals_eager(lambda x, y: st.add_n([x, y]), a, b)


def test_add_n_refuses_empty_lists_and_mismatches_by_name():
    with pytest.raises(InvalidArgumentError, match="inputs"):
        st.add_n([])
    with pytest.raises(ShapeError, match=r"inputs\[1\]"):
        st.add_n([np.zeros(2), np.zeros(3)])  # TF does not broadcast here
    with pytest.raises(DTypeError, match=r"inputs\[1\]"):
        st.add_n([np.zeros(2), np.zeros(2, np.int32)])


def test_reciprocal_values_and_gradient():
    x = np.array([2.0, -4.0, 0.0, -0.0, INF, NAN])
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(compiled_equals_eager(st.math.reciprocal, x), 1 / x)
    (g,) = grads(st.math.reciprocal, [2.0, -0.5])
    np.testing.assert_allclose(g, [-0.25, -4.0])
    with pytest.raises(DTypeError, match="x"):
        st.math.reciprocal(np.array([1, 2]))


# ---- erfc -----------------------------------------------------------------------------------


def test_erfc_against_mpmath_in_its_tail_too():
    """erfc is its own head: relative precision holds where it is small (1 - erf lost it)."""
    x = np.concatenate([np.linspace(-6, 27, 331), [0.0, -0.0]])
    ref = np.array([float(mpmath.erfc(v)) for v in x])
    eager = st.math.erfc(x).numpy()
    np.testing.assert_allclose(eager, ref, rtol=4.5e-16, atol=1e-321)  # within 2 ulp
    compiled = st.function(st.math.erfc)(st.constant(x)).numpy()
    np.testing.assert_allclose(compiled, ref, rtol=1.2e-15, atol=1e-321)  # 5 ulp


def test_erfc_at_the_ends():
    x = np.array([27.3, 30.0, INF, -INF, -30.0, NAN])
    got = st.math.erfc(x).numpy()
    assert list(got[:5]) == [0.0, 0.0, 0.0, 2.0, 2.0] and np.isnan(got[5])
    np.testing.assert_array_equal(st.function(st.math.erfc)(st.constant(x)).numpy(), got)


def test_erfc_gradient_is_minus_the_gauss_density():
    x = np.array([-3.0, -0.5, 0.0, 1.0, 7.0])
    (g,) = grads(st.math.erfc, x)
    np.testing.assert_allclose(g, -2 / math.sqrt(math.pi) * np.exp(-x * x), rtol=1e-14)


# ---- xlogy and multiply_no_nan: TF's conventions at zero ------------------------------------


def test_xlogy_is_zero_where_x_is_zero_whatever_y():
    x = np.array([0.0, 0.0, 0.0, 0.0, -0.0, 2.0, 2.0, 2.0, 3.0])
    y = np.array([0.0, NAN, INF, -1.0, 5.0, 0.0, NAN, 1.0, 2.0])
    got = compiled_equals_eager(st.math.xlogy, x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.where(x == 0, 0.0, x * np.log(y))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(st.math.xlogy(np.array([[0.0], [2.0]]), y[:2]).numpy(),
                                  [[0.0, 0.0], [-INF, NAN]])  # broadcasting
    assert st.math.xlogy(np.zeros((0, 2)), np.ones(2)).shape == (0, 2)


def test_xlogy_gradients_follow_tf_rules():
    x = np.array([0.0, 0.0, 0.0, 2.0, -1.5])
    y = np.array([0.0, NAN, 3.0, 3.0, 0.5])
    gx, gy = grads(st.math.xlogy, x, y)
    # TF: d/dx = xlogy(x != 0, y), d/dy = xdivy(x, y): both 0 where x == 0, even at y = 0 or nan
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0, np.log(3.0), np.log(0.5)])
    np.testing.assert_array_equal(gy, [0.0, 0.0, 0.0, 2.0 / 3.0, -3.0])
    (gx2,) = grads(lambda a: st.math.xlogy(a, st.constant(2.5)), [1.2])
    np.testing.assert_allclose(gx2, fd(lambda a: a * np.log(2.5), np.array([1.2])), rtol=1e-8)


def test_multiply_no_nan_zero_where_y_is_zero_even_for_inf_and_nan():
    x = np.array([INF, -INF, NAN, 2.0, INF, 3.0])
    y = np.array([0.0, -0.0, 0.0, 0.0, 2.0, NAN])
    got = compiled_equals_eager(st.math.multiply_no_nan, x, y)
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 0.0, INF, NAN])
    assert st.math.multiply_no_nan(np.zeros(0), np.zeros(0)).shape == (0,)
    np.testing.assert_array_equal(  # broadcasting, as multiply
        st.math.multiply_no_nan(np.array([[NAN], [2.0]]), np.array([0.0, 3.0])).numpy(),
        [[0.0, NAN], [0.0, 6.0]])


def test_multiply_no_nan_gradients_follow_tf_rules():
    x = np.array([INF, 2.0, 2.0, -1.0])
    y = np.array([0.0, 0.0, 3.0, 0.5])
    gx, gy = grads(st.math.multiply_no_nan, x, y)
    # TF: d/dx = mul_no_nan(g, y) (0 where y == 0); d/dy = mul_no_nan(x, g), the product's x
    np.testing.assert_array_equal(gx, [0.0, 0.0, 3.0, 0.5])
    np.testing.assert_array_equal(gy, [INF, 2.0, 2.0, -1.0])


def test_safe_products_refuse_integers_by_name():
    with pytest.raises(DTypeError, match="y"):
        st.math.xlogy(np.array([1.0]), np.array([1]))
    with pytest.raises(DTypeError, match="x"):
        st.math.multiply_no_nan(np.array([1]), np.array([1.0]))


# ---- log_sigmoid --------------------------------------------------------------------------


def test_log_sigmoid_is_stable_at_both_ends():
    x = np.array([0.0, 1.0, -1.0, 40.0, -800.0, 800.0, INF, -INF, NAN])
    got = compiled_equals_eager(st.math.log_sigmoid, x)
    ref = [-float(mpmath.log1p(mpmath.exp(-mpmath.mpf(v)))) if np.isfinite(v) else None
           for v in x]
    np.testing.assert_allclose(got[:6], ref[:6], rtol=1e-15)
    assert got[6] == 0.0 and got[7] == -INF and np.isnan(got[8])
    (g,) = grads(st.math.log_sigmoid, [-800.0, 0.0, 3.0])
    np.testing.assert_allclose(g, [1.0, 0.5, 1 / (1 + np.exp(3.0))], rtol=1e-15)  # sigmoid(-x)


# ---- float tests and bool reductions -------------------------------------------------------


def test_float_tests_match_numpy_and_have_no_gradient():
    for fn, ref in ((st.math.is_finite, np.isfinite), (st.math.is_nan, np.isnan),
                    (st.math.is_inf, np.isinf)):
        got = compiled_equals_eager(fn, EDGE)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, ref(EDGE))
        big = np.tile(EDGE, 120)  # past the loop-nest threshold
        np.testing.assert_array_equal(st.function(fn)(st.constant(big)).numpy(), ref(big))
        assert fn(np.zeros((0, 3))).shape == (0, 3)
        x = st.constant(EDGE)
        with st.GradientTape() as tape:
            tape.watch(x)
            y = st.cast(fn(x), "float64")
        assert tape.gradient(y, x) is None
        with pytest.raises(DTypeError, match="x"):
            fn(np.array([1, 2]))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 1]])
def test_bool_reductions_match_numpy(axis, keepdims):
    b = np.random.default_rng(3).random((4, 5)) < 0.5
    b[1] = True
    b[:, 2] = False
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    for fn, ref in ((st.math.reduce_all, np.all), (st.math.reduce_any, np.any)):
        got = fn(b, axis=axis, keepdims=keepdims).numpy()
        np.testing.assert_array_equal(got, ref(b, axis=np_axis, keepdims=keepdims))


def test_bool_reductions_of_nothing_and_compiled():
    empty = np.zeros((0, 3), bool)
    np.testing.assert_array_equal(st.math.reduce_all(empty, axis=0).numpy(), [True] * 3)
    np.testing.assert_array_equal(st.math.reduce_any(empty, axis=0).numpy(), [False] * 3)
    assert bool(st.math.reduce_all(empty)) and not bool(st.math.reduce_any(empty))
    b = np.array([[True, False], [True, True]])
    compiled_equals_eager(lambda t: st.math.reduce_all(t > 0, axis=1), b * 1.0)
    with pytest.raises(DTypeError, match="input_tensor"):
        st.math.reduce_any(np.array([1.0, 0.0]))


# ---- one_hot and sequence_mask -------------------------------------------------------------


def test_one_hot_matches_a_numpy_reference():
    i = np.array([[0, 2], [-1, 3]])
    for axis in (-1, 0, 1, 2):
        got = st.one_hot(i, 3, on_value=5.0, off_value=-1.0, axis=axis).numpy()
        ref = np.where(np.arange(3) == i[..., None], 5.0, -1.0)  # 3 and -1: no hit
        np.testing.assert_array_equal(got, np.moveaxis(ref, -1, axis))
    assert st.one_hot(i, 3).dtype == np.float64  # symtape's default float
    assert st.one_hot(i, 3, dtype="int32").dtype == np.int32
    assert st.one_hot([1], 2, on_value=np.float32(2)).dtype == np.float32
    assert st.one_hot(np.zeros(0, np.int64), 4).shape == (0, 4)
    assert st.one_hot([1, 0], 0).shape == (2, 0)
    compiled_equals_eager(lambda t: st.one_hot(st.cast(t, "int32"), 4), np.array([3.0, 0, 7]))


def test_one_hot_passes_no_gradient_to_its_values():
    on = st.constant(2.0)
    with st.GradientTape() as tape:
        tape.watch(on)
        y = st.reduce_sum(st.one_hot([0, 1], 2, on_value=on, off_value=st.constant(0.0)))
    g = tape.gradient(y, on)
    assert g is None or float(g) == 0.0  # TF's OneHot has no gradient


def test_one_hot_errors_name_the_argument():
    with pytest.raises(DTypeError, match="indices"):
        st.one_hot([0.0, 1.0], 2)
    with pytest.raises(InvalidArgumentError, match="depth"):
        st.one_hot([0], -1)
    with pytest.raises(InvalidArgumentError, match="axis"):
        st.one_hot([0], 2, axis=3)
    with pytest.raises(DTypeError, match="on_value"):
        st.one_hot([0], 2, on_value=st.constant([1.0, 2.0]))


def test_sequence_mask_matches_numpy():
    n = np.array([[0, 2], [5, 1]])
    got = st.sequence_mask(n, 4).numpy()
    np.testing.assert_array_equal(got, np.arange(4) < n[..., None])
    np.testing.assert_array_equal(st.sequence_mask([1, 3]).numpy(),
                                  [[True, False, False], [True, True, True]])
    f = st.sequence_mask([2, 0], 3, dtype="float64").numpy()
    np.testing.assert_array_equal(f, [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert st.sequence_mask(np.zeros(0, np.int32)).shape == (0, 0)
    compiled_equals_eager(lambda t: st.sequence_mask(st.cast(t, "int64"), 5),
                          np.array([1.0, 4.0]))
    traced = st.function(lambda t: st.sequence_mask(st.cast(t, "int32")))
    with pytest.raises(InvalidArgumentError, match="traced"):  # maxlen needs lengths' values
        traced(st.constant([1.0, 3.0]))
    with pytest.raises(DTypeError, match="lengths"):
        st.sequence_mask([1.5])
    with pytest.raises(InvalidArgumentError, match="maxlen"):
        st.sequence_mask([1], -2)


# ---- l2_normalize ---------------------------------------------------------------------------


def test_l2_normalize_values_epsilon_and_gradient():
    x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [1e-8, 0.0, 0.0]])
    got = compiled_equals_eager(lambda t: st.math.l2_normalize(t, axis=1), x)
    ref = x / np.sqrt(np.maximum(np.sum(x * x, axis=1, keepdims=True), 1e-12))
    np.testing.assert_allclose(got, ref, rtol=1e-15)
    assert not np.isnan(got).any()  # epsilon keeps the zero row finite
    w = np.array([[0.3, -1.0, 2.0]])
    y0 = np.array([[1.0, 2.0, -2.0]])
    (g,) = grads(lambda t: st.math.l2_normalize(t, axis=1) * w, y0)
    r = np.linalg.norm(y0)
    np.testing.assert_allclose(g, w / r - y0 * np.sum(w * y0) / r ** 3, rtol=1e-14)
    assert st.nn.l2_normalize is st.math.l2_normalize


# ---- st.nn: silu, gelu, softsign, bias_add ----------------------------------------------------


def _sigmoid(x):
    return np.array([float(1 / (1 + mpmath.exp(-mpmath.mpf(v)))) for v in np.ravel(x)]).reshape(
        np.shape(x))


def test_silu_and_swish_values_and_gradients():
    assert st.nn.swish is st.nn.silu
    x = np.array([0.0, 1.0, -1.0, 20.0, -20.0, -800.0, INF, NAN])
    got = compiled_equals_eager(st.nn.silu, x)
    np.testing.assert_allclose(got[:6], x[:6] * _sigmoid(x[:6]), rtol=1e-15)
    assert got[6] == INF and np.isnan(got[7])
    xs = np.array([-2.0, 0.0, 0.7])
    (g,) = grads(st.nn.silu, xs)
    s = 1 / (1 + np.exp(-xs))
    np.testing.assert_allclose(g, s * (1 + xs * (1 - s)), rtol=1e-14)  # TF's swish gradient
    gx, gb = grads(lambda t, b: st.nn.silu(t, beta=b), xs, 1.5)
    sb = 1 / (1 + np.exp(-1.5 * xs))
    np.testing.assert_allclose(gx, sb * (1 + 1.5 * xs * (1 - sb)), rtol=1e-14)
    np.testing.assert_allclose(gb, np.sum(xs ** 2 * sb * (1 - sb)), rtol=1e-14)


def test_gelu_both_modes_against_references():
    x = np.array([0.0, 0.5, -0.5, 3.0, -3.0, 12.0, -12.0])
    exact = compiled_equals_eager(st.nn.gelu, x, atol=1e-15)
    ref = [float(mpmath.mpf(v) / 2 * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2))) for v in x]
    np.testing.assert_allclose(exact, ref, rtol=1e-14, atol=1e-16)  # TF's 1 + erf: absolute
    approx = compiled_equals_eager(lambda t: st.nn.gelu(t, approximate=True), x)
    np.testing.assert_allclose(approx, 0.5 * x * (1 + np.tanh(
        0.7978845608028654 * (x + 0.044715 * x ** 3))), rtol=1e-15)
    assert np.max(np.abs(approx - exact)) < 1e-3 and not np.array_equal(approx, exact)
    xs = np.array([-1.3, 0.0, 0.4])
    (g,) = grads(st.nn.gelu, xs)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(xs / math.sqrt(2)))
    np.testing.assert_allclose(g, cdf + xs * np.exp(-xs * xs / 2) / math.sqrt(2 * math.pi),
                               rtol=1e-14)
    (ga,) = grads(lambda t: st.nn.gelu(t, approximate=True), xs)
    ref_a = fd(lambda v: 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3))),
               xs)
    np.testing.assert_allclose(ga, ref_a, rtol=1e-8)
    assert st.nn.gelu(np.zeros((0, 2))).shape == (0, 2)


def test_softsign_values_and_gradient():
    x = np.array([0.0, -3.0, 1.0, 1e300, INF, NAN])
    got = compiled_equals_eager(st.nn.softsign, x)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, x / (1 + np.abs(x)))  # TF's form: nan at inf
    (g,) = grads(st.nn.softsign, [0.0, -3.0, 2.0])
    np.testing.assert_allclose(g, [1.0, 1 / 16, 1 / 9], rtol=1e-15)


def test_activations_refuse_integers_by_name():
    for fn in (st.nn.silu, st.nn.gelu, st.nn.softsign):
        with pytest.raises(DTypeError, match="features"):
            fn(np.array([1, 2]))


def test_bias_add_channels_last_and_first():
    v = np.arange(24.0).reshape(2, 3, 4)
    b3, b4 = np.array([1.0, -2.0, 0.5]), np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(st.nn.bias_add(v, b4).numpy(), v + b4)
    np.testing.assert_array_equal(st.nn.bias_add(v, b3, data_format="NCW").numpy(),
                                  v + b3[:, None])
    gv, gb = grads(lambda a, c: st.nn.bias_add(a, c, data_format="NCHW"), v[..., None], b3)
    np.testing.assert_array_equal(gv, np.ones((2, 3, 4, 1)))
    np.testing.assert_array_equal(gb, [8.0, 8.0, 8.0])
    compiled_equals_eager(st.nn.bias_add, v, b4)
    assert st.nn.bias_add(np.zeros((0, 4)), b4).shape == (0, 4)


def test_bias_add_errors_name_the_argument():
    with pytest.raises(ShapeError, match="bias"):
        st.nn.bias_add(np.zeros((2, 3)), np.zeros(4))
    with pytest.raises(ShapeError, match="bias"):
        st.nn.bias_add(np.zeros((2, 3)), np.zeros((1, 3)))
    with pytest.raises(ShapeError, match="value"):
        st.nn.bias_add(np.zeros(3), np.zeros(3))
    with pytest.raises(InvalidArgumentError, match="data_format"):
        st.nn.bias_add(np.zeros((2, 3)), np.zeros(3), data_format="HWCN")


# ---- st.linalg: matvec, cross, band_part ------------------------------------------------------


def test_matvec_matches_numpy_with_batches_and_transposes():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4,))
    np.testing.assert_allclose(st.linalg.matvec(a, b).numpy(), a @ b, rtol=1e-14)
    bt = rng.normal(size=(2, 3))
    np.testing.assert_allclose(st.linalg.matvec(a, bt, transpose_a=True).numpy(),
                               np.einsum("kij,ki->kj", a, bt), rtol=1e-14)
    np.testing.assert_allclose(st.linalg.matvec(a, bt, adjoint_a=True).numpy(),
                               np.einsum("kij,ki->kj", a, bt), rtol=1e-14)
    ga, gb = grads(st.linalg.matvec, a[0], b)
    np.testing.assert_allclose(ga, np.ones((3, 1)) * b[None, :], rtol=1e-15)
    np.testing.assert_allclose(gb, a[0].sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(compiled_equals_eager(st.linalg.matvec, a, b), a @ b, rtol=1e-14)
    assert st.linalg.matvec(np.zeros((0, 3)), np.zeros(3)).shape == (0,)


def test_matvec_errors_name_the_argument():
    with pytest.raises(ShapeError, match="a must"):
        st.linalg.matvec(np.zeros(3), np.zeros(3))
    with pytest.raises(ShapeError, match="b "):
        st.linalg.matvec(np.zeros((2, 3)), np.zeros(2))


def test_cross_matches_numpy_and_its_gradient_is_the_other_factor():
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    got = compiled_equals_eager(st.linalg.cross, a, b)
    np.testing.assert_allclose(got, np.cross(a, b), rtol=1e-14, atol=1e-15)
    w = rng.normal(size=(4, 3))
    ga, gb = grads(lambda x, y: st.linalg.cross(x, y) * w, a, b)
    np.testing.assert_allclose(ga, np.cross(b, w), rtol=1e-14, atol=1e-15)  # d(w.(a x b))/da
    np.testing.assert_allclose(gb, np.cross(w, a), rtol=1e-14, atol=1e-15)
    assert st.linalg.cross(np.zeros((0, 3)), np.zeros((0, 3))).shape == (0, 3)
    with pytest.raises(ShapeError, match="a's last axis"):
        st.linalg.cross(np.zeros(2), np.zeros(2))
    with pytest.raises(ShapeError, match="b must"):
        st.linalg.cross(np.zeros((2, 3)), np.zeros(3))


def _band_ref(x, lo, hi):
    m, n = x.shape[-2:]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
    return np.where(keep, x, 0.0)


@pytest.mark.parametrize("lo,hi", [(0, 0), (1, 0), (0, -1), (-1, 0), (-1, -1), (2, 1), (3, 4)])
def test_band_part_matches_a_numpy_reference(lo, hi):
    x = np.random.default_rng(7).normal(size=(2, 3, 4))
    np.testing.assert_array_equal(st.linalg.band_part(x, lo, hi).numpy(), _band_ref(x, lo, hi))


def test_band_part_zeros_are_exact_and_gradient_is_the_mask():
    x = np.array([[1.0, INF], [NAN, 2.0]])
    got = compiled_equals_eager(lambda t: st.linalg.band_part(t, 0, 0), x)
    np.testing.assert_array_equal(got, [[1.0, 0.0], [0.0, 2.0]])
    (g,) = grads(lambda t: st.linalg.band_part(t, 1, 0), np.ones((3, 3)))
    np.testing.assert_array_equal(g, [[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    assert st.linalg.band_part(np.zeros((0, 2, 2)), 0, 0).shape == (0, 2, 2)
    with pytest.raises(InvalidArgumentError, match="num_lower"):
        st.linalg.band_part(np.zeros((2, 2)), 3, 0)
    with pytest.raises(InvalidArgumentError, match="num_upper"):
        st.linalg.band_part(np.zeros((2, 2)), 0, 1.5)
    with pytest.raises(ShapeError, match="input"):
        st.linalg.band_part(np.zeros(2), 0, 0)

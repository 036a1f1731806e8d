"""st.nn.conv1d, conv2d_transpose, batch_normalization and
sparse_softmax_cross_entropy_with_logits: values against numpy references written by loops
and formulas, gradients against finite differences and TensorFlow's rules, errors naming the
argument."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import SymtapeError

RNG = np.random.default_rng(7)


def np_conv1d(x, k, stride, padding, dilation=1):
    """TensorFlow's conv1d by loops (SAME: the extra padding after)."""
    n, w, c = x.shape
    kw, _, o = k.shape
    span = (kw - 1) * dilation + 1
    if padding == "SAME":
        ow = -(-w // stride)
        total = max((ow - 1) * stride + span - w, 0)
        x = np.pad(x, [(0, 0), (total // 2, total - total // 2), (0, 0)])
    else:
        ow = (w - span) // stride + 1
    out = np.zeros((n, ow, o))
    for i in range(ow):
        for p in range(kw):
            out[:, i, :] += x[:, i * stride + p * dilation, :] @ k[p]
    return out


def np_conv2d_transpose(y, k, output_shape, strides, padding):
    """Each input element scatters ``y * filters`` into the (padded) output: loops."""
    n, h, w, c = output_shape
    kh, kw = k.shape[:2]
    sh, sw = strides
    if padding == "SAME":
        ph = max((y.shape[1] - 1) * sh + kh - h, 0)
        pw = max((y.shape[2] - 1) * sw + kw - w, 0)
    else:
        ph = pw = 0
    full = np.zeros((n, h + ph, w + pw, c))
    for i in range(y.shape[1]):
        for j in range(y.shape[2]):
            for p in range(kh):
                for q in range(kw):
                    full[:, i * sh + p, j * sw + q, :] += y[:, i, j, :] @ k[p, q].T
    return full[:, ph // 2:ph // 2 + h, pw // 2:pw // 2 + w, :]


def grad(fn, *xs):
    vs = [st.Variable(x) for x in xs]
    with st.GradientTape() as tape:
        y = st.reduce_sum(fn(*vs))
    return [g.numpy() for g in tape.gradient(y, vs)]


def fd(fn, xs, i, h=1e-6):
    """Central differences of sum(fn) in argument ``i``."""
    x = xs[i]
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = [a.copy() for a in xs], [a.copy() for a in xs]
        up[i][idx] += h
        down[i][idx] -= h
        out[idx] = (np.sum(fn(*up)) - np.sum(fn(*down))) / (2 * h)
    return out


# --------------------------------------------------------------------------------------------
# conv1d
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stride,padding,dilation", [(1, "VALID", 1), (2, "SAME", 1),
                                                     (1, "SAME", 2), (3, "VALID", 2),
                                                     ([1, 2, 1], "SAME", [1])])
def test_conv1d_matches_loops(stride, padding, dilation):
    x, k = RNG.normal(size=(2, 9, 3)), RNG.normal(size=(3, 3, 4))
    got = st.nn.conv1d(st.constant(x), st.constant(k), stride, padding,
                       dilations=dilation).numpy()
    s = stride if isinstance(stride, int) else stride[1]
    d = dilation if isinstance(dilation, int) else dilation[0]
    np.testing.assert_allclose(got, np_conv1d(x, k, s, padding, d), rtol=1e-12, atol=1e-12)


def test_conv1d_gradients_match_finite_differences():
    x, k = RNG.normal(size=(1, 7, 2)), RNG.normal(size=(3, 2, 2))
    gx, gk = grad(lambda a, b: st.nn.conv1d(a, b, 2, "SAME") ** 2, x, k)
    ref = lambda a, b: np_conv1d(a, b, 2, "SAME") ** 2  # noqa: E731
    np.testing.assert_allclose(gx, fd(ref, [x, k], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gk, fd(ref, [x, k], 1), rtol=1e-6, atol=1e-8)


def test_conv1d_explicit_padding_and_errors():
    x, k = RNG.normal(size=(1, 5, 1)), RNG.normal(size=(2, 1, 1))
    got = st.nn.conv1d(x, k, 1, [[0, 0], [1, 2], [0, 0]]).numpy()
    want = np_conv1d(np.pad(x, [(0, 0), (1, 2), (0, 0)]), k, 1, "VALID")
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(SymtapeError, match="stride"):
        st.nn.conv1d(x, k, 0, "VALID")
    with pytest.raises(SymtapeError, match="filters"):
        st.nn.conv1d(x, np.ones((2, 1)), 1, "VALID")
    with pytest.raises(SymtapeError, match="input"):
        st.nn.conv1d(np.ones((5, 1)), k, 1, "VALID")
    with pytest.raises(SymtapeError, match="padding"):
        st.nn.conv1d(x, k, 1, [[1, 2]])


# --------------------------------------------------------------------------------------------
# conv2d_transpose
# --------------------------------------------------------------------------------------------

CASES_T = [((2, 5, 6, 3), (3, 2, 3, 4), (2, 2), "SAME"),
           ((1, 7, 5, 2), (3, 3, 2, 3), (2, 1), "VALID"),
           ((1, 4, 4, 1), (2, 2, 1, 2), (1, 1), "SAME"),
           ((1, 8, 8, 2), (3, 3, 2, 1), (3, 3), "VALID")]


def _input_for(out_shape, kshape, strides, padding):
    x = st.zeros(out_shape)
    return st.nn.conv2d(x, st.zeros(kshape), strides, padding).shape


@pytest.mark.parametrize("out_shape,kshape,strides,padding", CASES_T)
def test_conv2d_transpose_matches_loops_and_is_the_adjoint(out_shape, kshape, strides,
                                                           padding):
    yshape = _input_for(out_shape, kshape, strides, padding)
    y, k = RNG.normal(size=yshape), RNG.normal(size=kshape)
    got = st.nn.conv2d_transpose(st.constant(y), st.constant(k), out_shape, strides,
                                 padding).numpy()
    np.testing.assert_allclose(got, np_conv2d_transpose(y, k, out_shape, strides, padding),
                               rtol=1e-12, atol=1e-12)
    x = RNG.normal(size=out_shape)  # <conv2d(x), y> = <x, conv2d_transpose(y)>
    forward = st.nn.conv2d(st.constant(x), st.constant(k), strides, padding).numpy()
    assert np.sum(forward * y) == pytest.approx(np.sum(x * got), rel=1e-12)


def test_conv2d_transpose_gradients_match_finite_differences():
    out_shape, kshape, strides, padding = CASES_T[0]
    yshape = _input_for(out_shape, kshape, strides, padding)
    y, k = RNG.normal(size=yshape), RNG.normal(size=kshape)
    fn = lambda a, b: st.nn.conv2d_transpose(a, b, out_shape, strides, padding) ** 2  # noqa
    ref = lambda a, b: np_conv2d_transpose(a, b, out_shape, strides, padding) ** 2  # noqa
    gy, gk = grad(fn, y, k)
    np.testing.assert_allclose(gy, fd(ref, [y, k], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gk, fd(ref, [y, k], 1), rtol=1e-6, atol=1e-7)


def test_conv2d_transpose_compiles_to_its_eager_value():
    out_shape, kshape, strides, padding = CASES_T[1]
    yshape = _input_for(out_shape, kshape, strides, padding)
    y, k = RNG.normal(size=yshape), RNG.normal(size=kshape)
    f = st.function(lambda a: st.nn.conv2d_transpose(a, k, out_shape, strides, padding))
    np.testing.assert_allclose(f(y).numpy(), np_conv2d_transpose(y, k, out_shape, strides,
                                                                 padding), rtol=1e-12,
                               atol=1e-12)


def test_conv2d_transpose_errors_name_the_argument():
    y, k = np.ones((1, 3, 3, 2)), np.ones((2, 2, 1, 2))
    with pytest.raises(SymtapeError, match="output_shape"):
        st.nn.conv2d_transpose(y, k, [1, 9, 9, 1], 1, "VALID")
    with pytest.raises(SymtapeError, match="output_shape"):
        st.nn.conv2d_transpose(y, k, [1, 4, 4], 1, "VALID")
    with pytest.raises(SymtapeError, match="filters"):
        st.nn.conv2d_transpose(y, np.ones((2, 2, 1, 3)), [1, 4, 4, 1], 1, "VALID")
    with pytest.raises(SymtapeError, match="strides"):
        st.nn.conv2d_transpose(y, k, [1, 4, 4, 1], 0, "VALID")


# --------------------------------------------------------------------------------------------
# batch_normalization and moments
# --------------------------------------------------------------------------------------------


def test_batch_normalization_matches_the_formula_and_moments():
    x = RNG.normal(size=(4, 3))
    mean, var = st.nn.moments(st.constant(x), axes=[0])
    offset, scale = RNG.normal(size=3), RNG.normal(size=3)
    got = st.nn.batch_normalization(st.constant(x), mean, var, offset, scale, 1e-3).numpy()
    want = scale * (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3) + offset
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    plain = st.nn.batch_normalization(x, x.mean(0), x.var(0), None, None, 0.0).numpy()
    np.testing.assert_allclose(plain, (x - x.mean(0)) / x.std(0), rtol=1e-12, atol=1e-12)


def test_batch_normalization_gradients_match_finite_differences():
    x, m, v = RNG.normal(size=(3, 2)), RNG.normal(size=2), RNG.uniform(0.5, 2.0, size=2)
    b, s = RNG.normal(size=2), RNG.normal(size=2)

    def ref(x, m, v, b, s):
        return np.sin(s * (x - m) / np.sqrt(v + 0.1) + b)

    got = grad(lambda *a: st.sin(st.nn.batch_normalization(*a, 0.1)), x, m, v, b, s)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, fd(ref, [x, m, v, b, s], i), rtol=1e-6, atol=1e-8)


def test_batch_normalization_errors_name_the_argument():
    with pytest.raises(SymtapeError, match="scale"):
        st.nn.batch_normalization(np.ones((2, 3)), 0.0, 1.0, None, np.ones(4), 0.0)
    with pytest.raises(SymtapeError, match="x has dtype int64"):
        st.nn.batch_normalization(np.ones(3, dtype=np.int64), 0.0, 1.0, None, None, 0.0)


# --------------------------------------------------------------------------------------------
# sparse_softmax_cross_entropy_with_logits
# --------------------------------------------------------------------------------------------


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_sparse_cross_entropy_values_and_tf_gradient():
    logits = RNG.normal(size=(2, 3, 5)) * 3
    labels = RNG.integers(0, 5, size=(2, 3))
    want = -np.log(np.take_along_axis(_softmax(logits), labels[..., None], -1))[..., 0]
    z = st.Variable(logits)
    with st.GradientTape() as tape:
        loss = st.nn.sparse_softmax_cross_entropy_with_logits(labels, z)
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-12)
    onehot = np.eye(5)[labels]
    np.testing.assert_allclose(tape.gradient(loss, z).numpy(), _softmax(logits) - onehot,
                               rtol=1e-12, atol=1e-14)


def test_sparse_cross_entropy_second_derivative_is_the_softmax_jacobian():
    logits, label = np.array([0.3, -1.0, 2.0]), 2
    z = st.Variable(logits)
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            loss = st.nn.sparse_softmax_cross_entropy_with_logits(label, z)
        g = inner.gradient(loss, z)
    hess = outer.jacobian(g, z).numpy()
    p = _softmax(logits)
    np.testing.assert_allclose(hess, np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-14)


def test_sparse_cross_entropy_out_of_range_labels():
    logits = np.zeros((2, 3))
    with pytest.raises(SymtapeError, match=r"labels \[3\]"):
        st.nn.sparse_softmax_cross_entropy_with_logits([0, 3], logits)
    with pytest.raises(SymtapeError, match=r"labels \[-1\]"):
        st.nn.sparse_softmax_cross_entropy_with_logits([-1, 0], logits)

    @st.function(input_signature=[st.TensorSpec((2,), "int64"), st.TensorSpec((2, 3))])
    def f(labels, z):
        return st.nn.sparse_softmax_cross_entropy_with_logits(labels, z)

    got = f(np.array([1, 3]), logits).numpy()
    assert got[0] == pytest.approx(np.log(3.0), rel=1e-14) and np.isnan(got[1])


def test_sparse_cross_entropy_errors_name_the_argument():
    with pytest.raises(SymtapeError, match="labels must be integers"):
        st.nn.sparse_softmax_cross_entropy_with_logits([0.0, 1.0], np.zeros((2, 3)))
    with pytest.raises(SymtapeError, match="labels must have the shape"):
        st.nn.sparse_softmax_cross_entropy_with_logits([0, 1, 2], np.zeros((2, 3)))

"""NumPy functions on eager tensors, as on TensorFlow's: plain numpy results computed on the
values, nothing recorded; binary operators with an array or numpy scalar on the left are the
tensor's reflected operators (they record); inside a trace a ufunc names the st function."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st

VALUES = np.array([[0.5, -2.0, 3.0], [1.5, 0.0, -0.25]])


@pytest.mark.parametrize("fn", [
    np.sin, np.cos, np.exp, np.log1p, np.abs, np.sqrt, np.tanh, np.negative, np.square,
    np.sign, np.floor, np.isfinite,
    np.max, np.min, np.sum, np.prod, np.mean, np.std, np.argmax, np.cumsum, np.sort,
    lambda a: np.max(a, axis=1), lambda a: np.maximum.reduce(a, axis=0),
    lambda a: np.add.accumulate(a, axis=1), lambda a: np.multiply.outer(a[0], a[1]),
    lambda a: np.dot(a[0], a[1]), lambda a: np.transpose(a), lambda a: np.linalg.norm(a),
    lambda a: np.maximum(a, 0.0),
    lambda a: np.clip(a, -1.0, 1.0), lambda a: np.where(a > 0, a, 0.0),
    lambda a: np.add(a, a), lambda a: np.arctan2(a, a[::-1]),
], ids=lambda f: getattr(f, "__name__", "lambda"))
def test_numpy_functions_on_eager_tensors_give_numpy_values(fn):
    t = st.constant(VALUES)
    with np.errstate(invalid="ignore"):
        got, want = fn(t), fn(VALUES)
    assert not isinstance(got, st.Tensor)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_numpy_functions_on_variables_and_scalars():
    v = st.Variable([1.0, 2.0])
    np.testing.assert_array_equal(np.exp(v), np.exp([1.0, 2.0]))
    s = st.constant(2.0)
    assert np.sin(s) == np.sin(2.0) and isinstance(np.sin(s), np.floating)


@pytest.mark.parametrize("op, want", [
    (lambda a, t: a * t, lambda a, x: a * x), (lambda a, t: a + t, lambda a, x: a + x),
    (lambda a, t: a - t, lambda a, x: a - x), (lambda a, t: a / t, lambda a, x: a / x),
    (lambda a, t: a ** t, lambda a, x: a ** x), (lambda a, t: a @ t, lambda a, x: a @ x),
])
def test_operators_with_an_array_on_the_left_record(op, want):
    a = np.array([[1.5, 2.0], [0.5, 3.0]])
    x = st.Variable([[1.0, 2.0], [3.0, 4.0]])
    with st.GradientTape() as tape:
        y = op(a, x)
        total = st.reduce_sum(y)
    assert isinstance(y, st.Tensor)
    np.testing.assert_allclose(y.numpy(), want(a, x.numpy()))
    g = tape.gradient(total, x).numpy()
    # central differences of the same numpy expression
    fd = np.zeros_like(g)
    base = x.numpy()
    for idx in np.ndindex(*base.shape):
        e = np.zeros_like(base)
        e[idx] = 1e-6
        fd[idx] = (want(a, base + e).sum() - want(a, base - e).sum()) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_numpy_scalar_on_the_left_and_comparisons():
    x = st.Variable(2.0)
    with st.GradientTape() as tape:
        y = np.float64(3.0) * x * x
    assert float(tape.gradient(y, x)) == 12.0
    c = np.array([1.0, 3.0]) < st.constant([2.0, 2.0])
    assert isinstance(c, st.Tensor) and c.numpy().tolist() == [True, False]


def test_in_place_numpy_update_from_a_tensor():
    a = np.zeros(2)
    a += st.constant([1.0, -1.0])
    np.testing.assert_array_equal(a, [1.0, -1.0])


def test_inside_a_trace_a_ufunc_names_the_st_function():
    @st.function
    def f(x):
        return np.sin(x)

    with pytest.raises(st.errors.SymtapeError, match=r"np\.sin .*use st\.sin"):
        f(st.constant(1.0))

    @st.function
    def g(x):
        return np.float64(2.0) * x + np.ones(()) * x  # operators still trace

    assert float(g(st.constant(1.5))) == 4.5

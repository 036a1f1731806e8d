"""float32 as a dtype of its own: ``st.config.floatx`` (the default float of Python numbers
and creation functions), Keras's float32 default (``st.keras.backend``), the mixing rule
(tensors of two floats raise naming both; numbers and numpy data take the tensor's dtype),
and float32 values, derivatives and compiled code against float64 references rounded to
float32."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose

import symtape as st
from symtape.base.errors import DTypeError, InvalidArgumentError

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture
def floatx32():
    st.config.set_floatx("float32")
    yield
    st.config.set_floatx("float64")


# --------------------------------------------------------------------------------------------
# st.config.floatx
# --------------------------------------------------------------------------------------------

MADE = {
    "constant": lambda: st.constant(0.5),
    "constant_list": lambda: st.constant([1, 2.5]),
    "variable": lambda: st.Variable(1.0),
    "zeros": lambda: st.zeros([2]),
    "ones": lambda: st.ones([2, 1]),
    "eye": lambda: st.eye(2),
    "one_hot": lambda: st.one_hot([0, 1], 2),
    "normal": lambda: st.random.normal([3]),
    "uniform": lambda: st.random.uniform([3]),
    "convert": lambda: st.convert_to_tensor(2.5),
}


@pytest.mark.parametrize("name", sorted(MADE))
def test_python_floats_and_creation_follow_floatx(name):
    assert st.config.floatx() == "float64"
    assert MADE[name]().dtype == F64
    st.config.set_floatx("float32")
    try:
        assert st.config.floatx() == "float32"
        assert MADE[name]().dtype == F32
    finally:
        st.config.set_floatx("float64")
    assert MADE[name]().dtype == F64


def test_floatx_leaves_ints_numpy_data_and_given_dtypes_alone(floatx32):
    assert st.constant(3).dtype == np.dtype(np.int32)
    assert st.constant(np.array([1.0])).dtype == F64  # numpy keeps its dtype, as in TF
    assert st.zeros([2], dtype="float64").dtype == F64
    assert st.random.uniform([2], maxval=5, dtype="int32").dtype == np.dtype(np.int32)
    assert st.symbol("q").dtype == F64  # symbols are exact physics' variables


def test_floatx_values_are_the_numbers_rounded_to_float32(floatx32):
    assert st.constant(0.1).numpy() == np.float32(0.1)
    st.random.set_seed(3)
    a = st.random.normal([4]).numpy()
    st.config.set_floatx("float64")
    st.random.set_seed(3)
    b = st.random.normal([4]).numpy()
    assert a.dtype == F32 and np.array_equal(a, b.astype(np.float32))  # the same draws


def test_tensors_made_before_keep_their_dtype():
    t = st.constant(1.5)
    st.config.set_floatx("float32")
    try:
        assert t.dtype == F64 and (t + 1.0).dtype == F64
    finally:
        st.config.set_floatx("float64")


@pytest.mark.parametrize("bad", ["float16", "int32", "double precision", None, 3])
def test_set_floatx_refuses_other_dtypes(bad):
    with pytest.raises(InvalidArgumentError, match="set_floatx"):
        st.config.set_floatx(bad)
    with pytest.raises(InvalidArgumentError, match="set_floatx"):
        st.keras.backend.set_floatx(bad)
    assert st.config.floatx() == "float64" and st.keras.backend.floatx() == "float32"


def test_random_draws_refuse_a_dtype_that_is_not_a_float():
    with pytest.raises(DTypeError, match="st.random.normal: dtype"):
        st.random.normal([2], dtype="int32")
    with pytest.raises(DTypeError, match="st.random.uniform: dtype"):
        st.random.uniform([2], dtype="bool")


# --------------------------------------------------------------------------------------------
# The mixing rule
# --------------------------------------------------------------------------------------------

def test_two_float_tensors_must_agree_naming_both_dtypes():
    a, b = st.constant(np.float32([1.0, 2.0])), st.constant([1.0, 2.0])
    for op in (lambda: a + b, lambda: b * a, lambda: st.concat([a, b], 0),
               lambda: st.matmul(st.reshape(a, (1, 2)), st.reshape(b, (2, 1))),
               lambda: a + st.Variable([1.0, 1.0])):
        with pytest.raises(DTypeError, match=r"float32 and float64|float64 and float32"):
            op()
    assert (a + st.cast(b, "float32")).dtype == F32


@pytest.mark.parametrize("other", [2.5, 2, np.float64(2.5), np.array([1.0, 2.0]),
                                   np.array([1, 2])])
def test_numbers_and_numpy_data_take_the_tensors_dtype(other):
    """TensorFlow's weak typing: a Python number, numpy scalar or array meeting a float32
    tensor is converted to float32 (``tf.ones(2) + np.float64(2.5)`` is float32)."""
    a = st.constant(np.float32([1.0, 2.0]))
    for out, ref in ((a + other, np.float32([1.0, 2.0]) + np.float32(other)),
                     (other * a, np.float32(other) * np.float32([1.0, 2.0])),
                     (st.maximum(a, other), np.maximum(np.float32([1.0, 2.0]),
                                                       np.float32(other)))):
        assert out.dtype == F32
        assert np.array_equal(out.numpy(), ref.astype(np.float32))


def test_a_number_beyond_float32_is_its_infinity():
    a = st.constant(np.float32([1.0]))
    assert (a * 1e40).numpy().tolist() == [np.inf]


# --------------------------------------------------------------------------------------------
# Values and derivatives in float32
# --------------------------------------------------------------------------------------------

def _f(x):
    return st.sin(x) * x ** 2 + st.exp(-x) / (1.0 + x * x)


def test_float32_value_and_derivatives_against_sympy():
    """Every order stays float32, within a few float32 ulps of sympy.diff's exact value."""
    xs = np.float32([-1.5, -0.25, 0.0, 0.75, 2.0])
    x = st.Variable(xs)
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = _f(x)
        g = t1.gradient(y, x)
    h = t2.gradient(g, x)
    s = sp.Symbol("s")
    expr = sp.sin(s) * s ** 2 + sp.exp(-s) / (1 + s ** 2)
    for got, e in ((y, expr), (g, sp.diff(expr, s)), (h, sp.diff(expr, s, 2))):
        assert got.dtype == F32
        ref = np.array([float(e.subs(s, float(v))) for v in xs])
        assert_allclose(got.numpy(), ref, rtol=16 * EPS32, atol=16 * EPS32)


def test_float32_structural_zeros_stay_exact():
    """README's value rules in float32 too: ``x * 0`` and ``x - x`` are exact zeros, the
    unselected branch of ``where`` gives no nan."""
    x = st.Variable(np.float32([np.inf, -2.0, 0.0]))
    with st.GradientTape() as t:
        y = st.reduce_sum(st.where(x > 0, st.sqrt(x), 0.0) + (x - x) + x * 0.0)
    g = t.gradient(y, x)
    assert y.dtype == g.dtype == F32
    assert (x - x).numpy()[1] == 0.0
    assert g.numpy()[1:].tolist() == [0.0, 0.0]


def _hessian_sum(fn, x):
    """``d/dx sum(d fn / dx)`` on two tapes (a second derivative, as the random programs of
    ``tests/differential.py`` take it)."""
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = fn(x)
        g = inner.gradient(y, x)
        total = st.reduce_sum(g)
    return outer.gradient(total, x)


@pytest.mark.parametrize("point", [[-1.0, -1.0, -0.01525336], [0.3, -2.5, 1.7],
                                   [1e-3, 0.75, -0.2]])
def test_float32_second_derivative_through_a_max_of_a_norm(point):
    """``max(|x|, -1) ** sum(x)``: the small second-derivative nodes take their values from
    their element view, which reads the norm again under Max's tie test ``Max(n, -1) == n``.
    It is read in float32 as the Max was computed; read in float64 the tie broke and a term
    was lost (11% off at the first point; a random program found it at
    ``st.where(a > 0, a ** b, 0.0)`` of a stacked max)."""
    x = st.Variable(np.float32(point))
    h = _hessian_sum(lambda v: st.reduce_max(st.stack([st.norm(v), -1.0])) **
                     st.reduce_sum(v), x)
    s = sp.symbols("s0:3")
    y = sp.sqrt(sum(v ** 2 for v in s)) ** sum(s)
    total = sum(sp.diff(y, v) for v in s)
    at = dict(zip(s, map(float, x.numpy())))
    ref = [float(sp.diff(total, v).evalf(30, subs=at)) for v in s]
    assert h.dtype == F32
    assert_allclose(h.numpy(), ref, rtol=64 * EPS32)


def test_float32_cancellation_residues_are_rounding_and_are_not_compared(floatx32):
    """``1e4 * (sin(x)**2 + cos(x)**2 - 1)`` is 0 in exact arithmetic; float32 leaves a
    residue of the rounding of numbers of order 1, made large by 1e4 (what random programs
    169 and 236 did through a softmax's derivative). Eager and compiled float32 stay within
    the hand bound of that rounding, far from the float64 value; the rounding-perturbed
    reference of ``tests/differential.py`` moves as far, so ``check_float32`` leaves the
    value out, and keeps ``sin(x)**2 + cos(x)**2`` itself, which does not move."""
    import differential as D

    x = st.Variable(np.float32([0.3, 1.1, -2.0, 0.7]))
    ones = st.sin(x) ** 2 + st.cos(x) ** 2
    residue = 1e4 * (ones - 1.0)
    bound = 1e4 * 16 * 2.0 ** -24  # a few roundings of numbers <= 1, times 1e4
    compiled = st.compile([ones, residue], [x], dtype="float32")(x.numpy())
    for got in (residue.numpy(), compiled[1]):
        assert got.dtype == F32 and np.all(np.abs(got) <= bound)
    exact = D.reference_in([residue], [x])[0]
    assert np.all(np.abs(exact) < 1e-9)
    moved = D.reference_rounded([ones, residue], [x], 6, np.random.default_rng(0))
    spread = np.abs(moved[1] - exact).max(axis=0)
    assert np.all(spread <= bound) and spread.max() > 1e-3  # not compared: it moves
    assert np.abs(moved[0] - 1.0).max() <= 8 * 2.0 ** -23  # compared: it does not


def test_compiled_float32_agrees_with_eager_and_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(257, 4)).astype(np.float32)
    w = st.Variable(rng.normal(size=(4, 3)).astype(np.float32))

    def loss(x):
        with st.GradientTape() as t:
            out = st.reduce_mean(st.tanh(st.matmul(x, w)) ** 2)
        return out, t.gradient(out, w)

    step = st.function(loss, input_signature=[st.TensorSpec((None, 4), "float32")])
    got, grad = step(data)
    eager, eager_grad = loss(st.constant(data))
    assert got.dtype == grad.dtype == eager.dtype == eager_grad.dtype == F32
    z = np.tanh(data.astype(np.float64) @ w.numpy().astype(np.float64))
    ref = np.mean(z ** 2)
    ref_grad = data.T.astype(np.float64) @ (2 * z * (1 - z ** 2)) / z.size
    for a in (got, eager):
        assert_allclose(float(a), ref, rtol=1e-5)
    for a in (grad, eager_grad):
        assert_allclose(a.numpy(), ref_grad, rtol=1e-4, atol=1e-6)


def test_function_dtype_float32_traces_and_compiles_in_float32():
    """``st.function(dtype="float32")`` without an input_signature: its arguments are
    float32 leaves (so they meet float32 variables), its code float32."""
    w = st.Variable(np.float32([1.0, -2.0, 0.5]))
    f = st.function(lambda x: st.reduce_sum(x * x * w), dtype="float32")
    out = f(np.array([0.1, 0.2, 0.3]))
    assert out.dtype == F32
    assert float(out) == pytest.approx(0.01 - 0.08 + 0.045, rel=8 * EPS32)


def test_function_traces_float32_arguments_as_a_float32_function():
    """Without input_signature and dtype=, float32 arguments trace a float32 function of
    their own (TensorFlow traces per dtype): float32 results, float32 variables met without
    a cast; float64 arguments keep the float64 trace of the same shapes."""
    w = st.Variable(np.float32([1.0, -2.0, 0.5]))
    f = st.function(lambda x: st.reduce_sum(x * x * w) + 0.25)
    x32, x64 = np.float32([0.1, 0.2, 0.3]), np.array([0.1, 0.2, 0.3])
    out = f(x32)
    assert out.dtype == F32
    assert float(out) == pytest.approx(0.01 - 0.08 + 0.045 + 0.25, rel=8 * EPS32)
    with pytest.raises(DTypeError, match="float32 and float64|float64 and float32"):
        f(x64)  # a float64 trace: x meets the float32 w, as in TensorFlow
    g = st.function(lambda x, y: st.reduce_sum(x * y) / 3.0)
    a, b = g(x32, x32), g(x64, x64)
    assert a.dtype == F32 and b.dtype == F64
    assert float(a) == pytest.approx(float(np.sum(x64 * x64)) / 3.0, rel=8 * EPS32)
    assert float(b) == float(np.sum(x64 * x64)) / 3.0
    spec = st.TensorSpec((3,), "float32")
    assert g.traced_signatures == [(spec, spec), ((3,), (3,))]
    assert g(x32, x64).dtype == F64 and len(g.traced_signatures) == 2  # mixed: float64


def test_function_concrete_functions_are_the_calls_traces():
    """``get_concrete_function`` of TensorSpecs or arrays gives the trace a call of that
    dtype uses (and makes no other)."""
    f = st.function(lambda x: st.sin(x) * 2.0)
    x32 = np.float32([0.5, 1.0])
    made = f.get_concrete_function(st.TensorSpec((2,), "float32"))
    assert f.get_concrete_function(x32) is made
    assert f(x32).dtype == F32 and len(f.traced_signatures) == 1
    assert f.get_concrete_function((2,)) is not made  # a shape: TensorSpec's float64
    assert f.get_concrete_function(np.zeros(2)) is f.get_concrete_function((2,))
    assert len(f.traced_signatures) == 2
    assert_allclose(made(x32)[0], 2 * np.sin(x32), rtol=2 * EPS32)


def test_function_python_floats_follow_floatx(floatx32):
    f = st.function(lambda x: x * 3.0)
    assert f(2.0).dtype == F32 and f([1.0, 2.5]).dtype == F32
    st.config.set_floatx("float64")
    assert f(2.0).dtype == F64


def test_function_signature_and_dtype_decide_over_the_arguments():
    x32 = np.float32([1.0, 2.0])
    f = st.function(lambda x: x + 1.0, dtype="float64")
    assert f(x32).dtype == F64 and f(x32.astype(np.float64)).dtype == F64
    assert f.traced_signatures == [((2,),)]
    g = st.function(lambda x: x + 1.0, input_signature=[st.TensorSpec((2,))])
    assert g(x32).dtype == F64
    assert g.get_concrete_function(st.TensorSpec((2,), "float32")) is \
        g.get_concrete_function(np.zeros(2))  # the signature's dtype


# --------------------------------------------------------------------------------------------
# Keras: float32 by default
# --------------------------------------------------------------------------------------------

def test_keras_layers_weights_and_slots_are_float32():
    assert st.keras.backend.floatx() == "float32"
    model = st.keras.Sequential([st.keras.layers.Dense(4, activation="relu"),
                                 st.keras.layers.BatchNormalization(),
                                 st.keras.layers.Dense(2)])
    x = np.random.default_rng(1).normal(size=(8, 3))  # float64 data: cast at the input
    out = model(x)
    assert out.dtype == F32 and all(v.dtype == F32 for v in model.variables)
    opt = st.keras.optimizers.Adam(0.01)
    with st.GradientTape() as tape:
        loss = st.reduce_mean(model(x, training=True) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    assert loss.dtype == F32 and all(g.dtype == F32 for g in grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    assert all(v.dtype == F32 for v in model.variables)
    assert all(s.dtype == F32 for _, s in opt._m.values())


def test_keras_float32_dense_against_numpy():
    layer = st.keras.layers.Dense(3, activation="tanh")
    x = np.random.default_rng(2).normal(size=(5, 4))
    out = layer(x).numpy()
    k, b = (v.numpy() for v in (layer.kernel, layer.bias))
    ref = np.tanh(x.astype(np.float32).astype(np.float64) @ k.astype(np.float64) + b)
    assert out.dtype == F32
    assert_allclose(out, ref, rtol=8 * EPS32, atol=8 * EPS32)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "rmsprop"])
def test_keras_fit_in_float32_compiled_as_eagerly(optimizer):
    """``fit`` with float64 data and int labels trains a float32 model; the compiled step
    and the eager one agree to float32 rounding, and both learn."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 3))
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    losses = []
    for eager in (False, True):
        st.random.set_seed(0)
        model = st.keras.Sequential([st.keras.layers.Dense(8, activation="relu"),
                                     st.keras.layers.Dense(2)])
        model.compile(optimizer=st.keras.optimizers.get(optimizer),
                      loss=st.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=eager)
        history = model.fit(x, y, batch_size=16, epochs=5, verbose=0)
        assert all(v.dtype == F32 for v in model.variables)
        losses.append(history.history["loss"])
    assert_allclose(losses[0], losses[1], rtol=1e-4)
    assert losses[0][-1] < losses[0][0]


def test_keras_optimizer_decay_in_float32():
    w = st.Variable(np.float32([1.0]))
    opt = st.keras.optimizers.SGD(0.1, decay=0.5)
    for _ in range(3):
        opt.apply_gradients([(st.constant(np.float32([1.0])), w)])
    ref = 1.0 - sum(0.1 / (1.0 + 0.5 * k) for k in range(3))
    assert w.dtype == F32 and float(w.numpy()[0]) == pytest.approx(ref, rel=4 * EPS32)


def test_keras_set_floatx_float64_makes_float64_layers():
    st.keras.backend.set_floatx("float64")
    try:
        layer = st.keras.layers.Dense(2)
        assert layer(np.ones((1, 3))).dtype == F64 and layer.kernel.dtype == F64
        assert st.keras.utils.to_categorical([1], 2).dtype == F64
    finally:
        st.keras.backend.set_floatx("float32")
    assert st.keras.utils.to_categorical([1], 2).dtype == F32
    assert st.keras.layers.Dense(2, dtype="float64").dtype == F64


def test_keras_float32_model_saves_and_loads(tmp_path):
    model = st.keras.Sequential([st.keras.layers.Dense(2, input_shape=(3,))])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(4).normal(size=(4, 3))
    model.fit(x, np.zeros((4, 2)), verbose=0)
    path = tmp_path / "m.zip"
    model.save(path)
    again = st.keras.models.load_model(path)
    assert all(v.dtype == F32 for v in again.variables)
    assert np.array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_function_traced_on_float32_arrays_saves(tmp_path):
    class Squares(st.Module):
        @st.function
        def f(self, x):
            return st.reduce_sum(x * x)

    m = Squares()
    assert m.f(np.array([1.0, 2.0, 3.0], dtype=np.float32)).dtype == np.float32
    st.saved_model.save(m, str(tmp_path))
    loaded = st.saved_model.load(str(tmp_path))
    assert float(loaded.f(np.array([1.0, 2.0, 3.0], dtype=np.float32))) == 14.0

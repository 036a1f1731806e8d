"""st.saved_model: functions saved as programs, loaded differentiable (in a fresh process too),
custom rules kept or dropped, variables restored and updated, malformed files refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symtape as st
from symtape.base import errors

ROOT = Path(__file__).resolve().parent.parent


@st.custom_gradient
def soft_clip(x):
    y = st.tanh(x)

    def grad(dy):
        return dy * (1 - y * y) * 2  # deliberately twice the true derivative

    return y, grad


class Model:
    def __init__(self):
        self.w = st.Variable([0.5, -1.5], name="w")
        self.b = st.Variable(0.25, name="b")

    @st.function(input_signature=[st.TensorSpec((3, 2))])
    def __call__(self, x):
        return st.reduce_sum(soft_clip(st.matmul(x, st.reshape(self.w, [2, 1]))) + self.b)

    @st.function(input_signature=[st.TensorSpec((3, 2)), st.TensorSpec((3,))])
    def train_step(self, x, y):
        with st.GradientTape() as t:
            pred = st.reshape(st.matmul(x, st.reshape(self.w, [2, 1])), [3]) + self.b
            loss = st.reduce_mean((pred - y) ** 2)
        gw, gb = t.gradient(loss, [self.w, self.b])
        self.w.assign_sub(0.1 * gw)
        self.b.assign_sub(0.1 * gb)
        return loss


X = np.array([[0.1, 0.2], [0.3, -0.4], [1.0, 0.5]])
Y = np.array([1.0, -1.0, 0.5])


def _grads(f, w):
    with st.GradientTape() as t:
        out = f(X)
    return float(out), t.gradient(out, w).numpy()


def test_loaded_function_matches_the_original_values_and_custom_gradients(tmp_path):
    model = Model()
    st.saved_model.save(model, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    assert [v.name for v in loaded.variables] == ["w:0", "b:0"]
    v0, g0 = _grads(model.__call__.python_function, model.w)
    v1, g1 = _grads(loaded, loaded.variables[0])
    assert v1 == pytest.approx(v0, rel=1e-15)
    np.testing.assert_allclose(g1, g0, rtol=1e-15)
    # the rule (twice the true derivative), not SymPy's derivative
    s = X @ np.array([0.5, -1.5])
    np.testing.assert_allclose(g1, 2 * (1 - np.tanh(s) ** 2) @ X, rtol=1e-13)


def test_second_derivatives_through_a_loaded_function(tmp_path):
    class Cubic:
        @st.function(input_signature=[st.TensorSpec(())])
        def f(self, x):
            return st.sin(x) * x ** 3

    st.saved_model.save(Cubic(), tmp_path)
    loaded = st.saved_model.load(tmp_path)
    x = st.Variable(0.7, name="x")
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = loaded.f(x)
        dy = t1.gradient(y, x)
    d2 = t2.gradient(dy, x)
    x0 = 0.7
    assert float(d2) == pytest.approx(-x0 ** 3 * np.sin(x0) + 6 * x0 ** 2 * np.cos(x0)
                                      + 6 * x0 * np.sin(x0), rel=1e-13)
    assert str(y.formula()) == "x**3*sin(x)"


def test_loaded_train_step_updates_the_restored_variables(tmp_path):
    model = Model()
    st.saved_model.save(model, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    w, b = np.array([0.5, -1.5]), 0.25
    for _ in range(3):
        loss = loaded.train_step(X, Y)
        r = X @ w + b - Y
        assert float(loss) == pytest.approx(np.mean(r ** 2), rel=1e-13)
        w, b = w - 0.1 * 2 * r @ X / 3, b - 0.1 * 2 * r.mean()
    np.testing.assert_allclose(loaded.variables[0].numpy(), w, rtol=1e-13)
    assert float(loaded.variables[1]) == pytest.approx(b, rel=1e-13)
    np.testing.assert_allclose(model.w.numpy(), [0.5, -1.5])  # the original is untouched


def test_without_custom_gradients_the_rule_is_missing(tmp_path):
    st.saved_model.save(Model(), tmp_path,
                        options=st.saved_model.SaveOptions(experimental_custom_gradients=False))
    loaded = st.saved_model.load(tmp_path)
    with st.GradientTape() as t:
        out = loaded(X)
    with pytest.raises(LookupError, match="without custom gradients"):
        t.gradient(out, loaded.variables[0])


def test_load_in_a_fresh_process(tmp_path):
    st.saved_model.save(Model(), tmp_path)
    code = f"""
        import numpy as np, symtape as st
        loaded = st.saved_model.load({str(tmp_path)!r})
        x = np.array({X.tolist()!r})
        with st.GradientTape() as t:
            out = loaded(x)
        print(repr(t.gradient(out, loaded.variables[0]).numpy().tolist()))
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    s = X @ np.array([0.5, -1.5])
    np.testing.assert_allclose(eval(done.stdout), 2 * (1 - np.tanh(s) ** 2) @ X, rtol=1e-13)


def test_signatures_and_errors(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match="no st.function"):
        st.saved_model.save(object(), tmp_path)

    class Lazy:
        @st.function
        def f(self, x):
            return x * 2

    with pytest.raises(errors.InvalidArgumentError, match="never called"):
        st.saved_model.save(Lazy(), tmp_path)
    lazy = Lazy()
    lazy.f(np.ones(2))  # a traced signature is saved
    st.saved_model.save(lazy, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    np.testing.assert_allclose(loaded.f(np.array([1.0, 3.0])).numpy(), [2.0, 6.0])
    with pytest.raises(errors.InvalidArgumentError, match="no saved signature"):
        loaded.f(np.ones(3))


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip"])
def test_malformed_files_are_refused(tmp_path, damage):
    st.saved_model.save(Model(), tmp_path)
    path = tmp_path / "saved_model.symtape"
    blob = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a model at all")
    elif damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    else:
        path.write_bytes(blob[:-10] + bytes(b ^ 0xFF for b in blob[-10:]))
    with pytest.raises(errors.SerializationError):
        st.saved_model.load(tmp_path)
    with pytest.raises(errors.SerializationError, match="cannot read"):
        st.saved_model.load(tmp_path / "missing")


def test_the_file_is_checked_json_data(tmp_path):
    st.saved_model.save(Model(), tmp_path)
    blob = (tmp_path / "saved_model.symtape").read_bytes()
    doc = json.loads(blob[52:])
    assert blob[:8] == b"SYMTAPEM" and doc["type"] == "symtape saved model"
    assert sorted(doc) == ["callable", "functions", "type", "variables"]
    kinds = {op["kind"] for progs in doc["functions"].values() for p in progs
             for op in p["ops"]}
    assert kinds == {"op", "template", "rule"}  # gradient templates and the custom rule


def test_a_function_drawing_random_values_is_refused_by_save(tmp_path):
    class Noisy:
        @st.function(input_signature=[st.TensorSpec((3,))])
        def f(self, x):
            return st.nn.dropout(x, 0.5)

    with pytest.raises(st.errors.SerializationError, match="draws random values"):
        st.saved_model.save(Noisy(), tmp_path)


def test_a_convolutional_module_round_trips_with_its_gradients(tmp_path):
    """Convolution (strided, dilated, SAME) and max pooling are table ops with parameters:
    saved and loaded, the function gives the same value and filter gradient."""
    class Net(st.Module):
        def __init__(self):
            super().__init__()
            self.k = st.Variable(np.random.default_rng(0).normal(size=(3, 3, 2, 4)), name="k")

        @st.function(input_signature=[st.TensorSpec((2, 6, 6, 2))])
        def __call__(self, x):
            y = st.nn.conv2d(x, self.k, [2, 1], "SAME", dilations=[1, 1, 2, 1])
            return st.reduce_sum(st.nn.max_pool2d(st.tanh(y), 2, [1, 2], "SAME") ** 2)

    net = Net()
    x = np.random.default_rng(1).normal(size=(2, 6, 6, 2))
    st.saved_model.save(net, str(tmp_path))
    loaded = st.saved_model.load(str(tmp_path))
    grads = []
    for model, k in ((net, net.k), (loaded, None)):
        with st.GradientTape() as t:
            value = model(x)
        grads.append(t.gradient(value, k if k is not None else loaded.trainable_variables[0]))
        np.testing.assert_allclose(float(value), float(net(x)), rtol=1e-14)
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-13)


# -- None batch dimensions and Keras models -----------------------------------------------------


class _Batched:
    def __init__(self):
        self.w = st.Variable([1.0, 2.0, 3.0], name="w")

    @st.function(input_signature=[st.TensorSpec((None, 3))])
    def score(self, x):
        return st.reduce_sum(st.tanh(x) * self.w, axis=1)

    @st.function(input_signature=[st.TensorSpec((None, 3))])
    def flat(self, x):
        return st.reshape(x, (-1,)) * 2.0


def test_a_none_batch_signature_is_saved_for_every_batch(tmp_path):
    obj = _Batched()
    st.saved_model.save(obj, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    for b in (1, 7, 1000):
        x = np.random.default_rng(b).normal(size=(b, 3))
        np.testing.assert_allclose(loaded.score(x).numpy(), np.tanh(x) @ [1.0, 2.0, 3.0],
                                   rtol=1e-15, atol=1e-15)
        np.testing.assert_array_equal(loaded.flat(x).numpy(), 2.0 * x.reshape(-1))
    x = st.Variable(np.ones((2, 3)))
    with st.GradientTape() as t:
        y = st.reduce_sum(loaded.score(x))
    np.testing.assert_allclose(t.gradient(y, x).numpy(),
                               np.broadcast_to((1 - np.tanh(1.0) ** 2) * np.array([1., 2., 3.]),
                                               (2, 3)), rtol=1e-14)
    with pytest.raises(st.errors.InvalidArgumentError, match="no saved signature matches"):
        loaded.score(np.ones((2, 4)))


def test_a_program_that_depends_on_the_batch_size_is_refused(tmp_path):
    class Flat:
        @st.function(input_signature=[st.TensorSpec((None, 2))])
        def f(self, x):
            return st.reshape(x, (2 * x.shape[0],))  # the traced size, written into the op

    with pytest.raises(st.errors.InvalidArgumentError, match="depend on the size of the None"):
        st.saved_model.save(Flat(), tmp_path)

    class Centred:  # a mean over the batch is one op at every size: saved for any batch
        @st.function(input_signature=[st.TensorSpec((None, 2))])
        def f(self, x):
            return x - st.reduce_mean(x, axis=0)

    st.saved_model.save(Centred(), tmp_path)
    x = np.random.default_rng(0).normal(size=(7, 2))
    np.testing.assert_allclose(st.saved_model.load(tmp_path).f(x).numpy(), x - x.mean(0),
                               rtol=1e-14, atol=1e-15)


def test_a_keras_sequential_is_saved_as_its_inference_call(tmp_path):
    st.random.set_seed(0)
    model = st.keras.Sequential([st.keras.Input(shape=(3,)),
                                 st.keras.layers.Dense(4, activation="tanh"),
                                 st.keras.layers.Dense(2, activation="softmax")])
    st.saved_model.save(model, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    for b in (1, 7, 1000):
        x = np.random.default_rng(b).normal(size=(b, 3))
        np.testing.assert_array_equal(loaded(x).numpy(), model(x, training=False).numpy())


def test_a_float32_signature_is_replayed_in_float32(tmp_path):
    """A function saved with a float32 signature computes in float32 when loaded: arrays and
    numbers are cast to it (as TensorFlow converts them), the result is float32 and equals
    the original's; a float64 tensor matches no saved signature."""

    class Model:
        w = st.Variable(np.array([0.5, -1.25, 2.0], dtype=np.float32))

        @st.function(input_signature=[st.TensorSpec((None, 3), st.float32)])
        def f(self, x):
            return st.tanh(x * self.w) * 3.0

    m = Model()
    st.saved_model.save(m, str(tmp_path))
    loaded = st.saved_model.load(str(tmp_path))
    x = np.random.default_rng(0).normal(size=(5, 3))
    got = loaded.f(x)
    want = m.f(x.astype(np.float32))
    assert got.dtype == st.float32 and want.dtype == st.float32
    # (the loaded program replays eagerly; the original is compiled: float32 roundings)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=4e-7, atol=0)
    np.testing.assert_allclose(got.numpy(), np.tanh(x * [0.5, -1.25, 2.0]) * 3.0, rtol=1e-6)
    with pytest.raises(st.errors.InvalidArgumentError, match="dtypes"):
        loaded.f(st.constant(x))

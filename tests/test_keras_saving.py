"""Saving trained models: ``Model.save`` / ``st.keras.models.load_model`` (architecture,
weights, optimizer state; data only), pickles of variables, modules and models -- each
round trip goes on training exactly as the uninterrupted model does."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import symtape as st
from symtape import keras

ROOT = Path(__file__).resolve().parent.parent


def _data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 96)
    x = rng.normal(size=(96, 4)) + labels[:, None]
    return x, keras.utils.to_categorical(labels, 3)


def _mlp(optimizer="adam"):
    st.random.set_seed(3)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["acc"])
    return model


CONTINUE = """
import sys, json, numpy as np, symtape as st
sys.path.insert(0, {tests!r})
from test_keras_saving import _data
x, y = _data()
model = st.keras.models.load_model({path!r})
st.random.set_seed(11)
h = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
print(json.dumps(h.history["loss"]))
"""


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop", "sgd"])
def test_a_saved_model_goes_on_training_in_a_fresh_process_as_if_uninterrupted(
        tmp_path, optimizer):
    x, y = _data()
    model = _mlp(optimizer)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    path = tmp_path / "mlp.keras"
    model.save(path)
    st.random.set_seed(11)
    uninterrupted = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history["loss"]
    code = CONTINUE.format(tests=str(ROOT / "tests"), path=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == uninterrupted  # bit for bit


def test_a_loaded_model_predicts_and_evaluates_as_the_saved_one(tmp_path):
    x, y = _data()
    model = _mlp()
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert loaded.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    bare = keras.models.load_model(tmp_path / "m.keras", compile=False)
    assert bare.optimizer is None  # (not compiled: it predicts eagerly, as the model does)
    np.testing.assert_array_equal(bare.predict(x, verbose=0), model(x, training=False).numpy())


class Scale(st.Module):
    """A module with a compiled method (module level: pickles name their classes)."""

    def __init__(self):
        super().__init__()
        self.w = st.Variable([2.0, 3.0])

    @st.function
    def __call__(self, x):
        return x * self.w


def test_pickles_of_variables_modules_and_models_round_trip():
    v = st.Variable([1.0, 2.0], name="w", trainable=False)
    v2 = pickle.loads(pickle.dumps(v))
    assert v2.name == "w:0" and not v2.trainable and v2.numpy().tolist() == [1.0, 2.0]

    m = Scale()
    m(np.ones(2))
    m2 = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(m2(np.ones(2)).numpy(), [2.0, 3.0])
    assert m2.trainable_variables[0] is m2.w

    x, y = _data()
    model = _mlp()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    copy = pickle.loads(pickle.dumps(model))
    st.random.set_seed(2)
    a = model.fit(x, y, batch_size=32, epochs=2, verbose=0).history["loss"]
    st.random.set_seed(2)
    b = copy.fit(x, y, batch_size=32, epochs=2, verbose=0).history["loss"]
    assert a == b


def test_what_a_saved_model_cannot_hold_is_named(tmp_path):
    class Mine(keras.layers.Layer):
        def call(self, x):
            return x

    with pytest.raises(st.errors.InvalidArgumentError, match="a class of your own"):
        keras.Sequential([keras.Input(shape=(2,)), Mine()]).save(tmp_path / "a.keras")
    with pytest.raises(st.errors.InvalidArgumentError, match="function of your own"):
        keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(
            1, activation=lambda t: t * 2)]).save(tmp_path / "b.keras")

    class Sub(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(st.errors.InvalidArgumentError, match="subclassed Model"):
        Sub().save(tmp_path / "c.keras")


def _rewrite(path: Path, edit) -> None:
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    config = json.loads(entries["config.json"])
    edit(config)
    entries["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)


@pytest.mark.parametrize("edit, match", [
    (lambda c: c["layers"][1].update({"class": "os.system"}), "not one of st.keras.layers"),
    (lambda c: c["layers"][1]["config"].update({"units": "many"}), "cannot be made"),
    (lambda c: c["layers"][1]["config"].update({"no_such": 1}), "cannot be made"),
    (lambda c: c.update({"build_input_shape": [None, 1 << 20, 1 << 20]}), "too large"),
    (lambda c: c.update({"version": 99}), "version 1"),
    (lambda c: c["compile"]["optimizer"].update({"class": "Evil"}), "optimizer"),
    (lambda c: c["compile"]["optimizer"]["slots"].update({"_m": [0, 99]}), "slots"),
    # an attribute that is a dict but not one of the optimizer's slot tables
    (lambda c: c["compile"]["optimizer"]["slots"].update({"__dict__": []}), "slots"),
])
def test_malformed_model_files_are_refused_naming_the_fault(tmp_path, edit, match):
    x, y = _data()
    model = _mlp()
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    _rewrite(path, edit)
    with pytest.raises(st.errors.InvalidArgumentError, match=match):
        keras.models.load_model(path)


def test_a_non_model_file_is_refused(tmp_path):
    (tmp_path / "junk.keras").write_bytes(b"junk")
    with pytest.raises(st.errors.InvalidArgumentError, match="cannot read"):
        keras.models.load_model(tmp_path / "junk.keras")
    weights_only = tmp_path / "w.weights.npz"
    _mlp().save_weights(weights_only)
    with pytest.raises(st.errors.InvalidArgumentError, match="no config.json"):
        keras.models.load_model(weights_only)


def test_every_layer_kind_round_trips_its_architecture(tmp_path):
    """Convolution, pooling, batch normalization (moving statistics included), dropout,
    flatten and activation layers come back with their arguments, weights and outputs."""
    st.random.set_seed(4)
    model = keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(2),
        keras.layers.AveragePooling2D(2, padding="same"),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.25),
        keras.layers.Dense(5),
        keras.layers.Activation("softmax"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.5),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(1)
    x, labels = rng.normal(size=(16, 8, 8, 1)), rng.integers(0, 5, 16)
    model.fit(x, labels, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "cnn.keras")
    loaded = keras.models.load_model(tmp_path / "cnn.keras")
    assert [type(a) for a in loaded.layers] == [type(b) for b in model.layers]
    assert [a.get_config() for a in loaded.layers] == [b.get_config() for b in model.layers]
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded(x, training=False).numpy(),
                                  model(x, training=False).numpy())

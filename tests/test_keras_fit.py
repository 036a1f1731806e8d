"""Keras's fit loop: progress output by ``verbose``, ``validation_split``, callbacks
(History, EarlyStopping, ModelCheckpoint, LambdaCallback), weights files, ``st.keras.Input``."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import symtape as st
from symtape import keras
from symtape.keras import callbacks


def _toy(n=100):
    x = np.linspace(-1.0, 1.0, n)[:, None]
    return x, 3.0 * x - 0.5


def _model(lr=0.3):
    st.random.set_seed(0)
    model = keras.Sequential([keras.Input(shape=(1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", metrics=["mse"])
    return model


def test_verbose_one_prints_an_epoch_line_and_a_progress_bar(capsys):
    x, y = _toy()
    _model().fit(x, y, batch_size=10, epochs=2, shuffle=False)  # verbose="auto" is 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Epoch 1/2" and lines[2] == "Epoch 2/2"
    assert lines[1].startswith("10/10 [==============================] - ")
    assert " - loss: " in lines[1] and " - mse: " in lines[1]


def test_verbose_zero_prints_nothing_and_two_a_line_per_epoch(capsys):
    x, y = _toy()
    _model().fit(x, y, epochs=3, verbose=0)
    assert capsys.readouterr().out == ""
    _model().fit(x, y, epochs=3, verbose=2)
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" - ")[0] for ln in lines] == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]


def test_on_a_terminal_the_bar_is_redrawn_per_batch():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bar = callbacks.Progbar(3, out)
    for step in (1, 2, 3):
        bar.shown = -1.0  # no rate limit in the test
        bar.update(step, {"loss": float(step)})
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n")
    assert "1/3 [==========>...................] - ETA:" in text
    assert "3/3 [==============================]" in text and "loss: 3.0000" in text


def test_evaluate_and_predict_show_a_bar_with_verbose_one(capsys):
    x, y = _toy(30)
    model = _model()
    model.evaluate(x, y, batch_size=10, verbose=1)
    assert capsys.readouterr().out.startswith("3/3 [====")
    model.predict(x, batch_size=7, verbose=1)
    assert capsys.readouterr().out.startswith("5/5 [====")
    model.predict(x, verbose=0)
    assert capsys.readouterr().out == ""


def test_validation_split_holds_out_the_last_examples_and_early_stopping_stops():
    x, y = _toy(100)
    model = _model()
    stop = callbacks.EarlyStopping(monitor="val_loss", min_delta=1e-4, patience=2)
    history = model.fit(x, y, batch_size=8, epochs=200, verbose=0, validation_split=0.2,
                        callbacks=[stop])
    assert 2 < len(history.epoch) < 200 and stop.stopped_epoch == history.epoch[-1]
    assert model.history is history and set(history.history) == {
        "loss", "mse", "val_loss", "val_mse"}
    # the validation values are the model's on the last 20 examples, which it never saw
    val_loss, val_mse = model.evaluate(x[80:], y[80:], verbose=0)
    assert history.history["val_loss"][-1] == pytest.approx(val_loss, rel=1e-12)
    assert history.history["val_mse"][-1] == pytest.approx(val_mse, rel=1e-12)
    # patience: the last 'patience' epochs did not improve on the best by min_delta
    vl = history.history["val_loss"]
    assert min(vl[-2:]) > min(vl[:-2]) - 1e-4


def test_restore_best_weights_puts_back_the_best_epochs_weights():
    x, y = _toy(60)
    model = _model(lr=1.9)  # oscillating steps: val_loss is not monotone
    seen = []
    record = callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(
        (logs["val_loss"], model.get_weights())))
    stop = callbacks.EarlyStopping(patience=3, restore_best_weights=True)
    model.fit(x, y, batch_size=60, epochs=40, verbose=0, validation_split=0.25,
              callbacks=[record, stop], shuffle=False)
    best = min(range(len(seen)), key=lambda k: seen[k][0])
    for got, want in zip(model.get_weights(), seen[best][1]):
        np.testing.assert_array_equal(got, want)


def test_lambda_callback_sees_every_batch_and_epoch():
    x, y = _toy(25)
    events = []
    cb = callbacks.LambdaCallback(
        on_train_begin=lambda logs: events.append("begin"),
        on_batch_end=lambda b, logs: events.append(("batch", b, sorted(logs))),
        on_epoch_end=lambda e, logs: events.append(("epoch", e)),
        on_train_end=lambda logs: events.append("end"))
    _model().fit(x, y, batch_size=10, epochs=2, verbose=0, callbacks=[cb])
    batches = [e for e in events if e[0] == "batch"]
    assert events[0] == "begin" and events[-1] == "end"
    assert [b[1] for b in batches] == [0, 1, 2, 0, 1, 2]
    assert batches[0][2] == ["loss", "mse"]
    assert [e for e in events if e[0] == "epoch"] == [("epoch", 0), ("epoch", 1)]


def test_model_checkpoint_saves_the_best_weights_and_they_load(tmp_path):
    x, y = _toy(50)
    model = _model()
    pattern = str(tmp_path / "w-{epoch:02d}-{val_loss:.4f}.weights.npz")
    ckpt = callbacks.ModelCheckpoint(pattern, save_weights_only=True, save_best_only=True)
    history = model.fit(x, y, batch_size=10, epochs=5, verbose=0, validation_split=0.2,
                        callbacks=[ckpt])
    files = sorted(p.name for p in tmp_path.iterdir())
    vl = history.history["val_loss"]
    improved = [k for k in range(len(vl)) if vl[k] < min(vl[:k], default=np.inf)]
    assert files == [f"w-{k + 1:02d}-{vl[k]:.4f}.weights.npz" for k in improved]
    final = model.get_weights()
    model.set_weights([np.zeros_like(w) for w in final])
    model.load_weights(tmp_path / files[-1])
    for got, want in zip(model.get_weights(), final):  # the best epoch was the last here
        np.testing.assert_array_equal(got, want)
    with pytest.raises(st.errors.InvalidArgumentError, match="save_weights_only=True"):
        callbacks.ModelCheckpoint(pattern)


def test_weights_files_are_checked_before_any_weight_changes(tmp_path):
    model = _model()
    path = tmp_path / "m.weights.npz"
    model.save_weights(path)
    before = model.get_weights()
    twin = _model()  # the same architecture, other layer names: loads by order
    twin.set_weights([w + 1.0 for w in before])
    twin.load_weights(path)
    for got, want in zip(twin.get_weights(), before):
        np.testing.assert_array_equal(got, want)
    other = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    with pytest.raises(st.errors.InvalidArgumentError, match="shape"):
        other.load_weights(path)
    with zipfile.ZipFile(path) as z:  # the same entries, compressed
        entries = [(n, z.read(n)) for n in z.namelist()]
    bad = tmp_path / "compressed.npz"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, data in entries:
            z.writestr(n, data)
    with pytest.raises(st.errors.InvalidArgumentError, match="compressed"):
        model.load_weights(bad)
    obj = tmp_path / "object.npz"
    with zipfile.ZipFile(obj, "w") as z:
        for n, data in entries:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.empty((1, 1), dtype=object), allow_pickle=True)
            z.writestr(n, buf.getvalue())
    with pytest.raises(st.errors.InvalidArgumentError, match="dtype object"):
        model.load_weights(obj)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(st.errors.InvalidArgumentError, match="cannot read"):
        model.load_weights(tmp_path / "junk.npz")
    for got, want in zip(model.get_weights(), before):
        np.testing.assert_array_equal(got, want)


def test_input_builds_a_sequential_model_and_checks_example_shapes():
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
    assert model.built and [tuple(v.shape) for v in model.trainable_variables] == [(3, 2), (2,)]
    with pytest.raises(st.errors.ShapeError, match=r"declared with shape \(3,\)"):
        model(np.ones((4, 5)))
    with pytest.raises(st.errors.InvalidArgumentError, match="shape"):
        keras.Input()


@pytest.mark.parametrize("kwargs, match", [
    ({"verbose": 3}, "verbose must be"), ({"validation_split": 1.0}, "validation_split"),
    ({"callbacks": [object()]}, r"callbacks\[0\]"),
    ({"callbacks": callbacks.History()}, "list of"),
])
def test_bad_fit_arguments_are_named(kwargs, match):
    x, y = _toy(10)
    with pytest.raises(st.errors.InvalidArgumentError, match=match):
        _model().fit(x, y, **kwargs)

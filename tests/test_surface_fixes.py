"""Regression tests of the user surface: tape misuse errors, Keras argument and label
checks, and the memory a dropped compiled function leaves behind."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st


# -- GradientTape.stop_recording -----------------------------------------------------------
def test_stop_recording_outside_the_tape_raises_runtime_error_as_tensorflow():
    """TensorFlow raises RuntimeError for a tape that never entered or has exited."""
    tape = st.GradientTape()
    with pytest.raises(RuntimeError, match="Trying to stop recording a tape which is not "
                                           "recording"):
        with tape.stop_recording():
            pass
    x = st.Variable(2.0)
    with tape:
        y = x * x
    with pytest.raises(RuntimeError, match="not recording"):
        with tape.stop_recording():
            pass
    assert float(tape.gradient(y, x)) == 4.0  # the failed call left the tape usable


# -- Model.fit's counts ---------------------------------------------------------------------
def _regression_model():
    st.random.set_seed(0)
    model = st.keras.Sequential([st.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    return model


@pytest.mark.parametrize("name, value, error", [
    ("epochs", 2.5, TypeError), ("epochs", 2.0, TypeError), ("epochs", True, TypeError),
    ("epochs", "2", TypeError), ("epochs", -1, ValueError),
    ("initial_epoch", 0.5, TypeError), ("initial_epoch", -2, ValueError),
    ("batch_size", 4.0, TypeError), ("batch_size", 2.5, TypeError), ("batch_size", 0, ValueError),
])
def test_fit_refuses_counts_that_are_not_ints(name, value, error):
    """Keras loops ``range(initial_epoch, epochs)``: a float is a TypeError there, never a
    truncation to 2 epochs; the error names the argument."""
    model = _regression_model()
    before = [v.numpy() for v in model.trainable_variables]
    with pytest.raises(error, match=f"{name} must be a"):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0, **{name: value})
    for v, b in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(v.numpy(), b)  # refused before any step


def test_fit_runs_the_epochs_it_is_given():
    model = _regression_model()
    history = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=np.int64(3), initial_epoch=1,
                        batch_size=np.int32(2), verbose=0)
    assert history.epoch == [1, 2] and len(history.history["loss"]) == 2

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

"""``st.keras.backend``: Keras's float setting. Keras objects -- layers' weights and the
dtype they compute in, a model's input data, ``utils.to_categorical`` -- are float32 by
default, as in Keras, whatever ``st.config.floatx()`` (float64 by default, for exact physics)
says; ``set_floatx("float64")`` makes new ones float64.

>>> import symtape as st
>>> st.keras.backend.floatx()
'float32'
>>> st.keras.layers.Dense(2)(np.ones((1, 3))).dtype.name
'float32'
"""

from __future__ import annotations

import numpy as np

from symtape.base.errors import InvalidArgumentError

__all__ = ["floatx", "set_floatx"]

_FLOATX = {"dtype": "float32"}


def floatx() -> str:
    """The default float of Keras objects: ``"float32"`` unless set.

    >>> floatx()
    'float32'
    """
    return _FLOATX["dtype"]


def set_floatx(value: str) -> None:
    """Sets :func:`floatx` to ``"float32"`` or ``"float64"`` for the layers (and data
    conversions) made after it; layers made before keep their dtype.

    >>> import symtape as st
    >>> st.keras.backend.set_floatx("float64")
    >>> st.keras.layers.Dense(2).dtype.name
    'float64'
    >>> st.keras.backend.set_floatx("float32")
    """
    try:
        got = np.dtype(value).name if value is not None else None
    except TypeError:
        got = None
    if got not in ("float32", "float64"):
        raise InvalidArgumentError(f"st.keras.backend.set_floatx: value must be 'float32' or "
                                   f"'float64', got {value!r}")
    _FLOATX["dtype"] = got

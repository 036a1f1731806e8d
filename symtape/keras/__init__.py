"""``st.keras``: the Keras pieces TensorFlow's tutorials use -- layers, ``Sequential``,
losses, optimizers, ``utils.to_categorical`` and ``datasets.mnist`` -- written with ``st``
ops, so a model's forward pass, gradients and updates are ordinary traced tensor code
(formulas, ``st.function``, one trace for every batch size).

>>> import symtape as st
>>> model = st.keras.Sequential([st.keras.layers.Dense(3, activation="relu"),
...                              st.keras.layers.Dense(2)])
>>> model(np.ones((4, 5))).shape, len(model.trainable_variables)
((4, 2), 4)
"""

from __future__ import annotations

import numpy as np  # noqa: F401 - the doctests' namespace

from symtape.keras import (
    activations, backend, callbacks, datasets, initializers, layers, losses, metrics, optimizers,
    utils,
)
from symtape.keras.layers import Input
from symtape.keras.models import Model, Sequential

__all__ = ["layers", "losses", "metrics", "optimizers", "utils", "datasets", "activations",
           "initializers", "callbacks", "backend", "Sequential", "Model", "Input"]

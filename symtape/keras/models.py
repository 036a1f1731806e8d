"""``Sequential``: layers applied in order; ``Model`` is its base (a ``Layer``)."""

from __future__ import annotations

import inspect

import numpy as np

from ..errors import InvalidArgumentError
from .layers import Layer

__all__ = ["Model", "Sequential"]


class Model(Layer):
    """A layer made of layers (subclass it and write ``call``, as with Keras)."""

    def summary(self, print_fn=print) -> None:
        """Prints each sublayer with its output's weights count."""
        print_fn(f"Model: {self.name}")
        for layer in self._flatten(recursive=False, predicate=lambda v: isinstance(v, Layer)):
            print_fn(f"  {layer.name:<24} {type(layer).__name__:<20} {layer.count_params():>8}")
        print_fn(f"Total params: {self.count_params()}")


class Sequential(Model):
    """Layers applied one after the other; built on the first call, or at construction
    when the first layer has ``input_shape``. ``training`` reaches the layers that take it
    (BatchNormalization, Dropout).

    >>> import symtape as st
    >>> st.random.set_seed(0)
    >>> model = st.keras.Sequential([st.keras.layers.Dense(4, input_shape=(3,)),
    ...                              st.keras.layers.Activation("tanh")])
    >>> model.built, [v.shape for v in model.trainable_variables]
    (True, [(3, 4), (4,)])
    """

    def __init__(self, layers=None, name: str | None = None, **kwargs) -> None:
        super().__init__(name=name, **kwargs)
        self.layers: list = []
        for layer in layers or ():
            self.add(layer)

    def add(self, layer: Layer) -> None:
        """Appends ``layer`` (built at once when it is the first and has ``input_shape``)."""
        if not isinstance(layer, Layer):
            raise InvalidArgumentError(f"st.keras.Sequential: {layer!r} is not a layer")
        self.layers.append(layer)
        self.built = False
        first = self.layers[0]
        if first.input_shape is not None:
            self(np.zeros((1,) + first.input_shape), training=False)  # builds every layer

    def call(self, inputs, training=None):
        x = inputs
        for layer in self.layers:
            takes = "training" in inspect.signature(layer.call).parameters
            x = layer(x, training=training) if takes else layer(x)
        return x

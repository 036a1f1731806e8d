"""Keras layers: ``Layer`` (an ``st.Module`` whose weights are made on the first call, from
the input's shape), ``Dense``, ``BatchNormalization``, ``Activation``, ``Flatten``,
``Dropout``."""

from __future__ import annotations

import functools
import inspect
import itertools

import numpy as np

from symtape import Tensor, Variable, constant, nn
from symtape import math as M
from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.module import Module, snake_case
from symtape.keras import activations, backend, initializers

__all__ = ["Layer", "Dense", "Conv2D", "MaxPooling2D", "AveragePooling2D",
           "BatchNormalization", "Activation", "Flatten", "Dropout", "InputLayer", "Input"]

_COUNTS: dict = {}


def _unique(base: str) -> str:
    """Keras's layer names: ``dense``, ``dense_1``, ``dense_2``..."""
    n = next(_COUNTS.setdefault(base, itertools.count()))
    return base if n == 0 else f"{base}_{n}"


class Layer(Module):
    """A module whose weights are made by :meth:`build` on the first call (from the input's
    shape, or from ``input_shape`` given at construction: ``(None,) + input_shape``), and
    whose :meth:`call` computes its output. ``trainable=False`` freezes its weights.

    >>> import symtape as st
    >>> class Scale(st.keras.layers.Layer):
    ...     def build(self, input_shape):
    ...         self.w = self.add_weight("w", input_shape[-1:], "ones")
    ...     def call(self, x):
    ...         return x * self.w
    >>> layer = Scale()
    >>> layer(np.array([[1.0, 2.0]])).numpy(), layer.w.name
    (array([[1., 2.]], dtype=float32), 'scale/w:0')
    """

    def __init__(self, trainable: bool = True, name: str | None = None,
                 input_shape: tuple | None = None, dtype=None, **kwargs) -> None:
        if kwargs:
            raise TypeError(f"st.keras.layers.{type(self).__name__}: unknown arguments "
                            f"{', '.join(sorted(kwargs))}")
        super().__init__(name=name or _unique(snake_case(type(self).__name__)))
        self._weights: list = []  # made by add_weight, in order
        self.trainable = bool(trainable)
        self.built = False
        self.input_shape = None if input_shape is None else tuple(input_shape)
        self.dtype = np.dtype(dtype or backend.floatx())

    def __init_subclass__(cls, **kwargs) -> None:
        """Each layer class records the arguments it was made with (for :meth:`get_config`):
        the most derived class's ``__init__`` is wrapped to bind them."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        @functools.wraps(init)
        def recorded(self, *args, **kw):
            if "_made_with" not in self.__dict__:
                bound = inspect.signature(init).bind(self, *args, **kw)
                made = dict(bound.arguments)
                made.pop(next(iter(made)))  # self
                made.update(made.pop("kwargs", {}) or {})
                object.__setattr__(self, "_made_with", made)
            init(self, *args, **kw)

        cls.__init__ = recorded

    def get_config(self) -> dict:
        """The arguments the layer was made with, as names and numbers (Keras's config):
        an activation function as its name; a function of the user's own (an initializer,
        an activation) cannot be written and raises ``InvalidArgumentError`` naming it.

        >>> import symtape as st
        >>> st.keras.layers.Dense(3, activation=st.nn.relu, name="d").get_config()
        {'units': 3, 'activation': 'relu', 'name': 'd', 'dtype': 'float32'}
        """
        out = {}
        for key, value in self.__dict__.get("_made_with", {}).items():
            if key == "activation" and callable(value):
                named = activations.serialize(value)
                if named is None:
                    raise InvalidArgumentError(
                        f"{self.name}: activation {value!r} is a function of your own; a "
                        "saved model names its activations (activation='relu', ...)")
                value = named
            out[key] = _config_value(value, f"{self.name}: argument {key}")
        out["name"] = self.name
        out["dtype"] = self.dtype.name
        if not self.trainable:
            out["trainable"] = False
        return out

    def build(self, input_shape: tuple) -> None:
        """Makes the weights for inputs of ``input_shape`` (batch first)."""

    def call(self, inputs, training=None):
        """The layer's output: every layer class defines it (as in Keras, where the base
        class has none)."""
        raise NotImplementedError(f"st.keras.layers.Layer: {type(self).__name__} defines no "
                                  "call(inputs); a layer subclass computes its output there")

    def add_weight(self, name: str, shape, initializer="glorot_uniform",
                   trainable: bool = True) -> Variable:
        """A variable of ``shape`` drawn from ``initializer`` (a name or ``shape -> array``)."""
        shape = tuple(int(n) for n in shape)

        def draw() -> np.ndarray:
            value = np.asarray(initializers.get(initializer)(shape), dtype=self.dtype)
            if value.shape != shape:
                raise ShapeError(f"{self.name}: initializer of {name} gave shape "
                                 f"{value.shape}, not {shape}")
            return value

        with self.name_scope:
            # (a callable initial value is drawn outside a trace in progress: built inside
            # st.function, the weights are drawn once, as eagerly)
            var = Variable(draw, trainable=trainable, name=name)
        self._weights.append(var)
        return var

    def __call__(self, inputs, training=None, **kwargs):
        x = self._input(inputs)
        if not self.built:
            self.build(tuple(x.shape))
            self.built = True
            self.build_input_shape = (None,) + tuple(x.shape[1:])
        if "training" in inspect.signature(self.call).parameters:
            kwargs["training"] = training
        return self.call(x, **kwargs)

    def _input(self, inputs) -> Tensor:
        """Inputs as tensors of the layer's dtype (Keras casts float inputs)."""
        if not isinstance(inputs, Tensor):
            inputs = constant(np.asarray(inputs, dtype=self.dtype))
        elif inputs.dtype != self.dtype and inputs.dtype.kind in "fiu":
            inputs = M.cast(inputs, self.dtype)
        return inputs

    def _sublayers(self) -> list:
        """The layers in this layer's attributes, in the order they were set (lists and
        dicts in their order), each once."""
        out, seen = [], set()
        stack = list(reversed(list(vars(self).values())))
        while stack:
            v = stack.pop()
            if isinstance(v, Layer):
                if id(v) not in seen and v is not self:
                    seen.add(id(v))
                    out.append(v)
            elif isinstance(v, dict):
                stack.extend(reversed(list(v.values())))
            elif isinstance(v, (list, tuple)):
                stack.extend(reversed(v))
        return out

    @property
    def trainable_variables(self) -> tuple:
        """Trainable weights, Keras's order: this layer's in the order made, then each
        sublayer's (none when frozen)."""
        if not self.trainable:
            return ()
        return _once([v for v in self._weights if v.trainable] + [
            v for layer in self._sublayers() for v in layer.trainable_variables])

    @property
    def non_trainable_variables(self) -> tuple:
        """The other weights (all of them when frozen)."""
        return _once([v for v in self._weights if not (self.trainable and v.trainable)] + [
            v for layer in self._sublayers() for v in (
                layer.non_trainable_variables if self.trainable else layer.variables)])

    @property
    def variables(self) -> tuple:
        """The trainable weights, then the others (Keras's ``weights``)."""
        return _once(list(self.trainable_variables) + list(self.non_trainable_variables))

    @property
    def weights(self) -> list:
        """All the weights (Keras's name for :attr:`variables`)."""
        return list(self.variables)

    def count_params(self) -> int:
        """The number of weights' elements."""
        return int(sum(v.size for v in self.variables))


def _config_value(value, what: str):
    """``value`` as JSON data (tuples as lists), or ``InvalidArgumentError`` naming it."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_config_value(v, what) for v in value]
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    raise InvalidArgumentError(f"{what} is a {type(value).__name__}; a saved model holds "
                               "names and numbers only")


def _once(values: list) -> tuple:
    seen, out = set(), []
    for v in values:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return tuple(out)


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` over the last axis of the inputs.

    >>> import symtape as st
    >>> st.random.set_seed(0)
    >>> layer = st.keras.layers.Dense(2, activation="relu", use_bias=False)
    >>> layer(np.ones((3, 4))).shape, layer.kernel.shape, layer.bias
    ((3, 2), (4, 2), None)
    """

    def __init__(self, units: int, activation=None, use_bias: bool = True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if int(units) <= 0:
            raise InvalidArgumentError(f"st.keras.layers.Dense: units must be positive, got "
                                       f"{units}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel = self.bias = None

    def build(self, input_shape: tuple) -> None:
        if not input_shape or input_shape[-1] is None:
            raise ShapeError(f"{self.name}: the last axis of the inputs must be known, got "
                             f"shape {input_shape}")
        self.kernel = self.add_weight("kernel", (input_shape[-1], self.units),
                                      self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), self.bias_initializer)

    def call(self, inputs):
        if inputs.shape[-1] != self.kernel.shape[0]:
            raise ShapeError(f"{self.name}: inputs of shape {inputs.shape}; the layer was "
                             f"built for a last axis of {self.kernel.shape[0]}")
        y = M.matmul(inputs, self.kernel) if len(inputs.shape) == 2 else \
            M.tensordot(inputs, self.kernel, 1)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


def _pair(value, what: str) -> tuple:
    v = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(v) != 2 or any(int(k) < 1 for k in v):
        raise InvalidArgumentError(f"st.keras.layers.{what}: expected a positive int or a "
                                   f"pair of them, got {value!r}")
    return int(v[0]), int(v[1])


def _padding(value, what: str) -> str:
    if not isinstance(value, str) or value.lower() not in ("same", "valid"):
        raise InvalidArgumentError(f"st.keras.layers.{what}: padding must be 'same' or "
                                   f"'valid', got {value!r}")
    return value.upper()


class Conv2D(Layer):
    """``activation(conv2d(inputs, kernel) + bias)`` over NHWC images (``st.nn.conv2d``).

    >>> import symtape as st
    >>> st.random.set_seed(0)
    >>> conv = st.keras.layers.Conv2D(4, (3, 3), padding="same")
    >>> conv(np.ones((2, 5, 5, 1))).shape, conv.kernel.shape
    ((2, 5, 5, 4), (3, 3, 1, 4))
    """

    def __init__(self, filters: int, kernel_size, strides=(1, 1), padding: str = "valid",
                 activation=None, use_bias: bool = True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", data_format: str | None = None,
                 dilation_rate=(1, 1), **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise InvalidArgumentError("st.keras.layers.Conv2D: only channels_last images")
        if int(filters) <= 0:
            raise InvalidArgumentError(f"st.keras.layers.Conv2D: filters must be positive, "
                                       f"got {filters}")
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "Conv2D")
        self.strides = _pair(strides, "Conv2D")
        self.dilation_rate = _pair(dilation_rate, "Conv2D")
        self.padding = _padding(padding, "Conv2D")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel = self.bias = None

    def build(self, input_shape: tuple) -> None:
        if len(input_shape) != 4:
            raise ShapeError(f"{self.name}: inputs must be NHWC images (rank 4), got shape "
                             f"{input_shape}")
        self.kernel = self.add_weight("kernel", self.kernel_size + (input_shape[-1],
                                                                    self.filters),
                                      self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def call(self, inputs):
        y = nn.conv2d(inputs, self.kernel, self.strides, self.padding,
                      dilations=self.dilation_rate)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


class MaxPooling2D(Layer):
    """The maximum of each ``pool_size`` window (``strides`` default: the pool size)."""

    _pool = staticmethod(nn.max_pool2d)

    def __init__(self, pool_size=(2, 2), strides=None, padding: str = "valid",
                 data_format: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise InvalidArgumentError(f"st.keras.layers.{type(self).__name__}: only "
                                       "channels_last images")
        self.pool_size = _pair(pool_size, type(self).__name__)
        self.strides = self.pool_size if strides is None else _pair(strides,
                                                                    type(self).__name__)
        self.padding = _padding(padding, type(self).__name__)

    def call(self, inputs):
        return type(self)._pool(inputs, self.pool_size, self.strides, self.padding)


class AveragePooling2D(MaxPooling2D):
    """The mean of each ``pool_size`` window."""

    _pool = staticmethod(nn.avg_pool2d)


class BatchNormalization(Layer):
    """``gamma * (x - mean) / sqrt(var + epsilon) + beta`` over every axis but ``axis``:
    with ``training=True`` the batch's mean and (biased) variance, which also move the
    moving statistics (``moving = moving * momentum + batch * (1 - momentum)``, assignments
    an ``st.function`` step carries); otherwise the moving statistics.

    >>> import symtape as st
    >>> bn = st.keras.layers.BatchNormalization()
    >>> x = np.array([[1.0, 2.0], [3.0, 6.0]])
    >>> np.round(bn(x, training=True).numpy(), 2)
    array([[-1., -1.],
           [ 1.,  1.]], dtype=float32)
    >>> bn.moving_mean.numpy()
    array([0.02, 0.04], dtype=float32)
    """

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.momentum, self.epsilon = float(momentum), float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.gamma = self.beta = None

    def build(self, input_shape: tuple) -> None:
        rank = len(input_shape)
        if not -rank <= self.axis < rank:
            raise ShapeError(f"{self.name}: axis {self.axis} is out of range for inputs of "
                             f"shape {input_shape}")
        n = (input_shape[self.axis],)
        if self.scale:
            self.gamma = self.add_weight("gamma", n, "ones")
        if self.center:
            self.beta = self.add_weight("beta", n, "zeros")
        self.moving_mean = self.add_weight("moving_mean", n, "zeros", trainable=False)
        self.moving_variance = self.add_weight("moving_variance", n, "ones", trainable=False)

    def call(self, inputs, training=None):
        rank = len(inputs.shape)
        axis = self.axis % rank
        axes = [a for a in range(rank) if a != axis]
        shape = [inputs.shape[a] if a == axis else 1 for a in range(rank)]
        if training:
            mean, var = nn.moments(inputs, axes)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + var * (1.0 - m))
        else:
            mean, var = self.moving_mean, self.moving_variance
        inv = M.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            inv = inv * self.gamma
        y = (inputs - M.reshape(mean, shape)) * M.reshape(inv, shape)
        return y + M.reshape(self.beta, shape) if self.beta is not None else y


class InputLayer(Layer):
    """The shape (without the batch axis) and dtype of a model's examples: the first
    element of a ``Sequential`` (``st.keras.Input(shape=(3,))``), which builds the layers
    after it at once. Its output is its input.

    >>> import symtape as st
    >>> model = st.keras.Sequential([st.keras.Input(shape=(3,)), st.keras.layers.Dense(2)])
    >>> model.built, [tuple(v.shape) for v in model.trainable_variables]
    (True, [(3, 2), (2,)])
    """

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None,
                 input_shape=None, **kwargs) -> None:
        shape = input_shape if shape is None else shape
        if shape is None:
            raise InvalidArgumentError("st.keras.Input: give the shape of one example "
                                       "(shape=(n,) for vectors of n)")
        try:
            shape = tuple(None if n is None else int(n) for n in shape)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"st.keras.Input: shape must be a tuple of ints, got "
                                       f"{shape!r}") from None
        if any(n is not None and n < 0 for n in shape):
            raise InvalidArgumentError(f"st.keras.Input: shape {shape} has a negative size")
        if any(n is None for n in shape):
            raise InvalidArgumentError(f"st.keras.Input: shape {shape} has an unknown size; "
                                       "symtape builds weights from known example shapes")
        super().__init__(name=name, input_shape=shape, dtype=dtype, **kwargs)
        self.batch_size = batch_size

    def call(self, inputs):
        if tuple(inputs.shape[1:]) != self.input_shape:
            raise ShapeError(f"{self.name}: examples of shape {tuple(inputs.shape[1:])}, "
                             f"the input is declared with shape {self.input_shape}")
        return inputs


def Input(shape=None, batch_size=None, dtype=None, name=None, **kwargs) -> InputLayer:  # noqa: N802
    """Keras's ``Input``: the example shape a ``Sequential`` model starts from (an
    :class:`InputLayer`; symtape has no functional-API graph of symbolic Keras tensors --
    models are ``Sequential`` or subclasses of ``Model``).

    >>> import symtape as st
    >>> st.keras.Input(shape=(4,)).input_shape
    (4,)
    """
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name, **kwargs)


class Activation(Layer):
    """An activation as a layer (``Activation("softmax")``)."""

    def __init__(self, activation, **kwargs) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs):
        return self.activation(inputs)


class Flatten(Layer):
    """Each example's axes as one: ``(batch, ...)`` to ``(batch, n)``."""

    def call(self, inputs):
        batch = inputs.shape[0] if inputs.shape else 1
        return M.reshape(inputs, (batch, -1))


class Dropout(Layer):
    """With ``training=True``, zeros a share ``rate`` of the elements and scales the others
    by ``1 / (1 - rate)``; the identity otherwise. The mask comes from ``st.random``
    (``seed``: its own stream): drawn at each eager call, and, in a step compiled by
    ``st.function``, drawn anew at each call of the compiled step (the same masks, in the
    same order, as the step run eagerly).

    >>> import symtape as st
    >>> st.random.set_seed(0)
    >>> out = Dropout(0.5)(np.ones((2, 4)), training=True).numpy()
    >>> sorted(set(out.ravel().tolist())) in ([0.0, 2.0], [2.0], [0.0])
    True
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise InvalidArgumentError(f"st.keras.layers.Dropout: rate must be in [0, 1), "
                                       f"got {rate}")
        self.rate, self.seed = float(rate), seed

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        return nn.dropout(inputs, self.rate, seed=self.seed)

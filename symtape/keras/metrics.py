"""Keras metrics: functions of one batch (``categorical_accuracy(y, pred)``, one value per
example) and the stateful classes ``Model.compile``/``evaluate``/``fit`` keep (``Mean``,
``Accuracy``, ``CategoricalAccuracy``...): ``update_state`` adds a batch, ``result`` is the
mean so far, ``reset_state`` starts again. Their state is two non-trainable variables
(``total``, ``count``), so an update can run inside ``st.function``.

>>> import symtape as st
>>> m = st.keras.metrics.CategoricalAccuracy()
>>> m.update_state([[0.0, 1.0], [1.0, 0.0]], [[0.2, 0.8], [0.3, 0.7]])
>>> m.update_state([[0.0, 1.0]], [[0.1, 0.9]])
>>> float(m.result())
0.6666666666666666
"""

from __future__ import annotations

from symtape import Tensor, Variable, constant
from symtape import math as M
from symtape.base.errors import InvalidArgumentError
from symtape.keras import losses
from symtape.module import snake_case

__all__ = ["Metric", "Mean", "MeanMetricWrapper", "Accuracy", "CategoricalAccuracy",
           "SparseCategoricalAccuracy", "BinaryAccuracy", "MeanSquaredError",
           "accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
           "binary_accuracy", "get"]


def _pair(y_true, y_pred) -> tuple:
    true = y_true if isinstance(y_true, Tensor) else constant(y_true)
    pred = y_pred if isinstance(y_pred, Tensor) else constant(y_pred)
    return true, pred


def accuracy(y_true, y_pred):
    """1.0 where ``y_pred`` equals ``y_true`` exactly, else 0.0.

    >>> accuracy([1.0, 2.0], [1.0, 3.0]).numpy()
    array([1., 0.])
    """
    true, pred = _pair(y_true, y_pred)
    return M.cast(M.equal(true, M.cast(pred, true.dtype)), "float64")


def categorical_accuracy(y_true, y_pred):
    """1.0 where the largest prediction is at the one-hot label's class (the first of equal
    largest ones, as Keras's ``argmax``), per example.

    >>> categorical_accuracy([[0, 1], [1, 0]], [[0.2, 0.8], [0.3, 0.7]]).numpy()
    array([1., 0.])
    """
    true, pred = _pair(y_true, y_pred)
    return M.cast(M.equal(M.argmax(true, axis=-1), M.argmax(pred, axis=-1)), "float64")


def sparse_categorical_accuracy(y_true, y_pred):
    """:func:`categorical_accuracy` of integer labels (shape ``(batch,)`` or
    ``(batch, 1)``).

    >>> sparse_categorical_accuracy([1, 1], [[0.2, 0.8], [0.3, 0.1]]).numpy()
    array([1., 0.])
    """
    true, pred = _pair(y_true, y_pred)
    if true.ndim == pred.ndim and true.shape[-1] == 1:
        true = M.squeeze(true, axis=-1)
    labels = M.cast(true, "int64")
    return M.cast(M.equal(labels, M.argmax(pred, axis=-1)), "float64")


def binary_accuracy(y_true, y_pred, threshold: float = 0.5):
    """The share of the last axis where ``y_pred > threshold`` agrees with ``y_true``.

    >>> binary_accuracy([[1.0, 0.0]], [[0.9, 0.6]]).numpy()
    array([0.5])
    """
    true, pred = _pair(y_true, y_pred)
    hit = M.equal(M.cast(true, "float64"), M.cast(M.greater(pred, threshold), "float64"))
    return M.reduce_mean(M.cast(hit, "float64"), axis=-1)


class Metric:
    """A running mean: ``total`` and ``count`` variables (non-trainable, float64)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or snake_case(type(self).__name__)
        self.total = Variable(0.0, name=f"{self.name}/total", trainable=False)
        self.count = Variable(0.0, name=f"{self.name}/count", trainable=False)

    @property
    def variables(self) -> list:
        """The metric's state."""
        return [self.total, self.count]

    def _add(self, values, sample_weight=None) -> None:
        values = M.cast(values if isinstance(values, Tensor) else constant(values), "float64")
        if sample_weight is None:
            self.total.assign_add(M.reduce_sum(values))
            self.count.assign_add(float(values.size))
            return
        weight = M.cast(sample_weight if isinstance(sample_weight, Tensor)
                        else constant(sample_weight), "float64")
        weight = M.broadcast_to(weight, values.shape) if weight.shape != values.shape \
            else weight
        self.total.assign_add(M.reduce_sum(values * weight))
        self.count.assign_add(M.reduce_sum(weight))

    def result(self) -> Tensor:
        """The mean of the values added so far (0 before any)."""
        return M.divide_no_nan(self.total, self.count)

    def reset_state(self) -> None:
        """Forget the values added so far."""
        self.total.assign(0.0)
        self.count.assign(0.0)

    reset_states = reset_state  # Keras 2's name

    def __call__(self, *args, **kwargs) -> Tensor:
        """``update_state`` then ``result``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class Mean(Metric):
    """The mean of the values given to :meth:`update_state`.

    >>> import symtape as st
    >>> m = st.keras.metrics.Mean()
    >>> m.update_state([1.0, 2.0]); m.update_state(6.0)
    >>> float(m.result())
    3.0
    """

    def update_state(self, values, sample_weight=None) -> None:
        """Adds ``values`` (each weighted by ``sample_weight``)."""
        self._add(values, sample_weight)


class MeanMetricWrapper(Metric):
    """The mean of ``fn(y_true, y_pred)`` over the examples given."""

    def __init__(self, fn, name: str | None = None) -> None:
        super().__init__(name)
        self.fn = fn

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        """Adds one batch's values of the metric."""
        self._add(self.fn(y_true, y_pred), sample_weight)


def _wrapper(fn, default: str):
    class Wrapped(MeanMetricWrapper):
        def __init__(self, name: str | None = None) -> None:
            super().__init__(fn, name or default)

    return Wrapped


class Accuracy(_wrapper(accuracy, "accuracy")):
    """The share of predictions equal to their labels."""


class CategoricalAccuracy(_wrapper(categorical_accuracy, "categorical_accuracy")):
    """The share of examples whose largest prediction is their one-hot label's class."""


class SparseCategoricalAccuracy(_wrapper(sparse_categorical_accuracy,
                                         "sparse_categorical_accuracy")):
    """The share of examples whose largest prediction is their integer label."""


class BinaryAccuracy(_wrapper(binary_accuracy, "binary_accuracy")):
    """The share of thresholded predictions (``> 0.5``) equal to their labels."""


class MeanSquaredError(_wrapper(losses.mean_squared_error, "mean_squared_error")):
    """The mean of the squared errors."""


_BY_NAME = {
    "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "binary_accuracy": BinaryAccuracy,
    "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError,
}

#: which accuracy "acc"/"accuracy" means, by the loss it is compiled with (Keras's rule)
_ACCURACY_OF = {
    losses.categorical_crossentropy: CategoricalAccuracy,
    losses.sparse_categorical_crossentropy: SparseCategoricalAccuracy,
    losses.binary_crossentropy: BinaryAccuracy,
}


def get(identifier, loss=None) -> Metric:
    """A metric object from a name (``"acc"``/``"accuracy"``: the accuracy that goes with
    ``loss``, as Keras chooses it), a metric object (itself) or a function ``(y_true,
    y_pred) -> values`` (their mean).

    >>> import symtape as st
    >>> type(get("acc", st.keras.losses.categorical_crossentropy)).__name__, get("acc").name
    ('CategoricalAccuracy', 'acc')
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        if identifier in ("acc", "accuracy"):
            fn = getattr(loss, "fn", loss)  # a loss class's function
            return _ACCURACY_OF.get(fn, Accuracy)(name=identifier)
        if identifier in _BY_NAME:
            return _BY_NAME[identifier](name=identifier)
        raise InvalidArgumentError(f"st.keras.metrics: unknown metric {identifier!r} (known: "
                                   f"acc, accuracy, {', '.join(sorted(_BY_NAME))})")
    if callable(identifier):
        return MeanMetricWrapper(identifier, getattr(identifier, "__name__", None))
    raise InvalidArgumentError(f"st.keras.metrics: a metric is a name, a Metric or a "
                               f"function, got {type(identifier).__name__}")

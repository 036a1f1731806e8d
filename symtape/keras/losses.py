"""Keras losses: functions give one value per example (``categorical_crossentropy(y,
pred)`` of shape ``(batch,)``); the classes average them over the batch."""

from __future__ import annotations

from .. import math as M
from .. import nn
from ..errors import InvalidArgumentError
from ..tensor import Tensor, constant

__all__ = ["categorical_crossentropy", "sparse_categorical_crossentropy",
           "mean_squared_error", "binary_crossentropy", "CategoricalCrossentropy",
           "SparseCategoricalCrossentropy", "MeanSquaredError", "BinaryCrossentropy",
           "EPSILON", "get"]

#: Keras's fuzz factor: probabilities are clipped to ``[EPSILON, 1 - EPSILON]``.
EPSILON = 1e-7


def _pair(y_true, y_pred) -> tuple:
    pred = y_pred if isinstance(y_pred, Tensor) else constant(y_pred)
    true = y_true if isinstance(y_true, Tensor) else constant(y_true)
    if true.dtype != pred.dtype:
        true = M.cast(true, pred.dtype)
    return true, pred


def categorical_crossentropy(y_true, y_pred, from_logits: bool = False, axis: int = -1):
    """``-sum(y_true * log(p))`` along ``axis``: ``p`` the softmax of logits, or the
    predicted probabilities normalised to sum 1 and clipped to ``[EPSILON, 1 - EPSILON]``.

    >>> round(float(categorical_crossentropy([[0.0, 1.0]], [[0.5, 0.5]])[0]), 12)  # log 2
    0.69314718056
    """
    true, pred = _pair(y_true, y_pred)
    if from_logits:
        return nn.softmax_cross_entropy_with_logits(true, pred, axis=axis)
    p = pred / M.reduce_sum(pred, axis=axis, keepdims=True)
    p = M.clip_by_value(p, EPSILON, 1.0 - EPSILON)
    return -M.reduce_sum(true * M.log(p), axis=axis)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits: bool = False,
                                    axis: int = -1):
    """:func:`categorical_crossentropy` of integer labels.

    >>> round(float(sparse_categorical_crossentropy([1], [[0.5, 0.5]])[0]), 12)
    0.69314718056
    """
    true, pred = _pair(y_true, y_pred)
    n = pred.shape[axis]
    labels = M.cast(true, "int64") if true.dtype.kind == "f" else true
    one_hot = M.cast(M.equal(M.expand_dims(labels, -1), M.range(n, dtype=labels.dtype)),
                     pred.dtype)
    return categorical_crossentropy(one_hot, pred, from_logits=from_logits, axis=axis)


def mean_squared_error(y_true, y_pred):
    """``mean((y_pred - y_true)**2)`` over the last axis."""
    true, pred = _pair(y_true, y_pred)
    return M.reduce_mean(M.square(pred - true), axis=-1)


def binary_crossentropy(y_true, y_pred, from_logits: bool = False):
    """``-mean(y log p + (1 - y) log(1 - p))`` over the last axis (``p`` clipped, or the
    sigmoid of logits)."""
    true, pred = _pair(y_true, y_pred)
    if from_logits:
        return M.reduce_mean(nn.sigmoid_cross_entropy_with_logits(true, pred), axis=-1)
    p = M.clip_by_value(pred, EPSILON, 1.0 - EPSILON)
    return -M.reduce_mean(true * M.log(p) + (1.0 - true) * M.log(1.0 - p), axis=-1)


class _Mean:
    fn = None

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = bool(from_logits)

    def __call__(self, y_true, y_pred):
        return M.reduce_mean(type(self).fn(y_true, y_pred, from_logits=self.from_logits))


class CategoricalCrossentropy(_Mean):
    """The batch mean of :func:`categorical_crossentropy`."""
    fn = staticmethod(categorical_crossentropy)


class SparseCategoricalCrossentropy(_Mean):
    """The batch mean of :func:`sparse_categorical_crossentropy`."""
    fn = staticmethod(sparse_categorical_crossentropy)


class BinaryCrossentropy(_Mean):
    """The batch mean of :func:`binary_crossentropy`."""
    fn = staticmethod(binary_crossentropy)


class MeanSquaredError:
    """The batch mean of :func:`mean_squared_error`."""

    def __call__(self, y_true, y_pred):
        return M.reduce_mean(mean_squared_error(y_true, y_pred))


_BY_NAME = {
    "categorical_crossentropy": categorical_crossentropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "binary_crossentropy": binary_crossentropy,
    "mean_squared_error": mean_squared_error, "mse": mean_squared_error,
}


def get(identifier):
    """A loss function ``(y_true, y_pred) -> values`` from its name, or the function (or
    loss object) itself.

    >>> get("mse") is mean_squared_error
    True
    """
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise InvalidArgumentError(f"st.keras.losses: unknown loss {identifier!r} (known: "
                                       f"{', '.join(sorted(_BY_NAME))})")
        return _BY_NAME[identifier]
    if callable(identifier):
        return identifier
    raise InvalidArgumentError(f"st.keras.losses: a loss is a name or a function, got "
                               f"{type(identifier).__name__}")

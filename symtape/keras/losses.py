"""Keras losses: functions give one value per example (``categorical_crossentropy(y,
pred)`` of shape ``(batch,)``); the classes average them over the batch.

Labels are checked as TensorFlow checks them. One-hot labels have the predictions' shape;
class indices (shape ``(batch,)`` or ``(batch, 1)``) given to a one-hot loss are refused with
a pointer to the sparse loss. Sparse labels are whole numbers in ``[0, n_classes)``
(integer-valued floats such as ``1.0`` are accepted, as Keras accepts them). Labels are data:
their values are checked where they are known (eager calls, ``Model.fit`` and
``Model.evaluate``, which check every label before they run). Inside a traced
``st.function`` labels are inputs with no value yet, so only their shapes are checked when it
is traced; a label value outside ``[0, n_classes)`` or not a whole number then matches no
class and adds nothing to the loss -- check such labels before the call.
"""

from __future__ import annotations

import numpy as np

from symtape import Tensor, constant, nn
from symtape import math as M
from symtape.base.errors import InvalidArgumentError, ShapeError, UnboundLeafError

__all__ = ["categorical_crossentropy", "sparse_categorical_crossentropy",
           "mean_squared_error", "binary_crossentropy", "CategoricalCrossentropy",
           "SparseCategoricalCrossentropy", "MeanSquaredError", "BinaryCrossentropy",
           "EPSILON", "get", "check_labels", "takes_labels", "serialize"]

#: Keras's fuzz factor: probabilities are clipped to ``[EPSILON, 1 - EPSILON]``.
EPSILON = 1e-7


def _tensors(y_true, y_pred) -> tuple:
    pred = y_pred if isinstance(y_pred, Tensor) else constant(y_pred)
    true = y_true if isinstance(y_true, Tensor) else constant(y_true)
    return true, pred


def _pair(y_true, y_pred) -> tuple:
    true, pred = _tensors(y_true, y_pred)
    if true.dtype != pred.dtype:
        true = M.cast(true, pred.dtype)
    return true, pred


def _known(t: Tensor) -> np.ndarray | None:
    """The values of ``t``, or None inside a traced function (an input has none yet)."""
    try:
        return np.asarray(t.numpy())
    except UnboundLeafError:
        return None


def _class_axis(pred_shape: tuple, axis: int, what: str) -> int:
    if not -len(pred_shape) <= axis < len(pred_shape):
        raise ShapeError(f"{what}: axis {axis} is out of range for predictions of shape "
                         f"{pred_shape}")
    return axis % len(pred_shape)


# -- label rules: (labels' shape, their values or None, predictions' shape, axis, what) -----
def _one_hot_labels(shape: tuple, values, pred_shape: tuple, axis: int, what: str) -> None:
    """One-hot (or probability) labels have the predictions' shape; class indices are
    refused with the loss that takes them."""
    if shape == pred_shape:
        return
    ax = _class_axis(pred_shape, axis, what)
    indices = pred_shape[:ax] + pred_shape[ax + 1:]
    if shape in (indices, indices + (1,)):
        raise ShapeError(f"{what}: labels of shape {shape} look like class indices, not "
                         f"one-hot rows like the predictions' shape {pred_shape}: use "
                         "sparse_categorical_crossentropy for integer labels (or one-hot "
                         "encode them with st.keras.utils.to_categorical)")
    raise ShapeError(f"{what}: labels of shape {shape} and predictions of shape "
                     f"{pred_shape} differ; one-hot labels have the predictions' shape")


def _sparse_labels(shape: tuple, values, pred_shape: tuple, axis: int, what: str) -> None:
    """Class indices: one per prediction row (a trailing axis of 1 allowed, as Keras
    squeezes it); known values are whole numbers in ``[0, n_classes)``."""
    ax = _class_axis(pred_shape, axis, what)
    indices = pred_shape[:ax] + pred_shape[ax + 1:]
    if shape not in (indices, indices + (1,)):
        hint = " (these look like one-hot labels: use categorical_crossentropy)" \
            if shape == pred_shape else ""
        raise ShapeError(f"{what}: labels of shape {shape} do not match predictions of shape "
                         f"{pred_shape}: give one class index per example, shape {indices}"
                         + hint)
    if values is not None:
        _check_indices(np.asarray(values), pred_shape[ax], what)


def _check_indices(values: np.ndarray, n: int, what: str) -> None:
    if values.dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{what}: labels must be class indices (numbers), got "
                                   f"dtype {values.dtype}")
    whole = np.isfinite(values) & (values == np.floor(values)) if values.dtype.kind == "f" \
        else np.ones(values.shape, bool)
    if not whole.all():
        at = tuple(int(i) for i in np.argwhere(~whole)[0])
        raise InvalidArgumentError(
            f"{what}: labels must be class indices (whole numbers in [0, {n})), got "
            f"{values[at].item()!r} at index {at}; for one-hot or probability labels use "
            "categorical_crossentropy")
    outside = (values < 0) | (values >= n)
    if outside.any():
        at = tuple(int(i) for i in np.argwhere(outside)[0])
        value = int(values[at])
        raise InvalidArgumentError(
            f"{what}: Received a label value of {value} at index {at} which is outside the "
            f"valid range of [0, {n}): labels are class indices of the {n} classes predicted")


def categorical_crossentropy(y_true, y_pred, from_logits: bool = False, axis: int = -1):
    """``-sum(y_true * log(p))`` along ``axis``: ``p`` the softmax of logits, or the
    predicted probabilities normalised to sum 1 and clipped to ``[EPSILON, 1 - EPSILON]``.

    ``y_true`` has ``y_pred``'s shape (one-hot rows); integer class indices are refused
    with a ``ShapeError`` that points to :func:`sparse_categorical_crossentropy`.

    >>> round(float(categorical_crossentropy([[0.0, 1.0]], [[0.5, 0.5]])[0]), 12)  # log 2
    0.69314718056
    """
    true, pred = _pair(y_true, y_pred)
    _one_hot_labels(true.shape, None, pred.shape, axis,
                    "st.keras.losses.categorical_crossentropy")
    if from_logits:
        return nn.softmax_cross_entropy_with_logits(true, pred, axis=axis)
    p = pred / M.reduce_sum(pred, axis=axis, keepdims=True)
    p = M.clip_by_value(p, EPSILON, 1.0 - EPSILON)
    return -M.reduce_sum(true * M.log(p), axis=axis)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits: bool = False,
                                    axis: int = -1):
    """:func:`categorical_crossentropy` of integer labels: ``y_true`` of shape
    ``y_pred.shape`` without ``axis`` (or with a trailing axis of 1), each a class index in
    ``[0, n_classes)``; integer-valued floats are accepted. Known labels that are not whole
    numbers in that range raise ``InvalidArgumentError`` (see the module's note on labels
    inside a traced function).

    >>> round(float(sparse_categorical_crossentropy([1], [[0.5, 0.5]])[0]), 12)
    0.69314718056
    >>> sparse_categorical_crossentropy([2], [[0.5, 0.5]])
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: st.keras.losses.sparse_categorical_crossentropy: \
Received a label value of 2 at index (0,) which is outside the valid range of [0, 2): labels \
are class indices of the 2 classes predicted
    """
    true, pred = _tensors(y_true, y_pred)
    _sparse_labels(true.shape, _known(true), pred.shape, axis,
                   "st.keras.losses.sparse_categorical_crossentropy")
    ax = _class_axis(pred.shape, axis, "st.keras.losses.sparse_categorical_crossentropy")
    if true.ndim == pred.ndim:
        true = M.squeeze(true, axis=-1)
    n = pred.shape[ax]
    classes = M.reshape(M.range(n, dtype=true.dtype),
                        [n if i == ax else 1 for i in range(pred.ndim)])
    one_hot = M.cast(M.equal(M.expand_dims(true, ax), classes), pred.dtype)
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


#: the label rule of each loss that takes class labels
_LABEL_RULES = {categorical_crossentropy: _one_hot_labels,
                sparse_categorical_crossentropy: _sparse_labels}


def takes_labels(loss) -> bool:
    """Whether ``loss`` (a function, or a loss object) has a rule for its labels that
    :func:`check_labels` applies.

    >>> takes_labels(SparseCategoricalCrossentropy()), takes_labels(mean_squared_error)
    (True, False)
    """
    return getattr(loss, "fn", loss) in _LABEL_RULES


def check_labels(loss, y_true, pred_shape: tuple, what: str) -> None:
    """Raises ``ShapeError`` or ``InvalidArgumentError`` (naming ``what``) unless
    ``y_true`` (an array of every label) is valid for ``loss`` against predictions of shape
    ``pred_shape``; other losses accept any labels.

    >>> check_labels("sparse_categorical_crossentropy", [0, 2, 1], (3, 3), "fit: y")
    >>> check_labels(SparseCategoricalCrossentropy(), [0, 2.5, 1], (3, 3), "fit: y")
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: fit: y: labels must be class indices (whole numbers \
in [0, 3)), got 2.5 at index (1,); for one-hot or probability labels use categorical_crossentropy
    """
    fn = get(loss) if isinstance(loss, str) else loss
    rule = _LABEL_RULES.get(getattr(fn, "fn", fn))
    if rule is not None:
        values = np.asarray(y_true)
        rule(values.shape, values, tuple(pred_shape), -1, what)


def serialize(loss) -> str | None:
    """The name :func:`get` knows the loss function ``loss`` by, or None.

    >>> serialize(mean_squared_error)
    'mean_squared_error'
    """
    if isinstance(loss, str):
        return loss if loss in _BY_NAME else None
    names = [n for n, fn in _BY_NAME.items() if fn is loss]
    return max(names, key=len) if names else None

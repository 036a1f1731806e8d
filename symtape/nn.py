"""``st.nn``: activations, softmax and cross-entropies (TensorFlow's conventions)."""

from __future__ import annotations

import functools

from . import ops
from .errors import InvalidArgumentError
from .math import _entry
from .math import sigmoid, softplus, tanh  # TensorFlow exposes these under tf.nn too

__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "softmax", "log_softmax",
           "sigmoid_cross_entropy_with_logits", "softmax_cross_entropy_with_logits", "l2_loss",
           "sigmoid", "softplus", "tanh"]


#: ``name -> composite`` of this module (the op-table test asks for a row per entry).
COMPOSITES: dict = {}
_composite = functools.partial(_entry, COMPOSITES)


@_composite("leaky_relu")
def _leaky_relu(features, alpha=0.2):
    """``features`` where positive, ``alpha * features`` elsewhere."""
    return ops.leaky_relu_op(float(alpha)).bind(features)



def relu(features, name=None):
    """``max(x, 0)``; its derivative at 0 is 0 (TF).

    >>> import symtape as st
    >>> st.nn.relu(st.constant([-1.0, 2.0])).numpy()
    array([0., 2.])
    """
    return ops.relu.bind(features)


def relu6(features, name=None):
    """``min(max(x, 0), 6)``.

    >>> import symtape as st
    >>> st.nn.relu6(st.constant([-1.0, 7.0])).numpy()
    array([0., 6.])
    """
    return ops.relu6.bind(features)


def leaky_relu(features, alpha=0.2, name=None):
    """``x`` where positive, ``alpha * x`` elsewhere.

    >>> import symtape as st
    >>> st.nn.leaky_relu(st.constant([-1.0, 2.0])).numpy()
    array([-0.2,  2. ])
    """
    return _leaky_relu(features, alpha)


def elu(features, name=None):
    """``x`` where positive, ``exp(x) - 1`` elsewhere.

    >>> import symtape as st
    >>> st.nn.elu(st.symbol("x")).formula()
    Piecewise((x, x > 0), (expm1(x), True))
    """
    return ops.elu.bind(features)


def selu(features, name=None):
    """``scale * elu`` with ``alpha`` and ``scale`` of self-normalising networks.

    >>> import symtape as st
    >>> round(float(st.nn.selu(st.constant(1.0))), 6)
    1.050701
    """
    return ops.selu.bind(features)


def _axis(axis):
    return -1 if axis is None else int(axis)


def softmax(logits, axis=None, name=None):
    """``exp(x) / sum(exp(x))`` along ``axis`` (default last), computed stably.

    >>> import symtape as st
    >>> st.nn.softmax(st.constant([0.0, 0.0])).numpy()
    array([0.5, 0.5])
    """
    return ops.softmax.bind(logits, axis=_axis(axis))


def log_softmax(logits, axis=None, name=None):
    """``x - logsumexp(x)`` along ``axis`` (default last).

    >>> import symtape as st
    >>> st.nn.log_softmax(st.constant([0.0, 0.0])).numpy()
    array([-0.69314718, -0.69314718])
    """
    return ops.log_softmax.bind(logits, axis=_axis(axis))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``max(x, 0) - x*z + log(1 + exp(-|x|))`` for logits ``x`` and labels ``z``.

    >>> import symtape as st
    >>> round(float(st.nn.sigmoid_cross_entropy_with_logits(1.0, st.constant(0.0))), 6)
    0.693147
    """
    if labels is None or logits is None:
        raise InvalidArgumentError("st.nn.sigmoid_cross_entropy_with_logits: both labels and "
                                   "logits are required")
    return ops.sigmoid_cross_entropy_with_logits.bind(labels, logits)


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """``-sum(labels * log_softmax(logits))`` along ``axis``.

    >>> import symtape as st
    >>> round(float(st.nn.softmax_cross_entropy_with_logits([1.0, 0.0],
    ...                                                      st.constant([0.0, 0.0]))), 6)
    0.693147
    """
    return ops.softmax_cross_entropy_with_logits.bind(labels, logits, axis=_axis(axis))


def l2_loss(t, name=None):
    """``sum(t**2) / 2``.

    >>> import symtape as st
    >>> float(st.nn.l2_loss(st.constant([3.0, 4.0])))
    12.5
    """
    return ops.divide.bind(ops.reduce_sum.bind(ops.square.bind(t), axis=None), 2)


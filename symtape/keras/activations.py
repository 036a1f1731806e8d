"""Keras activations by name (``Dense(8, activation="relu")``)."""

from __future__ import annotations

from collections.abc import Callable

from symtape import nn
from symtape.base.errors import InvalidArgumentError

__all__ = ["get", "linear", "serialize"]


def linear(x):
    """The identity."""
    return x


_NAMED = {
    "linear": linear, "relu": nn.relu, "relu6": nn.relu6, "elu": nn.elu, "selu": nn.selu,
    "sigmoid": nn.sigmoid, "tanh": nn.tanh, "softmax": nn.softmax, "softplus": nn.softplus,
    "leaky_relu": nn.leaky_relu, "log_softmax": nn.log_softmax,
}


def get(identifier) -> Callable:
    """The activation ``identifier`` names (or is: a callable; None is linear).

    >>> get("relu") is nn.relu, get(None) is linear
    (True, True)
    """
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    fn = _NAMED.get(identifier) if isinstance(identifier, str) else None
    if fn is None:
        raise InvalidArgumentError(f"st.keras: unknown activation {identifier!r}; known: "
                                   f"{', '.join(sorted(_NAMED))}, or a callable")
    return fn


def serialize(fn) -> str | None:
    """The name :func:`get` knows ``fn`` by, or None (a function of the user's own).

    >>> serialize(nn.relu), serialize(lambda x: x)
    ('relu', None)
    """
    for name, known in _NAMED.items():
        if known is fn:
            return name
    return None

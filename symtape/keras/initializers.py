"""Keras weight initializers by name, drawn from ``st.random``'s generator (so
``st.random.set_seed`` makes them repeat)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from symtape import random
from symtape.base.errors import InvalidArgumentError

__all__ = ["get"]


def _fans(shape: tuple) -> tuple:
    """Keras's fan-in and fan-out: a kernel's last two axes times its receptive field."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    field = math.prod(shape[:-2])
    return shape[-2] * field, shape[-1] * field


def _uniform(limit: float, shape: tuple) -> np.ndarray:
    return random.uniform(shape, -limit, limit).numpy()


def _truncated(stddev: float, shape: tuple) -> np.ndarray:
    """Normal draws redrawn beyond two standard deviations (Keras's truncated normal)."""
    out = random.normal(shape).numpy()
    while True:
        bad = np.abs(out) > 2.0
        if not bad.any():
            return out * stddev
        out[bad] = random.normal([int(bad.sum())]).numpy()


_NAMED: dict[str, Callable] = {
    "zeros": lambda shape: np.zeros(shape),
    "ones": lambda shape: np.ones(shape),
    "glorot_uniform": lambda shape: _uniform(math.sqrt(6.0 / sum(_fans(shape))), shape),
    "glorot_normal": lambda shape: _truncated(math.sqrt(2.0 / sum(_fans(shape))) / .87962566,
                                              shape),
    "he_uniform": lambda shape: _uniform(math.sqrt(6.0 / _fans(shape)[0]), shape),
    "he_normal": lambda shape: _truncated(math.sqrt(2.0 / _fans(shape)[0]) / .87962566,
                                          shape),
    "random_normal": lambda shape: random.normal(shape, 0.0, 0.05).numpy(),
    "random_uniform": lambda shape: _uniform(0.05, shape),
}


def get(identifier) -> Callable:
    """``shape -> array`` for an initializer name (or a callable taking the shape).

    >>> get("zeros")((2,)).tolist()
    [0.0, 0.0]
    >>> bool(np.abs(get("glorot_uniform")((3, 4))).max() <= np.sqrt(6 / 7))
    True
    """
    if callable(identifier):
        return identifier
    fn = _NAMED.get(identifier) if isinstance(identifier, str) else None
    if fn is None:
        raise InvalidArgumentError(f"st.keras: unknown initializer {identifier!r}; known: "
                                   f"{', '.join(sorted(_NAMED))}, or a callable of the shape")
    return fn

"""How a call's arguments key ``st.function``'s traces (as ``tf.function`` keys them): which
arguments are Python values (part of the key), the dtype an argument is traced as, a
Python value's key, whether a shape fits a signature, and a signature's batch."""

from __future__ import annotations

import numpy as np

from symtape.core.tensor import floatx
from symtape.core.variables import Tensor

__all__ = ["python_value", "argument_dtype", "value_key", "fits", "batch_arguments"]


def python_value(a) -> bool:
    """Whether a call argument is a Python value that is part of the trace key (as
    ``tf.function`` keys them): bools, ints, strings, None, modules, optimizers, any other
    object; not tensors, arrays, numpy scalars, floats or lists of floats (tensors: one
    trace serves all their values).

    >>> [python_value(a) for a in (3, True, "relu", None, 2.5, np.float64(1.0), [1.0, 2.0])]
    [True, True, True, True, False, False, False]

    NumPy integer and bool scalars are Python values too (``np.int64(5)`` from an array's
    ``shape`` or ``argmax`` serves ``range`` and ``reshape``, as in TensorFlow):

    >>> [python_value(a) for a in (np.int64(5), np.bool_(True), np.float32(1.0))]
    [True, True, False]
    """
    if isinstance(a, (np.integer, np.bool_)):
        return True
    if isinstance(a, (Tensor, np.ndarray, np.generic, float)):
        return False
    if isinstance(a, (list, tuple)) and a:
        try:
            return np.asarray(a).dtype.kind != "f"
        except (ValueError, TypeError):
            return True
    return True


def argument_dtype(a) -> str:
    """The dtype a call's argument is traced as (no input_signature or dtype=): a float32 or
    float64 tensor's, array's or numpy scalar's own, else (Python numbers) floatx()."""
    dtype = getattr(a, "dtype", None)
    try:
        name = _FLOAT_NAMES.get(dtype)  # (np.dtype's .name is slow: a call reads this)
    except TypeError:  # (an unhashable dtype attribute)
        name = None
    if name is None and dtype is not None and np.dtype(dtype).name in ("float32", "float64"):
        name = np.dtype(dtype).name
    return name or _FLOAT_NAMES.get(floatx()) or floatx().name


_FLOAT_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def value_key(value, held: dict):
    """The trace-key form of a Python value: hashable numbers, strings and None by value,
    lists and tuples element by element, other objects by identity (``held`` keeps them
    alive, so an identity is never reused by another object)."""
    if value is None or isinstance(value, (bool, int, str, float, np.generic)):
        return type(value).__name__, value
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(value_key(v, held) for v in value)
    held[id(value)] = value
    return "id", id(value)


def fits(spec_shape: tuple, shape: tuple) -> bool:
    """Whether ``shape`` is one of the shapes ``spec_shape`` allows (``None``: any size)."""
    return len(spec_shape) == len(shape) and all(
        d is None or d == k for d, k in zip(spec_shape, shape))


def batch_arguments(sig) -> list[bool] | None:
    """For a signature whose only unknown dimensions lead some arguments' shapes (a batch),
    which arguments have one; None for any other signature.

    >>> from symtape.codegen import TensorSpec
    >>> batch_arguments([TensorSpec((None, 3)), TensorSpec(()), TensorSpec((None,))])
    [True, False, True]
    >>> batch_arguments([TensorSpec((2, None))]) is None
    True
    """
    if sig is None:
        return None
    flags = []
    for spec in sig:
        if spec.shape is None or any(d is None for d in tuple(spec.shape)[1:]):
            return None
        flags.append(len(spec.shape) > 0 and spec.shape[0] is None)
    return flags if any(flags) else None

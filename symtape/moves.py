"""TensorFlow's array functions that only move elements: ``roll`` (re-exported by ``st.math``
and at the top level).

Each checks and normalises its arguments, naming the bad one, and applies one structural op
of the table:
its derivatives, batching and loop form come from the op's index map.
"""

from __future__ import annotations

from symtape import ops
from symtape.base.errors import InvalidArgumentError
from symtape.core.variables import Tensor, convert_to_tensor
from symtape.core.variables import shape_arg as _shape_arg

__all__ = ["roll"]


def _ints(v, what: str) -> tuple:
    """An int or a list of ints (or an integer tensor) as a tuple."""
    return _shape_arg(v, what)


def roll(input, shift, axis, name=None) -> Tensor:  # noqa: A002 - TensorFlow's name
    """``input`` with its elements shifted by ``shift[i]`` places along ``axis[i]``, those
    pushed off one end coming back at the other: ``out[..., (j + s) % n, ...] = x[..., j, ...]``.

    Shifts may be negative or larger than the axis; shifts along one axis add up.

    >>> import symtape as st
    >>> st.roll(st.constant([1.0, 2.0, 3.0, 4.0]), 1, 0).numpy()
    array([4., 1., 2., 3.])
    """
    x = convert_to_tensor(input)
    shifts, axes = _ints(shift, "st.roll shift"), _ints(axis, "st.roll axis")
    if len(shifts) != len(axes):
        raise InvalidArgumentError(f"st.roll: shift and axis must have the same length, got "
                                   f"{len(shifts)} shifts and {len(axes)} axes")
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise InvalidArgumentError(f"st.roll: axis {a} is out of range for an input of "
                                       f"rank {x.ndim}")
    return ops.roll.bind(x, shift=shifts, axis=tuple(a % x.ndim for a in axes))

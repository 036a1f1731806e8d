"""TensorFlow's scans: ``cumsum`` and ``cumprod`` (``tf.cumsum``, ``tf.math.cumsum``,
``tf.math.cumprod``) with ``axis``, ``exclusive`` and ``reverse``.

Each is one op of the table (``symtape/ops/ordering.py``), so values, gradients of every
order, batching, sparsity (a running scan depends on the earlier places of its line only)
and loop forms are that op's. ``cumprod``'s gradient is exact where elements are 0;
TensorFlow's divides by ``x`` there and gives nan.
"""

from __future__ import annotations

from symtape import ops
from symtape.core.variables import Tensor, convert_to_tensor

__all__ = ["cumsum", "cumprod"]


def cumsum(x, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """Running sum along ``axis``: ``out[i] = x[0] + ... + x[i]`` (``x[i]`` left out when
    ``exclusive``; summed from the end when ``reverse``).

    Parameters: ``x`` a float or integer tensor; ``axis`` an int; ``exclusive``,
    ``reverse`` bools. Returns a tensor of ``x``'s shape and dtype.

    >>> import symtape as st
    >>> st.cumsum([1.0, 2.0, 3.0]).numpy().tolist()
    [1.0, 3.0, 6.0]
    >>> st.math.cumsum([1.0, 2.0, 3.0], exclusive=True, reverse=True).numpy().tolist()
    [5.0, 3.0, 0.0]
    """
    return ops.cumsum.bind(convert_to_tensor(x), axis=axis, exclusive=exclusive,
                           reverse=reverse)


def cumprod(x, axis: int = 0, exclusive: bool = False, reverse: bool = False,
            name: str | None = None) -> Tensor:
    """Running product along ``axis``: ``out[i] = x[0] * ... * x[i]`` (``x[i]`` left out
    when ``exclusive``; multiplied from the end when ``reverse``).

    Parameters: ``x`` a float or integer tensor; ``axis`` an int; ``exclusive``,
    ``reverse`` bools. Returns a tensor of ``x``'s shape and dtype.

    >>> import symtape as st
    >>> st.math.cumprod([2.0, 3.0, 4.0]).numpy().tolist()
    [2.0, 6.0, 24.0]
    >>> st.math.cumprod([2.0, 3.0, 4.0], exclusive=True).numpy().tolist()
    [1.0, 2.0, 6.0]
    """
    return ops.cumprod.bind(convert_to_tensor(x), axis=axis, exclusive=exclusive,
                            reverse=reverse)

"""TensorFlow's scans and orderings: ``cumsum``, ``cumprod`` (``axis``, ``exclusive``,
``reverse``), ``sort``, ``argsort``, ``top_k``, ``searchsorted`` and ``unique``.

Each is one op of the table (``symtape/ops/ordering.py``) or a few, so values, gradients of
every order, batching, sparsity (a running scan depends on the earlier places of its line
only) and loop forms are those ops'. What differs from TensorFlow, and why:

- ``cumprod``'s gradient is exact where elements are 0; TensorFlow's divides by ``x`` there
  and gives nan.
- ``sort``, ``argsort`` and ``top_k`` order ties by index in both directions (TensorFlow's
  results); the gradient of ``sort``/``top_k`` goes back through that permutation.
  ``top_k(sorted=False)`` returns them sorted too (TensorFlow leaves the order open).
- Compiled ``sort``, ``argsort`` and ``top_k`` are unrolled comparisons for lines of up to
  8 and a native stable merge sort per line beyond (float keys); compiled ``searchsorted``
  of a long float line is a native binary search per value (``log2(n)`` comparisons;
  numpy's results on sorted lines), of an integer line a loop counting the keys before
  each value. Unsorted lines give no defined result (as in TensorFlow).
- ``unique``'s output shape depends on the values: it runs eagerly and refuses symbolic
  (traced) tensors.
"""

from __future__ import annotations

import numpy as np

from symtape import ops
from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.variables import Tensor, constant, convert_to_tensor

__all__ = ["cumsum", "cumprod", "sort", "argsort", "top_k", "searchsorted", "unique"]


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


def _direction(direction: str, name: str) -> bool:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"st.{name}: direction must be 'ASCENDING' or "
                                   f"'DESCENDING', got {direction!r}")
    return direction == "DESCENDING"


def sort(values, axis: int = -1, direction: str = "ASCENDING",
         name: str | None = None) -> Tensor:
    """``values`` sorted along ``axis`` (ties keep their order); its gradient goes back
    through the sorting permutation.

    Parameters: ``values`` a float or integer tensor; ``axis`` an int; ``direction``
    ``'ASCENDING'`` or ``'DESCENDING'``. Returns a tensor of ``values``' shape and dtype.

    >>> import symtape as st
    >>> st.sort([3.0, 1.0, 2.0]).numpy().tolist()
    [1.0, 2.0, 3.0]
    >>> st.sort([3.0, 1.0, 2.0], direction="DESCENDING").numpy().tolist()
    [3.0, 2.0, 1.0]
    """
    x = convert_to_tensor(values)
    return ops.sort_permute.bind(x, x, axis=axis, descending=_direction(direction, "sort"))


def argsort(values, axis: int = -1, direction: str = "ASCENDING", stable: bool = False,
            name: str | None = None) -> Tensor:
    """The int32 indices that sort ``values`` along ``axis``; always stable (ties in index
    order, which ``stable=False`` allows too). No gradient.

    >>> import symtape as st
    >>> st.argsort([3.0, 1.0, 3.0, 2.0]).numpy().tolist()
    [1, 3, 0, 2]
    >>> st.argsort([3.0, 1.0, 3.0, 2.0], direction="DESCENDING").numpy().tolist()
    [0, 2, 3, 1]
    """
    x = convert_to_tensor(values)
    return ops.argsort.bind(x, axis=axis, descending=_direction(direction, "argsort"))


def top_k(input, k: int = 1, sorted: bool = True, name: str | None = None):
    """``(values, indices)``: the ``k`` largest entries along the last axis, largest first
    (ties: lower index first), and their int32 indices; the gradient of ``values`` goes to
    the places they came from.

    >>> import symtape as st
    >>> v, i = st.math.top_k([1.0, 4.0, 2.0, 4.0], k=3)
    >>> v.numpy().tolist(), i.numpy().tolist()
    ([4.0, 4.0, 2.0], [1, 3, 2])
    """
    x = convert_to_tensor(input)
    if not x.shape:
        raise ShapeError("st.math.top_k: input must have at least one axis, got a scalar")
    n = int(x.shape[-1])
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or \
            not 0 <= k <= n:
        raise InvalidArgumentError(f"st.math.top_k: k must be an int in [0, {n}] (the last "
                                   f"axis of input), got {k!r}")
    head = (Ellipsis, slice(0, int(k)))
    values = ops.sort_permute.bind(x, x, axis=-1, descending=True)[head]
    indices = ops.argsort.bind(x, axis=-1, descending=True)[head]
    return values, indices


def searchsorted(sorted_sequence, values, side: str = "left", out_type=np.int32,
                 name: str | None = None) -> Tensor:
    """For each of ``values`` (per row of the leading axes), its place in the row of
    ``sorted_sequence``: the number of entries ``< value`` (``side='left'``) or ``<= value``
    (``'right'``). No gradient.

    >>> import symtape as st
    >>> st.searchsorted([1.0, 2.0, 2.0, 5.0], [2.0, 6.0, 0.0]).numpy().tolist()
    [1, 4, 0]
    >>> st.searchsorted([1.0, 2.0, 2.0, 5.0], [2.0], side="right").numpy().tolist()
    [3]
    """
    s, v = convert_to_tensor(sorted_sequence), convert_to_tensor(values)
    return ops.searchsorted.bind(s, v, side=side, out_type=np.dtype(out_type).name)


def unique(x, out_idx=np.int32, name: str | None = None):
    """``(y, idx)``: the distinct entries of the 1-D ``x`` in order of first appearance, and
    for each entry of ``x`` its place in ``y`` (``x == y[idx]``). Eager only: the size of
    ``y`` depends on the values. No gradient.

    >>> import symtape as st
    >>> y, idx = st.unique([1, 1, 2, 4, 4, 4, 7, 8, 8])
    >>> y.numpy().tolist(), idx.numpy().tolist()
    ([1, 2, 4, 7, 8], [0, 0, 1, 2, 2, 2, 3, 4, 4])
    """
    t = convert_to_tensor(x)
    if len(t.shape) != 1:
        raise ShapeError(f"st.unique: x must be 1-D, got shape {tuple(t.shape)}")
    out = np.dtype(out_idx)
    if out not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise InvalidArgumentError(f"st.unique: out_idx must be int32 or int64, got "
                                   f"{out.name}")
    try:
        arr = t.numpy()
    except Exception:
        raise InvalidArgumentError(
            "st.unique: the size of its result depends on the values of x, which are not "
            "known here (a symbolic or traced tensor, as under st.function); call it "
            "eagerly") from None
    _, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # (distinct values by first appearance)
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    return constant(arr[first[order]], dtype=arr.dtype), \
        constant(place[inverse.reshape(-1)].astype(out), dtype=out)

"""TensorFlow's segment and scatter ops: ``segment_sum/mean/max/min/prod``, their unsorted
forms, ``scatter_nd`` and ``tensor_scatter_nd_add/sub/update/max/min``.

Each is the table's ``segment_reduce`` (``symtape/ops/segment.py``: rows combined by a
segment id, the ids kept as data) with reshapes, concatenations and selects around it, so
values, gradients of every order, batching, sparsity and loop forms are that op's. The ids
and indices are read when the op is applied (constants, numpy arrays or eager tensors) and
checked then: an id or index out of range is an ``InvalidArgumentError`` naming the argument.

What TensorFlow leaves open or does differently, and what symtape does:

- ``tensor_scatter_nd_update`` with an index repeated: the last update in order wins (as
  TensorFlow's CPU kernel and numpy's assignment); its gradient is the exact derivative: the
  overwritten places of ``tensor`` and the updates that lose get 0 (TensorFlow gives every
  update the gradient at its place, the losers included, which is not the derivative).
- Ties of ``segment_max``/``segment_min`` (and of ``tensor_scatter_nd_max/min``, between the
  tensor and its updates too) share the gradient equally, as TensorFlow's rules.
- ``segment_mean`` and ``unsorted_segment_mean`` take float data.
"""

from __future__ import annotations

import numpy as np

from symtape import ops
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError
from symtape.core.variables import Tensor, convert_to_tensor

__all__ = ["segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
           "unsorted_segment_sum", "unsorted_segment_mean", "unsorted_segment_max",
           "unsorted_segment_min", "unsorted_segment_prod", "scatter_nd",
           "tensor_scatter_nd_add", "tensor_scatter_nd_sub", "tensor_scatter_nd_update",
           "tensor_scatter_nd_max", "tensor_scatter_nd_min"]


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


def _ints(value, what: str) -> np.ndarray:
    """``value`` (a tensor, array or list of ints) as an int64 array, else a clear error."""
    if isinstance(value, Tensor):
        try:
            value = value.numpy()
        except Exception:  # a symbolic tensor has no value to index with
            raise InvalidArgumentError(f"{what} must have a value (a constant or an eager "
                                       "tensor), got a symbolic tensor") from None
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise DTypeError(f"{what} must be integers, got {arr.dtype.name}")
    return arr.astype(np.int64, copy=False)


def _lowest(dtype: np.dtype):
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


def _reduce(data: Tensor, ids: np.ndarray, k: int, kind: str, empty, what: str) -> Tensor:
    """``segment_reduce`` over the leading ``ids.ndim`` axes of ``data`` (merged into rows)."""
    lead = tuple(data.shape[:ids.ndim])
    if lead != ids.shape:
        raise ShapeError(f"{what}: segment_ids of shape {ids.shape} must be a prefix of data's "
                         f"shape {tuple(data.shape)}")
    rest = tuple(data.shape[ids.ndim:])
    rows = ops.reshape.bind(data, shape=(ids.size,) + rest) if ids.ndim != 1 else data
    return ops.segment_reduce.bind(rows, ids=ids.reshape(-1), num_segments=int(k), kind=kind,
                                   empty=empty)


def _sorted_ids(data, segment_ids, what: str) -> tuple:
    """``(data, ids, num_segments)`` of a sorted segment op: ids 1-D, one per row of data,
    non-negative and increasing; ``num_segments`` is the last id plus one."""
    data = convert_to_tensor(data)
    ids = _ints(segment_ids, f"{what}: segment_ids")
    if ids.ndim != 1 or not data.shape or len(ids) != data.shape[0]:
        raise ShapeError(f"{what}: segment_ids must be a vector of one id per row of data "
                         f"(shape {tuple(data.shape)}), got shape {ids.shape}")
    if ids.size and ids.min() < 0:
        raise InvalidArgumentError(f"{what}: segment_ids must be non-negative, got "
                                   f"{int(ids.min())} at position {int(np.argmin(ids))}")
    if ids.size > 1 and (np.diff(ids) < 0).any():
        j = int(np.flatnonzero(np.diff(ids) < 0)[0]) + 1
        raise InvalidArgumentError(f"{what}: segment_ids must be sorted, but "
                                   f"segment_ids[{j}] = {int(ids[j])} follows {int(ids[j - 1])} "
                                   f"(use unsorted_{what.split('.')[-1]})")
    return data, ids, int(ids[-1]) + 1 if ids.size else 0


def _unsorted_ids(data, segment_ids, num_segments, what: str) -> tuple:
    """``(data, ids, num_segments)`` of an unsorted segment op: negative ids drop their
    rows; an id at or beyond ``num_segments`` is an error."""
    data = convert_to_tensor(data)
    ids = _ints(segment_ids, f"{what}: segment_ids")
    k = _ints(num_segments, f"{what}: num_segments")
    if k.ndim != 0 or k < 0:
        raise InvalidArgumentError(f"{what}: num_segments must be a non-negative scalar, got "
                                   f"{k.tolist()}")
    k = int(k)
    if ids.size and ids.max() >= k:
        at = [int(i) for i in np.unravel_index(int(np.argmax(ids)), ids.shape)]
        raise InvalidArgumentError(f"{what}: segment_ids{at} = {int(ids.max())} is out "
                                   f"of range [0, num_segments={k})")
    if ids.size and ids.min() < -1:  # (every negative id drops its row)
        ids = np.where(ids < 0, -1, ids)
    return data, ids, k


def _floats(data: Tensor, what: str) -> Tensor:
    if data.dtype.kind != "f":
        raise DTypeError(f"{what}: data must have a float dtype for a mean, got "
                         f"{data.dtype.name} (cast it with st.cast)")
    return data


def _mean(data: Tensor, ids: np.ndarray, k: int, what: str) -> Tensor:
    """The segments' sums over their counts (0 for an empty segment)."""
    total = _reduce(data, ids, k, "sum", 0, what)
    counts = np.bincount(ids.reshape(-1)[ids.reshape(-1) >= 0], minlength=k)
    counts = np.maximum(counts, 1).astype(data.dtype)
    shape = (k,) + (1,) * (len(total.shape) - 1)
    return ops.divide.bind(total, convert_to_tensor(counts.reshape(shape)))


# --------------------------------------------------------------------------------------------
# Sorted segments
# --------------------------------------------------------------------------------------------


def segment_sum(data, segment_ids, name=None) -> Tensor:
    """``out[i] = sum(data[j] for j with segment_ids[j] == i)``; ``segment_ids`` sorted,
    non-negative, one per row of ``data``; empty segments are 0.

    >>> import symtape as st
    >>> st.math.segment_sum(st.constant([1.0, 2.0, 3.0, 4.0]), [0, 0, 2, 2]).numpy()
    array([3., 0., 7.])
    """
    data, ids, k = _sorted_ids(data, segment_ids, "st.math.segment_sum")
    return _reduce(data, ids, k, "sum", 0, "st.math.segment_sum")


def segment_mean(data, segment_ids, name=None) -> Tensor:
    """``out[i]`` the mean of the rows of segment ``i`` (0 where it is empty).

    >>> import symtape as st
    >>> st.math.segment_mean(st.constant([1.0, 2.0, 6.0]), [0, 0, 2]).numpy()
    array([1.5, 0. , 6. ])
    """
    data, ids, k = _sorted_ids(data, segment_ids, "st.math.segment_mean")
    return _mean(_floats(data, "st.math.segment_mean"), ids, k, "st.math.segment_mean")


def segment_max(data, segment_ids, name=None) -> Tensor:
    """``out[i]`` the maximum of the rows of segment ``i``; 0 where it is empty (as
    TensorFlow's sorted ``segment_max``). Ties share the gradient equally.

    >>> import symtape as st
    >>> st.math.segment_max(st.constant([1.0, 5.0, -3.0]), [0, 0, 2]).numpy()
    array([ 5.,  0., -3.])
    """
    data, ids, k = _sorted_ids(data, segment_ids, "st.math.segment_max")
    return _reduce(data, ids, k, "max", 0, "st.math.segment_max")


def segment_min(data, segment_ids, name=None) -> Tensor:
    """``out[i]`` the minimum of the rows of segment ``i``; 0 where it is empty.

    >>> import symtape as st
    >>> st.math.segment_min(st.constant([1.0, 5.0, 3.0]), [0, 0, 2]).numpy()
    array([1., 0., 3.])
    """
    data, ids, k = _sorted_ids(data, segment_ids, "st.math.segment_min")
    return _reduce(data, ids, k, "min", 0, "st.math.segment_min")


def segment_prod(data, segment_ids, name=None) -> Tensor:
    """``out[i]`` the product of the rows of segment ``i``; 1 where it is empty.

    >>> import symtape as st
    >>> st.math.segment_prod(st.constant([2.0, 5.0, 3.0]), [0, 0, 2]).numpy()
    array([10.,  1.,  3.])
    """
    data, ids, k = _sorted_ids(data, segment_ids, "st.math.segment_prod")
    return _reduce(data, ids, k, "prod", 1, "st.math.segment_prod")


# --------------------------------------------------------------------------------------------
# Unsorted segments
# --------------------------------------------------------------------------------------------


def unsorted_segment_sum(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[i] = sum(data[j...] for j with segment_ids[j...] == i)``: ``segment_ids`` of the
    shape of ``data``'s leading axes, in any order; a negative id drops its row; empty
    segments are 0.

    >>> import symtape as st
    >>> st.math.unsorted_segment_sum(st.constant([1.0, 2.0, 3.0]), [2, 0, 2], 3).numpy()
    array([2., 0., 4.])
    """
    data, ids, k = _unsorted_ids(data, segment_ids, num_segments, "st.math.unsorted_segment_sum")
    return _reduce(data, ids, k, "sum", 0, "st.math.unsorted_segment_sum")


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[i]`` the mean of the rows with id ``i`` (0 where there are none).

    >>> import symtape as st
    >>> st.math.unsorted_segment_mean(st.constant([1.0, 2.0, 4.0]), [1, 0, 1], 3).numpy()
    array([2. , 2.5, 0. ])
    """
    what = "st.math.unsorted_segment_mean"
    data, ids, k = _unsorted_ids(data, segment_ids, num_segments, what)
    return _mean(_floats(data, what), ids, k, what)


def unsorted_segment_max(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[i]`` the maximum of the rows with id ``i``; the dtype's lowest value where
    there are none (``numeric_limits<T>::lowest()``, as TensorFlow).

    >>> import symtape as st
    >>> st.math.unsorted_segment_max(st.constant([1.0, 2.0, 4.0]), [1, 0, 1], 2).numpy()
    array([2., 4.])
    """
    what = "st.math.unsorted_segment_max"
    data, ids, k = _unsorted_ids(data, segment_ids, num_segments, what)
    return _reduce(data, ids, k, "max", _lowest(data.dtype), what)


def unsorted_segment_min(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[i]`` the minimum of the rows with id ``i``; the dtype's largest value where
    there are none.

    >>> import symtape as st
    >>> st.math.unsorted_segment_min(st.constant([1.0, 2.0, 4.0]), [1, 0, 1], 2).numpy()
    array([2., 1.])
    """
    what = "st.math.unsorted_segment_min"
    data, ids, k = _unsorted_ids(data, segment_ids, num_segments, what)
    return _reduce(data, ids, k, "min", _highest(data.dtype), what)


def unsorted_segment_prod(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[i]`` the product of the rows with id ``i``; 1 where there are none.

    >>> import symtape as st
    >>> st.math.unsorted_segment_prod(st.constant([3.0, 2.0, 4.0]), [1, 0, 1], 3).numpy()
    array([ 2., 12.,  1.])
    """
    what = "st.math.unsorted_segment_prod"
    data, ids, k = _unsorted_ids(data, segment_ids, num_segments, what)
    return _reduce(data, ids, k, "prod", 1, what)


# --------------------------------------------------------------------------------------------
# Scatters
# --------------------------------------------------------------------------------------------


def _places(indices, updates: Tensor, shape: tuple, what: str) -> tuple:
    """``(rows, slice_shape)``: for each update slice, its flat row in ``shape`` viewed as
    ``(prod(shape[:d]), *shape[d:])`` (``d = indices.shape[-1]``); checks the shapes and
    that every index is in range."""
    idx = _ints(indices, f"{what}: indices")
    if idx.ndim < 1:
        raise ShapeError(f"{what}: indices must have at least one axis, got a scalar")
    d = idx.shape[-1]
    if d > len(shape):
        raise ShapeError(f"{what}: indices of depth {d} index a tensor of rank {len(shape)}")
    want = tuple(idx.shape[:-1]) + tuple(shape[d:])
    if tuple(updates.shape) != want:
        raise ShapeError(f"{what}: updates must have shape {want} (indices.shape[:-1] + "
                         f"shape[{d}:]), got {tuple(updates.shape)}")
    flat = idx.reshape(-1, d)
    bad = ((flat < 0) | (flat >= np.asarray(shape[:d], dtype=np.int64))).any(axis=1)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise InvalidArgumentError(f"{what}: indices[{j}] = {flat[j].tolist()} does not index "
                                   f"into shape {list(shape)}")
    rows = np.ravel_multi_index(flat.T, shape[:d]) if d else np.zeros(len(flat), np.int64)
    return rows.astype(np.int64), tuple(shape[d:])


def _scattered(updates: Tensor, rows: np.ndarray, shape: tuple, slice_shape: tuple,
               kind: str, empty) -> Tensor:
    """``segment_reduce`` of the update slices into the rows of ``shape``."""
    k = int(np.prod(shape[:len(shape) - len(slice_shape)], dtype=np.int64))
    data = ops.reshape.bind(updates, shape=(len(rows),) + slice_shape)
    out = ops.segment_reduce.bind(data, ids=rows, num_segments=k, kind=kind, empty=empty)
    return ops.reshape.bind(out, shape=tuple(shape))


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """Zeros of ``shape`` with the slices ``updates[j]`` added at ``indices[j]``
    (duplicates add up).

    >>> import symtape as st
    >>> st.scatter_nd([[1], [3], [1]], st.constant([1.0, 2.0, 5.0]), [4]).numpy()
    array([0., 6., 0., 2.])
    """
    updates = convert_to_tensor(updates)
    shape = tuple(int(s) for s in _ints(shape, "st.scatter_nd: shape").reshape(-1))
    if any(s < 0 for s in shape):
        raise InvalidArgumentError(f"st.scatter_nd: shape must be non-negative, got {shape}")
    rows, sl = _places(indices, updates, shape, "st.scatter_nd")
    return _scattered(updates, rows, shape, sl, "sum", 0)


def _into(tensor, indices, updates, what: str) -> tuple:
    tensor, updates = convert_to_tensor(tensor), convert_to_tensor(updates)
    if updates.dtype != tensor.dtype:
        raise DTypeError(f"{what}: updates has dtype {updates.dtype.name}, tensor "
                         f"{tensor.dtype.name}; cast one with st.cast")
    rows, sl = _places(indices, updates, tuple(tensor.shape), what)
    return tensor, updates, rows, sl


def tensor_scatter_nd_add(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with the slices ``updates[j]`` added at ``indices[j]`` (duplicates add up).

    >>> import symtape as st
    >>> st.tensor_scatter_nd_add(st.ones([3]), [[0], [0]], st.constant([1.0, 2.0])).numpy()
    array([4., 1., 1.])
    """
    tensor, updates, rows, sl = _into(tensor, indices, updates, "st.tensor_scatter_nd_add")
    return ops.add.bind(tensor, _scattered(updates, rows, tuple(tensor.shape), sl, "sum", 0))


def tensor_scatter_nd_sub(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with the slices ``updates[j]`` subtracted at ``indices[j]``.

    >>> import symtape as st
    >>> st.tensor_scatter_nd_sub(st.ones([3]), [[2]], st.constant([5.0])).numpy()
    array([ 1.,  1., -4.])
    """
    tensor, updates, rows, sl = _into(tensor, indices, updates, "st.tensor_scatter_nd_sub")
    return ops.subtract.bind(tensor,
                             _scattered(updates, rows, tuple(tensor.shape), sl, "sum", 0))


def tensor_scatter_nd_update(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with the slices at ``indices[j]`` replaced by ``updates[j]``; where an
    index repeats, the last update wins. Gradients: 0 at the replaced places of ``tensor``
    and for the updates that lose.

    >>> import symtape as st
    >>> st.tensor_scatter_nd_update(st.zeros([3]), [[1], [1]], st.constant([7.0, 9.0])).numpy()
    array([0., 9., 0.])
    """
    what = "st.tensor_scatter_nd_update"
    tensor, updates, rows, sl = _into(tensor, indices, updates, what)
    shape = tuple(tensor.shape)
    k = int(np.prod(shape[:len(shape) - len(sl)], dtype=np.int64))
    last = np.full(k, -1, dtype=np.int64)
    last[rows] = np.arange(len(rows), dtype=np.int64)  # (numpy: the last assignment wins)
    wins = np.where(last[rows] == np.arange(len(rows)), rows, -1)
    placed = _scattered(updates, wins, shape, sl, "sum", 0)
    replaced = np.zeros(k, dtype=bool)
    replaced[rows] = True
    mask = np.broadcast_to(replaced.reshape((k,) + (1,) * len(sl)), (k,) + sl).reshape(shape)
    return ops.where.bind(convert_to_tensor(np.ascontiguousarray(mask)), placed, tensor)


def _extremum(tensor, indices, updates, kind: str, what: str) -> Tensor:
    """``tensor``'s rows and the updates as one segment reduction: every row of ``tensor`` a
    segment of its own, each update joining the segment of its place (so ties between the
    tensor and its updates share the gradient, as TensorFlow's rule)."""
    tensor, updates, rows, sl = _into(tensor, indices, updates, what)
    shape = tuple(tensor.shape)
    k = int(np.prod(shape[:len(shape) - len(sl)], dtype=np.int64))
    both = ops.concat.bind(ops.reshape.bind(tensor, shape=(k,) + sl),
                           ops.reshape.bind(updates, shape=(len(rows),) + sl), axis=0)
    ids = np.concatenate([np.arange(k, dtype=np.int64), rows])
    out = ops.segment_reduce.bind(both, ids=ids, num_segments=k, kind=kind, empty=0)
    return ops.reshape.bind(out, shape=shape)


def tensor_scatter_nd_max(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with each place indexed the maximum of it and its updates.

    >>> import symtape as st
    >>> st.tensor_scatter_nd_max(st.zeros([3]), [[0], [2]], st.constant([4.0, -1.0])).numpy()
    array([4., 0., 0.])
    """
    return _extremum(tensor, indices, updates, "max", "st.tensor_scatter_nd_max")


def tensor_scatter_nd_min(tensor, indices, updates, name=None) -> Tensor:
    """``tensor`` with each place indexed the minimum of it and its updates.

    >>> import symtape as st
    >>> st.tensor_scatter_nd_min(st.zeros([3]), [[0], [2]], st.constant([4.0, -1.0])).numpy()
    array([ 0.,  0., -1.])
    """
    return _extremum(tensor, indices, updates, "min", "st.tensor_scatter_nd_min")

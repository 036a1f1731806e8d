"""TensorFlow's array functions that only move elements: ``roll``, ``slice``, ``strided_slice``,
``gather_nd`` and ``meshgrid`` (re-exported by ``st.math`` and at the top level).

Each checks and normalises its arguments, naming the bad one, and applies one structural op
of the table (``strided_slice`` is an indexing key, ``meshgrid`` reshapes and broadcasts):
their derivatives, batching and loop forms come from the ops' index maps.
"""

from __future__ import annotations

import builtins

import numpy as np

from symtape import ops
from symtape.base.errors import InvalidArgumentError
from symtape.core.variables import Tensor, convert_to_tensor
from symtape.core.variables import shape_arg as _shape_arg

__all__ = ["roll", "slice", "strided_slice", "gather_nd", "meshgrid"]


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


def slice(input_, begin, size, name=None) -> Tensor:  # noqa: A001 - TensorFlow's name
    """The block of ``input_`` that starts at ``begin`` and has shape ``size`` (an entry -1:
    to the end of that axis): ``out[i] = input_[begin + i]``.

    >>> import symtape as st
    >>> st.slice(st.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), [0, 1], [2, -1]).numpy()
    array([[2., 3.],
           [5., 6.]])
    """
    x = convert_to_tensor(input_)
    begin, size = _ints(begin, "st.slice begin"), _ints(size, "st.slice size")
    if len(begin) != x.ndim or len(size) != x.ndim:
        raise InvalidArgumentError(f"st.slice: begin and size must have one entry per axis "
                                   f"of the input (rank {x.ndim}), got {len(begin)} and "
                                   f"{len(size)}")
    sizes = []
    for i, (b, s, n) in enumerate(zip(begin, size, x.shape)):
        if not 0 <= b <= n:
            raise InvalidArgumentError(f"st.slice: begin[{i}] = {b} is not in [0, {n}]")
        s = n - b if s == -1 else s
        if not 0 <= s <= n - b:
            raise InvalidArgumentError(f"st.slice: size[{i}] = {size[i]} is not in "
                                       f"[-1, {n - b}] (axis {i} of size {n}, begin {b})")
        sizes.append(s)
    return ops.slice_.bind(x, begin=begin, size=tuple(sizes))


def _bits(mask: int, what: str) -> int:
    if not isinstance(mask, (int, np.integer)) or isinstance(mask, bool) or mask < 0:
        raise InvalidArgumentError(f"st.strided_slice: {what} must be a non-negative int bit "
                                   f"mask, got {mask!r}")
    return int(mask)


def _strided_key(shape: tuple, begin, end, strides, masks: dict) -> tuple:
    """The indexing key of TensorFlow's sparse slice spec (checked against ``shape``)."""
    bit = {k: (lambda i, m=m: bool(m >> i & 1)) for k, m in masks.items()}
    m = len(begin)
    ellipses = [i for i in builtins.range(m) if bit["ellipsis_mask"](i)]
    if len(ellipses) > 1:
        raise InvalidArgumentError("st.strided_slice: ellipsis_mask may set only one bit")
    real = [i for i in builtins.range(m)
            if not bit["ellipsis_mask"](i) and not bit["new_axis_mask"](i)]
    if len(real) > len(shape):
        raise InvalidArgumentError(f"st.strided_slice: {len(real)} axes indexed, the input "
                                   f"has rank {len(shape)}")
    key, dim = [], 0
    for i in builtins.range(m):
        if bit["ellipsis_mask"](i):
            key.append(Ellipsis)
            dim += len(shape) - len(real)
        elif bit["new_axis_mask"](i):
            key.append(None)
        elif strides[i] == 0:
            raise InvalidArgumentError(f"st.strided_slice: strides[{i}] must be non-zero")
        elif bit["shrink_axis_mask"](i):
            n = shape[dim]
            if strides[i] < 0:
                raise InvalidArgumentError(f"st.strided_slice: strides[{i}] must be positive "
                                           f"where shrink_axis_mask takes one index")
            if not -n <= begin[i] < n:
                raise InvalidArgumentError(f"st.strided_slice: begin[{i}] = {begin[i]} is out "
                                           f"of bounds for axis {dim} of size {n}")
            key.append(begin[i] % n)
            dim += 1
        else:
            key.append(builtins.slice(None if bit["begin_mask"](i) else begin[i],
                                      None if bit["end_mask"](i) else end[i], strides[i]))
            dim += 1
    return tuple(key)


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, var=None, name=None) -> Tensor:
    """``input_[begin:end:strides]`` per axis, with TensorFlow's masks: bit ``i`` of
    ``begin_mask``/``end_mask`` ignores ``begin[i]``/``end[i]`` (the full range), of
    ``ellipsis_mask`` makes entry ``i`` an ellipsis, of ``new_axis_mask`` a new size-1 axis,
    of ``shrink_axis_mask`` the single index ``begin[i]`` (the axis is dropped).

    >>> import symtape as st
    >>> x = st.reshape(st.range(0.0, 12.0), [3, 4])
    >>> st.strided_slice(x, [0, 3], [3, 0], [2, -1]).numpy()
    array([[ 3.,  2.,  1.],
           [11., 10.,  9.]])
    >>> st.strided_slice(x, [1, 0], [2, 4], [1, 2], shrink_axis_mask=1).numpy()
    array([4., 6.])
    """
    x = convert_to_tensor(input_)
    begin, end = _ints(begin, "st.strided_slice begin"), _ints(end, "st.strided_slice end")
    strides = (1,) * len(begin) if strides is None else _ints(strides,
                                                                 "st.strided_slice strides")
    if not len(begin) == len(end) == len(strides):
        raise InvalidArgumentError(f"st.strided_slice: begin, end and strides must have the "
                                   f"same length, got {len(begin)}, {len(end)} and "
                                   f"{len(strides)}")
    masks = {k: _bits(v, k) for k, v in (
        ("begin_mask", begin_mask), ("end_mask", end_mask), ("ellipsis_mask", ellipsis_mask),
        ("new_axis_mask", new_axis_mask), ("shrink_axis_mask", shrink_axis_mask))}
    return x[_strided_key(tuple(x.shape), begin, end, strides, masks)]


def gather_nd(params, indices, batch_dims=0, name=None) -> Tensor:
    """Slices of ``params`` at the index tuples in the last axis of ``indices``:
    ``out[b..., i...] = params[b..., indices[b..., i..., :]]`` (the first ``batch_dims`` axes
    of both are a batch). Indices out of range raise, as TensorFlow's on CPU.

    >>> import symtape as st
    >>> st.gather_nd(st.constant([[1.0, 2.0], [3.0, 4.0]]), [[1, 0], [0, 1]]).numpy()
    array([3., 2.])
    """
    p = convert_to_tensor(params)
    idx = np.asarray(indices.numpy() if isinstance(indices, Tensor) else indices)
    if idx.dtype.kind not in "iu" or idx.ndim == 0:
        raise InvalidArgumentError(f"st.gather_nd: indices must be integers of rank >= 1, got "
                                   f"{idx.dtype} of shape {idx.shape}")
    b = int(batch_dims)
    if not 0 <= b < idx.ndim or b > p.ndim or tuple(p.shape[:b]) != idx.shape[:b]:
        raise InvalidArgumentError(f"st.gather_nd: batch_dims = {b} must be below the rank of "
                                   f"indices ({idx.ndim}) with the first batch_dims axes of "
                                   f"params {tuple(p.shape)} and indices {idx.shape} equal")
    q = idx.shape[-1]
    if q > p.ndim - b:
        raise InvalidArgumentError(f"st.gather_nd: indices.shape[-1] = {q} is more than the "
                                   f"{p.ndim - b} axes of params after its batch axes")
    core = np.asarray(p.shape[b:b + q], dtype=np.int64)
    bad = ((idx < 0) | (idx >= core)).any(axis=-1)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InvalidArgumentError(f"st.gather_nd: indices{list(at)} = {idx[at].tolist()} does "
                                   f"not index into params of shape {tuple(p.shape)}")
    return ops.gather_nd.bind(p, indices=idx.astype(np.int64), batch_dims=b)


def meshgrid(*args, **kwargs) -> list:
    """Coordinate grids of the 1-D ``args`` (``indexing="xy"``: the first two axes swapped,
    as for plotting; ``"ij"``: matrix indexing), each input reshaped and broadcast.

    >>> import symtape as st
    >>> x, y = st.meshgrid(st.constant([1.0, 2.0, 3.0]), st.constant([5.0, 6.0]))
    >>> x.numpy()
    array([[1., 2., 3.],
           [1., 2., 3.]])
    >>> y.numpy()
    array([[5., 5., 5.],
           [6., 6., 6.]])
    """
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise InvalidArgumentError(f"st.meshgrid: unknown arguments {sorted(kwargs)}")
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"st.meshgrid: indexing must be 'xy' or 'ij', got "
                                   f"{indexing!r}")
    xs = [ops.reshape.bind(convert_to_tensor(a), shape=(-1,)) for a in args]
    pos = list(builtins.range(len(xs)))
    if indexing == "xy" and len(xs) > 1:
        pos[0], pos[1] = 1, 0
    shape = [0] * len(xs)
    for x, p in zip(xs, pos):
        shape[p] = x.shape[0]
    out = []
    for x, p in zip(xs, pos):
        lone = [1] * len(xs)
        lone[p] = -1
        out.append(ops.broadcast_to.bind(ops.reshape.bind(x, shape=tuple(lone)),
                                         shape=tuple(shape)))
    return out

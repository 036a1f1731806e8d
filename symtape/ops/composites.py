"""Composites (API names TensorFlow defines as compositions of ops) and creation
functions (constants with no inputs)."""

from __future__ import annotations

import functools
import math
import string
from collections.abc import Callable

import numpy as np
import sympy as sp

from ..errors import InvalidArgumentError, ShapeError
from .core import COMPOSITES, CREATION, _fmt
from .elementwise import (
    abs_,
    add,
    divide,
    greater,
    identity,
    leaky_relu_op,
    less,
    less_equal,
    maximum,
    minimum,
    multiply,
    pow_,
    sqrt,
    square,
    subtract,
    where,
)
from .linalg import einsum
from .reductions import reduce_max, reduce_mean, reduce_sum
from .structural import broadcast_to, cast, concat, expand_dims, gather_flat, transpose

# --------------------------------------------------------------------------------------------
# Composites: API names TensorFlow itself defines as compositions of ops
# --------------------------------------------------------------------------------------------


def _entry(table: dict, name: str) -> Callable:
    """Decorator registering a function under ``name`` in ``table``."""
    def deco(fn):
        table[name] = fn
        return fn

    return deco


def composite(name: str) -> Callable:
    return _entry(COMPOSITES, name)


@composite("reduce_variance")
def reduce_variance(x, axis=None, keepdims=False):
    """Variance over ``axis`` (mean of squared deviations)."""
    m = reduce_mean.bind(x, axis=axis, keepdims=True)
    return reduce_mean.bind(square.bind(subtract.bind(x, m)), axis=axis, keepdims=keepdims)


@composite("trace")
def trace(x):
    """Sum of the diagonal of the last two axes."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ShapeError(f"st.linalg.trace: needs rank >= 2, got shape {_fmt(shape)}")
    return einsum.bind(x, spec="...ii->...")


@composite("tensordot")
def tensordot(a, b, axes):
    """``tensordot(a, b, axes)`` as numpy/TF: contract ``axes`` (int or pair of lists)."""
    ra, rb = len(a.shape), len(b.shape)
    if isinstance(axes, (int, np.integer)):
        if axes < 0 or axes > min(ra, rb):
            raise InvalidArgumentError(f"st.tensordot: axes={axes} out of range for ranks "
                                       f"{ra} and {rb}")
        ax_a, ax_b = list(range(ra - axes, ra)), list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if np.ndim(axes[0]) == 0 else list(axes[0]),
                      [axes[1]] if np.ndim(axes[1]) == 0 else list(axes[1]))
        if len(ax_a) != len(ax_b):
            raise InvalidArgumentError("st.tensordot: axes lists have different lengths")
        ax_a = [int(i) % ra for i in ax_a]
        ax_b = [int(i) % rb for i in ax_b]
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(ra)]
    lb = [next(letters) for _ in range(rb)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
        [c for j, c in enumerate(lb) if j not in ax_b]
    return einsum.bind(a, b, spec=f"{''.join(la)},{''.join(lb)}->{''.join(out)}")


def _euclid(x, axis, keepdims):
    return sqrt.bind(reduce_sum.bind(multiply.bind(x, x), axis=axis, keepdims=keepdims))


@composite("norm")
def norm(tensor, ord="euclidean", axis=None, keepdims=False):
    """TF's ``norm``: vector p-norms, and 'fro', 1, inf for matrices (``axis`` a pair)."""
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        r = len(tensor.shape)
        a0, a1 = (int(axis[0]) % r, int(axis[1]) % r)
        if ord in ("euclidean", "fro"):
            return _euclid(tensor, (a0, a1), keepdims)
        if ord == 1:
            return reduce_max.bind(reduce_sum.bind(abs_.bind(tensor), axis=a0, keepdims=True),
                                   axis=(a0, a1), keepdims=keepdims)
        if ord in (np.inf, "inf"):
            return reduce_max.bind(reduce_sum.bind(abs_.bind(tensor), axis=a1, keepdims=True),
                                   axis=(a0, a1), keepdims=keepdims)
        raise InvalidArgumentError(f"st.norm: ord={ord!r} is not supported for matrices "
                                   "(use 'fro', 'euclidean', 1 or inf)")
    if ord in ("euclidean", 2, 2.0) or (ord == "fro" and axis is None):
        return _euclid(tensor, axis, keepdims)
    if ord in (np.inf, "inf"):
        return reduce_max.bind(abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if ord == 1:
        return reduce_sum.bind(abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        p = sp.Integer(ord) if float(ord).is_integer() else ord
        powered = pow_.bind(abs_.bind(tensor), int(p) if isinstance(p, sp.Integer) else p)
        total = reduce_sum.bind(powered, axis=axis, keepdims=keepdims)
        return pow_.bind(total, 1 / sp.Integer(p) if isinstance(p, sp.Integer) else 1.0 / p)
    raise InvalidArgumentError(f"st.norm: ord={ord!r} must be 'euclidean', 'fro', a positive "
                               "number or inf")


@composite("clip_by_norm")
def clip_by_norm(t, clip_norm, axes=None):
    """TF's ``clip_by_norm``: ``t * clip_norm / max(l2norm(t), clip_norm)``, safe at 0; a
    ``clip_norm <= 0`` is taken as 0 and gives zeros."""
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        if clip_norm <= 0:
            return multiply.bind(t, 0)
    elif clip_norm.dtype != t.dtype:
        clip_norm = cast.bind(clip_norm, dtype=t.dtype)
    l2sum = reduce_sum.bind(multiply.bind(t, t), axis=axes, keepdims=True)
    pred = greater.bind(l2sum, 0)
    l2sum_safe = where.bind(pred, l2sum, ones_like_of(l2sum))
    l2norm = where.bind(pred, sqrt.bind(l2sum_safe), l2sum)
    intermediate = multiply.bind(t, clip_norm)
    clipped = divide.bind(intermediate, maximum.bind(l2norm, clip_norm))
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        return identity.bind(clipped)
    return identity.bind(where.bind(less_equal.bind(clip_norm, 0), 0, clipped))


def ones_like_of(t):
    return np.ones(tuple(t.shape), dtype=t.dtype)


@composite("global_norm")
def global_norm(t_list):
    """sqrt of the sum of squares of all elements of the (non-None) tensors."""
    sums = [reduce_sum.bind(multiply.bind(t, t)) for t in t_list if t is not None]
    if not sums:
        return 0.0
    return sqrt.bind(functools.reduce(add.bind, sums))


@composite("clip_by_global_norm")
def clip_by_global_norm(t_list, clip_norm, use_norm=None):
    """TF's ``clip_by_global_norm``: ``(clipped list, global norm)``; None entries kept."""
    t_list = list(t_list)
    gn = global_norm(t_list) if use_norm is None else use_norm
    one_over = divide.bind(1.0, gn) if not isinstance(gn, float) else math.inf
    scale = multiply.bind(clip_norm, minimum.bind(one_over, divide.bind(1.0, clip_norm)))
    # TF adds (norm - norm) so that an inf or nan norm makes every value nan; that difference
    # folds to 0 here, so the select says it instead
    finite = less.bind(abs_.bind(gn), math.inf)
    scale = where.bind(finite, scale, math.nan)
    return [None if t is None else identity.bind(multiply.bind(t, scale)) for t in t_list], gn


@composite("pad")
def pad(tensor, paddings, mode="CONSTANT", constant_values=0):
    """TF's ``pad``: ``paddings[i] = [before, after]`` for axis i; modes CONSTANT, REFLECT
    and SYMMETRIC (the gradient flows back to the elements each output copies)."""
    shape = tuple(tensor.shape)
    pads = np.asarray(paddings, dtype=np.int64).reshape(-1, 2)
    if pads.shape[0] != len(shape) or (pads < 0).any():
        raise InvalidArgumentError(f"st.pad: paddings must be {len(shape)} pairs of "
                                   f"non-negative ints, got {np.asarray(paddings).tolist()}")
    mode = str(mode).upper()
    modes = {"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric"}
    if mode not in modes:
        raise InvalidArgumentError(f"st.pad: mode must be CONSTANT, REFLECT or SYMMETRIC, "
                                   f"got {mode!r}")
    ids = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    kw = {"constant_values": -1} if mode == "CONSTANT" else {}
    try:
        idx = np.pad(ids, [tuple(p) for p in pads], mode=modes[mode], **kw)
    except ValueError as e:
        raise InvalidArgumentError(f"st.pad: {e}") from None
    out = gather_flat.bind(tensor, idx=idx)
    zero = not hasattr(constant_values, "shape") and np.ndim(constant_values) == 0 and \
        float(constant_values) == 0.0
    if mode == "CONSTANT" and not zero:
        out = where.bind(idx < 0, broadcast_to.bind(constant_values, shape=idx.shape), out)
    return out


@composite("leaky_relu")
def leaky_relu(features, alpha=0.2):
    """``features`` where positive, ``alpha * features`` elsewhere."""
    return leaky_relu_op(float(alpha)).bind(features)


@composite("fill")
def fill(dims, value):
    """A tensor of shape ``dims`` filled with ``value`` (differentiable in ``value``)."""
    return broadcast_to.bind(value, shape=tuple(int(d) for d in np.asarray(dims).reshape(-1)))


@composite("linspace")
def linspace(start, stop, num, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (TF's ``linspace_nd``:
    ``start + i * (stop - start) / (num - 1)``, the last value exactly ``stop``)."""
    num = int(num)
    shape = tuple(np.broadcast_shapes(tuple(getattr(start, "shape", np.shape(start))),
                                      tuple(getattr(stop, "shape", np.shape(stop)))))
    if num <= 0:
        raise InvalidArgumentError(f"st.linspace: num must be positive, got {num}")
    stop_row = expand_dims.bind(broadcast_to.bind(add.bind(stop, 0.0), shape=shape), axis=0)
    if num == 1:
        out = expand_dims.bind(broadcast_to.bind(add.bind(start, 0.0), shape=shape), axis=0)
    else:
        steps = np.arange(num - 1, dtype=np.float64).reshape((num - 1,) + (1,) * len(shape))
        delta = divide.bind(subtract.bind(stop, start), num - 1)
        body = add.bind(start, multiply.bind(steps, delta))
        out = concat.bind(body, stop_row, axis=0)
    if axis != 0:
        out = transpose.bind(out, perm=tuple(np.moveaxis(np.arange(len(shape) + 1), 0, axis)))
    return out


# --------------------------------------------------------------------------------------------
# Creation: constants with no inputs (no derivative)
# --------------------------------------------------------------------------------------------


def _creation(name: str) -> Callable:
    return _entry(CREATION, name)


@_creation("zeros")
def _zeros(shape, dtype):
    return np.zeros(shape, dtype=dtype)


@_creation("ones")
def _ones(shape, dtype):
    return np.ones(shape, dtype=dtype)


@_creation("eye")
def _eye(num_rows, num_columns=None, batch_shape=None, dtype=np.float64):
    m = np.eye(num_rows, num_columns if num_columns is not None else num_rows, dtype=dtype)
    if batch_shape:
        m = np.broadcast_to(m, tuple(batch_shape) + m.shape).copy()
    return m


@_creation("range")
def _range(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    out = np.arange(start, limit, delta)
    if dtype is None:
        dtype = np.float64 if out.dtype.kind == "f" else np.int32
    return out.astype(dtype)



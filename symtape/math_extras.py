"""More of ``st.math``: sums of lists, safe products and logarithms, erfc, the scaled Bessel
functions, the Hurwitz zeta, polyval, log-sigmoid, float tests, bool reductions, one-hot codes,
sequence masks and ``l2_normalize``.

They live apart from ``symtape/math.py`` for its size only; ``st.math`` (and so ``st``)
re-exports every name, and ``st.math.COMPOSITES`` takes this module's composites in too.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from symtape import ops
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError
from symtape.core.tensor import floatx, true_divide
from symtape.core.variables import Tensor, constant, convert_to_tensor
from symtape.segments import *  # noqa: F403 - TensorFlow's segment and scatter ops
from symtape.ordering import *  # noqa: F403 - TensorFlow's scans and orderings

__all__ = ["add_n", "reciprocal", "erfc", "xlogy", "multiply_no_nan", "log_sigmoid",
           "is_finite", "is_nan", "is_inf", "reduce_all", "reduce_any", "one_hot",
           "sequence_mask", "l2_normalize",
           "segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
           "unsorted_segment_sum", "unsorted_segment_mean", "unsorted_segment_max",
           "unsorted_segment_min", "unsorted_segment_prod", "scatter_nd",
           "tensor_scatter_nd_add", "tensor_scatter_nd_sub", "tensor_scatter_nd_update",
           "tensor_scatter_nd_max", "tensor_scatter_nd_min", "bessel_i0e", "bessel_i1e",
           "zeta", "polyval", "cumsum", "cumprod", "sort", "argsort", "top_k",
           "searchsorted", "unique"]

#: ``name -> composite`` of this module (``st.math.COMPOSITES`` holds them too).
COMPOSITES: dict = {}


def _composite(name: str):
    def deco(fn):
        COMPOSITES[name] = fn
        return fn

    return deco


def _scalar(value, dtype) -> Tensor:
    return constant(np.asarray(value, dtype=dtype))


def _floats(x, what: str) -> Tensor:
    """``x`` as a tensor of a float dtype, else a DTypeError naming the argument."""
    x = convert_to_tensor(x)
    if x.dtype.kind != "f":
        raise DTypeError(f"{what} must have a float dtype, got {x.dtype.name}")
    return x


# --------------------------------------------------------------------------------------------
# Composites
# --------------------------------------------------------------------------------------------


@_composite("add_n")
def _add_n(inputs):
    """The elementwise sum of tensors of one shape and dtype."""
    return functools.reduce(ops.add.bind, inputs[1:], ops.identity.bind(inputs[0]))


@_composite("reciprocal")
def _reciprocal(x):
    return true_divide(_scalar(1, x.dtype), x)


@_composite("xlogy")
def _xlogy(x, y):
    """``x * log(y)``, and 0 where ``x == 0`` (whatever ``y``, nan included). ``y`` is
    replaced by 1 there, so neither the value nor a derivative meets ``0 * log(0)``: d/dx is
    ``log(y)`` and d/dy ``x / y``, both 0 where ``x == 0`` (TF's xlogy and xdivy rules)."""
    zero = ops.equal.bind(x, _scalar(0, x.dtype))
    safe_y = ops.where.bind(zero, _scalar(1, y.dtype), y)
    return ops.where.bind(zero, _scalar(0, x.dtype),
                          ops.multiply.bind(x, ops.log.bind(safe_y)))


@_composite("log_sigmoid")
def _log_sigmoid(x):
    """``-softplus(-x)``: no overflow for large ``|x|``."""
    return ops.negative.bind(ops.softplus.bind(ops.negative.bind(x)))


@_composite("is_finite")
def _is_finite(x):
    return ops.less.bind(ops.abs_.bind(x), _scalar(np.inf, x.dtype))


@_composite("is_nan")
def _is_nan(x):
    return ops.not_equal.bind(x, x)  # nan is the one value unequal to itself


@_composite("is_inf")
def _is_inf(x):
    return ops.equal.bind(ops.abs_.bind(x), _scalar(np.inf, x.dtype))


# over 0 and 1, all is the minimum and any the maximum; an empty reduction gives reduce_min's
# +inf (all: True) and reduce_max's -inf (any: False), TensorFlow's identities
@_composite("reduce_all")
def _reduce_all(x, axis=None, keepdims=False):
    low = ops.reduce_min.bind(ops.cast.bind(x, dtype=np.dtype(np.float64)), axis=axis,
                              keepdims=keepdims)
    return ops.greater.bind(low, _scalar(0, np.float64))


@_composite("reduce_any")
def _reduce_any(x, axis=None, keepdims=False):
    high = ops.reduce_max.bind(ops.cast.bind(x, dtype=np.dtype(np.float64)), axis=axis,
                               keepdims=keepdims)
    return ops.greater.bind(high, _scalar(0, np.float64))


@_composite("one_hot")
def _one_hot(indices, depth: int, on_value, off_value, axis: int):
    """``on_value`` where the new axis' position equals the index, ``off_value`` elsewhere;
    an index outside ``[0, depth)`` gives a row of ``off_value``. No gradient flows to the
    values (TF's OneHot has none)."""
    ndim = indices.ndim + 1
    axis = axis % ndim
    iota = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (ndim - 1 - axis))
    hit = ops.equal.bind(ops.expand_dims.bind(ops.cast.bind(indices, dtype=np.dtype(np.int64)),
                                              axis=axis), constant(iota))
    return ops.where.bind(hit, ops.stop_gradient.bind(on_value),
                          ops.stop_gradient.bind(off_value))


@_composite("sequence_mask")
def _sequence_mask(lengths, maxlen: int, dtype):
    """``mask[..., j] = j < lengths[...]``, cast to ``dtype``."""
    iota = constant(np.arange(maxlen, dtype=np.int64))
    mask = ops.less.bind(iota, ops.expand_dims.bind(
        ops.cast.bind(lengths, dtype=np.dtype(np.int64)), axis=lengths.ndim))
    return mask if dtype == np.dtype(bool) else ops.cast.bind(mask, dtype=dtype)


@_composite("l2_normalize")
def _l2_normalize(x, axis, epsilon: float):
    """TF's form: ``x * rsqrt(max(sum(x**2), epsilon))``."""
    square_sum = ops.reduce_sum.bind(ops.square.bind(x), axis=axis, keepdims=True)
    return ops.multiply.bind(x, ops.rsqrt.bind(ops.maximum.bind(
        square_sum, _scalar(epsilon, x.dtype))))


# --------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------


def add_n(inputs, name=None) -> Tensor:
    """``inputs[0] + inputs[1] + ...``: a list of tensors of one shape and dtype.

    >>> import symtape as st
    >>> st.add_n([st.constant([1.0, 2.0]), st.constant([3.0, 4.0])]).numpy()
    array([4., 6.])
    """
    if isinstance(inputs, Tensor) or not isinstance(inputs, Sequence) or not inputs:
        raise InvalidArgumentError("st.math.add_n: inputs must be a non-empty list of tensors")
    tensors = [convert_to_tensor(t) for t in inputs]
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != tensors[0].shape:
            raise ShapeError(f"st.math.add_n: inputs[{i}] has shape {t.shape}, inputs[0] "
                             f"{tensors[0].shape}; all inputs need one shape")
        if t.dtype != tensors[0].dtype:
            raise DTypeError(f"st.math.add_n: inputs[{i}] has dtype {t.dtype.name}, inputs[0] "
                             f"{tensors[0].dtype.name}; all inputs need one dtype")
    return _add_n(tensors)


def reciprocal(x, name=None) -> Tensor:
    """``1 / x``, elementwise.

    >>> import symtape as st
    >>> st.math.reciprocal(st.constant([2.0, -4.0])).numpy()
    array([ 0.5 , -0.25])
    """
    return _reciprocal(_floats(x, "st.math.reciprocal: x"))


def erfc(x, name=None) -> Tensor:
    """``1 - erf(x)``, the complementary error function, accurate in its tail too (its own
    head: the C library's ``erfc`` eagerly, ``codegen/special.py`` compiled; it underflows to
    0 past x = 27.2). Derivative ``-2/sqrt(pi) exp(-x**2)``.

    >>> import symtape as st
    >>> st.math.erfc(st.constant([0.0, -1.0, 10.0])).numpy()
    array([1.00000000e+00, 1.84270079e+00, 2.08848758e-45])
    """
    return ops.OPS["erfc"].bind(_floats(x, "st.math.erfc: x"))


def bessel_i0e(x, name=None) -> Tensor:
    """``exp(-|x|) I0(x)``, the exponentially scaled modified Bessel function of order 0
    (``tf.math.bessel_i0e``); derivative ``bessel_i1e(x) - sign(x) bessel_i0e(x)``.

    >>> import symtape as st
    >>> st.math.bessel_i0e(st.constant([0.0, 1.0, -1.0])).numpy()
    array([1.        , 0.46575961, 0.46575961])
    """
    return ops.OPS["bessel_i0e"].bind(_floats(x, "st.math.bessel_i0e: x"))


def bessel_i1e(x, name=None) -> Tensor:
    """``exp(-|x|) I1(x)``, the exponentially scaled modified Bessel function of order 1
    (``tf.math.bessel_i1e``); derivative ``bessel_i0e(x) - bessel_i1e(x) (sign(x) + 1/x)``,
    1/2 at 0 (TensorFlow's rule).

    >>> import symtape as st
    >>> st.math.bessel_i1e(st.constant([0.0, 1.0, -1.0])).numpy()
    array([ 0.        ,  0.20791042, -0.20791042])
    """
    return ops.OPS["bessel_i1e"].bind(_floats(x, "st.math.bessel_i1e: x"))


def zeta(x, q, name=None) -> Tensor:
    """The Hurwitz zeta function ``sum over k >= 0 of (q + k) ** -x`` (``tf.math.zeta``):
    inf at ``x = 1`` and at ``q = 0, -1, -2, ...``; nan for ``x < 1`` and for ``q < 0`` with
    ``x`` not an integer (and, to bound the direct sum, below ``q = -1e6``). Its gradient in
    ``q`` is ``-x zeta(x + 1, q)``; in ``x`` there is none (None, as TensorFlow's).

    >>> import symtape as st
    >>> st.math.zeta(st.constant([2.0, 3.0]), st.constant([1.0, 2.0])).numpy()
    array([1.64493407, 0.2020569 ])
    """
    x, q = _floats(x, "st.math.zeta: x"), _floats(q, "st.math.zeta: q")
    try:
        np.broadcast_shapes(x.shape, q.shape)
    except ValueError:
        raise ShapeError(f"st.math.zeta: x of shape {x.shape} and q of shape {q.shape} do not "
                         "broadcast") from None
    return ops.OPS["zeta"].bind(x, q)


def polyval(coeffs, x, name=None) -> Tensor:
    """``coeffs[0] x**(n-1) + ... + coeffs[n-1]`` by Horner's rule (``tf.math.polyval``):
    ``coeffs`` a list of tensors, highest power first, each broadcast with ``x``; an empty
    list gives zeros like ``x``.

    >>> import symtape as st
    >>> st.math.polyval([1.0, -2.0, 3.0], st.constant([0.0, 2.0])).numpy()
    array([3., 3.])
    """
    if not isinstance(coeffs, (list, tuple)):
        raise InvalidArgumentError(f"st.math.polyval: coeffs must be a list of tensors, got "
                                   f"{type(coeffs).__name__}")
    x = convert_to_tensor(x)
    if not coeffs:
        return ops.multiply.bind(x, _scalar(0, x.dtype))
    terms = [c if isinstance(c, Tensor) else constant(np.asarray(c, dtype=x.dtype))
             for c in coeffs]
    for i, c in enumerate(terms):
        if c.dtype != x.dtype:
            raise DTypeError(f"st.math.polyval: coeffs[{i}] has dtype {c.dtype.name}, x "
                             f"{x.dtype.name}")
        try:
            np.broadcast_shapes(c.shape, x.shape)
        except ValueError:
            raise ShapeError(f"st.math.polyval: coeffs[{i}] of shape {c.shape} does not "
                             f"broadcast with x of shape {x.shape}") from None
    acc = terms[0]
    for c in terms[1:]:
        acc = ops.add.bind(c, ops.multiply.bind(acc, x))
    return acc if len(terms) > 1 else ops.add.bind(acc, ops.multiply.bind(x, _scalar(0, x.dtype)))


def xlogy(x, y, name=None) -> Tensor:
    """``x * log(y)``, and 0 where ``x == 0`` (even where ``y`` is 0 or nan), as
    ``tf.math.xlogy``; its gradient is 0 there too.

    >>> import symtape as st
    >>> st.math.xlogy([0.0, 2.0], [0.0, 1.0]).numpy()
    array([0., 0.])
    """
    return _xlogy(_floats(x, "st.math.xlogy: x"), _floats(y, "st.math.xlogy: y"))


def multiply_no_nan(x, y, name=None) -> Tensor:
    """``x * y``, and 0 where ``y == 0`` even if ``x`` is inf or nan
    (``tf.math.multiply_no_nan``).

    >>> import symtape as st
    >>> st.math.multiply_no_nan([float("inf"), 2.0], [0.0, 3.0]).numpy()
    array([0., 6.])
    """
    x = _floats(x, "st.math.multiply_no_nan: x")
    return ops.OPS["multiply_no_nan"].bind(x, _floats(y, "st.math.multiply_no_nan: y"))


def log_sigmoid(x, name=None) -> Tensor:
    """``log(1 / (1 + exp(-x)))``, computed as ``-softplus(-x)``.

    >>> import symtape as st
    >>> st.math.log_sigmoid(st.constant([0.0, -1000.0])).numpy()
    array([-6.93147181e-01, -1.00000000e+03])
    """
    return _log_sigmoid(_floats(x, "st.math.log_sigmoid: x"))


def _float_test(fn, name: str, doc: str, example: str):
    def test(x, name=None) -> Tensor:
        return fn(_floats(x, f"st.math.{test.__name__}: x"))

    test.__name__ = test.__qualname__ = name
    test.__doc__ = f"""Where ``x`` is {doc}: a bool tensor (no gradient).

    >>> import symtape as st
    >>> st.math.{name}([1.0, float("inf"), float("nan")]).numpy()
    {example}
    """
    return test


is_finite = _float_test(_is_finite, "is_finite", "neither inf nor nan",
                        "array([ True, False, False])")
is_nan = _float_test(_is_nan, "is_nan", "nan", "array([False, False,  True])")
is_inf = _float_test(_is_inf, "is_inf", "+inf or -inf", "array([False,  True, False])")


def _bools(x, what: str) -> Tensor:
    x = convert_to_tensor(x)
    if x.dtype != np.dtype(bool):
        raise DTypeError(f"{what}: input_tensor must be bool, got {x.dtype.name}")
    return x


def _reduction_axis(axis):
    if isinstance(axis, Tensor):
        axis = np.asarray(axis.numpy()).tolist()
    return tuple(axis) if isinstance(axis, list) else axis


def reduce_all(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical and over ``axis`` (None: all axes); True over no elements.

    >>> import symtape as st
    >>> st.math.reduce_all([[True, False], [True, True]], axis=1).numpy()
    array([False,  True])
    """
    return _reduce_all(_bools(input_tensor, "st.math.reduce_all"),
                       axis=_reduction_axis(axis), keepdims=bool(keepdims))


def reduce_any(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical or over ``axis`` (None: all axes); False over no elements.

    >>> import symtape as st
    >>> st.math.reduce_any([[False, False], [True, False]], axis=1).numpy()
    array([False,  True])
    """
    return _reduce_any(_bools(input_tensor, "st.math.reduce_any"),
                       axis=_reduction_axis(axis), keepdims=bool(keepdims))


def _integers(x, what: str) -> Tensor:
    x = convert_to_tensor(x)
    if x.dtype.kind not in "iu":
        raise DTypeError(f"{what} must be integers, got {x.dtype.name}")
    return x


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None,
            name=None) -> Tensor:
    """A one-hot code of integer ``indices`` along a new axis ``axis`` (default -1) of size
    ``depth``: ``on_value`` (default 1) at the index, ``off_value`` (default 0) elsewhere;
    indices outside ``[0, depth)`` give no ``on_value``. The dtype is ``dtype``, else that of
    ``on_value`` or ``off_value``, else ``st.config.floatx()`` (float64 unless set).

    >>> import symtape as st
    >>> st.one_hot([0, 2, -1], 3).numpy()
    array([[1., 0., 0.],
           [0., 0., 1.],
           [0., 0., 0.]])
    """
    indices = _integers(indices, "st.one_hot: indices")
    if isinstance(depth, Tensor):
        depth = depth.numpy()
    if np.ndim(depth) != 0 or int(depth) != depth or depth < 0:
        raise InvalidArgumentError(f"st.one_hot: depth must be a non-negative int, got {depth}")
    axis = -1 if axis is None else int(axis)
    if not -indices.ndim - 1 <= axis <= indices.ndim:
        raise InvalidArgumentError(f"st.one_hot: axis {axis} is out of range for indices of "
                                   f"rank {indices.ndim}")
    given = [convert_to_tensor(v) for v in (on_value, off_value) if v is not None]
    out = np.dtype(dtype) if dtype is not None else given[0].dtype if given else floatx()
    for label, value in (("on_value", on_value), ("off_value", off_value)):
        if isinstance(value, Tensor) and (value.ndim or value.dtype != out):
            raise DTypeError(f"st.one_hot: {label} must be a scalar of dtype {out.name}, got "
                             f"{value.dtype.name} of shape {value.shape}")
    on = _scalar(1 if on_value is None else on_value, out) \
        if not isinstance(on_value, Tensor) else on_value
    off = _scalar(0 if off_value is None else off_value, out) \
        if not isinstance(off_value, Tensor) else off_value
    return _one_hot(indices, int(depth), on, off, axis)


def sequence_mask(lengths, maxlen=None, dtype="bool", name=None) -> Tensor:
    """``mask[..., j] = j < lengths[...]`` over ``j < maxlen`` (default: the largest
    length, which needs ``lengths``' values: inside ``st.function`` give ``maxlen``), cast
    to ``dtype``.

    >>> import symtape as st
    >>> st.sequence_mask([1, 3], 4).numpy()
    array([[ True, False, False, False],
           [ True,  True,  True, False]])
    """
    lengths = _integers(lengths, "st.sequence_mask: lengths")
    if maxlen is None:
        values = np.asarray(lengths.numpy())
        maxlen = int(values.max()) if values.size else 0
    elif isinstance(maxlen, Tensor):
        maxlen = maxlen.numpy()
    if np.ndim(maxlen) != 0 or int(maxlen) != maxlen or maxlen < 0:
        raise InvalidArgumentError(f"st.sequence_mask: maxlen must be a non-negative int, got "
                                   f"{maxlen}")
    return _sequence_mask(lengths, int(maxlen), np.dtype(dtype))


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None) -> Tensor:
    """``x / sqrt(max(sum(x**2, axis), epsilon))``, as ``tf.math.l2_normalize``.

    >>> import symtape as st
    >>> st.math.l2_normalize(st.constant([3.0, 4.0])).numpy()
    array([0.6, 0.8])
    """
    axis = dim if axis is None else axis
    return _l2_normalize(_floats(x, "st.math.l2_normalize: x"), _reduction_axis(axis),
                         float(epsilon))

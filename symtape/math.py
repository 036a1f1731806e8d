"""``st.math``: TensorFlow's math, array and reduction functions over the op table."""

from __future__ import annotations

import builtins
import functools
import string
from collections.abc import Sequence

import numpy as np

from symtape import ops
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError
from symtape.core.tensor import floatx, true_divide
from symtape.core.variables import Tensor, constant, convert_to_tensor
from symtape.core.variables import shape_arg as _shape_arg
from symtape.base.lazy import LazyModule
# TensorFlow's moves (``slice`` shadows the builtin here: this module writes builtins.slice)
from symtape.moves import gather_nd, meshgrid, roll, slice, strided_slice  # noqa: A004
from symtape import math_extras
from symtape.math_extras import *  # noqa: F403 - st.math's names, continued there

sp = LazyModule("sp", globals(), "sympy")

__all__ = [
    "identity", "cast", "add", "subtract", "multiply", "divide", "truediv", "pow", "square",
    "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "asin", "acos",
    "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "abs", "sign",
    "floor", "ceil", "round", "maximum", "minimum", "negative", "floordiv", "floormod", "mod",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and",
    "logical_or", "logical_not", "where", "reduce_sum", "reduce_mean", "reduce_prod",
    "reduce_max", "reduce_min", "reduce_logsumexp", "reduce_euclidean_norm", "reduce_variance",
    "reduce_std", "matmul", "tensordot", "einsum", "transpose", "reshape", "stack", "concat",
    "squeeze", "expand_dims", "tile", "gather", "broadcast_to", "reverse", "zeros", "ones",
    "zeros_like", "ones_like", "eye", "linspace", "range", "fill", "norm", "clip_by_value",
    "clip_by_norm", "clip_by_global_norm", "global_norm", "sigmoid", "softplus",
    "stop_gradient", "shape", "size", "rank", "unstack", "split", "pad", "argmax", "argmin",
    "divide_no_nan", "squared_difference", "lgamma", "digamma", "polygamma",
    "roll", "slice", "strided_slice", "gather_nd", "meshgrid",
    *math_extras.__all__,
]


# --------------------------------------------------------------------------------------------
# Composites: API names TensorFlow itself defines as compositions of ops (and creation
# functions, constants with no inputs); the public functions below check and convert their
# arguments and call these.
# --------------------------------------------------------------------------------------------

#: ``name -> composite`` (the op-table test asks for a row per entry).
COMPOSITES: dict = dict(math_extras.COMPOSITES)
#: ``name -> numpy constructor`` of the creation functions.
CREATION: dict = {}


def table_entry(table: dict, name: str):
    """Decorator registering a function under ``name`` in ``table``.

    >>> table = {}
    >>> @table_entry(table, "twice")
    ... def _twice(x):
    ...     return 2 * x
    >>> table["twice"](3)
    6
    """
    def deco(fn):
        table[name] = fn
        return fn

    return deco


_composite = functools.partial(table_entry, COMPOSITES)
_creation = functools.partial(table_entry, CREATION)


@_composite("reduce_variance")
def _reduce_variance(x, axis=None, keepdims=False):
    """Variance over ``axis``: the mean of the ``squared_difference`` from the mean (as
    ``st.nn.moments``)."""
    m = ops.reduce_mean.bind(x, axis=axis, keepdims=True)
    return ops.reduce_mean.bind(ops.squared_difference.bind(x, m), axis=axis,
                                keepdims=keepdims)


def _arg_extreme(x, axis: int, largest: bool):
    """The index (int64) of the first largest (smallest) element along ``axis``: the
    smallest index where the element equals the extreme (no gradient: an integer)."""
    extreme = (ops.reduce_max if largest else ops.reduce_min).bind(x, axis=(axis,),
                                                                   keepdims=True)
    n = x.shape[axis]
    iota = ops.reshape.bind(constant(np.arange(n, dtype=np.int64)),
                            shape=(n,) + (1,) * (x.ndim - 1 - axis))
    places = ops.where.bind(ops.equal.bind(x, extreme), iota, constant(np.int64(n)))
    return ops.reduce_min.bind(places, axis=(axis,), keepdims=False)


@_composite("argmax")
def _argmax(x, axis):
    return _arg_extreme(x, axis, True)


@_composite("argmin")
def _argmin(x, axis):
    return _arg_extreme(x, axis, False)


@_composite("divide_no_nan")
def _divide_no_nan(x, y):
    """``x / y``, and 0 where ``y`` is 0 (its gradient too)."""
    zero = ops.equal.bind(y, constant(np.zeros((), dtype=y.dtype)))
    safe = ops.where.bind(zero, constant(np.ones((), dtype=y.dtype)), y)
    return ops.where.bind(zero, constant(np.zeros((), dtype=y.dtype)),
                          true_divide(x, safe))


@_composite("tensordot")
def _tensordot(a, b, axes):
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
    return ops.einsum.bind(a, b, spec=f"{''.join(la)},{''.join(lb)}->{''.join(out)}")


def _euclid(x, axis, keepdims):
    return ops.sqrt.bind(ops.reduce_sum.bind(ops.multiply.bind(x, x), axis=axis, keepdims=keepdims))


@_composite("norm")
def _norm(tensor, ord="euclidean", axis=None, keepdims=False):
    """TF's ``norm``: vector p-norms, and 'fro', 1, inf for matrices (``axis`` a pair)."""
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        r = len(tensor.shape)
        a0, a1 = (int(axis[0]) % r, int(axis[1]) % r)
        if ord in ("euclidean", "fro"):
            return _euclid(tensor, (a0, a1), keepdims)
        if ord == 1:
            sums = ops.reduce_sum.bind(ops.abs_.bind(tensor), axis=a0, keepdims=True)
            return ops.reduce_max.bind(sums, axis=(a0, a1), keepdims=keepdims)
        if ord in (np.inf, "inf"):
            sums = ops.reduce_sum.bind(ops.abs_.bind(tensor), axis=a1, keepdims=True)
            return ops.reduce_max.bind(sums, axis=(a0, a1), keepdims=keepdims)
        raise InvalidArgumentError(f"st.norm: ord={ord!r} is not supported for matrices "
                                   "(use 'fro', 'euclidean', 1 or inf)")
    if ord in ("euclidean", 2, 2.0) or (ord == "fro" and axis is None):
        return _euclid(tensor, axis, keepdims)
    if ord in (np.inf, "inf"):
        return ops.reduce_max.bind(ops.abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if ord == 1:
        return ops.reduce_sum.bind(ops.abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        p = sp.Integer(ord) if float(ord).is_integer() else ord
        powered = ops.pow_.bind(ops.abs_.bind(tensor), int(p) if isinstance(p, sp.Integer) else p)
        total = ops.reduce_sum.bind(powered, axis=axis, keepdims=keepdims)
        return ops.pow_.bind(total, 1 / sp.Integer(p) if isinstance(p, sp.Integer) else 1.0 / p)
    raise InvalidArgumentError(f"st.norm: ord={ord!r} must be 'euclidean', 'fro', a positive "
                               "number or inf")


@_composite("clip_by_norm")
def _clip_by_norm(t, clip_norm, axes=None):
    """TF's ``clip_by_norm``: ``t * clip_norm / max(l2norm(t), clip_norm)``, safe at 0; a
    ``clip_norm <= 0`` is taken as 0 and gives zeros."""
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        if clip_norm <= 0:
            return ops.multiply.bind(t, 0)
    elif clip_norm.dtype != t.dtype:
        clip_norm = ops.cast.bind(clip_norm, dtype=t.dtype)
    l2sum = ops.reduce_sum.bind(ops.multiply.bind(t, t), axis=axes, keepdims=True)
    pred = ops.greater.bind(l2sum, 0)
    l2sum_safe = ops.where.bind(pred, l2sum, _ones_like_of(l2sum))
    l2norm = ops.where.bind(pred, ops.sqrt.bind(l2sum_safe), l2sum)
    intermediate = ops.multiply.bind(t, clip_norm)
    clipped = ops.divide.bind(intermediate, ops.maximum.bind(l2norm, clip_norm))
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        return ops.identity.bind(clipped)
    return ops.identity.bind(ops.where.bind(ops.less_equal.bind(clip_norm, 0), 0, clipped))


def _ones_like_of(t):
    return np.ones(tuple(t.shape), dtype=t.dtype)


@_composite("global_norm")
def _global_norm(t_list):
    """sqrt of the sum of squares of all elements of the (non-None) tensors."""
    sums = [ops.reduce_sum.bind(ops.multiply.bind(t, t)) for t in t_list if t is not None]
    if not sums:
        return 0.0
    return ops.sqrt.bind(functools.reduce(ops.add.bind, sums))


@_composite("clip_by_global_norm")
def _clip_by_global_norm(t_list, clip_norm, use_norm=None):
    """TF's ``clip_by_global_norm``: ``(clipped list, global norm)``; None entries kept."""
    t_list = list(t_list)
    gn = _global_norm(t_list) if use_norm is None else use_norm
    one_over = ops.divide.bind(1.0, gn) if not isinstance(gn, float) else np.inf
    scale = ops.multiply.bind(clip_norm,
                              ops.minimum.bind(one_over, ops.divide.bind(1.0, clip_norm)))
    # TF adds (norm - norm) so that an inf or nan norm makes every value nan; that difference
    # folds to 0 here, so the select says it instead
    finite = ops.less.bind(ops.abs_.bind(gn), np.inf)
    scale = ops.where.bind(finite, scale, np.nan)
    clipped = [None if t is None else ops.identity.bind(ops.multiply.bind(t, scale))
               for t in t_list]
    return clipped, gn


@_composite("pad")
def _pad(tensor, paddings, mode="CONSTANT", constant_values=0):
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
    out = ops.gather_flat.bind(tensor, idx=idx)
    zero = not hasattr(constant_values, "shape") and np.ndim(constant_values) == 0 and \
        float(constant_values) == 0.0
    if mode == "CONSTANT" and not zero:
        out = ops.where.bind(idx < 0, ops.broadcast_to.bind(constant_values, shape=idx.shape), out)
    return out


@_composite("fill")
def _fill(dims, value):
    """A tensor of shape ``dims`` filled with ``value`` (differentiable in ``value``)."""
    return ops.broadcast_to.bind(value, shape=tuple(int(d) for d in np.asarray(dims).reshape(-1)))


@_composite("linspace")
def _linspace(start, stop, num, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (TF's ``linspace_nd``:
    ``start + i * (stop - start) / (num - 1)``, the last value exactly ``stop``)."""
    num = int(num)
    shape = tuple(np.broadcast_shapes(tuple(getattr(start, "shape", np.shape(start))),
                                      tuple(getattr(stop, "shape", np.shape(stop)))))
    if num <= 0:
        raise InvalidArgumentError(f"st.linspace: num must be positive, got {num}")
    stop_row = ops.expand_dims.bind(ops.broadcast_to.bind(ops.add.bind(stop, 0.0), shape=shape),
                                    axis=0)
    if num == 1:
        out = ops.expand_dims.bind(ops.broadcast_to.bind(ops.add.bind(start, 0.0), shape=shape),
                                   axis=0)
    else:
        steps = np.arange(num - 1, dtype=np.float64).reshape((num - 1,) + (1,) * len(shape))
        delta = ops.divide.bind(ops.subtract.bind(stop, start), num - 1)
        body = ops.add.bind(start, ops.multiply.bind(steps, delta))
        out = ops.concat.bind(body, stop_row, axis=0)
    if axis != 0:
        out = ops.transpose.bind(out, perm=tuple(np.moveaxis(np.arange(len(shape) + 1), 0, axis)))
    return out


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


def _unary(op: ops.Primitive, name: str, formula: str, show: str):
    def fn(x, name=None):
        return op.bind(x)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""``{formula}``, elementwise.

    >>> import symtape as st
    >>> st.{name}(st.symbol("x")).formula()
    {show}
    """
    return fn


def _binary(op: ops.Primitive, name: str, formula: str, show: str):
    def fn(x, y, name=None):
        return op.bind(x, y)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""``{formula}``, elementwise with numpy broadcasting.

    >>> import symtape as st
    >>> st.{name}(st.symbol("x"), st.symbol("y")).formula()
    {show}
    """
    return fn


identity = _unary(ops.identity, "identity", "x", "x")
negative = _unary(ops.negative, "negative", "-x", "-x")
square = _unary(ops.square, "square", "x**2", "x**2")
sqrt = _unary(ops.sqrt, "sqrt", "sqrt(x)", "sqrt(x)")
rsqrt = _unary(ops.rsqrt, "rsqrt", "1/sqrt(x)", "1/sqrt(x)")
exp = _unary(ops.exp, "exp", "exp(x)", "exp(x)")
expm1 = _unary(ops.expm1, "expm1", "exp(x) - 1", "expm1(x)")
log = _unary(ops.log, "log", "log(x)", "log(x)")
log1p = _unary(ops.log1p, "log1p", "log(1 + x)", "log1p(x)")
sin = _unary(ops.sin, "sin", "sin(x)", "sin(x)")
cos = _unary(ops.cos, "cos", "cos(x)", "cos(x)")
tan = _unary(ops.tan, "tan", "tan(x)", "tan(x)")
asin = _unary(ops.asin, "asin", "asin(x)", "asin(x)")
acos = _unary(ops.acos, "acos", "acos(x)", "acos(x)")
atan = _unary(ops.atan, "atan", "atan(x)", "atan(x)")
sinh = _unary(ops.sinh, "sinh", "sinh(x)", "sinh(x)")
cosh = _unary(ops.cosh, "cosh", "cosh(x)", "cosh(x)")
tanh = _unary(ops.tanh, "tanh", "tanh(x)", "tanh(x)")
asinh = _unary(ops.asinh, "asinh", "asinh(x)", "asinh(x)")
acosh = _unary(ops.acosh, "acosh", "acosh(x)", "acosh(x)")
atanh = _unary(ops.atanh, "atanh", "atanh(x)", "atanh(x)")
erf = _unary(ops.erf, "erf", "erf(x)", "erf(x)")
lgamma = _unary(ops.OPS["lgamma"], "lgamma", "log|Gamma(x)|", "loggamma(x)")
digamma = _unary(ops.OPS["digamma"], "digamma", "psi(x) = d/dx log Gamma(x)", "polygamma(0, x)")
polygamma = _binary(ops.OPS["polygamma"], "polygamma",
                    "psi^(x)(y), the x-th derivative of digamma at y", "polygamma(x, y)")
abs = _unary(ops.abs_, "abs", "|x|", "Abs(x)")  # noqa: A001 - TensorFlow's name
sign = _unary(ops.sign, "sign", "sign(x)", "sign(x)")
floor = _unary(ops.floor, "floor", "floor(x)", "floor(x)")
ceil = _unary(ops.ceil, "ceil", "ceil(x)", "ceiling(x)")
round = _unary(ops.round_, "round", "round half to even", "round(x)")  # noqa: A001
sigmoid = _unary(ops.sigmoid, "sigmoid", "1/(1 + exp(-x))", "1/(1 + exp(-x))")
softplus = _unary(ops.softplus, "softplus", "log(1 + exp(x)), computed stably",
                  "log1p(exp(-Abs(x))) + Max(0, x)")
add = _binary(ops.add, "add", "x + y", "x + y")
subtract = _binary(ops.subtract, "subtract", "x - y", "x - y")
multiply = _binary(ops.multiply, "multiply", "x * y", "x*y")
maximum = _binary(ops.maximum, "maximum", "max(x, y)", "Max(x, y)")
minimum = _binary(ops.minimum, "minimum", "min(x, y)", "Min(x, y)")
squared_difference = _binary(ops.squared_difference, "squared_difference", "(x - y)**2",
                             "(x - y)**2")
atan2 = _binary(ops.atan2, "atan2", "atan2(y, x) of arguments (y, x)", "atan2(x, y)")
floordiv = _binary(ops.floordiv, "floordiv", "floor(x / y)", "floor(x/y)")
floormod = _binary(ops.floormod, "floormod", "x - y*floor(x/y)", "Mod(x, y)")
mod = floormod
logical_and = ops.logical_and.bind
logical_or = ops.logical_or.bind
logical_not = ops.logical_not.bind


def pow(x, y, name=None):  # noqa: A001 - TensorFlow's name
    """``x ** y`` elementwise (Python ints stay exact exponents).

    >>> import symtape as st
    >>> st.pow(st.symbol("x"), 3).formula()
    x**3
    """
    return ops.pow_.bind(x, y)


def divide(x, y, name=None):
    """``x / y`` elementwise; integer arguments give float64 (TF's true division).

    >>> import symtape as st
    >>> st.divide(st.symbol("x"), 4).formula()
    x/4
    """
    return true_divide(x, y)


truediv = divide


def _compare(op: ops.Primitive, name: str, sym: str):
    def fn(x, y, name=None):
        return op.bind(x, y)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""``x {sym} y`` elementwise, a bool tensor.

    >>> import symtape as st
    >>> st.{name}(st.constant([1.0, 2.0]), 1.5).numpy().tolist()
    {[bool(eval(f'{v} {sym} 1.5')) for v in (1.0, 2.0)]}
    """
    return fn


less = _compare(ops.less, "less", "<")
less_equal = _compare(ops.less_equal, "less_equal", "<=")
greater = _compare(ops.greater, "greater", ">")
greater_equal = _compare(ops.greater_equal, "greater_equal", ">=")
equal = _compare(ops.equal, "equal", "==")
not_equal = _compare(ops.not_equal, "not_equal", "!=")


def cast(x, dtype, name=None) -> Tensor:
    """``x`` converted to ``dtype`` (float -> int truncates toward zero).

    >>> import symtape as st
    >>> st.cast(st.constant([1.7, -1.7]), "int32").numpy()
    array([ 1, -1], dtype=int32)
    """
    return ops.cast.bind(x, dtype=np.dtype(dtype))


def where(condition, x=None, y=None, name=None) -> Tensor:
    """Elements of ``x`` where ``condition`` holds, of ``y`` elsewhere (broadcasting).

    >>> import symtape as st
    >>> x = st.symbol("x")
    >>> st.where(x > 0, x, 0).formula()
    Piecewise((x, x > 0), (0, True))
    """
    if x is None or y is None:
        raise InvalidArgumentError("st.where: give both x and y (the one-argument form that "
                                   "returns indices is not differentiable and not supported)")
    return ops.where.bind(condition, x, y)


def argmax(input, axis=None, output_type="int64", name=None) -> Tensor:  # noqa: A002
    """The index of the largest element along ``axis`` (default 0; the first of equal
    ones), as TensorFlow's ``tf.argmax``; an integer tensor, without a gradient.

    >>> import symtape as st
    >>> st.argmax([[1.0, 5.0, 5.0], [7.0, 0.0, 2.0]], axis=1).numpy()
    array([1, 0])
    """
    return _arg_op(_argmax, input, axis, output_type, "st.argmax")


def argmin(input, axis=None, output_type="int64", name=None) -> Tensor:  # noqa: A002
    """The index of the smallest element along ``axis`` (default 0; the first of equal
    ones), as ``tf.argmin``.

    >>> import symtape as st
    >>> st.argmin([3.0, 1.0, 1.0]).numpy()
    np.int64(1)
    """
    return _arg_op(_argmin, input, axis, output_type, "st.argmin")


def _arg_op(fn, x, axis, output_type, what: str) -> Tensor:
    x = convert_to_tensor(x)
    if x.ndim == 0:
        raise ShapeError(f"{what}: input is a scalar; it needs an axis to search along")
    axis = 0 if axis is None else int(axis)
    if not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"{what}: axis {axis} is out of range for input of rank {x.ndim}")
    if x.shape[axis] == 0:
        raise ShapeError(f"{what}: input has no elements along axis {axis}")
    if x.dtype.kind not in "fiu":
        raise DTypeError(f"{what}: input has dtype {x.dtype.name}; it needs numbers")
    out = fn(x, axis % x.ndim)
    return ops.cast.bind(out, dtype=np.dtype(output_type)) \
        if np.dtype(output_type) != out.dtype else out


def divide_no_nan(x, y, name=None) -> Tensor:
    """``x / y`` where ``y`` is not 0, else 0, as ``tf.math.divide_no_nan``.

    >>> import symtape as st
    >>> st.math.divide_no_nan([1.0, 2.0], [4.0, 0.0]).numpy()
    array([0.25, 0.  ])
    """
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    return _divide_no_nan(x, y)


def stop_gradient(x, name=None) -> Tensor:
    """The identity through which no gradient flows (``stop_gradient(x)`` in formulas).

    >>> import symtape as st
    >>> st.stop_gradient(st.symbol("y") ** 2).formula()
    stop_gradient(y**2)
    """
    return ops.stop_gradient.bind(x)


# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


def _reduction(op: ops.Primitive, name: str, doc: str, example: str):
    def fn(input_tensor, axis=None, keepdims=False, name=None):
        return op.bind(input_tensor, axis=_axis_arg(axis), keepdims=keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"""{doc} over ``axis`` (None: all axes), keeping reduced axes when
    ``keepdims``.

    >>> import symtape as st
    >>> st.{name}(st.constant([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy()
    {example}
    """
    return fn


def _axis_arg(axis):
    if isinstance(axis, Tensor):
        return np.asarray(axis.numpy()).tolist()
    return axis


reduce_sum = _reduction(ops.reduce_sum, "reduce_sum", "Sum", "array([3., 7.])")
reduce_mean = _reduction(ops.reduce_mean, "reduce_mean", "Mean", "array([1.5, 3.5])")
reduce_prod = _reduction(ops.reduce_prod, "reduce_prod", "Product", "array([ 2., 12.])")
reduce_max = _reduction(ops.reduce_max, "reduce_max", "Maximum (ties share the gradient)",
                        "array([2., 4.])")
reduce_min = _reduction(ops.reduce_min, "reduce_min", "Minimum (ties share the gradient)",
                        "array([1., 3.])")
reduce_logsumexp = _reduction(ops.reduce_logsumexp, "reduce_logsumexp",
                              "``log(sum(exp(x)))``, computed stably",
                              "array([2.31326169, 4.31326169])")
reduce_euclidean_norm = _reduction(ops.reduce_euclidean_norm, "reduce_euclidean_norm",
                                   "``sqrt(sum(x**2))``", "array([2.23606798, 5.        ])")


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Variance (mean squared deviation) over ``axis``.

    >>> import symtape as st
    >>> float(st.reduce_variance(st.constant([1.0, 2.0, 3.0, 4.0])))
    1.25
    """
    return _reduce_variance(input_tensor, axis=_axis_arg(axis), keepdims=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Standard deviation over ``axis``.

    >>> import symtape as st
    >>> float(st.math.reduce_std(st.constant([1.0, 3.0])))
    1.0
    """
    return ops.sqrt.bind(reduce_variance(input_tensor, axis, keepdims))


# --------------------------------------------------------------------------------------------
# Linear algebra helpers
# --------------------------------------------------------------------------------------------


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, output_type=None, name=None) -> Tensor:
    """Matrix product of the last two axes (rank >= 2), batch axes broadcast.

    >>> import symtape as st
    >>> st.matmul(st.constant([[1.0, 2.0]]), st.constant([[3.0], [4.0]])).numpy()
    array([[11.]])
    """
    return ops.matmul.bind(a, b, transpose_a=bool(transpose_a or adjoint_a),
                           transpose_b=bool(transpose_b or adjoint_b))


def tensordot(a, b, axes, name=None) -> Tensor:
    """Contraction of ``axes`` of ``a`` with ``axes`` of ``b`` (numpy's ``tensordot``).

    >>> import symtape as st
    >>> float(st.tensordot(st.constant([1.0, 2.0]), st.constant([3.0, 4.0]), 1))
    11.0
    """
    return _tensordot(convert_to_tensor(a), convert_to_tensor(b), axes)


def einsum(equation: str, *inputs, **kwargs) -> Tensor:
    """Einstein summation, numpy/TF notation (repeated labels take diagonals).

    >>> import symtape as st
    >>> float(st.einsum("ii->", st.constant([[1.0, 2.0], [3.0, 4.0]])))
    5.0
    """
    if not isinstance(equation, str):
        raise InvalidArgumentError("st.einsum: the first argument must be the equation string")
    return ops.einsum.bind(*inputs, spec=equation)


# --------------------------------------------------------------------------------------------
# Shapes and structure
# --------------------------------------------------------------------------------------------


def reshape(tensor, shape, name=None) -> Tensor:
    """``tensor`` with a new shape (one entry may be -1).

    >>> import symtape as st
    >>> st.reshape(st.constant([1.0, 2.0, 3.0, 4.0]), [2, -1]).shape
    (2, 2)
    """
    return ops.reshape.bind(tensor, shape=_shape_arg(shape, "st.reshape"))


def transpose(a, perm=None, conjugate=False, name=None) -> Tensor:
    """Axes permuted by ``perm`` (default: reversed).

    >>> import symtape as st
    >>> st.transpose(st.zeros([2, 3])).shape
    (3, 2)
    """
    a = convert_to_tensor(a)
    perm = tuple(reversed(builtins.range(a.ndim))) if perm is None else _shape_arg(
        perm, "st.transpose perm")
    return ops.transpose.bind(a, perm=perm)


def stack(values, axis=0, name="stack") -> Tensor:
    """Tensors of one shape stacked along a new ``axis``.

    >>> import symtape as st
    >>> x = st.symbol("x")
    >>> st.stack([x ** 2, x ** 3]).formula()
    [x**2, x**3]
    """
    values = list(values)
    if not values:
        raise InvalidArgumentError("st.stack: needs at least one tensor")
    return ops.stack.bind(*values, axis=int(axis))


def concat(values, axis, name="concat") -> Tensor:
    """Tensors joined along an existing ``axis``.

    >>> import symtape as st
    >>> st.concat([st.ones([2]), st.zeros([1])], 0).numpy()
    array([1., 1., 0.])
    """
    values = list(values)
    if not values:
        raise InvalidArgumentError("st.concat: needs at least one tensor")
    return ops.concat.bind(*values, axis=int(axis))


def squeeze(input, axis=None, name=None) -> Tensor:  # noqa: A002 - TensorFlow's name
    """``input`` without the size-1 axes ``axis`` (default: all of them).

    >>> import symtape as st
    >>> st.squeeze(st.zeros([1, 3, 1])).shape
    (3,)
    """
    axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    return ops.squeeze.bind(input, axis=axis)


def expand_dims(input, axis, name=None) -> Tensor:  # noqa: A002
    """``input`` with a new size-1 axis at ``axis``.

    >>> import symtape as st
    >>> st.expand_dims(st.zeros([3]), 0).shape
    (1, 3)
    """
    return ops.expand_dims.bind(input, axis=int(axis))


def tile(input, multiples, name=None) -> Tensor:  # noqa: A002
    """``input`` repeated ``multiples[i]`` times along axis ``i``.

    >>> import symtape as st
    >>> st.tile(st.constant([1.0, 2.0]), [2]).numpy()
    array([1., 2., 1., 2.])
    """
    return ops.tile.bind(input, multiples=_shape_arg(multiples, "st.tile multiples"))


def broadcast_to(input, shape, name=None) -> Tensor:  # noqa: A002
    """``input`` broadcast to ``shape`` (its gradient sums over the broadcast axes).

    >>> import symtape as st
    >>> st.broadcast_to(st.constant(2.0), [2]).numpy()
    array([2., 2.])
    """
    return ops.broadcast_to.bind(input, shape=_shape_arg(shape, "st.broadcast_to"))


def reverse(tensor, axis, name=None) -> Tensor:
    """``tensor`` with the order of ``axis`` reversed.

    >>> import symtape as st
    >>> st.reverse(st.constant([1.0, 2.0]), [0]).numpy()
    array([2., 1.])
    """
    return ops.reverse.bind(tensor, axis=tuple(_shape_arg(axis, "st.reverse axis")))


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0,
           name=None) -> Tensor:
    """Slices of ``params`` along ``axis`` at integer ``indices`` (TF's ``gather``).

    >>> import symtape as st
    >>> st.gather(st.constant([10.0, 20.0, 30.0]), [2, 0]).numpy()
    array([30., 10.])
    """
    params = convert_to_tensor(params)
    idx = np.asarray(indices.numpy() if isinstance(indices, Tensor) else indices)
    if idx.dtype.kind not in "iu":
        raise InvalidArgumentError(f"st.gather: indices must be integers, got {idx.dtype}")
    axis = batch_dims if axis is None else int(axis)
    axis = axis % max(params.ndim, 1)
    if params.ndim and idx.size and (idx.min() < -params.shape[axis] or
                                     idx.max() >= params.shape[axis]):
        raise InvalidArgumentError(f"st.gather: indices {idx.tolist()} out of range for axis "
                                   f"{axis} of size {params.shape[axis]}")
    return ops.gather.bind(params, indices=idx, axis=axis, batch_dims=int(batch_dims))


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None) -> Tensor:
    """``tensor`` padded by ``paddings[i] = [before, after]`` along each axis i.

    >>> import symtape as st
    >>> st.pad(st.constant([1.0, 2.0]), [[1, 2]], constant_values=9.0).numpy()
    array([9., 1., 2., 9., 9.])
    """
    t = convert_to_tensor(tensor)
    if isinstance(constant_values, Tensor):
        constant_values = constant_values if constant_values.dtype == t.dtype else \
            ops.cast.bind(constant_values, dtype=t.dtype)
    return _pad(t, paddings.numpy() if isinstance(paddings, Tensor) else paddings,
                   mode, constant_values)


def unstack(value, num=None, axis=0, name="unstack") -> list:
    """The slices of ``value`` along ``axis``.

    >>> import symtape as st
    >>> [float(t) for t in st.unstack(st.constant([1.0, 2.0]))]
    [1.0, 2.0]
    """
    value = convert_to_tensor(value)
    axis = axis % value.ndim
    key = (builtins.slice(None),) * axis
    return [value[key + (i,)] for i in builtins.range(value.shape[axis])]


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list:
    """``value`` cut along ``axis`` into equal parts or parts of the given sizes.

    >>> import symtape as st
    >>> [t.shape for t in st.split(st.zeros([4, 2]), 2)]
    [(2, 2), (2, 2)]
    """
    value = convert_to_tensor(value)
    axis = axis % value.ndim
    n = value.shape[axis]
    if isinstance(num_or_size_splits, (int, np.integer)):
        if n % num_or_size_splits:
            raise ShapeError(f"st.split: axis of size {n} is not divisible into "
                             f"{num_or_size_splits} parts")
        sizes = [n // int(num_or_size_splits)] * int(num_or_size_splits)
    else:
        sizes = [int(s) for s in num_or_size_splits]
        if -1 in sizes:
            sizes[sizes.index(-1)] = n - (builtins.sum(sizes) + 1)
        if builtins.sum(sizes) != n:
            raise ShapeError(f"st.split: sizes {sizes} do not add up to {n}")
    out, start = [], 0
    for s in sizes:
        key = (builtins.slice(None),) * axis + (builtins.slice(start, start + s),)
        out.append(value[key])
        start += s
    return out


def shape(input, out_type=None, name=None) -> Tensor:  # noqa: A002
    """The shape of ``input`` as an int32 tensor.

    >>> import symtape as st
    >>> st.shape(st.zeros([2, 3])).numpy()
    array([2, 3], dtype=int32)
    """
    return constant(np.asarray(convert_to_tensor(input).shape, dtype=out_type or np.int32))


def size(input, out_type=None, name=None) -> Tensor:  # noqa: A002
    """The number of elements of ``input``.

    >>> import symtape as st
    >>> int(st.size(st.zeros([2, 3])))
    6
    """
    return constant(np.asarray(convert_to_tensor(input).size, dtype=out_type or np.int32))


def rank(input, name=None) -> Tensor:  # noqa: A002
    """The number of axes of ``input``.

    >>> import symtape as st
    >>> int(st.rank(st.zeros([2, 3])))
    2
    """
    return constant(np.asarray(convert_to_tensor(input).ndim, dtype=np.int32))


# --------------------------------------------------------------------------------------------
# Creation
# --------------------------------------------------------------------------------------------


def _dtype(dtype):
    return np.dtype(dtype) if dtype is not None else floatx()


def zeros(shape, dtype=None, name=None) -> Tensor:
    """A tensor of zeros (structural zeros: they fold away in formulas).

    >>> import symtape as st
    >>> st.zeros([2]).numpy()
    array([0., 0.])
    """
    return constant(CREATION["zeros"](_shape_arg(shape, "st.zeros"), _dtype(dtype)))


def ones(shape, dtype=None, name=None) -> Tensor:
    """A tensor of ones.

    >>> import symtape as st
    >>> st.ones([2]).numpy()
    array([1., 1.])
    """
    return constant(CREATION["ones"](_shape_arg(shape, "st.ones"), _dtype(dtype)))


def zeros_like(input, dtype=None, name=None) -> Tensor:  # noqa: A002
    """Zeros with the shape (and dtype) of ``input``.

    >>> import symtape as st
    >>> st.zeros_like(st.constant([1.0, 2.0])).numpy()
    array([0., 0.])
    """
    t = convert_to_tensor(input)
    return constant(CREATION["zeros"](t.shape, np.dtype(dtype) if dtype else t.dtype))


def ones_like(input, dtype=None, name=None) -> Tensor:  # noqa: A002
    """Ones with the shape (and dtype) of ``input``.

    >>> import symtape as st
    >>> st.ones_like(st.constant([1.0, 2.0])).numpy()
    array([1., 1.])
    """
    t = convert_to_tensor(input)
    return constant(CREATION["ones"](t.shape, np.dtype(dtype) if dtype else t.dtype))


def eye(num_rows, num_columns=None, batch_shape=None, dtype=None, name=None) -> Tensor:
    """The identity matrix (optionally a batch of them).

    >>> import symtape as st
    >>> st.eye(2).numpy()
    array([[1., 0.],
           [0., 1.]])
    """
    return constant(CREATION["eye"](int(num_rows), None if num_columns is None else
                                        int(num_columns), batch_shape, _dtype(dtype)))


def range(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:  # noqa: A001
    """``start, start + delta, ...`` below ``limit`` (ints give int32).

    >>> import symtape as st
    >>> st.range(3).numpy()
    array([0, 1, 2], dtype=int32)
    """
    return constant(CREATION["range"](start, limit, delta, None if dtype is None else
                                          np.dtype(dtype)))


def linspace(start, stop, num, name=None, axis=0) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive.

    >>> import symtape as st
    >>> st.linspace(0.0, 1.0, 3).numpy()
    array([0. , 0.5, 1. ])
    """
    def as_float(v):
        if isinstance(v, Tensor):
            return v if v.dtype.kind == "f" else ops.cast.bind(v, dtype=np.float64)
        return constant(np.asarray(v, dtype=np.float64))

    return _linspace(as_float(start), as_float(stop), int(num), axis=axis)


def fill(dims, value, name=None) -> Tensor:
    """A tensor of shape ``dims`` filled with ``value`` (differentiable in ``value``).

    >>> import symtape as st
    >>> st.fill([2], 7.0).numpy()
    array([7., 7.])
    """
    return _fill(_shape_arg(dims, "st.fill"), value)


# --------------------------------------------------------------------------------------------
# Norms and clipping
# --------------------------------------------------------------------------------------------


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None) -> Tensor:  # noqa: A002
    """Vector p-norm, or 'fro'/1/inf matrix norm when ``axis`` is a pair.

    >>> import symtape as st
    >>> float(st.norm(st.constant([3.0, 4.0])))
    5.0
    """
    return _norm(convert_to_tensor(tensor), ord=ord, axis=_axis_arg(axis),
                    keepdims=bool(keepdims))


def clip_by_value(t, clip_value_min, clip_value_max, name=None) -> Tensor:
    """``t`` clipped to ``[clip_value_min, clip_value_max]`` (gradient passes at the bounds).

    >>> import symtape as st
    >>> st.clip_by_value(st.constant([-2.0, 0.5, 2.0]), -1.0, 1.0).numpy()
    array([-1. ,  0.5,  1. ])
    """
    return ops.clip_by_value.bind(t, clip_value_min, clip_value_max)


def clip_by_norm(t, clip_norm, axes=None, name=None) -> Tensor:
    """``t`` rescaled so that its L2 norm (over ``axes``) is at most ``clip_norm``.

    >>> import symtape as st
    >>> st.clip_by_norm(st.constant([3.0, 4.0]), 1.0).numpy()
    array([0.6, 0.8])
    """
    return _clip_by_norm(convert_to_tensor(t), clip_norm, axes=_axis_arg(axes))


def global_norm(t_list, name=None) -> Tensor:
    """The L2 norm of all elements of all tensors in ``t_list`` (None entries skipped).

    >>> import symtape as st
    >>> float(st.linalg.global_norm([st.constant([3.0]), st.constant([4.0])]))
    5.0
    """
    return _global_norm([None if t is None else convert_to_tensor(t) for t in t_list])


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """``(clipped tensors, global norm)``: all tensors scaled by one factor so that their
    global norm is at most ``clip_norm``.

    >>> import symtape as st
    >>> clipped, n = st.clip_by_global_norm([st.constant([3.0]), st.constant([4.0])], 1.0)
    >>> [c.numpy() for c in clipped], float(n)
    ([array([0.6]), array([0.8])], 5.0)
    """
    if not isinstance(t_list, Sequence) or isinstance(t_list, Tensor):
        raise TypeError(f"st.clip_by_global_norm: t_list must be a list or tuple of tensors, "
                        f"got {type(t_list).__name__}")
    return _clip_by_global_norm([None if t is None else convert_to_tensor(t)
                                    for t in t_list], clip_norm, use_norm)

"""``st.nn``: activations, softmax and cross-entropies (TensorFlow's conventions)."""

from __future__ import annotations

import functools

import math as _pymath

import numpy as np

from symtape import Tensor, constant, ops, random
from symtape import math as M
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError, UnboundLeafError
from symtape.math import table_entry
from symtape.math import sigmoid, softplus, tanh  # TensorFlow exposes these under tf.nn too
from symtape.math import l2_normalize  # tf.nn.l2_normalize as well
from symtape.math import top_k  # tf.nn.top_k as well

__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "softmax", "log_softmax",
           "sigmoid_cross_entropy_with_logits", "softmax_cross_entropy_with_logits", "l2_loss",
           "sigmoid", "softplus", "tanh", "conv2d", "max_pool2d", "avg_pool2d", "moments",
           "dropout", "silu", "swish", "gelu", "softsign", "l2_normalize", "bias_add", "conv1d",
           "conv2d_transpose", "batch_normalization",
           "sparse_softmax_cross_entropy_with_logits"]


#: ``name -> composite`` of this module (the op-table test asks for a row per entry).
COMPOSITES: dict = {}
_composite = functools.partial(table_entry, COMPOSITES)


@_composite("leaky_relu")
def _leaky_relu(features, alpha=0.2):
    """``features`` where positive, ``alpha * features`` elsewhere."""
    return ops.leaky_relu_op(float(alpha)).bind(features)



def relu(features, name=None):
    """``max(x, 0)``; its derivative at 0 is 0 (TF).

    >>> import symtape as st
    >>> st.nn.relu(st.constant([-1.0, 2.0])).numpy()
    array([0., 2.])
    """
    return ops.relu.bind(features)


def relu6(features, name=None):
    """``min(max(x, 0), 6)``.

    >>> import symtape as st
    >>> st.nn.relu6(st.constant([-1.0, 7.0])).numpy()
    array([0., 6.])
    """
    return ops.relu6.bind(features)


def leaky_relu(features, alpha=0.2, name=None):
    """``x`` where positive, ``alpha * x`` elsewhere.

    >>> import symtape as st
    >>> st.nn.leaky_relu(st.constant([-1.0, 2.0])).numpy()
    array([-0.2,  2. ])
    """
    return _leaky_relu(features, alpha)


def elu(features, name=None):
    """``x`` where positive, ``exp(x) - 1`` elsewhere.

    >>> import symtape as st
    >>> st.nn.elu(st.symbol("x")).formula()
    Piecewise((x, x > 0), (expm1(x), True))
    """
    return ops.elu.bind(features)


def selu(features, name=None):
    """``scale * elu`` with ``alpha`` and ``scale`` of self-normalising networks.

    >>> import symtape as st
    >>> round(float(st.nn.selu(st.constant(1.0))), 6)
    1.050701
    """
    return ops.selu.bind(features)


def _axis(axis):
    return -1 if axis is None else int(axis)


def softmax(logits, axis=None, name=None):
    """``exp(x) / sum(exp(x))`` along ``axis`` (default last), computed stably.

    >>> import symtape as st
    >>> st.nn.softmax(st.constant([0.0, 0.0])).numpy()
    array([0.5, 0.5])
    """
    return ops.softmax.bind(logits, axis=_axis(axis))


def log_softmax(logits, axis=None, name=None):
    """``x - logsumexp(x)`` along ``axis`` (default last).

    >>> import symtape as st
    >>> st.nn.log_softmax(st.constant([0.0, 0.0])).numpy()
    array([-0.69314718, -0.69314718])
    """
    return ops.log_softmax.bind(logits, axis=_axis(axis))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``max(x, 0) - x*z + log(1 + exp(-|x|))`` for logits ``x`` and labels ``z``.

    >>> import symtape as st
    >>> round(float(st.nn.sigmoid_cross_entropy_with_logits(1.0, st.constant(0.0))), 6)
    0.693147
    """
    if labels is None or logits is None:
        raise InvalidArgumentError("st.nn.sigmoid_cross_entropy_with_logits: both labels and "
                                   "logits are required")
    return ops.sigmoid_cross_entropy_with_logits.bind(labels, logits)


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """``-sum(labels * log_softmax(logits))`` along ``axis``.

    >>> import symtape as st
    >>> round(float(st.nn.softmax_cross_entropy_with_logits([1.0, 0.0],
    ...                                                      st.constant([0.0, 0.0]))), 6)
    0.693147
    """
    return ops.softmax_cross_entropy_with_logits.bind(labels, logits, axis=_axis(axis))


def l2_loss(t, name=None):
    """``sum(t**2) / 2``.

    >>> import symtape as st
    >>> float(st.nn.l2_loss(st.constant([3.0, 4.0])))
    12.5
    """
    return ops.divide.bind(ops.reduce_sum.bind(ops.square.bind(t), axis=None), 2)


# ---- silu, gelu, softsign, bias_add: composites in TensorFlow's own forms ----------------------


@_composite("silu")
def _silu(features, beta):
    scaled = features if beta is None else ops.multiply.bind(beta, features)
    return ops.multiply.bind(features, ops.sigmoid.bind(scaled))


@_composite("gelu")
def _gelu(features, approximate: bool):
    """TF's forms: ``x/2 (1 + erf(x/sqrt(2)))``, or with ``approximate`` ``x/2 (1 +
    tanh(sqrt(2/pi) (x + 0.044715 x**3)))`` (its constants as TF writes them)."""
    if approximate:
        cubic = ops.add.bind(features, ops.multiply.bind(
            0.044715, ops.pow_.bind(features, 3)))
        inner = ops.tanh.bind(ops.multiply.bind(0.7978845608028654, cubic))
    else:
        inner = ops.erf.bind(ops.divide.bind(features, 1.4142135623730951))
    return ops.multiply.bind(ops.multiply.bind(0.5, features), ops.add.bind(1.0, inner))


@_composite("softsign")
def _softsign(features):
    """``x / (1 + |x|)``; its derivative ``1 / (1 + |x|)**2`` (|x|' = sign(x) is 0 at 0)."""
    return ops.divide.bind(features, ops.add.bind(ops.abs_.bind(features), 1.0))


@_composite("bias_add")
def _bias_add(value, bias, channel_axis: int):
    shape = [1] * value.ndim
    shape[channel_axis] = bias.shape[0]
    return ops.add.bind(value, ops.reshape.bind(bias, shape=tuple(shape)))


def _float_features(features, what: str) -> Tensor:
    features = features if isinstance(features, Tensor) else constant(np.asarray(features))
    if features.dtype.kind != "f":
        raise DTypeError(f"{what}: features has dtype {features.dtype.name}; it "
                                   "needs floats")
    return features


def silu(features, beta=1.0, name=None):
    """``x * sigmoid(beta * x)``, the SiLU or swish activation (``tf.nn.silu``).

    >>> import symtape as st
    >>> st.nn.silu(st.symbol("x")).formula()
    x/(1 + exp(-x))
    """
    features = _float_features(features, "st.nn.silu")
    plain = not isinstance(beta, Tensor) and np.ndim(beta) == 0 and float(beta) == 1.0
    return _silu(features, None if plain else beta)


swish = silu


def gelu(features, approximate=False, name=None):
    """The Gaussian error linear unit ``x P(X <= x)``, X standard normal: with erf, or
    with ``approximate``, tanh (``tf.nn.gelu``).

    >>> import symtape as st
    >>> st.nn.gelu(st.constant([-1.0, 0.0, 1.0])).numpy()
    array([-0.15865525,  0.        ,  0.84134475])
    """
    return _gelu(_float_features(features, "st.nn.gelu"), bool(approximate))


def softsign(features, name=None):
    """``x / (1 + |x|)``.

    >>> import symtape as st
    >>> st.nn.softsign(st.constant([-3.0, 1.0])).numpy()
    array([-0.75,  0.5 ])
    """
    return _softsign(_float_features(features, "st.nn.softsign"))


def bias_add(value, bias, data_format=None, name=None):
    """``value + bias`` with the 1-D ``bias`` along the channel axis: the last one, or the
    second with ``data_format`` 'NC...' (``tf.nn.bias_add``).

    >>> import symtape as st
    >>> st.nn.bias_add(st.zeros([2, 3]), st.constant([1.0, 2.0, 3.0])).numpy()
    array([[1., 2., 3.],
           [1., 2., 3.]])
    """
    value = value if isinstance(value, Tensor) else constant(np.asarray(value))
    bias = bias if isinstance(bias, Tensor) else constant(np.asarray(bias, dtype=value.dtype))
    if value.ndim < 2:
        raise ShapeError(f"st.nn.bias_add: value must have rank >= 2, got shape {value.shape}")
    if bias.ndim != 1:
        raise ShapeError(f"st.nn.bias_add: bias must be 1-D, got shape {bias.shape}")
    fmt = "NHWC" if data_format is None else str(data_format)
    if not (fmt.startswith("NC") or fmt.startswith("N") and fmt.endswith("C")):
        raise InvalidArgumentError(f"st.nn.bias_add: data_format must be 'N...C' or 'NC...', "
                                   f"got {data_format!r}")
    axis = 1 if fmt.startswith("NC") else value.ndim - 1
    if bias.shape[0] != value.shape[axis]:
        raise ShapeError(f"st.nn.bias_add: bias has {bias.shape[0]} elements, value's channel "
                         f"axis {axis} has {value.shape[axis]}")
    if bias.dtype != value.dtype:
        raise DTypeError(f"st.nn.bias_add: bias has dtype {bias.dtype.name}, value "
                                   f"{value.dtype.name}")
    return _bias_add(value, bias, axis)



# --------------------------------------------------------------------------------------------
# Convolutions and pooling (NHWC), as compositions of slices, pads and one matrix product
# --------------------------------------------------------------------------------------------


def _pair_arg(value, what: str, name: str) -> tuple:
    """``(h, w)`` of an int, a pair, or TensorFlow's ``[1, h, w, 1]``."""
    v = [value] * 2 if isinstance(value, (int, np.integer)) else list(value)
    if len(v) == 4:
        if v[0] != 1 or v[3] != 1:
            raise InvalidArgumentError(f"st.nn.{what}: {name} over the batch or the channels "
                                       f"must be 1, got {value}")
        v = v[1:3]
    if len(v) == 1:
        v = v * 2
    if len(v) != 2 or any(int(k) < 1 for k in v):
        raise InvalidArgumentError(f"st.nn.{what}: {name} must be positive ints (one, two, or "
                                   f"[1, h, w, 1]), got {value}")
    return int(v[0]), int(v[1])


def _windows(x: Tensor, size: tuple, strides: tuple, padding, what: str,
             fill: float = 0.0) -> tuple:
    """The input padded as ``padding`` says (``'SAME'``, ``'VALID'``, or explicit
    ``[[0, 0], [top, bottom], [left, right], [0, 0]]``; padded with ``fill``) and the
    output's height and width: ``(padded, oh, ow, pads)``."""
    if len(x.shape) != 4:
        raise ShapeError(f"st.nn.{what}: input must be NHWC (rank 4), got shape {x.shape}")
    (_, h, w, _), (kh, kw), (sh, sw) = x.shape, size, strides
    if isinstance(padding, str) and padding.upper() in ("SAME", "VALID"):
        if padding.upper() == "SAME":
            oh, ow = -(-h // sh), -(-w // sw)
            ph, pw = max((oh - 1) * sh + kh - h, 0), max((ow - 1) * sw + kw - w, 0)
            pads = [[0, 0], [ph // 2, ph - ph // 2], [pw // 2, pw - pw // 2], [0, 0]]
        else:
            pads = [[0, 0]] * 4
    else:
        try:
            pads = [[int(a), int(b)] for a, b in padding]
        except (TypeError, ValueError):
            pads = None
        if pads is None or len(pads) != 4 or pads[0] != [0, 0] or pads[3] != [0, 0] or \
                min(min(p) for p in pads) < 0:
            raise InvalidArgumentError(f"st.nn.{what}: padding must be 'SAME', 'VALID' or "
                                       f"[[0, 0], [top, bottom], [left, right], [0, 0]], got "
                                       f"{padding!r}")
    hp, wp = h + sum(pads[1]), w + sum(pads[2])
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"st.nn.{what}: a {kh}x{kw} window does not fit an input of "
                         f"{h}x{w} with padding {padding!r}")
    if any(any(p) for p in pads):
        x = M.pad(x, pads, constant_values=fill)
    return x, oh, ow, pads


def conv2d(input, filters, strides=1, padding="VALID", data_format="NHWC", dilations=None,
           name=None):
    """2-D convolution (cross-correlation, as TensorFlow's): ``out[n, i, j, o] = sum over
    (p, q, c) of x[n, i*sh + p*dh, j*sw + q*dw, c] * filters[p, q, c, o]`` for NHWC ``input``
    and HWIO ``filters`` (``dilations`` ``(dh, dw)``, default 1: an int, a pair or
    ``[1, dh, dw, 1]``); ``padding`` ``'SAME'`` (TensorFlow's split: the extra row and
    column after), ``'VALID'`` or explicit. A ``pad`` (when padding) then the table's ``conv2d``,
    whose derivatives are its two transposes (``symtape/ops/conv.py``).

    >>> import symtape as st
    >>> x = st.reshape(st.range(1.0, 10.0), (1, 3, 3, 1))
    >>> st.nn.conv2d(x, st.ones((2, 2, 1, 1)), 1, "VALID").numpy()[0, :, :, 0]
    array([[12., 16.],
           [24., 28.]])
    """
    if data_format != "NHWC":
        raise InvalidArgumentError(f"st.nn.conv2d: data_format {data_format!r}: only NHWC")
    x = input if isinstance(input, Tensor) else constant(input)
    k = filters if isinstance(filters, Tensor) else constant(filters)
    if len(k.shape) != 4:
        raise ShapeError(f"st.nn.conv2d: filters must be HWIO (rank 4), got shape {k.shape}")
    kh, kw, c, o = k.shape
    if len(x.shape) == 4 and x.shape[3] != c:
        raise ShapeError(f"st.nn.conv2d: the input has {x.shape[3]} channels, the filters "
                         f"take {c}")
    st_ = _pair_arg(strides, "conv2d", "strides")
    dil = _pair_arg(1 if dilations is None else dilations, "conv2d", "dilations")
    x, _, _, _ = _windows(x, ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1), st_, padding,
                          "conv2d")
    return ops.conv2d.bind(x, k, strides=st_, dilations=dil)


def _pooled(input, ksize, strides, padding, data_format, what: str, fill: float) -> tuple:
    """A pooling's checked arguments: ``(x, padded x, ksize, strides, (oh, ow, pads))``
    (padded with ``fill``)."""
    if data_format != "NHWC":
        raise InvalidArgumentError(f"st.nn.{what}: data_format {data_format!r}: only NHWC")
    x = input if isinstance(input, Tensor) else constant(input)
    size = _pair_arg(ksize, what, "ksize")
    st_ = _pair_arg(size if strides is None else strides, what, "strides")
    xp, oh, ow, pads = _windows(x, size, st_, padding, what, fill)
    return x, xp, size, st_, (oh, ow, pads)


def max_pool2d(input, ksize, strides, padding="VALID", data_format="NHWC", name=None):
    """The maximum of each window (NHWC); the gradient goes to the first maximum of a
    window, as TensorFlow's. A ``pad`` with ``-inf`` (when padding) then the table's
    ``max_pool2d`` (``symtape/ops/pool.py``).

    >>> import symtape as st
    >>> x = st.reshape(st.range(1.0, 17.0), (1, 4, 4, 1))
    >>> st.nn.max_pool2d(x, 2, 2, "VALID").numpy()[0, :, :, 0]
    array([[ 6.,  8.],
           [14., 16.]])
    """
    _, xp, size, st_, _ = _pooled(input, ksize, strides, padding, data_format, "max_pool2d",
                                  -np.inf)
    return ops.max_pool2d.bind(xp, ksize=size, strides=st_)


def avg_pool2d(input, ksize, strides, padding="VALID", data_format="NHWC", name=None):
    """The mean of each window (NHWC); with ``'SAME'`` padding, of its elements inside the
    input only, as TensorFlow's: the table's ``sum_pool2d`` (a ``pad`` with zeros first, when
    padding) divided by each window's count.

    >>> import symtape as st
    >>> x = st.reshape(st.range(1.0, 10.0), (1, 3, 3, 1))
    >>> st.nn.avg_pool2d(x, 2, 2, "SAME").numpy()[0, :, :, 0]
    array([[3. , 4.5],
           [7.5, 9. ]])
    """
    x, xp, size, st_, (oh, ow, pads) = _pooled(input, ksize, strides, padding, data_format,
                                               "avg_pool2d", 0.0)
    total = ops.sum_pool2d.bind(xp, ksize=size, strides=st_)
    inside = np.zeros((x.shape[1] + sum(pads[1]), x.shape[2] + sum(pads[2])))
    inside[pads[1][0]:pads[1][0] + x.shape[1], pads[2][0]:pads[2][0] + x.shape[2]] = 1.0
    count = sum(inside[i:i + (oh - 1) * st_[0] + 1:st_[0], j:j + (ow - 1) * st_[1] + 1:st_[1]]
                for i in range(size[0]) for j in range(size[1]))
    if np.all(count == _pymath.prod(size)):
        return total / float(_pymath.prod(size))
    return total / constant(count.reshape(1, oh, ow, 1).astype(total.dtype))


@_composite("moments")
def moments(x, axes, shift=None, keepdims=False, name=None):
    """``(mean, variance)`` over ``axes`` (the biased variance, as TensorFlow's): the mean,
    then the mean of the table's ``squared_difference`` from it. Unlike TensorFlow, no
    ``stop_gradient`` on the mean inside the variance: second derivatives stay exact.

    >>> import symtape as st
    >>> m, v = st.nn.moments(st.constant([1.0, 2.0, 3.0, 6.0]), axes=[0])
    >>> float(m), float(v)
    (3.0, 3.5)
    """
    mean = M.reduce_mean(x, axis=axes, keepdims=True)
    var = M.reduce_mean(ops.squared_difference.bind(x, mean), axis=axes, keepdims=keepdims)
    return (mean if keepdims else M.reshape(mean, var.shape)), var


def dropout(x, rate, noise_shape=None, seed=None, name=None) -> Tensor:
    """``x`` with a share ``rate`` of its elements zeroed at random and the others scaled
    by ``1 / (1 - rate)``, as ``tf.nn.dropout``; ``noise_shape``: the shape of the mask
    (broadcast over ``x``: whole channels dropped). The mask is ``st.random.uniform(...) >=
    rate`` from the stream of ``seed``: drawn now, or, inside ``st.function``, anew at each
    call of the compiled function. The table's ``dropout`` op applies it (a dropped element
    is exactly 0, inf and NaN included); its gradient is the same mask times the scale.

    >>> import symtape as st
    >>> st.random.set_seed(3)
    >>> x = st.Variable(np.ones(6))
    >>> with st.GradientTape() as t:
    ...     y = st.nn.dropout(x, 0.5)
    >>> bool((t.gradient(y, x).numpy() == y.numpy()).all()), sorted(set(y.numpy()))
    (True, [np.float64(0.0), np.float64(2.0)])
    """
    x = x if isinstance(x, Tensor) else constant(x)
    if x.dtype.kind != "f":
        raise InvalidArgumentError(f"st.nn.dropout: x has dtype {x.dtype.name}; dropout "
                                   "scales floats")
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise InvalidArgumentError(f"st.nn.dropout: rate must be in [0, 1), got {rate}")
    shape = x.shape if noise_shape is None else tuple(int(n) for n in noise_shape)
    try:
        np.broadcast_shapes(shape, x.shape)
    except ValueError:
        raise ShapeError(f"st.nn.dropout: noise_shape {shape} does not broadcast to x's "
                         f"shape {x.shape}") from None
    if rate == 0.0:
        return x
    u = random.uniform(shape, dtype=x.dtype.name, seed=seed)
    return ops.dropout.bind(x, u, rate, 1.0 / (1.0 - rate))


# --------------------------------------------------------------------------------------------
# conv1d, conv2d_transpose, batch_normalization, sparse softmax cross-entropy
# --------------------------------------------------------------------------------------------


def _one_arg(value, what: str, name: str) -> int:
    """One positive int from an int, ``[s]`` or TensorFlow's ``[1, s, 1]``."""
    v = [value] if isinstance(value, (int, np.integer)) else list(value)
    if len(v) == 3 and v[0] == 1 and v[2] == 1:
        v = v[1:2]
    if len(v) != 1 or int(v[0]) != v[0] or int(v[0]) < 1:
        raise InvalidArgumentError(f"st.nn.{what}: {name} must be a positive int, [s] or "
                                   f"[1, s, 1], got {value!r}")
    return int(v[0])


def conv1d(input, filters, stride=1, padding="VALID", data_format="NWC", dilations=None,
           name=None):
    """1-D convolution (cross-correlation, as ``tf.nn.conv1d``): ``out[n, i, o] = sum over
    (p, c) of x[n, i*stride + p*dilation, c] * filters[p, c, o]`` for NWC ``input`` and WIO
    ``filters``; ``padding`` ``'SAME'``, ``'VALID'`` or explicit ``[[0, 0], [left, right],
    [0, 0]]``. It is :func:`conv2d` over a height of one (the table's ``conv2d``).

    >>> import symtape as st
    >>> x = st.reshape(st.range(1.0, 6.0), (1, 5, 1))
    >>> st.nn.conv1d(x, st.ones((2, 1, 1)), 2, "SAME").numpy()[0, :, 0]
    array([3., 7., 5.])
    """
    if data_format != "NWC":
        raise InvalidArgumentError(f"st.nn.conv1d: data_format {data_format!r}: only NWC")
    x = input if isinstance(input, Tensor) else constant(input)
    k = filters if isinstance(filters, Tensor) else constant(filters)
    if len(x.shape) != 3:
        raise ShapeError(f"st.nn.conv1d: input must be NWC (rank 3), got shape {x.shape}")
    if len(k.shape) != 3:
        raise ShapeError(f"st.nn.conv1d: filters must be WIO (rank 3), got shape {k.shape}")
    s = _one_arg(stride, "conv1d", "stride")
    d = _one_arg(1 if dilations is None else dilations, "conv1d", "dilations")
    if not isinstance(padding, str):
        try:
            pads = [[int(a), int(b)] for a, b in padding]
        except (TypeError, ValueError):
            pads = []
        if len(pads) != 3:
            raise InvalidArgumentError(f"st.nn.conv1d: padding must be 'SAME', 'VALID' or "
                                       f"[[0, 0], [left, right], [0, 0]], got {padding!r}")
        padding = [pads[0], [0, 0], pads[1], pads[2]]
    n, w, c = x.shape
    y = conv2d(M.reshape(x, (n, 1, w, c)), M.reshape(k, (1, *k.shape)), (1, s), padding,
               dilations=(1, d))
    return M.reshape(y, (n, y.shape[2], y.shape[3]))


def _shape_arg(value, what: str, name: str, rank: int) -> tuple:
    """A static shape of ``rank`` non-negative ints (a list, tuple, array or eager tensor)."""
    if isinstance(value, Tensor):
        value = value.numpy()
    try:
        v = tuple(int(s) for s in np.asarray(value).reshape(-1))
    except (TypeError, ValueError):
        v = ()
    if len(v) != rank or min(v) < 1:
        raise InvalidArgumentError(f"st.nn.{what}: {name} must be {rank} positive ints, got "
                                   f"{value!r}")
    return v


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC",
                     dilations=None, name=None):
    """The transpose of :func:`conv2d` (``tf.nn.conv2d_transpose``): the gradient of
    ``conv2d(x, filters, strides, padding)`` with respect to an ``x`` of ``output_shape``
    (NHWC), contracted with ``input`` (NHWC, ``filters.shape[3]`` channels); ``filters`` is
    ``[height, width, output_channels, in_channels]``. The table's ``conv2d_backprop_input``
    on the padded extent, cropped to ``output_shape``; its derivatives are ``conv2d`` and
    ``conv2d_backprop_filter``.

    >>> import symtape as st
    >>> y = st.nn.conv2d_transpose(st.ones((1, 2, 2, 1)), st.ones((2, 2, 1, 1)),
    ...                            [1, 3, 3, 1], 1, "VALID")
    >>> y.numpy()[0, :, :, 0]
    array([[1., 2., 1.],
           [2., 4., 2.],
           [1., 2., 1.]])
    """
    if data_format != "NHWC":
        raise InvalidArgumentError(f"st.nn.conv2d_transpose: data_format {data_format!r}: "
                                   "only NHWC")
    y = input if isinstance(input, Tensor) else constant(input)
    k = filters if isinstance(filters, Tensor) else constant(filters)
    if len(y.shape) != 4:
        raise ShapeError(f"st.nn.conv2d_transpose: input must be NHWC (rank 4), got shape "
                         f"{y.shape}")
    if len(k.shape) != 4:
        raise ShapeError(f"st.nn.conv2d_transpose: filters must be [height, width, "
                         f"output_channels, in_channels] (rank 4), got shape {k.shape}")
    n, h, w, c = _shape_arg(output_shape, "conv2d_transpose", "output_shape", 4)
    kh, kw, kc, ko = k.shape
    if (n, c) != (y.shape[0], kc) or ko != y.shape[3]:
        raise ShapeError(f"st.nn.conv2d_transpose: output_shape {(n, h, w, c)}, filters "
                         f"{k.shape} and input {y.shape} do not fit (batch, filters[2] "
                         "output channels, filters[3] input channels)")
    st_ = _pair_arg(strides, "conv2d_transpose", "strides")
    dil = _pair_arg(1 if dilations is None else dilations, "conv2d_transpose", "dilations")
    span = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    # the forward convolution of an x of output_shape: its padding and output size
    try:
        _, oh, ow, pads = _windows(M.zeros((1, h, w, 1)), span, st_, padding,
                                   "conv2d_transpose")
    except ShapeError:
        oh = ow = -1
    if (oh, ow) != tuple(y.shape[1:3]):
        raise ShapeError(f"st.nn.conv2d_transpose: output_shape {(n, h, w, c)} with filters "
                         f"{kh}x{kw}, strides {st_} and padding {padding!r} convolves to "
                         f"{oh}x{ow}, but the input is {y.shape[1]}x{y.shape[2]}")
    hp, wp = h + sum(pads[1]), w + sum(pads[2])
    x = ops.conv2d_backprop_input.bind(y, k, strides=st_, dilations=dil, size=(hp, wp))
    if hp == h and wp == w:
        return x
    return x[:, pads[1][0]:pads[1][0] + h, pads[2][0]:pads[2][0] + w, :]


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset``
    (``tf.nn.batch_normalization``; ``offset`` or ``scale`` None: left out), in TensorFlow's
    order: ``inv = rsqrt(variance + eps) * scale``, then ``x * inv + (offset - mean * inv)``.

    >>> import symtape as st
    >>> st.nn.batch_normalization(st.constant([1.0, 3.0]), 2.0, 1.0, 0.5, 2.0, 0.0).numpy()
    array([-1.5,  2.5])
    """
    x = x if isinstance(x, Tensor) else constant(np.asarray(x))
    if x.dtype.kind != "f":
        raise DTypeError(f"st.nn.batch_normalization: x has dtype {x.dtype.name}; it needs "
                         "floats")
    args = {}
    for label, v in (("mean", mean), ("variance", variance), ("offset", offset),
                     ("scale", scale)):
        if v is None:
            args[label] = None
            continue
        v = v if isinstance(v, Tensor) else constant(np.asarray(v, dtype=x.dtype))
        if v.dtype != x.dtype:
            raise DTypeError(f"st.nn.batch_normalization: {label} has dtype {v.dtype.name}, "
                             f"x {x.dtype.name}")
        try:
            np.broadcast_shapes(v.shape, x.shape)
        except ValueError:
            raise ShapeError(f"st.nn.batch_normalization: {label} of shape {v.shape} does not "
                             f"broadcast to x's shape {x.shape}") from None
        args[label] = v
    if args["mean"] is None or args["variance"] is None:
        raise InvalidArgumentError("st.nn.batch_normalization: mean and variance are required")
    inv = ops.rsqrt.bind(ops.add.bind(args["variance"], float(variance_epsilon)))
    if args["scale"] is not None:
        inv = ops.multiply.bind(inv, args["scale"])
    shift = ops.multiply.bind(args["mean"], inv)
    shift = ops.negative.bind(shift) if args["offset"] is None else \
        ops.subtract.bind(args["offset"], shift)
    return ops.add.bind(ops.multiply.bind(x, inv), shift)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``-log softmax(logits)[label]`` for integer ``labels`` of shape ``logits.shape[:-1]``
    (``tf.nn.sparse_softmax_cross_entropy_with_logits``): the table's softmax cross-entropy
    against ``one_hot(labels)``, so the gradient in ``logits`` is ``softmax(logits) -
    one_hot(labels)``, as TensorFlow's, and ``labels`` get none. A label outside
    ``[0, classes)`` is an InvalidArgumentError when the labels have values (eager, as
    TensorFlow's CPU kernel); in a traced function the loss there is nan (its GPU kernel).

    >>> import symtape as st
    >>> loss = st.nn.sparse_softmax_cross_entropy_with_logits(
    ...     [1, 0], st.constant([[0.0, 0.0], [2.0, 0.0]]))
    >>> loss.numpy().round(6)
    array([0.693147, 0.126928])
    """
    if labels is None or logits is None:
        raise InvalidArgumentError("st.nn.sparse_softmax_cross_entropy_with_logits: both "
                                   "labels and logits are required")
    what = "st.nn.sparse_softmax_cross_entropy_with_logits"
    logits = logits if isinstance(logits, Tensor) else constant(np.asarray(logits))
    if logits.dtype.kind != "f":
        raise DTypeError(f"{what}: logits has dtype {logits.dtype.name}; it needs floats")
    labels = labels if isinstance(labels, Tensor) else constant(np.asarray(labels))
    try:
        known = labels.numpy()
    except UnboundLeafError:  # a traced input: its integers are float leaves there
        known = None
    if labels.dtype.kind not in "iu" and (known is not None or labels.dtype.kind != "f"):
        raise DTypeError(f"{what}: labels must be integers, got {labels.dtype.name}")
    if logits.ndim < 1 or tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ShapeError(f"{what}: labels must have the shape of logits without its last axis "
                         f"({tuple(logits.shape[:-1])}), got {tuple(labels.shape)}")
    classes = logits.shape[-1]
    if known is not None:
        bad = (np.asarray(known) < 0) | (np.asarray(known) >= classes)
        if bad.any():
            raise InvalidArgumentError(f"{what}: labels {np.asarray(known)[bad].tolist()} are "
                                       f"outside [0, {classes}) (the classes of logits)")
        code = M.one_hot(labels, classes, dtype=logits.dtype)
        return ops.softmax_cross_entropy_with_logits.bind(code, logits, axis=-1)
    # labels known only at run time: compared with each class index; none matches out of range
    index = constant(np.arange(classes, dtype=labels.dtype))
    hits = M.equal(M.expand_dims(labels, -1), index)
    code = M.cast(hits, logits.dtype)
    loss = ops.softmax_cross_entropy_with_logits.bind(code, logits, axis=-1)
    inside = M.reduce_any(hits, axis=-1)
    return M.where(inside, loss, constant(np.asarray(np.nan, dtype=logits.dtype)))

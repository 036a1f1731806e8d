"""Table-driven checks of every op: values against numpy, derivatives to order 2 against central
finite differences of the numpy reference, and (scalar ops) to order 3 against ``sympy.diff``
of the expanded formula."""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape import ops
from symtape.derivatives import sweep as autodiff
from symtape.base import recording

ERF = np.vectorize(math.erf)


def mp_polygamma(n):
    """psi^(n) elementwise (mpmath); ``n`` a number or an array broadcast with the argument."""
    return lambda x: np.vectorize(lambda a, b: float(mpmath.polygamma(int(a), b)))(n, x)
SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805


@dataclass
class Arg:
    """How to draw one argument: shape, range, points to stay away from, dtype."""

    shape: tuple = ()
    lo: float = -2.0
    hi: float = 2.0
    avoid: tuple = ()
    dtype: str = "float64"
    values: object = None

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        if self.values is not None:
            return np.array(self.values, dtype=self.dtype)
        if self.dtype == "bool":
            return rng.random(self.shape) < 0.5
        x = rng.uniform(self.lo, self.hi, self.shape)
        for a in self.avoid:  # push samples at least 0.15 away from kinks
            near = np.abs(x - a) < 0.15
            x = np.where(near, a + np.where(x >= a, 0.15, -0.15) + np.sign(x - a) * 0.1, x)
        return x.astype(self.dtype)


@dataclass
class Row:
    fn: Callable
    args: list
    ref: Callable
    diff: tuple | None = None  # differentiable argument indices (None: all float args)
    scalar: bool = False  # elementwise: also check to order 3 against sympy.diff
    rtol: float = 1e-6
    diff2: tuple | None = None  # arguments perturbed in the second-order check
    nograd: tuple = ()  # arguments whose gradient must be None (no derivative)
    dref: Callable | None = None  # smooth reference for finite differences (default: ref)
    zerograd: tuple = ()  # arguments whose gradient must be exactly zero
    kinds: tuple = field(default_factory=tuple)
    eager_only: bool = False  # no compiled form at this size (compiling it is refused)


ROWS: dict[str, Row] = {}


def np_scan(x, w):
    out, a = [], np.ones(3)
    for r in x:
        a = a * w + np.sin(r) * a
        out.append(a)
    return np.array(out)


def row(name: str, fn, args, ref, **kw) -> None:
    ROWS[name] = Row(fn, [a if isinstance(a, Arg) else Arg(a) for a in args], ref, **kw)


def u(shape=(), lo=-2.0, hi=2.0, avoid=()):
    return Arg(shape, lo, hi, tuple(avoid))


P = Arg((3,), 0.5, 2.5)  # positive
S3 = Arg((3,))
M23 = Arg((2, 3))

# ---- elementwise unary ---------------------------------------------------------------------
row("identity", st.identity, [S3], lambda x: x, scalar=True)
row("negative", st.negative, [S3], np.negative, scalar=True)
row("square", st.square, [S3], np.square, scalar=True)
row("sqrt", st.sqrt, [P], np.sqrt, scalar=True)
row("rsqrt", st.math.rsqrt, [P], lambda x: 1 / np.sqrt(x), scalar=True)
row("exp", st.exp, [S3], np.exp, scalar=True)
row("expm1", st.math.expm1, [S3], np.expm1, scalar=True)
row("log", st.math.log, [P], np.log, scalar=True)
row("log1p", st.math.log1p, [u((3,), -0.6, 2.0)], np.log1p, scalar=True)
row("sin", st.sin, [S3], np.sin, scalar=True)
row("cos", st.cos, [S3], np.cos, scalar=True)
row("tan", st.tan, [u((3,), -1.2, 1.2)], np.tan, scalar=True)
row("asin", st.asin, [u((3,), -0.8, 0.8)], np.arcsin, scalar=True)
row("acos", st.acos, [u((3,), -0.8, 0.8)], np.arccos, scalar=True)
row("atan", st.atan, [S3], np.arctan, scalar=True)
row("sinh", st.sinh, [S3], np.sinh, scalar=True)
row("cosh", st.cosh, [S3], np.cosh, scalar=True)
row("tanh", st.tanh, [S3], np.tanh, scalar=True)
row("asinh", st.asinh, [S3], np.arcsinh, scalar=True)
row("acosh", st.acosh, [u((3,), 1.3, 3.0)], np.arccosh, scalar=True)
row("atanh", st.atanh, [u((3,), -0.8, 0.8)], np.arctanh, scalar=True)
row("erf", st.math.erf, [S3], ERF, scalar=True)
row("lgamma", st.lgamma, [Arg((3,), 0.3, 4.0)], np.vectorize(math.lgamma), scalar=True)
row("digamma", st.digamma, [Arg((3,), 0.3, 4.0)], mp_polygamma(0), scalar=True)
row("polygamma", lambda x, n: st.polygamma(n, x), [Arg((3,), 0.3, 4.0),
                                                   Arg((3,), values=[1.0, 2.0, 3.0])],
    lambda x, n: mp_polygamma(n)(x), scalar=True, nograd=(1,))
row("abs", st.abs, [u((3,), avoid=(0,))], np.abs, scalar=True)
row("sign", st.sign, [u((3,), avoid=(0,))], np.sign, scalar=True, zerograd=(0,))
row("floor", st.floor, [u((3,), avoid=(-1, 0, 1))], np.floor, nograd=(0,))
row("ceil", st.ceil, [u((3,), avoid=(-1, 0, 1))], np.ceil, nograd=(0,))
row("round", st.round, [Arg((4,), values=[0.5, 1.5, -2.5, 0.7])], np.round, nograd=(0,))
row("sigmoid", st.nn.sigmoid, [S3], lambda x: 1 / (1 + np.exp(-x)), scalar=True)
row("softplus", st.nn.softplus, [u((3,), avoid=(0,))], lambda x: np.log1p(np.exp(x)),
    scalar=True)
row("relu", st.nn.relu, [u((3,), avoid=(0,))], lambda x: np.maximum(x, 0), scalar=True)
row("relu6", st.nn.relu6, [u((4,), -2, 8, avoid=(0, 6))], lambda x: np.clip(x, 0, 6),
    scalar=True)
row("elu", st.nn.elu, [u((3,), avoid=(0,))], lambda x: np.where(x > 0, x, np.expm1(x)),
    scalar=True)
row("selu", st.nn.selu, [u((3,), avoid=(0,))],
    lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)), scalar=True)
row("leaky_relu", lambda x: st.nn.leaky_relu(x, 0.1), [u((3,), avoid=(0,))],
    lambda x: np.where(x > 0, x, 0.1 * x), scalar=True)

# ---- elementwise binary --------------------------------------------------------------------
B1, B2 = Arg((2, 3)), Arg((3,))  # broadcasting pair
row("add", st.add, [B1, B2], np.add, scalar=True)
row("subtract", st.subtract, [B1, B2], np.subtract, scalar=True)
row("multiply", st.multiply, [B1, B2], np.multiply, scalar=True)
row("divide", st.divide, [B1, Arg((3,), 0.5, 2.0)], np.divide, scalar=True)
row("pow", st.pow, [Arg((3,), 0.5, 2.0), Arg((3,), -1.5, 2.5)], np.power, scalar=True)
row("atan2", st.atan2, [Arg((3,), 0.3, 2.0), S3], np.arctan2, scalar=True)
row("maximum", st.maximum, [Arg((3,), values=[1.0, -1.0, 0.5]),
                            Arg((3,), values=[0.2, 0.3, -1.5])], np.maximum, scalar=True)
row("minimum", st.minimum, [Arg((3,), values=[1.0, -1.0, 0.5]),
                            Arg((3,), values=[0.2, 0.3, -1.5])], np.minimum, scalar=True)
row("floordiv", st.floordiv, [Arg((3,), values=[3.7, -2.2, 5.1]),
                              Arg((3,), values=[2.0, 1.5, -2.0])], np.floor_divide,
    nograd=(0, 1))
# (SymPy has no derivative of Mod, so floormod is checked by finite differences only)
row("floormod", st.floormod, [Arg((3,), values=[3.7, -2.2, 5.1]),
                              Arg((3,), values=[2.0, 1.5, -2.0])], np.mod)
row("clip_by_value", st.clip_by_value, [Arg((4,), values=[-2.0, 0.3, 1.7, 0.9]),
                                        Arg((), values=-1.0), Arg((), values=1.2)],
    lambda t, lo, hi: np.clip(t, lo, hi), scalar=True)
row("sigmoid_cross_entropy_with_logits",
    lambda z, x: st.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x),
    [Arg((3,), 0.0, 1.0), u((3,), -3, 3, avoid=(0,))],
    lambda z, x: -z * np.log(1 / (1 + np.exp(-x))) - (1 - z) * np.log(1 - 1 / (1 + np.exp(-x))),
    scalar=True)
row("cast", lambda x: st.cast(st.cast(x, "float32"), "float64"), [S3],
    lambda x: x.astype(np.float32).astype(np.float64), rtol=1e-5,
    dref=lambda x: x)  # the gradient of a float cast is the cast-back identity

# ---- comparisons, logic, selection ---------------------------------------------------------
CMP = [Arg((3,), values=[1.0, 2.0, 3.0]), Arg((3,), values=[2.0, 2.0, 1.0])]
row("less", st.less, CMP, np.less, nograd=(0, 1))
row("less_equal", st.less_equal, CMP, np.less_equal, nograd=(0, 1))
row("greater", st.greater, CMP, np.greater, nograd=(0, 1))
row("greater_equal", st.greater_equal, CMP, np.greater_equal, nograd=(0, 1))
row("equal", st.equal, CMP, np.equal, nograd=(0, 1))
row("not_equal", st.not_equal, CMP, np.not_equal, nograd=(0, 1))
BOOL2 = [Arg((4,), values=[True, True, False, False], dtype="bool"),
         Arg((4,), values=[True, False, True, False], dtype="bool")]
row("logical_and", st.logical_and, BOOL2, np.logical_and)
row("logical_or", st.logical_or, BOOL2, np.logical_or)
row("logical_not", st.logical_not, BOOL2[:1], np.logical_not)
row("argmax", lambda x: st.argmax(x, axis=1),
    [Arg((2, 3), values=[[1.0, 5.0, 5.0], [7.0, -1.0, 2.0]])],
    lambda x: np.argmax(x, axis=1), nograd=(0,))
row("argmin", lambda x: st.argmin(x, axis=0), [M23], lambda x: np.argmin(x, axis=0),
    nograd=(0,))
row("divide_no_nan", st.math.divide_no_nan, [S3, Arg((3,), values=[2.0, 0.0, -0.5])],
    lambda x, y: np.where(y == 0, 0.0, x / np.where(y == 0, 1.0, y)),
    diff=(0,))  # (y's derivative jumps at its zero)
row("where", st.where, [Arg((3,), values=[True, False, True], dtype="bool"), S3, S3], np.where)
row("stop_gradient", st.stop_gradient, [S3], lambda x: x, nograd=(0,))
row("add_n", lambda a, b, c: st.add_n([a, b, c]), [S3, S3, S3], lambda a, b, c: a + b + c)
row("reciprocal", st.math.reciprocal, [u((3,), 0.5, 2.0)], lambda x: 1 / x, scalar=True)
row("erfc", st.math.erfc, [S3], np.vectorize(lambda v: float(mpmath.erfc(v))), scalar=True)
row("bessel_i0e", st.math.bessel_i0e, [u((3,), -9.0, 9.0, avoid=(0,))],
    np.vectorize(lambda v: float(mpmath.besseli(0, v) * mpmath.exp(-abs(v)))), scalar=True)
row("bessel_i1e", st.math.bessel_i1e, [u((3,), -9.0, 9.0, avoid=(0,))],
    np.vectorize(lambda v: float(mpmath.besseli(1, v) * mpmath.exp(-abs(v)))), scalar=True)
row("zeta", st.math.zeta, [Arg((3,), 1.5, 4.0), Arg((3,), 0.5, 3.0)],
    np.vectorize(lambda s, q: float(mpmath.zeta(s, q))), scalar=True, nograd=(0,))
row("xlogy", st.math.xlogy, [Arg((3,), values=[0.5, 1.5, -0.7]), P],
    lambda x, y: x * np.log(y), scalar=True)  # (x = 0, where TF's rules cut, in its own tests)
row("multiply_no_nan", st.math.multiply_no_nan, [S3, Arg((3,), values=[2.0, 0.0, -0.5])],
    lambda x, y: np.where(y == 0, 0.0, x * y))
row("log_sigmoid", st.math.log_sigmoid, [S3], lambda x: -np.log1p(np.exp(-x)), scalar=True)
SPECIAL = [Arg((4,), values=[1.0, np.inf, -np.inf, np.nan])]
row("is_finite", st.math.is_finite, SPECIAL, np.isfinite, nograd=(0,))
row("is_nan", st.math.is_nan, SPECIAL, np.isnan, nograd=(0,))
row("is_inf", st.math.is_inf, SPECIAL, np.isinf, nograd=(0,))
row("reduce_all", lambda b: st.math.reduce_all(b, axis=1), [Arg((3, 4), dtype="bool")],
    lambda b: np.all(b, axis=1))
row("reduce_any", lambda b: st.math.reduce_any(b, axis=0, keepdims=True),
    [Arg((3, 4), dtype="bool")], lambda b: np.any(b, axis=0, keepdims=True))
row("one_hot", lambda i: st.one_hot(i, 4, axis=0), [Arg((3,), values=[0, 3, -1], dtype="int64")],
    lambda i: (np.arange(4)[:, None] == i[None, :]).astype(np.float64))
row("sequence_mask", lambda n: st.sequence_mask(n, 4), [Arg((2,), values=[1, 3], dtype="int32")],
    lambda n: np.arange(4) < n[:, None])
row("l2_normalize", lambda x: st.math.l2_normalize(x, axis=1), [M23],
    lambda x: x / np.sqrt(np.maximum(np.sum(x * x, axis=1, keepdims=True), 1e-12)))
row("silu", lambda x, b: st.nn.silu(x, beta=b), [S3, Arg((), 0.5, 2.0)],
    lambda x, b: x / (1 + np.exp(-b * x)))
row("gelu", st.nn.gelu, [S3], lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))), scalar=True)
row("gelu_tanh", lambda x: st.nn.gelu(x, approximate=True), [S3],
    lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))), scalar=True)
row("softsign", st.nn.softsign, [u((3,), avoid=(0,))], lambda x: x / (1 + np.abs(x)),
    scalar=True)
row("bias_add", lambda v, b: st.nn.bias_add(v, b, data_format="NCW"), [Arg((2, 3, 2)), S3],
    lambda v, b: v + b[:, None])
row("matvec", st.linalg.matvec, [Arg((2, 3, 4)), Arg((4,))], lambda a, b: a @ b)
row("cross", st.linalg.cross, [M23, M23], np.cross)
row("band_part", lambda x: st.linalg.band_part(x, 1, 0), [Arg((2, 3, 3))],
    lambda x: np.tril(np.triu(x, -1)))

# ---- reductions ----------------------------------------------------------------------------
R = Arg((2, 3), 0.5, 2.0)
row("reduce_sum", lambda x: st.reduce_sum(x, axis=1), [R], lambda x: x.sum(1))
row("reduce_mean", lambda x: st.reduce_mean(x, axis=0, keepdims=True), [R],
    lambda x: x.mean(0, keepdims=True))
row("reduce_prod", lambda x: st.reduce_prod(x, axis=1), [R], lambda x: x.prod(1))
row("reduce_max", lambda x: st.reduce_max(x), [Arg((2, 3), values=[[1, 5, 2], [0, 3, -1]])],
    np.max)
row("reduce_min", lambda x: st.reduce_min(x, axis=0), [Arg((2, 3), values=[[1, 5, 2],
                                                                          [0, 3, -1]])],
    lambda x: x.min(0))
row("reduce_logsumexp", lambda x: st.reduce_logsumexp(x, axis=-1), [M23],
    lambda x: np.log(np.exp(x).sum(-1)))
row("reduce_euclidean_norm", lambda x: st.reduce_euclidean_norm(x, axis=1), [M23],
    lambda x: np.sqrt((x * x).sum(1)))
row("reduce_variance", lambda x: st.reduce_variance(x, axis=1), [M23], lambda x: x.var(1))

# ---- structure -----------------------------------------------------------------------------
row("reshape", lambda x: st.reshape(x, [3, 2]), [M23], lambda x: x.reshape(3, 2))
row("transpose", lambda x: st.transpose(x), [M23], lambda x: x.T)
row("squeeze", lambda x: st.squeeze(x, [0]), [Arg((1, 3))], lambda x: x[0])
row("expand_dims", lambda x: st.expand_dims(x, 1), [S3], lambda x: x[:, None])
row("tile", lambda x: st.tile(x, [2, 1]), [M23], lambda x: np.tile(x, (2, 1)))
row("broadcast_to", lambda x: st.broadcast_to(x, [2, 3]), [S3],
    lambda x: np.broadcast_to(x, (2, 3)))
row("getitem", lambda x: x[1:, ::-2], [Arg((3, 4))], lambda x: x[1:, ::-2])
row("gather", lambda x: st.gather(x, [2, 0, 2], axis=1), [M23],
    lambda x: x[:, [2, 0, 2]])
row("stack", lambda a, b: st.stack([a, b], axis=1), [S3, S3], lambda a, b: np.stack([a, b], 1))
row("concat", lambda a, b: st.concat([a, b], 0), [M23, Arg((1, 3))],
    lambda a, b: np.concatenate([a, b], 0))
row("reverse", lambda x: st.reverse(x, [1]), [M23], lambda x: x[:, ::-1])
row("roll", lambda x: st.roll(x, [1, -4, 2], [0, 1, 0]), [M23],
    lambda x: np.roll(x, (3, -4), (0, 1)))
row("slice", lambda x: st.slice(x, [0, 1], [-1, 2]), [M23], lambda x: x[:, 1:3])
row("strided_slice", lambda x: st.strided_slice(x, [1, -1, 0], [2, 0, 0], [1, -2, 1],
                                                begin_mask=1, new_axis_mask=4), [Arg((3, 4))],
    lambda x: x[:2, -1:0:-2, None])
row("gather_nd", lambda x: st.gather_nd(x, [[1, 2], [0, 0], [1, 2]]), [M23],
    lambda x: x[[1, 0, 1], [2, 0, 2]])
row("segment_reduce", lambda x: st.math.unsorted_segment_sum(x, [2, 0, 2, -1], 3),
    [Arg((4, 2))], lambda x: np.stack([x[1], 0 * x[1], x[0] + x[2]]))
row("matrix_diag_part", st.linalg.diag_part, [Arg((2, 2, 3))],
    lambda x: np.diagonal(x, axis1=-2, axis2=-1))
row("matrix_diag", st.linalg.diag, [M23], lambda x: x[..., None] * np.eye(3))
row("meshgrid", lambda a, b: st.stack(st.meshgrid(a, b)), [S3, Arg((2,))],
    lambda a, b: np.stack(np.meshgrid(a, b)))
row("scan", lambda x, w: st.scan(lambda a, r: a * w + st.sin(r) * a, x,
                                 initializer=st.ones([3])),
    [Arg((4, 3)), Arg((3,))], lambda x, w: np_scan(x, w))
_IDX = np.array([[3, -1], [0, 3]])
row("gather_flat", lambda x: ops.gather_flat.bind(x, idx=_IDX), [Arg((2, 2))],
    lambda x: np.where(_IDX < 0, 0.0, x.reshape(-1)[np.maximum(_IDX, 0)]))
row("scatter_add", lambda g: ops.scatter_add.bind(g, idx=_IDX, shape=(2, 2)), [Arg((2, 2))],
    lambda g: np.bincount(_IDX[_IDX >= 0], g[_IDX >= 0], minlength=4).reshape(2, 2))

# ---- contractions and linear algebra -------------------------------------------------------
row("matmul", lambda a, b: st.matmul(a, b, transpose_b=True), [M23, Arg((4, 3))],
    lambda a, b: a @ b.T)
row("einsum", lambda a, b: st.einsum("bij,jk->bki", a, b), [Arg((2, 2, 3)), Arg((3, 2))],
    lambda a, b: np.einsum("bij,jk->bki", a, b))
row("einsum_diagonal", lambda a: st.einsum("ii->i", a), [Arg((3, 3))],
    lambda a: np.einsum("ii->i", a))
row("tensordot", lambda a, b: st.tensordot(a, b, [[1], [0]]), [M23, Arg((3, 2))],
    lambda a, b: np.tensordot(a, b, [[1], [0]]))
row("trace", st.linalg.trace, [Arg((2, 3, 3))], lambda a: np.trace(a, axis1=-2, axis2=-1))
_WELL = lambda n: Arg((n, n), -1, 1)  # noqa: E731 - shifted to be well conditioned below
row("det", lambda a: st.linalg.det(a + 3 * np.eye(3)), [_WELL(3)],
    lambda a: np.linalg.det(a + 3 * np.eye(3)))
row("det_elimination", lambda a: st.linalg.det(a + 4 * np.eye(5)), [_WELL(5)],
    lambda a: np.linalg.det(a + 4 * np.eye(5)), rtol=1e-5)
row("inv", lambda a: st.linalg.inv(a + 3 * np.eye(2)), [_WELL(2)],
    lambda a: np.linalg.inv(a + 3 * np.eye(2)))
row("inv_elimination", lambda a: st.linalg.inv(a + 4 * np.eye(4)), [_WELL(4)],
    lambda a: np.linalg.inv(a + 4 * np.eye(4)))
row("solve", lambda a, b: st.linalg.solve(a + 3 * np.eye(3), b), [_WELL(3), Arg((3, 2))],
    lambda a, b: np.linalg.solve(a + 3 * np.eye(3), b))
row("solve_elimination", lambda a, b: st.linalg.solve(a + 4 * np.eye(5), b, adjoint=True),
    [_WELL(5), Arg((5, 1))], lambda a, b: np.linalg.solve((a + 4 * np.eye(5)).T, b))

row("cholesky", lambda a: st.linalg.cholesky(st.matmul(a, a, transpose_b=True) + 3 * np.eye(3)),
    [_WELL(3)], lambda a: np.linalg.cholesky(a @ a.T + 3 * np.eye(3)))
row("triangular_solve", lambda a, b: st.linalg.triangular_solve(a + 3 * np.eye(3), b),
    [_WELL(3), Arg((3, 2))], lambda a, b: np.linalg.solve(np.tril(a + 3 * np.eye(3)), b))
row("eigh", lambda a: st.concat([st.linalg.eigh(a)[0][None], st.linalg.eigh(a)[1] ** 2], 0),
    [_WELL(3)],
    lambda a: np.concatenate([np.linalg.eigh(a)[0][None], np.linalg.eigh(a)[1] ** 2]))
row("svd", lambda a: st.concat([st.linalg.svd(a)[0][None], st.linalg.svd(a)[1] ** 2], 0),
    [Arg((3, 2))],
    lambda a: np.concatenate([np.linalg.svd(a)[1][None], np.linalg.svd(a)[0][:, :2] ** 2]))
row("qr", lambda a: st.concat(st.linalg.qr(a), 0), [Arg((3, 3))],
    lambda a: np.concatenate(np.linalg.qr(a)))
row("lu", lambda a: st.linalg.lu(a)[0], [_WELL(3)],
    lambda a: __import__("scipy.linalg").linalg.lu_factor(a)[0])

# ---- scans and orderings -------------------------------------------------------------------
row("cumsum", lambda x: st.cumsum(x, axis=1, exclusive=True), [M23],
    lambda x: np.concatenate([np.zeros((2, 1)), np.cumsum(x, 1)[:, :-1]], 1))
row("cumprod", lambda x: st.math.cumprod(x, axis=1, reverse=True), [M23],
    lambda x: np.flip(np.cumprod(np.flip(x, 1), 1), 1))
row("sort_permute", lambda x: st.sort(x, direction="DESCENDING"), [Arg((5,))],
    lambda x: -np.sort(-x))
row("argsort", st.argsort, [Arg((5,))], lambda x: np.argsort(x, kind="stable"), nograd=(0,))
row("searchsorted", lambda v: st.searchsorted([-1.0, 0.0, 1.0], v, side="right"),
    [Arg((4,))], lambda v: np.searchsorted([-1.0, 0.0, 1.0], v, side="right"), nograd=(0,))

# ---- softmax family ------------------------------------------------------------------------


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


row("softmax", lambda x: st.nn.softmax(x, axis=0), [M23], lambda x: _softmax(x, 0))
row("log_softmax", st.nn.log_softmax, [M23], lambda x: np.log(_softmax(x)))
_LABELS = Arg((2, 3), values=[[0.2, 0.5, 0.3], [0.0, 1.0, 0.0]])
row("softmax_cross_entropy_with_logits",
    lambda z, x: st.nn.softmax_cross_entropy_with_logits(z, x), [_LABELS, M23],
    lambda z, x: -(z * np.log(_softmax(x))).sum(-1), diff2=(1,))

# ---- norms and clipping (TF composites) ----------------------------------------------------
row("norm", lambda x: st.norm(x, ord=3, axis=1), [M23],
    lambda x: (np.abs(x) ** 3).sum(1) ** (1 / 3))
row("norm_fro", lambda x: st.norm(x, ord="fro", axis=[0, 1]), [M23], np.linalg.norm)
row("norm_matrix_1", lambda x: st.norm(x, ord=1, axis=[0, 1]), [Arg((2, 2), values=[
    [1.0, -2.0], [3.5, 0.5]])], lambda x: np.linalg.norm(x, 1))
row("clip_by_norm", lambda t: st.clip_by_norm(t, 1.5), [Arg((3,), 0.5, 2.0)],
    lambda t: t * 1.5 / max(np.linalg.norm(t), 1.5))
row("global_norm", lambda a, b: st.linalg.global_norm([a, b]), [S3, M23],
    lambda a, b: np.sqrt((a * a).sum() + (b * b).sum()))
row("clip_by_global_norm", lambda a, b: st.clip_by_global_norm([a, b], 1.0)[0][1],
    [S3, M23], lambda a, b: b / max(np.sqrt((a * a).sum() + (b * b).sum()), 1.0))
row("fill", lambda v: st.fill([2, 2], v), [Arg(())], lambda v: np.full((2, 2), v))
row("pad", lambda x, c: st.pad(x, [[1, 0], [0, 2]], constant_values=c), [M23, Arg(())],
    lambda x, c: np.pad(x, [(1, 0), (0, 2)], constant_values=c))
row("pad_reflect", lambda x: st.pad(x, [[1, 1], [2, 0]], mode="REFLECT"), [Arg((3, 3))],
    lambda x: np.pad(x, [(1, 1), (2, 0)], mode="reflect"))
row("linspace", lambda a, b: st.linspace(a, b, 4), [Arg(()), Arg(())],
    lambda a, b: np.linspace(a, b, 4))

# ---- convolution and pooling (NHWC) ---------------------------------------------------------


def np_conv2d(x, k, strides, pads):
    """Cross-correlation by its definition, on an explicitly padded input."""
    x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    kh, kw, _, o = k.shape
    sh, sw = strides
    oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            win = x[:, i * sh:i * sh + kh, j * sw:j * sw + kw, :]
            out[:, i, j, :] = np.einsum("npqc,pqco->no", win, k)
    return out


def np_pool(x, size, strides, pads, reduce, fill):
    x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)], constant_values=fill)
    (kh, kw), (sh, sw) = size, strides
    oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    return np.stack([np.stack([reduce(x[:, i * sh:i * sh + kh, j * sw:j * sw + kw, :],
                                      axis=(1, 2)) for j in range(ow)], 1)
                     for i in range(oh)], 1)


# (small: the compiled-code checks take its element view; tests/test_keras.py has a CNN)
row("conv2d", lambda x, k: st.nn.conv2d(x, k, [1, 2, 1, 1], "SAME"),
    [Arg((1, 3, 3, 2)), Arg((2, 3, 2, 1))],
    lambda x, k: np_conv2d(x, k, (2, 1), [(0, 1), (1, 1)]))

row("conv2d_dilated", lambda x, k: st.nn.conv2d(x, k, 1, "SAME", dilations=[1, 2, 1, 1]),
    [Arg((1, 4, 3, 2)), Arg((2, 2, 2, 1))],
    lambda x, k: np_conv2d(x, np.stack([k[0], np.zeros_like(k[0]), k[1]]), (1, 1),
                           [(1, 1), (0, 1)]))


def np_conv2d_input(y, k, strides, size):
    """The transpose of the convolution by its definition: each output element's products
    added into the window it read."""
    (n, oh, ow, _), (kh, kw, c, _) = y.shape, k.shape
    out = np.zeros((n,) + tuple(size) + (c,))
    for i, j, p, q in itertools.product(range(oh), range(ow), range(kh), range(kw)):
        out[:, i * strides[0] + p, j * strides[1] + q, :] += y[:, i, j, :] @ k[p, q].T
    return out


def np_conv2d_filter(x, y, strides, size):
    (kh, kw), (_, oh, ow, o) = size, y.shape
    out = np.zeros((kh, kw, x.shape[3], o))
    for i, j, p, q in itertools.product(range(oh), range(ow), range(kh), range(kw)):
        out[p, q] += x[:, i * strides[0] + p, j * strides[1] + q, :].T @ y[:, i, j, :]
    return out


# strides 2 down a height of 5: the input's last row is in no window (its gradient is 0)
row("conv2d_backprop_input",
    lambda y, k: ops.conv2d_backprop_input(y, k, strides=(2, 1), size=(5, 4)),
    [Arg((1, 2, 3, 2)), Arg((2, 2, 3, 2))],
    lambda y, k: np_conv2d_input(y, k, (2, 1), (5, 4)))
row("conv2d_backprop_filter",
    lambda x, y: ops.conv2d_backprop_filter(x, y, strides=(2, 1), size=(2, 2)),
    [Arg((2, 5, 4, 2)), Arg((2, 2, 3, 3))],
    lambda x, y: np_conv2d_filter(x, y, (2, 1), (2, 2)))
row("dropout", lambda x, u: ops.dropout(x, u, 0.3, 1 / 0.7),
    [S3, Arg((3,), 0.0, 1.0, avoid=(0.3,))],
    lambda x, u: np.where(u >= 0.3, x / 0.7, 0.0), diff=(0,), zerograd=(1,))
row("squared_difference", st.math.squared_difference, [S3, S3], lambda x, y: (x - y) ** 2,
    scalar=True)
row("max_pool2d", lambda x: st.nn.max_pool2d(x, 2, [1, 2, 1, 1], "SAME"),
    [Arg((2, 4, 3, 2))],
    lambda x: np_pool(x, (2, 2), (2, 1), [(0, 0), (0, 1)], np.max, -np.inf))


def np_argmax_taps(x, size, strides):
    """``(tap rows, tap columns)`` of each window's first maximum (numpy's argmax)."""
    (kh, kw), (sh, sw) = size, strides
    n, h, w, c = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    win = np.stack([x[:, p:p + sh * (oh - 1) + 1:sh, q:q + sw * (ow - 1) + 1:sw, :]
                    for p in range(kh) for q in range(kw)], axis=3)
    k = np.argmax(win, axis=3)
    return k // kw, k % kw


def np_pool_pick(x, hv, size, strides):
    p, q = np_argmax_taps(x, size, strides)
    n, oh, ow, c = p.shape
    ni, ii, jj, ci = np.indices((n, oh, ow, c))
    return hv[ni, ii * strides[0] + p, jj * strides[1] + q, ci]


def np_pool_grad(x, g, size, strides):
    p, q = np_argmax_taps(x, size, strides)
    out = np.zeros_like(x)
    for idx in np.ndindex(*g.shape):
        n, i, j, c = idx
        out[n, i * strides[0] + p[idx], j * strides[1] + q[idx], c] += g[idx]
    return out


def np_sum_pool_grad(g, size, strides, hw):
    """Each place: the sum of the ``g`` of the windows covering it."""
    out = np.zeros((g.shape[0],) + tuple(hw) + (g.shape[3],))
    for n, i, j, c in np.ndindex(*g.shape):
        out[n, i * strides[0]:i * strides[0] + size[0], j * strides[1]:j * strides[1] + size[1],
            c] += g[n, i, j, c]
    return out


# overlapping windows (3x2 every 2x1): a place can take the gradient of two windows
row("max_pool2d_grad",
    lambda x, g: ops.max_pool2d_grad(x, g, ksize=(3, 2), strides=(2, 1)),
    [Arg((2, 6, 4, 2)), Arg((2, 2, 3, 2))],
    lambda x, g: np_pool_grad(x, g, (3, 2), (2, 1)), diff=(1,), zerograd=(0,))
row("max_pool2d_pick",
    lambda x, h: ops.max_pool2d_pick(x, h, ksize=(3, 2), strides=(2, 1)),
    [Arg((2, 6, 4, 2)), Arg((2, 6, 4, 2))],
    lambda x, h: np_pool_pick(x, h, (3, 2), (2, 1)), diff=(1,), zerograd=(0,))
row("sum_pool2d", lambda x: ops.sum_pool2d(x, ksize=(3, 2), strides=(2, 1)),
    [Arg((2, 6, 4, 2))], lambda x: np_pool(x, (3, 2), (2, 1), [(0, 0), (0, 0)], np.sum, 0.0))
row("sum_pool2d_grad", lambda g: ops.sum_pool2d_grad(g, ksize=(3, 2), strides=(2, 1),
                                                     size=(6, 4)),
    [Arg((2, 2, 3, 2))], lambda g: np_sum_pool_grad(g, (3, 2), (2, 1), (6, 4)))
row("avg_pool2d", lambda x: st.nn.avg_pool2d(x, [2, 3], 2, "SAME"), [Arg((1, 5, 5, 2))],
    lambda x: np_pool(x, (2, 3), (2, 2), [(0, 1), (1, 1)], np.sum, 0.0)
    / np_pool(np.ones_like(x), (2, 3), (2, 2), [(0, 1), (1, 1)], np.sum, 0.0))
row("moments", lambda x: st.nn.moments(x, axes=[0, 1])[1], [Arg((3, 2, 2))],
    lambda x: x.var(axis=(0, 1)))

# ---- creation (no inputs) ------------------------------------------------------------------
row("zeros", lambda: st.zeros([2, 3]), [], lambda: np.zeros((2, 3)))
row("ones", lambda: st.ones([2]), [], lambda: np.ones(2))
row("eye", lambda: st.eye(2, 3), [], lambda: np.eye(2, 3))
row("range", lambda: st.range(1, 7, 2), [], lambda: np.arange(1, 7, 2))

# Every primitive and composite of the table (several rows may exercise one op).
COVERED_BY = {
    "einsum_diagonal": "einsum", "det_elimination": "det", "inv_elimination": "inv",
    "solve_elimination": "solve", "norm_fro": "norm", "norm_matrix_1": "norm",
    "pad_reflect": "pad", "conv2d_dilated": "conv2d",
}


def test_every_op_has_a_row():
    names = set(ROWS) | set(COVERED_BY.values())
    composites = set(st.math.COMPOSITES) | set(st.nn.COMPOSITES) | set(st.linalg.COMPOSITES)
    missing = (set(ops.OPS) | composites | set(st.math.CREATION)) - names
    assert not missing, f"ops without a row in tests/test_ops.py: {sorted(missing)}"


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def _sample(r: Row, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [a.sample(rng) for a in r.args]


def _float_args(r: Row) -> tuple:
    if r.diff is not None:
        return r.diff
    return tuple(i for i, a in enumerate(r.args) if a.dtype.startswith("float") and
                 i not in r.nograd)


def _weights(shape, seed=1):
    return np.random.default_rng(seed).normal(size=shape)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_values_match_numpy(name):
    r = ROWS[name]
    xs = _sample(r)
    out = r.fn(*[st.constant(x) for x in xs])
    expected = np.asarray(r.ref(*xs))
    got = np.asarray(out.numpy())
    assert got.shape == expected.shape
    if expected.dtype.kind == "b":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=max(r.rtol, 1e-12), atol=1e-12)


def _loss_ref(r, xs, w):
    ref = r.dref or r.ref
    return float(np.sum(w * np.asarray(ref(*xs), dtype=np.float64)))


@pytest.mark.parametrize("name", sorted(ROWS))
def test_first_derivatives_match_finite_differences(name):
    r = ROWS[name]
    xs = _sample(r)
    diff = _float_args(r)
    if not diff and not r.nograd:
        pytest.skip("no float arguments")
    leaves = [st.Variable(x, name=f"a{i}") for i, x in enumerate(xs)]
    with st.GradientTape(persistent=True) as tape:
        y = r.fn(*leaves)
        w = _weights(y.shape)
        loss = st.reduce_sum(st.cast(y, "float64") * w) if y.dtype.kind == "f" else None
    for i in r.nograd:
        assert loss is None or tape.gradient(loss, leaves[i]) is None
    for i in r.zerograd:
        np.testing.assert_array_equal(tape.gradient(loss, leaves[i]).numpy(), 0.0)
    h = 1e-6
    for i in diff:
        if i in r.zerograd:
            continue
        g = tape.gradient(loss, leaves[i])
        assert g is not None, f"{name}: no gradient for argument {i}"
        fd = np.zeros_like(xs[i])
        for idx in np.ndindex(*xs[i].shape):
            up = [x.copy() for x in xs]
            dn = [x.copy() for x in xs]
            up[i][idx] += h
            dn[i][idx] -= h
            fd[idx] = (_loss_ref(r, up, w) - _loss_ref(r, dn, w)) / (2 * h)
        np.testing.assert_allclose(g.numpy(), fd, rtol=max(r.rtol, 1e-6) * 10, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_second_derivatives_match_finite_differences(name):
    r = ROWS[name]
    xs = _sample(r)
    diff = r.diff2 if r.diff2 is not None else tuple(i for i in _float_args(r)
                                                      if i not in r.zerograd)
    if not diff:
        pytest.skip("no differentiable float arguments")
    rng = np.random.default_rng(2)
    vs = {i: rng.normal(size=xs[i].shape) for i in diff}
    leaves = [st.Variable(x, name=f"a{i}") for i, x in enumerate(xs)]
    with st.GradientTape(persistent=True) as outer:
        with st.GradientTape(persistent=True) as inner:
            y = r.fn(*leaves)
            w = _weights(y.shape)
            loss = st.reduce_sum(y * w)
        grads = inner.gradient(loss, [leaves[i] for i in diff],
                               unconnected_gradients="zero")
        directional = st.add_n([st.reduce_sum(g * vs[i]) for g, i in zip(grads, diff)]) \
            if hasattr(st, "add_n") else sum(st.reduce_sum(g * vs[i]) for g, i in
                                             zip(grads, diff))
    h = 1e-4
    for i in diff:
        hv = outer.gradient(directional, leaves[i], unconnected_gradients="zero").numpy()
        ref = np.zeros_like(xs[i])
        for idx in np.ndindex(*xs[i].shape):
            total = 0.0
            for s1, s2 in itertools.product((1, -1), repeat=2):
                p = [x.copy() for x in xs]
                for j in diff:
                    p[j] = np.array(p[j] + s1 * h * vs[j])
                p[i][idx] += s2 * h
                total += s1 * s2 * _loss_ref(r, p, w)
            ref[idx] = total / (4 * h * h)
        np.testing.assert_allclose(hv, ref, rtol=1e-4, atol=1e-5)


def _scalar_rows():
    return sorted(n for n, r in ROWS.items() if r.scalar)


def _nested_derivative(fn, xs, multi):
    """d^k fn / d xs[multi[0]] ... d xs[multi[-1]] by nested tapes."""
    tapes = [st.GradientTape(persistent=True) for _ in multi]
    with contextlib.ExitStack() as stack:
        for t in tapes:
            stack.enter_context(t)
        d = fn(*xs)
        for k in reversed(range(len(multi))):
            d = tapes[k].gradient(d, xs[multi[k]], unconnected_gradients="zero")
    return d


@pytest.mark.parametrize("name", _scalar_rows())
def test_scalar_derivatives_to_order_three_match_sympy(name):
    r = ROWS[name]
    n = len(r.args)
    syms = [st.symbol(f"a{i}", real=True) for i in range(n)]  # (sp.diff of Abs: real)
    leaves = [s.symbols[()] for s in syms]
    formula = r.fn(*syms).formula()
    diff = _float_args(r)
    points = []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        points.append([float(np.asarray(a.sample(rng)).reshape(-1)[0]) for a in r.args])
    for order in (1, 2, 3):
        for multi in itertools.combinations_with_replacement(diff, order):
            got = _nested_derivative(r.fn, syms, multi).formula()
            want = sp.diff(formula, *[leaves[i] for i in multi])
            for pt in points:
                env = {leaf: sp.Float(v) for leaf, v in zip(leaves, pt)}
                a = complex(got.xreplace(env).evalf()).real
                b = complex(want.xreplace(env).evalf()).real
                assert a == pytest.approx(b, rel=1e-9, abs=1e-9), (name, multi, pt, got, want)


def _jacobians(r: Row, xs, rowwise: bool):
    """d y / d each float argument, and the Jacobian of the weighted loss's gradient (second
    derivatives): one batched sweep each, or one sweep per row (``rowwise``)."""
    diff = _float_args(r)
    leaves = [st.Variable(x, name=f"a{i}") for i, x in enumerate(xs)]
    with st.GradientTape(persistent=True) as outer:
        with st.GradientTape(persistent=True) as inner:
            y = r.fn(*leaves)
            loss = st.reduce_sum(y * _weights(y.shape))
        grads = inner.gradient(loss, [leaves[i] for i in diff], unconnected_gradients="zero")
    firsts = [inner.jacobian(y, leaves[i], experimental_use_pfor=not rowwise) for i in diff]
    seconds = [outer.jacobian(g, leaves[j], experimental_use_pfor=not rowwise)
               for g in grads for j in diff]
    return [None if t is None else t.numpy() for t in firsts + seconds]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_batched_jacobians_match_row_by_row(name, monkeypatch):
    """Jacobians take one sweep with the one-hot seeds stacked (every op's batching rule,
    and those of the ops its derivative rules use); one sweep per seed is the reference."""
    r = ROWS[name]
    xs = _sample(r)
    if not _float_args(r) or r.fn(*[st.constant(x) for x in xs]).dtype.kind != "f":
        pytest.skip("no float arguments or no float result")
    batched = []
    sweep = autodiff.batched_vjp
    monkeypatch.setattr(autodiff, "batched_vjp",
                        lambda *a: batched.append(sweep(*a)) or batched[-1])
    got = _jacobians(r, xs, rowwise=False)
    assert batched and all(b is not None for b in batched), "a Jacobian was not batched"
    want = _jacobians(r, xs, rowwise=True)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def _row_values(v: np.ndarray, k: int) -> np.ndarray:
    """Row ``k`` of a batched argument: the value itself, floats shifted a little per row."""
    if v.dtype.kind != "f" or k == 0:
        return v
    return v + np.asarray(0.01 * k * np.cos(np.arange(v.size) + k), dtype=v.dtype).reshape(
        v.shape)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_batching_rules_match_rows(name):
    """Every primitive the row applies, batched over each argument alone and over all of
    them (``Primitive.batch``), equals the op applied row by row and stacked."""
    r = ROWS[name]
    rec = recording.Recorder(everything=True)
    recording.push(rec)
    try:
        r.fn(*[st.constant(x) for x in _sample(r)])
    finally:
        recording.remove(rec)
    if not rec.entries:
        pytest.skip("applies no primitive (a creation op)")
    checked = 0
    for e in rec.entries:
        if not hasattr(e.prim, "batch") or len(e.outputs) != 1:
            continue
        n_in = len(e.inputs)
        values = [np.asarray(t.numpy()) for t in e.inputs]
        for chosen in {(i,) for i in range(n_in)} | {tuple(range(n_in))}:
            flags = [i in chosen for i in range(n_in)]
            rows = [[_row_values(v, k) if f else v for v, f in zip(values, flags)]
                    for k in range(3)]
            args = [st.constant(np.stack([row[i] for row in rows])) if f else t
                    for i, (t, f) in enumerate(zip(e.inputs, flags))]
            got = e.prim.batch(args, flags, e.params, tuple(e.outputs[0].shape)).numpy()
            want = np.stack([np.asarray(e.prim.bind(*[st.constant(a) for a in row],
                                                    **e.params).numpy()) for row in rows])
            assert got.shape == want.shape, (e.prim, chosen)
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, equal_nan=True,
                                       err_msg=f"{e.prim} batched over {chosen}")
            checked += 1
    assert checked


def test_moments_variance_has_exact_second_derivatives():
    """The variance of st.nn.moments keeps the mean's derivative (TensorFlow stops it,
    which leaves the Hessian 2/N * I instead of 2/N * (I - 1/N))."""
    x = st.Variable(np.array([0.3, -1.2, 2.0, 0.5]))
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            _, var = st.nn.moments(x, axes=[0])
        g = inner.gradient(var, x)
    h = outer.jacobian(g, x).numpy()
    n = 4
    np.testing.assert_allclose(h, 2.0 / n * (np.eye(n) - 1.0 / n), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g.numpy(), 2.0 / n * (x.numpy() - x.numpy().mean()),
                               rtol=1e-13)

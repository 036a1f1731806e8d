"""``st.linalg``: determinants, inverses, solves and traces of (batches of) square matrices.

Small matrices (n <= 3) use exact closed forms (Leibniz, adjugate); larger ones take their
eager values from LAPACK through numpy (batched over leading dimensions) and their element view
from Gaussian elimination whose pivot order is chosen from the numeric values at trace time.
A singular matrix raises no error: where LAPACK meets an exact zero pivot, the values are the
elimination's (as in compiled code): ``inv``/``solve`` inf/nan, ``det`` 0 or nan.
"""

from __future__ import annotations

import functools

import numpy as np

from symtape import ops
from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.math import table_entry
from symtape.math import einsum, eye, global_norm, matmul, norm, tensordot  # also under tf.linalg
from symtape.core.variables import constant, convert_to_tensor
from symtape.linalg_factor import cholesky, cholesky_solve, logdet, triangular_solve
from symtape.linalg_decomp import eigh, eigvalsh, expm, lstsq, lu, pinv, qr, slogdet, svd

__all__ = ["det", "inv", "solve", "trace", "matrix_transpose", "matmul", "norm", "einsum",
           "tensordot", "eye", "global_norm", "diag", "diag_part",
           "matvec", "cross", "band_part",
           "cholesky", "triangular_solve", "cholesky_solve", "logdet",
           "eigh", "eigvalsh", "svd", "qr", "lu", "slogdet", "lstsq", "pinv", "expm"]


#: ``name -> composite`` of this module (the op-table test asks for a row per entry).
COMPOSITES: dict = {}
_composite = functools.partial(table_entry, COMPOSITES)


@_composite("trace")
def _trace(x):
    """Sum of the diagonal of the last two axes."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ShapeError(f"st.linalg.trace: needs rank >= 2, got shape {tuple(shape)}")
    return ops.einsum.bind(x, spec="...ii->...")



@_composite("matvec")
def _matvec(a, b, transpose_a: bool):
    """``a @ b[..., None]`` without its last axis (TF's form)."""
    column = ops.matmul.bind(a, ops.expand_dims.bind(b, axis=b.ndim), transpose_a=transpose_a,
                             transpose_b=False)
    return ops.squeeze.bind(column, axis=(column.ndim - 1,))


@_composite("cross")
def _cross(a, b):
    """``[a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0]`` along the last axis."""
    ai, bi = [a[..., i] for i in range(3)], [b[..., i] for i in range(3)]

    def term(i, j):
        return ops.subtract.bind(ops.multiply.bind(ai[i], bi[j]), ops.multiply.bind(ai[j], bi[i]))

    return ops.stack.bind(term(1, 2), term(2, 0), term(0, 1), axis=a.ndim - 1)


@_composite("band_part")
def _band_part(x, num_lower: int, num_upper: int):
    """``x`` where ``i - j <= num_lower`` and ``j - i <= num_upper`` (a negative bound: the
    whole triangle), exact zeros elsewhere, even where ``x`` is inf or nan."""
    m, n = x.shape[-2:]
    offset = np.arange(m)[:, None] - np.arange(n)[None, :]
    keep = ((num_lower < 0) | (offset <= num_lower)) & ((num_upper < 0) | (-offset <= num_upper))
    return ops.where.bind(constant(keep), x, constant(np.zeros((), x.dtype)))


def det(input, name=None):  # noqa: A002 - TensorFlow's name
    """Determinant of the last two axes.

    >>> import symtape as st
    >>> a, b, c, d = (st.symbol(n) for n in "abcd")
    >>> st.linalg.det(st.stack([st.stack([a, b]), st.stack([c, d])])).formula()
    a*d - b*c
    """
    return ops.det.bind(input)


def inv(input, adjoint=False, name=None):  # noqa: A002
    """Inverse of the last two axes.

    >>> import symtape as st
    >>> st.linalg.inv(st.constant([[2.0, 0.0], [0.0, 4.0]])).numpy()
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    out = ops.inv.bind(input)
    return matrix_transpose(out) if adjoint else out


def solve(matrix, rhs, adjoint=False, name=None):
    """``x`` with ``matrix @ x == rhs`` (``matrix^T`` with ``adjoint``).

    >>> import symtape as st
    >>> st.linalg.solve(st.constant([[2.0, 0.0], [0.0, 4.0]]), st.constant([[1.0], [1.0]])).numpy()
    array([[0.5 ],
           [0.25]])
    """
    return ops.solve.bind(matrix, rhs, adjoint=bool(adjoint))


def trace(x, name=None):
    """Sum of the diagonal of the last two axes.

    >>> import symtape as st
    >>> float(st.linalg.trace(st.constant([[1.0, 2.0], [3.0, 4.0]])))
    5.0
    """
    return _trace(convert_to_tensor(x))


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False,
           name=None):
    """The matrix-vector product ``a @ b`` over the last axes of ``a`` (rank >= 2) and ``b``
    (rank >= 1), batch axes broadcast; ``a`` transposed with ``transpose_a``/``adjoint_a``.

    >>> import symtape as st
    >>> st.linalg.matvec(st.constant([[1.0, 2.0], [3.0, 4.0]]), st.constant([1.0, -1.0])).numpy()
    array([-1., -1.])
    """
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    if a.ndim < 2:
        raise ShapeError(f"st.linalg.matvec: a must have rank >= 2, got shape {a.shape}")
    if b.ndim < 1:
        raise ShapeError("st.linalg.matvec: b must have rank >= 1, got a scalar")
    flip = bool(transpose_a or adjoint_a)
    inner = a.shape[-2] if flip else a.shape[-1]
    if inner != b.shape[-1]:
        raise ShapeError(f"st.linalg.matvec: b has {b.shape[-1]} elements in its last axis, "
                         f"a's {'rows' if flip else 'columns'} number {inner}")
    return _matvec(a, b, flip)


def cross(a, b, name=None):
    """The cross product of 3-vectors along the last axis of ``a`` and ``b`` (one shape).

    >>> import symtape as st
    >>> st.linalg.cross(st.constant([1.0, 0.0, 0.0]), st.constant([0.0, 1.0, 0.0])).numpy()
    array([0., 0., 1.])
    """
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    if a.ndim < 1 or a.shape[-1] != 3:
        raise ShapeError(f"st.linalg.cross: a's last axis must have size 3, got shape {a.shape}")
    if b.shape != a.shape:
        raise ShapeError(f"st.linalg.cross: b must have a's shape {a.shape}, got {b.shape}")
    return _cross(a, b)


def band_part(input, num_lower, num_upper, name=None):  # noqa: A002
    """``input`` (its last two axes) kept in a band: ``num_lower`` diagonals below the main
    one and ``num_upper`` above (a negative count keeps that whole triangle), exact zeros
    elsewhere.

    >>> import symtape as st
    >>> st.linalg.band_part(st.ones([3, 3]), 0, -1).numpy()
    array([[1., 1., 1.],
           [0., 1., 1.],
           [0., 0., 1.]])
    """
    x = convert_to_tensor(input)
    if x.ndim < 2:
        raise ShapeError(f"st.linalg.band_part: input must have rank >= 2, got shape {x.shape}")
    bounds = []
    for label, value, size in (("num_lower", num_lower, x.shape[-2]),
                               ("num_upper", num_upper, x.shape[-1])):
        value = value.numpy() if hasattr(value, "numpy") else value
        if np.ndim(value) != 0 or int(value) != value:
            raise InvalidArgumentError(f"st.linalg.band_part: {label} must be an int, got "
                                       f"{value!r}")
        if value > size:
            raise InvalidArgumentError(f"st.linalg.band_part: {label} must be negative or at "
                                       f"most {size}, got {int(value)}")
        bounds.append(int(value))
    return _band_part(x, *bounds)


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """``a`` with its last two axes swapped.

    >>> import symtape as st
    >>> st.linalg.matrix_transpose(st.zeros([2, 3])).shape
    (3, 2)
    """
    a = convert_to_tensor(a)
    return ops.transpose.bind(a, perm=ops.swap_last(a.ndim))



def diag_part(input, name="diag_part", k=0, padding_value=0, align="RIGHT_LEFT"):  # noqa: A002
    """The main diagonal of the last two axes: ``out[..., i] = input[..., i, i]`` for
    ``i < min(M, N)`` (batched over the leading axes).

    >>> import symtape as st
    >>> st.linalg.diag_part(st.constant([[1.0, 2.0], [3.0, 4.0]])).numpy()
    array([1., 4.])
    """
    x = convert_to_tensor(input)
    _main_diagonal("diag_part", k)
    if x.ndim < 2:
        raise ShapeError(f"st.linalg.diag_part: input must have rank >= 2, got shape "
                         f"{tuple(x.shape)}")
    return ops.matrix_diag_part.bind(x)


def diag(diagonal, name="diag", k=0, num_rows=-1, num_cols=-1, padding_value=0,
         align="RIGHT_LEFT"):
    """Square matrices with ``diagonal`` on their main diagonal and exact zeros elsewhere:
    ``out[..., i, j] = diagonal[..., i]`` if ``i == j`` (batched over the leading axes).

    >>> import symtape as st
    >>> st.linalg.diag(st.constant([1.0, 2.0])).numpy()
    array([[1., 0.],
           [0., 2.]])
    """
    d = convert_to_tensor(diagonal)
    _main_diagonal("diag", k)
    if d.ndim < 1:
        raise ShapeError("st.linalg.diag: diagonal must have rank >= 1, got a scalar")
    n = d.shape[-1]
    if num_rows not in (-1, n) or num_cols not in (-1, n) or padding_value != 0:
        raise InvalidArgumentError(f"st.linalg.diag: only square matrices of the diagonal's "
                                   f"length {n} with zero padding (num_rows, num_cols, "
                                   f"padding_value left at their defaults)")
    return ops.matrix_diag.bind(d)


def _main_diagonal(what: str, k) -> None:
    if k != 0:
        raise InvalidArgumentError(f"st.linalg.{what}: only the main diagonal (k=0), got "
                                   f"k={k!r}")

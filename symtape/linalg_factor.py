"""``st.linalg`` factorizations: cholesky, triangular_solve, cholesky_solve and logdet, with
TensorFlow's names, arguments and defaults (re-exported by :mod:`symtape.linalg`)."""

from __future__ import annotations

import numpy as np

from symtape import ops
from symtape.core.variables import convert_to_tensor

__all__ = ["cholesky", "triangular_solve", "cholesky_solve", "logdet"]


def cholesky(input, name=None):  # noqa: A002 - TensorFlow's name
    """Lower-triangular ``L`` with ``L L^T = input`` (only the lower triangle is read).

    Parameters: ``input`` a (batch of) symmetric positive definite matrices.
    Returns: ``L``, the same shape, zeros above the diagonal.

    >>> import symtape as st
    >>> a, b, c = (st.symbol(n) for n in "abc")
    >>> low = st.linalg.cholesky(st.stack([st.stack([a, b]), st.stack([b, c])]))
    >>> low[1, 1].formula()
    sqrt(c - b**2/a)
    >>> st.linalg.cholesky([[4.0, 2.0], [2.0, 5.0]]).numpy().tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    """
    return ops.cholesky.bind(convert_to_tensor(input))


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """``x`` with ``T x = rhs`` (``T^T x = rhs`` when ``adjoint``), ``T`` the lower (else
    upper) triangle of ``matrix``; the other triangle is not read.

    >>> import symtape as st
    >>> st.linalg.triangular_solve([[2.0, 0.0], [1.0, 4.0]], [[2.0], [9.0]]).numpy().tolist()
    [[1.0], [2.0]]
    """
    return ops.triangular_solve.bind(convert_to_tensor(matrix), convert_to_tensor(rhs),
                                     lower=bool(lower), adjoint=bool(adjoint))


def cholesky_solve(chol, rhs, name=None):
    """``x`` with ``A x = rhs`` where ``chol`` is the Cholesky factor of ``A`` (two triangular
    solves: ``L y = rhs``, then ``L^T x = y``).

    >>> import symtape as st
    >>> chol = st.linalg.cholesky([[4.0, 2.0], [2.0, 5.0]])
    >>> st.linalg.cholesky_solve(chol, [[6.0], [7.0]]).numpy().tolist()
    [[1.0], [1.0]]
    """
    chol, rhs = convert_to_tensor(chol), convert_to_tensor(rhs)
    y = ops.triangular_solve.bind(chol, rhs, lower=True, adjoint=False)
    return ops.triangular_solve.bind(chol, y, lower=True, adjoint=True)


def logdet(matrix, name=None):
    """``log(det(matrix))`` of Hermitian positive definite matrices, as
    ``2 * sum(log(diag(cholesky(matrix))))`` (TensorFlow's form; no overflow of ``det``).

    >>> import symtape as st
    >>> round(float(st.linalg.logdet([[4.0, 2.0], [2.0, 5.0]])), 12) == round(float(
    ...     __import__("numpy").log(16.0)), 12)
    True
    """
    low = ops.cholesky.bind(convert_to_tensor(matrix))
    logs = ops.log.bind(ops.matrix_diag_part.bind(low))
    total = ops.reduce_sum.bind(logs, axis=(len(logs.shape) - 1,), keepdims=False)
    return ops.multiply.bind(total, np.asarray(2.0, dtype=low.dtype))

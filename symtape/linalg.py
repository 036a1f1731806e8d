"""``st.linalg``: determinants, inverses, solves and traces of (batches of) square matrices.

Small matrices (n <= 3) use exact closed forms (Leibniz, adjugate); larger ones Gaussian
elimination whose pivot order is chosen from the numeric values at trace time.
"""

from __future__ import annotations

import functools

from symtape import ops
from symtape.base.errors import ShapeError
from symtape.math import table_entry
from symtape.math import einsum, eye, global_norm, matmul, norm, tensordot  # also under tf.linalg
from symtape.core.variables import convert_to_tensor

__all__ = ["det", "inv", "solve", "trace", "matrix_transpose", "matmul", "norm", "einsum",
           "tensordot", "eye", "global_norm"]


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


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """``a`` with its last two axes swapped.

    >>> import symtape as st
    >>> st.linalg.matrix_transpose(st.zeros([2, 3])).shape
    (3, 2)
    """
    a = convert_to_tensor(a)
    return ops.transpose.bind(a, perm=ops.swap_last(a.ndim))


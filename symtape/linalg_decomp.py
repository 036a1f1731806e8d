"""``st.linalg`` decompositions: eigh, eigvalsh, svd, qr, lu, slogdet, lstsq, pinv and expm,
with TensorFlow's names, arguments, defaults and return conventions, batched over leading
dimensions (re-exported by :mod:`symtape.linalg`).

eigh, svd, qr and lu are primitives (LAPACK values, matrix-calculus rules); the others are
composites of ops of the table, as TensorFlow defines them, so their derivatives of any order
come from the rules of what they apply. See docs/limits.md for the gradients at repeated
eigenvalues and singular values.
"""

from __future__ import annotations

import math

import numpy as np

from symtape import ops
from symtape.base.errors import ShapeError, UnboundLeafError
from symtape.core.variables import convert_to_tensor
from symtape.ops.decompositions import layout, unpack

__all__ = ["eigh", "eigvalsh", "svd", "qr", "lu", "slogdet", "lstsq", "pinv", "expm"]


def _factors(prim, x, **params) -> list:
    packed = prim.bind(x, **params)
    return unpack(packed, layout(prim.name, tuple(x.shape), packed_params(params)))


def packed_params(params: dict) -> dict:
    """The layout parameters of a decomposition's packed result."""
    return {"full_matrices": bool(params.get("full_matrices", False))}


def _last(x, k: int) -> tuple:
    return tuple(range(len(x.shape) - k, len(x.shape)))


def _c(value, x):
    return np.asarray(value, dtype=x.dtype)


def eigh(tensor, name=None):
    """Eigen-decomposition of symmetric matrices: ``(e, v)`` with ``tensor = v diag(e) v^T``,
    ``e`` ascending, ``v``'s columns orthonormal eigenvectors. Only the lower triangle is
    read (as TensorFlow). Beyond 2x2 each eigenvector is signed so that its first component
    of largest magnitude is positive (eager LAPACK values and compiled Jacobi rotations
    alike). Gradients divide by differences of eigenvalues; an exactly repeated pair
    contributes 0 to the eigenvectors' gradient (TensorFlow's safe reciprocal).

    >>> import symtape as st
    >>> e, v = st.linalg.eigh([[2.0, 1.0], [1.0, 2.0]])
    >>> e.numpy().tolist()
    [1.0, 3.0]
    >>> bool(abs(abs(v.numpy()[0, 0]) - 2 ** -0.5) < 1e-15)
    True
    """
    x = convert_to_tensor(tensor)
    e, v = _factors(ops.eigh, x)
    return e, v


def eigvalsh(tensor, name=None):
    """The ascending eigenvalues of symmetric matrices (the lower triangle is read);
    ``d e_i / d a = v_i v_i^T`` (folded onto the lower triangle).

    >>> import symtape as st
    >>> st.linalg.eigvalsh([[2.0, 0.0], [0.0, -1.0]]).numpy().tolist()
    [-1.0, 2.0]
    """
    return eigh(tensor)[0]


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """Singular value decomposition ``tensor = u diag(s) v^T``: ``(s, u, v)`` with ``s``
    descending (TensorFlow's order: ``s`` first, and ``v``, not ``v^T``); only ``s`` when not
    ``compute_uv``. ``full_matrices`` makes ``u`` and ``v`` square (no gradient then for a
    non-square matrix). Each pair ``(u_j, v_j)`` is signed so that ``v_j``'s first
    component of largest magnitude is positive.

    >>> import symtape as st
    >>> s, u, v = st.linalg.svd([[3.0, 0.0], [0.0, -4.0], [0.0, 0.0]])
    >>> s.numpy().tolist(), u.shape, v.shape
    ([4.0, 3.0], (3, 2), (2, 2))
    >>> st.linalg.svd([[0.0, 2.0]], compute_uv=False).numpy().tolist()
    [2.0]
    """
    x = convert_to_tensor(tensor)
    full = bool(full_matrices) and bool(compute_uv)  # s alone: the reduced factors suffice
    s, u, v = _factors(ops.svd, x, full_matrices=full)
    return (s, u, v) if compute_uv else s


def qr(input, full_matrices=False, name=None):  # noqa: A002 - TensorFlow's name
    """QR decomposition ``input = q r``: ``q`` with orthonormal columns (square when
    ``full_matrices``), ``r`` upper triangular (Householder: LAPACK's signs).

    >>> import symtape as st
    >>> q, r = st.linalg.qr([[3.0, 1.0], [4.0, 2.0]])
    >>> [[round(float(t), 12) for t in row] for row in (q @ r).numpy()]
    [[3.0, 1.0], [4.0, 2.0]]
    >>> abs(r.numpy()).round(12).tolist()
    [[5.0, 2.2], [0.0, 0.4]]
    """
    x = convert_to_tensor(input)
    q, r = _factors(ops.qr, x, full_matrices=bool(full_matrices))
    return q, r


def _lu(x):
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"st.linalg.lu: input must be a (batch of) square matrix, got shape "
                         f"{tuple(x.shape)}")
    return _factors(ops.lu, x)


def lu(input, output_idx_type="int32", name=None):  # noqa: A002 - TensorFlow's name
    """Partial-pivoting LU decomposition: ``(lu, p)`` as TensorFlow's -- ``lu`` holds ``U``
    in its upper triangle and ``L`` (unit diagonal implied) below it, and ``p`` the row
    permutation with ``input[p] = L U`` (``lu_reconstruct``'s meaning; int32 by default).

    >>> import symtape as st
    >>> lu, p = st.linalg.lu([[1.0, 2.0], [3.0, 4.0]])
    >>> lu.numpy().tolist(), p.numpy().tolist()
    ([[3.0, 4.0], [0.3333333333333333, 0.6666666666666667]], [1, 0])
    """
    x = convert_to_tensor(input)
    packed, perm, _ = _lu(x)
    n = x.shape[-1]
    index = ops.reduce_sum.bind(ops.multiply.bind(perm, np.arange(n, dtype=x.dtype)),
                                axis=_last(perm, 1), keepdims=False)
    return packed, ops.cast.bind(index, dtype=np.dtype(output_idx_type))


def slogdet(input, name=None):  # noqa: A002 - TensorFlow's name
    """``(sign, log_abs_determinant)`` of square matrices, from the LU factors (no overflow
    of ``det``): ``log|det a| = sum log|U_ii|``, its gradient ``a^-T``; a singular matrix
    gives ``(0, -inf)``.

    >>> import symtape as st
    >>> sign, logabs = st.linalg.slogdet([[1.0, 2.0], [3.0, 4.0]])
    >>> float(sign), round(float(logabs), 12) == round(float(__import__("numpy").log(2.0)), 12)
    (-1.0, True)
    """
    x = convert_to_tensor(input)
    packed, _, parity = _lu(x)
    diag = ops.matrix_diag_part.bind(packed)
    logabs = ops.reduce_sum.bind(ops.log.bind(ops.abs_.bind(diag)), axis=_last(diag, 1),
                                 keepdims=False)
    signs = ops.reduce_prod.bind(ops.sign.bind(diag), axis=_last(diag, 1), keepdims=False)
    return ops.multiply.bind(parity, signs), logabs


def _gram_solve(a, b, l2, first_kind: bool):
    """TensorFlow's regularised normal equations through a Cholesky factor: ``(a^T a + l2
    I)^-1 a^T b`` (first kind) or ``a^T (a a^T + l2 I)^-1 b``."""
    gram = ops.matmul.bind(a, a, transpose_a=first_kind, transpose_b=not first_kind)
    gram = ops.add.bind(gram, ops.multiply.bind(_c(np.eye(gram.shape[-1]), a), l2))
    chol = ops.cholesky.bind(gram)

    def chol_solve(rhs):
        y = ops.triangular_solve.bind(chol, rhs, lower=True, adjoint=False)
        return ops.triangular_solve.bind(chol, y, lower=True, adjoint=True)

    if first_kind:
        return chol_solve(ops.matmul.bind(a, b, transpose_a=True))
    return ops.matmul.bind(a, chol_solve(b), transpose_a=True)


def lstsq(matrix, rhs, l2_regularizer=0.0, fast=True, name=None):
    """Least squares ``x`` minimising ``||matrix x - rhs||^2 + l2_regularizer ||x||^2``.

    ``fast=True`` (TensorFlow's default) solves the normal equations by Cholesky: ``(A^T A +
    l2 I)^-1 A^T b`` for ``m >= n``, else ``A^T (A A^T + l2 I)^-1 b`` (full rank needed).
    ``fast=False`` is the minimum-norm solution ``pinv(A) b`` (rank deficient allowed; the
    regulariser is ignored, as TensorFlow's).

    >>> import symtape as st
    >>> st.linalg.lstsq([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[1.0], [2.0], [3.0]]
    ...                 ).numpy().round(12).tolist()
    [[1.0], [2.0]]
    """
    a, b = convert_to_tensor(matrix), convert_to_tensor(rhs)
    if len(a.shape) < 2 or len(b.shape) != len(a.shape) or a.shape[:-2] != b.shape[:-2] or \
            b.shape[-2] != a.shape[-2]:
        raise ShapeError(f"st.linalg.lstsq: rhs of shape {tuple(b.shape)} does not match "
                         f"matrix of shape {tuple(a.shape)} (expected "
                         f"{tuple(a.shape[:-1]) + ('k',)})")
    if not fast:
        return ops.matmul.bind(pinv(a), b)
    l2 = convert_to_tensor(l2_regularizer)  # a tensor stays one: its gradient flows
    if l2.dtype != a.dtype:
        l2 = ops.cast.bind(l2, dtype=a.dtype)
    if l2.shape != ():
        raise ShapeError(f"st.linalg.lstsq: l2_regularizer must be a scalar, got shape "
                         f"{tuple(l2.shape)}")
    return _gram_solve(a, b, l2, a.shape[-2] >= a.shape[-1])


def pinv(a, rcond=None, validate_args=False, name=None):
    """Moore-Penrose pseudo-inverse through the SVD, as TensorFlow's: singular values at or
    below ``rcond * max(s)`` (default ``rcond = 10 * max(m, n) * eps``) count as infinite,
    so their reciprocals are 0 and their gradients finite.

    >>> import symtape as st
    >>> st.linalg.pinv([[1.0, 0.0], [0.0, 0.0]]).numpy().tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    x = convert_to_tensor(a)
    if len(x.shape) < 2:
        raise ShapeError(f"st.linalg.pinv: a must be a (batch of) matrix, got shape "
                         f"{tuple(x.shape)}")
    if rcond is None:
        rcond = 10.0 * max(x.shape[-2:]) * np.finfo(x.dtype).eps
    s, u, v = _factors(ops.svd, x, full_matrices=False)
    top = ops.reduce_max.bind(s, axis=_last(s, 1), keepdims=True) if s.shape[-1] else s
    cutoff = ops.multiply.bind(top, _c(rcond, x))
    kept = ops.where.bind(ops.greater.bind(s, cutoff), s, _c(np.inf, x))
    scaled = ops.divide.bind(v, ops.reshape.bind(kept, shape=tuple(kept.shape[:-1]) +
                                                 (1, kept.shape[-1])))
    return ops.matmul.bind(scaled, u, transpose_b=True)


#: Pade [13/13] coefficients and the 1-norm below which they give double precision (Higham,
#: "The scaling and squaring method for the matrix exponential revisited", 2005).
PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
          129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
          40840800.0, 960960.0, 16380.0, 182.0, 1.0)
THETA13 = 5.371920351148152
#: Squarings a traced expm (no values to count them) provides for: 1-norms up to
#: THETA13 * 2**MAX_SQUARINGS (about 5.8e9; beyond, exp overflows or loses all digits).
MAX_SQUARINGS = 30


def _pade13(a):
    ident = _c(np.eye(a.shape[-1]), a)
    b = [_c(v, a) for v in PADE13]
    a2 = ops.matmul.bind(a, a)
    a4 = ops.matmul.bind(a2, a2)
    a6 = ops.matmul.bind(a4, a2)

    def comb(*terms):
        out = None
        for t, c in terms:
            term = ops.multiply.bind(t, c)
            out = term if out is None else ops.add.bind(out, term)
        return out

    u_in = ops.matmul.bind(a6, comb((a6, b[13]), (a4, b[11]), (a2, b[9])))
    u = ops.matmul.bind(a, ops.add.bind(u_in, comb((a6, b[7]), (a4, b[5]), (a2, b[3]),
                                                   (ident, b[1]))))
    v_in = ops.matmul.bind(a6, comb((a6, b[12]), (a4, b[10]), (a2, b[8])))
    v = ops.add.bind(v_in, comb((a6, b[6]), (a4, b[4]), (a2, b[2]), (ident, b[0])))
    return ops.solve.bind(ops.subtract.bind(v, u), ops.add.bind(v, u))


def expm(input, name=None):  # noqa: A002 - TensorFlow's name
    """The matrix exponential by scaling and squaring with the Pade [13/13] approximant
    (Higham 2005): ``s = max(0, ceil(log2(||a||_1 / theta13)))`` squarings of the
    approximant at ``a / 2**s``. A composite of matmul and solve, so its derivatives of any
    order are the approximant's and it compiles; each matrix of a batch takes its own ``s``.

    >>> import symtape as st
    >>> st.linalg.expm([[0.0, 1.0], [0.0, 0.0]]).numpy().tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    x = convert_to_tensor(input)
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"st.linalg.expm: input must be a (batch of) square matrix, got "
                         f"shape {tuple(x.shape)}")
    norm = ops.reduce_max.bind(ops.reduce_sum.bind(ops.abs_.bind(x), axis=_last(x, 2)[:1],
                                                   keepdims=True),
                               axis=_last(x, 1), keepdims=True) if x.shape[-1] else \
        ops.reduce_sum.bind(x, axis=_last(x, 2), keepdims=True)
    steps = ops.maximum.bind(ops.ceil.bind(ops.divide.bind(
        ops.log.bind(ops.divide.bind(norm, _c(THETA13, x))), _c(math.log(2.0), x))), _c(0.0, x))
    out = _pade13(ops.multiply.bind(x, ops.pow_.bind(_c(0.5, x), steps)))
    for k in range(_squarings(steps)):
        out = ops.where.bind(ops.less.bind(_c(k, x), steps), ops.matmul.bind(out, out), out)
    return out


def _squarings(steps) -> int:
    """How many masked squarings to apply: the most any matrix of the batch needs when the
    values are known (at most 1,024 for finite doubles), else :data:`MAX_SQUARINGS`."""
    try:
        values = np.asarray(steps.numpy(), dtype=np.float64)
    except UnboundLeafError:
        return MAX_SQUARINGS
    values = values[np.isfinite(values)]
    return int(values.max()) if values.size else 0

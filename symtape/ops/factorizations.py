"""Factorizations: cholesky and triangular_solve of (batches of) square matrices.

Eager values come from numpy (LAPACK's Cholesky; substitution for the triangular solve, so
that a zero on the diagonal gives TensorFlow's inf/nan instead of an error). Each op's element
view is the textbook recursion on atoms (square roots and divisions, exact for small
matrices); its loop rule runs that view unrolled while small.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.base.lazy import LazyModule
from symtape.core.primitive import (
    Aval, Primitive, batch_size, fmt, register_primitive, spread, union,
)
from symtape.ops.contraction import matmul
from symtape.ops.linalg import check_square, per_matrix
from symtape.ops.elementwise import add, multiply, negative
from symtape.ops.structural import transpose

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")


def swap(x):
    """``x`` with its last two axes exchanged (the adjoint of a real matrix)."""
    rank = len(x.shape)
    return transpose.bind(x, perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


def triangle_mask(n: int, lower: bool, diagonal: float, dtype) -> np.ndarray:
    """A constant ``(n, n)`` mask: 1 in the ``lower`` (else upper) triangle, ``diagonal`` on
    the diagonal, 0 elsewhere."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    keep = (i > j) if lower else (i < j)
    return np.where(i == j, diagonal, keep.astype(np.float64)).astype(dtype)


# --------------------------------------------------------------------------------------------
# The recursions on atoms (the element view)
# --------------------------------------------------------------------------------------------


def _neg(a):
    return G.lincomb([(sp.S.NegativeOne, a)])


def _minus_dot(first, pairs):
    """``first - sum(a * b for a, b in pairs)`` as one atom."""
    out = first
    for a, b in pairs:
        out = G.add(out, _neg(G.mul(a, b)))
    return out


def _divide(a, b):
    return G.monomial(G.ONE, [(a, G.ONE), (b, sp.S.NegativeOne)])


def cholesky_atoms(m: list) -> list:
    """Cholesky-Banachiewicz on atoms, reading the lower triangle of ``m``."""
    n = len(m)
    low = [[G.ZERO] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            rest = _minus_dot(m[i][j], [(low[i][k], low[j][k]) for k in range(j)])
            if i == j:
                low[i][i] = G.power(rest, sp.Rational(1, 2))
            else:
                low[i][j] = _divide(rest, low[j][j])
    return low


def triangular_atoms(m: list, rhs: list, lower: bool, adjoint: bool) -> list:
    """Substitution on atoms for ``op(T) x = rhs``, ``T`` the named triangle of ``m`` and
    ``op`` the transpose when ``adjoint``."""
    n = len(m)
    t = [[m[j][i] for j in range(n)] for i in range(n)] if adjoint else m
    forward = lower != adjoint  # the triangle that op(T) is
    order = range(n) if forward else reversed(range(n))
    x = [[None] * len(rhs[0]) for _ in range(n)]
    for i in order:
        done = range(i) if forward else range(i + 1, n)
        for c in range(len(rhs[0])):
            rest = _minus_dot(rhs[i][c], [(t[i][k], x[k][c]) for k in done])
            x[i][c] = _divide(rest, t[i][i])
    return x


def _per_matrix(arrays, fn, out_core, **kw):
    batch = arrays[0].shape[:-2]
    out = np.empty(batch + out_core, dtype=object)
    for idx in np.ndindex(*batch):
        out[idx] = np.asarray(fn(*[a[idx].tolist() for a in arrays], **kw), dtype=object)
    return out


# --------------------------------------------------------------------------------------------
# The primitives
# --------------------------------------------------------------------------------------------


class Factorization(Primitive):
    """A batched square-matrix op over leading batch axes; no loop form of its own (its
    element view runs unrolled while small)."""

    def __init__(self, name: str, nargs: int, rules) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)

    def check_square(self, shape, what: str) -> None:
        check_square(self.name, shape, what)

    def batch(self, args, batched, params, shape):
        n = batch_size(args, batched)
        return self.bind(*[spread(a, b, n) for a, b in zip(args, batched)], **params)

    def loop(self, planner, node):
        """One block over the points and the batch: beyond 3x3 its body is a native routine
        (the element view's recursion in loops, the same operations in the same order), up
        to 3x3 the element view of one matrix."""
        if not all(x.dtype.kind == "f" for x in (node, *node.inputs)):
            return planner.unrolled(node)
        if node.inputs[0].shape[-1] <= 3:
            return per_matrix(planner, node)
        return per_matrix(planner, node, *self.routine(node.params))

    def element_cost(self, node):
        """The recursion's atoms: about ``n**3`` a matrix."""
        a = node.inputs[0]
        n = a.shape[-1]
        return math.prod(a.shape[:-2]) * n * n * (n + node.shape[-1])


class Cholesky(Factorization):
    """``L`` lower triangular with ``L L^T = A``, reading only the lower triangle of ``A``."""

    def __init__(self) -> None:
        super().__init__("cholesky", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape, "input")
        return Aval(avals[0].shape, self.check_dtypes(avals)), {}

    @staticmethod
    def routine(params):
        return "cholesky", False

    def numeric(self, values, params):
        a = np.asarray(values[0])
        try:
            return np.linalg.cholesky(np.tril(a)).astype(a.dtype)
        except np.linalg.LinAlgError:
            raise InvalidArgumentError("st.linalg.cholesky: input is not positive definite "
                                       "(Cholesky decomposition was not successful)") from None

    def build(self, atoms, params):
        n = atoms[0].shape[-1]
        return _per_matrix(atoms, cholesky_atoms, (n, n))

    def dependencies(self, deps, params, shape):
        n = shape[-1]
        low = np.where(np.tril(np.ones((n, n), dtype=bool)), deps[0], 0)
        whole = union([low], axis=(-2, -1), keepdims=True)
        return np.where(np.tril(np.ones((n, n), dtype=bool)), whole, 0).astype(object)

    @staticmethod
    def _rule(g, ans, x):
        """Murray's rule, as TensorFlow: ``P = Phi(L^T g)`` (lower triangle, half diagonal),
        ``grad = sym(L^-T P L^-1)`` with ``sym(X) = (X + X^T) / 2``."""
        n = ans.shape[-1]
        middle = multiply.bind(matmul.bind(ans, g, transpose_a=True),
                               triangle_mask(n, True, 0.5, ans.dtype))
        left = triangular_solve.bind(ans, middle, lower=True, adjoint=True)  # L^-T P
        right = triangular_solve.bind(ans, swap(left), lower=True, adjoint=True)  # (.. L^-1)^T
        half = np.asarray(0.5, dtype=ans.dtype)
        return multiply.bind(add.bind(right, swap(right)), half)


class TriangularSolve(Factorization):
    """``x`` with ``op(T) x = rhs``: ``T`` the lower (else upper) triangle of ``matrix``,
    ``op`` the transpose when ``adjoint``."""

    def __init__(self) -> None:
        super().__init__("triangular_solve", 2, (self._rule_matrix, self._rule_rhs))

    def prepare(self, avals, params):
        a, b = avals
        self.check_square(a.shape, "matrix")
        t = self.check_dtypes(avals)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or \
                b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"st.linalg.triangular_solve: rhs of shape {fmt(b.shape)} does not "
                             f"match matrix of shape {fmt(a.shape)} (expected "
                             f"{fmt(a.shape[:-1] + ('k',))})")
        return Aval(b.shape, t), {"lower": bool(params.get("lower", True)),
                                  "adjoint": bool(params.get("adjoint", False))}

    @staticmethod
    def routine(params):
        forward = params["lower"] != params["adjoint"]
        return "forward" if forward else "backward", params["adjoint"]

    def numeric(self, values, params):
        a, b = (np.asarray(v) for v in values)
        t = np.tril(a) if params["lower"] else np.triu(a)
        if params["adjoint"]:
            t = np.swapaxes(t, -1, -2)
        n = a.shape[-1]
        forward = params["lower"] != params["adjoint"]
        x = np.zeros(b.shape, dtype=np.float64)
        with np.errstate(all="ignore"):  # a zero pivot gives inf/nan, as TensorFlow
            for i in (range(n) if forward else reversed(range(n))):
                done = slice(0, i) if forward else slice(i + 1, n)
                rest = b[..., i, :] - np.einsum("...k,...kc->...c", t[..., i, done],
                                                x[..., done, :])
                x[..., i, :] = rest / t[..., i, i, None]
        return x.astype(b.dtype)

    def build(self, atoms, params):
        return _per_matrix(atoms, triangular_atoms, atoms[1].shape[-2:], **params)

    def dependencies(self, deps, params, shape):
        whole = [union([d], axis=(-2, -1), keepdims=True) for d in deps]
        return np.broadcast_to(np.bitwise_or(*whole), shape).astype(object)

    @staticmethod
    def _rule_rhs(g, ans, matrix, rhs, lower=True, adjoint=False):
        # the adjoint of a solve is the solve with the adjoint
        return triangular_solve.bind(matrix, g, lower=lower, adjoint=not adjoint)

    @staticmethod
    def _rule_matrix(g, ans, matrix, rhs, lower=True, adjoint=False):
        """TensorFlow's rule: ``-gb x^T`` (``-x gb^T`` when ``adjoint``), kept to the
        triangle that was read."""
        gb = triangular_solve.bind(matrix, g, lower=lower, adjoint=not adjoint)
        full = matmul.bind(ans, gb, transpose_b=True) if adjoint else \
            matmul.bind(gb, ans, transpose_b=True)
        n = matrix.shape[-1]
        return negative.bind(multiply.bind(full, triangle_mask(n, lower, 1.0, matrix.dtype)))


cholesky = register_primitive(Cholesky())
triangular_solve = register_primitive(TriangularSolve())

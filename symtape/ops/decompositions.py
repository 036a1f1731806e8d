"""Decompositions: eigh, svd, qr and lu of (batches of) matrices.

Each op's result is one packed float vector per matrix holding its factors (:func:`layout`,
:func:`unpack`): the eager value is LAPACK's (through numpy; the LU is partial pivoting, as
TensorFlow's) and the derivative rules are matrix calculus written with ops of the table
(matmul, the triangular solve, elementwise ops), so every order is another sweep. Spectral
gradients divide by differences of eigenvalues (of squared singular values); they use
TensorFlow's safe reciprocal ``x / (x**2 + 1e-20)``, so an exactly repeated eigenvalue
contributes nothing (docs/limits.md). The factors of a general matrix have no finite
formula in its elements: these ops have no loop form and only an opaque element view (one
unbound leaf per element, for the exact settling of small eager tensors downstream), so
compiling one is refused naming the op and the matrix size.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.base.errors import LoweringError, NonDifferentiableError, ShapeError
from symtape.base.lazy import LazyModule
from symtape.core.primitive import (
    Aval, Primitive, Unplannable, batch_size, fmt, register_primitive, spread, union,
)
from symtape.ops.contraction import matmul
from symtape.ops.elementwise import add, divide, multiply, subtract
from symtape.ops.factorizations import swap, triangle_mask, triangular_solve
from symtape.ops.linalg import check_square, per_matrix
from symtape.ops.structural import concat, getitem, matrix_diag, reshape

G = LazyModule("G", globals(), "symtape.element.graph")
sp = LazyModule("sp", globals(), "sympy")

#: The most elements times matrix elements of a node whose opaque element view is built
#: (eager settling asks only for small ones; compiling large ones is refused at once).
OPAQUE_LIMIT = 300_000
#: TensorFlow's epsilon of its safe reciprocal in spectral gradients.
SAFE_EPS = 1e-20


# --------------------------------------------------------------------------------------------
# Packed results
# --------------------------------------------------------------------------------------------


def layout(prim: str, shape: tuple, params: dict) -> list:
    """The core shapes of the factors that ``prim`` packs for a matrix of ``shape``."""
    m, n = shape[-2:]
    k = min(m, n)
    full = params.get("full_matrices", False)
    if prim == "eigh":
        return [(n,), (n, n)]
    if prim == "svd":
        return [(k,), (m, m if full else k), (n, n if full else k)]
    if prim == "qr":
        kq = m if full else k
        return [(m, kq), (kq, n)]
    return [(n, n), (n, n), ()]  # lu: the packed factors, the permutation matrix, its sign


def unpack(packed, cores: list) -> list:
    """The factors in ``packed`` (batch + (size,)) with their core shapes ``cores``."""
    batch = tuple(packed.shape[:-1])
    out, at = [], 0
    for core in cores:
        size = math.prod(core)
        part = getitem.bind(packed, key=(Ellipsis, slice(at, at + size, None)))
        out.append(reshape.bind(part, shape=batch + tuple(core)))
        at += size
    return out


def _pack(parts: list, cores: list, batch: tuple, dtype) -> np.ndarray:
    flat = [np.asarray(p, dtype=np.float64).reshape(batch + (math.prod(c),))
            for p, c in zip(parts, cores)]
    return np.concatenate(flat, axis=-1).astype(dtype)


# --------------------------------------------------------------------------------------------
# Helpers of the rules (ops of the table only)
# --------------------------------------------------------------------------------------------


def _const(value, like) -> np.ndarray:
    return np.asarray(value, dtype=like.dtype)


def safe_reciprocal(x):
    """TensorFlow's ``x / (x**2 + eps)``: ``1/x`` away from 0, and 0 at 0."""
    return divide.bind(x, add.bind(multiply.bind(x, x), _const(SAFE_EPS, x)))


def _row(v):
    """``v[..., None, :]``."""
    return reshape.bind(v, shape=tuple(v.shape[:-1]) + (1, v.shape[-1]))


def _col(v):
    """``v[..., :, None]``."""
    return reshape.bind(v, shape=tuple(v.shape) + (1,))


def _gaps(w):
    """``F[..., i, j] = safe_reciprocal(w[j] - w[i])``, 0 on the diagonal -- there as
    ``safe_reciprocal(1) * 0``: the safe reciprocal's slope at 0 is 1e20, which would swamp
    the second derivatives passing through the diagonal's ``w[i] - w[i]``."""
    eye = np.eye(w.shape[-1], dtype=w.dtype)
    gaps = add.bind(subtract.bind(_row(w), _col(w)), eye)
    return multiply.bind(safe_reciprocal(gaps), np.asarray(1.0 - eye, dtype=w.dtype))


def _triangle(x, lower: bool, diagonal: float):
    return multiply.bind(x, triangle_mask(x.shape[-1], lower, diagonal, x.dtype))


def _eye_like(x):
    return np.eye(x.shape[-1], dtype=x.dtype)


def _right_solve_upper(x, r):
    """``x R^-T`` for upper triangular ``R`` (TensorFlow's ``_TriangularSolve``)."""
    return swap(triangular_solve.bind(r, swap(x), lower=False, adjoint=False))


def _columns(x, start: int, stop: int | None):
    return getitem.bind(x, key=(Ellipsis, slice(start, stop, None)))


# --------------------------------------------------------------------------------------------
# The primitives
# --------------------------------------------------------------------------------------------


class Opaque:
    """The store of the opaque leaves of factors: they have no value of their own."""

    value = None
    #: what code generation says of such a leaf it meets (a factor computed eagerly, read
    #: by a function being compiled)
    why = ("it stands for a factor of st.linalg.eigh/svd/qr/lu computed eagerly, which has no "
           "element view at this size: a compiled function cannot recompute it; pass the "
           "factors among the compiled function's inputs")


OPAQUE = Opaque()


class Decomposition(Primitive):
    """A decomposition of (batches of) matrices: one packed float vector per matrix."""

    #: the factors a compiled function cannot hold, in words
    why = "its factors have no finite formula in the matrix elements"

    def __init__(self, name: str) -> None:
        super().__init__(name, ("T",), "f", rules=(self._rule,))

    def check_matrix(self, shape, square: bool) -> None:
        if square:
            check_square(self.name, shape, "input")
        elif len(shape) < 2:
            raise ShapeError(f"st.linalg.{self.name}: input must be a (batch of) matrix, got "
                             f"shape {fmt(shape)}")

    def normalise(self, params: dict) -> dict:
        return {}

    def prepare(self, avals, params):
        (a,) = avals
        self.check_matrix(a.shape, self.name in ("eigh", "lu"))
        t = self.check_dtypes(avals)
        params = self.normalise(params)
        size = sum(math.prod(c) for c in layout(self.name, a.shape, params))
        return Aval(tuple(a.shape[:-2]) + (size,), t), params

    def structure(self, args, params, shape):
        """Regular: the eager value is LAPACK's, never an element view (there is none)."""
        return True, None, None

    def numeric(self, values, params):
        """LAPACK's factors; a matrix holding nan or inf (which LAPACK refuses) or on which
        it does not converge has nan factors, as TensorFlow's."""
        a = np.asarray(values[0])
        x = a.astype(np.float64)
        batch = x.shape[:-2]
        cores = layout(self.name, x.shape, params)
        bad = ~np.isfinite(x).all(axis=(-2, -1)) if x.shape[-1] and x.shape[-2] else \
            np.zeros(batch, dtype=bool)
        safe = np.where(bad[..., None, None], 0.0, x)
        try:
            parts = self.lapack(safe, params)
        except np.linalg.LinAlgError:
            parts = [np.full(batch + c, np.nan) for c in cores]
            for idx in np.ndindex(*batch):
                try:
                    for p, q in zip(parts, self.lapack(safe[idx], params)):
                        p[idx] = q
                except np.linalg.LinAlgError:
                    bad[idx] = True
        parts = [np.where(bad.reshape(batch + (1,) * len(c)), np.nan, p)
                 for p, c in zip(parts, cores)]
        return _pack(parts, cores, batch, a.dtype)

    def batch(self, args, batched, params, shape):
        n = batch_size(args, batched)  # the op maps over leading axes already
        return self.bind(*[spread(a, b, n) for a, b in zip(args, batched)], **params)

    def dependencies(self, deps, params, shape):
        whole = union([deps[0]], axis=(-2, -1), keepdims=False)
        return np.broadcast_to(np.asarray(whole, dtype=object)[..., None], shape).astype(object)

    def refusal_of(self, shape) -> str:
        return (f"st.linalg.{self.name} of a {fmt(shape)} tensor has no element view and no "
                f"loop form ({self.why}): compiled functions cannot hold it; call it eagerly")

    def view_refused(self, node):
        return self.refusal_of(node.inputs[0].shape)

    def build(self, atoms, params):
        """Opaque atoms (unbound leaves ``eigh[k]``), one per element of the packed result:
        exact settling of small tensors downstream keeps the eager values there. A view of
        factors of unknown matrices (what compiling asks for) is refused, naming the op."""
        x = np.asarray(atoms[0], dtype=object)
        size = sum(math.prod(c) for c in layout(self.name, x.shape, params))
        if size * x.size > OPAQUE_LIMIT or any(
                leaf.store is not OPAQUE and leaf.bound_value() is None
                for leaf in G.leaves(list(x.flat))):
            raise LoweringError(self.refusal_of(x.shape))
        out = [G.Leaf.new(f"{self.name}[{k}]", store=OPAQUE, index=k)
               for k in range(int(np.prod(x.shape[:-2], dtype=np.int64)) * size)]
        return np.array(out, dtype=object).reshape(x.shape[:-2] + (size,))

    def loop(self, planner, node):
        """No loop form: refused at once, naming the op and the size."""
        raise Unplannable(self.refusal_of(node.inputs[0].shape))

    def _rule(self, g, ans, x, **params):
        cores = layout(self.name, tuple(x.shape), params)
        return self.vjp_of(unpack(g, cores), unpack(ans, cores), x, params)


#: The largest matrices whose eigh is the closed form (eager, printed and compiled alike).
EIGH_VIEW_MAX = 2


def eigh_closed(a, b, c, ops) -> tuple:
    """The eigen-decomposition of ``[[a, b], [b, c]]`` in closed form, with ``ops`` numpy's
    functions or the graph's builders: ``e = m -+ r`` (``m`` the mean of the diagonal,
    ``r = sqrt(h**2 + b**2)``, ``h = (a - c)/2``) and the eigenvectors at the angle ``t =
    atan2(b, h)/2``: ``(-sin t, cos t)`` for the smaller, ``(cos t, sin t)`` for the
    larger."""
    half, mean = ops.half(a, c, -1), ops.half(a, c, 1)
    r = ops.sqrt(ops.add(ops.mul(half, half), ops.mul(b, b)))
    t = ops.half(ops.atan2(b, half), None, 0)
    cos, sin = ops.cos(t), ops.sin(t)
    return [ops.sub(mean, r), ops.add(mean, r)], [[ops.neg(sin), cos], [cos, sin]]


class _NumpyOps:
    """numpy's side of :func:`eigh_closed`."""

    add, mul, sub, sqrt = np.add, np.multiply, np.subtract, np.sqrt
    atan2, cos, sin, neg = np.arctan2, np.cos, np.sin, np.negative

    @staticmethod
    def half(x, y, sign):
        return x * 0.5 if y is None else (x + sign * y) * 0.5


class _AtomOps:
    """The graph's side of :func:`eigh_closed` (the same operations, the same roundings)."""

    @staticmethod
    def add(x, y):
        return G.add(x, y)

    @staticmethod
    def mul(x, y):
        return G.mul(x, y)

    @staticmethod
    def sub(x, y):
        return G.add(x, G.lincomb([(sp.S.NegativeOne, y)]))

    @staticmethod
    def neg(x):
        return G.lincomb([(sp.S.NegativeOne, x)])

    @staticmethod
    def sqrt(x):
        return G.power(x, sp.Rational(1, 2))

    @staticmethod
    def atan2(y, x):
        return G.call(sp.atan2, y, x)

    @staticmethod
    def cos(x):
        return G.call(sp.cos, x)

    @staticmethod
    def sin(x):
        return G.call(sp.sin, x)

    @staticmethod
    def half(x, y, sign):
        terms = [(sp.Rational(1, 2), x)] + ([] if y is None else [(sp.Rational(sign, 2), y)])
        return G.lincomb(terms)


def signed_vectors(v: np.ndarray) -> np.ndarray:
    """Eigenvectors (the columns of ``v``) each signed so that its first component of
    largest magnitude is positive: one sign whatever computed them (LAPACK eagerly, Jacobi
    rotations compiled; both are unique up to sign).

    >>> signed_vectors(np.array([[0.6, -0.8], [-0.8, -0.6]])).tolist()
    [[-0.6, 0.8], [0.8, 0.6]]
    """
    if v.size == 0:
        return v
    return np.where(_leads_negative(v), -v, v)


def _leads_negative(v: np.ndarray) -> np.ndarray:
    """Per column of ``v`` (shape ``(..., 1, k)``), whether its first component of largest
    magnitude is negative: the vectors :func:`signed_vectors` turns."""
    return np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2) < 0


class Eigh(Decomposition):
    """``(e, v)``: ascending eigenvalues and orthonormal eigenvectors (columns) of the
    symmetric matrices whose lower triangle is the input. Up to :data:`EIGH_VIEW_MAX` the
    closed form (eager, printed and compiled alike); beyond, LAPACK's eagerly and Jacobi
    rotations compiled, the vectors signed alike (:func:`signed_vectors`)."""

    why = "eigenvalues are roots of the characteristic polynomial"

    def __init__(self) -> None:
        super().__init__("eigh")

    @staticmethod
    def lapack(x, params):
        n = x.shape[-1]
        if n == 1:
            return [x[..., 0], np.ones(x.shape)]
        if n == 2:
            e, v = eigh_closed(x[..., 0, 0], x[..., 1, 0], x[..., 1, 1], _NumpyOps)
            return [np.stack(e, axis=-1), np.stack([np.stack(r, axis=-1) for r in v], axis=-2)]
        e, v = np.linalg.eigh(x, UPLO="L")
        return [e, signed_vectors(v)]

    def structure(self, args, params, shape):
        """Small matrices settle through their closed form (it is the eager value)."""
        return args[0].shape[-1] > EIGH_VIEW_MAX, None, None

    def view_refused(self, node):
        n = node.inputs[0].shape[-1]
        return None if n <= EIGH_VIEW_MAX else super().view_refused(node)

    def build(self, atoms, params):
        x = np.asarray(atoms[0], dtype=object)
        n = x.shape[-1]
        if n > EIGH_VIEW_MAX:
            return super().build(atoms, params)
        out = np.empty(x.shape[:-2] + (n + n * n,), dtype=object)
        for idx in np.ndindex(*x.shape[:-2]):
            m = x[idx]
            if n == 2:
                e, v = eigh_closed(m[0, 0], m[1, 0], m[1, 1], _AtomOps)
            else:
                e, v = list(m[0]) if n else [], [[G.ONE]] * n
            out[idx] = np.array(list(e) + [a for r in v for a in r], dtype=object)
        return out

    def loop(self, planner, node):
        """One block over the batch whose body is, while small, one matrix's closed form,
        beyond the native routine ``eigh`` (cyclic Jacobi rotations: values within
        rounding of LAPACK's, vectors signed alike)."""
        if node.inputs[0].shape[-1] <= EIGH_VIEW_MAX:
            return per_matrix(planner, node)
        return per_matrix(planner, node, "eigh")

    def dependencies(self, deps, params, shape):
        n = int(round(math.sqrt(shape[-1] + 0.25) - 0.5))  # size n + n*n
        low = np.where(np.tril(np.ones((n, n), dtype=bool)), deps[0], 0)
        return super().dependencies([low], params, shape)

    @staticmethod
    def vjp_of(gs, parts, x, params):
        """TensorFlow's rule: ``V (diag(ge) + F * (V^T gV)) V^T`` with ``F[i, j] =
        1/(e_j - e_i)`` (0 for equal eigenvalues), then symmetrised onto the lower triangle
        that was read."""
        (ge, gv), (e, v) = gs, parts
        inner = add.bind(matrix_diag.bind(ge),
                         multiply.bind(_gaps(e), matmul.bind(v, gv, transpose_a=True)))
        full = matmul.bind(v, matmul.bind(inner, v, transpose_b=True))
        return _triangle(add.bind(full, swap(full)), True, 0.5)


class Svd(Decomposition):
    """``(s, u, v)``: descending singular values and the singular vectors (columns), ``a = u
    diag(s) v^T``; ``full_matrices`` completes ``u`` and ``v`` to square orthogonal
    matrices. Each pair ``(u_j, v_j)`` is signed so that ``v_j``'s first component of
    largest magnitude is positive (eager LAPACK values and compiled Jacobi rotations)."""

    why = "singular values are roots of a polynomial"

    def __init__(self) -> None:
        super().__init__("svd")

    def normalise(self, params):
        return {"full_matrices": bool(params.get("full_matrices", False))}

    @staticmethod
    def lapack(x, params):
        u, s, vh = np.linalg.svd(x, full_matrices=params["full_matrices"])
        v = np.swapaxes(vh, -1, -2)
        k = s.shape[-1]
        if k:  # each pair turned by v's rule (signed_vectors)
            sign = np.where(_leads_negative(v[..., :, :k]), -1.0, 1.0)
            u, v = u.copy(), v.copy()
            u[..., :, :k] *= sign
            v[..., :, :k] *= sign
        return [s, u, v]

    def loop(self, planner, node):
        """One block over the batch whose body is the native routine ``svd`` (one-sided
        Jacobi rotations: values within rounding of LAPACK's, the vectors' pairs signed
        alike); refused for ``full_matrices`` of a non-square matrix (its completing
        columns are any basis of a complement, which no rule fixes)."""
        m, n = node.inputs[0].shape[-2:]
        if node.params["full_matrices"] and m != n:
            raise Unplannable(f"st.linalg.svd with full_matrices=True of a {m}x{n} matrix has "
                              "no loop form (its completing columns are not unique); use "
                              "full_matrices=False, or call it eagerly")
        return per_matrix(planner, node, "svd", m=m)

    @staticmethod
    def vjp_of(gs, parts, x, params):
        """The adjoint of the SVD's linear map (Townsend's form of JAX's jvp): ``U (diag(gs)
        + (J + J^T) S + S (K + K^T)) V^T`` with ``J = F * (U^T gU)``, ``K = F * (V^T gV)``,
        ``F[i, j] = 1/(s_j^2 - s_i^2)``, plus the parts of ``gU`` (``gV``) outside the span
        of ``U`` (``V``) of a tall (wide) matrix divided by ``s``; reciprocals are safe (0 at
        0), as TensorFlow's."""
        (gs_, gu, gv), (s, u, v) = gs, parts
        m, n = x.shape[-2:]
        k = min(m, n)
        if params["full_matrices"] and m != n:
            raise NonDifferentiableError(
                "st.linalg.svd: no gradient with full_matrices=True for a non-square "
                f"{m}x{n} matrix (the completing columns of u or v are not unique); use "
                "full_matrices=False")
        f = _gaps(multiply.bind(s, s))
        j = multiply.bind(f, matmul.bind(u, gu, transpose_a=True))
        kk = multiply.bind(f, matmul.bind(v, gv, transpose_a=True))
        inner = add.bind(matrix_diag.bind(gs_),
                         add.bind(multiply.bind(add.bind(j, swap(j)), _row(s)),
                                  multiply.bind(_col(s), add.bind(kk, swap(kk)))))
        out = matmul.bind(u, matmul.bind(inner, v, transpose_b=True))
        inv_s = _row(safe_reciprocal(s))
        if m > k:  # (I - U U^T) gU S^-1 V^T
            rest = subtract.bind(gu, matmul.bind(u, matmul.bind(u, gu, transpose_a=True)))
            out = add.bind(out, matmul.bind(multiply.bind(rest, inv_s), v, transpose_b=True))
        if n > k:  # U S^-1 gV^T (I - V V^T)
            rest = subtract.bind(gv, matmul.bind(v, matmul.bind(v, gv, transpose_a=True)))
            out = add.bind(out, matmul.bind(u, multiply.bind(rest, inv_s), transpose_b=True))
        return out


class Qr(Decomposition):
    """``(q, r)``: ``q`` with orthonormal columns and upper triangular ``r``, ``a = q r``
    (Householder, LAPACK's signs); ``full_matrices`` makes ``q`` square. Compiled, the
    native routine ``qr`` (the same reflections; no formula)."""

    why = "Householder reflections divide by norms chosen per value"

    def __init__(self) -> None:
        super().__init__("qr")

    def normalise(self, params):
        return {"full_matrices": bool(params.get("full_matrices", False))}

    @staticmethod
    def lapack(x, params):
        return list(np.linalg.qr(x, mode="complete" if params["full_matrices"] else "reduced"))

    def loop(self, planner, node):
        """One block over the batch whose body is the native routine ``qr`` (LAPACK's
        unblocked Householder steps: values within rounding of eager ones)."""
        m, n = node.inputs[0].shape[-2:]
        return per_matrix(planner, node, "qr", m=m, full=node.params["full_matrices"])

    @staticmethod
    def vjp_of(gs, parts, x, params):
        """TensorFlow's rule: square and tall matrices directly; a wide one splits ``a =
        [x | y]`` with ``x`` square (``r = [u | q^T y]``)."""
        (gq, gr), (q, r) = gs, parts
        m, n = x.shape[-2:]
        if params["full_matrices"] and m > n:
            raise NonDifferentiableError(
                f"st.linalg.qr: no gradient with full_matrices=True for a {m}x{n} matrix with "
                "more rows than columns (the completing columns of q are not unique, as in "
                "TensorFlow); use full_matrices=False")
        if m >= n:
            return _qr_square_or_tall(q, r, gq, gr)
        y, u = _columns(x, m, None), _columns(r, 0, m)
        dv, du = _columns(gr, m, None), _columns(gr, 0, m)
        dy = matmul.bind(q, dv)
        dx = _qr_square_or_tall(q, u, add.bind(gq, matmul.bind(y, dv, transpose_b=True)), du)
        return concat.bind(dx, dy, axis=len(x.shape) - 1)


def _qr_square_or_tall(q, r, gq, gr):
    qgq = matmul.bind(q, gq, transpose_a=True)
    rgr = matmul.bind(r, gr, transpose_b=True)
    low = _triangle(add.bind(subtract.bind(qgq, swap(qgq)), subtract.bind(rgr, swap(rgr))),
                    True, 1.0)
    first = matmul.bind(q, add.bind(gr, _right_solve_upper(low, r)))
    second = _right_solve_upper(subtract.bind(gq, matmul.bind(q, qgq)), r)
    return add.bind(first, second)


def lu_factor(x: np.ndarray) -> list:
    """Partial-pivoting LU of float matrices (the row of largest magnitude, the first on
    ties, as Eigen's): ``[lu, P, sign]`` with ``P a = L U`` (``L`` unit lower triangular in
    the strict lower triangle of ``lu``, ``U`` its upper triangle), ``sign = det(P)``. A zero
    column leaves its multipliers 0 (no division by the zero pivot)."""
    a = np.array(x, dtype=np.float64)
    n = a.shape[-1]
    batch = a.shape[:-2]
    perm = np.broadcast_to(np.arange(n), batch + (n,)).copy()
    sign = np.ones(batch)
    at = np.indices(batch) if batch else ()
    for k in range(n):
        piv = k + np.argmax(np.abs(a[..., k:, k]), axis=-1)
        sign = np.where(piv != k, -sign, sign)
        rows_k, rows_p = a[..., k, :].copy(), a[(*at, piv)].copy()
        a[..., k, :], a[(*at, piv)] = rows_p, rows_k
        pk, pp = perm[..., k].copy(), perm[(*at, piv)].copy()
        perm[..., k], perm[(*at, piv)] = pp, pk
        pivot = a[..., k, k]
        safe = np.where(pivot == 0.0, 1.0, pivot)
        a[..., k + 1:, k] = np.where((pivot == 0.0)[..., None], 0.0,
                                     a[..., k + 1:, k] / safe[..., None])
        a[..., k + 1:, k + 1:] -= a[..., k + 1:, k, None] * a[..., k, None, k + 1:]
    p = (perm[..., :, None] == np.arange(n)).astype(np.float64)
    return [a, p, sign]


#: The largest matrices whose LU has its element view (pivots chosen by selects on atoms),
#: so that ``lu`` and ``slogdet`` print exactly; larger ones compile to the native routine.
LU_VIEW_MAX = 4


def _pick_pivot(rows: list, k: int) -> object:
    """Moves the pivot row of column ``k`` (the first of largest magnitude, the first nan
    over numbers: numpy's ``argmax``) of ``rows`` (lists of atoms, the permutation's index
    last) to row ``k`` by selects; returns whether rows were exchanged."""
    n = len(rows)
    best_abs = G.call(sp.Abs, rows[k][k])
    conds = []
    for i in range(k + 1, n):
        cand = G.call(sp.Abs, rows[i][k])
        wins = G.logic(sp.Or, G.relation(sp.StrictGreaterThan, cand, best_abs),
                       G.logic(sp.And, G.relation(sp.Unequality, cand, cand),
                               G.relation(sp.Equality, best_abs, best_abs)))
        conds.append((i, wins))
        best_abs = G.piecewise((cand, wins), (best_abs, sp.S.true))
    picks, later = [], sp.S.false
    for i, c in reversed(conds):  # row i is the pivot if it won and no later row did
        picks.append((i, G.logic(sp.And, c, G.logic(sp.Not, later))))
        later = G.logic(sp.Or, later, c)
    top = [G.piecewise(*[(rows[i][j], p) for i, p in picks], (rows[k][j], sp.S.true))
           for j in range(len(rows[k]))]
    for i, p in picks:
        rows[i] = [G.piecewise((rows[k][j], p), (rows[i][j], sp.S.true))
                   for j in range(len(rows[i]))]
    rows[k] = top
    return later


def lu_atoms(m: list) -> np.ndarray:
    """:func:`lu_factor` on atoms, step for step (the same roundings): the packed ``[lu, P,
    sign]`` of one matrix."""
    n = len(m)
    rows = [list(r) + [G.number(i)] for i, r in enumerate(m)]
    sign = G.ONE
    for k in range(n):
        swapped = _pick_pivot(rows, k)
        sign = G.piecewise((G.lincomb([(sp.S.NegativeOne, sign)]), swapped), (sign, sp.S.true))
        pivot = rows[k][k]
        zero = G.relation(sp.Equality, pivot, G.ZERO)
        for i in range(k + 1, n):
            ratio = G.monomial(G.ONE, [(rows[i][k], G.ONE), (pivot, sp.S.NegativeOne)])
            low = rows[i][k] = G.piecewise((G.ZERO, zero), (ratio, sp.S.true))
            for j in range(k + 1, n):
                rows[i][j] = G.add(rows[i][j], G.lincomb([(sp.S.NegativeOne,
                                                            G.mul(low, rows[k][j]))]))
    perm = [[G.piecewise((G.ONE, G.relation(sp.Equality, r[n], G.number(j))),
                         (G.ZERO, sp.S.true)) for j in range(n)] for r in rows]
    flat = [a for r in rows for a in r[:n]] + [a for r in perm for a in r] + [sign]
    return np.array(flat, dtype=object)


class Lu(Decomposition):
    """``(lu, P, sign)``: partial-pivoting LU, ``P a = L U``, packed as TensorFlow's ``lu``
    (``L``'s unit diagonal implied); ``P`` the row permutation as a matrix, ``sign`` its
    determinant. Up to :data:`LU_VIEW_MAX` its element view is the same elimination on
    atoms (selects choose the pivots), so it prints and compiles; beyond, it compiles to
    the native routine ``lu`` (no formula)."""

    why = "its pivots are chosen per value"

    def __init__(self) -> None:
        super().__init__("lu")

    @staticmethod
    def lapack(x, params):
        return lu_factor(x)

    def structure(self, args, params, shape):
        """Small matrices settle through the element view (it is the eager value)."""
        return args[0].shape[-1] > LU_VIEW_MAX, None, None

    def view_refused(self, node):
        return None if node.inputs[0].shape[-1] <= LU_VIEW_MAX else super().view_refused(node)

    def build(self, atoms, params):
        x = np.asarray(atoms[0], dtype=object)
        if x.shape[-1] > LU_VIEW_MAX:
            return super().build(atoms, params)
        size = 2 * x.shape[-1] ** 2 + 1
        out = np.empty(x.shape[:-2] + (size,), dtype=object)
        for idx in np.ndindex(*x.shape[:-2]):
            out[idx] = lu_atoms(x[idx].tolist())
        return out

    def loop(self, planner, node):
        """One block over the batch whose body is, up to :data:`LU_VIEW_MAX`, one matrix's
        element view, beyond the native routine ``lu`` (:func:`lu_factor`'s steps in
        loops: the eager values' bits)."""
        if node.inputs[0].shape[-1] <= LU_VIEW_MAX:
            return per_matrix(planner, node)
        return per_matrix(planner, node, "lu")

    @staticmethod
    def vjp_of(gs, parts, x, params):
        """``P^T L^-T (tril_-1(L^T gL) + triu(gU U^T)) U^-T`` with ``gL``, ``gU`` the
        cotangent's strict lower and upper triangles (the permutation and its sign are
        constant where the pivots are)."""
        (glu, _, _), (lu, p, _) = gs, parts
        low = add.bind(_triangle(lu, True, 0.0), _eye_like(lu))
        middle = add.bind(
            _triangle(matmul.bind(low, _triangle(glu, True, 0.0), transpose_a=True), True, 0.0),
            _triangle(matmul.bind(_triangle(glu, False, 1.0), _triangle(lu, False, 1.0),
                                  transpose_b=True), False, 1.0))
        left = triangular_solve.bind(low, middle, lower=True, adjoint=True)  # L^-T M
        both = _right_solve_upper(left, lu)  # .. U^-T (the upper triangle of lu is U)
        return matmul.bind(p, both, transpose_a=True)


eigh = register_primitive(Eigh())
svd = register_primitive(Svd())
qr = register_primitive(Qr())
lu = register_primitive(Lu())

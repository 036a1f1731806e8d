"""Linear algebra (det, inv, solve): closed forms for n <= 3 and one elimination run on
atoms (the element view); eager values beyond 3x3 from LAPACK through numpy. The
contractions (matmul, einsum) are in :mod:`symtape.ops.contraction`."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from symtape.base.errors import ShapeError
from symtape.core.primitive import (
    Aval, Primitive, fmt, register_primitive, batch_size, spread, union,
)
from symtape.ops.contraction import matmul
from symtape.ops.elementwise import multiply, negative
from symtape.ops.structural import gather, reshape, transpose
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")


# --------------------------------------------------------------------------------------------
# Linear algebra: one elimination, run on floats (numeric) and on atoms (builder)
# --------------------------------------------------------------------------------------------


class _FloatRing:
    """Scalar arithmetic on Python floats, as the compiled code does it."""

    zero, one, false = 0.0, 1.0, False

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def mul(a, b):
        return a * b

    @staticmethod
    def div(a, b):
        with np.errstate(all="ignore"):
            return float(np.float64(a) / np.float64(b))

    @staticmethod
    def neg(a):
        return -a

    @staticmethod
    def absval(a):
        return abs(a)

    @staticmethod
    def better(cand_abs, cand, best_abs, best) -> bool:
        return cand_abs > best_abs or (best != best and cand == cand)

    @staticmethod
    def both(a, b):
        return a and b

    @staticmethod
    def either(a, b):
        return a or b

    @staticmethod
    def negate(a):
        return not a

    @staticmethod
    def choose(pairs, default):
        for value, cond in pairs:
            if cond:
                return value
        return default


class _AtomRing:
    """The same arithmetic building atoms of the graph (selects are Piecewise nodes); an
    instance, so that its constants are SymPy's only once SymPy is loaded."""

    @property
    def zero(self):
        return G.ZERO

    @property
    def one(self):
        return G.ONE

    @property
    def false(self):
        return sp.S.false

    @staticmethod
    def add(a, b):
        return G.add(a, b)

    @staticmethod
    def sub(a, b):
        return G.lincomb([(G.ONE, a), (sp.S.NegativeOne, b)])

    @staticmethod
    def mul(a, b):
        return G.mul(a, b)

    @staticmethod
    def div(a, b):
        return G.monomial(G.ONE, [(a, G.ONE), (b, sp.S.NegativeOne)])

    @staticmethod
    def neg(a):
        return G.lincomb([(sp.S.NegativeOne, a)])

    @staticmethod
    def absval(a):
        return G.call(sp.Abs, a)

    @staticmethod
    def better(cand_abs, cand, best_abs, best):
        larger = G.relation(sp.StrictGreaterThan, cand_abs, best_abs)
        replaces_nan = G.logic(sp.And, G.relation(sp.Unequality, best, best),
                               G.relation(sp.Equality, cand, cand))
        return G.logic(sp.Or, larger, replaces_nan)

    @staticmethod
    def both(a, b):
        return G.logic(sp.And, a, b)

    @staticmethod
    def either(a, b):
        return G.logic(sp.Or, a, b)

    @staticmethod
    def negate(a):
        return G.logic(sp.Not, a)

    @staticmethod
    def choose(pairs, default):
        return G.piecewise(*pairs, (default, sp.S.true))


def _det_small(m, r):
    """Leibniz determinant for n <= 3 (exact polynomial formulas)."""
    n = len(m)
    if n == 0:
        return r.one
    if n == 1:
        return m[0][0]
    if n == 2:
        return r.sub(r.mul(m[0][0], m[1][1]), r.mul(m[0][1], m[1][0]))
    total = r.zero
    for j, sgn in ((0, 1), (1, -1), (2, 1)):
        minor = [[m[i][k] for k in range(3) if k != j] for i in (1, 2)]
        term = r.mul(m[0][j], _det_small(minor, r))
        total = r.add(total, term) if sgn > 0 else r.sub(total, term)
    return total


def _pivot(a, b, k, r):
    """Partial pivoting at column ``k``, decided by the values at evaluation time: the row
    with the largest magnitude (the first on ties, a number over nan) moves to row ``k``.

    Returns whether rows were exchanged (a select condition for atoms)."""
    n = len(a)
    best, best_abs = a[k][k], r.absval(a[k][k])
    conds = []
    for i in range(k + 1, n):
        cand, cand_abs = a[i][k], r.absval(a[i][k])
        c = r.better(cand_abs, cand, best_abs, best)
        conds.append((i, c))
        best = r.choose([(cand, c)], best)
        best_abs = r.choose([(cand_abs, c)], best_abs)
    picks, later = [], r.false
    for i, c in reversed(conds):  # row i is the pivot if it won and no later row did
        picks.append((i, r.both(c, r.negate(later))))
        later = r.either(later, c)
    picks.reverse()
    for rows in (a, b):
        top = [r.choose([(rows[i][j], p) for i, p in picks], rows[k][j])
               for j in range(len(rows[k]))]
        for i, p in picks:
            rows[i] = [r.choose([(rows[k][j], p)], rows[i][j]) for j in range(len(rows[i]))]
        rows[k] = top
    return later


def _eliminate(m, rhs, r):
    """Gaussian elimination of ``[m | rhs]`` with partial pivoting; returns
    (upper triangle, transformed rhs, sign of the row permutation)."""
    n = len(m)
    a = [list(row) for row in m]
    b = [list(row) for row in rhs]
    sign = r.one
    for k in range(n):
        swapped = _pivot(a, b, k, r)
        sign = r.choose([(r.neg(sign), swapped)], sign)
        for i in range(k + 1, n):
            f = r.div(a[i][k], a[k][k])
            for j in range(k + 1, n):
                a[i][j] = r.sub(a[i][j], r.mul(f, a[k][j]))
            for j in range(len(b[i])):
                b[i][j] = r.sub(b[i][j], r.mul(f, b[k][j]))
            a[i][k] = r.zero
    return a, b, sign


def _det(m, r):
    n = len(m)
    if n <= 3:
        return _det_small(m, r)
    u, _, sign = _eliminate(m, [[] for _ in range(n)], r)
    out = sign
    for k in range(n):
        out = r.mul(out, u[k][k])
    return out


def _solve(m, rhs, r):
    n = len(m)
    if n <= 3:
        inv = _inv(m, r)
        return [[functools.reduce(r.add, [r.mul(inv[i][k], rhs[k][j]) for k in range(n)],
                                  r.zero) for j in range(len(rhs[0]))] for i in range(n)]
    u, b, _ = _eliminate(m, rhs, r)
    x = [[r.zero] * len(b[0]) for _ in range(n)]
    for i in reversed(range(n)):
        for j in range(len(b[0])):
            acc = b[i][j]
            for k in range(i + 1, n):
                acc = r.sub(acc, r.mul(u[i][k], x[k][j]))
            x[i][j] = r.div(acc, u[i][i])
    return x


def _inv(m, r):
    n = len(m)
    if n > 3:
        ident = [[r.one if i == j else r.zero for j in range(n)] for i in range(n)]
        return _solve(m, ident, r)
    d = _det_small(m, r)
    cof = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            minor = [[m[a][b] for b in range(n) if b != j] for a in range(n) if a != i]
            c = _det_small(minor, r)
            cof[i][j] = c if (i + j) % 2 == 0 else r.sub(r.zero, c)
    return [[r.div(cof[j][i], d) for j in range(n)] for i in range(n)]


def _core(strides: tuple, shape: tuple) -> tuple:
    """The offsets of every element of ``shape`` at ``strides``, in row-major order."""
    offsets = np.zeros((), dtype=np.int64)
    for stride, size in zip(strides, shape):
        offsets = offsets[..., None] + stride * np.arange(size, dtype=np.int64)
    return tuple(int(k) for k in offsets.reshape(-1))


def per_matrix(planner, node, kind: str | None = None, transpose: bool = False,
               **fields) -> tuple:
    """``node``, an op on (batches of) matrices whose arguments and result share their
    leading batch axes, as one block over the points and the batch. Its body: the native
    routine ``kind`` (``codegen.routines.KINDS``; the matrix, the first argument, read
    transposed when ``transpose``; ``fields``: the routine's others) or, without ``kind``,
    the element view of one matrix (the closed forms of small ones). Returns ``node``'s
    location."""
    lead = len(node.inputs[0].shape) - 2
    locs, batched = planner.arguments(node)
    reads = [planner.access(loc, x.shape, batched) for x, loc in zip(node.inputs, locs)]
    loc = planner.fresh(node, batched)
    out = planner.access(loc, node.shape, batched)
    outer = len(out.strides) - len(node.shape) + lead  # the block's space: points and batch
    ins = [planner.at(acc.buffer, acc.offset, acc.strides[:outer],
                      _core(acc.strides[outer:], x.shape[lead:]))
           for acc, x in zip(reads, node.inputs)]
    outs = [planner.at(loc[0], out.offset, out.strides[:outer],
                       _core(out.strides[outer:], node.shape[lead:]))]
    if kind is None:
        stand = [planner.stand_ins(x.shape[lead:], f"a{i}") for i, x in enumerate(node.inputs)]
        atoms = np.asarray(node.prim.build(stand, node.params), dtype=object)
        body = planner.body(node, atoms.reshape(-1), [s.reshape(-1) for s in stand])
    else:
        n = node.inputs[0].shape[-1]
        mats = [acc.strides[-2:] for acc in reads]
        if transpose:
            mats[0] = mats[0][::-1]
        result = out.strides[outer:] + (0, 0)[:2 - len(node.shape[lead:])]
        k = node.shape[-1] if len(node.inputs) > 1 else 0
        body = planner.routine(kind, n, k, mats[0], mats[1] if k else (0, 0), result,
                               **fields)
        if "W" in body.args:  # the routine's scratch (a copy of the matrix)
            size = body.work
            outs.append(planner.at(planner.temp(size), 0, (0,) * outer, tuple(range(size))))
    planner.block(node.shape[:lead], body, ins, outs, batched=batched)
    return loc


def check_square(name: str, shape, what: str = "matrix") -> None:
    """Refuses a ``shape`` that is not a (batch of) square matrix with a ShapeError naming
    the op ``st.linalg.<name>`` and its argument ``what``.

    >>> check_square("det", (5, 3, 3))
    >>> try:
    ...     check_square("det", (3, 4))
    ... except ShapeError as e:
    ...     print(e)
    st.linalg.det: matrix must be a (batch of) square matrix, got shape (3, 4)
    """
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"st.linalg.{name}: {what} must be a (batch of) square matrix, got "
                         f"shape {fmt(shape)}")


class _Linalg(Primitive):
    """A batched square-matrix op: closed forms for n <= 3, else elimination with partial
    pivoting decided per evaluation (selects), run alike on floats and on atoms."""

    def __init__(self, name: str, nargs: int, rules: Sequence) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)

    def check_square(self, shape, what="matrix"):
        check_square(self.name, shape, what)

    def _batched(self, arrays, ring, fn, out_core):
        batch = arrays[0].shape[:-2]
        atoms = isinstance(ring, _AtomRing)
        out = np.empty(batch + out_core, dtype=object if atoms else np.float64)
        for idx in np.ndindex(*batch):
            res = fn(*[a[idx].tolist() for a in arrays], ring)
            out[idx] = np.asarray(res, dtype=out.dtype) if out_core else res
        return out

    def batch(self, args, batched, params, shape):
        n = batch_size(args, batched)  # leading axes are batches of matrices already
        return self.bind(*[spread(a, b, n) for a, b in zip(args, batched)], **params)

    def dependencies(self, deps, params, shape):
        # each matrix of the batch: every element on every element of its matrices
        whole = [union([d], axis=(-2, -1), keepdims=True) for d in deps]
        out = whole[0] if len(whole) == 1 else np.bitwise_or(*whole)
        if len(shape) < len(out.shape):
            return out.reshape(shape)
        return np.broadcast_to(out, shape).astype(object)

    def numeric(self, values, params):
        """Closed forms for n <= 3 (the formulas print and compile alike); LAPACK through
        numpy beyond, over all leading dimensions at once. A singular matrix, where LAPACK
        refuses, is eliminated on floats instead: inf/nan, as the compiled code gives."""
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        out = None
        if arrays[0].shape[-1] > 3:
            try:
                with np.errstate(all="ignore"):
                    out = self.lapack(arrays, params)
            except np.linalg.LinAlgError:
                out = None
        if out is None:
            out = self.compute(arrays, params, _FloatRing)
        return np.asarray(out).astype(np.asarray(values[0]).dtype)

    def build(self, atoms, params):
        return self.compute(atoms, params, _AtomRing())

    #: Up to this size the element view (the closed forms) is unrolled; beyond, a routine.
    UNROLLED = 3

    def element_cost(self, node):
        """The elimination's atoms: about ``n**3`` (updates and pivot selects) a matrix."""
        a = node.inputs[0]
        n = a.shape[-1]
        if n <= self.UNROLLED:
            return node.size * (n + 1) ** 2
        k = node.shape[-1] if self.name == "solve" else n
        return math.prod(a.shape[:-2]) * (n ** 3 + n * n * k)

    def loop(self, planner, node):
        """One block over the points and the batch: beyond 3x3 its body is a native
        elimination routine (``planner.routine``: the element view's pivoting and operation
        order, in loops), up to 3x3 the closed form of one matrix."""
        a = node.inputs[0]
        n = a.shape[-1]
        if not all(x.dtype.kind == "f" for x in (node, *node.inputs)):
            return planner.unrolled(node)
        return per_matrix(planner, node, self.routine if n > self.UNROLLED else None,
                          bool(node.params.get("adjoint")))


class Det(_Linalg):
    routine = "det"

    def __init__(self) -> None:
        super().__init__("det", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape)
        t = self.check_dtypes(avals)
        return Aval(avals[0].shape[:-2], t), params

    def compute(self, arrays, params, ring):
        return self._batched(arrays, ring, _det, ())

    @staticmethod
    def lapack(arrays, params):
        out = np.linalg.det(arrays[0])
        if np.any(out == 0.0):  # an exact zero pivot: the elimination's value, as compiled
            raise np.linalg.LinAlgError("singular matrix")
        return out

    @staticmethod
    def _rule(g, ans, x):
        n = x.shape[-1]
        gb = reshape.bind(g, shape=tuple(g.shape) + (1, 1))
        if n <= 3:
            return multiply.bind(gb, cofactors(x))
        # TF: g * det(x) * inv(x)^T
        scale = multiply.bind(gb, reshape.bind(ans, shape=tuple(ans.shape) + (1, 1)))
        return multiply.bind(scale, transpose.bind(inv.bind(x), perm=swap_last(len(x.shape))))


def swap_last(rank: int) -> tuple:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def cofactors(x):
    """The cofactor matrix (the gradient of det), from determinants of minors."""
    n = x.shape[-1]
    batch = tuple(x.shape[:-2])
    idx = np.empty((n, n, max(n - 1, 0), max(n - 1, 0)), dtype=np.int64)
    for i in range(n):
        rows = [a for a in range(n) if a != i]
        for j in range(n):
            cols = [b for b in range(n) if b != j]
            for a, ra in enumerate(rows):
                for b, cb in enumerate(cols):
                    idx[i, j, a, b] = ra * n + cb
    flat = reshape.bind(x, shape=batch + (n * n,))
    minors = gather.bind(flat, indices=idx, axis=len(batch), batch_dims=0)
    dets = det.bind(minors)
    signs = np.array([[(-1.0) ** (i + j) for j in range(n)] for i in range(n)])
    return multiply.bind(dets, signs.astype(x.dtype))


class Inv(_Linalg):
    routine = "inverse"

    def __init__(self) -> None:
        super().__init__("inv", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape)
        t = self.check_dtypes(avals)
        return Aval(avals[0].shape, t), params

    def compute(self, arrays, params, ring):
        n = arrays[0].shape[-1]
        return self._batched(arrays, ring, _inv, (n, n))

    @staticmethod
    def lapack(arrays, params):
        return np.linalg.inv(arrays[0])

    @staticmethod
    def _rule(g, ans, x):
        # TF: -inv^T g inv^T
        inner = matmul.bind(g, ans, transpose_b=True)
        return negative.bind(matmul.bind(ans, inner, transpose_a=True))


class Solve(_Linalg):
    routine = "solve"

    def __init__(self) -> None:
        super().__init__("solve", 2, (self._rule_a, self._rule_b))

    def prepare(self, avals, params):
        a, b = avals
        self.check_square(a.shape)
        t = self.check_dtypes(avals)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or \
                b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"st.linalg.solve: rhs of shape {fmt(b.shape)} does not match "
                             f"matrix of shape {fmt(a.shape)} (expected (..., "
                             f"{a.shape[-1]}, k))")
        return Aval(b.shape, t), {"adjoint": bool(params.get("adjoint", False))}

    def compute(self, arrays, params, ring):
        a, b = arrays
        if params.get("adjoint"):
            a = np.swapaxes(a, -1, -2)
        return self._batched([a, b], ring, _solve, b.shape[-2:])

    @staticmethod
    def lapack(arrays, params):
        a, b = arrays
        if params.get("adjoint"):
            a = np.swapaxes(a, -1, -2)
        return np.linalg.solve(a, b)

    @staticmethod
    def _rule_b(g, ans, a, b, adjoint=False):
        return solve.bind(a, g, adjoint=not adjoint)

    @staticmethod
    def _rule_a(g, ans, a, b, adjoint=False):
        gb = solve.bind(a, g, adjoint=not adjoint)
        if adjoint:
            return negative.bind(matmul.bind(ans, gb, transpose_b=True))
        return negative.bind(matmul.bind(gb, ans, transpose_b=True))


det = register_primitive(Det())
inv = register_primitive(Inv())
solve = register_primitive(Solve())


"""Contractions (matmul, einsum) and linear algebra (det, inv, solve): one elimination run
on floats and on atoms."""

from __future__ import annotations

import functools
import itertools
import math
import string
from collections.abc import Sequence

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.primitive import (
    Aval, Primitive, fmt, irregular_anywhere, obj, register_primitive, aligned, batch_size, row_flags,
    spread, union, zero_factor,
)
from symtape.ops.elementwise import multiply, negative, unbroadcast
from symtape.ops.reductions import ORDERED_TERMS
from symtape.ops.structural import gather, gather_flat, reshape, transpose
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")
TN = LazyModule("TN", globals(), "symtape.core.notation")

# --------------------------------------------------------------------------------------------
# Contractions: matmul and einsum
# --------------------------------------------------------------------------------------------


def in_order_sum(terms: np.ndarray, axis: int) -> np.ndarray:
    """Sum over ``axis`` left to right (0 for an empty axis).

    >>> in_order_sum(np.array([[1e16, 1.0, -1e16]]), -1).tolist()
    [0.0]
    """
    if terms.shape[axis] == 0:
        return np.sum(terms, axis=axis)
    return np.take(np.cumsum(terms, axis=axis), -1, axis=axis)


def _in_space(a: np.ndarray, labels: str, full: str, sizes: dict) -> np.ndarray:
    """Operand ``a`` (axes ``labels``, a label repeated is a diagonal) broadcast over the
    index space ``full``."""
    uniq = "".join(dict.fromkeys(labels))
    if uniq != labels:
        a = np.einsum(f"{labels}->{uniq}", a)
    ordered = "".join(c for c in full if c in uniq)
    a = np.transpose(a, [uniq.index(c) for c in ordered])
    return a.reshape(tuple(sizes[c] if c in uniq else 1 for c in full))


def dot_atoms(xs: Sequence, ys: Sequence):
    """The atom of ``sum(x * y)``: one node, products of two symbols as their own nodes."""
    terms = []
    const = G.ZERO
    for a, b in zip(xs, ys):
        ca, cb = G.is_const(a), G.is_const(b)
        if ca and cb:
            const = G.c_add(const, G.c_mul(a, b))
        elif ca:
            terms.append((a, b))
        elif cb:
            terms.append((b, a))
        else:
            terms.append((G.ONE, G.mul(a, b)))
    return G.lincomb(terms, const)


class MatMul(Primitive):
    """``matmul(a, b, transpose_a, transpose_b)`` on rank >= 2 tensors, batch dims broadcast."""

    def __init__(self) -> None:
        super().__init__("matmul", ("T", "T"), "fi", rules=(self._rule_a, self._rule_b))

    @staticmethod
    def _core(shape, transposed):
        m, k = shape[-2], shape[-1]
        return (k, m) if transposed else (m, k)

    def prepare(self, avals, params):
        a, b = avals
        t = self.check_dtypes(avals)
        ta, tb = bool(params.get("transpose_a")), bool(params.get("transpose_b"))
        for i, s in enumerate((a.shape, b.shape)):
            if len(s) < 2:
                raise ShapeError(f"st.matmul: argument {'ab'[i]} has shape {fmt(s)}; matmul "
                                 "needs tensors of rank >= 2 (use st.tensordot or reshape)")
        (m, k1), (k2, n) = self._core(a.shape, ta), self._core(b.shape, tb)
        if k1 != k2:
            raise ShapeError(f"st.matmul: inner dimensions differ: a is {fmt(a.shape)}"
                             f"{' (transposed)' if ta else ''}, b is {fmt(b.shape)}"
                             f"{' (transposed)' if tb else ''}")
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ShapeError(f"st.matmul: batch dimensions of {fmt(a.shape)} and "
                             f"{fmt(b.shape)} cannot be broadcast") from None
        return Aval(tuple(batch) + (m, n), t), {"transpose_a": ta, "transpose_b": tb}

    @staticmethod
    def _operands(x, transposed):
        return np.swapaxes(x, -1, -2) if transposed else x

    def build(self, atoms, params):
        a = self._operands(atoms[0], params["transpose_a"])
        b = self._operands(atoms[1], params["transpose_b"])
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:])
        b = np.broadcast_to(b, batch + b.shape[-2:])
        m, n = a.shape[-2], b.shape[-1]
        out = obj(batch + (m, n))
        for idx in np.ndindex(*batch):
            am, bm = a[idx], b[idx]
            cols = [list(bm[:, j]) for j in range(n)]
            for i in range(m):
                row = list(am[i])
                for j in range(n):
                    out[idx + (i, j)] = dot_atoms(row, cols[j])
        return out

    def structure(self, args, params, shape):
        a, b = args
        zero = zero_factor(args)
        if zero is not None:
            return False, zero, None
        k = a.shape[-2] if params["transpose_a"] else a.shape[-1]
        regular = a.regular and b.regular and k >= 1 and a.dtype.kind == "f"
        return regular and not (a.constant and b.constant), None, None

    settles_alone = True

    def settle_folds(self, value, values, args, params, memo=None):
        """Products with a folded zero factor are dropped from their sums (added as -0.0, the
        exact identity of IEEE addition); an element with none left is the constant 0.
        Arguments with other folded constants are left to the element view."""
        a, b = args
        if a.dtype.kind != "f" or (a.constant and b.constant):
            return None
        views = [x.fold_view() for x in args]
        if any(v is None or (v[1] is not None and not all(G.is_zero(c) for c in v[1][v[0]]))
               for v in views):
            return None
        (ma, _), (mb, _) = views
        ma = self._operands(ma, params["transpose_a"])
        mb = self._operands(mb, params["transpose_b"])
        x = self._operands(np.asarray(values[0]), params["transpose_a"])
        y = self._operands(np.asarray(values[1]), params["transpose_b"])
        terms = x[..., :, :, None] * y[..., None, :, :]
        dropped = ma[..., :, :, None] | mb[..., None, :, :]
        terms = np.where(dropped, -0.0, terms)
        out = in_order_sum(terms, -2) if terms.shape[-2] else np.zeros(
            terms.shape[:-2] + terms.shape[-1:], dtype=terms.dtype)
        empty = np.broadcast_to(np.all(dropped, axis=-2), out.shape)
        if not empty.any():
            return out, None, True, None
        folded = np.empty(out.shape, dtype=object)
        folded[empty] = G.ZERO
        return np.where(empty, 0.0, out), (empty.copy(), folded), False, None

    def unsettled(self, atoms, params, shape, args=()):
        """Elements whose row of ``a`` or column of ``b`` holds a repeated atom, or both a
        constant (products of constants fold into the constant term)."""
        a = self._operands(atoms[0], params["transpose_a"])
        b = np.swapaxes(self._operands(atoms[1], params["transpose_b"]), -1, -2)
        (ca, ra), (cb, rb) = (row_flags(m.reshape(-1, m.shape[-1])) for m in (a, b))
        ca, ra = ca.reshape(a.shape[:-1]), ra.reshape(a.shape[:-1])
        cb, rb = cb.reshape(b.shape[:-1]), rb.reshape(b.shape[:-1])
        out = ra[..., :, None] | rb[..., None, :] | (ca[..., :, None] & cb[..., None, :])
        return np.broadcast_to(out, shape)

    def numeric(self, values, params):
        a = self._operands(np.asarray(values[0]), params["transpose_a"])
        b = self._operands(np.asarray(values[1]), params["transpose_b"])
        terms = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) * a.shape[-2] * \
            a.shape[-1] * b.shape[-1]
        with np.errstate(all="ignore"):
            if terms > ORDERED_TERMS:
                return np.matmul(a, b)
            return in_order_sum(a[..., :, :, None] * b[..., None, :, :], -2)

    def notation(self, args, params):
        a, b = args
        a = TN.Transpose(a) if params["transpose_a"] else a
        b = TN.Transpose(b) if params["transpose_b"] else b
        return TN.Dot(a, b)

    def batch(self, args, batched, params, shape):
        rank = len(shape)
        return self.bind(*[aligned(a, b, rank) for a, b in zip(args, batched)], **params)

    def dependencies(self, deps, params, shape):
        # out[i, j] takes every term a[i, k] b[k, j]: the union of a's row and b's column
        a = self._operands(deps[0], params["transpose_a"])
        b = self._operands(deps[1], params["transpose_b"])
        rows, cols = union([a], axis=-1), union([b], axis=-2)
        return np.broadcast_to(np.bitwise_or(rows[..., :, None], cols[..., None, :]),
                               shape).astype(object)

    @staticmethod
    def _rule_a(g, ans, a, b, transpose_a, transpose_b):
        if transpose_a:
            ct = matmul.bind(b, g, transpose_a=transpose_b, transpose_b=True)
        else:
            ct = matmul.bind(g, b, transpose_a=False, transpose_b=not transpose_b)
        return unbroadcast(ct, a.shape)

    @staticmethod
    def _rule_b(g, ans, a, b, transpose_a, transpose_b):
        if transpose_b:
            ct = matmul.bind(g, a, transpose_a=True, transpose_b=transpose_a)
        else:
            ct = matmul.bind(a, g, transpose_a=not transpose_a, transpose_b=False)
        return unbroadcast(ct, b.shape)


matmul = register_primitive(MatMul())


def parse_einsum(spec: str, shapes: Sequence[tuple]) -> tuple[list[str], str]:
    """Input label strings and output labels of an einsum spec, ellipses expanded."""
    spec = spec.replace(" ", "")
    if "->" in spec:
        lhs, rhs = spec.split("->")
    else:
        lhs, rhs = spec, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise InvalidArgumentError(f"st.einsum: spec {spec!r} names {len(ins)} operands, got "
                                   f"{len(shapes)}")
    used = set("".join(ins).replace(".", "") + (rhs or "").replace(".", ""))
    free = [c for c in string.ascii_letters if c not in used]
    ell_rank = 0
    for s, shape in zip(ins, shapes):
        if "..." in s:
            ell_rank = max(ell_rank, len(shape) - (len(s) - 3))
    ell = "".join(free[:ell_rank])
    out_ins = []
    for s, shape in zip(ins, shapes):
        if "..." in s:
            k = len(shape) - (len(s) - 3)
            s = s.replace("...", ell[ell_rank - k:] if k else "")
        if len(s) != len(shape):
            raise ShapeError(f"st.einsum: operand labels {s!r} do not match its shape "
                             f"{fmt(shape)}")
        out_ins.append(s)
    if rhs is None:
        counts = {c: "".join(out_ins).count(c) for c in set("".join(out_ins))}
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    return out_ins, rhs


class Einsum(Primitive):
    """``einsum(spec, *operands)``: sums of products over repeated labels."""

    variadic = True

    def __init__(self) -> None:
        super().__init__("einsum", ("T",), "fi")

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        ins, out = parse_einsum(params["spec"], [a.shape for a in avals])
        sizes: dict[str, int] = {}
        for labels, a in zip(ins, avals):
            for c, n in zip(labels, a.shape):
                if sizes.setdefault(c, n) != n:
                    raise ShapeError(f"st.einsum: label {c!r} has sizes {sizes[c]} and {n} in "
                                     f"spec {params['spec']!r}")
        for c in out:
            if c not in sizes:
                raise InvalidArgumentError(f"st.einsum: output label {c!r} is not an input "
                                           "label")
        spec = ",".join(ins) + "->" + out
        return Aval(tuple(sizes[c] for c in out), t), {"spec": spec}

    def build(self, atoms, params):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        sizes = {}
        for labels, a in zip(ins, atoms):
            sizes.update(zip(labels, a.shape))
        summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
        result = obj(tuple(sizes[c] for c in out))
        for oidx in np.ndindex(*result.shape):
            env = dict(zip(out, oidx))
            terms = []
            for sidx in itertools.product(*[range(sizes[c]) for c in summed]):
                env.update(zip(summed, sidx))
                factors = [a[tuple(env[c] for c in labels)] for labels, a in zip(ins, atoms)]
                terms.append(factors)
            result[oidx] = sum_of_products(terms)
        return result

    unsettled = irregular_anywhere

    def structure(self, args, params, shape):
        return False, zero_factor(args), None

    def numeric(self, values, params):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        arrays = [np.asarray(v) for v in values]
        sizes = {}
        for labels, a in zip(ins, arrays):
            sizes.update(zip(labels, a.shape))
        summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
        full = out + "".join(summed)
        with np.errstate(all="ignore"):
            if int(np.prod([sizes[c] for c in full], dtype=np.int64)) > ORDERED_TERMS:
                return np.asarray(np.einsum(params["spec"], *arrays))
            # every term in the full index space, factors multiplied left to right
            terms = functools.reduce(lambda p, q: p * q, [
                _in_space(a, labels, full, sizes) for labels, a in zip(ins, arrays)])
            lead = tuple(sizes[c] for c in out)
            return in_order_sum(terms.reshape(lead + (-1,)), -1)

    def batch(self, args, batched, params, shape):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        new = next(c for c in string.ascii_letters if c not in params["spec"])
        spec = ",".join(new + s if b else s for s, b in zip(ins, batched)) + "->" + new + out
        return self.bind(*args, spec=spec)

    def dependencies(self, deps, params, shape):
        ins, out = params["spec"].split("->")
        result = np.zeros(shape, dtype=object)
        for labels, d in zip(ins.split(","), deps):
            if len(set(labels)) < len(labels):  # a diagonal: everything, conservatively
                return super().dependencies(deps, params, shape)
            summed = tuple(i for i, c in enumerate(labels) if c not in out)
            kept = [c for c in labels if c in out]
            d = union([d], axis=summed) if summed else d
            d = np.transpose(np.asarray(d, dtype=object), [kept.index(c) for c in out
                                                           if c in kept])
            placed = d.reshape(tuple(shape[i] if c in kept else 1 for i, c in enumerate(out)))
            result = np.bitwise_or(result, placed)
        return result

    def differentiable(self, i: int) -> bool:
        return True  # every operand (see vjp)

    def vjp(self, g, ans, args, params, needed):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        cts = []
        for i, (labels, x) in enumerate(zip(ins, args)):
            if not needed[i]:
                cts.append(None)
                continue
            others = [(lab, a) for j, (lab, a) in enumerate(zip(ins, args)) if j != i]
            avail = set(out) | set("".join(lab for lab, _ in others))
            uniq = "".join(c for c in dict.fromkeys(labels) if c in avail)
            spec = ",".join([out] + [lab for lab, _ in others]) + "->" + uniq
            t = einsum.bind(g, *[a for _, a in others], spec=spec)
            cts.append(_embed(t, uniq, labels, tuple(x.shape)))
        return cts


def sum_of_products(terms):
    parts = []
    const = G.ZERO
    for factors in terms:
        coef = G.ONE
        syms = []
        for f in factors:
            if G.is_const(f):
                coef = G.c_mul(coef, f)
            else:
                syms.append(f)
        if not syms:
            const = G.c_add(const, coef)
        elif G.is_zero(coef):
            continue
        elif len(syms) == 1:
            parts.append((coef, syms[0]))
        else:
            parts.append((coef, G.mul(*syms)))
    return G.lincomb(parts, const)


def _embed(t, labels: str, full: str, shape: tuple):
    """Place a tensor over ``labels`` into one over ``full`` (repeated labels: diagonals,
    zero elsewhere; labels of ``full`` missing from ``labels``: broadcast)."""
    if labels == full:
        return t
    idx = np.empty(shape, dtype=np.int64)
    for fidx in np.ndindex(*shape):
        seen: dict[str, int] = {}
        ok = True
        for c, v in zip(full, fidx):
            if seen.setdefault(c, v) != v:
                ok = False
        if not ok:
            idx[fidx] = -1
            continue
        sub = tuple(seen[c] for c in labels)
        idx[fidx] = int(np.ravel_multi_index(sub, t.shape)) if t.shape else 0
    return gather_flat.bind(t, idx=idx)


einsum = register_primitive(Einsum())


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


class _Linalg(Primitive):
    """A batched square-matrix op: closed forms for n <= 3, else elimination with partial
    pivoting decided per evaluation (selects), run alike on floats and on atoms."""

    def __init__(self, name: str, nargs: int, rules: Sequence) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)

    def check_square(self, shape, what="matrix"):
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise ShapeError(f"st.linalg.{self.name}: {what} must be a (batch of) square "
                             f"matrix, got shape {fmt(shape)}")

    def _batched(self, arrays, ring, fn, out_core):
        batch = arrays[0].shape[:-2]
        atoms = isinstance(ring, _AtomRing)
        out = np.empty(batch + out_core, dtype=object if atoms else np.float64)
        for idx in np.ndindex(*batch):
            res = fn(*[a[idx].tolist() for a in arrays], ring)
            out[idx] = np.asarray(res, dtype=out.dtype) if out_core else res
        return out

    unsettled = irregular_anywhere

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
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        out = self.compute(arrays, params, _FloatRing)
        return out.astype(np.asarray(values[0]).dtype)

    def build(self, atoms, params):
        return self.compute(atoms, params, _AtomRing())


class Det(_Linalg):
    def __init__(self) -> None:
        super().__init__("det", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape)
        t = self.check_dtypes(avals)
        return Aval(avals[0].shape[:-2], t), params

    def compute(self, arrays, params, ring):
        return self._batched(arrays, ring, _det, ())

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
    def _rule(g, ans, x):
        # TF: -inv^T g inv^T
        inner = matmul.bind(g, ans, transpose_b=True)
        return negative.bind(matmul.bind(ans, inner, transpose_a=True))


class Solve(_Linalg):
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


"""Contractions: ``matmul`` and ``einsum``, with their loop rules (register-tiled products,
one loop nest over an einsum's labels)."""

from __future__ import annotations

import functools
import itertools
import math
import string
from collections.abc import Sequence

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.primitive import (
    Aval, Primitive, fmt, obj, register_primitive, aligned, union,
    zero_factor,
)
from symtape.ops.elementwise import unbroadcast
from symtape.ops.reductions import ORDERED_TERMS
from symtape.ops.structural import gather_flat
from symtape.base.lazy import LazyModule

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

    # -- loop rule ---------------------------------------------------------------------------
    product_terms = True

    def element_cost(self, node):
        """Its terms: ``m * n * k``."""
        a = node.inputs[0]
        k = a.shape[-2] if node.params["transpose_a"] else a.shape[-1]
        return node.size * max(k, 1)

    def loop(self, planner, node):
        """``out += a * b`` over ``(i, k, j)`` in register tiles: each iteration of the
        ``k`` loop updates ``MATMUL_ROWS`` rows of :func:`matmul_cols` columns, held in
        registers across it (each load of ``b`` serves every row); edges take narrower
        tiles. Every element still adds its terms in ``k`` order, as the element DAG's sums
        do. A row vector of each point times a shared matrix is one product whose rows are
        the chunk's points. Integer and boolean products: unrolled."""
        if not planner.numeric(node):
            return planner.unrolled(node)
        a, b = node.inputs
        la, lb = planner.loc[id(a)], planner.loc[id(b)]
        ba, bb = planner.batched(la), planner.batched(lb)
        batched = ba or bb
        oa = np.swapaxes(la[1], -1, -2) if node.params["transpose_a"] else la[1]
        ob = np.swapaxes(lb[1], -1, -2) if node.params["transpose_b"] else lb[1]
        batch, (m, n) = node.shape[:-2], node.shape[-2:]
        k = oa.shape[-1]
        lb = _contiguous_constant(planner, (lb[0], ob))
        ob = lb[1]
        loc = planner.fresh(node, batched)
        planner.fill(loc, node.shape, -0.0 if k else 0.0, batched)
        if k == 0 or node.size == 0:
            return loc
        if ba and not bb and m == 1 and not batch:  # rows of the chunk's points
            ra = planner.access((la[0], oa), (1, k), True)
            ro = planner.access(loc, (1, n), True)
            accs = (planner.at(ra.buffer, ra.offset, (ra.strides[0], ra.strides[2])),
                    planner.access((lb[0], ob), (k, n)),
                    planner.at(ro.buffer, ro.offset, (ro.strides[0], ro.strides[2])))
            for _, _, _, j0, j1, c in tile_regions(1, n, 1, matmul_cols(planner, node.dtype)):
                _matmul_tile(planner, accs, (), k, (0, planner.P, planner.align), (j0, j1, c),
                             planner.align)
            return loc
        accs = (planner.access((la[0], oa), batch + (m, k), batched),
                planner.access((lb[0], ob), batch + (k, n), batched),
                planner.access(loc, node.shape, batched))
        regions = register_tiles(planner, m, n, node.dtype)
        packed = _packed(planner, accs[1], k, regions) if (
            not batch and not batched and m >= MATMUL_PACK_ROWS and
            (k * n >= MATMUL_PACK or accs[1].strides[-1] != 1)) else {}
        for i0, i1, r, j0, j1, c in regions:
            _matmul_tile(planner, accs, planner.shape(batch, batched), k, (i0, i1, r),
                         (j0, j1, c), int(batched), packed.get(j0))
        return loc

    def total_from_args(self, node, kind):
        """``a^T b`` of two row vectors of each point (the gradient of a weight matrix
        summed over examples): its sum over points is one product over the points."""
        if kind != "sum" or node.dtype.kind != "f":
            return False
        a, b = node.inputs
        return (node.params["transpose_a"] and not node.params["transpose_b"] and
                len(a.shape) == 2 and len(b.shape) == 2 and a.shape[0] == 1 and
                b.shape[0] == 1)

    def loop_total(self, planner, node, buf):
        """``out += a_p^T b_p`` over the chunk's points ``p`` (``a_p``, ``b_p`` rows of each
        point), in register tiles as the products: the points are the inner dimension."""
        a, b = node.inputs
        m, n = node.shape
        ra = planner.access(planner.loc[id(a)], (1, m), True)
        rb = planner.access(planner.loc[id(b)], (1, n), True)
        (pa, _, ai), (pb, _, bj) = ra.strides, rb.strides
        for i0, i1, r, j0, j1, c in register_tiles(planner, m, n, node.dtype):
            space = ((i1 - i0) // r, (j1 - j0) // c, planner.P, c)
            so = planner.at(buf, i0 * n + j0, (r * n, c, 0, 1), tuple(t * n for t in range(r)))
            sa = planner.at(ra.buffer, ra.offset + i0 * ai, (r * ai, 0, pa, 0),
                        tuple(t * ai for t in range(r)))
            sb = planner.at(rb.buffer, rb.offset + j0 * bj, (0, c * bj, pb, bj))
            planner.block(space, tile_body(planner, r), (so, sa, sb), (so,), accumulate=True,
                          contract=True, count=2)


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

    # -- loop rule ---------------------------------------------------------------------------
    def element_cost(self, node):
        """Every term of every element (the element view holds them all)."""
        spec_in, out = node.params["spec"].split("->")
        sizes = {c: n for lab, a in zip(spec_in.split(","), node.inputs)
                 for c, n in zip(lab, a.shape)}
        return node.size * max(math.prod(n for c, n in sizes.items() if c not in out), 1)

    def loop(self, planner, node):
        """One loop nest over the labels' index space, the output's labels then the summed
        ones: ``out += a * b * ...`` (or, with nothing summed, ``out = a * b * ...``: an
        outer product), each operand read at the strides of its labels (a repeated label,
        a diagonal, at the sum of its strides), so every element adds its terms in the
        order the element view's sums and eager values add them. Integer and boolean
        einsums: unrolled."""
        if not planner.numeric(node):
            return planner.unrolled(node)
        spec_in, out = node.params["spec"].split("->")
        labels = spec_in.split(",")
        sizes: dict = {}
        for lab, a in zip(labels, node.inputs):
            sizes.update(zip(lab, a.shape))
        summed = "".join(c for c in dict.fromkeys("".join(labels)) if c not in out)
        full = out + summed
        space = tuple(sizes[c] for c in full)
        batched = any(planner.batched(planner.loc[id(a)]) for a in node.inputs)
        terms = math.prod(sizes[c] for c in summed)
        loc = planner.fresh(node, batched)
        if summed:
            planner.fill(loc, node.shape, -0.0 if terms else 0.0, batched)
        if node.size == 0 or terms == 0:
            return loc
        stand = [G.Leaf.new(f"a{i}") for i in range(len(labels))]
        reads = [_labelled(planner, planner.loc[id(a)], lab, full, space, batched)
                 for lab, a in zip(labels, node.inputs)]
        product = G.mul(*stand) if len(stand) > 1 else stand[0]
        out_offsets = loc[1].reshape(loc[1].shape + (1,) * len(summed))
        o = planner.affine(np.broadcast_to(out_offsets, planner.shape(space, batched)))
        dst = planner.at(loc[0], o[0], o[1])
        if not summed:
            planner.block(space, planner.body(node, product, stand), reads, (dst,),
                          batched=batched)
            return loc
        acc = G.Leaf.new("acc")
        planner.accumulate(space, G.add(acc, product), [acc, *stand], [dst, *reads], dst,
                           batched)
        return loc


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


def _labelled(planner, loc: tuple, labels: str, full: str, space: tuple, batched: bool
              ) -> tuple:
    """``loc`` (an operand of an einsum with ``labels``) read over the index space of the
    labels ``full`` (extents ``space``; the chunk's points in front when ``batched``);
    copied to a contiguous temporary first when that is not affine."""
    def offsets(loc):
        here = planner.batched(loc)
        grid = [np.arange(n, dtype=np.int64).reshape(
            tuple(n if e == d else 1 for e in range(len(space))))
            for d, n in enumerate(space)]
        idx = tuple(grid[full.index(c)] for c in labels)
        taken = loc[1][(slice(None),) + idx] if here else loc[1][idx]
        if here and not idx:  # a scalar per point
            taken = taken.reshape((planner.P,) + (1,) * len(space))
        return np.broadcast_to(taken, planner.shape(space, batched))

    aff = planner.affine(offsets(loc))
    if aff is None:
        loc = planner.materialise(loc)
        aff = planner.affine(offsets(loc))
    return planner.at(loc[0], aff[0], aff[1])


# --------------------------------------------------------------------------------------------
# Loop nests of products: register tiles
# --------------------------------------------------------------------------------------------

#: Matrix products update tiles of this many rows and columns per step of their inner loop;
#: ``None``: what this CPU holds in vector registers (:func:`matmul_rows`,
#: :func:`matmul_cols`).
MATMUL_ROWS = None
MATMUL_COLS = None
MATMUL_MERGE = None
#: ... and their inner dimension in panels of this length (a panel of a 128-row matrix is
#: 256 KiB, of an 8-column strip 16 KiB: they stay in cache while the other is swept).
MATMUL_K = 256
#: Products of at least this many rows whose ``b`` has this many elements, or is read
#: across its rows, read ``b`` from a packed copy (:func:`_packed`).
MATMUL_PACK_ROWS = 16
MATMUL_PACK = 4096


def matmul_rows(planner) -> int:
    """The rows of a register tile (:data:`MATMUL_ROWS`, or what this CPU holds): 8 with
    AVX-512's 32 vector registers (a tile of 8 rows of two 512-bit vectors is 16
    accumulators, enough to cover the latency of two FMA units; 4 rows of them were 1.3x
    slower on a 128x784 by 784x128 product of floats, ``benchmarks/train_step.py``), else 4.
    """
    if MATMUL_ROWS is not None:
        return MATMUL_ROWS
    return 8 if planner.wide_vectors else 4


def merged_rows(planner) -> int:
    """The most rows of a tile that takes in the rows left over after full tiles of
    :func:`matmul_rows` (:data:`MATMUL_MERGE`, or what this CPU holds): a convolution's 9
    output columns as one tile of 9 instead of 8 and a tile of 1, whose loads of ``b``
    serve two multiply-adds each (the seed CNN's float32 step on two cores 23.5 -> 21.9 ms
    with up to 10 rows; up to 12 and 14, the accumulators no longer all stay in registers:
    22.9 and 48 ms). AVX2's tiles of 4 rows take one more."""
    if MATMUL_MERGE is not None:
        return MATMUL_MERGE
    return 10 if planner.wide_vectors else 5


def matmul_cols(planner, dtype) -> int:
    """The columns of a register tile of ``dtype`` (:data:`MATMUL_COLS`, or what this CPU
    holds): two 512-bit vectors with AVX-512 (16 doubles, 32 floats: a panel of
    :data:`MATMUL_K` rows of 32 doubles would be 64 KiB, over a 48 KiB level-1 cache, and ran
    1.25x slower), else 8 (4 rows of 32 spill AVX2's 16 registers and ran 1.4x slower,
    ``benchmarks/mlp_grad.py``)."""
    if MATMUL_COLS is not None:
        return MATMUL_COLS
    return 128 // np.dtype(dtype).itemsize if planner.wide_vectors else 8


def register_tiles(planner, m: int, n: int, dtype) -> list:
    """:func:`tile_regions` of an ``m x n`` result of ``dtype`` in the register tiles of
    this CPU (:func:`matmul_rows`, :func:`matmul_cols`, :func:`merged_rows`)."""
    return tile_regions(m, n, matmul_rows(planner), matmul_cols(planner, dtype),
                        merged_rows(planner))


def tile_regions(m: int, n: int, rows: int, cols: int, merge: int = 0) -> list:
    """``(i0, i1, r, j0, j1, c)``: the regions of an ``m x n`` result in tiles of ``r`` rows
    and ``c`` columns: full tiles, then the rows left over as one tile of that height (or
    with the last full tile as one, when that is at most ``merge`` rows); the
    columns left over as tiles of a power of two and what remains (a tile 10 floats wide
    is vectorised with masked loads and stores of its accumulators, which LLVM then keeps
    in memory across the inner loop: 8 and 2 stay in registers).

    >>> tile_regions(10, 20, 8, 16)
    [(0, 8, 8, 0, 16, 16), (0, 8, 8, 16, 20, 4), (8, 10, 2, 0, 16, 16), (8, 10, 2, 16, 20, 4)]
    >>> [t[3:] for t in tile_regions(8, 10, 8, 32)]
    [(0, 8, 8), (8, 10, 2)]
    >>> [t[:3] for t in tile_regions(25, 16, 8, 16, merge=10)]
    [(0, 16, 8), (16, 25, 9)]
    """
    return [(i0, i1, r, j0, j1, c) for i0, i1, r in _tile_spans(m, rows, False, merge)
            for j0, j1, c in _tile_spans(n, cols, True)]


def _tile_spans(n: int, width: int, split: bool, merge: int = 0) -> list:
    """``(start, stop, tile)``: ``n`` in tiles of ``width``, then what is left as one tile,
    or (``split``) as a tile of the largest power of two and one of the rest, or with the
    last full tile as one when that is at most ``merge`` long."""
    if n == 0 or width == 0:
        return []
    if n % width and n > width and width + n % width <= merge:
        full = n - n % width - width
        return ([(0, full, width)] if full else []) + [(full, n, width + n % width)]
    full = n - n % width
    out = [(0, full, width)] if full else []
    rest = n - full
    if rest and split and rest & (rest - 1):
        head = 1 << (rest.bit_length() - 1)
        out.append((full, full + head, head))
        full, rest = full + head, rest - head
    if rest:
        out.append((full, n, rest))
    return out


def tile_body(planner, r: int):
    """The body updating ``r`` rows of a tile's column: ``acc[t] += a[t] * b``."""
    acc, x, y = planner.stand_ins((r,), "acc"), planner.stand_ins((r,), "a"), G.Leaf.new("b")
    value = np.array([G.add(acc[t], G.mul(x[t], y)) for t in range(r)], dtype=object)
    return planner.build_plan([value], [acc, x, np.asarray(y, dtype=object)])


def _packed(planner, rb: tuple, k: int, regions: list) -> dict:
    """``b`` copied into column strips as the tiles of ``regions`` read it (each strip's
    ``k`` rows contiguous), as BLAS packs it: a strip's rows sit in consecutive cache lines
    however long ``b``'s own rows are (rows 1 KiB apart all fall in a few cache sets), and
    a ``b`` read across its rows (a transposed operand) is read along them. Returns
    ``{first column of a span: (buffer, offset, strip stride, row stride)}`` for
    :func:`_matmul_tile`."""
    bk, bn = rb.strides
    spans = sorted({(j0, j1, c) for _, _, _, j0, j1, c in regions})
    buf = planner.temp(k * spans[-1][1], boolean=planner.buffers[rb.buffer].boolean)
    out = {}
    for j0, j1, c in spans:
        planner.block(((j1 - j0) // c, k, c), planner.copy_body(1, False),
                      (planner.at(rb.buffer, rb.offset + j0 * bn, (c * bn, bk, bn)),),
                      (planner.at(buf, j0 * k, (k * c, c, 1)),))
        out[j0] = (buf, j0 * k, k * c, c)
    return out


def _contiguous_constant(planner, loc: tuple) -> tuple:
    """A constant read in another order (a transposed weight matrix) as a constant of its
    own in that order, so that rows are read contiguously; other locations as they are."""
    buf, offsets = loc
    b = planner.buffers[buf]
    if b.kind != "const" or offsets.ndim < 2 or offsets.shape[-1] < 2:
        return loc
    aff = planner.affine(offsets)
    if aff is None or aff[1][-1] == 1:
        return loc
    values = np.asarray(b.values, dtype=object)[offsets.reshape(-1)]
    return planner.constant_buffer(values, b.boolean), planner.flat(offsets.shape)


def _matmul_tile(planner, accs: tuple, batch: tuple, k: int, rows: tuple, cols: tuple,
                 points: int = 0, packed: tuple | None = None) -> None:
    """The block of rows ``i0 <= i < i1`` (``r`` a tile) and columns ``j0 <= j < j1`` (``c``
    a tile); its space is ``batch + (row tiles, column tiles, k, c)``; ``points``: its first
    dimension runs over the chunk's points, that many a step; ``packed``: ``b``'s columns
    read from a packed copy (:func:`_packed`)."""
    (ra, rb, ro), (i0, i1, r), (j0, j1, c) = accs, rows, cols
    nb = len(batch)
    am, ak = ra.strides[nb:]
    bk, bn = rb.strides[nb:]
    om, on = ro.strides[nb:]
    body = tile_body(planner, r)
    a0, b0 = ra.offset + i0 * am, rb.offset + j0 * bn
    o0 = ro.offset + i0 * om + j0 * on
    core_a, core_o = tuple(t * am for t in range(r)), tuple(t * om for t in range(r))
    tiles = ((i1 - i0) // r, (j1 - j0) // c)
    if points:  # the first dimension is the chunk's points, in rows
        space = batch + (tiles[0], tiles[1], k, c)
        sa = planner.at(ra.buffer, a0, ra.strides[:nb] + (r * am, 0, ak, 0), core_a)
        sb = planner.at(rb.buffer, b0, rb.strides[:nb] + (0, c * bn, bk, bn))
        so = planner.at(ro.buffer, o0, ro.strides[:nb] + (r * om, c * on, 0, on), core_o)
        planner.block(space, body, (so, sa, sb), (so,), accumulate=True, batched=True,
                      points=points, contract=True)
        return
    # column tiles (threads split them), then k in panels of MATMUL_K, then row tiles: a
    # column strip of b's panel stays in cache across the row tiles
    kc = min(k, MATMUL_K)
    b_buf, strip = rb.buffer, c * bn
    if packed is not None:
        b_buf, b0, strip, bk = packed
        bn = 1
    for k0, n_panels, depth in ((0, k // kc, kc), (k - k % kc, 1, k % kc)):
        if n_panels == 0 or depth == 0:
            continue
        space = batch + (tiles[1], n_panels, tiles[0], depth, c)
        sa = planner.at(ra.buffer, a0 + k0 * ak, ra.strides[:nb] + (0, kc * ak, r * am, ak, 0),
                    core_a)
        sb = planner.at(b_buf, b0 + k0 * bk, rb.strides[:nb] + (strip, kc * bk, 0, bk, bn))
        so = planner.at(ro.buffer, o0, ro.strides[:nb] + (c * on, 0, r * om, 0, on), core_o)
        planner.block(space, body, (so, sa, sb), (so,), accumulate=True, contract=True)


def tiled(planner, batch: tuple, rows: tuple, cols: tuple, depth: tuple, accs: tuple,
          dtype, hoist: int = 0, points: bool = False) -> None:
    """``out[B, i, j] += sum over K of a[B, i, K] b[B, K, j]`` in register tiles, as the
    products' tiles, over index spaces given by strides: ``batch``: ``(extent, a stride,
    b stride, out stride)`` per batch dimension; ``rows``: ``(m, a stride, out stride)``;
    ``cols``: ``(n, b stride, out stride)``; ``depth``: ``(extent, a stride, b stride)``
    per summed dimension, the first outermost; ``accs``: the accesses of ``a``, ``b`` and
    ``out`` (their offsets are used). The loops run over the first batch dimension
    (threads split it), column tiles, the first ``hoist`` summed dimensions (``b``'s panel
    for them is then read by every row tile while in cache), the other batch dimensions,
    row tiles, the other summed dimensions and the columns of a tile. ``points``: the first
    batch dimension is the chunk's points (its extent is the run-time count); ``dtype``: the
    elements' (the width of a tile)."""
    ra, rb, ro = accs
    (m, am, om), (n, bn, on) = rows, cols
    ext = tuple(e for e, *_ in batch) + tuple(e for e, *_ in depth)
    if 0 in ext or m == 0 or n == 0:
        return
    sb_a, sb_b, sb_o = (tuple(t[k] for t in batch) for k in (1, 2, 3))
    k_ext = tuple(e for e, _, _ in depth)
    k_a, k_b = tuple(t[1] for t in depth), tuple(t[2] for t in depth)

    def order(b_, tile_j, k_, tile_i, last):  # strides (or extents) in loop order
        return b_[:1] + (tile_j,) + k_[:hoist] + b_[1:] + (tile_i,) + k_[hoist:] + (last,)

    for i0, i1, rt, j0, j1, ct in register_tiles(planner, m, n, dtype):
        space = order(tuple(e for e, *_ in batch), (j1 - j0) // ct, k_ext,
                      (i1 - i0) // rt, ct)
        sa = planner.at(ra.buffer, ra.offset + i0 * am, order(sb_a, 0, k_a, rt * am, 0),
                    tuple(t * am for t in range(rt)))
        sb = planner.at(rb.buffer, rb.offset + j0 * bn, order(sb_b, ct * bn, k_b, 0, bn))
        so = planner.at(ro.buffer, ro.offset + i0 * om + j0 * on,
                    order(sb_o, ct * on, (0,) * len(depth), rt * om, on),
                    tuple(t * om for t in range(rt)))
        planner.block(space[1:] if points else space, tile_body(planner, rt), (so, sa, sb),
                      (so,), accumulate=True, contract=True, batched=points)

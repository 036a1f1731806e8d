"""Segment reductions: rows of ``data`` combined by segment id, the ids kept as data.

``segment_reduce(data, ids, num_segments, kind, empty)`` is, for ``data`` of shape ``(n,
*rest)`` and ``ids`` an int array of ``n`` ids in ``[-1, num_segments)``, the tensor of shape
``(num_segments, *rest)`` whose row ``s`` combines the rows ``j`` with ``ids[j] == s`` in order
(``kind``: ``'sum'``, ``'max'``, ``'min'``, ``'prod'``); a row with id -1 is dropped (as
TensorFlow's unsorted segment ops drop negative ids) and a segment no row reaches is
``empty``. TensorFlow's segment, unsorted segment and scatter ops (``symtape/segments.py``)
are this op with reshapes, concatenations and selects around it.

Derivatives are table ops: a sum's is a gather of the cotangent at the rows' segments
(``gather_flat``); a maximum's or minimum's goes to the rows equal to their segment's result,
split equally among ties (TensorFlow's rule); a product's is the product of the other rows
(exact where one row of the segment is 0, zero where two are).
"""

from __future__ import annotations

import math

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.primitive import Aval, Primitive, Zero, fmt, obj, register_primitive
from symtape.ops.elementwise import divide, equal, greater, maximum, minimum, multiply, where
from symtape.ops.structural import cast, gather_flat, transpose
from symtape.base.lazy import LazyModule

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["SegmentReduce", "segment_reduce", "row_places", "KINDS", "MAX_RUNS"]

KINDS = ("sum", "max", "min", "prod")
#: A segment reduction whose ids are not affine over the rows (or a finer index space) is
#: one accumulating loop per run of rows whose ids step evenly, up to this many runs.
MAX_RUNS = 64


def row_places(ids: np.ndarray, rest: tuple) -> np.ndarray:
    """The flat place in a ``(num_segments, *rest)`` tensor of each element of a ``(n,
    *rest)`` one whose rows go to the segments ``ids`` (-1: dropped rows).

    >>> row_places(np.array([1, -1, 0]), (2,)).tolist()
    [[2, 3], [-1, -1], [0, 1]]
    """
    m = int(np.prod(rest, dtype=np.int64))
    cols = np.arange(m, dtype=np.int64)
    flat = np.where(ids[:, None] < 0, -1, ids[:, None] * m + cols[None, :])
    return flat.reshape((len(ids),) + tuple(rest))


def _identity(kind: str, dtype: np.dtype):
    """The value a combination starts from (what leaves any row's value as it is)."""
    if kind == "sum":  # (-0.0 for floats: IEEE addition's identity, -0 + -0 = -0)
        return dtype.type(-0.0 if dtype.kind == "f" else 0)
    if kind == "prod":
        return dtype.type(1)
    if dtype.kind == "f":
        return dtype.type(-np.inf if kind == "max" else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if kind == "max" else info.max)


_AT = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


class SegmentReduce(Primitive):
    """``out[s] = kind(data[j] for j with ids[j] == s)``, rows in order; ``empty`` where no
    row reaches ``s`` (see the module's docstring)."""

    scatters = True

    def __init__(self) -> None:
        super().__init__("segment_reduce", ("T",), "fi", rules=(self._rule,))

    # -- shape rule --------------------------------------------------------------------------
    def prepare(self, avals, params):
        (a,) = avals
        t = self.check_dtypes(avals)
        ids = np.asarray(params["ids"])
        k = params["num_segments"]
        kind = params["kind"]
        if kind not in KINDS:
            raise InvalidArgumentError(f"st.segment_reduce: kind must be one of {KINDS}, "
                                       f"got {kind!r}")
        if not a.shape:
            raise ShapeError("st.segment_reduce: data must have at least one axis, got a "
                             "scalar")
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or len(ids) != a.shape[0]:
            raise ShapeError(f"st.segment_reduce: ids must be {a.shape[0]} integers (one per "
                             f"row of data of shape {fmt(a.shape)}), got shape "
                             f"{fmt(ids.shape)} of {ids.dtype.name}")
        if not isinstance(k, (int, np.integer)) or k < 0:
            raise InvalidArgumentError(f"st.segment_reduce: num_segments must be a "
                                       f"non-negative int, got {k!r}")
        if ids.size and (ids.min() < -1 or ids.max() >= k):
            raise InvalidArgumentError(f"st.segment_reduce: ids must lie in [-1, {k}), got "
                                       f"values from {ids.min()} to {ids.max()}")
        ids = np.array(ids, dtype=np.int64)  # (owned: the caller's array may change later)
        ids.flags.writeable = False
        params = dict(params, ids=ids, num_segments=int(k))
        return Aval((int(k),) + tuple(a.shape[1:]), t), params

    def element_cost(self, node) -> int:
        return node.size + node.inputs[0].size  # (every row is a term of its segment)

    # -- eager value -------------------------------------------------------------------------
    def numeric(self, values, params):
        data = np.asarray(values[0])
        ids, k, kind = params["ids"], params["num_segments"], params["kind"]
        keep = ids >= 0
        kept_ids = ids[keep] if not keep.all() else ids
        kept = data[keep] if not keep.all() else data
        shape = (k,) + data.shape[1:]
        counts = np.bincount(kept_ids, minlength=k)
        if kind == "sum" and data.ndim == 1 and data.dtype == np.float64:
            out = np.bincount(kept_ids, weights=kept, minlength=k)  # (in order, from 0.0)
            # a segment of negative zeros sums to -0.0 (the element view's sum of its rows)
            negative = np.bincount(kept_ids, weights=np.signbit(kept) & (kept == 0), minlength=k)
            out[(negative == counts) & (negative > 0)] = -0.0
        else:
            out = np.full(shape, _identity(kind, data.dtype), dtype=data.dtype)
            with np.errstate(all="ignore"):
                _AT[kind].at(out, kept_ids, kept)
        if (counts == 0).any():
            out[counts == 0] = data.dtype.type(params["empty"])
        return out.reshape(shape)

    # -- element view ------------------------------------------------------------------------
    def _combine(self, kind: str):
        if kind == "sum":
            return lambda parts: parts[0] if len(parts) == 1 else G.add(*parts)
        if kind == "prod":
            return lambda parts: parts[0] if len(parts) == 1 else G.mul(*parts)
        one = (maximum if kind == "max" else minimum)._build_one

        def chain(parts):
            out = parts[0]
            for p in parts[1:]:
                out = one(out, p)
            return out

        return chain

    def build(self, atoms, params):
        (data,) = atoms
        ids, k = params["ids"], params["num_segments"]
        rest = data.shape[1:]
        groups: dict[int, list] = {}
        for j, s in enumerate(ids.tolist()):
            if s >= 0:
                groups.setdefault(s, []).append(j)
        out = obj((k,) + rest, G.number(params["empty"]))
        combine = self._combine(params["kind"])
        for s, rows in groups.items():
            for c in np.ndindex(*rest):
                out[(s,) + c] = combine([data[(j,) + c] for j in rows])
        return out

    # -- derivatives (table ops, so every order is another sweep) -----------------------------
    @staticmethod
    def _rule(g, ans, data, ids, num_segments, kind, empty):
        if isinstance(g, Zero):
            return Zero(data.shape, g.dtype)
        places = row_places(ids, tuple(data.shape[1:]))
        if kind == "sum":
            return gather_flat.bind(g, idx=places)
        if kind in ("max", "min"):
            return _extremum_rule(g, ans, data, ids, places, num_segments)
        return _prod_rule(g, ans, data, ids, places, num_segments)

    # -- batching ----------------------------------------------------------------------------
    def batch(self, args, batched, params, shape):
        """The batch axis moved behind the rows, reduced with them, moved back in front."""
        (x,) = args
        rank = len(x.shape)
        perm = (1, 0) + tuple(range(2, rank))
        out = self.bind(transpose.bind(x, perm=perm), **params)
        return transpose.bind(out, perm=perm)

    # -- sparsity ----------------------------------------------------------------------------
    def dependencies(self, deps, params, shape):
        """Each segment's element on the sources of its rows' elements only."""
        out = np.zeros(shape, dtype=object)
        ids = params["ids"]
        keep = ids >= 0
        if keep.any():
            np.bitwise_or.at(out, ids[keep], deps[0][keep])
        return out

    # -- loop rule ---------------------------------------------------------------------------
    def loop(self, planner, node):
        """Accumulating loops over the rows with the ids as affine places: one loop when the
        places are affine over the rows' shape or a finer one (equal segments, strided
        ids), else one loop per run of rows whose ids step evenly (at most
        :data:`MAX_RUNS`), else one loop reading the places from index arrays; the
        combination starts from the kind's identity, each segment combining its rows in
        order, and segments no row reaches are set to ``empty`` by a loop reading a
        constant mask."""
        if not planner.numeric(node) or node.inputs[0].dtype.kind != "f":
            return planner.unrolled(node)
        (x,) = node.inputs
        ids = node.params["ids"]
        rest = tuple(x.shape[1:])
        places = row_places(ids, rest)
        found = planner.finer(places) if not (ids < 0).any() and x.size else None
        runs = None if found is not None else _runs(ids)
        if found is None and runs is None:  # no row reaches a segment
            return planner.unrolled(node)
        xloc = planner.loc[id(x)]
        batched = planner.batched(xloc)
        loc = planner.fresh(node, batched)
        kind = node.params["kind"]
        planner.fill(loc, node.shape, float(_identity(kind, np.dtype(float))), batched)
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        value = self._combine(kind)([acc, term])
        outs = _out_offsets(planner, loc, node.shape, batched)
        if found is not None:
            space, (start, strides) = found
            out = planner.at(loc[0], start, ((node.size,) if batched else ()) + strides)
            xs = (xloc[0], xloc[1].reshape(planner.shape(space, batched)))
            planner.accumulate(space, value, [acc, term],
                               [out, planner.access(xs, space, batched)], out, batched)
        elif len(runs) > MAX_RUNS:  # one loop over the kept rows, by index arrays
            keep = np.flatnonzero(ids >= 0)
            lead = (slice(None),) * batched
            space = (len(keep),) + rest
            xs = planner.spread(xloc, x.shape, batched)[lead + (keep,)]
            out = planner.indexed(loc[0], outs[lead + (ids[keep],)])
            planner.accumulate(space, value, [acc, term],
                               [out, planner.indexed(xloc[0], xs)], out, batched)
        else:
            for lo, hi, first, step in runs:
                rows = first + step * np.arange(hi - lo, dtype=np.int64)
                space = (hi - lo,) + rest
                lead = (slice(None),) * batched
                out = planner.access((loc[0], outs[lead + (rows,)]), space, batched)
                xs = (xloc[0], planner.spread(xloc, x.shape, batched)[lead + (slice(lo, hi),)])
                planner.accumulate(space, value, [acc, term],
                                   [out, planner.access(xs, space, batched)], out, batched)
        _fill_empty(planner, node, loc, outs, batched)
        return loc


segment_reduce = register_primitive(SegmentReduce())


def _runs(ids: np.ndarray) -> list | None:
    """``[(lo, hi, first, step)]``: the rows ``lo:hi`` go to segments ``first + step * i``,
    dropped rows left out; None when there are none to combine."""
    out = []
    n = len(ids)
    j = 0
    while j < n:
        if ids[j] < 0:
            j += 1
            continue
        if j + 1 >= n or ids[j + 1] < 0:
            out.append((j, j + 1, int(ids[j]), 0))
            j += 1
            continue
        step = int(ids[j + 1] - ids[j])
        e = j + 1
        while e + 1 < n and ids[e + 1] >= 0 and ids[e + 1] - ids[e] == step:
            e += 1
        out.append((j, e + 1, int(ids[j]), step))
        j = e + 1
        if len(out) > MAX_RUNS:
            break
    return out


def _out_offsets(planner, loc: tuple, shape: tuple, batched: bool) -> np.ndarray:
    return planner.spread(loc, shape, batched)


def _fill_empty(planner, node, loc: tuple, outs: np.ndarray, batched: bool) -> None:
    """Segments no row reaches set to ``empty`` where that differs from the identity the
    loops started from: a select over the result reading a constant mask."""
    ids, k, kind = node.params["ids"], node.params["num_segments"], node.params["kind"]
    empty = float(node.params["empty"])
    counts = np.bincount(ids[ids >= 0], minlength=k)
    start = float(_identity(kind, np.dtype(float)))
    if not (counts == 0).any() or (empty == start
                                    and math.copysign(1, empty) == math.copysign(1, start)):
        return
    rest = tuple(node.shape[1:])
    mask = np.broadcast_to((counts == 0).reshape((k,) + (1,) * len(rest)), node.shape)
    mbuf = planner.constant_buffer([bool(v) for v in mask.reshape(-1)], boolean=True)
    cur, e = G.Leaf.new("acc"), G.Leaf.new("e")
    value = G.piecewise((G.number(empty), e), (cur, True))
    out = planner.access(loc, node.shape, batched)
    m = planner.access((mbuf, planner.flat(node.shape)), node.shape, False)
    if batched:
        m = planner.at(m.buffer, m.offset, (0,) + m.strides)
    planner.accumulate(node.shape, value, [cur, e], [out, m], out, batched)


# --------------------------------------------------------------------------------------------
# Derivatives of extrema and products (TensorFlow's rules, in ops of the table)
# --------------------------------------------------------------------------------------------


def _extremum_rule(g, ans, data, ids, places, k):
    """The cotangent at the rows equal to their segment's extremum, split equally among
    them (TensorFlow's ``_SegmentMinOrMaxGrad``); dropped rows get 0."""
    picked = equal.bind(data, gather_flat.bind(ans, idx=places))
    count = segment_reduce.bind(cast.bind(picked, dtype=data.dtype), ids=ids, num_segments=k,
                                kind="sum", empty=0)
    share = divide.bind(g, maximum.bind(count, 1.0))
    return where.bind(picked, gather_flat.bind(share, idx=places), 0.0)


def _prod_rule(g, ans, data, ids, places, k):
    """The product of a segment's other rows (TensorFlow's ``_UnsortedSegmentProdGrad``):
    the segment's product over the row where the row is not 0, the product of its other
    (non-zero) rows where it is the only 0, and 0 where the segment has two zeros."""
    dt = data.dtype
    zero, one = 0.0, 1.0
    is_zero = equal.bind(data, zero)
    zeros = segment_reduce.bind(cast.bind(is_zero, dtype=dt), ids=ids, num_segments=k,
                                kind="sum", empty=0)
    g = where.bind(greater.bind(zeros, one), zero, g)
    nonzero = segment_reduce.bind(where.bind(is_zero, one, data), ids=ids, num_segments=k,
                                  kind="prod", empty=1)
    others = where.bind(is_zero, gather_flat.bind(nonzero, idx=places),
                        divide.bind(gather_flat.bind(ans, idx=places),
                                    where.bind(is_zero, one, data)))
    return multiply.bind(gather_flat.bind(g, idx=places), others)

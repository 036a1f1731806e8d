"""Scans along an axis: ``cumsum`` and ``cumprod`` (TensorFlow's ``exclusive`` and
``reverse``), each one op of the table with its rules beside it.

``scan(x, axis, exclusive, reverse)`` is, along ``axis``, the running sum (product) of ``x``
in order (from the end when ``reverse``), each place leaving itself out when ``exclusive``
(the first place is then 0, or 1 for a product).

Derivatives are table ops: a sum's is the running sum of the cotangent the other way round;
a product's is exact also where elements are 0 (TensorFlow divides by ``x`` and gives nan
there): the running product with the first 0 left out gives the derivative at that 0, the
places after it get 0 from the products that hold it, and places before any 0 divide by
their own (non-zero) element.
"""

from __future__ import annotations

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.base.lazy import LazyModule
from symtape.core.primitive import (
    Aval, Primitive, Unplannable, Zero, axis_after_batch, fmt, obj, register_primitive,
)
from symtape.ops.elementwise import (
    divide, equal, greater, less, logical_and, logical_not, logical_or, multiply, not_equal, where,
)
from symtape.ops.structural import cast, gather_flat

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["Scan", "SortPermute", "Argsort", "SearchSorted", "cumsum", "cumprod",
           "sort_permute", "argsort", "searchsorted", "oriented_places", "stable_order"]


def oriented_places(shape: tuple, axis: int, reverse: bool, shift: int) -> np.ndarray:
    """For each place of a tensor of ``shape``, the flat place it is read from when the
    tensor is flipped along ``axis`` (``reverse``) and then shifted by ``shift`` towards
    higher indices along it (-1: a place the shift leaves empty).

    >>> oriented_places((4,), 0, False, 1).tolist(), oriented_places((3,), 0, True, 0).tolist()
    ([-1, 0, 1, 2], [2, 1, 0])
    """
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    if reverse:
        flat = np.flip(flat, axis)
    if shift:
        n = shape[axis]
        moved = np.moveaxis(flat, axis, -1)
        out = np.full(moved.shape, -1, dtype=np.int64)
        if shift > 0:
            out[..., shift:] = moved[..., :n - shift]
        else:
            out[..., :n + shift] = moved[..., -shift:]
        flat = np.moveaxis(out, -1, axis)
    return np.ascontiguousarray(flat)


def _orient(t, axis: int, reverse: bool, shift: int = 0):
    """``t`` flipped along ``axis`` and shifted (a gather, so every rule of it is known)."""
    if not reverse and not shift:
        return t
    return gather_flat.bind(t, idx=oriented_places(tuple(t.shape), axis, reverse, shift))


class Scan(Primitive):
    """``out = running kind(x)`` along ``axis`` (see the module's docstring)."""

    def __init__(self, name: str, kind: str) -> None:
        self.kind = kind
        rule = self._sum_rule if kind == "sum" else self._prod_rule
        super().__init__(name, ("T",), "fi", rules=(rule,))

    # -- shape rule --------------------------------------------------------------------------
    def prepare(self, avals, params):
        (a,) = avals
        t = self.check_dtypes(avals)
        axis = params.get("axis", 0)
        rank = len(a.shape)
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
            raise InvalidArgumentError(f"st.{self.name}: axis must be an int, got {axis!r}")
        if not -rank <= axis < rank:
            raise ShapeError(f"st.{self.name}: axis {axis} is out of range for x of shape "
                             f"{fmt(a.shape)} (rank {rank}); use -{rank} <= axis < {rank}"
                             if rank else f"st.{self.name}: x must have at least one axis, "
                             "got a scalar")
        flags = {}
        for name in ("exclusive", "reverse"):
            v = params.get(name, False)
            if not isinstance(v, (bool, np.bool_)):
                raise InvalidArgumentError(f"st.{self.name}: {name} must be a bool, got {v!r}")
            flags[name] = bool(v)
        return Aval(tuple(a.shape), t), dict(axis=int(axis) % rank, **flags)

    # -- eager value -------------------------------------------------------------------------
    def numeric(self, values, params):
        x = np.asarray(values[0])
        axis, rev = params["axis"], params["reverse"]
        if rev:
            x = np.flip(x, axis)
        fn = np.cumsum if self.kind == "sum" else np.cumprod
        with np.errstate(all="ignore"):
            out = fn(x, axis=axis, dtype=x.dtype)
        if params["exclusive"]:
            moved = np.moveaxis(out, axis, -1)
            shifted = np.empty_like(moved)
            shifted[..., :1] = 0 if self.kind == "sum" else 1
            shifted[..., 1:] = moved[..., :-1]
            out = np.moveaxis(shifted, -1, axis)
        if rev:
            out = np.flip(out, axis)
        return np.ascontiguousarray(out)

    # -- element view ------------------------------------------------------------------------
    def build(self, atoms, params):
        (x,) = atoms
        axis, rev = params["axis"], params["reverse"]
        moved = np.moveaxis(np.flip(x, axis) if rev else x, axis, -1)
        combine = G.add if self.kind == "sum" else G.mul
        out = obj(moved.shape)
        n = moved.shape[-1]
        for row in np.ndindex(*moved.shape[:-1]):
            acc = G.ZERO if self.kind == "sum" else G.ONE
            for i in range(n):
                term = moved[row + (i,)]
                nxt = term if i == 0 else combine(acc, term)
                out[row + (i,)] = acc if params["exclusive"] else nxt
                acc = nxt
        out = np.moveaxis(out, -1, axis)
        return np.flip(out, axis) if rev else out

    # -- derivatives (table ops, so every order is another sweep) -----------------------------
    @staticmethod
    def _sum_rule(g, ans, x, axis, exclusive, reverse):
        if isinstance(g, Zero):
            return Zero(x.shape, g.dtype)
        return cumsum.bind(g, axis=axis, exclusive=exclusive, reverse=not reverse)

    @staticmethod
    def _prod_rule(g, ans, x, axis, exclusive, reverse):
        if isinstance(g, Zero):
            return Zero(x.shape, g.dtype)
        xo = _orient(x, axis, reverse)
        # exclusive: out[i] = P[i - 1] (P inclusive), so P[j] receives g[j + 1]
        go = _orient(g, axis, reverse, -1 if exclusive else 0)
        p = ans if not (reverse or exclusive) else cumprod.bind(xo, axis=axis)
        return _orient(_inclusive_prod_cotangent(go, p, xo, axis), axis, reverse)

    # -- batching ----------------------------------------------------------------------------
    def batch(self, args, batched, params, shape):
        return self.bind(args[0], axis=axis_after_batch(params["axis"], len(shape)),
                         exclusive=params["exclusive"], reverse=params["reverse"])

    # -- sparsity ----------------------------------------------------------------------------
    def dependencies(self, deps, params, shape):
        """Each place on its own and the earlier places' sources along the axis (a
        triangular pattern per line), not on the whole tensor."""
        axis, rev = params["axis"], params["reverse"]
        d = np.flip(deps[0], axis) if rev else deps[0]
        d = np.bitwise_or.accumulate(np.asarray(d, dtype=object), axis=axis)
        if params["exclusive"]:
            moved = np.moveaxis(d, axis, -1)
            shifted = np.zeros(moved.shape, dtype=object)
            shifted[..., 1:] = moved[..., :-1]
            d = np.moveaxis(shifted, -1, axis)
        return np.asarray(np.flip(d, axis) if rev else d, dtype=object)

    # -- loop rule ---------------------------------------------------------------------------
    def loop(self, planner, node):
        """The result starts as a copy of ``x`` (shifted by one place along the axis when
        ``exclusive``, the first place the identity); then one accumulating loop adds (or
        multiplies) each place's predecessor along the axis into it, in order (descending
        offsets when ``reverse``). Its outermost extent is 1, so the scan is never split
        across threads (iterations along the axis depend on each other)."""
        (x,) = node.inputs
        if not planner.numeric(node) or x.dtype.kind != "f" or x.size == 0:
            return planner.unrolled(node)
        p = node.params
        axis, rev, excl = p["axis"], p["reverse"], p["exclusive"]
        xloc = planner.loc[id(x)]
        batched = planner.batched(xloc)
        loc = planner.fresh(node, batched)
        shape, n = node.shape, node.shape[axis]
        lead = 1 if batched else 0
        outs = np.flip(planner.spread(loc, shape, batched), axis + lead) if rev else \
            planner.spread(loc, shape, batched)
        xs = planner.spread(xloc, shape, batched)
        xs = np.flip(xs, axis + lead) if rev else xs
        identity = 0.0 if self.kind == "sum" else 1.0
        term = G.Leaf.new("x")
        if excl:
            planner.fill(loc, shape, identity, batched)
        if n - excl > 0:
            dst = _along(outs, axis + lead, excl, n)
            src = _along(xs, axis + lead, 0, n - excl)
            space = (1,) + _line(shape, axis, n - excl)
            planner.accumulate(space, term, [term], [_access(planner, xloc[0], src, space,
                                                             batched)],
                               _access(planner, loc[0], dst, space, batched), batched)
        if n - 1 > 0:
            acc, prev = G.Leaf.new("acc"), G.Leaf.new("prev")
            value = G.add(acc, prev) if self.kind == "sum" else G.mul(acc, prev)
            space = (1,) + _line(shape, axis, n - 1)
            cur = _access(planner, loc[0], _along(outs, axis + lead, 1, n), space, batched)
            before = _access(planner, loc[0], _along(outs, axis + lead, 0, n - 1), space,
                             batched)
            planner.accumulate(space, value, [acc, prev], [cur, before], cur, batched)
        return loc


def _along(offsets: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    key = (slice(None),) * axis + (slice(lo, hi),)
    return offsets[key]


def _line(shape: tuple, axis: int, n: int) -> tuple:
    return tuple(shape[:axis]) + (n,) + tuple(shape[axis + 1:])


def _access(planner, buf: int, offsets: np.ndarray, space: tuple, batched: bool):
    """An access of ``buf`` at ``offsets`` (points in front when ``batched``) over ``space``,
    whose leading extent 1 is a new axis."""
    at = 1 if batched else 0
    return planner.access((buf, np.expand_dims(offsets, at)), space, batched)


def _inclusive_prod_cotangent(g, p, x, axis: int):
    """The cotangent of ``x`` for ``p = cumprod(x)`` (inclusive, forward) and ``g``, exact
    where elements are 0 (see the module's docstring)."""
    dt = x.dtype
    is0 = equal.bind(x, 0.0)
    zeros_before = cumsum.bind(cast.bind(is0, dtype=dt), axis=axis, exclusive=True)
    first = logical_and.bind(is0, equal.bind(zeros_before, 0.0))
    safe = where.bind(is0, 1.0, x)
    others = cumprod.bind(where.bind(first, 1.0, x), axis=axis)
    nonzero = divide.bind(cumsum.bind(multiply.bind(g, p), axis=axis, reverse=True), safe)
    at_first = cumsum.bind(multiply.bind(g, others), axis=axis, reverse=True)
    return where.bind(first, at_first, where.bind(is0, 0.0, nonzero))


cumsum = register_primitive(Scan("cumsum", "sum"))
cumprod = register_primitive(Scan("cumprod", "prod"))


# --------------------------------------------------------------------------------------------
# Orderings: sort_permute (values taken in the stable order of keys), argsort, searchsorted
# --------------------------------------------------------------------------------------------


def stable_order(key: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The stable sorting permutation of ``key`` along ``axis`` (ties keep their order, in
    either direction, as TensorFlow's ``sort``/``argsort``/``top_k``).

    >>> stable_order(np.array([1.0, 3.0, 3.0, 2.0]), 0, True).tolist()
    [1, 2, 3, 0]
    """
    if not descending:
        return np.argsort(key, axis=axis, kind="stable")
    n = key.shape[axis]
    flipped = np.argsort(np.flip(key, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(flipped, axis)


def _ranks(keys: list, descending: bool) -> list:
    """The element view of each key's place in the stable order of ``keys`` (one line), nan
    placed as :func:`stable_order` places it: last ascending, first descending, nans in
    index order among themselves."""
    nan = [not_equal.build_atom(k, k) for k in keys]  # nan is the one value unequal to itself

    def before(a: int, b: int):
        first, second = (b, a) if descending else (a, b)
        plain = (greater if descending else less).build_atom(keys[a], keys[b])
        return logical_or.build_atom(plain, logical_and.build_atom(
            nan[second], logical_not.build_atom(nan[first])))

    def tie(a: int, b: int):
        return logical_or.build_atom(equal.build_atom(keys[a], keys[b]),
                                     logical_and.build_atom(nan[a], nan[b]))

    one, zero = G.ONE, G.ZERO
    out = []
    for j in range(len(keys)):
        terms = [where.build_atom(before(k, j), one, zero) for k in range(len(keys)) if k != j]
        terms += [where.build_atom(tie(k, j), one, zero) for k in range(j)]
        out.append(G.add(*terms) if terms else zero)
    return out


def _pick(ranks: list, values: list, i: int):
    """The value whose key is ``i``-th in order (a select over the line)."""
    pairs = [(v, equal.build_atom(r, G.number(i))) for r, v in zip(ranks, values)]
    return G.piecewise(*pairs, (G.ZERO, True))


def _lines(a: np.ndarray, axis: int):
    moved = np.moveaxis(a, axis, -1)
    return moved, list(np.ndindex(*moved.shape[:-1]))


def _order_params(name: str, rank: int, params: dict) -> dict:
    axis = params.get("axis", -1)
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise InvalidArgumentError(f"st.{name}: axis must be an int, got {axis!r}")
    if not rank:
        raise ShapeError(f"st.{name}: the tensor must have at least one axis, got a scalar")
    if not -rank <= axis < rank:
        raise ShapeError(f"st.{name}: axis {axis} is out of range for rank {rank}; use "
                         f"-{rank} <= axis < {rank}")
    return dict(axis=int(axis) % rank, descending=bool(params.get("descending", False)))


class _Ordering(Primitive):
    """What the ordering ops share: a batch rule moving the axis; a loop form that unrolls
    short lines and sorts long ones with a native merge sort per line."""

    def batch(self, args, batched, params, shape):
        moved = [a if b else _spread_to(a, batch_size_of(args, batched)) for a, b in
                 zip(args, batched)]
        return self.bind(*moved, **dict(params, axis=params["axis"] + 1))

    def element_cost(self, node) -> int:
        return node.size * node.shape[node.params["axis"]]  # (each place compares a line)

    def dependencies(self, deps, params, shape):
        """Each place on its line of every argument (along the axis)."""
        axis = params["axis"]
        out = np.zeros(shape, dtype=object)
        for d in deps:
            line = np.bitwise_or.reduce(np.asarray(d, dtype=object), axis=axis,
                                        keepdims=True, initial=0)
            out = out | np.broadcast_to(line, shape)
        return np.asarray(out, dtype=object)

    #: Lines up to this long are unrolled comparisons (the element view); longer ones a
    #: native merge sort per line (``planner.routine``).
    UNROLLED_LINE = 8

    def loop(self, planner, node):
        """Short lines: the element view unrolled; longer ones (or too many short ones to
        unroll): one block over the other axes whose body sorts a line of float keys (a
        stable merge sort of their indices, nan placed as eager values place it);
        :class:`Unplannable` for other keys or what has no routine."""
        kind = self.routine_kind(node)
        axis = node.params["axis"]
        if node.shape[axis] <= self.UNROLLED_LINE or kind is None or any(
                x.dtype.kind != "f" for x in node.inputs):
            try:
                return planner.unrolled(node)
            except Unplannable:
                raise Unplannable(
                    f"{self.name} of {node.size} elements has no loop form here: float "
                    "keys and values sort in loops; call it eagerly") from None
        return _line_block(planner, node, kind)

    def routine_kind(self, node) -> str | None:
        """The routine that orders ``node``'s lines (None: none)."""
        return None


def _split_line(planner, acc, at: int, size: int) -> tuple:
    """``acc`` without its loop dimension ``at``, that dimension's ``size`` places listed as
    the access's core instead (a line a routine reads or writes); and the line's stride."""
    strides = list(acc.strides)
    step = strides.pop(at)
    return planner.at(acc.buffer, acc.offset, tuple(strides),
                      tuple(i * step for i in range(size))), step


def _line_block(planner, node, kind: str) -> tuple:
    """``node`` as one block over every axis but its ordering axis, whose body is the
    ordering routine ``kind`` on one line: keys (the last argument) and values (the first,
    for a permutation) read along the axis at their strides, the result written along it."""
    axis, n = node.params["axis"], node.shape[node.params["axis"]]
    locs, batched = planner.arguments(node)
    at = int(batched) + axis
    reads = [_split_line(planner, planner.access(loc, x.shape, batched), at, n)
             for x, loc in zip(node.inputs, locs)]
    loc = planner.fresh(node, batched)
    out, o_step = _split_line(planner, planner.access(loc, node.shape, batched), at, n)
    (keys, k_step), (values, v_step) = reads[-1], reads[0]
    routine = planner.routine(kind, n, 0, (k_step, 0), (v_step, 0), (o_step, 0),
                              node.params["descending"])
    ins = [keys] + ([values] if "B" in routine.args else [])
    work = planner.at(planner.temp(routine.work), 0, (0,) * len(out.strides),
                      tuple(range(routine.work)))
    space = tuple(d for k, d in enumerate(node.shape) if k != axis)
    planner.block(space, routine, ins, [out, work], batched=batched)
    return loc


def _bounds_block(planner, node) -> tuple:
    """``searchsorted`` as one block over its lines (all axes but the last), whose body
    bisects the line of sorted keys for each of the line's values (routine
    ``lower_bound``/``upper_bound``), keys and values read along the last axis at their
    strides, the places written along it."""
    s, v = node.inputs
    n, k = s.shape[-1], v.shape[-1]
    locs, batched = planner.arguments(node)
    last = int(batched) + len(node.shape) - 1
    keys, k_step = _split_line(planner, planner.access(locs[0], s.shape, batched), last, n)
    values, v_step = _split_line(planner, planner.access(locs[1], v.shape, batched), last, k)
    loc = planner.fresh(node, batched)
    out, o_step = _split_line(planner, planner.access(loc, node.shape, batched), last, k)
    kind = "lower_bound" if node.params["side"] == "left" else "upper_bound"
    routine = planner.routine(kind, n, k, (k_step, 0), (v_step, 0), (o_step, 0))
    planner.block(tuple(node.shape[:-1]), routine, [keys, values], [out], batched=batched)
    return loc


def _widened(acc, back: int):
    """``acc`` over one more loop dimension, inserted ``back`` dimensions from the end,
    along which it stays in place (stride 0; its index array's too)."""
    def spread(strides):
        k = len(strides) - back
        return tuple(strides[:k]) + (0,) + tuple(strides[k:])

    index = (acc.index[0], acc.index[1], spread(acc.index[2])) if acc.index else ()
    return acc._replace(strides=spread(acc.strides), index=index)


def batch_size_of(args, batched) -> int:
    return next(int(a.shape[0]) for a, b in zip(args, batched) if b)


def _spread_to(t, n: int):
    from symtape.ops.structural import broadcast_to
    return broadcast_to.bind(t, shape=(n,) + tuple(t.shape))


class SortPermute(_Ordering):
    """``out = v`` taken along ``axis`` in the stable order of ``key`` (``inverse``: put
    back, the transpose); ``sort(x)`` is ``sort_permute(x, x)``."""

    def __init__(self) -> None:
        super().__init__("sort_permute", ("T", "*"), "fi", rules=(self._rule, None))

    def prepare(self, avals, params):
        v, k = avals
        t = self.check_dtypes(avals[:1])
        if k.dtype.kind not in "fiu":
            raise InvalidArgumentError(f"st.sort: the keys must be float or integer, got "
                                       f"{k.dtype.name}")
        if tuple(v.shape) != tuple(k.shape):
            raise ShapeError(f"st.sort: values of shape {fmt(v.shape)} and keys of shape "
                             f"{fmt(k.shape)} differ")
        p = _order_params("sort", len(v.shape), params)
        p["inverse"] = bool(params.get("inverse", False))
        return Aval(tuple(v.shape), t), p

    def numeric(self, values, params):
        v, key = (np.asarray(a) for a in values)
        if values[0] is values[1] and not params["inverse"]:  # a sort of its keys: numpy's
            out = np.sort(v, axis=params["axis"], kind="stable")
            return np.ascontiguousarray(np.flip(out, params["axis"])) if \
                params["descending"] else out
        order = stable_order(key, params["axis"], params["descending"])
        if not params["inverse"]:
            return np.take_along_axis(v, order, params["axis"])
        out = np.empty_like(v)
        np.put_along_axis(out, order, v, params["axis"])
        return out

    def build(self, atoms, params):
        v, key = atoms
        axis = params["axis"]
        vm, lines = _lines(v, axis)
        km, _ = _lines(key, axis)
        out = obj(vm.shape)
        for line in lines:
            vals = list(vm[line])
            ranks = _ranks(list(km[line]), params["descending"])
            if params["inverse"]:
                # place j gets the value at position rank_j
                for j, r in enumerate(ranks):
                    out[line + (j,)] = G.piecewise(
                        *[(vals[i], equal.build_atom(r, G.number(i)))
                          for i in range(len(vals))], (G.ZERO, True))
            else:
                for i in range(vm.shape[-1]):
                    out[line + (i,)] = _pick(ranks, vals, i)
        return np.moveaxis(out, -1, axis)

    def routine_kind(self, node):
        return "unpermute" if node.params["inverse"] else "permute"

    @staticmethod
    def _rule(g, ans, v, key, axis, descending, inverse):
        if isinstance(g, Zero):
            return Zero(v.shape, g.dtype)
        return sort_permute.bind(g, key, axis=axis, descending=descending,
                                 inverse=not inverse)


class Argsort(_Ordering):
    """``out[..., i, ...]``: the index along ``axis`` of the ``i``-th key in stable order
    (int32, as TensorFlow's; no gradient)."""

    def __init__(self) -> None:
        super().__init__("argsort", ("T",), "fi", rules=(None,), out="int32")

    def prepare(self, avals, params):
        (a,) = avals
        self.check_dtypes(avals)
        return Aval(tuple(a.shape), np.dtype(np.int32)), _order_params("argsort",
                                                                       len(a.shape), params)

    def numeric(self, values, params):
        order = stable_order(np.asarray(values[0]), params["axis"], params["descending"])
        return order.astype(np.int32)

    def routine_kind(self, node):
        return "argsort"

    def build(self, atoms, params):
        (key,) = atoms
        km, lines = _lines(key, params["axis"])
        out = obj(km.shape)
        n = km.shape[-1]
        for line in lines:
            ranks = _ranks(list(km[line]), params["descending"])
            idx = [G.number(j) for j in range(n)]
            for i in range(n):
                out[line + (i,)] = _pick(ranks, idx, i)
        return np.moveaxis(out, -1, params["axis"])


class SearchSorted(_Ordering):
    """``out[..., j]``: how many of the sorted line ``s[..., :]`` lie before ``v[..., j]``
    (``s < v`` for ``side='left'``, ``s <= v`` for ``'right'``); int, no gradient."""

    def __init__(self) -> None:
        super().__init__("searchsorted", ("T", "T"), "fi", rules=(None, None), out="int32")

    def prepare(self, avals, params):
        s, v = avals
        self.check_dtypes(avals)
        side = params.get("side", "left")
        if side not in ("left", "right"):
            raise InvalidArgumentError(f"st.searchsorted: side must be 'left' or 'right', "
                                       f"got {side!r}")
        out = np.dtype(params.get("out_type", np.int32))
        if out not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise InvalidArgumentError(f"st.searchsorted: out_type must be int32 or int64, "
                                       f"got {out.name}")
        if not s.shape or not v.shape or tuple(s.shape[:-1]) != tuple(v.shape[:-1]):
            raise ShapeError(f"st.searchsorted: sorted_sequence {fmt(s.shape)} and values "
                             f"{fmt(v.shape)} must have at least one axis and the same "
                             "leading axes")
        return Aval(tuple(v.shape), out), dict(side=side, out_type=out.name,
                                               axis=len(v.shape) - 1)

    def batch(self, args, batched, params, shape):
        n = batch_size_of(args, batched)
        moved = [a if b else _spread_to(a, n) for a, b in zip(args, batched)]
        return self.bind(*moved, side=params["side"], out_type=params["out_type"])

    def numeric(self, values, params):
        s, v = (np.asarray(a) for a in values)
        lead = s.shape[:-1]
        out = np.empty(v.shape, dtype=params["out_type"])
        for row in np.ndindex(*lead):
            out[row] = np.searchsorted(s[row], v[row], side=params["side"])
        if params["side"] == "left" and v.dtype.kind == "f":
            out[np.isnan(v)] = 0  # TensorFlow's lower bound: nothing is below nan
        return out

    def build(self, atoms, params):
        # TensorFlow's bounds: 'left' counts s < v (lower_bound), 'right' counts not v < s
        # (upper_bound), so a nan value is placed first on the left and last on the right
        s, v = atoms
        left = params["side"] == "left"
        out = obj(v.shape)
        for row in np.ndindex(*v.shape[:-1]):
            for j in range(v.shape[-1]):
                x = v[row + (j,)]
                terms = [where.build_atom(less.build_atom(sk, x), G.ONE, G.ZERO) if left else
                         where.build_atom(less.build_atom(x, sk), G.ZERO, G.ONE)
                         for sk in s[row]]
                out[row + (j,)] = G.add(*terms) if terms else G.ZERO
        return out

    def element_cost(self, node) -> int:
        return node.size * node.inputs[0].shape[-1]

    def loop(self, planner, node):
        """Short lines: the element view unrolled; longer ones of floats: one block over
        the lines whose body bisects the sorted line for each of its values (a native
        branchless binary search, ``ceil(log2(n)) + 1`` comparisons a value: numpy's
        search, the eager values, on sorted lines); of integers: the output filled with 0,
        then one accumulating loop over (lines, values, sorted elements) counting the
        sorted elements before each value, as the element view counts them."""
        s, v = node.inputs
        n = s.shape[-1]
        if n <= self.UNROLLED_LINE or v.size == 0:
            return planner.unrolled(node)
        if s.dtype.kind == "f" and v.dtype.kind == "f":
            return _bounds_block(planner, node)
        locs, batched = planner.arguments(node)
        loc = planner.fresh(node, batched)
        planner.fill(loc, node.shape, 0.0, batched)
        s_acc, v_acc = (planner.access(x_loc, x.shape, batched) for x, x_loc in
                        zip(node.inputs, locs))
        out = _widened(planner.access(loc, node.shape, batched), 0)
        acc, sk, x = G.Leaf.new("acc"), G.Leaf.new("s"), G.Leaf.new("v")
        term = (where.build_atom(less.build_atom(sk, x), G.ONE, G.ZERO)
                if node.params["side"] == "left" else
                where.build_atom(less.build_atom(x, sk), G.ZERO, G.ONE))
        planner.accumulate(v.shape + (n,), G.add(acc, term), [acc, sk, x],
                           [out, _widened(s_acc, 1), _widened(v_acc, 0)], out, batched)
        return loc

    def dependencies(self, deps, params, shape):
        s, v = (np.asarray(d, dtype=object) for d in deps)
        line = np.bitwise_or.reduce(s, axis=-1, keepdims=True, initial=0)
        return np.asarray(v | np.broadcast_to(line, shape), dtype=object)


sort_permute = register_primitive(SortPermute())
argsort = register_primitive(Argsort())
searchsorted = register_primitive(SearchSorted())

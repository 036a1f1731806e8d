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
    Aval, Primitive, Zero, axis_after_batch, fmt, obj, register_primitive,
)
from symtape.ops.elementwise import (
    divide, equal, logical_and, multiply, where,
)
from symtape.ops.structural import cast, gather_flat

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["Scan", "cumsum", "cumprod", "oriented_places"]


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


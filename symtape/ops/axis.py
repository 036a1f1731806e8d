"""The softmax family (ops along one axis) and ``stop_gradient``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.primitive import (
    Aval, Primitive, Unplannable, as_obj, fmt, obj, register_primitive, batch_size, spread,
    union,
)
from symtape.ops.elementwise import exp, expm1, greater, multiply, negative, subtract, where
from symtape.ops.contraction import sum_of_products
from symtape.ops.reductions import sequential, reduce_sum
from symtape.ops.structural import expand_dims
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
F = LazyModule("F", globals(), "symtape.element.added_heads")
G = LazyModule("G", globals(), "symtape.element.graph")

# --------------------------------------------------------------------------------------------
# Softmax family
# --------------------------------------------------------------------------------------------


#: Loop nests run an op along one axis as its one-slice element view, unrolled, once per
#: slice, for slices up to this long.
SLICE_LIMIT = 1024


class AxisOp(Primitive):
    """An op over one axis of its (first) argument: per-slice builder and numeric."""

    def __init__(self, name: str, nargs: int, slice_build: Callable, numeric: Callable,
                 rules: Sequence, reduces: bool = False) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)
        self.slice_build = slice_build
        self._numeric = numeric
        self.reduces = reduces

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        shape = avals[-1].shape
        for a in avals[:-1]:
            if a.shape != shape:
                raise ShapeError(f"st.nn.{self.name}: labels shape {fmt(a.shape)} differs "
                                 f"from logits shape {fmt(shape)}")
        if not shape:
            raise ShapeError(f"st.nn.{self.name}: logits must have rank >= 1")
        axis = params.get("axis", -1)
        axis = -1 if axis is None else axis
        if not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(f"st.nn.{self.name}: invalid axis {axis} for logits of "
                                       f"rank {len(shape)}")
        axis %= len(shape)
        out = tuple(n for i, n in enumerate(shape) if i != axis) if self.reduces else shape
        return Aval(out, t), {"axis": axis}

    def build(self, atoms, params):
        axis = params["axis"]
        moved = [np.moveaxis(a, axis, -1) for a in atoms]
        lead = moved[0].shape[:-1]
        out = obj(lead if self.reduces else moved[0].shape)
        for idx in np.ndindex(*lead):
            res = self.slice_build(*[list(m[idx]) for m in moved])
            if self.reduces:
                out[idx] = res
            else:
                out[idx] = np.asarray(res, dtype=object)
        return out if self.reduces else np.moveaxis(out, -1, axis)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return self._numeric(*[np.asarray(v) for v in values], axis=params["axis"])

    def batch(self, args, batched, params, shape):
        n = batch_size(args, batched)
        return self.bind(*[spread(a, b, n) for a, b in zip(args, batched)],
                         axis=params["axis"] + 1)

    def dependencies(self, deps, params, shape):
        along = [union([d], axis=params["axis"], keepdims=not self.reduces) for d in deps]
        out = np.zeros(shape, dtype=object)
        for d in along:
            out = np.bitwise_or(out, d)
        return out

    def loop(self, planner, node):
        """One loop over the slices, its body the one-slice element view (each argument's
        slice read at the core offsets of its access); raises Unplannable for slices longer
        than :data:`SLICE_LIMIT`."""
        args, axis = node.inputs, node.params["axis"]
        length = args[-1].shape[axis]
        if length > SLICE_LIMIT:
            raise Unplannable(f"{self.name} over slices of {length}")
        lead = tuple(s for i, s in enumerate(args[-1].shape) if i != axis)
        stand_ins = [planner.stand_ins((length,), f"s{i}") for i in range(len(args))]
        atoms = self.slice_build(*[list(s) for s in stand_ins])
        locs = [planner.loc[id(a)] for a in args]
        batched = any(planner.batched(loc) for loc in locs)
        ins = [_slice_access(planner, loc, axis, lead, batched) for loc in locs]
        loc = planner.fresh(node, batched)
        if self.reduces:
            out = planner.access(loc, lead, batched)
        else:
            out = _slice_access(planner, loc, axis, lead, batched)
        return planner.body_block(node, lead, atoms, stand_ins, ins, out, loc, batched)


def _slice_access(planner, loc: tuple, axis: int, lead: tuple, batched: bool = False
                  ) -> tuple:
    """``loc`` read slice by slice along ``axis`` over the other axes ``lead``: the slice's
    elements are the access's core offsets (copied to a contiguous temporary first when
    not affine)."""
    def moved(loc):
        shift = 1 if planner.batched(loc) and axis >= 0 else 0
        offs = np.moveaxis(loc[1], axis + shift, -1)
        return np.broadcast_to(offs, planner.shape(lead, batched) + offs.shape[-1:])

    offsets = moved(loc)
    aff = planner.affine(offsets)
    if aff is None:
        loc = planner.materialise(loc)
        offsets = moved(loc)
        aff = planner.affine(offsets)
    step = aff[1][-1]
    return planner.at(loc[0], aff[0], aff[1][:-1],
                  tuple(step * t for t in range(offsets.shape[-1])))


def _stable_exps(xs):
    m = G.call(sp.Max, *xs)
    return [G.call(sp.exp, G.lincomb([(G.ONE, a), (sp.S.NegativeOne, m)])) for a in xs], m


def _softmax_slice(xs):
    if not xs:
        return []
    exps, _ = _stable_exps(xs)
    s = G.add(*exps)
    return [G.monomial(G.ONE, [(e, G.ONE), (s, sp.S.NegativeOne)]) for e in exps]


def _log_softmax_slice(xs):
    if not xs:
        return []
    exps, m = _stable_exps(xs)
    lse = G.call(sp.log, G.add(*exps))
    return [G.lincomb([(G.ONE, a), (sp.S.NegativeOne, m), (sp.S.NegativeOne, lse)]) for a in xs]


def _xent_slice(zs, xs):
    exps, m = _stable_exps(xs)
    lse = G.lincomb([(G.ONE, G.call(sp.log, G.add(*exps))), (G.ONE, m)])
    diffs = [G.lincomb([(G.ONE, lse), (sp.S.NegativeOne, x)]) for x in xs]
    return sum_of_products([[z, d] for z, d in zip(zs, diffs)])


def _softmax_np(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / sequential(e, (axis,), True)


def _log_softmax_np(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(sequential(np.exp(x - m), (axis,), True))


def _xent_np(z, x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    lse = np.log(sequential(np.exp(x - m), (axis,), True)) + m
    return sequential(z * (lse - x), (axis,), False)


def _keep(t, axis):
    return expand_dims.bind(t, axis=axis)


# ---- derivative rules ----------------------------------------------------------------------
# 1 - softmax keeps no digit where softmax rounds to 1 (1e-3 relative error at a logit gap of
# 30), so the rules below write the complement without that subtraction; every term of theirs
# is then a product of accurate factors, and their derivatives, taken by the same rules (of
# log_softmax, exp and expm1), are again.
_DOMINANT = -0.5  # log_softmax above this: softmax > 0.6, and the others' are all below 0.4


def _complement(ls, s, lead, axis):
    """``1 - softmax`` from ``ls = log_softmax``, ``s = exp(ls)`` and ``lead = ls >
    _DOMINANT``: ``-expm1(ls)``, and where one element dominates, the others' softmax summed."""
    return where.bind(lead, _others(s, lead, axis), negative.bind(expm1.bind(ls)))


def _others(t, lead, axis):
    """``sum(t) - t`` along ``axis``; at the dominant element, the other elements summed (the
    subtraction would leave there the rounding of ``t``'s largest element, which the sweeps of
    the next order meet where ``t`` is a cotangent)."""
    rest = reduce_sum.bind(where.bind(lead, 0.0, t), axis=axis, keepdims=True)
    return where.bind(lead, rest, subtract.bind(reduce_sum.bind(t, axis=axis, keepdims=True), t))


def _log_softmax_rule(g, ans, x, axis):
    """``g - softmax * sum(g)``, written ``g (1 - softmax) - softmax (sum(g) - g)``."""
    s, lead = exp.bind(ans), greater.bind(ans, _DOMINANT)
    return subtract.bind(multiply.bind(g, _complement(ans, s, lead, axis)),
                         multiply.bind(s, _others(g, lead, axis)))


def _xent_logits_rule(g, ans, z, x, axis):
    """``g (softmax sum(z) - z)``, written ``g (softmax (sum(z) - z) - z (1 - softmax))``."""
    ls = log_softmax.bind(x, axis=axis)
    s, lead = exp.bind(ls), greater.bind(ls, _DOMINANT)
    d = subtract.bind(multiply.bind(s, _others(z, lead, axis)),
                      multiply.bind(z, _complement(ls, s, lead, axis)))
    return multiply.bind(_keep(g, axis), d)


softmax = register_primitive(AxisOp(
    "softmax", 1, _softmax_slice, _softmax_np,
    (lambda g, ans, x, axis: multiply.bind(ans, subtract.bind(
        g, reduce_sum.bind(multiply.bind(g, ans), axis=axis, keepdims=True))),)))
log_softmax = register_primitive(AxisOp("log_softmax", 1, _log_softmax_slice, _log_softmax_np,
                               (_log_softmax_rule,)))
# TF: d/dlogits = softmax - labels, d/dlabels = -log_softmax
softmax_cross_entropy_with_logits = register_primitive(AxisOp(
    "softmax_cross_entropy_with_logits", 2, _xent_slice, _xent_np,
    (lambda g, ans, z, x, axis: multiply.bind(_keep(g, axis), negative.bind(
        log_softmax.bind(x, axis=axis))),
     _xent_logits_rule), reduces=True))


# --------------------------------------------------------------------------------------------
# stop_gradient
# --------------------------------------------------------------------------------------------


class StopGradient(Primitive):
    """The identity with no derivative: ``stop_gradient(x)`` in formulas, ``x`` in code."""

    def __init__(self) -> None:
        super().__init__("stop_gradient", ("T",), "fib", rules=(None,))

    def shape_rule(self, shapes, params):
        return shapes[0]

    def build(self, atoms, params):
        def one(a):
            return a if G.is_const(a) else G.alias(F.StopGradient, (a,), a)

        return as_obj(np.frompyfunc(one, 1, 1)(atoms[0]), atoms[0].shape)

    def numeric(self, values, params):
        return np.array(values[0], copy=True)

    def batch(self, args, batched, params, shape):
        return self.bind(args[0])

    def dependencies(self, deps, params, shape):
        return deps[0]

    loop_view = True

    def loop(self, planner, node):
        """A view: its argument's location."""
        return planner.loc[id(node.inputs[0])]


stop_gradient = register_primitive(StopGradient())


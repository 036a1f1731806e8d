"""Reductions over axes: sums, means, products, extrema, logsumexp, norms."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from symtape.base.errors import InvalidArgumentError
from symtape.core.primitive import (
    Aval, Primitive, obj, register_primitive, union, zero_factor,
)
from symtape.ops.elementwise import divide, equal, exp, multiply, subtract, where
from symtape.ops.structural import (
    broadcast_to, cast, concat, gather, getitem, reshape, stack, transpose,
)
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")

# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


#: Sums and contractions of at most this many terms are taken in the order the graph's
#: definitions add (so small results round exactly as their element view); larger ones in
#: numpy's and BLAS's order, as the loop nests of compiled code for large tensors do.
ORDERED_TERMS = 1 << 16


def _reduced(atoms: np.ndarray, axes: tuple, keepdims: bool, combine: Callable) -> np.ndarray:
    """Apply ``combine(list_of_atoms) -> atom`` over ``axes`` of an object array."""
    keep = [i for i in range(atoms.ndim) if i not in axes]
    moved = np.transpose(atoms, keep + list(axes))
    lead = moved.shape[: len(keep)]
    size = int(np.prod([atoms.shape[i] for i in axes], dtype=np.int64))
    rows = moved.reshape(int(np.prod(lead, dtype=np.int64)), size)
    out = obj(rows.shape[:1])
    for i in range(rows.shape[0]):
        out[i] = combine(list(rows[i]))
    out = out.reshape(lead)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(atoms.shape)))
    return out


def sequential(x: np.ndarray, axes: tuple, keepdims: bool, product: bool = False):
    """Sum (product) over ``axes`` left to right, in the order the graph's definitions add
    (multiply), so eager values round exactly as compiled code does (callers set numpy's
    error state)."""
    x = np.asarray(x)
    accumulate = (np.multiply if product else np.add).accumulate
    if len(axes) == x.ndim and not keepdims and 0 < x.size <= ORDERED_TERMS:  # all of it
        return accumulate(x.reshape(-1))[-1]
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, keep + list(axes))
    lead = moved.shape[: len(keep)]
    rows = moved.reshape(lead + (-1,)) if moved.size else moved.reshape(
        lead + (int(np.prod([x.shape[i] for i in axes], dtype=np.int64)),))
    if rows.shape[-1] == 0:
        out = np.full(lead, 1 if product else 0, dtype=x.dtype)
    elif rows.size > ORDERED_TERMS:  # large: numpy's order, as loop nests accumulate
        out = (np.prod if product else np.sum)(rows, axis=-1)
    else:
        out = accumulate(rows, axis=-1)[..., -1]
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return out


def _expand_back(t, shape: tuple, axes: tuple, keepdims: bool):
    """Broadcast a reduced tensor (or cotangent) back to ``shape``."""
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    if not keepdims and tuple(t.shape) != kept:
        t = reshape.bind(t, shape=kept)
    return broadcast_to.bind(t, shape=tuple(shape)) if kept != tuple(shape) else t


class Reduction(Primitive):
    """``combine`` over ``axis`` (None: all) with ``keepdims``; ``numeric(x, axes, kd)``."""

    def __init__(self, name: str, combine: Callable, numeric: Callable, rule: Callable | None,
                 kinds: str = "fi") -> None:
        super().__init__(name, ("T",), kinds, rules=(rule,))
        self.combine = combine
        self._numeric = numeric

    #: How loop nests accumulate it: ``(start, step(acc, x, n), value over no element)``
    #: (``n``: the elements reduced into each), or None: no loop form (unrolled).
    loop_form: tuple | None = None
    #: The total over points its terms add to (``'sum'``, ``'max'``, ``'min'``), or None;
    #: ``averages``: it is that total scaled by the count (a mean's sum).
    total: str | None = None
    averages = False

    def reads_operand(self, node) -> bool:
        """Its loop reads its argument's elements through ``planner.operand`` (an
        elementwise argument is computed inside the accumulating loop)."""
        return self.loop_form is not None and node.dtype.kind in "fiu"

    def loop(self, planner, node):
        """The output filled with the start value, then one accumulating loop over the
        argument's shape adding each element into its place, elements in order (an
        elementwise argument read once computed in that loop)."""
        if self.loop_form is None or not planner.numeric(node):
            return planner.unrolled(node)
        (x,) = node.inputs
        term, leaves, ins, batched = planner.operand(x)
        axes = node.params["axis"]
        start, step, empty = self.loop_form
        n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
        loc = planner.fresh(node, batched)
        planner.fill(loc, node.shape, start if n else empty, batched)
        if n == 0 or x.size == 0:
            return loc
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        out_offsets = np.broadcast_to(loc[1].reshape(planner.shape(kept, batched)),
                                      planner.shape(x.shape, batched))
        acc = G.Leaf.new("acc")
        out = planner.at(loc[0], 0, planner.affine(out_offsets)[1])
        planner.accumulate(x.shape, step(acc, term, n), [acc] + leaves, [out] + ins, out,
                           batched)
        if self.total == "sum":  # (a sum of selects' zeros only is exactly 0)
            planner.live_count(node, x, x.shape, out, batched)
        return loc

    def total_from_args(self, node, kind):
        """A sum of sums, a maximum of maxima: the argument's terms accumulate directly."""
        return node.dtype.kind == "f" and self.total == kind

    def loop_total(self, planner, node, buf):
        """The total over points accumulated from the argument's elements."""
        (x,) = node.inputs
        axes = node.params["axis"]
        n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        offsets = np.broadcast_to(planner.flat(node.shape).reshape(kept), x.shape)
        aff = planner.affine(offsets)
        out = planner.at(buf, aff[0], (0,) + aff[1])
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        if x.size:
            planner.accumulate((planner.P,) + x.shape, self.loop_form[1](acc, term, n),
                               [acc, term], [out, planner.access(planner.loc[id(x)], x.shape,
                                                                 True)], out, count=0)

    def prepare(self, avals, params):
        (a,) = avals
        axes = normalize_axes(params.get("axis"), len(a.shape), self.name)
        keepdims = bool(params.get("keepdims", False))
        t = self.check_dtypes(avals)
        shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape)) if keepdims else \
            tuple(n for i, n in enumerate(a.shape) if i not in axes)
        return Aval(shape, self.out_dtype(t)), {"axis": axes, "keepdims": keepdims}

    def build(self, atoms, params):
        return _reduced(atoms[0], params["axis"], params["keepdims"], self.combine)

    def batch(self, args, batched, params, shape):
        return self.bind(args[0], axis=tuple(a + 1 for a in params["axis"]),
                         keepdims=params["keepdims"])

    def dependencies(self, deps, params, shape):
        out = union(deps, axis=params["axis"], keepdims=params["keepdims"])
        return np.asarray(out, dtype=object).reshape(shape)

    #: Whether the result is 0 where every reduced element is (sums, products, extrema).
    keeps_zeros = False

    def structure(self, args, params, shape):
        (x,) = args
        lane = int(np.prod([x.shape[i] for i in params["axis"]], dtype=np.int64))
        if self.keeps_zeros and lane >= 1:
            zero = zero_factor(args)
            if zero is not None:
                return False, zero, None
        return x.regular and lane >= 2 and x.dtype.kind == "f", None, None

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return np.asarray(self._numeric(np.asarray(values[0]), params["axis"],
                                            params["keepdims"]))

    def evaluator(self, args, params):
        fn, axes, keepdims = self._numeric, params["axis"], params["keepdims"]
        return lambda values: np.asarray(fn(np.asarray(values[0]), axes, keepdims))


def normalize_axes(axis, ndim: int, op: str) -> tuple:
    """Axes as a sorted tuple of non-negative ints; None means all."""
    if axis is None:
        return tuple(range(ndim))
    if hasattr(axis, "numpy") and not isinstance(axis, (list, tuple)):
        axis = axis.numpy()
    axes = np.atleast_1d(np.asarray(axis)).tolist()
    out = set()
    for ax in axes:
        if not isinstance(ax, int) or not -ndim <= ax < max(ndim, 1):
            raise InvalidArgumentError(f"st.{op}: invalid axis {ax!r} for a tensor of rank "
                                       f"{ndim}")
        out.add(ax % max(ndim, 1))
    return tuple(sorted(out))


def _sum_rule(g, ans, x, axis, keepdims):
    return _expand_back(g, x.shape, axis, keepdims)


def _mean_rule(g, ans, x, axis, keepdims):
    n = int(np.prod([x.shape[i] for i in axis], dtype=np.int64))
    return _expand_back(divide.bind(g, n), x.shape, axis, keepdims)


def _mean_combine(parts):
    n = len(parts)
    if n == 0:
        return sp.S.NaN
    w = sp.Rational(1, n)
    return G.lincomb([(w, a) for a in parts])


def _max_rule(g, ans, x, axis, keepdims):
    # TF: ties share the gradient equally. The elements not taken get an exact 0 (a select's
    # zero branch), also where none is taken (a nan extremum: count 0), on every path.
    y = _expand_back(ans, x.shape, axis, keepdims)
    taken = equal.bind(y, x)
    count = reduce_sum.bind(cast.bind(taken, dtype=x.dtype), axis=axis, keepdims=True)
    gb = _expand_back(g, x.shape, axis, keepdims)
    share = divide.bind(gb, broadcast_to.bind(count, shape=tuple(x.shape)))
    return where.bind(taken, share, 0.0)


def _prod_rule(g, ans, x, axis, keepdims):
    """d prod / d x_i = product of the other elements (exact where some x_j are zero)."""
    keep = [i for i in range(len(x.shape)) if i not in axis]
    n = int(np.prod([x.shape[i] for i in axis], dtype=np.int64))
    lead = tuple(x.shape[i] for i in keep)
    moved = reshape.bind(transpose.bind(x, perm=tuple(keep + list(axis))), shape=lead + (n,))
    if n >= 2:
        partial = _others_product(moved)
    else:  # the empty product of no others
        excl = gather.bind(moved, indices=np.zeros((n, 0), dtype=np.int64), axis=len(lead),
                           batch_dims=0)
        partial = reduce_prod.bind(excl, axis=len(lead) + 1, keepdims=False)
    full = reshape.bind(partial, shape=lead + tuple(x.shape[i] for i in axis))
    inv = tuple(np.argsort(keep + list(axis)))
    partial_x = transpose.bind(full, perm=inv)
    return multiply.bind(_expand_back(g, x.shape, axis, keepdims), partial_x)


def _others_product(x):
    """For ``x`` of shape ``lead + (m,)``, m >= 2: element ``i`` the product of the other
    elements along the last axis, by a tree of pairwise products (the pairs' products up,
    each pair's product of the others down): O(m) multiplications in O(log m) ops, no
    division (exact where elements are zero), each op one with a loop form."""
    m = x.shape[-1]
    lead, k = tuple(x.shape[:-1]), m // 2
    dots = (slice(None),) * len(lead)
    a = getitem.bind(x, key=dots + (slice(0, 2 * k, 2),))
    b = getitem.bind(x, key=dots + (slice(1, 2 * k, 2),))
    up = multiply.bind(a, b)
    if m % 2:
        up = concat.bind(up, getitem.bind(x, key=dots + (slice(m - 1, m),)), axis=len(lead))
    if up.shape[-1] == 1:  # m == 2: each is the other
        return reshape.bind(stack.bind(b, a, axis=len(lead) + 1), shape=lead + (m,))
    above = _others_product(up)  # each pair's (and the odd one's) product of the others
    pair = getitem.bind(above, key=dots + (slice(0, k),)) if m % 2 else above
    down = stack.bind(multiply.bind(pair, b), multiply.bind(pair, a), axis=len(lead) + 1)
    down = reshape.bind(down, shape=lead + (2 * k,))
    if m % 2:
        down = concat.bind(down, getitem.bind(above, key=dots + (slice(k, k + 1),)),
                           axis=len(lead))
    return down


def _lse_combine(parts):
    """logsumexp, stable: m + log(sum(exp(x - m))) with m = max, 0 where m is not finite."""
    if not parts:
        return sp.S.NegativeInfinity
    m = G.call(sp.Max, *parts)
    finite = G.relation(sp.StrictLessThan, G.call(sp.Abs, m), sp.S.Infinity)
    shift = G.piecewise((m, finite), (G.ZERO, sp.S.true))
    exps = [G.call(sp.exp, G.lincomb([(G.ONE, a), (sp.S.NegativeOne, shift)])) for a in parts]
    return G.lincomb([(G.ONE, G.call(sp.log, G.add(*exps))), (G.ONE, shift)])


def _lse_numeric(x, axes, keepdims):
    if x.size == 0 or not axes:
        return np.log(sequential(np.exp(x), axes, keepdims))
    m = np.max(x, axis=axes, keepdims=True)
    shift = np.where(np.abs(m) < np.inf, m, 0)
    out = np.log(sequential(np.exp(x - shift), axes, True)) + shift
    return out if keepdims else np.squeeze(out, axis=axes)


def _mean_numeric(x, axes, keepdims):
    n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    if n == 0:
        return np.full(sequential(x, axes, keepdims).shape, np.nan)
    return sequential(x * (1.0 / n), axes, keepdims)


def _norm_combine(parts):
    return G.power(G.add(*[G.monomial(G.ONE, [(a, sp.Integer(2))]) for a in parts]),
                   sp.Rational(1, 2))


reduce_sum = register_primitive(Reduction("reduce_sum", lambda p: G.add(*p), sequential, _sum_rule))
reduce_mean = register_primitive(Reduction("reduce_mean", _mean_combine, _mean_numeric, _mean_rule))
reduce_sum.sums = reduce_mean.sums = True  # (structural zeros: see Primitive.sums)
reduce_prod = register_primitive(Reduction("reduce_prod", lambda p: G.mul(*p),
                                  lambda x, a, k: sequential(x, a, k, product=True),
                                  _prod_rule))
reduce_max = register_primitive(Reduction(
    "reduce_max", lambda p: G.call(sp.Max, *p) if p else sp.S.NegativeInfinity,
    lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=-np.inf) if x.dtype.kind == "f"
    else np.max(x, axis=a, keepdims=k), _max_rule))
reduce_min = register_primitive(Reduction(
    "reduce_min", lambda p: G.call(sp.Min, *p) if p else sp.S.Infinity,
    lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=np.inf) if x.dtype.kind == "f"
    else np.min(x, axis=a, keepdims=k), _max_rule))
reduce_logsumexp = register_primitive(Reduction(
    "reduce_logsumexp", _lse_combine, _lse_numeric,
    lambda g, ans, x, axis, keepdims: multiply.bind(
        _expand_back(g, x.shape, axis, keepdims),
        exp.bind(subtract.bind(x, _expand_back(ans, x.shape, axis, keepdims)))), kinds="f"))
for _r in (reduce_sum, reduce_mean, reduce_prod, reduce_max, reduce_min):
    _r.keeps_zeros = True
reduce_sum.loop_form = (-0.0, lambda acc, x, n: G.add(acc, x), 0.0)
reduce_mean.loop_form = (-0.0, lambda acc, x, n: G.add(acc, G.mul(x, G.number(1.0 / n))), np.nan)
reduce_prod.loop_form = (1.0, lambda acc, x, n: G.mul(acc, x), 1.0)
reduce_max.loop_form = (-np.inf, lambda acc, x, n: G.call(sp.Max, acc, x), -np.inf)
reduce_min.loop_form = (np.inf, lambda acc, x, n: G.call(sp.Min, acc, x), np.inf)
reduce_sum.total = reduce_mean.total = "sum"
reduce_max.total, reduce_min.total = "max", "min"
reduce_mean.averages = True
reduce_euclidean_norm = register_primitive(Reduction(
    "reduce_euclidean_norm", _norm_combine,
    lambda x, a, k: np.sqrt(sequential(x * x, a, k)),
    lambda g, ans, x, axis, keepdims: multiply.bind(
        _expand_back(g, x.shape, axis, keepdims),
        divide.bind(x, _expand_back(ans, x.shape, axis, keepdims))), kinds="f"))


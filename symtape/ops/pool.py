"""Pooling: the maximum of each window and the two linear maps of its derivative; the sum
of each window and its transpose (average pooling divides it by the window's count).

For an input ``x`` (NHWC), windows of ``ksize`` taps every ``strides`` (unpadded: padding is
a ``pad`` with ``-inf`` before it) and taps numbered ``k = p * kw + q``:

- ``max_pool2d(x)``: each window's running maximum ``m_k = maximum(m_{k-1}, t_k)``, taps in
  order (as a chain of ``maximum`` ops is);
- ``max_pool2d_pick(x, h)``: pool-shaped, each window's element of ``h`` (``x``-shaped) at
  the tap the maximum came from: the first largest, as TensorFlow's gradient takes it;
- ``max_pool2d_grad(x, g)``: ``x``-shaped, each window's ``g`` added at that tap (windows
  in order where they overlap; zero where no window reaches).

- ``sum_pool2d(x)``: each window's sum, taps in order; ``sum_pool2d_grad(g, size)``:
  ``x``-shaped (``size``: its height and width), each place the sum of the ``g`` of the
  windows that cover it, windows in order (the derivative of either is the other).

``max_pool2d``'s derivative is ``max_pool2d_grad``; ``pick`` and ``grad`` are each other's
transpose in their second argument, and piecewise constant (a zero derivative) in ``x``.
Which tap a window takes follows ``maximum``'s rule: step ``k`` keeps the earlier taps where
``m_{k-1} >= t_k`` (after a NaN tap, the running maximum is NaN and every later tap is
taken, as in the chain), which the numeric evaluation, the element view (``maximum``'s
derivative templates) and the loop lowering all follow.
"""

from __future__ import annotations

import functools

import numpy as np

from symtape.base.errors import ShapeError
from symtape.ops.conv import Dims, fill_unreached, positive_pair, reached, windows
from symtape.core.primitive import (
    Aval, P, Primitive, Zero, fmt, obj, register_primitive, spread, union,
)
from symtape.ops.elementwise import maximum
from symtape.ops.structural import reshape
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")


@functools.cache
def _templates() -> tuple:
    """``(keep, take, step)``: ``maximum(m, t)``'s derivative templates -- what reaches the
    kept earlier taps, and tap t -- and one step of a pick: the earlier pick ``x`` where
    ``m >= t`` (``y``, ``w``), else ``g``."""
    keep = G.compile_template(sp.Piecewise((P.g, P.x >= P.y), (0, True)), P.of("g x y"))
    take = G.compile_template(sp.Piecewise((0, P.x >= P.y), (P.g, True)), P.of("g x y"))
    step = G.compile_template(sp.Piecewise((P.x, P.y >= P.w), (P.g, True)), P.of("x y w g"))
    return keep, take, step


def pool_dims(name: str, shape: tuple, params: dict) -> Dims:
    """The :class:`~symtape.ops.conv.Dims` of pooling an input of ``shape`` (``o`` is
    ``c``)."""
    kh, kw = positive_pair(params.get("ksize"), name, "ksize")
    sh, sw = positive_pair(params.get("strides"), name, "strides")
    if len(shape) != 4:
        raise ShapeError(f"st.{name}: argument x must be NHWC (rank 4), got shape "
                         f"{fmt(shape)}")
    n, h, w, c = shape
    if h < kh or w < kw:
        raise ShapeError(f"st.{name}: a {kh}x{kw} window does not fit an input of {h}x{w}")
    return Dims(n=n, h=h, w=w, c=c, kh=kh, kw=kw, o=c, oh=(h - kh) // sh + 1,
                ow=(w - kw) // sw + 1, sh=sh, sw=sw)


def added_to_taps(value, d: Dims, dtype) -> np.ndarray:
    """``x``-shaped: ``value(k)`` (pool-shaped, what each window gives its tap ``k``) added
    at the taps, windows in order (so a place's terms come in its definition's order), from
    -0.0; places no window covers are 0."""
    out = np.full(d.shape("x"), -0.0, dtype=dtype)
    for k in range(d.kh * d.kw - 1, -1, -1):  # windows in order: their taps backwards
        p, q = divmod(k, d.kw)
        out[(slice(None),) + d.rows(p, q)] += value(k)
    out[:, ~reached(d), :] = 0.0
    return out


def covering(deps: np.ndarray, d: Dims) -> np.ndarray:
    """``x``-shaped dependencies: at each place, the union of the pool-shaped ``deps`` of the
    windows covering it."""
    out = np.zeros(d.shape("x"), dtype=object)
    for p in range(d.kh):
        for q in range(d.kw):
            at = (slice(None),) + d.rows(p, q)
            out[at] = np.bitwise_or(out[at], deps)
    return out


def taken(xw: np.ndarray) -> tuple:
    """``(tap, maximum)`` of windows ``(n, oh, ow, taps, c)`` (floats): the tap each
    window's maximum comes from, by ``maximum``'s rule, and the maximum."""
    m = xw[:, :, :, 0]
    tap = np.zeros(m.shape, dtype=np.int64)
    for k in range(1, xw.shape[3]):
        t = xw[:, :, :, k]
        tap = np.where(m >= t, tap, k)
        m = np.maximum(m, t)
    return tap, m


def chain(taps: list) -> list:
    """The running maxima ``m_0 .. m_{K-1}`` of atoms ``taps``."""
    out = [taps[0]]
    for t in taps[1:]:
        out.append(maximum._build_one(out[-1], t))
    return out


def pick_atom(taps: list, values: list):
    """The atom of the element of ``values`` at the tap the maximum of ``taps`` takes."""
    m = chain(taps)
    step = _templates()[2]
    out = values[0]
    for k in range(1, len(taps)):
        out = step(out, m[k - 1], taps[k], values[k])
    return out


def spread_atoms(taps: list, g) -> list:
    """What each tap of a window receives of its cotangent ``g``: ``g`` at the tap taken,
    zero at the others (``maximum``'s derivative, back along the chain)."""
    m = chain(taps)
    keep, take, _ = _templates()
    out = [None] * len(taps)
    for k in range(len(taps) - 1, 0, -1):
        out[k] = take(g, m[k - 1], taps[k])
        g = keep(g, m[k - 1], taps[k])
    out[0] = g
    return out


def atoms_at_taps(d: Dims, terms) -> np.ndarray:
    """The input's atoms when each window's ``terms(n, i, j, c)`` (one atom per tap, row by
    row) are added at its taps, windows in order (0 where no window reaches)."""
    parts = np.empty(d.shape("x"), dtype=object)  # each place's contributions
    for idx in np.ndindex(*parts.shape):
        parts[idx] = []
    for n, i, j, c in np.ndindex(d.n, d.oh, d.ow, d.c):
        for k, a in enumerate(terms(n, i, j, c)):
            p, q = divmod(k, d.kw)
            parts[n, i * d.sh + p, j * d.sw + q, c].append(a)
    out = obj(d.shape("x"))
    for idx in np.ndindex(*out.shape):
        if parts[idx]:
            out[idx] = sum_atoms(parts[idx])
    return out


def sum_atoms(atoms: list):
    """The atom of the sum of ``atoms`` (the one atom itself when alone)."""
    if len(atoms) == 1:
        return atoms[0]
    const, terms = G.ZERO, []
    for a in atoms:
        if G.is_const(a):
            const = G.c_add(const, a)
        else:
            terms.append((G.ONE, a))
    return G.lincomb(terms, const)


class Pooling(Primitive):
    """What the pooling ops share: the forward op (``forward``, a window's maximum or sum)
    of regular floats is regular, their other ops (derivative maps) are not; every element is
    settled where an argument holds a constant or a repeated atom; batches merge into the
    images axis."""

    forward = ""

    def structure(self, args, params, shape):
        x = args[0]
        regular = self.name == self.forward and x.regular and x.dtype.kind == "f"
        return regular and not x.constant, None, None

    def batch(self, args, batched, params, shape):
        """Every argument with the batch in front (shared ones repeated), merged into the
        images axis."""
        nb = next(int(a.shape[0]) for a, b in zip(args, batched) if b)
        merged = []
        for a, b in zip(args, batched):
            full = spread(a, b, nb)
            merged.append(reshape.bind(full, shape=(nb * int(full.shape[1]),)
                                       + tuple(full.shape[2:])))
        out = self.bind(*merged, **params)
        return reshape.bind(out, shape=(nb,) + tuple(shape))

    def loop(self, planner, node):
        """One loop over the windows ``(n, i, j, c)``, the body reading every tap (the core
        offsets of the accesses): the running maximum, or sum; the pick of the second
        argument; or, for the gradients, the window's cotangent added at its taps (an
        accumulation, windows in order, over an output of -0.0)."""
        x = node.inputs[0]
        pts = any(planner.batched(planner.loc[id(a)]) for a in node.inputs)
        d = self.dims(x.shape, node.params)
        taps = [(p, q) for p in range(d.kh) for q in range(d.kw)]
        space = (d.n, d.oh, d.ow, d.c)
        loc = planner.fresh(node, pts)

        def windows_of(loc):  # an input-shaped location read window by window
            acc = planner.access(loc, d.shape("x"), pts)
            sn, sh_, sw_, sc = acc.strides[pts:]
            return planner.at(acc.buffer, acc.offset,
                          acc.strides[:pts] + (sn, d.sh * sh_, d.sw * sw_, sc),
                          tuple(p * sh_ + q * sw_ for p, q in taps))

        t = planner.stand_ins((len(taps),), "t")
        if self.name == "sum_pool2d_grad":  # each window's g added at its taps
            planner.fill(loc, node.shape, -0.0, pts)
            acc, g = planner.stand_ins((len(taps),), "acc"), G.Leaf.new("g")
            value = np.array([G.add(a, g) for a in acc], dtype=object)
            body = planner.build_plan([value], [acc, np.asarray(g, dtype=object)])
            out = windows_of(loc)
            planner.block(space, body, (out, planner.access(planner.loc[id(x)], space, pts)),
                          (out,), accumulate=True, batched=pts)
            fill_unreached(planner, loc, d)
            return loc
        rx = windows_of(planner.loc[id(x)])
        if self.name == self.forward:  # max_pool2d, sum_pool2d
            value = chain(list(t))[-1] if self.name == "max_pool2d" else sum_atoms(list(t))
            body = planner.build_plan([np.asarray(value, dtype=object)], [t])
            planner.block(space, body, (rx,), (planner.access(loc, space, pts),), batched=pts)
            return loc
        other = planner.loc[id(node.inputs[1])]
        if self.name == "max_pool2d_pick":
            h = planner.stand_ins((len(taps),), "h")
            body = planner.build_plan([np.asarray(pick_atom(list(t), list(h)), dtype=object)], [t, h])
            planner.block(space, body, (rx, windows_of(other)),
                          (planner.access(loc, space, pts),), batched=pts)
            return loc
        planner.fill(loc, node.shape, -0.0, pts)  # max_pool2d_grad
        acc, g = planner.stand_ins((len(taps),), "acc"), G.Leaf.new("g")
        value = np.array([G.add(a, s) for a, s in zip(acc, spread_atoms(list(t), g))],
                         dtype=object)
        body = planner.build_plan([value], [acc, t, np.asarray(g, dtype=object)])
        out = windows_of(loc)
        planner.block(space, body, (out, rx, planner.access(other, space, pts)), (out,),
                      accumulate=True, batched=pts)
        fill_unreached(planner, loc, d)
        return loc


class MaxPool(Pooling):
    """One of the three max-pooling ops (see the module's docstring)."""

    forward = "max_pool2d"

    def __init__(self, name: str) -> None:
        nargs = 1 if name == "max_pool2d" else 2
        super().__init__(name, ("T",) * nargs, "fi" if nargs == 1 else "f",
                         rules=(self._rule0,) if nargs == 1 else (self._zero, self._rule1))

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        keep = {"ksize": positive_pair(params.get("ksize"), self.name, "ksize"),
                "strides": positive_pair(params.get("strides"), self.name, "strides")}
        d = pool_dims(self.name, avals[0].shape, keep)
        pooled = (d.n, d.oh, d.ow, d.c)
        if self.name != "max_pool2d":
            want = pooled if self.name == "max_pool2d_grad" else d.shape("x")
            if tuple(avals[1].shape) != want:
                role = "g" if self.name == "max_pool2d_grad" else "h"
                raise ShapeError(f"st.{self.name}: argument {role} must have shape "
                                 f"{fmt(want)}, got {fmt(avals[1].shape)}")
        return Aval(d.shape("x") if self.name == "max_pool2d_grad" else pooled, t), keep

    def dims(self, shape, params) -> Dims:
        return pool_dims(self.name, shape, params)

    # -- values ----------------------------------------------------------------------------
    def numeric(self, values, params):
        x = np.asarray(values[0])
        d = self.dims(x.shape, params)
        if self.name == "max_pool2d":  # the chain's maximum (NaN spreads as through maximum)
            return np.max(windows(x, d), axis=3)
        tap, _ = taken(windows(x, d))
        other = np.asarray(values[1])
        if self.name == "max_pool2d_pick":
            return np.take_along_axis(windows(other, d), tap[:, :, :, None], axis=3)[:, :, :, 0]
        return added_to_taps(lambda k: np.where(tap == k, other, 0.0), d, other.dtype)

    def build(self, atoms, params):
        x = atoms[0]
        d = self.dims(x.shape, params)
        xw = windows(x, d)
        if self.name == "max_pool2d":
            out = obj((d.n, d.oh, d.ow, d.c))
            for idx in np.ndindex(*out.shape):
                out[idx] = chain(list(xw[idx[:3] + (slice(None), idx[3])]))[-1]
            return out
        other = atoms[1]
        if self.name == "max_pool2d_pick":
            hw = windows(other, d)
            out = obj((d.n, d.oh, d.ow, d.c))
            for idx in np.ndindex(*out.shape):
                at = idx[:3] + (slice(None), idx[3])
                out[idx] = pick_atom(list(xw[at]), list(hw[at]))
            return out
        return atoms_at_taps(d, lambda n, i, j, c: spread_atoms(list(xw[n, i, j, :, c]),
                                                                 other[n, i, j, c]))

    # -- derivatives -----------------------------------------------------------------------
    def _rule0(self, g, ans, x, **params):
        return max_pool2d_grad.bind(x, g, **params)

    @staticmethod
    def _zero(g, ans, x, other, **params):
        return Zero(x.shape, x.dtype)

    def _rule1(self, g, ans, x, other, **params):
        partner = max_pool2d_pick if self.name == "max_pool2d_grad" else max_pool2d_grad
        return partner.bind(x, g, **params)

    # -- batching --------------------------------------------------------------------------

    # -- sparsity --------------------------------------------------------------------------
    def dependencies(self, deps, params, shape):
        x = deps[0]
        d = self.dims(x.shape, params)
        xs = union([windows(x, d)], axis=3)  # (n, oh, ow, c)
        if self.name == "max_pool2d":
            return xs
        other = deps[1]
        if self.name == "max_pool2d_pick":
            return np.bitwise_or(xs, union([windows(other, d)], axis=3)).astype(object)
        return covering(np.bitwise_or(xs, other), d)


max_pool2d = register_primitive(MaxPool("max_pool2d"))
max_pool2d_grad = register_primitive(MaxPool("max_pool2d_grad"))
max_pool2d_pick = register_primitive(MaxPool("max_pool2d_pick"))


class SumPool(Pooling):
    """``sum_pool2d`` or its transpose ``sum_pool2d_grad`` (see the module's docstring)."""

    forward = "sum_pool2d"

    def __init__(self, name: str) -> None:
        super().__init__(name, ("T",), "fi", rules=(self._rule,))

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        keep = {"ksize": positive_pair(params.get("ksize"), self.name, "ksize"),
                "strides": positive_pair(params.get("strides"), self.name, "strides")}
        shape = tuple(avals[0].shape)
        if self.name == "sum_pool2d_grad":
            keep["size"] = positive_pair(params.get("size"), self.name, "size")
            if len(shape) != 4:
                raise ShapeError(f"st.{self.name}: argument g must be NHWC (rank 4), got "
                                 f"shape {fmt(shape)}")
            d = self.dims(shape, keep)
            if (d.n, d.oh, d.ow, d.c) != shape:
                raise ShapeError(f"st.{self.name}: argument g must have shape "
                                 f"{fmt((d.n, d.oh, d.ow, d.c))}, got {fmt(shape)}")
            return Aval(d.shape("x"), t), keep
        d = self.dims(shape, keep)
        return Aval((d.n, d.oh, d.ow, d.c), t), keep

    def dims(self, shape, params) -> Dims:
        """The dims of the pooling; for the transpose, of the pooling of its result."""
        if self.name == "sum_pool2d_grad":
            shape = (shape[0],) + tuple(params["size"]) + (shape[3],)
        return pool_dims(self.name, shape, params)

    def numeric(self, values, params):
        a = np.asarray(values[0])
        d = self.dims(a.shape, params)
        if self.name == "sum_pool2d":
            xw = windows(a, d)
            out = xw[:, :, :, 0]
            for k in range(1, xw.shape[3]):  # taps in order
                out = out + xw[:, :, :, k]
            return out
        return added_to_taps(lambda k: a, d, a.dtype)

    def build(self, atoms, params):
        a = atoms[0]
        d = self.dims(a.shape, params)
        if self.name == "sum_pool2d":
            xw = windows(a, d)
            out = obj((d.n, d.oh, d.ow, d.c))
            for idx in np.ndindex(*out.shape):
                out[idx] = sum_atoms(list(xw[idx[:3] + (slice(None), idx[3])]))
            return out
        return atoms_at_taps(d, lambda n, i, j, c: [a[n, i, j, c]] * (d.kh * d.kw))

    def _rule(self, g, ans, a, **params):
        if self.name == "sum_pool2d":
            return sum_pool2d_grad.bind(g, size=tuple(a.shape[1:3]), **params)
        return sum_pool2d.bind(g, ksize=params["ksize"], strides=params["strides"])

    def dependencies(self, deps, params, shape):
        (a,) = deps
        d = self.dims(a.shape, params)
        if self.name == "sum_pool2d":
            return union([windows(a, d)], axis=3)
        return covering(a, d)


sum_pool2d = register_primitive(SumPool("sum_pool2d"))
sum_pool2d_grad = register_primitive(SumPool("sum_pool2d_grad"))

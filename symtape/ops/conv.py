"""Convolutions: one trilinear form read three ways.

For an input ``x`` (NHWC), filters ``k`` (HWIO) and an output ``y`` (NHWC) with strides
``(sh, sw)`` and dilations ``(dh, dw)``, the form ``T(x, k, y) = sum x[n, i*sh + p*dh,
j*sw + q*dw, c] k[p, q, c, o] y[n, i, j, o]`` has three partials, each linear in the other
two tensors:

- ``conv2d(x, k)`` -> ``y``-shaped (``dT/dy``): the convolution (TensorFlow's cross-correlation,
  unpadded: padding is a ``pad`` before it);
- ``conv2d_backprop_input(y, k, size=(h, w))`` -> ``x``-shaped (``dT/dx``);
- ``conv2d_backprop_filter(x, y, size=(kh, kw))`` -> ``k``-shaped (``dT/dk``).

The derivative of each is one of the others, so derivatives of any order stay in the family.
Each element's definition adds its terms in a fixed order (``conv2d``: ``(p, q, c)``;
``backprop_input``: ``(p, q, o)``; ``backprop_filter``: ``(n, i, j)``), which the numeric
evaluation of small tensors and the loop rule (:meth:`Conv.loop`) follow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from symtape.base.errors import InvalidArgumentError, ShapeError
from symtape.core.primitive import (
    Aval, Primitive, fmt, obj, register_primitive, union, zero_factor,
)
from symtape.ops.contraction import dot_atoms, in_order_sum, tiled
from symtape.ops.reductions import ORDERED_TERMS
from symtape.ops.structural import reshape, transpose

#: Which tensor of the form each op makes, and which two it takes.
ROLES = {"conv2d": ("x", "k", "y"), "conv2d_backprop_input": ("y", "k", "x"),
         "conv2d_backprop_filter": ("x", "y", "k")}


class Dims:
    """The sizes of one application: ``n, h, w, c`` (input), ``kh, kw, o`` (filters),
    ``oh, ow`` (output), ``sh, sw`` (strides), ``dh, dw`` (dilations: tap ``p`` reads row
    ``p * dh`` of a window)."""

    __slots__ = ("n", "h", "w", "c", "kh", "kw", "o", "oh", "ow", "sh", "sw", "dh", "dw")

    def __init__(self, dh: int = 1, dw: int = 1, **kw) -> None:
        self.dh, self.dw = int(dh), int(dw)
        for k, v in kw.items():
            setattr(self, k, int(v))

    def span(self) -> tuple:
        """The height and width a window covers."""
        return (self.kh - 1) * self.dh + 1, (self.kw - 1) * self.dw + 1

    def shape(self, which: str) -> tuple:
        return {"x": (self.n, self.h, self.w, self.c), "k": (self.kh, self.kw, self.c, self.o),
                "y": (self.n, self.oh, self.ow, self.o)}[which]

    def rows(self, p: int, q: int) -> tuple:
        """The slices of ``x``'s height and width that tap ``(p, q)`` of the filters reads."""
        p, q = p * self.dh, q * self.dw
        return (slice(p, p + self.sh * (self.oh - 1) + 1, self.sh),
                slice(q, q + self.sw * (self.ow - 1) + 1, self.sw))


def positive_pair(value, what: str, name: str) -> tuple:
    """Two positive ints from ``value`` (a parameter ``name`` of ``st.<what>``); raises
    InvalidArgumentError naming it otherwise.

    >>> positive_pair([2, 1], "conv2d", "strides")
    (2, 1)
    """
    try:
        v = tuple(int(s) for s in value)
    except (TypeError, ValueError):
        v = ()
    if len(v) != 2 or min(v) < 1:
        raise InvalidArgumentError(f"st.{what}: {name} must be two positive ints, got "
                                   f"{value!r}")
    return v


def dims(name: str, shapes: Sequence[tuple], params: dict) -> Dims:
    """The :class:`Dims` of ``name`` applied to arguments of ``shapes``; raises ShapeError
    naming the argument when they do not fit."""
    sh, sw = positive_pair(params.get("strides"), name, "strides")
    dh, dw = positive_pair(params.get("dilations", (1, 1)), name, "dilations")
    a_role, b_role, _ = ROLES[name]
    for role, s in ((a_role, shapes[0]), (b_role, shapes[1])):
        if len(s) != 4:
            layout = "HWIO" if role == "k" else "NHWC"
            raise ShapeError(f"st.{name}: argument {role} must be {layout} (rank 4), got shape "
                             f"{fmt(s)}")
    got = dict(zip((a_role, b_role), shapes))
    if name == "conv2d":
        (n, h, w, c), (kh, kw, c2, o) = got["x"], got["k"]
        if c != c2:
            raise ShapeError(f"st.conv2d: the input has {c} channels, the filters take {c2}")
        eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        if h < eh or w < ew:
            raise ShapeError(f"st.conv2d: a {kh}x{kw} filter (spanning {eh}x{ew}) does not "
                             f"fit an input of {h}x{w}")
        oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
    elif name == "conv2d_backprop_input":
        (n, oh, ow, o), (kh, kw, c, o2) = got["y"], got["k"]
        h, w = positive_pair(params.get("size"), name, "size")
        if o != o2:
            raise ShapeError(f"st.{name}: y has {o} channels, the filters make {o2}")
    else:
        (n, h, w, c), (n2, oh, ow, o) = got["x"], got["y"]
        kh, kw = positive_pair(params.get("size"), name, "size")
        if n != n2:
            raise ShapeError(f"st.{name}: x holds {n} images, y {n2}")
    d = Dims(n=n, h=h, w=w, c=c, kh=kh, kw=kw, o=o, oh=oh, ow=ow, sh=sh, sw=sw, dh=dh, dw=dw)
    eh, ew = d.span()
    if h < eh or w < ew or (h - eh) // sh + 1 != oh or (w - ew) // sw + 1 != ow:
        raise ShapeError(f"st.{name}: a {kh}x{kw} filter with strides {(sh, sw)} and "
                         f"dilations {(dh, dw)} over an input of {h}x{w} makes an output of "
                         f"{(h - eh) // sh + 1}x{(w - ew) // sw + 1}, not {oh}x{ow}")
    return d


def windows(x: np.ndarray, d: Dims) -> np.ndarray:
    """``(n, oh, ow, kh * kw, c)``: the window of every output element, taps in ``(p, q)``
    order (floats or atoms)."""
    return np.stack([x[(slice(None),) + d.rows(p, q)] for p in range(d.kh)
                     for q in range(d.kw)], axis=3)


def reached(d: Dims) -> np.ndarray:
    """``(h, w)``: which input places some window covers."""
    out = np.zeros((d.h, d.w), dtype=bool)
    for p in range(d.kh):
        for q in range(d.kw):
            out[d.rows(p, q)] = True
    return out


class Conv(Primitive):
    """One partial of the convolution form (see the module's docstring)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, ("T", "T"), "fi", rules=(self._rule0, self._rule1))
        self.roles = ROLES[name]

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        keep = {name: positive_pair(params.get(name, default), self.name, name)
                for name, default in (("strides", None), ("dilations", (1, 1)))}
        if self.name != "conv2d":
            keep["size"] = positive_pair(params.get("size"), self.name, "size")
        d = dims(self.name, [a.shape for a in avals], keep)
        return Aval(d.shape(self.roles[2]), t), keep

    def dims(self, shapes, params) -> Dims:
        return dims(self.name, shapes, params)

    def terms(self, d: Dims) -> int:
        return d.n * d.oh * d.ow * d.kh * d.kw * d.c * d.o

    def structure(self, args, params, shape):
        a, b = args
        zero = zero_factor(args)
        if zero is not None:
            return False, zero, None
        d = self.dims([a.shape, b.shape], params)
        full = self.terms(d) > 0 and (self.name != "conv2d_backprop_input"
                                      or bool(reached(d).all()))
        regular = a.regular and b.regular and full and a.dtype.kind == "f"
        return regular and not (a.constant and b.constant), None, None

    # -- values ----------------------------------------------------------------------------
    def numeric(self, values, params):
        a, b = (np.asarray(v) for v in values)
        d = self.dims([a.shape, b.shape], params)
        ordered = self.terms(d) <= ORDERED_TERMS
        with np.errstate(all="ignore"):
            if self.name == "conv2d":
                win = windows(a, d).reshape(d.n, d.oh, d.ow, -1)
                kern = b.reshape(-1, d.o)
                if ordered:
                    return in_order_sum(win[..., :, None] * kern, -2)
                return np.tensordot(win, kern, axes=1)
            if self.name == "conv2d_backprop_filter":
                win = windows(a, d).reshape(-1, d.kh * d.kw * d.c)
                ys = b.reshape(-1, d.o)
                if ordered:
                    out = in_order_sum(win[:, :, None] * ys[:, None, :], 0)
                else:
                    out = win.T @ ys
                return out.reshape(d.kh, d.kw, d.c, d.o)
            out = np.full(d.shape("x"), -0.0, dtype=np.result_type(a, b))
            for p in range(d.kh):
                for q in range(d.kw):
                    at = (slice(None),) + d.rows(p, q)
                    if ordered:  # term by term, in (p, q, o) order
                        for o in range(d.o):
                            out[at] += a[..., o, None] * b[p, q, :, o]
                    else:
                        out[at] += a @ b[p, q].T
            out[:, ~reached(d), :] = 0.0
            return out

    def build(self, atoms, params):
        a, b = atoms
        d = self.dims([a.shape, b.shape], params)
        if self.name == "conv2d":
            win = windows(a, d).reshape(d.n, d.oh, d.ow, -1)
            kern = b.reshape(-1, d.o)
            cols = [list(kern[:, o]) for o in range(d.o)]
            out = obj(d.shape("y"))
            for idx in np.ndindex(d.n, d.oh, d.ow):
                xs = list(win[idx])
                for o in range(d.o):
                    out[idx + (o,)] = dot_atoms(xs, cols[o])
            return out
        if self.name == "conv2d_backprop_filter":
            win = windows(a, d).reshape(-1, d.kh * d.kw * d.c)
            ys = b.reshape(-1, d.o)
            out = obj((d.kh * d.kw * d.c, d.o))
            for t in range(win.shape[1]):
                xs = list(win[:, t])
                for o in range(d.o):
                    out[t, o] = dot_atoms(xs, list(ys[:, o]))
            return out.reshape(d.shape("k"))
        out = obj(d.shape("x"))
        for n, yy, xx in np.ndindex(d.n, d.h, d.w):
            taps = [(p, q, (yy - p * d.dh) // d.sh, (xx - q * d.dw) // d.sw)
                    for p in range(d.kh) for q in range(d.kw)
                    if yy >= p * d.dh and xx >= q * d.dw and (yy - p * d.dh) % d.sh == 0
                    and (xx - q * d.dw) % d.sw == 0 and (yy - p * d.dh) // d.sh < d.oh
                    and (xx - q * d.dw) // d.sw < d.ow]
            for c in range(d.c):
                xs = [a[n, i, j, o] for p, q, i, j in taps for o in range(d.o)]
                ws = [b[p, q, c, o] for p, q, i, j in taps for o in range(d.o)]
                out[n, yy, xx, c] = dot_atoms(xs, ws)
        return out

    # -- derivatives -----------------------------------------------------------------------
    def _partner(self, i: int, g, args, params):
        """The cotangent of argument ``i``: the op making that argument's tensor from the
        other argument and the cotangent ``g``, in the order it takes them."""
        want = self.roles[i]
        have = {self.roles[1 - i]: args[1 - i], self.roles[2]: g}
        name = next(n for n, r in ROLES.items() if r[2] == want)
        first, second = (have[r] for r in ROLES[name][:2])
        kw = {"strides": params["strides"], "dilations": params["dilations"]}
        if want != "y":
            shape = tuple(args[i].shape)
            kw["size"] = shape[1:3] if want == "x" else shape[:2]
        return OPS_BY_ROLE[want].bind(first, second, **kw)

    def _rule0(self, g, ans, a, b, **params):
        return self._partner(0, g, (a, b), params)

    def _rule1(self, g, ans, a, b, **params):
        return self._partner(1, g, (a, b), params)

    # -- batching --------------------------------------------------------------------------
    #: For each op and argument: the axis of its result a batch over that argument merges
    #: into (an axis of the argument that is not summed over), with that argument's axis.
    MERGE = {"conv2d": ((0, 0), (3, 3)), "conv2d_backprop_input": ((0, 0), (3, 2)),
             "conv2d_backprop_filter": ((2, 3), (3, 3))}

    def batch(self, args, batched, params, shape):
        if all(batched):
            return super().batch(args, batched, params, shape)
        i = 0 if batched[0] else 1
        out_axis, arg_axis = self.MERGE[self.name][i]
        t = args[i]
        nb = int(t.shape[0])
        # move the batch axis next to the merged axis (before it), then fuse the two
        perm = list(range(1, 5))
        perm.insert(arg_axis, 0)
        moved = transpose.bind(t, perm=tuple(perm))
        core = list(t.shape[1:])
        core[arg_axis] *= nb
        fused = reshape.bind(moved, shape=tuple(core))
        merged = list(args)
        merged[i] = fused
        out = self.bind(*merged, **params)
        split = list(shape)
        split[out_axis:out_axis + 1] = [nb, shape[out_axis]]
        out = reshape.bind(out, shape=tuple(split))
        back = [out_axis] + [a for a in range(5) if a != out_axis]
        return transpose.bind(out, perm=tuple(back))

    # -- sparsity --------------------------------------------------------------------------
    def dependencies(self, deps, params, shape):
        a, b = deps
        d = self.dims([a.shape, b.shape], params)
        if self.name == "conv2d":
            xs = union([windows(a, d).reshape(d.n, d.oh, d.ow, -1)], axis=-1)
            ks = union([b.reshape(-1, d.o)], axis=0)
            return np.bitwise_or(xs[..., None], ks).astype(object)
        if self.name == "conv2d_backprop_filter":
            win = windows(a, d)  # (n, oh, ow, taps, c)
            xs = union([win], axis=(0, 1, 2)).reshape(d.kh, d.kw, d.c)
            ys = union([b], axis=(0, 1, 2))
            return np.bitwise_or(xs[..., None], ys).astype(object)
        out = np.zeros(d.shape("x"), dtype=object)
        ys = union([a], axis=3)  # (n, oh, ow)
        for p in range(d.kh):
            for q in range(d.kw):
                ks = union([b[p, q]], axis=1)  # (c,)
                at = (slice(None),) + d.rows(p, q)
                out[at] = np.bitwise_or(out[at], np.bitwise_or(ys[..., None], ks))
        return out

    # -- loop rule ---------------------------------------------------------------------------
    def element_cost(self, node):
        """Its terms (at least one atom an element)."""
        return max(node.size, self.terms(self.dims([a.shape for a in node.inputs],
                                                   node.params)))

    def loop(self, planner, node):
        """Register-tiled products (:func:`~symtape.ops.contraction.tiled`): ``conv2d``
        takes rows ``(n, i, j)``, columns ``o`` and sums over ``(p, q, c)``;
        ``conv2d_backprop_filter`` rows ``(p, q, c)``, columns ``o``, sums over ``(n, i,
        j)``; ``conv2d_backprop_input`` is one product per filter tap ``(p, q)``, each
        adding ``y[n, i, j, :] k[p, q]^T`` into the places that tap read, taps in order
        (:func:`_backprop_input`). Each element adds its terms in its definition's order.
        Over chunks of points, the points are one more batch dimension (first)."""
        a, b = node.inputs
        la, lb = planner.loc[id(a)], planner.loc[id(b)]
        pts = planner.batched(la) or planner.batched(lb)
        d = self.dims([a.shape, b.shape], node.params)
        loc = planner.fresh(node, pts)
        planner.fill(loc, node.shape, -0.0, pts)
        ra, rb, ro = (planner.access(la, a.shape, pts), planner.access(lb, b.shape, pts),
                      planner.access(loc, node.shape, pts))
        if self.roles[2] == "x":  # conv2d_backprop_input; a: y, b: k, out: x
            _backprop_input(planner, d, ra, rb, ro, loc, pts, planner.batched(lb), node.dtype,
                            planner.read(node))
            return loc
        lead = ((planner.P, ra.strides[0], rb.strides[0], ro.strides[0]),) if pts else ()
        (an, ah, aw, ac), (bn, bh, bw, bc), (on, oh, ow, oc) = \
            ra.strides[pts:], rb.strides[pts:], ro.strides[pts:]
        sh, sw = d.sh, d.sw
        if self.roles[2] == "y":  # conv2d; a: x, b: k, out: y
            tiled(planner, lead + ((d.n, an, 0, on), (d.oh, sh * ah, 0, oh)),
                  (d.ow, sw * aw, ow), (d.o, bc, oc),
                  ((d.kh, d.dh * ah, bn), (d.kw, d.dw * aw, bh), (d.c, ac, bw)),
                  (ra, rb, ro), node.dtype, points=pts)
        else:  # conv2d_backprop_filter; a: x, b: y, out: k
            # each image's y is read for every (q, c) of a filter row while in cache
            tiled(planner, lead + ((d.kh, d.dh * ah, 0, on), (d.kw, d.dw * aw, 0, oh)),
                  (d.c, ac, ow), (d.o, bc, oc),
                  ((d.n, an, bn), (d.oh, sh * ah, bh), (d.ow, sw * aw, bw)),
                  (ra, rb, ro), node.dtype, hoist=1, points=pts)
        return loc


conv2d = register_primitive(Conv("conv2d"))
conv2d_backprop_input = register_primitive(Conv("conv2d_backprop_input"))
conv2d_backprop_filter = register_primitive(Conv("conv2d_backprop_filter"))
OPS_BY_ROLE = {"y": conv2d, "x": conv2d_backprop_input, "k": conv2d_backprop_filter}


# --------------------------------------------------------------------------------------------
# Loop nests
# --------------------------------------------------------------------------------------------


def _backprop_input(planner, d: Dims, ra: tuple, rb: tuple, ro: tuple, loc: tuple,
                    pts: bool, k_pts: bool, dtype, read: tuple) -> None:
    """``x``-shaped ``conv2d_backprop_input(y, k)`` (see :meth:`Conv.loop`); the filters are
    first copied with ``c`` innermost (the columns of its products); ``pts``: over chunks of
    points (``k_pts``: the filters too); ``dtype``: the elements'; ``read``: the box of the
    result its readers read (``planner.read``)."""
    (an, ah, aw, ac), (on, oh, ow, oc) = ra.strides[pts:], ro.strides[pts:]
    sh, sw = d.sh, d.sw
    kshape = (d.kh, d.kw, d.o, d.c)
    kt = (planner.temp(math.prod(kshape), k_pts),
          planner.flat(planner.shape(kshape, k_pts)))
    kacc = planner.access(kt, kshape, pts)
    src = rb.strides[:k_pts] + tuple(rb.strides[pts:][i] for i in (0, 1, 3, 2))
    planner.block(kshape, planner.copy_body(1, False), (planner.at(rb.buffer, rb.offset, src),),
                  (planner.access(kt, kshape, k_pts),), batched=k_pts)
    bn, bh, bc, bw = kacc.strides[pts:]
    lead = ((planner.P, ra.strides[0], kacc.strides[0], ro.strides[0]),) if pts else ()
    if (sh, sw) == (1, 1):
        # x[n, h, w, c] = sum over (p, q, o) of y'[n, h + eh-1 - p*dh, w + ew-1 - q*dw, o]
        # k[p, q, c, o], y' being y with eh-1 and ew-1 zero rows and columns around it
        # (eh, ew: the span of a window)
        eh, ew = d.span()
        padded = (d.n, d.oh + 2 * (eh - 1), d.ow + 2 * (ew - 1), d.o)
        ploc = (planner.temp(math.prod(padded), pts),
                planner.flat(planner.shape(padded, pts)))
        planner.fill(ploc, padded, 0.0, pts)
        pacc = planner.access(ploc, padded, pts)
        pn, ph, pw, po = pacc.strides[pts:]
        at = (slice(None),) * (1 + pts)
        inner = ploc[1][at + (slice(eh - 1, eh - 1 + d.oh), slice(ew - 1, ew - 1 + d.ow))]
        planner.block(d.shape("y"), planner.copy_body(1, False), (ra,),
                      (planner.access((ploc[0], inner), d.shape("y"), pts),), batched=pts)
        # only the rows and columns its readers read (a padded input's gradient, of which
        # the pad's gradient keeps the interior); the others keep the -0.0 they start from
        (h0, h1), (w0, w1) = read[1:3]
        start = planner.at(ploc[0], (eh - 1 + h0) * ph + (ew - 1 + w0) * pw, ())
        if pts:
            lead = ((planner.P, pacc.strides[0], kacc.strides[0], ro.strides[0]),)
        tiled(planner, lead + ((d.n, pn, 0, on), (h1 - h0, ph, 0, oh)), (w1 - w0, pw, ow),
              (d.c, bw, oc),
              ((d.kh, -d.dh * ph, bn), (d.kw, -d.dw * pw, bh), (d.o, po, bc)),
              (start, kacc, ro._replace(offset=ro.offset + h0 * oh + w0 * ow)), dtype,
              points=pts)
        return
    for p, q in itertools.product(range(d.kh), range(d.kw)):
        tap_b = kacc._replace(offset=kacc.offset + p * bn + q * bh)
        tap_o = ro._replace(offset=ro.offset + p * d.dh * oh + q * d.dw * ow)
        tiled(planner, lead + ((d.n, an, 0, on), (d.oh, ah, 0, sh * oh)),
              (d.ow, aw, sw * ow), (d.c, bw, oc), ((d.o, ac, bc),),
              (ra, tap_b, tap_o), dtype, points=pts)
    fill_unreached(planner, loc, d)


def fill_unreached(planner, loc: tuple, d: Dims) -> None:
    """Zeros into the rows and columns of an input-shaped ``loc`` that no window of ``d``
    covers (filled with -0.0 before its sums)."""
    pts = planner.batched(loc)
    at = (slice(None),) * (1 + pts)
    inside = reached(d)
    for y in np.flatnonzero(~inside.any(axis=1)):
        planner.fill((loc[0], loc[1][at + (slice(y, y + 1),)]), (d.n, 1, d.w, d.c), 0.0, pts)
    for x in np.flatnonzero(~inside.any(axis=0)):
        planner.fill((loc[0], loc[1][at + (slice(None), slice(x, x + 1))]),
                     (d.n, d.h, 1, d.c), 0.0, pts)

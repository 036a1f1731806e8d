"""Casts and structural ops (reshape, slicing, gather, stack, ...): copies of elements,
differentiated through their index maps."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from symtape.base.errors import ShapeError
from symtape.base.places import flat_places
from symtape.core.primitive import (
    Aval, Primitive, Zero, as_obj, fmt, kind_of, obj, register_primitive, aligned, axis_after_batch,
    batch_size, distinct_places, inverse_places, spread,
)
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
F = LazyModule("F", globals(), "symtape.element.added_heads")
G = LazyModule("G", globals(), "symtape.element.graph")

# --------------------------------------------------------------------------------------------
# Cast
# --------------------------------------------------------------------------------------------


class Cast(Primitive):
    """``cast(x, dtype)``: float -> int truncates, anything -> bool is ``x != 0``."""

    def __init__(self) -> None:
        super().__init__("cast", ("*",), "fib", rules=(self._rule,))

    @staticmethod
    def _rule(g, ans, x, dtype, src):
        # only float -> float casts carry a gradient (TF)
        return cast.bind(g, dtype=src) if src.kind == "f" and dtype.kind == "f" else None

    def vjp(self, g, ans, args, params, needed):
        ct = self._rule(g, ans, *args, **params) if needed[0] else None
        return [ct]

    def prepare(self, avals, params):
        dtype = np.dtype(params["dtype"])
        return Aval(avals[0].shape, dtype), {"dtype": dtype, "src": avals[0].dtype}

    def _atom(self, src_kind: str, dst_kind: str):
        if dst_kind == "b":
            return lambda a: G.relation(sp.Unequality, a, G.ZERO) if src_kind != "b" else a
        if src_kind == "b":
            return lambda a: G.piecewise((G.ONE, a), (G.ZERO, sp.S.true))
        if src_kind == "f" and dst_kind == "i":
            return lambda a: G.call(F.Trunc, a)
        return lambda a: a

    def _one(self, params):
        """The cast of one atom."""
        src, dst = params["src"], params["dtype"]
        if src.kind == "f" and dst.kind == "f" and dst.itemsize < src.itemsize:
            return lambda v: G.call(F.RoundFloat32, v)  # rounding is a head
        return self._atom(kind_of(src), kind_of(dst))

    def build(self, atoms, params):
        (a,) = atoms
        with np.errstate(all="ignore"):
            return as_obj(np.frompyfunc(self._one(params), 1, 1)(a), a.shape)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return np.asarray(values[0]).astype(params["dtype"])

    def batch(self, args, batched, params, shape):
        return self.bind(args[0], dtype=params["dtype"])

    def dependencies(self, deps, params, shape):
        return deps[0]

    def loop(self, planner, node):
        """One loop over the node's shape, each element the cast of its argument's (float
        data cast to a float32 model's dtype at its input is 8,192 elements a batch of
        the seed CNN); an argument not placed in a buffer of its own: unrolled."""
        (x,) = node.inputs
        loc = planner.loc.get(id(x))
        if loc is None or loc[1] is None:
            return planner.unrolled(node)
        leaf = G.Leaf.new("p0")
        with np.errstate(all="ignore"):
            atom = self._one(node.params)(leaf)
        batched = planner.batched(loc)
        return planner.body_block(node, node.shape, atom, [leaf],
                                  [planner.access(loc, node.shape, batched)], batched=batched)


cast = register_primitive(Cast())


# --------------------------------------------------------------------------------------------
# Structural ops: gathers of atoms, differentiated through their index maps
# --------------------------------------------------------------------------------------------


#: What a rearranging function raises on arguments of shapes it does not take.
_SHAPE_ERRORS = (ValueError, IndexError, TypeError, np.exceptions.AxisError)


class Structural(Primitive):
    """An op that rearranges elements: ``fn`` applies to atoms and values alike.

    Its derivative is generic: apply ``fn`` to an array of flat indices to learn where each
    output element comes from, and scatter-add the cotangent back (:data:`scatter_add`).
    """

    def __init__(self, name: str, fn: Callable, variadic: bool = False,
                 batch: Callable | None = None, back: Callable | None = None) -> None:
        super().__init__(name, ("T",), "fib")
        self.fn = fn
        self.variadic = variadic
        self._batch = batch  # (args, batched, params, shape) -> tensor, or None: not here
        # (g, arg, params) -> the cotangent of a one-to-one rearrangement's argument, by the
        # inverse rearrangement (no index map held); None: scatter-add through the map
        self._back = back

    def index_maps(self, shapes: Sequence[tuple], params: dict) -> list[np.ndarray]:
        """For each argument, the flat index into it of every output element (-1: other);
        of one argument, ``fn`` of its places (a view of the shared ramp for a slice,
        reshape or transposition: no array of its own)."""
        if len(shapes) == 1:
            try:
                return [np.asarray(self.fn(flat_places(tuple(shapes[0])), **params))]
            except _SHAPE_ERRORS as e:
                raise ShapeError(f"st.{self.name}: {e} (argument shape "
                                 f"{fmt(shapes[0])})") from None
        none = np.int64(-1)
        maps = []
        for k in range(len(shapes)):  # (each from its own places among -1s: no other array)
            try:
                maps.append(np.asarray(self.fn(*[
                    flat_places(tuple(s)) if j == k else np.broadcast_to(none, tuple(s))
                    for j, s in enumerate(shapes)], **params)))
            except _SHAPE_ERRORS as e:
                raise ShapeError(f"st.{self.name}: {e} (argument shapes "
                                 f"{', '.join(map(fmt, shapes))})") from None
        return maps

    def structure(self, args, params, shape):
        """Elements picked from arguments that are all one constant are that constant."""
        first = args[0].uniform if args else None
        same = first is not None and all(a.uniform is not None and a.uniform == first and
                                         type(a.uniform) is type(first) for a in args)
        return False, first if same and int(np.prod(shape, dtype=np.int64)) else None, None

    def shape_rule(self, shapes, params):
        """The shape ``fn`` gives on one-byte stand-ins (not :meth:`index_maps`' int64
        places: a concatenation of 2e6 elements would hold five 16 MB arrays to learn it);
        an op with index maps of its own, or a failure, asks them (which name the error)."""
        if type(self).index_maps is Structural.index_maps:
            try:
                return tuple(np.shape(self.fn(*[np.zeros(s, dtype=np.int8) for s in shapes],
                                              **params)))
            except _SHAPE_ERRORS:
                pass  # (index_maps raises the ShapeError that names the op)
        return tuple(self.index_maps(shapes, params)[0].shape)

    def moves(self, shapes, params) -> tuple:
        """``(maps, None)``: every output element is a copy of one argument's element
        (:meth:`index_maps`; see :meth:`Primitive.moves`)."""
        return self.index_maps(shapes, params), None

    def moved(self, value, shapes, params):
        """One argument's every output element is a copy of one of its elements: ``value``
        (broadcast to its shape) rearranged by ``fn`` itself -- a view where numpy gives one,
        not a gather through an index map (see :meth:`Primitive.moved`)."""
        if len(shapes) != 1 or self.fills or type(self).index_maps is not \
                Structural.index_maps:  # (an op with maps of its own: through them)
            return None
        return np.asarray(self.fn(np.broadcast_to(value, shapes[0]), **params))

    def build(self, atoms, params):
        return np.asarray(self.fn(*atoms, **params), dtype=object)

    def numeric(self, values, params):
        return np.asarray(self.fn(*values, **params))

    def differentiable(self, i: int) -> bool:
        return True  # every argument, through its index map (see vjp)

    def batch(self, args, batched, params, shape):
        out = self._batch(args, batched, params, shape) if self._batch is not None else None
        if out is not None:
            return out
        if len(args) == 1:  # any rearrangement: a gather through its index map, row by row
            (x,) = args
            (idx,) = self.index_maps([tuple(x.shape[1:])], params)
            return gather_flat.bind(x, idx=batched_index(idx, x.shape[0], x.shape[1:]))
        return super().batch(args, batched, params, shape)

    def dependencies(self, deps, params, shape):
        out = np.zeros(shape, dtype=object)
        for d, idx in zip(deps, self.index_maps([d.shape for d in deps], params)):
            out = out | _picked(d, idx)
        return out

    loop_view = True

    def loop(self, planner, node):
        """A view: the places of the arguments' elements (a copy where they are in several
        buffers, or partly zeros that must be written)."""
        return planner.structural(node)

    def places(self, node):
        if len(node.inputs) != 1:
            return None
        return self.index_maps([node.inputs[0].shape], node.params)[0]

    def vjp(self, g, ans, args, params, needed):
        maps = [None] * len(args) if self._back is not None else \
            self.index_maps([a.shape for a in args], params)
        out = []
        for a, idx, need in zip(args, maps, needed):
            if not need:
                out.append(None)
            elif isinstance(g, Zero):
                out.append(Zero(a.shape, g.dtype))
            elif self._back is not None:
                out.append(self._back(g, a, params))
            else:
                out.append(scatter_add.bind(g, idx=idx, shape=tuple(a.shape)))
        return out


class GatherFlat(Primitive):
    """``out[i] = x.flat[idx[i]]``, zero where ``idx[i] == -1``."""

    def __init__(self) -> None:
        super().__init__("gather_flat", ("T",), "fib",
                         rules=(lambda g, ans, x, idx: scatter_add.bind(g, idx=idx,
                                                                        shape=tuple(x.shape)),))

    def shape_rule(self, shapes, params):
        return tuple(params["idx"].shape)

    fills = True

    def moves(self, shapes, params) -> tuple:
        """A copy of ``x.flat[idx]``, a structural zero where ``idx`` is -1."""
        return [params["idx"]], None

    @staticmethod
    def _take(flat, idx, zero):
        missing = idx < 0
        if not flat.size:
            return np.full(idx.shape, zero, flat.dtype)
        if not missing.any():
            return np.asarray(flat[idx])
        out = np.asarray(flat[np.where(missing, 0, idx)])
        out[missing] = zero
        return out

    def build(self, atoms, params):
        return np.asarray(self._take(atoms[0].reshape(-1), params["idx"], G.ZERO), dtype=object)

    def numeric(self, values, params):
        v = np.asarray(values[0])
        return self._take(v.reshape(-1), params["idx"], v.dtype.type(0))

    def batch(self, args, batched, params, shape):
        (x,) = args
        return self.bind(x, idx=batched_index(params["idx"], x.shape[0], x.shape[1:]))

    def dependencies(self, deps, params, shape):
        return _picked(deps[0], params["idx"])

    def loop(self, planner, node):
        """A view of the argument at the places ``idx`` (a boolean one: unrolled)."""
        if node.dtype.kind == "b":
            return planner.unrolled(node)
        return planner.structural(node, [node.params["idx"]])

    def places(self, node):
        return node.params["idx"]


class ScatterAdd(Primitive):
    """``out = zeros(shape); out.flat[idx[i]] += g[i]`` (entries with ``idx == -1`` dropped)."""

    def __init__(self) -> None:
        super().__init__("scatter_add", ("T",), "fi",
                         rules=(lambda g, ans, x, idx, shape: gather_flat.bind(g, idx=idx),))

    def shape_rule(self, shapes, params):
        return tuple(params["shape"])

    fills = True

    def moves(self, shapes, params) -> tuple:
        """Targets receiving one element are its copy, targets receiving none structural
        zeros; those receiving several (``own``) are sums."""
        shape = tuple(params["shape"])
        size = int(np.prod(shape, dtype=np.int64))
        idx = params["idx"].reshape(-1)
        src = inverse_places(idx, (size,))
        if distinct_places(idx):  # (a slice's, a permutation's: no counts to hold)
            return [src.reshape(shape)], None
        counts = np.bincount(idx[idx >= 0], minlength=size)
        own = counts > 1
        src[counts != 1] = -1
        return [src.reshape(shape)], own.reshape(shape) if own.any() else None

    def build(self, atoms, params):
        idx = params["idx"].reshape(-1)
        src = atoms[0].reshape(-1)
        groups: dict[int, list] = {}
        for i, j in enumerate(idx.tolist()):
            if j >= 0:
                groups.setdefault(j, []).append(src[i])
        out = obj(tuple(params["shape"]))
        flat = out.reshape(-1)
        for j, parts in groups.items():
            flat[j] = parts[0] if len(parts) == 1 else G.add(*parts)
        return out

    def numeric(self, values, params):
        v = np.asarray(values[0])
        size = int(np.prod(params["shape"], dtype=np.int64))
        idx = params["idx"].reshape(-1)
        keep = idx >= 0
        if v.dtype.kind != "f":
            out = np.zeros(size, dtype=v.dtype)
            np.add.at(out, idx[keep], v.reshape(-1)[keep])
            return out.reshape(params["shape"])
        # from -0.0, IEEE addition's identity: a place receiving negative zeros is -0.0, as
        # the element view's sum of its terms; places receiving none are +0.0
        if distinct_places(idx):  # each place receives at most one element: it, else +0.0
            out = np.zeros(size, dtype=v.dtype)
            out[idx[keep]] = v.reshape(-1)[keep]
            out.shape = tuple(params["shape"])  # (its own array, not a view to copy)
            return out
        out = np.full(size, -0.0, dtype=v.dtype)
        np.add.at(out, idx[keep], v.reshape(-1)[keep])
        out[np.bincount(idx[keep], minlength=size) == 0] = 0.0
        return out.reshape(params["shape"])

    def batch(self, args, batched, params, shape):
        (x,) = args
        n = x.shape[0]
        return self.bind(x, idx=batched_index(params["idx"], n, shape), shape=(n,) + shape)

    def dependencies(self, deps, params, shape):
        out = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=object)
        idx = params["idx"].reshape(-1)
        keep = idx >= 0
        np.bitwise_or.at(out, idx[keep], deps[0].reshape(-1)[keep])
        return out.reshape(shape)

    scatters = True

    def places(self, node):
        idx = node.params["idx"]
        return inverse_places(idx, node.shape) if distinct_places(idx) else None

    def reads_operand(self, node) -> bool:
        """Adding several elements into one place, its loop reads its argument's elements
        through ``planner.operand`` (an elementwise argument computed inside it)."""
        return node.dtype.kind in "fiu" and not distinct_places(node.params["idx"])

    def loop(self, planner, node):
        """To distinct places: a view of the argument (zeros elsewhere); adding several
        elements into one place: one accumulating loop (:meth:`summed`); with dropped
        (-1) entries among those, unrolled."""
        idx = node.params["idx"]
        if distinct_places(idx):
            return planner.structural(node, [inverse_places(idx, node.shape)])
        loc = self.summed(planner, node) if planner.numeric(node) else None
        return planner.unrolled(node) if loc is None else loc

    @staticmethod
    def summed(planner, node) -> tuple | None:
        """A scatter that adds several elements into one place (the transpose of a
        broadcast: a sum over the broadcast axes) as one accumulating loop over its
        argument's shape (or a finer one; its places affine in it, else read from an index
        array): zeros (eager values' start), then ``out[idx[j]] += x[j]`` in order; None
        when some entries are dropped."""
        (x,) = node.inputs
        idx = node.params["idx"]
        if (idx < 0).any():
            return None
        # in a fresh buffer, element j is at place j: the places, affine over x's shape or
        # over a finer one (a tile's: (copies, n), stepping back to 0 at each copy), else
        # read from an index array
        found = planner.finer(idx.reshape(x.shape))
        space = found[0] if found is not None else tuple(x.shape)
        term, leaves, ins, batched = planner.operand(x, space)  # (x computed here, maybe)
        loc = planner.fresh(node, batched)
        # from -0.0 (eager values' start) when every place receives a term; else +0.0,
        # the places receiving none (their structural zeros)
        reached = np.bincount(idx.reshape(-1), minlength=node.size) > 0
        planner.fill(loc, node.shape, -0.0 if x.size and reached.all() else 0.0, batched)
        if x.size == 0:
            return loc
        if found is not None:
            start, strides = found[1]
            out = planner.at(loc[0], start, ((node.size,) if batched else ()) + strides)
        else:
            places = idx.reshape(x.shape).astype(np.int64)
            if batched:
                places = places[None] + node.size * np.arange(planner.P, dtype=np.int64
                                                              ).reshape((-1,) + (1,) * len(x.shape))
            out = planner.indexed(loc[0], places)
        acc = G.Leaf.new("acc")
        planner.accumulate(space, G.add(acc, term), [acc] + leaves, [out] + ins, out, batched)
        planner.live_count(node, x, space, out, batched)
        planner.reached_count(node, reached.reshape(node.shape))
        return loc


gather_flat = register_primitive(GatherFlat())
scatter_add = register_primitive(ScatterAdd())


def _picked(deps: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``deps.flat[idx]``, no dependency where ``idx`` is -1."""
    out = np.zeros(idx.shape, dtype=object)
    inside = idx >= 0
    out[inside] = deps.reshape(-1)[idx[inside]]
    return out


def batched_index(idx: np.ndarray, n: int, core: tuple) -> np.ndarray:
    """Flat indices ``idx`` into a tensor of shape ``core``, for each of ``n`` rows of a
    tensor of shape ``(n,) + core`` (-1 stays -1)."""
    size = int(np.prod(core, dtype=np.int64))
    rows = np.arange(n, dtype=np.int64).reshape((n,) + (1,) * idx.ndim) * size
    return np.where(idx < 0, -1, idx + rows)


def _structural(name: str, fn: Callable, variadic: bool = False,
                batch: Callable | None = None, back: Callable | None = None) -> Structural:
    return register_primitive(Structural(name, fn, variadic, batch, back))


def _getitem(a, key):
    return a[key]


def _gather(params, indices, axis, batch_dims):
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    lead = params.shape[:batch_dims]
    out = [_gather(params[i], indices[i], axis - batch_dims, 0) for i in np.ndindex(*lead)]
    first = np.asarray(out[0]) if out else np.take(
        params.reshape(params.shape[batch_dims:]) if params.size else params, [], axis=0)
    return np.stack(out).reshape(lead + first.shape) if out else np.empty(lead + first.shape)


def _broadcast_to(a, shape):
    return np.array(np.broadcast_to(a, shape))


# Batching rules (see Primitive.batch): the op over a leading batch axis in one application,
# or None where the generic gather through the index map is used.


def _batch_reshape(args, batched, params, shape):
    return reshape.bind(args[0], shape=(args[0].shape[0],) + shape)


def _batch_transpose(args, batched, params, shape):
    rank = len(shape)
    perm = params.get("perm")
    perm = range(rank - 1, -1, -1) if perm is None else perm
    return transpose.bind(args[0], perm=(0,) + tuple(p % rank + 1 for p in perm))


def _batch_broadcast_to(args, batched, params, shape):
    x = aligned(args[0], True, len(shape))
    return broadcast_to.bind(x, shape=(x.shape[0],) + shape)


def _batch_tile(args, batched, params, shape):
    multiples = tuple(params["multiples"])
    if len(multiples) != len(args[0].shape) - 1:
        return None
    return tile.bind(args[0], multiples=(1,) + multiples)


def _batch_reverse(args, batched, params, shape):
    axis = params["axis"]
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return reverse.bind(args[0], axis=tuple(axis_after_batch(a, len(shape)) for a in axes))


def _basic_key(k) -> bool:
    return k is None or k is Ellipsis or isinstance(k, slice) or (
        isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)))


def _batch_getitem(args, batched, params, shape):
    key = params["key"] if isinstance(params["key"], tuple) else (params["key"],)
    if not all(_basic_key(k) for k in key):
        return None  # advanced indexing moves axes: the generic gather
    return getitem.bind(args[0], key=(slice(None),) + key)


def _batch_joined(op):
    def rule(args, batched, params, shape):
        n = batch_size(args, batched)
        return op.bind(*[spread(a, b, n) for a, b in zip(args, batched)],
                       axis=axis_after_batch(params["axis"], len(shape)))

    return rule


# Cotangents of one-to-one rearrangements: the inverse rearrangement of ``g``.


def _back_reshape(g, a, params):
    return reshape.bind(g, shape=tuple(a.shape))


def _back_transpose(g, a, params):
    perm = params.get("perm")
    if perm is None:
        return transpose.bind(g, perm=None)
    rank = len(a.shape)
    return transpose.bind(g, perm=tuple(int(p) for p in np.argsort([p % rank for p in perm])))


def _back_reverse(g, a, params):
    return reverse.bind(g, axis=params["axis"])


reshape = _structural("reshape", lambda a, shape: np.reshape(a, shape), batch=_batch_reshape,
                      back=_back_reshape)
transpose = _structural("transpose", lambda a, perm: np.transpose(a, perm),
                        batch=_batch_transpose, back=_back_transpose)
squeeze = _structural("squeeze", lambda a, axis: np.squeeze(a, axis=axis),
                      batch=_batch_reshape, back=_back_reshape)
expand_dims = _structural("expand_dims", lambda a, axis: np.expand_dims(a, axis),
                          batch=_batch_reshape, back=_back_reshape)
tile = _structural("tile", lambda a, multiples: np.tile(a, multiples), batch=_batch_tile)
broadcast_to = _structural("broadcast_to", _broadcast_to, batch=_batch_broadcast_to)
getitem = _structural("getitem", _getitem, batch=_batch_getitem)
gather = _structural("gather", lambda p, indices, axis, batch_dims:
                     _gather(p, indices, axis, batch_dims))
stack = _structural("stack", lambda *xs, axis: np.stack(xs, axis=axis), True)
concat = _structural("concat", lambda *xs, axis: np.concatenate(xs, axis=axis), True)
reverse = _structural("reverse", lambda a, axis: np.flip(a, axis), batch=_batch_reverse,
                      back=_back_reverse)
stack._batch = _batch_joined(stack)
concat._batch = _batch_joined(concat)


# --------------------------------------------------------------------------------------------
# TensorFlow's moves: roll, slice, gather_nd, matrix_diag_part, matrix_diag (each an index map;
# the public wrappers check and normalise the arguments)
# --------------------------------------------------------------------------------------------


_builtin_slice = slice  # the op ``slice_`` below is TensorFlow's slice


def _roll(a, shift, axis):
    return np.roll(a, shift, axis)  # shifts along one axis add up, as TensorFlow's


def _batch_roll(args, batched, params, shape):
    axes = tuple(axis_after_batch(a, len(shape)) for a in params["axis"])
    return roll.bind(args[0], shift=params["shift"], axis=axes)


class Roll(Structural):
    """``roll(x, shift, axis)``: along each axis a rotation, so the output is ``2**k`` boxes
    (``k`` axes rolled), each a shifted copy of a box of ``x``."""

    def __init__(self) -> None:
        super().__init__("roll", _roll, batch=_batch_roll)

    @staticmethod
    def boxes(shape: tuple, params: dict) -> list[np.ndarray]:
        """The output's boxes that are each one piece of ``x``, as masks."""
        total: dict[int, int] = {}
        for s, a in zip(params["shift"], params["axis"]):
            total[a] = total.get(a, 0) + s
        cuts = [[_builtin_slice(None)] if not shape[a] or not total.get(a, 0) % shape[a]
                else [_builtin_slice(0, total[a] % shape[a]),
                      _builtin_slice(total[a] % shape[a], None)]
                for a in range(len(shape))]
        boxes: list[tuple] = [()]
        for c in cuts:
            boxes = [b + (piece,) for b in boxes for piece in c]
        masks = []
        for box in boxes:
            m = np.zeros(shape, dtype=bool)
            m[box] = True
            masks.append(m)
        return masks

    def loop(self, planner, node):
        """Rolled, the places are runs of a row at most, too many for a reader to copy: one
        copy loop per box (:meth:`boxes`) into a fresh buffer (a view where nothing moves)."""
        (x,) = node.inputs
        masks = self.boxes(tuple(x.shape), node.params)
        if len(masks) == 1 or id(x) not in planner.loc:
            return planner.structural(node)
        (m,) = self.index_maps([tuple(x.shape)], node.params)
        loc = planner.assembled(node, [planner.loc[id(x)]] * len(masks),
                                [np.where(b, m, -1) for b in masks])
        if id(x) in planner.counts:  # (a select's zeros move with it)
            planner.moved_count(node, x, m)
        return loc


roll = register_primitive(Roll())


def _slice(a, begin, size):
    return a[tuple(_builtin_slice(b, b + s) for b, s in zip(begin, size))]


def _batch_slice(args, batched, params, shape):
    x = args[0]
    return slice_.bind(x, begin=(0,) + tuple(params["begin"]),
                       size=(x.shape[0],) + tuple(params["size"]))


slice_ = _structural("slice", _slice, batch=_batch_slice)


def _gather_nd(p, indices, batch_dims):
    """``out[b..., i...] = p[b..., indices[b..., i..., :]]`` (TensorFlow's gather_nd)."""
    lead = indices.shape[:-1]
    grids = tuple(np.arange(n).reshape((n,) + (1,) * (len(lead) - k - 1))
                  for k, n in enumerate(lead[:batch_dims]))
    cols = tuple(indices[..., j] for j in range(indices.shape[-1]))
    idx = tuple(np.broadcast_to(g, lead) for g in grids) + cols
    return np.array(p[idx]) if idx else np.array(np.broadcast_to(p, lead + p.shape))


gather_nd = _structural("gather_nd", _gather_nd)


def _diag_part(a):
    return np.array(np.diagonal(a, axis1=-2, axis2=-1))


matrix_diag_part = _structural("matrix_diag_part", _diag_part,
                               batch=lambda args, batched, params, shape:
                               matrix_diag_part.bind(args[0]))


def _diag(d, fill):
    n = d.shape[-1] if d.ndim else 0
    out = np.full(d.shape + (n,), fill, dtype=d.dtype)
    out[..., np.arange(n), np.arange(n)] = d
    return out


class MatrixDiag(Structural):
    """``out[..., i, j] = d[..., i]`` where ``i == j``, a structural zero elsewhere."""

    fills = True

    def __init__(self) -> None:
        super().__init__("matrix_diag", _diag,
                         batch=lambda args, batched, params, shape: self.bind(args[0]))

    def index_maps(self, shapes, params):
        return super().index_maps(shapes, dict(params, fill=-1))  # -1: no argument's element

    def structure(self, args, params, shape):
        return False, None, None  # the zeros differ from a constant diagonal

    def build(self, atoms, params):
        return _diag(np.asarray(atoms[0], dtype=object), G.ZERO)

    def numeric(self, values, params):
        v = np.asarray(values[0])
        return _diag(v, v.dtype.type(0))


matrix_diag = register_primitive(MatrixDiag())

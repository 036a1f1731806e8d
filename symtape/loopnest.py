"""Tensor nodes planned as loop nests (:mod:`symtape.codegen.loops`) instead of elements.

A traced function whose element view would be large (a neural network's weights, a batch)
is compiled node by node: each node gets a *location* -- a buffer and the offset of each of
its elements in it -- and, unless it is a view of another node's location, a loop block:

- an elementwise op is one loop over its shape whose body is its template, built by the
  graph's own builders on stand-in leaves (the template level, as eager values of large
  tensors are computed: ``Elementwise._prototype``), arguments read with broadcast strides;
- reshape, transpose, slicing, broadcasting and the other structural ops are views: their
  index maps applied to the argument's offsets (no copy);
- sums, means, products and extrema accumulate over the reduced axes in order, and matrix
  products accumulate ``out += a * b`` over ``(i, k, j)`` with ``j`` innermost;
- softmax and the ops along one axis run their one-slice element view for every slice;
- any other op, when small, runs its element view unrolled (its arguments as stand-ins).

Values are those of eager evaluation of large tensors (the template level): a node's
elements do not fold against its neighbours' as the element DAG's do (``x * 0`` is computed,
not dropped), which changes values only at non-finite inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import sympy as sp

from . import graph as G
from . import nodes as N
from .codegen.loops import Access, Block, Buffer, LoopPlan, layouts
from .codegen.plan import Instr, OutLayout, Plan, build_plan
from .errors import UnboundLeafError
from .ops.axis import AxisOp, StopGradient
from .ops.elementwise import Elementwise
from .ops.linalg import MatMul
from .ops.reductions import Reduction
from .ops.structural import Structural

__all__ = ["LOOP_MIN_ATOMS", "UNROLL_LIMIT", "worth_looping", "plan_loops"]

#: Functions whose element view would have more atoms than this are planned as loop nests.
LOOP_MIN_ATOMS = 20_000
#: Ops without a loop form are unrolled up to this many elements (arguments and result).
UNROLL_LIMIT = 4096
#: Matrix products update tiles of this many rows and columns per step of their inner loop.
MATMUL_ROWS = 4
MATMUL_COLS = 32
#: Ops along one axis unroll one slice per loop iteration, up to this long.
SLICE_LIMIT = 1024


class Unplannable(Exception):
    """A node with no loop form (the function then compiles its element view)."""


def worth_looping(outputs: Sequence[N.Node]) -> bool:
    """Whether the element view under ``outputs`` would exceed :data:`LOOP_MIN_ATOMS` atoms
    (a matrix product counts its terms); a view already built costs nothing."""
    total, seen = 0, set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen or node.built:
            continue
        seen.add(id(node))
        total += _atoms_cost(node)
        if total > LOOP_MIN_ATOMS:
            return True
        stack.extend(node.inputs)
    return False


def _atoms_cost(node: N.Node) -> int:
    if isinstance(node.prim, MatMul):
        a = node.inputs[0]
        k = a.shape[-2] if node.params["transpose_a"] else a.shape[-1]
        return node.size * max(k, 1)
    return node.size


def plan_loops(outputs: Sequence[N.Node], inputs: Sequence[N.Node],
               threads: int = 1) -> LoopPlan:
    """The loop plan computing ``outputs`` from the argument nodes ``inputs`` (large blocks
    split across ``threads``); raises :class:`Unplannable` when some node has no loop form
    and is too large to unroll.

    >>> import symtape as st
    >>> x = st.Variable(np.arange(6.0).reshape(2, 3))
    >>> y = st.reduce_sum(st.exp(x) * 2.0, axis=0)
    >>> lp = plan_loops([y._node], [x._node])
    >>> len(lp.blocks), lp.outputs[0].shape
    (3, (3,))
    """
    p = _Planner()
    for i, node in enumerate(inputs):
        p.check(node)
        p.loc[id(node)] = (p.buffer("input", i, node), _flat(node.shape))
    order = _order(outputs)
    p.fused = _fused(order, outputs, p.loc)
    for node in order:
        if id(node) not in p.loc and id(node) not in p.fused:
            p.check(node)
            p.loc[id(node)] = p.place(node)
    for o, node in enumerate(outputs):
        p.output(o, node)
    ins, outs = layouts([n.shape for n in inputs],
                        [(n.shape, n.dtype.kind == "b") for n in outputs])
    return LoopPlan(tuple(p.buffers), tuple(p.blocks), ins, outs, max(1, int(threads)))


def _order(outputs: Sequence[N.Node]) -> list:
    seen: dict = {}
    for out in outputs:
        for node in N.ancestry(out):
            seen.setdefault(id(node), node)
    return list(seen.values())


def _pointwise(node: N.Node) -> bool:
    return (node.kind == "op" and isinstance(node.prim, Elementwise) and node.dtype.kind == "f"
            and all(a.dtype.kind == "f" for a in node.inputs))


def _fused(order: list, outputs: Sequence[N.Node], placed: dict) -> set:
    """Elementwise nodes computed inside their one user's loop body (a chain ``a * m + b *
    g`` is one loop): float nodes read once, by an elementwise op of the same shape, and not
    outputs."""
    users: dict = {}
    for node in order:
        for a in node.inputs:
            users.setdefault(id(a), []).append(node)
    for node in outputs:
        users.setdefault(id(node), []).append(None)
    out = set()
    for node in order:
        use = users.get(id(node), [])
        if (len(use) == 1 and use[0] is not None and id(node) not in placed
                and _pointwise(node) and _pointwise(use[0]) and use[0].shape == node.shape):
            out.add(id(node))
    return out


def _flat(shape: tuple) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def _affine(offsets: np.ndarray) -> tuple | None:
    """``(offset, strides)`` when ``offsets[idx] == offset + sum(idx * strides)``."""
    shape = offsets.shape
    if offsets.size == 0:
        return 0, (0,) * len(shape)
    first = int(offsets.flat[0])
    strides = []
    expected = np.full((1,) * len(shape), first, dtype=np.int64)
    for d, n in enumerate(shape):
        step = 0
        if n > 1:
            at = [0] * len(shape)
            at[d] = 1
            step = int(offsets[tuple(at)]) - first
        strides.append(step)
        line = (np.arange(n, dtype=np.int64) * step).reshape(
            tuple(n if e == d else 1 for e in range(len(shape))))
        expected = expected + line
    return (first, tuple(strides)) if np.array_equal(np.broadcast_to(expected, shape),
                                                     offsets) else None


def _copy_body(n: int, boolean: bool) -> Plan:
    """The plan copying ``n`` elements (identity, element ``k`` to element ``k``)."""
    from .codegen.plan import ArgLayout

    instrs = tuple(Instr("input", (), (0, k)) for k in range(n))
    return Plan(instrs, (ArgLayout((n,), ("x",) * n),),
                (OutLayout((n,), tuple(range(n)), boolean),))


def _stand_ins(shape: tuple, name: str) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = G.Leaf.new(name)
    return out


class _Planner:
    def __init__(self) -> None:
        self.buffers: list = []
        self.blocks: list = []
        self.loc: dict = {}  # id(node) -> (buffer, offsets)
        self.fused: set = set()  # ids of nodes computed inside their user's loop

    # -- buffers and accesses --------------------------------------------------------------
    def buffer(self, kind: str, index: int, node: N.Node, values=()) -> int:
        self.buffers.append(Buffer(kind, index, node.size, node.dtype.kind == "b",
                                   tuple(values)))
        return len(self.buffers) - 1

    def fresh(self, node: N.Node) -> tuple:
        return self.buffer("temp", -1, node), _flat(node.shape)

    def access(self, loc: tuple, space: tuple, core: tuple = (0,)) -> Access:
        """``loc`` read over ``space`` (broadcast, right-aligned); copied to a contiguous
        temporary first when its offsets are not affine."""
        buf, offsets = loc
        spread = np.broadcast_to(offsets, space)
        aff = _affine(spread)
        if aff is None:
            buf, offsets = self.materialise(loc)
            aff = _affine(np.broadcast_to(offsets, space))
        return Access(buf, aff[0], aff[1], core)

    def materialise(self, loc: tuple) -> tuple:
        buf, offsets = loc
        n = offsets.size
        if n > UNROLL_LIMIT:
            raise Unplannable(f"a gather of {n} elements")
        boolean = self.buffers[buf].boolean
        self.buffers.append(Buffer("temp", -1, n, boolean))
        new = len(self.buffers) - 1
        self.blocks.append(Block((), _copy_body(n, boolean),
                                 (Access(buf, 0, (), tuple(int(k) for k in offsets.flat)),),
                                 (Access(new, 0, (), tuple(range(n))),)))
        return new, _flat(offsets.shape)

    def check(self, node: N.Node) -> None:
        if node.dtype.kind not in "fb":
            raise Unplannable(f"a {node.dtype.name} tensor")
        if node.kind == "view":
            raise Unplannable("a node given by its element view")

    # -- nodes -----------------------------------------------------------------------------
    def place(self, node: N.Node) -> tuple:
        """The location of ``node``, emitting the blocks that compute it."""
        if node.kind == "leaf":
            value = node.leaf_store.value if node.leaf_store is not None else None
            if value is None:
                raise UnboundLeafError(f"a tensor of shape {node.shape} the function reads is "
                                       "not among its inputs and has no value")
            return self.constant(node, np.asarray(value))
        if node.kind == "const":
            return self.constant(node, np.asarray(node._exact))
        prim = node.prim
        if isinstance(prim, StopGradient):
            return self.loc[id(node.inputs[0])]
        if isinstance(prim, Structural):
            return self.structural(node)
        if isinstance(prim, Elementwise) and all(a.dtype.kind == "f" for a in node.inputs):
            return self.elementwise(node)
        if isinstance(prim, Reduction) and prim.name in _REDUCE and node.dtype.kind == "f":
            return self.reduction(node)
        if isinstance(prim, MatMul) and node.dtype.kind == "f":
            return self.matmul(node)
        if isinstance(prim, AxisOp):
            return self.along_axis(node)
        return self.unrolled(node)

    def constant(self, node: N.Node, values: np.ndarray) -> tuple:
        dtype = bool if node.dtype.kind == "b" else float
        flat = np.asarray(values, dtype=dtype).reshape(-1)
        return self.buffer("const", -1, node, flat.tolist()), _flat(node.shape)

    def structural(self, node: N.Node) -> tuple:
        args = node.inputs
        maps = node.prim.index_maps([a.shape for a in args], node.params)
        locs = [self.loc[id(a)] for a in args]
        bufs = {loc[0] for loc, m in zip(locs, maps) if (m >= 0).any()}
        if len(bufs) > 1:  # parts of several buffers (a concat): copied element by element
            return self.unrolled(node)
        offsets = np.zeros(node.shape, dtype=np.int64)
        buf = next(iter(bufs)) if bufs else locs[0][0]
        for (_, offs), m in zip(locs, maps):
            inside = m >= 0
            offsets[inside] = offs.reshape(-1)[m[inside]]
        return buf, offsets

    def body_block(self, node: N.Node, space: tuple, atoms, stand_ins: list, ins: list,
                   out: Access | None = None, loc: tuple | None = None) -> tuple:
        """A block over ``space`` computing ``atoms`` (one slice of the node) from the
        ``stand_ins`` arrays read at the accesses ``ins`` and writing them at ``out`` in
        ``loc`` (default: one element per iteration of a fresh buffer); returns ``loc``."""
        body = build_plan([np.asarray(atoms, dtype=object)],
                          [np.asarray(s, dtype=object) for s in stand_ins])
        boolean = node.dtype.kind == "b"
        if body.outputs[0].boolean != boolean and body.outputs[0].refs:
            raise Unplannable(f"{node.prim.name}: a {'boolean' if boolean else 'float'} "
                              "result computed as the other kind")
        if body.outputs[0].boolean != boolean:
            body = Plan(body.instrs, body.inputs,
                        (OutLayout(body.outputs[0].shape, body.outputs[0].refs, boolean),))
        if loc is None:
            loc = self.fresh(node)
            out = self.access(loc, space)
        self.blocks.append(Block(space, body, tuple(ins), (out,)))
        return loc

    def elementwise(self, node: N.Node) -> tuple:
        """One loop over the node's shape; its body is the template with the templates of
        fused arguments (:func:`_fused`) built in, each other argument a stand-in read with
        broadcast strides."""
        stand: dict = {}  # id(argument node) -> (stand-in leaf, node)
        with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
            atom = self.fused_atom(node, stand)
        for leaf, arg in stand.values():
            if atom is leaf:  # the template is one of its arguments: a view of it
                buf, offsets = self.loc[id(arg)]
                return buf, np.broadcast_to(offsets, node.shape)
        used = set(G.leaves([atom])) if G.is_symbolic(atom) else set()
        reads = [(leaf, arg) for leaf, arg in stand.values() if leaf in used]
        ins = [self.access(self.loc[id(arg)], node.shape) for _, arg in reads]
        return self.body_block(node, node.shape, atom, [leaf for leaf, _ in reads], ins)

    def fused_atom(self, node: N.Node, stand: dict):
        """The node's template applied to its arguments' atoms: one constant for a uniform
        argument, the built template of a fused one, else the argument's stand-in."""
        atoms = []
        for a in node.inputs:
            if a.uniform is not None:
                atoms.append(a.uniform)
            elif id(a) in self.fused:
                atoms.append(self.fused_atom(a, stand))
            else:
                atoms.append(stand.setdefault(id(a), (G.Leaf.new(f"p{len(stand)}"), a))[0])
        return node.prim._build_one(*atoms)

    def reduction(self, node: N.Node) -> tuple:
        (x,) = node.inputs
        axes, name = node.params["axis"], node.prim.name
        n = math.prod(x.shape[i] for i in axes)
        init = _REDUCE[name][0] if n else (np.nan if name == "reduce_mean" else
                                           _REDUCE[name][2])
        loc = self.fresh(node)
        self.fill(loc, node.shape, init)
        if n == 0 or x.size == 0:
            return loc
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        out_offsets = np.broadcast_to(loc[1].reshape(kept), x.shape)
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        value = _REDUCE[name][1](acc, term, n)
        out = Access(loc[0], 0, _affine(out_offsets)[1])
        self.accumulate(x.shape, value, [acc, term], [out, self.access(self.loc[id(x)], x.shape)],
                        out)
        return loc

    def fill(self, loc: tuple, space: tuple, value: float) -> None:
        body = build_plan([np.asarray(G.number(value), dtype=object)], [])
        self.blocks.append(Block(space, body, (), (self.access(loc, space),)))

    def accumulate(self, space: tuple, value, stand_ins: list, ins: list, out: Access) -> None:
        body = build_plan([np.asarray(value, dtype=object)],
                          [np.asarray(s, dtype=object) for s in stand_ins])
        self.blocks.append(Block(space, body, tuple(ins), (out,), accumulate=True))

    def matmul(self, node: N.Node) -> tuple:
        """``out += a * b`` over ``(i, k, j)`` in register tiles: each iteration of the
        ``k`` loop updates ``MATMUL_ROWS`` rows of ``MATMUL_COLS`` columns, held in registers
        across it (each load of ``b`` serves every row); edges take narrower tiles. Every
        element still adds its terms in ``k`` order, as the element DAG's sums do."""
        a, b = node.inputs
        la, lb = self.loc[id(a)], self.loc[id(b)]
        oa = np.swapaxes(la[1], -1, -2) if node.params["transpose_a"] else la[1]
        ob = np.swapaxes(lb[1], -1, -2) if node.params["transpose_b"] else lb[1]
        batch, (m, n) = node.shape[:-2], node.shape[-2:]
        k = oa.shape[-1]
        loc = self.fresh(node)
        self.fill(loc, node.shape, -0.0 if k else 0.0)
        if k == 0 or node.size == 0:
            return loc
        accs = (self.access((la[0], oa), batch + (m, k)),
                self.access((lb[0], ob), batch + (k, n)), self.access(loc, node.shape))
        rows = MATMUL_ROWS if m >= MATMUL_ROWS else 1
        cols = MATMUL_COLS if n >= MATMUL_COLS else n
        mm, nn = m - m % rows, n - n % cols
        for i0, i1, r, j0, j1, c in ((0, mm, rows, 0, nn, cols), (0, mm, rows, nn, n, n - nn),
                                     (mm, m, 1, 0, n, n)):
            if i1 > i0 and j1 > j0:
                self.matmul_tile(accs, batch, k, (i0, i1, r), (j0, j1, c))
        return loc

    def matmul_tile(self, accs: tuple, batch: tuple, k: int, rows: tuple, cols: tuple) -> None:
        """The block of rows ``i0 <= i < i1`` (``r`` a tile) and columns ``j0 <= j < j1``
        (``c`` a tile); its space is ``batch + (row tiles, column tiles, k, c)``."""
        (ra, rb, ro), (i0, i1, r), (j0, j1, c) = accs, rows, cols
        nb = len(batch)
        am, ak = ra.strides[nb:]
        bk, bn = rb.strides[nb:]
        om, on = ro.strides[nb:]
        space = batch + ((i1 - i0) // r, (j1 - j0) // c, k, c)
        sa = Access(ra.buffer, ra.offset + i0 * am, ra.strides[:nb] + (r * am, 0, ak, 0),
                    tuple(t * am for t in range(r)))
        sb = Access(rb.buffer, rb.offset + j0 * bn, rb.strides[:nb] + (0, c * bn, bk, bn))
        so = Access(ro.buffer, ro.offset + i0 * om + j0 * on,
                    ro.strides[:nb] + (r * om, c * on, 0, on), tuple(t * om for t in range(r)))
        acc, x, y = _stand_ins((r,), "acc"), _stand_ins((r,), "a"), G.Leaf.new("b")
        value = np.array([G.add(acc[t], G.mul(x[t], y)) for t in range(r)], dtype=object)
        body = build_plan([value], [acc, x, np.asarray(y, dtype=object)])
        self.blocks.append(Block(space, body, (so, sa, sb), (so,), accumulate=True))

    def along_axis(self, node: N.Node) -> tuple:
        args, axis = node.inputs, node.params["axis"]
        length = args[-1].shape[axis]
        if length > SLICE_LIMIT:
            raise Unplannable(f"{node.prim.name} over slices of {length}")
        lead = tuple(s for i, s in enumerate(args[-1].shape) if i != axis)
        stand_ins = [_stand_ins((length,), f"s{i}") for i in range(len(args))]
        atoms = node.prim.slice_build(*[list(s) for s in stand_ins])
        ins = [self.slice_access(self.loc[id(a)], axis, lead) for a in args]
        loc = self.fresh(node)
        if node.prim.reduces:
            out = self.access(loc, lead)
        else:
            out = self.slice_access(loc, axis, lead)
        return self.body_block(node, lead, atoms, stand_ins, ins, out, loc)

    def slice_access(self, loc: tuple, axis: int, lead: tuple) -> Access:
        buf, offsets = loc
        moved = np.moveaxis(offsets, axis, -1)
        aff = _affine(moved)
        if aff is None:
            buf, offsets = self.materialise(loc)
            moved = np.moveaxis(offsets, axis, -1)
            aff = _affine(moved)
        step = aff[1][-1]
        return Access(buf, aff[0], aff[1][:-1], tuple(step * t for t in range(moved.shape[-1])))

    def unrolled(self, node: N.Node) -> tuple:
        args = node.inputs
        if node.size + sum(a.size for a in args) > UNROLL_LIMIT:
            raise Unplannable(f"{node.prim.name} of {node.size} elements")
        arrays, stand_ins, ins = [], [], []
        for i, a in enumerate(args):
            if a.constant and a.small():
                arrays.append(a.atoms())
                continue
            s = _stand_ins(a.shape, f"a{i}")
            arrays.append(s)
            stand_ins.append(s.reshape(-1))
            buf, offsets = self.loc[id(a)]
            ins.append(Access(buf, 0, (), tuple(int(k) for k in offsets.flat)))
        atoms = node.prim.build(arrays, node.params)
        loc = self.fresh(node)
        out = Access(loc[0], 0, (), tuple(range(node.size)))
        return self.body_block(node, (), np.asarray(atoms, dtype=object).reshape(-1),
                               stand_ins, ins, out, loc)

    # -- outputs ---------------------------------------------------------------------------
    def output(self, o: int, node: N.Node) -> None:
        buf, offsets = self.loc[id(node)]
        b = self.buffers[buf]
        fresh = b.kind == "temp" and b.size == node.size and np.array_equal(
            offsets.reshape(-1), np.arange(node.size))
        if fresh:
            self.buffers[buf] = b._replace(kind="output", index=o)
            return
        self.buffers.append(Buffer("output", o, node.size, node.dtype.kind == "b"))
        new = len(self.buffers) - 1
        space = node.shape
        self.blocks.append(Block(space, _copy_body(1, node.dtype.kind == "b"),
                                 (self.access((buf, offsets), space),),
                                 (self.access((new, _flat(space)), space),)))


def _sum(acc, x, n):
    return G.add(acc, x)


def _mean(acc, x, n):
    return G.add(acc, G.mul(x, G.number(1.0 / n)))


# name -> (initial value, accumulation, value of an empty reduction)
_REDUCE = {
    "reduce_sum": (-0.0, _sum, 0.0),
    "reduce_mean": (-0.0, _mean, np.nan),
    "reduce_prod": (1.0, lambda acc, x, n: G.mul(acc, x), 1.0),
    "reduce_max": (-np.inf, lambda acc, x, n: G.call(sp.Max, acc, x), -np.inf),
    "reduce_min": (np.inf, lambda acc, x, n: G.call(sp.Min, acc, x), np.inf),
}

"""Tensor nodes planned as loop nests (:mod:`symtape.codegen.loops`) instead of elements.

A traced function whose element view would be large (a neural network's weights, a batch)
is compiled node by node: each node gets a *location* -- a buffer and the offset of each of
its elements in it -- and, unless it is a view of another node's location, a loop block:

- each op's loop rule (``Primitive.loop``, in its family module under ``symtape/ops/``)
  places it, written against this planner's generic machinery (buffers, accesses, fills,
  accumulations, elementwise bodies, views, unrolled element views): an elementwise op is
  one loop over its shape whose body is its template (:meth:`_Planner.elementwise`),
  structural ops are views (:meth:`_Planner.structural`), reductions, products, einsums,
  convolutions and poolings accumulate in loop nests, the ops along one axis run their
  one-slice element view per slice, and an op with no loop form runs its element view
  unrolled when small (:meth:`_Planner.unrolled`) or raises :class:`Unplannable`;
- the planner itself chooses, from what ops say of themselves (``pointwise``, ``places``,
  ``total_from_args``, ...), which elementwise nodes fuse into their readers, which
  zero-padded moves are read in place (chains of moves as one move), which outputs are
  written straight from their arguments and which totals over points accumulate from
  arguments.

Values are those of eager evaluation of large tensors (the template level): a node's
elements do not fold against its neighbours' as the element DAG's do (``x * 0`` is computed,
not dropped), which changes values only at non-finite inputs -- but for the large, mostly
zero constants that ops compute from constants alone (a coloured sweep's seeds'
cotangents): they are folded at plan time and their zeros are the element DAG's in sums
(:mod:`~symtape.compile.sparse_terms`). Integer tensors are held as doubles, as
straight-line kernels hold them (exact up to 2**53).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from symtape.core import node as N
from symtape.codegen.loops import (
    POINT_ALIGN, Access, Block, Buffer, LoopPlan, layouts, wide_registers,
)
from symtape.codegen.plan import Instr, OutLayout, Plan, build_plan
from symtape.codegen.routines import Routine
from symtape.base.errors import UnboundLeafError
from symtape.compile.fusion import (
    SparseFlat, constant_folds, cut, destinations, fused, holey, numeric, pointwise, through,
)
from symtape.compile.offsets import (
    affine, box_of, chains, composed, composed_move, cuts_along, finer_affine, finer_pair,
    flat_places, moved_offsets, past_links, read_box, readers, runs_of, split_affine,
)
from symtape.compile import liveness
from symtape.compile.liveness import used as _used
from symtape.compile.compaction import compact
from symtape.compile.sparse_terms import skip_zero_terms
from symtape.core.primitive import Unplannable
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["UNROLL_LIMIT", "plan_loops", "plan_roots", "Unplannable"]

#: Ops without a loop form are unrolled up to this many elements (arguments and result).
UNROLL_LIMIT = 4096
#: ... and a gather is copied run by run (one loop each) when it has at most this many runs
#: of consecutive elements, this long on average (the non-zeros of a compressed sparse
#: Jacobian, colour by colour): LLVM takes a second over an unrolled copy of 1,500.
MAX_RUNS = 64
RUN_LENGTH = 16
#: Float constants of at least this many elements with at most one in SPARSE_SHARE
#: non-zero are built in the prologue from their non-zeros (planner.sparse_constant).
SPARSE_CONSTANT = 4096
SPARSE_SHARE = 8
#: An elementwise op whose arguments or destination change piece within its shape (a
#: zero-padded scatter: zeros, then the source; a gather writing it straight into an output)
#: runs as one loop per box where all of them are affine, up to this many boxes.
MAX_REGIONS = 16
def _from_args(node: N.Node, kind: str) -> bool:
    """Whether a total of ``kind`` over points of ``node`` is accumulated straight from its
    arguments (a sum of sums, a maximum of maxima, an outer product's sum over points:
    ``Primitive.total_from_args``)."""
    return bool(kind) and node.kind == "op" and node.prim.total_from_args(node, kind)


def plan_roots(outputs: Sequence[N.Node], totals: Sequence[str]) -> list:
    """The nodes a plan places: the outputs, but the arguments of a total computed from them
    directly (:func:`_from_args`); what :func:`~.strategy.point_chunk` sizes chunks by."""
    out = []
    for o, node in enumerate(outputs):
        kind = totals[o] if o < len(totals) else ""
        if _from_args(node, kind):
            out.extend(node.inputs)
        else:
            out.append(node)
    return out


def plan_loops(outputs: Sequence[N.Node], inputs: Sequence[N.Node],
               threads: int = 1, points: int = 0, shared: Sequence[bool] = (),
               totals: Sequence[str] = ()) -> LoopPlan:
    """The loop plan computing ``outputs`` from the argument nodes ``inputs`` (large blocks
    split across ``threads``); raises :class:`Unplannable` when some node has no loop form
    and is too large to unroll. ``points`` (a multiple of
    :data:`~symtape.codegen.loops.POINT_ALIGN`): the plan runs chunks of that many points
    through each block at once (a matrix product of each point's row vector is one product
    over the chunk), instead of one point at a time; ``shared[i]``: argument ``i`` is the
    same for all points (a weight matrix), read once and never staged; ``totals[o]``
    (``'sum'``, ``'max'``, ``'min'``; needs ``points``): output ``o`` is not one value per
    point but that reduction of its values over all points (a gradient summed over a
    batch), accumulated into an output without batch dimensions that the caller
    initialises.

    >>> import symtape as st
    >>> x = st.Variable(np.arange(6.0).reshape(2, 3))
    >>> y = st.reduce_sum(st.exp(x) * 2.0, axis=0)
    >>> lp = plan_loops([y._node], [x._node])  # zeros, then one loop adding exp(x) * 2
    >>> len(lp.blocks), lp.outputs[0].shape
    (2, (3,))
    """
    if points and (points < 0 or points % POINT_ALIGN):
        raise ValueError(f"points must be a positive multiple of {POINT_ALIGN}, got {points}")
    totals = tuple(totals) + ("",) * (len(outputs) - len(totals))
    if any(totals) and not points:
        raise ValueError("totals over points need a plan over points")
    p = _Planner(points)
    shared = tuple(bool(f) for f in shared) + (False,) * (len(inputs) - len(shared))
    for i, node in enumerate(inputs):
        p.check(node)
        p.loc[id(node)] = p.fresh(node, bool(points) and not shared[i], "input", i)
    roots = plan_roots(outputs, totals)
    order = N.ancestries(roots)
    folds = constant_folds(order, roots, SPARSE_CONSTANT, SPARSE_SHARE)
    if folds:  # placed by their values, without what they are computed from
        order = cut(order, roots, folds)
        for node in order:
            if id(node) in folds:
                p.loc[id(node)] = p.folded(node, folds[id(node)][1])
                p.known[p.loc[id(node)][0]] = folds[id(node)][1]
        order = [node for node in order if id(node) not in folds]
    users = p.users = readers(order, roots)
    p.fused = fused(order, users, p.loc, folds)
    p.holey = holey(order, users)
    p.links = chains(order, users)  # read through: their readers read their sources
    p.through, again = through(order, past_links(users, p.links), p.holey, p.fused, roots)
    p.fused |= again
    p.dest = destinations(outputs, totals, users, p.fused)
    results = {id(node) for node in outputs}
    for node in order:  # (a select fused into its readers and an output is placed too)
        if not any(id(node) in s for s in (p.loc, p.through, p.links)) and (
                id(node) not in p.fused or id(node) in results):
            p.check(node)
            p.loc[id(node)] = p.place(node)
    for o, node in enumerate(outputs):
        if totals[o]:
            p.total(o, node, totals[o])
        else:
            p.output(o, node)
    skip_zero_terms(p)
    compact(p)
    ins, outs = layouts([n.shape for n in inputs],
                        [(n.shape, n.dtype.kind == "b") for n in outputs])
    return LoopPlan(tuple(p.buffers), tuple(p.blocks), ins, outs,
                    1 if points else max(1, int(threads)), points,
                    shared if points and any(shared) else (),
                    totals if any(totals) else ())


def _copy_body(n: int, boolean: bool) -> Plan:
    """The plan copying ``n`` elements (identity, element ``k`` to element ``k``)."""
    from symtape.codegen.plan import ArgLayout

    instrs = tuple(Instr("input", (), (0, k)) for k in range(n))
    return Plan(instrs, (ArgLayout((n,), ("x",) * n),),
                (OutLayout((n,), tuple(range(n)), boolean),))


def _zero_body(n: int, boolean: bool) -> Plan:
    """The plan writing ``n`` zeros."""
    zero = sp.false if boolean else G.ZERO
    return build_plan([np.full(n, zero, dtype=object)], [])


def _live_where(value, count):
    """``select(count != 0, value, 0)``: ``value`` read as a structural zero where its
    ``count`` of live terms is 0 (products fold into it)."""
    return G.piecewise((value, G.relation(sp.Unequality, count, G.ZERO)), (G.ZERO, sp.S.true))


def _hole(leaf):
    """A hole's stand-in (read from a zero) as a structural zero: products fold into it,
    sums add it (``0 + -0.0`` is ``0.0``, as in eager values)."""
    return _live_where(leaf, leaf)


def _stand_ins(shape: tuple, name: str) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = G.Leaf.new(name)
    return out


class _Planner:
    """Locations and blocks; with ``points`` (a chunk size), every node computed from the
    arguments holds one slice per point of a chunk (point-major: element ``e`` of point
    ``p`` at ``p * size + e``, as the caller's arrays hold them) and its blocks have a
    leading dimension over the points; constants and nodes computed from them alone are
    shared by the chunk's points."""

    def __init__(self, points: int = 0) -> None:
        self.P = points
        self.buffers: list = []
        self.blocks: list = []
        self.loc: dict = {}  # id(node) -> (buffer, offsets)
        self.fused: set = set()  # ids of nodes computed inside their user's loop
        self.holey: set = set()  # ids of nodes whose zeros may stay unwritten (holey)
        self.holes: dict = {}  # id(node) -> (locs, maps, zeros, args) of those placed so
        self.through: set = set()  # ids of nodes computed inside readers of a scatter
        self.inline: dict = {}  # id(scatter) -> (its argument of those, its places' map)
        self.dest: dict = {}  # id(node) -> where it is written in an output (destinations)
        self.links: dict = {}  # id(move) -> (source, map): links of chains of moves
        self.counts: dict = {}  # id(node) -> its count of live terms (a stand-in node): a
        # sum's, a placed select's (1 or 0), a move's of those: readers read it as a select
        self.zero: int | None = None  # a constant buffer of one zero (the zeros of holes)
        self.one: int | None = None  # a constant buffer of one 1.0 (counts of plain parts)
        self.negative_zero: int | None = None  # one of -0.0 (sums' start)
        self.per_point: set = set()  # buffers holding a slice per point of the chunk
        self.index_arrays: dict = {}  # (shape, bytes) -> its 'indices' buffer
        self.known: dict = {}  # buffer -> the values (SparseFlat) of a constant folded now
        self.users: dict = {}  # id(node) -> the nodes reading it (None: an output)

    # -- what loop rules share (``Primitive.loop``'s protocol) ------------------------------
    affine = staticmethod(affine)
    finer = staticmethod(finer_affine)
    composed = staticmethod(composed)
    pointwise = staticmethod(pointwise)
    flat = staticmethod(flat_places)
    stand_ins = staticmethod(_stand_ins)
    copy_body = staticmethod(_copy_body)
    numeric = staticmethod(numeric)
    build_plan = staticmethod(build_plan)
    at = staticmethod(Access)  # (buffer, offset, strides, core offsets) read in a block
    routine = staticmethod(Routine)  # a whole-matrix algorithm as a block's body
    align = POINT_ALIGN  # the points a block over points may take a step

    def temp(self, size: int, batched: bool = False, boolean: bool = False) -> int:
        """A fresh temporary buffer of ``size`` elements (per point when ``batched``)."""
        return self.add_buffer(Buffer("temp", -1, size, boolean), batched)

    def constant_buffer(self, values: Sequence, boolean: bool = False) -> int:
        """A fresh constant buffer holding ``values``."""
        return self.add_buffer(Buffer("const", -1, len(values), boolean, tuple(values)))

    @functools.cached_property
    def wide_vectors(self) -> bool:
        """Whether this CPU has AVX-512's 32 vector registers of 512 bits (register tiles
        of products are then 8 rows of two of them; codegen asks LLVM for those
        registers)."""
        return wide_registers()

    # -- buffers and accesses --------------------------------------------------------------
    def buffer(self, kind: str, index: int, node: N.Node, values=(), batched: bool = False
               ) -> int:
        return self.add_buffer(Buffer(kind, index, node.size, node.dtype.kind == "b",
                                      tuple(values)), batched)

    def add_buffer(self, buf: Buffer, batched: bool = False) -> int:
        """Appends ``buf`` (its size per point, times the chunk's points when ``batched``);
        returns its number."""
        if batched:
            buf = buf._replace(size=buf.size * self.P)
        self.buffers.append(buf)
        if batched:
            self.per_point.add(len(self.buffers) - 1)
        return len(self.buffers) - 1

    def fresh(self, node: N.Node, batched: bool = False, kind: str = "temp",
              index: int = -1) -> tuple:
        return (self.buffer(kind, index, node, batched=batched),
                flat_places(self.shape(node.shape, batched)))

    def shape(self, shape: tuple, batched: bool) -> tuple:
        """``shape`` with the chunk's points in front when ``batched``."""
        return (self.P,) + tuple(shape) if batched else tuple(shape)

    def batched(self, loc: tuple) -> bool:
        return loc[0] in self.per_point

    def read(self, node: N.Node) -> tuple:
        """Per axis of ``node``, the ``(start, stop)`` its readers read (:func:`read_box`)."""
        return read_box(node, self.users.get(id(node), ()))

    def spread(self, loc: tuple, shape: tuple, batched: bool) -> np.ndarray:
        """The offsets of ``loc`` broadcast over a node of ``shape`` (right-aligned; the
        points axis stays in front)."""
        offsets = loc[1]
        if self.batched(loc):
            core = offsets.shape[1:]
            offsets = offsets.reshape((self.P,) + (1,) * (len(shape) - len(core)) + core)
        return np.broadcast_to(offsets, self.shape(shape, batched))

    def point_stride(self, offsets: np.ndarray) -> int:
        """The distance between consecutive points' slices of a per-point location."""
        first = offsets[0]
        step = int(offsets[1].flat[0] - first.flat[0]) if first.size and self.P > 1 else 0
        ramp = np.arange(self.P, dtype=np.int64).reshape((-1,) + (1,) * first.ndim) * step
        if not np.array_equal(offsets, first[None] + ramp):
            raise Unplannable("points placed irregularly")
        return step

    def access(self, loc: tuple, shape: tuple, batched: bool = False,
               core: tuple = (0,)) -> Access:
        """``loc`` read over a node of ``shape`` (broadcast, right-aligned; over the points
        too when ``batched``); copied to a contiguous temporary first when its offsets are
        not affine."""
        aff = affine(self.spread(loc, shape, batched))
        if aff is None:
            loc = self.materialise(loc)
            aff = affine(self.spread(loc, shape, batched))
        return Access(loc[0], aff[0], aff[1], core)

    def block(self, space: tuple, body: Plan, ins, outs, accumulate: bool = False,
              batched: bool = False, points: int = 0, contract: bool = False,
              count: int = -1, runs: int = -1) -> None:
        """Appends a block; ``batched``: its first dimension runs over the chunk's points
        (``points`` of them per iteration, default one); ``count``: the dimension that runs
        over the chunk's real points (a total); ``runs``: an inner dimension of extent
        ``P`` that runs over the chunk's points (a loop over steps around them)."""
        self.blocks.append(Block(self.shape(space, batched) if batched and not points
                                 else space, body, tuple(ins), tuple(outs), accumulate,
                                 points or int(batched), contract, count, runs))

    def indexed(self, buf: int, offsets: np.ndarray) -> Access:
        """``buf`` read or written at ``offsets`` (one per iteration of a block's space, the
        chunk's points in front when it runs over them): strides where the offsets step
        evenly, the rest an index array (a constant ``'indices'`` buffer, one per distinct
        array)."""
        strides, index = split_affine(offsets)
        if index.size == 1:
            return Access(buf, int(index.flat[0]), strides)
        if index.max() >= 2 ** 31 or index.min() < -2 ** 31:
            raise Unplannable(f"an index array of places beyond 32 bits ({index.max()})")
        key = (index.shape, index.tobytes())
        ibuf = self.index_arrays.get(key)
        if ibuf is None:
            ibuf = self.index_arrays[key] = self.add_buffer(Buffer(
                "indices", -1, index.size, False, tuple(index.reshape(-1).tolist())))
        istrides = tuple(0 if n == 1 else st // index.itemsize
                         for n, st in zip(index.shape, index.strides))
        return Access(buf, 0, strides, (0,), (ibuf, 0, istrides))

    def materialise(self, loc: tuple, into: int | None = None) -> tuple:
        """``loc`` copied to a contiguous temporary (or to buffer ``into``, of its size): by
        runs of consecutive elements (a gather of a few pieces), else element by element (up
        to :data:`UNROLL_LIMIT`)."""
        buf, offsets = loc
        batched = self.batched(loc)
        per = offsets[0] if batched else offsets
        n = per.size
        starts = runs_of(per.reshape(-1))
        by_runs = len(starts) <= MAX_RUNS and n >= RUN_LENGTH * len(starts)
        finer = None if by_runs or n <= UNROLL_LIMIT else finer_affine(per)
        boolean = self.buffers[buf].boolean
        if n > UNROLL_LIMIT and not by_runs and finer is None:  # one loop, an index array
            new = self.add_buffer(Buffer("temp", -1, n, boolean), batched) if into is None \
                else into
            dst = affine(flat_places(self.shape(per.shape, batched)))
            self.block(per.shape, _copy_body(1, boolean), (self.indexed(buf, offsets),),
                       (Access(new, dst[0], dst[1]),), batched=batched)
            return new, flat_places(offsets.shape)
        if finer is not None and batched:
            self.point_stride(offsets)  # (raises when points are placed irregularly)
        new = self.add_buffer(Buffer("temp", -1, n, boolean), batched) if into is None \
            else into
        if finer is not None:  # one copy loop over a finer index space (windows of images)
            shape, (start, strides) = finer
            step = (self.point_stride(offsets),) if batched else ()
            out_step = (n,) if batched else ()
            dst = affine(flat_places(shape))
            self.block(shape, _copy_body(1, boolean), (Access(buf, start, step + strides),),
                       (Access(new, dst[0], out_step + dst[1]),), batched=batched)
            return new, flat_places(offsets.shape)
        if by_runs:
            step = (self.point_stride(offsets),) if batched else ()
            out_step = (n,) if batched else ()
            for lo, hi in zip(starts, starts[1:] + [n]):
                src = Access(buf, int(per.flat[lo]), step + (1,))
                dst = Access(new, lo, out_step + (1,))
                self.block((hi - lo,), _copy_body(1, boolean), (src,), (dst,),
                           batched=batched)
            return new, flat_places(offsets.shape)
        core = tuple(int(k) for k in per.flat)
        if batched:
            src = Access(buf, 0, (self.point_stride(offsets),), core)
            dst = Access(new, 0, (n,), tuple(range(n)))
        else:
            src, dst = Access(buf, 0, (), core), Access(new, 0, (), tuple(range(n)))
        self.block((), _copy_body(n, boolean), (src,), (dst,), batched=batched)
        return new, flat_places(offsets.shape)

    def check(self, node: N.Node) -> None:
        if node.dtype.kind not in "fbiu":
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
        return node.prim.loop(self, node)

    def constant(self, node: N.Node, values: np.ndarray) -> tuple:
        """A constant buffer of ``values``; a large float constant that is mostly zeros (the
        one-hot seeds of a coloured sweep) is built instead by two blocks that depend on no
        point (the plan's prologue): zeros, then its other elements written by an index
        array (the module holds those only)."""
        dtype = bool if node.dtype.kind == "b" else float
        flat = np.asarray(values, dtype=dtype).reshape(-1)
        if dtype is float and flat.size >= SPARSE_CONSTANT:
            return self.folded(node, SparseFlat(flat), flat)
        return self.buffer("const", -1, node, flat.tolist()), flat_places(node.shape)

    def folded(self, node: N.Node, values: SparseFlat, flat: np.ndarray | None = None
               ) -> tuple:
        """A float constant held by its non-zeros (``values``; -0.0 is not the zero filled
        in; ``flat``: its elements, when at hand): one with at most one in SPARSE_SHARE of
        them is built by two blocks of the prologue (:meth:`sparse_constant`), another
        spelled out."""
        if len(values.nz) * SPARSE_SHARE <= values.size:
            return self.sparse_constant(node, values)
        flat = values.dense() if flat is None else flat
        return self.buffer("const", -1, node, flat.tolist()), flat_places(node.shape)

    def sparse_constant(self, node: N.Node, values: SparseFlat) -> tuple:
        loc = self.fresh(node)
        self.fill(loc, node.shape, 0.0)
        nz, vals = values.nz, values.values
        if not len(nz):
            return loc
        out = self.indexed(loc[0], nz.reshape(-1))
        if (vals == vals[0]).all() and np.signbit(vals).all() == np.signbit(vals[0]):
            self.block((len(nz),), build_plan([np.asarray(G.number(float(vals[0])),
                                                          dtype=object)], []), (), (out,))
        else:
            src = self.constant_buffer(vals.tolist())
            self.block((len(nz),), _copy_body(1, False), (Access(src, 0, (1,)),), (out,))
        return loc

    def structural(self, node: N.Node, maps: list | None = None, args=None) -> tuple:
        """A node whose element ``j`` is element ``maps[a][j]`` of argument ``a`` (or zero
        where no map has it): the places of the argument's elements, or a copy; a link of a
        chain of moves is read as its source at the composed places (one move)."""
        own = maps is None and args is None  # (the op's own rearrangement applies)
        args = node.inputs if args is None else args
        if maps is None:
            maps = node.prim.index_maps([a.shape for a in args], node.params)
        if len(args) == 1 and id(args[0]) in self.links:
            source, inner = self.links[id(args[0])]
            args, maps = [source], [composed_move(node if own else None, inner, maps[0])]
            own = False
        if len(args) == 1 and id(args[0]) in self.through:  # computed where it is read
            self.inline[id(node)] = (args[0], maps[0])
            return -1, None
        locs = [self.located(a) for a in args]
        bufs = {loc[0] for loc, m in zip(locs, maps) if (m >= 0).any()}
        covered = np.zeros(node.shape, dtype=bool)
        for m in maps:
            covered |= m >= 0
        holey = not covered.all() and len(bufs) <= 1 and id(node) in self.holey
        if len(bufs) > 1 or not (covered.all() or holey):  # several buffers, zeros: copied
            loc = self.assembled(node, locs, maps, ~covered)
            self.parts_count(node, args, maps, covered)
            return loc
        buf = next(iter(bufs)) if bufs else locs[0][0]
        batched = buf in self.per_point
        offsets = moved_offsets(node if own and covered.all() else None, locs, maps, buf,
                                self.shape(node.shape, batched), batched)
        if holey:  # its zeros are -1 places, read by its (elementwise) users as zeros
            offsets[..., ~covered] = -1
            self.holes[id(node)] = (locs, maps, ~covered, args)
            if any(id(a) in self.counts for a in args):  # (else its readers' boxes' holes)
                self.parts_count(node, args, maps, covered)
        elif len(args) == 1 and id(args[0]) in self.counts and covered.all():
            self.moved_count(node, args[0], maps[0])
        else:
            self.parts_count(node, args, maps, covered)
        return buf, offsets

    def assembled(self, node: N.Node, locs: list, maps: list, zeros=None) -> tuple:
        """A fresh buffer for a node made of parts of several (and of zeros, where
        ``zeros``): each argument's part copied by one loop where its places (in the
        argument and in the node) are arithmetic progressions, else element by element (up
        to :data:`UNROLL_LIMIT`)."""
        batched = any(self.batched(loc) for loc, m in zip(locs, maps) if (m >= 0).any())
        loc = self.fresh(node, batched)
        boolean = node.dtype.kind == "b"
        out_flat = flat_places(node.shape)
        if zeros is not None and zeros.any():
            self.zeroed(loc, out_flat[zeros], node.size, batched, boolean)
        for (buf, offs), m in zip(locs, maps):
            inside = m >= 0
            if not inside.any():
                continue
            here = self.batched((buf, offs))
            per = (offs[0] if here else offs).reshape(-1)
            box = box_of(inside)  # a part that is a box of the node: its places in its shape
            where = box if box is not None else inside
            src, dst = per[m[where]], out_flat[where]
            step = (self.point_stride(offs) if here else 0,) if batched else ()
            out_step = (node.size,) if batched else ()
            a_src, a_dst = affine(src), affine(dst)
            if a_src is not None and a_dst is not None:
                ins = (Access(buf, a_src[0], step + a_src[1]),)
                outs = (Access(loc[0], a_dst[0], out_step + a_dst[1]),)
                self.block(src.shape, _copy_body(1, boolean), ins, outs, batched=batched)
                continue
            src, dst = src.reshape(-1), dst.reshape(-1)
            finer = finer_pair(src, dst) if src.size > UNROLL_LIMIT else None
            if finer is not None:  # affine over a finer index space (a strided scatter)
                shape, (s0, ss), (d0, ds) = finer
                self.block(shape, _copy_body(1, boolean), (Access(buf, s0, step + ss),),
                           (Access(loc[0], d0, out_step + ds),), batched=batched)
                continue
            if src.size > UNROLL_LIMIT:  # one loop reading and writing by index arrays
                full = offs.reshape(self.P, -1)[:, m[where].reshape(-1)] if here else src
                lead = (self.P,) if batched else ()
                to = dst[None] + node.size * np.arange(self.P)[:, None] if batched else dst
                self.block((src.size,), _copy_body(1, boolean),
                           (self.indexed(buf, np.broadcast_to(full, lead + src.shape)),),
                           (self.indexed(loc[0], to),), batched=batched)
                continue
            ins = (Access(buf, 0, step, tuple(int(k) for k in src)),)
            outs = (Access(loc[0], 0, out_step, tuple(int(k) for k in dst)),)
            self.block((), _copy_body(src.size, boolean), ins, outs, batched=batched)
        return loc

    def zeroed(self, loc: tuple, places: np.ndarray, size: int, batched: bool,
               boolean: bool) -> None:
        """Zeros written at the flat ``places`` of ``loc``'s buffer (of ``size`` per point)."""
        out_step = (size,) if batched else ()
        aff = affine(places)
        if aff is not None:
            outs = (Access(loc[0], aff[0], out_step + aff[1]),)
            self.block((places.size,), _zero_body(1, boolean), (), outs, batched=batched)
            return
        if places.size > UNROLL_LIMIT:  # (a strided scatter's gaps): zero it all, the
            return self.zeroed(loc, np.arange(size), size, batched, boolean)  # parts follow
        outs = (Access(loc[0], 0, out_step, tuple(int(k) for k in places)),)
        self.block((), _zero_body(places.size, boolean), (), outs, batched=batched)

    def body_block(self, node: N.Node, space: tuple, atoms, stand_ins: list, ins: list,
                   out: Access | None = None, loc: tuple | None = None,
                   batched: bool = False) -> tuple:
        """A block over ``space`` computing ``atoms`` (one slice of the node) from the
        ``stand_ins`` arrays read at the accesses ``ins`` and writing them at ``out`` in
        ``loc`` (default: one element per iteration of a fresh buffer); returns ``loc``."""
        body = self.body(node, atoms, stand_ins)
        if loc is None:
            loc = self.fresh(node, batched)
            out = self.access(loc, space, batched)
        self.block(space, body, ins, (out,), batched=batched)
        return loc

    def body(self, node: N.Node, atoms, stand_ins: list) -> Plan:
        """The plan computing ``atoms`` (the node's, its kind of values) from ``stand_ins``."""
        body = build_plan([np.asarray(atoms, dtype=object)],
                          [np.asarray(s, dtype=object) for s in stand_ins])
        boolean = node.dtype.kind == "b"
        if body.outputs[0].boolean != boolean and body.outputs[0].refs:
            raise Unplannable(f"{node.prim.name}: a {'boolean' if boolean else 'float'} "
                              "result computed as the other kind")
        if body.outputs[0].boolean != boolean:
            body = Plan(body.instrs, body.inputs,
                        (OutLayout(body.outputs[0].shape, body.outputs[0].refs, boolean),))
        return body

    def elementwise(self, node: N.Node) -> tuple:
        """One loop over the node's shape; its body is the template with the templates of
        fused arguments (:func:`fused`) built in, each other argument a stand-in read with
        broadcast strides (or, with arguments that are partly zeros or a destination in an
        output, one loop per box of the shape: :meth:`in_regions`)."""
        stand, atom, reads = self._template(node)
        holey = [arg for _, arg in stand.values()
                 if id(arg) in self.holes or id(arg) in self.inline]
        if holey or id(node) in self.dest:
            loc = self.in_regions(node, stand, atom, reads)
            if loc is None and any(id(arg) in self.inline for arg in holey):
                self.expand(holey)  # the inlined arguments computed apart, then again
                stand, atom, reads = self._template(node)  # (with their counts, if any)
                loc = self.in_regions(node, stand, atom, reads)
            if loc is not None:
                return loc
            placed = False
            for arg in holey:  # not in boxes: the zeros written after all
                if id(arg) in self.holes:  # (not one placed apart by expand above)
                    locs, maps, zeros, parts = self.holes.pop(id(arg))
                    self.loc[id(arg)] = self.assembled(arg, locs, maps, zeros)
                    if id(arg) not in self.counts:  # its zeros are structural: counted
                        self.parts_count(arg, parts, maps, ~zeros)
                    placed = True
            if placed:
                stand, atom, reads = self._template(node)
        for leaf, arg in stand.values():
            if atom is leaf:  # the template is one of its arguments: a view of it
                loc = self.loc[id(arg)]
                return loc[0], self.spread(loc, node.shape, self.batched(loc))
        batched = any(self.batched(self.loc[id(arg)]) for _, arg in reads)
        ins = [self.access(self.loc[id(arg)], node.shape, batched) for _, arg in reads]
        leaves = [leaf for leaf, _ in reads]
        loc = self.body_block(node, node.shape, atom, leaves, ins, batched=batched)
        self.live_mask(node, [(node.shape, atom, leaves, ins,
                               self.access(loc, node.shape, batched))], batched)
        return loc

    def _template(self, node: N.Node) -> tuple:
        """``(stand, atom, reads)``: the elementwise ``node``'s template over its arguments
        as they are placed now (:meth:`fused_atom`; ``stand``: id(argument node) ->
        (stand-in leaf, node)) and the stand-ins it reads."""
        stand: dict = {}
        with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
            atom = self.fused_atom(node, stand)
        used = _used(atom)
        return stand, atom, [(leaf, arg) for leaf, arg in stand.values() if leaf in used]

    def in_regions(self, node: N.Node, stand: dict, atom, reads: list) -> tuple | None:
        """The elementwise ``node`` as one loop per box of its shape where each argument is
        affine or a hole of a partly-zero one (read from a constant zero, the same value
        its copy would hold), written into a fresh buffer or, with a destination, straight
        into the output; None when more than :data:`MAX_REGIONS` boxes would be needed.
        A scatter whose argument is computed here (:func:`through`) is, in its boxes
        that are not holes, that argument's template, its own arguments read through the
        scatter's places."""
        inlined = {}  # id(scatter) -> (its argument's atom, [(leaf, node)] it reads, map)
        for _, arg in reads:
            if id(arg) in self.inline:
                source, m = self.inline[id(arg)]
                own: dict = {}
                with np.errstate(all="ignore"):
                    e_atom = self.fused_atom(source, own)
                used = _used(e_atom)
                e_reads = [(leaf, a, source) for leaf, a in own.values() if leaf in used]
                if any(id(a) in self.holes or id(a) in self.inline for _, a, _ in e_reads):
                    return None
                inlined[id(arg)] = (e_atom, e_reads, m)
        located = [(leaf, arg, node) for leaf, arg in reads if id(arg) not in inlined] + [
            r for e_atom, e_reads, m in inlined.values() for r in e_reads]
        batched = any(self.batched(self.loc[id(a)]) for _, a, _ in located)
        o, gather, places = self.dest.get(id(node), (None, None, None))
        if gather is not None and batched != bool(self.P):
            gather = None  # (an output over points of a value the points share)
        shape = node.shape
        # sources: (leaf, offsets of the first point over the node's shape, the step
        # between points' places, buffer); a scatter computed here has no buffer (its leaf
        # is read only where it is a hole)
        sources = []
        switches = []  # (index in sources, id) of the arguments read (or computed) here
        try:
            for leaf, arg in reads:
                switches.append((len(sources), id(arg)))
                if id(arg) not in inlined:
                    loc = self.loc[id(arg)]
                    sources.append((leaf, *self.first_point(loc, shape), loc[0]))
                    continue
                _, e_reads, m = inlined[id(arg)]
                hole = m < 0
                sources.append((leaf, np.broadcast_to(np.where(hole, -1, 0), shape), 0, None))
                take = np.where(hole, 0, m).reshape(-1)
                for e_leaf, a, source in e_reads:
                    loc = self.loc[id(a)]
                    f, step = self.first_point(loc, source.shape)
                    buf, f, step = self.gathered(loc[0], f.reshape(-1)[take].reshape(shape),
                                                 step, hole)
                    sources.append((e_leaf, np.where(hole, -1, f), step, buf))
        except Unplannable:  # (points placed irregularly)
            return None
        pieces = [f for _, f, _, _ in sources]
        steps = [step for _, _, step, _ in sources]
        if gather is not None:
            pieces.append(places)
            steps.append(gather.size)
        cuts = [set() for _ in shape]
        for piece in pieces:
            if affine(piece) is not None and not (piece < 0).any():
                continue  # (one piece: no cut; an affine place array has its first >= 0)
            for d in range(len(shape)):
                found = cuts_along(piece, d, 4 * MAX_REGIONS)
                if found is None:
                    return None
                cuts[d] |= found
        bounds = [sorted({0, n} | c) for n, c in zip(shape, cuts)]
        if math.prod(len(b) - 1 for b in bounds) > MAX_REGIONS:
            return None
        boxes = []
        for box in itertools.product(*[[slice(a, b) for a, b in zip(bd, bd[1:])]
                                       for bd in bounds]):
            accs = []
            for k, (piece, step) in enumerate(zip(pieces, steps)):
                hole = piece[box] < 0
                if hole.all():
                    accs.append(None)
                    continue
                if k < len(sources) and sources[k][3] is None:
                    accs.append(())  # a scatter computed here: its argument's template
                    continue
                aff = None if hole.any() else affine(piece[box])
                if aff is None:
                    return None
                accs.append((aff[0], (step,) + aff[1]) if batched else aff)
            boxes.append((box, accs))
        if gather is not None:
            out_buf = self.buffer("output", o, gather, batched=batched)
            self.loc[id(gather)] = (out_buf, flat_places(self.shape(gather.shape, batched)))
            ramp = gather.size * np.arange(self.P, dtype=np.int64).reshape(
                (-1,) + (1,) * len(shape))
            loc = (out_buf, places[None] + ramp if batched else places)
        else:
            loc = self.fresh(node, batched)
        space_dims = len(shape) + batched
        bodies: dict = {}
        masks: list = []  # (box's space, its atom, stand-ins read, their accesses, out)
        for box, accs in boxes:
            if gather is not None:
                if accs[-1] is None:
                    continue  # elements the output does not take
                out = Access(out_buf, *accs.pop())
            else:
                aff = affine(flat_places(shape)[box])
                out = Access(loc[0], aff[0], ((node.size,) if batched else ()) + aff[1])
            key = tuple(accs[k] is None for k, _ in switches)  # which are holes here
            if key not in bodies:
                here = atom
                if any(key) or inlined:  # a hole: a select of its zero (products fold in)
                    swap = {i: _hole(sources[k][0]) if hole else inlined[i][0] if i in
                            inlined else sources[k][0] for (k, i), hole in zip(switches, key)}
                    with np.errstate(all="ignore"):
                        here = self.fused_atom(node, stand, swap)
                used = _used(here)
                order = [k for k, (leaf, *_) in enumerate(sources) if leaf in used]
                bodies[key] = (self.body(node, here, [sources[k][0] for k in order]), order,
                               here)
            body, order, here = bodies[key]
            ins = [Access(sources[k][3], *accs[k]) if accs[k] is not None else
                   Access(self.zeros(), 0, (0,) * space_dims) for k in order]
            space = tuple(s.stop - s.start for s in box)
            self.block(space, body, ins, (out,), batched=batched)
            masks.append((space, here, [sources[k][0] for k in order], ins, out))
        if gather is None:
            self.live_mask(node, masks, batched)
        return loc

    def gathered(self, buf: int, f: np.ndarray, step: int, hole: np.ndarray) -> tuple:
        """``(buffer, offsets, step)``: the offsets ``f`` (of the first point; ``step``
        between points) in ``buf`` of an argument read through a move, or a contiguous
        copy in the reader's order where they step unevenly beyond :data:`MAX_REGIONS`
        boxes (a chain of moves that permutes, a transpose read flat)."""
        if affine(f) is not None:  # (a copy would be cut where this is: at the holes)
            return buf, f, step
        piece = np.where(hole, -1, f)
        cuts = [cuts_along(piece, d, 4 * MAX_REGIONS) for d in range(piece.ndim)]
        if None not in cuts and math.prod(len(c) + 1 for c in cuts) <= MAX_REGIONS:
            return buf, f, step
        full = f
        if buf in self.per_point:  # every point's places, for the copy
            full = f[None] + step * np.arange(self.P, dtype=np.int64).reshape(
                (-1,) + (1,) * f.ndim)
        try:
            loc = self.materialise((buf, np.array(full)))
        except Unplannable:  # (too scattered to copy: the reader's boxes fail after all)
            return buf, f, step
        return (loc[0], *self.first_point(loc, f.shape))

    def first_point(self, loc: tuple, shape: tuple) -> tuple:
        """``(offsets, step)``: ``loc``'s places for the first point, broadcast over
        ``shape`` (right-aligned), and the distance between consecutive points' places (0
        when the points share it); holes (-1) stay holes at every point. Raises
        :class:`Unplannable` when the points are placed irregularly."""
        offsets = loc[1]
        if not self.batched(loc):
            return np.broadcast_to(offsets, shape), 0
        first = offsets[0]
        live = first >= 0
        step = 0
        if self.P > 1 and live.any():
            k = int(np.argmax(live.reshape(-1)))
            step = int(offsets[1].reshape(-1)[k]) - int(first.reshape(-1)[k])
        ramp = step * np.arange(self.P, dtype=np.int64).reshape((-1,) + (1,) * first.ndim)
        if not np.array_equal(offsets, np.where(live, first + ramp, first)):
            raise Unplannable("points placed irregularly")
        return np.broadcast_to(first, shape), step

    def expand(self, args: list) -> None:
        """The scatters among ``args`` computed where they are read, computed apart after
        all: their arguments placed, themselves read in place with their zeros as holes."""
        for arg in args:
            if id(arg) in self.inline:
                source, m = self.inline.pop(id(arg))
                self.through.discard(id(source))
                self.loc[id(source)] = self.place(source)
                self.loc[id(arg)] = self.structural(arg, [m], [source])

    def zeros(self) -> int:
        """The constant buffer of one zero that holes are read from."""
        if self.zero is None:
            self.zero = self.add_buffer(Buffer("const", -1, 1, False, (0.0,)))
        return self.zero

    # structural zeros kept apart as counts of live terms (compile/liveness.py)
    live_count = liveness.live_count
    live_mask = liveness.live_mask
    counted = liveness.counted
    moved_count = liveness.moved_count
    parts_count = liveness.parts_count
    reached_count = liveness.reached_count

    def fused_atom(self, node: N.Node, stand: dict, swap: dict | None = None,
                   memo: dict | None = None):
        """The node's template applied to its arguments' atoms: one constant for a uniform
        argument, the built template of a fused one (once, however often it is read), else
        the argument's stand-in (or its atom in ``swap``, by id)."""
        memo = {} if memo is None else memo
        atoms = []
        for a in node.inputs:
            if a.uniform is not None:
                atoms.append(a.uniform)
                continue
            if swap and id(a) in swap:
                atoms.append(swap[id(a)])
            elif id(a) in self.fused:
                if id(a) not in memo:
                    memo[id(a)] = self.fused_atom(a, stand, swap, memo)
                atoms.append(memo[id(a)])
                continue
            else:
                atoms.append(stand.setdefault(id(a), (G.Leaf.new(f"p{len(stand)}"), a))[0])
            if id(a) in self.counts:  # a sum of selects: a select of the sum
                c = self.counts[id(a)]
                c = swap[id(c)] if swap and id(c) in swap else stand.setdefault(
                    id(c), (G.Leaf.new(f"p{len(stand)}"), c))[0]
                atoms[-1] = _live_where(atoms[-1], c)
        return node.prim.build_atom(*atoms)

    def operand(self, x: N.Node, space: tuple | None = None) -> tuple:
        """The elements of ``x`` as a loop over ``space`` (its shape, or a finer one of its
        size) reads them to accumulate them: ``(atom, stand_ins, accesses, batched)`` -- a
        stand-in read at ``x``'s place or, when ``x`` is computed inside this loop
        (:func:`fused`), its template over its arguments' stand-ins (placed apart after
        all when an argument is partly zeros read in place)."""
        space = tuple(x.shape if space is None else space)
        if id(x) in self.fused:
            stand: dict = {}
            with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
                atom = self.fused_atom(x, stand)
            used = _used(atom)
            reads = [(leaf, a) for leaf, a in stand.values() if leaf in used]
            if not any(id(a) in self.holes or id(a) in self.inline for _, a in reads):
                batched = any(self.batched(self.loc[id(a)]) for _, a in reads)
                ins = [self.access(self.over(self.loc[id(a)], x.shape, space, batched), space,
                                   batched) for _, a in reads]
                return atom, [leaf for leaf, _ in reads], ins, batched
        loc = self.located(x)
        batched, leaf = self.batched(loc), G.Leaf.new("x")
        return leaf, [leaf], [self.access(self.over(loc, x.shape, space, batched), space,
                                          batched)], batched

    def over(self, loc: tuple, shape: tuple, space: tuple, batched: bool) -> tuple:
        """``loc`` of a node of ``shape`` (broadcast to it) read over ``space``, a shape of
        the same size."""
        if tuple(shape) == tuple(space):
            return loc
        offsets = self.spread(loc, shape, batched)
        return loc[0], offsets.reshape(self.shape(space, batched))

    def arguments(self, node: N.Node) -> tuple:
        """``(locations, batched)``: where ``node``'s arguments are (:meth:`located`) and
        whether any of them holds a slice per point of the chunk."""
        locs = [self.located(x) for x in node.inputs]
        return locs, any(self.batched(loc) for loc in locs)

    def located(self, node: N.Node) -> tuple:
        """``node``'s location; a node that was to be computed inside its reader's loop is
        placed now when that reader reads it placed after all."""
        if id(node) not in self.loc and id(node) in self.fused:
            self.fused.discard(id(node))
            self.loc[id(node)] = self.place(node)
        return self.loc[id(node)]

    def fill(self, loc: tuple, shape: tuple, value: float, batched: bool = False) -> None:
        """``loc`` over ``shape`` set to ``value``; -0.0 (a sum's start: a sum of negative
        zeros is one, as eager values' in-order sums) copied from a constant buffer, which
        keeps a zero's sign (an exact constant does not)."""
        out = self.access(loc, shape, batched)
        if value == 0 and math.copysign(1.0, value) < 0:
            if self.negative_zero is None:
                self.negative_zero = self.add_buffer(Buffer("const", -1, 1, False, (-0.0,)))
            dims = len(self.shape(shape, batched))
            self.block(shape, _copy_body(1, False), (Access(self.negative_zero, 0, (0,) * dims),),
                       (out,), batched=batched)
            return
        body = build_plan([np.asarray(G.number(value), dtype=object)], [])
        self.block(shape, body, (), (out,), batched=batched)

    def accumulate(self, space: tuple, value, stand_ins: list, ins: list, out: Access,
                   batched: bool = False, count: int = -1) -> None:
        body = build_plan([np.asarray(value, dtype=object)],
                          [np.asarray(s, dtype=object) for s in stand_ins])
        self.block(space, body, ins, (out,), accumulate=True, batched=batched, count=count)

    def unrolled(self, node: N.Node) -> tuple:
        args = node.inputs
        if node.size + sum(a.size for a in args) > UNROLL_LIMIT:
            raise Unplannable(f"{node.prim.name} of {node.size} elements")
        small = [a.constant and a.small() for a in args]
        batched = any(self.batched(self.located(a)) for a, s in zip(args, small) if not s)
        arrays, stand_ins, ins = [], [], []
        for i, (a, s) in enumerate(zip(args, small)):
            if s:
                arrays.append(a.atoms())
                continue
            leaves = _stand_ins(a.shape, f"a{i}")
            stand_ins.append(leaves.reshape(-1))
            ins.append(self._unrolled_read(self.loc[id(a)], batched))
            if id(a) in self.counts:  # a sum of selects: read as a select of the sum
                count = _stand_ins(a.shape, f"c{i}")
                stand_ins.append(count.reshape(-1))
                ins.append(self._unrolled_read(self.loc[id(self.counts[id(a)])], batched))
                leaves = np.array([_live_where(v, c) for v, c in zip(leaves.flat, count.flat)],
                                  dtype=object).reshape(a.shape)
            arrays.append(leaves)
        atoms = np.asarray(node.prim.build(arrays, node.params), dtype=object).reshape(-1)
        loc = self.fresh(node, batched)
        out = Access(loc[0], 0, (node.size,) if batched else (), tuple(range(node.size)))
        self.body_block(node, (), atoms, stand_ins, ins, out, loc, batched)
        self.live_mask(node, [((), atoms, stand_ins, ins, out)], batched)
        return loc

    def _unrolled_read(self, loc: tuple, batched: bool) -> Access:
        """An access reading all of ``loc`` in one iteration (an unrolled block's)."""
        if self.batched(loc):
            return Access(loc[0], 0, (self.point_stride(loc[1]),),
                          tuple(int(k) for k in loc[1][0].flat))
        return Access(loc[0], 0, (0,) if batched else (), tuple(int(k) for k in loc[1].flat))

    # -- outputs ---------------------------------------------------------------------------
    def total(self, o: int, node: N.Node, kind: str) -> None:
        """Output ``o``: ``kind`` of ``node``'s values over the chunk's real points, added
        to what the output holds (the caller initialises it; chunk after chunk accumulate):
        an outer product of each point's rows as one product over the points, a reduction
        straight from its argument, any other node from its values per point."""
        if node.dtype.kind != "f":
            raise Unplannable(f"a {kind} over points of a {node.dtype.name} tensor")
        buf = self.add_buffer(Buffer("output", o, node.size))
        here = self.loc.get(id(node))
        if here is None and _from_args(node, kind) and all(
                self.batched(self.loc[id(a)]) for a in node.inputs):
            return node.prim.loop_total(self, node, buf)
        if here is None:
            here = self.loc[id(node)] = self.place(node)
        out = self.access((buf, flat_places(node.shape)), node.shape)
        out = Access(buf, out.offset, (0,) + out.strides)
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        self.accumulate((self.P,) + node.shape, _COMBINE[kind](acc, term), [acc, term],
                        [out, self.access(here, node.shape, True)], out, count=0)

    def output(self, o: int, node: N.Node) -> None:
        """Output ``o``: the node's buffer when it is a fresh one, else a copy (over the
        chunk's points in a plan over points, even of a value they share)."""
        buf, offsets = self.loc[id(node)]
        b = self.buffers[buf]
        batched = bool(self.P)
        want = self.shape(node.shape, batched)
        fresh = (b.kind in ("temp", "output") and b.index in (-1, o)
                 and offsets.shape == want and b.size == math.prod(want)
                 and np.array_equal(offsets.reshape(-1), np.arange(b.size)))
        if fresh and self.batched((buf, offsets)) == batched:
            self.buffers[buf] = b._replace(kind="output", index=o)
            return
        new = self.buffer("output", o, node, batched=batched)
        if self.batched((buf, offsets)) == batched and \
                affine(self.spread((buf, offsets), node.shape, batched)) is None:
            self.materialise((buf, offsets), into=new)  # a gather: copied in place
            return
        self.block(node.shape, _copy_body(1, node.dtype.kind == "b"),
                   (self.access((buf, offsets), node.shape, batched),),
                   (self.access((new, flat_places(want)), node.shape, batched),), batched=batched)

#: How a total over points combines terms.
_COMBINE = {
    "sum": lambda acc, x: G.add(acc, x),
    "max": lambda acc, x: G.call(sp.Max, acc, x),
    "min": lambda acc, x: G.call(sp.Min, acc, x),
}

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
  products accumulate ``out += a * b`` over ``(i, k, j)`` with ``j`` innermost; an einsum
  is one loop nest over its output's labels then the summed ones (``out += a * b * ...``;
  an outer product ``out = a * b``), and a scatter adding several elements into one place
  (the transpose of a broadcast) one accumulating loop over its argument;
  convolutions and their transposes are matrix products whose rows, columns and summed
  index run over several strided dimensions each (:meth:`_Planner.conv`); a pooling and
  its derivative's maps are one loop over the windows each (:meth:`_Planner.pool`);
- softmax and the ops along one axis run their one-slice element view for every slice;
- elementwise ops with boolean arguments (``where``'s condition) are loops like the others;
- any other op, when small, runs its element view unrolled (its arguments as stand-ins).

Values are those of eager evaluation of large tensors (the template level): a node's
elements do not fold against its neighbours' as the element DAG's do (``x * 0`` is computed,
not dropped), which changes values only at non-finite inputs. Integer tensors are held as
doubles, as straight-line kernels hold them (exact up to 2**53).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from symtape.core import node as N
from symtape.codegen.loops import POINT_ALIGN, Access, Block, Buffer, LoopPlan, layouts
from symtape.codegen.plan import Instr, OutLayout, Plan, build_plan
from symtape.base.errors import UnboundLeafError
from symtape.ops.axis import AxisOp, StopGradient
from symtape.ops.conv import Conv, reached
from symtape.ops.pool import Pooling, chain, pick_atom, spread_atoms, sum_atoms
from symtape.ops.elementwise import Elementwise
from symtape.ops.linalg import Einsum, MatMul
from symtape.ops.reductions import Reduction
from symtape.ops.structural import GatherFlat, ScatterAdd, Structural
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["LOOP_MIN_ATOMS", "UNROLL_LIMIT", "FOLD_PROBE_ATOMS", "worth_looping",
           "plan_loops", "element_estimate", "TOTAL_OF"]

#: Functions whose element view would have more atoms than this are planned as loop nests.
LOOP_MIN_ATOMS = 20_000
#: ... unless they have more tensor ops (loop blocks) than this and fewer atoms than
#: LOOP_ALWAYS_ATOMS: many small tensor ops compile faster as their element view.
LOOP_MAX_BLOCKS = 400
LOOP_ALWAYS_ATOMS = 5_000_000
#: The same for functions of one point run over many (st.grad, st.compile): their loop plans
#: run chunks of points through each loop, which pays from a smaller size.
POINT_LOOP_MIN_ATOMS = 8_000
#: ... or whose matrix products have this many terms, in at most POINT_LOOP_MAX_BLOCKS
#: tensor ops (an 8-16-16-1 MLP's gradient: 2x faster than its straight-line lanes; its
#: Hessian, 192 blocks: 1.2x).
POINT_LOOP_MATMUL_TERMS = 512
POINT_LOOP_MAX_BLOCKS = 256
#: Ops without a loop form are unrolled up to this many elements (arguments and result).
UNROLL_LIMIT = 4096
#: ... and a gather is copied run by run (one loop each) when it has at most this many runs
#: of consecutive elements, this long on average (the non-zeros of a compressed sparse
#: Jacobian, colour by colour): LLVM takes a second over an unrolled copy of 1,500.
MAX_RUNS = 64
RUN_LENGTH = 16
#: An elementwise op whose arguments or destination change piece within its shape (a
#: zero-padded scatter: zeros, then the source; a gather writing it straight into an output)
#: runs as one loop per box where all of them are affine, up to this many boxes.
MAX_REGIONS = 16
#: Matrix products update tiles of this many rows and columns per step of their inner loop;
#: columns ``None``: as many as keep the tile in vector registers on this CPU (32 with
#: AVX-512's 32 registers of 8 doubles, else 8: 4 rows of 32 spill AVX2's 16 registers and
#: run 1.4x slower, ``benchmarks/mlp_grad.py``).
MATMUL_ROWS = 4
MATMUL_COLS = None
#: ... and their inner dimension in panels of this length (a panel of a 128-row matrix is
#: 256 KiB, of an 8-column strip 16 KiB: they stay in cache while the other is swept).
MATMUL_K = 256
#: Products of at least this many rows whose ``b`` has this many elements read ``b`` from a
#: packed copy (:meth:`_Planner.packed`).
MATMUL_PACK_ROWS = 16
MATMUL_PACK = 4096


def _matmul_cols() -> int:
    if MATMUL_COLS is not None:
        return MATMUL_COLS
    from symtape.codegen import jit

    return 32 if "+avx512f" in jit.host().features.split(",") else 8
#: Ops along one axis unroll one slice per loop iteration, up to this long.
SLICE_LIMIT = 1024


class Unplannable(Exception):
    """A node with no loop form (the function then compiles its element view)."""


def worth_looping(outputs: Sequence[N.Node], limit: int | None = None,
                  points: bool = False) -> bool:
    """Whether the element view under ``outputs`` would exceed ``limit`` atoms (default
    :data:`LOOP_MIN_ATOMS`; a matrix product counts its terms; a view already built costs
    nothing) without more than :data:`LOOP_MAX_BLOCKS` tensor ops, or would exceed
    :data:`LOOP_ALWAYS_ATOMS` (the one test for the nodes of a batched sweep); and, for a
    function that scatters, below :data:`FOLD_PROBE_ATOMS`, unless the element view, built
    to see, folds to far fewer definitions than the estimate (one-hot scatters of scalar
    code).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(60,))
    >>> with st.GradientTape() as t:
    ...     y = sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(59))
    >>> worth_looping([t.gradient(y, x)._node], 8000)  # 10,560 atoms estimated, 655 built
    False
    """
    limit = LOOP_MIN_ATOMS if limit is None else limit
    total, blocks, terms, seeded, scatters = _estimate(outputs)
    if seeded:
        # a batched sweep (a Jacobian, a Hessian): its element view holds only what each
        # one-hot seed reaches (three terms a row of a banded Hessian, the pairs of one body
        # in an N-body one), where loops would compute every seed's rows densely
        return total > LOOP_ALWAYS_ATOMS
    if points and terms >= POINT_LOOP_MATMUL_TERMS and blocks <= POINT_LOOP_MAX_BLOCKS:
        return True  # each point's matrix-vector products become products over the chunk
    if total <= limit:
        return False
    # LLVM spends some 10-15 ms on each block: thousands of small tensor ops (a Hessian's
    # sweeps over 60 coordinates) compile faster as their element view
    if not (blocks <= LOOP_MAX_BLOCKS or total > LOOP_ALWAYS_ATOMS):
        return False
    return not scatters or total > FOLD_PROBE_ATOMS or not _folds_away(outputs, total)


def _estimate(outputs: Sequence[N.Node]) -> tuple:
    """``(atoms, tensor ops, matrix-product terms, seeded, scatters)`` of the element view
    under ``outputs`` not built yet (estimated from the tensor sizes)."""
    total, blocks, terms, seeded, scatters, seen = 0, 0, 0, False, False, set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        scatters = scatters or isinstance(node.prim, ScatterAdd)
        if node.built:
            continue
        seen.add(id(node))
        cost = _atoms_cost(node)
        total += cost
        seeded = seeded or node.seeds > 1
        if node.kind == "op" and not isinstance(node.prim, (Structural, StopGradient)):
            blocks += 1
            terms += cost if isinstance(node.prim, MatMul) else 0
        stack.extend(node.inputs)
    return total, blocks, terms, seeded, scatters


def element_estimate(outputs: Sequence[N.Node]) -> int:
    """The atoms the element view under ``outputs`` would have (a matrix product counts its
    terms): what compiling it element by element would build.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(3, 4))
    >>> element_estimate([st.matmul(x, st.transpose(x))._node])  # 3x3 of 4, x, x^T
    60
    """
    return _estimate(outputs)[0]


#: Below this many atoms (estimated from the tensor sizes), a function the estimate would
#: loop and that scatters (the gradient of indexing) has its element view built first, to
#: see whether it folds away (below); building costs about 5 us an atom.
FOLD_PROBE_ATOMS = 30_000
#: ... and is compiled from the element view when that has fewer than this share of the
#: estimate: scalar code indexing a vector (``x[i]``) differentiates into one-hot
#: scatters whose sums fold to a few terms per element (Rosenbrock n=60 written with
#: ``x[i]``: 10,560 atoms estimated, 655 definitions; 13 us a point looped, 31 ns unrolled).
FOLD_PROBE_SHARE = 0.25


def _folds_away(outputs: Sequence[N.Node], total: int) -> bool:
    """Whether the element view under ``outputs`` has fewer definitions than
    :data:`FOLD_PROBE_SHARE` of ``total`` (it is built, and kept on the nodes)."""
    try:
        atoms = [node.atoms() for node in outputs]
    except UnboundLeafError:
        return False
    found = G.reachable([a for arr in atoms for a in np.asarray(arr, dtype=object).flat])
    return len(found) < FOLD_PROBE_SHARE * total


#: A plan over points takes chunks of at most this many elements of its largest tensor (a
#: few hundred KB): beyond, a chunk's buffers leave the caches (a sparse Hessian of n = 5000,
#: 15,000 values a point: 95 us a point in chunks of 64 points, 25 us in chunks of 4).
CHUNK_ELEMENTS = 1 << 15


def point_chunk(outputs: Sequence[N.Node], most: int, totals: Sequence[str] = ()) -> int:
    """The points a chunk of a plan over points takes: ``most``, fewer for large tensors
    (a multiple of :data:`~symtape.codegen.loops.POINT_ALIGN`); ``totals`` as
    :func:`plan_loops` takes them (a total summed without its per-point terms held does
    not count)."""
    largest = max((node.size for node in N.ancestries(_roots(outputs, totals))
                   if node.kind not in ("const", "leaf")), default=1)
    fit = CHUNK_ELEMENTS // max(largest, 1) // POINT_ALIGN * POINT_ALIGN
    return max(POINT_ALIGN, min(most, fit))


def _atoms_cost(node: N.Node) -> int:
    if isinstance(node.prim, MatMul):
        a = node.inputs[0]
        k = a.shape[-2] if node.params["transpose_a"] else a.shape[-1]
        return node.size * max(k, 1)
    if isinstance(node.prim, Einsum):  # the element view holds every term
        spec_in, out = node.params["spec"].split("->")
        sizes = {c: n for lab, a in zip(spec_in.split(","), node.inputs)
                 for c, n in zip(lab, a.shape)}
        return node.size * max(math.prod(n for c, n in sizes.items() if c not in out), 1)
    if isinstance(node.prim, Conv):
        return max(node.size, node.prim.terms(node.prim.dims([a.shape for a in node.inputs],
                                                              node.params)))
    return node.size


def _outer_total(node: N.Node) -> bool:
    """Whether a total over points of ``node`` may be summed as one product over the points:
    ``a^T b`` of two row vectors ``a`` and ``b`` of each point (the gradient of a weight
    matrix summed over examples)."""
    if not (node.kind == "op" and isinstance(node.prim, MatMul) and node.dtype.kind == "f"):
        return False
    a, b = node.inputs
    return (node.params["transpose_a"] and not node.params["transpose_b"] and
            len(a.shape) == 2 and len(b.shape) == 2 and a.shape[0] == 1 and b.shape[0] == 1)


def _reduced_total(node: N.Node, kind: str) -> bool:
    """Whether a total of ``kind`` over points of ``node`` may accumulate the terms of
    ``node`` directly (a sum of sums, a maximum of maxima)."""
    return (node.kind == "op" and isinstance(node.prim, Reduction) and node.dtype.kind == "f"
            and TOTAL_OF.get(node.prim.name) == kind)


def _roots(outputs: Sequence[N.Node], totals: Sequence[str]) -> list:
    """The nodes a plan places: the outputs, but the arguments of a total computed from them
    directly (:func:`_outer_total`, :func:`_reduced_total`)."""
    out = []
    for o, node in enumerate(outputs):
        kind = totals[o] if o < len(totals) else ""
        if kind == "sum" and _outer_total(node) or kind and _reduced_total(node, kind):
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
    >>> lp = plan_loops([y._node], [x._node])
    >>> len(lp.blocks), lp.outputs[0].shape
    (3, (3,))
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
    roots = _roots(outputs, totals)
    order = N.ancestries(roots)
    users = _users(order, roots)
    p.fused = _fused(order, users, p.loc)
    p.holey = _holey(order, users)
    p.through, recomputed = _through(order, users, p.holey, p.fused, roots)
    p.fused |= recomputed
    p.dest = _destinations(outputs, totals, users, p.fused)
    for node in order:
        if id(node) not in p.loc and id(node) not in p.fused and id(node) not in p.through:
            p.check(node)
            p.loc[id(node)] = p.place(node)
    for o, node in enumerate(outputs):
        if totals[o]:
            p.total(o, node, totals[o])
        else:
            p.output(o, node)
    ins, outs = layouts([n.shape for n in inputs],
                        [(n.shape, n.dtype.kind == "b") for n in outputs])
    return LoopPlan(tuple(p.buffers), tuple(p.blocks), ins, outs,
                    1 if points else max(1, int(threads)), points,
                    shared if points and any(shared) else (),
                    totals if any(totals) else ())


def _numeric(node: N.Node) -> bool:
    """Floats, and integers (held as doubles, as the element view's kernels hold them:
    exact to 2**53)."""
    return node.dtype.kind in "fiu"


def _pointwise(node: N.Node) -> bool:
    """A float elementwise op of float arguments and conditions (a select fused into its
    users keeps its structural zeros: ``where(c, g, 0) * x`` is 0 where ``c`` is false,
    also at ``x = nan``)."""
    return (node.kind == "op" and isinstance(node.prim, Elementwise) and node.dtype.kind == "f"
            and all(a.dtype.kind in "fb" for a in node.inputs))


def _users(order: list, outputs: Sequence[N.Node]) -> dict:
    """``id(node) -> [the nodes reading it]``, None for each time it is an output."""
    users: dict = {}
    for node in order:
        for a in node.inputs:
            users.setdefault(id(a), []).append(node)
    for node in outputs:
        users.setdefault(id(node), []).append(None)
    return users


def _looped_elementwise(node: N.Node | None) -> bool:
    """Whether ``node`` is planned by :meth:`_Planner.elementwise` (or fused into a node
    that is)."""
    return (node is not None and node.kind == "op" and isinstance(node.prim, Elementwise)
            and all(_numeric(a) for a in node.inputs))


def _holey(order: list, users: dict) -> set:
    """Float nodes read only by elementwise ops of their own shape: a structural one that is
    partly zeros (a padding scatter) is not copied out with its zeros but read in place,
    its zeros in boxes of their own (:meth:`_Planner.in_regions`)."""
    return {id(node) for node in order if node.dtype.kind == "f" and users.get(id(node))
            and all(_looped_elementwise(u) and u.shape == node.shape
                    for u in users[id(node)])}


#: A node read by a padded scatter and by elementwise ops of its shape is computed in each
#: of their loops (not written to a temporary) when it has at most this many readers and
#: at most this many nodes fused into it.
THROUGH_USERS = 3
THROUGH_NODES = 8


def _paddings(order: list, holey: set, outs: set) -> set:
    """Moves of their one argument read only by elementwise ops (:func:`_holey`): scatters
    to distinct places with zeros left, whose zeros may stay unwritten, and rearrangements
    (a reshape, a transpose, a slice, a gather, a broadcast). An elementwise argument of
    one is computed where it is read (:func:`_through`), so the reader's template folds
    into it: a select's zero branch stays exact through the move (no ``where`` trap)."""
    out = set()
    for node in order:
        if id(node) not in holey or id(node) in outs or node.kind != "op" or \
                len(node.inputs) != 1:
            continue
        prim = node.prim
        if isinstance(prim, ScatterAdd):
            if _distinct(node.params["idx"]):
                out.add(id(node))
        elif isinstance(prim, (Structural, GatherFlat)) and node.dtype.kind == "f":
            out.add(id(node))
    return out


def _chain(node: N.Node, fused: set) -> int:
    """The nodes of ``node``'s fused template (itself and the arguments built into it)."""
    return 1 + sum(_chain(a, fused) for a in node.inputs if id(a) in fused)


def _through(order: list, users: dict, holey: set, fused: set, roots: Sequence[N.Node]
             ) -> tuple:
    """``(through, recomputed)``: elementwise float nodes read by zero-padded scatters whose
    zeros may stay unwritten (:func:`_holey`), computed inside the scatters' readers' boxes,
    their arguments read through the scatters' places, instead of written to a temporary
    the readers read back (:meth:`_Planner.in_regions`). ``recomputed``: those of them also
    read by elementwise ops of their shape (at most :data:`THROUGH_USERS` readers, a
    template of at most :data:`THROUGH_NODES` nodes), whose loops compute them too (as a
    fused argument)."""
    outs = {id(r) for r in roots}
    pads = _paddings(order, holey, outs)
    found, again = set(), set()
    for node in order:
        if not _pointwise(node) or id(node) in fused or id(node) in outs:
            continue
        use = users.get(id(node), [])
        if not any(u is not None and id(u) in pads for u in use):
            continue
        if len(use) == 1:
            found.add(id(node))
            continue
        if (len(use) <= THROUGH_USERS and _chain(node, fused) <= THROUGH_NODES
                and all(u is not None and (id(u) in pads or (
                    _pointwise(u) and u.shape == node.shape)) for u in use)):
            found.add(id(node))
            again.add(id(node))
    return found, again


def _destinations(outputs: Sequence[N.Node], totals: Sequence[str], users: dict,
                  fused: set) -> dict:
    """``id(node) -> (output, gather node, places)``: elementwise float nodes read only by a
    gather (or another structural op) that is output ``output`` and takes each of the
    node's elements at most once (at ``places``, -1: not taken). They write straight into
    the output (destination passing), instead of into a temporary the output copies."""
    dest: dict = {}
    for o, node in enumerate(outputs):
        if totals[o] or node.kind != "op" or len(node.inputs) != 1:
            continue
        (arg,) = node.inputs
        use = users.get(id(arg), [])
        if (node.dtype.kind != "f" or arg.dtype.kind != "f" or not _looped_elementwise(arg)
                or id(arg) in fused or len(use) != 1 or use[0] is not node
                or sum(out is node for out in outputs) != 1):
            continue
        if isinstance(node.prim, GatherFlat):
            m = node.params["idx"]
        elif isinstance(node.prim, Structural):
            (m,) = node.prim.index_maps([arg.shape], node.params)
        else:
            continue
        if (m < 0).any() or not _distinct(m):
            continue
        dest[id(arg)] = (o, node, _inverse(m, arg.shape))
    return dest


def _fused(order: list, users: dict, placed: dict) -> set:
    """Elementwise nodes computed inside their one user's loop body (a chain ``a * m + b *
    g`` is one loop): float nodes read once, by an elementwise op of the same shape, and not
    outputs."""
    out = set()
    for node in order:
        use = users.get(id(node), [])
        if (len(use) == 1 and use[0] is not None and id(node) not in placed
                and _pointwise(node) and _pointwise(use[0]) and use[0].shape == node.shape):
            out.add(id(node))
    return out


def _cuts(places: np.ndarray, d: int) -> set | None:
    """Where along axis ``d`` the pieces of ``places`` start: runs of holes (-1), and runs
    over which the places step evenly; None when there are too many to loop over.

    >>> _cuts(np.array([[-1, 0, 1, 2], [-1, 4, 5, 6]]), 1)
    {1}
    >>> sorted(_cuts(np.array([0, 1, 2, 10, 20, 21, 22]), 0))
    [3, 5]
    """
    n = places.shape[d]
    if n < 2:
        return set()
    lines = np.moveaxis(places, d, 0).reshape(n, -1)
    hole = lines < 0
    lines = np.where(hole, 0, lines)
    starts = set((np.flatnonzero((hole[1:] != hole[:-1]).any(axis=1)) + 1).tolist())
    steps = lines[1:] - lines[:-1]  # steps[p - 1]: the step into p
    uneven = np.flatnonzero((steps[1:] != steps[:-1]).any(axis=1)) + 2
    if len(starts) + len(uneven) > 4 * MAX_REGIONS:
        return None
    out, last = set(), 0
    for p in sorted(starts | set(uneven.tolist())):
        if p in starts or p > last + 1:  # (the step into a piece's second place is its own)
            out.add(p)
            last = p
    return out


def _used(atom) -> set:
    """The stand-in leaves a built template reads."""
    return set(G.leaves([atom])) if G.is_symbolic(atom) else set()


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


def _finer_affine(offsets: np.ndarray):
    """``(shape, (offset, strides))`` when ``offsets`` is affine once some axes are split
    where their step changes: the windows of an image side by side, ``((n, i, j), (p, q,
    c))`` flattened to two axes, are affine over ``(n, i, j, p, (q, c))``; None otherwise.

    >>> x = np.arange(25).reshape(5, 5)
    >>> cols = np.stack([x[i:i + 3, j:j + 3].reshape(-1) for i in range(3) for j in range(3)])
    >>> _finer_affine(cols)
    ((3, 3, 3, 3), (0, (5, 1, 5, 1)))
    """
    shape = tuple(offsets.shape)
    for _ in range(2 * len(shape) + 4):
        aff = _affine(offsets.reshape(shape))
        if aff is not None:
            return shape, aff
        arr = offsets.reshape(shape)
        for d, n in enumerate(shape):
            if n < 3:
                continue
            line = arr[tuple(slice(None) if e == d else 0 for e in range(len(shape)))]
            steps = np.diff(line)
            run = int(np.argmax(steps != steps[0])) + 1 if (steps != steps[0]).any() else n
            if run < n and n % run == 0:
                shape = shape[:d] + (n // run, run) + shape[d + 1:]
                break
        else:
            return None
    return None


def _finer_pair(src: np.ndarray, dst: np.ndarray):
    """``(shape, src affine, dst affine)`` when both 1-D arrays of places are affine over
    one finer shape (found from either of them); None otherwise.

    >>> dst = np.array([0, 2, 8, 10, 16, 18])  # every other place of a 3x8 grid
    >>> _finer_pair(np.arange(6), dst)
    ((3, 2), (0, (2, 1)), (0, (8, 2)))
    """
    for a, b in ((dst, src), (src, dst)):
        found = _finer_affine(a)
        if found is None:
            continue
        shape, aff_a = found
        aff_b = _affine(b.reshape(shape))
        if aff_b is not None:
            return (shape, aff_b, aff_a) if a is dst else (shape, aff_a, aff_b)
    return None


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


def _runs(flat: np.ndarray) -> list[int]:
    """Where the runs of consecutive values of ``flat`` start.

    >>> _runs(np.array([4, 5, 6, 9, 10, 2]))
    [0, 3, 5]
    """
    if flat.size == 0:
        return []
    return [0] + (np.flatnonzero(np.diff(flat) != 1) + 1).tolist()


def _box(mask: np.ndarray) -> tuple | None:
    """The slices of the box ``mask`` is true on, when it is exactly a box."""
    if mask.ndim == 0:
        return None
    box = []
    for d in range(mask.ndim):
        hit = np.flatnonzero(mask.any(axis=tuple(e for e in range(mask.ndim) if e != d)))
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    box = tuple(box)
    return box if mask[box].all() and mask.sum() == mask[box].size else None


def _distinct(idx: np.ndarray) -> bool:
    """Whether the places ``idx`` (-1: none) are all different (a scatter that adds
    nothing up)."""
    kept = idx[idx >= 0]
    return kept.size == 0 or int(np.bincount(kept.ravel()).max()) <= 1  # (O(n): no sort)


def _inverse(idx: np.ndarray, shape: tuple) -> np.ndarray:
    """For each place of a tensor of ``shape``, the element of ``idx`` scattered there."""
    inv = np.full(math.prod(shape), -1, dtype=np.int64)
    flat = idx.reshape(-1)
    keep = flat >= 0
    inv[flat[keep]] = np.flatnonzero(keep)
    return inv.reshape(shape)


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
        self.holey: set = set()  # ids of nodes whose zeros may stay unwritten (_holey)
        self.holes: dict = {}  # id(node) -> (locs, maps, zeros) of those placed so
        self.through: set = set()  # ids of nodes computed inside readers of a scatter
        self.inline: dict = {}  # id(scatter) -> (its argument of those, its places' map)
        self.dest: dict = {}  # id(node) -> where it is written in an output (_destinations)
        self.zero: int | None = None  # a constant buffer of one zero (the zeros of holes)
        self.per_point: set = set()  # buffers holding a slice per point of the chunk

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
                _flat(self.shape(node.shape, batched)))

    def shape(self, shape: tuple, batched: bool) -> tuple:
        """``shape`` with the chunk's points in front when ``batched``."""
        return (self.P,) + tuple(shape) if batched else tuple(shape)

    def batched(self, loc: tuple) -> bool:
        return loc[0] in self.per_point

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
        aff = _affine(self.spread(loc, shape, batched))
        if aff is None:
            loc = self.materialise(loc)
            aff = _affine(self.spread(loc, shape, batched))
        return Access(loc[0], aff[0], aff[1], core)

    def block(self, space: tuple, body: Plan, ins, outs, accumulate: bool = False,
              batched: bool = False, points: int = 0, contract: bool = False,
              count: int = -1) -> None:
        """Appends a block; ``batched``: its first dimension runs over the chunk's points
        (``points`` of them per iteration, default one); ``count``: the dimension that runs
        over the chunk's real points (a total)."""
        self.blocks.append(Block(self.shape(space, batched) if batched and not points
                                 else space, body, tuple(ins), tuple(outs), accumulate,
                                 points or int(batched), contract, count))

    def materialise(self, loc: tuple, into: int | None = None) -> tuple:
        """``loc`` copied to a contiguous temporary (or to buffer ``into``, of its size): by
        runs of consecutive elements (a gather of a few pieces), else element by element (up
        to :data:`UNROLL_LIMIT`)."""
        buf, offsets = loc
        batched = self.batched(loc)
        per = offsets[0] if batched else offsets
        n = per.size
        starts = _runs(per.reshape(-1))
        by_runs = len(starts) <= MAX_RUNS and n >= RUN_LENGTH * len(starts)
        finer = None if by_runs or n <= UNROLL_LIMIT else _finer_affine(per)
        if n > UNROLL_LIMIT and not by_runs and finer is None:
            raise Unplannable(f"a gather of {n} elements in {len(starts)} pieces")
        boolean = self.buffers[buf].boolean
        if finer is not None and batched:
            self.point_stride(offsets)  # (raises when points are placed irregularly)
        new = self.add_buffer(Buffer("temp", -1, n, boolean), batched) if into is None \
            else into
        if finer is not None:  # one copy loop over a finer index space (windows of images)
            shape, (start, strides) = finer
            step = (self.point_stride(offsets),) if batched else ()
            out_step = (n,) if batched else ()
            dst = _affine(_flat(shape))
            self.block(shape, _copy_body(1, boolean), (Access(buf, start, step + strides),),
                       (Access(new, dst[0], out_step + dst[1]),), batched=batched)
            return new, _flat(offsets.shape)
        if by_runs:
            step = (self.point_stride(offsets),) if batched else ()
            out_step = (n,) if batched else ()
            for lo, hi in zip(starts, starts[1:] + [n]):
                src = Access(buf, int(per.flat[lo]), step + (1,))
                dst = Access(new, lo, out_step + (1,))
                self.block((hi - lo,), _copy_body(1, boolean), (src,), (dst,),
                           batched=batched)
            return new, _flat(offsets.shape)
        core = tuple(int(k) for k in per.flat)
        if batched:
            src = Access(buf, 0, (self.point_stride(offsets),), core)
            dst = Access(new, 0, (n,), tuple(range(n)))
        else:
            src, dst = Access(buf, 0, (), core), Access(new, 0, (), tuple(range(n)))
        self.block((), _copy_body(n, boolean), (src,), (dst,), batched=batched)
        return new, _flat(offsets.shape)

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
        prim = node.prim
        if isinstance(prim, StopGradient):
            return self.loc[id(node.inputs[0])]
        if isinstance(prim, Structural):
            return self.structural(node)
        if isinstance(prim, GatherFlat) and node.dtype.kind != "b":
            return self.structural(node, [node.params["idx"]])
        if isinstance(prim, ScatterAdd) and _distinct(node.params["idx"]):
            return self.structural(node, [_inverse(node.params["idx"], node.shape)])
        if isinstance(prim, ScatterAdd) and _numeric(node):
            loc = self.summed_scatter(node)
            if loc is not None:
                return loc
        if isinstance(prim, Elementwise) and all(_numeric(a) or a.dtype.kind == "b"
                                                 for a in node.inputs):
            return self.elementwise(node)
        if isinstance(prim, Reduction) and prim.name in _REDUCE and _numeric(node):
            return self.reduction(node)
        if isinstance(prim, MatMul) and _numeric(node):
            return self.matmul(node)
        if isinstance(prim, Einsum) and _numeric(node):
            return self.einsum(node)
        if isinstance(prim, Conv):
            return self.conv(node)
        if isinstance(prim, Pooling):
            return self.pool(node)
        if isinstance(prim, AxisOp):
            return self.along_axis(node)
        return self.unrolled(node)

    def constant(self, node: N.Node, values: np.ndarray) -> tuple:
        dtype = bool if node.dtype.kind == "b" else float
        flat = np.asarray(values, dtype=dtype).reshape(-1)
        return self.buffer("const", -1, node, flat.tolist()), _flat(node.shape)

    def structural(self, node: N.Node, maps: list | None = None) -> tuple:
        """A node whose element ``j`` is element ``maps[a][j]`` of argument ``a`` (or zero
        where no map has it): the places of the argument's elements, or a copy."""
        args = node.inputs
        if maps is None:
            maps = node.prim.index_maps([a.shape for a in args], node.params)
        if len(args) == 1 and id(args[0]) in self.through:  # computed where it is read
            self.inline[id(node)] = (args[0], maps[0])
            return -1, None
        locs = [self.loc[id(a)] for a in args]
        bufs = {loc[0] for loc, m in zip(locs, maps) if (m >= 0).any()}
        covered = np.zeros(node.shape, dtype=bool)
        for m in maps:
            covered |= m >= 0
        holey = not covered.all() and len(bufs) <= 1 and id(node) in self.holey
        if len(bufs) > 1 or not (covered.all() or holey):  # several buffers, zeros: copied
            return self.assembled(node, locs, maps, ~covered)
        buf = next(iter(bufs)) if bufs else locs[0][0]
        batched = buf in self.per_point
        offsets = np.zeros(self.shape(node.shape, batched), dtype=np.int64)
        for (b, offs), m in zip(locs, maps):
            inside = m >= 0
            if b != buf or not inside.any():
                continue
            if batched:
                offsets[:, inside] = offs.reshape(self.P, -1)[:, m[inside]]
            else:
                offsets[inside] = offs.reshape(-1)[m[inside]]
        if holey:  # its zeros are -1 places, read by its (elementwise) users as zeros
            offsets[..., ~covered] = -1
            self.holes[id(node)] = (locs, maps, ~covered)
        return buf, offsets

    def assembled(self, node: N.Node, locs: list, maps: list, zeros=None) -> tuple:
        """A fresh buffer for a node made of parts of several (and of zeros, where
        ``zeros``): each argument's part copied by one loop where its places (in the
        argument and in the node) are arithmetic progressions, else element by element (up
        to :data:`UNROLL_LIMIT`)."""
        batched = any(self.batched(loc) for loc, m in zip(locs, maps) if (m >= 0).any())
        loc = self.fresh(node, batched)
        boolean = node.dtype.kind == "b"
        out_flat = np.arange(node.size, dtype=np.int64).reshape(node.shape)
        if zeros is not None and zeros.any():
            self.zeroed(loc, out_flat[zeros], node.size, batched, boolean)
        for (buf, offs), m in zip(locs, maps):
            inside = m >= 0
            if not inside.any():
                continue
            here = self.batched((buf, offs))
            per = (offs[0] if here else offs).reshape(-1)
            box = _box(inside)  # a part that is a box of the node: its places in its shape
            where = box if box is not None else inside
            src, dst = per[m[where]], out_flat[where]
            step = (self.point_stride(offs) if here else 0,) if batched else ()
            out_step = (node.size,) if batched else ()
            a_src, a_dst = _affine(src), _affine(dst)
            if a_src is not None and a_dst is not None:
                ins = (Access(buf, a_src[0], step + a_src[1]),)
                outs = (Access(loc[0], a_dst[0], out_step + a_dst[1]),)
                self.block(src.shape, _copy_body(1, boolean), ins, outs, batched=batched)
                continue
            src, dst = src.reshape(-1), dst.reshape(-1)
            finer = _finer_pair(src, dst) if src.size > UNROLL_LIMIT else None
            if finer is not None:  # affine over a finer index space (a strided scatter)
                shape, (s0, ss), (d0, ds) = finer
                self.block(shape, _copy_body(1, boolean), (Access(buf, s0, step + ss),),
                           (Access(loc[0], d0, out_step + ds),), batched=batched)
                continue
            if src.size > UNROLL_LIMIT:
                raise Unplannable(f"{node.prim.name}: a part of {src.size} scattered elements")
            ins = (Access(buf, 0, step, tuple(int(k) for k in src)),)
            outs = (Access(loc[0], 0, out_step, tuple(int(k) for k in dst)),)
            self.block((), _copy_body(src.size, boolean), ins, outs, batched=batched)
        return loc

    def zeroed(self, loc: tuple, places: np.ndarray, size: int, batched: bool,
               boolean: bool) -> None:
        """Zeros written at the flat ``places`` of ``loc``'s buffer (of ``size`` per point)."""
        out_step = (size,) if batched else ()
        aff = _affine(places)
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
        fused arguments (:func:`_fused`) built in, each other argument a stand-in read with
        broadcast strides (or, with arguments that are partly zeros or a destination in an
        output, one loop per box of the shape: :meth:`in_regions`)."""
        stand: dict = {}  # id(argument node) -> (stand-in leaf, node)
        with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
            atom = self.fused_atom(node, stand)
        used = _used(atom)
        reads = [(leaf, arg) for leaf, arg in stand.values() if leaf in used]
        holey = [arg for _, arg in stand.values()
                 if id(arg) in self.holes or id(arg) in self.inline]
        if holey or id(node) in self.dest:
            loc = self.in_regions(node, stand, atom, reads)
            if loc is None and any(id(arg) in self.inline for arg in holey):
                self.expand(holey)  # the inlined arguments computed apart, then again
                loc = self.in_regions(node, stand, atom, reads)
            if loc is not None:
                return loc
            for arg in holey:  # not in boxes: the zeros written after all
                if id(arg) in self.holes:  # (not one placed apart by expand above)
                    self.loc[id(arg)] = self.assembled(arg, *self.holes.pop(id(arg)))
        for leaf, arg in stand.values():
            if atom is leaf:  # the template is one of its arguments: a view of it
                loc = self.loc[id(arg)]
                return loc[0], self.spread(loc, node.shape, self.batched(loc))
        batched = any(self.batched(self.loc[id(arg)]) for _, arg in reads)
        ins = [self.access(self.loc[id(arg)], node.shape, batched) for _, arg in reads]
        return self.body_block(node, node.shape, atom, [leaf for leaf, _ in reads], ins,
                               batched=batched)

    def in_regions(self, node: N.Node, stand: dict, atom, reads: list) -> tuple | None:
        """The elementwise ``node`` as one loop per box of its shape where each argument is
        affine or a hole of a partly-zero one (read from a constant zero, the same value
        its copy would hold), written into a fresh buffer or, with a destination, straight
        into the output; None when more than :data:`MAX_REGIONS` boxes would be needed.
        A scatter whose argument is computed here (:func:`_through`) is, in its boxes
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
        shape, lead = node.shape, (slice(None),) * batched
        # sources: (leaf, offsets over the node's shape (with the points), buffer); a
        # scatter computed here has no buffer (its leaf is read only where it is a hole)
        sources = []
        switches = []  # (index in sources, id) of the scatters computed here
        for leaf, arg in reads:
            if id(arg) not in inlined:
                loc = self.loc[id(arg)]
                sources.append((leaf, self.spread(loc, shape, batched), loc[0]))
                continue
            _, e_reads, m = inlined[id(arg)]
            hole = m < 0
            switches.append((len(sources), id(arg)))
            sources.append((leaf, np.broadcast_to(m, self.shape(shape, batched)), None))
            take = np.where(hole, 0, m).reshape(-1)
            for e_leaf, a, source in e_reads:
                loc = self.loc[id(a)]
                f = self.spread(loc, source.shape, batched)
                f = f.reshape((self.P, -1) if batched else (-1,))[..., take]
                f = f.reshape(self.shape(shape, batched))
                f[lead + (hole,)] = -1
                sources.append((e_leaf, f, loc[0]))
        full = [f for _, f, _ in sources]
        if gather is not None:
            step = np.arange(self.P, dtype=np.int64).reshape((-1,) + (1,) * len(shape))
            full.append(places + step * gather.size if batched else places)
        pieces = [f[0] if batched else f for f in full]
        cuts = [set() for _ in shape]
        for piece in pieces:
            for d in range(len(shape)):
                found = _cuts(piece, d)
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
            for k, (piece, f) in enumerate(zip(pieces, full)):
                hole = piece[box] < 0
                if hole.all():
                    accs.append(None)
                    continue
                if k < len(sources) and sources[k][2] is None:
                    accs.append(())  # a scatter computed here: its argument's template
                    continue
                aff = None if hole.any() else _affine(f[lead + box])
                if aff is None:
                    return None
                accs.append(aff)
            boxes.append((box, accs))
        if gather is not None:
            out_buf = self.buffer("output", o, gather, batched=batched)
            self.loc[id(gather)] = (out_buf, _flat(self.shape(gather.shape, batched)))
            loc = (out_buf, full[-1])
        else:
            loc = self.fresh(node, batched)
        space_dims = len(shape) + batched
        bodies: dict = {}
        for box, accs in boxes:
            if gather is not None:
                if accs[-1] is None:
                    continue  # elements the output does not take
                out = Access(out_buf, *accs.pop())
            else:
                out = Access(loc[0], *_affine(self.spread(loc, shape, batched)[lead + box]))
            key = tuple(accs[k] is None for k, _ in switches)  # which are holes here
            if key not in bodies:
                here = atom
                if switches:
                    swap = {i: sources[k][0] if hole else inlined[i][0]
                            for (k, i), hole in zip(switches, key)}
                    with np.errstate(all="ignore"):
                        here = self.fused_atom(node, stand, swap)
                used = _used(here)
                order = [k for k, (leaf, _, _) in enumerate(sources) if leaf in used]
                bodies[key] = (self.body(node, here, [sources[k][0] for k in order]), order)
            body, order = bodies[key]
            ins = [Access(sources[k][2], *accs[k]) if accs[k] is not None else
                   Access(self.zeros(), 0, (0,) * space_dims) for k in order]
            self.block(tuple(s.stop - s.start for s in box), body, ins, (out,),
                       batched=batched)
        return loc

    def expand(self, args: list) -> None:
        """The scatters among ``args`` computed where they are read, computed apart after
        all: their arguments placed, themselves read in place with their zeros as holes."""
        for arg in args:
            if id(arg) in self.inline:
                source, m = self.inline.pop(id(arg))
                self.through.discard(id(source))
                self.loc[id(source)] = self.place(source)
                self.loc[id(arg)] = self.structural(arg, [m])

    def zeros(self) -> int:
        """The constant buffer of one zero that holes are read from."""
        if self.zero is None:
            self.zero = self.add_buffer(Buffer("const", -1, 1, False, (0.0,)))
        return self.zero

    def fused_atom(self, node: N.Node, stand: dict, swap: dict | None = None):
        """The node's template applied to its arguments' atoms: one constant for a uniform
        argument, the built template of a fused one, else the argument's stand-in (or its
        atom in ``swap``, by id)."""
        atoms = []
        for a in node.inputs:
            if a.uniform is not None:
                atoms.append(a.uniform)
            elif swap and id(a) in swap:
                atoms.append(swap[id(a)])
            elif id(a) in self.fused:
                atoms.append(self.fused_atom(a, stand, swap))
            else:
                atoms.append(stand.setdefault(id(a), (G.Leaf.new(f"p{len(stand)}"), a))[0])
        return node.prim._build_one(*atoms)

    def reduction(self, node: N.Node) -> tuple:
        (x,) = node.inputs
        xloc = self.loc[id(x)]
        batched = self.batched(xloc)
        axes, name = node.params["axis"], node.prim.name
        n = math.prod(x.shape[i] for i in axes)
        init = _REDUCE[name][0] if n else (np.nan if name == "reduce_mean" else
                                           _REDUCE[name][2])
        loc = self.fresh(node, batched)
        self.fill(loc, node.shape, init, batched)
        if n == 0 or x.size == 0:
            return loc
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        out_offsets = np.broadcast_to(loc[1].reshape(self.shape(kept, batched)),
                                      self.shape(x.shape, batched))
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        value = _REDUCE[name][1](acc, term, n)
        out = Access(loc[0], 0, _affine(out_offsets)[1])
        self.accumulate(x.shape, value, [acc, term], [out, self.access(xloc, x.shape, batched)],
                        out, batched)
        return loc

    def einsum(self, node: N.Node) -> tuple:
        """One loop nest over the labels' index space, the output's labels then the summed
        ones: ``out += a * b * ...`` (or, with nothing summed, ``out = a * b * ...``: an
        outer product), each operand read at the strides of its labels (a repeated label,
        a diagonal, at the sum of its strides), so every element adds its terms in the
        order the element view's sums and eager values add them."""
        spec_in, out = node.params["spec"].split("->")
        labels = spec_in.split(",")
        sizes: dict = {}
        for lab, a in zip(labels, node.inputs):
            sizes.update(zip(lab, a.shape))
        summed = "".join(c for c in dict.fromkeys("".join(labels)) if c not in out)
        full = out + summed
        space = tuple(sizes[c] for c in full)
        batched = any(self.batched(self.loc[id(a)]) for a in node.inputs)
        terms = math.prod(sizes[c] for c in summed)
        loc = self.fresh(node, batched)
        if summed:
            self.fill(loc, node.shape, -0.0 if terms else 0.0, batched)
        if node.size == 0 or terms == 0:
            return loc
        stand = [G.Leaf.new(f"a{i}") for i in range(len(labels))]
        reads = [self.labelled(self.loc[id(a)], lab, full, space, batched)
                 for lab, a in zip(labels, node.inputs)]
        product = G.mul(*stand) if len(stand) > 1 else stand[0]
        out_offsets = loc[1].reshape(loc[1].shape + (1,) * len(summed))
        o = _affine(np.broadcast_to(out_offsets, self.shape(space, batched)))
        dst = Access(loc[0], o[0], o[1])
        if not summed:
            self.block(space, self.body(node, product, stand), reads, (dst,), batched=batched)
            return loc
        acc = G.Leaf.new("acc")
        self.accumulate(space, G.add(acc, product), [acc, *stand], [dst, *reads], dst,
                        batched)
        return loc

    def labelled(self, loc: tuple, labels: str, full: str, space: tuple, batched: bool
                 ) -> Access:
        """``loc`` (an operand of an einsum with ``labels``) read over the index space of
        the labels ``full`` (extents ``space``; the chunk's points in front when
        ``batched``); copied to a contiguous temporary first when that is not affine."""
        def offsets(loc):
            here = self.batched(loc)
            grid = [np.arange(n, dtype=np.int64).reshape(
                tuple(n if e == d else 1 for e in range(len(space))))
                for d, n in enumerate(space)]
            idx = tuple(grid[full.index(c)] for c in labels)
            taken = loc[1][(slice(None),) + idx] if here else loc[1][idx]
            if here and not idx:  # a scalar per point
                taken = taken.reshape((self.P,) + (1,) * len(space))
            return np.broadcast_to(taken, self.shape(space, batched))

        aff = _affine(offsets(loc))
        if aff is None:
            loc = self.materialise(loc)
            aff = _affine(offsets(loc))
        return Access(loc[0], aff[0], aff[1])

    def summed_scatter(self, node: N.Node) -> tuple | None:
        """A scatter that adds several elements into one place (the transpose of a
        broadcast: a sum over the broadcast axes) as one accumulating loop over its
        argument's shape, when its places are affine in that shape: zeros (eager values'
        start), then ``out[idx[j]] += x[j]`` in order; None otherwise."""
        (x,) = node.inputs
        idx = node.params["idx"]
        if (idx < 0).any():
            return None
        xloc = self.loc[id(x)]
        batched = self.batched(xloc)
        places = idx.reshape(x.shape)  # in a fresh buffer, element j is at place j
        if batched:
            step = np.arange(self.P, dtype=np.int64).reshape((-1,) + (1,) * len(x.shape))
            places = places[None] + step * node.size
        aff = _affine(places)
        if aff is None:
            return None
        loc = self.fresh(node, batched)
        self.fill(loc, node.shape, 0.0, batched)
        if x.size == 0:
            return loc
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        out = Access(loc[0], aff[0], aff[1])
        self.accumulate(x.shape, G.add(acc, term), [acc, term],
                        [out, self.access(xloc, x.shape, batched)], out, batched)
        return loc

    def fill(self, loc: tuple, shape: tuple, value: float, batched: bool = False) -> None:
        body = build_plan([np.asarray(G.number(value), dtype=object)], [])
        self.block(shape, body, (), (self.access(loc, shape, batched),), batched=batched)

    def accumulate(self, space: tuple, value, stand_ins: list, ins: list, out: Access,
                   batched: bool = False, count: int = -1) -> None:
        body = build_plan([np.asarray(value, dtype=object)],
                          [np.asarray(s, dtype=object) for s in stand_ins])
        self.block(space, body, ins, (out,), accumulate=True, batched=batched, count=count)

    def matmul(self, node: N.Node) -> tuple:
        """``out += a * b`` over ``(i, k, j)`` in register tiles: each iteration of the
        ``k`` loop updates ``MATMUL_ROWS`` rows of ``MATMUL_COLS`` columns, held in registers
        across it (each load of ``b`` serves every row); edges take narrower tiles. Every
        element still adds its terms in ``k`` order, as the element DAG's sums do. A row
        vector of each point times a shared matrix is one product whose rows are the
        chunk's points."""
        a, b = node.inputs
        la, lb = self.loc[id(a)], self.loc[id(b)]
        ba, bb = self.batched(la), self.batched(lb)
        batched = ba or bb
        oa = np.swapaxes(la[1], -1, -2) if node.params["transpose_a"] else la[1]
        ob = np.swapaxes(lb[1], -1, -2) if node.params["transpose_b"] else lb[1]
        batch, (m, n) = node.shape[:-2], node.shape[-2:]
        k = oa.shape[-1]
        lb = self.contiguous_constant((lb[0], ob))
        ob = lb[1]
        loc = self.fresh(node, batched)
        self.fill(loc, node.shape, -0.0 if k else 0.0, batched)
        if k == 0 or node.size == 0:
            return loc
        if ba and not bb and m == 1 and not batch:  # rows of the chunk's points
            ra = self.access((la[0], oa), (1, k), True)
            ro = self.access(loc, (1, n), True)
            accs = (Access(ra.buffer, ra.offset, (ra.strides[0], ra.strides[2])),
                    self.access((lb[0], ob), (k, n)),
                    Access(ro.buffer, ro.offset, (ro.strides[0], ro.strides[2])))
            cols = min(_matmul_cols(), n)
            nn = n - n % cols
            for j0, j1, c in ((0, nn, cols), (nn, n, n - nn)):
                if j1 > j0:
                    self.matmul_tile(accs, (), k, (0, self.P, POINT_ALIGN), (j0, j1, c),
                                     POINT_ALIGN)
            return loc
        accs = (self.access((la[0], oa), batch + (m, k), batched),
                self.access((lb[0], ob), batch + (k, n), batched),
                self.access(loc, node.shape, batched))
        rows = MATMUL_ROWS if m >= MATMUL_ROWS else 1
        cols = min(_matmul_cols(), n)
        mm, nn = m - m % rows, n - n % cols
        packed = self.packed(accs[1], k, n, cols) if (
            not batch and not batched and m >= MATMUL_PACK_ROWS and k * n >= MATMUL_PACK) \
            else {}
        for i0, i1, r, j0, j1, c in ((0, mm, rows, 0, nn, cols), (0, mm, rows, nn, n, n - nn),
                                     (mm, m, 1, 0, n, n)):
            if i1 > i0 and j1 > j0:
                self.matmul_tile(accs, self.shape(batch, batched), k, (i0, i1, r),
                                 (j0, j1, c), int(batched),
                                 packed.get(j0) if r == rows and i0 == 0 else None)
        return loc

    def packed(self, rb: Access, k: int, n: int, c: int) -> dict:
        """``b`` copied into column strips of ``c`` (each strip's ``k`` rows contiguous,
        then the last, narrower strip), as BLAS packs it: a strip's rows sit in consecutive
        cache lines however long ``b``'s own rows are (rows 1 KiB apart all fall in a few
        cache sets). Returns ``{first column of a region: (offset, strip stride, row
        stride)}`` for :meth:`matmul_tile`."""
        bk, bn = rb.strides
        nn = n - n % c
        buf = self.add_buffer(Buffer("temp", -1, k * n, self.buffers[rb.buffer].boolean))
        out = {}
        if nn:
            self.block((nn // c, k, c), _copy_body(1, False),
                       (Access(rb.buffer, rb.offset, (c * bn, bk, bn)),),
                       (Access(buf, 0, (k * c, c, 1)),))
            out[0] = (buf, 0, k * c, c)
        if n > nn:
            self.block((k, n - nn), _copy_body(1, False),
                       (Access(rb.buffer, rb.offset + nn * bn, (bk, bn)),),
                       (Access(buf, nn * k, (n - nn, 1)),))
            out[nn] = (buf, nn * k, 0, n - nn)
        return out

    def contiguous_constant(self, loc: tuple) -> tuple:
        """A constant read in another order (a transposed weight matrix) as a constant of
        its own in that order, so that rows are read contiguously; other locations as
        they are."""
        buf, offsets = loc
        b = self.buffers[buf]
        if b.kind != "const" or offsets.ndim < 2 or offsets.shape[-1] < 2:
            return loc
        aff = _affine(offsets)
        if aff is None or aff[1][-1] == 1:
            return loc
        values = np.asarray(b.values, dtype=object)[offsets.reshape(-1)]
        return (self.add_buffer(Buffer("const", -1, offsets.size, b.boolean, tuple(values))),
                _flat(offsets.shape))

    def matmul_tile(self, accs: tuple, batch: tuple, k: int, rows: tuple, cols: tuple,
                    points: int = 0, packed: tuple | None = None) -> None:
        """The block of rows ``i0 <= i < i1`` (``r`` a tile) and columns ``j0 <= j < j1``
        (``c`` a tile); its space is ``batch + (row tiles, column tiles, k, c)``;
        ``points``: its first dimension runs over the chunk's points, that many a step;
        ``packed``: ``b``'s columns read from a packed copy (:meth:`packed`)."""
        (ra, rb, ro), (i0, i1, r), (j0, j1, c) = accs, rows, cols
        nb = len(batch)
        am, ak = ra.strides[nb:]
        bk, bn = rb.strides[nb:]
        om, on = ro.strides[nb:]
        acc, x, y = _stand_ins((r,), "acc"), _stand_ins((r,), "a"), G.Leaf.new("b")
        value = np.array([G.add(acc[t], G.mul(x[t], y)) for t in range(r)], dtype=object)
        body = build_plan([value], [acc, x, np.asarray(y, dtype=object)])
        a0, b0 = ra.offset + i0 * am, rb.offset + j0 * bn
        o0 = ro.offset + i0 * om + j0 * on
        core_a, core_o = tuple(t * am for t in range(r)), tuple(t * om for t in range(r))
        tiles = ((i1 - i0) // r, (j1 - j0) // c)
        if points:  # the first dimension is the chunk's points, in rows
            space = batch + (tiles[0], tiles[1], k, c)
            sa = Access(ra.buffer, a0, ra.strides[:nb] + (r * am, 0, ak, 0), core_a)
            sb = Access(rb.buffer, b0, rb.strides[:nb] + (0, c * bn, bk, bn))
            so = Access(ro.buffer, o0, ro.strides[:nb] + (r * om, c * on, 0, on), core_o)
            self.block(space, body, (so, sa, sb), (so,), accumulate=True, batched=True,
                       points=points, contract=True)
            return
        # column tiles (threads split them), then k in panels of MATMUL_K, then row tiles:
        # a column strip of b's panel stays in cache across the row tiles
        kc = min(k, MATMUL_K)
        b_buf, strip = rb.buffer, c * bn
        if packed is not None:
            b_buf, b0, strip, bk = packed
            bn = 1
        for k0, n_panels, depth in ((0, k // kc, kc), (k - k % kc, 1, k % kc)):
            if n_panels == 0 or depth == 0:
                continue
            space = batch + (tiles[1], n_panels, tiles[0], depth, c)
            sa = Access(ra.buffer, a0 + k0 * ak,
                        ra.strides[:nb] + (0, kc * ak, r * am, ak, 0), core_a)
            sb = Access(b_buf, b0 + k0 * bk,
                        rb.strides[:nb] + (strip, kc * bk, 0, bk, bn))
            so = Access(ro.buffer, o0, ro.strides[:nb] + (c * on, 0, r * om, 0, on), core_o)
            self.block(space, body, (so, sa, sb), (so,), accumulate=True, contract=True)

    def conv(self, node: N.Node) -> tuple:
        """A convolution or one of its transposes (``ops/conv.py``) as register-tiled
        products (:meth:`tiled`): ``conv2d`` takes rows ``(n, i, j)``, columns ``o`` and sums
        over ``(p, q, c)``; ``conv2d_backprop_filter`` rows ``(p, q, c)``, columns ``o``,
        sums over ``(n, i, j)``; ``conv2d_backprop_input`` is one product per filter tap
        ``(p, q)``, each adding ``y[n, i, j, :] k[p, q]^T`` into the places that tap read,
        taps in order. Each element adds its terms in its definition's order. Over chunks
        of points, the points are one more batch dimension (first)."""
        a, b = node.inputs
        la, lb = self.loc[id(a)], self.loc[id(b)]
        pts = self.batched(la) or self.batched(lb)
        d = node.prim.dims([a.shape, b.shape], node.params)
        loc = self.fresh(node, pts)
        self.fill(loc, node.shape, -0.0, pts)
        ra, rb, ro = (self.access(la, a.shape, pts), self.access(lb, b.shape, pts),
                      self.access(loc, node.shape, pts))
        if node.prim.name == "conv2d_backprop_input":  # a: y, b: k, out: x
            self.backprop_input(d, ra, rb, ro, loc, pts, self.batched(lb))
            return loc
        lead = ((self.P, ra.strides[0], rb.strides[0], ro.strides[0]),) if pts else ()
        (an, ah, aw, ac), (bn, bh, bw, bc), (on, oh, ow, oc) = \
            ra.strides[pts:], rb.strides[pts:], ro.strides[pts:]
        sh, sw = d.sh, d.sw
        if node.prim.name == "conv2d":  # a: x, b: k, out: y
            self.tiled(lead + ((d.n, an, 0, on), (d.oh, sh * ah, 0, oh)), (d.ow, sw * aw, ow),
                       (d.o, bc, oc),
                       ((d.kh, d.dh * ah, bn), (d.kw, d.dw * aw, bh), (d.c, ac, bw)),
                       (ra, rb, ro), points=pts)
        else:  # conv2d_backprop_filter; a: x, b: y, out: k
            # each image's y is read for every (q, c) of a filter row while in cache
            self.tiled(lead + ((d.kh, d.dh * ah, 0, on), (d.kw, d.dw * aw, 0, oh)),
                       (d.c, ac, ow),
                       (d.o, bc, oc),
                       ((d.n, an, bn), (d.oh, sh * ah, bh), (d.ow, sw * aw, bw)),
                       (ra, rb, ro), hoist=1, points=pts)
        return loc

    def backprop_input(self, d, ra: Access, rb: Access, ro: Access, loc: tuple, pts: bool,
                       k_pts: bool) -> None:
        """``x``-shaped ``conv2d_backprop_input(y, k)`` (see :meth:`conv`); the filters are
        first copied with ``c`` innermost (the columns of its products); ``pts``: over
        chunks of points (``k_pts``: the filters too)."""
        (an, ah, aw, ac), (on, oh, ow, oc) = ra.strides[pts:], ro.strides[pts:]
        sh, sw = d.sh, d.sw
        kshape = (d.kh, d.kw, d.o, d.c)
        kt = (self.add_buffer(Buffer("temp", -1, math.prod(kshape)), k_pts),
              _flat(self.shape(kshape, k_pts)))
        kacc = self.access(kt, kshape, pts)
        src = rb.strides[:k_pts] + tuple(rb.strides[pts:][i] for i in (0, 1, 3, 2))
        self.block(kshape, _copy_body(1, False), (Access(rb.buffer, rb.offset, src),),
                   (self.access(kt, kshape, k_pts),), batched=k_pts)
        bn, bh, bc, bw = kacc.strides[pts:]
        lead = ((self.P, ra.strides[0], kacc.strides[0], ro.strides[0]),) if pts else ()
        if (sh, sw) == (1, 1):
            # x[n, h, w, c] = sum over (p, q, o) of y'[n, h + eh-1 - p*dh, w + ew-1 - q*dw, o]
            # k[p, q, c, o], y' being y with eh-1 and ew-1 zero rows and columns around it
            # (eh, ew: the span of a window)
            eh, ew = d.span()
            padded = (d.n, d.oh + 2 * (eh - 1), d.ow + 2 * (ew - 1), d.o)
            ploc = (self.add_buffer(Buffer("temp", -1, math.prod(padded)), pts),
                    _flat(self.shape(padded, pts)))
            self.fill(ploc, padded, 0.0, pts)
            pacc = self.access(ploc, padded, pts)
            pn, ph, pw, po = pacc.strides[pts:]
            at = (slice(None),) * (1 + pts)
            inner = ploc[1][at + (slice(eh - 1, eh - 1 + d.oh), slice(ew - 1, ew - 1 + d.ow))]
            self.block(d.shape("y"), _copy_body(1, False), (ra,),
                       (self.access((ploc[0], inner), d.shape("y"), pts),), batched=pts)
            start = Access(ploc[0], (eh - 1) * ph + (ew - 1) * pw, ())
            if pts:
                lead = ((self.P, pacc.strides[0], kacc.strides[0], ro.strides[0]),)
            self.tiled(lead + ((d.n, pn, 0, on), (d.h, ph, 0, oh)), (d.w, pw, ow),
                       (d.c, bw, oc),
                       ((d.kh, -d.dh * ph, bn), (d.kw, -d.dw * pw, bh), (d.o, po, bc)),
                       (start, kacc, ro), points=pts)
            return
        for p, q in itertools.product(range(d.kh), range(d.kw)):
            tap_b = kacc._replace(offset=kacc.offset + p * bn + q * bh)
            tap_o = ro._replace(offset=ro.offset + p * d.dh * oh + q * d.dw * ow)
            self.tiled(lead + ((d.n, an, 0, on), (d.oh, ah, 0, sh * oh)),
                       (d.ow, aw, sw * ow), (d.c, bw, oc), ((d.o, ac, bc),),
                       (ra, tap_b, tap_o), points=pts)
        self.unreached(loc, d)

    def unreached(self, loc: tuple, d) -> None:
        """Zeros into the rows and columns of an input-shaped ``loc`` that no window of
        ``d`` covers (filled with -0.0 before its sums)."""
        pts = self.batched(loc)
        at = (slice(None),) * (1 + pts)
        inside = reached(d)
        for y in np.flatnonzero(~inside.any(axis=1)):
            self.fill((loc[0], loc[1][at + (slice(y, y + 1),)]), (d.n, 1, d.w, d.c), 0.0,
                      pts)
        for x in np.flatnonzero(~inside.any(axis=0)):
            self.fill((loc[0], loc[1][at + (slice(None), slice(x, x + 1))]),
                      (d.n, d.h, 1, d.c), 0.0, pts)

    def pool(self, node: N.Node) -> tuple:
        """Pooling (``ops/pool.py``) as one loop over the windows ``(n, i, j, c)``, the body
        reading every tap (the core offsets of the accesses): the running maximum, or sum;
        the pick of the second argument; or, for the gradients, the window's cotangent added
        at its taps (an accumulation, windows in order, over an output of -0.0)."""
        x = node.inputs[0]
        pts = any(self.batched(self.loc[id(a)]) for a in node.inputs)
        d = node.prim.dims(x.shape, node.params)
        taps = [(p, q) for p in range(d.kh) for q in range(d.kw)]
        space = (d.n, d.oh, d.ow, d.c)
        loc = self.fresh(node, pts)

        def windows_of(loc):  # an input-shaped location read window by window
            acc = self.access(loc, d.shape("x"), pts)
            sn, sh_, sw_, sc = acc.strides[pts:]
            return Access(acc.buffer, acc.offset,
                          acc.strides[:pts] + (sn, d.sh * sh_, d.sw * sw_, sc),
                          tuple(p * sh_ + q * sw_ for p, q in taps))

        t = _stand_ins((len(taps),), "t")
        if node.prim.name == "sum_pool2d_grad":  # each window's g added at its taps
            self.fill(loc, node.shape, -0.0, pts)
            acc, g = _stand_ins((len(taps),), "acc"), G.Leaf.new("g")
            value = np.array([G.add(a, g) for a in acc], dtype=object)
            body = build_plan([value], [acc, np.asarray(g, dtype=object)])
            out = windows_of(loc)
            self.block(space, body, (out, self.access(self.loc[id(x)], space, pts)), (out,),
                       accumulate=True, batched=pts)
            self.unreached(loc, d)
            return loc
        rx = windows_of(self.loc[id(x)])
        if node.prim.name in ("max_pool2d", "sum_pool2d"):
            value = chain(list(t))[-1] if node.prim.name == "max_pool2d" else \
                sum_atoms(list(t))
            body = build_plan([np.asarray(value, dtype=object)], [t])
            self.block(space, body, (rx,), (self.access(loc, space, pts),), batched=pts)
            return loc
        other = self.loc[id(node.inputs[1])]
        if node.prim.name == "max_pool2d_pick":
            h = _stand_ins((len(taps),), "h")
            body = build_plan([np.asarray(pick_atom(list(t), list(h)), dtype=object)], [t, h])
            self.block(space, body, (rx, windows_of(other)), (self.access(loc, space, pts),),
                       batched=pts)
            return loc
        self.fill(loc, node.shape, -0.0, pts)
        acc, g = _stand_ins((len(taps),), "acc"), G.Leaf.new("g")
        value = np.array([G.add(a, s) for a, s in zip(acc, spread_atoms(list(t), g))],
                         dtype=object)
        body = build_plan([value], [acc, t, np.asarray(g, dtype=object)])
        out = windows_of(loc)
        self.block(space, body, (out, rx, self.access(other, space, pts)), (out,),
                   accumulate=True, batched=pts)
        self.unreached(loc, d)
        return loc

    def tiled(self, batch: tuple, rows: tuple, cols: tuple, depth: tuple, accs: tuple,
              hoist: int = 0, points: bool = False) -> None:
        """``out[B, i, j] += sum over K of a[B, i, K] b[B, K, j]`` in register tiles, as
        :meth:`matmul_tile`, over index spaces given by strides: ``batch``: ``(extent,
        a stride, b stride, out stride)`` per batch dimension; ``rows``: ``(m, a stride,
        out stride)``; ``cols``: ``(n, b stride, out stride)``; ``depth``: ``(extent,
        a stride, b stride)`` per summed dimension, the first outermost; ``accs``: the
        accesses of ``a``, ``b`` and ``out`` (their offsets are used). The loops run over
        the first batch dimension (threads split it), column tiles, the first ``hoist``
        summed dimensions (``b``'s panel for them is then read by every row tile while in
        cache), the other batch dimensions, row tiles, the other summed dimensions and the
        columns of a tile. ``points``: the first batch dimension is the chunk's points
        (its extent is the run-time count, :meth:`block`'s ``batched``)."""
        ra, rb, ro = accs
        (m, am, om), (n, bn, on) = rows, cols
        r = MATMUL_ROWS if m >= MATMUL_ROWS else 1
        c = min(_matmul_cols(), n)
        mm, nn = m - m % r, n - n % c
        ext = tuple(e for e, *_ in batch) + tuple(e for e, *_ in depth)
        if 0 in ext or m == 0 or n == 0:
            return
        sb_a, sb_b, sb_o = (tuple(t[k] for t in batch) for k in (1, 2, 3))
        k_ext = tuple(e for e, _, _ in depth)
        k_a, k_b = tuple(t[1] for t in depth), tuple(t[2] for t in depth)
        for i0, i1, rt, j0, j1, ct in ((0, mm, r, 0, nn, c), (0, mm, r, nn, n, n - nn),
                                       (mm, m, 1, 0, n, n)):
            if i1 <= i0 or j1 <= j0:
                continue
            acc, x, y = _stand_ins((rt,), "acc"), _stand_ins((rt,), "a"), G.Leaf.new("b")
            value = np.array([G.add(acc[t], G.mul(x[t], y)) for t in range(rt)], dtype=object)
            body = build_plan([value], [acc, x, np.asarray(y, dtype=object)])
            def order(b_, tile_j, k_, tile_i, last):  # strides (or extents) in loop order
                return (b_[:1] + (tile_j,) + k_[:hoist] + b_[1:] + (tile_i,) + k_[hoist:]
                        + (last,))

            space = order(tuple(e for e, *_ in batch), (j1 - j0) // ct, k_ext,
                          (i1 - i0) // rt, ct)
            sa = Access(ra.buffer, ra.offset + i0 * am, order(sb_a, 0, k_a, rt * am, 0),
                        tuple(t * am for t in range(rt)))
            sb = Access(rb.buffer, rb.offset + j0 * bn, order(sb_b, ct * bn, k_b, 0, bn))
            so = Access(ro.buffer, ro.offset + i0 * om + j0 * on,
                        order(sb_o, ct * on, (0,) * len(depth), rt * om, on),
                        tuple(t * om for t in range(rt)))
            self.block(space[1:] if points else space, body, (so, sa, sb), (so,),
                       accumulate=True, contract=True, batched=points)

    def along_axis(self, node: N.Node) -> tuple:
        args, axis = node.inputs, node.params["axis"]
        length = args[-1].shape[axis]
        if length > SLICE_LIMIT:
            raise Unplannable(f"{node.prim.name} over slices of {length}")
        lead = tuple(s for i, s in enumerate(args[-1].shape) if i != axis)
        stand_ins = [_stand_ins((length,), f"s{i}") for i in range(len(args))]
        atoms = node.prim.slice_build(*[list(s) for s in stand_ins])
        locs = [self.loc[id(a)] for a in args]
        batched = any(self.batched(loc) for loc in locs)
        ins = [self.slice_access(loc, axis, lead, batched) for loc in locs]
        loc = self.fresh(node, batched)
        if node.prim.reduces:
            out = self.access(loc, lead, batched)
        else:
            out = self.slice_access(loc, axis, lead, batched)
        return self.body_block(node, lead, atoms, stand_ins, ins, out, loc, batched)

    def slice_access(self, loc: tuple, axis: int, lead: tuple, batched: bool = False
                     ) -> Access:
        def moved(loc):
            shift = 1 if self.batched(loc) and axis >= 0 else 0
            offs = np.moveaxis(loc[1], axis + shift, -1)
            return np.broadcast_to(offs, self.shape(lead, batched) + offs.shape[-1:])

        offsets = moved(loc)
        aff = _affine(offsets)
        if aff is None:
            loc = self.materialise(loc)
            offsets = moved(loc)
            aff = _affine(offsets)
        step = aff[1][-1]
        return Access(loc[0], aff[0], aff[1][:-1],
                      tuple(step * t for t in range(offsets.shape[-1])))

    def unrolled(self, node: N.Node) -> tuple:
        args = node.inputs
        if node.size + sum(a.size for a in args) > UNROLL_LIMIT:
            raise Unplannable(f"{node.prim.name} of {node.size} elements")
        small = [a.constant and a.small() for a in args]
        batched = any(self.batched(self.loc[id(a)]) for a, s in zip(args, small) if not s)
        arrays, stand_ins, ins = [], [], []
        for i, (a, s) in enumerate(zip(args, small)):
            if s:
                arrays.append(a.atoms())
                continue
            leaves = _stand_ins(a.shape, f"a{i}")
            arrays.append(leaves)
            stand_ins.append(leaves.reshape(-1))
            loc = self.loc[id(a)]
            if self.batched(loc):
                ins.append(Access(loc[0], 0, (self.point_stride(loc[1]),),
                                  tuple(int(k) for k in loc[1][0].flat)))
            else:
                ins.append(Access(loc[0], 0, (0,) if batched else (),
                                  tuple(int(k) for k in loc[1].flat)))
        atoms = node.prim.build(arrays, node.params)
        loc = self.fresh(node, batched)
        out = Access(loc[0], 0, (node.size,) if batched else (), tuple(range(node.size)))
        return self.body_block(node, (), np.asarray(atoms, dtype=object).reshape(-1),
                               stand_ins, ins, out, loc, batched)

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
        if here is None and kind == "sum" and _outer_total(node) and all(
                self.batched(self.loc[id(a)]) for a in node.inputs):
            return self.outer_total(node, buf)
        if here is None and _reduced_total(node, kind) and self.batched(
                self.loc[id(node.inputs[0])]):
            return self.reduced_total(node, buf)
        if here is None:
            here = self.loc[id(node)] = self.place(node)
        out = self.access((buf, _flat(node.shape)), node.shape)
        out = Access(buf, out.offset, (0,) + out.strides)
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        self.accumulate((self.P,) + node.shape, _COMBINE[kind](acc, term), [acc, term],
                        [out, self.access(here, node.shape, True)], out, count=0)

    def reduced_total(self, node: N.Node, buf: int) -> None:
        """A reduction's total over points, accumulated from its argument's elements."""
        (x,) = node.inputs
        axes, name = node.params["axis"], node.prim.name
        n = math.prod(x.shape[i] for i in axes)
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        offsets = np.broadcast_to(_flat(node.shape).reshape(kept), x.shape)
        aff = _affine(offsets)
        out = Access(buf, aff[0], (0,) + aff[1])
        acc, term = G.Leaf.new("acc"), G.Leaf.new("x")
        if x.size:
            self.accumulate((self.P,) + x.shape, _REDUCE[name][1](acc, term, n), [acc, term],
                            [out, self.access(self.loc[id(x)], x.shape, True)], out, count=0)

    def outer_total(self, node: N.Node, buf: int) -> None:
        """``out += a_p^T b_p`` over the chunk's points ``p`` (``a_p``, ``b_p`` rows of each
        point), in register tiles as :meth:`matmul_tile`: the points are the inner
        dimension of one product."""
        a, b = node.inputs
        m, n = node.shape
        ra = self.access(self.loc[id(a)], (1, m), True)
        rb = self.access(self.loc[id(b)], (1, n), True)
        (pa, _, ai), (pb, _, bj) = ra.strides, rb.strides
        rows = MATMUL_ROWS if m >= MATMUL_ROWS else 1
        cols = min(_matmul_cols(), n)
        mm, nn = m - m % rows, n - n % cols
        for i0, i1, r, j0, j1, c in ((0, mm, rows, 0, nn, cols), (0, mm, rows, nn, n, n - nn),
                                     (mm, m, 1, 0, n, n)):
            if not (i1 > i0 and j1 > j0):
                continue
            acc, x, y = _stand_ins((r,), "acc"), _stand_ins((r,), "a"), G.Leaf.new("b")
            value = np.array([G.add(acc[t], G.mul(x[t], y)) for t in range(r)], dtype=object)
            body = build_plan([value], [acc, x, np.asarray(y, dtype=object)])
            space = ((i1 - i0) // r, (j1 - j0) // c, self.P, c)
            so = Access(buf, i0 * n + j0, (r * n, c, 0, 1), tuple(t * n for t in range(r)))
            sa = Access(ra.buffer, ra.offset + i0 * ai, (r * ai, 0, pa, 0),
                        tuple(t * ai for t in range(r)))
            sb = Access(rb.buffer, rb.offset + j0 * bj, (0, c * bj, pb, bj))
            self.blocks.append(Block(space, body, (so, sa, sb), (so,), accumulate=True,
                                     contract=True, count=2))

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
                _affine(self.spread((buf, offsets), node.shape, batched)) is None:
            self.materialise((buf, offsets), into=new)  # a gather: copied in place
            return
        self.block(node.shape, _copy_body(1, node.dtype.kind == "b"),
                   (self.access((buf, offsets), node.shape, batched),),
                   (self.access((new, _flat(want)), node.shape, batched),), batched=batched)


def _sum(acc, x, n):
    return G.add(acc, x)


def _mean(acc, x, n):
    return G.add(acc, G.mul(x, G.number(1.0 / n)))


#: The total over points each reduction's terms add to (a mean's: its sum, scaled after),
#: and how a total combines terms.
TOTAL_OF = {"reduce_sum": "sum", "reduce_mean": "sum", "reduce_max": "max",
            "reduce_min": "min"}
_COMBINE = {
    "sum": lambda acc, x: G.add(acc, x),
    "max": lambda acc, x: G.call(sp.Max, acc, x),
    "min": lambda acc, x: G.call(sp.Min, acc, x),
}

# name -> (initial value, accumulation, value of an empty reduction)
_REDUCE = {
    "reduce_sum": (-0.0, _sum, 0.0),
    "reduce_mean": (-0.0, _mean, np.nan),
    "reduce_prod": (1.0, lambda acc, x, n: G.mul(acc, x), 1.0),
    "reduce_max": (-np.inf, lambda acc, x, n: _COMBINE["max"](acc, x), -np.inf),
    "reduce_min": (np.inf, lambda acc, x, n: _COMBINE["min"](acc, x), np.inf),
}

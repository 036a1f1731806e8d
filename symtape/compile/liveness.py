"""Structural zeros of selects kept apart in loop nests, as counts of live terms.

Eager values and the element view give ``0`` where a select takes its structural zero
branch, also when that zero is later multiplied by an infinite or nan partial (``0 * inf``
is ``0``: README, "no where trap"). A loop nest computes a select inside the loops that read
it (``fusion.fused``), but a value that is summed, written to a buffer or moved is read
back as a plain number. The planner then keeps, beside such a node, its *count*: for a sum
(over axes, or an adding scatter) how many of its terms are not structural zeros; for a
select written to a buffer (or an unrolled node's atoms that are selects), 1 where it is
not one and 0 where it is; for a move of either, the count moved the same way; for a move
with zeros or of several arguments (a concat, a pad) copied into a buffer, the arguments'
counts (1 for one without) at their places and 0 at the zeros; for an adding scatter some
of whose places no term reaches, those places' 0 (known when the plan is made). A reader
reads the node as ``select(count != 0, value, 0)`` (``_Planner.fused_atom``), so it is
exactly 0 where every term is a structural zero. The
functions here are the planner's methods of those names (``p``: the planner).
"""

from __future__ import annotations

import numpy as np

from symtape.codegen.loops import Access
from symtape.codegen.plan import build_plan
from symtape.compile.fusion import pointwise
from symtape.core import node as N
from symtape.base.lazy import LazyModule

G = LazyModule("G", globals(), "symtape.element.graph")


def used(atom) -> set:
    """The stand-in leaves a built template reads."""
    return set(G.leaves([atom])) if G.is_symbolic(atom) else set()


def moves(node: N.Node) -> bool:
    """Whether ``node`` moves its one float argument's elements (``Primitive.places``)."""
    return node.kind == "op" and len(node.inputs) == 1 and node.dtype.kind == "f" and \
        node.prim.places(node) is not None


def _live(atom):
    """1 where the built template ``atom`` is not a structural zero, 0 where it is (a select
    taking its zero branch: :func:`graph.absorbing`)."""
    with np.errstate(all="ignore"):
        return G.add(G.ONE, G.mul(G.number(-1), G.absorbing(atom)))


def _carries(node: N.Node) -> bool:
    """Whether ``node`` places its arguments' elements (a move, or one of several
    arguments: a stack, a concat, a pad), so that it carries their counts
    (:func:`parts_count`)."""
    return moves(node) or node.kind == "op" and node.dtype.kind == "f" and \
        getattr(node.prim, "index_maps", None) is not None


def _read_as_select(p, node: N.Node) -> bool:
    """Whether elementwise ops or moves read ``node`` (readers that read a count)."""
    return any(u is not None and (pointwise(u) or _carries(u))
               for u in p.users.get(id(node), ()))


def _lives(atoms) -> np.ndarray:
    """:func:`_live` of each of ``atoms`` (one atom, or an array of an unrolled block's)."""
    atoms = np.asarray(atoms, dtype=object)
    return np.array([_live(a) for a in atoms.flat], dtype=object).reshape(atoms.shape)


def live_count(p, node: N.Node, x: N.Node, space: tuple, out: Access,
               batched: bool) -> None:
    """For ``node``, summed from ``x`` at the places of ``out`` (an access of a fresh
    buffer over ``space``, ``x``'s shape or a finer one; an adding scatter, a sum over
    axes): how many of the terms added into each place are not structural zeros (a
    select's zero branch, of ``x`` or of what ``x`` moves), counted apart, so that
    ``node``'s elementwise readers read it as a select of the sum, exactly 0 where
    every term is a structural zero (no ``0 * inf``; the element view's rule for sums
    of selects, and eager values' at every size)."""
    source, m = x, None
    while moves(source):
        places = source.prim.places(source)  # (a move of a move is one move)
        m = places if m is None else p.composed(places, m)
        source = source.inputs[0]
    if not p.pointwise(source) or (m is not None and (m < 0).any()):
        return
    own: dict = {}
    with np.errstate(all="ignore"):
        live = _live(p.fused_atom(source, own))
    if not G.is_symbolic(live):
        return  # (never, or always, a structural zero: the sum says it)
    reading = used(live)
    reads = [(leaf, a) for leaf, a in own.values() if leaf in reading]
    if any(id(a) in p.holes or id(a) in p.inline or id(a) not in p.loc for _, a in reads):
        return
    ins = []
    for _, a in reads:  # the select's arguments, read at the places of x's elements
        loc = p.loc[id(a)]
        f = p.spread(loc, source.shape, p.batched(loc))
        if m is not None:
            f = f.reshape((p.P, -1) if p.batched(loc) else (-1,))[..., m]
        f = f.reshape(p.shape(space, p.batched(loc)))
        ins.append(p.access((loc[0], f), space, batched))
    loc = p.counted(node, batched)
    p.fill(loc, node.shape, 0.0, batched)
    out, acc = out._replace(buffer=loc[0]), G.Leaf.new("acc")
    p.accumulate(space, G.add(acc, live), [acc] + [leaf for leaf, _ in reads], [out] + ins,
                 out, batched)


def live_mask(p, node: N.Node, boxes: list, batched: bool) -> None:
    """For an elementwise ``node`` written to a buffer (one loop, or one per box of its
    shape: ``boxes`` of ``(space, atom, stand-ins read, their accesses, access
    written)``; or an unrolled node: one box of its atoms and stand-in arrays) whose
    template is a zero-branched select -- one not computed in its readers' loops: an
    output, a node read through moves, one that is a select only through a sum's count
    of live terms -- and that elementwise ops or moves read: 1
    where it is not a structural zero, 0 where it is, computed apart (a count, see
    :func:`live_count`), so that those readers read it as a select, exactly 0 there (no
    ``0 * inf`` of a temporary's zero; the element view's rule)."""
    if node.dtype.kind != "f" or not _read_as_select(p, node):
        return
    lives = [_lives(atom) for _, atom, *_ in boxes]
    if not any(G.is_symbolic(v) for live in lives for v in live.flat):
        return
    loc = p.counted(node, batched)
    for (space, _, leaves, ins, out), live in zip(boxes, lives):
        reading = set().union(*[used(v) for v in live.flat])
        keep = [k for k, leaf in enumerate(leaves)
                if isinstance(leaf, np.ndarray) or leaf in reading]
        body = build_plan([live], [np.asarray(leaves[k], dtype=object) for k in keep])
        p.block(space, body, [ins[k] for k in keep], (out._replace(buffer=loc[0]),),
                batched=batched)


def counted(p, node: N.Node, batched: bool) -> tuple:
    """A fresh buffer for ``node``'s count of live terms (the planner's ``counts``)."""
    count = _Count(node.shape)
    p.loc[id(count)] = loc = p.fresh(node, batched)
    p.counts[id(node)] = count
    return loc


def moved_count(p, node: N.Node, source: N.Node, m: np.ndarray) -> None:
    """A move of a node with a count of live terms (a sum of selects, a placed select:
    :func:`live_count`, :func:`live_mask`) has the count moved the same way, so that
    its readers read it as a select too (a broadcast of a select's sum)."""
    count = p.counts[id(source)]
    b, offs = p.loc[id(count)]
    batched = b in p.per_point
    places = (offs.reshape(p.P, -1) if batched else offs.reshape(-1))[..., m.reshape(-1)]
    moved = _Count(node.shape)
    p.loc[id(moved)] = (b, places.reshape(p.shape(node.shape, batched)))
    p.counts[id(node)] = moved


def reached_count(p, node: N.Node, reached: np.ndarray) -> None:
    """An adding scatter some of whose places receive no term (``reached`` false there),
    summing terms that are no selects (a constant's cotangent: ``gather``'s of a constant
    ``g``), has the count ``reached``, known when the plan is made (a constant buffer):
    those places are structural zeros, as eager values' (0 times an infinite partial is
    0 there)."""
    if id(node) in p.counts or node.dtype.kind != "f" or reached.all() or \
            not _read_as_select(p, node):
        return
    count = _Count(node.shape)
    p.loc[id(count)] = (p.constant_buffer(reached.astype(float).reshape(-1).tolist()),
                        p.flat(node.shape))
    p.counts[id(node)] = count


def parts_count(p, node: N.Node, args: list, maps: list, covered: np.ndarray) -> None:
    """A move of several arguments, or with zeros (a concat, a pad: element ``j`` is
    element ``maps[a][j]`` of ``args[a]``, none where ``covered`` is false) copied into a
    fresh buffer, has a count when some argument has one or it has zeros that elementwise
    ops or moves read: each argument's count at its places (1 for an argument without
    one), 0 at the zeros -- structural zeros, as eager values' (a concat's cotangent is
    0 times an infinite partial where it is zero)."""
    counted = [id(a) in p.counts for a in args]
    if node.dtype.kind != "f" or (covered.all() and not any(counted)) or \
            not _read_as_select(p, node):
        return
    locs = []
    for a, c in zip(args, counted):
        if c:
            locs.append(p.loc[id(p.counts[id(a)])])
        else:  # a plain value: live everywhere
            if p.one is None:
                p.one = p.constant_buffer([1.0])
            locs.append((p.one, np.zeros(a.shape, dtype=np.int64)))
    count = _Count(node.shape)
    p.loc[id(count)] = p.assembled(count, locs, maps, ~covered)
    p.counts[id(node)] = count


class _Count:
    """The count of a node's terms that are not structural zeros (a sum's, a select's 1 or
    0): a stand-in node its readers read (:func:`live_count`, :func:`live_mask`)."""

    dtype = np.dtype(float)

    def __init__(self, shape: tuple) -> None:
        self.shape = shape
        self.size = int(np.prod(shape, dtype=np.int64))

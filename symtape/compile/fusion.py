"""Which nodes of a loop plan are computed where: the planner's passes over the graph before
it places any node. Elementwise nodes computed inside their readers' loops (:func:`fused`),
nodes whose zeros may stay unwritten (:func:`holey`), elementwise nodes computed through
the padded scatters that read them (:func:`through`), elementwise nodes written straight
into an output (:func:`destinations`), and large, mostly zero constants computed
from constants alone that are placed by their values (:func:`constant_folds`: the one-hot
seeds of a coloured sweep and their cotangents). :mod:`~symtape.compile.planner` carries
them out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from symtape.compile.offsets import fused_size, paddings
from symtape.core import node as N
from symtape.core.primitive import distinct_places, inverse_places

__all__ = ["numeric", "pointwise", "looped_elementwise", "holey", "through", "destinations",
           "fused", "takes_operand", "constant_folds", "cut", "THROUGH_USERS", "THROUGH_NODES",
           "FOLD_MAX"]


def numeric(node: N.Node) -> bool:
    """Floats, and integers (held as doubles, as the element view's kernels hold them:
    exact to 2**53)."""
    return node.dtype.kind in "fiu"


def pointwise(node: N.Node) -> bool:
    """A float elementwise op of float arguments and conditions (a select fused into its
    users keeps its structural zeros: ``where(c, g, 0) * x`` is 0 where ``c`` is false,
    also at ``x = nan``)."""
    return (node.kind == "op" and node.prim.pointwise and node.dtype.kind == "f"
            and all(a.dtype.kind in "fb" for a in node.inputs))


def looped_elementwise(node: N.Node | None) -> bool:
    """Whether ``node`` is planned by the planner's ``elementwise`` (or fused into a node
    that is)."""
    return (node is not None and node.kind == "op" and node.prim.pointwise
            and all(numeric(a) for a in node.inputs))


def holey(order: list, users: dict) -> set:
    """Float nodes read only by elementwise ops of their own shape: a structural one that is
    partly zeros (a padding scatter) is not copied out with its zeros but read in place,
    its zeros in boxes of their own (the planner's ``in_regions``)."""
    return {id(node) for node in order if node.dtype.kind == "f" and users.get(id(node))
            and all(looped_elementwise(u) and u.shape == node.shape
                    for u in users[id(node)])}


#: A node read by a padded scatter and by elementwise ops of its shape is computed in each
#: of their loops (not written to a temporary) when it has at most this many readers and
#: at most this many nodes fused into it.
THROUGH_USERS = 3
THROUGH_NODES = 8


def through(order: list, users: dict, holey: set, fused: set, roots: Sequence[N.Node]
             ) -> tuple:
    """``(through, recomputed)``: elementwise float nodes read by zero-padded scatters whose
    zeros may stay unwritten (:func:`holey`), computed inside the scatters' readers' boxes,
    their arguments read through the scatters' places, instead of written to a temporary
    the readers read back (the planner's ``in_regions``). ``recomputed``: those of them also
    read by elementwise ops of their shape (at most :data:`THROUGH_USERS` readers, a
    template of at most :data:`THROUGH_NODES` nodes), whose loops compute them too (as a
    fused argument)."""
    outs = {id(r) for r in roots}
    pads = paddings(order, holey, outs)
    found, again = set(), set()
    for node in order:
        if not pointwise(node) or id(node) in fused or id(node) in outs:
            continue
        use = users.get(id(node), [])
        if not any(u is not None and id(u) in pads for u in use):
            continue
        if len(use) == 1:
            found.add(id(node))
            continue
        if (len(use) <= THROUGH_USERS and fused_size(node, fused) <= THROUGH_NODES
                and all(u is not None and (id(u) in pads or (
                    pointwise(u) and u.shape == node.shape)) for u in use)):
            found.add(id(node))
            again.add(id(node))
    return found, again


def destinations(outputs: Sequence[N.Node], totals: Sequence[str], users: dict,
                  fused: set) -> dict:
    """``id(node) -> (output, move node, places)``: elementwise float nodes read only by a
    move (a gather, another structural op, a scatter to distinct places:
    ``Primitive.places``) that is output ``output`` and fills each of its places with one
    of the node's elements (element ``k`` at ``places[k]``, -1: not taken). They write
    straight into the output (destination passing), instead of into a temporary the
    output copies."""
    dest: dict = {}
    for o, node in enumerate(outputs):
        if totals[o] or node.kind != "op" or len(node.inputs) != 1:
            continue
        (arg,) = node.inputs
        use = users.get(id(arg), [])
        if (node.dtype.kind != "f" or arg.dtype.kind != "f" or not looped_elementwise(arg)
                or id(arg) in fused or len(use) != 1 or use[0] is not node
                or sum(out is node for out in outputs) != 1):
            continue
        m = node.prim.places(node)
        if m is None or (m < 0).any() or not distinct_places(m):
            continue
        dest[id(arg)] = (o, node, inverse_places(m, arg.shape))
    return dest


def fused(order: list, users: dict, placed: dict, fixed=frozenset()) -> set:
    """Elementwise nodes computed inside their readers' loop body (a chain ``a * m + b * g``
    is one loop): float nodes, not outputs, all of whose readers are elementwise ops of
    their shape or ops accumulating their argument's elements (:func:`takes_operand`),
    computed in one loop -- one reader, or several that are themselves computed inside the
    same one (``x * x``, ``u + x`` with ``u = x * c``: the template reads ``x`` twice).
    A node the points share (computed from constants alone: one-hot seeds broadcast over
    a batched sweep's tensors; ``fixed``: placed nodes that are such, folded constants) of
    a template of at most :data:`THROUGH_NODES` nodes is computed in each of up to
    :data:`THROUGH_USERS` such loops: reading it back from a temporary costs more than
    computing it from the small tensors it broadcasts. A zero-branched select
    (``where(c, g, 0)``: a where's cotangent) of such a template is computed in every loop
    that reads it, so each keeps its structural zeros (``0 * nan`` of a temporary's zero
    is nan, where eager values and the element DAG give 0), as is a product with such a
    select computed in it (``where(c, g, 0) * h``, a select again); one that is also an output
    (a ``None``-batch pass's total) is computed there too (the planner places it)."""
    varying = set(placed) - set(fixed)  # ids of nodes that differ between points
    selects = set()  # ids of zero-branched selects, and of products with one computed in
    for node in order:
        if any(id(a) in varying for a in node.inputs):
            varying.add(id(node))
        if _selects(node) or pointwise(node) and any(
                id(a) in selects and i in getattr(node.prim, "zero_args", ())
                for i, a in enumerate(node.inputs)):
            selects.add(id(node))
    out, loops = set(), {}  # loops: id(node) -> ids of the readers whose loops compute it
    for node in reversed(order):  # (readers before their arguments)
        use = users.get(id(node), [])
        readers = [u for u in use if u is not None]  # (None: an output)
        if (not readers or (len(readers) < len(use) and id(node) not in selects)
                or id(node) in placed or not pointwise(node)
                or not all(pointwise(u) and u.shape == node.shape or takes_operand(u)
                           for u in readers)):
            continue
        into = set().union(*(loops.get(id(u), {id(u)}) for u in readers))
        if len(into) == 1 or (id(node) not in varying and len(into) <= THROUGH_USERS) \
                or id(node) in selects:
            out.add(id(node))
            loops[id(node)] = into
    for node in order:  # (arguments first: a template too large is computed once after all)
        if len(loops.get(id(node), ())) > 1 and fused_size(node, out) > THROUGH_NODES:
            out.discard(id(node))
    return out


def _selects(node: N.Node) -> bool:
    """Whether ``node``'s template, specialised to its arguments, is a zero-branched
    select."""
    makes = getattr(node.prim, "makes_select", None)
    return makes is not None and makes(node.inputs)


def takes_operand(node: N.Node) -> bool:
    """Whether ``node``'s loop rule reads its one argument's elements through
    the planner's ``operand`` (a reduction, an adding scatter: ``reads_operand``), so an
    elementwise argument is computed inside its accumulating loop."""
    reads = getattr(node.prim, "reads_operand", None) if node.kind == "op" else None
    return len(node.inputs) == 1 and reads is not None and bool(reads(node))


#: Constants computed by ops are evaluated at plan time up to this many elements each (a
#: 20,000-species network's seeds' cotangents, 9.5 M: folded, its sweep visits non-zeros).
FOLD_MAX = 2 ** 24


def constant_folds(order: list, roots: Sequence[N.Node], least: int, share: int) -> dict:
    """``id(node) -> (node, flat values as a SparseFlat)`` for the float64 nodes, not
    ``roots``, computed by ops from constants alone (the node fact ``constant``) that have
    at least ``least`` elements, at most one in ``share`` of them non-zero: their values,
    evaluated now by the ops' numeric rules (the eager values of large tensors), are placed
    as constants built from their non-zeros, and the blocks that would compute them at
    every call are not planned (:func:`cut`). Their zeros are then known where the plan is
    made: a sum's term with such a factor is not computed
    (:mod:`~symtape.compile.sparse_terms`)."""
    outs = {id(r) for r in roots}
    left: dict = {}  # id(node) -> readers of it among the constants still to evaluate
    for node in order:
        if node.kind == "op" and node.constant:
            for a in node.inputs:
                left[id(a)] = left.get(id(a), 0) + 1
    values: dict = {}
    found: dict = {}
    for node in order:
        candidate = (node.kind == "op" and node.dtype == np.float64 and node.size >= least
                     and id(node) not in outs)
        if not (candidate or left.get(id(node))):
            continue
        value = _constant_value(node, values)
        if value is None:
            continue
        if node.kind == "op":
            for a in node.inputs:
                left[id(a)] -= 1
                if not left[id(a)]:
                    values.pop(id(a), None)
        flat = value.reshape(-1)
        if candidate and np.count_nonzero(flat) * share <= node.size:
            found[id(node)] = (node, SparseFlat(flat))
        if left.get(id(node)):
            values[id(node)] = value
    return found


class SparseFlat:
    """A flat float64 array held by its elements that are not +0.0 (``nz``, ascending, and
    their ``values``; a -0.0 is kept): a folded constant that is mostly zeros (a one-hot
    seed of 2e6 elements is one element here, not 16 MB). Indexing with an array of places
    gives their values, zeros included.

    >>> s = SparseFlat(np.array([0.0, 2.0, 0.0, -0.0]))
    >>> s.nz.tolist(), s[np.array([[3, 1], [0, 2]])].tolist()
    ([1, 3], [[-0.0, 2.0], [0.0, 0.0]])
    """

    __slots__ = ("size", "nz", "values")

    def __init__(self, flat: np.ndarray) -> None:
        flat = np.ascontiguousarray(flat, dtype=np.float64)
        self.size = flat.size
        self.nz = np.flatnonzero(flat.view(np.int64))  # (-0.0's bits are not 0)
        self.values = flat[self.nz]

    def __getitem__(self, places) -> np.ndarray:
        places = np.asarray(places, dtype=np.int64)
        out = np.zeros(places.shape)
        if len(self.nz):
            at = np.minimum(np.searchsorted(self.nz, places), len(self.nz) - 1)
            hit = self.nz[at] == places
            out[hit] = self.values[at[hit]]
        return out

    def dense(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.nz] = self.values
        return out


def _constant_value(node: N.Node, values: dict) -> np.ndarray | None:
    """:func:`N.constant_value`, None above :data:`FOLD_MAX` elements."""
    return None if node.size > FOLD_MAX else N.constant_value(node, values)


def cut(order: list, roots: Sequence[N.Node], stop) -> list:
    """``order`` without the nodes that only nodes in ``stop`` (ids) read, directly or
    through others (what folded constants were computed from); ``stop``'s nodes stay."""
    needed = {id(r) for r in roots}
    kept = []
    for node in reversed(order):
        if id(node) in needed:
            kept.append(node)
            if id(node) not in stop:
                needed.update(id(a) for a in node.inputs)
    return kept[::-1]

"""Eager values of small nodes: their element view, evaluated.

A node whose element view is small (:meth:`Node.small`) and that folds beyond its template
(not regular) takes the value of its element DAG, evaluated on its arguments' values: the
value formulas and compiled code give (README, "One rule for values"). It is one value path
for every op: the op's element view (:meth:`Primitive.build`) is the whole rule. What makes it
cheap is that the view is sorted once and its evaluation planned (:class:`ViewPlan`):

* elements that are constants are the result's folds;
* elements that are what the template computes (the same atom as the view of the op on
  plain arguments, when :meth:`Primitive.structure` says the template is regular there) are
  numpy's value of the whole node;
* the rest are grouped by their shape (the same definitions with argument elements in the
  same places) and each group is evaluated by one numpy program over the arrays of its
  members' argument elements (an argument's element itself is such a program).

When the arguments are regular except at folded constants (:meth:`Node.fold_view`), the view
is built on stand-in leaves, one per argument element, with the folded constants in their
places: the node's own view up to the names of its atoms. Such a plan depends only on the
arguments' fold patterns, so it is kept per pattern and a training loop whose data holds
zeros, or a sweep of one-hot seeds, plans once and never builds the element view. Otherwise
the node's own view is evaluated through its definitions the first time and planned, over
its arguments' elements and the leaves it reads itself, when it is evaluated again.

>>> import symtape as st
>>> x = st.Variable([2.0, 3.0])
>>> (x * st.constant([0.0, 1.0]) * float("inf")).numpy()  # x*0 is the constant 0 there
array([ 0., inf])
"""

from __future__ import annotations

import weakref

import numpy as np

from symtape.base.errors import SymtapeError
from symtape.base.lazy import LazyModule
from symtape.core import node as N

E = LazyModule("E", globals(), "symtape.element.evaluate")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["ViewPlan", "view_plan", "node_plan", "in_node_order", "STAND_IN_LIMIT"]

#: At most this many argument elements are stood in for (a small node reading a large
#: built argument is planned on its own view instead).
STAND_IN_LIMIT = 4096

#: At most this many definitions are walked to plan a view (a node whose elements read a
#: deep shared ancestry is evaluated through its definitions at every call instead).
WALK_LIMIT = 1 << 14

#: At most this many fold patterns are kept per kind of application (its signature).
MEMO_PATTERNS = 256

_STAND_INS: list = []


def _stand_ins(n: int) -> list:
    """The first ``n`` stand-in leaves (shared by every plan; their names sort as their
    numbers, so the views of neighbouring elements list them alike)."""
    while len(_STAND_INS) < n:
        _STAND_INS.append(G.Leaf.new(f"s{len(_STAND_INS):06d}"))
    return _STAND_INS


class _Reads(dict):
    """``atom -> slot`` of argument elements that also gives slots, after them, to the
    leaves a view reads itself (``extra``)."""

    def __init__(self, slots: dict, first: int) -> None:
        super().__init__(slots)
        self.first, self.extra = first, []

    def read(self, leaf) -> int:
        self[leaf] = g = self.first + len(self.extra)
        self.extra.append(leaf)
        return g


class _NoPlan(Exception):
    """An element reads a leaf that is not an argument element (in a view on stand-ins), or
    the elements' definitions are too many to walk (:data:`WALK_LIMIT`)."""


class _Plain:
    """An argument seen as regular (the structure of the template on plain arguments); other
    facts are the node's."""

    __slots__ = ("node", "regular", "folds")

    def __init__(self, node) -> None:
        self.node, self.regular, self.folds = node, True, None

    def __getattr__(self, name: str):
        return getattr(self.node, name)


class ViewPlan:
    """How to evaluate a small node's element view over its arguments' values.

    ``template``: numpy's value of the node stands where no group or constant is;
    ``groups``: ``(places, run, slots)``, a program ``run`` of one element evaluated for the
    flat ``places`` of the result (None: the element is its one input), its inputs read at
    ``slots``, ``(part, index)`` pairs into the flat values of the arguments ``args`` and,
    after them, the bound values of ``leaves`` (those the view reads itself: a product
    folded into a select reads the select's condition), or, part -1 when ``mixed``, all of
    them joined; ``at``/``to``: the places of constant elements and their values; ``folds``,
    ``regular``, ``fid``: the result node's facts."""

    __slots__ = ("template", "groups", "mixed", "at", "to", "args", "leaves", "folds",
                 "regular", "fid")

    def __init__(self, template, groups, mixed, at, to, args, leaves, folds, regular,
                 fid) -> None:
        self.template, self.groups, self.mixed, self.at, self.to = \
            template, groups, mixed, at, to
        self.args, self.leaves = args, leaves
        self.folds, self.regular, self.fid = folds, regular, fid

    def evaluate(self, value, values: list, shape: tuple, dtype) -> np.ndarray | None:
        """The view's values: ``value`` (numpy's, or None when not :attr:`template`) with
        the other elements put in place; None when a leaf the view reads has no value."""
        if self.leaves:
            bound = [leaf.bound_value() for leaf in self.leaves]
            if any(b is None for b in bound):
                return None
        if not self.template:
            out = np.empty(shape, dtype=dtype)
        elif value.base is not None or not (value.flags.writeable and
                                            value.flags.c_contiguous):
            out = np.array(value, dtype=dtype, order="C")
        else:  # (a fresh array of the evaluator's: written in place)
            out = value
        flat = out.reshape(-1)
        if self.groups:
            parts = [np.asarray(values[i]).reshape(-1) for i in self.args]
            if self.leaves:
                parts.append(np.array(bound, dtype=dtype))
            if self.mixed:
                parts.append(np.concatenate(parts))
            for places, run, slots in self.groups:
                ins = [parts[k][index] for k, index in slots]
                flat[places] = ins[0] if run is None else run(*ins)[0]
        if self.at is not None:
            flat[self.at] = self.to
        return out


def _token(atom, slot_of: dict, inputs: list, seen: dict, nodes: dict):
    """A hashable description of ``atom``'s definitions with its argument elements numbered
    in order of first appearance (``inputs`` collects their slots): equal tokens, the same
    program up to which elements it reads."""
    g = slot_of.get(atom) if G.is_symbolic(atom) else None
    if g is not None:
        k = seen.get(atom)
        if k is None:
            k = seen[atom] = len(inputs)
            inputs.append(g)
        return ("i", k)
    if isinstance(atom, G.Leaf):
        g = slot_of.read(atom) if isinstance(slot_of, _Reads) else None
        if g is None:
            raise _NoPlan
        k = seen[atom] = len(inputs)
        inputs.append(g)
        return ("i", k)
    if isinstance(atom, G.Node):
        k = nodes.get(atom)
        if k is not None:
            return ("n", k)
        fwd = atom.forward
        body = ("f", _token(fwd, slot_of, inputs, seen, nodes)) if fwd is not None else \
            _token(atom.definition, slot_of, inputs, seen, nodes)
        nodes[atom] = len(nodes)
        return ("d", body)
    if not atom.args:
        return ("c", type(atom), atom)  # (SymPy finds 2 == 2.0: the type tells them apart)
    return (atom.func, tuple([_token(a, slot_of, inputs, seen, nodes) for a in atom.args]))


def _sorted(view: np.ndarray, reference, slot_of: dict, atom_of: list, args: tuple,
            sizes: list, template: bool, shape: tuple) -> ViewPlan:
    """The :class:`ViewPlan` of the element view ``view`` whose argument elements are the
    keys of ``slot_of`` (``atom_of[slot]`` the atom; the arguments ``args`` hold ``sizes``
    of them in turn), elements equal to ``reference``'s being numpy's when ``template``."""
    flat = view.reshape(-1)
    ref = reference.reshape(-1) if reference is not None else None
    at, to, folded = [], [], []
    by_shape: dict = {}
    selects, walked = False, 0
    for p, atom in enumerate(flat):
        if ref is not None and atom is ref[p]:
            continue
        if G.is_const(atom):
            at.append(p)
            to.append(G.const_value(atom))
            folded.append(atom)
            continue
        selects = selects or G.absorbs_products(atom)
        inputs: list = []
        nodes: dict = {}
        key = _token(atom, slot_of, inputs, {}, nodes)
        walked += len(nodes)
        if walked > WALK_LIMIT:  # (definitions shared by elements are walked for each)
            raise _NoPlan
        group = by_shape.get(key)
        if group is None:
            group = by_shape[key] = (atom, [], [])
        group[1].append(p)
        group[2].append(inputs)
    leaves = tuple(slot_of.extra) if isinstance(slot_of, _Reads) else ()
    atom_of = list(atom_of) + list(leaves) if leaves else atom_of
    starts = np.cumsum([0] + list(sizes) + [len(leaves)])
    groups, mixed = [], False
    for atom, places, reads in by_shape.values():
        first = reads[0]
        run = None if atom in slot_of else E.program([atom], [atom_of[g] for g in first],
                                                     quiet=False)
        slots = []
        for read in zip(*reads):  # each input of the program: its part and places there
            read = np.array(read, dtype=np.intp)
            part = np.searchsorted(starts, read, side="right") - 1
            if (part == part[0]).all():
                slots.append((int(part[0]), read - starts[part[0]]))
            else:  # (members reading different arguments: the parts joined, last)
                slots.append((-1, read))
                mixed = True
        groups.append((np.array(places, dtype=np.intp), run, slots))
    mask = np.zeros(shape, dtype=bool)
    folds = None
    if at:
        mask.reshape(-1)[at] = True
        atoms = np.empty(shape, dtype=object)
        atoms.reshape(-1)[at] = folded
        mask.flags.writeable = atoms.flags.writeable = False
        folds = (mask, atoms)
    regular = template and folds is None and not selects
    if not template or selects:
        folds = None  # (facts of a node regular except there: not this one)
    return ViewPlan(template, groups, mixed, np.array(at, dtype=np.intp) if at else None,
                    np.array(to) if at else None, args, leaves, folds, regular,
                    N.settled_fold_id(shape, folds, regular))


def view_plan(prim, params: dict, args: list, shape: tuple, memo: dict) -> ViewPlan | None:
    """The :class:`ViewPlan` of ``prim(params)(args)`` over stand-ins for arguments that are
    regular except at folded constants, kept in ``memo`` (the binder's dict for applications
    of one signature) by the arguments' fold ids; None when an argument has no fold view
    (the node's own view is planned: :func:`node_plan`)."""
    fids = []
    for a in args:
        if a.uniform is not None:
            fids.append(0)
            continue
        if a.dtype.kind != "f" or a.size > STAND_IN_LIMIT:
            return None
        fid = a.fold_id()
        if fid is None:
            return None
        fids.append(fid)
    key = ("view",) + tuple(fids)
    plan = memo.get(key, memo)
    if plan is not memo:
        return plan
    if len(memo) > MEMO_PATTERNS:
        memo.clear()
    plan = memo[key] = _plan_on_stand_ins(prim, params, args, shape, memo)
    return plan


def _plan_on_stand_ins(prim, params: dict, args: list, shape: tuple,
                       memo: dict) -> ViewPlan | None:
    """The plan over stand-ins; the view on plain stand-ins, which depends only on the
    signature, is kept in ``memo`` for every fold pattern."""
    first: dict = {}
    same = [first.setdefault(id(a), i) for i, a in enumerate(args)]
    kept = tuple(i for i, a in enumerate(args) if same[i] == i and a.uniform is None)
    total = sum(args[i].size for i in kept)
    if total > STAND_IN_LIMIT:
        return None
    atom_of = _stand_ins(total)[:total]
    views, plains, facts = [], [], []
    base = 0
    for i, a in enumerate(args):
        if same[i] != i:  # an argument given twice: the same stand-ins
            views.append(views[same[i]])
            plains.append(plains[same[i]])
            facts.append(facts[same[i]])
        elif a.uniform is not None:  # one constant: itself, as the template folds it
            one = np.empty((), dtype=object)
            one[()] = a.uniform
            views.append(np.broadcast_to(one, a.shape))
            plains.append(views[-1])
            facts.append(a)
        else:
            plain = np.empty(a.size, dtype=object)
            plain[:] = atom_of[base:base + a.size]
            plain = plain.reshape(a.shape)
            base += a.size
            mask, folded = a.fold_view()
            atoms = plain
            if mask.any():
                atoms = plain.copy()
                atoms[mask] = folded[mask]
            views.append(atoms)
            plains.append(plain)
            facts.append(_Plain(a))
    slot_of = {leaf: g for g, leaf in enumerate(atom_of)}
    try:
        if "plain" not in memo:
            template = bool(prim.structure(facts, params, shape)[0])
            memo["plain"] = np.asarray(prim.build(plains, params), dtype=object) \
                if template else None
        reference = memo["plain"]
        view = np.asarray(prim.build(views, params), dtype=object)
        return _sorted(view, reference, slot_of, atom_of, kept, [args[i].size for i in kept],
                       reference is not None, shape)
    except (_NoPlan, RecursionError, SymtapeError):
        return None


#: ``node -> ViewPlan`` of small nodes planned on their own views (dropped with the node),
#: or ``_ONCE`` for a node evaluated once so far.
_NODE_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ONCE = object()


def in_node_order(node, args: list, values: list) -> list:
    """``values`` of the arguments ``args`` (nodes, in the order they were applied) in the
    order of ``node.inputs`` (a commutative op's node lists them in its own order), what
    :func:`node_plan`'s plan reads.

    >>> import symtape as st
    >>> c, x = st.constant([1.0, 0.0]), st.Variable([3.0, 4.0])
    >>> node = (c * x)._node  # (a product's node lists its inputs in its own order)
    >>> order = in_node_order(node, [c._node, x._node], ["c", "x"])
    >>> order == ["c" if n is c._node else "x" for n in node.inputs]
    True
    """
    if all(a is b for a, b in zip(args, node.inputs)):
        return values
    at = {id(a): v for a, v in zip(args, values)}
    return [at[id(a)] for a in node.inputs]


def node_plan(node) -> ViewPlan | None:
    """The :class:`ViewPlan` of ``node``'s own element view over its arguments' elements
    (kept with the node; it reads the values of ``node.inputs``, see :func:`in_node_order`,
    and of the leaves its view reads itself); None when the node is evaluated for the first
    time (a node made for one evaluation -- a fresh constant's
    products, a sweep's cotangents -- is cheaper evaluated through its definitions once:
    evaluate it with :func:`symtape.element.evaluate.evaluate_from`; a loop that evaluates it
    again gets its plan)."""
    plan = _NODE_PLANS.get(node, _NODE_PLANS)
    if plan is not _NODE_PLANS:
        if plan is not _ONCE:
            return plan
    else:
        _NODE_PLANS[node] = _ONCE
        return None
    slot_of: dict = {}
    atom_of: list = []
    args = []
    for i, a in enumerate(node.inputs):
        if a.dtype.kind != "f":
            continue
        args.append(i)
        for atom in a.atoms().flat:
            g = len(atom_of)
            atom_of.append(atom)
            if G.is_symbolic(atom):
                slot_of.setdefault(atom, g)
    try:
        plan = _sorted(node.atoms(), None, _Reads(slot_of, len(atom_of)), atom_of,
                       tuple(args), [node.inputs[i].size for i in args], False, node.shape)
    except (_NoPlan, RecursionError):
        plan = None
    _NODE_PLANS[node] = plan
    return plan

"""Tensor-level nodes: one per op application over whole tensors, with the element view on
demand.

A :class:`Node` is ``prim(params)(inputs)`` with a shape and a dtype (or a leaf, or a
constant). Op nodes are hash-consed in a weak table, so the same op applied to the same nodes
is the same node (the tensor-level counterpart of the element DAG's sharing) and nodes nobody
refers to are released. A node's *element view* -- the object array of graph atoms that
``graph.py`` defines -- is built only when asked for (:meth:`Node.atoms`: formulas, code
generation, exact settling of small tensors) and memoised.

Two facts computed at the tensor level let eager evaluation skip the element view:
- ``uniform``: the one constant atom every element is (a scalar constant, a folded template);
- ``regular``: every element is a distinct symbolic atom that is neither a constant nor a
  select with a zero branch, so the element builders fold nothing numpy does not already do
  (a constant whose values are all finite and nonzero counts as regular too: ``c * x`` and
  ``c + x`` fold nothing either);
- ``constant``: every element is a constant atom (the op's arguments are all constants), whose
  folding in IEEE double arithmetic is numpy's (constants have no signed zero);
- ``folds``: for a small node that is regular except at a few elements that are constants
  (``x * c`` where the constant ``c`` holds zeros), those elements' mask and atoms.
"""

from __future__ import annotations

import itertools
import math
import weakref

import numpy as np

from symtape.base.errors import LoweringError
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["Node", "leaf", "const", "lazy", "apply", "params_key", "ancestry",
           "constant_value", "view_refused", "ELEMENT_LIMIT"]

#: Nodes whose element view (with the unbuilt part of their ancestry) has at most this many
#: atoms settle eagerly to the element DAG's exact folding; larger ones follow the template
#: level (the loop-nest semantics of compiled code for large tensors).
ELEMENT_LIMIT = 256

#: ``(prim, params key, input ids) -> weakref to the node``; an entry leaves with its node.
_TABLE: dict = {}


class _Ref(weakref.ref):
    """A table entry's weak reference, knowing its key (the entry leaves with its node)."""

    __slots__ = ("key",)


def _forget(ref: _Ref) -> None:
    if _TABLE.get(ref.key) is ref:
        del _TABLE[ref.key]


class Node:
    """A tensor-level node; see the module docstring."""

    made = 0  # nodes made so far (a counter for benchmarks)
    # facts most nodes keep at their defaults (class attributes: a node sets only its own)
    uniform = None
    regular = False
    label = None  # a leaf's or named constant's name, for tensor notation
    folds = None  # (mask, atoms) of constant elements of an otherwise regular node
    leaf_store = None
    _ukey = None
    _atoms = None
    _make = None
    _exact = None  # a constant's exact elements
    _fkey = None
    _fid = None  # fold_id(fold_key()), once asked (or given by the op that settled it)
    _facts = None
    _cost = None  # an upper bound of the unbuilt view's atoms (see small)
    _zero = None  # is_zero, once asked
    seeds = 1  # > 1: computed for that many one-hot seeds at once (a batched sweep)

    def __init__(self, kind: str, prim, params: dict, inputs: tuple, shape: tuple,
                 dtype) -> None:
        self.kind = kind  # 'op', 'leaf', 'const' or 'view' (element view given or made)
        Node.made += 1
        self.prim = prim
        self.params = params
        self.inputs = inputs
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.constant = kind == "const"

    @property
    def facts(self) -> tuple:
        """``(shape, dtype, ukey, regular, constant)``: what an application's plan depends on
        (memoised; :meth:`settle` forgets it when the facts change)."""
        facts = self._facts
        if facts is None:
            facts = self._facts = (self.shape, self.dtype, self.ukey, self.regular,
                                   self.constant)
        return facts

    def settle(self, regular: bool, constant: bool | None = None, folds=None,
               fid=None) -> None:
        """Set what evaluation found out: ``regular``, ``constant`` (None: unchanged),
        ``folds`` and their :meth:`fold_id` ``fid`` (None: found when asked)."""
        if regular == self.regular and folds is self.folds and fid == self._fid and \
                constant in (None, self.constant):
            return  # settled as before: the memoised facts and keys stay
        self.regular = regular
        if constant is not None:
            self.constant = constant
        self.folds = folds
        self._fkey = None
        self._fid = fid
        self._facts = None

    def __repr__(self) -> str:
        what = getattr(self.prim, "name", None) or self.kind
        return f"<node {what} {self.shape} {self.dtype.name}>"

    @property
    def ukey(self):
        """A cheap hashable key of ``uniform`` (SymPy numbers hash slowly): its type and
        value, or None."""
        if self._ukey is None and self.uniform is not None:
            u = self.uniform
            value = G.const_value(u) if G.is_const(u) else u
            self._ukey = (type(u).__name__, float(value).hex() if isinstance(value, float)
                          else value)
        return self._ukey

    @property
    def built(self) -> bool:
        return self._atoms is not None

    def view_cost_within(self, limit: int) -> bool:
        """Whether building the element view (with its unbuilt ancestry) takes at most
        ``limit`` atoms (the walk stops as soon as it knows)."""
        total = 0
        seen, stack = {id(self)}, [self]
        while stack:
            node = stack.pop()
            if node._atoms is not None:
                continue
            total += node.size if node.kind != "op" or not node.prim.sized_view else \
                node.prim.view_size(node)  # (inline: every eager node walks here)
            if total > limit:
                return False
            for n in node.inputs:
                if id(n) not in seen:
                    seen.add(id(n))
                    stack.append(n)
        return True

    def fold_view(self):
        """``(mask, atoms)``: the constant elements of a node that is regular elsewhere --
        for a constant, its zero and non-finite elements (where the builders fold); None
        when the node has symbolic elements that fold further (use the element view)."""
        if self.kind == "const" and self._exact is not None and self.dtype.kind == "f":
            if self.folds is None:
                self.folds = _constant_folds(np.asarray(self._exact))
            return self.folds
        if self.regular:
            return np.zeros(self.shape, dtype=bool), None
        return self.folds

    def fold_key(self):
        """A hashable key of :meth:`fold_view` (equal keys, equal views), or None when the
        node has no fold view. Computed once per node."""
        if self._fkey is None:
            view = self.fold_view()
            if view is None:
                return None
            self._fkey = fold_key_of(self.shape, view)
        return self._fkey

    def fold_id(self):
        """:meth:`fold_key` as an interned int (see :func:`fold_id`), or None."""
        if self._fid is None:
            self._fid = fold_id(self.fold_key())
        return self._fid

    def small(self) -> bool:
        """Whether the element view is cheap enough to settle values exactly."""
        if self._cost is None:
            _bound_costs(self)
        return self._cost <= ELEMENT_LIMIT or self.view_cost_within(ELEMENT_LIMIT)

    def atoms(self) -> np.ndarray:
        """The element view (built once, ancestors first, without recursion)."""
        if self._atoms is None:
            for node in _unbuilt(self):
                if node._atoms is None:  # (a loop's view, built first, builds shared ones)
                    node._build()
        return self._atoms

    def _build(self) -> None:
        if self._make is not None:
            atoms = self._make()
        else:
            atoms = self.prim.build([n._atoms for n in self.inputs], self.params)
        if atoms.shape != self.shape:
            raise AssertionError(f"{self!r}: built shape {atoms.shape}")
        self._atoms = atoms
        self._make = None

    def is_zero(self) -> bool:
        """True when every element is the constant 0 (read off the element view only when it
        is small; memoised: a node's elements never change)."""
        if self.uniform is not None:
            return G.is_const(self.uniform) and G.is_zero(self.uniform)
        if self.regular:
            return False
        if self._zero is None:
            if not self.small():  # may become small once its ancestors are built: not kept
                return False
            try:
                self._zero = self._all_zero()
            except LoweringError:  # an ancestor has no element view (a loop form only)
                return False
        return self._zero

    def _all_zero(self) -> bool:
        view = self.fold_view()
        if view is not None:  # regular except at its folds
            mask, atoms = view
            return bool(mask.all()) and all(G.is_zero(a) for a in atoms.flat)
        return all(G.is_const(a) and G.is_zero(a) for a in self.atoms().flat)

    def unbound(self, limit: int = 8) -> list[str]:
        """Names of the leaves this node depends on that have no value: at most ``limit``,
        then ``'...'``; a large leaf whose elements are not built yet is named by its shape
        (not built to be named)."""
        names: dict = {}
        for node in ancestry(self):
            if len(names) > limit:
                break
            if node.leaf_store is not None and node.leaf_store.value is None:
                if node._atoms is None and node.size > limit:
                    names[f"a {node.dtype.name} leaf of shape {node.shape}"] = None
                    continue
                for a in node.atoms().flat:
                    names[a.name] = None
        out = list(names)
        return out[:limit] + (["..."] if len(out) > limit else [])


def _constant_folds(exact: np.ndarray) -> tuple:
    """``(mask, atoms)`` of a constant's zero and non-finite elements (exact numbers or
    SymPy numbers); each distinct number becomes an atom once."""
    try:
        values = exact.astype(np.float64)
    except (TypeError, ValueError):  # SymPy numbers float() refuses (zoo)
        values = np.array([G.const_value(a) if isinstance(a, sp.Basic) else float(a)
                           for a in exact.reshape(-1)]).reshape(exact.shape)
    mask = ~(np.isfinite(values) & (values != 0))
    atoms = np.empty(exact.shape, dtype=object)
    if exact.dtype != object:  # one dtype: group the folded elements by their bits
        picked = exact[mask]
        bits = picked.view(f"i{picked.itemsize}") if picked.dtype.kind == "f" else picked
        _, first, inverse = np.unique(bits, return_index=True, return_inverse=True)
        made = np.empty(len(first), dtype=object)
        for k, i in enumerate(first):
            made[k] = G.number(picked[i].item())
        atoms[mask] = made[inverse.reshape(-1)]
        return mask, atoms
    made: dict = {}
    for idx in map(tuple, np.argwhere(mask)):
        e = exact[idx]
        key = (type(e), float(e).hex() if isinstance(e, float) else e)
        if key not in made:
            made[key] = e if isinstance(e, sp.Basic) else G.number(e)
        atoms[idx] = made[key]
    return mask, atoms


def _bound_costs(root: Node) -> None:
    """Set ``_cost`` of ``root`` and of the unbuilt ancestors without one: the node's size
    plus its unbuilt inputs' costs (capped above ``ELEMENT_LIMIT``), an upper bound of the
    atoms its element view takes -- shared ancestors counted once per path, building
    ancestors later only lowers the true count -- so a small bound settles ``small()``
    without walking the ancestry."""
    stack = [root]
    while stack:
        node = stack[-1]
        todo = [n for n in node.inputs if n._atoms is None and n._cost is None]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        cost = node.size if node.kind != "op" or not node.prim.sized_view else \
            node.prim.view_size(node)  # (_view_size, inline: every eager node)
        for n in node.inputs:
            if n._atoms is None:
                cost += n._cost
        node._cost = min(cost, ELEMENT_LIMIT + 1)


def fold_key_of(shape: tuple, view: tuple):
    """The key of a fold view ``(mask, atoms)`` of a node of ``shape`` (see
    :meth:`Node.fold_key`)."""
    mask, atoms = view
    return ("r",) if atoms is None or not mask.any() else (
        shape, mask.tobytes(), tuple((type(a), a) for a in atoms[mask]))


def settled_fold_id(shape: tuple, folds, regular: bool):
    """The :meth:`Node.fold_id` of an op node settled with ``folds`` and ``regular`` (what
    its :meth:`Node.fold_view` then gives).

    >>> settled_fold_id((2,), None, True) == fold_id(("r",)), settled_fold_id((2,), None, False)
    (True, None)
    """
    if regular:
        return fold_id(("r",))
    return fold_id(fold_key_of(tuple(shape), folds)) if folds is not None else None


#: ``fold key -> int``: keys interned, so plans keyed by their arguments' fold views hash
#: ints. Ids are never reused (a cleared table gives equal keys new ids: a cache miss).
_FOLD_IDS: dict = {}
_FOLD_IDS_MAX = 4096
_fold_serial = itertools.count(1)


def evict_oldest(table: dict) -> None:
    """Drop the oldest entry of a bounded cache (insertion order); another thread emptying
    or changing it meanwhile is no error.

    >>> t = {"a": 1, "b": 2}
    >>> evict_oldest(t); t
    {'b': 2}
    """
    try:
        table.pop(next(iter(table)), None)
    except (StopIteration, RuntimeError):
        return


def fold_id(key):
    """The int standing for the fold key ``key`` (None stays None).

    >>> fold_id(("r",)) == fold_id(("r",))
    True
    """
    if key is None:
        return None
    fid = _FOLD_IDS.get(key)
    if fid is None:
        if len(_FOLD_IDS) >= _FOLD_IDS_MAX:
            _FOLD_IDS.clear()
        fid = _FOLD_IDS[key] = next(_fold_serial)
    return fid


def view_refused(roots) -> str | None:
    """Why a node under ``roots`` whose element view is not built has none to build (its
    op's ``view_refused``: a loop of many steps is never unrolled), or None."""
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if id(node) in seen or node.built:
            continue
        seen.add(id(node))
        if node.kind == "op":
            why = node.prim.view_refused(node)
            if why is not None:
                return why
        stack.extend(node.inputs)
    return None


def ancestry(root: Node, through=lambda node: True) -> list[Node]:
    """``root`` and the nodes it depends on through nodes where ``through(node)``, inputs
    before users."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((n, False) for n in node.inputs if through(n) and id(n) not in seen)
    return order


def constant_value(node: Node, values: dict) -> np.ndarray | None:
    """The value of a constant, or of a node computed by an op from the nodes whose values
    ``values`` holds (by ``id``), by the op's numeric rule (IEEE results, no warnings);
    None for any other node.

    >>> import symtape as st
    >>> c = st.constant([1.0, 4.0])._node
    >>> y = st.sqrt(st.constant([1.0, 4.0]))._node
    >>> v = {id(a): constant_value(a, {}) for a in y.inputs}
    >>> constant_value(y, v).tolist(), constant_value(c, {}).tolist()
    ([1.0, 2.0], [1.0, 4.0])
    """
    if node.kind == "const":
        try:
            return np.asarray(np.asarray(node._exact), dtype=node.dtype)
        except (TypeError, ValueError):
            return None
    if node.kind != "op" or not node.constant or any(id(a) not in values for a in node.inputs):
        return None
    with np.errstate(all="ignore"):
        value = np.asarray(node.prim.evaluator(node.inputs, node.params)(
            [values[id(a)] for a in node.inputs]))
    return np.broadcast_to(value, node.shape).astype(node.dtype, copy=False)


def ancestries(roots) -> list[Node]:
    """The nodes under any of ``roots``, each once, inputs before users (the roots' own
    orders, one after another)."""
    seen: dict = {}
    for root in roots:
        for node in ancestry(root):
            seen.setdefault(id(node), node)
    return list(seen.values())


def _unbuilt(root: Node) -> list[Node]:
    return ancestry(root, lambda node: node._atoms is None)


# --------------------------------------------------------------------------------------------
# Constructors
# --------------------------------------------------------------------------------------------


def leaf(shape: tuple, dtype, store, make) -> Node:
    """A leaf over ``store`` (whose ``value`` is read by its atoms); ``make()`` builds them."""
    node = Node("leaf", None, {}, (), shape, dtype)
    node.leaf_store = store
    node._make = make
    node.regular = node.size > 0
    return node


def const(exact: np.ndarray, dtype, make, uniform=None) -> Node:
    """A constant with exact elements ``exact`` (numbers or an object array of SymPy numbers);
    ``make()`` builds its atoms; ``uniform`` is the one atom all elements are, when known."""
    node = Node("const", None, {}, (), np.shape(exact), dtype)
    node._make = make
    node._exact = exact
    if uniform is None:
        uniform, node._ukey = _uniform(exact)
    node.uniform = uniform
    if node.uniform is None and node.dtype.kind == "f":
        values = np.asarray(exact, dtype=np.float64) if np.asarray(exact).dtype != object \
            else None
        node.regular = values is not None and bool(np.all(np.isfinite(values) & (values != 0)))
    return node


def lazy(shape: tuple, dtype, inputs: tuple, make) -> Node:
    """A node whose element view ``make()`` builds from the views of ``inputs`` when asked."""
    node = Node("view", None, {}, inputs, shape, dtype)
    node._make = make
    return node


def _uniform(exact) -> tuple:
    """``(atom, key)`` when every element of ``exact`` is one number (key: None when only
    the atom knows), else ``(None, None)``."""
    arr = np.asarray(exact)
    if arr.size == 0:
        return None, None
    if arr.size == 1 and arr.dtype.kind == "f":  # (a compiled function's scalar result)
        value = float(arr.reshape(-1)[0])
        atom = G.number(value)
        return atom, (type(atom).__name__, value.hex())
    flat = arr.reshape(-1)
    first = flat[0]
    if arr.dtype.kind in "iub" and flat[-1] != first or arr.dtype.kind == "f" and not (
            flat[-1] == first or np.isnan(flat[-1]) and np.isnan(first)):
        return None, None  # most arrays differ at once: no pass over all of them
    if arr.dtype == object:
        same = all(b == first for b in arr.reshape(-1))
    elif arr.dtype.kind == "f":
        same = bool(np.all((arr == first) | (np.isnan(arr) & np.isnan(first))))
    else:
        same = bool(np.all(arr == first))
    if not same:
        return None, None
    if isinstance(first, sp.Basic):
        return first, None
    value = first.item() if hasattr(first, "item") else first
    atom = G.number(value)
    key = float(value).hex() if isinstance(value, float) else value
    return atom, (type(atom).__name__, key)


def params_key(params: dict) -> tuple:
    """A hashable stand-in for an op's parameters, or raise TypeError."""
    if not params:
        return ()
    return tuple(sorted([(k, _key(v)) for k, v in params.items()]))


_PLAIN = (int, bool, str, type(None))


def _key(value):
    """A hashable stand-in for a parameter value, or raise TypeError."""
    if type(value) in _PLAIN:
        return (type(value).__name__, value)
    if isinstance(value, np.ndarray):
        if value.size > 64:
            raise TypeError("large array parameter")
        return ("nd", value.dtype.str, value.shape, value.tobytes())
    if type(value) is tuple and all(type(v) is int for v in value):  # axes, shapes
        return ("ints",) + value
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_key(v) for v in value)
    if isinstance(value, slice):
        return ("slice", _key(value.start), _key(value.stop), _key(value.step))
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, (float, np.floating)):
        return (type(value).__name__, float(value).hex())  # -0.0 and nan stay apart
    hash(value)
    return (type(value).__name__, value)


def apply(prim, params: dict, inputs: tuple, shape: tuple, dtype, commutative: bool,
          pkey=None) -> Node:
    """The node of ``prim(params)(inputs)``: an existing one when the same op was applied to
    the same nodes (argument order ignored for commutative ops), else a new one. ``pkey`` is
    :func:`params_key` of ``params`` when known (None: computed here, or not hashable)."""
    ids = tuple(map(id, inputs))
    if commutative and len(ids) > 1:
        ids = tuple(sorted(ids))
    if pkey is None:
        try:
            pkey = params_key(params)
        except TypeError:
            pkey = None
    key = (prim, pkey, ids) if pkey is not None else None
    if key is not None:
        ref = _TABLE.get(key)
        node = ref() if ref is not None else None
        if node is not None and node.shape == tuple(shape) and node.dtype == dtype:
            return node
    node = Node("op", prim, params, tuple(inputs), shape, dtype)
    if key is not None:
        ref = _TABLE[key] = _Ref(node, _forget)
        ref.key = key
    return node


def created() -> int:
    """How many nodes have been made so far (a counter for benchmarks).

    >>> created() >= 0
    True
    """
    return Node.made


def table_size() -> int:
    """The number of live hash-consed op nodes."""
    return len(_TABLE)

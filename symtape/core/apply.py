"""The application of primitives to tensors, and eager values.

Applying a primitive (:func:`apply`, what :meth:`Primitive.bind` calls) converts the
arguments to tensors (``tensor.py``), checks them, makes the result's node, evaluates it
with numpy on whole arrays when every argument has a value -- a small node that folds
beyond the template is its element DAG evaluated on its arguments' values, so it agrees with
formulas and compiled code -- and records it on the active tapes.
The op table is a level above: its primitives are applied by name, and what else the eager
path needs from it the table lends when it is imported (:func:`lend`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from symtape.element.numeric import ERRSTATE, IGNORE, quiet
from symtape.core import node as N
from symtape.base import recording
from symtape.base.errors import DTypeError, InvalidArgumentError, SymtapeError
from symtape.core.primitive import Aval, Primitive, Zero
from symtape.core import view_values as V
from symtape.core.tensor import (
    Tensor, const_node, constant, read_only, read_only_copy, read_operand, table_op,
)
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
E = LazyModule("E", globals(), "symtape.element.evaluate")
G = LazyModule("G", globals(), "symtape.element.graph")


# --------------------------------------------------------------------------------------------
# What the op table lends the core
# --------------------------------------------------------------------------------------------
# Besides its primitives (see ``tensor.table_op``), the eager path needs two things of the
# op table, which the table gives when ``symtape.ops`` is imported.


#: What :func:`lend` was given, by name.
_LENT: dict = {}


def lend(elementwise: type, recipe_atom: Callable[..., tuple]) -> None:
    """Take from the op table what the eager path needs beyond its primitives (``symtape.ops``
    calls this when it is imported): ``elementwise``, the class of template ops, whose
    results fuse into zero-branched selects (``fuse``, ``fusion``, ``makes_select``), and
    ``recipe_atom``, ``(recipe, pattern) -> (atom, stand-ins)`` of such a fused select (its
    arguments one stand-in per value, :func:`sharing`)."""
    _LENT.update(elementwise=elementwise, recipe_atom=recipe_atom)


def lent(name: str) -> type | Callable:
    """What the op table lent the core as ``name`` (see :func:`lend`).

    >>> lent("elementwise").__name__
    'Elementwise'
    """
    hook = _LENT.get(name)
    if hook is None:
        raise SymtapeError(f"the op table has not lent the core {name!r}: it does when "
                           "symtape.ops is imported (import symtape first)")
    return hook

#: How many times an eager assignment changed a leaf's value (:func:`assigned`). A tensor
#: whose value was computed from leaves ``_epoch`` is the count then; while the count has not
#: moved, the leaves still hold the values its value was computed from.
_CLOCK = 0


def assigned() -> int:
    """Note that a leaf's value changed (``Variable.assign*``); returns the new count.

    Eager values are snapshots: the element DAG names a variable's elements by one leaf
    whatever its value, so an application whose arguments were computed before an
    assignment (``_epoch`` behind the count) may neither read leaves through the DAG nor
    take the DAG's folds across values of different times (``w_before - w_after`` is not
    0): it is computed with plain IEEE arithmetic on the arguments' values.

    >>> import symtape as st
    >>> w = st.Variable(1.0)
    >>> a = w * 2.0
    >>> _ = w.assign(-5.0)
    >>> float(a - w * 2.0)
    12.0
    """
    global _CLOCK
    _CLOCK += 1
    return _CLOCK


def clock() -> int:
    """The count of :func:`assigned` (the ``_epoch`` of a value computed now)."""
    return _CLOCK


#: Constants made for Python numbers mixed with tensors, by (type, value, dtype): a training
#: loop's ``lr * g`` and ``x * 2.0`` convert each number once. These tensors never leave
#: :func:`apply` except as recorded inputs, so nothing watches or promotes them.
_SCALARS: dict = {}
_SCALARS_MAX = 1024


def _scalar(a, dtype) -> Tensor:
    # floats by value, zeros by sign (0.0 == -0.0), nan never found again (nan != nan)
    key = (a if a else a.hex(), dtype) if type(a) is float else (type(a), a, dtype)
    hit = _SCALARS.get(key)
    if hit is None:
        if len(_SCALARS) >= _SCALARS_MAX:
            _SCALARS.clear()
        hit = _SCALARS[key] = (exact_constant(a, dtype) if type(a) is int and dtype.kind == "f"
                               else constant(a, dtype=dtype))
    return hit


#: Constants made for small numpy arrays mixed with tensors, by dtype, shape and bytes: a
#: training loop's data batch converts once and keeps one node, so plans are reused. A
#: conversion given out is a new tensor over that node (a tensor's identity is its own); an
#: argument converted inside an application (``shared``) is the one cached tensor, as
#: numbers are (see :data:`_SCALARS`).
_ARRAYS: dict = {}
_ARRAYS_MAX = 256
_ARRAY_SIZE = 256


def _array_constant(a: np.ndarray, dtype, convert, exact: bool = False,
                    shared: bool = False) -> Tensor:
    if a.size > _ARRAY_SIZE or a.dtype.kind not in "fiub" or a.dtype.hasobject:
        return convert()
    key = (a.dtype, a.shape, a.tobytes(), dtype, exact)
    hit = _ARRAYS.get(key)
    if hit is None:
        if len(_ARRAYS) >= _ARRAYS_MAX:
            _ARRAYS.clear()
        hit = _ARRAYS[key] = convert()
    return hit if shared else Tensor(hit._node, hit._value_, hit._dtype, name=hit._name)


def _convert_args(prim: Primitive, args) -> list[Tensor]:
    """Tensors for ``args``: non-tensors take the dtype of the op's tensor arguments."""
    out = []
    for a in args:
        if type(a) is Tensor:
            out.append(a)
        elif isinstance(a, Tensor):
            out.append(read_operand(a))
        else:
            return _convert_rest(prim, args, out)
    return out


def _convert_rest(prim: Primitive, args, out: list) -> list[Tensor]:
    """:func:`_convert_args` from the first argument that is not a tensor on."""
    tdtype = None
    for i, a in enumerate(args):
        if isinstance(a, Tensor) and prim.role(i) == "T":
            tdtype = a.dtype
            break
    floating = tdtype is not None and tdtype.kind == "f"
    for i in range(len(out), len(args)):
        a = args[i]
        if type(a) is float and floating and prim.role(i) == "T":  # lr * g, x * 2.0
            out.append(_scalar(a, tdtype))
            continue
        if isinstance(a, Tensor):
            out.append(read_operand(a))
            continue
        role = prim.role(i)
        if type(a) is np.ndarray and role == "T" and floating and \
                a.dtype.kind in "fiub":  # data mixed with tensors
            out.append(_array_constant(a, tdtype, lambda: constant(a, dtype=tdtype),
                                       shared=True))
            continue
        if isinstance(a, Zero):
            out.append(constant(np.zeros(a.shape, a.dtype)))
            continue
        if a is None:
            raise InvalidArgumentError(f"st.{prim.name}: argument {i} is None")
        dtype = np.dtype(bool) if role == "bool" else (tdtype if role == "T" else None)
        if type(a) in (float, int) and dtype is not None and dtype.kind in "fi":
            try:
                out.append(_scalar(a, dtype))
            except DTypeError as e:
                raise DTypeError(f"st.{prim.name}: argument {i}: {e}") from None
            continue
        if dtype is not None and dtype.kind == "f":
            kind = np.asarray(a).dtype.kind if not isinstance(a, (sp.Basic,)) else "f"
            if kind not in "fiub":
                raise DTypeError(f"st.{prim.name}: argument {i} of type {type(a).__name__} is "
                                 "not numeric")
            if kind in "iub" and not isinstance(a, (sp.Basic, np.ndarray)):
                out.append(exact_constant(a, dtype))
                continue
        try:
            if isinstance(a, np.ndarray):
                out.append(_array_constant(a, dtype, lambda: constant(a, dtype=dtype),
                                           shared=True))
            else:
                out.append(constant(a, dtype=dtype) if not isinstance(a, sp.Basic) else
                           _sympy_constant(a, dtype))
        except DTypeError as e:
            raise DTypeError(f"st.{prim.name}: argument {i}: {e}") from None
    return out


def exact_constant(a, dtype, cache: bool = False) -> Tensor:
    """A constant of ``dtype`` whose elements are the exact integers of ``a`` in formulas
    (Python ints mixed with float tensors; unit seeds of derivatives); ``cache``: a small
    one made again (a gradient's seed of ones) is a new tensor over the same node.

    >>> exact_constant([0, 1], "float64").formula()
    [0, 1]
    """
    arr = np.asarray(a)

    def make() -> Tensor:
        exact = arr.astype(np.int64) if arr.dtype.kind == "b" else arr  # ints stay exact
        return Tensor(const_node(exact, dtype), read_only(arr.astype(dtype)), dtype)

    return _array_constant(arr, np.dtype(dtype), make, exact=True) if cache else make()


def _sympy_constant(a: sp.Basic, dtype) -> Tensor:
    if not a.is_number:
        raise DTypeError(f"a SymPy expression with free symbols ({a}) is not a constant; use "
                         "st.symbol for symbols")
    dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    exact = np.empty((), dtype=object)
    exact[()] = a
    return Tensor(const_node(exact, dtype), read_only_copy(np.asarray(G.const_value(a),
                                                                  dtype=dtype)), dtype)


def _interpret(value: np.ndarray, atoms: np.ndarray, inputs) -> np.ndarray:
    """The value of a small node that folds beyond the template, the first time it is
    evaluated (see :func:`view_values.node_plan`): its element DAG evaluated on its inputs'
    values, one semantics with formulas and compiled code (``x * 0`` is 0,
    ``x - x`` is 0, a select's zero branch times ``1/x`` is 0, ``x + 0`` keeps the sign of a
    zero ``x``, ``-g*x/x**2`` is the ``-g/x`` it folded to). ``value`` (numpy's, of the same
    shape) stands only where an element needs a leaf without a value."""
    if atoms.size == 0:
        return value
    flat = np.array(value, copy=True).reshape(-1)
    got = E.evaluate_from(list(atoms.flat), _known_values(inputs), flat.dtype)
    for i, v in enumerate(got):
        if v is not None:
            flat[i] = v
    return flat.reshape(value.shape)


def _known_values(tensors) -> dict:
    """``atom -> value`` for the symbolic elements of tensors with values."""
    known: dict = {}
    for t in tensors:
        if t._value is None or t._dtype.kind != "f":
            continue
        for a, v in zip(t._atoms.flat, np.broadcast_to(t._value, t.shape).flat):
            if G.is_symbolic(a):
                known[a] = v
    return known


class _Plan:
    """What an application does, given its parameters and its arguments' shapes, dtypes and
    node facts: the checked result shape and dtype, normalised ``params``, how the template
    folds (``regular``, ``uniform``, ``alias``: see :meth:`Primitive.structure`), the numpy
    ``evaluator``, whether the result is a zero-branched select (``selects``) and the params
    key for hash-consing."""

    __slots__ = ("shape", "dtype", "params", "regular", "uniform", "alias", "evaluator",
                 "selects", "pkey", "fuses", "floating", "memo", "constant")

    def __init__(self, prim, aval, params, structure, evaluator, selects, pkey,
                 constant) -> None:
        self.shape, self.dtype, self.params = aval.shape, aval.dtype, params
        self.regular, self.uniform, self.alias = structure
        self.constant = constant  # every element a constant (all arguments are)
        self.evaluator, self.selects, self.pkey = evaluator, selects, pkey
        self.floating = aval.dtype.kind == "f"
        self.fuses = self.floating and isinstance(prim, lent("elementwise"))
        self.memo: dict = {}  # view plans for this signature, by fold pattern (view_values)


#: ``signature -> _Plan`` of recent applications: the checks and the folding of an op
#: depend only on its parameters and its arguments' shapes, dtypes and node facts, so a
#: training loop pays for them once.
_PLANS: dict = {}
_PLANS_MAX = 4096


def _signature(prim: Primitive, args: list, params: dict):
    facts = tuple([a.facts for a in args])
    if len(args) > 1 and len(set(map(id, args))) < len(args):  # an argument given twice
        first: dict = {}
        facts += tuple([first.setdefault(id(a), i) for i, a in enumerate(args)]),
    try:
        return prim, N.params_key(params) if params else (), facts
    except TypeError:
        return None


def _plan(prim: Primitive, params: dict, tensors: list, args: list) -> _Plan:
    """The :class:`_Plan` of an application (cached)."""
    sig = _signature(prim, args, params)
    hit = _PLANS.get(sig) if sig is not None else None
    if hit is not None:
        return hit
    aval, params = prim.prepare([Aval(t.shape, t.dtype) for t in tensors], dict(params))
    structure = prim.structure(args, params, aval.shape)
    evaluator = prim.evaluator(args, params)
    selects = (isinstance(prim, lent("elementwise")) and aval.dtype.kind == "f" and
               prim.makes_select(args))
    try:
        pkey = N.params_key(params)
    except TypeError:
        pkey = None
    constant = all(a.constant for a in args) and getattr(prim, "folds_constants", True)
    out = _Plan(prim, aval, params, structure, evaluator, selects, pkey, constant)
    if sig is not None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[sig] = out
    return out


def _result_node(prim: Primitive, plan: _Plan, args: list) -> N.Node:
    """The node of ``prim(params)(args)``, folded to an argument or a constant when the
    template says so."""
    if plan.alias is not None:
        return args[plan.alias]
    uniform = plan.uniform
    if uniform is not None:
        one = np.empty((), dtype=object)
        one[()] = uniform
        exact = np.broadcast_to(one, plan.shape)  # no array of the full size until asked
        return N.const(exact, plan.dtype, lambda: np.array(exact), uniform)
    node = N.apply(prim, plan.params, tuple(args), plan.shape, plan.dtype, prim.commutative,
                   plan.pkey)
    if node.regular != plan.regular or node.constant != plan.constant:
        node.regular, node.constant, node._facts = plan.regular, plan.constant, None
    return node


def _eager(prim: Primitive, plan: _Plan, tensors: list, node: N.Node,
           values: list, stale: bool = False) -> tuple:
    """The numeric value of the result from the arguments' ``values``, with numpy on whole
    arrays, or for a small node that folds beyond the template its element DAG's (see
    :func:`_interpret`), and its fusion (a zero-branched select later elementwise
    ops fold into), or None. ``stale``: an argument was computed before a leaf's value was
    assigned (see :func:`assigned`), so the element DAG's folds are not taken."""
    if plan.alias is not None:
        t = tensors[plan.alias]
        return t._value, t._fusion
    if plan.uniform is not None and plan.floating and not stale:
        return read_only(np.full(plan.shape, G.const_value(plan.uniform), dtype=plan.dtype)), None
    if ERRSTATE is None:
        with quiet():  # IEEE results (inf, nan) are values, not errors
            return _evaluate(prim, plan, tensors, node, values, stale)
    token = ERRSTATE.set(IGNORE)  # what quiet() does, inline: the hot path of every op
    try:
        return _evaluate(prim, plan, tensors, node, values, stale)
    finally:
        ERRSTATE.reset(token)


def _evaluate(prim: Primitive, plan: _Plan, tensors: list, node: N.Node,
              values: list, stale: bool) -> tuple:
    dtype = plan.dtype
    floating = plan.floating
    # (a large node follows the template even when its element view happens to be built)
    settles = floating and not stale and node.size <= N.ELEMENT_LIMIT and node.small()
    view = None  # how the element view evaluates (see view_values)
    if settles and not (plan.regular or plan.constant):
        view = V.view_plan(prim, plan.params, [t._node for t in tensors], plan.shape,
                           plan.memo)
        if view is not None and not (view.template or plan.fuses or plan.selects):
            node.settle(view.regular, None, view.folds, view.fid)
            return read_only(view.evaluate(None, values, plan.shape, dtype)), None
    fusion = value = None
    fused = False
    if plan.fuses:
        for t in tensors:
            if t._fusion is not None:
                # small nodes settle exactly from plain values below; only the recipe is kept
                value, fusion = prim.fuse(values, [t._node for t in tensors],
                                          [t._fusion for t in tensors],
                                          evaluate=not settles)
                fused = True
                break
    if not fused and plan.selects:
        fusion = prim.fusion(values, [t._node for t in tensors])
    if value is None:
        # (stale: the plain template, not one specialised to the nodes -- x - x is not 0)
        plain = stale and isinstance(prim, lent("elementwise"))
        value = prim.numeric(values, plan.params) if plain else plan.evaluator(values)
    value = np.asarray(value)
    if value.shape != plan.shape:
        value = np.broadcast_to(value, plan.shape)
    if value.dtype is not dtype and value.dtype != dtype:
        value = value.astype(dtype)
    if floating and not settles and not plan.fuses:
        fusion = _moved_fusion(prim, plan, tensors, value)
    if not floating or plan.regular:
        return read_only(value), fusion
    if plan.constant:  # (small ones inline: positive_zeros copies them)
        value = value + 0.0 if value.size <= _ZERO_LOOK else positive_zeros(value)
    elif settles:
        if view is not None:
            node.settle(view.regular, None, view.folds, view.fid)
        else:
            view = V.node_plan(node)
            if view is not None:
                values = V.in_node_order(node, [t._node for t in tensors], values)
        got = None if view is None else view.evaluate(value if view.template else None,
                                                      values, plan.shape, dtype)
        value = _interpret(value, node.atoms(), tensors) if got is None else got
    return read_only(value), fusion


#: Up to this many elements a constant's value is copied by ``+ 0.0`` without a look.
_ZERO_LOOK = 1 << 12


def positive_zeros(value: np.ndarray) -> np.ndarray:
    """``value`` with its -0.0 made +0.0 (constants have no -0: -0 + 0 is +0, the dtype
    stays); a large one without a -0.0 is not copied (a slice of a 2e6-element constant
    stays a view).

    >>> big = np.full(5000, -0.0)
    >>> positive_zeros(np.array([-0.0, 1.0])).tolist(), bool(np.signbit(positive_zeros(big)).any())
    ([0.0, 1.0], False)
    """
    if value.size <= _ZERO_LOOK or (np.signbit(value) & (value == 0)).any():
        return value + 0.0
    return value


def _moved_or(value: np.ndarray, v: np.ndarray, t, where: np.ndarray) -> np.ndarray:
    """A fused argument ``t``'s recipe array ``v`` moved as a moving op moves ``t`` to its
    result ``value``: ``value`` itself where ``v`` is ``t``'s value (the copies are the
    result's elements wherever the map reaches: no gather of the size of the result)."""
    return value if _same_array(v, t._value) else _moved(v, where, t.shape)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory (one array, or two
    views alike)."""
    return a is b or (a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides
                      and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _moved(v: np.ndarray, where: np.ndarray, shape: tuple) -> np.ndarray:
    """``v`` (broadcast to ``shape``) read at the flat places ``where`` (zero or False at
    -1): an argument's values where a moving op puts them (``gather_flat``'s value)."""
    return table_op("gather_flat").numeric([np.broadcast_to(v, shape)], {"idx": where})


def sharing(flat) -> tuple | None:
    """The stand-in pattern of a fused chain's argument values ``flat``: for each place the
    first place holding the same array (None when all differ), so arguments that are one
    value are one stand-in and the graph's builders see them equal (``where(c, g, 0) +
    where(c, 0, g)`` is ``g`` when both ``g`` are one).

    >>> a, b = np.zeros(2), np.ones(2)
    >>> sharing((a, b, a)), sharing((a, b))
    ((0, 1, 0), None)
    """
    first: dict = {}
    pattern = tuple(first.setdefault(id(v), i) for i, v in enumerate(flat))
    return None if all(p == i for i, p in enumerate(pattern)) else pattern


def shared_values(flat, pattern: tuple | None) -> tuple:
    """The values of ``flat`` one per stand-in of ``pattern`` (see :func:`sharing`)."""
    if pattern is None:
        return tuple(flat)
    return tuple(v for i, v in enumerate(flat) if pattern[i] == i)


def _where_recipe(cond: np.ndarray, x: tuple, y: tuple | None) -> tuple:
    """``(recipe, flat)`` of ``where(cond, x, y)`` for the fusion machinery
    (``ops.elementwise``): ``x`` and ``y`` are ``(recipe, flat)`` of a fused part or
    ``(None, (values,))`` of a plain one; ``y`` None is the structural zero."""
    consts = ((2, G.ZERO),) if y is None else ()
    own, children, tail = [cond], (), []
    for i, part in ((1, x), (2, y)):
        if part is None:
            continue
        recipe, flat = part
        if recipe is None:
            own.extend(flat)
        else:
            children += ((i, recipe),)
            tail.extend(flat)
    return (table_op("where"), consts, (0, 1, 2), children), tuple(own + tail)


@functools.lru_cache(maxsize=256)
def _absorbing_program(recipe: tuple, pattern: tuple | None):
    """A numpy program of a fused select's arguments giving 1 where it is structurally zero
    (:func:`graph.absorbing`)."""
    atom, stand_ins = lent("recipe_atom")(recipe, pattern)
    return E.program([G.absorbing(atom)], stand_ins, quiet=False)


def _zeros(fusion: tuple) -> np.ndarray:
    """True where a fused select ``fusion`` is structurally zero (broadcast as its
    arguments are)."""
    recipe, flat = fusion
    pattern = sharing(flat)
    run = _absorbing_program(recipe, pattern)
    return np.asarray(run(*shared_values(flat, pattern))[0]) == 1


def _live(t: Tensor) -> np.ndarray:
    """1.0 where ``t``'s value is not a structural zero, 0.0 where it is (its fusion's)."""
    if t._fusion is None:
        return np.ones(t.shape)
    return np.broadcast_to(np.where(_zeros(t._fusion), 0.0, 1.0), t.shape)


#: A fused chain of more ops than this is kept as ``where(live, value, 0)`` of its value.
RECIPE_MAX_OPS = 32


@functools.lru_cache(maxsize=1024)
def recipe_ops(recipe: tuple) -> int:
    """The number of ops in a fused chain ``(op, consts, same, children)``."""
    return 1 + sum(recipe_ops(child) for _, child in recipe[3])


def _bounded(fusion: tuple, value: np.ndarray) -> tuple:
    """``fusion`` (a result's fused select), or when its chain is longer than
    :data:`RECIPE_MAX_OPS` the select of the result's ``value`` where it is not a
    structural zero: the same values and zeros, and a chain that later ops extend stays
    bounded (a product tree's cotangents fused the whole tree: the second derivatives of
    ``reduce_prod`` over 150 elements built recipes of ~37,000 ops, 8 minutes)."""
    if recipe_ops(fusion[0]) <= RECIPE_MAX_OPS:
        return fusion
    return _where_recipe(np.broadcast_to(~_zeros(fusion), value.shape), (None, (value,)), None)


#: Index maps of moving ops up to this many elements are kept with their plan.
_MOVES_KEPT = 1 << 16


def _moved_fusion(prim: Primitive, plan: _Plan, tensors: list, value: np.ndarray):
    """The fusion of a large result of an op that moves elements (:meth:`Primitive.moves`):
    its arguments' zero-branched selects moved with their elements, and its structural
    zeros (places no element reaches) as a select's zero branch, so a later elementwise op
    folds into them as into the select itself (a slice's gradient times an infinite
    partial is 0 where the slice did not reach, at every size: README, "no where trap")."""
    if not prim.fills and all(t._fusion is None for t in tensors):
        return None
    if prim.sums:  # a sum of structural zeros only is one
        zero = np.asarray(prim.numeric([_live(t) for t in tensors], plan.params)) == 0
        return _where_recipe(~zero, (None, (value,)), None) if zero.any() else None
    if len(tensors) == 1 and tensors[0]._fusion is not None:  # a pure move: the same select
        recipe, flat = tensors[0]._fusion
        shapes = [tensors[0].shape]
        moved = [prim.moved(v, shapes, plan.params) for v in flat]
        if all(m is not None for m in moved):
            return recipe, tuple(moved)
    moves = plan.memo.get("moves", False)
    if moves is False:
        moves = prim.moves([t.shape for t in tensors], plan.params)
        if moves is not None:
            maps, own = moves
            fill = np.ones(plan.shape, dtype=bool) if own is None else ~own
            for m in maps:
                fill &= m < 0
            sources = [k for k, m in enumerate(maps) if (m >= 0).any()]
            moves = (maps, own, fill if fill.any() else None, sources)
        if int(np.prod(plan.shape, dtype=np.int64)) <= _MOVES_KEPT:
            plan.memo["moves"] = moves
    if moves is None:
        return None
    maps, own, fill, sources = moves
    fused = any(t._fusion is not None for t in tensors)
    if not fused and fill is None:
        return None
    if own is not None and fused:  # sums of structural zeros only are zeros too
        zero = own & (np.asarray(prim.numeric([_live(t) for t in tensors], plan.params)) == 0)
        if zero.any():
            own = own & ~zero
            own = own if own.any() else None
            fill = zero if fill is None else fill | zero
    if not sources and own is None:  # (all zeros)
        return _where_recipe(np.zeros(plan.shape, dtype=bool), (None, (value,)), None)
    if len(sources) == 1 and fill is None and own is None:  # a pure move: the same select
        (k,) = sources
        recipe, flat = tensors[k]._fusion
        return recipe, tuple(_moved_or(value, v, tensors[k], maps[k]) for v in flat)
    parts = []  # (condition, (recipe or None, flat)) of each source, then the sums
    for k in sources:
        m, t = maps[k], tensors[k]
        if t._fusion is not None:
            recipe, flat = t._fusion
            parts.append((m >= 0, (recipe, tuple(_moved_or(value, v, t, m) for v in flat))))
        else:  # (where the map reaches, the result's elements are those copies)
            parts.append((m >= 0, (None, (value,))))
    if own is not None:
        parts.append((own, (None, (value,))))
    out = parts[-1][1]  # the parts cover all but the zeros: the last one is the rest
    for cond, part in reversed(parts[:-1]):
        out = _where_recipe(cond, part, out)
    if len(parts) > 1:  # the parts' own zeros are the result's (a select of selects is none)
        for cond, part in parts:
            if part[0] is not None:
                zero = cond & np.broadcast_to(_zeros(part), plan.shape)
                fill = zero if fill is None else fill | zero
        fill = fill if fill is not None and fill.any() else None
    if fill is None:  # (no zeros: a fusion only when some part is one)
        return out if out[0] is not None else None
    # the zeros outermost: a select with a zero branch, which products fold into
    return _where_recipe(~fill, out, None)


#: Recent applications to small tensors: ``(prim, params key, input node ids) -> (plan,
#: node, input nodes, their facts)``, held strongly, so an eager loop applying the same ops
#: to the same nodes (variables' leaves, cached constants, last step's results) finds last
#: step's node with its plan, settled facts and fold ids instead of making them again. Only
#: nodes whose unbuilt ancestry is small enter (no large constant is kept alive), at most
#: ``_SITES_MAX`` of them, oldest out first; an entry is used only while its inputs' facts
#: are the ones it was planned for.
_SITES: dict = {}
_SITES_MAX = 2048


def apply(prim: Primitive, args, params: dict) -> Tensor:
    """Apply ``prim`` to ``args``: convert, check, make the node, evaluate, record."""
    tensors = _convert_args(prim, args)
    nodes = [t._node for t in tensors]
    try:
        key = (prim, N.params_key(params) if params else (), tuple(map(id, nodes)))
        hit = _SITES.get(key)
    except TypeError:  # params without a key: planned every time
        key = hit = None
    if hit is not None:
        for n, f in zip(nodes, hit[3]):
            if n._facts is not f:  # an argument settled since: plan again
                hit = None
                break
    if hit is not None:
        plan, node = hit[0], hit[1]
    else:
        plan = _plan(prim, params, tensors, nodes)
        node = _result_node(prim, plan, nodes)
        if key is not None and node.size <= N.ELEMENT_LIMIT and node.small():
            if len(_SITES) >= _SITES_MAX:
                N.evict_oldest(_SITES)
            _SITES[key] = (plan, node, nodes, [n.facts for n in nodes])
    out = reapply(prim, plan, node, tensors)
    recording.record(prim, plan.params, tensors, (out,))
    return out


def planned(prim: Primitive, params: dict, tensors: list, out: Tensor):
    """``(plan, node)`` with which :func:`apply` made ``out`` from ``tensors`` (a recorded
    application: ``params`` as recorded), for :func:`reapply`; None when the plan found
    now would not make that node (nothing to apply again: a folded constant).

    >>> import symtape as st
    >>> from symtape import ops
    >>> x = st.constant([1.0, 2.0])
    >>> y = x * x
    >>> plan, node = planned(ops.multiply, {}, [x, x], y)
    >>> reapply(ops.multiply, plan, node, [x, x]).numpy()
    array([1., 4.])
    """
    nodes = [t._node for t in tensors]
    plan = _plan(prim, params, tensors, nodes)
    if plan.shape != tuple(out.shape) or plan.dtype != out.dtype or plan.uniform is not None:
        return None
    if plan.alias is not None:
        return (plan, out._node) if out._node is nodes[plan.alias] else None
    node = N.apply(prim, plan.params, tuple(nodes), plan.shape, plan.dtype, prim.commutative,
                   plan.pkey)
    return (plan, node) if node is out._node else None


def reapply(prim: Primitive, plan: _Plan, node: N.Node, tensors: list) -> Tensor:
    """The result tensor of an application planned as ``plan`` with result ``node`` (by
    :func:`apply`, or found again by :func:`planned`), evaluated for ``tensors`` when they
    all have values: what :func:`apply` gives, without converting, planning or recording."""
    values = []
    epoch = None  # the oldest of the arguments' epochs (None: they read no leaf)
    for t in tensors:
        v = t._value
        if v is None:
            return Tensor(node, None, plan.dtype)
        values.append(v)
        e = t._epoch
        if e is not None and (epoch is None or e < epoch):
            epoch = e
    value, fusion = _eager(prim, plan, tensors, node, values,
                           epoch is not None and epoch != _CLOCK)
    out = Tensor(node, value, plan.dtype)
    out._epoch = epoch
    if fusion is not None:
        out._fusion = _bounded(fusion, value)
    return out

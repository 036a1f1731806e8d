"""The DAG of definitions: small SymPy expressions over atoms, hash-consed.

Every element of every tensor is an *atom*: a constant (a SymPy number, ``pi``, a closed
constant like ``sqrt(2)``, or ``true``/``false``), a :class:`Leaf` (a real input symbol), or a
:class:`Node` (a symbol naming one definition). A definition is one SymPy head applied to atoms
-- ``Add`` of ``atom``/``coef*atom`` terms, ``Mul`` of ``atom``/``atom**const`` factors,
``Pow(atom, atom)``, ``f(atom, ...)``, ``Piecewise`` of atoms, a relational of two atoms -- so
it is always small, and identical definitions are shared: the graph *is* its own
common-subexpression elimination.

The builders here (:func:`lincomb`, :func:`monomial`, :func:`power`, :func:`call`, ...) create
definitions without SymPy's whole-expression evaluation (they fold constants and identities
themselves, in IEEE arithmetic), which is what keeps tracing fast. Passes over the DAG
(:func:`expand`, :func:`cse`, :func:`reachable`, ...) are memoised traversals in topological
order -- a node's ``uid`` is larger than those of its operands -- never recursion.
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import sympy as sp
from mpmath.libmp import from_float, fzero, to_float
from sympy.core.expr import Expr
from sympy.core.numbers import Float, Integer, Number, Rational
from sympy.logic.boolalg import BooleanAtom

from symtape.element.heads import EXACT_FOLD
from symtape.element.heads import NUMPY as HEADS
from symtape.element.numeric import ieee_pow

S = sp.S
ZERO = S.Zero
ONE = S.One

__all__ = [
    "Leaf",
    "Node",
    "Graph",
    "GRAPH",
    "is_symbolic",
    "is_const",
    "number",
    "const_value",
    "float_value",
    "lincomb",
    "add",
    "monomial",
    "mul",
    "power",
    "call",
    "piecewise",
    "relation",
    "logic",
    "alias",
    "compile_template",
    "reachable",
    "leaves",
    "plain_memo",
    "expand",
    "tree_size",
    "cse",
]

# --------------------------------------------------------------------------------------------
# Symbols with identity
# --------------------------------------------------------------------------------------------

_uids = itertools.count(1)
_proto_real = sp.Symbol("_proto_real", real=True)
_proto_bool = sp.Symbol("_proto_bool")
_protos: dict = {}  # frozenset of assumptions -> a real symbol holding them


def _proto(assumptions: dict | None):
    if not assumptions:
        return _proto_real
    key = frozenset(assumptions.items())
    if key not in _protos:
        _protos[key] = sp.Symbol("_proto_assumed", **{"real": True, **assumptions})
    return _protos[key]


class _GraphSymbol(sp.Symbol):
    """A SymPy symbol compared by identity (its ``uid``), not by name."""

    __slots__ = ("uid", "__weakref__")

    def __new__(cls, *args, **kwargs):
        raise TypeError(f"create {cls.__name__} objects with their factory functions")

    @classmethod
    def _make(cls, name: str, boolean: bool = False, assumptions: dict | None = None):
        obj = Expr.__new__(cls)
        proto = _proto_bool if boolean else _proto(assumptions)
        obj.name = name
        obj._assumptions = proto._assumptions
        obj._assumptions_orig = proto._assumptions_orig
        obj._assumptions0 = proto._assumptions0
        obj.uid = next(_uids)
        return obj

    def _hashable_content(self):
        return (self.uid,)

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return self.uid

    def sort_key(self, order=None):
        return self.class_key(), (2, (self.name, self.uid)), ONE.sort_key(), ONE

    def __getnewargs_ex__(self):  # pragma: no cover - pickling goes through __reduce__
        raise TypeError("graph symbols are saved with symtape.serialize, not pickled alone")

    def __reduce__(self):
        raise TypeError(
            f"{type(self).__name__} {self.name!r} cannot be pickled on its own; save compiled "
            "functions with CompiledFunction.save / pickle.dumps(compiled)"
        )


class Leaf(_GraphSymbol):
    """A real input symbol: an element of a variable, a watched constant or ``st.symbol``.

    ``store`` is the object holding the current numeric value (an attribute ``value``: an
    ndarray or None) and ``index`` the flat index of this element in it.
    """

    __slots__ = ("store", "index", "latex_name", "assumptions")

    @classmethod
    def new(cls, name: str, store=None, index: int = 0, latex_name: str | None = None,
            assumptions: dict | None = None) -> Leaf:
        """``assumptions``: SymPy's (``positive=True``...) that the formulas respect (the
        leaf is real in any case)."""
        obj = cls._make(name, assumptions=assumptions)
        obj.store = store
        obj.index = index
        obj.latex_name = latex_name
        obj.assumptions = dict(assumptions) if assumptions else None
        return obj

    def plain(self) -> sp.Symbol:
        """SymPy's own symbol of this name and the assumptions it was given.

        >>> Leaf.new("x", assumptions={"positive": True}).plain() == sp.Symbol("x", positive=True)
        True
        """
        return sp.Symbol(self.name, **(self.assumptions or {}))

    def _latex(self, printer, exp=None):
        base = self.latex_name or printer._print_Symbol(self)
        return base if exp is None else f"{base}^{{{exp}}}"

    def bound_value(self):
        """The current numeric value of this element, or None when the leaf is unbound."""
        value = getattr(self.store, "value", None)
        if value is None:
            return None
        return np.asarray(value).flat[self.index]


class Node(_GraphSymbol):
    """A symbol naming one definition of the graph.

    ``operands`` are the Leaf/Node atoms of the definition; ``forward`` is, for heads whose
    derivative is a user rule (custom functions, ``stop_gradient``), the atom that computes
    their value, which evaluation and lowering use instead of the definition.
    """

    __slots__ = ("definition", "operands", "forward")

    @property
    def is_boolean(self) -> bool:
        return self._assumptions is _proto_bool._assumptions

    def evaluation_operands(self) -> tuple:
        """The atoms numeric evaluation reads: ``forward`` when set, else the operands."""
        if self.forward is not None:
            return (self.forward,) if isinstance(self.forward, _GraphSymbol) else ()
        return self.operands


class Graph:
    """The table of definitions: hash-consed, holding nodes weakly.

    A node lives as long as a tensor element or another definition refers to it, so the graph
    of a long training loop does not grow without bound.
    """

    def __init__(self) -> None:
        self._table: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._aliases: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self.created = 0

    def define(self, definition: Expr, operands: tuple, boolean: bool = False) -> Node:
        """The node whose definition is ``definition`` (an existing one when shared)."""
        node = self._table.get(definition)
        if node is not None:
            return node
        with self._lock:
            node = self._table.get(definition)
            if node is None:
                node = self._new(definition, operands, boolean, None)
                self._table[definition] = node
        return node

    def define_alias(self, definition: Expr, operands: tuple, forward) -> Node:
        """A node displayed as ``definition`` and evaluated as ``forward``."""
        key = (definition, forward)
        node = self._aliases.get(key)
        if node is not None:
            return node
        with self._lock:
            node = self._aliases.get(key)
            if node is None:
                boolean = isinstance(forward, Node) and forward.is_boolean
                node = self._new(definition, operands, boolean, forward)
                self._aliases[key] = node
        return node

    def _new(self, definition, operands, boolean, forward) -> Node:
        node = Node._make("", boolean)
        node.name = f"_n{node.uid}"
        node.definition = definition
        node.operands = operands
        node.forward = forward
        self.created += 1
        return node


GRAPH = Graph()


def is_symbolic(atom) -> bool:
    """True for leaves and nodes (atoms that are not constants)."""
    return isinstance(atom, _GraphSymbol)


def is_const(atom) -> bool:
    """True for constant atoms (numbers, ``pi``, closed constants, ``true``/``false``)."""
    return not isinstance(atom, _GraphSymbol)


# --------------------------------------------------------------------------------------------
# Constants: exact where both sides are rational, IEEE double otherwise
# --------------------------------------------------------------------------------------------

_float_cache: dict = {}
_FLOAT_CACHE_MAX = 1 << 16


def number(value):
    """The SymPy constant for a Python/numpy scalar: ints exact, floats as 53-bit Floats.

    >>> number(2), number(0.5), number(float("inf")), number(True)
    (2, 0.500000000000000, oo, True)
    """
    if isinstance(value, (bool, np.bool_)):
        return S.true if value else S.false
    if isinstance(value, (int, np.integer)):
        return Integer(int(value))
    v = float(value)
    hit = _float_cache.get(v)
    if hit is not None:
        return hit
    if math.isnan(v):
        return S.NaN
    if math.isinf(v):
        return S.Infinity if v > 0 else S.NegativeInfinity
    if len(_float_cache) > _FLOAT_CACHE_MAX:
        _float_cache.clear()
    hit = _float_cache[v] = _float(v)
    return hit


def _float(v: float) -> Float:
    """``Float(v)`` at 53 bits, built from mpmath's exact conversion (3x faster than
    ``Float(v)``, which parses and renormalises; the result is the same object state)."""
    obj = Expr.__new__(Float)
    obj._mpf_ = from_float(v)
    obj._prec = 53
    return obj


def float_value(c: Float) -> float:
    """``float(c)`` of a SymPy Float, read off its mantissa when that has at most 53 bits
    (exact then; ``Float.__float__`` renormalises first, which costs 5x more and is what
    every hash of a Float pays).

    >>> float_value(number(0.1)) == 0.1, float_value(Float("0.1", 30)) == 0.1
    (True, True)
    """
    mpf = c._mpf_
    return to_float(mpf) if mpf[3] <= 53 else float(c)


def const_value(c):
    """The Python float/bool value of a constant atom.

    >>> const_value(sp.pi) == math.pi, const_value(sp.Rational(1, 4)), const_value(S.true)
    (True, 0.25, True)
    """
    if c is ZERO:
        return 0.0
    if c is ONE:
        return 1.0
    if isinstance(c, BooleanAtom):
        return bool(c)
    if c is S.NaN:
        return math.nan
    if c is S.Infinity:
        return math.inf
    if c is S.NegativeInfinity:
        return -math.inf
    if isinstance(c, Rational):
        return c.p / c.q if c.q != 1 else float(c.p)
    if isinstance(c, Float):
        return float_value(c)
    try:
        return float(c.evalf(20))
    except (TypeError, ValueError):
        return math.nan


def _kind(c) -> int:
    """0: exact rational, 1: IEEE float (Float, oo, nan), 2: symbolic constant (pi, sqrt(2))."""
    if isinstance(c, Rational):
        return 0
    if isinstance(c, Number):
        return 1
    return 2


def _from_float(v: float):
    return number(float(v))


def is_zero(c) -> bool:
    if type(c) is Float:  # read the mantissa: SymPy's assumption system costs ~80 us a Float
        return c._mpf_ == fzero
    return c.is_Number and c.is_zero


def is_one(c) -> bool:
    return c is ONE or (isinstance(c, Float) and float_value(c) == 1.0)


def _real_or_float(expr, fallback: Callable[[], float]):
    """``expr`` when it is a real (or infinite) constant, else the IEEE value of ``fallback``."""
    if expr.is_Number and expr is not S.ComplexInfinity:
        return expr
    if isinstance(expr, BooleanAtom):
        return expr
    if expr.is_number and expr.is_extended_real:
        return expr
    return _from_float(fallback())


def c_add(a, b):
    """a + b for constants."""
    if b is ZERO:
        return a
    if a is ZERO:
        return b
    ka, kb = _kind(a), _kind(b)
    if ka == kb == 0:
        return a + b
    if ka == 1 or kb == 1:
        return _from_float(const_value(a) + const_value(b))
    return _real_or_float(sp.Add(a, b), lambda: const_value(a) + const_value(b))


def c_mul(a, b):
    """a * b for constants (0 * inf is nan, as in IEEE)."""
    ka, kb = _kind(a), _kind(b)
    if ka == kb == 0:
        return a * b
    if ka == 1 or kb == 1:
        return _from_float(const_value(a) * const_value(b))
    return _real_or_float(sp.Mul(a, b), lambda: const_value(a) * const_value(b))


def _float_pow(a: float, b: float) -> float:
    return float(ieee_pow(np.float64(a), np.float64(b)))


def c_pow(a, b):
    """a ** b for constants, real-valued: a negative base to a fractional power is nan."""
    ka, kb = _kind(a), _kind(b)
    if ka == kb == 0:
        if b.q == 1:
            if a == 0 and b < 0:
                return S.Infinity
            return a**b
        if a < 0:
            return S.NaN
        return _real_or_float(sp.Pow(a, b), lambda: _float_pow(const_value(a), const_value(b)))
    if ka == 1 or kb == 1:
        return _from_float(_float_pow(const_value(a), const_value(b)))
    return _real_or_float(sp.Pow(a, b), lambda: _float_pow(const_value(a), const_value(b)))


# --------------------------------------------------------------------------------------------
# Builders: one head over atoms, constants and identities folded
# --------------------------------------------------------------------------------------------

def _canonical_order(items: list) -> None:
    """Order the terms (factors) of a sum (product) in place.

    Two of them commute exactly in IEEE arithmetic, so they are sorted, which lets ``x + y``
    and ``y + x`` share one node; three or more (a constant term or coefficient counts) keep
    the order they were given in, because the rounding of a longer sum depends on it and
    eager numpy sums in that order too.
    """
    if len(items) == 2 and items[0][0].uid > items[1][0].uid:
        items.reverse()


def _raw_pow(base, exponent):
    obj = Expr.__new__(sp.Pow, base, exponent)
    obj.is_commutative = True
    return obj


def lincomb(terms: Iterable, const=ZERO, graph: Graph = GRAPH):
    """The atom for ``const + sum(c * a for c, a in terms)`` (coefficients are constants).

    >>> x = Leaf.new("x")
    >>> lincomb([(ONE, x), (ONE, x)]).definition
    2*x
    """
    coeffs: dict = {}
    for c, a in terms:
        if not isinstance(a, _GraphSymbol):
            if a is not ZERO:  # the usual constant term of sparse cotangents: nothing to add
                const = c_add(const, a if c is ONE else c_mul(c, a))
            continue
        prev = coeffs.get(a)
        coeffs[a] = c if prev is None else c_add(prev, c)
    items = [(a, c) for a, c in coeffs.items() if not is_zero(c)]
    if not items:
        return const
    const_zero = is_zero(const)
    if const_zero and not (len(items) == 1 and is_one(items[0][1])) and \
            all(absorbs_products(a) for a, _ in items):
        conds = _common_conditions([a for a, _ in items])
        return _sum_into_select(items, conds) if conds is not None else _sum_under_select(items)
    if len(items) == 1 and const_zero:
        a, c = items[0]
        if is_one(c):
            return a
        return graph.define(sp.Mul._from_args((c, a), True), (a,))
    if const_zero:
        _canonical_order(items)
    return _sum_node(items, ZERO if const_zero else const, graph)


def _sum_node(items: list, const=ZERO, graph: Graph = GRAPH):
    """The ``Add`` node of ``const + sum(c * a)`` over distinct symbolic atoms, as given."""
    args = [] if const is ZERO or is_zero(const) else [const]
    for a, c in items:
        args.append(a if is_one(c) else sp.Mul._from_args((c, a), True))
    return graph.define(sp.Add._from_args(tuple(args), True), tuple(a for a, _ in items))


def add(*atoms):
    """The atom for the sum of ``atoms``."""
    return lincomb([(ONE, a) for a in atoms])


def monomial(coef, factors: Iterable, graph: Graph = GRAPH):
    """The atom for ``coef * prod(a ** e for a, e in factors)`` (exponents are constants).

    A zero coefficient gives the structural zero, whatever the factors (the exact derivative
    where IEEE would give ``0 * inf = nan``).

    >>> x, y = Leaf.new("x"), Leaf.new("y")
    >>> monomial(ONE, [(x, ONE), (y, S.NegativeOne), (x, ONE)]).definition
    x**2/y
    """
    exps: dict = {}
    for a, e in factors:
        if not isinstance(a, _GraphSymbol):
            coef = c_mul(coef, c_pow(a, e))
            continue
        prev = exps.get(a)
        exps[a] = e if prev is None else c_add(prev, e)
    if is_zero(coef):
        return ZERO
    items = [(a, e) for a, e in exps.items() if not is_zero(e)]
    if not items:
        return coef
    for k, (a, e) in enumerate(items):
        if e.is_positive and absorbs_products(a):
            return _product_into_select(a, e, coef, items[:k] + items[k + 1:])
    if is_one(coef):
        _canonical_order(items)
    if len(items) == 1:
        a, e = items[0]
        if is_one(e):
            if is_one(coef):
                return a
            return graph.define(sp.Mul._from_args((coef, a), True), (a,))
        if is_one(coef):
            return graph.define(_raw_pow(a, e), (a,))
    args = [] if is_one(coef) else [coef]
    for a, e in items:
        args.append(a if is_one(e) else _raw_pow(a, e))
    return graph.define(sp.Mul._from_args(tuple(args), True), tuple(a for a, _ in items))


def _select_pairs(atom) -> tuple | None:
    """The (value, condition) pairs of a select node, None for anything else."""
    if not isinstance(atom, Node) or atom.forward is not None or \
            type(atom.definition) is not sp.Piecewise:  # (``.func``, a property, costs more)
        return None
    return atom.definition.args


def absorbs_products(atom) -> bool:
    """Whether ``atom`` is a select with a structurally zero branch: multiplying it by
    anything is exactly zero where that branch is taken, so products fold into its branches
    (:func:`_product_into_select`). A select whose zeros are only nested in a branch (a
    ``where`` of sums of selects) is not one: products do not fold into it, on every path
    (eager values at every size, the element view, loop nests' counts).

    >>> x, c = Leaf.new("x"), relation(sp.StrictGreaterThan, Leaf.new("y"), ZERO)
    >>> absorbs_products(piecewise((x, c), (ZERO, S.true))), absorbs_products(x)
    (True, False)
    >>> absorbs_products(piecewise((piecewise((x, c), (ZERO, S.true)), c), (x, S.true)))
    False
    """
    pairs = _select_pairs(atom)
    return pairs is not None and any(is_zero(p.expr) for p in pairs)


def absorbing(atom):
    """An atom that is 1 where ``atom`` is structurally zero -- the constant 0, or a select
    taking a branch that is -- and 0 elsewhere: where products with it are exactly zero.

    >>> x, c = Leaf.new("x"), relation(sp.StrictGreaterThan, Leaf.new("y"), ZERO)
    >>> absorbing(piecewise((x, c), (ZERO, S.true))).definition.args[1]
    (1, True)
    >>> absorbing(x), absorbing(ZERO)
    (0, 1)
    """
    if not isinstance(atom, _GraphSymbol):
        return ONE if is_zero(atom) else ZERO
    if not absorbs_products(atom):  # (zeros nested in a branch only: products do not fold)
        return ZERO
    return piecewise(*[(absorbing(p.expr), p.cond) for p in _select_pairs(atom)])


def _product_into_select(select: Node, exponent, coef, others: list):
    """``coef * select(c, v, 0)**e * others`` as ``select(c, coef * v**e * others, 0)``.

    A structurally zero branch times anything is zero -- the exact product, where IEEE gives
    ``0 * inf = nan``: the unselected branch of a ``where`` contributes exactly nothing to a
    derivative, also where its own partial is infinite (no ``where`` trap)."""
    pairs = []
    for pair in select.definition.args:
        value = pair.expr
        if not is_zero(value):
            value = monomial(coef, [(value, exponent), *others])
        pairs.append((value, pair.cond))
    return piecewise(*pairs)


def _common_conditions(atoms: list) -> tuple | None:
    """The conditions of selects that all have the same ones, else None."""
    conds = None
    for a in atoms:
        mine = tuple(pair.cond for pair in a.definition.args)
        if conds is None:
            conds = mine
        elif mine != conds:
            return None
    return conds


def _sum_into_select(items: list, conds: tuple):
    """``sum(c * select(conds, values))`` as ``select(conds, sum(c * values))``: the same
    branch is taken in every term, and a branch that is zero in every term stays exactly
    zero (so products fold into it, see :func:`_product_into_select`)."""
    pairs = []
    for k, cond in enumerate(conds):
        pairs.append((lincomb([(c, a.definition.args[k].expr) for a, c in items]), cond))
    return piecewise(*pairs)


def _sum_under_select(items: list):
    """``sum(c * select_i)`` of selects on different conditions as
    ``select(some nonzero branch is taken, sum(c * select_i), 0)``: exactly zero, and so
    absorbing products, where no term's value is taken; elsewhere the plain sum."""
    memo: dict = {}
    taken = [_taken(a, memo) for a, _ in items]
    return piecewise((_sum_node(items), logic(sp.Or, *taken)), (ZERO, S.true))


def _taken(atom, memo: dict):
    """The condition under which ``atom`` is not a structural zero: a select takes a branch
    that is not one (a select in a branch taken only where it takes such a branch; each
    select looked at once, ``memo``)."""
    pairs = _select_pairs(atom)
    if pairs is None or not absorbs_products(atom):  # (as :func:`absorbing`)
        return S.false if is_zero(atom) else S.true
    if atom in memo:
        return memo[atom]
    taken, earlier = [], []
    for pair in pairs:
        inner = _taken(pair.expr, memo)
        if inner is not S.false:
            taken.append(logic(sp.And, pair.cond, inner, *[logic(sp.Not, c) for c in earlier]))
        earlier.append(pair.cond)
    memo[atom] = out = logic(sp.Or, *taken)
    return out


def mul(*atoms):
    """The atom for the product of ``atoms``."""
    return monomial(ONE, [(a, ONE) for a in atoms])


def power(base, exponent, graph: Graph = GRAPH):
    """The atom for ``base ** exponent``."""
    if not isinstance(exponent, _GraphSymbol):
        return monomial(ONE, [(base, exponent)])
    if not isinstance(base, _GraphSymbol):
        if is_one(base):
            return ONE
        return graph.define(_raw_pow(base, exponent), (exponent,))
    return graph.define(_raw_pow(base, exponent), (base, exponent))


def _operands(args) -> tuple:
    seen: dict = {}
    for a in args:
        if isinstance(a, _GraphSymbol):
            seen[a] = None
    return tuple(seen)


def _numeric_call(func, args):
    values = [np.float64(const_value(a)) if not isinstance(a, BooleanAtom) else bool(a)
              for a in args]
    with np.errstate(all="ignore"):
        out = HEADS[func](*values)
    return number(out.item() if hasattr(out, "item") else out)


def call(func, *args, graph: Graph = GRAPH):
    """The atom for ``func(*args)`` (a SymPy function head applied to atoms).

    Constant arguments are folded: exactly when SymPy gives a real closed form for exact
    arguments (``exp(0) -> 1``, ``exp(1) -> E``), in IEEE double otherwise (``log(0.0) ->
    -oo``).
    """
    if not any(isinstance(a, _GraphSymbol) for a in args):
        if func in EXACT_FOLD and all(_kind(a) != 1 for a in args):
            return _real_or_float(func(*args), lambda: float(const_value(
                _numeric_call(func, args))))
        return _numeric_call(func, args)
    if func is sp.Max or func is sp.Min:
        return _lattice(func, args, graph)
    return graph.define(Expr.__new__(func, *args), _operands(args))


def _lattice(func, args, graph):
    """Max/Min of atoms: constants folded into one, duplicates dropped, nan propagated."""
    consts = [a for a in args if not isinstance(a, _GraphSymbol)]
    syms = list(dict.fromkeys(a for a in args if isinstance(a, _GraphSymbol)))
    rest = []
    if consts:
        folded = _numeric_call(func, consts) if len(consts) > 1 else consts[0]
        if folded is S.NaN:
            return S.NaN
        rest = [folded]
    if not syms:
        return rest[0]
    if len(syms) == 1 and not rest:
        return syms[0]
    ordered = tuple(rest + sorted(syms, key=lambda a: a.uid))
    return graph.define(func(*ordered, evaluate=False), tuple(syms))


def piecewise(*pairs, graph: Graph = GRAPH):
    """The atom for ``Piecewise((value, cond), ...)``; the last condition should be True."""
    kept = []
    for value, cond in pairs:
        if cond is S.false:
            continue
        kept.append((value, cond))
        if cond is S.true:
            break
    if not kept:
        return S.NaN
    first = kept[0][0]
    if kept[0][1] is S.true or kept[-1][1] is S.true and all(
            v == first or is_zero(v) and is_zero(first) for v, _ in kept):  # (0.0 is 0)
        return first
    if kept[-1][1] is not S.true:
        kept.append((S.NaN, S.true))
    expr = sp.Piecewise(*kept, evaluate=False)
    return graph.define(expr, _operands(itertools.chain.from_iterable(kept)))


_REL_HEADS = (sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan,
              sp.Equality, sp.Unequality)


def relation(cls, lhs, rhs, graph: Graph = GRAPH):
    """The boolean atom for the comparison ``cls(lhs, rhs)`` (IEEE: nan compares false)."""
    if not isinstance(lhs, _GraphSymbol) and not isinstance(rhs, _GraphSymbol):
        with np.errstate(all="ignore"):
            out = HEADS[cls](np.float64(const_value(lhs)), np.float64(const_value(rhs)))
        return S.true if out else S.false
    expr = cls(lhs, rhs, evaluate=False)
    return graph.define(expr, _operands((lhs, rhs)), boolean=True)


def logic(cls, *args, graph: Graph = GRAPH):
    """The boolean atom for ``And``/``Or``/``Not`` of boolean atoms."""
    if cls is sp.Not:
        (a,) = args
        if isinstance(a, BooleanAtom):
            return S.false if a else S.true
        return graph.define(Expr.__new__(sp.Not, a), _operands(args), boolean=True)
    absorbing = S.false if cls is sp.And else S.true
    kept = []
    for a in args:
        if a is absorbing:
            return absorbing
        if isinstance(a, BooleanAtom):
            continue
        if a not in kept:
            kept.append(a)
    if not kept:
        return S.true if cls is sp.And else S.false
    if len(kept) == 1:
        return kept[0]
    kept.sort(key=lambda a: a.uid)
    return graph.define(cls(*kept, evaluate=False), tuple(kept), boolean=True)


def alias(head, display_args: Sequence, forward, graph: Graph = GRAPH):
    """A node printed as ``head(*display_args)`` whose value is the atom ``forward``."""
    definition = Expr.__new__(head, *display_args)
    return graph.define_alias(definition, _operands(display_args), forward)


# --------------------------------------------------------------------------------------------
# Templates: a SymPy expression over placeholders, compiled once into a builder of atoms
# --------------------------------------------------------------------------------------------


def compile_template(expr: Expr, placeholders: Sequence[sp.Symbol]) -> Callable:
    """A function ``f(*atoms) -> atom`` building ``expr`` with ``placeholders -> atoms``.

    The template is walked once; instantiation then runs the builders only.

    >>> s = sp.Symbol("s", real=True)
    >>> x = Leaf.new("x")
    >>> f = compile_template(1 - s**2, [s])
    >>> str(expand(f(x)))
    '1 - x**2'
    """
    index = {p: i for i, p in enumerate(placeholders)}
    body = _compile(expr, index)
    return lambda *atoms: body(atoms)


def _compile(expr, index):  # noqa: C901 - a dispatch table over SymPy heads
    if expr in index:
        i = index[expr]
        return lambda atoms: atoms[i]
    if not expr.free_symbols & set(index):
        const = expr if isinstance(expr, BooleanAtom) else _real_or_float(
            expr, lambda: const_value(expr))
        return lambda atoms: const
    head = expr.func
    if head is sp.Add:
        const = ZERO
        parts = []
        for arg in expr.args:
            coef, rest = arg.as_coeff_Mul() if arg.is_Mul else (ONE, arg)
            if not rest.free_symbols & set(index):
                const = c_add(const, arg)
                continue
            parts.append((coef, _compile(rest, index)))
        return lambda atoms: lincomb([(c, f(atoms)) for c, f in parts], const)
    if head is sp.Mul:
        coef = ONE
        parts = []
        for arg in expr.args:
            if not arg.free_symbols & set(index):
                coef = c_mul(coef, arg)
                continue
            if arg.is_Pow and not arg.exp.free_symbols & set(index):
                parts.append((_compile(arg.base, index), arg.exp))
            else:
                parts.append((_compile(arg, index), ONE))
        return lambda atoms: monomial(coef, [(f(atoms), e) for f, e in parts])
    if head is sp.Pow:
        fb, fe = _compile(expr.base, index), _compile(expr.exp, index)
        return lambda atoms: power(fb(atoms), fe(atoms))
    if head is sp.Piecewise:
        parts = [(_compile(e, index), _compile(c, index)) for e, c in expr.args]
        return lambda atoms: piecewise(*[(fe(atoms), fc(atoms)) for fe, fc in parts])
    subs = [_compile(a, index) for a in expr.args]
    if head in _REL_HEADS:
        fl, fr = subs
        return lambda atoms: relation(head, fl(atoms), fr(atoms))
    if head in (sp.And, sp.Or, sp.Not):
        return lambda atoms: logic(head, *[f(atoms) for f in subs])
    return lambda atoms: call(head, *[f(atoms) for f in subs])


# --------------------------------------------------------------------------------------------
# Passes: memoised traversals in topological (uid) order
# --------------------------------------------------------------------------------------------


def reachable(atoms: Iterable, through_forward: bool = False, below=()) -> list:
    """The nodes reachable from ``atoms``, in topological order (operands first), not
    through the atoms ``below`` (a set or dict: what is given).

    With ``through_forward``, alias nodes are followed through the atom that computes them
    (what evaluation and lowering read) instead of their displayed operands.

    >>> x = Leaf.new("x")
    >>> s = add(x, ONE)
    >>> len(reachable([mul(s, s)])), len(reachable([mul(s, s)], below={s}))
    (2, 1)
    """
    seen: set = set()
    stack = [a for a in atoms if isinstance(a, Node) and a not in below]
    out = []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        out.append(node)
        ops = node.evaluation_operands() if through_forward else node.operands
        for op in ops:
            if isinstance(op, Node) and op not in seen and op not in below:
                stack.append(op)
    out.sort(key=lambda n: n.uid)
    return out


def leaves(atoms: Iterable, through_forward: bool = False) -> list:
    """The leaves ``atoms`` depend on, in creation order."""
    atoms = list(atoms)
    found = {a for a in atoms if isinstance(a, Leaf)}
    for node in reachable(atoms, through_forward):
        ops = node.evaluation_operands() if through_forward else node.operands
        found.update(op for op in ops if isinstance(op, Leaf))
    return sorted(found, key=lambda a: a.uid)


def plain_memo(atoms: Iterable) -> dict:
    """A memo for :func:`expand` that writes the leaves of ``atoms`` as SymPy's own symbols
    (:meth:`Leaf.plain`), substituted node by node as the DAG is expanded.

    >>> x = Leaf.new("x")
    >>> e = mul(call(sp.sin, x), x)
    >>> expand(e, plain_memo([e])) == sp.sin(sp.Symbol("x")) * sp.Symbol("x")
    True
    """
    return {leaf: leaf.plain() for leaf in leaves(atoms)}


def expand(atom, memo: dict | None = None):
    """The SymPy expression of ``atom`` in terms of leaves (definitions substituted; a
    leaf in ``memo`` written as its entry there).

    Subexpressions are shared in memory, so the result costs memory linear in the DAG even
    where its printed tree is exponential.
    """
    if not isinstance(atom, Node):
        return memo.get(atom, atom) if memo else atom
    memo = {} if memo is None else memo
    if atom in memo:
        return memo[atom]
    for node in reachable([atom]):
        if node in memo:
            continue
        mapping = {op: memo.get(op, op) for op in node.operands}
        memo[node] = node.definition.xreplace(mapping)
    return memo[atom]


def tree_size(atoms: Iterable) -> int:
    """The number of atoms in the printed (fully substituted) trees of ``atoms``."""
    sizes: dict = {}
    atoms = list(atoms)
    for node in reachable(atoms):
        sizes[node] = 1 + sum(sizes.get(op, 1) for op in node.operands)
    return sum(sizes.get(a, 1) for a in atoms)


def cse(atoms: Sequence, names: Iterable[str] | None = None):
    """``(replacements, exprs)`` for ``atoms``, read off the DAG (nodes used twice are named).

    The same shape as ``sympy.cse``'s answer, computed without it: the shared nodes of the
    DAG are exactly the common subexpressions.

    >>> x = Leaf.new("x")
    >>> e = add(call(sp.sin, x), mul(call(sp.sin, x), x))
    >>> cse([e])
    ([(x0, sin(x))], [x*x0 + x0])
    """
    atoms = list(atoms)
    order = reachable(atoms)
    uses: dict = {}
    for node in order:
        for op in node.operands:
            if isinstance(op, Node):
                uses[op] = uses.get(op, 0) + 1
    for a in atoms:
        if isinstance(a, Node):
            uses[a] = uses.get(a, 0) + 1
    taken = {leaf.name for leaf in leaves(atoms)}
    if names is None:
        names = (f"x{i}" for i in itertools.count())
    names = (n for n in names if n not in taken)
    memo: dict = {}
    replacements = []
    for node in order:
        expr = node.definition.xreplace({op: memo.get(op, op) for op in node.operands})
        if uses.get(node, 0) > 1:
            sym = sp.Symbol(next(names), real=not node.is_boolean or None)
            replacements.append((sym, expr))
            expr = sym
        memo[node] = expr
    exprs = [memo.get(a, a) for a in atoms]
    return replacements, exprs

"""The primitive framework: ``Primitive``, abstract values (``Aval``), zero cotangents
(``Zero``), the tables the stanzas register in, and the helpers they share."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from symtape.base.errors import DTypeError
from symtape.base.places import flat_places
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")
TN = LazyModule("TN", globals(), "symtape.core.notation")


class _Placeholders:
    """The placeholders of templates, SymPy symbols made on first use (SymPy loads with the
    first template): ``x y z w`` arguments, ``g`` the cotangent, ``ans`` the result (all
    real), ``c`` a condition, ``b1 b2`` booleans.

    >>> P.x, P.x.is_real, P.c.is_real
    (x, True, None)
    """

    REAL = frozenset({"x", "y", "z", "w", "g", "ans"})
    NAMES = REAL | {"c", "b1", "b2"}

    def __getattr__(self, name: str):
        if name not in self.NAMES:
            raise AttributeError(f"no template placeholder {name!r}")
        symbol = sp.Symbol(name, real=True) if name in self.REAL else sp.Symbol(name)
        setattr(self, name, symbol)
        return symbol

    def of(self, names: str) -> tuple:
        """The placeholders named in ``names`` (space-separated), in order."""
        return tuple(getattr(self, n) for n in names.split())


P = _Placeholders()

OPS: dict[str, Primitive] = {}

class Aval(NamedTuple):
    """The abstract value of a tensor: its shape and numpy dtype."""

    shape: tuple
    dtype: np.dtype


class Zero:
    """A cotangent known to be zero (the path is connected; nothing needs computing)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    def __repr__(self) -> str:
        return f"Zero(shape={self.shape}, dtype={self.dtype.name})"


def kind_of(dtype: np.dtype) -> str:
    return "b" if dtype.kind == "b" else ("f" if dtype.kind == "f" else "i")


_KIND_NAMES = {"f": "float", "i": "integer", "b": "bool"}


def fmt(shape) -> str:
    return str(tuple(shape))


class Unplannable(Exception):
    """A node with no loop form (the function then compiles its element view)."""


# --------------------------------------------------------------------------------------------
# Primitive
# --------------------------------------------------------------------------------------------


_apply = None


def _binder_apply():
    """The binder's ``apply`` (the package's last module: it makes tensors of ops), imported
    on the first application."""
    global _apply
    from symtape.core.apply import apply

    _apply = apply
    return apply


class Primitive:
    """An op: argument dtypes, shape rule, builder, numeric evaluation and rules.

    ``args`` spells each argument's dtype role: ``'T'`` (shares the op's dtype), ``'bool'``,
    or ``'*'`` (any); ``kinds`` are the dtype kinds ``'T'`` may be (``'f'``, ``'i'``, ``'b'``).
    """

    variadic = False
    commutative = False  # whether argument order can be ignored when sharing nodes

    def __init__(self, name: str, args: Sequence[str] = ("T",), kinds: str = "f",
                 rules: Sequence | None = None, out: str = "T") -> None:
        self.name = name
        self.args = tuple(args)
        self.kinds = kinds
        self.rules = tuple(rules) if rules is not None else (None,) * len(self.args)
        self.out = out

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    def bind(self, *args, **params):
        """Apply the op to tensors (or values convertible to tensors)."""
        return (_apply or _binder_apply())(self, args, params)

    __call__ = bind

    def role(self, i: int) -> str:
        return self.args[-1] if self.variadic and i >= len(self.args) else self.args[i]

    # -- abstract evaluation ---------------------------------------------------------------
    def check_dtypes(self, avals: Sequence[Aval]) -> np.dtype | None:
        """The op's dtype ``T``; raises DTypeError naming the argument otherwise."""
        t = None
        for i, a in enumerate(avals):
            role = self.role(i)
            if role == "bool" and a.dtype.kind != "b":
                raise DTypeError(f"st.{self.name}: argument {i} must be a bool tensor, got "
                                 f"{a.dtype.name}")
            if role != "T":
                continue
            if kind_of(a.dtype) not in self.kinds:
                allowed = " or ".join(_KIND_NAMES[k] for k in self.kinds)
                raise DTypeError(f"st.{self.name}: argument {i} has dtype {a.dtype.name}; "
                                 f"{self.name} needs a {allowed} tensor (convert with st.cast)")
            if t is None:
                t = a.dtype
            elif a.dtype != t:
                raise DTypeError(f"st.{self.name}: arguments have different dtypes "
                                 f"{t.name} and {a.dtype.name}; cast one with st.cast")
        return t

    def out_dtype(self, t):
        return np.dtype(bool) if self.out == "bool" else (t if self.out == "T" else
                                                           np.dtype(self.out))

    def prepare(self, avals: Sequence[Aval], params: dict) -> tuple[Aval, dict]:
        """Validate arguments; return the output's abstract value and normalised params."""
        t = self.check_dtypes(avals)
        return Aval(self.shape_rule([a.shape for a in avals], params), self.out_dtype(t)), params

    def shape_rule(self, shapes: Sequence[tuple], params: dict) -> tuple:
        raise NotImplementedError(f"{self.name} needs a shape rule")

    # -- evaluation ------------------------------------------------------------------------
    def build(self, atoms: Sequence[np.ndarray], params: dict) -> np.ndarray:
        raise NotImplementedError(f"{self.name} needs a builder")

    def numeric(self, values: Sequence[np.ndarray], params: dict) -> np.ndarray:
        raise NotImplementedError(f"{self.name} needs a numeric evaluation")

    def evaluator(self, args: Sequence, params: dict) -> Callable:
        """``values -> value``, the numeric value for arguments like ``args`` (their
        tensor-level nodes: ``uniform`` is the one constant all elements are, or None, there
        to specialise on). The binder caches it per signature, so it must not keep
        ``args``."""
        return lambda values: self.numeric(values, params)

    #: Whether :meth:`moves` can leave structural zeros (places no argument element reaches).
    fills = False
    #: Whether each output element is a sum of argument elements (with positive weights):
    #: a structural zero where all of them are.
    sums = False

    def moves(self, shapes: Sequence[tuple], params: dict):
        """``(maps, own)`` when every output element is a copy of one argument element, a
        structural zero, or (where ``own``, a bool array or None) computed otherwise: ``maps``
        gives, for each argument, the flat index into it of each output element (-1: not
        from it). None for ops that compute their elements (the default). Eager values of
        large tensors carry zero-branched selects through such ops (see ``binder``)."""
        return None

    def moved(self, value: np.ndarray, shapes: Sequence[tuple], params: dict):
        """For an op whose every output element is a copy of an element of its one argument
        (``shapes``: the arguments'): ``value``, an array that argument's shape holds (or
        broadcasts to), rearranged as the op rearranges it -- what a gather through
        :meth:`moves`' map gives, without the map; None (the default): use the map.

        >>> Primitive("p").moved(np.zeros(2), [(2,)], {}) is None
        True
        """
        return None

    def structure(self, args: Sequence, params: dict, shape: tuple) -> tuple:
        """``(regular, uniform, alias)`` of the result node: whether its elements are
        distinct symbolic atoms the builders fold no further than numpy (see ``nodes.py``),
        the one constant every element folds to (or None), and the index of an argument
        the result *is* (or None)."""
        return False, None, None

    def notation(self, args: Sequence, params: dict):
        """This op applied to the tensor-notation expressions ``args`` (``notation.py``)."""
        return TN.applied(self.name, params, args)

    # -- differentiation -------------------------------------------------------------------
    def rule_for(self, i: int):
        return self.rules[-1] if self.variadic and i >= len(self.rules) else self.rules[i]

    def differentiable(self, i: int) -> bool:
        """Whether a gradient can flow to argument ``i`` (a zero cotangent stays connected)."""
        return self.rule_for(i) is not None

    def vjp(self, g, ans, args: Sequence, params: dict, needed: Sequence[bool]) -> list:
        """Cotangents of the arguments for the output cotangent ``g``."""
        out = []
        for i, arg in enumerate(args):
            rule = self.rule_for(i) if needed[i] else None
            out.append(None if rule is None else rule(g, ans, *args, **params))
        return out

    # -- batching --------------------------------------------------------------------------
    def batch(self, args: Sequence, batched: Sequence[bool], params: dict, shape: tuple):
        """This op applied to every row of the ``batched`` arguments (a leading axis of the
        same length; the others are shared), as one tensor with that leading axis: the op's
        output ``shape`` is its shape for one row. This default applies the op row by row;
        ops override it with one application over the whole batch."""
        n = batch_size(args, batched)
        take, stack = OPS["getitem"], OPS["stack"]
        rows = [self.bind(*[take.bind(a, key=(i,)) if b else a for a, b in zip(args, batched)],
                          **params) for i in range(n)]
        return stack.bind(*rows, axis=0)

    # -- loop nests --------------------------------------------------------------------------
    # A loop rule is written against the planner of ``symtape.compile.planner``, which passes
    # itself in (it sits above the op table and is never imported here). What a rule uses:
    #   P                       the points of a chunk each block runs over (0: one point)
    #   loc[id(node)]           an argument's location ``(buffer, offsets)``
    #   buffers, fresh(node, batched), temp(size, batched, boolean),
    #   constant_buffer(values, boolean)   buffers of the plan
    #   shape(shape, batched), batched(loc), spread(loc, shape, batched), point_stride(offsets)
    #   access(loc, shape, batched), materialise(loc)   reading a location in a loop
    #   block(space, body, ins, outs, ...), fill(loc, shape, value, batched),
    #   accumulate(space, value, stand_ins, ins, out, batched, count)   emitting loops
    #   body(node, atoms, stand_ins), body_block(node, space, atoms, stand_ins, ins, ...)
    #   elementwise(node), structural(node, maps), unrolled(node)   generic placements
    #   at(buffer, offset, strides, core) an access, build_plan(outputs, inputs) a body,
    #   align, wide_vectors (what the CPU holds)   codegen's objects (ops never import it)
    #   affine(offsets) -> (offset, strides) | None, flat(shape), stand_ins(shape, name),
    #   copy_body(n, boolean), numeric(node)   shared helpers
    # A location is ``(buffer, offsets)``: the offset of each of the node's elements (with the
    # chunk's points in front when the buffer holds a slice per point).

    #: Whether the loop rule places the node as a view of its arguments (no block of its own).
    loop_view = False
    #: Whether the node adds several argument elements into one place by index (a scatter).
    scatters = False
    #: Whether the element view's terms count as matrix-product terms (points planned in
    #: chunks pay from fewer of them).
    product_terms = False
    #: Whether each element is one template of the arguments' elements at its place (the
    #: op's ``build_atom(*atoms)``), so that the planner may build it into a reader's loop.
    pointwise = False

    def loop(self, planner, node) -> tuple:
        """The loop rule: ``node``'s location, after emitting on ``planner`` the blocks that
        compute it from its arguments' locations; raises :class:`Unplannable` at once when
        the op has no loop form (the function then compiles its element view)."""
        raise Unplannable(f"{self.name} has no loop rule")

    def element_cost(self, node) -> int:
        """The atoms of ``node``'s element view (a contraction counts its terms)."""
        return node.size

    #: Whether :meth:`view_size` says more than the node's size (read before calling it: the
    #: eager path asks for every node).
    sized_view = False

    def view_size(self, node) -> int:
        """The atoms building ``node``'s element view from its inputs' takes (what decides
        whether a value settles from it): its size, unless the op says more (a loop's
        view is its steps times its body).

        >>> import symtape as st
        >>> y = st.sin(st.constant([1.0, 2.0]))._node
        >>> y.prim.view_size(y)
        2
        """
        return node.size

    def view_refused(self, node) -> str | None:
        """Why ``node`` has no element view to compile (a loop of many steps is never
        unrolled), or None: the strategy then plans loops whatever the estimate."""
        return None

    def places(self, node):
        """For an op that only moves the elements of its one argument to distinct places (a
        gather, a reshape, a scatter to distinct places): for each element of ``node``, the
        flat place in the argument it is (-1: a zero); None for other ops."""
        return None

    def total_from_args(self, node, kind: str) -> bool:
        """Whether a total of ``kind`` (``'sum'``, ``'max'``, ``'min'``) over points of
        ``node`` may be accumulated straight from its arguments' values per point
        (:meth:`loop_total`), without ``node``'s values per point."""
        return False

    def loop_total(self, planner, node, buf: int) -> None:
        """Emits the blocks adding the total over the chunk's points of ``node`` into the
        output buffer ``buf`` from its arguments (see :meth:`total_from_args`)."""
        raise Unplannable(f"{self.name} has no total over points from its arguments")

    # -- sparsity --------------------------------------------------------------------------
    def dependencies(self, deps: Sequence[np.ndarray], params: dict, shape: tuple) -> np.ndarray:
        """Which source elements each output element may depend on, from the arguments'
        (object arrays of ints, one bit per source element; ``shape``: the output's). This
        default says: every output element on everything any argument depends on."""
        return np.full(shape, union(deps), dtype=object)


def zero_factor(args: Sequence):
    """The constant 0 when an argument is 0 everywhere (``x - x``, ``zeros_like``): a sum of
    products with it as a factor is 0, also where the other factors are infinite or nan
    (``x * 0 = 0`` of README's value rules), at every size and on every path; else None."""
    for a in args:
        u = a.uniform
        if u is not None and G.is_const(u) and u.is_Number and u == 0:
            return G.ZERO
    return None


def union(deps: Sequence[np.ndarray], axis=None, keepdims: bool = False):
    """The bitwise union of dependency arrays: over all their elements (``axis=None``, one
    int) or, for one array, over ``axis``."""
    if axis is None:
        out = 0
        for d in deps:
            if d.size:
                out |= int(np.bitwise_or.reduce(d.reshape(-1), initial=0))
        return out
    (d,) = deps
    return np.asarray(np.bitwise_or.reduce(d, axis=axis, keepdims=keepdims, initial=0),
                      dtype=object)


def batch_size(args: Sequence, batched: Sequence[bool]) -> int:
    """The length of the leading (batch) axis of the batched arguments."""
    return next(int(a.shape[0]) for a, b in zip(args, batched) if b)


def aligned(t, batched: bool, rank: int):
    """A batched argument reshaped so that its batch axis leads a result of ``rank`` core
    axes under broadcasting (``(n,) + (1,) * k + core``); a shared one as it is."""
    core = tuple(t.shape[1:]) if batched else tuple(t.shape)
    if not batched or len(core) >= rank:
        return t
    return OPS["reshape"].bind(t, shape=(t.shape[0],) + (1,) * (rank - len(core)) + core)


def spread(t, batched: bool, n: int):
    """A batched argument as it is, a shared one repeated along a new leading axis of ``n``."""
    if batched:
        return t
    return OPS["broadcast_to"].bind(t, shape=(n,) + tuple(t.shape))


def axis_after_batch(axis: int, rank: int) -> int:
    """A core axis (possibly negative, of a tensor of ``rank`` core axes) in the batched
    tensor."""
    return (axis % rank if rank else 0) + 1


@functools.cache
def _atom_ufunc(name: str):
    """The graph's atom predicate ``name`` as a numpy ufunc over object arrays, made on first
    use (the graph loads with it)."""
    return np.frompyfunc(getattr(G, name), 1, 1)


def const_atom(atoms):
    """Elementwise: whether each atom is a constant."""
    return _atom_ufunc("is_const")(atoms)


def row_flags(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of an object array ``(n, k)`` of atoms: whether it holds a constant, and
    whether it holds a symbolic atom twice.

    >>> x, y = G.Leaf.new("x"), G.Leaf.new("y")
    >>> [f.tolist() for f in row_flags(np.array([[x, y], [x, x], [x, G.ONE]], dtype=object))]
    [[False, False, True], [False, True, False]]
    """
    n = rows.shape[0]
    const = np.asarray(const_atom(rows), dtype=bool).reshape(rows.shape) if rows.size else \
        np.zeros(rows.shape, dtype=bool)
    repeated = np.zeros(n, dtype=bool)
    for i in range(n):
        syms = [a for a, c in zip(rows[i].tolist(), const[i]) if not c]
        repeated[i] = len(set(syms)) < len(syms)
    return const.any(axis=1) if rows.shape[1] else np.zeros(n, dtype=bool), repeated


def irregular_rows(rows: np.ndarray) -> np.ndarray:
    """For each row of an object array ``(n, k)`` of atoms: whether it holds a constant or the
    same atom twice, where the builders fold or merge terms (``a + b + b`` is ``a + 2*b``)
    and so round differently from numpy's operation in order.

    >>> x, y = G.Leaf.new("x"), G.Leaf.new("y")
    >>> irregular_rows(np.array([[x, y], [x, x], [x, G.ONE]], dtype=object)).tolist()
    [False, True, True]
    """
    const, repeated = row_flags(rows)
    return const | repeated


def lanes(atoms: np.ndarray, axes: tuple) -> np.ndarray:
    """``atoms`` with ``axes`` moved last and flattened: one row per kept index."""
    keep = [i for i in range(atoms.ndim) if i not in axes]
    moved = np.transpose(atoms, keep + list(axes))
    size = int(np.prod([atoms.shape[i] for i in axes], dtype=np.int64))
    return moved.reshape(int(np.prod(moved.shape[:len(keep)], dtype=np.int64)), size)


def distinct_places(idx: np.ndarray) -> bool:
    """Whether the places ``idx`` (-1: none) are all different (a scatter that adds
    nothing up).

    >>> distinct_places(np.array([2, -1, 0, -1])), distinct_places(np.array([1, 1]))
    (True, False)
    """
    flat = idx.reshape(-1)
    kept = flat[flat >= 0] if (flat < 0).any() else flat
    if kept.size < 2 or bool((kept[1:] > kept[:-1]).all()):  # ascending (a slice's places)
        return True
    return int(np.bincount(kept).max()) <= 1  # (O(n): no sort)


def inverse_places(idx: np.ndarray, shape: tuple) -> np.ndarray:
    """For each place of a tensor of ``shape``, the element of ``idx`` scattered there (-1:
    none).

    >>> inverse_places(np.array([2, -1, 0]), (4,))
    array([ 2, -1,  0, -1])
    """
    inv = np.full(int(np.prod(shape, dtype=np.int64)), -1, dtype=np.int64)
    flat = idx.reshape(-1)
    keep = flat >= 0
    if keep.all():  # (every element lands: its positions are the shared ramp's)
        inv[flat] = flat_places(flat.shape)
    else:
        inv[flat[keep]] = np.flatnonzero(keep)
    inv.shape = tuple(shape)  # (its own array, not a view)
    return inv


def register_primitive(prim: Primitive) -> Primitive:
    OPS[prim.name] = prim
    return prim


def is_zero(atoms):
    """Elementwise: whether each atom is the constant 0 (a bool array, or a numpy bool for
    one atom).

    The graph's zero is one object, so most elements are told apart by identity in C; only
    the other numbers (a Float can be 0.0) are asked one by one. Element views of Jacobians
    and Hessians are mostly zeros, and this runs over every element of every argument.

    >>> x = G.Leaf.new("x")
    >>> is_zero(np.array([G.ZERO, x, G.number(0.0), G.ONE], dtype=object)).tolist()
    [True, False, True, False]
    """
    if isinstance(atoms, np.ndarray):
        flat = atoms.reshape(-1)
    else:
        flat = np.empty(1, dtype=object)
        flat[0] = atoms
    zero = _IS(flat, G.ZERO).astype(bool) if flat.size else np.zeros(0, dtype=bool)
    rest = np.flatnonzero(~zero)
    if rest.size:
        kinds = _TYPE(flat[rest])
        for kind in set(kinds.tolist()):
            if isinstance(kind, type) and issubclass(kind, sp.Number):
                pick = rest[kinds == kind]
                zero[pick] = [G.is_zero(c) for c in flat[pick].tolist()]
    if isinstance(atoms, np.ndarray) and atoms.ndim:
        return zero.reshape(atoms.shape)
    return zero[0]


_IS = np.frompyfunc(operator.is_, 2, 1)
_TYPE = np.frompyfunc(type, 1, 1)


def obj(shape: tuple, fill=None) -> np.ndarray:
    """An object array of ``shape`` filled with ``fill`` (default: the atom 0)."""
    out = np.empty(shape, dtype=object)
    out.fill(G.ZERO if fill is None else fill)
    return out


def as_obj(result, shape) -> np.ndarray:
    if isinstance(result, np.ndarray):
        return result
    out = np.empty(shape, dtype=object)
    out[()] = result
    return out


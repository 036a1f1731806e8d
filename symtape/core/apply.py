"""The binder: tensors, constants and the application of primitives.

A :class:`Tensor` holds a tensor-level node (see ``nodes.py``) -- the op application that
made it, whose element view of SymPy atoms gives the exact value of each element on demand --
and, when every leaf it depends on has a value, the numeric value computed eagerly with numpy
on whole arrays. Applying a primitive (:func:`apply`, what :meth:`Primitive.bind` calls)
converts the arguments, checks them, makes the result's node, evaluates it and records it on
the active tapes. The binder lives in the op table's package because applying an op builds
tensors and a tensor's operators apply ops; ``symtape/core/variables.py`` adds the leaves (variables,
symbols) on top.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from symtape.element.numeric import ERRSTATE, IGNORE, quiet
from symtape.core import node as N
from symtape.base import recording
from symtape.base.errors import (
    DTypeError, InvalidArgumentError, ShapeError, SymtapeError, UnboundLeafError,
)
from symtape.core.primitive import OPS, Aval, Primitive, Zero, const_atom
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
E = LazyModule("E", globals(), "symtape.element.evaluate")
G = LazyModule("G", globals(), "symtape.element.graph")
TN = LazyModule("TN", globals(), "symtape.core.notation")

_ids = itertools.count(1)


# --------------------------------------------------------------------------------------------
# What the op table lends the core
# --------------------------------------------------------------------------------------------
# The op table sits a level above the core and imports it, so the core never imports the
# table: it applies the table's primitives by name (each stanza registers itself in
# ``primitive.OPS`` when its module is imported) and takes the few other things its eager
# path needs when ``symtape.ops`` lends them (:func:`lend`).


def table_op(name: str) -> Primitive:
    """The primitive the op table registered as ``name``.

    >>> table_op("add")
    <primitive add>
    """
    op = OPS.get(name)
    if op is None:
        raise SymtapeError(f"no primitive {name!r} is registered: the op table registers its "
                           "primitives when symtape.ops is imported (import symtape first)")
    return op


#: What :func:`lend` was given, by name.
_LENT: dict = {}


def lend(elementwise: type, recipe_atom) -> None:
    """Take from the op table what the eager path needs beyond its primitives (``symtape.ops``
    calls this when it is imported): ``elementwise``, the class of template ops, whose
    results fuse into zero-branched selects (``fuse``, ``fusion``, ``makes_select``), and
    ``recipe_atom``, ``recipe -> (atom, stand-ins)`` of such a fused select."""
    _LENT.update(elementwise=elementwise, recipe_atom=recipe_atom)


def lent(name: str):
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


#: Formulas larger than this many atoms are shown in CSE form by ``latex()`` and ``str()``.
DISPLAY_LIMIT = 120


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` read-only: a fresh result is frozen in place, anything else copied."""
    if a.base is None:  # owns its data
        a.setflags(write=False)
        return a
    return a if not a.flags.writeable else _readonly(a)


_number = np.frompyfunc(lambda v: v if isinstance(v, sp.Basic) else G.number(v), 1, 1)


def _number_atoms(value: np.ndarray) -> np.ndarray:
    out = _number(value)
    if not isinstance(out, np.ndarray):
        arr = np.empty((), dtype=object)
        arr[()] = out
        return arr
    return out


class CSEForm:
    """A formula in common-subexpression form: ``replacements`` then ``exprs``.

    Iterates as ``(replacements, exprs)`` like ``sympy.cse``'s answer; prints one
    ``name = expression`` line per intermediate and the result last.
    """

    def __init__(self, replacements: list, exprs, shape: tuple) -> None:
        self.replacements = replacements
        self.exprs = exprs
        self.shape = shape

    def __iter__(self):
        return iter((self.replacements, self.exprs))

    def _result(self):
        return self.exprs if self.shape == () else sp.Array(self.exprs)

    def __str__(self) -> str:
        lines = [f"{s} = {e}" for s, e in self.replacements]
        return "\n".join(lines + [str(self._result())])

    __repr__ = __str__

    def latex(self) -> str:
        rows = [rf"{sp.latex(s)} &= {sp.latex(e)}" for s, e in self.replacements]
        rows.append(rf"\text{{result}} &= {sp.latex(self._result())}")
        return r"\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}"

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"


class Tensor:
    """An immutable tensor: a node (exact elements on demand) and, when known, its values.

    >>> import symtape as st
    >>> x = st.symbol("x", 2.0)
    >>> y = x ** 3 + 1
    >>> float(y), y.formula()
    (9.0, x**3 + 1)
    """

    __slots__ = ("_node", "_value_", "_dtype", "_id", "_name", "_fusion", "_epoch",
                 "__weakref__")
    _is_variable = False
    _is_symbol = False
    __array_priority__ = 100
    __array_ufunc__ = None  # numpy defers binary operators to the Tensor's reflected ones

    def __init__(self, node: N.Node, value, dtype, _id: int | None = None,
                 name: str | None = None) -> None:
        self._node = node
        self._value_ = value
        self._dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self._id = next(_ids) if _id is None else _id
        self._name = name
        self._fusion = None  # (select atom, {stand-in: value}) of a zero-branched select
        self._epoch = None  # see :func:`assigned`: None for values that read no leaf

    # -- basic properties ------------------------------------------------------------------
    @property
    def _value(self):
        return self._value_

    @property
    def _atoms(self) -> np.ndarray:
        """The element view: an object array of graph atoms (built on demand)."""
        return self._node.atoms()

    @property
    def shape(self) -> tuple:
        return self._node.shape

    def get_shape(self) -> tuple:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def size(self) -> int:
        return self._node.size

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def name(self) -> str | None:
        return self._name

    def ref(self):
        """A hashable reference to this tensor (tensors compare elementwise, so are not
        hashable themselves)."""
        return _Ref(self)

    def numpy(self):
        """The numeric value: a numpy scalar for 0-d tensors, else a new ndarray.

        Raises UnboundLeafError naming the leaves without a value.
        """
        value = self._value
        if value is None:
            names = ", ".join(self._node.unbound()) or "?"
            raise UnboundLeafError(
                f"this tensor depends on leaves with no value ({names}): give them values "
                "(st.symbol(name, value=...)) or evaluate it with st.compile")
        return value[()] if value.ndim == 0 else np.array(value, copy=True)

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.numpy())
        return out.astype(dtype) if dtype is not None else out

    # -- formulas --------------------------------------------------------------------------
    @property
    def symbols(self) -> np.ndarray:
        """The SymPy symbols of a leaf's elements, as its formulas write them (SymPy's own
        ``Symbol``: the same name and assumptions compare equal)."""
        return np.vectorize(lambda a: a.plain() if isinstance(a, G.Leaf) else a,
                            otypes=[object])(self._atoms) if self._atoms.size \
            else np.empty(self.shape, dtype=object)

    @property
    def expr(self):
        """The SymPy expression(s) in terms of leaf symbols (0-d: an Expr; else an object
        ndarray of Exprs)."""
        return self._expanded({})

    def _expanded(self, memo: dict):
        """:attr:`expr`, expanded through ``memo`` (:func:`graph.plain_memo`: in SymPy's
        own symbols)."""
        if self.ndim == 0:
            return G.expand(self._atoms[()], memo)
        out = np.empty(self.shape, dtype=object)
        for idx, a in np.ndenumerate(self._atoms):
            out[idx] = G.expand(a, memo)
        return out

    def formula(self, simplify: bool = False, notation: str = "auto",
                sympy_symbols: bool = True):
        """The exact formula with every intermediate substituted away.

        A SymPy expression for 0-d tensors, a ``sympy.Array`` otherwise; ``simplify=True``
        applies ``sympy.simplify`` to each element. Its symbols are SymPy's own
        (``Symbol(name, **assumptions)`` of ``st.symbol``), so it compares and simplifies
        against expressions users build (``sympy_symbols=False``: the graph's leaves, one
        per tensor element even where names repeat). Large tensors (more than 64 elements, or
        an element view of more than 4,096 atoms) are written in tensor notation
        (``tanh(W·x + b)``; a :class:`CSEForm` when nodes are shared); ``notation`` is
        ``'elements'`` or ``'tensor'`` to choose.

        >>> import symtape as st
        >>> x = st.symbol("x")
        >>> with st.GradientTape() as t:
        ...     y = st.nn.sigmoid(x)
        >>> t.gradient(y, x).formula(simplify=True)
        1/(4*cosh(x/2)**2)
        """
        if notation not in ("auto", "elements", "tensor"):
            raise InvalidArgumentError(f"formula: notation must be 'auto', 'elements' or "
                                       f"'tensor', got {notation!r}")
        if notation == "tensor" or notation == "auto" and TN.wants_notation(self._node):
            return self._tensor_notation(simplify)
        expr = self._expanded(G.plain_memo(self._atoms.flat) if sympy_symbols else {})
        if self.ndim == 0:
            return sp.simplify(expr) if simplify else expr
        if simplify:
            expr = np.vectorize(sp.simplify, otypes=[object])(expr)
        return sp.Array(expr.tolist(), self.shape)

    def cse(self) -> CSEForm:
        """The formula in CSE form, read off the DAG (shared nodes become intermediates)."""
        replacements, exprs = G.cse(list(self._atoms.flat))
        if self.ndim == 0:
            return CSEForm(replacements, exprs[0], ())
        return CSEForm(replacements, np.array(exprs, dtype=object).reshape(self.shape).tolist(),
                       self.shape)

    def _tensor_notation(self, simplify: bool = False):
        replacements, expr = TN.tensor_formula(self._node)
        if simplify:
            expr = sp.simplify(expr)
        return CSEForm(replacements, expr, ()) if replacements else expr

    def _display(self):
        if TN.wants_notation(self._node):
            return self._tensor_notation()
        if G.tree_size(self._atoms.flat) > DISPLAY_LIMIT:
            return self.cse()
        return self.formula(sympy_symbols=False)  # (the leaves' LaTeX: W_{0,1})

    def latex(self) -> str:
        """LaTeX of the formula (CSE form when it is large)."""
        shown = self._display()
        return shown.latex() if isinstance(shown, CSEForm) else sp.latex(shown)

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    # -- printing --------------------------------------------------------------------------
    def _body(self) -> str:
        if self._value is not None:
            return np.array2string(np.asarray(self._value), separator=" ") \
                if self.ndim else repr(self._value[()].item())
        return str(self._display())

    def __repr__(self) -> str:
        key = "numpy" if self._value is not None else "formula"
        return f"<st.Tensor: shape={self.shape}, dtype={self.dtype.name}, {key}={self._body()}>"

    def __str__(self) -> str:
        return f"st.Tensor({self._body()}, shape={self.shape}, dtype={self.dtype.name})"

    def __format__(self, spec: str) -> str:
        if spec and self.ndim == 0:
            return format(self.numpy(), spec)
        return str(self) if not spec else format(str(self), spec)

    # -- Python protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len is not well defined for a scalar (0-d) tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("cannot iterate over a scalar (0-d) tensor")
        for i in range(self.shape[0]):
            yield self[i]

    def _scalar(self, what: str):
        if self.size != 1:
            raise ValueError(f"{what}() of a tensor with {self.size} elements is ambiguous; "
                             "reduce it first")
        return self.numpy().reshape(()).item() if self.ndim else self.numpy().item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    __hash__ = None  # type: ignore[assignment] - elementwise == makes tensors unhashable

    def __getitem__(self, key):
        return table_op("getitem").bind(self, key=_normalize_key(key))

    # -- operators -------------------------------------------------------------------------
    def __add__(self, o):
        return table_op("add").bind(self, o)

    def __radd__(self, o):
        return table_op("add").bind(o, self)

    def __sub__(self, o):
        return table_op("subtract").bind(self, o)

    def __rsub__(self, o):
        return table_op("subtract").bind(o, self)

    def __mul__(self, o):
        return table_op("multiply").bind(self, o)

    def __rmul__(self, o):
        return table_op("multiply").bind(o, self)

    def __truediv__(self, o):
        return _truediv(self, o)

    def __rtruediv__(self, o):
        return _truediv(o, self)

    def __floordiv__(self, o):
        return table_op("floordiv").bind(self, o)

    def __rfloordiv__(self, o):
        return table_op("floordiv").bind(o, self)

    def __mod__(self, o):
        return table_op("floormod").bind(self, o)

    def __rmod__(self, o):
        return table_op("floormod").bind(o, self)

    def __pow__(self, o):
        return table_op("pow").bind(self, o)

    def __rpow__(self, o):
        return table_op("pow").bind(o, self)

    def __matmul__(self, o):
        return table_op("matmul").bind(self, o)

    def __rmatmul__(self, o):
        return table_op("matmul").bind(o, self)

    def __neg__(self):
        return table_op("negative").bind(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return table_op("abs").bind(self)

    def __lt__(self, o):
        return table_op("less").bind(self, o)

    def __le__(self, o):
        return table_op("less_equal").bind(self, o)

    def __gt__(self, o):
        return table_op("greater").bind(self, o)

    def __ge__(self, o):
        return table_op("greater_equal").bind(self, o)

    def __eq__(self, o):  # type: ignore[override]
        if o is None:
            return False
        return table_op("equal").bind(self, o)

    def __ne__(self, o):  # type: ignore[override]
        if o is None:
            return True
        return table_op("not_equal").bind(self, o)

    def __and__(self, o):
        return table_op("logical_and").bind(self, o)

    def __rand__(self, o):
        return table_op("logical_and").bind(o, self)

    def __or__(self, o):
        return table_op("logical_or").bind(self, o)

    def __ror__(self, o):
        return table_op("logical_or").bind(o, self)

    def __invert__(self):
        return table_op("logical_not").bind(self)


class _Ref:
    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor

    def deref(self) -> Tensor:
        return self.tensor

    def __hash__(self) -> int:
        return hash(self.tensor._id)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Ref) and other.tensor._id == self.tensor._id


def _truediv(a, b):
    # TF: true division of integers gives float64
    a, b = (convert_to_tensor(v) if isinstance(v, Tensor) else v for v in (a, b))
    kinds = [(v.dtype if isinstance(v, Tensor) else np.asarray(v).dtype).kind for v in (a, b)]
    if all(k in "iub" for k in kinds):
        a, b = (table_op("cast").bind(convert_to_tensor(v), dtype=np.float64) for v in (a, b))
    return table_op("divide").bind(a, b)


def _normalize_key(key):
    """Tensor indices become numpy arrays (their values); the rest stays numpy indexing."""
    if isinstance(key, tuple):
        return tuple(_normalize_key(k) for k in key)
    if isinstance(key, Tensor):
        v = np.asarray(key.numpy())
        if v.dtype.kind not in "iub":
            raise TypeError(f"tensor index must be integer or bool, not {v.dtype}")
        return v.item() if v.ndim == 0 and v.dtype.kind in "iu" else v
    if isinstance(key, list):
        return np.asarray(key)
    return key


def _const_node(exact: np.ndarray, dtype) -> N.Node:
    return N.const(exact, dtype, lambda: _number_atoms(exact))


# --------------------------------------------------------------------------------------------
# Constants and conversion
# --------------------------------------------------------------------------------------------


def _clean_name(name: str) -> str:
    name = name.split(":")[0]
    return name or "v"


def _infer_dtype(value) -> np.dtype:
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.integer):
        return np.dtype(np.int32)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return value.dtype
    if isinstance(value, sp.Basic):
        return np.dtype(np.int32) if value.is_Integer else np.dtype(np.float64)
    arr = np.asarray(value)
    if arr.dtype.kind == "i":
        return np.dtype(np.int32)
    if arr.dtype.kind in "fb":
        return np.dtype(np.float64) if arr.dtype.kind == "f" else arr.dtype
    return arr.dtype


def _value_of(value, dtype, what: str) -> np.ndarray:
    """A numpy array of ``value`` in ``dtype`` (inferred when None), checked."""
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, sp.Basic):
        value = G.const_value(value) if value.is_number else value
    target = np.dtype(dtype) if dtype is not None else _infer_dtype(value)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"{what}: cannot convert {value!r} to a tensor ({e})") \
            from None
    if arr.dtype == object or arr.dtype.kind not in "fiub":
        raise DTypeError(f"{what}: cannot convert a value of type {type(value).__name__} "
                         f"(dtype {arr.dtype}) to a numeric tensor")
    if target.kind in "iu" and arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise DTypeError(f"{what}: cannot convert non-integer values to {target.name}")
    if target.kind == "b" and arr.dtype.kind != "b":
        raise DTypeError(f"{what}: cannot convert {arr.dtype.name} values to bool")
    if target.kind not in "fiub":
        raise DTypeError(f"{what}: unsupported dtype {target}")
    return arr.astype(target)


def constant(value, dtype=None, shape=None, name: str | None = None) -> Tensor:
    """A constant tensor: Python numbers, nested lists, numpy arrays (float64 by default for
    floats; Python ints give int32 as in TensorFlow).

    >>> import symtape as st
    >>> st.constant([1.0, 2.0]).numpy()
    array([1., 2.])
    """
    if isinstance(value, Tensor) and dtype is None and shape is None:
        value = value.numpy()
    arr = _value_of(value, dtype, "st.constant")
    if shape is not None:
        shape = tuple(int(n) for n in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        try:
            arr = np.broadcast_to(arr, shape) if arr.size != 1 else np.full(shape, arr.reshape(
                ())[()], dtype=arr.dtype)
        except ValueError:
            raise ShapeError(f"st.constant: value of shape {arr.shape} does not fit shape "
                             f"{shape}") from None
    src = np.asarray(value) if not isinstance(value, Tensor) and shape is None else arr
    exact = src if (src.dtype.kind in "iub" and arr.dtype.kind == "f" and src.shape ==
                    arr.shape) else arr
    node = _const_node(exact, arr.dtype)
    node.label = _clean_name(name) if name else None
    return Tensor(node, _frozen(arr), arr.dtype, name=name)


def adopt(value) -> Tensor:
    """A constant tensor of a fresh numeric array nobody else holds (a compiled function's
    result, or a read-only view of one), frozen in place rather than copied; anything else
    as :func:`constant`.

    >>> a = np.arange(3.0)
    >>> t = adopt(a)
    >>> t._value is a, a.flags.writeable, t.numpy().tolist()
    (True, False, [0.0, 1.0, 2.0])
    >>> adopt(a.reshape(3, 1))._value.base is a
    True
    """
    if type(value) is np.ndarray and value.dtype.kind in "fb" and (
            value.flags.owndata or not value.flags.writeable):
        node = _const_node(value, value.dtype)
        return Tensor(node, _frozen(value), value.dtype)
    return constant(value)


def convert_to_tensor(value, dtype=None, name=None) -> Tensor:
    """``value`` as a tensor (tensors pass through; variables give a snapshot).

    >>> import symtape as st
    >>> st.convert_to_tensor([1, 2]).dtype
    dtype('int32')
    """
    if isinstance(value, Tensor):
        t = _read(value)
        if dtype is not None and t.dtype != np.dtype(dtype):
            raise DTypeError(f"convert_to_tensor: tensor has dtype {t.dtype.name}, requested "
                             f"{np.dtype(dtype).name}")
        return t
    if isinstance(value, Zero):
        return constant(np.zeros(value.shape, value.dtype))
    return constant(value, dtype=dtype, name=name)


def is_tensor(x) -> bool:
    """True for tensors and variables.

    >>> import symtape as st
    >>> st.is_tensor(st.Variable(1.0)), st.is_tensor(1.0)
    (True, False)
    """
    return isinstance(x, Tensor)


def _read(t: Tensor) -> Tensor:
    if t._is_variable:
        recording.accessed(t)
        return t.read()
    if t._is_symbol:
        recording.accessed(t)
    return t


#: Constants made for Python numbers mixed with tensors, by (type, value, dtype): a training
#: loop's ``lr * g`` and ``x * 2.0`` convert each number once. These tensors never leave the
#: binder except as recorded inputs, so nothing watches or promotes them.
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
            out.append(_read(a))
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
            out.append(_read(a))
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
        return Tensor(_const_node(exact, dtype), _frozen(arr.astype(dtype)), dtype)

    return _array_constant(arr, np.dtype(dtype), make, exact=True) if cache else make()


def atom_constant(atoms: np.ndarray, value: np.ndarray, dtype) -> Tensor:
    """A constant whose exact elements are the SymPy numbers ``atoms`` (saved models)."""
    return Tensor(N.const(atoms, dtype, lambda: atoms), _readonly(value), dtype)


def view(make, shape: tuple, value, dtype, inputs: tuple = ()) -> Tensor:
    """A tensor whose element view ``make()`` builds on demand from the views of the tensors
    ``inputs`` (custom functions' aliased outputs)."""
    node = N.lazy(tuple(shape), dtype, tuple(t._node for t in inputs), make)
    out = Tensor(node, value, dtype)
    epochs = [t._epoch for t in inputs if t._epoch is not None]
    out._epoch = min(epochs) if epochs else None
    return out


def _sympy_constant(a: sp.Basic, dtype) -> Tensor:
    if not a.is_number:
        raise DTypeError(f"a SymPy expression with free symbols ({a}) is not a constant; use "
                         "st.symbol for symbols")
    dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    exact = np.empty((), dtype=object)
    exact[()] = a
    return Tensor(_const_node(exact, dtype), _readonly(np.asarray(G.const_value(a),
                                                                  dtype=dtype)), dtype)


def _settle(value: np.ndarray, atoms: np.ndarray, inputs, unsettled,
            exact_elsewhere: bool) -> np.ndarray:
    """Eager values that agree with the element DAG, hence with formulas and compiled code.

    numpy computes each op on whole arrays; the DAG folds identities exactly (``x * 0 = 0``,
    ``x - x = 0``, a select's zero branch times anything is zero, ``x + 0 = x``), and where
    the two can differ the DAG's value is taken:
    - an element whose atom folded to a constant takes the constant's value;
    - an element the op marks ``unsettled`` (and, unless the op is ``exact_elsewhere``, a
      zero, nan or infinite one) is evaluated through its definition, reading the inputs'
      elements (their values already settled the same way, so one level of definitions is
      enough): ``x + 0`` folded to
      ``x`` keeps the sign of a zero ``x``, a select's zero branch times ``1/x`` is 0 where
      numpy gives nan, ``-g*x/x**2`` is computed as the ``-g/x`` it folded to.
    """
    if atoms.size == 0 or value.dtype.kind != "f":
        return value
    flat_atoms = atoms.reshape(-1)
    flat = np.array(value, copy=True).reshape(-1)
    const = const_atom(flat_atoms).astype(bool)
    for i in np.flatnonzero(const):
        flat[i] = G.const_value(flat_atoms[i])
    odd = np.zeros(flat.shape, dtype=bool) if unsettled is None else np.reshape(unsettled, -1)
    if not exact_elsewhere:
        odd = odd | (flat == 0) | ~np.isfinite(flat)
    odd = np.flatnonzero(~const & odd)
    if odd.size:
        known = _known_values(inputs)
        for i, v in zip(odd, E.evaluate_from([flat_atoms[i] for i in odd], known)):
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
        self.memo: dict = {}  # the op's own cache for this signature (settle_folds)


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
    arrays (see :func:`_settle`), and its fusion (a zero-branched select later elementwise
    ops fold into), or None. ``stale``: an argument was computed before a leaf's value was
    assigned (see :func:`assigned`), so the element DAG's folds are not taken."""
    if plan.alias is not None:
        t = tensors[plan.alias]
        return t._value, t._fusion
    if plan.uniform is not None and plan.floating and not stale:
        return _frozen(np.full(plan.shape, G.const_value(plan.uniform), dtype=plan.dtype)), None
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
    settles = floating and not stale and node.small()
    if settles and prim.settles_alone and not (plan.regular or plan.constant):
        settled = prim.settle_folds(None, values, [t._node for t in tensors], plan.params,
                                    plan.memo)
        if settled is not None:
            value, folds, regular, fid = settled
            node.settle(regular, None, folds, fid)
            return _frozen(np.asarray(value, dtype=dtype)), None
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
        return _frozen(value), fusion
    if plan.constant:
        value = value + 0.0  # constants have no -0: -0 + 0 is +0 (the dtype stays)
    elif settles:
        args = [t._node for t in tensors]
        settled = None if prim.settles_alone else prim.settle_folds(value, values, args,
                                                                     plan.params, plan.memo)
        if settled is not None:
            value, folds, regular, fid = settled
            node.settle(regular, None, folds, fid)
            return _frozen(value), fusion
        atoms = [t._atoms for t in tensors]
        unsettled = prim.unsettled(atoms, plan.params, plan.shape, args)
        value = _settle(value, node.atoms(), tensors, unsettled,
                        getattr(prim, "exact_elsewhere", False))
    return _frozen(value), fusion


def _moved(v: np.ndarray, where: np.ndarray, shape: tuple) -> np.ndarray:
    """``v`` (broadcast to ``shape``) read at the flat places ``where`` (zero or False at
    -1): an argument's values where a moving op puts them (``gather_flat``'s value)."""
    return table_op("gather_flat").numeric([np.broadcast_to(v, shape)], {"idx": where})


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
def _absorbing_program(recipe: tuple):
    """A numpy program of a fused select's arguments giving 1 where it is structurally zero
    (:func:`graph.absorbing`)."""
    atom, stand_ins = lent("recipe_atom")(recipe)
    return E.program([G.absorbing(atom)], stand_ins, quiet=False)


def _live(t: Tensor) -> np.ndarray:
    """1.0 where ``t``'s value is not a structural zero, 0.0 where it is (its fusion's)."""
    if t._fusion is None:
        return np.ones(t.shape)
    recipe, flat = t._fusion
    zero = np.asarray(_absorbing_program(recipe)(*flat)[0]) == 1
    return np.broadcast_to(np.where(zero, 0.0, 1.0), t.shape)


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
        return recipe, tuple(_moved(v, maps[k], tensors[k].shape) for v in flat)
    parts = []  # (condition, (recipe or None, flat)) of each source, then the sums
    for k in sources:
        m, t = maps[k], tensors[k]
        if t._fusion is not None:
            recipe, flat = t._fusion
            parts.append((m >= 0, (recipe, tuple(_moved(v, m, t.shape) for v in flat))))
        else:
            parts.append((m >= 0, (None, (_moved(t._value, m, t.shape),))))
    if own is not None:
        parts.append((own, (None, (value,))))
    out = parts[-1][1]  # the parts cover all but the zeros: the last one is the rest
    for cond, part in reversed(parts[:-1]):
        out = _where_recipe(cond, part, out)
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
        out._fusion = fusion
    return out

"""Tensors and constants.

A :class:`Tensor` holds a tensor-level node (see ``node.py``) -- the op application that
made it, whose element view of SymPy atoms gives the exact value of each element on demand --
and, when every leaf it depends on has a value, its numeric value (computed by
``apply.py``, which applies primitives to tensors). Its operators apply the op table's
primitives by name (:func:`table_op`): the table is a level above the core and registers
them when it is imported. Constants and the conversion of values to tensors live here too;
``variables.py`` adds the leaves (variables, symbols).
"""

from __future__ import annotations

import itertools

import numpy as np

from symtape.core import node as N
from symtape.base import recording
from symtape.base.aligned import fresh_aligned
from symtape.base.errors import (
    DTypeError, InvalidArgumentError, ShapeError, SymtapeError, UnboundLeafError,
)
from symtape.core.primitive import OPS, Primitive, Zero
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")
TN = LazyModule("TN", globals(), "symtape.core.notation")

_ids = itertools.count(1)


# The op table sits a level above the core and imports it, so the core never imports the
# table: it applies the table's primitives by name (each stanza registers itself in
# ``primitive.OPS`` when its module is imported).


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


#: Formulas larger than this many atoms are shown in CSE form by ``latex()`` and ``str()``.
DISPLAY_LIMIT = 120


def read_only_copy(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` (its owner may still write ``a``).

    >>> a = np.zeros(2)
    >>> b = read_only_copy(a)
    >>> b is a, b.flags.writeable
    (False, False)
    """
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` read-only: a fresh result is frozen in place, anything else copied.

    >>> a = np.zeros(2)
    >>> read_only(a) is a, a.flags.writeable, read_only(a[:1]) is a[:1]
    (True, False, False)
    """
    if a.base is None:  # owns its data
        a.setflags(write=False)
        return a
    return a if not a.flags.writeable else read_only_copy(a)


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


#: NumPy ufuncs that a binary operator with a non-tensor left operand calls, and the
#: tensor's reflected operator that computes ``ufunc(left, tensor)``.
_REFLECTED = {
    np.add: "__radd__", np.subtract: "__rsub__", np.multiply: "__rmul__",
    np.true_divide: "__rtruediv__", np.floor_divide: "__rfloordiv__", np.remainder: "__rmod__",
    np.power: "__rpow__", np.matmul: "__rmatmul__", np.bitwise_and: "__rand__",
    np.bitwise_or: "__ror__", np.less: "__gt__", np.less_equal: "__ge__",
    np.greater: "__lt__", np.greater_equal: "__le__", np.equal: "__eq__",
    np.not_equal: "__ne__",
}


def _numpy_operand(x, ufunc):
    """``x`` as numpy computes on it: a tensor's value (an error naming the st function to
    use when it has none, as inside a trace), anything else as given."""
    if not isinstance(x, Tensor):
        return x
    if x._value is None:
        name = ufunc.__name__
        hint = f"st.{name}" if name in OPS else "the st function of the same name"
        raise UnboundLeafError(
            f"np.{name} cannot compute on a tensor without a value (inside st.function or "
            f"st.compile, or of a symbol with no value): use {hint}, which records, or "
            f"np.{name}(t.numpy()) on an eager tensor")
    return np.asarray(x._value)


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

    def __init__(self, node: N.Node, value, dtype, _id: int | None = None,
                 name: str | None = None) -> None:
        self._node = node
        self._value_ = value
        self._dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self._id = next(_ids) if _id is None else _id
        self._name = name
        self._fusion = None  # (select atom, {stand-in: value}) of a zero-branched select
        self._epoch = None  # see ``apply.assigned``: None for values that read no leaf

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

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs on tensors, as on TensorFlow's eager tensors: ``np.sin(t)``,
        ``np.maximum.reduce(t)``, ``np.max(t)`` compute on the values and return plain numpy
        results (nothing is recorded). A binary operator with an array or numpy scalar on
        the left (``a * t``, ``np.float64(2) < t``) is the tensor's reflected operator, so it
        records as ``t.__rmul__(a)`` does. On a tensor without a value (inside a trace)
        only those operators work; other ufuncs raise, naming the st function to use.

        >>> import numpy as np, symtape as st
        >>> t = st.constant([0.0, -2.0])
        >>> np.abs(t), np.max(t), type(np.ones(2) * t).__name__
        (array([0., 2.]), np.float64(0.0), 'Tensor')
        """
        reflected = _REFLECTED.get(ufunc)
        if reflected is not None and method == "__call__" and len(inputs) == 2 and \
                not kwargs and inputs[1] is self and not isinstance(inputs[0], Tensor):
            return getattr(self, reflected)(inputs[0])
        if kwargs.get("out") is not None:
            kwargs["out"] = tuple(_numpy_operand(o, ufunc) for o in kwargs["out"])
        args = [_numpy_operand(x, ufunc) for x in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

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
        return true_divide(self, o)

    def __rtruediv__(self, o):
        return true_divide(o, self)

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


def true_divide(a, b) -> Tensor:
    """``a / b`` as TensorFlow divides: integers (and bools) give float64.

    >>> true_divide(constant(3), 2).numpy()
    np.float64(1.5)
    """
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


def const_node(exact: np.ndarray, dtype) -> N.Node:
    """The node of a constant whose exact elements are the numbers ``exact`` (its values in
    ``dtype`` are the tensor's)."""
    return N.const(exact, dtype, lambda: _number_atoms(exact))


# --------------------------------------------------------------------------------------------
# Constants and conversion
# --------------------------------------------------------------------------------------------


def clean_name(name: str) -> str:
    """A tensor's name as its leaves and nodes are labelled: without TensorFlow's output
    index, ``'v'`` when empty.

    >>> clean_name("w:0"), clean_name("")
    ('w', 'v')
    """
    name = name.split(":")[0]
    return name or "v"


#: The default float of Python numbers (``st.config.set_floatx``): float64, for exact
#: physics; float32 for networks as TensorFlow makes them.
_FLOATX = {"dtype": np.dtype(np.float64)}


def floatx() -> np.dtype:
    """The dtype Python floats (and float creation functions given no dtype) become.

    >>> floatx()
    dtype('float64')
    """
    return _FLOATX["dtype"]


def set_floatx(dtype) -> None:
    """Sets :func:`floatx` to ``"float32"`` or ``"float64"``.

    >>> set_floatx("float32"); constant(0.5).dtype
    dtype('float32')
    >>> set_floatx("float64")
    """
    try:
        got = np.dtype(dtype) if dtype is not None else None  # (np.dtype(None) is float64)
    except TypeError:
        got = None
    if got is None or got.name not in ("float32", "float64"):
        raise InvalidArgumentError(f"st.config.set_floatx: dtype must be 'float32' or "
                                   f"'float64', got {dtype!r}")
    _FLOATX["dtype"] = got


def _infer_dtype(value) -> np.dtype:
    # numpy values keep their dtype (as tf.constant keeps them); Python floats are floatx
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.integer):
        return np.dtype(np.int32)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return value.dtype
    if isinstance(value, sp.Basic):
        return np.dtype(np.int32) if value.is_Integer else floatx()
    arr = np.asarray(value)
    if arr.dtype.kind == "i":
        return np.dtype(np.int32)
    if arr.dtype.kind in "fb":
        return floatx() if arr.dtype.kind == "f" else arr.dtype
    return arr.dtype


def checked_array(value, dtype, what: str) -> np.ndarray:
    """A numpy array of ``value`` in ``dtype`` (inferred when None: Python ints are int32,
    floats :func:`floatx`, numpy values keep theirs), checked; errors name ``what``.

    >>> checked_array([1, 2], None, "st.constant").dtype
    dtype('int32')
    >>> checked_array([1.5], "int32", "st.constant")
    Traceback (most recent call last):
    symtape.base.errors.DTypeError: st.constant: cannot convert non-integer values to int32
    """
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
    if target.kind == "f" and arr.dtype.kind == "f" and target.itemsize < arr.itemsize:
        with np.errstate(over="ignore"):  # beyond float32's range: its infinity, as in TF
            return arr.astype(target)
    if target.kind == "b" and arr.dtype.kind != "b":
        raise DTypeError(f"{what}: cannot convert {arr.dtype.name} values to bool")
    if target.kind not in "fiub":
        raise DTypeError(f"{what}: unsupported dtype {target}")
    return arr.astype(target)


def constant(value, dtype=None, shape=None, name: str | None = None) -> Tensor:
    """A constant tensor: Python numbers, nested lists, numpy arrays (Python floats give
    ``st.config.floatx()``, float64 unless set; numpy arrays keep their dtype; Python ints
    give int32 as in TensorFlow).

    >>> import symtape as st
    >>> st.constant([1.0, 2.0]).numpy()
    array([1., 2.])
    """
    if isinstance(value, Tensor) and dtype is None and shape is None:
        value = value.numpy()
    arr = checked_array(value, dtype, "st.constant")
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
    node = const_node(exact, arr.dtype)
    node.label = clean_name(name) if name else None
    return Tensor(node, read_only(arr), arr.dtype, name=name)


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
    if isinstance(value, (np.floating, np.bool_)):  # (a 0-d result read as a scalar)
        value = np.asarray(value)
    if type(value) is np.ndarray and value.dtype.kind in "fb" and (
            value.flags.owndata or not value.flags.writeable or fresh_aligned(value)):
        value.flags.writeable = False
        node = const_node(value, value.dtype)
        return Tensor(node, value, value.dtype)
    return constant(value)


def convert_to_tensor(value, dtype=None, name=None) -> Tensor:
    """``value`` as a tensor (tensors pass through; variables give a snapshot).

    >>> import symtape as st
    >>> st.convert_to_tensor([1, 2]).dtype
    dtype('int32')
    """
    if isinstance(value, Tensor):
        t = read_operand(value)
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


def read_operand(t: Tensor) -> Tensor:
    """The tensor an op reads for ``t``: a variable's snapshot of its current value, anything
    else itself; reading a variable or a symbol is recorded on the active tapes.

    >>> import symtape as st
    >>> v = st.Variable(1.0)
    >>> type(read_operand(v)).__name__, float(read_operand(v))
    ('Tensor', 1.0)
    """
    if t._is_variable:
        recording.accessed(t)
        return t.read()
    if t._is_symbol:
        recording.accessed(t)
    return t


def atom_constant(atoms: np.ndarray, value: np.ndarray, dtype) -> Tensor:
    """A constant whose exact elements are the SymPy numbers ``atoms`` (saved models)."""
    return Tensor(N.const(atoms, dtype, lambda: atoms), read_only_copy(value), dtype)


def view(make, shape: tuple, value, dtype, inputs: tuple = ()) -> Tensor:
    """A tensor whose element view ``make()`` builds on demand from the views of the tensors
    ``inputs`` (custom functions' aliased outputs)."""
    node = N.lazy(tuple(shape), dtype, tuple(t._node for t in inputs), make)
    out = Tensor(node, value, dtype)
    epochs = [t._epoch for t in inputs if t._epoch is not None]
    out._epoch = min(epochs) if epochs else None
    return out

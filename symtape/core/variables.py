"""Leaves: variables, symbols and promoted constants, over the tensors of ``tensor.py``.

A :class:`Variable` is a named leaf whose value ``assign*`` change; a :class:`SymbolTensor`
is a leaf meant for formulas, with an optional bound value. Both hold a leaf node (see
``node.py``) over a value store their atoms read. :class:`Tensor` and constants live in
``tensor.py``, the application of primitives in ``apply.py``; this module re-exports the
tensor API.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from symtape.core import node as N
from symtape.base import recording
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError
from symtape.core.apply import assigned, clock, exact_constant
from symtape.core.tensor import (
    CSEForm, Tensor, atom_constant, checked_array, clean_name, constant, convert_to_tensor,
    is_tensor, read_only, read_only_copy, read_operand, table_op, view,
)
from symtape.core.primitive import Primitive
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["Tensor", "Variable", "SymbolTensor", "constant", "symbol", "convert_to_tensor",
           "is_tensor", "CSEForm", "promote", "shape_arg", "exact_constant", "atom_constant",
           "view", "leaf_node"]

_variable_ids = itertools.count(1)
_leaf_names = itertools.count(1)


class _Store:
    """The holder of a leaf tensor's current numeric value (read by its leaves)."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value


def shape_arg(shape, what: str) -> tuple:
    """A shape argument (list, tuple, int or tensor) as a tuple of ints."""
    if isinstance(shape, Tensor):
        shape = np.asarray(shape.numpy()).tolist()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(int(s.numpy()) if isinstance(s, Tensor) else int(s) for s in shape)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what}: shape must be a list of ints, got {shape!r}") \
            from None


# --------------------------------------------------------------------------------------------
# Leaves: variables, symbols, promoted constants
# --------------------------------------------------------------------------------------------


def _leaf_atoms(name: str, shape: tuple, store: _Store, assumptions: dict | None = None
                ) -> np.ndarray:
    atoms = np.empty(shape, dtype=object)
    base = sp.latex(sp.Symbol(name)) if shape else ""
    for flat, idx in enumerate(np.ndindex(*shape)):
        if not idx:
            atoms[idx] = G.Leaf.new(name, store, 0, assumptions=assumptions)
            continue
        label = "_".join(map(str, idx))
        latex = rf"{base}_{{{','.join(map(str, idx))}}}"
        atoms[idx] = G.Leaf.new(f"{name}_{label}", store, flat, latex, assumptions)
    return atoms


def leaf_node(name: str, shape: tuple, dtype, store, assumptions: dict | None = None
              ) -> N.Node:
    """A leaf over ``store`` (whose ``value`` its atoms read) whose elements are named
    ``name``, ``name_i_j``, ... in formulas (variables, symbols, a loop body's inputs)."""
    node = N.leaf(shape, dtype, store, lambda: _leaf_atoms(name, shape, store, assumptions))
    node.label = name
    return node


def unpickled_variable(value: np.ndarray, trainable: bool, name: str, dtype: str) -> "Variable":
    """The variable :meth:`Variable.__reduce__` pickled (its full name, scopes included)."""
    v = Variable(value, trainable=trainable, name=name.rsplit("/", 1)[-1], dtype=dtype)
    v._name = name
    return v


class Variable(Tensor):
    """A named leaf with a current value that ``assign*`` change (as ``tf.Variable``).

    Reading it in an op takes a snapshot of its value; tapes watch trainable variables they
    see read.

    >>> import symtape as st
    >>> v = st.Variable(2.0, name="v")
    >>> _ = v.assign_add(1.0)
    >>> float(v), v.symbols[()]
    (3.0, v)
    """

    __slots__ = ("_trainable", "_store", "_order", "_snapshot")
    _is_variable = True

    def __init__(self, initial_value=None, trainable: bool = True, name: str | None = None,
                 dtype=None, shape=None) -> None:
        if initial_value is None:
            raise InvalidArgumentError("st.Variable: initial_value is required")
        if callable(initial_value) and not isinstance(initial_value, Tensor):
            with recording.init_scope():  # (inside st.function: drawn once, as eagerly)
                initial_value = initial_value()
        value = checked_array(initial_value, dtype, "st.Variable initial_value")
        self._store = _Store(read_only(value))
        self._trainable = bool(trainable)
        self._order = next(_variable_ids)
        label = name if name else f"v{self._order}"
        node = leaf_node(clean_name(label), value.shape, value.dtype, self._store)
        super().__init__(node, None, value.dtype, name=_SCOPES.prefix() + (name or "Variable"))
        self._snapshot = None

    @property
    def _value(self):
        return self._store.value

    def __reduce__(self):
        """Pickles as its current value, trainability, name and dtype (a new leaf when
        unpickled; variables shared inside one pickle stay shared).

        >>> import pickle, symtape as st
        >>> v = pickle.loads(pickle.dumps(st.Variable([1.0, 2.0], name="w")))
        >>> v.name, v.numpy(), v.trainable
        ('w:0', array([1., 2.]), True)
        """
        return (unpickled_variable, (np.array(self._store.value), self._trainable,
                                     self._name, self._dtype.name))

    @property
    def name(self) -> str:
        return f"{self._name}:0"

    @property
    def trainable(self) -> bool:
        return self._trainable

    def read(self) -> Tensor:
        """A snapshot of the current value (same identity for tapes); while a function is
        traced for compilation, the value it last assigned."""
        trace = recording.current_trace()
        if trace is not None and self._id in trace.assigned:
            return trace.assigned[self._id][1]
        value = self._store.value
        snapshot = self._snapshot
        if snapshot is None or snapshot._value_ is not value:  # one per value assigned
            snapshot = self._snapshot = Tensor(self._node, value, self._dtype, _id=self._id)
        snapshot._epoch = clock()  # its leaf holds its value now
        return snapshot

    def value(self) -> Tensor:
        recording.accessed(self)
        return self.read()

    def _assign_traced(self, value, op: str) -> Variable:
        """Inside a traced function an assignment is an output, written back after each call."""
        trace = recording.current_trace()
        t = read_operand(value) if isinstance(value, Tensor) else constant(value, dtype=self._dtype)
        if t.shape != self.shape:
            raise ShapeError(f"Variable.{op}: value of shape {t.shape} does not match the "
                             f"variable's shape {self.shape}")
        if t.dtype != self._dtype:
            t = table_op("cast").bind(t, dtype=self._dtype)
        trace.variables.setdefault(self._id, self)
        trace.assigned[self._id] = (self, t)
        return self

    def _assign(self, value, op: str) -> Variable:
        if recording.current_trace() is not None:
            return self._assign_traced(value, op)
        new = checked_array(value, self._dtype, f"Variable.{op}")
        if new.shape != self.shape:
            raise ShapeError(f"Variable.{op}: value of shape {new.shape} does not match the "
                             f"variable's shape {self.shape}")
        self._set(read_only(new.astype(self._dtype, copy=False)))
        return self

    def _set(self, value: np.ndarray) -> None:
        """The new value of the leaf (every assignment goes through here: see
        ``apply.assigned``)."""
        assigned()
        self._store.value = value

    def _adopt(self, value: np.ndarray) -> None:
        """Take ``value`` -- a fresh array of this shape and dtype that nothing else holds (a
        compiled step's result) -- as the value, without copying it."""
        value.flags.writeable = False
        self._set(value)

    def assign(self, value, use_locking=None, name=None, read_value=True) -> Variable:
        """Set the value."""
        return self._assign(value, "assign")

    def _update(self, delta, prim: Primitive, op: str) -> Variable:
        if recording.current_trace() is not None:
            return self._assign_traced(prim.bind(read_operand(self), delta), op)
        if isinstance(delta, Tensor) and delta._value is not None and delta.dtype == self._dtype:
            step = delta._value  # read-only already: no copy
        else:
            step = checked_array(delta, self._dtype, f"Variable.{op}")
        new = np.asarray(prim.numeric([self._store.value, step], {}))
        if new.shape != self.shape:
            raise ShapeError(f"Variable.{op}: value of shape {new.shape} does not match the "
                             f"variable's shape {self.shape}")
        self._set(read_only(new.astype(self._dtype, copy=False)))
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True) -> Variable:
        """Add ``delta`` to the value."""
        return self._update(delta, table_op("add"), "assign_add")

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True) -> Variable:
        """Subtract ``delta`` from the value."""
        return self._update(delta, table_op("subtract"), "assign_sub")

    def __repr__(self) -> str:
        return (f"<st.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, "
                f"numpy={self._body()}>")

    __str__ = __repr__


class _Scopes(threading.local):
    """This thread's stack of name scopes (full names, each ending in ``/``)."""

    def __init__(self) -> None:
        self.stack: list[str] = []

    def prefix(self) -> str:
        return self.stack[-1] if self.stack else ""


_SCOPES = _Scopes()


class name_scope:  # noqa: N801 - TensorFlow's name
    """A context manager naming the variables created inside ``scope/name`` (as
    ``tf.name_scope``); scopes nest, and a name ending in ``/`` is a full scope name.
    Entering gives the full scope name.

    >>> import symtape as st
    >>> with st.name_scope("dense") as scope:
    ...     w = st.Variable(1.0, name="w")
    >>> scope, w.name
    ('dense/', 'dense/w:0')
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.rstrip("/") or not all(
                part.replace("_", "a").replace("-", "a").replace(".", "a").isalnum()
                for part in name.rstrip("/").split("/")):
            raise InvalidArgumentError(f"st.name_scope: {name!r} is not a valid scope name "
                                       "(letters, digits, '_', '-', '.', parts joined by '/')")
        self.name = name

    def __enter__(self) -> str:
        full = self.name if self.name.endswith("/") else _SCOPES.prefix() + self.name + "/"
        _SCOPES.stack.append(full)
        return full

    def __exit__(self, *exc) -> None:
        _SCOPES.stack.pop()


class SymbolTensor(Tensor):
    """A leaf meant for formulas: symbols with an optional bound value, watched by every tape
    that sees it used."""

    __slots__ = ("_store",)
    _is_symbol = True

    @property
    def _value(self):
        return self._store.value


#: the SymPy assumptions ``st.symbol`` takes, and what a bound value must then satisfy
ASSUMPTIONS = {
    "positive": lambda v: v > 0, "nonnegative": lambda v: v >= 0,
    "negative": lambda v: v < 0, "nonpositive": lambda v: v <= 0,
    "nonzero": lambda v: v != 0, "integer": lambda v: v == np.round(v),
    "real": lambda v: np.isfinite(v) | np.isinf(v),
}


def symbol(name: str, value=None, shape=None, dtype="float64", **assumptions
           ) -> SymbolTensor:
    """A symbol (``shape=()``) or array of symbols named ``name`` / ``name_i_j``.

    ``value`` binds numeric values (a scalar broadcasts to ``shape``; without ``shape`` the
    value's shape is taken); without one, results are exact formulas and ``.numpy()`` says
    which leaf is unbound. SymPy assumptions (``positive``, ``nonnegative``, ``negative``,
    ``nonpositive``, ``nonzero``, ``integer``, ``real``: True/False) hold in the formulas
    (``x**x`` of a positive ``x`` has no ``Piecewise``), and formulas are written in
    SymPy's own ``Symbol(name, **assumptions)``.

    >>> import symtape as st
    >>> x = st.symbol("x")
    >>> (x ** 2).formula()
    x**2
    >>> p = st.symbol("p", positive=True)
    >>> with st.GradientTape() as t:
    ...     t.watch(p)
    ...     y = p ** p
    >>> t.gradient(y, p).formula()
    p*p**(p - 1) + p**p*log(p)
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("st.symbol: name must be a non-empty string")
    unknown = sorted(set(assumptions) - set(ASSUMPTIONS))
    if unknown:
        raise InvalidArgumentError(f"st.symbol: unknown arguments {unknown} (assumptions it "
                                   f"takes: {', '.join(sorted(ASSUMPTIONS))})")
    assumptions = {k: bool(v) for k, v in assumptions.items() if v is not None}
    try:
        sp.Symbol(name, **assumptions)
    except Exception as e:  # noqa: BLE001 - SymPy's InconsistentAssumptions and kin
        raise InvalidArgumentError(f"st.symbol: assumptions {assumptions} contradict each "
                                   f"other ({e})") from None
    if assumptions.get("real") is False:
        raise InvalidArgumentError("st.symbol: symbols are real numbers (real=False given)")
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise DTypeError(f"st.symbol: dtype must be a float dtype, got {dtype.name}")
    if shape is None:
        shape = np.shape(value.numpy() if isinstance(value, Tensor) else value) \
            if value is not None else ()
    shape = tuple(int(n) for n in np.atleast_1d(shape)) if np.ndim(shape) else \
        ((int(shape),) if not isinstance(shape, tuple) else shape)
    if value is not None:
        v = checked_array(value, dtype, "st.symbol value")
        if v.shape != shape:
            try:
                v = np.broadcast_to(v, shape)
            except ValueError:
                raise ShapeError(f"st.symbol: value of shape {v.shape} does not fit shape "
                                 f"{shape}") from None
        value = read_only_copy(v)
        for k, want in assumptions.items():
            with np.errstate(invalid="ignore"):
                holds = ASSUMPTIONS[k](v)
            if want and not np.all(holds) or not want and np.any(holds) and k != "real":
                raise InvalidArgumentError(f"st.symbol: {name}'s value does not satisfy "
                                           f"{k}={want}")
    store = _Store(value)
    t = SymbolTensor.__new__(SymbolTensor)
    t._store = store
    Tensor.__init__(t, leaf_node(name, shape, dtype, store, assumptions or None), None,
                    dtype, name=name)
    return t


def promote(t: Tensor) -> None:
    """Give a constant tensor leaf symbols (when it is watched), so formulas name it."""
    if t._is_variable or t._is_symbol or t._dtype.kind != "f" or t._value is None:
        return
    if t._node.kind != "const":
        return
    name = t._name or f"c{next(_leaf_names)}"
    store = _Store(t._value)
    t._node = leaf_node(clean_name(name), t.shape, t._dtype, store)

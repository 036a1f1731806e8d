"""The primitive table: for each op, its SymPy builder, numpy evaluation and derivative rule.

An op is applied with ``op.bind(*args, **params)`` (or by calling it); ``tensor.py`` installs
the binder that converts arguments, checks shapes and dtypes (:meth:`Primitive.prepare`),
builds the atoms of the result (:meth:`Primitive.build`, one small definition per element),
evaluates it with numpy (:meth:`Primitive.numeric`) and records it on the active tapes.

Derivative rules have one fixed signature, ``rule(g, ans, *args, **params) -> cotangent``,
one rule per argument, ``None`` meaning no gradient flows through that argument (not the
same as zero: a rule may return :class:`Zero`). Rules use only ops of this table, so
derivatives of any order are just more sweeps. Elementwise ops are SymPy *templates*; their
default rule is SymPy's local partial of the template, itself a template op. TensorFlow's
conventions at kinks, and stable forms, override it where named.
"""

from __future__ import annotations

import functools
import itertools
import math
import string
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import sympy as sp

from . import evaluate as E
from . import functions as F
from . import graph as G
from .errors import DTypeError, InvalidArgumentError, NonDifferentiableError, ShapeError

__all__ = ["Aval", "Zero", "Primitive", "Elementwise", "OPS", "COMPOSITES", "CREATION",
           "install_binder"]

# Placeholders of templates: x, y, z for arguments; g for the cotangent; c for a condition.
X, Y, Z, W = sp.symbols("x y z w", real=True)
GS = sp.Symbol("g", real=True)
ANS = sp.Symbol("ans", real=True)
C = sp.Symbol("c")

OPS: dict[str, Primitive] = {}
COMPOSITES: dict[str, Callable] = {}
CREATION: dict[str, Callable] = {}

_binder: Callable | None = None


def install_binder(fn: Callable) -> None:
    """Set the function that applies a primitive to arguments (installed by ``tensor.py``)."""
    global _binder
    _binder = fn


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


def _kind(dtype: np.dtype) -> str:
    return "b" if dtype.kind == "b" else ("f" if dtype.kind == "f" else "i")


_KIND_NAMES = {"f": "float", "i": "integer", "b": "bool"}


def _fmt(shape) -> str:
    return str(tuple(shape))


# --------------------------------------------------------------------------------------------
# Primitive
# --------------------------------------------------------------------------------------------


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
        return _binder(self, args, params)

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
            if _kind(a.dtype) not in self.kinds:
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

    def evaluate(self, values: Sequence[np.ndarray], args: Sequence, params: dict) -> np.ndarray:
        """The numeric value; ``args`` are the arguments' tensor-level nodes (``uniform``:
        the one constant all elements are, or None), there to specialise on."""
        return self.numeric(values, params)

    def evaluator(self, args: Sequence, params: dict) -> Callable:
        """``values -> value`` for arguments like ``args`` (the binder caches it per
        signature, so it must not keep ``args``; see :meth:`evaluate`)."""
        return lambda values: self.numeric(values, params)

    def structure(self, args: Sequence, params: dict, shape: tuple) -> tuple:
        """``(regular, uniform, alias)`` of the result node: whether its elements are
        distinct symbolic atoms the builders fold no further than numpy (see ``nodes.py``),
        the one constant every element folds to (or None), and the index of an argument
        the result *is* (or None)."""
        return False, None, None

    #: Whether :meth:`evaluate` gives exactly the definitions' values outside
    #: :meth:`unsettled`, zeros and non-finite values included; when False the binder also
    #: settles the zero and non-finite elements, where folding (``x * 0``, ``x - x``, dropped
    #: zero terms) can change a value.
    exact_elsewhere = False

    def unsettled(self, atoms: Sequence[np.ndarray], params: dict, shape: tuple,
                  args: Sequence = ()) -> np.ndarray | None:
        """Which elements of :meth:`evaluate`'s value may differ from their definitions (the
        binder evaluates those through the DAG); None: none beyond ``exact_elsewhere``.
        ``args`` are the arguments' nodes, as :meth:`evaluate` saw them."""
        return None

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


_const_atom = np.frompyfunc(G.is_const, 1, 1)


def row_flags(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of an object array ``(n, k)`` of atoms: whether it holds a constant, and
    whether it holds a symbolic atom twice.

    >>> x, y = G.Leaf.new("x"), G.Leaf.new("y")
    >>> [f.tolist() for f in row_flags(np.array([[x, y], [x, x], [x, G.ONE]], dtype=object))]
    [[False, False, True], [False, True, False]]
    """
    n = rows.shape[0]
    const = np.asarray(_const_atom(rows), dtype=bool).reshape(rows.shape) if rows.size else \
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


def _lanes(atoms: np.ndarray, axes: tuple) -> np.ndarray:
    """``atoms`` with ``axes`` moved last and flattened: one row per kept index."""
    keep = [i for i in range(atoms.ndim) if i not in axes]
    moved = np.transpose(atoms, keep + list(axes))
    size = int(np.prod([atoms.shape[i] for i in axes], dtype=np.int64))
    return moved.reshape(int(np.prod(moved.shape[:len(keep)], dtype=np.int64)), size)


def _irregular_anywhere(self, atoms, params, shape, args=()):
    """``unsettled`` of ops whose elements mix all their inputs: every element when some input
    holds a constant or a repeated atom, else the zero and non-finite ones."""
    flat = np.concatenate([a.reshape(-1) for a in atoms]) if atoms else np.empty(0, object)
    if irregular_rows(flat.reshape(1, -1)).any():
        return np.ones(shape, dtype=bool)
    return None


def _register(prim: Primitive) -> Primitive:
    OPS[prim.name] = prim
    return prim


_is_zero = np.frompyfunc(G._is_zero, 1, 1)
_special_atom = np.frompyfunc(lambda a: G.is_const(a) or G.absorbs_products(a), 1, 1)
_same_atom = np.frompyfunc(lambda a, b: a is b or (G.is_const(a) and a == b), 2, 1)


def _obj(shape: tuple, fill=G.ZERO) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(fill)
    return out


def _as_obj(result, shape) -> np.ndarray:
    if isinstance(result, np.ndarray):
        return result
    out = np.empty(shape, dtype=object)
    out[()] = result
    return out


# --------------------------------------------------------------------------------------------
# Elementwise ops: SymPy templates
# --------------------------------------------------------------------------------------------


def _tf_diff(expr, var):
    """SymPy's partial with TensorFlow's kink conventions (ties of Max/Min to the first
    argument, no Dirac deltas: derivatives of steps are zero)."""
    expr = expr.replace(
        lambda e: isinstance(e, (sp.Max, sp.Min)),
        lambda e: functools.reduce(
            lambda a, b: sp.Piecewise((a, (a >= b) if isinstance(e, sp.Max) else (a <= b)),
                                      (b, True)), e.args))
    d = sp.diff(expr, var)
    d = d.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.S.Zero)
    d = d.replace(lambda e: isinstance(e, sp.Derivative), _step_derivative)
    if d.has(sp.Subs):
        d = d.doit()
    # x**(y - 1)/x -> x**(y - 2): no spurious 0/0 where the exponent makes it exact
    return sp.powsimp(d)


_STEPS = (sp.floor, sp.ceiling, F.RoundHalfEven, F.Trunc, sp.sign, sp.Heaviside)


def _step_derivative(d):
    """Derivatives of step functions are zero almost everywhere (TF: no gradient leaks)."""
    if isinstance(d.expr, _STEPS):
        return sp.S.Zero
    raise NonDifferentiableError(f"no derivative rule for {d.expr.func.__name__}; give the op "
                                 "an explicit rule")


class Elementwise(Primitive):
    """An op applied element by element (with numpy broadcasting), defined by a template.

    ``template`` is a SymPy expression in ``placeholders``; the builder instantiates it per
    element, ``numeric`` evaluates it with numpy (default: the template's numpy evaluation),
    and a rule given as ``'diff'`` is the template's partial, as a template op of
    ``(g, *args)``.
    """

    def __init__(self, name: str, template, placeholders: Sequence, *,
                 numeric: Callable | None = None, rules: Sequence | str = "diff",
                 args: Sequence[str] | None = None, kinds: str = "f", out: str = "T") -> None:
        self.template = template
        self.placeholders = tuple(placeholders)
        n = len(self.placeholders)
        if isinstance(rules, str):
            rules = (rules,) * n
        rules = tuple(self._default_rule(i) if r == "diff" else r for i, r in enumerate(rules))
        super().__init__(name, args or ("T",) * n, kinds, rules, out)
        self._build_one = G.compile_template(template, self.placeholders)
        self._ufunc = np.frompyfunc(self._build_one, n, 1) if n else None
        # an argument where a structural zero makes the result zero (the cotangent of a rule,
        # either factor of a product): those elements are not built at all, which is what
        # keeps a Jacobian's one-hot sweeps cheap
        self._zero_arg = next((i for i, p in enumerate(self.placeholders)
                               if p.is_real and template.xreplace({p: 0}) == 0), None)
        self._hand_numeric = numeric is not None
        self._numeric = numeric
        self._vjp_ops: dict[int, Elementwise | None] = {}

    def shape_rule(self, shapes, params):
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise ShapeError(f"st.{self.name}: shapes {', '.join(map(_fmt, shapes))} cannot be "
                             "broadcast together") from None

    def build(self, atoms, params):
        shape = np.broadcast_shapes(*(a.shape for a in atoms))
        with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
            if self._zero_arg is not None and atoms[self._zero_arg].size > 1:
                zero = np.broadcast_to(_is_zero(atoms[self._zero_arg]).astype(bool), shape)
                if zero.any():
                    out = _obj(shape)
                    keep = ~zero
                    if keep.any():
                        out[keep] = self._ufunc(*[np.broadcast_to(a, shape)[keep]
                                                  for a in atoms])
                    return out
            return _as_obj(self._ufunc(*atoms), shape)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            if self._numeric is None:
                return self._prototype(())[0](*values)[0]
            return self._numeric(*values)

    def evaluate(self, values, args, params):
        """Float results are evaluated through a prototype: the template built once by the
        graph's own builders on stand-in leaves, so values round exactly as the built
        definitions (and compiled code) do; arguments that are one constant (an exponent,
        a slope) fold as they do in the graph (``x**(y - 2)`` at ``y = 2`` is 1, also at
        ``x = 0``), and an argument given twice is one stand-in (``x - x`` is 0). Elements
        whose own atoms fold further are left to :meth:`unsettled`."""
        return self.evaluator(args, params)(values)

    def evaluator(self, args, params):
        if self._hand_numeric and (self.out != "T" or any(a.dtype.kind != "f" for a in args)):
            fn = self._numeric
            return lambda values: fn(*values)
        run, keep, _, _ = self._prototype(*self._specialisation(args))
        if keep == list(range(len(args))):
            return lambda values: run(*values)[0]
        return lambda values: run(*[values[i] for i in keep])[0]

    @staticmethod
    def _specialisation(args) -> tuple:
        """``(consts, same)``: the uniform-constant arguments and, for each other argument,
        the first argument that is the same node."""
        consts = tuple((i, a.uniform) for i, a in enumerate(args) if a.uniform is not None)
        first: dict = {}
        same = tuple(first.setdefault(id(a), i) for i, a in enumerate(args))
        return consts, same

    def structure(self, args, params, shape):
        if any(a.dtype.kind != "f" for a in args) and self.out == "T":
            return False, None, None
        _, keep, out, used = self._prototype(*self._specialisation(args))
        if G.is_const(out):
            return False, out, None
        if out in used:
            i = used[out]
            same_shape = tuple(args[i].shape) == tuple(shape)
            return False, None, i if same_shape and args[i].dtype.kind == "f" else None
        if G.absorbs_products(out) or not all(args[i].regular for i in used.values()):
            return False, None, None
        covered = np.zeros(len(shape), dtype=bool)
        for i in used.values():
            s = tuple(args[i].shape)
            covered[len(shape) - len(s):] |= np.array([n > 1 for n in s], dtype=bool)
        return bool(all(c or n <= 1 for c, n in zip(covered, shape))), None, None

    exact_elsewhere = True

    def unsettled(self, atoms, params, shape, args=()):
        """Elements where the builders fold differently from the prototype: an argument is
        a constant (that is not the whole argument), two arguments are the same atom, or an
        argument is a select with a zero branch (products fold into it)."""
        consts, same = self._specialisation(args)
        skip = {i for i, _ in consts} | {i for i, j in enumerate(same) if j != i}
        rest = [np.broadcast_to(a, shape) for i, a in enumerate(atoms) if i not in skip]
        mask = np.zeros(shape, dtype=bool)
        for k, a in enumerate(rest):
            mask |= np.asarray(_special_atom(a), dtype=bool)
            for b in rest[k + 1:]:
                mask |= np.asarray(_same_atom(a, b), dtype=bool)
        return mask

    @functools.lru_cache(maxsize=256)  # noqa: B019 - ops live for the whole program
    def _prototype(self, consts: tuple, same: tuple | None = None):
        """``(run, keep, out, used)``: the template built on stand-ins (``consts`` fixed,
        arguments ``same`` as an earlier one sharing its stand-in), a numpy program of the
        arguments ``keep``, the built atom and ``stand-in -> argument`` of those it uses."""
        n = len(self.placeholders)
        same = tuple(range(n)) if same is None else same
        fixed = dict(consts)
        keep = [i for i in range(n) if i not in fixed and same[i] == i]
        stand_ins = {i: G.Leaf.new(f"p{i}") for i in keep}
        out = self._build_one(*[fixed[i] if i in fixed else stand_ins[same[i]]
                                for i in range(n)])
        found = set(G.leaves([out])) if G.is_symbolic(out) else set()
        used = {s: i for i, s in stand_ins.items() if s in found}
        return E.program([out], [stand_ins[i] for i in keep], quiet=False), keep, out, used

    def vjp_op(self, i: int) -> Elementwise | None:
        """The template op ``g * d(template)/d(arg i)`` of ``(g, *args)``, None when zero."""
        if i not in self._vjp_ops:
            d = _tf_diff(self.template, self.placeholders[i])
            if d == 0:
                self._vjp_ops[i] = None
            else:
                g = _fresh_cotangent(self.placeholders)
                self._vjp_ops[i] = template_op(f"{self.name}_vjp{i}", g * d,
                                               (g, *self.placeholders))
        return self._vjp_ops[i]

    def _default_rule(self, i: int) -> Callable:
        def rule(g, ans, *args, **params):
            op = self.vjp_op(i)
            if op is None:
                return Zero(args[i].shape, args[i].dtype)
            return op.bind(g, *args)

        return rule

    def vjp(self, g, ans, args, params, needed):
        cts = super().vjp(g, ans, args, params, needed)
        return [unbroadcast(ct, a.shape) for ct, a in zip(cts, args)]


def _fresh_cotangent(placeholders) -> sp.Symbol:
    """A cotangent placeholder distinct from ``placeholders`` (rule ops already have one)."""
    names = {p.name for p in placeholders}
    k = 0
    while f"g{k}" in names:
        k += 1
    return sp.Symbol(f"g{k}", real=True)


def unbroadcast(ct, shape: tuple):
    """Sum a cotangent over the axes that broadcasting added to an argument of ``shape``."""
    if ct is None or tuple(ct.shape) == tuple(shape):
        return ct
    if isinstance(ct, Zero):
        return Zero(shape, ct.dtype)
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and ct.shape[lead + i] != 1)
    out = reduce_sum.bind(ct, axis=axes, keepdims=False)
    return reshape.bind(out, shape=tuple(shape)) if tuple(out.shape) != tuple(shape) else out


@functools.lru_cache(maxsize=None)
def template_op(name: str, template, placeholders: tuple, **kw) -> Elementwise:
    """The (cached) elementwise op of a template, used for derived and rule ops."""
    return Elementwise(name, template, placeholders, **kw)


def _ew(name, template, placeholders=(X,), **kw) -> Elementwise:
    return _register(Elementwise(name, template, placeholders, **kw))


def _t(template, *placeholders, name="rule"):
    """A rule op from a template over ``placeholders`` (typically ``g``, args, ``ans``)."""
    return template_op(name, template, tuple(placeholders))


def _zero_rule(g, ans, *args, **params):
    """The gradient is connected and zero (sign, steps)."""
    return Zero(args[0].shape, args[0].dtype)


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# ---- arithmetic ----------------------------------------------------------------------------
identity = _ew("identity", X, (X,), numeric=np.copy, kinds="fib",
               rules=(lambda g, ans, x: g,))
negative = _ew("negative", -X, (X,), numeric=np.negative, kinds="fi",
               rules=(lambda g, ans, x: negative.bind(g),))
add = _ew("add", X + Y, (X, Y), numeric=np.add, kinds="fi",
          rules=(lambda g, ans, x, y: g, lambda g, ans, x, y: g))
subtract = _ew("subtract", X - Y, (X, Y), numeric=np.subtract, kinds="fi",
               rules=(lambda g, ans, x, y: g, lambda g, ans, x, y: negative.bind(g)))
multiply = _ew("multiply", X * Y, (X, Y), numeric=np.multiply, kinds="fi",
               rules=(lambda g, ans, x, y: multiply.bind(g, y),
                      lambda g, ans, x, y: multiply.bind(g, x)))
divide = _ew("divide", X / Y, (X, Y), numeric=np.true_divide,
             rules=(lambda g, ans, x, y: divide.bind(g, y),
                    lambda g, ans, x, y: _t(-GS * X / Y**2, GS, X, Y, name="div_vjp1").bind(
                        g, x, y)))
pow_ = _ew("pow", X**Y, (X, Y), numeric=E.ieee_pow, kinds="fi",
           rules=(lambda g, ans, x, y: _t(GS * Y * X ** (Y - 1), GS, X, Y,
                                          name="pow_vjp0").bind(g, x, y),
                  # TF: no gradient leaks into the exponent where the base is <= 0
                  lambda g, ans, x, y: _t(GS * ANS * sp.Piecewise((sp.log(X), X > 0), (0, True)),
                                          GS, ANS, X, name="pow_vjp1").bind(g, ans, x)))
square = _ew("square", X**2, kinds="fi", numeric=np.square)
sqrt = _ew("sqrt", sp.sqrt(X), numeric=np.sqrt,
           rules=(lambda g, ans, x: _t(GS / (2 * ANS), GS, ANS, name="sqrt_vjp").bind(g, ans),))
rsqrt = _ew("rsqrt", 1 / sp.sqrt(X), numeric=lambda x: 1.0 / np.sqrt(x),
            rules=(lambda g, ans, x: _t(-GS * ANS**3 / 2, GS, ANS, name="rsqrt_vjp").bind(
                g, ans),))
floordiv = _ew("floordiv", sp.floor(X / Y), (X, Y), kinds="fi",
               numeric=lambda x, y: np.floor(x / y) if np.result_type(x, y).kind == "f"
               else np.floor_divide(x, y), rules=(None, None))
floormod = _ew("floormod", sp.Mod(X, Y), (X, Y), kinds="fi",
               numeric=np.mod,
               rules=(lambda g, ans, x, y: g,
                      lambda g, ans, x, y: _t(-GS * sp.floor(X / Y), GS, X, Y,
                                              name="floormod_vjp1").bind(g, x, y)))
abs_ = _ew("abs", sp.Abs(X), kinds="fi", numeric=np.abs)
sign = _ew("sign", sp.sign(X), kinds="fi", numeric=np.sign, rules=(_zero_rule,))
floor = _ew("floor", sp.floor(X), numeric=np.floor, rules=(None,))
ceil = _ew("ceil", sp.ceiling(X), numeric=np.ceil, rules=(None,))
round_ = _ew("round", F.RoundHalfEven(X), numeric=np.rint, rules=(None,))
maximum = _ew("maximum", sp.Max(X, Y), (X, Y), kinds="fi", numeric=np.maximum,
              rules=(lambda g, ans, x, y: _t(sp.Piecewise((GS, X >= Y), (0, True)), GS, X, Y,
                                             name="maximum_vjp0").bind(g, x, y),
                     lambda g, ans, x, y: _t(sp.Piecewise((0, X >= Y), (GS, True)), GS, X, Y,
                                             name="maximum_vjp1").bind(g, x, y)))
minimum = _ew("minimum", sp.Min(X, Y), (X, Y), kinds="fi", numeric=np.minimum,
              rules=(lambda g, ans, x, y: _t(sp.Piecewise((GS, X <= Y), (0, True)), GS, X, Y,
                                             name="minimum_vjp0").bind(g, x, y),
                     lambda g, ans, x, y: _t(sp.Piecewise((0, X <= Y), (GS, True)), GS, X, Y,
                                             name="minimum_vjp1").bind(g, x, y)))

# ---- transcendental ------------------------------------------------------------------------
exp = _ew("exp", sp.exp(X), numeric=np.exp,
          rules=(lambda g, ans, x: multiply.bind(g, ans),))
expm1 = _ew("expm1", F.expm1(X), numeric=np.expm1)
log = _ew("log", sp.log(X), numeric=np.log)
log1p = _ew("log1p", F.log1p(X), numeric=np.log1p)
sin = _ew("sin", sp.sin(X), numeric=np.sin)
cos = _ew("cos", sp.cos(X), numeric=np.cos)
tan = _ew("tan", sp.tan(X), numeric=np.tan)
asin = _ew("asin", sp.asin(X), numeric=np.arcsin)
acos = _ew("acos", sp.acos(X), numeric=np.arccos)
atan = _ew("atan", sp.atan(X), numeric=np.arctan)
atan2 = _ew("atan2", sp.atan2(X, Y), (X, Y), numeric=np.arctan2)
sinh = _ew("sinh", sp.sinh(X), numeric=np.sinh)
cosh = _ew("cosh", sp.cosh(X), numeric=np.cosh)
tanh = _ew("tanh", sp.tanh(X), numeric=np.tanh,
           rules=(lambda g, ans, x: _t(GS * (1 - ANS**2), GS, ANS, name="tanh_vjp").bind(
               g, ans),))
asinh = _ew("asinh", sp.asinh(X), numeric=np.arcsinh)
acosh = _ew("acosh", sp.acosh(X), numeric=np.arccosh)
atanh = _ew("atanh", sp.atanh(X), numeric=np.arctanh)
erf = _ew("erf", sp.erf(X), numeric=E.HEADS[sp.erf])

for _op in (add, multiply):
    _op.commutative = True  # x*y and y*x are one tensor-level node (as one element atom)

# ---- comparisons and logic ------------------------------------------------------------------
_CMP = dict(kinds="fi", out="bool", rules=(None, None))
less = _ew("less", X < Y, (X, Y), numeric=np.less, **_CMP)
less_equal = _ew("less_equal", X <= Y, (X, Y), numeric=np.less_equal, **_CMP)
greater = _ew("greater", X > Y, (X, Y), numeric=np.greater, **_CMP)
greater_equal = _ew("greater_equal", X >= Y, (X, Y), numeric=np.greater_equal, **_CMP)
equal = _ew("equal", sp.Eq(X, Y, evaluate=False), (X, Y), numeric=np.equal,
            **{**_CMP, "kinds": "fib"})
not_equal = _ew("not_equal", sp.Ne(X, Y, evaluate=False), (X, Y), numeric=np.not_equal,
                **{**_CMP, "kinds": "fib"})
_B1, _B2 = sp.symbols("b1 b2")
logical_and = _ew("logical_and", sp.And(_B1, _B2), (_B1, _B2), numeric=np.logical_and,
                  kinds="b", rules=(None, None))
logical_or = _ew("logical_or", sp.Or(_B1, _B2), (_B1, _B2), numeric=np.logical_or,
                 kinds="b", rules=(None, None))
logical_not = _ew("logical_not", sp.Not(_B1), (_B1,), numeric=np.logical_not,
                  kinds="b", rules=(None,))
where = _ew("where", sp.Piecewise((X, C), (Y, True)), (C, X, Y), args=("bool", "T", "T"),
            kinds="fib", numeric=np.where,
            rules=(None,
                   lambda g, ans, c, x, y: where.bind(c, g, 0),
                   lambda g, ans, c, x, y: where.bind(c, 0, g)))
# TF computes clip_by_value as maximum(minimum(t, hi), lo) and differentiates those two ops
# (ties to the first argument; nan compares false): the gradient passes to t at and between
# the bounds, to a bound beyond it, and to lo alone when lo > hi (the result is then lo)
_CLIP_T = sp.And(X <= Z, X >= Y)  # min(t, hi) is t, and it is >= lo
_CLIP_HI = sp.And(X > Z, Z >= Y)  # min(t, hi) is hi, and it is >= lo
clip_by_value = _ew(
    "clip_by_value", sp.Max(sp.Min(X, Z), Y), (X, Y, Z), kinds="fi",
    numeric=lambda t, lo, hi: np.maximum(np.minimum(t, hi), lo),
    rules=(lambda g, ans, t, lo, hi: _t(sp.Piecewise((GS, _CLIP_T), (0, True)), GS, X, Y, Z,
                                        name="clip_vjp0").bind(g, t, lo, hi),
           lambda g, ans, t, lo, hi: _t(sp.Piecewise((0, sp.Or(_CLIP_T, _CLIP_HI)), (GS, True)),
                                        GS, X, Y, Z, name="clip_vjp1").bind(g, t, lo, hi),
           lambda g, ans, t, lo, hi: _t(sp.Piecewise((GS, _CLIP_HI), (0, True)), GS, X, Y, Z,
                                        name="clip_vjp2").bind(g, t, lo, hi)))

# ---- activations (nn) ----------------------------------------------------------------------
_step = sp.Heaviside(X, 0)  # TF: relu'(0) = 0
relu = _ew("relu", sp.Max(X, 0), kinds="fi", numeric=lambda x: np.maximum(x, 0),
           rules=(lambda g, ans, x: _t(GS * _step, GS, X, name="relu_vjp").bind(g, x),))
relu6 = _ew("relu6", sp.Min(sp.Max(X, 0), 6), kinds="fi",
            numeric=lambda x: np.minimum(np.maximum(x, 0), 6),
            rules=(lambda g, ans, x: _t(GS * _step * sp.Heaviside(6 - X, 0), GS, X,
                                        name="relu6_vjp").bind(g, x),))
elu = _ew("elu", sp.Piecewise((X, X > 0), (F.expm1(X), True)),
          numeric=lambda x: np.where(x > 0, x, np.expm1(x)))
_SELU_ALPHA = sp.Float(1.6732632423543772848170429916717)
_SELU_SCALE = sp.Float(1.0507009873554804934193349852946)
selu = _ew("selu", _SELU_SCALE * sp.Piecewise((X, X > 0), (_SELU_ALPHA * F.expm1(X), True)),
           numeric=lambda x: float(_SELU_SCALE) * np.where(
               x > 0, x, float(_SELU_ALPHA) * np.expm1(x)),
           # TF's SeluGrad: scale where the activation is >= 0, so selu'(0) = scale
           rules=(lambda g, ans, x: _t(GS * sp.Piecewise(
               (_SELU_SCALE, X >= 0), (_SELU_SCALE * _SELU_ALPHA * sp.exp(X), True)),
               GS, X, name="selu_vjp").bind(g, x),))
sigmoid = _ew("sigmoid", 1 / (1 + sp.exp(-X)), numeric=_sigmoid,
              rules=(lambda g, ans, x: _t(GS * ANS * (1 - ANS), GS, ANS,
                                          name="sigmoid_vjp").bind(g, ans),))
# stable: max(x, 0) + log1p(exp(-|x|)); TF: softplus' = sigmoid
softplus = _ew("softplus", sp.Max(X, 0) + F.log1p(sp.exp(-sp.Abs(X))),
               numeric=lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
               rules=(lambda g, ans, x: _t(GS / (1 + sp.exp(-X)), GS, X,
                                           name="softplus_vjp").bind(g, x),))


@functools.lru_cache(maxsize=None)
def leaky_relu_op(alpha: float) -> Elementwise:
    """``leaky_relu`` with slope ``alpha`` below zero (TF: ``x if x > 0 else alpha * x``)."""
    a = G.number(alpha)
    return Elementwise("leaky_relu", sp.Piecewise((X, X > 0), (a * X, True)), (X,),
                       numeric=lambda x: np.where(x > 0, x, alpha * x))


# labels z, logits x; TF's stable form; gradient sigmoid(x) - z everywhere
sigmoid_cross_entropy_with_logits = _ew(
    "sigmoid_cross_entropy_with_logits",
    sp.Max(X, 0) - X * Z + F.log1p(sp.exp(-sp.Abs(X))), (Z, X),
    numeric=lambda z, x: np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x))),
    rules=(lambda g, ans, z, x: _t(-GS * X, GS, X, name="sce_vjp0").bind(g, x),
           lambda g, ans, z, x: _t(GS * (1 / (1 + sp.exp(-X)) - Z), GS, Z, X,
                                   name="sce_vjp1").bind(g, z, x)))


# --------------------------------------------------------------------------------------------
# Cast
# --------------------------------------------------------------------------------------------


class Cast(Primitive):
    """``cast(x, dtype)``: float -> int truncates, anything -> bool is ``x != 0``."""

    exact_elsewhere = True  # values are copies (or casts) of input values

    def __init__(self) -> None:
        super().__init__("cast", ("*",), "fib", rules=(self._rule,))

    @staticmethod
    def _rule(g, ans, x, dtype, src):
        # only float -> float casts carry a gradient (TF)
        return cast.bind(g, dtype=src) if src.kind == "f" and dtype.kind == "f" else None

    def vjp(self, g, ans, args, params, needed):
        ct = self._rule(g, ans, *args, **params) if needed[0] else None
        return [ct]

    def prepare(self, avals, params):
        dtype = np.dtype(params["dtype"])
        return Aval(avals[0].shape, dtype), {"dtype": dtype, "src": avals[0].dtype}

    def _atom(self, src_kind: str, dst_kind: str):
        if dst_kind == "b":
            return lambda a: G.relation(sp.Unequality, a, G.ZERO) if src_kind != "b" else a
        if src_kind == "b":
            return lambda a: G.piecewise((G.ONE, a), (G.ZERO, sp.S.true))
        if src_kind == "f" and dst_kind == "i":
            return lambda a: G.call(F.Trunc, a)
        return lambda a: a

    def build(self, atoms, params):
        (a,) = atoms
        src, dst = params["src"], params["dtype"]
        if src.kind == "f" and dst.kind == "f" and dst.itemsize < src.itemsize:
            one = lambda v: G.call(F.RoundFloat32, v)  # noqa: E731 - rounding is a head
        else:
            one = self._atom(_kind(src), _kind(dst))
        with np.errstate(all="ignore"):
            return _as_obj(np.frompyfunc(one, 1, 1)(a), a.shape)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return np.asarray(values[0]).astype(params["dtype"])


cast = _register(Cast())


# --------------------------------------------------------------------------------------------
# Structural ops: gathers of atoms, differentiated through their index maps
# --------------------------------------------------------------------------------------------


class Structural(Primitive):
    """An op that rearranges elements: ``fn`` applies to atoms and values alike.

    Its derivative is generic: apply ``fn`` to an array of flat indices to learn where each
    output element comes from, and scatter-add the cotangent back (:data:`scatter_add`).
    """

    exact_elsewhere = True  # values are copies (or casts) of input values

    def __init__(self, name: str, fn: Callable, variadic: bool = False) -> None:
        super().__init__(name, ("T",), "fib")
        self.fn = fn
        self.variadic = variadic

    def index_maps(self, shapes: Sequence[tuple], params: dict) -> list[np.ndarray]:
        """For each argument, the flat index into it of every output element (-1: other)."""
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        offsets = np.cumsum([0] + sizes)
        ids = [np.arange(o, o + n, dtype=np.int64).reshape(s)
               for o, n, s in zip(offsets, sizes, shapes)]
        try:
            gathered = np.asarray(self.fn(*ids, **params))
        except (ValueError, IndexError, TypeError, np.exceptions.AxisError) as e:
            raise ShapeError(f"st.{self.name}: {e} (argument shapes "
                             f"{', '.join(map(_fmt, shapes))})") from None
        maps = []
        for o, n in zip(offsets, sizes):
            inside = (gathered >= o) & (gathered < o + n)
            maps.append(np.where(inside, gathered - o, -1))
        return maps

    def structure(self, args, params, shape):
        """Elements picked from arguments that are all one constant are that constant."""
        first = args[0].uniform if args else None
        same = first is not None and all(a.uniform is not None and a.uniform == first and
                                         type(a.uniform) is type(first) for a in args)
        return False, first if same and int(np.prod(shape, dtype=np.int64)) else None, None

    def shape_rule(self, shapes, params):
        return tuple(self.index_maps(shapes, params)[0].shape)

    def build(self, atoms, params):
        return np.asarray(self.fn(*atoms, **params), dtype=object)

    def numeric(self, values, params):
        return np.asarray(self.fn(*values, **params))

    def differentiable(self, i: int) -> bool:
        return True  # every argument, through its index map (see vjp)

    def vjp(self, g, ans, args, params, needed):
        maps = self.index_maps([a.shape for a in args], params)
        out = []
        for a, idx, need in zip(args, maps, needed):
            if not need:
                out.append(None)
            elif isinstance(g, Zero):
                out.append(Zero(a.shape, g.dtype))
            else:
                out.append(scatter_add.bind(g, idx=idx, shape=tuple(a.shape)))
        return out


class GatherFlat(Primitive):
    """``out[i] = x.flat[idx[i]]``, zero where ``idx[i] == -1``."""

    exact_elsewhere = True  # values are copies (or casts) of input values

    def __init__(self) -> None:
        super().__init__("gather_flat", ("T",), "fib",
                         rules=(lambda g, ans, x, idx: scatter_add.bind(g, idx=idx,
                                                                        shape=tuple(x.shape)),))

    def shape_rule(self, shapes, params):
        return tuple(params["idx"].shape)

    @staticmethod
    def _take(flat, idx, zero):
        safe = np.where(idx < 0, 0, idx)
        out = flat[safe] if flat.size else np.empty(idx.shape, flat.dtype)
        if (idx < 0).any():
            out = np.where(idx < 0, zero, out)
        return out

    def build(self, atoms, params):
        return np.asarray(self._take(atoms[0].reshape(-1), params["idx"], G.ZERO), dtype=object)

    def numeric(self, values, params):
        v = np.asarray(values[0])
        return self._take(v.reshape(-1), params["idx"], v.dtype.type(0))


class ScatterAdd(Primitive):
    """``out = zeros(shape); out.flat[idx[i]] += g[i]`` (entries with ``idx == -1`` dropped)."""

    def __init__(self) -> None:
        super().__init__("scatter_add", ("T",), "fi",
                         rules=(lambda g, ans, x, idx, shape: gather_flat.bind(g, idx=idx),))

    def shape_rule(self, shapes, params):
        return tuple(params["shape"])

    def build(self, atoms, params):
        idx = params["idx"].reshape(-1)
        src = atoms[0].reshape(-1)
        groups: dict[int, list] = {}
        for i, j in enumerate(idx.tolist()):
            if j >= 0:
                groups.setdefault(j, []).append(src[i])
        out = _obj(tuple(params["shape"]))
        flat = out.reshape(-1)
        for j, parts in groups.items():
            flat[j] = parts[0] if len(parts) == 1 else G.add(*parts)
        return out

    def unsettled(self, atoms, params, shape, args=()):
        """Targets that receive a constant or the same atom twice (merged terms)."""
        idx = params["idx"].reshape(-1)
        src = atoms[0].reshape(-1)
        out = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=bool)
        seen: dict = {}
        for i, j in enumerate(idx.tolist()):
            if j < 0:
                continue
            a, parts = src[i], seen.setdefault(j, set())
            if G.is_const(a) or a in parts:
                out[j] = True
            parts.add(a)
        return out.reshape(shape)

    def numeric(self, values, params):
        v = np.asarray(values[0])
        out = np.zeros(int(np.prod(params["shape"], dtype=np.int64)), dtype=v.dtype)
        idx = params["idx"].reshape(-1)
        keep = idx >= 0
        np.add.at(out, idx[keep], v.reshape(-1)[keep])
        return out.reshape(params["shape"])


gather_flat = _register(GatherFlat())
scatter_add = _register(ScatterAdd())


def _structural(name: str, fn: Callable, variadic: bool = False) -> Structural:
    return _register(Structural(name, fn, variadic))


def _getitem(a, key):
    return a[key]


def _gather(params, indices, axis, batch_dims):
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    lead = params.shape[:batch_dims]
    out = [_gather(params[i], indices[i], axis - batch_dims, 0) for i in np.ndindex(*lead)]
    first = np.asarray(out[0]) if out else np.take(
        params.reshape(params.shape[batch_dims:]) if params.size else params, [], axis=0)
    return np.stack(out).reshape(lead + first.shape) if out else np.empty(lead + first.shape)


def _broadcast_to(a, shape):
    return np.array(np.broadcast_to(a, shape))


reshape = _structural("reshape", lambda a, shape: np.reshape(a, shape))
transpose = _structural("transpose", lambda a, perm: np.transpose(a, perm))
squeeze = _structural("squeeze", lambda a, axis: np.squeeze(a, axis=axis))
expand_dims = _structural("expand_dims", lambda a, axis: np.expand_dims(a, axis))
tile = _structural("tile", lambda a, multiples: np.tile(a, multiples))
broadcast_to = _structural("broadcast_to", _broadcast_to)
getitem = _structural("getitem", _getitem)
gather = _structural("gather", lambda p, indices, axis, batch_dims:
                     _gather(p, indices, axis, batch_dims))
stack = _structural("stack", lambda *xs, axis: np.stack(xs, axis=axis), True)
concat = _structural("concat", lambda *xs, axis: np.concatenate(xs, axis=axis), True)
reverse = _structural("reverse", lambda a, axis: np.flip(a, axis))


# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


#: Sums and contractions of at most this many terms are taken in the order the graph's
#: definitions add (so small results round exactly as their element view); larger ones in
#: numpy's and BLAS's order, as the loop nests of compiled code for large tensors do.
ORDERED_TERMS = 1 << 16


def _reduced(atoms: np.ndarray, axes: tuple, keepdims: bool, combine: Callable) -> np.ndarray:
    """Apply ``combine(list_of_atoms) -> atom`` over ``axes`` of an object array."""
    keep = [i for i in range(atoms.ndim) if i not in axes]
    moved = np.transpose(atoms, keep + list(axes))
    lead = moved.shape[: len(keep)]
    size = int(np.prod([atoms.shape[i] for i in axes], dtype=np.int64))
    rows = moved.reshape(int(np.prod(lead, dtype=np.int64)), size)
    out = _obj(rows.shape[:1])
    for i in range(rows.shape[0]):
        out[i] = combine(list(rows[i]))
    out = out.reshape(lead)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(atoms.shape)))
    return out


def _sequential(x: np.ndarray, axes: tuple, keepdims: bool, product: bool = False):
    """Sum (product) over ``axes`` left to right, in the order the graph's definitions add
    (multiply), so eager values round exactly as compiled code does."""
    x = np.asarray(x)
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, keep + list(axes))
    lead = moved.shape[: len(keep)]
    rows = moved.reshape(lead + (-1,)) if moved.size else moved.reshape(
        lead + (int(np.prod([x.shape[i] for i in axes], dtype=np.int64)),))
    if rows.shape[-1] == 0:
        out = np.full(lead, 1 if product else 0, dtype=x.dtype)
    elif rows.size > ORDERED_TERMS:  # large: numpy's order, as loop nests accumulate
        with np.errstate(all="ignore"):
            out = (np.prod if product else np.sum)(rows, axis=-1)
    else:
        with np.errstate(all="ignore"):
            out = (np.cumprod if product else np.cumsum)(rows, axis=-1)[..., -1]
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return out


def _expand_back(t, shape: tuple, axes: tuple, keepdims: bool):
    """Broadcast a reduced tensor (or cotangent) back to ``shape``."""
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    if not keepdims and tuple(t.shape) != kept:
        t = reshape.bind(t, shape=kept)
    return broadcast_to.bind(t, shape=tuple(shape)) if kept != tuple(shape) else t


class Reduction(Primitive):
    """``combine`` over ``axis`` (None: all) with ``keepdims``; ``numeric(x, axes, kd)``."""

    def __init__(self, name: str, combine: Callable, numeric: Callable, rule: Callable | None,
                 kinds: str = "fi") -> None:
        super().__init__(name, ("T",), kinds, rules=(rule,))
        self.combine = combine
        self._numeric = numeric

    def prepare(self, avals, params):
        (a,) = avals
        axes = normalize_axes(params.get("axis"), len(a.shape), self.name)
        keepdims = bool(params.get("keepdims", False))
        t = self.check_dtypes(avals)
        shape = tuple(1 if i in axes else n for i, n in enumerate(a.shape)) if keepdims else \
            tuple(n for i, n in enumerate(a.shape) if i not in axes)
        return Aval(shape, self.out_dtype(t)), {"axis": axes, "keepdims": keepdims}

    def build(self, atoms, params):
        return _reduced(atoms[0], params["axis"], params["keepdims"], self.combine)

    def structure(self, args, params, shape):
        (x,) = args
        lane = int(np.prod([x.shape[i] for i in params["axis"]], dtype=np.int64))
        return x.regular and lane >= 2 and x.dtype.kind == "f", None, None

    def unsettled(self, atoms, params, shape, args=()):
        """Results over a slice with a constant or a repeated atom (folded or merged terms)."""
        return irregular_rows(_lanes(atoms[0], params["axis"])).reshape(shape)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return np.asarray(self._numeric(np.asarray(values[0]), params["axis"],
                                            params["keepdims"]))


def normalize_axes(axis, ndim: int, op: str) -> tuple:
    """Axes as a sorted tuple of non-negative ints; None means all."""
    if axis is None:
        return tuple(range(ndim))
    if hasattr(axis, "numpy") and not isinstance(axis, (list, tuple)):
        axis = axis.numpy()
    axes = np.atleast_1d(np.asarray(axis)).tolist()
    out = set()
    for ax in axes:
        if not isinstance(ax, int) or not -ndim <= ax < max(ndim, 1):
            raise InvalidArgumentError(f"st.{op}: invalid axis {ax!r} for a tensor of rank "
                                       f"{ndim}")
        out.add(ax % max(ndim, 1))
    return tuple(sorted(out))


def _sum_rule(g, ans, x, axis, keepdims):
    return _expand_back(g, x.shape, axis, keepdims)


def _mean_rule(g, ans, x, axis, keepdims):
    n = int(np.prod([x.shape[i] for i in axis], dtype=np.int64))
    return _expand_back(divide.bind(g, n), x.shape, axis, keepdims)


def _mean_combine(parts):
    n = len(parts)
    if n == 0:
        return sp.S.NaN
    w = sp.Rational(1, n)
    return G.lincomb([(w, a) for a in parts])


def _max_rule(g, ans, x, axis, keepdims):
    # TF: ties share the gradient equally
    y = _expand_back(ans, x.shape, axis, keepdims)
    ind = cast.bind(equal.bind(y, x), dtype=x.dtype)
    count = reduce_sum.bind(ind, axis=axis, keepdims=True)
    gb = _expand_back(g, x.shape, axis, keepdims)
    return divide.bind(multiply.bind(gb, ind), broadcast_to.bind(count, shape=tuple(x.shape)))


def _prod_rule(g, ans, x, axis, keepdims):
    """d prod / d x_i = product of the other elements (exact where some x_j are zero)."""
    keep = [i for i in range(len(x.shape)) if i not in axis]
    n = int(np.prod([x.shape[i] for i in axis], dtype=np.int64))
    lead = tuple(x.shape[i] for i in keep)
    moved = reshape.bind(transpose.bind(x, perm=tuple(keep + list(axis))), shape=lead + (n,))
    others = np.array([[j for j in range(n) if j != i] for i in range(n)],
                      dtype=np.int64).reshape(n, max(n - 1, 0))
    excl = gather.bind(moved, indices=others, axis=len(lead), batch_dims=0)
    partial = reduce_prod.bind(excl, axis=len(lead) + 1, keepdims=False)
    full = reshape.bind(partial, shape=lead + tuple(x.shape[i] for i in axis))
    inv = tuple(np.argsort(keep + list(axis)))
    partial_x = transpose.bind(full, perm=inv)
    return multiply.bind(_expand_back(g, x.shape, axis, keepdims), partial_x)


def _lse_combine(parts):
    """logsumexp, stable: m + log(sum(exp(x - m))) with m = max, 0 where m is not finite."""
    if not parts:
        return sp.S.NegativeInfinity
    m = G.call(sp.Max, *parts)
    finite = G.relation(sp.StrictLessThan, G.call(sp.Abs, m), sp.S.Infinity)
    shift = G.piecewise((m, finite), (G.ZERO, sp.S.true))
    exps = [G.call(sp.exp, G.lincomb([(G.ONE, a), (sp.S.NegativeOne, shift)])) for a in parts]
    return G.lincomb([(G.ONE, G.call(sp.log, G.add(*exps))), (G.ONE, shift)])


def _lse_numeric(x, axes, keepdims):
    if x.size == 0 or not axes:
        return np.log(_sequential(np.exp(x), axes, keepdims))
    m = np.max(x, axis=axes, keepdims=True)
    shift = np.where(np.abs(m) < np.inf, m, 0)
    out = np.log(_sequential(np.exp(x - shift), axes, True)) + shift
    return out if keepdims else np.squeeze(out, axis=axes)


def _mean_numeric(x, axes, keepdims):
    n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    if n == 0:
        return np.full(_sequential(x, axes, keepdims).shape, np.nan)
    return _sequential(x * (1.0 / n), axes, keepdims)


def _norm_combine(parts):
    return G.power(G.add(*[G.monomial(G.ONE, [(a, sp.Integer(2))]) for a in parts]),
                   sp.Rational(1, 2))


reduce_sum = _register(Reduction("reduce_sum", lambda p: G.add(*p), _sequential, _sum_rule))
reduce_mean = _register(Reduction("reduce_mean", _mean_combine, _mean_numeric, _mean_rule))
reduce_prod = _register(Reduction("reduce_prod", lambda p: G.mul(*p),
                                  lambda x, a, k: _sequential(x, a, k, product=True),
                                  _prod_rule))
reduce_max = _register(Reduction(
    "reduce_max", lambda p: G.call(sp.Max, *p) if p else sp.S.NegativeInfinity,
    lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=-np.inf) if x.dtype.kind == "f"
    else np.max(x, axis=a, keepdims=k), _max_rule))
reduce_min = _register(Reduction(
    "reduce_min", lambda p: G.call(sp.Min, *p) if p else sp.S.Infinity,
    lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=np.inf) if x.dtype.kind == "f"
    else np.min(x, axis=a, keepdims=k), _max_rule))
reduce_logsumexp = _register(Reduction(
    "reduce_logsumexp", _lse_combine, _lse_numeric,
    lambda g, ans, x, axis, keepdims: multiply.bind(
        _expand_back(g, x.shape, axis, keepdims),
        exp.bind(subtract.bind(x, _expand_back(ans, x.shape, axis, keepdims)))), kinds="f"))
reduce_euclidean_norm = _register(Reduction(
    "reduce_euclidean_norm", _norm_combine,
    lambda x, a, k: np.sqrt(_sequential(x * x, a, k)),
    lambda g, ans, x, axis, keepdims: multiply.bind(
        _expand_back(g, x.shape, axis, keepdims),
        divide.bind(x, _expand_back(ans, x.shape, axis, keepdims))), kinds="f"))


# --------------------------------------------------------------------------------------------
# Contractions: matmul and einsum
# --------------------------------------------------------------------------------------------


def in_order_sum(terms: np.ndarray, axis: int) -> np.ndarray:
    """Sum over ``axis`` left to right (0 for an empty axis).

    >>> in_order_sum(np.array([[1e16, 1.0, -1e16]]), -1).tolist()
    [0.0]
    """
    if terms.shape[axis] == 0:
        return np.sum(terms, axis=axis)
    return np.take(np.cumsum(terms, axis=axis), -1, axis=axis)


def _in_space(a: np.ndarray, labels: str, full: str, sizes: dict) -> np.ndarray:
    """Operand ``a`` (axes ``labels``, a label repeated is a diagonal) broadcast over the
    index space ``full``."""
    uniq = "".join(dict.fromkeys(labels))
    if uniq != labels:
        a = np.einsum(f"{labels}->{uniq}", a)
    ordered = "".join(c for c in full if c in uniq)
    a = np.transpose(a, [uniq.index(c) for c in ordered])
    return a.reshape(tuple(sizes[c] if c in uniq else 1 for c in full))


def dot_atoms(xs: Sequence, ys: Sequence):
    """The atom of ``sum(x * y)``: one node, products of two symbols as their own nodes."""
    terms = []
    const = G.ZERO
    for a, b in zip(xs, ys):
        ca, cb = G.is_const(a), G.is_const(b)
        if ca and cb:
            const = G.c_add(const, G.c_mul(a, b))
        elif ca:
            terms.append((a, b))
        elif cb:
            terms.append((b, a))
        else:
            terms.append((G.ONE, G.mul(a, b)))
    return G.lincomb(terms, const)


class MatMul(Primitive):
    """``matmul(a, b, transpose_a, transpose_b)`` on rank >= 2 tensors, batch dims broadcast."""

    def __init__(self) -> None:
        super().__init__("matmul", ("T", "T"), "fi", rules=(self._rule_a, self._rule_b))

    @staticmethod
    def _core(shape, transposed):
        m, k = shape[-2], shape[-1]
        return (k, m) if transposed else (m, k)

    def prepare(self, avals, params):
        a, b = avals
        t = self.check_dtypes(avals)
        ta, tb = bool(params.get("transpose_a")), bool(params.get("transpose_b"))
        for i, s in enumerate((a.shape, b.shape)):
            if len(s) < 2:
                raise ShapeError(f"st.matmul: argument {'ab'[i]} has shape {_fmt(s)}; matmul "
                                 "needs tensors of rank >= 2 (use st.tensordot or reshape)")
        (m, k1), (k2, n) = self._core(a.shape, ta), self._core(b.shape, tb)
        if k1 != k2:
            raise ShapeError(f"st.matmul: inner dimensions differ: a is {_fmt(a.shape)}"
                             f"{' (transposed)' if ta else ''}, b is {_fmt(b.shape)}"
                             f"{' (transposed)' if tb else ''}")
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ShapeError(f"st.matmul: batch dimensions of {_fmt(a.shape)} and "
                             f"{_fmt(b.shape)} cannot be broadcast") from None
        return Aval(tuple(batch) + (m, n), t), {"transpose_a": ta, "transpose_b": tb}

    @staticmethod
    def _operands(x, transposed):
        return np.swapaxes(x, -1, -2) if transposed else x

    def build(self, atoms, params):
        a = self._operands(atoms[0], params["transpose_a"])
        b = self._operands(atoms[1], params["transpose_b"])
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:])
        b = np.broadcast_to(b, batch + b.shape[-2:])
        m, n = a.shape[-2], b.shape[-1]
        out = _obj(batch + (m, n))
        for idx in np.ndindex(*batch):
            am, bm = a[idx], b[idx]
            cols = [list(bm[:, j]) for j in range(n)]
            for i in range(m):
                row = list(am[i])
                for j in range(n):
                    out[idx + (i, j)] = dot_atoms(row, cols[j])
        return out

    def structure(self, args, params, shape):
        a, b = args
        k = a.shape[-2] if params["transpose_a"] else a.shape[-1]
        regular = a.regular and b.regular and k >= 1 and a.dtype.kind == "f"
        return regular and not (a.constant and b.constant), None, None

    def unsettled(self, atoms, params, shape, args=()):
        """Elements whose row of ``a`` or column of ``b`` holds a repeated atom, or both a
        constant (products of constants fold into the constant term)."""
        a = self._operands(atoms[0], params["transpose_a"])
        b = np.swapaxes(self._operands(atoms[1], params["transpose_b"]), -1, -2)
        (ca, ra), (cb, rb) = (row_flags(m.reshape(-1, m.shape[-1])) for m in (a, b))
        ca, ra = ca.reshape(a.shape[:-1]), ra.reshape(a.shape[:-1])
        cb, rb = cb.reshape(b.shape[:-1]), rb.reshape(b.shape[:-1])
        out = ra[..., :, None] | rb[..., None, :] | (ca[..., :, None] & cb[..., None, :])
        return np.broadcast_to(out, shape)

    def numeric(self, values, params):
        a = self._operands(np.asarray(values[0]), params["transpose_a"])
        b = self._operands(np.asarray(values[1]), params["transpose_b"])
        with np.errstate(all="ignore"):
            if a.size * b.shape[-1] > ORDERED_TERMS:
                return np.matmul(a, b)
            return in_order_sum(a[..., :, :, None] * b[..., None, :, :], -2)

    @staticmethod
    def _rule_a(g, ans, a, b, transpose_a, transpose_b):
        if transpose_a:
            ct = matmul.bind(b, g, transpose_a=transpose_b, transpose_b=True)
        else:
            ct = matmul.bind(g, b, transpose_a=False, transpose_b=not transpose_b)
        return unbroadcast(ct, a.shape)

    @staticmethod
    def _rule_b(g, ans, a, b, transpose_a, transpose_b):
        if transpose_b:
            ct = matmul.bind(g, a, transpose_a=True, transpose_b=transpose_a)
        else:
            ct = matmul.bind(a, g, transpose_a=not transpose_a, transpose_b=False)
        return unbroadcast(ct, b.shape)


matmul = _register(MatMul())


def parse_einsum(spec: str, shapes: Sequence[tuple]) -> tuple[list[str], str]:
    """Input label strings and output labels of an einsum spec, ellipses expanded."""
    spec = spec.replace(" ", "")
    if "->" in spec:
        lhs, rhs = spec.split("->")
    else:
        lhs, rhs = spec, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise InvalidArgumentError(f"st.einsum: spec {spec!r} names {len(ins)} operands, got "
                                   f"{len(shapes)}")
    used = set("".join(ins).replace(".", "") + (rhs or "").replace(".", ""))
    free = [c for c in string.ascii_letters if c not in used]
    ell_rank = 0
    for s, shape in zip(ins, shapes):
        if "..." in s:
            ell_rank = max(ell_rank, len(shape) - (len(s) - 3))
    ell = "".join(free[:ell_rank])
    out_ins = []
    for s, shape in zip(ins, shapes):
        if "..." in s:
            k = len(shape) - (len(s) - 3)
            s = s.replace("...", ell[ell_rank - k:] if k else "")
        if len(s) != len(shape):
            raise ShapeError(f"st.einsum: operand labels {s!r} do not match its shape "
                             f"{_fmt(shape)}")
        out_ins.append(s)
    if rhs is None:
        counts = {c: "".join(out_ins).count(c) for c in set("".join(out_ins))}
        rhs = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    return out_ins, rhs


class Einsum(Primitive):
    """``einsum(spec, *operands)``: sums of products over repeated labels."""

    variadic = True

    def __init__(self) -> None:
        super().__init__("einsum", ("T",), "fi")

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        ins, out = parse_einsum(params["spec"], [a.shape for a in avals])
        sizes: dict[str, int] = {}
        for labels, a in zip(ins, avals):
            for c, n in zip(labels, a.shape):
                if sizes.setdefault(c, n) != n:
                    raise ShapeError(f"st.einsum: label {c!r} has sizes {sizes[c]} and {n} in "
                                     f"spec {params['spec']!r}")
        for c in out:
            if c not in sizes:
                raise InvalidArgumentError(f"st.einsum: output label {c!r} is not an input "
                                           "label")
        spec = ",".join(ins) + "->" + out
        return Aval(tuple(sizes[c] for c in out), t), {"spec": spec}

    def build(self, atoms, params):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        sizes = {}
        for labels, a in zip(ins, atoms):
            sizes.update(zip(labels, a.shape))
        summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
        result = _obj(tuple(sizes[c] for c in out))
        for oidx in np.ndindex(*result.shape):
            env = dict(zip(out, oidx))
            terms = []
            for sidx in itertools.product(*[range(sizes[c]) for c in summed]):
                env.update(zip(summed, sidx))
                factors = [a[tuple(env[c] for c in labels)] for labels, a in zip(ins, atoms)]
                terms.append(factors)
            result[oidx] = _sum_of_products(terms)
        return result

    unsettled = _irregular_anywhere

    def numeric(self, values, params):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        arrays = [np.asarray(v) for v in values]
        sizes = {}
        for labels, a in zip(ins, arrays):
            sizes.update(zip(labels, a.shape))
        summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
        full = out + "".join(summed)
        with np.errstate(all="ignore"):
            if int(np.prod([sizes[c] for c in full], dtype=np.int64)) > ORDERED_TERMS:
                return np.asarray(np.einsum(params["spec"], *arrays))
            # every term in the full index space, factors multiplied left to right
            terms = functools.reduce(lambda p, q: p * q, [
                _in_space(a, labels, full, sizes) for labels, a in zip(ins, arrays)])
            lead = tuple(sizes[c] for c in out)
            return in_order_sum(terms.reshape(lead + (-1,)), -1)

    def differentiable(self, i: int) -> bool:
        return True  # every operand (see vjp)

    def vjp(self, g, ans, args, params, needed):
        ins, out = params["spec"].split("->")
        ins = ins.split(",")
        cts = []
        for i, (labels, x) in enumerate(zip(ins, args)):
            if not needed[i]:
                cts.append(None)
                continue
            others = [(lab, a) for j, (lab, a) in enumerate(zip(ins, args)) if j != i]
            avail = set(out) | set("".join(lab for lab, _ in others))
            uniq = "".join(c for c in dict.fromkeys(labels) if c in avail)
            spec = ",".join([out] + [lab for lab, _ in others]) + "->" + uniq
            t = einsum.bind(g, *[a for _, a in others], spec=spec)
            cts.append(_embed(t, uniq, labels, tuple(x.shape)))
        return cts


def _sum_of_products(terms):
    parts = []
    const = G.ZERO
    for factors in terms:
        coef = G.ONE
        syms = []
        for f in factors:
            if G.is_const(f):
                coef = G.c_mul(coef, f)
            else:
                syms.append(f)
        if not syms:
            const = G.c_add(const, coef)
        elif G._is_zero(coef):
            continue
        elif len(syms) == 1:
            parts.append((coef, syms[0]))
        else:
            parts.append((coef, G.mul(*syms)))
    return G.lincomb(parts, const)


def _embed(t, labels: str, full: str, shape: tuple):
    """Place a tensor over ``labels`` into one over ``full`` (repeated labels: diagonals,
    zero elsewhere; labels of ``full`` missing from ``labels``: broadcast)."""
    if labels == full:
        return t
    idx = np.empty(shape, dtype=np.int64)
    for fidx in np.ndindex(*shape):
        seen: dict[str, int] = {}
        ok = True
        for c, v in zip(full, fidx):
            if seen.setdefault(c, v) != v:
                ok = False
        if not ok:
            idx[fidx] = -1
            continue
        sub = tuple(seen[c] for c in labels)
        idx[fidx] = int(np.ravel_multi_index(sub, t.shape)) if t.shape else 0
    return gather_flat.bind(t, idx=idx)


einsum = _register(Einsum())


# --------------------------------------------------------------------------------------------
# Linear algebra: one elimination, run on floats (numeric) and on atoms (builder)
# --------------------------------------------------------------------------------------------


class _FloatRing:
    """Scalar arithmetic on Python floats, as the compiled code does it."""

    zero, one, false = 0.0, 1.0, False

    @staticmethod
    def add(a, b):
        return a + b

    @staticmethod
    def sub(a, b):
        return a - b

    @staticmethod
    def mul(a, b):
        return a * b

    @staticmethod
    def div(a, b):
        with np.errstate(all="ignore"):
            return float(np.float64(a) / np.float64(b))

    @staticmethod
    def neg(a):
        return -a

    @staticmethod
    def absval(a):
        return abs(a)

    @staticmethod
    def better(cand_abs, cand, best_abs, best) -> bool:
        return cand_abs > best_abs or (best != best and cand == cand)

    @staticmethod
    def both(a, b):
        return a and b

    @staticmethod
    def either(a, b):
        return a or b

    @staticmethod
    def negate(a):
        return not a

    @staticmethod
    def choose(pairs, default):
        for value, cond in pairs:
            if cond:
                return value
        return default


class _AtomRing:
    """The same arithmetic building atoms of the graph (selects are Piecewise nodes)."""

    zero, one, false = G.ZERO, G.ONE, sp.S.false

    @staticmethod
    def add(a, b):
        return G.add(a, b)

    @staticmethod
    def sub(a, b):
        return G.lincomb([(G.ONE, a), (sp.S.NegativeOne, b)])

    @staticmethod
    def mul(a, b):
        return G.mul(a, b)

    @staticmethod
    def div(a, b):
        return G.monomial(G.ONE, [(a, G.ONE), (b, sp.S.NegativeOne)])

    @staticmethod
    def neg(a):
        return G.lincomb([(sp.S.NegativeOne, a)])

    @staticmethod
    def absval(a):
        return G.call(sp.Abs, a)

    @staticmethod
    def better(cand_abs, cand, best_abs, best):
        larger = G.relation(sp.StrictGreaterThan, cand_abs, best_abs)
        replaces_nan = G.logic(sp.And, G.relation(sp.Unequality, best, best),
                               G.relation(sp.Equality, cand, cand))
        return G.logic(sp.Or, larger, replaces_nan)

    @staticmethod
    def both(a, b):
        return G.logic(sp.And, a, b)

    @staticmethod
    def either(a, b):
        return G.logic(sp.Or, a, b)

    @staticmethod
    def negate(a):
        return G.logic(sp.Not, a)

    @staticmethod
    def choose(pairs, default):
        return G.piecewise(*pairs, (default, sp.S.true))


def _det_small(m, r):
    """Leibniz determinant for n <= 3 (exact polynomial formulas)."""
    n = len(m)
    if n == 0:
        return r.one
    if n == 1:
        return m[0][0]
    if n == 2:
        return r.sub(r.mul(m[0][0], m[1][1]), r.mul(m[0][1], m[1][0]))
    total = r.zero
    for j, sgn in ((0, 1), (1, -1), (2, 1)):
        minor = [[m[i][k] for k in range(3) if k != j] for i in (1, 2)]
        term = r.mul(m[0][j], _det_small(minor, r))
        total = r.add(total, term) if sgn > 0 else r.sub(total, term)
    return total


def _pivot(a, b, k, r):
    """Partial pivoting at column ``k``, decided by the values at evaluation time: the row
    with the largest magnitude (the first on ties, a number over nan) moves to row ``k``.

    Returns whether rows were exchanged (a select condition for atoms)."""
    n = len(a)
    best, best_abs = a[k][k], r.absval(a[k][k])
    conds = []
    for i in range(k + 1, n):
        cand, cand_abs = a[i][k], r.absval(a[i][k])
        c = r.better(cand_abs, cand, best_abs, best)
        conds.append((i, c))
        best = r.choose([(cand, c)], best)
        best_abs = r.choose([(cand_abs, c)], best_abs)
    picks, later = [], r.false
    for i, c in reversed(conds):  # row i is the pivot if it won and no later row did
        picks.append((i, r.both(c, r.negate(later))))
        later = r.either(later, c)
    picks.reverse()
    for rows in (a, b):
        top = [r.choose([(rows[i][j], p) for i, p in picks], rows[k][j])
               for j in range(len(rows[k]))]
        for i, p in picks:
            rows[i] = [r.choose([(rows[k][j], p)], rows[i][j]) for j in range(len(rows[i]))]
        rows[k] = top
    return later


def _eliminate(m, rhs, r):
    """Gaussian elimination of ``[m | rhs]`` with partial pivoting; returns
    (upper triangle, transformed rhs, sign of the row permutation)."""
    n = len(m)
    a = [list(row) for row in m]
    b = [list(row) for row in rhs]
    sign = r.one
    for k in range(n):
        swapped = _pivot(a, b, k, r)
        sign = r.choose([(r.neg(sign), swapped)], sign)
        for i in range(k + 1, n):
            f = r.div(a[i][k], a[k][k])
            for j in range(k + 1, n):
                a[i][j] = r.sub(a[i][j], r.mul(f, a[k][j]))
            for j in range(len(b[i])):
                b[i][j] = r.sub(b[i][j], r.mul(f, b[k][j]))
            a[i][k] = r.zero
    return a, b, sign


def _det(m, r):
    n = len(m)
    if n <= 3:
        return _det_small(m, r)
    u, _, sign = _eliminate(m, [[] for _ in range(n)], r)
    out = sign
    for k in range(n):
        out = r.mul(out, u[k][k])
    return out


def _solve(m, rhs, r):
    n = len(m)
    if n <= 3:
        inv = _inv(m, r)
        return [[functools.reduce(r.add, [r.mul(inv[i][k], rhs[k][j]) for k in range(n)],
                                  r.zero) for j in range(len(rhs[0]))] for i in range(n)]
    u, b, _ = _eliminate(m, rhs, r)
    x = [[r.zero] * len(b[0]) for _ in range(n)]
    for i in reversed(range(n)):
        for j in range(len(b[0])):
            acc = b[i][j]
            for k in range(i + 1, n):
                acc = r.sub(acc, r.mul(u[i][k], x[k][j]))
            x[i][j] = r.div(acc, u[i][i])
    return x


def _inv(m, r):
    n = len(m)
    if n > 3:
        ident = [[r.one if i == j else r.zero for j in range(n)] for i in range(n)]
        return _solve(m, ident, r)
    d = _det_small(m, r)
    cof = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            minor = [[m[a][b] for b in range(n) if b != j] for a in range(n) if a != i]
            c = _det_small(minor, r)
            cof[i][j] = c if (i + j) % 2 == 0 else r.sub(r.zero, c)
    return [[r.div(cof[j][i], d) for j in range(n)] for i in range(n)]


class _Linalg(Primitive):
    """A batched square-matrix op: closed forms for n <= 3, else elimination with partial
    pivoting decided per evaluation (selects), run alike on floats and on atoms."""

    def __init__(self, name: str, nargs: int, rules: Sequence) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)

    def check_square(self, shape, what="matrix"):
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise ShapeError(f"st.linalg.{self.name}: {what} must be a (batch of) square "
                             f"matrix, got shape {_fmt(shape)}")

    def _batched(self, arrays, ring, fn, out_core):
        batch = arrays[0].shape[:-2]
        out = np.empty(batch + out_core, dtype=object if ring is _AtomRing else np.float64)
        for idx in np.ndindex(*batch):
            res = fn(*[a[idx].tolist() for a in arrays], ring)
            out[idx] = np.asarray(res, dtype=out.dtype) if out_core else res
        return out

    unsettled = _irregular_anywhere

    def numeric(self, values, params):
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        out = self.compute(arrays, params, _FloatRing)
        return out.astype(np.asarray(values[0]).dtype)

    def build(self, atoms, params):
        return self.compute(atoms, params, _AtomRing)


class Det(_Linalg):
    def __init__(self) -> None:
        super().__init__("det", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape)
        t = self.check_dtypes(avals)
        return Aval(avals[0].shape[:-2], t), params

    def compute(self, arrays, params, ring):
        return self._batched(arrays, ring, _det, ())

    @staticmethod
    def _rule(g, ans, x):
        n = x.shape[-1]
        gb = reshape.bind(g, shape=tuple(g.shape) + (1, 1))
        if n <= 3:
            return multiply.bind(gb, cofactors(x))
        # TF: g * det(x) * inv(x)^T
        scale = multiply.bind(gb, reshape.bind(ans, shape=tuple(ans.shape) + (1, 1)))
        return multiply.bind(scale, transpose.bind(inv.bind(x), perm=_swap_last(len(x.shape))))


def _swap_last(rank: int) -> tuple:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def cofactors(x):
    """The cofactor matrix (the gradient of det), from determinants of minors."""
    n = x.shape[-1]
    batch = tuple(x.shape[:-2])
    idx = np.empty((n, n, max(n - 1, 0), max(n - 1, 0)), dtype=np.int64)
    for i in range(n):
        rows = [a for a in range(n) if a != i]
        for j in range(n):
            cols = [b for b in range(n) if b != j]
            for a, ra in enumerate(rows):
                for b, cb in enumerate(cols):
                    idx[i, j, a, b] = ra * n + cb
    flat = reshape.bind(x, shape=batch + (n * n,))
    minors = gather.bind(flat, indices=idx, axis=len(batch), batch_dims=0)
    dets = det.bind(minors)
    signs = np.array([[(-1.0) ** (i + j) for j in range(n)] for i in range(n)])
    return multiply.bind(dets, signs.astype(x.dtype))


class Inv(_Linalg):
    def __init__(self) -> None:
        super().__init__("inv", 1, (self._rule,))

    def prepare(self, avals, params):
        self.check_square(avals[0].shape)
        t = self.check_dtypes(avals)
        return Aval(avals[0].shape, t), params

    def compute(self, arrays, params, ring):
        n = arrays[0].shape[-1]
        return self._batched(arrays, ring, _inv, (n, n))

    @staticmethod
    def _rule(g, ans, x):
        # TF: -inv^T g inv^T
        inner = matmul.bind(g, ans, transpose_b=True)
        return negative.bind(matmul.bind(ans, inner, transpose_a=True))


class Solve(_Linalg):
    def __init__(self) -> None:
        super().__init__("solve", 2, (self._rule_a, self._rule_b))

    def prepare(self, avals, params):
        a, b = avals
        self.check_square(a.shape)
        t = self.check_dtypes(avals)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or \
                b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"st.linalg.solve: rhs of shape {_fmt(b.shape)} does not match "
                             f"matrix of shape {_fmt(a.shape)} (expected (..., "
                             f"{a.shape[-1]}, k))")
        return Aval(b.shape, t), {"adjoint": bool(params.get("adjoint", False))}

    def compute(self, arrays, params, ring):
        a, b = arrays
        if params.get("adjoint"):
            a = np.swapaxes(a, -1, -2)
        return self._batched([a, b], ring, _solve, b.shape[-2:])

    @staticmethod
    def _rule_b(g, ans, a, b, adjoint=False):
        return solve.bind(a, g, adjoint=not adjoint)

    @staticmethod
    def _rule_a(g, ans, a, b, adjoint=False):
        gb = solve.bind(a, g, adjoint=not adjoint)
        if adjoint:
            return negative.bind(matmul.bind(ans, gb, transpose_b=True))
        return negative.bind(matmul.bind(gb, ans, transpose_b=True))


det = _register(Det())
inv = _register(Inv())
solve = _register(Solve())


# --------------------------------------------------------------------------------------------
# Softmax family
# --------------------------------------------------------------------------------------------


class AxisOp(Primitive):
    """An op over one axis of its (first) argument: per-slice builder and numeric."""

    def __init__(self, name: str, nargs: int, slice_build: Callable, numeric: Callable,
                 rules: Sequence, reduces: bool = False) -> None:
        super().__init__(name, ("T",) * nargs, "f", rules=rules)
        self.slice_build = slice_build
        self._numeric = numeric
        self.reduces = reduces

    def prepare(self, avals, params):
        t = self.check_dtypes(avals)
        shape = avals[-1].shape
        for a in avals[:-1]:
            if a.shape != shape:
                raise ShapeError(f"st.nn.{self.name}: labels shape {_fmt(a.shape)} differs "
                                 f"from logits shape {_fmt(shape)}")
        if not shape:
            raise ShapeError(f"st.nn.{self.name}: logits must have rank >= 1")
        axis = params.get("axis", -1)
        axis = -1 if axis is None else axis
        if not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(f"st.nn.{self.name}: invalid axis {axis} for logits of "
                                       f"rank {len(shape)}")
        axis %= len(shape)
        out = tuple(n for i, n in enumerate(shape) if i != axis) if self.reduces else shape
        return Aval(out, t), {"axis": axis}

    def build(self, atoms, params):
        axis = params["axis"]
        moved = [np.moveaxis(a, axis, -1) for a in atoms]
        lead = moved[0].shape[:-1]
        out = _obj(lead if self.reduces else moved[0].shape)
        for idx in np.ndindex(*lead):
            res = self.slice_build(*[list(m[idx]) for m in moved])
            if self.reduces:
                out[idx] = res
            else:
                out[idx] = np.asarray(res, dtype=object)
        return out if self.reduces else np.moveaxis(out, -1, axis)

    def unsettled(self, atoms, params, shape, args=()):
        """Slices (of any argument) with a constant or a repeated atom."""
        axis = params["axis"]
        bad = functools.reduce(np.logical_or, [irregular_rows(_lanes(a, (axis,))) for a in atoms])
        lead = tuple(n for i, n in enumerate(atoms[-1].shape) if i != axis)
        bad = bad.reshape(lead)
        return bad if self.reduces else np.broadcast_to(np.expand_dims(bad, axis), shape)

    def numeric(self, values, params):
        with np.errstate(all="ignore"):
            return self._numeric(*[np.asarray(v) for v in values], axis=params["axis"])


def _stable_exps(xs):
    m = G.call(sp.Max, *xs)
    return [G.call(sp.exp, G.lincomb([(G.ONE, a), (sp.S.NegativeOne, m)])) for a in xs], m


def _softmax_slice(xs):
    if not xs:
        return []
    exps, _ = _stable_exps(xs)
    s = G.add(*exps)
    return [G.monomial(G.ONE, [(e, G.ONE), (s, sp.S.NegativeOne)]) for e in exps]


def _log_softmax_slice(xs):
    if not xs:
        return []
    exps, m = _stable_exps(xs)
    lse = G.call(sp.log, G.add(*exps))
    return [G.lincomb([(G.ONE, a), (sp.S.NegativeOne, m), (sp.S.NegativeOne, lse)]) for a in xs]


def _xent_slice(zs, xs):
    exps, m = _stable_exps(xs)
    lse = G.lincomb([(G.ONE, G.call(sp.log, G.add(*exps))), (G.ONE, m)])
    diffs = [G.lincomb([(G.ONE, lse), (sp.S.NegativeOne, x)]) for x in xs]
    return _sum_of_products([[z, d] for z, d in zip(zs, diffs)])


def _softmax_np(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / _sequential(e, (axis,), True)


def _log_softmax_np(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(_sequential(np.exp(x - m), (axis,), True))


def _xent_np(z, x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    lse = np.log(_sequential(np.exp(x - m), (axis,), True)) + m
    return _sequential(z * (lse - x), (axis,), False)


def _keep(t, axis):
    return expand_dims.bind(t, axis=axis)


softmax = _register(AxisOp(
    "softmax", 1, _softmax_slice, _softmax_np,
    (lambda g, ans, x, axis: multiply.bind(ans, subtract.bind(
        g, reduce_sum.bind(multiply.bind(g, ans), axis=axis, keepdims=True))),)))
log_softmax = _register(AxisOp(
    "log_softmax", 1, _log_softmax_slice, _log_softmax_np,
    (lambda g, ans, x, axis: subtract.bind(g, multiply.bind(
        exp.bind(ans), reduce_sum.bind(g, axis=axis, keepdims=True))),)))
# TF: d/dlogits = softmax - labels, d/dlabels = -log_softmax
softmax_cross_entropy_with_logits = _register(AxisOp(
    "softmax_cross_entropy_with_logits", 2, _xent_slice, _xent_np,
    (lambda g, ans, z, x, axis: multiply.bind(_keep(g, axis), negative.bind(
        log_softmax.bind(x, axis=axis))),
     lambda g, ans, z, x, axis: multiply.bind(_keep(g, axis), subtract.bind(
         softmax.bind(x, axis=axis), z))), reduces=True))


# --------------------------------------------------------------------------------------------
# stop_gradient
# --------------------------------------------------------------------------------------------


class StopGradient(Primitive):
    """The identity with no derivative: ``stop_gradient(x)`` in formulas, ``x`` in code."""

    exact_elsewhere = True  # values are copies (or casts) of input values

    def __init__(self) -> None:
        super().__init__("stop_gradient", ("T",), "fib", rules=(None,))

    def shape_rule(self, shapes, params):
        return shapes[0]

    def build(self, atoms, params):
        def one(a):
            return a if G.is_const(a) else G.alias(F.StopGradient, (a,), a)

        return _as_obj(np.frompyfunc(one, 1, 1)(atoms[0]), atoms[0].shape)

    def numeric(self, values, params):
        return np.array(values[0], copy=True)


stop_gradient = _register(StopGradient())


# --------------------------------------------------------------------------------------------
# Composites: API names TensorFlow itself defines as compositions of ops
# --------------------------------------------------------------------------------------------


def _entry(table: dict, name: str) -> Callable:
    """Decorator registering a function under ``name`` in ``table``."""
    def deco(fn):
        table[name] = fn
        return fn

    return deco


def composite(name: str) -> Callable:
    return _entry(COMPOSITES, name)


@composite("reduce_variance")
def reduce_variance(x, axis=None, keepdims=False):
    """Variance over ``axis`` (mean of squared deviations)."""
    m = reduce_mean.bind(x, axis=axis, keepdims=True)
    return reduce_mean.bind(square.bind(subtract.bind(x, m)), axis=axis, keepdims=keepdims)


@composite("trace")
def trace(x):
    """Sum of the diagonal of the last two axes."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ShapeError(f"st.linalg.trace: needs rank >= 2, got shape {_fmt(shape)}")
    return einsum.bind(x, spec="...ii->...")


@composite("tensordot")
def tensordot(a, b, axes):
    """``tensordot(a, b, axes)`` as numpy/TF: contract ``axes`` (int or pair of lists)."""
    ra, rb = len(a.shape), len(b.shape)
    if isinstance(axes, (int, np.integer)):
        if axes < 0 or axes > min(ra, rb):
            raise InvalidArgumentError(f"st.tensordot: axes={axes} out of range for ranks "
                                       f"{ra} and {rb}")
        ax_a, ax_b = list(range(ra - axes, ra)), list(range(axes))
    else:
        ax_a, ax_b = ([axes[0]] if np.ndim(axes[0]) == 0 else list(axes[0]),
                      [axes[1]] if np.ndim(axes[1]) == 0 else list(axes[1]))
        if len(ax_a) != len(ax_b):
            raise InvalidArgumentError("st.tensordot: axes lists have different lengths")
        ax_a = [int(i) % ra for i in ax_a]
        ax_b = [int(i) % rb for i in ax_b]
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(ra)]
    lb = [next(letters) for _ in range(rb)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
        [c for j, c in enumerate(lb) if j not in ax_b]
    return einsum.bind(a, b, spec=f"{''.join(la)},{''.join(lb)}->{''.join(out)}")


def _euclid(x, axis, keepdims):
    return sqrt.bind(reduce_sum.bind(multiply.bind(x, x), axis=axis, keepdims=keepdims))


@composite("norm")
def norm(tensor, ord="euclidean", axis=None, keepdims=False):
    """TF's ``norm``: vector p-norms, and 'fro', 1, inf for matrices (``axis`` a pair)."""
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        r = len(tensor.shape)
        a0, a1 = (int(axis[0]) % r, int(axis[1]) % r)
        if ord in ("euclidean", "fro"):
            return _euclid(tensor, (a0, a1), keepdims)
        if ord == 1:
            return reduce_max.bind(reduce_sum.bind(abs_.bind(tensor), axis=a0, keepdims=True),
                                   axis=(a0, a1), keepdims=keepdims)
        if ord in (np.inf, "inf"):
            return reduce_max.bind(reduce_sum.bind(abs_.bind(tensor), axis=a1, keepdims=True),
                                   axis=(a0, a1), keepdims=keepdims)
        raise InvalidArgumentError(f"st.norm: ord={ord!r} is not supported for matrices "
                                   "(use 'fro', 'euclidean', 1 or inf)")
    if ord in ("euclidean", 2, 2.0) or (ord == "fro" and axis is None):
        return _euclid(tensor, axis, keepdims)
    if ord in (np.inf, "inf"):
        return reduce_max.bind(abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if ord == 1:
        return reduce_sum.bind(abs_.bind(tensor), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        p = sp.Integer(ord) if float(ord).is_integer() else ord
        powered = pow_.bind(abs_.bind(tensor), int(p) if isinstance(p, sp.Integer) else p)
        total = reduce_sum.bind(powered, axis=axis, keepdims=keepdims)
        return pow_.bind(total, 1 / sp.Integer(p) if isinstance(p, sp.Integer) else 1.0 / p)
    raise InvalidArgumentError(f"st.norm: ord={ord!r} must be 'euclidean', 'fro', a positive "
                               "number or inf")


@composite("clip_by_norm")
def clip_by_norm(t, clip_norm, axes=None):
    """TF's ``clip_by_norm``: ``t * clip_norm / max(l2norm(t), clip_norm)``, safe at 0; a
    ``clip_norm <= 0`` is taken as 0 and gives zeros."""
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        if clip_norm <= 0:
            return multiply.bind(t, 0)
    elif clip_norm.dtype != t.dtype:
        clip_norm = cast.bind(clip_norm, dtype=t.dtype)
    l2sum = reduce_sum.bind(multiply.bind(t, t), axis=axes, keepdims=True)
    pred = greater.bind(l2sum, 0)
    l2sum_safe = where.bind(pred, l2sum, ones_like_of(l2sum))
    l2norm = where.bind(pred, sqrt.bind(l2sum_safe), l2sum)
    intermediate = multiply.bind(t, clip_norm)
    clipped = divide.bind(intermediate, maximum.bind(l2norm, clip_norm))
    if isinstance(clip_norm, (int, float, np.integer, np.floating)):
        return identity.bind(clipped)
    return identity.bind(where.bind(less_equal.bind(clip_norm, 0), 0, clipped))


def ones_like_of(t):
    return np.ones(tuple(t.shape), dtype=t.dtype)


@composite("global_norm")
def global_norm(t_list):
    """sqrt of the sum of squares of all elements of the (non-None) tensors."""
    sums = [reduce_sum.bind(multiply.bind(t, t)) for t in t_list if t is not None]
    if not sums:
        return 0.0
    return sqrt.bind(functools.reduce(add.bind, sums))


@composite("clip_by_global_norm")
def clip_by_global_norm(t_list, clip_norm, use_norm=None):
    """TF's ``clip_by_global_norm``: ``(clipped list, global norm)``; None entries kept."""
    t_list = list(t_list)
    gn = global_norm(t_list) if use_norm is None else use_norm
    one_over = divide.bind(1.0, gn) if not isinstance(gn, float) else math.inf
    scale = multiply.bind(clip_norm, minimum.bind(one_over, divide.bind(1.0, clip_norm)))
    # TF adds (norm - norm) so that an inf or nan norm makes every value nan; that difference
    # folds to 0 here, so the select says it instead
    finite = less.bind(abs_.bind(gn), math.inf)
    scale = where.bind(finite, scale, math.nan)
    return [None if t is None else identity.bind(multiply.bind(t, scale)) for t in t_list], gn


@composite("pad")
def pad(tensor, paddings, mode="CONSTANT", constant_values=0):
    """TF's ``pad``: ``paddings[i] = [before, after]`` for axis i; modes CONSTANT, REFLECT
    and SYMMETRIC (the gradient flows back to the elements each output copies)."""
    shape = tuple(tensor.shape)
    pads = np.asarray(paddings, dtype=np.int64).reshape(-1, 2)
    if pads.shape[0] != len(shape) or (pads < 0).any():
        raise InvalidArgumentError(f"st.pad: paddings must be {len(shape)} pairs of "
                                   f"non-negative ints, got {np.asarray(paddings).tolist()}")
    mode = str(mode).upper()
    modes = {"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric"}
    if mode not in modes:
        raise InvalidArgumentError(f"st.pad: mode must be CONSTANT, REFLECT or SYMMETRIC, "
                                   f"got {mode!r}")
    ids = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    kw = {"constant_values": -1} if mode == "CONSTANT" else {}
    try:
        idx = np.pad(ids, [tuple(p) for p in pads], mode=modes[mode], **kw)
    except ValueError as e:
        raise InvalidArgumentError(f"st.pad: {e}") from None
    out = gather_flat.bind(tensor, idx=idx)
    zero = not hasattr(constant_values, "shape") and np.ndim(constant_values) == 0 and \
        float(constant_values) == 0.0
    if mode == "CONSTANT" and not zero:
        out = where.bind(idx < 0, broadcast_to.bind(constant_values, shape=idx.shape), out)
    return out


@composite("leaky_relu")
def leaky_relu(features, alpha=0.2):
    """``features`` where positive, ``alpha * features`` elsewhere."""
    return leaky_relu_op(float(alpha)).bind(features)


@composite("fill")
def fill(dims, value):
    """A tensor of shape ``dims`` filled with ``value`` (differentiable in ``value``)."""
    return broadcast_to.bind(value, shape=tuple(int(d) for d in np.asarray(dims).reshape(-1)))


@composite("linspace")
def linspace(start, stop, num, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (TF's ``linspace_nd``:
    ``start + i * (stop - start) / (num - 1)``, the last value exactly ``stop``)."""
    num = int(num)
    shape = tuple(np.broadcast_shapes(tuple(getattr(start, "shape", np.shape(start))),
                                      tuple(getattr(stop, "shape", np.shape(stop)))))
    if num <= 0:
        raise InvalidArgumentError(f"st.linspace: num must be positive, got {num}")
    stop_row = expand_dims.bind(broadcast_to.bind(add.bind(stop, 0.0), shape=shape), axis=0)
    if num == 1:
        out = expand_dims.bind(broadcast_to.bind(add.bind(start, 0.0), shape=shape), axis=0)
    else:
        steps = np.arange(num - 1, dtype=np.float64).reshape((num - 1,) + (1,) * len(shape))
        delta = divide.bind(subtract.bind(stop, start), num - 1)
        body = add.bind(start, multiply.bind(steps, delta))
        out = concat.bind(body, stop_row, axis=0)
    if axis != 0:
        out = transpose.bind(out, perm=tuple(np.moveaxis(np.arange(len(shape) + 1), 0, axis)))
    return out


# --------------------------------------------------------------------------------------------
# Creation: constants with no inputs (no derivative)
# --------------------------------------------------------------------------------------------


def _creation(name: str) -> Callable:
    return _entry(CREATION, name)


@_creation("zeros")
def _zeros(shape, dtype):
    return np.zeros(shape, dtype=dtype)


@_creation("ones")
def _ones(shape, dtype):
    return np.ones(shape, dtype=dtype)


@_creation("eye")
def _eye(num_rows, num_columns=None, batch_shape=None, dtype=np.float64):
    m = np.eye(num_rows, num_columns if num_columns is not None else num_rows, dtype=dtype)
    if batch_shape:
        m = np.broadcast_to(m, tuple(batch_shape) + m.shape).copy()
    return m


@_creation("range")
def _range(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    out = np.arange(start, limit, delta)
    if dtype is None:
        dtype = np.float64 if out.dtype.kind == "f" else np.int32
    return out.astype(dtype)



"""SymPy interop: :func:`from_sympy` turns SymPy expressions (a Lagrangian, the forcing of
``sympy.physics.mechanics``' ``KanesMethod``) into symtape tensors, to differentiate and
compile like code written with ``st`` ops. (Formulas go the other way already:
``Tensor.formula()`` is written in SymPy's own symbols.)

>>> import sympy as sp, symtape as st
>>> q, qd = sp.symbols("q qd")
>>> L = qd**2 / 2 + 9.81 * sp.cos(q)
>>> x = st.symbol("x", shape=(2,))
>>> st.from_sympy(L, {q: x[0], qd: x[1]}).formula()
x_1**2/2 + 9.81*cos(x_0)
"""

from __future__ import annotations

import functools

import numpy as np

from symtape import math as M
from symtape.base.errors import InvalidArgumentError
from symtape.core.variables import Tensor, convert_to_tensor
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
H = LazyModule("H", globals(), "symtape.element.heads")

__all__ = ["from_sympy"]


def _tensor(x):
    return x if isinstance(x, Tensor) else convert_to_tensor(np.float64(x))


@functools.cache
def _rewrites() -> dict:
    """SymPy functions that are no head of symtape's graph, written with st ops."""
    return {sp.cot: lambda x: 1.0 / M.tan(x), sp.sec: lambda x: 1.0 / M.cos(x),
            sp.csc: lambda x: 1.0 / M.sin(x), sp.coth: lambda x: 1.0 / M.tanh(x),
            sp.sech: lambda x: 1.0 / M.cosh(x), sp.csch: lambda x: 1.0 / M.sinh(x),
            sp.erfc: M.erfc, sp.gamma: _gamma, sp.sinc: _sinc}


def _gamma(x):
    """Gamma from ``lgamma`` (log|Gamma|) and its sign: negative on (-1, 0), (-3, -2), ..."""
    sign = M.where(M.greater(x, 0.0), 1.0, 1.0 - 2.0 * M.floormod(M.ceil(-x), 2.0))
    return sign * M.exp(M.lgamma(x))


#: Below this |x|, sinc is its Taylor polynomial to x**8 (error below 1e-27, and its
#: derivatives exact to order 8 at 0, where sin(x)/x is 0/0).
SINC_SERIES_BELOW = 0.01


def _sinc(x):
    """SymPy's unnormalised ``sinc(x) = sin(x)/x`` (1 at 0)."""
    x2 = x * x
    series = 1.0 - x2 / 6.0 * (1.0 - x2 / 20.0 * (1.0 - x2 / 42.0 * (1.0 - x2 / 72.0)))
    return M.where(M.less(M.abs(x), SINC_SERIES_BELOW), series, M.sin(x) / x)


def _head_function(e):
    """The st function computing SymPy's ``e`` (its head's record, ``Head.st``), folded over
    the arguments for heads lowered as folds; None when there is none."""
    rec = H.record(type(e))
    if rec is not None and rec.st is not None:
        fn = getattr(M, rec.st)
        if rec.lower.startswith("fold:"):
            return lambda *args: functools.reduce(fn, args)
        return fn
    return _rewrites().get(type(e))


def from_sympy(expr, symbols: dict) -> Tensor:
    """The tensor computing the SymPy expression ``expr`` (or a ``Matrix``/``Array``/list of
    them: a tensor of that shape) from ``symbols``, a dict from the expression's symbols
    -- or any sub-expressions, such as ``q(t)`` and ``Derivative(q(t), t)`` of
    ``dynamicsymbols`` -- to tensors, arrays or numbers. Shared sub-expressions are
    computed once; integers and rational coefficients stay exact in formulas, other
    numbers are float64. Raises
    ``InvalidArgumentError`` naming a symbol without a value or a function symtape does
    not have.

    >>> import sympy as sp, symtape as st
    >>> a, b = sp.symbols("a b")
    >>> v = st.from_sympy(sp.Matrix([[a * b, sp.Piecewise((a, a > b), (b, True))]]),
    ...                   {a: 2.0, b: 3.0})
    >>> v.numpy()
    array([[6., 3.]])
    """
    if not isinstance(symbols, dict):
        raise InvalidArgumentError("st.from_sympy: symbols must be a dict from SymPy "
                                   "symbols (or sub-expressions) to values")
    dummies, values = {}, {}
    for key, value in symbols.items():
        if not isinstance(key, sp.Basic):
            raise InvalidArgumentError(f"st.from_sympy: key {key!r} of symbols is not a SymPy "
                                       "expression")
        d = sp.Dummy(str(key))
        dummies[key] = d
        values[d] = value if isinstance(value, Tensor) else convert_to_tensor(
            np.asarray(value, dtype=np.float64))
    return _Translator(dummies, values).tensor(expr)


class _Translator:
    def __init__(self, dummies: dict, values: dict) -> None:
        self.dummies = dummies
        self.values = values
        self.memo: dict = {}

    def tensor(self, expr):
        if isinstance(expr, (sp.MatrixBase, sp.NDimArray)):
            return self.tensor(expr.tolist())
        if isinstance(expr, (list, tuple)):
            if not expr:
                raise InvalidArgumentError("st.from_sympy: an empty list of expressions")
            return M.stack([self.tensor(e) for e in expr])
        if isinstance(expr, (int, float)):
            expr = sp.Float(expr)
        if not isinstance(expr, sp.Basic):
            raise InvalidArgumentError(f"st.from_sympy: {type(expr).__name__} is not a SymPy "
                                       "expression")
        expr = expr.xreplace(self.dummies)
        missing = expr.free_symbols - set(self.values)
        if missing:
            names = ", ".join(sorted(str(s) for s in missing))
            raise InvalidArgumentError(f"st.from_sympy: no value for {names}; give it in "
                                       "symbols")
        unknown = expr.atoms(sp.Derivative) | expr.atoms(sp.core.function.AppliedUndef)
        if unknown:
            back = {d: k for k, d in self.dummies.items()}
            names = sorted(str(u.xreplace(back)) for u in unknown)
            raise InvalidArgumentError(f"st.from_sympy: no value for {names}; map these "
                                       "sub-expressions in symbols")
        out = self.node(expr)
        return out if isinstance(out, Tensor) else convert_to_tensor(np.float64(out))

    def node(self, e):
        if e in self.memo:
            return self.memo[e]
        out = self.memo[e] = self._node(e)
        return out

    def _node(self, e):
        if e in self.values:
            return self.values[e]
        if e is sp.true or e is sp.false:
            return convert_to_tensor(bool(e))
        if e.is_number and e.is_extended_real is False:
            raise InvalidArgumentError(f"st.from_sympy: {e} is not a real number")
        if e.is_Number or e.is_NumberSymbol or e in (sp.oo, -sp.oo, sp.zoo, sp.nan):
            return int(e) if e.is_Integer else float(e)  # (ints stay exact in formulas)
        if isinstance(e, sp.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff.is_Rational and coeff != 1 and rest != 1:  # (p/q) * rest, exactly
                out = self.node(rest)
                out = out * int(coeff.p) if coeff.p != 1 else out
                return out / int(coeff.q) if coeff.q != 1 else out
        args = [self.node(a) for a in e.args] if not isinstance(e, sp.Piecewise) else None
        if isinstance(e, sp.Add):
            return functools.reduce(lambda a, b: a + b, args)
        if isinstance(e, sp.Mul):
            return functools.reduce(lambda a, b: a * b, args)
        if isinstance(e, sp.Pow):
            base, power = e.args
            if power == sp.S.Half:
                return M.sqrt(_tensor(args[0]))
            if power == -1:
                return 1 / _tensor(args[0])
            if power.is_Integer:
                return _tensor(args[0]) ** int(power)
            return _tensor(args[0]) ** args[1]
        if isinstance(e, sp.Piecewise):
            return self.piecewise(list(e.args))
        args = [_tensor(a) for a in args]
        fn = _head_function(e)
        if fn is not None:
            return fn(*args)
        if isinstance(e, sp.Heaviside):
            x = args[0]
            h0 = args[1] if len(args) > 1 else convert_to_tensor(np.float64(0.5))
            zero = convert_to_tensor(np.float64(0.0))
            return M.where(M.greater(x, zero), 1.0, M.where(M.less(x, zero), 0.0, h0))
        raise InvalidArgumentError(
            f"st.from_sympy: no st op for {e.func.__name__} (in {e}); give it as a sub-"
            "expression in symbols, or write it as a function with its own derivative rule "
            "(st.custom_gradient) and map it in symbols")

    def piecewise(self, pairs: list):
        (value, cond), *rest = pairs
        if cond is sp.true or not rest:
            return self.node(value)
        return M.where(self.node(cond), _tensor(self.node(value)),
                       _tensor(self.piecewise(rest)))

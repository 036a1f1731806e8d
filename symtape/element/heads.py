"""One record per SymPy head of the element DAG, read by everything that handles heads.

Each :class:`Head` states, in one place, what every layer needs of a head:

* ``numpy``: its numpy evaluation (constant folding in ``graph.py``, eager and reference
  evaluation in ``evaluate.py``);
* ``lower``: how code generation lowers it -- a low-level op of ``codegen/lower.py`` applied
  to the arguments (``apply:<op>``, the op carrying the LLVM IR, the C spelling and the C
  definitions it needs), a left fold (``fold:<op>``) or a structural rule (``rule:<name>``);
* ``exact``: whether constant arguments fold to SymPy's closed forms (``exp(0) -> 1``);
* ``taylor``: its Taylor rule, a function ``rule(s, value, *args)`` of the arguments'
  coefficient lists (``s``: the series arithmetic of ``derivatives/taylor.py``, passed in, so
  this level imports nothing above it; ``value``: the head applied to the arguments' values);
  None where the rule is structural (sums, products, powers, kinks) or there is none;
* ``st``: the ``symtape.math`` function computing it, which ``st.from_sympy`` maps it to
  (over all arguments, or folded over them for ``fold:`` heads);
* its name in saved files (``dataio``), the class name.

Adding a function to symtape is one op stanza plus, when its template brings a new SymPy
head, one record here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy as sp

from symtape.element import added_heads as F
from symtape.element.numeric import bessel_i0e, bessel_i1e, erfc, ieee_pow, lgamma, polygamma
from symtape.element.numeric import erf as _erf
from symtape.element.numeric import zeta as _zeta

__all__ = ["Head", "RECORDS", "HEADS", "NUMPY", "EXACT_FOLD", "record", "ieee_pow"]


@dataclass(frozen=True)
class Head:
    """A SymPy head: ``numpy`` evaluates it on arrays (None: evaluated structurally, as
    ``Add``, ``Mul``, ``Pow`` and ``Piecewise`` are), ``lower`` names its lowering, ``exact``
    says whether constants fold to closed forms, ``taylor`` is its Taylor rule and ``st`` the
    ``symtape.math`` function computing it (see the module's docstring)."""

    cls: type
    numpy: Callable | None
    lower: str
    exact: bool = False
    taylor: Callable | None = None
    st: str | None = None

    @property
    def name(self) -> str:
        """The name saved files use."""
        return self.cls.__name__


# --------------------------------------------------------------------------------------------
# numpy evaluations that are not one numpy function
# --------------------------------------------------------------------------------------------


def _max(*xs):
    return functools.reduce(np.maximum, xs)


def _min(*xs):
    return functools.reduce(np.minimum, xs)


def _heaviside(x, h0=0.5):
    dtype = np.result_type(x, 1.0)
    if np.ndim(h0) == 0 and h0 == 0:  # TensorFlow's step: nan and 0 give 0 either way
        return np.greater(x, 0).astype(dtype)
    return np.where(x > 0, 1.0, np.where(x < 0, 0.0, h0)).astype(dtype)


def _mod(x, y):
    with np.errstate(all="ignore"):
        return np.mod(x, y)


def _round_f32(x):
    return np.asarray(x).astype(np.float32).astype(np.result_type(x, np.float32))


# --------------------------------------------------------------------------------------------
# Taylor rules: rule(s, value, *series) -> series, in the series arithmetic ``s`` passed in
# --------------------------------------------------------------------------------------------

_NEG, _HALF = sp.Integer(-1), sp.Rational(1, 2)


def _steady(s, value, u, *rest):
    """Piecewise constant (steps, rounding): every derivative is zero almost everywhere."""
    return s.constant(value, len(u))


def _integral(derivative: Callable) -> Callable:
    """The rule of a function whose derivative is an algebraic function of its argument:
    ``derivative(s, u)`` is that derivative's series, which the result integrates."""
    return lambda s, value, u: s.by_derivative(u, value, derivative(s, u))


def _sin_cos(k: int, hyperbolic: bool) -> Callable:
    return lambda s, value, u: s.sin_cos(u, hyperbolic)[k]


def _square_based(sign: int) -> Callable:
    """``y' = (1 + sign y^2) u'`` (tan: +1, tanh: -1)."""
    return lambda s, value, u: s.square_based(u, value, sign)


def _inverse_root(sign: int, power) -> Callable:
    """``(1 + sign u^2) ** power`` as a derivative (atan, atanh, asin, asinh)."""
    return _integral(lambda s, u: s.power(s.one_minus_square(u, sign), power))


def _gauss(s, u):
    """``2/sqrt(pi) exp(-u^2)``, the derivative of erf."""
    return s.scaled(2 / sp.sqrt(sp.pi), s.exp(s.scaled(_NEG, s.product(u, u))))


def _polygamma_series(s, order, u: list, value) -> list:
    """psi^(order)(u): its derivative is psi^(order + 1)(u), whose series (one coefficient
    shorter) comes the same way, down to a value."""
    if len(u) == 1:
        return [value]
    higher = s.add(order, sp.S.One)
    slope = _polygamma_series(s, higher, u[:-1], s.call(sp.polygamma, higher, u[0]))
    return s.by_derivative(u, value, slope)


def _polygamma_rule(s, value, n, u):
    """polygamma(n, u) for an order that does not move (it has no derivative)."""
    return _polygamma_series(s, s.fixed(n, "the order of polygamma"), u, value)


def _loggamma_rule(s, value, u):
    """lgamma(u), whose derivative is digamma, psi^(0)(u)."""
    if len(u) == 1:
        return [value]
    psi = _polygamma_series(s, sp.S.Zero, u[:-1], s.call(sp.polygamma, sp.S.Zero, u[0]))
    return s.by_derivative(u, value, psi)


def _zeta_series(s, x, u: list, value) -> list:
    """zeta(x, u) for an x that does not move: its derivative in u is -x zeta(x + 1, u),
    whose series (one coefficient shorter) comes the same way, down to a value."""
    if len(u) == 1:
        return [value]
    higher = s.add(x, sp.S.One)
    inner = _zeta_series(s, higher, u[:-1], s.call(sp.zeta, higher, u[0]))
    slope = s.scaled(_NEG, s.product(s.constant(x, len(inner)), inner))
    return s.by_derivative(u, value, slope)


def _zeta_rule(s, value, x, u=None):
    """zeta(x, u): no derivative in x (TensorFlow's), so x must not move; SymPy's Riemann
    zeta(x) is zeta(x, 1)."""
    fixed = s.fixed(x, "the first argument of zeta")
    return s.constant(value, len(x)) if u is None else _zeta_series(s, fixed, u, value)


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

RECORDS: tuple[Head, ...] = (
    # arithmetic: evaluated, lowered and expanded structurally (quotients, power plans, folds)
    Head(sp.Add, lambda *a: functools.reduce(np.add, a), "fold:add"),
    Head(sp.Mul, lambda *a: functools.reduce(np.multiply, a), "rule:quotient"),
    Head(sp.Pow, ieee_pow, "rule:pow"),
    Head(sp.Piecewise, None, "rule:piecewise"),
    # elementary functions
    Head(sp.exp, np.exp, "apply:exp", True, lambda s, value, u: s.exp(u), "exp"),
    Head(sp.log, np.log, "apply:log", True, _integral(lambda s, u: s.power(u, _NEG)), "log"),
    Head(F.log1p, np.log1p, "apply:log1p", False,
         _integral(lambda s, u: s.power(s.shifted(u, sp.S.One), _NEG)), "log1p"),
    Head(F.expm1, np.expm1, "apply:expm1", False,
         lambda s, value, u: [value] + s.exp(u)[1:], "expm1"),
    Head(sp.sin, np.sin, "apply:sin", True, _sin_cos(0, False), "sin"),
    Head(sp.cos, np.cos, "apply:cos", True, _sin_cos(1, False), "cos"),
    Head(sp.tan, np.tan, "apply:tan", True, _square_based(1), "tan"),
    Head(sp.asin, np.arcsin, "apply:asin", True, _inverse_root(-1, -_HALF), "asin"),
    Head(sp.acos, np.arccos, "apply:acos", True, _integral(lambda s, u: s.scaled(_NEG, s.power(
        s.one_minus_square(u, -1), -_HALF))), "acos"),
    Head(sp.atan, np.arctan, "apply:atan", True, _inverse_root(1, _NEG), "atan"),
    Head(sp.sinh, np.sinh, "apply:sinh", True, _sin_cos(0, True), "sinh"),
    Head(sp.cosh, np.cosh, "apply:cosh", True, _sin_cos(1, True), "cosh"),
    Head(sp.tanh, np.tanh, "apply:tanh", True, _square_based(-1), "tanh"),
    Head(sp.asinh, np.arcsinh, "apply:asinh", True, _inverse_root(1, -_HALF), "asinh"),
    Head(sp.acosh, np.arccosh, "apply:acosh", True, _integral(lambda s, u: s.power(
        s.square_minus_one(u), -_HALF)), "acosh"),
    Head(sp.atanh, np.arctanh, "apply:atanh", True, _inverse_root(-1, _NEG), "atanh"),
    Head(sp.erf, _erf, "apply:erf", True, _integral(_gauss), "erf"),
    Head(sp.atan2, np.arctan2, "apply:atan2", False,
         lambda s, value, a, b: s.atan2(a, b, value), "atan2"),
    # the gamma family (digamma is polygamma(0, x), as in SymPy); constants fold in IEEE
    # double: SymPy's exact values (harmonic numbers, factorials) grow with the argument
    Head(sp.loggamma, lgamma, "apply:lgamma", False, _loggamma_rule, "lgamma"),
    Head(sp.polygamma, polygamma, "apply:polygamma", False, _polygamma_rule, "polygamma"),
    # erfc in its own right (1 - erf loses the tail), the scaled Bessel functions (their
    # derivatives hold each other and sign: no Taylor rule) and the Hurwitz zeta
    Head(sp.erfc, erfc, "apply:erfc", True,
         _integral(lambda s, u: s.scaled(_NEG, _gauss(s, u))), "erfc"),
    Head(F.BesselI0e, bessel_i0e, "apply:bessel_i0e", False, None, "bessel_i0e"),
    Head(F.BesselI1e, bessel_i1e, "apply:bessel_i1e", False, None, "bessel_i1e"),
    Head(sp.zeta, _zeta, "rule:zeta", False, _zeta_rule, "zeta"),
    # piecewise-constant and kinked functions (kinks: no series, see taylor.KINKED)
    Head(sp.Abs, np.abs, "apply:abs", True, None, "abs"),
    Head(sp.sign, np.sign, "apply:sign", True, _steady, "sign"),
    Head(sp.floor, np.floor, "apply:floor", True, _steady, "floor"),
    Head(sp.ceiling, np.ceil, "apply:ceil", True, _steady, "ceil"),
    Head(F.RoundHalfEven, np.rint, "apply:rint", False, _steady, "round"),
    Head(F.Trunc, np.trunc, "apply:trunc", False, _steady),
    Head(F.RoundFloat32, _round_f32, "apply:round_f32", False,
         lambda s, value, u: [value] + list(u[1:])),
    Head(sp.Mod, _mod, "apply:mod", False, None, "floormod"),
    Head(sp.Heaviside, _heaviside, "rule:heaviside", False, _steady),
    Head(sp.Max, _max, "fold:max", False, None, "maximum"),
    Head(sp.Min, _min, "fold:min", False, None, "minimum"),
    Head(F.StopGradient, lambda x: x, "rule:identity", False, None, "stop_gradient"),
    # comparisons and logic
    Head(sp.StrictLessThan, np.less, "apply:lt", st="less"),
    Head(sp.LessThan, np.less_equal, "apply:le", st="less_equal"),
    Head(sp.StrictGreaterThan, np.greater, "apply:gt", st="greater"),
    Head(sp.GreaterThan, np.greater_equal, "apply:ge", st="greater_equal"),
    Head(sp.Equality, np.equal, "apply:eq", st="equal"),
    Head(sp.Unequality, np.not_equal, "apply:ne", st="not_equal"),
    Head(sp.And, lambda *a: functools.reduce(np.logical_and, a), "fold:and", st="logical_and"),
    Head(sp.Or, lambda *a: functools.reduce(np.logical_or, a), "fold:or", st="logical_or"),
    Head(sp.Not, np.logical_not, "apply:not", st="logical_not"),
    Head(sp.ITE, lambda c, a, b: np.where(c, a, b), "rule:ite"),  # in derivatives of clip
)

#: ``SymPy head -> record``.
HEADS: dict[type, Head] = {r.cls: r for r in RECORDS}

#: ``SymPy head -> numpy evaluation`` of the heads evaluated by a function.
NUMPY: dict[type, Callable] = {r.cls: r.numpy for r in RECORDS if r.numpy is not None}

#: The heads whose constant arguments fold to SymPy's closed forms when exact (``exp(0)`` is
#: 1, ``log(E)`` is 1); others fold in IEEE double through their numpy evaluation.
EXACT_FOLD: frozenset = frozenset(r.cls for r in RECORDS if r.exact)


def record(head: type) -> Head | None:
    """The record of ``head`` or of its nearest base class in the table, or None.

    >>> record(sp.tanh).lower, record(sp.Add).name
    ('apply:tanh', 'Add')
    """
    for cls in head.__mro__:
        found = HEADS.get(cls)
        if found is not None:
            return found
    return None

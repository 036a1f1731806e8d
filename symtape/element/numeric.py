"""Numeric conventions of SymPy heads: power plans, quotients, IEEE ``pow`` and ``erf``; the
numpy evaluation of each head is its record in ``heads.py`` (``heads.NUMPY`` maps them).

Conventions (the lowering follows them too): integer powers are products by repeated
squaring, ``x**-k`` is ``1/x**k``, ``x**(1/2)`` a square root; ``Max``/``Min`` propagate nan;
comparisons with nan are false; ``Mod`` is the floored modulo; ``Heaviside(x, h0)`` is
``1``/``0``/``h0`` for ``x > 0``/``x < 0``/else.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")

__all__ = ["pow_plan", "power_const", "split_quotient", "ieee_pow", "erf", "quiet"]


try:  # numpy's floating-point error state is this context variable (what np.errstate sets)
    from numpy._core._ufunc_config import _extobj_contextvar as ERRSTATE
    from numpy._core._ufunc_config import _make_extobj

    IGNORE = _make_extobj(all="ignore")
except ImportError:  # another numpy layout: np.errstate itself
    ERRSTATE = IGNORE = None


class quiet:
    """``np.errstate(all="ignore")`` for a fifth of its cost: numpy's error-state context
    variable set directly (np.errstate itself where numpy keeps it elsewhere).

    >>> with quiet():
    ...     float(np.float64(1.0) / 0.0)
    inf
    """

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        if ERRSTATE is None:
            self._token = np.errstate(all="ignore")
            self._token.__enter__()
        else:
            self._token = ERRSTATE.set(IGNORE)

    def __exit__(self, *exc) -> None:
        if ERRSTATE is None:
            self._token.__exit__(*exc)
        else:
            ERRSTATE.reset(self._token)


def _exponent_value(e) -> float:
    return float(e.p) / float(e.q) if isinstance(e, sp.Rational) else float(sp.N(e, 20))


def pow_plan(exponent) -> tuple:
    """How a constant exponent is computed: ``('mul', k)``, ``('div', k)`` (1/x**k),
    ``('sqrt',)``, ``('rsqrt',)``, ``('cbrt',)`` or ``('pow', e)``.

    >>> pow_plan(sp.Integer(3)), pow_plan(sp.Integer(-1)), pow_plan(sp.Rational(1, 2))
    (('mul', 3), ('div', 1), ('sqrt',))
    """
    if isinstance(exponent, sp.Integer) or (
        isinstance(exponent, sp.Float) and float(exponent).is_integer()
    ):
        k = int(exponent)
        if 0 <= k <= 16:
            return ("mul", k)
        if -16 <= k < 0:
            return ("div", -k)
    if exponent == sp.Rational(1, 2):
        return ("sqrt",)
    if exponent == sp.Rational(-1, 2):
        return ("rsqrt",)
    return ("pow", _exponent_value(exponent))


def _ipow(x, k: int):
    """x**k by repeated squaring, in the order the lowering uses."""
    if k == 0:
        return np.ones_like(x) if isinstance(x, np.ndarray) else x * 0 + 1
    result = None
    base = x
    while k:
        if k & 1:
            result = base if result is None else result * base
        k >>= 1
        if k:
            base = base * base
    return result


def power_const(x, exponent, power=None):
    """x ** exponent for a constant exponent, following :func:`pow_plan` (``power`` computes
    the general case, default :func:`ieee_pow`)."""
    plan = pow_plan(exponent)
    kind = plan[0]
    with np.errstate(all="ignore"):
        if kind == "mul":
            return _ipow(x, plan[1])
        if kind == "div":
            return 1.0 / _ipow(x, plan[1])
        if kind == "sqrt":
            return np.sqrt(x)
        if kind == "rsqrt":
            return 1.0 / np.sqrt(x)
        return (power or ieee_pow)(x, plan[1])


def ieee_pow(x, e):
    """``x ** e`` as IEEE 754 and C's ``pow`` (hence compiled code) compute it.

    numpy's power takes a square root for an exponent of 0.5, which differs from ``pow`` at
    two points: ``pow(-inf, 0.5) = inf`` and ``pow(-0.0, 0.5) = +0.0``.

    >>> ieee_pow(np.array([-np.inf, -0.0, 4.0]), 0.5)
    array([inf,  0.,  2.])
    """
    with np.errstate(all="ignore"):
        out = np.asarray(np.power(x, e))
        if out.dtype.kind != "f":
            return out
        half = np.asarray(e) == 0.5
        if half.any():
            base = np.asarray(x)
            out = np.where(half & (base == -np.inf), out.dtype.type(np.inf), out)
            out = np.where(half & (base == 0), out.dtype.type(0), out)
        return out


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    """The error function elementwise (``math.erf``; float results)."""
    x = np.asarray(x)
    out = _erf_vec(x) if x.size else np.zeros(x.shape)
    return out.astype(x.dtype if x.dtype.kind == "f" else np.float64)


def split_quotient(args) -> tuple[list, list]:
    """The factors of a ``Mul`` as ``(numerators, denominators)``: ``Pow(b, -e)`` with a
    negative constant exponent becomes ``(b, e)`` in the denominators, so ``x*y**-1`` is
    computed as ``x / y`` (as numpy's ``x / y`` rounds), not ``x * (1/y)``.

    >>> x, y = sp.symbols("x y")
    >>> split_quotient((x, sp.Pow(y, -2, evaluate=False)))
    ([x], [(y, 2)])
    """
    num, den = [], []
    for a in args:
        if a.is_Pow and a.exp.is_number and a.exp.is_negative:
            den.append((a.base, -a.exp))
        else:
            num.append(a)
    return num, den

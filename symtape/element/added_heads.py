"""SymPy function heads that symtape adds to SymPy's own.

``log1p``/``expm1`` come from ``sympy.codegen.cfunctions``; the rest are defined here: the
half-to-even rounding TensorFlow uses, truncation (float -> int casts), ``stop_gradient`` and
the base class of user functions with their own derivative rule (``custom_gradient``,
``define_function``), which print by name, and the exponentially scaled modified Bessel
functions ``bessel_i0e``/``bessel_i1e`` (SymPy has ``besseli`` alone).
"""

from __future__ import annotations

import itertools

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from symtape.base.errors import NonDifferentiableError

__all__ = [
    "log1p",
    "expm1",
    "RoundHalfEven",
    "Trunc",
    "RoundFloat32",
    "StopGradient",
    "CustomCall",
    "custom_head",
    "BesselI0e",
    "BesselI1e",
    "BESSEL_I1E_TINY",
]


class _Printed:
    """Prints as ``display(args)`` in text and LaTeX (a Python-reserved or TF name)."""

    display = ""

    def _sympystr(self, printer):
        return f"{self.display}({', '.join(printer._print(a) for a in self.args)})"

    def _latex(self, printer, exp=None):
        inner = ", ".join(printer._print(a) for a in self.args)
        name = self.display.replace("_", r"\_")
        base = rf"\operatorname{{{name}}}{{\left({inner} \right)}}"
        return base if exp is None else rf"{base}^{{{exp}}}"


class _Step(_Printed, sp.Function):
    """A one-argument head whose derivative is zero almost everywhere."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sp.S.Zero


class RoundHalfEven(_Step):
    """``round(x)``: nearest integer, ties to even (TensorFlow's and numpy's rounding)."""

    display = "round"


class Trunc(_Step):
    """``trunc(x)``: rounding toward zero, as a float -> int cast does."""

    display = "trunc"


class StopGradient(_Step):
    """``stop_gradient(x)``: the identity through which no derivative flows."""

    display = "stop_gradient"


class RoundFloat32(_Printed, sp.Function):
    """``float32(x)``: ``x`` rounded to single precision (a float64 -> float32 cast)."""

    nargs = 1
    display = "float32"

    def fdiff(self, argindex=1):
        return sp.S.One


class CustomCall(_Printed, sp.Function):
    """Base of the heads of user functions with their own derivative rule.

    A subclass is made per function (see :func:`custom_head`); it prints as the function's
    name. Its derivative is the user's rule, applied on tapes; SymPy's ``diff`` of it is not
    defined, and says so.
    """

    display = "custom"

    @classmethod
    def eval(cls, *args):
        return None

    def fdiff(self, argindex=1):
        raise NonDifferentiableError(
            f"{self.display} has a user derivative rule, which applies on tapes: differentiate "
            "it with st.GradientTape (or st.grad), not with sympy.diff of its formula"
        )


_head_ids = itertools.count()


def custom_head(name: str) -> type:
    """A fresh SymPy function class printed as ``name`` with a user derivative rule.

    >>> f = custom_head("clip_gradients")
    >>> x = sp.Symbol("x")
    >>> str(f(x))
    'clip_gradients(x)'
    """
    ident = next(_head_ids)
    safe = "".join(ch if ch.isalnum() else "_" for ch in name) or "custom"
    return type(f"{safe}__{ident}", (CustomCall,), {"display": name})


def _scaled_besseli(order: int, x, prec: int):
    """``exp(-|x|) besseli(order, x)`` at ``prec`` bits for a number ``x`` (else None)."""
    if not x.is_number:
        return None
    from sympy.core.evalf import prec_to_dps

    return (sp.exp(-sp.Abs(x)) * sp.besseli(order, x)).evalf(prec_to_dps(prec))


class BesselI0e(_Printed, sp.Function):
    """``bessel_i0e(x) = exp(-|x|) I0(x)``; its derivative ``bessel_i1e(x) - sign(x)
    bessel_i0e(x)`` (TensorFlow's).

    >>> x = sp.Symbol("x")
    >>> BesselI0e(x).diff(x)
    -bessel_i0e(x)*sign(x) + bessel_i1e(x)
    >>> BesselI0e(sp.Float(1.0)).evalf(10)
    0.4657596076
    """

    nargs = 1
    display = "bessel_i0e"

    @classmethod
    def eval(cls, x):
        if x.is_zero:
            return sp.S.One
        return None

    def fdiff(self, argindex=1):
        x = self.args[0]
        return BesselI1e(x) - sp.sign(x) * self

    def _eval_evalf(self, prec):
        return _scaled_besseli(0, self.args[0], prec)


#: below this |x| the derivative of bessel_i1e is its value at 0, 1/2 (TensorFlow's rule:
#: the general form divides by x)
BESSEL_I1E_TINY = 2.220446049250313e-16


class BesselI1e(_Printed, sp.Function):
    """``bessel_i1e(x) = exp(-|x|) I1(x)``; its derivative ``bessel_i0e(x) - bessel_i1e(x)
    (sign(x) + 1/x)``, and 1/2 where ``|x|`` is below the float64 epsilon (TensorFlow's).

    >>> x = sp.Symbol("x")
    >>> BesselI1e(0), BesselI1e(-x)
    (0, -bessel_i1e(x))
    """

    nargs = 1
    display = "bessel_i1e"

    @classmethod
    def eval(cls, x):
        if x.is_zero:
            return sp.S.Zero
        if x.could_extract_minus_sign():
            return -cls(-x)
        return None

    def fdiff(self, argindex=1):
        x = self.args[0]
        general = BesselI0e(x) - self * (sp.sign(x) + 1 / x)
        return sp.Piecewise((sp.S.Half, sp.Abs(x) <= sp.Float(BESSEL_I1E_TINY)),
                            (general, True))

    def _eval_evalf(self, prec):
        return _scaled_besseli(1, self.args[0], prec)

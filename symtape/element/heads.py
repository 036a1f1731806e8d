"""One record per SymPy head of the element DAG, read by everything that handles heads.

Each :class:`Head` gives the head's numpy evaluation (constant folding in ``graph.py``, eager
and reference evaluation in ``evaluate.py``), how code generation lowers it (``lower``: a
low-level op of ``codegen/lower.py`` applied to the arguments, ``apply:<op>``; a left fold,
``fold:<op>``; or a structural rule, ``rule:<name>``; the op carries the LLVM IR and the C
spelling) and its name in saved files (``dataio``). Adding a function to symtape is one op
stanza plus, when its template brings a new SymPy head, one record here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy as sp

from symtape.element import added_heads as F
from symtape.element.numeric import erf as _erf
from symtape.element.numeric import ieee_pow

__all__ = ["Head", "RECORDS", "HEADS", "NUMPY", "record", "ieee_pow"]


@dataclass(frozen=True)
class Head:
    """A SymPy head: ``numpy`` evaluates it on arrays (None: evaluated structurally, as
    ``Add``, ``Mul``, ``Pow`` and ``Piecewise`` are), ``lower`` names its lowering."""

    cls: type
    numpy: Callable | None
    lower: str

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
# The table
# --------------------------------------------------------------------------------------------

RECORDS: tuple[Head, ...] = (
    # arithmetic: evaluated and lowered structurally (quotients, power plans, folds)
    Head(sp.Add, lambda *a: functools.reduce(np.add, a), "fold:add"),
    Head(sp.Mul, lambda *a: functools.reduce(np.multiply, a), "rule:quotient"),
    Head(sp.Pow, ieee_pow, "rule:pow"),
    Head(sp.Piecewise, None, "rule:piecewise"),
    # elementary functions
    Head(sp.exp, np.exp, "apply:exp"),
    Head(sp.log, np.log, "apply:log"),
    Head(F.log1p, np.log1p, "apply:log1p"),
    Head(F.expm1, np.expm1, "apply:expm1"),
    Head(sp.sin, np.sin, "apply:sin"),
    Head(sp.cos, np.cos, "apply:cos"),
    Head(sp.tan, np.tan, "apply:tan"),
    Head(sp.asin, np.arcsin, "apply:asin"),
    Head(sp.acos, np.arccos, "apply:acos"),
    Head(sp.atan, np.arctan, "apply:atan"),
    Head(sp.sinh, np.sinh, "apply:sinh"),
    Head(sp.cosh, np.cosh, "apply:cosh"),
    Head(sp.tanh, np.tanh, "apply:tanh"),
    Head(sp.asinh, np.arcsinh, "apply:asinh"),
    Head(sp.acosh, np.arccosh, "apply:acosh"),
    Head(sp.atanh, np.arctanh, "apply:atanh"),
    Head(sp.erf, _erf, "apply:erf"),
    Head(sp.atan2, np.arctan2, "apply:atan2"),
    # piecewise-constant and kinked functions
    Head(sp.Abs, np.abs, "apply:abs"),
    Head(sp.sign, np.sign, "apply:sign"),
    Head(sp.floor, np.floor, "apply:floor"),
    Head(sp.ceiling, np.ceil, "apply:ceil"),
    Head(F.RoundHalfEven, np.rint, "apply:rint"),
    Head(F.Trunc, np.trunc, "apply:trunc"),
    Head(F.RoundFloat32, _round_f32, "apply:round_f32"),
    Head(sp.Mod, _mod, "apply:mod"),
    Head(sp.Heaviside, _heaviside, "rule:heaviside"),
    Head(sp.Max, _max, "fold:max"),
    Head(sp.Min, _min, "fold:min"),
    Head(F.StopGradient, lambda x: x, "rule:identity"),
    # comparisons and logic
    Head(sp.StrictLessThan, np.less, "apply:lt"),
    Head(sp.LessThan, np.less_equal, "apply:le"),
    Head(sp.StrictGreaterThan, np.greater, "apply:gt"),
    Head(sp.GreaterThan, np.greater_equal, "apply:ge"),
    Head(sp.Equality, np.equal, "apply:eq"),
    Head(sp.Unequality, np.not_equal, "apply:ne"),
    Head(sp.And, lambda *a: functools.reduce(np.logical_and, a), "fold:and"),
    Head(sp.Or, lambda *a: functools.reduce(np.logical_or, a), "fold:or"),
    Head(sp.Not, np.logical_not, "apply:not"),
    Head(sp.ITE, lambda c, a, b: np.where(c, a, b), "rule:ite"),  # in derivatives of clip
)

#: ``SymPy head -> record``.
HEADS: dict[type, Head] = {r.cls: r for r in RECORDS}

#: ``SymPy head -> numpy evaluation`` of the heads evaluated by a function.
NUMPY: dict[type, Callable] = {r.cls: r.numpy for r in RECORDS if r.numpy is not None}


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

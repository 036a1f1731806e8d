"""Data-only encodings for files: SymPy expressions, numpy arrays and parameter values as
JSON, inside a framed, checksummed document.

Nothing read here is ever evaluated. An expression is a nested list ``[head, *operands]``
whose head is looked up in a closed table (:data:`HEADS`: numbers, the constants symtape
folds to, symbols with their assumptions, and the heads a graph can hold); a value is a tagged
list (``["tuple", [...]]``, ``["float", "0x1.8p+1"]``, ``["ndarray", {...}]``); an array is
raw little-endian bytes of a whitelisted dtype. Anything else, or anything of the wrong shape,
raises :class:`~symtape.base.errors.SerializationError` naming what is wrong, before anything is
built from it. Floats are kept exactly (hex text for Python floats, the binary mantissa and
exponent for SymPy Floats), so a decoded expression is the encoded one, ``srepr`` and all.

>>> x = sp.Symbol("x", real=True)
>>> e = sp.sqrt(2) * sp.sin(x) + sp.Float(0.1)
>>> decode_expr(encode_expr(e)) == e
True
"""

from __future__ import annotations

import base64
import binascii
import errno
import functools
import hashlib
import json
import math
import os
import re
import stat
import struct
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from symtape.base.errors import SerializationError
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
H = LazyModule("H", globals(), "symtape.element.heads")
assumptions = LazyModule("assumptions", globals(), "sympy.core.assumptions")

__all__ = [  # noqa: F822 - HEADS: __getattr__
    "HEADS",
    "DTYPES",
    "MAX_DEPTH",
    "MAX_MAGNITUDE",
    "MAX_CONSTANT_NODES",
    "MAX_CONSTANT_HEIGHT",
    "MAX_CONSTANT_PRECISION",
    "MAX_ELEMENTS",
    "expect_shape",
    "encode_expr",
    "decode_expr",
    "expr_text",
    "expr_from_text",
    "number_value",
    "encode_array",
    "decode_array",
    "encode_value",
    "decode_value",
    "dump_document",
    "read_file",
    "read_at_most",
    "file_kind",
    "load_document",
    "record",
    "expect",
    "expect_int",
    "expect_list",
]

# Nesting deeper than this (expressions, values, documents) is refused: no graph, template
# or parameter symtape writes comes near it, and it keeps decoding far from Python's stack.
MAX_DEPTH = 200
# Nodes per decoded expression: a guard against a small file that decodes to a huge tree.
MAX_NODES = 200_000
# SymPy Float precision (bits) and the exponent range accepted for a Float.
_MAX_PREC = 1 << 16
_MAX_EXP = 1 << 32
# Exact constants are evaluated by SymPy (a compiled function's constants on load, a saved
# model's when it runs), whose cost grows with the size of the numbers it meets: sin(x) needs
# log2|x| bits of pi, and 2**(2**24) or exp(exp(exp(9))) have no bound at all. So every
# constant part of a decoded expression is enclosed in an interval, operation by operation,
# before SymPy sees it, and refused unless each value is 0 or of magnitude between
# 2**-MAX_MAGNITUDE and 2**MAX_MAGNITUDE (far beyond a double's range). Integer and Rational
# fields have at most MAX_MAGNITUDE bits; a constant has at most MAX_CONSTANT_NODES nodes in
# MAX_CONSTANT_HEIGHT levels (evalf re-evaluates operands as it raises precision, so its work
# grows geometrically with nesting), needs at most MAX_CONSTANT_PRECISION extra bits of
# working precision (_demand), and holds no head SymPy decides by simplification (_DECIDED).
# The costliest constants within these bounds take SymPy about 0.1 s to evaluate.
MAX_MAGNITUDE = 4096
MAX_CONSTANT_NODES = 64
MAX_CONSTANT_HEIGHT = 8
MAX_CONSTANT_PRECISION = 1100
_CANCEL_BITS = 333  # how far evalf raises precision in a sum that cancels (its maxprec)
_ENCLOSURE_PREC = 80  # bits of the interval arithmetic: only magnitudes and signs matter

# --------------------------------------------------------------------------------------------
# Expressions: the closed table of heads
# --------------------------------------------------------------------------------------------


class _Tables:
    """The closed table of heads, built from SymPy and ``heads.py`` on first use (so that
    reading a file of plain numbers needs neither).

    ``atoms``: constants written as a bare head (``["pi"]``), the numbers a constant fold can
    give; ``heads``: function heads, written ``[name, *operands]`` -- the records of
    ``heads.py`` (arithmetic, elementary functions, comparisons, logic, symtape's own heads,
    ``Piecewise``) and ``Piecewise``'s pairs -- and the reverse maps of both."""

    def __init__(self) -> None:
        S = sp.S
        self.atoms: dict[str, sp.Basic] = {
            "pi": S.Pi,
            "E": S.Exp1,
            "EulerGamma": S.EulerGamma,
            "Catalan": S.Catalan,
            "GoldenRatio": S.GoldenRatio,
            "TribonacciConstant": S.TribonacciConstant,
            "oo": S.Infinity,
            "-oo": S.NegativeInfinity,
            "zoo": S.ComplexInfinity,
            "nan": S.NaN,
            "true": S.true,
            "false": S.false,
        }
        self.atom_names = {type(v): k for k, v in self.atoms.items()}
        self.pair = sp.functions.elementary.piecewise.ExprCondPair
        functions = tuple(r.cls for r in H.RECORDS) + (self.pair,)
        self.heads: dict[str, type] = {cls.__name__: cls for cls in functions}
        self.head_names: dict[type, str] = {cls: name for name, cls in self.heads.items()}


@functools.cache
def _tables() -> _Tables:
    return _Tables()


def __getattr__(name: str):
    if name == "HEADS":  # ``name -> SymPy head`` of saved expressions, built on first use
        return _tables().heads
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encode_expr(expr) -> list:
    """``expr`` as nested lists of JSON values (raises ``SerializationError`` for a head that
    is not in :data:`HEADS`, or a symbol of a subclass such as a graph leaf).

    >>> encode_expr(sp.Rational(1, 3) * sp.pi)
    ['Mul', ['Rational', 1, 3], ['pi']]
    >>> encode_expr(sp.Symbol("x", real=True) ** 2)
    ['Pow', ['Symbol', 'x', {'real': True}], ['Integer', 2]]
    """
    return _encode(sp.sympify(expr) if isinstance(expr, (bool, int)) else expr, 0, [0])


def _encode(e, depth: int, count: list) -> list:
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SerializationError(f"expression is too large to save (deeper than {MAX_DEPTH} "
                                 f"or more than {MAX_NODES} nodes)")
    cls = type(e)
    tables = _tables()
    atom = tables.atom_names.get(cls)
    if atom is not None:
        return [atom]
    if isinstance(e, sp.Integer):
        return ["Integer", int(e.p)]
    if isinstance(e, sp.Rational):
        return ["Rational", int(e.p), int(e.q)]
    if cls is sp.Float:
        sign, man, exp, bc = e._mpf_
        return ["Float", int(sign), int(man), int(exp), int(bc), int(e._prec)]
    if cls is sp.Symbol:
        given = getattr(e, "_assumptions_orig", None)
        if given is None:
            given = e.assumptions0  # older SymPy kept no record of the given ones
        return ["Symbol", e.name, {k: bool(v) for k, v in given.items()}]
    name = tables.head_names.get(cls)
    if name is None or not isinstance(e, sp.Basic):
        label = cls.__name__ if isinstance(e, sp.Basic) else f"Python {cls.__name__}"
        raise SerializationError(
            f"cannot save an expression with head {label!r} ({str(e)[:60]}): saved files "
            "hold only numbers, symbols and the heads listed in symtape.io.dataio.HEADS"
        )
    return [name] + [_encode(a, depth + 1, count) for a in e.args]


def decode_expr(node, where: str = "expression"):
    """The SymPy expression of a node made by :func:`encode_expr`; nothing is evaluated: heads
    come from :data:`HEADS`, and anything else raises ``SerializationError`` naming ``where``.

    >>> decode_expr(["Add", ["Integer", 1], ["Symbol", "y", {}]])
    y + 1
    >>> decode_expr(["__import__", ["Integer", 1]])
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: expression: unknown head '__import__'
    """
    expr, shape = _decode(node, where, 0, [0])
    if shape is not None and shape[1] > 1:
        _bound_tree(node, where)
    return expr


def _decode(node, where: str, depth: int, count: list) -> tuple:
    """``(expression, shape)``: for a constant (no symbols) its ``(nodes, height)``, else None.
    The largest constant parts of an expression are bounded (:func:`_bound_tree`) as soon as
    they are known, and refused before anything evaluates them."""
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SerializationError(f"{where}: nested deeper than {MAX_DEPTH} or larger than "
                                 f"{MAX_NODES} nodes")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise SerializationError(f"{where}: malformed node {_show(node)} (expected a list "
                                 "starting with a head name)")
    head, args = node[0], node[1:]
    tables = _tables()
    atom = tables.atoms.get(head)
    if atom is not None:
        _arity(where, head, args, 0)
        return atom, (1, 1)
    number = _NUMBERS.get(head)
    if number is not None:
        return number(where, args), (None if head == "Symbol" else (1, 1))
    cls = tables.heads.get(head)
    if cls is None:
        raise SerializationError(f"{where}: unknown head {head[:40]!r}")
    decoded = [_decode(a, where, depth + 1, count) for a in args]
    expr = _build(where, head, cls, [d[0] for d in decoded])
    shapes = [d[1] for d in decoded]
    if all(sh is not None for sh in shapes):
        size, height = 1 + sum(sh[0] for sh in shapes), 1 + max(sh[1] for sh in shapes)
        if size > MAX_CONSTANT_NODES or height > MAX_CONSTANT_HEIGHT:
            raise SerializationError(
                f"{where}: the constant {_show(node)} has {size} nodes in {height} levels (at "
                f"most {MAX_CONSTANT_NODES} in {MAX_CONSTANT_HEIGHT}): SymPy's evaluation of "
                "a constant grows quickly with its size and nesting")
        return expr, (size, height)
    for a, sh in zip(args, shapes):
        if sh is not None and sh[1] > 1:  # (a number's fields are bounded where it is read)
            _bound_tree(a, where)
    return expr, None


def _show(node) -> str:
    text = json.dumps(node)[:60] if _jsonable(node) else type(node).__name__
    return text


def _jsonable(node) -> bool:
    try:
        json.dumps(node)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _arity(where: str, head: str, args: list, n: int) -> None:
    if len(args) != n:
        raise SerializationError(f"{where}: {head} takes {n} fields, got {len(args)}")


def _integer_field(where: str, args: list) -> int:
    _arity(where, "Integer", args, 1)
    return _bounded_int(args[0], f"{where}: Integer")


def _bounded_int(value, where: str) -> int:
    n = expect_int(value, where)
    if n.bit_length() > MAX_MAGNITUDE:
        raise SerializationError(f"{where}: an integer of {n.bit_length()} bits (at most "
                                 f"{MAX_MAGNITUDE})")
    return n


def _rational_fields(where: str, args: list) -> tuple:
    _arity(where, "Rational", args, 2)
    p = _bounded_int(args[0], f"{where}: Rational numerator")
    q = _bounded_int(args[1], f"{where}: Rational denominator")
    if q < 2 or math.gcd(p, q) != 1:
        raise SerializationError(f"{where}: Rational {p}/{q} is not in lowest terms with a "
                                 "denominator above 1")
    return p, q


def _float_fields(where: str, args: list) -> tuple:
    _arity(where, "Float", args, 5)
    sign, man, exp, bc, prec = (expect_int(a, f"{where}: Float field") for a in args)
    ok = (sign in (0, 1) and man > 0 and man % 2 == 1 and bc == man.bit_length()
          and 1 <= bc <= prec <= _MAX_PREC and abs(exp) <= _MAX_EXP)
    if ok and not -MAX_MAGNITUDE <= exp + bc <= MAX_MAGNITUDE:
        raise SerializationError(f"{where}: the Float (-1)**{sign} * {man} * 2**{exp} is "
                                 f"beyond 2**+-{MAX_MAGNITUDE} in magnitude; constants in "
                                 f"files are 0 or between 2**-{MAX_MAGNITUDE} and "
                                 f"2**{MAX_MAGNITUDE}")
    zero = (sign, man, exp, bc) == (0, 0, 0, 0) and 1 <= prec <= _MAX_PREC
    if not (ok or zero):
        raise SerializationError(f"{where}: Float fields {args!r} are not a normalised "
                                 "binary float (sign, odd mantissa, exponent, bit count, "
                                 "precision)")
    return sign, man, exp, bc, prec


def _integer(where: str, args: list):
    return sp.Integer(_integer_field(where, args))


def _rational(where: str, args: list):
    return sp.Rational(*_rational_fields(where, args))


def _float(where: str, args: list):
    sign, man, exp, bc, prec = _float_fields(where, args)
    return sp.Float._new((sign, man, exp, bc), prec, zero=False)


def _symbol(where: str, args: list):
    _arity(where, "Symbol", args, 2)
    name, given = args
    if not isinstance(name, str):
        raise SerializationError(f"{where}: a Symbol name must be a string, got {_show(name)}")
    known = assumptions._assume_defined
    if not isinstance(given, dict) or not all(
            k in known and isinstance(v, bool) for k, v in given.items()):
        raise SerializationError(f"{where}: Symbol {name[:40]!r} has malformed assumptions "
                                 f"{_show(given)} (expected {{name: true/false}})")
    try:
        return sp.Symbol(name, **given)
    except Exception as exc:  # noqa: BLE001 - contradictory assumptions: a bad file
        raise SerializationError(f"{where}: Symbol {name[:40]!r}: {exc}") from None


_NUMBERS: dict[str, Callable] = {
    "Integer": _integer,
    "Rational": _rational,
    "Float": _float,
    "Symbol": _symbol,
}

_FIXED_ARITY = {"ExprCondPair": 2, "Pow": 2, "ITE": 3, "Not": 1}


def _build(where: str, head: str, cls: type, args: list):
    """``cls(*args)`` as stored: unevaluated, so the saved structure comes back exactly."""
    _check_operands(where, head, cls, args)
    try:
        if head == "ExprCondPair":
            return _tables().pair(*args)
        return cls(*args, evaluate=False)
    except Exception as exc:  # noqa: BLE001 - SymPy refuses the operands: a bad file
        raise SerializationError(f"{where}: {head} of these operands is invalid: "
                                 f"{type(exc).__name__}: {str(exc)[:80]}") from None


def _check_operands(where: str, head: str, cls: type, args: list) -> None:
    fixed = _FIXED_ARITY.get(head)
    if fixed is None and issubclass(cls, sp.core.relational.Relational):
        fixed = 2
    nargs = getattr(cls, "nargs", None)
    if fixed is not None:
        allowed = [fixed]
    elif isinstance(nargs, sp.FiniteSet):
        allowed = sorted(int(n) for n in nargs)
    else:
        allowed = None
    if allowed is not None and len(args) not in allowed:
        raise SerializationError(f"{where}: {head} takes {' or '.join(map(str, allowed))} "
                                 f"operands, got {len(args)}")
    if not args:
        raise SerializationError(f"{where}: {head} needs operands")
    pairs = [isinstance(a, _tables().pair) for a in args]
    if head == "Piecewise" and not all(pairs):
        raise SerializationError(f"{where}: the operands of Piecewise are ExprCondPairs")
    if head != "Piecewise" and any(pairs):
        raise SerializationError(f"{where}: an ExprCondPair is an operand of {head}; it may "
                                 "appear only in a Piecewise")


# --------------------------------------------------------------------------------------------
# Expressions: bounds on constants
# --------------------------------------------------------------------------------------------

_BOOLEAN = "a truth value"  # the enclosure of a closed condition
_NONFINITE = "an infinity or nan"  # of oo, -oo, zoo and nan, and of what holds them
_LOGIC = frozenset({"StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan",
                    "Equality", "Unequality", "And", "Or", "Not"})
# Heads SymPy evaluates on constants by deciding comparisons, falling back on simplify(),
# whose cost has no bound (floor(2**400 * (sin(1) + ... + sin(5))) runs for minutes). SymPy
# settles these itself when a constant is made, so none is left in a saved constant.
_DECIDED = _LOGIC | {"ITE", "floor", "ceiling", "Mod"}


@functools.cache
def _iv():
    """A private interval context (mpmath's contexts hold their precision as state)."""
    from mpmath.ctx_iv import MPIntervalContext

    ctx = MPIntervalContext()
    ctx.prec = _ENCLOSURE_PREC
    return ctx


@functools.cache
def _mp():
    """A private context for the endpoints of monotone functions (a few bits more)."""
    from mpmath.ctx_mp import MPContext

    ctx = MPContext()
    ctx.prec = _ENCLOSURE_PREC + 20
    return ctx


def _atom_enclosure(head: str):
    iv = _iv()
    if head in ("true", "false"):
        return _BOOLEAN
    if head in ("oo", "-oo", "zoo", "nan"):
        return _NONFINITE
    if head == "TribonacciConstant":  # (1 + cbrt(19 + 3 sqrt(33)) + cbrt(19 - 3 sqrt(33))) / 3
        return iv.mpf(["1.839286755214161", "1.839286755214162"])
    return {"pi": iv.pi, "E": iv.e, "EulerGamma": iv.euler, "Catalan": iv.catalan,
            "GoldenRatio": iv.phi}[head]


def _number_enclosure(head: str, args: list, where: str):
    """The interval of a number node (its fields are checked and bounded already)."""
    from mpmath.libmp import from_int, round_ceiling, round_floor

    if head == "Float":
        point = tuple(args[:4])
        return _iv().make_mpf((point, point))
    p = args[0]
    x = _iv().make_mpf((from_int(p, _ENCLOSURE_PREC, round_floor),
                        from_int(p, _ENCLOSURE_PREC, round_ceiling)))
    return x if head == "Integer" else x / _number_enclosure("Integer", args[1:], where)


def _interval(a: float, b: float):
    """``[a, b]`` from two doubles, made directly (converting them costs 20 times more)."""
    from mpmath.libmp import from_float

    return _iv().make_mpf((from_float(a), from_float(b)))


class _Bound(NamedTuple):
    """What decoding knows of a constant: an interval holding its value (or ``_BOOLEAN``,
    ``_NONFINITE``) and the bits of working precision evaluating it adds (:func:`_demand`)."""

    value: object
    demand: int


def _bound_tree(node, where: str) -> _Bound:
    """The :class:`_Bound` of a constant that :func:`_decode` has checked, operation by
    operation from its leaves (``SerializationError`` for one out of bounds)."""
    head, args = node[0], node[1:]
    if head in _tables().atoms:
        return _Bound(_atom_enclosure(head), 0)
    if head in _NUMBERS:
        return _Bound(_number_enclosure(head, args, where), 0)
    bounds = [_bound_tree(a, where) for a in args]
    values = [b.value for b in bounds]
    value = _enclose(head, values, node, where)
    demand = max(b.demand for b in bounds) + _demand(head, values, value)
    if demand > MAX_CONSTANT_PRECISION:
        raise SerializationError(
            f"{where}: the constant {_show(node)} needs about {demand} bits of working "
            f"precision to evaluate (at most {MAX_CONSTANT_PRECISION}): arguments of "
            "periodic and rounding functions, exponents and cancelling sums need their "
            "magnitude in extra bits")
    return _Bound(value, demand)


# Heads whose argument evalf needs to absolute accuracy: its magnitude in extra bits.
_ABSOLUTE = frozenset({"sin", "cos", "tan", "RoundHalfEven", "Trunc", "exp", "expm1", "sinh",
                       "cosh"})


def _demand(head: str, args: list, value) -> int:
    """The bits of precision SymPy's evalf adds to evaluate ``head`` of ``args`` beyond what
    its operands need: the magnitude of the argument of a periodic, rounding or exponential
    function (its absolute accuracy matters) and of an exponent, and the bits a sum may
    cancel (all of its precision limit when it may be 0)."""
    if isinstance(value, str) or any(isinstance(a, str) for a in args):
        return 0
    if head in _ABSOLUTE or head in ("log", "log1p"):
        # and when the result is much smaller than 1 (near a zero of sin, log(1 + tiny)),
        # evalf raises precision again by the gap
        lo, hi = _magnitudes(value)
        gap = _CANCEL_BITS if lo is None else max(0, -int(lo))
        return max(0, _magnitudes(args[0])[1]) + (gap if hi < 0 else 0)
    if head == "Pow":
        return max(0, _magnitudes(args[1])[1])
    if head == "Add":
        top = max(_magnitudes(a)[1] for a in args)
        lo = _magnitudes(value)[0]
        return _CANCEL_BITS if lo is None else max(0, int(top - lo))
    return 0


def _enclose(head: str, args: list, node, where: str):
    """An interval holding the value of ``head`` applied to constants enclosed by ``args``
    (or ``_BOOLEAN``); ``SerializationError`` when an operand is out of its domain (a
    complex or undefined result) or the value may be out of the bounds of MAX_MAGNITUDE."""
    if head == "ExprCondPair":  # (a branch: the value of its expression)
        return args[0]
    if head == "Piecewise" and any(isinstance(a, str) for a in args):
        # (Piecewise((nan, True)) is a template's branch: a value, not an operand)
        return args[0] if all(a is args[0] for a in args) else _NONFINITE
    bad = next((a for a in args if isinstance(a, str)), None)
    if bad is not None:
        raise SerializationError(f"{where}: the constant {_show(node)} applies {head} to "
                                 f"{bad}")
    if head in _DECIDED:
        raise SerializationError(
            f"{where}: the constant {_show(node)} applies {head} to constants, which SymPy "
            "decides by simplification at a cost without bound (a file holds such a value "
            "evaluated)")
    rule = _RULES.get(head)
    if rule is None:
        raise SerializationError(f"{where}: no bound is known for {head} of constants "
                                 f"({_show(node)})")
    try:
        x = rule(_iv(), *args)
    except _Refused as exc:
        raise SerializationError(f"{where}: the constant {_show(node)} {exc}") from None
    return _checked(x, lambda: f"the constant {_show(node)}", where)


def _checked(x, what: Callable, where: str):
    """``x`` when it is finite, and 0 or of magnitude within 2**(+-MAX_MAGNITUDE)."""
    lo, hi = _magnitudes(x)
    if hi > MAX_MAGNITUDE or (lo is not None and lo < -MAX_MAGNITUDE):
        size = "may be infinite" if hi == math.inf else (
            f"exceeds 2**{MAX_MAGNITUDE}" if hi > MAX_MAGNITUDE else
            f"is below 2**-{MAX_MAGNITUDE} (and not 0)")
        raise SerializationError(f"{where}: {what()} {size} in magnitude; constants in files "
                                 f"are 0 or between 2**-{MAX_MAGNITUDE} and "
                                 f"2**{MAX_MAGNITUDE}")
    return x


def _magnitudes(x) -> tuple:
    """``(lo, hi)``: ``2**lo <= |v| <= 2**hi`` for every ``v`` in ``x`` (``lo`` None when
    ``x`` holds 0; ``hi`` -inf for exactly 0, inf when unbounded). Read off the endpoints'
    (sign, mantissa, exponent, bit count) directly: this runs for every constant node."""
    a, b = x._mpi_
    if (not a[1] and a[3]) or (not b[1] and b[3]):  # an infinite (or nan) endpoint
        return None, math.inf
    hi = max(t[2] + t[3] if t[1] else -math.inf for t in (a, b))
    if not a[1] or not b[1] or a[0] != b[0]:  # an endpoint is 0, or they differ in sign
        return None, hi
    return min(a[2] + a[3], b[2] + b[3]) - 1, hi


class _Refused(Exception):
    """Why a constant is refused (an operand outside the real domain of its head, or a
    value that would exceed the bounds), completing "the constant ... "."""


def _not_real(why: str) -> _Refused:
    return _Refused(f"is not a real number ({why})")


def _too_large(why: str) -> _Refused:
    return _Refused(f"exceeds 2**{MAX_MAGNITUDE} or is below 2**-{MAX_MAGNITUDE} in "
                    f"magnitude ({why}); constants in files are 0 or between "
                    f"2**-{MAX_MAGNITUDE} and 2**{MAX_MAGNITUDE}")


def _lo(x):
    return _mp().make_mpf(x._mpi_[0])


def _hi(x):
    return _mp().make_mpf(x._mpi_[1])


def _hull(iv, *xs):
    return iv.mpf([min(_lo(x) for x in xs), max(_hi(x) for x in xs)])


def _exp(iv, t):
    limit = MAX_MAGNITUDE * math.log(2)  # (checked before exp, which then stays cheap)
    if _hi(t) > limit or _lo(t) < -limit:
        raise _too_large(f"an exponential of {_mp().nstr(_lo(t), 3)} .. "
                         f"{_mp().nstr(_hi(t), 3)}")
    return iv.exp(t)


def _pow(iv, b, e):
    if _lo(e) == _hi(e) and _mp().isint(_lo(e)):
        k = int(_lo(e))
        if k == 0:
            return iv.mpf(1)
        lo, hi = _magnitudes(b)
        if k < 0 and lo is None:
            raise _not_real("a negative power of a base that may be 0")
        if hi == -math.inf:
            return iv.mpf(0)
        # log2|b**k| is within k * [lo, hi]: a rough test before computing it, the exact
        # one on the result
        if abs(k) * max(abs(hi), abs(lo or 0)) > 2 * MAX_MAGNITUDE:
            raise _too_large(f"the power {k} of a base of magnitude up to 2**{hi}")
        return b ** k
    if _lo(b) <= 0:
        if _lo(b) == _hi(b) == 0 and _lo(e) > 0:
            return iv.mpf(0)
        raise _not_real("a non-integer power of a base that may be negative or 0")
    return _exp(iv, e * iv.log(b))


def _monotone(name: str, increasing: bool = True, domain: tuple = (None, None), open_=False):
    """The rule of a monotone function (endpoints rounded outward by a few ulps)."""
    def rule(iv, x):
        lo, hi = domain
        if (lo is not None and (_lo(x) < lo or (open_ and _lo(x) == lo))) or \
                (hi is not None and (_hi(x) > hi or (open_ and _hi(x) == hi))):
            raise _not_real(f"{name} of an argument that may be outside "
                            f"{'(' if open_ else '['}{lo}, {hi}{')' if open_ else ']'}")
        mp = _mp()
        f = getattr(mp, name)
        ends = sorted((f(_lo(x)), f(_hi(x))), reverse=not increasing)
        slack = [abs(v) * mp.ldexp(1, 8 - _ENCLOSURE_PREC) for v in ends]
        return iv.mpf([ends[0] - slack[0], ends[1] + slack[1]])

    return rule


def _trig(name: str) -> Callable:
    """The rule of sin or cos: for arguments below 2**20, libm's value at a double near the
    middle, widened by the distance to the ends (both are 1-Lipschitz) and a few ulps; else
    mpmath's interval function (exact range reduction, slower)."""
    fast = getattr(math, name)

    def rule(iv, x):
        a, b = float(_lo(x)), float(_hi(x))
        if not max(abs(a), abs(b)) < 1 << 20:
            return getattr(iv, name)(x)
        m = a / 2 + b / 2
        r = max(m - a, b - m) + 4 * math.ulp(max(abs(a), abs(b))) + 1e-15
        y = fast(m)
        return _interval(max(y - r, -1.0), min(y + r, 1.0))

    return rule


def _rule_abs(iv, x):
    if _lo(x) >= 0:
        return x
    if _hi(x) <= 0:
        return -x
    return iv.mpf([0, max(-_lo(x), _hi(x))])


def _rule_sign(iv, x):
    return iv.mpf(1 if _lo(x) > 0 else -1 if _hi(x) < 0 else [-1, 1])


def _rule_float32(iv, x):
    if _magnitudes(x)[1] >= 128:
        raise _too_large("a float32 rounding that may be infinite")
    return x * iv.mpf([1 - 2.0 ** -20, 1 + 2.0 ** -20]) + iv.mpf([-(2.0 ** -140), 2.0 ** -140])


def _rule_heaviside(iv, x, h0=None):
    return _hull(iv, iv.mpf([0, 1]), *([] if h0 is None else [h0]))


def _integer_part(iv, x):
    return iv.mpf([_lo(x) - 1, _hi(x) + 1])


def _sum(iv, *xs):
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _product(iv, *xs):
    total = xs[0]
    for x in xs[1:]:
        total = total * x
    return total


def _positive(name: str, f: Callable, lo) -> Callable:
    def rule(iv, x):
        if _lo(x) <= lo:
            raise _not_real(f"{name} of an argument that may be {lo} or less")
        return f(iv, x)

    return rule


_RULES: dict[str, Callable] = {
    "Add": _sum,
    "Mul": _product,
    "Pow": _pow,
    "Piecewise": _hull,
    "ExprCondPair": lambda iv, x: x,
    "exp": _exp,
    "log": _positive("log", lambda iv, x: iv.log(x), 0),
    "log1p": _positive("log1p", lambda iv, x: iv.log1p(x), -1),
    "expm1": lambda iv, x: _exp(iv, x) - 1,
    "sin": _trig("sin"),
    "cos": _trig("cos"),
    "tan": lambda iv, x: _trig("sin")(iv, x) / _trig("cos")(iv, x),
    "asin": _monotone("asin", True, (-1, 1)),
    "acos": _monotone("acos", False, (-1, 1)),
    "atan": _monotone("atan"),
    "sinh": lambda iv, x: (_exp(iv, x) - _exp(iv, -x)) / 2,
    "cosh": lambda iv, x: (_exp(iv, x) + _exp(iv, -x)) / 2,
    "tanh": _monotone("tanh"),
    "asinh": _monotone("asinh"),
    "acosh": _monotone("acosh", True, (1, None)),
    "atanh": _monotone("atanh", True, (-1, 1), open_=True),
    "erf": _monotone("erf"),
    "atan2": lambda iv, y, x: iv.mpf([-4, 4]),
    "Abs": _rule_abs,
    "sign": _rule_sign,
    "RoundHalfEven": _integer_part,
    "Trunc": _integer_part,
    "RoundFloat32": _rule_float32,
    "Heaviside": _rule_heaviside,
    "Max": lambda iv, *xs: iv.mpf([max(map(_lo, xs)), max(map(_hi, xs))]),
    "Min": lambda iv, *xs: iv.mpf([min(map(_lo, xs)), min(map(_hi, xs))]),
    "StopGradient": lambda iv, x: x,
}


def expr_text(expr) -> str:
    """:func:`encode_expr` as compact JSON text (how a compiled plan stores a constant).

    >>> expr_text(sp.pi / 4)
    '["Mul",["Rational",1,4],["pi"]]'
    """
    return json.dumps(encode_expr(expr), separators=(",", ":"), allow_nan=False)


def expr_from_text(text: str, where: str = "expression"):
    """The expression of :func:`expr_text` output (strict JSON, then :func:`decode_expr`).

    >>> expr_from_text('["Mul",["Rational",1,4],["pi"]]')
    pi/4
    """
    if not isinstance(text, str):
        raise SerializationError(f"{where}: expected JSON text, got {type(text).__name__}")
    return decode_expr(_loads(text, where), where)


def number_value(node, where: str = "expression"):
    """``(value, text)`` of a saved plain number -- ``Integer``, ``Rational``, a ``Float``
    that is a double, ``true``/``false``, ``oo``/``-oo``/``nan`` -- read without SymPy,
    after the checks :func:`decode_expr` makes: its double (or bool) as
    ``graph.const_value`` computes it, and its :func:`expr_text`. None for any other node,
    and for a number whose double is not exact this way (decode those).

    >>> number_value(["Rational", 1, 4]), number_value(["pi"])
    ((0.25, '["Rational",1,4]'), None)
    """
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        return None
    head, args = node[0], node[1:]
    if head in _PLAIN_ATOMS:
        _arity(where, head, args, 0)
        value = _PLAIN_ATOMS[head]
    elif head == "Integer":
        p = _integer_field(where, args)
        value = float(p) if abs(p) <= 1 << 53 else None
    elif head == "Rational":
        p, q = _rational_fields(where, args)
        value = p / q if max(abs(p), q) <= 1 << 53 else None  # both exact: one rounding
    elif head == "Float":
        sign, man, exp, _, _ = _float_fields(where, args)
        value = _exact_double(sign, man, exp)
    else:
        return None
    if value is None:
        return None
    return value, json.dumps(node, separators=(",", ":"), allow_nan=False)


# the bare heads of plain numbers, with their values (graph.const_value)
_PLAIN_ATOMS = {"true": True, "false": False, "oo": math.inf, "-oo": -math.inf,
                "nan": math.nan}


def _exact_double(sign: int, man: int, exp: int) -> float | None:
    """``(-1)**sign * man * 2**exp`` when it is a double exactly (else None)."""
    if man.bit_length() > 53:
        return None
    try:
        value = math.ldexp(float(man), exp) if man else 0.0
        if value == 0.0 and man or math.ldexp(value, -exp) != man:
            return None  # underflowed or rounded
    except OverflowError:
        return None
    return -value if sign else value


# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------

DTYPES = ("bool", "int32", "int64", "float32", "float64")
_MAX_DIM = 1 << 40
_MAX_NDIM = 32
# Elements of a saved shape, counting a 0 extent as 1: numpy cannot even make an empty array
# whose other extents multiply beyond its index range (reshape to (0, 2**39, 2**39) fails).
MAX_ELEMENTS = 1 << 40


def expect_shape(node, where: str) -> tuple:
    """``node`` as a shape: at most 32 non-negative ints whose product (a 0 counted as 1) is at
    most :data:`MAX_ELEMENTS`.

    >>> expect_shape([2, 0, 3], "shape")
    (2, 0, 3)
    >>> expect_shape([1 << 30, 1 << 30, 0], "shape")
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: shape: [1073741824, 1073741824, 0] has more than \
1099511627776 elements (counting 0 as 1)
    """
    shape = tuple(expect_int(d, f"{where} entry", 0, _MAX_DIM)
                  for d in expect_list(node, where, _MAX_NDIM))
    if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
        raise SerializationError(f"{where}: {list(shape)} has more than {MAX_ELEMENTS} "
                                 "elements (counting 0 as 1)")
    return shape


def encode_array(a) -> dict:
    """A numpy array as ``{"dtype", "shape", "data"}``: its raw little-endian bytes in base64.

    >>> encode_array(np.array([1.0, 2.0], dtype=np.float32))
    {'dtype': 'float32', 'shape': [2], 'data': 'AACAPwAAAEA='}
    """
    a = np.asarray(a)
    if a.dtype.name not in DTYPES:
        raise SerializationError(f"cannot save an array of dtype {a.dtype}: saved arrays are "
                                 f"one of {', '.join(DTYPES)}")
    raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
    return {"dtype": a.dtype.name, "shape": [int(d) for d in a.shape],
            "data": base64.b64encode(raw).decode("ascii")}


def decode_array(node, where: str = "array") -> np.ndarray:
    """The (writable, native byte order) array of :func:`encode_array` output, checked: a
    whitelisted dtype, a shape of non-negative ints, and exactly the bytes it needs.

    >>> decode_array({"dtype": "int32", "shape": [2], "data": "AQAAAAIAAAA="})
    array([1, 2], dtype=int32)
    """
    fields = record(node, where, ("dtype", "shape", "data"))
    name = fields["dtype"]
    if name not in DTYPES:
        raise SerializationError(f"{where}: dtype {_show(name)} is not one of "
                                 f"{', '.join(DTYPES)}")
    shape = expect_shape(fields["shape"], f"{where}: shape")
    data = expect(fields["data"], str, f"{where}: data")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SerializationError(f"{where}: data is not base64") from None
    dtype = np.dtype(name)
    size = math.prod(shape)
    if len(raw) != size * dtype.itemsize:
        raise SerializationError(f"{where}: {len(raw)} bytes of data for shape {shape} of "
                                 f"{name} (expected {size * dtype.itemsize})")
    flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))
    return flat.astype(dtype).reshape(shape)


# --------------------------------------------------------------------------------------------
# Values: parameters and structures, tagged
# --------------------------------------------------------------------------------------------

_FLOAT_TEXT = re.compile(r"-?(0x[0-9a-f]+(\.[0-9a-f]*)?p[+-][0-9]+|inf|nan)")


def encode_value(value) -> list:
    """A parameter value as a tagged list: ``None``, ``Ellipsis``, bool, int, float (exact, as
    hex), str, tuple, list, dict (str or int keys), slice, numpy dtype, array or scalar.
    Tuple subclasses (namedtuples) are saved as tuples.

    >>> encode_value((1, 0.5, None))
    ['tuple', [['int', 1], ['float', '0x1.0000000000000p-1'], ['none']]]
    """
    return _encode_value(value, 0)


def _encode_value(v, depth: int) -> list:
    if depth > MAX_DEPTH:
        raise SerializationError(f"value nested deeper than {MAX_DEPTH}")
    if v is None:
        return ["none"]
    if v is Ellipsis:
        return ["ellipsis"]
    if isinstance(v, np.generic):  # before float: np.float64 is a float subclass
        return ["scalar", encode_array(np.asarray(v))]
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", int(v)]
    if isinstance(v, float):
        return ["float", float(v).hex()]
    if isinstance(v, str):
        return ["str", v]
    if isinstance(v, tuple):
        return ["tuple", [_encode_value(x, depth + 1) for x in v]]
    if isinstance(v, list):
        return ["list", [_encode_value(x, depth + 1) for x in v]]
    if isinstance(v, dict):
        return ["dict", [[_key(k), _encode_value(x, depth + 1)] for k, x in v.items()]]
    if isinstance(v, slice):
        return ["slice", [_encode_value(x, depth + 1) for x in (v.start, v.stop, v.step)]]
    if isinstance(v, np.dtype):
        if v.name not in DTYPES:
            raise SerializationError(f"cannot save the dtype {v}: one of {', '.join(DTYPES)}")
        return ["dtype", v.name]
    if isinstance(v, np.ndarray):
        return ["ndarray", encode_array(v)]
    raise SerializationError(f"cannot save a value of type {type(v).__name__} ({str(v)[:60]})")


def _key(k):
    if isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)):
        return k
    raise SerializationError(f"cannot save a dict key of type {type(k).__name__}: keys are "
                             "str or int")


def decode_value(node, where: str = "value"):
    """The value of :func:`encode_value` output, checked tag by tag.

    >>> decode_value(["tuple", [["slice", [["none"], ["int", 2], ["none"]]], ["ellipsis"]]])
    (slice(None, 2, None), Ellipsis)
    """
    return _decode_value(node, where, 0)


def _decode_value(node, where: str, depth: int):
    if depth > MAX_DEPTH:
        raise SerializationError(f"{where}: nested deeper than {MAX_DEPTH}")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise SerializationError(f"{where}: malformed value {_show(node)} (expected a tagged "
                                 "list)")
    tag, body = node[0], node[1:]
    sub = f"{where}[{tag[:20]}]"
    if tag in ("none", "ellipsis"):
        _arity(where, tag, body, 0)
        return None if tag == "none" else Ellipsis
    _arity(where, tag, body, 1)
    (x,) = body
    if tag == "bool":
        return expect(x, bool, sub)
    if tag == "int":
        return expect_int(x, sub)
    if tag == "float":
        return _float_value(x, sub)
    if tag == "str":
        return expect(x, str, sub)
    if tag in ("tuple", "list"):
        items = [_decode_value(i, sub, depth + 1) for i in expect_list(x, sub)]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return _decode_dict(x, sub, depth)
    if tag == "slice":
        parts = expect_list(x, sub)
        if len(parts) != 3:
            raise SerializationError(f"{sub}: a slice has 3 parts, got {len(parts)}")
        return slice(*(_decode_value(p, sub, depth + 1) for p in parts))
    if tag == "dtype":
        if x not in DTYPES:
            raise SerializationError(f"{sub}: {_show(x)} is not one of {', '.join(DTYPES)}")
        return np.dtype(x)
    if tag == "ndarray":
        return decode_array(x, sub)
    if tag == "scalar":
        arr = decode_array(x, sub)
        if arr.ndim:
            raise SerializationError(f"{sub}: a scalar has shape (), got {arr.shape}")
        return arr[()]
    raise SerializationError(f"{where}: unknown value tag {tag[:40]!r}")


def _float_value(x, where: str) -> float:
    if not isinstance(x, str) or not _FLOAT_TEXT.fullmatch(x):
        raise SerializationError(f"{where}: {_show(x)} is not a hex float")
    return float.fromhex(x)


def _decode_dict(x, where: str, depth: int) -> dict:
    out: dict = {}
    for item in expect_list(x, where):
        if not (isinstance(item, list) and len(item) == 2):
            raise SerializationError(f"{where}: entries are [key, value] pairs")
        k, v = item
        if not (isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool))):
            raise SerializationError(f"{where}: key {_show(k)} is not a str or int")
        if k in out:
            raise SerializationError(f"{where}: key {k!r} appears twice")
        out[k] = _decode_value(v, f"{where}[{k!r}]", depth + 1)
    return out


# --------------------------------------------------------------------------------------------
# Framed documents
# --------------------------------------------------------------------------------------------

_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, sha256(payload)
# Opening a file to load: never blocking (a FIFO would wait for a writer forever).
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def read_file(path) -> bytes:
    """The bytes of the regular file ``path``; ``OSError`` for anything else (a FIFO, a
    device such as ``/dev/zero``, a folder), found without reading or waiting for it.

    >>> read_file("/dev/null" if os.path.exists("/dev/null") else os.devnull)
    Traceback (most recent call last):
    ...
    OSError: [Errno 19] not a regular file (a character device): '/dev/null'
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.ENODEV, f"not a regular file ({file_kind(st.st_mode)})",
                          str(path))
        # (a file that grows while read is read as it was)
        return read_at_most(fd, st.st_size + 1)[:st.st_size]
    finally:
        os.close(fd)


def read_at_most(fd: int, n: int) -> bytes:
    """At most ``n`` bytes from the open file ``fd`` (fewer at its end).

    >>> r, w = os.pipe()
    >>> _ = os.write(w, b"abcdef"); os.close(w)
    >>> read_at_most(r, 4), read_at_most(r, 4), read_at_most(r, 4)
    (b'abcd', b'ef', b'')
    >>> os.close(r)
    """
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages.

    >>> file_kind(os.stat(os.devnull).st_mode) if os.name == "posix" else "a character device"
    'a character device'
    """
    return next((name for test, name in _FILE_KINDS if test(mode)), f"mode {mode:o}")


_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def dump_document(doc: dict, magic: bytes, version: int) -> bytes:
    """``doc`` as UTF-8 JSON behind a header: 8-byte magic, version, length and SHA-256.

    >>> blob = dump_document({"a": [1]}, b"EXAMPLE\\n", 1)
    >>> load_document(blob, b"EXAMPLE\\n", 1, "example", "test document")
    {'a': [1]}
    """
    if len(magic) != 8:
        raise ValueError("the magic tag of a document is 8 bytes")
    payload = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest()) + payload


def load_document(blob: bytes, magic: bytes, version: int, what: str, kind: str) -> dict:
    """The JSON object of a :func:`dump_document` blob, or ``SerializationError`` naming
    ``what`` (the file) and the fault: not a ``kind`` (magic), another format version, truncated
    or corrupt (length, checksum), not strict UTF-8 JSON, or not an object.

    >>> load_document(b"junk", b"EXAMPLE\\n", 1, "'f.bin'", "test document")
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: 'f.bin' is not a test document (no EXAMPLE header)
    """
    label = magic.decode("ascii", "replace").strip()
    if len(blob) < _HEADER.size or blob[:8] != magic:
        raise SerializationError(f"{what} is not a {kind} (no {label} header)")
    _, ver, length, digest = _HEADER.unpack_from(blob)
    if ver != version:
        raise SerializationError(f"{what} is a {kind} of format {ver}; this symtape reads "
                                 f"format {version}")
    payload = blob[_HEADER.size:]
    if length != len(payload) or hashlib.sha256(payload).digest() != digest:
        raise SerializationError(f"{what} is truncated or corrupt (length or checksum "
                                 "mismatch)")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{what} is malformed: not UTF-8 ({exc.reason})") from None
    doc = _loads(text, what)
    if not isinstance(doc, dict):
        raise SerializationError(f"{what} is malformed: the document is not a JSON object")
    return doc


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


def _loads(text: str, where: str):
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise SerializationError(f"{where} is malformed: JSON nested too deeply") from None
    except ValueError as exc:
        raise SerializationError(f"{where} is malformed: {str(exc)[:120]}") from None
    _check_unicode(doc, where)
    return doc


def _check_unicode(doc, where: str) -> None:
    """Refuses a document with a string that is not Unicode text: JSON's ``\\ud800``
    escapes give lone surrogates, which no name, file or symbol may hold (they cannot even
    be encoded). One encoding of the whole document finds them; a walk names the first."""
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not _is_text(item):
            raise SerializationError(f"{where} is malformed: the string {ascii(item)[:60]} is "
                                     "not valid Unicode (a lone surrogate)")
    raise SerializationError(f"{where} is malformed: a string is not valid Unicode")


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Checking decoded JSON
# --------------------------------------------------------------------------------------------


def record(node, where: str, required: tuple, optional: tuple = ()) -> dict:
    """``node`` as a JSON object with every key of ``required`` and no key outside
    ``required + optional`` (missing optional keys read as None).

    >>> record({"a": 1}, "header", ("a",), ("b",))
    {'a': 1, 'b': None}
    """
    if not isinstance(node, dict):
        raise SerializationError(f"{where}: expected an object, got {_show(node)}")
    missing = [k for k in required if k not in node]
    extra = [k for k in node if k not in required and k not in optional]
    if missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unexpected {', '.join(repr(k)[:40] for k in extra)}"] if extra else [])
        raise SerializationError(f"{where}: {'; '.join(parts)}")
    return {**node, **{k: None for k in optional if k not in node}}


def expect(value, kind, where: str):
    """``value`` when it is an instance of ``kind`` (bool is not taken for an int).

    >>> expect("a", str, "name")
    'a'
    """
    bad_bool = isinstance(value, bool) and kind in (int, (int,))
    if bad_bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SerializationError(f"{where}: expected {names}, got {_show(value)}")
    return value


def expect_int(value, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` when it is an int (not a bool) with ``lo <= value < hi``.

    >>> expect_int(3, "index", 0, 5)
    3
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise SerializationError(f"{where}: expected an integer, got {_show(value)}")
    if (lo is not None and value < lo) or (hi is not None and value >= hi):
        raise SerializationError(f"{where}: {value} is out of range [{lo}, {hi})")
    return value


def expect_list(value, where: str, max_len: int | None = None) -> list:
    """``value`` when it is a JSON array (of at most ``max_len`` items).

    >>> expect_list([1, 2], "refs")
    [1, 2]
    """
    if not isinstance(value, list):
        raise SerializationError(f"{where}: expected a list, got {_show(value)}")
    if max_len is not None and len(value) > max_len:
        raise SerializationError(f"{where}: {len(value)} items, at most {max_len} allowed")
    return value

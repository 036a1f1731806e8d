"""SymPy expressions as JSON, data only: nothing read here is ever evaluated.

An expression is a nested list ``[head, *operands]`` whose head is looked up in a closed table
(:data:`HEADS`: numbers, the constants symtape folds to, symbols with their assumptions, and
the heads a graph can hold -- the records of :mod:`symtape.element.heads`). Anything else, or
anything of the wrong shape, raises :class:`~symtape.base.errors.SerializationError` naming
what is wrong, before anything is built from it; the constant parts of an expression are
bounded (:mod:`symtape.io.constant_bounds`) before SymPy evaluates them. Floats are kept
exactly (the binary mantissa and exponent of SymPy Floats), so a decoded expression is the
encoded one, ``srepr`` and all.

>>> x = sp.Symbol("x", real=True)
>>> e = sp.sqrt(2) * sp.sin(x) + sp.Float(0.1)
>>> decode_expr(encode_expr(e)) == e
True
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable

from symtape.base.errors import SerializationError
from symtape.base.lazy import LazyModule
from symtape.io.constant_bounds import (
    MAX_CONSTANT_HEIGHT, MAX_CONSTANT_NODES, MAX_MAGNITUDE, bound_tree, charged,
)
from symtape.io.strict_json import MAX_DEPTH, excerpt, expect_arity, expect_int, loads

sp = LazyModule("sp", globals(), "sympy")
H = LazyModule("H", globals(), "symtape.element.heads")
assumptions = LazyModule("assumptions", globals(), "sympy.core.assumptions")

__all__ = [  # noqa: F822 - HEADS: __getattr__
    "HEADS",
    "encode_expr",
    "decode_expr",
    "expr_text",
    "expr_from_text",
    "number_value",
]

# Nodes per decoded expression: a guard against a small file that decodes to a huge tree.
MAX_NODES = 200_000
# SymPy Float precision (bits) and the exponent range accepted for a Float.
_MAX_PREC = 1 << 16
_MAX_EXP = 1 << 32

# --------------------------------------------------------------------------------------------
# The closed table of heads
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
            "hold only numbers, symbols and the heads listed in symtape.io.expressions.HEADS"
        )
    return [name] + [_encode(a, depth + 1, count) for a in e.args]


@functools.lru_cache(maxsize=1)
def _warm() -> None:
    """Pays the one-time costs of decoding (SymPy, its evaluation machinery, the heads)."""
    _tables()
    sp.pi.evalf(20)


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
    _warm()  # (before the budget: the one-time costs of the first decode are not the file's)
    with charged(where):  # (against the budget of the file being loaded, if any)
        expr, shape = _decode(node, where, 0, [0])
        if shape is not None and shape[1] > 1:
            bound_tree(node, where)
    return expr


def _decode(node, where: str, depth: int, count: list) -> tuple:
    """``(expression, shape)``: for a constant (no symbols) its ``(nodes, height)``, else None.
    The largest constant parts of an expression are bounded (:func:`bound_tree`) as soon as
    they are known, and refused before anything evaluates them."""
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SerializationError(f"{where}: nested deeper than {MAX_DEPTH} or larger than "
                                 f"{MAX_NODES} nodes")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise SerializationError(f"{where}: malformed node {excerpt(node)} (expected a list "
                                 "starting with a head name)")
    head, args = node[0], node[1:]
    tables = _tables()
    atom = tables.atoms.get(head)
    if atom is not None:
        expect_arity(where, head, args, 0)
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
                f"{where}: the constant {excerpt(node)} has {size} nodes in {height} levels (at "
                f"most {MAX_CONSTANT_NODES} in {MAX_CONSTANT_HEIGHT}): SymPy's evaluation of "
                "a constant grows quickly with its size and nesting")
        return expr, (size, height)
    for a, sh in zip(args, shapes):
        if sh is not None and sh[1] > 1:  # (a number's fields are bounded where it is read)
            bound_tree(a, where)
    return expr, None


def _integer_field(where: str, args: list) -> int:
    expect_arity(where, "Integer", args, 1)
    return _bounded_int(args[0], f"{where}: Integer")


def _bounded_int(value, where: str) -> int:
    n = expect_int(value, where)
    if n.bit_length() > MAX_MAGNITUDE:
        raise SerializationError(f"{where}: an integer of {n.bit_length()} bits (at most "
                                 f"{MAX_MAGNITUDE})")
    return n


def _rational_fields(where: str, args: list) -> tuple:
    expect_arity(where, "Rational", args, 2)
    p = _bounded_int(args[0], f"{where}: Rational numerator")
    q = _bounded_int(args[1], f"{where}: Rational denominator")
    if q < 2 or math.gcd(p, q) != 1:
        raise SerializationError(f"{where}: Rational {p}/{q} is not in lowest terms with a "
                                 "denominator above 1")
    return p, q


def _float_fields(where: str, args: list) -> tuple:
    expect_arity(where, "Float", args, 5)
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
    expect_arity(where, "Symbol", args, 2)
    name, given = args
    if not isinstance(name, str):
        raise SerializationError(f"{where}: a Symbol name must be a string, got {excerpt(name)}")
    known = assumptions._assume_defined
    if not isinstance(given, dict) or not all(
            k in known and isinstance(v, bool) for k, v in given.items()):
        raise SerializationError(f"{where}: Symbol {name[:40]!r} has malformed assumptions "
                                 f"{excerpt(given)} (expected {{name: true/false}})")
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
# Text and plain numbers
# --------------------------------------------------------------------------------------------


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
    return decode_expr(loads(text, where), where)


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
        expect_arity(where, head, args, 0)
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

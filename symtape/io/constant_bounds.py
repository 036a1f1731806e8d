"""Bounds on the constants of decoded expressions. SymPy evaluates exact constants (a
compiled function's on load, a saved model's when it runs) at a cost that grows with the size of
the numbers it meets, so each constant part of an expression is enclosed in an interval,
operation by operation from its leaves, and refused before SymPy sees it unless it is small
enough to evaluate quickly (:func:`bound_tree`).

>>> b = bound_tree(["Mul", ["Integer", 3], ["pi"]], "constant")
>>> float(b.value.a) <= 3 * math.pi <= float(b.value.b)
True
>>> bound_tree(["exp", ["Integer", 5000]], "constant")
Traceback (most recent call last):
...
symtape.base.errors.SerializationError: constant: the constant ["exp", ["Integer", 5000]] \
exceeds 2**4096 or is below 2**-4096 in magnitude (an exponential of 5.0e+3 .. 5.0e+3); \
constants in files are 0 or between 2**-4096 and 2**4096
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import time
from collections.abc import Callable
from typing import NamedTuple

from symtape.base.errors import SerializationError
from symtape.io.strict_json import excerpt

__all__ = [
    "MAX_MAGNITUDE",
    "MAX_CONSTANT_NODES",
    "MAX_CONSTANT_HEIGHT",
    "MAX_CONSTANT_PRECISION",
    "MAX_POLYGAMMA_ORDER",
    "ENCLOSURE_RULES",
    "DECIDED_HEADS",
    "FILE_CONSTANT_SECONDS",
    "bound_tree",
    "file_budget",
    "charged",
]

# Exact constants are evaluated by SymPy (a compiled function's constants on load, a saved
# model's when it runs), whose cost grows with the size of the numbers it meets: sin(x) needs
# log2|x| bits of pi, and 2**(2**24) or exp(exp(exp(9))) have no bound at all. So every
# constant part of a decoded expression is enclosed in an interval, operation by operation,
# before SymPy sees it, and refused unless each value is 0 or of magnitude between
# 2**-MAX_MAGNITUDE and 2**MAX_MAGNITUDE (far beyond a double's range). Integer and Rational
# fields have at most MAX_MAGNITUDE bits; a constant has at most MAX_CONSTANT_NODES nodes in
# MAX_CONSTANT_HEIGHT levels (evalf re-evaluates operands as it raises precision, so its work
# grows geometrically with nesting), needs at most MAX_CONSTANT_PRECISION extra bits of
# working precision (_demand), and holds no head SymPy decides by simplification (DECIDED_HEADS).
# The costliest constants within these bounds take SymPy about 0.1 s to evaluate.
MAX_MAGNITUDE = 4096
MAX_CONSTANT_NODES = 64
MAX_CONSTANT_HEIGHT = 8
MAX_CONSTANT_PRECISION = 1100
_CANCEL_BITS = 333  # how far evalf raises precision in a sum that cancels (its maxprec)
_ENCLOSURE_PREC = 80  # bits of the interval arithmetic: only magnitudes and signs matter

#: Seconds that all the exact constants of one file may take to bound and evaluate together.
#: Each constant is bounded to about 0.1 s, but a file may hold thousands: once their total
#: passes this, the file is refused, so that any file under 1 MB loads or is refused in about
#: a second. (A compiled function with 2,000 distinct exact constants such as ``sin(k)``
#: spends about 0.7 s here on a 2-core machine.)
FILE_CONSTANT_SECONDS = 0.75
_BUDGET: contextvars.ContextVar = contextvars.ContextVar("symtape_file_budget", default=None)


@contextlib.contextmanager
def file_budget(what: str, seconds: float | None = None):
    """Within the block, the work of :func:`charged` blocks counts against the file
    ``what``'s budget of ``seconds`` (default :data:`FILE_CONSTANT_SECONDS`).

    >>> with file_budget("'f.st'", seconds=0.0):  # doctest: +ELLIPSIS
    ...     with charged("constant 1"):
    ...         pass
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: 'f.st': its exact constants take more than 0.0 s ...
    """
    limit = FILE_CONSTANT_SECONDS if seconds is None else float(seconds)
    token = _BUDGET.set([0.0, limit, what])
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def charged(where: str):
    """Times the block against the current :func:`file_budget` (nothing outside one), and
    refuses the file once the budget is spent."""
    budget = _BUDGET.get()
    start = time.perf_counter()
    yield
    if budget is None:
        return
    budget[0] += time.perf_counter() - start
    if budget[0] > budget[1]:
        raise SerializationError(f"{budget[2]}: its exact constants take more than "
                                 f"{budget[1]:.1f} s to check and evaluate (refused at "
                                 f"{where}): a file of this many costly constants is not "
                                 "loaded")


# --------------------------------------------------------------------------------------------
# Enclosures
# --------------------------------------------------------------------------------------------

_BOOLEAN = "a truth value"  # the enclosure of a closed condition
_NONFINITE = "an infinity or nan"  # of oo, -oo, zoo and nan, and of what holds them
_LOGIC = frozenset({"StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan",
                    "Equality", "Unequality", "And", "Or", "Not"})
# Heads SymPy evaluates on constants by deciding comparisons, falling back on simplify(),
# whose cost has no bound (floor(2**400 * (sin(1) + ... + sin(5))) runs for minutes). SymPy
# settles these itself when a constant is made, so none is left in a saved constant.
DECIDED_HEADS = _LOGIC | {"ITE", "floor", "ceiling", "Mod"}


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


_NUMBER_HEADS = frozenset({"Integer", "Rational", "Float"})


def bound_tree(node, where: str) -> _Bound:
    """The bound of a constant node that :func:`symtape.io.expressions.decode_expr` has checked
    (heads, operand counts, number fields): an interval holding its value and the extra bits
    of working precision evaluating it takes, found operation by operation from its leaves;
    ``SerializationError`` naming ``where`` for a constant out of bounds.

    >>> b = bound_tree(["sin", ["Integer", 1000]], "constant")
    >>> float(b.value.a) <= math.sin(1000) <= float(b.value.b), b.demand
    (True, 10)
    """
    head, args = node[0], node[1:]
    if head in _NUMBER_HEADS:
        return _Bound(_number_enclosure(head, args, where), 0)
    if not args:  # a constant written as a bare head (every function head has operands)
        return _Bound(_atom_enclosure(head), 0)
    bounds = [bound_tree(a, where) for a in args]
    values = [b.value for b in bounds]
    value = _enclose(head, values, node, where)
    demand = max(b.demand for b in bounds) + _demand(head, values, value)
    if demand > MAX_CONSTANT_PRECISION:
        raise SerializationError(
            f"{where}: the constant {excerpt(node)} needs about {demand} bits of working "
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
        raise SerializationError(f"{where}: the constant {excerpt(node)} applies {head} to "
                                 f"{bad}")
    if head in DECIDED_HEADS:
        raise SerializationError(
            f"{where}: the constant {excerpt(node)} applies {head} to constants, which SymPy "
            "decides by simplification at a cost without bound (a file holds such a value "
            "evaluated)")
    rule = ENCLOSURE_RULES.get(head)
    if rule is None:
        raise SerializationError(f"{where}: no bound is known for {head} of constants "
                                 f"({excerpt(node)})")
    try:
        x = rule(_iv(), *args)
    except _Refused as exc:
        raise SerializationError(f"{where}: the constant {excerpt(node)} {exc}") from None
    return _checked(x, lambda: f"the constant {excerpt(node)}", where)


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


# loggamma falls on (0, X0] and rises on [X0, oo) (X0 the zero of digamma, bracketed here),
# to a least value of about -0.12148629053584961 (_LOGGAMMA_MIN is just below it).
_X0 = (1.4616321449683622, 1.4616321449683624)
_LOGGAMMA_MIN = -0.1214862905358497
# Highest order of polygamma bounded on constants (higher orders have no use in a saved
# formula, and mpmath's cost grows with the order).
MAX_POLYGAMMA_ORDER = 128


def _widened(iv, lo, hi, floor=0):
    """``[lo, hi]`` from mpmath values at the endpoints, widened by a few ulps relative to
    each and by ``floor`` (where a value near a zero is only accurate absolutely)."""
    mp = _mp()
    slack = [abs(v) * mp.ldexp(1, 8 - _ENCLOSURE_PREC) + floor for v in (lo, hi)]
    return iv.mpf([lo - slack[0], hi + slack[1]])


def _rule_loggamma(iv, x):
    # (mpmath's interval loggamma is not used: it gives +inf for tiny arguments)
    a, b = _lo(x), _hi(x)
    if a <= 0:
        raise _not_real("loggamma of an argument that may be 0 or less")
    mp = _mp()
    ends = (mp.loggamma(a), mp.loggamma(b))
    lo, hi = ((ends[1], ends[0]) if b <= _X0[0] else ends if a >= _X0[1] else
              (mp.mpf(_LOGGAMMA_MIN), max(ends)))
    return _widened(iv, lo, hi, mp.ldexp(1, -_ENCLOSURE_PREC))  # (it is 0 at 1 and 2)


def _rule_polygamma(iv, n, x):
    k = _lo(n)
    if not (k == _hi(n) and _mp().isint(k) and 0 <= k <= MAX_POLYGAMMA_ORDER):
        raise _Refused(f"applies polygamma to an order that may not be an integer from 0 to "
                       f"{MAX_POLYGAMMA_ORDER}")
    if _lo(x) <= 0:
        raise _Refused("has no bound: polygamma of an argument that may be 0 or less (its "
                       "poles are there)")
    # psi^(k) is monotone on (0, oo): rising for even k, falling for odd k; digamma (k = 0)
    # has a zero, near which its value is accurate only absolutely
    mp, k = _mp(), int(k)
    ends = sorted((mp.psi(k, _lo(x)), mp.psi(k, _hi(x))))
    return _widened(iv, ends[0], ends[1], mp.ldexp(1, -_ENCLOSURE_PREC) if k == 0 else 0)


def _rule_bessel_i0e(iv, x):
    # even, decreasing in |x| from 1; above 1/sqrt(2 pi |x| + 4) (its asymptotic series has
    # positive terms, and the bound holds on [0, 1] by direct check)
    m = max(abs(_lo(x)), abs(_hi(x)))
    return iv.mpf([1 / iv.sqrt(2 * iv.pi * m + 4).b, 1])


def _rule_zeta(iv, x, q=None):
    """Hurwitz zeta(x, q) (Riemann's for q = 1) where the sum is positive and bounded:
    x >= 3/2 and q >= 1/2, where 0 < zeta <= q**-x + q**(1-x)/(x-1) (the integral test);
    elsewhere, near its poles, the constant is refused."""
    q = iv.mpf(1) if q is None else q
    if _lo(x) < 1.5 or _lo(q) < 0.5:
        raise _not_real("zeta of arguments near its poles (constants need x >= 3/2 and "
                        "q >= 1/2)")
    a, b = iv.mpf(_lo(x)), iv.mpf(_lo(q))
    top = b ** -a + b ** (1 - a) / (a - 1)
    return iv.mpf([0, top.b])


ENCLOSURE_RULES: dict[str, Callable] = {
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
    "erfc": _monotone("erfc", False),
    "BesselI0e": _rule_bessel_i0e,
    "BesselI1e": lambda iv, x: iv.mpf([-0.25, 0.25]),  # odd, |i1e| < 0.216
    "zeta": _rule_zeta,
    "loggamma": _rule_loggamma,
    "polygamma": _rule_polygamma,
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

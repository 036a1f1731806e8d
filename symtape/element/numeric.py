"""Numeric conventions of SymPy heads: power plans, quotients, IEEE ``pow``, ``erf``, ``erfc``,
the gamma family (``lgamma``, ``polygamma``), the scaled Bessel functions ``bessel_i0e`` and
``bessel_i1e`` and the Hurwitz ``zeta``; the numpy evaluation of each head is its record in
``heads.py`` (``heads.NUMPY`` maps them).

Conventions (the lowering follows them too): integer powers are products by repeated
squaring, ``x**-k`` is ``1/x**k``, ``x**(1/2)`` a square root; ``Max``/``Min`` propagate nan;
comparisons with nan are false; ``Mod`` is the floored modulo; ``Heaviside(x, h0)`` is
``1``/``0``/``h0`` for ``x > 0``/``x < 0``/else.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from fractions import Fraction

import numpy as np

from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")

__all__ = ["pow_plan", "power_const", "split_quotient", "ieee_pow", "erf", "lgamma",
           "digamma", "polygamma", "DIGAMMA_SHIFT", "DIGAMMA_COEFFS", "ZETA_COEFFS", "ZETA_TERMS",
           "quiet", "erfc", "bessel_i0e", "bessel_i1e", "BESSEL_SPLIT", "BESSEL_SERIES",
           "BESSEL_FAR", "zeta", "ZETA_A", "ZETA_NEGATIVE_LIMIT", "ZETA_FAR"]


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


_erfc_vec = np.vectorize(math.erfc, otypes=[np.float64])


def erfc(x):
    """The complementary error function ``1 - erf(x)`` elementwise, accurate in its tail too
    (``math.erfc``, the C library's: relative error below 1e-15 up to where it underflows,
    past x = 27.2).

    >>> erfc(np.array([0.0, 10.0, 27.0]))
    array([1.00000000e+000, 2.08848758e-045, 5.23704644e-319])
    """
    x = np.asarray(x)
    out = _erfc_vec(x) if x.size else np.zeros(x.shape)
    return out.astype(x.dtype if x.dtype.kind == "f" else np.float64)


# --------------------------------------------------------------------------------------------
# The exponentially scaled modified Bessel functions i0e(x) = exp(-|x|) I0(x), i1e likewise
# --------------------------------------------------------------------------------------------
#
# Up to |x| = 8 the power series (positive terms: no cancellation) times exp(-|x|); above,
# ``G(1/|x|) / sqrt(|x|)`` with ``G`` the Chebyshev interpolant of ``sqrt(x) i_ne(x)`` in
# ``t = 1/x`` on ``[0, 1/8]`` (mpmath at 300 bits, rounded; ``codegen/special.py``
# re-derives them and a test checks they agree), as a polynomial in ``t - 1/16``. Both are
# within 5 ulp of the true values. The compiled lowering computes the same operations.

#: where the power series ends
BESSEL_SPLIT = 8.0
#: the power series in ``z = x*x/4``, highest power first: I0 = sum z**k / k!**2 and
#: I1 = x/2 sum z**k / (k! (k+1)!) for k = 0 .. 24 (the next term is below 1e-19 relative)
BESSEL_SERIES = (
    tuple(float(Fraction(1, math.factorial(k) ** 2)) for k in range(24, -1, -1)),
    tuple(float(Fraction(1, math.factorial(k) * math.factorial(k + 1)))
          for k in range(24, -1, -1)),
)
#: ``sqrt(x) i0e(x)`` and ``sqrt(x) i1e(x)`` as polynomials in ``1/x - 1/16`` (degree 22)
BESSEL_FAR = (
    (3.3678142630566788e+16, 681896256503434.4, -903532373518784.5, -20764144459290.18,
     11325144934060.879, 322435133186.99896, -89434443965.43149, -3595402500.051177,
     489255960.5265377, 32981259.497817814, -1453119.6003056539, -234324.37490496508,
     -7483.254231016855, 517.6216531877417, 92.58579872306456, 10.557369375253966,
     1.4885005442743167, 0.3118041040843247, 0.09724543541639234, 0.04564186645538276,
     0.034871315044319215, 0.053768831738683576, 0.4021765094450081),
    (-3.506121169747626e+16, -632077794743207.4, 941834474944389.1, 19510320690292.805,
     -11835271573241.229, -309200717021.3659, 93968015022.44627, 3541474601.128896,
     -520437715.2161844, -33473163.367933355, 1610790.523762753, 245457.1766052333,
     7471.262314053478, -577.7471011643162, -100.42789465617862, -11.578242812796129,
     -1.6779263892080487, -0.3653084718165999, -0.12025267185034541, -0.06159788937737925,
     -0.056124355541460225, -0.15599323509176974, 0.38939845902587233),
)


def _horner_each(coeffs: tuple, t):
    acc = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * t + c
    return acc


def _bessel(order: int, x):
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.float64
    a = np.abs(x.astype(np.float64))
    with quiet():
        series = _horner_each(BESSEL_SERIES[order], 0.25 * (a * a))
        if order:
            series = 0.5 * a * series
        near = series * np.exp(-a)
        far = _horner_each(BESSEL_FAR[order], 1.0 / a - 1.0 / (2 * BESSEL_SPLIT)) / np.sqrt(a)
    out = np.where(a <= BESSEL_SPLIT, near, far)
    if order:
        out = np.copysign(out, x)
    return out.astype(dtype)


def bessel_i0e(x):
    """``exp(-|x|) I0(x)`` elementwise (TensorFlow's ``bessel_i0e``): 1 at 0, even, about
    ``1/sqrt(2 pi |x|)`` for large ``|x|``, 0 at +-inf.

    >>> bessel_i0e(np.array([0.0, 1.0, -1.0, 100.0]))
    array([1.        , 0.46575961, 0.46575961, 0.03994438])
    """
    return _bessel(0, x)


def bessel_i1e(x):
    """``exp(-|x|) I1(x)`` elementwise (TensorFlow's ``bessel_i1e``): odd, 0 at 0 and at +-inf.

    >>> bessel_i1e(np.array([0.0, 1.0, -1.0, 100.0]))
    array([ 0.        ,  0.20791042, -0.20791042,  0.03974415])
    """
    return _bessel(1, x)


# --------------------------------------------------------------------------------------------
# The gamma family: lgamma, digamma and polygamma
# --------------------------------------------------------------------------------------------
#
# Compiled code calls the C library's ``lgamma`` (and ``log`` and ``tan`` inside polygamma),
# so these call the same functions (``math.log`` and ``math.tan`` are the C library's; the C
# library's ``lgamma`` through ctypes, where it is found); the rest is IEEE arithmetic in the
# order of the lowering's IR (``codegen/vecmath.py``), so eager and compiled values agree bit
# for bit. TensorFlow's conventions (Eigen's Cephes ports): lgamma is log|Gamma|, inf at the
# poles 0, -1, -2, ...; digamma is nan there; polygamma of order n >= 1 is +inf there for odd
# n and nan for even n; an order that is not a non-negative integer gives nan.

#: Bernoulli numbers B_2 .. B_24
_BERNOULLI = (Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30),
              Fraction(5, 66), Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510),
              Fraction(43867, 798), Fraction(-174611, 330), Fraction(854513, 138),
              Fraction(-236364091, 2730))

#: digamma's recurrence ``psi(x) = psi(x + 1) - 1/x`` moves the argument to at least this
DIGAMMA_SHIFT = 10.0
#: ``psi(s) = log(s) - 1/(2s) - z P(z)``, ``z = 1/s^2``, ``P`` highest power first: the
#: coefficients ``B_2k / (2k)`` for k = 7 down to 1 (the next term is below 5e-17 at s >= 10)
DIGAMMA_COEFFS = tuple(float(_BERNOULLI[k - 1] / (2 * k)) for k in range(7, 0, -1))
#: Hurwitz zeta ``zeta(s, x)``: at least this many terms summed directly, up to an argument
#: of at least this size, then the Euler-Maclaurin tail with ``B_2j / (2j)!`` for j = 1 to 12
ZETA_TERMS = 10
ZETA_COEFFS = tuple(float(b / math.factorial(2 * j)) for j, b in enumerate(_BERNOULLI, 1))


@functools.cache
def _c_lgamma():
    """``(lgamma, lgammaf)`` of the C library (what compiled code calls), or None."""
    name = ctypes.util.find_library("m") or ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name)
        fns = lib.lgamma, lib.lgammaf
    except (OSError, AttributeError, TypeError):
        return None
    fns[0].restype, fns[0].argtypes = ctypes.c_double, [ctypes.c_double]
    fns[1].restype, fns[1].argtypes = ctypes.c_float, [ctypes.c_float]
    return fns


def _py_lgamma(v: float) -> float:
    """``math.lgamma`` with the C library's conventions at the poles (inf, not an error)."""
    try:
        return math.lgamma(v)
    except ValueError:
        return math.inf


def lgamma(x):
    """``log|Gamma(x)|`` elementwise: inf at 0, -1, -2, ... and at +-inf, nan for nan.

    >>> lgamma(np.array([1.0, 0.5, -0.5, 0.0, -2.0]))
    array([0.        , 0.57236494, 1.26551212,        inf,        inf])
    """
    x = np.asarray(x)
    single = x.dtype == np.float32
    fns = _c_lgamma()
    fn = _py_lgamma if fns is None else fns[1 if single else 0]
    vec = np.vectorize(fn, otypes=[np.float32 if single else np.float64])
    with quiet():  # the C library raises floating-point flags at the poles
        out = vec(x) if x.size else np.zeros(x.shape)
    return out.astype(x.dtype if x.dtype.kind == "f" else np.float64)


_log = np.vectorize(math.log, otypes=[np.float64])
_tan = np.vectorize(math.tan, otypes=[np.float64])


def _digamma(x: np.ndarray) -> np.ndarray:
    """psi(x) of a float64 array, in the operations of ``st.polygamma.f64``'s digamma."""
    pole = (x <= 0.0) & (x == np.floor(x))
    neg = x < 0.0
    frac = np.where(neg & np.isfinite(x), x - np.rint(x), 0.0)
    cot = np.where(np.abs(frac) == 0.5, 0.0, np.pi / _tan(np.pi * frac))
    s = np.where(neg, 1.0 - x, x)
    w = np.zeros_like(s)
    for _ in range(int(DIGAMMA_SHIFT)):  # s > 0 reaches the shift within this many steps
        low = s < DIGAMMA_SHIFT
        w = np.where(low, w + 1.0 / s, w)
        s = np.where(low, s + 1.0, s)
    z = 1.0 / (s * s)
    p = np.full_like(s, DIGAMMA_COEFFS[0])
    for c in DIGAMMA_COEFFS[1:]:
        p = p * z + c
    y = _log(np.where(np.isnan(s), 1.0, s)) - 0.5 / s - p * z - w
    y = np.where(np.isnan(s), s, y)
    y = np.where(neg, y - cot, y)
    return np.where(pole, np.nan, y)


def _ipow_each(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``a ** e`` for integer exponents ``e >= 1`` given per element, by repeated squaring over
    the bits of ``e`` (:func:`_ipow` takes one exponent for the whole array)."""
    r = np.ones_like(a)
    b = a
    e = np.array(e, dtype=np.float64)
    while (e > 0).any():
        half = np.floor(e * 0.5)
        odd = (e - 2.0 * half) == 1.0
        r = np.where(odd, r * b, r)
        e = half
        b = np.where(e > 0, b * b, b)
    return r


def _trigamma_up(n: np.ndarray, x: np.ndarray) -> np.ndarray:
    """psi^(n)(x) for integer orders n >= 1 and x neither a pole nor infinite:
    ``(-1)**(n+1) n! zeta(n + 1, x)``, in the operations of ``st.polygamma.f64``."""
    s = n + 1.0
    fact = np.ones_like(n)
    k = 2.0
    while ((k <= n) & (fact < np.inf)).any():
        fact = np.where((k <= n) & (fact < np.inf), fact * k, fact)
        k += 1.0
    acc = np.zeros_like(x)
    a = x.copy()
    i = 0
    while True:
        more = (a < ZETA_TERMS) if i >= ZETA_TERMS else np.ones(a.shape, dtype=bool)
        if not more.any():
            break
        acc = np.where(more, acc + 1.0 / _ipow_each(a, s), acc)
        a = np.where(more, a + 1.0, a)
        i += 1
    b = 1.0 / _ipow_each(a, s)
    acc = acc + a * b / (s - 1.0)
    acc = acc + 0.5 * b
    r = s
    q = b / a
    for j, c in enumerate(ZETA_COEFFS, 1):
        acc = acc + c * (r * q)
        r = r * (s + (2 * j - 1)) * (s + 2 * j)
        q = q / a / a
    out = fact * acc
    odd = (n - 2.0 * np.floor(n * 0.5)) == 1.0
    return np.where(odd, out, -out)


def polygamma(n, x):
    """psi^(n)(x), the n-th derivative of digamma (n = 0: digamma itself), elementwise with
    TensorFlow's conventions: nan for an order that is not a non-negative integer, at poles
    nan for digamma and even orders and +inf for odd orders, 0 at +inf (n >= 1).

    >>> polygamma(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, -0.5]))
    array([-0.57721566,  1.64493407, -0.82879664])
    """
    n, x = np.asarray(n), np.asarray(x)
    # a number as the order (a template's constant) keeps the argument's precision
    dtype = np.result_type(x, np.float32) if n.ndim == 0 and x.ndim else \
        np.result_type(n, x, np.float32)
    n, x = np.broadcast_arrays(n, x)
    n, x = n.astype(np.float64), x.astype(np.float64)
    if not x.size:
        return np.zeros(x.shape, dtype)
    with quiet():
        order_ok = (n >= 0.0) & (n == np.floor(n)) & (n < np.inf)
        digamma = n == 0.0
        pole = (x <= 0.0) & (x == np.floor(x))
        odd = (n - 2.0 * np.floor(n * 0.5)) == 1.0
        regular = order_ok & ~digamma & ~pole & np.isfinite(x)
        out = np.full(x.shape, np.nan)
        out[digamma] = _digamma(x[digamma])
        out[regular] = _trigamma_up(n[regular], x[regular])
        high = order_ok & ~digamma
        out = np.where(high & pole & odd & np.isfinite(x), np.inf, out)
        out = np.where(high & (x == np.inf), np.where(odd, 0.0, -0.0), out)
    return out.astype(dtype)


def digamma(x):
    """psi(x) = d/dx log Gamma(x) elementwise: :func:`polygamma` of order 0 (nan at the poles
    0, -1, -2, ... as TensorFlow's).

    >>> digamma(np.array([1.0, 0.5, -0.5, 0.0]))
    array([-0.57721566, -1.96351003,  0.03648997,         nan])
    """
    x = np.asarray(x)
    return polygamma(np.zeros((), x.dtype if x.dtype.kind == "f" else np.float64), x)


# --------------------------------------------------------------------------------------------
# The Hurwitz zeta function zeta(x, q) = sum over k >= 0 of (q + k) ** -x
# --------------------------------------------------------------------------------------------
#
# TensorFlow's conventions (Eigen's port of Cephes): inf at x = 1; nan for x < 1; where q is
# 0, -1, -2, ..., inf for an even integer x and nan otherwise; nan for q < 0 with x not an
# integer. The terms are summed directly (at least nine after the first, on to q + k > 9)
# until one is below half an ulp of the sum; then the Euler-Maclaurin tail, its terms added
# until one is. Above q = 1e8 the first three terms of the asymptotic series instead (the sum
# would lose the value to underflow of its terms: zeta(1.5, 1e300) is 2e-150; the next
# term is below 1e-15 of the value wherever it does not underflow). The compiled lowering
# computes the same operations in the same order (``codegen/special.py``).

#: where the asymptotic series takes over
ZETA_FAR = 1.0e8

#: ``(2j)! / B_2j`` for j = 1 .. 12, the Euler-Maclaurin denominators
ZETA_A = tuple(float(math.factorial(2 * j) / b) for j, b in enumerate(_BERNOULLI, 1))
#: below this q (negative, x an integer) the direct sum would take more than a million terms:
#: the value is nan there instead of an unbounded loop
ZETA_NEGATIVE_LIMIT = -1.0e6
_EPS = float(np.finfo(np.float64).eps) / 2  # Cephes's MACHEP


def _zeta_sum(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """zeta(x, q) for points past the special cases, as Cephes's loop, point by point in
    masks (a point stops where Cephes returns)."""
    s = np.power(q, -x)
    a, b = q.copy(), np.zeros_like(q)
    live = np.ones(q.shape, dtype=bool)
    i = 0
    while True:
        go = live & ((i < 9) | (a <= 9.0))
        if not go.any():
            break
        i += 1
        a = np.where(go, a + 1.0, a)
        b = np.where(go, np.power(a, -x), b)
        s = np.where(go, s + b, s)
        live = live & ~(go & (np.abs(b / s) < _EPS))
    w = a
    s = np.where(live, s + b * w / (x - 1.0), s)
    s = np.where(live, s - 0.5 * b, s)
    a, k = np.ones_like(q), np.zeros_like(q)
    for c in ZETA_A:
        a = np.where(live, a * (x + k), a)
        b = np.where(live, b / w, b)
        t = a * b / c
        s = np.where(live, s + t, s)
        live = live & ~(np.abs(t / s) < _EPS)
        k = k + 1.0
        a = np.where(live, a * (x + k), a)
        b = np.where(live, b / w, b)
        k = k + 1.0
    return s


def zeta(x, q=1.0):
    """The Hurwitz zeta function ``sum over k >= 0 of (q + k) ** -x`` elementwise (``q`` 1:
    Riemann's, as SymPy's one-argument zeta), with
    TensorFlow's conventions: inf at ``x = 1``; nan for ``x < 1``; at ``q = 0, -1, -2, ...``
    inf for an even integer ``x``, else nan; nan for ``q < 0`` with ``x`` not an integer, and
    for ``q`` below -1e6 (the direct sum would take more than a million terms); at ``x = inf``
    inf, 1 and nan for ``q`` below, at and above 1 (the sum meets 0/0 there, as TensorFlow's).

    >>> zeta(np.array([2.0, 3.0, 0.5, 1.0]), np.array([1.0, 2.0, 1.0, 1.0]))
    array([1.64493407, 0.2020569 ,        nan,        inf])
    """
    x, q = np.asarray(x), np.asarray(q)
    # a number as one argument (a template's constant) keeps the other's precision
    dtype = np.result_type(q, np.float32) if x.ndim == 0 and q.ndim else \
        np.result_type(x, np.float32) if q.ndim == 0 and x.ndim else \
        np.result_type(x, q, np.float32)
    x, q = (v.astype(np.float64) for v in np.broadcast_arrays(x, q))
    out = np.full(x.shape, np.nan)
    with quiet():
        whole = (x == np.floor(x)) & np.isfinite(x)
        even = whole & (np.floor(x * 0.5) == x * 0.5)
        pole = (q <= 0.0) & (q == np.floor(q))
        ok = (x > 1.0) & ~pole & ((q > 0.0) | (whole & (q >= ZETA_NEGATIVE_LIMIT)) |
                                  np.isnan(q))
        far = ok & (q > ZETA_FAR)
        xf, qf = x[far], q[far]
        out[far] = np.power(qf, 1.0 - xf) * (1.0 / (xf - 1.0) + 1.0 / (2.0 * qf) + xf / (12.0 * (
            qf * qf)))
        ok = ok & ~far
        out[ok] = _zeta_sum(x[ok], q[ok])
        out[(x > 1.0) & pole & even] = np.inf
        out[x == 1.0] = np.inf
    return out.astype(dtype)


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

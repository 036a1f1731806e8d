"""Vector math: elementary functions written in LLVM IR, so loops that use them vectorise.

A call to the C library has no vector form: LLVM keeps it a scalar call per point and does
not vectorise the batch loop around it. The functions here are plain IR (arithmetic, bit
operations, selects and intrinsics that are instructions on current CPUs), inlined into the
kernel, so the loop vectoriser widens them like any other arithmetic.

``exp``: Cody-Waite reduction ``x = q ln2 + s`` (``q`` the nearest integer to ``x / ln2``)
with ``ln2`` split into a high part of 32 significant bits (``q ln2_hi`` is exact) and a low
part, the Taylor polynomial of ``(e**s - 1 - s) / s**2`` to degree 11 on ``|s| <= ln2/2``
(truncation below 1e-17 relative), ``s*s*p + s + 1``, and the scale by ``2**q`` in two halves
so that results near overflow and in the subnormal range are formed without an intermediate
overflow. Inputs above ``log(DBL_MAX)`` give ``inf``, below -1000 give ``+0``, nan gives nan.
The accuracy is tested against mpmath (``tests/codegen``): at most 1 ulp from the correctly
rounded value. No fast-math flags are used inside, so ``fastmath=True`` kernels round these
functions the same way.
"""

from __future__ import annotations

import fractions
import functools
import math
import struct

from symtape.base.lazy import LazyModule
from symtape.codegen.lanes import libm_wrapper, vector, widen

mpmath = LazyModule("mpmath", globals(), "mpmath")  # derivations of the constants only

__all__ = ["double_literal", "EXP_F64", "EXPH_F64", "EXPM1_F64", "LOG_F64", "LOG1P_F64",
           "TANH_F64", "COSH_F64", "SINH_F64", "ERF_F64", "DECLARATIONS", "trig_lanes",
           "TRIG_LIMIT", "chebyshev"]


def double_literal(value: float) -> str:
    """An LLVM IR double literal for ``value`` (exact, in hex).

    >>> double_literal(1.0)
    '0x3FF0000000000000'
    """
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def _split_ln2() -> tuple:
    """``(1/ln2, ln2_hi, ln2_lo)``: ``ln2_hi`` has 32 significant bits, so ``q * ln2_hi`` is
    exact for ``|q| < 2**21``; ``ln2_lo`` is the rest, rounded."""
    with mpmath.workprec(200):
        ln2 = mpmath.log(2)
        hi = float(mpmath.ldexp(mpmath.floor(mpmath.ldexp(ln2, 32)), -32))
        return float(1 / ln2), hi, float(ln2 - hi)


# _split_ln2() and _exp_overflow(), as literals (tests/codegen checks them against mpmath)
_R_LN2, _L2U, _L2L = (float.fromhex("0x1.71547652b82fep+0"), float.fromhex("0x1.62e42fee00000p-1"),
                      float.fromhex("0x1.a39ef35793c76p-33"))
#: 1/k! for k = 13 down to 2: (e**s - 1 - s) / s**2 by Horner's rule
_EXP_COEFFS = tuple(float(fractions.Fraction(1, math.factorial(k))) for k in range(13, 1, -1))


def _exp_overflow() -> float:
    """The largest double whose exponential rounds to a finite double (below DBL_MAX plus
    half its ulp)."""
    with mpmath.workprec(200):
        limit = mpmath.log(mpmath.mpf(2) ** 1024 - mpmath.mpf(2) ** 970)
        x = float(limit)
        return x if x < limit else math.nextafter(x, -math.inf)


_EXP_MAX = float.fromhex("0x1.62e42fefa39efp+9")  # above it the result is inf
_EXP_MIN = -1000.0  # below it the result is +0


def _horner(var: str, coeffs: tuple, tag: str) -> tuple:
    """Lines evaluating ``sum coeffs[i] * var**(n-1-i)`` (highest first) and its name."""
    lines = []
    acc = double_literal(coeffs[0])
    for k, c in enumerate(coeffs[1:], start=1):
        lines.append(f"  %{tag}a{k} = call double @llvm.fmuladd.f64(double {acc}, "
                     f"double {var}, double {double_literal(c)})")
        acc = f"%{tag}a{k}"
    return lines, f"%{tag}a{len(coeffs) - 1}"


def _reduced(low: float, high: float = 710.0) -> list:
    """Lines of the reduction shared by ``exp`` and ``expm1``: ``%d`` clamped to
    ``[low, high]`` (``fptosi`` of a value out of range, or nan, is poison), ``q`` the nearest
    integer to it over ``ln2`` and ``s = d - q ln2`` (Cody-Waite), ``%w0 = s*s*P(s)`` with
    ``e**s = 1 + s + s*s*P(s)``, and ``%p0``, ``%p1``: ``2**q`` as two normal halves
    ``2**(q >> 1) * 2**(q - (q >> 1))``."""
    horner, last = _horner("%s", _EXP_COEFFS, "")
    return [
        f"  %c0 = call double @llvm.maxnum.f64(double %d, double {double_literal(low)})",
        f"  %c = call double @llvm.minnum.f64(double %c0, double {double_literal(high)})",
        f"  %t = fmul double %c, {double_literal(_R_LN2)}",
        "  %q = call double @llvm.rint.f64(double %t)",
        f"  %qh = fmul double %q, {double_literal(_L2U)}",
        "  %s0 = fsub double %c, %qh",
        f"  %ql = fmul double %q, {double_literal(_L2L)}",
        "  %s = fsub double %s0, %ql",
        *horner,
        "  %ss = fmul double %s, %s",
        f"  %w0 = fmul double %ss, {last}",
        "  %qi = fptosi double %q to i64",
        "  %h0 = ashr i64 %qi, 1",
        "  %h1 = sub i64 %qi, %h0",
        "  %e0 = add i64 %h0, 1023",
        "  %e1 = add i64 %h1, 1023",
        "  %b0 = shl i64 %e0, 52",
        "  %b1 = shl i64 %e1, 52",
        "  %p0 = bitcast i64 %b0 to double",
        "  %p1 = bitcast i64 %b1 to double",
    ]


def _exp_f64() -> str:
    lines = [
        "define internal double @st.exp.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        *_reduced(_EXP_MIN),
        "  %w1 = fadd double %w0, %s",
        "  %w = fadd double %w1, 1.000000e+00",
        # w * 2**q, one normal half at a time
        "  %r0 = fmul double %w, %p0",
        "  %r1 = fmul double %r0, %p1",
        f"  %big = fcmp ogt double %d, {double_literal(_EXP_MAX)}",
        "  %r2 = select i1 %big, double 0x7FF0000000000000, double %r1",
        f"  %tiny = fcmp olt double %d, {double_literal(_EXP_MIN)}",
        "  %r3 = select i1 %tiny, double 0.000000e+00, double %r2",
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r = select i1 %nan, double %d, double %r3",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.exp.f64`` (double -> double).
EXP_F64 = _exp_f64()

#: 2/(2k+1) for k = 10 down to 1: ``R(z)`` of ``log(1+f) = f - hfsq + s*(hfsq + R(s*s))``
_LOG_COEFFS = tuple(float(fractions.Fraction(2, 2 * k + 1)) for k in range(10, 0, -1))


def _log_f64() -> str:
    horner, p = _horner("%z", _LOG_COEFFS, "")
    lines = [
        "define internal double @st.log.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        # subnormals are scaled into the normal range first
        "  %sub = fcmp olt double %d, 0x0010000000000000",
        "  %dn = fmul double %d, 0x4350000000000000",  # 2**54
        "  %x = select i1 %sub, double %dn, double %d",
        "  %eb = select i1 %sub, i64 -1077, i64 -1023",
        # x = 2**e * m with m in [1, 2), then m in [sqrt(2)/2, sqrt(2))
        "  %bits = bitcast double %x to i64",
        "  %be = lshr i64 %bits, 52",
        "  %e0 = add i64 %be, %eb",
        "  %mb = and i64 %bits, 4503599627370495",
        "  %mb1 = or i64 %mb, 4607182418800017408",
        "  %m0 = bitcast i64 %mb1 to double",
        "  %big = fcmp ogt double %m0, 0x3FF6A09E667F3BCD",
        "  %mh = fmul double %m0, 5.000000e-01",
        "  %m = select i1 %big, double %mh, double %m0",
        "  %e1 = add i64 %e0, 1",
        "  %e = select i1 %big, i64 %e1, i64 %e0",
        "  %k = sitofp i64 %e to double",
        # log(m) = log(1 + f): s = f / (2 + f), z = s*s, R(z) = 2z/3 + 2z**2/5 + ...
        "  %f = fsub double %m, 1.000000e+00",
        "  %f2 = fadd double %f, 2.000000e+00",
        "  %s = fdiv double %f, %f2",
        "  %z = fmul double %s, %s",
        *horner,
        f"  %rz = fmul double {p}, %z",  # R(z) = z * P(z)
        "  %ff = fmul double %f, %f",
        "  %hfsq = fmul double %ff, 5.000000e-01",
        # k*ln2_hi - ((hfsq - (s*(hfsq + R) + k*ln2_lo)) - f)
        "  %t0 = fadd double %hfsq, %rz",
        "  %t1 = fmul double %s, %t0",
        f"  %kl = fmul double %k, {double_literal(_L2L)}",
        "  %t2 = fadd double %t1, %kl",
        "  %t3 = fsub double %hfsq, %t2",
        "  %t4 = fsub double %t3, %f",
        f"  %kh = fmul double %k, {double_literal(_L2U)}",
        "  %r0 = fsub double %kh, %t4",
        # log(+-0) = -inf, log(x < 0) = nan, log(inf) = inf, log(nan) = nan
        "  %zero = fcmp oeq double %d, 0.000000e+00",
        "  %r1 = select i1 %zero, double 0xFFF0000000000000, double %r0",
        "  %inf = fcmp oeq double %d, 0x7FF0000000000000",
        "  %r2 = select i1 %inf, double %d, double %r1",
        "  %bad = fcmp ult double %d, 0.000000e+00",  # negative or nan
        "  %r = select i1 %bad, double 0x7FF8000000000000, double %r2",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.log.f64`` (double -> double).
LOG_F64 = _log_f64()

#: 1/k! for k = 20 down to 2: the Taylor series of ``e**x - 1`` on ``|x| < 1`` directly
_EXPM1_COEFFS = tuple(float(fractions.Fraction(1, math.factorial(k))) for k in range(20, 1, -1))


def _expm1_f64() -> str:
    """``e**d - 1``: below 1 in magnitude the Taylor series ``d + d*d*P(d)`` (to degree
    20, no reduction: no cancellation); above, the reduction of ``exp`` (``d = q ln2 + s``),
    ``e**s - 1`` as ``s + s*s*P(s)``, then ``2**q (e**s - 1) + (2**q - 1)`` with ``2**q - 1``
    exact (past ``q = 53``, ``e**d`` as ``exp`` makes it); below -40 the result is -1, above
    log(DBL_MAX) inf."""
    near, near_p = _horner("%d", _EXPM1_COEFFS, "n")
    lines = [
        "define internal double @st.expm1.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        *_reduced(-40.0),
        "  %em = fadd double %w0, %s",  # e**s - 1
        "  %p = fmul double %p0, %p1",
        "  %pm1 = fsub double %p, 1.000000e+00",
        "  %sc0 = fmul double %em, %p0",
        "  %sc = fmul double %sc0, %p1",
        "  %rm = fadd double %sc, %pm1",
        # past q = 53, 2**q - 1 is 2**q (and 2**q alone may overflow): e**d itself
        "  %w = fadd double %em, 1.000000e+00",
        "  %we = fmul double %w, %p0",
        "  %wee = fmul double %we, %p1",
        "  %qbig = fcmp ogt double %q, 5.300000e+01",
        "  %r0 = select i1 %qbig, double %wee, double %rm",
        *near,
        "  %dd = fmul double %d, %d",
        f"  %nw = fmul double %dd, {near_p}",
        "  %nr = fadd double %nw, %d",
        "  %ad = call double @llvm.fabs.f64(double %d)",
        "  %small = fcmp olt double %ad, 1.000000e+00",
        "  %r1 = select i1 %small, double %nr, double %r0",
        # tiny and signed-zero arguments are their own result
        "  %tiny = fcmp olt double %ad, 0x3C90000000000000",  # 2**-54
        "  %r2 = select i1 %tiny, double %d, double %r1",
        f"  %big = fcmp ogt double %d, {double_literal(_EXP_MAX)}",
        "  %r3 = select i1 %big, double 0x7FF0000000000000, double %r2",
        "  %low = fcmp olt double %d, -4.000000e+01",
        "  %r4 = select i1 %low, double -1.000000e+00, double %r3",
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r = select i1 %nan, double %d, double %r4",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.expm1.f64`` (double -> double).
EXPM1_F64 = _expm1_f64()


def _exp_half_f64() -> str:
    """``e**d / 2`` for ``d >= 0`` with one rounding (``exp``'s ``w * 2**(q-1)``): finite up
    to ``log(2 DBL_MAX)``, past where ``e**d`` overflows (msun's ``__ldexp_exp(x, -1)``)."""
    lines = [
        "define internal double @st.exph.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        *_reduced(0.0, 711.0),
        "  %w1 = fadd double %w0, %s",
        "  %w = fadd double %w1, 1.000000e+00",
        "  %r0 = fmul double %w, %p0",
        "  %r1 = fmul double %r0, 5.000000e-01",
        "  %r2 = fmul double %r1, %p1",
        "  %big = fcmp ogt double %d, 7.110000e+02",
        "  %r = select i1 %big, double 0x7FF0000000000000, double %r2",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.exph.f64``.
EXPH_F64 = _exp_half_f64()


#: 1/(2k+1)! for k = 10 down to 1: ``sinh(x) = x + x z P(z)``, ``z = x*x``, for ``|x| < 1``.
_SINH_COEFFS = tuple(float(fractions.Fraction(1, math.factorial(2 * k + 1)))
                     for k in range(10, 0, -1))


def _hyperbolic_f64(name: str) -> str:
    """``cosh`` or ``sinh`` from ``exp`` and ``expm1`` as the C library (msun's e_cosh.c,
    e_sinh.c) computes them, without branches: with ``t = expm1(|x|)``, near 0 ``1 + t*t /
    (2 (1 + t))`` (cosh) or, below 1, the Taylor series (sinh, exactly ``x`` for tiny ``x``:
    msun's ``t - t*t/(t + 1)`` was 2 ulps off there); up to 22 ``(e + 1/e)/2`` (cosh,
    ``e = e**|x|``) or ``h (t + t/(t + 1))`` (sinh, ``h = copysign(1/2, x)``); past it
    ``e**|x| / 2`` in one rounding (:func:`_exp_half_f64`, finite past where ``e**|x|``
    overflows), signed for sinh."""
    lines = [
        f"define internal double @st.{name}.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        "  %t = call double @st.expm1.f64(double %a)",
        "  %t1 = fadd double %t, 1.000000e+00",
        "  %eh = call double @st.exph.f64(double %a)",
    ]
    if name == "cosh":
        far, near_limit = "%eh", "0x3FD62E42FEFA39EF"  # ln2 / 2
        lines += [
            "  %tt = fmul double %t, %t",
            "  %w2 = fadd double %t1, %t1",
            "  %q0 = fdiv double %tt, %w2",
            "  %near = fadd double %q0, 1.000000e+00",
            "  %e = call double @st.exp.f64(double %a)",
            "  %he = fmul double %e, 5.000000e-01",
            "  %ie = fdiv double 5.000000e-01, %e",
            "  %mid = fadd double %he, %ie",
        ]
    else:
        far, near_limit = "%far", "1.000000e+00"
        series, series_p = _horner("%z", _SINH_COEFFS, "n")
        lines += [
            "  %z = fmul double %d, %d",
            *series,
            f"  %zp = fmul double %z, {series_p}",
            "  %near = call double @llvm.fmuladd.f64(double %d, double %zp, double %d)",
            "  %h = call double @llvm.copysign.f64(double 5.000000e-01, double %d)",
            "  %q1 = fdiv double %t, %t1",
            "  %m0 = fadd double %t, %q1",
            "  %mid = fmul double %h, %m0",
            "  %far = call double @llvm.copysign.f64(double %eh, double %d)",
        ]
    lines += [
        f"  %isnear = fcmp olt double %a, {near_limit}",
        "  %r0 = select i1 %isnear, double %near, double %mid",
        "  %big = fcmp oge double %a, 2.200000e+01",
        f"  %r1 = select i1 %big, double {far}, double %r0",
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r = select i1 %nan, double %d, double %r1",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definitions of ``@st.cosh.f64`` and ``@st.sinh.f64`` (they call ``@st.expm1.f64``,
#: ``@st.exph.f64`` and, cosh, ``@st.exp.f64``).
COSH_F64 = _hyperbolic_f64("cosh")
SINH_F64 = _hyperbolic_f64("sinh")


def _log1p_f64() -> str:
    """``log(1 + d)``: ``u = 1 + d`` rounded, then ``log(u)`` corrected by the rounding of
    ``u``, ``-((u - 1) - d) / u`` (exact-enough first-order term); tiny ``d`` is its own
    result, ``d = -1`` gives -inf, ``d < -1`` nan, and past 2**53 ``u`` is ``d``."""
    lines = [
        "define internal double @st.log1p.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %u = fadd double %d, 1.000000e+00",
        "  %l = call double @st.log.f64(double %u)",
        "  %um1 = fsub double %u, 1.000000e+00",
        "  %err = fsub double %um1, %d",
        "  %corr = fdiv double %err, %u",
        "  %r0 = fsub double %l, %corr",
        "  %ad = call double @llvm.fabs.f64(double %d)",
        "  %tiny = fcmp olt double %ad, 0x3C90000000000000",  # 2**-54
        "  %r1 = select i1 %tiny, double %d, double %r0",
        "  %huge = fcmp ogt double %d, 0x4340000000000000",  # 2**53: u is d, log(u) exact
        "  %r2 = select i1 %huge, double %l, double %r1",
        "  %neg1 = fcmp oeq double %d, -1.000000e+00",
        "  %r3 = select i1 %neg1, double 0xFFF0000000000000, double %r2",
        "  %bad = fcmp ult double %d, -1.000000e+00",  # below -1 or nan
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r4 = select i1 %bad, double 0x7FF8000000000000, double %r3",
        "  %r = select i1 %nan, double %d, double %r4",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.log1p.f64`` (double -> double; calls ``@st.log.f64``).
LOG1P_F64 = _log1p_f64()

_TANH_SERIES_LIMIT = 0.9  # below: the Taylor series; above: 1 - 2/(exp(2|x|) + 1)


#: ``(tanh(x) - x) / x**3`` as a polynomial in ``z = x*x`` on ``0 <= z <= 0.81`` (the
#: series' range), highest power first: the interpolant at the 15 Chebyshev nodes of that
#: interval, solved at 300 bits and rounded (:func:`tanh_coefficients` re-derives them; a
#: test checks they agree). Its error, below 2**-56 of ``tanh`` with these doubles, is that
#: of the 37-term Taylor series it replaces, at 14 multiply-adds instead of 36.
TANH_COEFFS = (
    -1.1687858974397003e-07, 9.984237936271778e-07, -4.404576798562937e-06,
    1.402208799041075e-05, -3.798830638077052e-05, 9.626974354985488e-05,
    -0.00023889197007555244, 0.0005899641637897441, -0.00145582235941365, 0.003592126459550889,
    -0.008863235394320356, 0.021869488529109107, -0.05396825396806158, 0.13333333333333125,
    -0.3333333333333333,
)


def tanh_coefficients(degree: int = len(TANH_COEFFS) - 1) -> tuple:
    """The Chebyshev interpolant of ``(tanh(x) - x) / x**3`` in ``z = x*x`` on
    ``[0, 0.81]`` of this degree, as doubles, highest power first (mpmath at 300 bits).

    >>> round(tanh_coefficients(4)[-1] * 3, 9)  # the x**3 term of tanh: -x**3/3
    -1.0
    """
    def g(z):
        if z == 0:
            return mpmath.mpf(-1) / 3
        s = mpmath.sqrt(z)
        return (mpmath.tanh(s) - s) / s ** 3

    with mpmath.workprec(300):  # the range's end: the series' limit squared, exactly
        return chebyshev(g, 0.0, mpmath.mpf(_TANH_SERIES_LIMIT) ** 2, degree, 0.0)


def _tanh_f64() -> str:
    horner, p = _horner("%z", TANH_COEFFS, "")
    lines = [
        "define internal double @st.tanh.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        # the series: d + d*z*P(z)
        "  %z = fmul double %d, %d",
        *horner,
        "  %dz = fmul double %d, %z",
        f"  %c = fmul double %dz, {p}",
        "  %ts0 = fadd double %d, %c",
        "  %ts = call double @llvm.copysign.f64(double %ts0, double %d)",  # tanh(-0) = -0
        # 1 - 2/(exp(2|d|) + 1), with the sign of d (inf gives 1, nan stays nan)
        "  %twice = fadd double %a, %a",
        "  %e = call double @st.exp.f64(double %twice)",
        "  %e1 = fadd double %e, 1.000000e+00",
        "  %q = fdiv double 2.000000e+00, %e1",
        "  %tl0 = fsub double 1.000000e+00, %q",
        "  %tl = call double @llvm.copysign.f64(double %tl0, double %d)",
        f"  %near = fcmp olt double %a, {double_literal(_TANH_SERIES_LIMIT)}",
        "  %r = select i1 %near, double %ts, double %tl",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.tanh.f64`` (double -> double; calls ``@st.exp.f64``).
TANH_F64 = _tanh_f64()

#: ``erf(x) / x - 1`` as a polynomial in ``z = x*x`` on ``|x| < 1`` (degree 12), and
#: ``erfcx(x) = erfc(x) e**(x*x)`` on ``1 <= x < 6`` in three pieces, each a polynomial in
#: ``x`` minus the middle of its piece (degree 16); highest power first. Chebyshev
#: interpolants at 300 bits, rounded (:func:`erf_coefficients` re-derives them; a test
#: checks they agree): below 2**-55 relative on the first range, 2**-52 on the others.
ERF_PIECES = ((1.0, 2.0), (2.0, 3.5), (3.5, 6.0))
ERF_NEAR_COEFFS = (
    5.957176147748911e-11, -1.1372848856791674e-09, 1.4659775274047436e-08,
    -1.6350312701054695e-07, 1.6461000484121368e-06, -1.4925595266831182e-05,
    0.0001205533111164271, -0.000854832698083379, 0.0052239776248180145, -0.026866170645076792,
    0.11283791670954879, -0.3761263890318375, 0.1283791670955126,
)
ERFCX_COEFFS = (
    (
        1.3242541506849586e-08, -4.9545807838901603e-08, 1.6714292901928126e-07,
        -5.944961119917664e-07, 2.0670657912156654e-06, -6.97536222785843e-06,
        2.2864299608127746e-05, -7.265887301589559e-05, 0.0002233099453004411,
        -0.0006619300701084315, 0.0018861348769919975, -0.0051459575478377826,
        0.013377340953067394, -0.03293090529956527, 0.0761510398554774, -0.16362291773256005,
        0.3215854164543175,
    ),
    (
        8.831959586426476e-11, -4.056754880659121e-10, 1.6207327188991065e-09,
        -7.156467021431838e-09, 3.121415013712102e-08, -1.3264839014463818e-07,
        5.519743740073735e-07, -2.247366566986457e-06, 8.94015629298454e-06,
        -3.469861074039318e-05, 0.0001311818005084561, -0.00048219508487679243,
        0.0017195818852900986, -0.005934337897002171, 0.019758592987322854,
        -0.06323763756063479, 0.1936620962790687,
    ),
    (
        1.6722457190056534e-13, -1.0277932486024302e-12, 5.138680596045611e-12,
        -3.0750980426473406e-11, 1.849140276993934e-10, -1.081455682633195e-09,
        6.242341780249905e-09, -3.5595168000590696e-08, 2.002920135090727e-07,
        -1.1115679931156728e-06, 6.081114539531e-06, -3.2775781066528116e-05,
        0.00017392830404186873, -0.0009080988970373065, 0.0046613263689723,
        -0.023503448598162904, 0.11630270721024731,
    ),
)


def chebyshev(g, lo: float, hi: float, degree: int, shift: float) -> tuple:
    """The interpolant of ``g`` at the ``degree + 1`` Chebyshev nodes of ``[lo, hi]`` as a
    polynomial in ``x - shift``, its coefficients rounded to doubles, highest power first
    (mpmath at 300 bits).

    >>> [round(c, 12) for c in chebyshev(lambda z: z * z, 0.0, 1.0, 2, 0.0)]
    [1.0, 0.0, 0.0]
    """
    with mpmath.workprec(300):
        lo, hi, shift = mpmath.mpf(lo), mpmath.mpf(hi), mpmath.mpf(shift)
        n = degree + 1
        nodes = [(lo + hi) / 2 + (hi - lo) / 2 * mpmath.cos(mpmath.pi * (k + mpmath.mpf(1) / 2)
                                                              / n) for k in range(n)]
        coeffs = mpmath.lu_solve(
            mpmath.matrix([[(z - shift) ** j for j in range(n)] for z in nodes]),
            mpmath.matrix([g(z) for z in nodes]))
        return tuple(float(coeffs[j]) for j in reversed(range(n)))


def erf_coefficients() -> tuple:
    """``(ERF_NEAR_COEFFS, ERFCX_COEFFS)`` derived afresh.

    >>> near, far = erf_coefficients()
    >>> len(near), [len(c) for c in far]
    (13, [17, 17, 17])
    """

    def near(z):
        if z == 0:
            return 2 / mpmath.sqrt(mpmath.pi) - 1
        s = mpmath.sqrt(z)
        return mpmath.erf(s) / s - 1

    def erfcx(x):
        return mpmath.erfc(x) * mpmath.exp(x * x)

    return (chebyshev(near, 0.0, 1.0, 12, 0.0),
            tuple(chebyshev(erfcx, lo, hi, 16, (lo + hi) / 2) for lo, hi in ERF_PIECES))


def _erf_f64() -> str:
    """``erf``: below 1 in magnitude ``x + x * P(x*x)``; above, ``1 - e**(-x*x) erfcx(|x|)`` with
    the sign of ``x`` (the piece's polynomial chosen by selects; ``e**(-x*x)`` by ``@st.exp``,
    whose error there is scaled down by ``erfc/erf <= 0.19``); from 6 on, +-1. Every branch is
    computed and selected, so the function vectorises."""
    near, p = _horner("%z", ERF_NEAR_COEFFS, "n")
    lines = [
        "define internal double @st.erf.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        "  %z = fmul double %d, %d",
        *near,  # erf(d) / d - 1: then d + d * that, one rounding
        f"  %rn = call double @llvm.fmuladd.f64(double %d, double {p}, double %d)",
        "  %nz = fneg double %z",
        "  %e = call double @st.exp.f64(double %nz)",
    ]
    qs = []
    for k, ((lo, hi), coeffs) in enumerate(zip(ERF_PIECES, ERFCX_COEFFS)):
        horner, q = _horner(f"%t{k}", coeffs, f"f{k}")
        lines += [f"  %t{k} = fsub double %a, {double_literal((lo + hi) / 2)}", *horner]
        qs.append(q)
    lines += [
        f"  %in1 = fcmp oge double %a, {double_literal(ERF_PIECES[1][0])}",
        f"  %in2 = fcmp oge double %a, {double_literal(ERF_PIECES[2][0])}",
        f"  %q01 = select i1 %in1, double {qs[1]}, double {qs[0]}",
        f"  %q = select i1 %in2, double {qs[2]}, double %q01",
        "  %c = fmul double %e, %q",  # erfc(|d|)
        "  %rf0 = fsub double 1.000000e+00, %c",
        f"  %one = fcmp oge double %a, {double_literal(ERF_PIECES[-1][1])}",  # inf included
        "  %rf1 = select i1 %one, double 1.000000e+00, double %rf0",
        "  %rf = call double @llvm.copysign.f64(double %rf1, double %d)",
        "  %small = fcmp olt double %a, 1.000000e+00",
        "  %r0 = select i1 %small, double %rn, double %rf",
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r = select i1 %nan, double %d, double %r0",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.erf.f64`` (double -> double; calls ``@st.exp.f64``).
ERF_F64 = _erf_f64()

#: The intrinsics the definitions call.
DECLARATIONS = (
    "declare double @llvm.fmuladd.f64(double, double, double)",
    "declare double @llvm.maxnum.f64(double, double)",
    "declare double @llvm.minnum.f64(double, double)",
    "declare double @llvm.rint.f64(double)",
    "declare double @llvm.fabs.f64(double)",
    "declare double @llvm.copysign.f64(double, double)",
)


# --------------------------------------------------------------------------------------------
# sin and cos, for lane mode
# --------------------------------------------------------------------------------------------
#
# The reduction and kernels of FreeBSD's msun (e_rem_pio2.c, k_sin.c, k_cos.c), written
# without branches: ``n`` the nearest integer to ``x * 2/pi``, ``x - n pi/2`` as a double-double
# ``y0 + y1`` from pi/2 in three 33-bit parts (each ``n * part`` exact for ``|n| < 2**20``) and
# their tails, always all three rounds (msun stops early when the cancellation is small; the
# later rounds only add bits), then the odd and even minimax polynomials on ``|y| <= pi/4``
# corrected by ``y1``, chosen and signed by ``n mod 4``. Past ``TRIG_LIMIT`` (and for inf and
# nan) the lanes call the C library instead.


def _pio2_parts() -> tuple:
    """``(2/pi, p1, p1t, p2, p2t, p3, p3t)``: ``pi/2 = p1 + p2 + p3 + ...`` with 33
    significant bits in each ``p``, and ``pk t`` the rest after ``pk``, rounded."""
    with mpmath.workprec(300):
        rest = mpmath.pi / 2
        out = [float(2 / mpmath.pi)]
        for _ in range(3):
            exp = int(mpmath.floor(mpmath.log(rest, 2)))
            part = mpmath.ldexp(mpmath.floor(mpmath.ldexp(rest, 32 - exp)), exp - 32)
            rest = rest - part
            out += [float(part), float(rest)]
        return tuple(out)


# _pio2_parts(), as literals (tests/codegen checks them against mpmath)
_INVPIO2, _P1, _P1T, _P2, _P2T, _P3, _P3T = map(float.fromhex, (
    "0x1.45f306dc9c883p-1", "0x1.921fb54400000p+0", "0x1.0b4611a626331p-34",
    "0x1.0b4611a600000p-34", "0x1.3198a2e037073p-69", "0x1.3198a2e000000p-69",
    "0x1.b839a252049c1p-104"))
#: Above this magnitude ``sin``/``cos`` lanes call the C library: ``n < 2**19`` keeps every
#: ``n * part`` exact (msun's bound for its medium-size path).
TRIG_LIMIT = 2.0 ** 19 * math.pi / 2 - 1.0
_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def _trig_fast_f64(name: str) -> str:
    """``@st.<name>.fast.f64``: sin or cos for ``|d| <= TRIG_LIMIT`` (others: garbage the
    caller replaces), without branches."""
    sin_poly, sp_ = _horner("%z", tuple(reversed(_S[1:])), "s")
    cos_poly, cp = _horner("%z", tuple(reversed(_C)), "c")
    lit = double_literal
    lines = [
        f"define internal double @st.{name}.fast.f64(double %d) alwaysinline nounwind "
        "willreturn memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        f"  %ok = fcmp ole double %a, {lit(TRIG_LIMIT)}",
        "  %x = select i1 %ok, double %d, double 0.000000e+00",
        f"  %t = fmul double %x, {lit(_INVPIO2)}",
        "  %n = call double @llvm.rint.f64(double %t)",
        f"  %np1 = fmul double %n, {lit(_P1)}",
        "  %r0 = fsub double %x, %np1",  # exact
        f"  %np2 = fmul double %n, {lit(_P2)}",
        "  %r1 = fsub double %r0, %np2",
        f"  %np3 = fmul double %n, {lit(_P3)}",
        "  %r2 = fsub double %r1, %np3",
        "  %e0 = fsub double %r1, %r2",
        "  %e1 = fsub double %e0, %np3",
        f"  %nt = fmul double %n, {lit(_P3T)}",
        "  %w = fsub double %nt, %e1",
        "  %y0 = fsub double %r2, %w",
        "  %y0d = fsub double %r2, %y0",
        "  %y1 = fsub double %y0d, %w",
        # sin(y0 + y1) = y0 - ((z*(y1/2 - v*r) - y1) - v*S1)
        "  %z = fmul double %y0, %y0",
        "  %v = fmul double %z, %y0",
        *sin_poly,
        "  %hy = fmul double %y1, 5.000000e-01",
        f"  %vr = fmul double %v, {sp_}",
        "  %k0 = fsub double %hy, %vr",
        "  %k1 = fmul double %z, %k0",
        "  %k2 = fsub double %k1, %y1",
        f"  %vs = fmul double %v, {lit(_S[0])}",
        "  %k3 = fsub double %k2, %vs",
        "  %ks = fsub double %y0, %k3",
        # cos(y0 + y1) = w + (((1 - w) - z/2) + (z*r - y0*y1)), w = 1 - z/2
        *cos_poly,
        f"  %cr = fmul double %z, {cp}",
        "  %hz = fmul double %z, 5.000000e-01",
        "  %cw = fsub double 1.000000e+00, %hz",
        "  %c0 = fsub double 1.000000e+00, %cw",
        "  %c1 = fsub double %c0, %hz",
        "  %zr = fmul double %z, %cr",
        "  %xy = fmul double %y0, %y1",
        "  %c2 = fsub double %zr, %xy",
        "  %c3 = fadd double %c1, %c2",
        "  %kc = fadd double %cw, %c3",
        # n mod 4 picks the kernel and the sign
        "  %ni = fptosi double %n to i64",
        "  %nk = add i64 %ni, " + ("0" if name == "sin" else "1"),
        "  %odd = and i64 %nk, 1",
        "  %isodd = icmp ne i64 %odd, 0",
        "  %half = and i64 %nk, 2",
        "  %neg = icmp ne i64 %half, 0",
        "  %p = select i1 %isodd, double %kc, double %ks",
        "  %pn = fneg double %p",
        "  %r = select i1 %neg, double %pn, double %p",
    ]
    if name == "sin":  # tiny arguments (and -0) are their own sine
        lines += ["  %tiny = fcmp olt double %a, 0x3E40000000000000",  # 2**-27
                  "  %rs = select i1 %tiny, double %d, double %r",
                  "  ret double %rs"]
    else:
        lines.append("  ret double %r")
    lines.append("}")
    return "\n".join(lines)


_FAST = {name: _trig_fast_f64(name) for name in ("sin", "cos")}


@functools.cache
def trig_lanes(name: str, lanes: int) -> tuple:
    """The definitions of ``@st.<name>.v<lanes>f64`` (``name`` sin or cos) over vectors of
    ``lanes`` doubles: the polynomial path on every lane, and where some lane is past
    :data:`TRIG_LIMIT` (or inf or nan), the C library on those lanes (made once per
    process: a kernel calls it at every sine it holds)."""
    vt = vector("double", lanes)
    fast = "\n".join(widen(line, lanes) for line in _FAST[name].split("\n"))
    decls = [widen(d, lanes) for d in DECLARATIONS if "fabs" in d or "rint" in d]
    wrapper = "\n".join([
        f"define internal {vt} @st.{name}.v{lanes}f64({vt} %d) noinline nounwind {{",
        "entry:",
        f"  %f = call {vt} @st.{name}.fast.v{lanes}f64({vt} %d)",
        f"  %a = call {vt} @llvm.fabs.v{lanes}f64({vt} %d)",
        f"  %far = fcmp ugt {vt} %a, splat (double {double_literal(TRIG_LIMIT)})",
        f"  %any = call i1 @llvm.vector.reduce.or.v{lanes}i1({vector('i1', lanes)} %far)",
        "  br i1 %any, label %slow, label %done",
        "slow:",
        f"  %s = call {vt} @{name}.v{lanes}({vt} %d)",
        f"  %m = select {vector('i1', lanes)} %far, {vt} %s, {vt} %f",
        "  br label %done",
        "done:",
        f"  %r = phi {vt} [ %f, %entry ], [ %m, %slow ]",
        f"  ret {vt} %r",
        "}",
    ])
    return (fast, wrapper, libm_wrapper(name, "double", 1, lanes), *decls,
            f"declare double @{name}(double) #0",
            f"declare i1 @llvm.vector.reduce.or.v{lanes}i1({vector('i1', lanes)})")

"""Special functions in LLVM IR beside :mod:`~symtape.codegen.vecmath`: ``erfc``, the scaled
Bessel functions ``bessel_i0e``/``bessel_i1e`` and the Hurwitz ``zeta``.

``erfc``, ``bessel_i0e`` and ``bessel_i1e`` are straight-line IR (every branch computed and
selected), inlined, so loops around them vectorise and lane mode widens them; ``zeta`` is a
function with loops, called once per point (lane mode calls it on each lane), in the
operations of ``element/numeric.py``'s ``zeta`` in the same order. Exported C defines
``st_bessel_i0e_f64``, ``st_bessel_i1e_f64`` and ``st_zeta_f64`` once where used; ``erfc``
is the C library's there.

``erfc``: below 1 in magnitude ``1 - erf(x)`` (``erf``'s polynomial; the result, above 0.15,
keeps its precision); above, ``exp(-x*x) erfcx(|x|)`` with ``erfcx`` from ``erf``'s three
pieces up to 6 and, from 6 on, ``G(1/x**2) / x`` (``G``: the Chebyshev interpolant of
``x erfcx(x)`` in ``u = 1/x**2`` on ``[0, 1/36]``); ``exp(-x*x)`` is ``exp(-z*z) exp((z - x)
(z + x))`` with ``z`` the upper half of ``x``'s bits, so ``z*z`` is exact and the rounding of
``x*x`` (worth ``x*x`` ulps of the result) never enters. ``2 - erfc(|x|)`` below 0; 0 from
27.3 (the true value rounds to 0 there). Within 4 ulp of the true value (tested against
mpmath); the C library's ``erfc`` is the eager value.
"""

from __future__ import annotations

import functools

from symtape.base.lazy import LazyModule
from symtape.codegen.lanes import libm_wrapper
from symtape.codegen.vecmath import (
    ERF_NEAR_COEFFS, ERF_PIECES, ERFCX_COEFFS, chebyshev, double_literal,
)
from symtape.element.numeric import (
    BESSEL_FAR, BESSEL_SERIES, BESSEL_SPLIT, ZETA_A, ZETA_FAR, ZETA_NEGATIVE_LIMIT,
)

mpmath = LazyModule("mpmath", globals(), "mpmath")  # derivations of the constants only

__all__ = ["ERFC_TAIL_COEFFS", "ERFC_ZERO", "erfc_tail_coefficients", "bessel_coefficients",
           "ERFC_F64", "BESSEL_I0E_F64", "BESSEL_I1E_F64", "BESSEL_C", "ZETA_F64",
           "ZETA_DECLARATIONS", "ZETA_C", "zeta_lanes"]

_NAN, _INF = "0x7FF8000000000000", "0x7FF0000000000000"
_EPS = double_literal(2.0 ** -53)  # the convergence test of numeric.zeta (Cephes's MACHEP)


def _horner(var: str, coeffs: tuple, tag: str) -> tuple:
    """Lines evaluating ``sum coeffs[i] * var**(n-1-i)`` (highest first) and its name."""
    lines, acc = [], double_literal(coeffs[0])
    for k, c in enumerate(coeffs[1:], start=1):
        lines.append(f"  %{tag}{k} = call double @llvm.fmuladd.f64(double {acc}, double {var}, "
                     f"double {double_literal(c)})")
        acc = f"%{tag}{k}"
    return lines, acc


def _horner_c(var: str, coeffs: tuple) -> str:
    acc = float(coeffs[0]).hex()
    for c in coeffs[1:]:
        acc = f"({acc} * {var} + {float(c).hex()})"
    return acc


# --------------------------------------------------------------------------------------------
# erfc
# --------------------------------------------------------------------------------------------

#: ``x erfcx(x)`` as a polynomial in ``1/x**2 - 1/72`` for ``x >= 6`` (degree 12), highest
#: power first (:func:`erfc_tail_coefficients` re-derives them; a test checks they agree)
ERFC_TAIL_COEFFS = (
    6668668.928423443, -758408.3860638966, 88539.00108706561, -11815.847339148422,
    1728.5567892940517, -280.5532512536683, 51.44380581311742, -10.908398267333625,
    2.7643699946329647, -0.8800565750214941, 0.3829492501569923, -0.27091619086158103,
    0.5603505205560211,
)
#: from here on erfc rounds to 0
ERFC_ZERO = 27.3


def erfc_tail_coefficients() -> tuple:
    """:data:`ERFC_TAIL_COEFFS` derived afresh (mpmath at 300 bits).

    >>> len(erfc_tail_coefficients())
    13
    """
    def g(u):
        x = 1 / mpmath.sqrt(u)
        return mpmath.erfc(x) * mpmath.exp(x * x) * x

    return chebyshev(g, 0.0, 1 / 36, 12, 1 / 72)


def bessel_coefficients() -> tuple:
    """``numeric.BESSEL_FAR`` derived afresh: ``sqrt(x) i_ne(x)`` in ``t = 1/x`` on
    ``[0, 1/8]`` as polynomials in ``t - 1/16`` (mpmath at 300 bits).

    >>> [len(c) for c in bessel_coefficients()]
    [23, 23]
    """
    def g(order):
        def f(t):
            x = 1 / t
            return mpmath.besseli(order, x) * mpmath.exp(-x) * mpmath.sqrt(x)
        return f

    end = 1 / BESSEL_SPLIT
    return tuple(chebyshev(g(n), 0.0, end, 22, end / 2) for n in (0, 1))


def _erfc_f64() -> str:
    near, p = _horner("%z", ERF_NEAR_COEFFS, "n")
    lines = [
        "define internal double @st.erfc.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        "  %z = fmul double %d, %d",
        *near,
        "  %ef = call double @llvm.fmuladd.f64(double %d, double " + p + ", double %d)",
        "  %rn = fsub double 1.000000e+00, %ef",  # |d| < 1: 1 - erf(d)
        # exp(-a*a) = exp(-h*h) exp((h - a)(h + a)), h: a with its low 32 bits cleared
        "  %ab = bitcast double %a to i64",
        "  %hb = and i64 %ab, -4294967296",
        "  %h = bitcast i64 %hb to double",
        "  %hh = fmul double %h, %h",
        "  %nhh = fneg double %hh",
        "  %e0 = call double @st.exp.f64(double %nhh)",
        "  %hm = fsub double %h, %a",
        "  %hp = fadd double %h, %a",
        "  %w = fmul double %hm, %hp",
        "  %e1 = call double @st.exp.f64(double %w)",
    ]
    qs = []
    for k, ((lo, hi), coeffs) in enumerate(zip(ERF_PIECES, ERFCX_COEFFS)):
        horner, q = _horner(f"%t{k}", coeffs, f"f{k}a")
        lines += [f"  %t{k} = fsub double %a, {double_literal((lo + hi) / 2)}", *horner]
        qs.append(q)
    tail, g = _horner("%u", ERFC_TAIL_COEFFS, "ga")
    lines += [
        "  %aa = fmul double %a, %a",
        "  %u0 = fdiv double 1.000000e+00, %aa",
        f"  %u = fsub double %u0, {double_literal(1 / 72)}",
        *tail,
        f"  %qt = fdiv double {g}, %a",
        f"  %in1 = fcmp oge double %a, {double_literal(ERF_PIECES[1][0])}",
        f"  %in2 = fcmp oge double %a, {double_literal(ERF_PIECES[2][0])}",
        f"  %in3 = fcmp oge double %a, {double_literal(ERF_PIECES[2][1])}",
        f"  %q01 = select i1 %in1, double {qs[1]}, double {qs[0]}",
        f"  %q012 = select i1 %in2, double {qs[2]}, double %q01",
        "  %q = select i1 %in3, double %qt, double %q012",
        "  %eq = fmul double %e1, %q",  # the subnormal range rounds once, at the end
        "  %c0 = fmul double %e0, %eq",  # erfc(|d|)
        f"  %zero = fcmp oge double %a, {double_literal(ERFC_ZERO)}",  # inf included
        "  %c = select i1 %zero, double 0.000000e+00, double %c0",
        "  %neg = fcmp olt double %d, 0.000000e+00",
        "  %two = fsub double 2.000000e+00, %c",
        "  %rf = select i1 %neg, double %two, double %c",
        "  %small = fcmp olt double %a, 1.000000e+00",
        "  %r0 = select i1 %small, double %rn, double %rf",
        "  %nan = fcmp uno double %d, 0.000000e+00",
        "  %r = select i1 %nan, double %d, double %r0",
        "  ret double %r",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.erfc.f64`` (double -> double; calls ``@st.exp.f64``).
ERFC_F64 = _erfc_f64()


# --------------------------------------------------------------------------------------------
# bessel_i0e and bessel_i1e
# --------------------------------------------------------------------------------------------


def _bessel_f64(order: int) -> str:
    series, p = _horner("%z", BESSEL_SERIES[order], "s")
    far, g = _horner("%t", BESSEL_FAR[order], "g")
    name = f"bessel_i{order}e"
    lines = [
        f"define internal double @st.{name}.f64(double %d) alwaysinline nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  %a = call double @llvm.fabs.f64(double %d)",
        "  %aa = fmul double %a, %a",
        "  %z = fmul double 2.500000e-01, %aa",
        *series,
        "  %na = fneg double %a",
        "  %e = call double @st.exp.f64(double %na)",
    ]
    if order:
        lines += ["  %ha = fmul double 5.000000e-01, %a", f"  %sp = fmul double %ha, {p}"]
        p = "%sp"
    lines += [
        f"  %rn = fmul double {p}, %e",
        "  %t0 = fdiv double 1.000000e+00, %a",
        f"  %t = fsub double %t0, {double_literal(1 / (2 * BESSEL_SPLIT))}",
        *far,
        "  %sq = call double @llvm.sqrt.f64(double %a)",
        f"  %rf = fdiv double {g}, %sq",
        f"  %near = fcmp ole double %a, {double_literal(BESSEL_SPLIT)}",
        "  %r0 = select i1 %near, double %rn, double %rf",
    ]
    lines += ["  %r = call double @llvm.copysign.f64(double %r0, double %d)",
              "  ret double %r"] if order else ["  ret double %r0"]
    return "\n".join([*lines, "}"])


#: The definitions of ``@st.bessel_i0e.f64`` and ``@st.bessel_i1e.f64`` (call ``@st.exp``).
BESSEL_I0E_F64, BESSEL_I1E_F64 = _bessel_f64(0), _bessel_f64(1)


def _bessel_c(order: int) -> str:
    """``st_bessel_i<order>e_f64`` in C99 (the C library's ``exp``)."""
    near = _horner_c("z", BESSEL_SERIES[order])
    scale = "0.5 * a * " if order else ""
    sign = "copysign(r, x)" if order else "r"
    text = f"""\
#ifndef ST_BESSEL_I{order}E_F64
#define ST_BESSEL_I{order}E_F64
static double st_bessel_i{order}e_f64(double x)
{{
    const double a = fabs(x), z = 0.25 * (a * a), t = 1.0 / a - {(0.5 / BESSEL_SPLIT).hex()};
    const double r = a <= {BESSEL_SPLIT.hex()} ? {scale}{near} * exp(-a)
        : {_horner_c("t", BESSEL_FAR[order])} / sqrt(a);
    return {sign};
}}
#endif
"""
    return text.replace("{", "{{").replace("}", "}}") + (
        f"static inline {{t}} st_bessel_i{order}e{{m}}({{t}} x) "
        f"{{{{ return ({{t}})st_bessel_i{order}e_f64(x); }}}}\n")


#: The C99 definitions exported C holds where it computes ``bessel_i0e``, ``bessel_i1e``.
BESSEL_C = (_bessel_c(0), _bessel_c(1))


# --------------------------------------------------------------------------------------------
# zeta: a function with loops, called once per point
# --------------------------------------------------------------------------------------------


def _zeta_f64() -> str:
    lines = [
        "define internal double @st.zeta.f64(double %x, double %q) noinline nounwind "
        "willreturn memory(none) {",
        "entry:",
        # inf at x = 1; nan for x < 1; at q = 0, -1, -2, ... inf for an even integer x, else
        # nan; nan for q < 0 with x not an integer (or below the limit of the direct sum)
        "  %x1 = fcmp oeq double %x, 1.000000e+00",
        "  %qle = fcmp ole double %q, 0.000000e+00",
        "  %qfl = call double @llvm.floor.f64(double %q)",
        "  %qint = fcmp oeq double %q, %qfl",
        "  %pole = and i1 %qle, %qint",
        "  %xgt = fcmp ogt double %x, 1.000000e+00",
        "  %qpos = fcmp ogt double %q, 0.000000e+00",
        "  %qnan = fcmp uno double %q, 0.000000e+00",
        "  %xfl = call double @llvm.floor.f64(double %x)",
        "  %xint0 = fcmp oeq double %x, %xfl",
        "  %xabs = call double @llvm.fabs.f64(double %x)",
        f"  %xfin = fcmp olt double %xabs, {_INF}",
        "  %xint = and i1 %xint0, %xfin",
        "  %xh = fmul double %x, 5.000000e-01",
        "  %xhf = call double @llvm.floor.f64(double %xh)",
        "  %xev = fcmp oeq double %xh, %xhf",
        "  %even = and i1 %xint, %xev",
        f"  %qlim = fcmp oge double %q, {double_literal(ZETA_NEGATIVE_LIMIT)}",
        "  %negok = and i1 %xint, %qlim",
        "  %qok0 = or i1 %qpos, %negok",
        "  %qok = or i1 %qok0, %qnan",
        "  %npole = xor i1 %pole, true",
        "  %ok0 = and i1 %xgt, %npole",
        "  %ok = and i1 %ok0, %qok",
        "  %pinf0 = and i1 %xgt, %pole",
        "  %pinf1 = and i1 %pinf0, %even",
        "  %isinf = or i1 %pinf1, %x1",
        f"  %bad = select i1 %isinf, double {_INF}, double {_NAN}",
        "  br i1 %ok, label %start, label %done",
        "start:",
        f"  %far = fcmp ogt double %q, {double_literal(ZETA_FAR)}",
        "  br i1 %far, label %asym, label %direct",
        "asym:",  # q**(1 - x) (1/(x - 1) + 1/(2q) + x/(12 q**2))
        "  %omx = fsub double 1.000000e+00, %x",
        "  %pw = call double @llvm.pow.f64(double %q, double %omx)",
        "  %xm1 = fsub double %x, 1.000000e+00",
        "  %r1 = fdiv double 1.000000e+00, %xm1",
        "  %q2 = fmul double 2.000000e+00, %q",
        "  %r2 = fdiv double 1.000000e+00, %q2",
        "  %rs0 = fadd double %r1, %r2",
        "  %qq = fmul double %q, %q",
        "  %q12 = fmul double 1.200000e+01, %qq",
        "  %r3 = fdiv double %x, %q12",
        "  %rs = fadd double %rs0, %r3",
        "  %av = fmul double %pw, %rs",
        "  br label %done",
        "direct:",
        "  %nx = fneg double %x",
        "  %s0 = call double @llvm.pow.f64(double %q, double %nx)",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %direct ], [ %i1, %body ]",
        "  %a = phi double [ %q, %direct ], [ %a1, %body ]",
        "  %b = phi double [ 0.000000e+00, %direct ], [ %b1, %body ]",
        "  %s = phi double [ %s0, %direct ], [ %s1, %body ]",
        "  %early = icmp slt i64 %i, 9",
        "  %low = fcmp ole double %a, 9.000000e+00",
        "  %more = or i1 %early, %low",
        "  br i1 %more, label %body, label %em",
        "body:",
        "  %i1 = add i64 %i, 1",
        "  %a1 = fadd double %a, 1.000000e+00",
        "  %b1 = call double @llvm.pow.f64(double %a1, double %nx)",
        "  %s1 = fadd double %s, %b1",
        "  %rat = fdiv double %b1, %s1",
        "  %ra = call double @llvm.fabs.f64(double %rat)",
        f"  %conv = fcmp olt double %ra, {_EPS}",
        "  br i1 %conv, label %done, label %loop",
        "em:",  # the Euler-Maclaurin tail from w = a on
        "  %bw = fmul double %b, %a",
        "  %xm = fsub double %x, 1.000000e+00",
        "  %t0 = fdiv double %bw, %xm",
        "  %e0 = fadd double %s, %t0",
        "  %hb = fmul double 5.000000e-01, %b",
        "  %e1 = fsub double %e0, %hb",
        "  br label %em0",
    ]
    acc, aa, bb, exits = "%e1", "1.000000e+00", "%b", []
    for j, c in enumerate(ZETA_A):
        lines += [
            f"em{j}:",
            f"  %xk{j} = fadd double %x, {double_literal(float(2 * j))}",
            f"  %ma{j} = fmul double {aa}, %xk{j}",
            f"  %mb{j} = fdiv double {bb}, %a",
            f"  %pt{j} = fmul double %ma{j}, %mb{j}",
            f"  %tt{j} = fdiv double %pt{j}, {double_literal(c)}",
            f"  %sm{j} = fadd double {acc}, %tt{j}",
            f"  %tr{j} = fdiv double %tt{j}, %sm{j}",
            f"  %ta{j} = call double @llvm.fabs.f64(double %tr{j})",
            f"  %cv{j} = fcmp olt double %ta{j}, {_EPS}",
            f"  br i1 %cv{j}, label %done, label %en{j}",
            f"en{j}:",
            f"  %xl{j} = fadd double %x, {double_literal(float(2 * j + 1))}",
            f"  %na{j} = fmul double %ma{j}, %xl{j}",
            f"  %nb{j} = fdiv double %mb{j}, %a",
            f"  br label %{'em' + str(j + 1) if j + 1 < len(ZETA_A) else 'done'}",
        ]
        exits += [f"[ %sm{j}, %em{j} ]"]
        acc, aa, bb = f"%sm{j}", f"%na{j}", f"%nb{j}"
    last = len(ZETA_A) - 1
    lines += [
        "done:",
        f"  %v = phi double [ %bad, %entry ], [ %av, %asym ], [ %s1, %body ], "
        f"{', '.join(exits)}, [ %sm{last}, %en{last} ]",
        "  ret double %v",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.zeta.f64`` (x, q -> zeta(x, q); calls ``@llvm.pow.f64``).
ZETA_F64 = _zeta_f64()

#: What ``@st.zeta.f64`` declares.
ZETA_DECLARATIONS = (
    "declare double @llvm.floor.f64(double)",
    "declare double @llvm.fabs.f64(double)",
    "declare double @llvm.pow.f64(double, double)",
)


@functools.cache
def zeta_lanes(lanes: int) -> tuple:
    """The definitions lane mode calls for zeta: ``@st.zeta.v<lanes>f64`` over vectors of
    ``lanes`` points, calling the scalar function on each lane."""
    return (ZETA_F64, *ZETA_DECLARATIONS,
            libm_wrapper("st.zeta.f64", "double", 2, lanes, wrapper=f"st.zeta.v{lanes}f64"))


def _zeta_c() -> str:
    """``st_zeta_f64`` in C99: the operations of ``@st.zeta.f64``, in order."""
    tail = "\n".join(
        f"        a = a * (x + {float(2 * j).hex()}); b = b / w; t = a * b / {c.hex()};\n"
        f"        s = s + t; if (fabs(t / s) < eps) return s;\n"
        f"        a = a * (x + {float(2 * j + 1).hex()}); b = b / w;"
        for j, c in enumerate(ZETA_A))
    text = f"""\
#ifndef ST_ZETA_F64
#define ST_ZETA_F64
static double st_zeta_f64(double x, double q)
{{
    const double eps = {(2.0 ** -53).hex()};
    const int whole = x == floor(x) && fabs(x) < INFINITY;
    if (x == 1.0) return INFINITY;
    if (!(x > 1.0)) return NAN;
    if (q <= 0 && q == floor(q)) return whole && x * 0.5 == floor(x * 0.5) ? INFINITY : NAN;
    if (!(q > 0 || q != q || (whole && q >= {ZETA_NEGATIVE_LIMIT.hex()}))) return NAN;
    if (q > {ZETA_FAR.hex()})
        return pow(q, 1.0 - x) * (1.0 / (x - 1.0) + 1.0 / (2.0 * q) + x / (12.0 * (q * q)));
    {{
        double s = pow(q, -x), a = q, b = 0.0, w, t;
        for (int i = 0; i < 9 || a <= 9.0; ) {{
            i = i + 1;
            a = a + 1.0;
            b = pow(a, -x);
            s = s + b;
            if (fabs(b / s) < eps) return s;
        }}
        w = a;
        s = s + b * w / (x - 1.0);
        s = s - 0.5 * b;
        a = 1.0;
{tail}
        return s;
    }}
}}
#endif
"""
    return text.replace("{", "{{").replace("}", "}}") + (
        "static inline {t} st_zeta{m}({t} x, {t} q) {{ return ({t})st_zeta_f64(x, q); }}\n")


#: The C99 definitions exported C holds where it computes zeta.
ZETA_C = _zeta_c()

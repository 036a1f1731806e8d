"""polygamma (digamma at order 0) in LLVM IR and C: a function with loops, called once per
point (lane mode calls it on each lane); the operations of ``element/numeric.py``'s
``polygamma`` in the same order, so compiled and eager values agree bit for bit."""

from __future__ import annotations

import functools
import math

from symtape.codegen.lanes import libm_wrapper
from symtape.codegen.vecmath import double_literal
from symtape.element.numeric import DIGAMMA_COEFFS, DIGAMMA_SHIFT, ZETA_COEFFS, ZETA_TERMS

__all__ = ["POLYGAMMA_F64", "IPOW_F64", "POLYGAMMA_DECLARATIONS", "POLYGAMMA_C",
           "polygamma_lanes"]


# --------------------------------------------------------------------------------------------
# polygamma (digamma at order 0): a function with loops, called once per point
# --------------------------------------------------------------------------------------------
#
# The operations of ``element/numeric.py``'s ``polygamma``, in the same order, so compiled and
# eager values agree bit for bit: digamma by reflection below 0, the recurrence up to 10 and
# the asymptotic series; orders n >= 1 as ``(-1)**(n+1) n! zeta(n + 1, x)``, the Hurwitz zeta
# summed directly (at least ten terms, up to an argument of 10) with the Euler-Maclaurin tail.
# The order is a value, so n! and the powers are loops: the function is not vectorised (lane
# mode calls it on each lane).

_NAN, _INF = "0x7FF8000000000000", "0x7FF0000000000000"
_PI = double_literal(math.pi)


def _ipow_f64() -> str:
    """``@st.ipow.f64(a, e)``: ``a ** e`` for an integer ``e >= 0``, squaring over its bits."""
    return "\n".join([
        "define internal double @st.ipow.f64(double %a, double %e0) nounwind willreturn "
        "memory(none) {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %r = phi double [ 1.000000e+00, %entry ], [ %r1, %body ]",
        "  %b = phi double [ %a, %entry ], [ %b1, %body ]",
        "  %e = phi double [ %e0, %entry ], [ %h, %body ]",
        "  %go = fcmp ogt double %e, 0.000000e+00",
        "  br i1 %go, label %body, label %done",
        "body:",
        "  %eh = fmul double %e, 5.000000e-01",
        "  %h = call double @llvm.floor.f64(double %eh)",
        "  %h2 = fmul double 2.000000e+00, %h",
        "  %par = fsub double %e, %h2",
        "  %odd = fcmp oeq double %par, 1.000000e+00",
        "  %rb = fmul double %r, %b",
        "  %r1 = select i1 %odd, double %rb, double %r",
        "  %more = fcmp ogt double %h, 0.000000e+00",
        "  %bb = fmul double %b, %b",
        "  %b1 = select i1 %more, double %bb, double %b",
        "  br label %loop",
        "done:",
        "  ret double %r",
        "}",
    ])


#: The definition of ``@st.ipow.f64`` (double, double -> double).
IPOW_F64 = _ipow_f64()


def _digamma_lines() -> list:
    """Block ``dig``: psi(x) as ``%dy``."""
    lines = [
        "dig:",
        "  %neg = fcmp olt double %x, 0.000000e+00",
        "  %xr = call double @llvm.rint.f64(double %x)",
        "  %fr0 = fsub double %x, %xr",
        "  %negfin = and i1 %neg, %xfin",
        "  %frac = select i1 %negfin, double %fr0, double 0.000000e+00",
        f"  %pf = fmul double {_PI}, %frac",
        "  %tn = call double @tan(double %pf)",
        f"  %ct0 = fdiv double {_PI}, %tn",
        "  %afr = call double @llvm.fabs.f64(double %frac)",
        "  %hlf = fcmp oeq double %afr, 5.000000e-01",
        "  %cot = select i1 %hlf, double 0.000000e+00, double %ct0",
        "  %omx = fsub double 1.000000e+00, %x",
        "  %s0 = select i1 %neg, double %omx, double %x",
    ]
    w = "0.000000e+00"
    shift = double_literal(DIGAMMA_SHIFT)
    for k in range(int(DIGAMMA_SHIFT)):
        lines += [
            f"  %lo{k} = fcmp olt double %s{k}, {shift}",
            f"  %iv{k} = fdiv double 1.000000e+00, %s{k}",
            f"  %wa{k} = fadd double {w}, %iv{k}",
            f"  %w{k + 1} = select i1 %lo{k}, double %wa{k}, double {w}",
            f"  %sa{k} = fadd double %s{k}, 1.000000e+00",
            f"  %s{k + 1} = select i1 %lo{k}, double %sa{k}, double %s{k}",
        ]
        w = f"%w{k + 1}"
    s = f"%s{int(DIGAMMA_SHIFT)}"
    lines += [f"  %ss = fmul double {s}, {s}", "  %z = fdiv double 1.000000e+00, %ss"]
    p = double_literal(DIGAMMA_COEFFS[0])
    for k, c in enumerate(DIGAMMA_COEFFS[1:]):
        lines += [f"  %pm{k} = fmul double {p}, %z",
                  f"  %pa{k} = fadd double %pm{k}, {double_literal(c)}"]
        p = f"%pa{k}"
    lines += [
        f"  %snan = fcmp uno double {s}, 0.000000e+00",
        f"  %sl = select i1 %snan, double 1.000000e+00, double {s}",
        "  %lg = call double @log(double %sl)",
        f"  %hs = fdiv double 5.000000e-01, {s}",
        f"  %pz = fmul double {p}, %z",
        "  %y0 = fsub double %lg, %hs",
        "  %y1 = fsub double %y0, %pz",
        f"  %y2 = fsub double %y1, {w}",
        f"  %y3 = select i1 %snan, double {s}, double %y2",
        "  %y4c = fsub double %y3, %cot",
        "  %y4 = select i1 %neg, double %y4c, double %y3",
        f"  %dy = select i1 %pole, double {_NAN}, double %y4",
        "  br label %done",
    ]
    return lines


def _zeta_lines() -> list:
    """Blocks ``fact`` to ``tail``: psi^(n)(x) for n >= 1 as ``%zy``."""
    terms = double_literal(float(ZETA_TERMS))
    lines = [
        "zeta:",
        "  %sv = fadd double %n, 1.000000e+00",
        "  br label %fact",
        "fact:",  # n! (inf past 170!)
        "  %k = phi double [ 2.000000e+00, %zeta ], [ %k1, %factb ]",
        "  %f = phi double [ 1.000000e+00, %zeta ], [ %f1, %factb ]",
        "  %kc = fcmp ole double %k, %n",
        f"  %fc = fcmp olt double %f, {_INF}",
        "  %fgo = and i1 %kc, %fc",
        "  br i1 %fgo, label %factb, label %sum",
        "factb:",
        "  %f1 = fmul double %f, %k",
        "  %k1 = fadd double %k, 1.000000e+00",
        "  br label %fact",
        "sum:",  # the terms (x + i) ** -(n + 1) summed directly
        "  %i = phi i64 [ 0, %fact ], [ %i1, %sumb ]",
        "  %a = phi double [ %x, %fact ], [ %a1, %sumb ]",
        "  %acc = phi double [ 0.000000e+00, %fact ], [ %acc1, %sumb ]",
        f"  %early = icmp slt i64 %i, {ZETA_TERMS}",
        f"  %low = fcmp olt double %a, {terms}",
        "  %more = or i1 %early, %low",
        "  br i1 %more, label %sumb, label %tail",
        "sumb:",
        "  %pw = call double @st.ipow.f64(double %a, double %sv)",
        "  %tm = fdiv double 1.000000e+00, %pw",
        "  %acc1 = fadd double %acc, %tm",
        "  %a1 = fadd double %a, 1.000000e+00",
        "  %i1 = add i64 %i, 1",
        "  br label %sum",
        "tail:",  # Euler-Maclaurin from a on
        "  %pb = call double @st.ipow.f64(double %a, double %sv)",
        "  %b = fdiv double 1.000000e+00, %pb",
        "  %ab = fmul double %a, %b",
        "  %sm1 = fsub double %sv, 1.000000e+00",
        "  %t0 = fdiv double %ab, %sm1",
        "  %c0 = fadd double %acc, %t0",
        "  %hb = fmul double 5.000000e-01, %b",
        "  %c1 = fadd double %c0, %hb",
        "  %q1 = fdiv double %b, %a",
    ]
    acc, r, q = "%c1", "%sv", "%q1"
    for j, c in enumerate(ZETA_COEFFS, 1):
        lines += [
            f"  %rq{j} = fmul double {r}, {q}",
            f"  %ct{j} = fmul double {double_literal(c)}, %rq{j}",
            f"  %e{j} = fadd double {acc}, %ct{j}",
            f"  %so{j} = fadd double %sv, {double_literal(float(2 * j - 1))}",
            f"  %se{j} = fadd double %sv, {double_literal(float(2 * j))}",
            f"  %ro{j} = fmul double {r}, %so{j}",
            f"  %r{j} = fmul double %ro{j}, %se{j}",
            f"  %qa{j} = fdiv double {q}, %a",
            f"  %q{j + 1} = fdiv double %qa{j}, %a",
        ]
        acc, r, q = f"%e{j}", f"%r{j}", f"%q{j + 1}"
    lines += [
        f"  %out = fmul double %f, {acc}",
        "  %nout = fneg double %out",
        "  %zy = select i1 %odd, double %out, double %nout",
        "  br label %done",
    ]
    return lines


def _polygamma_f64() -> str:
    lines = [
        "define internal double @st.polygamma.f64(double %n, double %x) noinline nounwind "
        "willreturn memory(none) {",
        "entry:",
        # the order: a non-negative integer (else nan), odd or even
        "  %nfl = call double @llvm.floor.f64(double %n)",
        "  %nint = fcmp oeq double %n, %nfl",
        "  %nge = fcmp oge double %n, 0.000000e+00",
        f"  %nfin = fcmp olt double %n, {_INF}",
        "  %ok0 = and i1 %nint, %nge",
        "  %ok = and i1 %ok0, %nfin",
        "  %dg = fcmp oeq double %n, 0.000000e+00",
        "  %nh = fmul double %n, 5.000000e-01",
        "  %nhf = call double @llvm.floor.f64(double %nh)",
        "  %n2 = fmul double 2.000000e+00, %nhf",
        "  %npar = fsub double %n, %n2",
        "  %odd = fcmp oeq double %npar, 1.000000e+00",
        # the argument: a pole (0, -1, -2, ...), finite
        "  %xfl = call double @llvm.floor.f64(double %x)",
        "  %xle = fcmp ole double %x, 0.000000e+00",
        "  %xint = fcmp oeq double %x, %xfl",
        "  %pole = and i1 %xle, %xint",
        "  %ax = call double @llvm.fabs.f64(double %x)",
        f"  %xfin = fcmp olt double %ax, {_INF}",
        "  %ndg = xor i1 %dg, true",
        "  %high = and i1 %ok, %ndg",
        "  %npole = xor i1 %pole, true",
        "  %reg0 = and i1 %high, %npole",
        "  %reg = and i1 %reg0, %xfin",
        "  br i1 %dg, label %dig, label %hi",
        "hi:",
        "  br i1 %reg, label %zeta, label %done",
        *_digamma_lines(),
        *_zeta_lines(),
        "done:",
        f"  %v = phi double [ %dy, %dig ], [ %zy, %tail ], [ {_NAN}, %hi ]",
        # odd orders are +inf at the poles; every order n >= 1 is 0 at +inf, signed as it nears
        "  %pinf0 = and i1 %high, %pole",
        "  %pinf1 = and i1 %pinf0, %odd",
        "  %pinf = and i1 %pinf1, %xfin",
        f"  %v1 = select i1 %pinf, double {_INF}, double %v",
        f"  %xinf = fcmp oeq double %x, {_INF}",
        "  %hinf = and i1 %high, %xinf",
        "  %z0 = select i1 %odd, double 0.000000e+00, double -0.000000e+00",
        "  %v2 = select i1 %hinf, double %z0, double %v1",
        "  ret double %v2",
        "}",
    ]
    return "\n".join(lines)


#: The definition of ``@st.polygamma.f64`` (order, argument -> psi^(order)(argument); calls
#: ``@st.ipow.f64``, ``@log`` and ``@tan``).
POLYGAMMA_F64 = _polygamma_f64()

#: What ``@st.polygamma.f64`` declares.
POLYGAMMA_DECLARATIONS = (
    "declare double @llvm.floor.f64(double)",
    "declare double @llvm.rint.f64(double)",
    "declare double @llvm.fabs.f64(double)",
    "declare double @log(double) #0",
    "declare double @tan(double) #0",
)


@functools.cache
def polygamma_lanes(lanes: int) -> tuple:
    """The definitions lane mode calls for polygamma: ``@st.polygamma.v<lanes>f64`` over
    vectors of ``lanes`` points, calling the scalar function on each lane."""
    return (POLYGAMMA_F64, IPOW_F64, *POLYGAMMA_DECLARATIONS,
            libm_wrapper("st.polygamma.f64", "double", 2, lanes,
                         wrapper=f"st.polygamma.v{lanes}f64"))


def _horner_c(var: str, coeffs: tuple) -> str:
    """A C expression of ``sum coeffs[i] * var**(n-1-i)``, highest power first as in the IR,
    but without fused multiply-adds (as ``polygamma``'s IR and numpy compute it)."""
    acc = float(coeffs[0]).hex()
    for c in coeffs[1:]:
        acc = f"({acc} * {var} + {float(c).hex()})"
    return acc


def _polygamma_c() -> str:
    """``st_polygamma_f64`` in C99: the operations of ``@st.polygamma.f64``, in order."""
    tail = "\n".join(
        f"        acc = acc + {c.hex()} * (r * q);\n"
        f"        r = r * (s + {float(2 * j - 1).hex()}) * (s + {float(2 * j).hex()});\n"
        f"        q = q / a / a;" for j, c in enumerate(ZETA_COEFFS, 1))
    shift = float(DIGAMMA_SHIFT).hex()
    text = f"""\
#ifndef ST_POLYGAMMA_F64
#define ST_POLYGAMMA_F64
static double st_ipow_f64(double a, double e)
{{
    double r = 1.0, b = a;
    while (e > 0) {{
        double h = floor(e * 0.5);
        if (e - 2.0 * h == 1.0) r = r * b;
        e = h;
        if (e > 0) b = b * b;
    }}
    return r;
}}
static double st_polygamma_f64(double n, double x)
{{
    const double pi = {math.pi.hex()};
    const int odd = n - 2.0 * floor(n * 0.5) == 1.0;
    const int pole = x <= 0 && x == floor(x);
    const int xfin = fabs(x) < INFINITY;
    if (n == 0) {{
        const int neg = x < 0;
        const double frac = neg && xfin ? x - rint(x) : 0.0;
        const double cot = fabs(frac) == 0.5 ? 0.0 : pi / tan(pi * frac);
        double s = neg ? 1.0 - x : x, w = 0.0, y;
        for (int k = 0; k < {int(DIGAMMA_SHIFT)}; ++k) {{
            if (s < {shift}) {{
                w = w + 1.0 / s;
                s = s + 1.0;
            }}
        }}
        const double z = 1.0 / (s * s);
        y = s != s ? s : log(s) - 0.5 / s - {_horner_c("z", DIGAMMA_COEFFS)} * z - w;
        if (neg) y = y - cot;
        return pole ? NAN : y;
    }}
    if (!(n == floor(n) && n >= 0 && n < INFINITY)) return NAN;
    if (x == INFINITY) return odd ? 0.0 : -0.0;
    if (pole) return xfin && odd ? INFINITY : NAN;
    if (!xfin) return NAN;
    {{
        const double s = n + 1.0;
        double f = 1.0, acc = 0.0, a = x;
        for (double k = 2.0; k <= n && f < INFINITY; k = k + 1.0) f = f * k;
        for (int i = 0; i < {ZETA_TERMS} || a < {float(ZETA_TERMS).hex()}; ++i) {{
            acc = acc + 1.0 / st_ipow_f64(a, s);
            a = a + 1.0;
        }}
        const double b = 1.0 / st_ipow_f64(a, s);
        acc = acc + a * b / (s - 1.0);
        acc = acc + 0.5 * b;
        double r = s, q = b / a;
{tail}
        return odd ? f * acc : -(f * acc);
    }}
}}
#endif
"""
    return text.replace("{", "{{").replace("}", "}}") + (
        "static inline {t} st_polygamma{m}({t} n, {t} x) "
        "{{ return ({t})st_polygamma_f64(n, x); }}\n")


#: The C99 definitions exported C holds where it computes polygamma (formatted with ``{t}``
#: and ``{m}`` for its float type; the double function is defined once).
POLYGAMMA_C = _polygamma_c()

"""The lowering table: every SymPy head of the graph, written as a few low-level ops.

Two tables, side by side. :data:`HEADS` is keyed by SymPy head: each entry turns one
definition into ops of :data:`OPS` through a :class:`Builder` (the plan). :data:`OPS` is the
closed target, about thirty ops: for each, its argument and result kinds, its LLVM IR lines,
its C99 expression and its SymPy form (used to rebuild formulas from a plan). A head that is in
neither raises :class:`~symtape.base.errors.LoweringError` naming it.

The translation follows :mod:`symtape.element.evaluate` exactly, so compiled code and the numpy
interpreter round alike: ``Add``/``Mul`` fold left over the definition's arguments (a ``Mul``
dividing by its negative-power factors), constant
exponents follow :func:`~symtape.element.evaluate.pow_plan` (repeated squaring in the order of
``evaluate._ipow``), ``Piecewise`` is a chain of selects starting from nan, ``Max``/``Min``
propagate nan like ``np.maximum``, comparisons with nan are false (``!=`` is true).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from symtape.base.errors import LoweringError
from symtape.base.lazy import LazyModule
from symtape.element.numeric import pow_plan, split_quotient
from symtape.codegen import polygamma, special, vecmath

sp = LazyModule("sp", globals(), "sympy")
F = LazyModule("F", globals(), "symtape.element.added_heads")
H = LazyModule("H", globals(), "symtape.element.heads")

__all__ = ["Op", "OPS", "HEADS", "Builder", "head_rule"]  # noqa: F822 - HEADS: __getattr__


class Builder(Protocol):
    """What a head rule sees of the plan under construction."""

    def term(self, expr) -> int:
        """The value of an atom, a constant or a subterm of a definition."""

    def const(self, value) -> int:
        """The value of a SymPy constant (or a Python float)."""

    def op(self, name: str, *args: int) -> int:
        """The value of ``OPS[name]`` applied to values (shared when already emitted)."""


@dataclass(frozen=True)
class Op:
    """One low-level op: argument kinds (``f`` float, ``b`` boolean), result kind, IR lines,
    declarations, C expression and SymPy builder.

    IR lines are formatted with ``{r}`` (result name), ``{0}``, ``{1}``, ... (arguments),
    ``{t}`` (float type), ``{sfx}`` (intrinsic suffix), ``{m}`` (libm suffix) and ``{fm}``
    (fast-math flags followed by a space, or nothing). ``c_defs``: the C definitions the C
    expression calls, formatted with ``{t}`` and ``{m}`` (exported C holds those of the ops it
    uses).
    """

    args: str
    result: str
    ir: tuple[str, ...]
    c: str
    sympy: Callable
    decls: tuple[str, ...] = ()
    ir32: tuple[str, ...] | None = None  # lines for float32 kernels, where they differ
    call: bool = False  # lowered to a scalar C library call (no vector form)
    # the C library form of an op written in IR for vectorised loops, which kernels whose
    # batch loop is not vectorised use instead (one scalar call is faster there)
    scalar: Op | None = None
    inline_cost: int = 0  # IR lines each use inlines (ops written in IR)
    # the form lane-mode kernels use instead (vectors of points: ``kernel.py``), and the
    # definitions such a form calls, already written for a given number of lanes
    lanes: Op | None = None
    lane_decls: Callable[[int], tuple] | None = None
    c_defs: str = ""


def _arith(instr: str, c: str, fn: Callable) -> Op:
    return Op("ff", "f", (f"{{r}} = {instr} {{fm}}{{t}} {{0}}, {{1}}",), c, fn)


def _intrinsic(name: str, c: str, fn: Callable) -> Op:
    """An op mapped to ``llvm.<name>``: LLVM knows its semantics, folds and widens it."""
    return Op(
        "f",
        "f",
        (f"{{r}} = call {{fm}}{{t}} @llvm.{name}.{{sfx}}({{t}} {{0}})",),
        f"{c}{{m}}({{0}})",
        fn,
        (f"declare {{t}} @llvm.{name}.{{sfx}}({{t}})",),
        call=name in _LIBM_INTRINSICS,
    )


# intrinsics that x86 and most targets lower to C library calls (the rest are instructions)
_LIBM_INTRINSICS = {"exp", "log", "sin", "cos", "pow"}


def _libm(name: str, fn: Callable, arity: int = 1) -> Op:
    """An op that calls the C library: ``#0`` marks it pure so LLVM may hoist and share it."""
    params = ", ".join(["{t}"] * arity)
    args = ", ".join(f"{{t}} {{{i}}}" for i in range(arity))
    cargs = ", ".join(f"{{{i}}}" for i in range(arity))
    return Op(
        "f" * arity,
        "f",
        (f"{{r}} = call {{fm}}{{t}} @{name}{{m}}({args})",),
        f"{name}{{m}}({cargs})",
        fn,
        (f"declare {{t}} @{name}{{m}}({params}) #0",),
        call=True,
    )


def _vecmath(name: str, definitions: tuple, fn: Callable, scalar: Op | None = None) -> Op:
    """An op computed by ``@st.<name>.f64``, defined in IR (:mod:`~symtape.codegen.vecmath`:
    ``definitions``, its own and those it calls) and inlined; float32 kernels compute it in
    double and round once. ``scalar``: the C library form (default: the LLVM intrinsic)."""
    return Op(
        "f",
        "f",
        (f"{{r}} = call double @st.{name}.f64(double {{0}})",),
        f"{name}{{m}}({{0}})",
        fn,
        (*[d.replace("{", "{{").replace("}", "}}") for d in definitions],
         *vecmath.DECLARATIONS),
        ir32=("{r}.x = fpext float {0} to double",
              f"{{r}}.e = call double @st.{name}.f64(double {{r}}.x)",
              "{r} = fptrunc double {r}.e to float"),
        scalar=scalar if scalar is not None else _intrinsic(name, name, fn),
        inline_cost=sum(d.count("\n") + 1 for d in definitions),
    )


def _trig(name: str, fn: Callable) -> Op:
    """sin or cos: the C library (through the LLVM intrinsic) one point at a time; in lane
    mode, :func:`~symtape.codegen.vecmath.trig_lanes` on vectors of points."""
    lane = Op("f", "f", (f"{{r}} = call double @st.{name}.f64(double {{0}})",),
              f"{name}{{m}}({{0}})", fn,
              ir32=("{r}.x = fpext float {0} to double",
                    f"{{r}}.e = call double @st.{name}.f64(double {{r}}.x)",
                    "{r} = fptrunc double {r}.e to float"),
              lane_decls=lambda lanes: vecmath.trig_lanes(name, lanes))
    return replace(_intrinsic(name, name, fn), lanes=lane)


def _compare(pred: str, c: str, fn: Callable) -> Op:
    return Op("ff", "b", (f"{{r}} = fcmp {pred} {{t}} {{0}}, {{1}}",), c, fn)


def _piecewise_form(cond, a, b):
    return sp.Piecewise((a, cond), (b, True))


def _sp(name: str) -> Callable:
    """SymPy's ``name``, as an op's SymPy form (looked up when a formula is rebuilt, so the
    table loads without SymPy)."""
    return lambda *args: getattr(sp, name)(*args)


def _fn(name: str) -> Callable:
    """symtape's SymPy function ``name`` (``functions.py``), as :func:`_sp`."""
    return lambda *args: getattr(F, name)(*args)


# np.mod in C: fmod, moved into the sign of the divisor
_C_MOD = """\
static inline {t} st_mod{m}({t} a, {t} b)
{{
    {t} r = fmod{m}(a, b);
    if (r != 0) {{
        if ((b < 0) != (r < 0)) r += b;
    }} else {{
        r = copysign{m}(0, b);
    }}
    return r;
}}
"""

def _polygamma() -> Op:
    """psi^(n)(x): ``@st.polygamma.f64`` (:mod:`~symtape.codegen.polygamma`), a function with
    loops called once per point (float32 kernels compute it in double and round once); lane
    mode calls it on each lane; exported C defines it once (``st_polygamma_f64``)."""
    call = ("{r} = call double @st.polygamma.f64(double {0}, double {1})",)
    ir32 = ("{r}.n = fpext float {0} to double", "{r}.x = fpext float {1} to double",
            "{r}.e = call double @st.polygamma.f64(double {r}.n, double {r}.x)",
            "{r} = fptrunc double {r}.e to float")
    form = _sp("polygamma")
    escape = [d.replace("{", "{{").replace("}", "}}") for d in (
        polygamma.POLYGAMMA_F64, polygamma.IPOW_F64, *polygamma.POLYGAMMA_DECLARATIONS)]
    lane = Op("ff", "f", call, "", form, ir32=ir32, lane_decls=polygamma.polygamma_lanes)
    return Op("ff", "f", call, "st_polygamma{m}({0}, {1})", form, tuple(escape), ir32=ir32,
              call=True, lanes=lane, c_defs=polygamma.POLYGAMMA_C)


def _bessel(order: int) -> Op:
    """bessel_i0e or bessel_i1e: ``@st.bessel_i<order>e.f64`` (:mod:`~symtape.codegen.special`),
    inlined like exp (no C library form); exported C defines ``st_bessel_i<order>e_f64``."""
    name = f"bessel_i{order}e"
    base = _vecmath(name, (special.BESSEL_I0E_F64 if order == 0 else special.BESSEL_I1E_F64,
                           vecmath.EXP_F64), _fn("BesselI0e" if order == 0 else "BesselI1e"))
    return replace(base, c=f"st_{name}{{m}}({{0}})", scalar=None, c_defs=special.BESSEL_C[order],
                   decls=(*base.decls, "declare double @llvm.sqrt.f64(double)"))


def _zeta() -> Op:
    """zeta(x, q): ``@st.zeta.f64`` (:mod:`~symtape.codegen.special`), a function with loops
    called once per point, as polygamma is."""
    call = ("{r} = call double @st.zeta.f64(double {0}, double {1})",)
    ir32 = ("{r}.x = fpext float {0} to double", "{r}.q = fpext float {1} to double",
            "{r}.e = call double @st.zeta.f64(double {r}.x, double {r}.q)",
            "{r} = fptrunc double {r}.e to float")
    escape = [d.replace("{", "{{").replace("}", "}}") for d in (
        special.ZETA_F64, *special.ZETA_DECLARATIONS)]
    lane = Op("ff", "f", call, "", _sp("zeta"), ir32=ir32, lane_decls=special.zeta_lanes)
    return Op("ff", "f", call, "st_zeta{m}({0}, {1})", _sp("zeta"), tuple(escape), ir32=ir32,
              call=True, lanes=lane, c_defs=special.ZETA_C)


# --------------------------------------------------------------------------------------------
# The closed target: one stanza per op
# --------------------------------------------------------------------------------------------

OPS: dict[str, Op] = {
    # arithmetic, IEEE and in argument order (no reassociation unless fast-math is asked)
    "add": _arith("fadd", "({0} + {1})", lambda a, b: a + b),
    "mul": _arith("fmul", "({0} * {1})", lambda a, b: a * b),
    "div": _arith("fdiv", "({0} / {1})", lambda a, b: a / b),
    "pow": Op(
        "ff",
        "f",
        ("{r} = call {fm}{t} @llvm.pow.{sfx}({t} {0}, {t} {1})",),
        "pow{m}({0}, {1})",
        lambda a, b: a**b,
        ("declare {t} @llvm.pow.{sfx}({t}, {t})",),
        call=True,
    ),
    # intrinsics: LLVM lowers them to instructions (sqrt, fabs, rounding) or libm calls
    "sqrt": _intrinsic("sqrt", "sqrt", _sp("sqrt")),
    # exp and log in IR (vecmath): no library call, so the batch loop around them vectorises
    "exp": _vecmath("exp", (vecmath.EXP_F64,), _sp("exp")),
    "log": _vecmath("log", (vecmath.LOG_F64,), _sp("log")),
    "sin": _trig("sin", _sp("sin")),
    "cos": _trig("cos", _sp("cos")),
    "abs": _intrinsic("fabs", "fabs", _sp("Abs")),
    "floor": _intrinsic("floor", "floor", _sp("floor")),
    "ceil": _intrinsic("ceil", "ceil", _sp("ceiling")),
    "trunc": _intrinsic("trunc", "trunc", _fn("Trunc")),
    # a float64 -> float32 cast inside float64 code; nothing to do in float32 code
    "round_f32": Op(
        "f",
        "f",
        ("{r}.s = fptrunc {t} {0} to float", "{r} = fpext float {r}.s to {t}"),
        "((double)(float)({0}))",
        _fn("RoundFloat32"),
        ir32=("{r} = fadd {t} {0}, -0.0",),
    ),
    # roundeven is ties-to-even whatever the rounding mode; C's rint is, in the default mode
    "rint": Op(
        "f",
        "f",
        ("{r} = call {t} @llvm.roundeven.{sfx}({t} {0})",),
        "rint{m}({0})",
        _fn("RoundHalfEven"),
        ("declare {t} @llvm.roundeven.{sfx}({t})",),
    ),
    # the C library, as numpy and evaluate.py call it
    "tan": _libm("tan", _sp("tan")),
    "asin": _libm("asin", _sp("asin")),
    "acos": _libm("acos", _sp("acos")),
    "atan": _libm("atan", _sp("atan")),
    "sinh": _vecmath("sinh", (vecmath.SINH_F64, vecmath.EXPH_F64, vecmath.EXPM1_F64),
                     _sp("sinh"), _libm("sinh", _sp("sinh"))),
    "cosh": _vecmath("cosh", (vecmath.COSH_F64, vecmath.EXP_F64, vecmath.EXPH_F64,
                                      vecmath.EXPM1_F64),
                     _sp("cosh"), _libm("cosh", _sp("cosh"))),
    "tanh": _vecmath("tanh", (vecmath.TANH_F64, vecmath.EXP_F64), _sp("tanh"),
                     _libm("tanh", _sp("tanh"))),
    "asinh": _libm("asinh", _sp("asinh")),
    "acosh": _libm("acosh", _sp("acosh")),
    "atanh": _libm("atanh", _sp("atanh")),
    "erf": _vecmath("erf", (vecmath.ERF_F64, vecmath.EXP_F64), _sp("erf"),
                    _libm("erf", _sp("erf"))),
    "log1p": _vecmath("log1p", (vecmath.LOG1P_F64, vecmath.LOG_F64), _fn("log1p"),
                      _libm("log1p", _fn("log1p"))),
    "expm1": _vecmath("expm1", (vecmath.EXPM1_F64,), _fn("expm1"), _libm("expm1", _fn("expm1"))),
    "atan2": _libm("atan2", _sp("atan2"), arity=2),
    # the gamma family: the C library's lgamma; polygamma (digamma at order 0) in IR
    "lgamma": _libm("lgamma", _sp("loggamma")),
    "polygamma": _polygamma(),
    # erfc, the scaled Bessel functions and the Hurwitz zeta (codegen/special.py)
    "erfc": _vecmath("erfc", (special.ERFC_F64, vecmath.EXP_F64), _sp("erfc"),
                     _libm("erfc", _sp("erfc"))),
    "bessel_i0e": _bessel(0),
    "bessel_i1e": _bessel(1),
    "zeta": _zeta(),
    # np.sign: +-1 by sign, 0 for both zeros, nan for nan
    "sign": Op(
        "f",
        "f",
        (
            "{r}.p = fcmp ogt {t} {0}, 0.0",
            "{r}.n = fcmp olt {t} {0}, 0.0",
            "{r}.z = fcmp oeq {t} {0}, 0.0",
            "{r}.a = select i1 {r}.z, {t} 0.0, {t} {0}",
            "{r}.b = select i1 {r}.n, {t} -1.0, {t} {r}.a",
            "{r} = select i1 {r}.p, {t} 1.0, {t} {r}.b",
        ),
        "st_sign{m}({0})",
        _sp("sign"),
        c_defs="static inline {t} st_sign{m}({t} x) {{ return x > 0 ? 1 : x < 0 ? -1 : "
               "x == 0 ? 0 : x; }}\n",
    ),
    # np.maximum/np.minimum: nan in either argument gives nan; on a tie, the second argument
    "max": Op(
        "ff",
        "f",
        (
            "{r}.g = fcmp ogt {t} {0}, {1}",
            "{r}.m = select i1 {r}.g, {t} {0}, {t} {1}",
            "{r}.u = fcmp uno {t} {0}, 0.0",
            "{r} = select i1 {r}.u, {t} {0}, {t} {r}.m",
        ),
        "st_max{m}({0}, {1})",
        _sp("Max"),
        c_defs="static inline {t} st_max{m}({t} a, {t} b) {{ return a != a ? a : "
               "(a > b ? a : b); }}\n",
    ),
    "min": Op(
        "ff",
        "f",
        (
            "{r}.g = fcmp olt {t} {0}, {1}",
            "{r}.m = select i1 {r}.g, {t} {0}, {t} {1}",
            "{r}.u = fcmp uno {t} {0}, 0.0",
            "{r} = select i1 {r}.u, {t} {0}, {t} {r}.m",
        ),
        "st_min{m}({0}, {1})",
        _sp("Min"),
        c_defs="static inline {t} st_min{m}({t} a, {t} b) {{ return a != a ? a : "
               "(a < b ? a : b); }}\n",
    ),
    # np.mod: fmod, moved into the sign of the divisor; a zero result takes the divisor's sign
    "mod": Op(
        "ff",
        "f",
        (
            "{r}.f = frem {fm}{t} {0}, {1}",
            "{r}.nz = fcmp une {t} {r}.f, 0.0",
            "{r}.bn = fcmp olt {t} {1}, 0.0",
            "{r}.mn = fcmp olt {t} {r}.f, 0.0",
            "{r}.x = xor i1 {r}.bn, {r}.mn",
            "{r}.c = and i1 {r}.nz, {r}.x",
            "{r}.s = fadd {fm}{t} {r}.f, {1}",
            "{r}.a = select i1 {r}.c, {t} {r}.s, {t} {r}.f",
            "{r}.z = call {t} @llvm.copysign.{sfx}({t} 0.0, {t} {1})",
            "{r}.e = fcmp oeq {t} {r}.f, 0.0",
            "{r} = select i1 {r}.e, {t} {r}.z, {t} {r}.a",
        ),
        "st_mod{m}({0}, {1})",
        _sp("Mod"),
        ("declare {t} @llvm.copysign.{sfx}({t}, {t})",),
        c_defs=_C_MOD,
    ),
    # Heaviside(x, h0): 1 above zero, 0 below, h0 at zero and for nan
    "heaviside": Op(
        "ff",
        "f",
        (
            "{r}.p = fcmp ogt {t} {0}, 0.0",
            "{r}.n = fcmp olt {t} {0}, 0.0",
            "{r}.a = select i1 {r}.n, {t} 0.0, {t} {1}",
            "{r} = select i1 {r}.p, {t} 1.0, {t} {r}.a",
        ),
        "st_heaviside{m}({0}, {1})",
        _sp("Heaviside"),
        c_defs="static inline {t} st_heaviside{m}({t} x, {t} h0) {{ return x > 0 ? 1 : "
               "x < 0 ? 0 : h0; }}\n",
    ),
    "select": Op(
        "bff",
        "f",
        ("{r} = select i1 {0}, {t} {1}, {t} {2}",),
        "({0} ? {1} : {2})",
        _piecewise_form,
    ),
    # comparisons: ordered (false with nan) except !=, which is true with nan
    "lt": _compare("olt", "({0} < {1})", _sp("StrictLessThan")),
    "le": _compare("ole", "({0} <= {1})", _sp("LessThan")),
    "gt": _compare("ogt", "({0} > {1})", _sp("StrictGreaterThan")),
    "ge": _compare("oge", "({0} >= {1})", _sp("GreaterThan")),
    "eq": _compare("oeq", "({0} == {1})", _sp("Eq")),
    "ne": _compare("une", "({0} != {1})", _sp("Ne")),
    "and": Op("bb", "b", ("{r} = and i1 {0}, {1}",), "({0} && {1})", _sp("And")),
    "or": Op("bb", "b", ("{r} = or i1 {0}, {1}",), "({0} || {1})", _sp("Or")),
    "not": Op("b", "b", ("{r} = xor i1 {0}, true",), "(!{0})", _sp("Not")),
}


# --------------------------------------------------------------------------------------------
# Head rules: one SymPy definition -> ops
# --------------------------------------------------------------------------------------------


def _fold(name: str) -> Callable:
    """Left fold of a binary op over the definition's arguments (Add, Mul, Max, And, ...)."""

    def rule(b: Builder, expr) -> int:
        args = expr.args
        acc = b.term(args[0])
        for arg in args[1:]:
            acc = b.op(name, acc, b.term(arg))
        return acc

    return rule


def _apply(name: str) -> Callable:
    """The op ``name`` applied to the definition's arguments, in order."""

    def rule(b: Builder, expr) -> int:
        return b.op(name, *[b.term(a) for a in expr.args])

    return rule


def _ipow(b: Builder, x: int, k: int) -> int:
    """x**k by repeated squaring, the products in the order of ``evaluate._ipow``."""
    if k == 0:
        return b.const(sp.S.One)
    result = None
    base = x
    while k:
        if k & 1:
            result = base if result is None else b.op("mul", result, base)
        k >>= 1
        if k:
            base = b.op("mul", base, base)
    return result


def _pow(b: Builder, expr) -> int:
    base, exponent = expr.args
    if not exponent.free_symbols and exponent.is_number:
        return _const_pow(b, b.term(base), exponent)
    return b.op("pow", b.term(base), b.term(exponent))


def _const_pow(b: Builder, x: int, exponent) -> int:
    plan = pow_plan(exponent)
    kind = plan[0]
    if kind == "mul":
        return _ipow(b, x, plan[1])
    if kind == "div":
        return b.op("div", b.const(sp.S.One), _ipow(b, x, plan[1]))
    if kind == "sqrt":
        return b.op("sqrt", x)
    if kind == "rsqrt":
        return b.op("div", b.const(sp.S.One), b.op("sqrt", x))
    if kind == "pow":
        return b.op("pow", x, b.const(float(plan[1])))
    raise LoweringError(f"no lowering for the power plan {plan!r} of exponent {exponent}")


def _quotient(b: Builder, expr) -> int:
    """A product, its factors with negative constant exponents divided out (``x / y`` rounds
    as numpy's division, unlike ``x * (1/y)``)."""
    num, den = split_quotient(expr.args)
    acc = b.term(num[0]) if num else b.const(sp.S.One)
    for arg in num[1:]:
        acc = b.op("mul", acc, b.term(arg))
    for base, exponent in den:
        acc = b.op("div", acc, _const_pow(b, b.term(base), exponent))
    return acc


def _piecewise(b: Builder, expr) -> int:
    """Selects from the last branch back, starting from nan (as ``np.where`` nests)."""
    acc = b.const(sp.S.NaN)
    for value, cond in reversed(expr.args):
        if cond is sp.S.false:
            continue
        if cond is sp.S.true:
            acc = b.term(value)
            continue
        acc = b.op("select", b.term(cond), b.term(value), acc)
    return acc


def _heaviside(b: Builder, expr) -> int:
    args = expr.args
    h0 = b.term(args[1]) if len(args) > 1 else b.const(sp.Rational(1, 2))
    return b.op("heaviside", b.term(args[0]), h0)


def _ite(b: Builder, expr) -> int:
    """A boolean if-then-else as ``(c and x) or (not c and y)``."""
    c, x, y = (b.term(a) for a in expr.args)
    return b.op("or", b.op("and", c, x), b.op("and", b.op("not", c), y))


def _identity(b: Builder, expr) -> int:
    return b.term(expr.args[0])


def _zeta(b: Builder, expr) -> int:
    """Hurwitz's zeta(x, q); SymPy's one-argument (Riemann) zeta(x) is zeta(x, 1)."""
    args = expr.args
    q = b.term(args[1]) if len(args) > 1 else b.const(sp.S.One)
    return b.op("zeta", b.term(args[0]), q)


_RULES: dict[str, Callable] = {
    "quotient": _quotient,
    "pow": _pow,
    "piecewise": _piecewise,
    "heaviside": _heaviside,
    "identity": _identity,
    "ite": _ite,
    "zeta": _zeta,
}
_KINDS: dict[str, Callable] = {"apply": _apply, "fold": _fold, "rule": _RULES.__getitem__}

@functools.cache
def _heads() -> dict[type, Callable]:
    """``SymPy head -> rule``, read off the records of ``heads.py`` (:data:`HEADS`)."""
    return {r.cls: _KINDS[r.lower.split(":")[0]](r.lower.split(":")[1]) for r in H.RECORDS}


def __getattr__(name: str):
    if name == "HEADS":  # ``SymPy head -> rule``: built with the first head lowered
        return _heads()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def head_rule(head: type) -> Callable:
    """The rule for ``head`` (or its nearest base class in :data:`HEADS`).

    >>> head_rule(sp.exp) is _heads()[sp.exp]
    True
    """
    heads = _heads()
    rule = heads.get(head)
    if rule is not None:
        return rule
    for base in head.__mro__[1:]:
        rule = heads.get(base)
        if rule is not None:
            return rule
    name = getattr(head, "display", None) or head.__name__
    raise LoweringError(
        f"cannot lower the SymPy head {name!r} to native code: it is not in the lowering "
        "table (a record in symtape/element/heads.py); rewrite it with supported functions or "
        "give it a forward definition"
    )

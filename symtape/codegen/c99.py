"""C99: a plan as one standalone C function, for use outside Python.

The function has the dense layout of the native kernel: ``void name(int64_t n, const T *in0,
..., T *out0, ...)`` where input ``a`` of point ``j`` starts at ``in_a + j * size_a`` (its core
size) and so do the outputs; boolean outputs are ``unsigned char`` 0/1. It needs only
``<math.h>`` and ``<stdint.h>``. Compile it without ``-ffast-math`` and with
``-ffp-contract=off`` (the default in ISO C modes such as ``-std=c99``) to round exactly as
the compiled callable does.
"""

from __future__ import annotations

import math
import re

import numpy as np

from symtape.codegen.plan import Plan, formulas
from symtape.base.errors import InvalidArgumentError
from symtape.base.lazy import LazyModule

lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["render", "render_many", "name_problem", "check_file_stem", "literal", "comment",
           "definitions", "identifier", "formula_lines", "CTYPES"]

CTYPES = {"float64": ("double", ""), "float32": ("float", "f")}

# --------------------------------------------------------------------------------------------
# Names exported C may not use
# --------------------------------------------------------------------------------------------

# Keywords of C99, C11 and C23, and of C++ (the header is meant to be included from C++ too),
# with C++'s alternative operator spellings.
_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic
    _Generic _Noreturn _Static_assert _Thread_local alignas alignof bool constexpr false
    nullptr static_assert thread_local true typeof typeof_unqual _BitInt _Decimal32
    _Decimal64 _Decimal128
    and and_eq asm bitand bitor catch char8_t char16_t char32_t class compl concept consteval
    constinit const_cast co_await co_return co_yield decltype delete dynamic_cast explicit
    export friend mutable namespace new noexcept not not_eq operator or or_eq private
    protected public reinterpret_cast requires static_cast template this throw try typeid
    typename using virtual wchar_t xor xor_eq
    main
""".split())

# <math.h> (C99 and C11, with their f and l variants; POSIX and GNU additions that glibc
# declares in its default modes) and the macros and types of <math.h> and <stdint.h>.
_MATH_FUNCTIONS = """
    acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp
    ilogb ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf
    erfc lgamma tgamma ceil floor nearbyint rint lrint llrint round lround llround trunc fmod
    remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma
    j0 j1 jn y0 y1 yn gamma drem finite significand exp10 pow10 scalb sincos lgamma_r
    gamma_r isinf isnan
""".split()
_MATH_NAMES = frozenset(
    [f + v for f in _MATH_FUNCTIONS for v in ("", "f", "l")] + """
    fpclassify isfinite isnormal signbit isgreater isgreaterequal isless islessequal
    islessgreater isunordered float_t double_t math_errhandling
    HUGE_VAL HUGE_VALF HUGE_VALL INFINITY NAN FP_INFINITE FP_NAN FP_NORMAL FP_SUBNORMAL FP_ZERO
    FP_FAST_FMA FP_FAST_FMAF FP_FAST_FMAL FP_ILOGB0 FP_ILOGBNAN MATH_ERRNO MATH_ERREXCEPT
    M_E M_LOG2E M_LOG10E M_LN2 M_LN10 M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI M_SQRT2
    M_SQRT1_2 DOMAIN SING OVERFLOW UNDERFLOW TLOSS PLOSS
    intptr_t uintptr_t intmax_t uintmax_t ptrdiff_t size_t wchar_t wint_t sig_atomic_t NULL
    PTRDIFF_MIN PTRDIFF_MAX SIG_ATOMIC_MIN SIG_ATOMIC_MAX SIZE_MAX WCHAR_MIN WCHAR_MAX
    WINT_MIN WINT_MAX INTPTR_MIN INTPTR_MAX UINTPTR_MAX INTMAX_MIN INTMAX_MAX UINTMAX_MAX
    INTMAX_C UINTMAX_C errno EDOM ERANGE EILSEQ
""".split())
# <stdint.h>'s families (int8_t, uint_least16_t, INT_FAST32_MAX, UINT64_C, ...), including
# the names C reserves for future widths.
_STDINT = re.compile(r"u?int(_least|_fast)?\d*_t|U?INT(_LEAST|_FAST)?\d+_(MIN|MAX|C)")
# What the generated code itself names: the point count, the loop index, values, helpers.
_INTERNAL = re.compile(r"n|j|v\d+|st_\w*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def name_problem(name) -> str | None:
    """Why ``name`` cannot name a function or argument in exported C, or None when it can:
    not an ASCII identifier, a C or C++ keyword, reserved for the implementation, a name of
    ``<math.h>`` or ``<stdint.h>``, or one the generated code uses.

    >>> name_problem("dfdx") is None, name_problem("restrict"), name_problem("NAN")
    (True, 'is a C or C++ keyword', 'is a name of <math.h> or <stdint.h>')
    """
    if not isinstance(name, str) or not _C_IDENTIFIER.fullmatch(name):
        return ("is not a C identifier (ASCII letters, digits and underscores, not starting "
                "with a digit)")
    if name in _KEYWORDS:
        return ("is the program's entry point" if name == "main" else
                "is a C or C++ keyword")
    if name.startswith("__") or re.match("_[A-Z]", name):
        return ("is reserved for the C implementation (it starts with two underscores or an "
                "underscore and a capital letter)")
    if name in _MATH_NAMES or _STDINT.fullmatch(name):
        return "is a name of <math.h> or <stdint.h>"
    if _INTERNAL.fullmatch(name):
        return ("is a name the generated code uses (n: the point count, j: the loop index, "
                "v0, v1, ...: values, st_*: helpers)")
    return None


def check_file_stem(stem: str, what: str) -> None:
    """Raises ``InvalidArgumentError`` unless ``stem`` can be written in ``#include
    "stem.h"`` and as an include guard: ASCII letters, digits, ``_``, ``.`` and ``-``, not
    starting with ``.`` or ``-``.

    >>> check_file_stem('a"b', "st.export_c")
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: st.export_c: the file name 'a"b' cannot be \
written in #include "a"b.h": use only ASCII letters, digits, '_', '.' and '-' (not first: '.', '-')
    """
    if not _FILE_STEM.fullmatch(stem):
        raise InvalidArgumentError(
            f"{what}: the file name {stem!r} cannot be written in #include \"{stem}.h\": use "
            "only ASCII letters, digits, '_', '.' and '-' (not first: '.', '-')")


def _check_names(name: str, params: list, guard: str, what: str) -> None:
    """Raises ``InvalidArgumentError`` for a function or argument name that would not
    compile (``params``: ``(role, given name, C name)``)."""
    problem = name_problem(name)
    if problem is None and name == guard:
        problem = "is the header's include guard"
    if problem:
        raise InvalidArgumentError(f"{what}: the C function name {name!r} {problem}; choose "
                                   "another name")
    seen: dict[str, str] = {}
    for role, given, ident in params:
        problem = name_problem(ident) or ("is the header's include guard" if ident == guard
                                          else None)
        if problem is None and ident in seen:
            problem = f"is also the C name of {seen[ident]}"
        if problem:
            shown = repr(given) if given == ident else f"{given!r} (in C: {ident})"
            raise InvalidArgumentError(
                f"{what}: function {name!r}: the {role} name {shown} {problem}; rename it "
                "(the argument or TensorSpec(name=...), or the output's key)")
        seen[ident] = f"the {role} {given!r}"


def identifier(name: str, fallback: str) -> str:
    """``name`` with every character C does not allow in an identifier as ``_`` (``fallback``
    for no name).

    >>> identifier("x.0", "in0"), identifier("2x", "in0"), identifier(None, "in0")
    ('x_0', '_2x', 'in0')
    """
    ident = re.sub(r"\W", "_", name or "")
    if not ident or ident[0].isdigit():
        ident = fallback if not ident else f"_{ident}"
    return ident


def comment(text: str) -> str:
    """``text`` safe inside a C block comment: a name read from a file cannot close it.

    >>> comment("a */ b")
    'a * / b'
    """
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text.replace("*/", "* /")


def literal(value, ctype: str) -> str:
    """A constant as an exact C literal of ``ctype`` (hexadecimal: no decimal rounding).

    >>> literal(0.5, "double"), literal(0.5, "float"), literal(float("-inf"), "double")
    ('0x1.0000000000000p-1', '0x1.0000000000000p-1f', '(-INFINITY)')
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = float(value).hex()
    return f"{text}f" if ctype == "float" else text


def definitions(plans, ctype: str, m: str) -> str:
    """The C definitions the ops of ``plans`` call (``Op.c_defs``), for one float type (their
    names end in ``m``: ``st_signf``), each once, in the order of the op table."""
    used = {ins.op for plan in plans for ins in plan.instrs}
    return "".join(op.c_defs.format(m=m, t=ctype) for name, op in lower.OPS.items()
                   if name in used and op.c_defs)


def _signature(plan: Plan, name: str, ctype: str, input_names, output_names) -> tuple:
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    in_names = [identifier((input_names or [None] * n_in)[i], f"in{i}") for i in range(n_in)]
    out_names = [identifier((output_names or [None] * n_out)[i], f"out{i}")
                 for i in range(n_out)]
    params = ["int64_t n"]
    params += [f"const {ctype} *restrict {nm}" for nm in in_names]
    params += [f"{'unsigned char' if o.boolean else ctype} *restrict {nm}"
               for o, nm in zip(plan.outputs, out_names)]
    head = f"void {identifier(name, 'kernel')}({', '.join(params)})"
    return head, in_names, out_names


def _describe(plan: Plan, name: str, ins: list, outs: list, origin: str | None) -> str:
    sig = ", ".join(f"{nm}[{math.prod(a.shape)}]" for nm, a in zip(ins, plan.inputs))
    res = ", ".join(f"{nm}[{math.prod(o.shape)}]" for nm, o in zip(outs, plan.outputs))
    lines = [f"{name}:({sig})->({res}) per point, batched over n points",
             f"from: {origin}" if origin else None]
    if isinstance(plan, Plan):
        lines += formula_lines(plan, outs)
    else:  # a loop plan: its loop nests, not its elements' formulas
        chunk = f", over chunks of {plan.points} points" if plan.points else ""
        lines.append(f"loop nests: {len(plan.blocks)} blocks{chunk}")
    text = "\n   ".join(comment(line) for line in lines if line is not None)
    return f"/* {text} */"


# Formulas longer than this (in operations, in characters) are not written into the comment
# above a function: a comment is for a reader, the code is the formula.
_FORMULA_OPS = 60
_FORMULA_CHARS = 400


def formula_lines(plan: Plan, outs: list, patterns=None) -> list:
    """Lines ``name = formula`` of each output of a small ``plan`` (``patterns``: per output
    ``None`` or ``(indices, dense_shape)`` of a sparse one's values, shown beside their
    indices), or one line saying the formula is too long to print.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> sq = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> formula_lines(sq, ["y"])
    ['y = x**2']
    """
    if plan.n_ops > _FORMULA_OPS:
        return [f"formula: {plan.n_ops} operations, too long to print here (formula() of the "
                "symtape function shows it)"]
    lines = []
    for nm, value, pat in zip(outs, formulas(plan), patterns or [None] * len(outs)):
        if pat is None:
            text = str(value.tolist() if value.ndim else value[()])
        else:  # each nonzero beside its index in the dense result
            text = ", ".join(f"{list(map(int, i))}: {v}"
                             for i, v in zip(np.asarray(pat[0]).tolist(), value.tolist()))
        if len(text) > _FORMULA_CHARS:
            text = text[:_FORMULA_CHARS] + " ..."
        lines.append(f"{nm} = {text}")
    return lines


def _body(plan: Plan, head: str, in_names, out_names, ctype: str, m: str) -> list:
    # an argument no element reads (a bias whose derivative does not involve it) is still a
    # parameter: cast to void, so that -Wunused-parameter (-Wextra) has nothing to say
    read = {ins.attr[0] for ins in plan.instrs if ins.op == "input"}
    unread = [f"    (void){nm};" for a, nm in enumerate(in_names) if a not in read]
    lines = [head, "{", *unread, "    for (int64_t j = 0; j < n; ++j) {"]
    values = []
    for ref, ins in enumerate(plan.instrs):
        values.append(_value(plan, ref, ins, values, in_names, ctype, m, lines))
    for layout, nm in zip(plan.outputs, out_names):
        size = math.prod(layout.shape)
        for k, ref in enumerate(layout.refs):
            lines.append(f"        {nm}[j * {size} + {k}] = {_as(plan, ref, values, ctype)};")
    return lines + ["    }", "}", ""]


# The header included from C++: C linkage, and C99's restrict spelled as C++ compilers do.
_CPLUSPLUS_OPEN = ("#ifdef __cplusplus", "#define restrict __restrict", 'extern "C" {',
                   "#endif")
_CPLUSPLUS_CLOSE = ("#ifdef __cplusplus", "}", "#undef restrict", "#endif")


def render_many(kernels: list, header: str, what: str = "c99.render_many",
                loops=None) -> tuple:
    """``(header text, source text)`` of several plans as C functions of one program:
    ``kernels`` holds ``(plan, name, dtype, input_names, output_names)``, and optionally a
    sixth entry: a line saying what the function computes (for its comment); the header
    (``#include``d by the source as ``header``) declares them. Names must differ, and a
    function or argument name that C could not compile (:func:`name_problem`) raises
    ``InvalidArgumentError`` naming it (prefixed with ``what``). A plan that is not a
    straight-line :class:`Plan` (a loop plan) is written by ``loops(plan, name, head,
    input_names, output_names, ctype, m) -> (lines, includes)``
    (:func:`symtape.codegen.c_loops.render_function`).

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> sq = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> h, c = render_many([(sq, "f", "float64", ["x"], None),
    ...                     (sq, "g", "float32", ["x"], None)], "fg.h")
    >>> [line for line in h.splitlines() if line.startswith("void")]
    ['void f(int64_t n, const double *restrict x, double *restrict out0);', \
'void g(int64_t n, const float *restrict x, float *restrict out0);']
    """
    heads, bodies, types, includes = [], [], {}, set()
    guard = identifier(header, "header").upper()
    for plan, name, dtype, input_names, output_names, *origin in kernels:
        ctype, m = CTYPES[dtype]
        head, ins, outs = _signature(plan, name, ctype, input_names, output_names)
        given = [("input", (input_names or [None] * len(ins))[i] or c, c)
                 for i, c in enumerate(ins)]
        given += [("output", (output_names or [None] * len(outs))[i] or c, c)
                  for i, c in enumerate(outs)]
        _check_names(name, given, guard, what)
        heads += [_describe(plan, name, ins, outs, origin[0] if origin else None), head + ";"]
        if isinstance(plan, Plan):
            bodies += _body(plan, head, ins, outs, ctype, m)
            types.setdefault((ctype, m), []).append(plan)
            continue
        if loops is None:
            raise InvalidArgumentError(f"{what}: {name!r} is a loop plan and no loop "
                                       "renderer was given")
        lines, more = loops(plan, identifier(name, "kernel"), head, ins, outs, ctype, m)
        bodies += lines
        includes.update(more)
        types.setdefault((ctype, m), []).extend(b.body for b in plan.blocks
                                                  if isinstance(b.body, Plan))
    h = [f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", "", *_CPLUSPLUS_OPEN,
         ""] + heads + ["", *_CPLUSPLUS_CLOSE, "", f"#endif /* {guard} */", ""]
    c = [f'#include "{comment(header)}"', "#include <math.h>", "#include <stdint.h>",
         *(f"#include {name}" for name in sorted(includes)), ""]
    c += [definitions(plans, ctype, m) for (ctype, m), plans in types.items()] + bodies
    return "\n".join(h), "\n".join(c)


def render(plan: Plan, name: str, dtype: str = "float64", input_names=None,
           output_names=None) -> str:
    """The C99 source of ``plan`` as a function called ``name``.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> p = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> src = render(p, "square")
    >>> for line in src.splitlines():
    ...     if "v1" in line:
    ...         print(line.strip())
    const double v1 = (v0 * v0);
    out0[j * 1 + 0] = v1;
    """
    ctype, m = CTYPES[dtype]
    head, in_names, out_names = _signature(plan, name, ctype, input_names, output_names)
    lines = [
        f"/* {comment(name)}: {len(plan.inputs)} inputs, {len(plan.outputs)} outputs, "
        "batched over n points. */",
        "#include <math.h>",
        "#include <stdint.h>",
        "",
        definitions([plan], ctype, m),
    ]
    return "\n".join(lines + _body(plan, head, in_names, out_names, ctype, m))


def _value(plan, ref, ins, values, in_names, ctype, m, lines) -> str:
    if ins.op == "const":
        return literal(ins.attr[0], ctype)
    var = f"v{ref}"
    if ins.op == "input":
        arg, k = ins.attr
        size = math.prod(plan.inputs[arg].shape)
        lines.append(f"        const {ctype} {var} = {in_names[arg]}[j * {size} + {k}];")
        return var
    op = lower.OPS[ins.op]
    args = [_as(plan, a, values, ctype, kind) for a, kind in zip(ins.args, op.args)]
    decl = "int" if op.result == "b" else ctype
    lines.append(f"        const {decl} {var} = {op.c.format(*args, m=m)};")
    return var


def _as(plan, ref, values, ctype, kind=None) -> str:
    """A value as a C expression of ``kind``; booleans widen to 0/1, floats test ``!= 0``."""
    have = plan.kind(ref)
    text = values[ref]
    if kind is None or have == kind:
        return text
    if kind == "f":
        return f"(({ctype})({text}))"
    return f"(({text}) != 0)"

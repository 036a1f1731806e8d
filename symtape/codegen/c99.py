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

from .plan import Plan
from ..lazy import LazyModule

lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["render", "render_many"]

_CTYPES = {"float64": ("double", ""), "float32": ("float", "f")}

# Ops that need a helper: the numpy semantics in a few lines of C.
_HELPERS = """\
static inline {t} st_sign{m}({t} x) {{ return x > 0 ? 1 : x < 0 ? -1 : x == 0 ? 0 : x; }}
static inline {t} st_max{m}({t} a, {t} b) {{ return a != a ? a : (a > b ? a : b); }}
static inline {t} st_min{m}({t} a, {t} b) {{ return a != a ? a : (a < b ? a : b); }}
static inline {t} st_heaviside{m}({t} x, {t} h0) {{ return x > 0 ? 1 : x < 0 ? 0 : h0; }}
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


def _identifier(name: str, fallback: str) -> str:
    ident = re.sub(r"\W", "_", name or "")
    if not ident or ident[0].isdigit():
        ident = fallback if not ident else f"_{ident}"
    return ident


def _comment(text: str) -> str:
    """``text`` safe inside a C block comment: a name read from a file cannot close it."""
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text.replace("*/", "* /")


def _literal(value, ctype: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = float(value).hex()
    return f"{text}f" if ctype == "float" else text


def _helpers(ctype: str, m: str) -> str:
    """The helper functions for one float type (their names end in ``m``: ``st_signf``)."""
    return _HELPERS.format(m=m, t=ctype)


def _signature(plan: Plan, name: str, ctype: str, input_names, output_names) -> tuple:
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    in_names = [_identifier((input_names or [None] * n_in)[i], f"in{i}") for i in range(n_in)]
    out_names = [_identifier((output_names or [None] * n_out)[i], f"out{i}")
                 for i in range(n_out)]
    params = ["int64_t n"]
    params += [f"const {ctype} *restrict {nm}" for nm in in_names]
    params += [f"{'unsigned char' if o.boolean else ctype} *restrict {nm}"
               for o, nm in zip(plan.outputs, out_names)]
    head = f"void {_identifier(name, 'kernel')}({', '.join(params)})"
    return head, in_names, out_names


def _describe(plan: Plan, name: str) -> str:
    sizes = ", ".join(str(math.prod(a.shape)) for a in plan.inputs)
    outs = ", ".join(str(math.prod(o.shape)) for o in plan.outputs)
    return (f"/* {_comment(name)}: {len(plan.inputs)} inputs (sizes per point: {sizes or '-'}), "
            f"{len(plan.outputs)} outputs ({outs or '-'}), batched over n points. */")


def _body(plan: Plan, head: str, in_names, out_names, ctype: str, m: str) -> list:
    lines = [head, "{", "    for (int64_t j = 0; j < n; ++j) {"]
    values = []
    for ref, ins in enumerate(plan.instrs):
        values.append(_value(plan, ref, ins, values, in_names, ctype, m, lines))
    for layout, nm in zip(plan.outputs, out_names):
        size = math.prod(layout.shape)
        for k, ref in enumerate(layout.refs):
            lines.append(f"        {nm}[j * {size} + {k}] = {_as(plan, ref, values, ctype)};")
    return lines + ["    }", "}", ""]


def render_many(kernels: list, header: str) -> tuple:
    """``(header text, source text)`` of several plans as C functions of one program:
    ``kernels`` holds ``(plan, name, dtype, input_names, output_names)``; the header
    (``#include``d by the source as ``header``) declares them. Names must differ.

    >>> import numpy as np
    >>> from symtape import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> sq = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> h, c = render_many([(sq, "f", "float64", ["x"], None),
    ...                     (sq, "g", "float32", ["x"], None)], "fg.h")
    >>> [line for line in h.splitlines() if line.startswith("void")]
    ['void f(int64_t n, const double *restrict x, double *restrict out0);', \
'void g(int64_t n, const float *restrict x, float *restrict out0);']
    """
    heads, bodies, types = [], [], []
    for plan, name, dtype, input_names, output_names in kernels:
        ctype, m = _CTYPES[dtype]
        head, ins, outs = _signature(plan, name, ctype, input_names, output_names)
        heads += [_describe(plan, name), head + ";"]
        bodies += _body(plan, head, ins, outs, ctype, m)
        if (ctype, m) not in types:
            types.append((ctype, m))
    guard = _identifier(header, "header").upper()
    h = [f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", ""] + heads + \
        ["", f"#endif /* {guard} */", ""]
    c = [f'#include "{_comment(header)}"', "#include <math.h>", "#include <stdint.h>", ""]
    c += [_helpers(ctype, m) for ctype, m in types] + bodies
    return "\n".join(h), "\n".join(c)


def render(plan: Plan, name: str, dtype: str = "float64", input_names=None,
           output_names=None) -> str:
    """The C99 source of ``plan`` as a function called ``name``.

    >>> import numpy as np
    >>> from symtape import graph
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
    ctype, m = _CTYPES[dtype]
    head, in_names, out_names = _signature(plan, name, ctype, input_names, output_names)
    lines = [
        f"/* {_comment(name)}: {len(plan.inputs)} inputs, {len(plan.outputs)} outputs, "
        "batched over n points. */",
        "#include <math.h>",
        "#include <stdint.h>",
        "",
        _helpers(ctype, m),
    ]
    return "\n".join(lines + _body(plan, head, in_names, out_names, ctype, m))


def _value(plan, ref, ins, values, in_names, ctype, m, lines) -> str:
    if ins.op == "const":
        return _literal(ins.attr[0], ctype)
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

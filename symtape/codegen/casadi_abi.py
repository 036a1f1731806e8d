"""CasADi's external-function ABI: a plan as C that ``casadi.external`` loads.

Each function ``f`` is ``int f(const casadi_real** arg, casadi_real** res, casadi_int* iw,
casadi_real* w, int mem)`` with the companions CasADi's code generator writes beside it
(``f_n_in``, ``f_name_in``, ``f_sparsity_in``, ``f_work``, ``f_checkout``, ...). CasADi has
only matrices, stored column by column: an argument of shape ``()`` is 1x1, ``(n,)`` an n x 1
column, ``(r, c)`` an r x c matrix whose element ``[i, j]`` is at ``j * r + i``, and a tensor
of higher rank the column of its elements in C order. A sparse output (the values of a sparse
Jacobian or Hessian) holds only its nonzeros, in the compressed-column order of its pattern.

All temporaries live in the caller's work vector ``w``: each value takes a slot from its
definition to its last use and the slot is then reused, so ``sz_w`` is the most values alive
at once, not the number of operations. The code allocates nothing and does not recurse. A
null ``arg[i]`` reads as zeros and a null ``res[i]`` is not written, as in CasADi.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from symtape.base.errors import InvalidArgumentError
from symtape.base.lazy import LazyModule
from symtape.codegen import c99
from symtape.codegen.plan import Plan

lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["Layout", "layout", "matrix_shape", "column_major", "render", "SUFFIXES"]

# The companions of each function, as CasADi's code generator names them.
SUFFIXES = ("alloc_mem", "init_mem", "free_mem", "checkout", "release", "incref", "decref",
            "n_in", "n_out", "default_in", "name_in", "name_out", "sparsity_in",
            "sparsity_out", "work", "work_bytes")


@dataclass(frozen=True)
class Layout:
    """Where one function keeps its data: the compressed-column pattern of each input and
    output (``[nrow, ncol, colind[ncol + 1], row[nnz]]``), the work sizes ``f_work`` reports,
    the work slot of each value of the plan (``-1``: none, a constant) and, per output, the
    position in ``res`` of each value the plan computes."""

    sparsity_in: tuple
    sparsity_out: tuple
    sz_arg: int
    sz_res: int
    sz_iw: int
    sz_w: int
    slots: tuple
    out_positions: tuple

    @property
    def work(self) -> tuple:
        """``(sz_arg, sz_res, sz_iw, sz_w)``, as ``f_work`` reports them."""
        return self.sz_arg, self.sz_res, self.sz_iw, self.sz_w


def matrix_shape(shape: tuple) -> tuple:
    """The CasADi matrix a tensor of ``shape`` is: ``()`` 1x1, ``(n,)`` a column, ``(r, c)``
    itself, a higher rank the column of its elements.

    >>> matrix_shape(()), matrix_shape((3,)), matrix_shape((2, 3)), matrix_shape((2, 3, 4))
    ((1, 1), (3, 1), (2, 3), (24, 1))
    """
    shape = tuple(int(n) for n in shape)
    return shape if len(shape) == 2 else (math.prod(shape), 1)


def _dense(shape: tuple) -> tuple:
    """The dense pattern of ``shape`` and the column-major position of each C-order element."""
    rows, cols = matrix_shape(shape)
    pattern = (rows, cols, *(rows * j for j in range(cols + 1)), *(list(range(rows)) * cols))
    return pattern, tuple(column_major(shape, k) for k in range(rows * cols))


def column_major(shape: tuple, k: int) -> int:
    """The position in CasADi's column-major storage of C-order element ``k`` of a tensor of
    ``shape``.

    >>> [column_major((2, 3), k) for k in range(6)]
    [0, 2, 4, 1, 3, 5]
    """
    if len(shape) != 2:
        return k
    i, j = divmod(k, shape[1])
    return j * shape[0] + i


def _sparse(indices, dense_shape: tuple, what: str) -> tuple:
    """The compressed-column pattern of the nonzeros at ``indices`` of a tensor of
    ``dense_shape`` and the position of each value (given in ``indices``' order) in it."""
    rows, cols = matrix_shape(dense_shape)
    idx = np.asarray(indices, dtype=np.int64).reshape(-1, len(dense_shape))
    if len(dense_shape) == 2:
        i, j = idx[:, 0], idx[:, 1]
    else:
        i = np.ravel_multi_index(idx.T, dense_shape) if len(dense_shape) else \
            np.zeros(len(idx), dtype=np.int64)
        j = np.zeros(len(idx), dtype=np.int64)
    order = np.lexsort((i, j))  # column by column, rows ascending in each
    if len(order) > 1 and np.any((np.diff(j[order]) == 0) & (np.diff(i[order]) == 0)):
        raise InvalidArgumentError(f"{what}: a sparse output names one element twice")
    colind = np.searchsorted(j[order], np.arange(cols + 1), side="left")
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    pattern = (rows, cols, *(int(c) for c in colind), *(int(r) for r in i[order]))
    return pattern, tuple(int(p) for p in position)


def _slots(plan: Plan) -> tuple:
    """A work slot per value (constants none), reused once a value's last reader has read it:
    ``(slots, number of slots)``."""
    last = [-1] * len(plan.instrs)
    for t, ins in enumerate(plan.instrs):
        for a in ins.args:
            last[a] = t
    dying: dict = {}
    for ref, t in enumerate(last):
        dying.setdefault(t, []).append(ref)
    free: list = []
    slots = [-1] * len(plan.instrs)
    used = 0
    for t, ins in enumerate(plan.instrs):
        # the operands are read before the result is stored, so their slots can take it
        for ref in dying.get(t, ()):
            if slots[ref] >= 0:
                heapq.heappush(free, slots[ref])
        if ins.op == "const":
            continue
        if free:
            slots[t] = heapq.heappop(free)
        else:
            slots[t], used = used, used + 1
        if last[t] < 0:  # read by no operation: only written to outputs, right away
            heapq.heappush(free, slots[t])
    return tuple(slots), used


def layout(plan: Plan, patterns=None, what: str = "casadi_abi.layout") -> Layout:
    """The :class:`Layout` of ``plan`` as a CasADi function; ``patterns``: per output,
    ``None`` (dense) or ``(indices, dense_shape)`` of the values it computes (a sparse
    Jacobian's or Hessian's).

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> p = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> lay = layout(p)
    >>> lay.sparsity_in, lay.sparsity_out, lay.work
    (((1, 1, 0, 1, 0),), ((1, 1, 0, 1, 0),), (1, 1, 0, 1))
    """
    patterns = list(patterns) if patterns is not None else [None] * len(plan.outputs)
    sp_in = tuple(_dense(a.shape)[0] for a in plan.inputs)
    sp_out, positions = [], []
    for out, pat in zip(plan.outputs, patterns):
        if pat is None:
            pattern, pos = _dense(out.shape)
        else:
            pattern, pos = _sparse(pat[0], tuple(pat[1]), what)
            if len(pos) != len(out.refs):
                raise InvalidArgumentError(f"{what}: a sparse output computes {len(out.refs)} "
                                           f"values for a pattern of {len(pos)}")
        sp_out.append(pattern)
        positions.append(pos)
    slots, used = _slots(plan)
    return Layout(sp_in, tuple(sp_out), len(plan.inputs), len(plan.outputs), 0, used, slots,
                  tuple(positions))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

_EXPORT = """/* Symbol visibility in shared libraries, as CasADi writes it */
#ifndef CASADI_SYMBOL_EXPORT
  #if defined(_WIN32) || defined(__WIN32__) || defined(__CYGWIN__)
    #if defined(STATIC_LINKED)
      #define CASADI_SYMBOL_EXPORT
    #else
      #define CASADI_SYMBOL_EXPORT __declspec(dllexport)
    #endif
  #elif defined(__GNUC__) && defined(GCC_HASCLASSVISIBILITY)
    #define CASADI_SYMBOL_EXPORT __attribute__ ((visibility ("default")))
  #else
    #define CASADI_SYMBOL_EXPORT
  #endif
#endif"""

_SIGNATURE = ("int {f}(const casadi_real** arg, casadi_real** res, casadi_int* iw, "
              "casadi_real* w, int mem)")
_WORK = "int {f}_{s}(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w)"
_COMPANIONS = (("int", "alloc_mem", "void"), ("int", "init_mem", "int mem"),
               ("void", "free_mem", "int mem"), ("int", "checkout", "void"),
               ("void", "release", "int mem"), ("void", "incref", "void"),
               ("void", "decref", "void"), ("casadi_int", "n_in", "void"),
               ("casadi_int", "n_out", "void"), ("casadi_real", "default_in", "casadi_int i"),
               ("const char*", "name_in", "casadi_int i"),
               ("const char*", "name_out", "casadi_int i"),
               ("const casadi_int*", "sparsity_in", "casadi_int i"),
               ("const casadi_int*", "sparsity_out", "casadi_int i"))


def _declarations(f: str) -> list:
    heads = [_SIGNATURE.format(f=f)]
    heads += [f"{ret} {f}_{name}({params})" for ret, name, params in _COMPANIONS]
    heads += [_WORK.format(f=f, s="work"), _WORK.format(f=f, s="work_bytes")]
    return heads


def _names(kernels: list, guard: str, what: str) -> list:
    """Checks the C names (functions, their companions) and the argument names CasADi will
    show; returns ``(input names, output names)`` per kernel."""
    symbols: dict = {guard: "the header's include guard"}
    named = []
    for plan, name, _, input_names, output_names, _, _ in kernels:
        problem = c99.name_problem(name)
        if problem is None and name.startswith("casadi_"):
            problem = "starts with casadi_, which CasADi's own code uses"
        if problem:
            raise InvalidArgumentError(f"{what}: the C function name {name!r} {problem}; "
                                       "choose another name")
        for sym in [name] + [f"{name}_{s}" for s in SUFFIXES]:
            if sym in symbols:
                raise InvalidArgumentError(
                    f"{what}: the C function name {name!r} makes the symbol {sym}, which is "
                    f"also {symbols[sym]}; choose another name")
            symbols[sym] = f"a symbol of function {name!r}"
        ins = [c99.identifier((input_names or [None] * len(plan.inputs))[i], f"i{i}")
               for i in range(len(plan.inputs))]
        outs = [c99.identifier((output_names or [None] * len(plan.outputs))[i], f"o{i}")
                for i in range(len(plan.outputs))]
        for role, names in (("input", ins), ("output", outs)):
            if len(set(names)) != len(names):
                raise InvalidArgumentError(
                    f"{what}: function {name!r}: two {role}s are named "
                    f"{sorted(n for n in names if names.count(n) > 1)[0]!r}; CasADi needs "
                    f"distinct {role} names (rename the argument or TensorSpec(name=...), or "
                    "the output's key)")
        named.append((ins, outs))
    return named


def _shape_text(pattern: tuple) -> str:
    rows, cols = pattern[0], pattern[1]
    nnz = pattern[2 + cols]
    return f"{rows}x{cols}" + ("" if nnz == rows * cols else f", {nnz} nonzeros")


def _describe(plan: Plan, name: str, origin: str, ins: list, outs: list, lay: Layout,
              patterns) -> str:
    sig = ", ".join(f"{nm}[{_shape_text(p)}]" for nm, p in zip(ins, lay.sparsity_in))
    res = ", ".join(f"{nm}[{_shape_text(p)}]" for nm, p in zip(outs, lay.sparsity_out))
    formula = c99.formula_lines(plan, outs, patterns) if isinstance(plan, Plan) else [
        f"loop nests: {len(plan.blocks)} blocks"]
    lines = [f"{name}:({sig})->({res})", f"from: {origin}" if origin else None, *formula,
             f"work: sz_arg {lay.sz_arg}, sz_res {lay.sz_res}, sz_iw {lay.sz_iw}, "
             f"sz_w {lay.sz_w}"]
    text = "\n   ".join(c99.comment(line) for line in lines if line is not None)
    return f"/* {text} */"


def _read(plan: Plan, ref: int, lay: Layout, ctype: str, kind: str | None = None) -> str:
    """Value ``ref`` as a C expression of ``kind`` (stored values are floats, booleans 0/1)."""
    ins = plan.instrs[ref]
    if ins.op == "const":
        text, have = c99.literal(ins.attr[0], ctype), plan.kind(ref)
    else:
        text, have = f"w[{lay.slots[ref]}]", "f"
    if kind is None or kind == have:
        return text
    return f"(({ctype})({text}))" if kind == "f" else f"({text} != 0)"


def _statement(plan: Plan, ref: int, lay: Layout, ctype: str, m: str) -> str | None:
    ins = plan.instrs[ref]
    if ins.op == "const":
        return None
    target = f"w[{lay.slots[ref]}]"
    if ins.op == "input":
        arg, k = ins.attr
        pos = column_major(plan.inputs[arg].shape, k)
        return f"  {target} = arg[{arg}] ? arg[{arg}][{pos}] : 0;"
    op = lower.OPS[ins.op]
    args = [_read(plan, a, lay, ctype, kind) for a, kind in zip(ins.args, op.args)]
    expr = op.c.format(*args, m=m)
    if op.result == "b":
        expr = f"({ctype})({expr})"
    return f"  {target} = {expr};"


def _body(plan: Plan, name: str, lay: Layout, ctype: str, m: str) -> list:
    writes: dict = {}
    for o, (out, pos) in enumerate(zip(plan.outputs, lay.out_positions)):
        for k, ref in enumerate(out.refs):
            writes.setdefault(ref, []).append((o, pos[k]))
    lines = [f"CASADI_SYMBOL_EXPORT {_SIGNATURE.format(f=name)} {{",
             "  (void)iw;", "  (void)mem;"]
    if lay.sz_w == 0:
        lines.append("  (void)w;")
    if not plan.inputs:
        lines.append("  (void)arg;")
    if not plan.outputs:
        lines.append("  (void)res;")
    for ref in range(len(plan.instrs)):
        stmt = _statement(plan, ref, lay, ctype, m)
        if stmt:
            lines.append(stmt)
        for o, p in writes.get(ref, ()):
            lines.append(f"  if (res[{o}]) res[{o}][{p}] = {_read(plan, ref, lay, ctype, 'f')};")
    return lines + ["  return 0;", "}", ""]


def _switch(f: str, ret: str, what: str, items: list) -> list:
    lines = [f"CASADI_SYMBOL_EXPORT {ret} {f}_{what}(casadi_int i) {{", "  switch (i) {"]
    lines += [f"    case {k}: return {item};" for k, item in enumerate(items)]
    return lines + ["    default: return 0;", "  }", "}", ""]


def _companions(f: str, plan: Plan, lay: Layout, ins: list, outs: list, sp_names: dict) -> list:
    lines = []
    for ret, what, params in _COMPANIONS[:7]:
        body = "  return 0;" if ret == "int" else None
        unused = "  (void)mem;" if params == "int mem" else None
        lines += [f"CASADI_SYMBOL_EXPORT {ret} {f}_{what}({params}) {{",
                  *(x for x in (unused, body) if x), "}", ""]
    lines += [f"CASADI_SYMBOL_EXPORT casadi_int {f}_n_in(void) {{ return {len(ins)}; }}", "",
              f"CASADI_SYMBOL_EXPORT casadi_int {f}_n_out(void) {{ return {len(outs)}; }}", "",
              f"CASADI_SYMBOL_EXPORT casadi_real {f}_default_in(casadi_int i) {{",
              "  (void)i;", "  return 0;", "}", ""]
    lines += _switch(f, "const char*", "name_in", [f'"{n}"' for n in ins])
    lines += _switch(f, "const char*", "name_out", [f'"{n}"' for n in outs])
    lines += _switch(f, "const casadi_int*", "sparsity_in", [sp_names[p] for p in lay.sparsity_in])
    lines += _switch(f, "const casadi_int*", "sparsity_out",
                     [sp_names[p] for p in lay.sparsity_out])
    for what, unit in (("work", ("", "", "", "")),
                       ("work_bytes", ("*sizeof(const casadi_real*)", "*sizeof(casadi_real*)",
                                       "*sizeof(casadi_int)", "*sizeof(casadi_real)"))):
        lines += [f"CASADI_SYMBOL_EXPORT {_WORK.format(f=f, s=what)} {{"]
        lines += [f"  if ({nm}) *{nm} = {size}{u};" for nm, size, u in
                  zip(("sz_arg", "sz_res", "sz_iw", "sz_w"), lay.work, unit)]
        lines += ["  return 0;", "}", ""]
    return lines


def render(kernels: list, header: str, dtype: str = "float64",
           what: str = "casadi_abi.render", loops=None) -> tuple:
    """``(header text, source text)`` of several plans as CasADi external functions of one
    program, their ``casadi_real`` being ``dtype``'s C type. ``kernels`` holds ``(plan, name,
    dtype, input names, output names, patterns, origin)`` (``patterns`` as for
    :func:`layout`; ``origin``: a line saying what the function computes, for its comment).
    A plan that is not a straight-line :class:`Plan` (a loop plan, dense outputs) is written
    by ``loops(plan, name, head, ctype, m) -> (lines, sz_w)``
    (:func:`symtape.codegen.c_loops.render_casadi`).

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> sq = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> h, c = render([(sq, "sq", "float64", ["x"], ["y"], None, "x**2")], "sq.h")
    >>> print(c[c.index("CASADI_SYMBOL_EXPORT int sq("):].split("\\n\\n")[0])
    CASADI_SYMBOL_EXPORT int sq(const casadi_real** arg, casadi_real** res, casadi_int* iw, \
casadi_real* w, int mem) {
      (void)iw;
      (void)mem;
      w[0] = arg[0] ? arg[0][0] : 0;
      w[0] = (w[0] * w[0]);
      if (res[0]) res[0][0] = w[0];
      return 0;
    }
    """
    if dtype not in c99.CTYPES:
        raise InvalidArgumentError(f"{what}: dtype must be 'float64' or 'float32', got "
                                   f"{dtype!r}")
    ctype, m = c99.CTYPES[dtype]
    guard = c99.identifier(header, "header").upper()
    named = _names(kernels, guard, what)
    lays, loop_bodies = [], {}
    for k in kernels:
        if isinstance(k[0], Plan):
            lays.append(layout(k[0], k[5], f"{what}: {k[1]}"))
            continue
        if loops is None or k[5] is not None:
            raise InvalidArgumentError(f"{what}: {k[1]!r} is a loop plan, which is written "
                                       "with dense outputs and a loop renderer only")
        head = f"CASADI_SYMBOL_EXPORT {_SIGNATURE.format(f=k[1])}"
        lines, sz_w = loops(k[0], k[1], head, ctype, m)
        loop_bodies[k[1]] = lines
        lays.append(_loop_layout(k[0], sz_w))
    sp_names: dict = {}
    for lay in lays:
        for p in lay.sparsity_in + lay.sparsity_out:
            sp_names.setdefault(p, f"st_sp{len(sp_names)}")
    heads, bodies = [], []
    for (plan, name, _, _, _, pats, origin), (ins, outs), lay in zip(kernels, named, lays):
        note = _describe(plan, name, origin, ins, outs, lay, pats)
        heads += [note]
        heads += [f"CASADI_SYMBOL_EXPORT {d};" for d in _declarations(name)] + [""]
        bodies += [note]
        bodies += loop_bodies[name] if name in loop_bodies else _body(plan, name, lay, ctype, m)
        bodies += _companions(name, plan, lay, ins, outs, sp_names)
    h = [f"#ifndef {guard}", f"#define {guard}", "",
         f"/* casadi_real is {ctype}: the code was generated for it (its constants, its "
         f"<math.h> calls) */", "#ifndef casadi_real", f"#define casadi_real {ctype}",
         "#endif", "#ifndef casadi_int", "#define casadi_int long long int", "#endif", "",
         _EXPORT, "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "", *heads,
         "#ifdef __cplusplus", '} /* extern "C" */', "#endif", "", f"#endif /* {guard} */", ""]
    c = [f'#include "{c99.comment(header)}"', "#include <math.h>",
         *(["#include <stdint.h>"] if loop_bodies else []), "",
         f"/* Defining casadi_real as other than {ctype} fails here: the code computes in "
         f"{ctype} */",
         f"typedef char st_casadi_real_must_be_{ctype}[sizeof(casadi_real) == sizeof({ctype}) "
         "? 1 : -1];", ""]
    c += [f"static const casadi_int {nm}[{len(p)}] = {{{', '.join(map(str, p))}}};"
          for p, nm in sp_names.items()] + [""]
    plans = [b.body for k in kernels if not isinstance(k[0], Plan) for b in k[0].blocks
             if isinstance(b.body, Plan)]
    c += [c99.definitions([k[0] for k in kernels if isinstance(k[0], Plan)] + plans, ctype,
                          m)] + bodies
    return "\n".join(h), "\n".join(c)


def _loop_layout(plan, sz_w: int) -> Layout:
    """The :class:`Layout` of a loop plan: dense arguments and outputs, ``sz_w`` reals of
    work (its temporaries and staging areas), no per-value slots."""
    ins = tuple(_dense(a.shape)[0] for a in plan.inputs)
    outs = [_dense(o.shape) for o in plan.outputs]
    return Layout(ins, tuple(p for p, _ in outs), len(plan.inputs), len(plan.outputs), 0, sz_w,
                  (), tuple(pos for _, pos in outs))

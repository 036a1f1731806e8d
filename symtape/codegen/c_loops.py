"""C99 of a loop plan: the loop nests of :mod:`~symtape.codegen.loops`, written as C.

A :class:`~symtape.codegen.loops.LoopPlan` becomes, for a function ``f``: its constant buffers
as ``static const`` arrays (``st_f_c<buffer>``), one ``static`` function per block
(``st_f_b<k>``: the block's loops over its space, the addresses of its accesses, and its
one-point body written with the same C spelling of each op as the straight-line C of
:mod:`~symtape.codegen.c99`), ``st_f_program`` calling the blocks in order, and the entry
function with the batched layout of :mod:`~symtape.codegen.c99` (``void f(int64_t n, const T
*in0, ..., T *out0, ...)``). So the C grows with the plan (its blocks, their bodies and the
constants), not with the number of elements its tensors hold.

The temporaries live in one arena, packed by lifetime as the compiled function packs them
(:attr:`LoopPlan.arena`). A plan over chunks of points runs the program on whole chunks of
the caller's arrays in place; the last, short chunk is copied into staging areas after the
arena, padded with zeros up to a multiple of :data:`~symtape.codegen.loops.POINT_ALIGN`
points, and its results copied back, as the compiled function does. The arena is an array
on the stack up to :data:`STACK_BYTES`, else one ``malloc`` per call (a failed allocation
writes NaN, or 0 for boolean outputs, to every output rather than leaving them unwritten).

Plans with outputs summed over all points (``LoopPlan.totals``) or arguments read once for
all points (``LoopPlan.shared``) have no place in the batched layout, where every point has
its own inputs and outputs: :func:`exportable` says so and such functions are written from
their element view.
"""

from __future__ import annotations

import math

from symtape.codegen import c99
from symtape.codegen.loops import POINT_ALIGN, Block, LoopPlan
from symtape.codegen.plan import Plan
from symtape.codegen.routines import Routine
from symtape.base.lazy import LazyModule

lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["exportable", "render_function", "render_casadi", "arena_bytes", "STACK_BYTES"]

#: Arenas (temporaries and staging areas) up to this many bytes are a local array of the
#: entry function; larger ones are allocated per call. 256 KiB sits well inside the default
#: thread stacks of Linux, macOS and Windows (8 MiB, 512 KiB, 1 MiB).
STACK_BYTES = 1 << 18


def exportable(plan) -> bool:
    """Whether ``plan`` is a loop plan :func:`render_function` writes in the batched
    layout (no output summed over points, no argument shared by all points)."""
    return isinstance(plan, LoopPlan) and not any(plan.totals) and not any(plan.shared)


def _width(boolean: bool, ctype: str) -> int:
    return 1 if boolean else (4 if ctype == "float" else 8)


def _staging(plan: LoopPlan, ctype: str) -> tuple:
    """``(offsets, bytes)``: where each argument's and output's staging area starts in the
    arena (after the temporaries), and the arena's whole size."""
    top = -(-plan.arena[1] // 64) * 64
    offsets = []
    if not plan.points:
        return (), max(top, 64)
    layouts = [(a.shape, False) for a in plan.inputs] + [(o.shape, o.boolean)
                                                          for o in plan.outputs]
    for shape, boolean in layouts:
        offsets.append(top)
        top += -(-plan.points * math.prod(shape) * _width(boolean, ctype) // 64) * 64
    return tuple(offsets), max(top, 64)


def arena_bytes(plan: LoopPlan, dtype: str = "float64") -> int:
    """The bytes of temporaries (and staging areas) one call of ``plan``'s C needs.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> from symtape.codegen.loops import Access, Buffer, layouts
    >>> x = graph.Leaf.new("x")
    >>> body = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> ins, outs = layouts([(3,)], [((3,), False)])
    >>> lp = LoopPlan((Buffer("input", 0, 3), Buffer("temp", -1, 3), Buffer("output", 0, 3)),
    ...               (Block((3,), body, (Access(0, 0, (1,)),), (Access(1, 0, (1,)),)),
    ...                Block((3,), body, (Access(1, 0, (1,)),), (Access(2, 0, (1,)),))),
    ...               ins, outs)
    >>> arena_bytes(lp)
    64
    """
    return _staging(plan, c99.CTYPES[dtype][0])[1]


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------


def _constant(name: str, buf, ctype: str) -> list:
    elem = "int32_t" if buf.kind == "indices" else "unsigned char" if buf.boolean else ctype
    size = max(buf.size, 1)
    if all(not v and math.copysign(1.0, float(v)) > 0 for v in buf.values):  # +0 only
        return [f"static const {elem} {name}[{size}] = {{0}};"]
    if buf.kind == "indices":
        items = [str(int(v)) for v in buf.values]
    elif buf.boolean:
        items = [str(int(bool(v))) for v in buf.values]
    else:
        items = [c99.literal(float(v), ctype) for v in buf.values]
    lines, line = [f"static const {elem} {name}[{size}] = {{"], ""
    for item in items:
        if len(line) + len(item) > 96:
            lines.append(line)
            line = ""
        line += item + ","
    return lines + [line, "};"]


def _read(body: Plan, ref: int, values: list, ctype: str, kind: str | None) -> str:
    """Value ``ref`` of a block's body as a C expression of ``kind`` (booleans are 0/1)."""
    have, text = body.kind(ref), values[ref]
    if kind is None or kind == have:
        return text
    return f"(({ctype})({text}))" if kind == "f" else f"(({text}) != 0)"


def _point(plan: LoopPlan, block: Block, ctype: str, m: str, pad: str) -> list:
    """The block's body at one index of its space: loads from the accesses' addresses
    (``st_a<k>``), the ops in the straight-line C's spelling, stores."""
    body = block.body
    n_in = len(body.inputs)
    lines, values = [], []
    for ref, ins in enumerate(body.instrs):
        if ins.op == "const":
            values.append(c99.literal(ins.attr[0], ctype))
            continue
        var = f"v{ref}"
        values.append(var)
        if ins.op == "input":
            arg, k = ins.attr
            acc = block.ins[arg]
            load = f"B{acc.buffer}[st_a{arg} + {acc.core[k]}]"
            if plan.buffers[acc.buffer].boolean:
                load = f"({ctype}){load}"
            lines.append(f"{pad}const {ctype} {var} = {load};")
            continue
        op = lower.OPS[ins.op]
        args = [_read(body, a, values, ctype, kind) for a, kind in zip(ins.args, op.args)]
        decl = "int" if op.result == "b" else ctype
        lines.append(f"{pad}const {decl} {var} = {op.c.format(*args, m=m)};")
    for o, layout in enumerate(body.outputs):
        acc = block.outs[o]
        boolean = plan.buffers[acc.buffer].boolean
        for k, ref in enumerate(layout.refs):
            value = _read(body, ref, values, ctype, "b" if boolean else "f")
            if boolean:
                value = f"(unsigned char)({value})"
            lines.append(f"{pad}B{acc.buffer}[st_a{n_in + o} + {acc.core[k]}] = {value};")
    return lines


def _extent(block: Block, d: int) -> str:
    """The loop bound of dimension ``d`` (run-time ones as in the compiled function)."""
    if d == 0 and block.points:
        return f"np / {block.points}"
    if d == block.runs:
        return "np"
    return str(block.space[d])


def _block(plan: LoopPlan, f: str, k: int, block: Block, ctype: str, m: str) -> list:
    """``static void st_<f>_b<k>(buffers..., np)``: the loop nest around the body."""
    accs = block.ins + block.outs
    bufs = block.buffers
    written = {a.buffer for a in block.outs}
    params = []
    for b in bufs:
        elem = "int32_t" if plan.buffers[b].kind == "indices" else \
            "unsigned char" if plan.buffers[b].boolean else ctype
        params.append(f"{'' if b in written else 'const '}{elem} *restrict B{b}")
    if block.points or block.runs >= 0:
        params.append("int64_t np")
    out = [f"static void st_{f}_b{k}({', '.join(params)})", "{"]
    if isinstance(block.body, Routine):  # the whole-matrix routine, called at each index
        out = block.body.c(f"st_{f}_b{k}_point", ctype) + out
    if math.prod(block.space) == 0:  # nothing to do (and no parameter left unused)
        return out + [f"    (void){p.rsplit(' ', 1)[1]};" for p in params] + ["}", ""]
    pad = "    "
    for d in range(len(block.space)):
        out.append(f"{pad}for (int64_t i{d} = 0; i{d} < {_extent(block, d)}; ++i{d}) {{")
        pad += "  "
    routine = isinstance(block.body, Routine)
    n_in = len(block.ins) if routine else len(block.body.inputs)
    read = set(range(n_in)) if routine else {
        ins.attr[0] for ins in block.body.instrs if ins.op == "input"}
    for a, acc in enumerate(accs):
        if a < n_in and a not in read:  # (an argument the body does not read)
            continue
        terms = [str(acc.offset)] + [f"i{d} * {s}" if s != 1 else f"i{d}"
                                     for d, s in enumerate(acc.strides) if s]
        if acc.index:  # plus the offset the index array holds at this iteration
            at = [str(acc.index[1])] + [f"i{d} * {s}" for d, s in enumerate(acc.index[2]) if s]
            terms.append(f"B{acc.index[0]}[{' + '.join(at)}]")
        if len(terms) > 1 and terms[0] == "0":
            terms = terms[1:]
        out.append(f"{pad}const int64_t st_a{a} = {' + '.join(terms)};")
    if routine:
        args = ", ".join(f"B{acc.buffer} + st_a{a}" for a, acc in enumerate(accs))
        out.append(f"{pad}st_{f}_b{k}_point({args});")
    else:
        out += _point(plan, block, ctype, m, pad)
    for d in reversed(range(len(block.space))):
        pad = pad[:-2]
        out.append(f"{pad}}}")
    return out + ["}", ""]


def _buffer_name(plan: LoopPlan, f: str, b: int) -> str:
    buf = plan.buffers[b]
    if buf.kind == "input":
        return f"st_in{buf.index}"
    if buf.kind == "output":
        return f"st_out{buf.index}"
    if buf.kind in ("const", "indices"):
        return f"st_{f}_c{b}"
    return f"st_t{b}"


def _program(plan: LoopPlan, f: str, ctype: str, offsets: tuple) -> list:
    """``st_<f>_program``: one point, or one chunk of ``np`` points, every block in order
    (``offsets``: where each temporary starts in the arena, in bytes)."""
    params = [f"const {ctype} *restrict st_in{i}" for i in range(len(plan.inputs))]
    params += [f"{'unsigned char' if o.boolean else ctype} *restrict st_out{i}"
               for i, o in enumerate(plan.outputs)]
    params += [f"{ctype} *restrict st_arena", "int64_t np"]
    out = [f"static void st_{f}_program({', '.join(params)})", "{"]
    used = {b for block in plan.blocks for b in block.buffers}
    for b, buf in enumerate(plan.buffers):
        if buf.kind != "temp" or offsets[b] is None or b not in used:
            continue
        at = f"st_arena + {offsets[b] // _width(False, ctype)}"
        if buf.boolean:
            out.append(f"    unsigned char *st_t{b} = (unsigned char *)({at});")
        else:
            out.append(f"    {ctype} *st_t{b} = {at};")
    for k, block in enumerate(plan.blocks):
        args = [_buffer_name(plan, f, b) for b in block.buffers]
        if block.points or block.runs >= 0:
            args.append("np")
        out.append(f"    st_{f}_b{k}({', '.join(args)});")
    called = {_buffer_name(plan, f, b) for block in plan.blocks for b in block.buffers}
    if any(name.startswith("st_t") for name in called):
        called.add("st_arena")
    if any(block.points or block.runs >= 0 for block in plan.blocks):
        called.add("np")
    for p in params:  # an argument the result does not depend on (a bias before a sum)
        if p.rsplit(" ", 1)[1] not in called:
            out.append(f"    (void){p.rsplit(' ', 1)[1]};")
    return out + ["}", ""]


def _arena_lines(plan: LoopPlan, ctype: str, outs: list, heap: bool, words: int) -> list:
    if not heap:
        return [f"    {ctype} st_arena[{words}];"]
    lines = [f"    {ctype} *st_arena = ({ctype} *)malloc({words} * sizeof({ctype}));",
             "    if (!st_arena) {  /* no memory: every output says so */"]
    for nm, o in zip(outs, plan.outputs):
        value = "0" if o.boolean else "NAN"
        lines += [f"        for (int64_t j = 0; j < n * {math.prod(o.shape)}; ++j)",
                  f"            {nm}[j] = {value};"]
    return lines + ["        return;", "    }"]


def _entry(plan: LoopPlan, f: str, head: str, ins: list, outs: list, ctype: str) -> tuple:
    """The exported function: the arena, then the program per point or per chunk."""
    staging, total = _staging(plan, ctype)
    words = -(-total // _width(False, ctype))
    heap = total > STACK_BYTES
    sizes = [math.prod(a.shape) for a in plan.inputs] + [math.prod(o.shape)
                                                          for o in plan.outputs]
    names = list(ins) + list(outs)
    lines = [head, "{"] + _arena_lines(plan, ctype, outs, heap, words)
    if not plan.points:
        ptrs = [f"{nm} + j * {s}" for nm, s in zip(names, sizes)]
        lines += ["    for (int64_t j = 0; j < n; ++j)",
                  f"        st_{f}_program({', '.join(ptrs + ['st_arena', '1'])});"]
    else:
        lines += _chunks(plan, f, names, sizes, staging, ctype)
    if heap:
        lines.append("    free(st_arena);")
    return lines + ["}", ""], heap


def _chunks(plan: LoopPlan, f: str, names: list, sizes: list, staging: tuple,
            ctype: str) -> list:
    """Whole chunks in place; the last, short one through the zero-padded staging areas."""
    chunk, n_in = plan.points, len(plan.inputs)
    width = _width(False, ctype)
    stage = []
    for i, (nm, off) in enumerate(zip(names, staging)):
        boolean = i >= n_in and plan.outputs[i - n_in].boolean
        at = f"st_arena + {off // width}"
        stage.append(f"(unsigned char *)({at})" if boolean else at)
    direct = [f"{nm} + j * {s}" for nm, s in zip(names, sizes)]
    lines = ["    int64_t j = 0;",
             f"    for (; n - j >= {chunk}; j += {chunk})",
             f"        st_{f}_program({', '.join(direct + ['st_arena', str(chunk)])});",
             "    if (j < n) {  /* the last chunk, padded with zeros */",
             "        const int64_t st_cnt = n - j;",
             f"        const int64_t st_np = (st_cnt + {POINT_ALIGN - 1}) / {POINT_ALIGN} * "
             f"{POINT_ALIGN};"]
    for i in range(n_in):
        lines += [f"        for (int64_t st_k = 0; st_k < st_np * {sizes[i]}; ++st_k)",
                  f"            ({stage[i]})[st_k] = st_k < st_cnt * {sizes[i]} ? "
                  f"{names[i]}[j * {sizes[i]} + st_k] : 0;"]
    lines.append(f"        st_{f}_program({', '.join(stage + ['st_arena', 'st_np'])});")
    for i in range(n_in, len(names)):
        lines += [f"        for (int64_t st_k = 0; st_k < st_cnt * {sizes[i]}; ++st_k)",
                  f"            {names[i]}[j * {sizes[i]} + st_k] = ({stage[i]})[st_k];"]
    return lines + ["    }"]


def render_function(plan: LoopPlan, f: str, head: str, ins: list, outs: list,
                    ctype: str, m: str) -> tuple:
    """``(lines, includes)``: the C of loop plan ``plan`` as the function whose declaration
    is ``head`` (the batched layout; ``ins``/``outs``: its parameter names; ``f``: the
    function's name, prefixing its internal names), and the headers it needs beyond
    ``<math.h>`` and ``<stdint.h>``.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> from symtape.codegen.loops import Access, Buffer, layouts
    >>> x = graph.Leaf.new("x")
    >>> body = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> ins, outs = layouts([(3,)], [((3,), False)])
    >>> lp = LoopPlan((Buffer("input", 0, 3), Buffer("output", 0, 3)),
    ...               (Block((3,), body, (Access(0, 0, (1,)),), (Access(1, 0, (1,)),)),),
    ...               ins, outs)
    >>> lines, _ = render_function(lp, "sq", "void sq(int64_t n, const double *x, double *y)",
    ...                            ["x"], ["y"], "double", "")
    >>> print("\\n".join(lines[lines.index("static void st_sq_b0(const double *restrict B0, "
    ...                                    "double *restrict B1)"):][:8]))
    static void st_sq_b0(const double *restrict B0, double *restrict B1)
    {
        for (int64_t i0 = 0; i0 < 3; ++i0) {
          const int64_t st_a0 = i0;
          const int64_t st_a1 = i0;
          const double v0 = B0[st_a0 + 0];
          const double v1 = (v0 * v0);
          B1[st_a1 + 0] = v1;
    """
    entry, heap = _entry(plan, f, head, ins, outs, ctype)
    return _parts(plan, f, ctype, m) + entry, ("<stdlib.h>",) if heap else ()


def _parts(plan: LoopPlan, f: str, ctype: str, m: str, offsets: tuple | None = None) -> list:
    """The constants, the blocks and the program of ``plan`` (``offsets``: of its
    temporaries in the arena; default: the compiled function's)."""
    lines = []
    used = {b for block in plan.blocks for b in block.buffers}
    for b, buf in enumerate(plan.buffers):
        if buf.kind in ("const", "indices") and b in used:  # (unread ones are left out)
            lines += _constant(f"st_{f}_c{b}", buf, ctype)
    if lines:
        lines.append("")
    for k, block in enumerate(plan.blocks):
        lines += _block(plan, f, k, block, ctype, m)
    return lines + _program(plan, f, ctype, plan.arena[0] if offsets is None else offsets)


# --------------------------------------------------------------------------------------------
# CasADi's ABI: one point, every temporary in the caller's work vector
# --------------------------------------------------------------------------------------------


def _casadi_points(plan: LoopPlan) -> int:
    """The points one call runs: 1, or (a plan over chunks) the one real point padded up to
    a multiple of :data:`POINT_ALIGN` and of every block's points per iteration."""
    if not plan.points:
        return 1
    p = POINT_ALIGN
    for block in plan.blocks:
        if block.points:
            p = math.lcm(p, block.points)
    return p


def _touched(plan: LoopPlan, points: int) -> dict:
    """Per temporary, the elements a run of the program over ``points`` points reaches (a
    plan over chunks sizes its temporaries for a whole chunk; one point padded to a few
    reaches the first few points' elements only)."""
    need: dict = {}
    for block in plan.blocks:
        extents = [points // block.points if d == 0 and block.points else
                   points if d == block.runs else n for d, n in enumerate(block.space)]
        if not all(extents):
            continue
        for acc in block.ins + block.outs:
            if plan.buffers[acc.buffer].kind != "temp":
                continue
            top = acc.offset + max(acc.core) + sum(
                max(0, s * (n - 1)) for s, n in zip(acc.strides, extents))
            if acc.index:  # an indexed access may reach any of its buffer's elements
                top = plan.buffers[acc.buffer].size - 1
            need[acc.buffer] = max(need.get(acc.buffer, 0), top + 1)
    return need


def _pack(plan: LoopPlan, need: dict, width: int) -> tuple:
    """``(offsets, bytes)`` of temporaries of ``need`` elements packed by lifetime (the
    compiled function's rule, :attr:`LoopPlan.arena`, over smaller sizes)."""
    first: dict = {}
    last: dict = {}
    for k, block in enumerate(plan.blocks):
        for acc in block.ins + block.outs:
            if acc.buffer in need:
                first.setdefault(acc.buffer, k)
                last[acc.buffer] = k
    offsets: list = [None] * len(plan.buffers)
    free: list = []
    top = 0
    for k in range(len(plan.blocks)):
        for buf in sorted(b for b, f in first.items() if f == k):
            size = -(-need[buf] * (1 if plan.buffers[buf].boolean else width) // 64) * 64
            hole = next((i for i, (o, n) in enumerate(free) if n >= size), None)
            if hole is None:
                offsets[buf], top = top, top + size
            else:
                o, n = free.pop(hole)
                offsets[buf] = o
                if n > size:
                    free.append((o + size, n - size))
        for buf in sorted(b for b, e in last.items() if e == k):
            size = -(-need[buf] * (1 if plan.buffers[buf].boolean else width) // 64) * 64
            free.append((offsets[buf], size))
        free.sort()
    return tuple(offsets), top


def _casadi_copy(dst: str, src: str, shape: tuple, into_c_order: bool, cast: str) -> list:
    """Copies one CasADi matrix (stored column by column) and its C-order elements."""
    if len(shape) != 2:
        return [f"    for (st_k = 0; st_k < {math.prod(shape)}; ++st_k) "
                f"{dst}[st_k] = {cast}{src}[st_k];"]
    rows, cols = shape
    c_at, f_at = f"st_r * {cols} + st_c", f"st_c * {rows} + st_r"
    d, s = (c_at, f_at) if into_c_order else (f_at, c_at)
    return [f"    for (st_r = 0; st_r < {rows}; ++st_r)",
            f"      for (st_c = 0; st_c < {cols}; ++st_c) {dst}[{d}] = {cast}{src}[{s}];"]


def render_casadi(plan: LoopPlan, f: str, head: str, ctype: str, m: str) -> tuple:
    """``(lines, sz_w)``: loop plan ``plan`` as CasADi's ``f(arg, res, iw, w, mem)`` whose
    definition starts with ``head``, for one point: the arguments copied from CasADi's
    column-major matrices (a null one as zeros) into C order in ``w``, the program run on
    them (a plan over chunks: on one chunk of the real point and zero padding), the results
    copied back (a null ``res[i]`` skipped). Every temporary lives in ``w``; ``sz_w`` is the
    number of ``casadi_real`` it needs (the elements of its temporaries one call reaches,
    packed by lifetime, and the staging areas): nothing is allocated.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> from symtape.codegen.loops import Access, Buffer, layouts
    >>> x = graph.Leaf.new("x")
    >>> body = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> ins, outs = layouts([(2, 3)], [((2, 3), False)])
    >>> lp = LoopPlan((Buffer("input", 0, 6), Buffer("output", 0, 6)),
    ...               (Block((6,), body, (Access(0, 0, (1,)),), (Access(1, 0, (1,)),)),),
    ...               ins, outs)
    >>> lines, sz_w = render_casadi(lp, "sq", "int sq(const double** arg, double** res, "
    ...                             "long long* iw, double* w, int mem)", "double", "")
    >>> sz_w
    16
    """
    points = _casadi_points(plan)
    width = _width(False, ctype)
    offsets, top = _pack(plan, _touched(plan, points), width)
    n_in = len(plan.inputs)
    layouts = [(a.shape, False) for a in plan.inputs] + [(o.shape, o.boolean)
                                                          for o in plan.outputs]
    stage, sizes = [], []
    for shape, boolean in layouts:
        at = f"w + {top // width}"
        stage.append(f"(unsigned char *)({at})" if boolean else at)
        sizes.append(math.prod(shape))
        top += -(-points * math.prod(shape) * _width(boolean, ctype) // 64) * 64
    lines = [f"{head} {{", "  int64_t st_k = 0, st_r = 0, st_c = 0;", "  (void)iw;",
             "  (void)mem;", "  (void)st_k;", "  (void)st_r;", "  (void)st_c;"]
    if not n_in:
        lines.append("  (void)arg;")
    if not plan.outputs:
        lines.append("  (void)res;")
    for i, (shape, _) in enumerate(layouts[:n_in]):
        lines += [f"  for (st_k = 0; st_k < {points * sizes[i]}; ++st_k) "
                  f"({stage[i]})[st_k] = 0;",
                  f"  if (arg[{i}]) {{"]
        lines += _casadi_copy(f"({stage[i]})", f"arg[{i}]", shape, True, "")
        lines.append("  }")
    lines.append(f"  st_{f}_program({', '.join(stage + ['w', str(points)])});")
    for o, (shape, boolean) in enumerate(layouts[n_in:]):
        lines.append(f"  if (res[{o}]) {{")
        lines += _casadi_copy(f"res[{o}]", f"({stage[n_in + o]})", shape, False,
                              f"({ctype})" if boolean else "")
        lines.append("  }")
    lines += ["  return 0;", "}", ""]
    return _parts(plan, f, ctype, m, offsets) + lines, top // width

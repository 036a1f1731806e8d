"""Kernel: a plan as LLVM IR text, one loop over the batch around the straight-line body.

The module has four functions. ``point`` (internal) computes one point: straight-line SSA
from ``noalias`` input pointers to output pointers, element ``k`` of each at offset ``k``.
``body`` (internal, always inlined) loops ``j`` over the batch and calls ``point`` with every
pointer advanced by ``j * stride`` elements. A small ``point`` is inlined into that loop, which
LLVM then vectorises across points; a large one stays a call, which keeps the optimiser's
time near linear in the size of the function. The two exported entry points of the shell
(:mod:`~symtape.codegen.ir`) call ``body``; its status is 1 when lane buffers too large for the
stack found no memory on the heap.

A ``point`` that LLVM would not vectorise across points (above
``LOOP_VECTORIZE_MAX_ACCESSES``, or calling library functions) is written in *lane mode*
instead (:mod:`~symtape.codegen.lanes`): every value is a vector of ``LANES`` points, ``body``
copies each block of points into lane buffers (element ``k`` of lane ``l`` at
``k * LANES + l``), calls ``point`` once per block and copies the results back. Each lane
computes exactly the instructions of the one-point code, so results are the same bits (but
for the ops with a lane form of their own, ``Op.lanes``: sin and cos).

The text is generated directly (no IR builder objects), in a fixed order, so the same plan
gives the same bytes: the on-disk cache is keyed by them.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from symtape.codegen.ir import (
    MALLOC, MEMSET, body_head, body_tail, float_literal, formats, header, module, no_memory,
)
from symtape.codegen.lanes import LANES_MARK, libm_wrapper, points, vector, widen
from symtape.codegen.plan import Instr, Plan
from symtape.base.lazy import LazyModule

lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["Body", "render"]

# Above this many loads and stores per point, ``point`` is not inlined and the batch loop is
# not vectorised: each point's accesses form interleaved groups as wide as its core, whose
# analysis grows quickly with width while the gain fades (SLP still vectorises inside).
LOOP_VECTORIZE_MAX_ACCESSES = 32
# ... nor, when it only does arithmetic (no library or IR function), when an output has more
# elements a point than this: the vectorised loop stores it by scatters (measured, 10^4
# points: x*x + 3*x of 3 to 7 elements ties or gains, of 8, 9 or 16 elements runs 3x slower
# than one point at a time, 2.6 against 7.5 ns at 8; x/(1 + x*x) of 8, 3.7 against 8.3 ns,
# 9.5 in lanes; the Rosenbrock n=10 gradient 7.3 against 10.1 ns). With exp the vector
# loop still gains (exp(x)*x of 8: 15.5 ns against 30.6).
LOOP_VECTORIZE_MAX_STORE = 7
# Plans with more operations than this are cut into functions of this many, optimised one
# at a time: LLVM's time per operation grows with the size of a function (measured: about
# 50 us per op at 10^3 ops, 150 us at 3 x 10^4), and stays near its small-size cost this way.
# Register allocation and the instruction schedulers are what grow: cut at 500 (and lane
# kernels at LANE_SPLIT_OPS), the N-body k=20 Hessian sets up in 1.6 s against 2.2 s at 2,000,
# Rosenbrock n=100's and the MLP's Hessians run 6-10% faster and N-body's 5% slower
# (benchmarks/peers.py).
SPLIT_OPS = 500
# Runs of this many consecutive outputs that are structurally +0.0 are written by one memset.
ZERO_RUN = 4
# ... and kernels in lane mode (vectors of LANES points, twice the registers a value) into
# functions of this many: the N-body k=20 Hessian (21,000 operations) sets up in 1.6 s
# against 1.9 s at 250, evaluating as fast (benchmarks/peers.py).
LANE_SPLIT_OPS = 125
# IR lines of inlined elementary functions (vecmath) a vectorised kernel may hold: each use
# of tanh inlines about 140 lines and adds about 30 ms of optimisation, exp about 45 and 8 ms
# (measured); past this, the kernel calls the C library instead and is not loop-vectorised.
VECMATH_BUDGET = 600
# Lane mode (large kernels computing LANES points per call of ``point``) keeps its buffers on
# the stack up to this many bytes, and takes them from the heap above (once per call).
LANE_STACK_BYTES = 1 << 18
# ... and has at least this many operations per point: every such kernel gains (measured,
# 10^6 points: sin(x)*y + z*x 6.8 ms against 12.9 ms one point at a time, 5 ms more compile);
# 0 puts every kernel the loop vectoriser does not take in lane mode, whatever follows.
LANE_MIN_OPS = 1
# ... unless it only adds, multiplies and compares (no division, root, power, library or IR
# function) and has fewer than this many operations per output element: then copying each
# output out of its lanes costs more than the lanes save (measured, Rosenbrock n=100: the
# gradient 58 ns a point one at a time against 188 in lanes, the Hessian 6.0 us against
# 10.0 us, and 0.9 s of setup against 6.9 s).
LANE_OPS_PER_OUTPUT = 32
CHEAP_OPS = frozenset({"add", "mul", "abs", "max", "min", "select", "sign", "heaviside", "eq",
                       "ne", "lt", "le", "gt", "ge", "and", "or", "not"})
# Lane kernels of at least this many operations are optimised by a short pipeline instead of
# O3 (``jit.py``): O3 finds nothing to gain in their straight-line vector code and takes
# seconds at 10^4 operations, while on small kernels it still tidies the copy loops (a lane
# sin kernel: 2.8 ms over 10^6 points after O3, 4.9 ms after the short pipeline).
SHORT_PIPELINE_OPS = 1000
# Lane buffers of at most this many elements per point are copied element by element, larger
# ones by a loop (the short pipeline of lane kernels does not unroll loops).
LANE_UNROLLED_COPY = 16
_NO_LOOP_VECTORIZE = ('!0 = distinct !{!0, !1}\n'
                      '!1 = !{!"llvm.loop.vectorize.enable", i1 false}')


def render(plan: Plan, name: str, dtype: str = "float64", fastmath: bool = False) -> str:
    """The LLVM IR module of ``plan`` (the text the cache is keyed by).

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> p = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> "fmul double %v0, %v0" in render(p, "square")
    True
    """
    fmt, size = formats(dtype, fastmath)
    emitter = Body(plan, fmt, size)
    body = emitter.lines()
    decls = emitter.declarations()  # one line per declaration
    head = [header("kernel", name, plan)]
    if emitter.lanes > 1 and plan.n_ops >= SHORT_PIPELINE_OPS:
        head.append(f"{LANES_MARK}: {emitter.lanes} points per vector")
    metadata = [_NO_LOOP_VECTORIZE] if not emitter.loop_vectorize else []
    return module(head, decls + body, plan, name, metadata=metadata)


def _loop(elems: list[str], vectorize: bool) -> list[str]:
    """``body``: for each point ``j``, ``point`` on every buffer advanced by ``j * stride``
    elements (``elems`` are the buffers' element types, inputs then outputs)."""
    lines = body_head(len(elems), "loop") + [
        "  %j = phi i64 [ 0, %entry ], [ %j.next, %loop ]",
    ]
    for i, elem in enumerate(elems):
        lines += [f"  %o{i} = mul nsw i64 %j, %s{i}",
                  f"  %p{i} = getelementptr inbounds {elem}, ptr %b{i}, i64 %o{i}"]
    args = ", ".join(f"ptr %p{i}" for i in range(len(elems)))
    hint = "" if vectorize else ", !llvm.loop !0"
    lines += [
        f"  call void @point({args})",
        "  %j.next = add nuw nsw i64 %j, 1",
        "  %end = icmp eq i64 %j.next, %n",
        f"  br i1 %end, label %done, label %loop{hint}",
        *body_tail(),
    ]
    return lines


def _chunks(plan: Plan, size: int) -> list:
    """``[(lo, hi)]``: the plan's values in order, cut after every ``size`` operations."""
    bounds, ops, lo = [], 0, 0
    for ref, ins in enumerate(plan.instrs):
        if ins.op != "const":
            ops += 1
            if ops == size:
                bounds.append((lo, ref + 1))
                lo, ops = ref + 1, 0
    if lo < len(plan.instrs) or not bounds:
        bounds.append((lo, len(plan.instrs)))
    return bounds


class Body:
    """Emits ``point`` (loads, ops, stores) and the ``body`` loop around it; with
    ``lanes > 1`` every value is a vector of that many points (:mod:`~.lanes`)."""

    def __init__(self, plan: Plan, fmt: dict, size: int, offsets: tuple | None = None,
                 in_bool: tuple = ()) -> None:
        self.plan = plan
        # where element ``k`` of each argument (inputs, then outputs) is, when not at ``k``;
        # which inputs are booleans stored as bytes (read as 0.0/1.0)
        self.offsets = offsets
        self.in_bool = in_bool
        self.fmt = fmt
        self.size = size
        self.dtype = "float32" if fmt["t"] == "float" else "float64"
        self.decls: set = set()
        self.names: list = [None] * len(plan.instrs)
        self.coerced: dict = {}
        self.out: list = []
        self.loop_vectorize = True
        self.lanes = 1
        self.wrapped: set = set()  # C library functions called through lane wrappers
        self.templates: dict = {}  # op name -> its lines, formatted (and widened)
        self.raw: set = set()  # definitions already written for the lanes

    def lines(self) -> list[str]:
        """The ``point`` function (one point, straight-line) and the ``body`` loop."""
        plan = self.plan
        n_in, n_out = len(plan.inputs), len(plan.outputs)
        accesses = sum(1 for ins in plan.instrs if ins.op == "input") + sum(
            len(o.refs) for o in plan.outputs)
        small = accesses <= LOOP_VECTORIZE_MAX_ACCESSES
        ops = [lower.OPS[ins.op] for ins in plan.instrs if ins.op in lower.OPS]
        calls = any(op.call for op in ops)
        inlined = sum(op.inline_cost for op in ops)
        # Library calls (sin, erf, ...) have no vector form here: vectorising the batch loop
        # around them only scalarises them again, for <= 12% speed at 2-4x the compile time
        # (measured); SLP still vectorises the arithmetic between them. Functions written in
        # IR (exp, log, tanh) vectorise, at some compile time per use: past a budget they are
        # library calls too.
        # a small point of arithmetic only (no function) with an output of more elements
        # than an interleaved store group takes runs one point at a time: vectorised, the
        # output is stored by scatters, which cost more than the vector arithmetic saves
        arithmetic = small and not calls
        scalar = arithmetic and inlined == 0 and any(
            math.prod(o.shape) > LOOP_VECTORIZE_MAX_STORE for o in plan.outputs)
        self.loop_vectorize = arithmetic and inlined <= VECMATH_BUDGET and not scalar
        t = self.fmt["t"]
        sizes = [math.prod(a.shape) for a in plan.inputs] + [
            math.prod(o.shape) for o in plan.outputs]
        # a point LLVM does not vectorise across points computes a vector register's worth of
        # points at once (8 doubles, 16 floats), where it is large enough to gain
        if not self.loop_vectorize and not scalar and (
                LANE_MIN_OPS == 0 or plan.n_ops >= LANE_MIN_OPS and (
                any(ins.op not in CHEAP_OPS for ins in plan.instrs if ins.op in lower.OPS)
                or plan.n_ops >= LANE_OPS_PER_OUTPUT * sum(len(o.refs) for o in plan.outputs))):
            self.lanes, self.loop_vectorize = points(self.size), False
        # vector code is cut twice as fine: LLVM's instruction schedulers, quadratic in the
        # size of a block, were most of its time there (measured on an N-body Hessian: 3.7 s
        # of code generation at 1,000 operations a function against 5.8 s at 2,000)
        chunks = _chunks(plan, LANE_SPLIT_OPS if self.lanes > 1 else SPLIT_OPS)
        crossing = _crossing(plan, chunks)
        ptrs = [f"ptr noalias readonly %in{i}" for i in range(n_in)]
        ptrs += [f"ptr noalias writeonly %out{i}" for i in range(n_out)]
        if self.lanes > 1:  # the scratch arrays of a cut point live in body's arena
            ptrs += ["ptr noalias %sf", "ptr noalias %sb"]
        # a small point is inlined into the loop (and vectorised across points); a large one
        # stays a call, so that loop passes that grow with the square of the number of
        # memory accesses in a loop never see its body
        inline = "alwaysinline" if small else "noinline"
        elems = [t] * n_in + ["i8" if o.boolean else t for o in plan.outputs]
        if len(chunks) == 1:
            point = self._straight("point", ptrs, inline)
        else:
            point = self._split(chunks, crossing, ptrs)
        if self.lanes > 1:
            scratch = (crossing.count["f"] * self.size, crossing.count["b"])
            return point + _lane_loop(elems, sizes, n_in, self.lanes, scratch)
        return point + _loop(elems, self.loop_vectorize)

    def function(self, name: str, noalias: bool = True, inline: bool = True) -> list[str]:
        """One point as ``define internal void @<name>(ptr %in..., ptr %out...)``, always
        inlined (the body of a loop nest, :mod:`~symtape.codegen.loops`) unless not
        ``inline``; ``noalias=False`` when an output is also read (an accumulation)."""
        plan = self.plan
        ops = [lower.OPS[ins.op] for ins in plan.instrs if ins.op in lower.OPS]
        self.loop_vectorize = not any(op.call for op in ops) and sum(
            op.inline_cost for op in ops) <= VECMATH_BUDGET
        na = "noalias " if noalias else ""
        ptrs = [f"ptr {na}%in{i}" for i in range(len(plan.inputs))]
        ptrs += [f"ptr {na}%out{i}" for i in range(len(plan.outputs))]
        return self._straight(name, ptrs, "alwaysinline" if inline else "noinline")

    def _straight(self, name: str, ptrs: list, inline: str) -> list[str]:
        """``@<name>(ptrs)``: the whole plan as one straight-line function."""
        self.out = [f"define internal void @{name}({', '.join(ptrs)}) {inline} nounwind {{",
                    "entry:"]
        for ref, ins in enumerate(self.plan.instrs):
            self._value(ref, ins)
        for o, layout in enumerate(self.plan.outputs):
            self._store(o, layout)
        self.out += ["  ret void", "}", ""]
        return self.out

    def declarations(self) -> list[str]:
        """The module's declarations and helper definitions (widened in lane mode)."""
        decls = {d.format(**self.fmt) for d in self.decls}
        if self.lanes == 1:
            return sorted(decls)
        out = set()
        for d in decls:
            if _is_libm(d):
                out.add(d)  # the scalar function the lane wrapper calls
                continue
            text = "\n".join(widen(line, self.lanes) for line in d.split("\n"))
            # vector functions are called, not inlined: one call computes every lane
            out.add(text.replace(" alwaysinline ", " noinline "))
        for name, arity in sorted(self.wrapped):
            out.add(libm_wrapper(name, self.fmt["t"], arity, self.lanes))
        return sorted(out | self.raw)

    @property
    def vt(self) -> str:
        """The type of one float value (a vector in lane mode)."""
        t = self.fmt["t"]
        return t if self.lanes == 1 else vector(t, self.lanes)

    @property
    def bt(self) -> str:
        """The stored type of one boolean value (bytes)."""
        return "i8" if self.lanes == 1 else vector("i8", self.lanes)

    def _literal(self, text: str, scalar: str) -> str:
        """An operand as written in this mode: a literal is splat in lane mode."""
        if self.lanes == 1 or text.startswith(("%", "splat")):
            return text
        return f"splat ({scalar} {text})"

    def _emit(self, line: str) -> None:
        """Append an instruction over scalars (widened in lane mode)."""
        if self.lanes > 1:
            line = widen(line, self.lanes, self.wrapped_names)
        self.out.append("  " + line)

    @property
    def wrapped_names(self) -> frozenset:
        return frozenset(name for name, _ in self.wrapped)

    def _split(self, chunks: list, crossing, ptrs: list) -> list[str]:
        """``point`` as a call of one function per chunk of the plan, in order: values a
        later chunk reads go through scratch arrays (``%sf`` floats, ``%sb`` booleans as
        bytes; on ``point``'s stack, or in lane mode in ``body``'s arena), and each output
        element is stored by the chunk defining it, so each function is optimised on its own
        and the optimiser's time stays linear in the size of the plan."""
        plan = self.plan
        owner, needed, slot, count = crossing
        last = len(chunks) - 1
        own = ptrs if self.lanes > 1 else ptrs + ["ptr noalias %sf", "ptr noalias %sb"]
        params = ", ".join(own)
        parts: list = []
        stores: list = [[] for _ in chunks]  # the output elements each chunk stores, in order
        for o, layout in enumerate(plan.outputs):
            for i, ref in enumerate(layout.refs):
                stores[owner[ref] if owner[ref] >= 0 else last].append((o, i, ref, layout.boolean))
        for k, (lo, hi) in enumerate(chunks):
            self.out, self.coerced = [], {}
            for ref in needed[k]:
                self._scratch(ref, slot[ref], load=True)
            for ref in range(lo, hi):
                self._value(ref, plan.instrs[ref])
                if ref in slot:
                    self._scratch(ref, slot[ref], load=False)
            self._stores(stores[k])
            parts += [f"define internal void @point.{k}({params}) noinline nounwind {{",
                      "entry:", *self.out, "  ret void", "}", ""]
        self.out = []
        n_in, n_out = len(plan.inputs), len(plan.outputs)
        args = ", ".join([f"ptr %in{i}" for i in range(n_in)] +
                         [f"ptr %out{i}" for i in range(n_out)] + ["ptr %sf", "ptr %sb"])
        scratch = [] if self.lanes > 1 else [
            f"  %sf = alloca {self.vt}, i64 {max(count['f'], 1)}, align {self.size}",
            f"  %sb = alloca {self.bt}, i64 {max(count['b'], 1)}"]
        return parts + [
            f"define internal void @point({', '.join(ptrs)}) noinline nounwind {{",
            "entry:", *scratch,
            *[f"  call void @point.{k}({args})" for k in range(len(chunks))],
            "  ret void", "}", ""]

    def _scratch(self, ref: int, where: tuple, load: bool) -> None:
        """Load value ``ref`` from its scratch slot (naming it ``%x<ref>``) or store it."""
        kind, index = where
        array, elem, align = ("%sf", self.vt, self.size) if kind == "f" else ("%sb", self.bt, 1)
        p = f"%x{ref}.p" if load else f"%v{ref}.sp"
        self.out.append(f"  {p} = getelementptr inbounds {elem}, ptr {array}, i64 {index}")
        if load:
            if kind == "f":
                self.out.append(f"  %x{ref} = load {elem}, ptr {p}, align {align}")
            else:
                self.out.append(f"  %x{ref}.l = load {elem}, ptr {p}, align 1")
                self._emit(f"%x{ref} = trunc i8 %x{ref}.l to i1")
            self.names[ref] = f"%x{ref}"
            return
        value = self.names[ref]
        if kind == "b":
            self._emit(f"%v{ref}.sz = zext i1 {value} to i8")
            value = f"%v{ref}.sz"
        self.out.append(f"  store {elem} {value}, ptr {p}, align {align}")

    def _value(self, ref: int, ins: Instr) -> None:
        if ins.op == "const":
            value = ins.attr[0]
            if isinstance(value, bool):
                self.names[ref] = self._literal("true" if value else "false", "i1")
            else:
                self.names[ref] = self._literal(float_literal(value, self.dtype), self.fmt["t"])
            return
        name = self.names[ref] = f"%v{ref}"
        if ins.op == "input":
            arg, k = ins.attr
            at = k if self.offsets is None else self.offsets[arg][k]
            if arg < len(self.in_bool) and self.in_bool[arg]:
                self.out += [f"  {name}.p = getelementptr inbounds i8, ptr %in{arg}, i64 {at}",
                             f"  {name}.b = load i8, ptr {name}.p, align 1",
                             f"  {name} = uitofp i8 {name}.b to {self.vt}"]
                return
            self.out += [
                f"  {name}.p = getelementptr inbounds {self.vt}, ptr %in{arg}, i64 {at}",
                f"  {name} = load {self.vt}, ptr {name}.p, align {self.size}",
            ]
            return
        op = lower.OPS[ins.op]
        if self.lanes > 1 and op.lanes is not None:
            op = op.lanes
        elif op.scalar is not None and not self.loop_vectorize and self.lanes == 1:
            op = op.scalar
        args = [self._as(a, kind) for a, kind in zip(ins.args, op.args)]
        self.decls.update(op.decls)
        if self.lanes > 1 and op.lane_decls is not None:
            self.raw.update(op.lane_decls(self.lanes))
        for line in self._template(ins.op, op):
            self.out.append(line.format(*args, r=name))

    def _template(self, key: str, op) -> tuple:
        """The op's lines with only ``{r}`` and ``{0}, {1}, ...`` left to fill (formatted
        and, in lane mode, widened once per op)."""
        lines = self.templates.get(key)
        if lines is None:
            if self.lanes > 1 and op.call:
                self.wrapped.update((n, len(op.args)) for n in _libm_names(op, self.fmt))
            src = op.ir32 if op.ir32 is not None and self.dtype == "float32" else op.ir
            holes = [f"{{{i}}}" for i in range(len(op.args))]
            lines = []
            for line in src:
                line = line.format(*holes, r="{r}", **self.fmt)
                if self.lanes > 1:
                    line = widen(line, self.lanes, self.wrapped_names)
                lines.append("  " + line)
            lines = self.templates[key] = tuple(lines)
        return lines

    def _as(self, ref: int, kind: str) -> str:
        """The value ``ref`` as ``kind``: booleans widen to 0/1, floats test ``!= 0``."""
        have = self.plan.kind(ref)
        name = self.names[ref]
        if have == kind:
            return name
        key = (ref, kind)
        hit = self.coerced.get(key)
        if hit is not None:
            return hit
        t = self.fmt["t"]
        if self.plan.instrs[ref].op == "const":
            value = self.plan.instrs[ref].attr[0]
            conv = (self._literal(float_literal(float(value), self.dtype), t) if kind == "f"
                    else self._literal("true" if value != 0 else "false", "i1"))
        elif kind == "f":
            conv = f"%c{ref}.f"
            self._emit(f"{conv} = uitofp i1 {name} to {t}")
        else:
            conv = f"%c{ref}.b"
            self._emit(f"{conv} = fcmp une {t} {name}, 0.0")
        self.coerced[key] = conv
        return conv

    def _store(self, o: int, layout) -> None:
        self._stores([(o, k, ref, layout.boolean) for k, ref in enumerate(layout.refs)])

    def _stores(self, items: list) -> None:
        """``(output, element, value, boolean)`` stores in order, runs of :data:`ZERO_RUN`
        or more consecutive ``+0.0`` elements of an output as one ``memset`` (a
        100-variable Hessian's 9,702 structural zeros were 1.2 MB of IR, most of its LLVM
        time)."""
        zero = [not b and self._positive_zero(ref) for _, _, ref, b in items]
        i = 0
        while i < len(items):
            o, k = items[i][:2]
            end = i
            while end < len(items) and zero[end] and items[end][0] == o and \
                    self._at(o, items[end][1]) == self._at(o, k) + end - i:
                end += 1
            if end - i >= ZERO_RUN:
                s = f"%st{o}.{k}"
                self.out += [
                    f"  {s}.p = getelementptr inbounds {self.vt}, ptr %out{o}, "
                    f"i64 {self._at(o, k)}",
                    f"  call void @llvm.memset.p0.i64(ptr align {self.size} {s}.p, i8 0, "
                    f"i64 {(end - i) * self.size * self.lanes}, i1 false)"]
                i = end
                continue
            self._store_one(*items[i])
            i += 1

    def _at(self, o: int, k: int) -> int:
        """The place of element ``k`` of output ``o`` (in elements of its type)."""
        return k if self.offsets is None else self.offsets[len(self.plan.inputs) + o][k]

    def _positive_zero(self, ref: int) -> bool:
        instr = self.plan.instrs[ref]
        if instr.op != "const":
            return False
        value = float(instr.attr[0])
        return value == 0.0 and not math.copysign(1.0, value) < 0

    def _store_one(self, o: int, k: int, ref: int, boolean: bool) -> None:
        """Element ``k`` of output ``o`` is value ``ref``."""
        elem = self.bt if boolean else self.vt
        align = 1 if boolean else self.size
        s = f"%st{o}.{k}"
        value = self._as(ref, "b" if boolean else "f")
        if boolean and not value.startswith("%"):  # a constant: its byte
            value = self._literal("1" if "true" in value else "0", "i8")
        elif boolean:
            self._emit(f"{s}.z = zext i1 {value} to i8")
            value = f"{s}.z"
        else:
            value = self._literal(value, self.fmt["t"])
        self.out += [
            f"  {s}.p = getelementptr inbounds {elem}, ptr %out{o}, i64 {self._at(o, k)}",
            f"  store {elem} {value}, ptr {s}.p, align {align}",
        ]


class _Crossing(NamedTuple):
    owner: list  # the chunk defining each value (constants: -1)
    needed: list  # per chunk: the values it reads from earlier chunks
    slot: dict  # ref -> (kind, index in its scratch array)
    count: dict  # kind -> scratch slots


def _crossing(plan: Plan, chunks: list) -> _Crossing:
    """The values that cross from one chunk of the plan to a later one, and their slots."""
    owner = [-1] * len(plan.instrs)
    for k, (lo, hi) in enumerate(chunks):
        for ref in range(lo, hi):
            if plan.instrs[ref].op != "const":
                owner[ref] = k
    needed: list = [[] for _ in chunks]
    slot: dict = {}
    count = {"f": 0, "b": 0}
    if len(chunks) > 1:
        for k, (lo, hi) in enumerate(chunks):
            seen: set = set()
            for ref in range(lo, hi):
                for a in plan.instrs[ref].args:
                    if 0 <= owner[a] < k and a not in seen:
                        seen.add(a)
                        needed[k].append(a)
                        if a not in slot:
                            kind = plan.kind(a)
                            slot[a] = (kind, count[kind])
                            count[kind] += 1
    return _Crossing(owner, needed, slot, count)


_LIBM_CALL = re.compile(r"call [^@]*@(?!llvm\.|st\.)([\w.]+)\(")


def _libm_names(op, fmt: dict) -> list[str]:
    """The C library functions an op's lines call (no vector form: lanes wrap them)."""
    return [m.group(1) for line in op.ir for m in _LIBM_CALL.finditer(line.format(
        *[f"%a{i}" for i in range(len(op.args))], r="%r", **fmt))]


def _is_libm(decl: str) -> bool:
    """Whether a declaration is of a C library function (kept scalar in lane mode)."""
    return decl.startswith("declare") and "@llvm." not in decl


def _lane_loop(elems: list[str], sizes: list[int], n_in: int, lanes: int,
               scratch: tuple) -> list[str]:
    """``body`` in lane mode: for each block of ``lanes`` points, copy the inputs into lane
    buffers (element ``k`` of lane ``l`` at ``k * lanes + l``), call ``point`` on them and
    copy the outputs back. In the last, partial block the unused lanes compute on stale (or
    zeroed) inputs and are not stored. The lane buffers and ``point``'s scratch arrays
    (``scratch``: bytes per lane of floats and of booleans) share one arena, on the stack up
    to ``LANE_STACK_BYTES`` and from ``malloc`` above (status 1 when it fails)."""
    width = {"double": 8, "float": 4, "i8": 1}
    offsets, total = [], 0
    for elem, size in zip(elems, sizes):
        offsets.append(total)
        total += -(-max(size, 1) * lanes * width[elem] // 64) * 64
    sf = total
    total += -(-max(scratch[0], 1) * lanes // 64) * 64
    sb = total
    total += max(scratch[1], 1) * lanes
    heap = total > LANE_STACK_BYTES
    lines = body_head(len(elems), "start")
    if heap:
        lines += [
            f"  %raw = call ptr @malloc(i64 {total + 64})",
            "  %none = icmp eq ptr %raw, null",
            "  br i1 %none, label %nomem, label %arena",
            *no_memory("nomem"),
            "arena:",
            "  %raw.i = ptrtoint ptr %raw to i64",
            "  %raw.up = add i64 %raw.i, 63",
            "  %raw.al = and i64 %raw.up, -64",
            "  %raw.sh = sub i64 %raw.al, %raw.i",
            "  %mem = getelementptr i8, ptr %raw, i64 %raw.sh",
        ]
        first = "arena"
    else:
        lines.append(f"  %mem = alloca i8, i64 {total}, align 64")
        first = "start"
    for i, off in enumerate(offsets):
        lines.append(f"  %l{i} = getelementptr inbounds i8, ptr %mem, i64 {off}")
    lines += [f"  %sf = getelementptr inbounds i8, ptr %mem, i64 {sf}",
              f"  %sb = getelementptr inbounds i8, ptr %mem, i64 {sb}"]
    if n_in:  # stale lanes of a partial first block read zeros, not garbage
        end = offsets[n_in] if n_in < len(offsets) else sf
        lines.append(f"  call void @llvm.memset.p0.i64(ptr align 64 %mem, i8 0, i64 {end}, "
                     "i1 false)")
    lines += [
        "  br label %block",
        "block:",
        f"  %j = phi i64 [ 0, %{first} ], [ %j.next, %next ]",
        "  %rest = sub i64 %n, %j",
        f"  %short = icmp slt i64 %rest, {lanes}",
        f"  %m = select i1 %short, i64 %rest, i64 {lanes}",
    ]
    at = "block"
    for i in range(n_in):
        if sizes[i]:
            part, at = _lane_copy(f"g{i}", at, i, elems[i], sizes[i], lanes, gather=True)
            lines += part
    args = ", ".join([f"ptr %l{i}" for i in range(len(elems))] + ["ptr %sf", "ptr %sb"])
    lines.append(f"  call void @point({args})")
    for i in range(n_in, len(elems)):
        if sizes[i]:
            part, at = _lane_copy(f"c{i}", at, i, elems[i], sizes[i], lanes, gather=False)
            lines += part
    lines += [
        "  br label %next",
        "next:",
        f"  %j.next = add nuw nsw i64 %j, {lanes}",
        "  %more = icmp slt i64 %j.next, %n",
        "  br i1 %more, label %block, label %finish, !llvm.loop !0",
        "finish:",
        *(["  call void @free(ptr %raw)"] if heap else []),
        "  br label %done",
        *body_tail(),
        MEMSET,
        *(MALLOC if heap else ()),
        "",
    ]
    return lines


def _lane_copy(tag: str, pred: str, i: int, elem: str, size: int, lanes: int,
               gather: bool) -> tuple[list[str], str]:
    """A loop over the points ``j .. j + m - 1`` copying buffer ``i``'s ``size`` elements
    between the caller's layout (``%b<i>`` at stride ``%s<i>``) and its lane buffer
    ``%l<i>`` (the elements one by one up to ``LANE_UNROLLED_COPY``, else an inner loop);
    entered from block ``pred``, it ends in the block it returns."""
    # input rows longer than the unrolled copies move as square tiles (CPU time a point,
    # benchmarks/peers.py kernels: Rosenbrock n=100's value 315 -> 240 ns, the others level;
    # rows of one or two tiles and a tail measured slower than unrolled copies, and tiles
    # on the way out 25% slower on the 8x8 cart-pendulum Hessian, 8% faster on N-body's)
    tiles = size // lanes if gather and elem in ("double", "float") and \
        size > LANE_UNROLLED_COPY else 0
    lines = [
        f"  %{tag}.full = icmp eq i64 %m, {lanes}",
        f"  br i1 %{tag}.full, label %{tag}.t, label %{tag}.o",
        *_lane_tiles(tag, pred, i, elem, size, lanes),
    ] if tiles else [f"  br label %{tag}.o"]
    lines += [
        f"{tag}.o:",
        f"  %{tag}.l = phi i64 [ 0, %{pred} ], [ %{tag}.ln, %{tag}.oe ]",
        f"  %{tag}.pt = add i64 %j, %{tag}.l",
        f"  %{tag}.off = mul i64 %{tag}.pt, %s{i}",
        f"  %{tag}.row = getelementptr inbounds {elem}, ptr %b{i}, i64 %{tag}.off",
    ]

    def copy(k: str, name: str) -> list[str]:
        src, dst = (f"%{name}.a", f"%{name}.b") if gather else (f"%{name}.b", f"%{name}.a")
        return [
            f"  %{name}.a = getelementptr inbounds {elem}, ptr %{tag}.row, i64 {k}",
            f"  %{name}.kl = mul nuw nsw i64 {k}, {lanes}",
            f"  %{name}.bi = add nuw nsw i64 %{name}.kl, %{tag}.l",
            f"  %{name}.b = getelementptr inbounds {elem}, ptr %l{i}, i64 %{name}.bi",
            f"  %{name}.x = load {elem}, ptr {src}",
            f"  store {elem} %{name}.x, ptr {dst}",
        ]

    if size <= LANE_UNROLLED_COPY:
        for k in range(size):
            lines += copy(str(k), f"{tag}.{k}")
        lines.append(f"  br label %{tag}.oe")
    else:
        lines += [
            f"  br label %{tag}.i",
            f"{tag}.i:",
            f"  %{tag}.k = phi i64 [ 0, %{tag}.o ], [ %{tag}.kn, %{tag}.i ]",
            *copy(f"%{tag}.k", f"{tag}.e"),
            f"  %{tag}.kn = add nuw nsw i64 %{tag}.k, 1",
            f"  %{tag}.ke = icmp eq i64 %{tag}.kn, {size}",
            f"  br i1 %{tag}.ke, label %{tag}.oe, label %{tag}.i",
        ]
    lines += [
        f"{tag}.oe:",
        f"  %{tag}.ln = add nuw nsw i64 %{tag}.l, 1",
        f"  %{tag}.le = icmp eq i64 %{tag}.ln, %m",
        f"  br i1 %{tag}.le, label %{tag}.end, label %{tag}.o",
        f"{tag}.end:",
    ]
    return lines, f"{tag}.end"


def transposed(vectors: list[str], vt: str, lanes: int, tag: str) -> tuple[list[str], list]:
    """IR transposing the ``lanes`` x ``lanes`` block whose rows are ``vectors`` (values of
    vector type ``vt``): ``log2(lanes)`` rounds of shuffles, round ``b`` exchanging blocks of
    ``b`` elements between rows ``b`` apart (row ``i`` keeps its even blocks and takes row
    ``i + b``'s even blocks into its odd places; row ``i + b`` the odd blocks of both). Returns
    the lines and the names of the columns.

    >>> lines, cols = transposed(["%a", "%b"], "<2 x double>", 2, "t")
    >>> lines
    ['  %t.1.0 = shufflevector <2 x double> %a, <2 x double> %b, <2 x i32> <i32 0, i32 2>', \
'  %t.1.1 = shufflevector <2 x double> %a, <2 x double> %b, <2 x i32> <i32 1, i32 3>']
    >>> cols
    ['%t.1.0', '%t.1.1']
    """
    rows, lines, b = list(vectors), [], 1
    while b < lanes:
        low = [j if not j & b else lanes + j - b for j in range(lanes)]
        high = [j + b if not j & b else lanes + j for j in range(lanes)]
        new = list(rows)
        for r in range(lanes):
            if r & b:
                continue
            for out, mask in ((r, low), (r + b, high)):
                new[out] = f"%{tag}.{b}.{out}"
                idx = ", ".join(f"i32 {k}" for k in mask)
                lines.append(f"  {new[out]} = shufflevector {vt} {rows[r]}, {vt} {rows[r + b]}, "
                             f"<{lanes} x i32> <{idx}>")
        rows, b = new, 2 * b
    return lines, rows


def _lane_tiles(tag: str, pred: str, i: int, elem: str, size: int, lanes: int) -> list[str]:
    """The copy of a full block of ``lanes`` points from input ``i``'s rows into its lane
    buffer as square tiles of ``lanes`` elements: ``lanes`` vector loads, a transpose in
    registers (:func:`transposed`) and ``lanes`` vector stores per tile, instead of one
    scalar load and store per element; the last ``size % lanes`` elements one by one. Ends
    by branching to ``<tag>.end``."""
    vt, width = f"<{lanes} x {elem}>", {"double": 8, "float": 4}[elem]
    full = size // lanes * lanes
    lines = [
        f"{tag}.t:",
        f"  %{tag}.tk = phi i64 [ 0, %{pred} ], [ %{tag}.tkn, %{tag}.t ]",
        f"  %{tag}.lk = mul nuw nsw i64 %{tag}.tk, {lanes}",
    ]
    rows, cols = [], []
    for r in range(lanes):
        lines += [f"  %{tag}.p{r} = add i64 %j, {r}",
                  f"  %{tag}.o{r} = mul i64 %{tag}.p{r}, %s{i}",
                  f"  %{tag}.q{r} = add i64 %{tag}.o{r}, %{tag}.tk",
                  f"  %{tag}.r{r} = getelementptr inbounds {elem}, ptr %b{i}, i64 %{tag}.q{r}",
                  f"  %{tag}.w{r} = add nuw nsw i64 %{tag}.lk, {r * lanes}",
                  f"  %{tag}.u{r} = getelementptr inbounds {elem}, ptr %l{i}, i64 %{tag}.w{r}"]
        rows.append(f"%{tag}.r{r}")
        cols.append(f"%{tag}.u{r}")
    for r in range(lanes):
        lines.append(f"  %{tag}.v{r} = load {vt}, ptr {rows[r]}, align {width}")
    moved, out = transposed([f"%{tag}.v{r}" for r in range(lanes)], vt, lanes, f"{tag}.s")
    lines += moved
    for r in range(lanes):
        lines.append(f"  store {vt} {out[r]}, ptr {cols[r]}, align {width}")
    lines += [
        f"  %{tag}.tkn = add nuw nsw i64 %{tag}.tk, {lanes}",
        f"  %{tag}.te = icmp eq i64 %{tag}.tkn, {full}",
        f"  br i1 %{tag}.te, label %{tag}.x, label %{tag}.t",
        f"{tag}.x:",
    ]
    if full == size:
        return lines + [f"  br label %{tag}.end"]
    lines += [
        f"  br label %{tag}.y",
        f"{tag}.y:",
        f"  %{tag}.yl = phi i64 [ 0, %{tag}.x ], [ %{tag}.yn, %{tag}.y ]",
        f"  %{tag}.yp = add i64 %j, %{tag}.yl",
        f"  %{tag}.yo = mul i64 %{tag}.yp, %s{i}",
        f"  %{tag}.yr = getelementptr inbounds {elem}, ptr %b{i}, i64 %{tag}.yo",
    ]
    for k in range(full, size):
        a, c = f"%{tag}.y{k}a", f"%{tag}.y{k}b"
        lines += [f"  {a} = getelementptr inbounds {elem}, ptr %{tag}.yr, i64 {k}",
                  f"  %{tag}.y{k}i = add nuw nsw i64 %{tag}.yl, {k * lanes}",
                  f"  {c} = getelementptr inbounds {elem}, ptr %l{i}, i64 %{tag}.y{k}i"]
        lines += [f"  %{tag}.y{k}x = load {elem}, ptr {a}",
                  f"  store {elem} %{tag}.y{k}x, ptr {c}"]
    return lines + [
        f"  %{tag}.yn = add nuw nsw i64 %{tag}.yl, 1",
        f"  %{tag}.ye = icmp eq i64 %{tag}.yn, {lanes}",
        f"  br i1 %{tag}.ye, label %{tag}.end, label %{tag}.y",
    ]

"""Loop plans: large tensor programs as loop nests around small straight-line bodies.

A :class:`LoopPlan` is a list of :class:`Block` steps over buffers (the arguments, the
outputs, temporaries, constants). A block runs its ``body`` -- a one-point :class:`Plan`, the
lowered template of an elementwise op, one slice of a softmax, one step of a sum -- once for
every index of its ``space``, reading and writing elements at affine addresses
(:class:`Access`: an offset, a stride per loop dimension, and the offsets of the body's core
elements). Sums, products, extrema and matrix products are blocks whose output is also an
input (an accumulation: ``out = out + a * b`` over ``(i, k, j)``), so each result element
accumulates its terms in order, as the element DAG's definitions add them.

The LLVM module has one function per block (``noinline``: each is optimised on its own, so
compile time grows with the number of blocks, not the size of the tensors), a ``program``
calling them in order for one point, and the same ``body``/entry points as straight-line
kernels (:mod:`~symtape.codegen.ir`): ``body`` loops over the points of a batch and runs
``program`` on each, with the temporaries in one arena (stack or ``malloc``, as lane mode).
A plan over chunks of points (``LoopPlan.points``) runs ``program`` once per chunk instead:
its blocks loop over the chunk's points themselves (``Block.points``: the first extent is
the run-time number of points in the chunk), whole chunks of dense arrays are read and
written in place, and the last chunk, or strided arguments, go through staging areas.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from symtape.codegen.ir import (
    MALLOC, MEMCPY, MEMSET, body_head, body_tail, float_literal, formats, header, module,
    no_memory,
)
from symtape.codegen import jit
from symtape.codegen.kernel import LANE_STACK_BYTES, LOOP_VECTORIZE_MAX_ACCESSES, Body
from symtape.codegen.plan import ArgLayout, OutLayout, Plan
from symtape.codegen.routines import Routine

__all__ = ["Buffer", "Access", "Block", "LoopPlan", "render", "POINT_ALIGN"]

#: A chunk's points are run in groups of this many (a short last chunk is padded up to it):
#: a matrix product over points updates that many points' rows per step.
POINT_ALIGN = 4


class Buffer(NamedTuple):
    """``kind``: ``'input'`` / ``'output'`` (``index``: the argument), ``'temp'``,
    ``'const'`` (``values``: its elements) or ``'indices'`` (``values``: element offsets an
    indexed :class:`Access` adds, held as 32-bit integers); ``size`` elements, bytes when
    ``boolean``."""

    kind: str
    index: int
    size: int
    boolean: bool = False
    values: tuple = ()


class Access(NamedTuple):
    """Element ``c`` of the body's argument at iteration ``idx`` of the space is element
    ``offset + sum(idx * strides) + core[c]`` of ``buffer``; an indexed access (``index``:
    ``(buffer, offset, strides)`` of an ``'indices'`` buffer ``I``) adds
    ``I[offset' + sum(idx * strides')]`` to that: a gather or scatter by an index array,
    one loop whatever the pattern."""

    buffer: int
    offset: int
    strides: tuple
    core: tuple = (0,)
    index: tuple = ()


class Block(NamedTuple):
    """``body`` for every index of ``space`` (a one-point :class:`Plan`, or a
    :class:`~symtape.codegen.routines.Routine` taking the accesses' addresses as its
    pointers, ``core`` listing the elements it reaches); ``accumulate``: an output is read
    as well.
    ``points``: in a plan over chunks of points, the first dimension runs over the chunk's
    points (``space[0]`` is the chunk size), ``points`` of them per iteration; at run time
    its extent is the number of points in the chunk (a multiple of :data:`POINT_ALIGN`)
    divided by ``points``. ``count``: the dimension whose extent is the number of real
    points of the chunk (padding excluded), one a step: a sum over the points
    (:attr:`LoopPlan.totals`)."""

    space: tuple
    body: Plan | Routine
    ins: tuple
    outs: tuple
    accumulate: bool = False
    points: int = 0
    contract: bool = False  # multiplies and adds may fuse (one rounding: a matrix product)
    count: int = -1  # this dimension runs over the chunk's real points, one per iteration
    runs: int = -1  # this (inner) dimension runs over the chunk's points (padded), run time

    @property
    def buffers(self) -> list:
        """The buffers the block's function takes, in order: those its accesses read and
        write and their index arrays."""
        accs = self.ins + self.outs
        return sorted({a.buffer for a in accs} | {a.index[0] for a in accs if a.index})


@dataclass(frozen=True)
class LoopPlan:
    """The buffers, the blocks in order, and the layout of the arguments and outputs (the
    same :class:`ArgLayout`/:class:`OutLayout` as a straight-line plan's, without names and
    element references: the outputs are whole buffers)."""

    buffers: tuple
    blocks: tuple
    inputs: tuple
    outputs: tuple
    threads: int = 1  # threads a large block's outermost loop is split across
    points: int = 0  # the chunk size of a plan over chunks of points (0: one point)
    shared: tuple = ()  # per argument: read once for all points (no batch dimensions)
    totals: tuple = ()  # per output: '' (one per point), or 'sum'/'max'/'min' over all
    # points: no batch dimensions, initialised by the caller, accumulated chunk by chunk

    @property
    def n_ops(self) -> int:
        """Operations per point (a cost estimate)."""
        total = sum(_work(b) for b in self.blocks)
        return -(-total // self.points) if self.points else total

    @property
    def arena(self) -> tuple:
        """``(offsets, bytes)``: where each temporary lives in the arena (None for other
        buffers); temporaries whose lives do not overlap share space (the prologue's live
        throughout)."""
        return _allocate(self)

    @property
    def prologue(self) -> tuple:
        """The blocks that depend on no point (computed from constants, index arrays and
        arguments shared by all points only, writing temporaries nothing else writes): one
        run per call, before the points or chunks, instead of one per point or chunk (the
        one-hot seeds of a coloured sweep and what is computed from them)."""
        return _prologue(self)

    @property
    def order(self) -> tuple:
        """The blocks in the order they run: the prologue's, then the others."""
        first = self.prologue
        return first + tuple(k for k in range(len(self.blocks)) if k not in first)


def layouts(inputs: list, outputs: list) -> tuple:
    """``(ArgLayout..., ), (OutLayout..., )`` of the given ``(shape, boolean)`` pairs."""
    return (tuple(ArgLayout(tuple(s), ()) for s in inputs),
            tuple(OutLayout(tuple(s), (), bool(b)) for s, b in outputs))


# --------------------------------------------------------------------------------------------
# The arena: temporaries packed by lifetime
# --------------------------------------------------------------------------------------------


def _prologue(plan: LoopPlan) -> tuple:
    shared = set()  # buffers no point changes: constants, shared arguments, what they give
    for b, buf in enumerate(plan.buffers):
        if buf.kind in ("const", "indices") or (buf.kind == "input" and buf.index < len(
                plan.shared) and plan.shared[buf.index]):
            shared.add(b)
    writers: dict = {}
    for k, block in enumerate(plan.blocks):
        for acc in block.outs:
            writers.setdefault(acc.buffer, []).append(k)
    out: list = []
    for k, block in enumerate(plan.blocks):
        if block.points or block.runs >= 0 or block.count >= 0:
            continue
        reads = {a.buffer for a in block.ins} | {a.index[0] for a in block.ins + block.outs
                                                  if a.index}
        wrote = {a.buffer for a in block.outs}
        before = all(plan.buffers[b].kind == "temp" and all(w in out for w in writers[b]
                                                             if w < k) for b in wrote)
        if before and reads - wrote <= shared:  # (what it reads of its own: the prologue's)
            out.append(k)
            shared |= wrote
    # to a fixed point: a temporary a block outside the prologue writes too is not the
    # prologue's, and neither is a block writing one or reading a temporary it does not make
    while True:
        late = {a.buffer for k, block in enumerate(plan.blocks) if k not in out
                for a in block.outs}
        made = {a.buffer for k in out for a in plan.blocks[k].outs} - late
        keep = [k for k in out if not ({a.buffer for a in plan.blocks[k].outs} & late)
                and {a.buffer for a in plan.blocks[k].ins
                     if plan.buffers[a.buffer].kind == "temp"} <= made]
        if keep == out:
            return tuple(out)
        out = keep


def _allocate(plan: LoopPlan) -> tuple:
    first: dict = {}
    last: dict = {}
    order = plan.order
    kept = {a.buffer for k in plan.prologue for a in plan.blocks[k].outs}
    for step, k in enumerate(order):
        for acc in plan.blocks[k].ins + plan.blocks[k].outs:
            if plan.buffers[acc.buffer].kind == "temp":
                first.setdefault(acc.buffer, step)
                last[acc.buffer] = len(order) if acc.buffer in kept else step
    width = [1 if b.boolean else 8 for b in plan.buffers]
    offsets: list = [None] * len(plan.buffers)
    free: list = []  # (offset, bytes) holes
    top = 0
    ending: dict = {}
    for buf, k in last.items():
        ending.setdefault(k, []).append(buf)
    for k in range(len(plan.blocks)):
        for buf in sorted(b for b, f in first.items() if f == k):
            need = -(-plan.buffers[buf].size * width[buf] // 64) * 64
            hole = next((i for i, (o, n) in enumerate(free) if n >= need), None)
            if hole is None:
                offsets[buf] = top
                top += need
            else:
                o, n = free.pop(hole)
                offsets[buf] = o
                if n > need:
                    free.append((o + need, n - need))
        for buf in ending.get(k, ()):
            need = -(-plan.buffers[buf].size * width[buf] // 64) * 64
            free.append((offsets[buf], need))
        free.sort()
    return tuple(offsets), top


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def render(plan: LoopPlan, name: str, dtype: str = "float64", fastmath: bool = False) -> str:
    """The LLVM IR module of ``plan``, with the entry points of :func:`~symtape.codegen.ir.entries`.

    >>> import numpy as np
    >>> from symtape.element import graph
    >>> from symtape.codegen.plan import build_plan
    >>> x = graph.Leaf.new("x")
    >>> body = build_plan([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)])
    >>> ins, outs = layouts([(3,)], [((3,), False)])
    >>> lp = LoopPlan((Buffer("input", 0, 3), Buffer("output", 0, 3)),
    ...               (Block((3,), body, (Access(0, 0, (1,)),), (Access(1, 0, (1,)),)),),
    ...               ins, outs)
    >>> "fmul double" in render(lp, "square")
    True
    """
    fmt, size = formats(dtype, fastmath)
    t = fmt["t"]
    decls: set = set()
    lines: list = []
    first: dict = {}  # a block's function, its buffers renamed in order: the block defining it
    calls: list = []  # per block: the block whose function it calls
    split = splits(plan)
    pooled = any(len(c) > 1 for c in split)
    for k, block in enumerate(plan.blocks):
        chunks = split[k]
        text = _block(plan, k, block, fmt, size, decls, len(chunks) > 1)
        same = first.setdefault((_shape_of(text, k), tuple(chunks)), k)
        calls.append(same)
        if same == k:
            lines += text
            if len(chunks) > 1:
                lines += _parallel(plan, k, block, chunks)
                decls.update(_pool_decls())
    offsets, arena = plan.arena
    first = plan.prologue
    lines += _program(plan, offsets, calls, [k for k in range(len(plan.blocks))
                                             if k not in first], split, pooled)
    if first:
        lines += _program(plan, offsets, calls, first, split, pooled, "prologue")
    if pooled:
        lines += _pool_functions(plan.threads - 1)
    if plan.points:
        lines += _chunk_loop(plan, arena, t, size, pooled)
        decls.update(_MEMORY)
    else:
        lines += _point_loop(plan, arena, t, pooled)
    consts = [_constant(i, b, t, dtype) for i, b in enumerate(plan.buffers)
              if b.kind in ("const", "indices")]
    head = [header("loop kernel", name, plan, f", {len(plan.blocks)} blocks")]
    decls.update(MALLOC)
    slot = [f"@arena.slots = internal global [{ARENA_SLOTS} x ptr] zeroinitializer, align 8"]
    return module(head, sorted(decls) + slot + consts + lines, plan, name, after=_release(name))


#: A plan whose blocks to split come to this many operations (iterations times body size)
#: starts helper threads for each call of its program (30-40 us to start and join, and
#: more to wake an idle core: with them started for every block, a 128x784 by 784x128
#: product of floats, 0.21 ms on one thread, took 0.30-0.45 ms on two; 256x784x256 0.71 ms
#: on one against 0.83 on two; started once a call, the MLP training step's two such
#: products and its update, 0.51 ms on one thread, took 0.44-0.46 ms; a 2-core Xeon) ...
PARALLEL_WORK = 1 << 26
#: ... and then splits every block of at least this many operations across them (a
#: hand-over to a running helper costs about a microsecond; the seed CNN's float32 step:
#: 23.7 ms from 2^21, 20.3 ms from 2^18, 19.5 ms from 2^16).
POOL_WORK = 1 << 16
#: Blocks of fewer operations than this are optimised for size (``optsize``): LLVM's loop
#: passes then do little on them, which takes the compile time of a many-block plan down
#: 2-3x (an 8-16-16-1 MLP's Hessian over chunks of points: 4.0 s to 2.0 s) at no measured
#: cost, the large blocks (matrix products, big elementwise loops) being where time goes.
SMALL_BLOCK_WORK = 1 << 16
#: Matrix products and convolutions fuse each multiply-add into one FMA, one rounding per
#: term as BLAS's kernels do (docs/tensorflow.md, "One rule for values"); False rounds each
#: product as eager values do (a term that overflows is then inf, as in numpy).
CONTRACT_PRODUCTS = True

_PTHREAD = ("declare i32 @pthread_create(ptr, ptr, ptr, ptr)",
            "declare i32 @pthread_join(i64, ptr)")


def splits(plan: LoopPlan) -> list:
    """Per block, ``[(lo, hi)]`` ranges of its outermost index, one per thread: several only
    when the blocks the plan could split come to at least :data:`PARALLEL_WORK` operations
    (its program then starts helper threads, :func:`_pool_functions`), for each block of at
    least :data:`POOL_WORK` whose iterations of that index write disjoint elements."""
    ranges = [_ranges(plan, block, POOL_WORK) for block in plan.blocks]
    if sum(_work(b) for r, b in zip(ranges, plan.blocks) if len(r) > 1) < PARALLEL_WORK:
        return [[(0, b.space[0])] if b.space else [] for b in plan.blocks]
    return ranges


def _work(block: Block) -> int:
    return math.prod(block.space) * max(1, block.body.n_ops)


def _ranges(plan: LoopPlan, block: Block, least: int) -> list:
    if plan.threads <= 1 or not block.space or block.space[0] < 2 or block.points:
        return [(0, block.space[0])] if block.space else []
    if _work(block) < least or not all(_disjoint(acc, block.space) for acc in block.outs):
        return [(0, block.space[0])]
    n = block.space[0]
    step = -(-n // min(plan.threads, n))
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


#: Above this many elements written per outermost iteration (times that loop's length),
#: :func:`_disjoint` does not look and the block runs on one thread.
DISJOINT_CHECK_LIMIT = 1 << 22


def _disjoint(acc: Access, space: tuple) -> bool:
    """Whether different iterations of the outermost loop write different elements through
    ``acc``: the elements one iteration writes, shifted by every multiple of the outermost
    stride the loop reaches, never meet themselves."""
    s0, n0 = acc.strides[0], space[0]
    if s0 == 0 or acc.index:  # (an indexed write may meet any element)
        return False
    lo, hi = min(acc.core), max(acc.core)
    for stride, n in zip(acc.strides[1:], space[1:]):
        lo, hi = lo + min(0, stride * (n - 1)), hi + max(0, stride * (n - 1))
    if hi - lo < abs(s0):  # the common case: each iteration writes its own slab
        return True
    rest = np.asarray(acc.core, dtype=np.int64)
    for stride, n in zip(acc.strides[1:], space[1:]):
        if stride:
            rest = (rest[:, None] + stride * np.arange(n, dtype=np.int64)[None, :]).ravel()
            if rest.size * n0 > DISJOINT_CHECK_LIMIT:
                return False
    rest = np.unique(rest)
    span = int(rest[-1] - rest[0])
    return all(not np.isin(rest + k * s0, rest, assume_unique=True).any()
               for k in range(1, min(n0, span // abs(s0) + 1)))


def _parallel(plan: LoopPlan, k: int, block: Block, chunks: list) -> list:
    """``@b<k>.par``: the block's first range on the calling thread, the others handed to the
    program's helper threads (:func:`_pool_functions`; ``@b<k>.thread`` unpacks one); a
    range no helper took (one did not start) runs here too."""
    bufs = block.buffers
    nb = len(bufs)
    helpers = plan.threads - 1
    args = ", ".join(f"ptr %B{b}" for b in bufs)
    struct = f"{{ {', '.join(['ptr'] * nb + ['i64', 'i64'])} }}"
    pool = _pool_type(helpers)
    out = [f"define internal void @b{k}.thread(ptr %a) nounwind {{", "entry:"]
    for j in range(nb + 2):
        kind = "ptr" if j < nb else "i64"
        out += [f"  %f{j}.p = getelementptr inbounds {struct}, ptr %a, i32 0, i32 {j}",
                f"  %f{j} = load {kind}, ptr %f{j}.p"]
    fields = ", ".join([f"ptr %f{j}" for j in range(nb)] + [f"i64 %f{nb}", f"i64 %f{nb + 1}"])
    out += [f"  call void @b{k}({fields})", "  ret void", "}", ""]
    out += [f"define internal void @b{k}.par({', '.join(f'ptr noalias %B{b}' for b in bufs)}, "
            "ptr %pool) noinline nounwind {", "entry:",
            f"  %n.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 4",
            "  %n = load i64, ptr %n.p"]
    for t in range(1, helpers + 1):
        out += [f"  %slot{t} = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 5, "
                f"i64 {t - 1}"]
        if t >= len(chunks):
            out.append(f"  store ptr null, ptr %slot{t}")
            continue
        lo, hi = chunks[t]
        out.append(f"  %a{t} = alloca {struct}")
        for j, b in enumerate(bufs):
            out += [f"  %a{t}.{j} = getelementptr inbounds {struct}, ptr %a{t}, i32 0, i32 {j}",
                    f"  store ptr %B{b}, ptr %a{t}.{j}"]
        for j, v in ((nb, lo), (nb + 1, hi)):
            out += [f"  %a{t}.{j} = getelementptr inbounds {struct}, ptr %a{t}, i32 0, i32 {j}",
                    f"  store i64 {v}, ptr %a{t}.{j}"]
        out.append(f"  store ptr %a{t}, ptr %slot{t}")
    out += [f"  %fn.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 2",
            f"  store ptr @b{k}.thread, ptr %fn.p",
            "  call void @pool.run(ptr %pool)"]
    lo, hi = chunks[0]
    out.append(f"  call void @b{k}({args}, i64 {lo}, i64 {hi})")
    for t, (lo, hi) in enumerate(chunks[1:], 1):  # (ranges of helpers that did not start)
        out += [f"  %mine{t} = icmp uge i64 {t - 1}, %n",
                f"  br i1 %mine{t}, label %self{t}, label %next{t}",
                f"self{t}:", f"  call void @b{k}({args}, i64 {lo}, i64 {hi})",
                f"  br label %next{t}", f"next{t}:"]
    return out + ["  call void @pool.wait(ptr %pool)", "  ret void", "}", ""]


def _pool_type(helpers: int) -> str:
    """The helper pool of a program call: the round handed out (``gen``), the rounds
    finished summed over the helpers (``done``), the round's function, ``quit``, the
    helpers started, each one's argument, each one's thread id."""
    return f"{{ i64, i64, ptr, i64, i64, [{helpers} x ptr], [{helpers} x i64] }}"


#: A helper waiting for its next range spins this many times (``pause``) before it yields
#: the core between looks (``sched_yield``): a range handed over while it spins starts
#: within a microsecond, where waking a sleeping thread takes tens.
POOL_SPINS = 1 << 16


def _pool_decls() -> tuple:
    pause = ("declare void @llvm.x86.sse2.pause()",) if _x86() else ()
    return _PTHREAD + ("declare i32 @sched_yield()",) + pause


def _x86() -> bool:
    return jit.host().triple.startswith(("x86_64", "amd64"))


def _pool_functions(helpers: int) -> list:
    """The helper pool of a program call (the blocks split across threads): ``@pool.start``
    starts ``helpers`` threads once per call (a thread costs 30-40 us to start and join, a
    hand-over through the pool about a microsecond), each waiting (:data:`POOL_SPINS`
    spins, then yielding) for the next round of ``gen``, running the round's function on
    its argument (null: none this round) and counting the round in ``done``;
    ``@pool.run`` hands a round out (its arguments stored before), ``@pool.wait`` waits
    for the helpers started to finish it, ``@pool.stop`` ends them."""
    pool = _pool_type(helpers)
    pause = "  call void @llvm.x86.sse2.pause()" if _x86() else "  fence seq_cst"
    out = ["define internal ptr @pool.worker(ptr %h) nounwind {", "entry:",
           "  %pool.p = getelementptr inbounds { ptr, i64 }, ptr %h, i32 0, i32 0",
           "  %pool = load ptr, ptr %pool.p",
           "  %i.p = getelementptr inbounds { ptr, i64 }, ptr %h, i32 0, i32 1",
           "  %i = load i64, ptr %i.p",
           f"  %gen = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 0",
           f"  %done = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 1",
           f"  %fn.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 2",
           f"  %quit = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 3",
           f"  %arg.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 5, i64 %i",
           "  br label %wait",
           "wait:", "  %seen = phi i64 [ 0, %entry ], [ %g, %ran ]", "  br label %spin",
           "spin:", "  %spins = phi i64 [ 0, %wait ], [ %more, %pause ], [ %more, %yield ]",
           "  %g = load atomic i64, ptr %gen acquire, align 8",
           "  %new = icmp ne i64 %g, %seen",
           "  br i1 %new, label %got, label %idle",
           "idle:", "  %more = add i64 %spins, 1",
           f"  %long = icmp ugt i64 %spins, {POOL_SPINS}",
           "  br i1 %long, label %yield, label %pause",
           "pause:", pause, "  br label %spin",
           "yield:", "  %y = call i32 @sched_yield()", "  br label %spin",
           "got:", "  %q = load atomic i64, ptr %quit acquire, align 8",
           "  %stop = icmp ne i64 %q, 0",
           "  br i1 %stop, label %exit, label %work",
           "work:", "  %fn = load ptr, ptr %fn.p", "  %arg = load ptr, ptr %arg.p",
           "  %has = icmp ne ptr %arg, null",
           "  br i1 %has, label %call, label %ran",
           "call:", "  call void %fn(ptr %arg)", "  br label %ran",
           "ran:", "  %d = atomicrmw add ptr %done, i64 1 release", "  br label %wait",
           "exit:", "  ret ptr null", "}", ""]
    out += ["define internal void @pool.start(ptr %pool, ptr %hs) nounwind {", "entry:"]
    for f in (0, 1, 3, 4):  # gen, done, quit, the helpers started
        out += [f"  %z{f} = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 {f}",
                f"  store i64 0, ptr %z{f}"]
    for t in range(helpers):  # started in order; the first that fails ends the starting
        out += [f"  %h{t} = getelementptr inbounds {{ ptr, i64 }}, ptr %hs, i64 {t}",
                f"  %h{t}.0 = getelementptr inbounds {{ ptr, i64 }}, ptr %h{t}, i32 0, i32 0",
                f"  store ptr %pool, ptr %h{t}.0",
                f"  %h{t}.1 = getelementptr inbounds {{ ptr, i64 }}, ptr %h{t}, i32 0, i32 1",
                f"  store i64 {t}, ptr %h{t}.1",
                f"  %tid{t} = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 6, i64 {t}",
                f"  %rc{t} = call i32 @pthread_create(ptr %tid{t}, ptr null, "
                f"ptr @pool.worker, ptr %h{t})",
                f"  %ok{t} = icmp eq i32 %rc{t}, 0",
                f"  br i1 %ok{t}, label %up{t}, label %end",
                f"up{t}:", f"  store i64 {t + 1}, ptr %z4"]
    out += ["  br label %end", "end:", "  ret void", "}", ""]
    out += ["define internal void @pool.run(ptr %pool) nounwind {", "entry:",
            f"  %gen = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 0",
            "  %g = atomicrmw add ptr %gen, i64 1 release", "  ret void", "}", ""]
    out += ["define internal void @pool.wait(ptr %pool) nounwind {", "entry:",
            f"  %gen = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 0",
            f"  %done = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 1",
            f"  %n.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 4",
            "  %n = load i64, ptr %n.p",
            "  %g = load i64, ptr %gen",  # (this thread's own last store)
            "  %want = mul i64 %g, %n", "  br label %spin",
            "spin:", "  %d = load atomic i64, ptr %done acquire, align 8",
            "  %ready = icmp uge i64 %d, %want",
            "  br i1 %ready, label %out, label %pause",
            "pause:", pause, "  br label %spin",
            "out:", "  ret void", "}", ""]
    out += ["define internal void @pool.stop(ptr %pool) nounwind {", "entry:",
            f"  %quit = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 3",
            "  store atomic i64 1, ptr %quit release, align 8",
            "  call void @pool.run(ptr %pool)",
            f"  %n.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 4",
            "  %n = load i64, ptr %n.p"]
    for t in range(helpers):
        out += [f"  %has{t} = icmp ult i64 {t}, %n",
                f"  br i1 %has{t}, label %join{t}, label %end",
                f"join{t}:",
                f"  %tid{t}.p = getelementptr inbounds {pool}, ptr %pool, i32 0, i32 6, i64 {t}",
                f"  %tid{t} = load i64, ptr %tid{t}.p",
                f"  %j{t} = call i32 @pthread_join(i64 %tid{t}, ptr null)"]
    out += ["  br label %end", "end:", "  ret void", "}", ""]
    return out


def _elem(buf: Buffer, t: str) -> str:
    return "i8" if buf.boolean else t


def _constant(i: int, buf: Buffer, t: str, dtype: str) -> str:
    if buf.kind == "indices":
        items = ", ".join(f"i32 {int(v)}" for v in buf.values)
        return f"@c{i} = private unnamed_addr constant [{buf.size} x i32] [{items}], align 64"
    elem = "i8" if buf.boolean else t
    if not any(buf.values):  # empty, or all zeros (of either sign: a sign is a value)
        if all(str(v)[0] != "-" for v in buf.values):
            return (f"@c{i} = private unnamed_addr constant [{buf.size} x {elem}] "
                    "zeroinitializer, align 64")
    if buf.boolean:
        items = ", ".join(f"i8 {int(bool(v))}" for v in buf.values)
        return f"@c{i} = private unnamed_addr constant [{buf.size} x i8] [{items}], align 64"
    values = np.asarray(buf.values, dtype=np.float64)
    # each distinct value written once (one-hot seeds: 10^5 elements, two values); the
    # sign of a zero is kept apart (-0.0 == 0.0 as numbers)
    keys = values.view(np.int64)
    distinct, where = np.unique(keys, return_inverse=True)
    texts = np.array([f"{t} {float_literal(float(v), dtype)}"
                      for v in distinct.view(np.float64)], dtype=object)
    items = ", ".join(texts[where.reshape(-1)].tolist())
    return f"@c{i} = private unnamed_addr constant [{buf.size} x {t}] [{items}], align 64"


def wide_registers() -> bool:
    """Whether the host has AVX-512's 32 registers of 512 bits. Matrix-product blocks then
    ask LLVM for 512-bit vectors: the planner's register tile (8 rows of two such vectors,
    ``ops.contraction.matmul_rows``/``matmul_cols``) is 16 of them, but 32 of the 256-bit
    vectors LLVM prefers on such CPUs (AMD Zen 4, Intel Xeons), and it spilled in the inner
    loop (a 128x784 by 784x128 product of doubles: 1.01 -> 0.82 ms of CPU on a Zen 4; of
    floats 0.30 -> 0.22 ms on a Xeon).

    >>> isinstance(wide_registers(), bool)
    True
    """
    return "+avx512f" in jit.features().split(",")


def _block(plan: LoopPlan, k: int, block: Block, fmt: dict, size: int, decls: set,
           split: bool) -> list:
    """``@b<k>(ptr %B<buffer>...)``: the loop nest over ``block.space`` around its body."""
    t = fmt["t"]
    accs = block.ins + block.outs
    bufs = block.buffers
    in_bool = tuple(plan.buffers[a.buffer].boolean for a in block.ins)
    if block.contract and CONTRACT_PRODUCTS and not fmt["fm"]:
        fmt = dict(fmt, fm="contract ")
    if isinstance(block.body, Routine):  # a whole-matrix routine at each index
        point, more = block.body.ir(f"b{k}.point", t)
        decls.update(more)
    else:
        emitter = Body(block.body, fmt, size, offsets=tuple(a.core for a in accs),
                       in_bool=in_bool)
        # a body of many loads and stores (an unrolled node) stays a call: the loop passes
        # analyse every access of a loop body against every other (seconds at a thousand)
        inline = sum(len(a.core) for a in accs) <= LOOP_VECTORIZE_MAX_ACCESSES
        point = emitter.function(f"b{k}.point", noalias=not block.accumulate, inline=inline)
        decls.update(d.format(**fmt) for d in emitter.decls)
    # distinct buffers never overlap (live temporaries have disjoint places in the arena);
    # only the point body of an accumulation reads and writes through one pointer
    params = ", ".join(f"ptr noalias %B{b}" for b in bufs)
    dims = len(block.space)
    # split: the outermost range is given, [%lo, %hi)
    if split:
        params += ", i64 %lo, i64 %hi"
    if block.points:  # the first extent is the chunk's number of points / block.points
        params += ", i64 %np"
    if block.count >= 0:  # that extent is the chunk's number of real points
        params += ", i64 %nc"
    if block.runs >= 0 and not block.points:  # that extent is the chunk's points (> 0)
        params += ", i64 %np"
    small = "" if _work(block) >= SMALL_BLOCK_WORK else " optsize"
    if block.contract and wide_registers():
        small += ' "prefer-vector-width"="512"'
    out = point + [f"define internal void @b{k}({params}) noinline nounwind{small} {{",
                   "entry:"]
    if math.prod(block.space) == 0:
        return out + ["  ret void", "}", ""]
    if block.points:
        out += [f"  %np.d = udiv i64 %np, {block.points}",
                "  %np.z = icmp eq i64 %np.d, 0",
                "  br i1 %np.z, label %exit, label %go", "go:"]
    elif block.count >= 0:
        out += ["  %nc.z = icmp eq i64 %nc, 0",
                "  br i1 %nc.z, label %exit, label %go", "go:"]
    idx = [f"%i{d}" for d in range(dims)]
    prev = "go" if block.points or block.count >= 0 else "entry"
    for d in range(dims):
        start = "%lo" if split and d == 0 else "0"
        out += [f"  br label %L{d}", f"L{d}:",
                f"  %i{d} = phi i64 [ {start}, %{prev} ], [ %i{d}.n, %E{d} ]"]
        prev = f"L{d}"
    ptrs = []
    for a_i, acc in enumerate(accs):
        elem = _elem(plan.buffers[acc.buffer], t)
        terms = [(s, i) for s, i in zip(acc.strides, idx) if s != 0]
        cur = str(acc.offset)
        for j, (s, i) in enumerate(terms):
            out.append(f"  %a{a_i}.m{j} = mul nsw i64 {i}, {s}")
            out.append(f"  %a{a_i}.s{j} = add nsw i64 {cur}, %a{a_i}.m{j}")
            cur = f"%a{a_i}.s{j}"
        if acc.index:  # plus the offset the index array holds at this iteration
            ibuf, ioff, istrides = acc.index
            at = str(ioff)
            for j, (s, i) in enumerate((s, i) for s, i in zip(istrides, idx) if s != 0):
                out += [f"  %a{a_i}.im{j} = mul nsw i64 {i}, {s}",
                        f"  %a{a_i}.is{j} = add nsw i64 {at}, %a{a_i}.im{j}"]
                at = f"%a{a_i}.is{j}"
            out += [f"  %a{a_i}.ip = getelementptr inbounds i32, ptr %B{ibuf}, i64 {at}",
                    f"  %a{a_i}.iv = load i32, ptr %a{a_i}.ip",
                    f"  %a{a_i}.ix = sext i32 %a{a_i}.iv to i64",
                    f"  %a{a_i}.at = add nsw i64 {cur}, %a{a_i}.ix"]
            cur = f"%a{a_i}.at"
        out.append(f"  %p{a_i} = getelementptr inbounds {elem}, ptr %B{acc.buffer}, i64 {cur}")
        ptrs.append(f"ptr %p{a_i}")
    out.append(f"  call void @b{k}.point({', '.join(ptrs)})")
    for d in reversed(range(dims)):
        nxt = "exit" if d == 0 else f"E{d - 1}"
        out += [f"  br label %E{d}", f"E{d}:",
                f"  %i{d}.n = add nuw nsw i64 %i{d}, 1",
                f"  %i{d}.c = icmp eq i64 %i{d}.n, {_extent(block, d, split)}",
                f"  br i1 %i{d}.c, label %{nxt}, label %L{d}"]
    if dims == 0:
        out.append("  br label %exit")
    return out + ["exit:", "  ret void", "}", ""]


def _extent(block: Block, d: int, split: bool) -> str:
    if d == 0 and split:
        return "%hi"
    if d == 0 and block.points:
        return "%np.d"
    if d == block.count:
        return "%nc"
    if d == block.runs:
        return "%np"
    return str(block.space[d])


#: Arenas kept between calls: one per thread calling at once (the runtime splits a batch
#: across threads), up to this many.
ARENA_SLOTS = 8


def _slot(k: int, name: str) -> str:
    return (f"  %{name} = getelementptr inbounds [{ARENA_SLOTS} x ptr], ptr @arena.slots, "
            f"i64 0, i64 {k}")


def _slot_tries(prefix: str, first: str, attempt, hit: str, miss: str) -> tuple:
    """``(lines, labels)``: IR trying the slots of ``@arena.slots`` in turn, each its own
    block (the first, ``first``, is the current one): ``attempt(k)`` gives the lines for
    slot ``k`` (its address in ``%{prefix}.slot.{k}``) and the condition on which they
    succeeded, branching to ``hit``; after the last slot, to ``miss``."""
    out, labels = [], []
    for k in range(ARENA_SLOTS):
        label = first if k == 0 else f"{prefix}.{k}"
        if k:
            out.append(f"{label}:")
        lines, ok = attempt(k, f"{prefix}.slot.{k}")
        ahead = f"{prefix}.{k + 1}" if k + 1 < ARENA_SLOTS else miss
        out += [_slot(k, f"{prefix}.slot.{k}"), *lines,
                f"  br i1 {ok}, label %{hit}, label %{ahead}"]
        labels.append(label)
    return out, labels


def _take_arena(size: int, here: str, then: str) -> list:
    """An arena from ``@arena.slots`` (one an earlier call left there; ``%have``) or
    ``malloc``: a fresh allocation of megabytes per call costs its page faults every time.
    ``%arena`` is its first cache line, ``%arena.raw`` what ``malloc`` gave."""
    def take(k: int, slot: str) -> tuple:
        return [f"  %cached.{k} = atomicrmw xchg ptr %{slot}, ptr null acq_rel",
                f"  %have.{k} = icmp ne ptr %cached.{k}, null"], f"%have.{k}"

    out, labels = _slot_tries("take", here, take, "got", "alloc")
    phi = ", ".join(f"[ %cached.{k}, %{label} ]" for k, label in enumerate(labels))
    have = ", ".join(f"[ true, %{label} ]" for label in labels)
    return out + ["alloc:", f"  %fresh = call ptr @malloc(i64 {size + 64})",
                  "  %none = icmp eq ptr %fresh, null",
                  "  br i1 %none, label %fail, label %got",
                  *no_memory("fail"),
                  "got:", f"  %arena.raw = phi ptr {phi}, [ %fresh, %alloc ]",
                  f"  %have = phi i1 {have}, [ false, %alloc ]",
                  # on a cache line (malloc's is 16 bytes): a vector store of a
                  # temporary does not straddle two, nor do two threads' ranges meet in one
                  "  %arena.at = ptrtoint ptr %arena.raw to i64",
                  "  %arena.neg = sub i64 0, %arena.at",
                  "  %arena.skip = and i64 %arena.neg, 63",
                  "  %arena = getelementptr inbounds i8, ptr %arena.raw, i64 %arena.skip",
                  f"  br label %{then}", f"{then}:"]


def _give_arena() -> list:
    """Leaves the arena in a free slot of ``@arena.slots`` for a later call (freed when all
    are taken)."""
    def give(k: int, slot: str) -> tuple:
        return [f"  %kept.{k} = cmpxchg ptr %{slot}, ptr null, ptr %arena.raw acq_rel "
                "monotonic",
                f"  %given.{k} = extractvalue {{ ptr, i1 }} %kept.{k}, 1"], f"%given.{k}"

    out, _ = _slot_tries("give", "", give, "given", "unkept")
    return out + ["unkept:", "  call void @free(ptr %arena.raw)", "  br label %given",
                  "given:"]


def release_symbol(name: str) -> str:
    """The exported function of a loop kernel that frees its kept arena."""
    return f"{name}_release"


def _release(name: str) -> list:
    out = [f"define void @{release_symbol(name)}() nounwind {{", "entry:"]
    for k in range(ARENA_SLOTS):
        out += [_slot(k, f"slot.{k}"),
                f"  %old.{k} = atomicrmw xchg ptr %slot.{k}, ptr null acq_rel",
                f"  call void @free(ptr %old.{k})"]
    return out + ["  ret void", "}", ""]


def _base(plan: LoopPlan, buf: int, offsets: tuple) -> str:
    b = plan.buffers[buf]
    if b.kind == "input":
        return f"%in{b.index}"
    if b.kind == "output":
        return f"%out{b.index}"
    if b.kind in ("const", "indices"):
        return f"@c{buf}"
    return f"%t{buf}"


def _shape_of(text: list, k: int) -> str:
    """Block ``k``'s function text with its name and buffer parameters renamed in order of
    appearance: blocks alike in everything but which buffers they read and write (the Adam
    update of equal-sized weights, the same activation of two layers) share one function,
    which LLVM then optimises once."""
    names: dict = {}
    body = re.sub(rf"@b{k}\b", "@b", "\n".join(text))
    return re.sub(r"%B(\d+)", lambda m: f"%B{names.setdefault(m.group(1), len(names))}", body)


def _program(plan: LoopPlan, offsets: tuple, calls: list, blocks, split: list,
             pooled: bool, name: str = "program") -> list:
    """``@<name>(ptr %in..., ptr %out..., ptr %arena[, ptr %pool])``: one point, the
    ``blocks`` in order (``calls[k]``: the block whose function block ``k`` calls, see
    :func:`_shape_of`; ``split[k]``: its ranges across threads, see :func:`splits`;
    ``%pool``: the helpers ``body`` started, when any block of the plan is split)."""
    params = [f"ptr noalias %in{i}" for i in range(len(plan.inputs))]
    params += [f"ptr noalias %out{i}" for i in range(len(plan.outputs))]
    params.append("ptr noalias %arena")
    if plan.points:
        params.append("i64 %np")
    if any(plan.totals):
        params.append("i64 %nc")
    if pooled:
        params.append("ptr %pool")
    out = [f"define internal void @{name}({', '.join(params)}) noinline nounwind {{",
           "entry:"]
    for i, b in enumerate(plan.buffers):
        if b.kind == "temp" and offsets[i] is not None:  # (None: no block uses it)
            out.append(f"  %t{i} = getelementptr inbounds i8, ptr %arena, i64 {offsets[i]}")
    for k in blocks:
        block = plan.blocks[k]
        args = ", ".join(f"ptr {_base(plan, b, offsets)}" for b in block.buffers)
        par = len(split[k]) > 1
        if block.points:
            args += ", i64 %np"
        if block.count >= 0:
            args += ", i64 %nc"
        if block.runs >= 0 and not block.points:
            args += ", i64 %np"
        if par:
            args += ", ptr %pool"
        out.append(f"  call void @b{calls[k]}{'.par' if par else ''}({args})")
    return out + ["  ret void", "}", ""]


def _pool_open(plan: LoopPlan, pooled: bool) -> list:
    """``body``'s helper threads, started once a call for all its points or chunks (where
    the plan splits a block): a helper costs 30-40 us to start and join (started for each
    point, a 50-body Hessian over 200 points took 275 us a point instead of 85)."""
    if not pooled:
        return []
    return [f"  %pool = alloca {_pool_type(plan.threads - 1)}, align 64",
            f"  %hs = alloca {{ ptr, i64 }}, i64 {plan.threads - 1}",
            "  call void @pool.start(ptr %pool, ptr %hs)"]


def _pool_close(pooled: bool) -> list:
    return ["  call void @pool.stop(ptr %pool)"] if pooled else []


def _point_loop(plan: LoopPlan, arena: int, t: str, pooled: bool) -> list:
    """``body``: the arena (stack up to ``LANE_STACK_BYTES``, else one ``malloc``), then
    ``program`` for each point with every pointer advanced by ``j * stride``."""
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    elems = [t] * n_in + ["i8" if o.boolean else t for o in plan.outputs]
    heap = arena > LANE_STACK_BYTES
    lines = body_head(n_in + n_out, "start")
    if heap:
        lines += _take_arena(arena, "start", "loop.pre")
    else:
        lines += [f"  %arena = alloca i8, i64 {max(arena, 1)}, align 64"]
    lines += _pool_open(plan, pooled)
    pool = ", ptr %pool" if pooled else ""
    lines += _run_prologue(plan, n_in + n_out, pool, heap) + ["  br label %loop.go", "loop.go:",
                                                               "  br label %loop"]
    lines += ["loop:", "  %j = phi i64 [ 0, %loop.go ], [ %j.next, %loop ]"]
    for i, elem in enumerate(elems):
        lines += [f"  %o{i} = mul nsw i64 %j, %s{i}",
                  f"  %p{i} = getelementptr inbounds {elem}, ptr %b{i}, i64 %o{i}"]
    args = ", ".join([f"ptr %p{i}" for i in range(n_in + n_out)] + ["ptr %arena"])
    lines += [f"  call void @program({args}{pool})",
              "  %j.next = add nuw nsw i64 %j, 1",
              "  %end = icmp eq i64 %j.next, %n",
              "  br i1 %end, label %finish, label %loop",
              "finish:", *_pool_close(pooled)]
    if heap:
        lines += _give_arena()
    return lines + ["  br label %done", *body_tail()]


_MEMORY = (MEMCPY, MEMSET)


def _run_prologue(plan: LoopPlan, n_bufs: int, tail: str, heap: bool) -> list:
    """The call of ``@prologue`` (when the plan has one) on the caller's arrays and the
    arena, before the points or chunks: its blocks read only constants and arguments
    every point shares. Its temporaries come first in the arena and nothing else writes
    them, so when they depend on no argument at all a kept arena (``@arena.slots``: one an
    earlier call of this function left) holds them already and the call is skipped."""
    if not plan.prologue:
        return []
    args = ", ".join([f"ptr %b{i}" for i in range(n_bufs)] + ["ptr %arena"])
    call = [f"  call void @prologue({args}{tail})"]
    reads = {a.buffer for k in plan.prologue for a in plan.blocks[k].ins}
    if not heap or any(plan.buffers[b].kind == "input" for b in reads):
        return call
    return ["  br i1 %have, label %pro.done, label %pro.run", "pro.run:", *call,
            "  br label %pro.done", "pro.done:"]


def _chunk_loop(plan: LoopPlan, arena: int, t: str, size: int, pooled: bool) -> list:
    """``body`` of a plan over chunks of ``plan.points`` points: a whole chunk of dense
    arguments runs ``program`` on the arrays themselves; other chunks (the last, short one,
    or strided arguments) are copied into staging areas after the arena, padded up to
    :data:`POINT_ALIGN` points, and their results copied back."""
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    chunk = plan.points
    sizes = [math.prod(a.shape) for a in plan.inputs] + [math.prod(o.shape)
                                                          for o in plan.outputs]
    elems = [t] * n_in + ["i8" if o.boolean else t for o in plan.outputs]
    width = [size] * n_in + [1 if o.boolean else size for o in plan.outputs]
    shared = [i < len(plan.shared) and plan.shared[i] for i in range(n_in)] + [
        o < len(plan.totals) and bool(plan.totals[o]) for o in range(n_out)]
    counted = any(plan.totals)  # totals add up the real points: the program is told them
    stage, top = [], -(-arena // 64) * 64
    for size, w, one in zip(sizes, width, shared):
        stage.append(top)
        top += 0 if one else -(-chunk * size * w // 64) * 64
    heap = top > LANE_STACK_BYTES
    lines = body_head(n_in + n_out, "start")
    if heap:
        lines += _take_arena(top, "start", "pre")
    else:
        lines += [f"  %arena = alloca i8, i64 {max(top, 1)}, align 64"]
    for i in range(n_in + n_out):
        lines.append(f"  %st{i} = getelementptr inbounds i8, ptr %arena, i64 {stage[i]}"
                     if not shared[i] else f"  %st{i} = getelementptr inbounds i8, ptr %b{i}, "
                     "i64 0")  # a shared argument is read where it is
    if stage and top > stage[0]:  # padding points read zeros, not garbage
        lines.append(f"  %st.pad = getelementptr inbounds i8, ptr %arena, i64 {stage[0]}")
        lines.append(f"  call void @llvm.memset.p0.i64(ptr %st.pad, i8 0, "
                     f"i64 {top - stage[0]}, i1 false)")
    lines += _pool_open(plan, pooled)
    pool = ["ptr %pool"] if pooled else []
    lines += _run_prologue(plan, n_in + n_out, f", i64 {chunk}" + (", i64 0" if counted
                                                                     else "") +
                           "".join(", " + p for p in pool), heap)
    dense = "true"
    for i, size in enumerate(sizes):
        if shared[i]:
            continue
        lines += [f"  %dn{i} = icmp eq i64 %s{i}, {size}",
                  f"  %dense{i} = and i1 {dense}, %dn{i}"]
        dense = f"%dense{i}"
    lines += ["  br label %chunk.go", "chunk.go:", "  br label %chunk", "chunk:",
              "  %c = phi i64 [ 0, %chunk.go ], [ %c.next, %next ]",
              "  %rem = sub nsw i64 %n, %c",
              f"  %full = icmp sge i64 %rem, {chunk}",
              f"  %fast = and i1 %full, {dense}",
              "  br i1 %fast, label %direct, label %staged", "direct:"]
    args = []
    for i, (size, elem) in enumerate(zip(sizes, elems)):
        if shared[i]:
            args.append(f"ptr %b{i}")
            continue
        lines += [f"  %d{i}.o = mul nsw i64 %c, {size}",
                  f"  %d{i} = getelementptr inbounds {elem}, ptr %b{i}, i64 %d{i}.o"]
        args.append(f"ptr %d{i}")
    tail = ["ptr %arena", f"i64 {chunk}"] + ([f"i64 {chunk}"] if counted else []) + pool
    lines += [f"  call void @program({', '.join(args + tail)})",
              "  br label %next",
              "staged:", f"  %cnt = select i1 %full, i64 {chunk}, i64 %rem"]
    lines += _copies("in", [i for i in range(n_in) if not shared[i]], sizes, elems, width,
                     "staged", "run", True)
    lines += ["run:", f"  %np.r = add nuw nsw i64 %cnt, {POINT_ALIGN - 1}",
              f"  %np = and i64 %np.r, {-POINT_ALIGN}"]
    args = [f"ptr %st{i}" for i in range(n_in + n_out)] + ["ptr %arena", "i64 %np"] + (
        ["i64 %cnt"] if counted else []) + pool
    lines.append(f"  call void @program({', '.join(args)})")
    lines += _copies("out", [i for i in range(n_in, n_in + n_out) if not shared[i]], sizes,
                     elems, width, "run", "next", False)
    lines += ["next:", f"  %c.next = add nsw i64 %c, {chunk}",
              "  %more = icmp slt i64 %c.next, %n",
              "  br i1 %more, label %chunk, label %finish", "finish:", *_pool_close(pooled)]
    if heap:
        lines += _give_arena()
    return lines + ["  br label %done", *body_tail()]


def _copies(tag: str, bufs, sizes: list, elems: list, width: list, before: str, after: str,
            inward: bool) -> list:
    """A loop over the chunk's ``%cnt`` points copying each point of ``bufs`` between the
    caller's arrays (at ``%c + p`` times their stride) and the staging areas."""
    lines = [f"  br label %{tag}", f"{tag}:",
             f"  %{tag}.p = phi i64 [ 0, %{before} ], [ %{tag}.n, %{tag} ]",
             f"  %{tag}.q = add nsw i64 %c, %{tag}.p"]
    for i in bufs:
        v = f"%{tag}{i}"
        lines += [f"  {v}.o = mul nsw i64 %{tag}.q, %s{i}",
                  f"  {v}.u = getelementptr inbounds {elems[i]}, ptr %b{i}, i64 {v}.o",
                  f"  {v}.k = mul nsw i64 %{tag}.p, {sizes[i]}",
                  f"  {v}.s = getelementptr inbounds {elems[i]}, ptr %st{i}, i64 {v}.k"]
        dst, src = (f"{v}.s", f"{v}.u") if inward else (f"{v}.u", f"{v}.s")
        lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, "
                     f"i64 {sizes[i] * width[i]}, i1 false)")
    return lines + [f"  %{tag}.n = add nuw nsw i64 %{tag}.p, 1",
                    f"  %{tag}.e = icmp eq i64 %{tag}.n, %cnt",
                    f"  br i1 %{tag}.e, label %{after}, label %{tag}"]

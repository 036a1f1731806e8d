"""A loop plan's intermediates kept to the places that are read: the last passes of the
planner, after :func:`~symtape.compile.sparse_terms.skip_zero_terms`.

- **Gathers read their producer's places only.** A temporary one block writes (one element
  an iteration) and one copy reads at a few of its places (a sparse Jacobian's non-zeros
  taken from its compressed form) is not made: the producing block runs over the copy's
  iterations, reading its arguments at the places it read them for those elements, and
  writes the copy's destination itself.
- **Blocks nothing reads are dropped** (what only a dropped block read, too).
- **Buffers read at a few places are compacted to them**: a constant or temporary of which
  every access but plain fills (one value written everywhere) reaches at most one place in
  :data:`COMPACT_SHARE` keeps only those places, in order, its accesses reading and
  writing them through index arrays (affine where the compacted places step evenly), its
  fills writing the compacted places alone -- values nobody reads are not made.
- Buffers no block reaches any more are dropped and the rest renumbered.

Each pass leaves every value that is read as it was: the same operations on the same
operands, in the same order (a sum's terms too), at other places.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.codegen.loops import Access, Block
from symtape.codegen.plan import Plan

__all__ = ["compact", "access_places", "restricted", "is_fill", "COMPACT_SHARE",
           "COMPACT_MAX_INDEX"]

#: A buffer is compacted (and a copy's producer restricted) when at most one in this many of
#: its places is reached.
COMPACT_SHARE = 2
#: ... and no access of a rewritten block runs over more than this many places a point: its
#: index array is a constant of the compiled module (a million elements take about a second
#: to build and compile; a larger intermediate is cheaper kept dense).
COMPACT_MAX_INDEX = 1 << 20
#: Blocks of more iterations are left as they are (their places are not listed).
COMPACT_MAX_ITERATIONS = 1 << 22


def compact(planner) -> None:
    """Rewrites ``planner.blocks`` and ``planner.buffers`` in place (see the module
    docstring); the planner's other records of buffers are stale afterwards.

    >>> import numpy as np, symtape as st
    >>> import importlib; P = importlib.import_module("symtape.compile.planner")
    >>> x = st.symbol("x", shape=(40, 50))
    >>> y = st.gather(st.reshape(st.exp(x) * st.sin(x), (-1,)), [3, 500, 1999])
    >>> plan = P.plan_loops([y._node], [x._node])  # exp and sin at the places read only
    >>> [b.space for b in plan.blocks], [(b.kind, b.size) for b in plan.buffers]
    ([(3,)], [('input', 2000), ('output', 3), ('indices', 3)])
    """
    _restrict_copies(planner)
    _drop_unread(planner)
    _restrict_to_reads(planner)
    _compact_buffers(planner)
    _drop_unread(planner)
    _renumber(planner)


def access_places(buffers, acc: Access, space: tuple) -> np.ndarray:
    """The place ``acc``'s core offsets are added to, at every iteration of ``space``
    (``buffers``: the plan's, for the values of an index array).

    >>> access_places([], Access(0, 5, (10, 1)), (2, 3)).tolist()
    [[5, 6, 7], [15, 16, 17]]
    """
    idx = np.indices(space, dtype=np.int64, sparse=True)
    places = acc.offset + sum((i * s for i, s in zip(idx, acc.strides)), np.zeros(
        (1,) * len(space), dtype=np.int64))
    if acc.index:
        ibuf, ioff, istrides = acc.index
        table = np.asarray(buffers[ibuf].values, dtype=np.int64)
        places = places + table[ioff + sum((i * s for i, s in zip(idx, istrides)),
                                           np.zeros((1,) * len(space), dtype=np.int64))]
    return np.broadcast_to(places, space)


def restricted(planner, block: Block, dead: np.ndarray, share: int = COMPACT_SHARE
               ) -> Block | None:
    """``block`` run over the iterations where ``dead`` (a boolean array over its space) is
    False only, in their order: the axes along which ``dead`` varies become one axis over
    the live iterations, each access reading or writing through an index array where it
    no longer steps evenly. None when more than one in ``share`` of those iterations live,
    or ``dead`` varies along the chunk's points or a count's axis.

    >>> import importlib; P = importlib.import_module("symtape.compile.planner")
    >>> from symtape.codegen.loops import Buffer
    >>> p = P._Planner(0); p.buffers[:] = [Buffer("temp", -1, 12)]
    >>> b = Block((3, 4), None, (), (Access(0, 0, (4, 1)),))
    >>> dead = np.ones((3, 4), dtype=bool); dead[1, 2] = False
    >>> r = restricted(p, b, dead); r.space, r.outs[0].offset
    ((1,), 6)
    """
    dims = [d for d in range(len(block.space))
            if block.space[d] > 1 and not (dead == dead.take([0], axis=d)).all()]
    if not dims:
        return None
    lo, hi = dims[0], dims[-1] + 1
    if (block.points and lo == 0) or lo <= block.count < hi or lo <= block.runs < hi:
        return None  # (the points' dimension and totals' counts stay as they are)
    run = block.space[lo:hi]
    live = ~dead[(0,) * lo + (slice(None),) * (hi - lo) + (0,) * (len(block.space) - hi)]
    nz = np.flatnonzero(live.reshape(-1))
    space = block.space[:lo] + (len(nz),) + block.space[hi:]
    if len(nz) * share > math.prod(run) or _per_point(block, space) > COMPACT_MAX_INDEX:
        return None

    def moved(acc: Access) -> Access:
        over = access_places(planner.buffers, acc, block.space).reshape(
            block.space[:lo] + (-1,) + block.space[hi:])
        return planner.indexed(acc.buffer, over.take(nz, axis=lo))._replace(core=acc.core)

    shift = hi - lo - 1
    return block._replace(
        space=space, ins=tuple(moved(a) for a in block.ins),
        outs=tuple(moved(a) for a in block.outs),
        count=block.count - shift if block.count >= hi else block.count,
        runs=block.runs - shift if block.runs >= hi else block.runs)


# --------------------------------------------------------------------------------------------


def _per_point(block: Block, space: tuple) -> int:
    """The iterations of ``space`` for one point of ``block``'s chunk."""
    return math.prod(space[1:] if block.points else space)


def _uses(blocks) -> tuple:
    """``(writers, readers)``: buffer -> the blocks writing / reading it (in order)."""
    writers: dict = {}
    readers: dict = {}
    for k, block in enumerate(blocks):
        for acc in block.outs:
            writers.setdefault(acc.buffer, []).append(k)
        for acc in block.ins:
            readers.setdefault(acc.buffer, []).append(k)
    return writers, readers


def _plain(block: Block) -> bool:
    """A block of one-point arithmetic whose iterations are independent of their order (at
    most one point an iteration), of at most COMPACT_MAX_ITERATIONS."""
    return isinstance(block.body, Plan) and block.count < 0 and block.runs < 0 \
        and block.points <= 1 and math.prod(block.space) <= COMPACT_MAX_ITERATIONS


def _is_copy(block: Block) -> bool:
    """Element ``c`` of the core read, written to element ``c`` of the core written."""
    if not (_plain(block) and not block.accumulate and len(block.ins) == 1
            and len(block.outs) == 1 and len(block.ins[0].core) == len(block.outs[0].core)):
        return False
    body, n = block.body, len(block.ins[0].core)
    return (len(body.instrs) == n and len(body.outputs) == 1
            and body.outputs[0].refs == tuple(range(n))
            and all(ins.op == "input" and ins.attr == (0, c) for c, ins in enumerate(body.instrs)))


def _core_places(buffers, acc: Access, space: tuple) -> np.ndarray:
    """The places of ``acc``'s core elements over ``space`` plus one last axis (the core)."""
    return access_places(buffers, acc, space)[..., None] + np.asarray(acc.core, dtype=np.int64)


def _restrict_copies(planner) -> None:
    blocks, buffers = planner.blocks, planner.buffers
    writers, readers = _uses(blocks)
    gone: set = set()
    put: dict = {}  # copy -> the blocks replacing it
    for g, copy in enumerate(blocks):
        if not _is_copy(copy):
            continue
        src = copy.ins[0]
        t = src.buffer
        wrote_t = writers.get(t, [])
        if buffers[t].kind != "temp" or readers.get(t) != [g] or len(wrote_t) not in (1, 2):
            continue
        fill = wrote_t[0] if len(wrote_t) == 2 else None
        b = wrote_t[-1]
        made = blocks[b]
        if fill is not None and not (is_fill(blocks[fill]) and blocks[fill].points ==
                                     copy.points):
            continue
        if b >= g or b in gone or not _plain(made) or made.accumulate or len(made.outs) != 1 \
                or made.outs[0].core != (0,) or made.points != copy.points:
            continue
        read = {a.buffer for a in made.ins}
        if t in read or any(a.buffer in read for k in range(b + 1, g) for a in blocks[k].outs):
            continue  # (an argument changes before the copy: made where it is)
        wrote = access_places(buffers, made.outs[0], made.space).reshape(-1)
        step = np.full(buffers[t].size, -1, dtype=np.int64)
        step[wrote] = np.arange(wrote.size)
        if np.count_nonzero(step >= 0) != wrote.size:
            continue  # (a place written twice)
        at = step[_core_places(buffers, src, copy.space).reshape(-1)]
        missed = at < 0  # (read from the fill)
        if (missed.any() and fill is None) or np.count_nonzero(~missed) > wrote.size:
            continue  # (no fill to read, or more work than the block made)
        space = copy.space + (len(src.core),)
        if _per_point(copy, space) > COMPACT_MAX_INDEX:
            continue
        out = planner.indexed(copy.outs[0].buffer, _core_places(buffers, copy.outs[0],
                                                                copy.space))
        new = None
        if not missed.all():
            at = np.where(missed, 0, at)
            ins = tuple(planner.indexed(a.buffer, access_places(buffers, a, made.space)
                                        .reshape(-1)[at].reshape(space))._replace(core=a.core)
                        for a in made.ins)
            new = copy._replace(space=space, body=made.body, ins=ins, outs=(out,),
                                contract=made.contract)
            if missed.any():
                new = restricted(planner, new, missed.reshape(space), 1)
                if new is None:
                    continue
        now = [] if new is None else [new]
        if fill is not None:
            filled = blocks[fill]
            now.insert(0, filled._replace(space=space, outs=(out,), ins=tuple(
                a._replace(strides=(0,) * len(space)) for a in filled.ins)))
            gone.add(fill)
        put[g] = now
        gone.add(b)
    if gone:
        planner.blocks[:] = [new for k, blk in enumerate(blocks) if k not in gone
                             for new in put.get(k, [blk])]


def _restrict_to_reads(planner) -> None:
    """Each block writing one temporary that later blocks read at a few of the places it
    writes (and no block before it reads) runs over the iterations writing those places
    alone; last blocks first, so what they no longer read is not made either."""
    blocks, buffers = planner.blocks, planner.buffers
    _, readers = _uses(blocks)  # (a restricted block reads the same temporaries)
    for k in range(len(blocks) - 1, -1, -1):
        block = blocks[k]
        if not (_plain(block) and len(block.outs) == 1 and block.outs[0].core == (0,)):
            continue
        t = block.outs[0].buffer
        at = readers.get(t, [])
        if buffers[t].kind != "temp" or (at and at[0] < k):
            continue
        reads = [(j, a) for j in sorted(set(at)) if j > k for a in blocks[j].ins
                 if a.buffer == t]
        if any(not _plain(blocks[j]) for j, _ in reads):
            continue
        read = np.zeros(buffers[t].size, dtype=bool)
        for j, a in reads:
            core = _core_places(buffers, a, _moving(a, blocks[j].space))
            read[core.reshape(-1)] = True
        if read.all():
            continue
        dead = ~read[access_places(buffers, block.outs[0], block.space)]
        new = restricted(planner, block, dead) if dead.any() else None
        if new is not None:
            blocks[k] = new


def _drop_unread(planner) -> None:
    """Drops the blocks whose outputs are temporaries nothing after them reads."""
    buffers = planner.buffers
    needed = {b for b, buf in enumerate(buffers) if buf.kind == "output"}
    keep = []
    for k in range(len(planner.blocks) - 1, -1, -1):
        block = planner.blocks[k]
        if any(a.buffer in needed or buffers[a.buffer].kind != "temp" for a in block.outs):
            keep.append(k)
            needed |= {a.buffer for a in block.ins}
    if len(keep) < len(planner.blocks):
        planner.blocks[:] = [planner.blocks[k] for k in reversed(keep)]


def is_fill(block: Block) -> bool:
    """One value written at every iteration (arguments read at one place).

    >>> from symtape.compile.planner import Plan
    >>> fill = Block((8,), Plan((), (), ()), (), (Access(0, 0, (1,)),))
    >>> copy = fill._replace(ins=(Access(1, 0, (1,)),))
    >>> is_fill(fill), is_fill(copy)
    (True, False)
    """
    return (_plain(block) and not block.accumulate and len(block.outs) == 1
            and block.outs[0].core == (0,) and block.outs[0].index == ()
            and all(not a.index and not any(a.strides) for a in block.ins))


def _compact_buffers(planner) -> None:
    blocks, buffers = planner.blocks, planner.buffers
    touching: dict = {}
    for k, block in enumerate(blocks):
        for acc in block.ins + block.outs:
            touching.setdefault(acc.buffer, set()).add(k)
    dropped: set = set()  # fills writing no place that is read
    for c, ks in touching.items():
        buf = buffers[c]
        if buf.kind not in ("temp", "const") or buf.size < 2 * COMPACT_SHARE:
            continue
        ks = sorted(ks)
        if any(not _plain(blocks[k]) or any(a.core != (0,) for a in blocks[k].ins +
                                             blocks[k].outs if a.buffer == c) for k in ks):
            continue
        fills = [k for k in ks if is_fill(blocks[k]) and blocks[k].outs[0].buffer == c]
        reached = [(k, i) for k in ks if k not in fills
                   for i, a in enumerate(blocks[k].ins + blocks[k].outs) if a.buffer == c]
        if not reached or any(_spans(_access(blocks, k, i), blocks[k].space) * COMPACT_SHARE
                              > buf.size or _per_point(blocks[k], blocks[k].space) >
                              COMPACT_MAX_INDEX for k, i in reached):
            continue
        mask = np.zeros(buf.size, dtype=bool)
        for k, i in reached:
            mask[_distinct(buffers, _access(blocks, k, i), blocks[k].space).reshape(-1)] = True
        kept = np.flatnonzero(mask)
        if kept.size * COMPACT_SHARE > buf.size:
            continue
        refills, whole = [], True  # each fill over the kept places it writes (None: none)
        for k in fills:
            keep = np.isin(access_places(buffers, blocks[k].outs[0], blocks[k].space), kept)
            fill = blocks[k] if keep.all() else None if not keep.any() else \
                restricted(planner, blocks[k], ~keep, 1)
            if fill is None and keep.any():
                whole = False  # (a fill that cannot be kept to the places read)
                break
            refills.append((k, fill))
        if not whole:
            continue
        values = buf.values and tuple(np.asarray(buf.values)[kept].tolist())
        new = planner.add_buffer(buf._replace(size=int(kept.size), values=values))
        for k, i in reached:
            block = blocks[k]
            n = len(block.ins)
            old = _access(blocks, k, i)
            places = access_places(buffers, old, block.space)
            acc = planner.indexed(new, np.searchsorted(kept, places))._replace(core=old.core)
            ins = block.ins[:i] + (acc,) + block.ins[i + 1:] if i < n else block.ins
            outs = block.outs if i < n else \
                block.outs[:i - n] + (acc,) + block.outs[i - n + 1:]
            blocks[k] = block._replace(ins=ins, outs=outs)
        for k, fill in refills:
            if fill is None:
                dropped.add(k)
                continue
            places = access_places(buffers, fill.outs[0], fill.space)
            blocks[k] = fill._replace(outs=(planner.indexed(new, np.searchsorted(kept, places)),))
    if dropped:
        blocks[:] = [b for k, b in enumerate(blocks) if k not in dropped]


def _access(blocks, k: int, i: int) -> Access:
    """Access ``i`` of block ``k``, its reads first."""
    block = blocks[k]
    return block.ins[i] if i < len(block.ins) else block.outs[i - len(block.ins)]


def _moving(acc: Access, space: tuple) -> tuple:
    """``space`` with 1 along the axes ``acc`` does not move along."""
    istrides = acc.index[2] if acc.index else (0,) * len(space)
    return tuple(n if s or t else 1 for n, s, t in zip(space, acc.strides, istrides))


def _distinct(buffers, acc: Access, space: tuple) -> np.ndarray:
    """Every place ``acc`` reaches over ``space`` (each at least once)."""
    return access_places(buffers, acc, _moving(acc, space))


def _spans(acc: Access, space: tuple) -> int:
    """How many places ``acc`` surely reaches over ``space`` without an index array: the
    iterations along the axes it moves along when no two of them meet (0 for an indexed
    access)."""
    if acc.index:
        return 0
    axes = sorted((abs(s), n) for s, n in zip(acc.strides, space) if s and n > 1)
    reach = 0
    for stride, n in axes:
        if stride <= reach:
            return 0  # (two iterations may meet: not counted)
        reach += (n - 1) * stride
    return math.prod(n for _, n in axes)


def _renumber(planner) -> None:
    """Drops the temporaries, constants and index arrays no block reaches; the others keep
    their order."""
    used = {b for b, buf in enumerate(planner.buffers) if buf.kind in ("input", "output")}
    for block in planner.blocks:
        for acc in block.ins + block.outs:
            used.add(acc.buffer)
            if acc.index:
                used.add(acc.index[0])
    if len(used) == len(planner.buffers):
        return
    order = sorted(used)
    number = {b: i for i, b in enumerate(order)}

    def moved(acc: Access) -> Access:
        index = (number[acc.index[0]],) + tuple(acc.index[1:]) if acc.index else ()
        return acc._replace(buffer=number[acc.buffer], index=index)

    planner.buffers[:] = [planner.buffers[b] for b in order]
    planner.blocks[:] = [b._replace(ins=tuple(map(moved, b.ins)), outs=tuple(map(moved, b.outs)))
                         for b in planner.blocks]

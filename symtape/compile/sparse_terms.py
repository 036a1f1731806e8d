"""Sums over known zeros: the terms of an accumulating block that a folded constant factor
makes 0 are not visited.

A coloured sweep multiplies its one-hot seeds' cotangents -- computed from constants alone,
mostly zeros, folded at plan time (:func:`~symtape.compile.fusion.constant_folds`) -- into
every term of the sums that scatter them back (``out[c, s[r]] += rbar[c, r] * k[r] *
x[a[r]]`` over colours ``c`` and reactions ``r``). Where such a factor is 0 the term is the
element DAG's structural zero (a constant 0 times anything is 0, also at inf and nan: docs,
"One rule for values"), so the block iterates over the factor's non-zeros only: the
dimensions along which they vary become one dimension over them, in the same order (each
sum's remaining terms are added in the order they were), each access reading or writing
through an index array where it no longer steps evenly. The work is the Jacobian's
non-zeros, not colours times terms, and a compressed Jacobian's entry is not reached by
another row's terms (``0 * inf`` of a seed's zero was nan there). Eager values of large
tensors compute such products at the template level; constants a program holds as they
are (not computed by ops) are read as they are.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.codegen.loops import Access, Block
from symtape.codegen.plan import Plan
from symtape.compile.compaction import access_places

__all__ = ["skip_zero_terms", "SKIP_MAX_ITERATIONS", "SKIP_SHARE"]

#: Blocks of at most this many iterations are looked at (their accesses' places are listed).
SKIP_MAX_ITERATIONS = 2 ** 22
#: ... and rewritten when at most one in this many of the iterations along the factor's
#: dimensions has a non-zero factor.
SKIP_SHARE = 2


def skip_zero_terms(planner) -> None:
    """Rewrites ``planner.blocks`` in place: each accumulating block whose term has a factor
    read from a buffer of ``planner.known`` values (buffer -> ``fusion.SparseFlat``: the folded
    constants) iterates over that factor's non-zeros only (see the module docstring)."""
    if not planner.known:
        return
    for k, block in enumerate(planner.blocks):
        if block.accumulate and isinstance(block.body, Plan) and len(block.outs) == 1 \
                and math.prod(block.space) <= SKIP_MAX_ITERATIONS \
                and any(a.buffer in planner.known for a in block.ins):
            new = _skipping(planner, block)
            if new is not None:
                planner.blocks[k] = new


def _skipping(planner, block: Block) -> Block | None:
    places: dict = {}  # access -> its places over the block's space (each listed once)

    def placed(acc: Access) -> np.ndarray:
        if acc not in places:
            places[acc] = access_places(planner.buffers, acc, block.space)
        return places[acc]

    zero = None
    for i in _zero_factors(block):
        acc = block.ins[i]
        values = planner.known.get(acc.buffer)
        if values is not None:
            z = values[placed(acc)] == 0
            zero = z if zero is None else zero | z
    if zero is None:
        return None
    dims = [d for d in range(len(block.space))
            if block.space[d] > 1 and not (zero == zero.take([0], axis=d)).all()]
    if not dims:
        return None
    lo, hi = dims[0], dims[-1] + 1
    if (block.points and lo == 0) or lo <= block.count < hi or lo <= block.runs < hi:
        return None  # (the points' dimension and totals' counts stay as they are)
    run = block.space[lo:hi]
    live = ~zero[(0,) * lo + (slice(None),) * (hi - lo) + (0,) * (len(block.space) - hi)]
    nz = np.flatnonzero(live.reshape(-1))
    if len(nz) * SKIP_SHARE > math.prod(run):
        return None
    space = block.space[:lo] + (len(nz),) + block.space[hi:]

    def moved(acc: Access) -> Access:
        over = placed(acc).reshape(block.space[:lo] + (-1,) + block.space[hi:])
        return planner.indexed(acc.buffer, over.take(nz, axis=lo))._replace(core=acc.core)

    shift = hi - lo - 1
    return block._replace(
        space=space, ins=tuple(moved(a) for a in block.ins),
        outs=tuple(moved(a) for a in block.outs),
        count=block.count - shift if block.count >= hi else block.count,
        runs=block.runs - shift if block.runs >= hi else block.runs)


def _zero_factors(block: Block) -> list:
    """The arguments (indices into ``block.ins``, one-element cores) whose 0 makes the
    block's term 0: its body is ``out + t`` (``out`` the accumulated output read back) with
    ``t`` a product having that argument as a factor."""
    body = block.body
    if len(body.outputs) != 1 or len(body.outputs[0].refs) != 1:
        return []
    (out,) = block.outs
    found = []
    for i, acc in enumerate(block.ins):
        if acc.core != (0,) or acc == out:
            continue
        zero: set = set()
        for r, ins in enumerate(body.instrs):
            if ins.op == "input" and ins.attr == (i, 0):
                zero.add(r)
            elif ins.op == "mul" and any(a in zero for a in ins.args):
                zero.add(r)
        last = body.instrs[body.outputs[0].refs[0]]
        rest = [a for a in last.args if a not in zero] if last.op == "add" else None
        if rest is not None and len(rest) == 1 and len(rest) < len(last.args):
            src = body.instrs[rest[0]]
            if src.op == "input" and block.ins[src.attr[0]] == out and src.attr[1] == 0:
                found.append(i)
    return found

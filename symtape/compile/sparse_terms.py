"""Known zeros carried through a plan's blocks: terms and elements they make 0 are not
computed.

A coloured sweep multiplies its one-hot seeds' cotangents -- computed from constants alone,
mostly zeros, folded at plan time (:func:`~symtape.compile.fusion.constant_folds`) -- into
every term of the sums that scatter them back (``out[c, s[r]] += rbar[c, r] * k[r] *
x[a[r]]`` over colours ``c`` and reactions ``r``), and a coloured Hessian's forward sweep
into the tangents it builds (``t[c, r] = (sa[c, r] * x[b[r]] + sb[c, r] * x[a[r]]) *
g[r]``). Where such a factor is 0 the product is the element DAG's structural zero (a
constant 0 times anything is 0, also at inf and nan: docs, "One rule for values"). The
blocks are walked in order, each buffer carrying where it is known to be a structural zero:
the folded constants' zeros, what a block computes from them (a product with a zero
factor, a sum of zeros, a select whose chosen branch is zero -- ``select(count != 0, v,
0)`` at a count that is exactly 0 --, a copy of a zero), a zero fill (a sum's -0.0 start
too), and the places of an accumulated sum no live term reaches (the DAG's sum of no terms
is its 0). An accumulating block iterates over its non-zero
terms only; any other block computes its non-zero elements only, after a fill of zeros
(which :mod:`~symtape.compile.compaction` keeps to the places read). The axes along which
the zeros vary become one axis over the rest, in the same order (each sum's remaining
terms are added in the order they were), each access reading or writing through an index
array where it no longer steps evenly. The work is the derivative's non-zeros, not colours
times terms, and a compressed Jacobian's entry is not reached by another row's terms
(``0 * inf`` of a seed's zero was nan there). Eager values of large tensors compute such
products at the template level; constants a program holds as they are (not computed by
ops) are read as they are (their zeros decide selects of counts only).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from symtape.base.lazy import LazyModule
from symtape.codegen.loops import Block
from symtape.codegen.plan import Plan, build_plan
from symtape.compile.compaction import access_places, is_fill, restricted

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["skip_zero_terms", "SKIP_MAX_ITERATIONS", "SKIP_SHARE"]

#: Blocks of at most this many iterations are looked at (their accesses' places are listed).
SKIP_MAX_ITERATIONS = 2 ** 22
#: ... and rewritten when at most one in this many of the iterations along the zeros'
#: dimensions is not zero.
SKIP_SHARE = 2


def skip_zero_terms(planner) -> None:
    """Rewrites ``planner.blocks`` in place (see the module docstring), starting from the
    zeros of ``planner.known`` (buffer -> ``fusion.SparseFlat``: the folded constants)."""
    if not planner.known:
        return
    zeros = {}
    for b, values in planner.known.items():  # (a -0.0 is a zero factor too)
        zeros[b] = np.ones(values.size, dtype=bool)
        zeros[b][values.nz] = values.values == 0
    exact: dict = {}  # const buffer -> where its value is exactly 0
    out: list = []
    for block in planner.blocks:
        new, fill = _through(planner, block, zeros, exact)
        if fill is not None:
            out.append(fill)
        out.append(new)
    planner.blocks[:] = out


def _through(planner, block: Block, zeros: dict, exact: dict) -> tuple:
    """``(block, fill)``: ``block`` over its non-zero terms or elements (``fill``: the
    zeros it no longer writes, or None), with ``zeros`` updated for what it writes."""
    buffers = planner.buffers
    if any(acc.buffer in planner.known for acc in block.outs):
        return block, None  # (a folded constant's own blocks: its zeros are known)
    if not (isinstance(block.body, Plan) and len(block.outs) == 1 and block.count < 0
            and block.runs < 0 and block.points <= 1 and block.outs[0].core == (0,)
            and math.prod(block.space) <= SKIP_MAX_ITERATIONS):
        for acc in block.outs:
            zeros.pop(acc.buffer, None)
        return block, None
    (out,) = block.outs
    structural, known = {}, {}
    for i, acc in enumerate(block.ins):
        if acc.core != (0,) or (block.accumulate and acc == out):
            continue
        z = zeros.get(acc.buffer)
        if z is None and buffers[acc.buffer].kind == "const":
            z = exact.get(acc.buffer)
            if z is None:
                z = exact[acc.buffer] = np.asarray(buffers[acc.buffer].values) == 0
            if z.any():
                known[i] = z[access_places(buffers, acc, block.space)]
        elif z is not None:
            structural[i] = z[access_places(buffers, acc, block.space)]
    zero = _zero_where(block, structural, known)
    if zero is None and is_fill(block) and len(block.ins) == 1 and 0 in known and \
            known[0].all() and len(block.body.instrs) == 1:
        zero = np.True_  # (a sum's -0.0 start: where no live term lands, the DAG's 0)
    written = None
    if zero is not None and zero.ndim:
        written = access_places(buffers, out, block.space)
    if block.accumulate:
        new = restricted(planner, block, zero, SKIP_SHARE) if written is not None else None
        if out.buffer in zeros:
            reached = written[~zero] if written is not None else \
                access_places(buffers, out, block.space)
            if zero is None or zero.ndim or not zero:
                zeros[out.buffer][reached.reshape(-1)] = False
        return (block if new is None else new), None
    mask = zeros.get(out.buffer)
    if mask is None:
        mask = zeros[out.buffer] = np.zeros(buffers[out.buffer].size, dtype=bool)
    if written is None:  # (one answer for every element)
        mask[access_places(buffers, out, block.space).reshape(-1)] = bool(zero)
        return block, None
    mask[written.reshape(-1)] = zero.reshape(-1)
    if zero.all():
        return block, None
    new = restricted(planner, block, zero, SKIP_SHARE)
    if new is None:
        return block, None
    fill = block._replace(body=_zero_fill(), ins=(), contract=False)
    return new, fill


@functools.cache
def _zero_fill() -> Plan:
    """The body writing the element DAG's 0."""
    return build_plan([np.asarray(G.ZERO, dtype=object)], [])


def _zero_where(block: Block, structural: dict, known: dict):
    """Where the block's element (for an accumulating block: its term, the body being
    ``out + t``) is a structural zero, given the arguments ``structural`` (index ->
    boolean array over the space) is one and where ``known`` ones are exactly 0: a boolean
    array, one boolean for every iteration, or None (nothing known)."""
    body = block.body
    if len(body.outputs) != 1 or len(body.outputs[0].refs) != 1:
        return None
    z: list = []  # per instruction: a structural zero (bool or array)
    e: list = []  # ... a value exactly 0
    f: list = []  # ... a comparison known false
    for ins in body.instrs:
        op, args = ins.op, ins.args
        zr = er = fr = False
        if op == "input":
            i, c = ins.attr
            if c == 0:
                zr = structural.get(i, False)
                er = known.get(i, False) | zr
        elif op == "const":  # (the DAG's zero constants absorb products, 0.0 too)
            zr = er = ins.attr[0] == 0
        elif op == "mul":
            zr = _any([z[a] for a in args])
        elif op == "div":
            zr = z[args[0]]
        elif op == "add":
            zr = _all([z[a] for a in args])
        elif op == "select":
            c, a, b = args
            zr = (f[c] & z[b]) | (z[a] & z[b])
        elif op == "ne":
            fr = _all([e[a] for a in args])
        z.append(zr)
        e.append(er | zr)
        f.append(fr)
    ref = body.outputs[0].refs[0]
    if block.accumulate:
        last = body.instrs[ref]
        (out,) = block.outs
        reads = {r for r, ins in enumerate(body.instrs) if ins.op == "input" and
                 block.ins[ins.attr[0]] == out and ins.attr[1] == 0}
        rest = [a for a in last.args if a not in reads] if last.op == "add" else None
        if rest is None or len(rest) != 1 or len(rest) == len(last.args):
            return None
        ref = rest[0]
    answer = z[ref]
    if isinstance(answer, (bool, np.bool_)):
        return None if not answer else np.True_
    return np.broadcast_to(answer, block.space)


def _any(parts: list):
    out = False
    for p in parts:
        out = out | p
    return out


def _all(parts: list):
    out = True
    for p in parts:
        out = out & p
    return out

"""Sparsity of Jacobians read off the tensor-level DAG, and the colouring that compresses them.

Each op says which source elements each of its output elements may depend on, given its
arguments' (``Primitive.dependencies``: one bit per source element in a Python int); a
pass over the nodes between a source and a target gives the pattern of ``d target / d
source``: exact for elementwise, structural and indexing ops, a superset where an op mixes
(a matrix product's element takes a row and a column). Rows of the Jacobian that share no
column are given one colour (greedy distance-2 colouring, as CPR); one sweep per colour,
its seed the sum of that colour's unit seeds, yields every element: ``J[i, j]`` is entry
``j`` of the product of colour ``colour[i]``. A tridiagonal Hessian takes 3 sweeps, not n.
"""

from __future__ import annotations

import numpy as np

from . import nodes as N
from .ops.core import union

__all__ = ["dependency_rows", "colour_rows"]

#: Colouring visits, for each row, the rows that share its columns; beyond this many visits
#: (dense patterns, where colouring gains nothing) each row keeps its own colour.
COLOUR_WORK = 2_000_000


def _source_bits(source: N.Node) -> np.ndarray:
    out = np.empty(source.size, dtype=object)
    for k in range(source.size):
        out[k] = 1 << k
    return out.reshape(source.shape)


def dependencies(target: N.Node, source: N.Node) -> np.ndarray:
    """For each element of ``target``, an int whose bit ``k`` says it may depend on
    element ``k`` (C order) of ``source``.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(4,))
    >>> y = x[1:] * x[:-1]
    >>> [bin(d) for d in dependencies(y._node, x._node)]
    ['0b11', '0b110', '0b1100']
    """
    deps: dict = {id(source): _source_bits(source)}
    for node in N.ancestry(target):
        if id(node) in deps or node.kind in ("leaf", "const"):
            continue
        ins = [deps.get(id(x)) for x in node.inputs]
        if all(d is None for d in ins):
            continue
        ins = [np.zeros(x.shape, dtype=object) if d is None else d
               for d, x in zip(ins, node.inputs)]
        if node.kind == "op":
            out = node.prim.dependencies(ins, node.params, node.shape)
        else:  # a view (a function with a user rule): every element on all its inputs
            out = np.full(node.shape, union(ins), dtype=object)
        deps[id(node)] = np.asarray(out, dtype=object).reshape(node.shape)
    found = deps.get(id(target))
    return np.zeros(target.shape, dtype=object) if found is None else found


def dependency_rows(target: N.Node, source: N.Node) -> list[np.ndarray]:
    """For each element of ``target`` (C order), the flat indices of the ``source``
    elements it may depend on (sorted).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(3,))
    >>> [r.tolist() for r in dependency_rows((x * x[::-1])._node, x._node)]
    [[0, 2], [1], [0, 2]]
    """
    width = (source.size + 7) // 8
    out = []
    for bits in dependencies(target, source).reshape(-1):
        raw = np.frombuffer(int(bits).to_bytes(width, "little"), dtype=np.uint8)
        out.append(np.flatnonzero(np.unpackbits(raw, bitorder="little")[:source.size]))
    return out


def colour_rows(rows: list[np.ndarray], n_cols: int) -> np.ndarray:
    """A colour per row such that rows sharing a column differ (greedy, smallest colour
    first, rows in order); each row its own colour when the pattern is too dense to gain.

    >>> tri = [np.array([max(i - 1, 0), i, min(i + 1, 5)]) for i in range(6)]
    >>> colour_rows(tri, 6).tolist()
    [0, 1, 2, 0, 1, 2]
    """
    by_col: list = [[] for _ in range(n_cols)]
    for i, cols in enumerate(rows):
        for j in cols.tolist():
            by_col[j].append(i)
    if sum(len(r) ** 2 for r in by_col) > COLOUR_WORK:
        return np.arange(len(rows), dtype=np.int64)
    colour = np.full(len(rows), -1, dtype=np.int64)
    for i, cols in enumerate(rows):
        taken = {int(colour[r]) for j in cols.tolist() for r in by_col[j]}
        c = 0
        while c in taken:
            c += 1
        colour[i] = c
    return colour
